/* sandbox: fault injection for crash tests. See fault.h. */
#include "sandbox-priv.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *const fault_names[SANDBOX_FAULT_COUNT] = {
    [SANDBOX_FAULT_CREATE_AFTER_RESERVE] = "create.after_reserve",
    [SANDBOX_FAULT_CREATE_AFTER_DOMAIN_START] = "create.after_domain_start",
    [SANDBOX_FAULT_CREATE_AFTER_HELLO] = "create.after_hello",
    [SANDBOX_FAULT_CREATE_AFTER_ACTIVATE] = "create.after_activate",
    [SANDBOX_FAULT_EXTEND_AFTER_HOLD] = "extend.after_hold",
    [SANDBOX_FAULT_DELETE_AFTER_DESTROY] = "delete.after_destroy",
    [SANDBOX_FAULT_DELETE_AFTER_SETTLE] = "delete.after_settle",
    [SANDBOX_FAULT_PAUSE_BEFORE_SAVE] = "pause.before_save",
    [SANDBOX_FAULT_PAUSE_AFTER_SAVE] = "pause.after_save",
    [SANDBOX_FAULT_RESUME_AFTER_RESTORE] = "resume.after_restore",
    [SANDBOX_FAULT_SNAPSHOT_AFTER_INSERT] = "snapshot.after_insert",
    [SANDBOX_FAULT_SNAPSHOT_AFTER_COPY] = "snapshot.after_copy",
    [SANDBOX_FAULT_SNAPSHOT_DELETE_AFTER_BEGIN] = "snapshot_delete.after_begin",
};

const char *sandbox_fault_name(enum sandbox_fault point)
{
	if ((unsigned)point >= SANDBOX_FAULT_COUNT)
		return NULL;
	return fault_names[point];
}

bool sandbox_fault_name_valid(const char *name)
{
	if (!name || !name[0])
		return true;
	for (size_t i = 0; i < SANDBOX_FAULT_COUNT; i++)
		if (strcmp(name, fault_names[i]) == 0)
			return true;
	return false;
}

void sandbox_fault_hit(const struct sandbox_config *cfg, enum sandbox_fault point)
{
	const char *name = sandbox_fault_name(point);
	char line[128];
	int n;

	static atomic_bool paused;

	if (!cfg->test_fault_point[0] || !name || strcmp(cfg->test_fault_point, name) != 0)
		return;
	if (cfg->test_fault_pause_ms) {
		/* only the first request that gets here waits; the others pass */
		if (!atomic_exchange(&paused, true)) {
			fprintf(stderr, "sandboxd: test fault point '%s' reached: pausing %u ms\n",
				name, cfg->test_fault_pause_ms);
			sbx_sleep_ms(cfg->test_fault_pause_ms);
		}
		return;
	}
	/* write(2), not stdio: nothing buffered may be flushed on the way out. */
	n = snprintf(line, sizeof(line), "sandboxd: test fault point '%s' reached: _exit(137)\n",
		     name);
	if (n > 0 && write(STDERR_FILENO, line, (size_t)n) < 0) {
		/* dying anyway */
	}
	_exit(137);
}
