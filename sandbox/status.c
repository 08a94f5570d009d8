/* sandbox: an execution's status, as the API and the store spell it. */
#include <string.h>

#include "sandbox.h"

static const char *const status_names[] = {
    [SANDBOX_EXECUTION_RUNNING] = "running",
    [SANDBOX_EXECUTION_COMPLETED] = "completed",
    [SANDBOX_EXECUTION_TIMED_OUT] = "timed_out",
    [SANDBOX_EXECUTION_FAILED] = "failed",
};

const char *sandbox_execution_status_name(enum sandbox_execution_status status)
{
	return (size_t)status < SBX_ARRAY_SIZE(status_names) ? status_names[status] : "failed";
}

enum sandbox_execution_status sandbox_execution_status_of(const char *name)
{
	for (size_t i = 0; i < SBX_ARRAY_SIZE(status_names); i++)
		if (strcmp(name, status_names[i]) == 0)
			return (enum sandbox_execution_status)i;
	return SANDBOX_EXECUTION_FAILED;
}
