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

#define MOD		     "vmm"
#define VMM_RECONNECT_MIN_MS 100
#define VMM_RECONNECT_MAX_MS 2000
/* One try of vmm's own reconnect: a connect, TLS and libvirt's hello take
 * well under a second on a live link, a few on a loaded test machine. */
#define VMM_REOPEN_BOUND_MS 15000

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
static virConnectPtr vmm_open_bounded(struct vmm *v, int timeout_ms);

/* libvirt closed the connection (libvirtd restarted or died): reconnect
 * on a thread of our own, since this runs on the event-loop thread. The
 * guests keep running; socket channels are qemu's and survive, stream
 * channels die with the connection (docs/vmm.md). */
void vmm_close_cb(virConnectPtr conn, int reason, void *opaque)
{
	struct vmm *v = opaque;
	pthread_t t;

	static const char *const whys[] = {"error", "end of file", "keepalive timeout",
					   "client closed"};
	const char *why =
	    reason >= 0 && (size_t)reason < SBX_ARRAY_SIZE(whys) ? whys[reason] : "closed";

	pthread_mutex_lock(&v->lock);
	if (conn != v->conn || v->closing || v->reconnecting || v->lost) {
		pthread_mutex_unlock(&v->lock);
		return;
	}
	if (v->lost_fn) {
		/* The caller reconnects (vmm_reconnect) when it sees fit. */
		vmm_conn_lost_fn fn = v->lost_fn;
		void *fn_opaque = v->lost_opaque;
		v->lost = true;
		pthread_mutex_unlock(&v->lock);
		sbx_err(MOD, "libvirt connection '%s' lost: %s", v->uri, why);
		fn(fn_opaque, why);
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

/* Our error func, lifecycle and close callbacks and keepalive on a fresh
 * connection `c` (closed on failure). */
static virConnectPtr vmm_conn_setup(struct vmm *v, virConnectPtr c, int *lifecycle_id,
				    bool *close_cb)
{
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
	/* Drivers without keepalive (test:///) say so; remote ones all have it. */
	if (virConnectSetKeepAlive(c, VMM_KEEPALIVE_INTERVAL_S, VMM_KEEPALIVE_COUNT) != 0)
		sbx_debug(MOD, "no keepalive on '%s'", v->uri);
	return c;
}

virConnectPtr vmm_conn_open(struct vmm *v, int *lifecycle_id, bool *close_cb)
{
	virConnectPtr c = virConnectOpen(v->uri);
	return c ? vmm_conn_setup(v, c, lifecycle_id, close_cb) : NULL;
}

/* Swap a set-up connection in; the old one is kept until vmm_free. */
static void vmm_conn_swap(struct vmm *v, virConnectPtr c, int id, bool ccb)
{
	pthread_mutex_lock(&v->lock);
	if (v->n_old < VMM_OLD_CONNS)
		v->old_conns[v->n_old++] = v->conn;
	/* else: leak the dead connection rather than free it under a thread
	 * that may still use it */
	v->conn = c;
	v->lifecycle_id = id;
	v->lifecycle_freed = false;
	v->close_cb = ccb;
	v->lost = false;
	v->gen++;
	pthread_mutex_unlock(&v->lock);
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
		/* bounded: a connect or TLS handshake on a link that went
		 * silent mid-way can wait minutes, and this loop must try again */
		c = vmm_open_bounded(v, VMM_REOPEN_BOUND_MS);
		if (c)
			c = vmm_conn_setup(v, c, &id, &ccb);
		if (c) {
			vmm_conn_swap(v, c, id, ccb);
			sbx_info(MOD, "reconnected to '%s' after %lld ms (%u tries)", v->uri,
				 (long long)(sbx_mono_ms() - t0), tries);
			vmm_check_vms(v);
			break;
		}
		sbx_warn(MOD, "reconnect to '%s': try %u failed after %lld ms: %s; next in %lld ms",
			 v->uri, tries, (long long)(sbx_mono_ms() - t0), vmm_lv_msg(),
			 (long long)delay);
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

void vmm_set_conn_lost_cb(struct vmm *v, vmm_conn_lost_fn fn, void *opaque)
{
	pthread_mutex_lock(&v->lock);
	v->lost_fn = fn;
	v->lost_opaque = opaque;
	pthread_mutex_unlock(&v->lock);
}

unsigned vmm_conn_gen(struct vmm *v)
{
	pthread_mutex_lock(&v->lock);
	unsigned gen = v->gen;
	pthread_mutex_unlock(&v->lock);
	return gen;
}

bool vmm_connected(struct vmm *v)
{
	pthread_mutex_lock(&v->lock);
	virConnectPtr c = v->conn;
	bool down = v->lost || v->reconnecting;
	pthread_mutex_unlock(&v->lock);
	/* virConnectIsAlive asks no one: it says whether the client still
	 * holds an open socket that keepalive has not given up on. */
	return !down && c && virConnectIsAlive(c) == 1;
}

void vmm_conn_check(struct vmm *v)
{
	pthread_mutex_lock(&v->lock);
	virConnectPtr c = v->conn;
	bool quiet = c && !v->lost && !v->reconnecting && !v->closing;
	pthread_mutex_unlock(&v->lock);
	/* the connection stays ours until vmm_free (vmm_conn), and the close
	 * callback's checks make a late one from libvirt a no-op */
	if (quiet && virConnectIsAlive(c) == 0) {
		sbx_warn(MOD, "libvirt connection '%s' is closed and libvirt did not say so",
			 v->uri);
		vmm_close_cb(c, VIR_CONNECT_CLOSE_REASON_ERROR, v);
	}
}

/* virConnectOpen on a thread of its own, so a host that never answers a
 * SYN cannot hold vmm_reconnect past its bound. Shared by the two until
 * the last one lets go. */
struct vmm_opener {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	char *uri;
	virConnectPtr conn;
	bool done;
	bool abandoned; /* the waiter left: the opener closes and frees */
};

static void vmm_opener_free(struct vmm_opener *o)
{
	pthread_cond_destroy(&o->cond);
	pthread_mutex_destroy(&o->lock);
	free(o->uri);
	free(o);
}

static void *vmm_opener_main(void *arg)
{
	struct vmm_opener *o = arg;
	virConnectPtr c = virConnectOpen(o->uri);

	pthread_mutex_lock(&o->lock);
	bool abandoned = o->abandoned;
	o->conn = c;
	o->done = true;
	pthread_cond_broadcast(&o->cond);
	pthread_mutex_unlock(&o->lock);
	if (abandoned) {
		if (c)
			virConnectClose(c);
		vmm_opener_free(o);
	}
	return NULL;
}

/* A connection to v->uri within timeout_ms, or NULL. */
static virConnectPtr vmm_open_bounded(struct vmm *v, int timeout_ms)
{
	struct vmm_opener *o = calloc(1, sizeof(*o));
	pthread_t t;

	if (!o || !(o->uri = strdup(v->uri))) {
		free(o);
		return NULL;
	}
	pthread_mutex_init(&o->lock, NULL);
	pthread_cond_init(&o->cond, NULL);
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	int r = pthread_create(&t, &attr, vmm_opener_main, o);
	pthread_attr_destroy(&attr);
	if (r != 0) {
		vmm_opener_free(o);
		return NULL;
	}
	struct timespec ts = sbx_timespec_in(CLOCK_REALTIME, timeout_ms);
	pthread_mutex_lock(&o->lock);
	while (!o->done)
		if (pthread_cond_timedwait(&o->cond, &o->lock, &ts) != 0)
			break;
	bool done = o->done;
	virConnectPtr c = o->conn;
	if (!done)
		o->abandoned = true;
	pthread_mutex_unlock(&o->lock);
	if (!done)
		return NULL;
	vmm_opener_free(o);
	return c;
}

int vmm_reconnect(struct vmm *v, int timeout_ms, struct sbx_error *err)
{
	int64_t t0 = sbx_mono_ms();

	/* A healthy connection stays: replacing it would leave its lifecycle
	 * callback registered beside the new one's. */
	if (vmm_connected(v))
		return 0;
	pthread_mutex_lock(&v->lock);
	bool busy = v->reconnecting || v->closing;
	if (!busy)
		v->reconnecting = true;
	pthread_mutex_unlock(&v->lock);
	if (busy)
		return sbx_error_set(
		    err, SBX_E_SERVICE_UNAVAILABLE, NULL,
		    "the hypervisor connection is being reopened; try again later");
	virConnectPtr c = vmm_open_bounded(v, timeout_ms > 0 ? timeout_ms : 1);
	int id = -1;
	bool ccb = false;
	if (c)
		c = vmm_conn_setup(v, c, &id, &ccb);
	if (c)
		vmm_conn_swap(v, c, id, ccb);
	pthread_mutex_lock(&v->lock);
	v->reconnecting = false;
	pthread_cond_broadcast(&v->cond);
	pthread_mutex_unlock(&v->lock);
	if (!c) {
		sbx_warn(MOD, "reconnect to '%s' failed after %lld ms", v->uri,
			 (long long)(sbx_mono_ms() - t0));
		return sbx_error_set(err, SBX_E_SERVICE_UNAVAILABLE, NULL,
				     "the hypervisor is unreachable; try again later");
	}
	sbx_info(MOD, "reconnected to '%s' in %lld ms", v->uri, (long long)(sbx_mono_ms() - t0));
	vmm_check_vms(v);
	return 0;
}

/* ------------------------------------------------------------ URIs */

/* Split "driver[+transport]://[host][/path][?query]": the transport (""
 * when none) and whether a host part is present. false when `uri` is not
 * of that shape. */
static bool vmm_uri_parse(const char *uri, char *transport, size_t tlen, bool *has_host,
			  const char **query)
{
	if (!uri)
		return false;
	const char *sep = strstr(uri, "://");
	if (!sep || sep == uri)
		return false;
	const char *plus = memchr(uri, '+', (size_t)(sep - uri));
	size_t n = plus ? (size_t)(sep - plus - 1) : 0;
	if (n >= tlen)
		return false;
	memcpy(transport, plus ? plus + 1 : "", n);
	transport[n] = '\0';
	const char *host = sep + 3;
	*has_host = *host && *host != '/' && *host != '?';
	*query = strchr(host, '?');
	return true;
}

/* No host part and no network transport: this machine's hypervisor. */
static bool vmm_uri_parts_local(const char *transport, bool has_host)
{
	return !has_host && (!transport[0] || strcmp(transport, "unix") == 0);
}

bool vmm_uri_is_local(const char *uri)
{
	char tr[16];
	bool host;
	const char *q;
	return vmm_uri_parse(uri, tr, sizeof(tr), &host, &q) && vmm_uri_parts_local(tr, host);
}

/* Does the query string carry `key`=`val` as one parameter? */
static bool vmm_query_has(const char *q, const char *kv)
{
	size_t n = strlen(kv);
	for (const char *p = q; p && *p; p = strchr(p, '&')) {
		p++; /* skip '?' or '&' */
		if (strncmp(p, kv, n) == 0 && (p[n] == '\0' || p[n] == '&'))
			return true;
	}
	return false;
}

bool vmm_uri_is_plaintext(const char *uri)
{
	char tr[16];
	bool host;
	const char *q;
	if (!vmm_uri_parse(uri, tr, sizeof(tr), &host, &q))
		return true; /* not understood: not vouched for either */
	if (vmm_uri_parts_local(tr, host))
		return false;
	/* libvirt's default remote transport is tls. */
	if (!tr[0] || strcmp(tr, "tls") == 0)
		return vmm_query_has(q, "no_verify=1");
	return strcmp(tr, "ssh") != 0 && strcmp(tr, "libssh") != 0 && strcmp(tr, "libssh2") != 0;
}
