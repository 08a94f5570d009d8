/* fleet: one way to get a guest for a sandbox or an execution
 * (placement, a pooled guest or a cold boot within a boot slot, and the
 * capacity undo on every failure step), and the boot itself. Every call
 * into vmm/ and agentless/ for the guest goes through f->ops (the real
 * ones here; a unit test's fake: tests/unit/test_acquire.c).
 */
#include <pthread.h>
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

void fleet_guest_uncount(struct fleet *f, struct fleet_host *h, const struct sandbox_size *size)
{
	pthread_mutex_lock(&f->lock);
	fleet_host_booting_locked(h, size, -1);
	pthread_mutex_unlock(&f->lock);
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
		     const char *marker, int64_t deadline_mono, struct fleet_guest **out,
		     struct sbx_error *err)
{
	const struct fleet_guest_ops *ops = f->ops;
	struct vmm_guest_spec spec = {
	    .vcpus = size->vcpus,
	    .memory_mib = size->memory_mib,
	    .disk_gib = fleet_host_disk_gib(h, size),
	    .sandbox_id = marker,
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

/* 1. Placement and capacity (503, docs/hosts.md): a pooled guest (for an
 * execution, first one whose interpreter waits) is already counted, so
 * taking it needs no room; a cold boot may evict idle pooled guests of its
 * host first. 2w. A pooled guest: name it. 2c. Queue for a boot slot, then
 * boot, open the channel and wait for HELLO. Every failure after 1 gives
 * the capacity back. */
int fleet_acquire(struct fleet *f, struct fleet_acquire *a, struct sbx_error *err)
{
	const struct fleet_guest_ops *ops = f->ops;
	struct fleet_guest *l = NULL, *evicted = NULL;
	struct fleet_host *h;
	int64_t deadline;
	int rc;

	a->g = NULL;
	a->h = NULL;
	a->warm = a->no_room = false;
	fleet_hosts_measure_disk(f);
	pthread_mutex_lock(&f->lock);
	h = fleet_host_admit_locked(f, a->size, a->runtime, &l, &evicted, err);
	pthread_mutex_unlock(&f->lock);
	if (evicted) {
		sbx_info(MOD, "%s: evicting pooled guests to make room", a->marker);
		while (evicted) {
			struct fleet_guest *next = evicted->next;

			ops->teardown(evicted, "evicted from the warm pool");
			evicted = next;
		}
	}
	if (!h) {
		a->no_room = true;
		return -1;
	}
	if (l) {
		/* a crash now leaves a domain naming a creating row or no
		 * sandbox at all: reconcile destroys it */
		a->warm = true;
		snprintf(l->id, sizeof(l->id), "%s", a->marker);
		if (ops->set_sandbox_id(l, a->marker, err) < 0) {
			ops->teardown(l, a->why_failed);
			goto err_uncount;
		}
	} else {
		if (fleet_boot_slot_acquire(f, a->queue_deadline_mono, err) < 0)
			goto err_uncount;
		deadline = a->boot_deadline_mono ? a->boot_deadline_mono
						 : sbx_mono_ms() + f->cfg->boot_timeout_ms;
		rc = fleet_guest_boot(f, h, a->size, a->marker, deadline, &l, err);
		fleet_boot_slot_release(f);
		if (rc < 0)
			goto err_uncount;
		fleet_guest_set_state(l, FLEET_GUEST_RUNNING); /* handed out */
	}
	a->g = l;
	a->h = h;
	return 0;

err_uncount:
	fleet_guest_uncount(f, h, a->size);
	return -1;
}
