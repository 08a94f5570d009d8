/* fleet: the placement rule (docs/hosts.md "Placement"), a pure function
 * over host snapshots. */
#include "fleet.h"

static bool room(const struct fleet_host_snapshot *s, uint64_t mib, uint64_t gib, bool evicting)
{
	int guests = s->guests + (evicting ? 0 : s->pool_guests);
	uint64_t mem = s->mem_used_mib + (evicting ? 0 : s->pool_mib);
	uint64_t disk = s->disk_used_gib + (evicting ? 0 : s->pool_disk_gib);

	return guests + 1 <= s->max_guests && mem + mib <= s->mem_total_mib &&
	       (!s->disk_total_gib || disk + gib <= s->disk_total_gib) &&
	       (evicting ? s->disk_ok_evicting : s->disk_ok);
}

/* Free memory after everything placed (and, unless evicting, pooled). */
static uint64_t free_mib(const struct fleet_host_snapshot *s, bool evicting)
{
	uint64_t used = s->mem_used_mib + (evicting ? 0 : s->pool_mib);

	return used >= s->mem_total_mib ? 0 : s->mem_total_mib - used;
}

/* Only hosts up and not draining; first a host with a warm guest of the
 * size (nothing to boot, no room needed: the guest is already counted),
 * then one with room, then one where evicting pooled guests makes room.
 * Within each step the host with the most free guest memory wins (ties:
 * the first listed): guests spread, so a host lost takes the fewest
 * sandboxes with it and none is packed while another idles, and memory is
 * what the sizes differ in most. */
int fleet_place(const struct fleet_host_snapshot *hs, size_t n, uint64_t memory_mib,
		uint64_t disk_gib, enum fleet_place_how *how)
{
	static const enum fleet_place_how steps[] = {FLEET_PLACE_WARM, FLEET_PLACE_ROOM,
						     FLEET_PLACE_EVICT};

	for (size_t k = 0; k < SBX_ARRAY_SIZE(steps); k++) {
		int best = -1;
		uint64_t best_free = 0;

		for (size_t i = 0; i < n; i++) {
			const struct fleet_host_snapshot *s = &hs[i];
			bool evicting = steps[k] == FLEET_PLACE_EVICT;
			bool ok = steps[k] == FLEET_PLACE_WARM
				      ? s->warm > 0
				      : room(s, memory_mib, disk_gib, evicting);

			if (!s->up || s->draining || !ok)
				continue;
			if (best < 0 || free_mib(s, evicting) > best_free) {
				best = (int)i;
				best_free = free_mib(s, evicting);
			}
		}
		if (best >= 0) {
			*how = steps[k];
			return best;
		}
	}
	return -1;
}
