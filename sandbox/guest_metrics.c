/* sandbox/guest_metrics.c: a running sandbox's metrics, for its owner (the
 * samples are the fleet's, fleet/metrics.c; docs/api.md "Metrics"). */
#include <stdlib.h>
#include <string.h>

#include "sandbox-priv.h"

int sandbox_guest_metrics_get(struct sandbox_svc *svc, const char *account_id, const char *id,
			      struct sandbox_guest_metrics *out, struct sbx_error *err)
{
	struct store_sandbox row;
	struct fleet_metrics_sample *fs = NULL;
	size_t n = 0;

	memset(out, 0, sizeof(*out));
	out->interval_ms = svc->cfg.metrics_interval_ms;
	out->history = FLEET_METRICS_HISTORY;
	/* another account's sandbox is no sandbox (404); an ended one has
	 * no guest and no samples any more (410) */
	if (sandbox_running_row(svc, account_id, id, sbx_wall_ms(), &row, err) < 0)
		return -1;
	if (!svc->fleet) /* an admin service runs no guest */
		return fleet_guest_usable(NULL, id, err);
	if (fleet_live_metrics(svc->fleet, id, &fs, &n, err) < 0)
		return -1;
	if (n) {
		out->samples = calloc(n, sizeof(*out->samples));
		if (!out->samples) {
			free(fs);
			return sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
		}
	}
	for (size_t i = 0; i < n; i++)
		out->samples[i] = (struct sandbox_guest_sample){
		    .at_ms = fs[i].at_ms,
		    .cpu_cores = fs[i].cpu_cores,
		    .memory_used_mib = fs[i].memory_used_mib,
		    .disk_used_mib = fs[i].disk_used_mib,
		};
	out->n = n;
	free(fs);
	return 0;
}

void sandbox_guest_metrics_release(struct sandbox_guest_metrics *m)
{
	free(m->samples);
	m->samples = NULL;
	m->n = 0;
}
