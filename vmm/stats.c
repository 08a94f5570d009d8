/* vmm: what the host sees of a running guest (vmm_vm_stats): its CPU
 * time, the balloon's memory statistics (the guest's own word) and the
 * space its disk takes, in one virDomainListGetStats call. */
#include <stdio.h>
#include <string.h>

#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>

#include "vmm-priv.h"

#define MOD "vmm"

/* The ullong parameter `name` of a record: true when it is there. */
static bool param_u64(virDomainStatsRecordPtr rec, const char *name, uint64_t *v)
{
	unsigned long long x = 0;

	if (virTypedParamsGetULLong(rec->params, rec->nparams, name, &x) != 1)
		return false;
	*v = x;
	return true;
}

/* The root disk's host bytes (block.N.physical of "vda": the overlay's
 * allocated size; allocation when the driver gives no physical). */
static bool disk_bytes(virDomainStatsRecordPtr rec, uint64_t *bytes)
{
	unsigned count = 0;

	if (virTypedParamsGetUInt(rec->params, rec->nparams, "block.count", &count) != 1)
		return false;
	for (unsigned i = 0; i < count && i < 16; i++) {
		char key[48];
		const char *name = NULL;

		snprintf(key, sizeof(key), "block.%u.name", i);
		if (virTypedParamsGetString(rec->params, rec->nparams, key, &name) != 1 || !name ||
		    strcmp(name, "vda") != 0)
			continue;
		snprintf(key, sizeof(key), "block.%u.physical", i);
		if (param_u64(rec, key, bytes))
			return true;
		snprintf(key, sizeof(key), "block.%u.allocation", i);
		return param_u64(rec, key, bytes);
	}
	return false;
}

/* The balloon's figures, when the guest's driver reported any. */
static void balloon(virDomainStatsRecordPtr rec, struct vmm_vm_stats *out)
{
	uint64_t total = 0, avail = 0, updated = 0;

	if (!param_u64(rec, "balloon.last-update", &updated) || updated == 0 ||
	    !param_u64(rec, "balloon.available", &total) ||
	    (!param_u64(rec, "balloon.usable", &avail) &&
	     !param_u64(rec, "balloon.unused", &avail)))
		return;
	out->has_memory = true;
	out->memory_total_kib = total;
	out->memory_available_kib = avail;
	out->memory_reported_s = (int64_t)(updated > INT64_MAX ? INT64_MAX : updated);
}

/* The first libvirt client release with the fix for CVE-2024-4418. */
#define LIBVIRT_STATS_SAFE 10003000UL

/* A libvirt client bug: before 10.3.0, virNetClientIOEventLoop left its
 * socket watch attached to the connection's event context, pointing at
 * its own stack frame, whenever the loop woke for another reason (the
 * keepalive timer while a call waited on a silent link). The next call
 * on that connection dispatched it into a dead frame (seen here as a
 * segfault in the blocking pool after a remote link came back, with
 * sampling every second). A local host's link does not go silent. */
void vmm_stats_init(struct vmm *v)
{
	unsigned long lib = 0;

	v->stats_ok =
	    !v->remote || (virGetVersion(&lib, NULL, NULL) == 0 && lib >= LIBVIRT_STATS_SAFE);
	if (!v->stats_ok)
		sbx_warn(MOD,
			 "'%s': no guest statistics from this remote host: the libvirt client "
			 "library (%lu.%lu.%lu) is older than 10.3.0 (CVE-2024-4418)",
			 v->uri, lib / 1000000, lib / 1000 % 1000, lib % 1000);
}

bool vmm_stats_ok(const struct vmm *v)
{
	return v->stats_ok;
}

int vmm_vm_stats(struct vmm_vm *vm, struct vmm_vm_stats *out, struct sbx_error *err)
{
	virDomainStatsRecordPtr *recs = NULL;
	virDomainPtr doms[2] = {NULL, NULL};
	int n;

	memset(out, 0, sizeof(*out));
	if (!vm->v->stats_ok)
		return sbx_error_set(
		    err, SBX_E_SERVICE_UNAVAILABLE, NULL,
		    "statistics are off for this host (its libvirt client library is too old)");
	if (!vmm_connected(vm->v))
		return sbx_error_set(err, SBX_E_SERVICE_UNAVAILABLE, NULL,
				     "the hypervisor did not answer; try again later");
	doms[0] = vmm_vm_dom(vm);
	if (!doms[0])
		return sbx_error_set(err, SBX_E_SANDBOX_ERROR, NULL, "the sandbox's guest is gone");
	/* NOWAIT: a domain busy with another job gives what it can now
	 * rather than have us queue behind that job */
	n = virDomainListGetStats(
	    doms, VIR_DOMAIN_STATS_CPU_TOTAL | VIR_DOMAIN_STATS_BALLOON | VIR_DOMAIN_STATS_BLOCK,
	    &recs, VIR_CONNECT_GET_ALL_DOMAINS_STATS_NOWAIT);
	if (n < 0) {
		sbx_debug(MOD, "stats of '%s': %s", vm->name, vmm_lv_msg());
		return sbx_error_set(err, SBX_E_SERVICE_UNAVAILABLE, NULL,
				     "the hypervisor gave no statistics");
	}
	if (n < 1) {
		virDomainStatsRecordListFree(recs);
		return sbx_error_set(err, SBX_E_SANDBOX_ERROR, NULL, "the sandbox's guest is gone");
	}
	out->has_cpu = param_u64(recs[0], "cpu.time", &out->cpu_ns);
	balloon(recs[0], out);
	out->has_disk = disk_bytes(recs[0], &out->disk_bytes);
	virDomainStatsRecordListFree(recs);
	return 0;
}
