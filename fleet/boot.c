/* fleet: the boot of a guest (domain, channel, HELLO) within a boot slot,
 * and the seam beneath it: every call into vmm/ and agentless/ for the
 * guest goes through f->ops (the real ones here; a unit test's fake:
 * tests/unit/test_acquire.c).
 */
#include <stdio.h>
#include <stdlib.h>

#include "../agentless/agentless.h"
#include "../vmm/vmm.h"
#include "fleet-priv.h"

#define MOD "fleet"

int fleet_boot_slot_acquire(struct fleet *f, int64_t deadline_mono, struct sbx_error *err)
{
	return fleet_slot_acquire(&f->slots, deadline_mono, err);
}

void fleet_boot_slot_release(struct fleet *f)
{
	fleet_slot_release(&f->slots);
}

int fleet_boot_slots_active(struct fleet *f)
{
	return fleet_slots_active(&f->slots);
}

/* ------------------------------------------------- the real guest ops */

static int real_start(struct fleet_guest *l, const struct vmm_guest_spec *spec,
		      struct sbx_error *err)
{
	l->vm = vmm_vm_start(l->host->vmm, spec, err);
	if (!l->vm)
		return -1;
	snprintf(l->domain, sizeof(l->domain), "%s", vmm_vm_name(l->vm));
	l->conn_gen = vmm_conn_gen(l->host->vmm);
	return 0;
}

static int real_open_channel(struct fleet_guest *l, struct sbx_channel *ch, struct sbx_error *err)
{
	return vmm_vm_open_channel(l->vm, agentless_conn_recv, l->conn, ch, err);
}

static int real_wait_hello(struct fleet_guest *l, int64_t deadline_mono, struct sbx_error *err)
{
	return agentless_conn_wait_hello(l->conn, deadline_mono, err);
}

static int real_set_sandbox_id(struct fleet_guest *l, const char *id, struct sbx_error *err)
{
	return vmm_vm_set_sandbox_id(l->vm, id, err);
}

const struct fleet_guest_ops fleet_guest_ops_real = {
    .start = real_start,
    .open_channel = real_open_channel,
    .wait_hello = real_wait_hello,
    .set_sandbox_id = real_set_sandbox_id,
    .teardown = fleet_guest_teardown,
};

void fleet_set_guest_ops(struct fleet *f, const struct fleet_guest_ops *ops)
{
	f->ops = ops ? ops : &fleet_guest_ops_real;
}

/* ------------------------------------------------------------ the boot */

int fleet_guest_boot(struct fleet *f, struct fleet_host *h, const struct sandbox_size *size,
		     const char *marker, const char *snapshot_id, int64_t deadline_mono,
		     struct fleet_guest **out, struct sbx_error *err)
{
	const struct fleet_guest_ops *ops = f->ops;
	struct vmm_guest_spec spec = {
	    .vcpus = size->vcpus,
	    .memory_mib = size->memory_mib,
	    .disk_gib = fleet_host_disk_gib(h, size),
	    .sandbox_id = marker,
	    .snapshot_id = snapshot_id,
	};
	struct sbx_channel ch;
	struct fleet_guest *l = fleet_guest_new(f, h, marker);

	l->memory_mib = size->memory_mib;
	l->prestart_free = f->hooks.prestart_free;
	snprintf(l->size, sizeof(l->size), "%s", size->name);
	int64_t boot_t0 = sbx_mono_ms();
	if (ops->start(l, &spec, err) < 0) {
		fleet_guest_unref(l);
		return -1;
	}
	if (f->hooks.boot_started)
		f->hooks.boot_started(f->hooks.opaque);
	l->conn = fleet_guest_conn_new(l);
	if (ops->open_channel(l, &ch, err) < 0)
		goto err_teardown;
	agentless_conn_attach(l->conn, ch, false);
	if (ops->wait_hello(l, deadline_mono, err) < 0) {
		sbx_counter_add(SBX_C_BOOT_FAILURES, 1);
		_cleanup_free_ char *tail = l->vm ? vmm_vm_console_tail(l->vm, 2048) : NULL;

		sbx_err(MOD, "%s: guest %s on host %s not ready: %s; console tail:\n%s", marker,
			l->domain, h->cfg->name, err ? err->message : "", tail ? tail : "(none)");
		/* A guest that never got ready is this node failing to run it
		 * (500), not the host being out of capacity (503). */
		sbx_error_set(err, SBX_E_SANDBOX_ERROR, NULL, "the guest did not get ready");
		goto err_teardown;
	}
	sbx_hist_observe_us(SBX_H_BOOT, (sbx_mono_ms() - boot_t0) * 1000);
	*out = l;
	return 0;

err_teardown:
	ops->teardown(l, "the guest could not be started");
	return -1;
}
