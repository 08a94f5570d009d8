/* sandboxd-init: PID 1 of every guest (private to guest/).
 *
 * init.c brings the guest up (mounts, virtio modules, the exec port) and
 * hands the port to serve.c, which runs the exec protocol of wire.h for the
 * guest's whole life; spawn.c starts its commands, proc.c keeps background
 * processes, files.c and tree.c transfer files. Static, libc only;
 * single-threaded.
 *
 * Initramfs layout it expects (images/build-tiny.sh builds it):
 *   /init                         this program
 *   /bin/busybox, /bin/sh, ...    busybox and its applet links
 *   /lib/modules/<uname -r>/NAME.ko the virtio modules, flat, uncompressed
 *   /etc/passwd, /etc/group       root and sandbox (uid 1000)
 *   /home/sandbox, /root, /tmp
 */
#ifndef SBX_GUEST_INIT_H
#define SBX_GUEST_INIT_H

#include <poll.h>
#include <stdint.h>

/* Where the per-exec cgroups live; "" when cgroup2 is not usable. */
extern char guest_cgroup_root[64];

/* One line to the console ("sandboxd-init: ..."), printf-style. Use
 * sparingly: the console is a slow emulated UART under TCG. */
void guest_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* CLOCK_MONOTONIC and CLOCK_BOOTTIME in ms. */
int64_t guest_mono_ms(void);
int64_t guest_boot_ms(void);

/* Look `name` up in the guest's /etc/passwd: uid, gid, home (spawn.c).
 * 0, or -1 when there is no such user. */
#include <sys/types.h>
int guest_passwd_lookup(const char *name, uid_t *uid, gid_t *gid, char *home, size_t home_len);

/* Queue an ERROR frame {ERROR_KIND, PARAM?, MESSAGE} for exec or
 * transfer `id` (serve.c). */
void guest_send_error(uint32_t id, uint32_t kind, const char *param, const char *msg);

/* Serve the exec protocol on the virtio-serial port `port_fd` (opened
 * O_RDWR|O_NONBLOCK|O_CLOEXEC). Never returns unless the event loop
 * itself cannot run (signalfd or poll failing for good): returns -1. */
int guest_serve(int port_fd);

/* A command started by guest_spawn() (spawn.c) for an EXEC or a
 * background process (proc.c). */
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
struct guest_child {
	pid_t pid;	    /* its session and process group leader */
	int out_fd, err_fd; /* read ends, non-blocking */
	int in_fd;	    /* write end of its stdin pipe (non-blocking), or -1 */
	int pty_fd;	    /* v5 terminal: the pty's master (non-blocking; out_fd
			     * is a dup of it, err_fd -1), or -1 */
	char cgroup[96];    /* "" without cgroup2 */
	int64_t start_ms;   /* guest_mono_ms() at fork */
	uint32_t timeout_ms, out_cap, err_cap;
	bool stream;
};
int guest_spawn(uint32_t id, const uint8_t *p, size_t len, bool stdin_pipe, struct guest_child *c);
/* SIGKILL a command's cgroup (a guest_child's cgroup, "" for none) and,
 * when pid > 1, its session's process group and pid (spawn.c). */
void guest_cgroup_kill(const char *cgroup, pid_t pid);
/* Remove a command's cgroup ("" for none) once it ended; one still in use
 * by a background process is retried by guest_cgroup_linger_retry(),
 * which serve.c calls after each reap. */
void guest_cgroup_release(const char *cgroup);
void guest_cgroup_linger_retry(void);
/* Queue one frame to the host (dropped while none is connected). */
void guest_frame_send(uint8_t type, uint32_t id, const void *payload, size_t len);

/* Background processes (proc.c), driven by serve.c's loop. */
/* A PROC frame from the host. */
void guest_proc_request(uint32_t id, const uint8_t *p, size_t len);
/* Fill up to `max` pollfds for the processes' pipes; tags[i] identifies
 * each for guest_proc_ready(). Returns the count. */
unsigned guest_proc_pollfds(struct pollfd *pfd, unsigned *tags, unsigned max);
void guest_proc_ready(unsigned tag);
/* A reaped child: true when it was a background process. */
bool guest_proc_reaped(pid_t pid, int status);
/* Deadlines (a process's own timeout_ms): kill the overdue, return the
 * next deadline (guest_mono_ms) or -1. */
int64_t guest_proc_tick(int64_t now_ms);

/* Terminals (pty.c, protocol v5): the input side of a terminal exec. */
/* Take the master of terminal `id`: its slot (< 64), or -1 when full. */
int guest_pty_add(uint32_t id, int master_fd);
/* The terminal's exec ended: close its master, drop its input. */
void guest_pty_remove(int slot);
/* A PTY_INPUT or PTY_RESIZE frame from the host. */
void guest_pty_frame(uint8_t type, uint32_t id, const uint8_t *p, size_t len);
/* Masters with input waiting, to poll for POLLOUT (slot[i] for each). */
unsigned guest_pty_pollfds(struct pollfd *pfd, unsigned *slot, unsigned max);
void guest_pty_ready(unsigned slot);
/* Send a PTY_ACK for every terminal that consumed input since its last. */
void guest_pty_acks(void);
/* The host went away: its terminals' input is dropped, no more acks. */
void guest_pty_disconnected(void);

/* TCP streams (tcp.c, protocol v6): connections to the guest's loopback.
 * `queue_size` is the outbound queue's bytes; sockets are not read while
 * it is above `queue_soft`. */
void guest_tcp_init(size_t (*queue_size)(void), size_t queue_soft);
/* A TCP_OPEN, TCP_DATA, TCP_ACK or TCP_CLOSE from the host. */
void guest_tcp_frame(uint8_t type, uint32_t id, const uint8_t *p, size_t len);
/* The sockets to poll (slot[i] for each); returns how many. */
unsigned guest_tcp_pollfds(struct pollfd *pfd, unsigned *slot, unsigned max);
void guest_tcp_ready(unsigned slot, short revents);
/* Send a TCP_ACK for every stream that consumed host bytes since its last. */
void guest_tcp_acks(void);
/* The host went away: every stream is closed. */
void guest_tcp_disconnected(void);
/* v7: a stream of the guest's own to host:port for the proxy's client fd
 * (taken: closed by the stream), `pre` sent to the server first, a
 * CONNECT's "200" written at TCP_OPENED when tunnel. 0, or -1 (too many:
 * the caller keeps fd). */
int guest_tcp_egress(int fd, const char *host, uint16_t port, bool tunnel, const uint8_t *pre,
		     size_t pre_len);
/* An HTTP answer (code, reason, a line of text) to a proxy client; closes fd. */
void guest_proxy_answer(int fd, int code, const char *reason, const char *msg);

/* The egress proxy (proxy.c, v7): HTTP CONNECT and http:// requests on
 * 127.0.0.1:GUEST_PROXY_PORT, each handed to guest_tcp_egress. init binds
 * it (PID 1 only); pollfds gives the listener and the clients whose
 * request head is still coming (slot[i]), lowering *next to their
 * deadline; tick answers the overdue (408). host_version: the version the
 * connected host negotiated (0: none connected). */
#define GUEST_PROXY_PORT 3128
void guest_proxy_init(void);
unsigned guest_proxy_pollfds(struct pollfd *pfd, unsigned *slot, unsigned max, int64_t *next);
void guest_proxy_ready(unsigned slot, uint32_t host_version);
void guest_proxy_tick(int64_t now_ms);

/* The hostile-guest test kit (hostile.c; tests only, off unless the kernel
 * command line says sandboxd.test_hostile=1). */
#include <stdbool.h>
#include <stddef.h>
typedef void (*guest_send_fn)(uint8_t type, uint32_t id, const void *payload, size_t len);
/* Read the switch; `send` queues a frame, `hello` a HELLO, `queue_size`
 * says how many bytes wait to be written. */
void guest_hostile_init(guest_send_fn send, void (*hello)(void), size_t (*queue_size)(void));
/* An EXEC that orders a behaviour: true when handled (the caller does not
 * run it). */
bool guest_hostile_exec(uint32_t id, const uint8_t *p, size_t len);
/* The version a HELLO is to say: `ours`, or what reopen_v3 ordered, or 0
 * for no HELLO at all (reopen_silent). */
uint32_t guest_hostile_hello_version(uint32_t ours);
/* True once the guest stopped reading its port. */
bool guest_hostile_deaf(void);
/* Once per loop turn: floods, when ordered. */
void guest_hostile_tick(void);
/* True once ordered to stop sending the data of downloads (file_stall). */
bool guest_hostile_file_stall(void);
/* file_trickle: whether downloads trickle, whether one more byte may go
 * now (true without file_trickle; a yes schedules the next), and when the
 * loop must wake for it (guest_mono_ms, -1 = no need). */
bool guest_hostile_trickling(void);
bool guest_hostile_trickle_due(void);
int64_t guest_hostile_wake_ms(void);

/* File transfer (files.c, protocol v3), driven by serve.c's loop. */
struct pollfd;
/* `send` queues a frame; `queue_size` is the outbound queue's bytes, and
 * downloads read nothing while it is above `queue_soft`. */
void guest_files_init(guest_send_fn send, size_t (*queue_size)(void), size_t queue_soft);
/* A FILE_OPEN, FILE_DATA, FILE_END, FILE_ACK or FILE_ABORT from the host. */
void guest_files_frame(uint8_t type, uint32_t id, const uint8_t *p, size_t len);
/* Send a FILE_ACK for every upload that consumed bytes since its last. */
void guest_files_acks(void);
/* Once per loop turn: send downloads' data within credit, answer
 * transfers whose helper ended. True when more could be sent at once. */
bool guest_files_pump(void);
/* The helper pipes to poll: fills pfd and slot (<= max); returns how many. */
unsigned guest_files_pollfds(struct pollfd *pfd, unsigned *slot, unsigned max);
/* A polled pipe of transfer `slot` is ready. */
void guest_files_ready(unsigned slot);
/* A child exited: true when it was a transfer's helper. */
bool guest_files_reaped(pid_t pid, int status);
/* The host went away: drop every transfer (partial uploads removed). */
void guest_files_disconnected(void);

#ifdef SBX_GUEST_FUZZ
/* Test-only (tests/fuzz/fuzz_guest.c): run the guest's frame reassembly
 * and request decoding over arbitrary host bytes; starts no process and
 * writes nothing. */
#include <stddef.h>
int guest_fuzz_input(const uint8_t *data, size_t len);
#endif

#endif
