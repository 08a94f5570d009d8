/* sandbox: fault injection for crash tests (not for other modules).
 *
 * A named point in a use case where a test may make the daemon die as
 * abruptly as `kill -9` (`_exit(137)`: no atexit, no cleanup, no flush of
 * anything but what the kernel already holds). The config key
 * `test_fault_point` names at most one point; production mode refuses it
 * (sandbox_config_validate). docs/configuration.md and docs/lifecycle.md
 * list the points and what a restart makes of each.
 */
#ifndef SBX_SANDBOX_FAULT_H
#define SBX_SANDBOX_FAULT_H

#include <stdbool.h>

#include "sandbox.h"

/* The points, in the order a sandbox meets them. The names are in
 * fault.c, the only list of them. */
enum sandbox_fault {
	SANDBOX_FAULT_CREATE_AFTER_RESERVE,	 /* row CREATING + hold committed */
	SANDBOX_FAULT_CREATE_AFTER_DOMAIN_START, /* domain started, no HELLO yet */
	SANDBOX_FAULT_CREATE_AFTER_HELLO,	 /* guest ready, row still CREATING */
	SANDBOX_FAULT_CREATE_AFTER_ACTIVATE,	 /* row RUNNING, key not yet done */
	SANDBOX_FAULT_EXTEND_AFTER_HOLD,	 /* extra hold + new expiry committed */
	SANDBOX_FAULT_DELETE_AFTER_DESTROY,	 /* domain destroyed, row not settled */
	SANDBOX_FAULT_DELETE_AFTER_SETTLE,	 /* row settled, reply not sent */
	SANDBOX_FAULT_COUNT
};

/* The point's name ("create.after_hello"); NULL when out of range. */
const char *sandbox_fault_name(enum sandbox_fault point);
/* True when `name` is "" (no fault) or one of the point names. */
bool sandbox_fault_name_valid(const char *name);
/* If the config names `point`, log one line to stderr and _exit(137).
 * Otherwise return at once. */
void sandbox_fault_hit(const struct sandbox_config *cfg, enum sandbox_fault point);

#endif
