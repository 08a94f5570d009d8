/* sandboxd-init: the hostile-guest test kit (tests only).
 *
 * A guest booted with `sandboxd.test_hostile=1` on its kernel command line
 * (the daemon adds it only with the config key `test_hostile_guests`, which
 * production mode refuses) treats an EXEC whose env holds
 * SBX_TEST_HOSTILE=<behaviour> as an order to misbehave instead of running
 * the command. The behaviours are what a tenant who is root in the guest
 * could make PID 1 do (docs/protocol.md, "A hostile guest"):
 *
 *   stop_reading  never read the port again (the host's sends pile up)
 *   blackhole     accept this EXEC and never answer it, not even a KILL
 *   hello_flood   send HELLO frames without end and stop reading
 *   unknown_ids   send output and EXIT frames for ids the host never gave
 *   file_stall    answer this EXEC (exit 0), then never send another byte
 *                 of a download (its META goes, its data does not)
 *   tiny_frames   answer this EXEC with 1 MiB of stdout in 1-byte frames,
 *                 as fast as the port takes them, ignoring PAUSE, then
 *                 exit 0 (what a streamed reply buffers for it)
 *   file_trickle  answer this EXEC (exit 0), then send the data of
 *                 downloads one byte every TRICKLE_MS (never a stall)
 *   reopen_v3     run this EXEC as usual; from now on every HELLO (the
 *                 next host connection's, or the one a low WELCOME asks
 *                 for after a reattach) says protocol version 3, so the
 *                 guest never sends CREDIT again
 *   reopen_silent run this EXEC as usual; from now on say no HELLO at all
 *                 (a reopened channel hears nothing), but keep reading
 *
 * Without the command-line switch the env variable is an ordinary one. */
#include "guest/init.h"
#include "agentless/wire.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define HOSTILE_ENV "SBX_TEST_HOSTILE="
#define TRICKLE_MS  2000

static struct {
	int checked; /* 0 = not yet, 1 = on, -1 = off */
	bool deaf;
	bool hello_flood;
	bool file_stall;
	bool file_trickle;
	int64_t trickle_next;	/* guest_mono_ms() of the next byte */
	uint32_t hello_version; /* 0: ours; else what HELLO says (reopen_*) */
	guest_send_fn send;
	void (*hello)(void);
	size_t (*queue_size)(void);
	uint32_t tiny_id;   /* tiny_frames: the exec, */
	uint32_t tiny_left; /* and the bytes it has still to ship */
} H;

/* tiny_frames ships this much, the host's default cap */
#define TINY_BYTES (1024u * 1024)
/* and queues more only below this (the guest's own memory) */
#define TINY_QUEUE (256u * 1024)

void guest_hostile_init(guest_send_fn send, void (*hello)(void), size_t (*queue_size)(void))
{
	char line[4096];
	FILE *f;

	H.send = send;
	H.hello = hello;
	H.queue_size = queue_size;
	H.checked = -1;
	f = fopen("/proc/cmdline", "re");
	if (!f)
		return;
	if (fgets(line, sizeof line, f) && strstr(line, "sandboxd.test_hostile=1")) {
		H.checked = 1;
		guest_log("hostile-guest test kit enabled");
	}
	fclose(f);
}

bool guest_hostile_exec(uint32_t id, const uint8_t *p, size_t len)
{
	struct wire_reader r;
	struct wire_field f;
	char what[32] = "";

	if (H.checked != 1)
		return false;
	wire_reader_init(&r, p, len);
	while (wire_next(&r, &f) == 1) {
		size_t n = strlen(HOSTILE_ENV);

		if (f.tag != WIRE_T_ENV || f.len <= n || f.len - n >= sizeof what ||
		    memcmp(f.value, HOSTILE_ENV, n) != 0)
			continue;
		memcpy(what, (const char *)f.value + n, f.len - n);
		what[f.len - n] = '\0';
	}
	if (!what[0])
		return false;
	guest_log("hostile: %s (exec %u)", what, id);
	if (strcmp(what, "stop_reading") == 0) {
		H.deaf = true;
	} else if (strcmp(what, "hello_flood") == 0) {
		H.deaf = true;
		H.hello_flood = true;
	} else if (strcmp(what, "unknown_ids") == 0) {
		H.send(WIRE_STDOUT, id + 100000, "x", 1);
		H.send(WIRE_EXIT, id + 200000, NULL, 0);
	} else if (strcmp(what, "file_stall") == 0 || strcmp(what, "file_trickle") == 0) {
		uint8_t b[16];
		struct wire_writer w;

		if (strcmp(what, "file_stall") == 0)
			H.file_stall = true;
		else
			H.file_trickle = true;
		wire_writer_init(&w, b, sizeof b);
		wire_put_u32(&w, WIRE_T_EXIT_CODE, 0);
		H.send(WIRE_EXIT, id, w.buf, w.len);
	} else if (strcmp(what, "tiny_frames") == 0) {
		H.tiny_id = id;
		H.tiny_left = TINY_BYTES;
	} else if (strcmp(what, "reopen_v3") == 0 || strcmp(what, "reopen_silent") == 0) {
		H.hello_version = what[7] == 'v' ? 3 : UINT32_MAX;
		return false; /* the command runs as usual */
	} else if (strcmp(what, "blackhole") != 0) {
		return false; /* unknown: run the command as usual */
	}
	return true; /* blackhole: nothing, ever */
}

bool guest_hostile_file_stall(void)
{
	return H.file_stall;
}

bool guest_hostile_trickle_due(void)
{
	int64_t now;

	if (!H.file_trickle)
		return true;
	now = guest_mono_ms();
	if (now < H.trickle_next)
		return false;
	H.trickle_next = now + TRICKLE_MS;
	return true;
}

bool guest_hostile_trickling(void)
{
	return H.file_trickle;
}

int64_t guest_hostile_wake_ms(void)
{
	/* a byte due now goes at the loop's next turn anyway */
	return H.file_trickle && H.trickle_next > guest_mono_ms() ? H.trickle_next : -1;
}

uint32_t guest_hostile_hello_version(uint32_t ours)
{
	if (H.hello_version == UINT32_MAX)
		return 0;
	return H.hello_version ? H.hello_version : ours;
}

bool guest_hostile_deaf(void)
{
	return H.deaf;
}

void guest_hostile_tick(void)
{
	if (H.tiny_left > 0 && H.queue_size() < TINY_QUEUE) {
		for (int i = 0; i < 4096 && H.tiny_left > 0; i++, H.tiny_left--)
			H.send(WIRE_STDOUT, H.tiny_id, "t", 1);
		if (H.tiny_left == 0) {
			uint8_t b[16];
			struct wire_writer w;

			wire_writer_init(&w, b, sizeof b);
			wire_put_u32(&w, WIRE_T_EXIT_CODE, 0);
			H.send(WIRE_EXIT, H.tiny_id, w.buf, w.len);
		}
	}
	if (!H.hello_flood)
		return;
	for (int i = 0; i < 64; i++)
		H.hello();
}
