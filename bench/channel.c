/* bench/channel: boot tiny guests through vmm/ and measure
 *   - create-to-ready: vmm_vm_start() until the guest's HELLO arrives
 *     (SBX_BENCH_BOOTS boots, default 5, one at a time);
 *   - the raw echo floor per transport: PING/PONG round trips (n=1000);
 *   - `EXEC true` round trips per transport (n=20).
 * Speaks the wire format directly (agentless/wire.h), not agentless/.
 *
 * Environment: SBX_IMAGE_DIR (vmlinux, initramfs.cpio.gz; default
 * build/images/tiny; must be readable by libvirt-qemu), SBX_RUN_DIR
 * (default /var/lib/sandboxd-bench/run), SBX_URI (default qemu:///system),
 * SBX_BENCH_PINGS, SBX_BENCH_EXECS, SBX_BENCH_BOOTS.
 * Prints figures; never fails on timing. Exit 1 only when it cannot run. */
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "../tests/integration/harness.h"
#include "agentless/wire.h"
#include "util/util.h"
#include "vmm/vmm.h"

struct rx {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	uint8_t buf[2 * (WIRE_HEADER_LEN + WIRE_MAX_GUEST_PAYLOAD)];
	size_t len;
	unsigned hellos;
	uint32_t last_pong;
	uint32_t last_exit;
	int32_t exit_code;
	bool eof, bad;
};

static int64_t now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void rx_frame(struct rx *r, const struct wire_header *h, const uint8_t *p)
{
	switch (h->type) {
	case WIRE_HELLO:
		r->hellos++;
		break;
	case WIRE_PONG:
		r->last_pong = h->id;
		break;
	case WIRE_EXIT: {
		struct wire_reader rd;
		struct wire_field f;
		wire_reader_init(&rd, p, h->len);
		while (wire_next(&rd, &f) == 1) {
			uint32_t v;
			if (f.tag == WIRE_T_EXIT_CODE && wire_field_u32(&f, &v) == 0)
				r->exit_code = (int32_t)v;
		}
		r->last_exit = h->id;
		break;
	}
	case WIRE_ERROR:
		r->last_exit = h->id;
		r->exit_code = -1;
		break;
	default:
		break;
	}
}

static void rx_recv(void *opaque, const void *buf, size_t len)
{
	struct rx *r = opaque;
	pthread_mutex_lock(&r->lock);
	if (len == 0) {
		r->eof = true;
	} else if (!r->bad) {
		if (r->len + len > sizeof(r->buf)) {
			r->bad = true;
		} else {
			memcpy(r->buf + r->len, buf, len);
			r->len += len;
			size_t off = 0;
			while (r->len - off >= WIRE_HEADER_LEN) {
				struct wire_header h;
				if (wire_header_decode(r->buf + off, WIRE_MAX_GUEST_PAYLOAD, &h) <
				    0) {
					r->bad = true;
					break;
				}
				if (r->len - off < WIRE_HEADER_LEN + h.len)
					break;
				rx_frame(r, &h, r->buf + off + WIRE_HEADER_LEN);
				off += WIRE_HEADER_LEN + h.len;
			}
			memmove(r->buf, r->buf + off, r->len - off);
			r->len -= off;
		}
	}
	pthread_cond_broadcast(&r->cond);
	pthread_mutex_unlock(&r->lock);
}

static void rx_reset(struct rx *r)
{
	pthread_mutex_lock(&r->lock);
	r->len = 0;
	r->hellos = 0;
	r->last_pong = 0;
	r->last_exit = 0;
	r->eof = r->bad = false;
	pthread_mutex_unlock(&r->lock);
}

/* Wait until *field == want (or hellos >= want); false on EOF/timeout. */
enum wait_for { W_HELLO, W_PONG, W_EXIT };
static bool rx_wait(struct rx *r, enum wait_for what, uint32_t want, int timeout_ms)
{
	struct timespec ts = sbx_timespec_in(CLOCK_REALTIME, timeout_ms);
	bool ok = false;
	pthread_mutex_lock(&r->lock);
	for (;;) {
		ok = (what == W_HELLO && r->hellos >= want) ||
		     (what == W_PONG && r->last_pong == want) ||
		     (what == W_EXIT && r->last_exit == want);
		if (ok || r->eof || r->bad)
			break;
		if (pthread_cond_timedwait(&r->cond, &r->lock, &ts) != 0)
			break;
	}
	pthread_mutex_unlock(&r->lock);
	return ok;
}

static int env_int(const char *name, int def)
{
	return env_int_max(name, def, INT_MAX - 1);
}

/* Open a channel with transport t, get HELLO, answer WELCOME. */
static int chan_open(struct vmm_vm *vm, enum vmm_transport t, struct rx *r, struct sbx_channel *ch,
		     int timeout_ms)
{
	struct sbx_error err = {0};
	rx_reset(r);
	if (vmm_vm_open_channel_via(vm, t, rx_recv, r, ch, &err) < 0) {
		fprintf(stderr, "open channel: %s\n", err.message);
		return -1;
	}
	if (!rx_wait(r, W_HELLO, 1, timeout_ms) || chan_send_welcome(ch) < 0) {
		fprintf(stderr, "no HELLO from the guest\n");
		ch->close(ch->ctx);
		return -1;
	}
	return 0;
}

/* Reopen a channel to a guest that already said HELLO: the guest may not
 * notice a quick close+open (SIGIO state re-read), so no second HELLO is
 * guaranteed; a PING answered proves the path. WELCOME first, like
 * agentless' reattach. */
static int chan_reopen(struct vmm_vm *vm, enum vmm_transport t, struct rx *r,
		       struct sbx_channel *ch, uint32_t *id)
{
	struct sbx_error err = {0};
	rx_reset(r);
	if (vmm_vm_open_channel_via(vm, t, rx_recv, r, ch, &err) < 0) {
		fprintf(stderr, "open channel: %s\n", err.message);
		return -1;
	}
	if (chan_send_welcome(ch) == 0) {
		for (int i = 0; i < 20; i++) {
			uint32_t my = ++*id;
			if (chan_send_frame(ch, WIRE_PING, my, (const uint8_t *)"x", 1) < 0)
				break;
			if (rx_wait(r, W_PONG, my, 500)) {
				pthread_mutex_lock(&r->lock);
				unsigned hellos = r->hellos;
				pthread_mutex_unlock(&r->lock);
				printf(
				    "reopen via %s: first PONG after %d PING(s), HELLOs seen %u\n",
				    t ? "socket" : "stream", i + 1, hellos);
				return 0;
			}
		}
	}
	fprintf(stderr, "reopened channel does not answer\n");
	ch->close(ch->ctx);
	return -1;
}

static struct stats bench_ping(struct sbx_channel *ch, struct rx *r, int n, uint32_t *id)
{
	int64_t *v = calloc((size_t)n, sizeof(*v));
	int done = 0;
	uint8_t payload[8] = "pingpong";
	for (int i = 0; v && i < n; i++) {
		uint32_t my = ++*id;
		int64_t t0 = now_us();
		if (chan_send_frame(ch, WIRE_PING, my, payload, sizeof(payload)) < 0 ||
		    !rx_wait(r, W_PONG, my, 5000))
			break;
		v[done++] = now_us() - t0;
	}
	struct stats s = stats_of(v, done);
	free(v);
	return s;
}

static struct stats bench_exec(struct sbx_channel *ch, struct rx *r, int n, uint32_t *id)
{
	int64_t *v = calloc((size_t)n, sizeof(*v));
	int done = 0;
	for (int i = 0; v && i < n; i++) {
		uint8_t p[256];
		struct wire_writer w;
		wire_writer_init(&w, p, sizeof(p));
		wire_put_str(&w, WIRE_T_COMMAND, "true");
		wire_put_str(&w, WIRE_T_CWD, "/");
		wire_put_u32(&w, WIRE_T_TIMEOUT_MS, 10000);
		wire_put_u32(&w, WIRE_T_STDOUT_CAP, 65536);
		wire_put_u32(&w, WIRE_T_STDERR_CAP, 65536);
		uint32_t my = ++*id;
		int64_t t0 = now_us();
		if (chan_send_frame(ch, WIRE_EXEC, my, p, w.len) < 0 ||
		    !rx_wait(r, W_EXIT, my, 15000))
			break;
		if (r->exit_code != 0) {
			fprintf(stderr, "exec true: exit %d\n", r->exit_code);
			break;
		}
		v[done++] = now_us() - t0;
	}
	struct stats s = stats_of(v, done);
	free(v);
	return s;
}

static void print_stats(const char *what, const char *t, struct stats s)
{
	printf("%-10s %-7s n=%-5d median %8lld us  p95 %8lld us  min %8lld us\n", what, t, s.n,
	       (long long)s.median, (long long)s.p95, (long long)s.min);
}

int main(void)
{
	const char *img = getenv("SBX_IMAGE_DIR");
	if (!img || !*img)
		img = "build/images/tiny";
	const char *run = getenv("SBX_RUN_DIR");
	if (!run || !*run)
		run = "/var/lib/sandboxd-bench/run";
	const char *uri = getenv("SBX_URI");
	if (!uri || !*uri)
		uri = "qemu:///system";
	int pings = env_int("SBX_BENCH_PINGS", 1000);
	int execs = env_int("SBX_BENCH_EXECS", 20);
	int boots = env_int("SBX_BENCH_BOOTS", 5);

	char kernel[PATH_MAX + 32], initrd[PATH_MAX + 32], abs_img[PATH_MAX], prefix[64];
	if (!realpath(img, abs_img)) {
		fprintf(stderr, "channel: image dir '%s' not found (make image-tiny)\n", img);
		return 1;
	}
	snprintf(kernel, sizeof(kernel), "%s/vmlinux", abs_img);
	snprintf(initrd, sizeof(initrd), "%s/initramfs.cpio.gz", abs_img);
	snprintf(prefix, sizeof(prefix), "b-chan-%d-", (int)getpid());

	sbx_log_set_level(SBX_LOG_WARN);
	struct vmm_config cfg = bench_vmm_config(prefix, kernel, initrd, run);

	/* as measured for docs/vmm.md: QEMU's own cache, no balloon */
	cfg.uri = uri;
	cfg.transport = VMM_TRANSPORT_STREAM;
	cfg.tb_cache_mib = 0;
	cfg.free_page_reporting = false;
	struct sbx_error err = {0};
	struct vmm *v = vmm_new(&cfg, &err);
	if (!v) {
		fprintf(stderr, "channel: vmm_new: %s\n", err.message);
		return 1;
	}
	struct rx *r = calloc(1, sizeof(*r));
	pthread_mutex_init(&r->lock, NULL);
	pthread_cond_init(&r->cond, NULL);
	struct vmm_guest_spec spec = {.vcpus = 1, .memory_mib = 256, .sandbox_id = "bench"};

	/* create-to-ready, alternating the transport that waits for HELLO */
	int64_t *ready = calloc((size_t)boots, sizeof(*ready));
	int nready = 0;
	struct vmm_vm *vm = NULL;
	for (int i = 0; i < boots; i++) {
		enum vmm_transport t = (i % 2) ? VMM_TRANSPORT_SOCKET : VMM_TRANSPORT_STREAM;
		int64_t t0 = now_us();
		vm = vmm_vm_start(v, &spec, &err);
		if (!vm) {
			fprintf(stderr, "channel: start: %s\n", err.message);
			break;
		}
		int64_t t1 = now_us();
		struct sbx_channel ch;
		if (chan_open(vm, t, r, &ch, 60000) < 0) {
			char *tail = vmm_vm_console_tail(vm, 2000);
			fprintf(stderr, "console:\n%s\n", tail ? tail : "(none)");
			free(tail);
			vmm_vm_destroy(vm, &err);
			vmm_vm_free(vm);
			vm = NULL;
			break;
		}
		int64_t t2 = now_us();
		ready[nready++] = t2 - t0;
		printf("boot %d: virDomainCreateXML %lld ms, ready (HELLO via %s) %lld ms\n", i + 1,
		       (long long)(t1 - t0) / 1000, t ? "socket" : "stream",
		       (long long)(t2 - t0) / 1000);
		ch.close(ch.ctx);
		if (i + 1 < boots) {
			vmm_vm_destroy(vm, &err);
			vmm_vm_free(vm);
			vm = NULL;
		}
	}
	struct stats rs = stats_of(ready, nready);
	printf("create-to-ready: n=%d median %lld ms min %lld ms\n", rs.n,
	       (long long)rs.median / 1000, (long long)rs.min / 1000);
	free(ready);
	if (!vm) {
		vmm_free(v);
		return 1;
	}

	uint32_t id = 0;
	struct stats ping[2], ex[2];
	const char *tname[2] = {"stream", "socket"};
	for (int round = 0; round < 2; round++) {
		for (int t = 0; t < 2; t++) {
			struct sbx_channel ch;
			if (chan_reopen(vm, (enum vmm_transport)t, r, &ch, &id) < 0)
				goto out;
			bench_ping(&ch, r, pings / 10, &id); /* warm-up */
			ping[t] = bench_ping(&ch, r, pings, &id);
			ex[t] = bench_exec(&ch, r, execs, &id);
			ch.close(ch.ctx);
		}
	}
	for (int t = 0; t < 2; t++)
		print_stats("ping", tname[t], ping[t]);
	for (int t = 0; t < 2; t++)
		print_stats("exec true", tname[t], ex[t]);
	if (ping[1].median > 0 && ex[1].median > 0)
		printf("ratio stream/socket: ping median %.2f, exec median %.2f\n",
		       (double)ping[0].median / (double)ping[1].median,
		       (double)ex[0].median / (double)ex[1].median);
out:
	vmm_vm_destroy(vm, &err);
	vmm_vm_free(vm);
	vmm_free(v);
	free(r);
	return 0;
}
