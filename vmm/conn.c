/* vmm: the libvirt connection: lifecycle events, the close callback and
 * reconnecting (docs/vmm.md, "libvirtd restarts"). */
#include "vmm.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>

#include "vmm-priv.h"

#define MOD "vmm"
#define VMM_RECONNECT_MIN_MS 100
#define VMM_RECONNECT_MAX_MS 2000

/* ------------------------------------------------------ lifecycle, close */

static void vmm_lifecycle_cb(virConnectPtr conn, virDomainPtr dom, int event, int detail,
			     void *opaque)
{
	(void)conn;
	(void)detail;
	struct vmm *v = opaque;
	if (event != VIR_DOMAIN_EVENT_STOPPED && event != VIR_DOMAIN_EVENT_SHUTDOWN &&
	    event != VIR_DOMAIN_EVENT_CRASHED)
		return;
	const char *name = virDomainGetName(dom);
	if (!vmm_has_prefix(v, name))
		return;
	sbx_info(MOD, "domain '%s': lifecycle event %d detail %d", name, event, detail);
	pthread_mutex_lock(&v->lock);
	vmm_stopped_fn fn = v->stopped_fn;
	void *fn_opaque = v->stopped_opaque;
	pthread_mutex_unlock(&v->lock);
	if (fn)
		fn(fn_opaque, name);
}

static void *vmm_reconnect_main(void *arg);

/* libvirt closed the connection (libvirtd restarted or died): reconnect
 * on a thread of our own, since this runs on the event-loop thread. The
 * guests keep running; socket channels are qemu's and survive, stream
 * channels die with the connection (docs/vmm.md). */
void vmm_close_cb(virConnectPtr conn, int reason, void *opaque)
{
	struct vmm *v = opaque;
	pthread_t t;

	pthread_mutex_lock(&v->lock);
	if (conn != v->conn || v->closing || v->reconnecting) {
		pthread_mutex_unlock(&v->lock);
		return;
	}
	sbx_err(MOD, "libvirt connection '%s' closed (reason %d); reconnecting", v->uri, reason);
	v->reconnecting = true;
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&t, &attr, vmm_reconnect_main, v) != 0) {
		v->reconnecting = false;
		sbx_err(MOD, "cannot start the reconnect thread");
	}
	pthread_attr_destroy(&attr);
	pthread_mutex_unlock(&v->lock);
}

/* libvirt's virFreeCallback for the lifecycle registration: called once no
 * dispatch of it can run any more (possibly later than the deregister). */
static void vmm_lifecycle_free(void *opaque)
{
	struct vmm *v = opaque;
	pthread_mutex_lock(&v->lock);
	v->lifecycle_freed = true;
	pthread_cond_broadcast(&v->cond);
	pthread_mutex_unlock(&v->lock);
}

/* The connection in use (borrowed: vmm never frees a connection before
 * vmm_free, so a dead one just makes calls fail). */
virConnectPtr vmm_conn(struct vmm *v)
{
	pthread_mutex_lock(&v->lock);
	virConnectPtr c = v->conn;
	pthread_mutex_unlock(&v->lock);
	return c;
}

/* Open a connection with our error func, lifecycle and close callbacks.
 * NULL when libvirtd does not answer. */
virConnectPtr vmm_conn_open(struct vmm *v, int *lifecycle_id, bool *close_cb)
{
	virConnectPtr c = virConnectOpen(v->uri);
	if (!c)
		return NULL;
	virConnSetErrorFunc(c, NULL, vmm_silent_error);
	*lifecycle_id = virConnectDomainEventRegisterAny(
	    c, NULL, VIR_DOMAIN_EVENT_ID_LIFECYCLE, VIR_DOMAIN_EVENT_CALLBACK(vmm_lifecycle_cb), v,
	    vmm_lifecycle_free);
	if (*lifecycle_id < 0) {
		sbx_err(MOD, "cannot register lifecycle events: %s", vmm_lv_msg());
		virConnectClose(c);
		return NULL;
	}
	*close_cb = virConnectRegisterCloseCallback(c, vmm_close_cb, v, NULL) == 0;
	if (!*close_cb)
		sbx_warn(MOD, "no close callback on '%s': %s", v->uri, vmm_lv_msg());
	return c;
}

/* After a reconnect: a guest that stopped while libvirtd was away sent its
 * lifecycle event to nobody, so report every handle whose domain is not
 * running any more. */
static void vmm_check_vms(struct vmm *v)
{
	virDomainPtr *doms = NULL;
	char(*gone)[VMM_NAME_MAX + 1] = NULL;
	size_t n_gone = 0, cap = 0;
	int n = virConnectListAllDomains(vmm_conn(v), &doms, VIR_CONNECT_LIST_DOMAINS_ACTIVE);

	if (n < 0) {
		sbx_err(MOD, "list domains after reconnect: %s", vmm_lv_msg());
		return;
	}
	pthread_mutex_lock(&v->lock);
	for (struct vmm_vm *vm = v->vms; vm; vm = vm->next)
		cap++;
	gone = calloc(cap ? cap : 1, sizeof(*gone));
	for (struct vmm_vm *vm = v->vms; vm && gone; vm = vm->next) {
		bool found = false;
		for (int i = 0; i < n && !found; i++)
			found = strcmp(virDomainGetName(doms[i]), vm->name) == 0;
		if (!found && n_gone < cap)
			snprintf(gone[n_gone++], sizeof(gone[0]), "%s", vm->name);
	}
	vmm_stopped_fn fn = v->stopped_fn;
	void *fn_opaque = v->stopped_opaque;
	pthread_mutex_unlock(&v->lock);
	for (int i = 0; i < n; i++)
		virDomainFree(doms[i]);
	free(doms);
	for (size_t i = 0; i < n_gone; i++) {
		sbx_warn(MOD, "domain '%s' stopped while libvirtd was away", gone[i]);
		if (fn)
			fn(fn_opaque, gone[i]);
	}
	free(gone);
}

static void *vmm_reconnect_main(void *arg)
{
	struct vmm *v = arg;
	int64_t t0 = sbx_mono_ms(), delay = VMM_RECONNECT_MIN_MS;
	unsigned tries = 0;

	for (;;) {
		int id = -1;
		bool ccb = false;
		virConnectPtr c;

		pthread_mutex_lock(&v->lock);
		bool closing = v->closing;
		pthread_mutex_unlock(&v->lock);
		if (closing)
			break;
		tries++;
		c = vmm_conn_open(v, &id, &ccb);
		if (c) {
			pthread_mutex_lock(&v->lock);
			if (v->n_old < VMM_OLD_CONNS)
				v->old_conns[v->n_old++] = v->conn;
			/* else: leak the dead connection rather than free it under
			 * a thread that may still use it */
			v->conn = c;
			v->lifecycle_id = id;
			v->lifecycle_freed = false;
			v->close_cb = ccb;
			v->gen++;
			pthread_mutex_unlock(&v->lock);
			sbx_info(MOD, "reconnected to '%s' after %lld ms (%u tries)", v->uri,
				 (long long)(sbx_mono_ms() - t0), tries);
			vmm_check_vms(v);
			break;
		}
		/* Back off, but wake at once for vmm_free. */
		struct timespec ts = sbx_timespec_in(CLOCK_REALTIME, delay);
		pthread_mutex_lock(&v->lock);
		if (!v->closing)
			pthread_cond_timedwait(&v->cond, &v->lock, &ts);
		pthread_mutex_unlock(&v->lock);
		delay = delay * 2 > VMM_RECONNECT_MAX_MS ? VMM_RECONNECT_MAX_MS : delay * 2;
	}
	pthread_mutex_lock(&v->lock);
	v->reconnecting = false;
	pthread_cond_broadcast(&v->cond);
	pthread_mutex_unlock(&v->lock);
	return NULL;
}

void vmm_set_stopped_callback(struct vmm *v, vmm_stopped_fn fn, void *opaque)
{
	pthread_mutex_lock(&v->lock);
	v->stopped_fn = fn;
	v->stopped_opaque = opaque;
	pthread_mutex_unlock(&v->lock);
}

