/* bench/terminal: how fast a terminal's output reaches a client that
 * reads (GET /v1/sandboxes/{id}/terminal, docs/api.md "Terminal"), moved
 * here from tests/integration/test_terminal.c (a figure, not an
 * assertion).
 *
 * One daemon as the integration tests start them (harness.h), the full
 * image when SBX_TEST_FULL_IMAGE_DIR is built (else the tiny one), one
 * sandbox; then SBX_BENCH_TERMINAL_ROUNDS (default 3) rounds of `sbx
 * shell` (bin/sbx beside SBX_BIN, stdin a pipe) running
 * `stty opost; yes | head -c SBX_BENCH_TERMINAL_BYTES` (default 4000000:
 * "y\n" arrives as "y\r\n", so 1.5 times that reaches the client), read
 * to the end: bytes, wall time from the command's start to the shell's
 * exit, MB/s. On this TCG host the guest's own pty is the bound (`script`
 * writing 10 MB of `yes` to /dev/null inside the guest takes ~19 s).
 * Prints figures; never fails on timing. Exit 1 only when it cannot run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "../tests/integration/harness.h"

/* One round: the bytes `sbx shell` printed, and its wall time in *ms;
 * -1 when it could not run or did not exit 0. */
static int64_t one_round(const struct daemon *d, const char *id, int bytes, int64_t *ms)
{
	const char *bin = sbx_bin(), *slash = strrchr(bin, '/');
	char cmd[1024], buf[65536];
	int64_t total = 0, t0;
	size_t n;
	FILE *p;

	snprintf(cmd, sizeof cmd,
		 "printf 'stty opost; yes | head -c %d; echo; exit 0\\n' | "
		 "SANDBOXD_URL=http://127.0.0.1:%d SANDBOXD_KEY=%s XDG_CONFIG_HOME=/nonexistent "
		 "%.*ssbx shell %s",
		 bytes, d->port, d->key, slash ? (int)(slash - bin + 1) : 0, bin, id);
	t0 = sbx_mono_ms();
	p = popen(cmd, "r");
	if (!p)
		return -1;
	while ((n = fread(buf, 1, sizeof buf, p)) > 0)
		total += (int64_t)n;
	*ms = sbx_mono_ms() - t0;
	return pclose(p) == 0 ? total : -1;
}

int main(void)
{
	int rounds = env_int_range("SBX_BENCH_TERMINAL_ROUNDS", 3, 1, 20);
	int bytes = env_int_range("SBX_BENCH_TERMINAL_BYTES", 4000000, 1000, 100000000);
	int64_t ms[20], rate[20];
	struct daemon d;
	char id[64];
	bool full;
	int n = 0, rc = 1;

	memset(&d, 0, sizeof(d));
	full = daemon_config_full(&d, "\"destroy_on_exit\": true") == 0;
	if (!full)
		daemon_config(&d, "\"destroy_on_exit\": true");
	if (daemon_up(&d) < 0 || daemon_create_sandbox(&d, id, sizeof(id)) < 0)
		goto out;
	for (n = 0; n < rounds; n++) {
		int64_t got = one_round(&d, id, bytes, &ms[n]);

		if (got < 0) {
			fprintf(stderr, "bench/terminal: sbx shell failed\n");
			goto out;
		}
		rate[n] = got * 1000 / (ms[n] ? ms[n] : 1); /* bytes/s */
		printf("round %d: %lld bytes in %lld ms (%.2f MB/s)\n", n + 1, (long long)got,
		       (long long)ms[n], (double)rate[n] / 1e6);
	}
	struct stats s = stats_of(rate, n), t = stats_of(ms, n);
	printf("terminal output to a reading client (%s image, `yes | head -c %d`, %d rounds): "
	       "median %.2f MB/s (min %.2f, max %.2f), median %lld ms\n",
	       full ? "full" : "tiny", bytes, n, (double)s.median / 1e6, (double)s.min / 1e6,
	       (double)s.max / 1e6, (long long)t.median);
	rc = 0;
out:
	daemon_down(&d);
	return rc;
}
