/* api/metrics.c: Prometheus text exposition of the daemon's state on the
 * operator's own address (`metrics_listen`, off by default; never the
 * tenants' port): HTTP requests by route and status and their latency,
 * guests by size and state, the counters and histograms of util/metrics.c
 * (channel violations, send deadlines, boots, execs, store transactions),
 * the ledger's totals and the HTTP connections in use.
 *
 * Request figures are counted in the tenant server's completion callback
 * (api_metrics_request); every cell is an atomic, so no lock is taken on
 * the request path. The scrape runs on the metrics server's own thread.
 */
#include <arpa/inet.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "http-priv.h"

#define MOD "api"

/* The statuses the API answers with (docs/api.md); anything else is
 * counted as "other". */
static const unsigned statuses[] = {200, 201, 206, 400, 401, 402, 403, 404, 405, 409, 410,
				    413, 415, 416, 422, 429, 431, 500, 503, 507, 0};
#define N_STATUS SBX_ARRAY_SIZE(statuses)
/* One series per row of the route table (api/routes.c), named by its
 * metric; R_NONE's is "unknown". */
#define N_ROUTES R_COUNT

static struct {
	_Atomic uint64_t by_status[N_STATUS];
	_Atomic uint64_t bucket[SBX_HIST_BUCKETS];
	_Atomic uint64_t count, sum_us;
} routes[N_ROUTES];

/* The status the handler on this thread queued last (api_queue_response). */
static _Thread_local unsigned last_status;

/* Whether the request's Connection header lists the token "upgrade". */
static bool asks_upgrade(struct MHD_Connection *c)
{
	const char *v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONNECTION);

	while (v && *v) {
		v += strspn(v, " \t,");
		size_t n = strcspn(v, " \t,");
		if (n == 7 && strncasecmp(v, "upgrade", 7) == 0)
			return true;
		v += n;
	}
	return false;
}

enum MHD_Result api_queue_response(struct MHD_Connection *c, unsigned status,
				   struct MHD_Response *resp)
{
	last_status = status;
	/* Any answer but a 101 to a request that asked for an upgrade ends
	 * its connection: kept alive, libmicrohttpd held such a connection
	 * without telling the connection table it closed, whose receive
	 * deadline then shut down whatever connection reused the descriptor
	 * (another tenant's request, cut unanswered). A client can send the
	 * header on any route. */
	if (status != MHD_HTTP_SWITCHING_PROTOCOLS && asks_upgrade(c) &&
	    !MHD_get_response_header(resp, MHD_HTTP_HEADER_CONNECTION))
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
	return MHD_queue_response(c, status, resp);
}

unsigned api_metrics_take_status(void)
{
	unsigned s = last_status;

	last_status = 0;
	return s;
}

void api_metrics_request(int route, unsigned status, int64_t us)
{
	size_t si = N_STATUS - 1;

	if (route < 0 || route >= (int)N_ROUTES)
		route = R_NONE;
	for (size_t i = 0; i + 1 < N_STATUS; i++)
		if (statuses[i] == status)
			si = i;
	atomic_fetch_add_explicit(&routes[route].by_status[si], 1, memory_order_relaxed);
	if (us < 0)
		us = 0;
	size_t b = sbx_hist_bucket_of(us);
	if (b < SBX_HIST_BUCKETS)
		atomic_fetch_add_explicit(&routes[route].bucket[b], 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&routes[route].count, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&routes[route].sum_us, (uint64_t)us, memory_order_relaxed);
}

/* -------------------------------------------------------------- render */

int api_metrics_render_requests(struct sbx_buf *b)
{
	int r = 0;

	r |= sbx_buf_printf(b, "# HELP sandboxd_http_requests_total Requests answered, by route "
			       "and status.\n# TYPE sandboxd_http_requests_total counter\n");
	for (size_t i = 0; i < N_ROUTES; i++)
		for (size_t s = 0; s < N_STATUS; s++) {
			uint64_t n = atomic_load(&routes[i].by_status[s]);
			char st[16];

			if (!n)
				continue;
			if (statuses[s])
				snprintf(st, sizeof st, "%u", statuses[s]);
			else
				snprintf(st, sizeof st, "other");
			r |= sbx_buf_printf(
			    b, "sandboxd_http_requests_total{route=\"%s\",status=\"%s\"} %llu\n",
			    api_route_get((enum route)i)->metric, st, (unsigned long long)n);
		}
	r |= sbx_buf_printf(b, "# HELP sandboxd_http_request_duration_seconds Request received "
			       "to answer done, by route.\n"
			       "# TYPE sandboxd_http_request_duration_seconds histogram\n");
	for (size_t i = 0; i < N_ROUTES; i++) {
		uint64_t bucket[SBX_HIST_BUCKETS], count = atomic_load(&routes[i].count);
		char labels[64];

		if (!count)
			continue;
		for (size_t k = 0; k < SBX_HIST_BUCKETS; k++)
			bucket[k] = atomic_load(&routes[i].bucket[k]);
		snprintf(labels, sizeof labels, "route=\"%s\"",
			 api_route_get((enum route)i)->metric);
		r |= sbx_hist_render(b, "sandboxd_http_request_duration_seconds", labels, bucket,
				     count, atomic_load(&routes[i].sum_us));
	}
	return r ? -1 : 0;
}

/* Per host, for operators only (docs/hosts.md "What operators see"):
 * tenants get capacity in aggregate from /v1/limits. */
static int render_hosts(struct sbx_buf *b, struct sandbox_svc *svc)
{
	/* two series per host each: used and total (the pool: ready, booting) */
	static const struct {
		const char *name, *help, *first, *second;
	} pairs[] = {
	    {"sandboxd_host_guests",
	     "Guests placed on the host (live, booting, pooled) and its max_guests.", "of=\"used\"",
	     "of=\"total\""},
	    {"sandboxd_host_memory_mib", "Guest memory placed on the host and what it takes.",
	     "of=\"used\"", "of=\"total\""},
	    {"sandboxd_host_disk_gib",
	     "Guest disk placed on the host and its disk_gib (0: the free-space rule).",
	     "of=\"used\"", "of=\"total\""},
	    {"sandboxd_host_pool_guests", "The host's warm pool.", "state=\"ready\"",
	     "state=\"booting\""},
	};
	struct sandbox_host_view v[SANDBOX_MAX_HOSTS];
	size_t n = sandbox_hosts_view(svc, v, SANDBOX_MAX_HOSTS);
	int r = 0;

	r |= sbx_buf_printf(
	    b, "# HELP sandboxd_host_up 1 when the host is up (state: up, draining or down).\n"
	       "# TYPE sandboxd_host_up gauge\n");
	for (size_t i = 0; i < n; i++)
		r |= sbx_buf_printf(b, "sandboxd_host_up{host=\"%s\",uri=\"%s\",state=\"%s\"} %d\n",
				    v[i].name, v[i].uri, v[i].state,
				    strcmp(v[i].state, "down") != 0);
	for (size_t k = 0; k < SBX_ARRAY_SIZE(pairs); k++) {
		r |= sbx_buf_printf(b, "# HELP %s %s\n# TYPE %s gauge\n", pairs[k].name,
				    pairs[k].help, pairs[k].name);
		for (size_t i = 0; i < n; i++) {
			unsigned long long x = 0, y = 0;

			switch (k) {
			case 0:
				x = (unsigned long long)v[i].guests;
				y = (unsigned long long)v[i].max_guests;
				break;
			case 1:
				x = v[i].memory_used_mib, y = v[i].memory_total_mib;
				break;
			case 2:
				x = v[i].disk_used_gib, y = v[i].disk_total_gib;
				break;
			default:
				x = (unsigned long long)v[i].pool_ready;
				y = (unsigned long long)v[i].pool_booting;
				break;
			}
			r |= sbx_buf_printf(b, "%s{host=\"%s\",%s} %llu\n%s{host=\"%s\",%s} %llu\n",
					    pairs[k].name, v[i].name, pairs[k].first, x,
					    pairs[k].name, v[i].name, pairs[k].second, y);
		}
	}
	r |= sbx_buf_printf(b, "# HELP sandboxd_host_last_seen_seconds Since the host last "
			       "answered a health check.\n"
			       "# TYPE sandboxd_host_last_seen_seconds gauge\n");
	for (size_t i = 0; i < n; i++)
		r |= sbx_buf_printf(b, "sandboxd_host_last_seen_seconds{host=\"%s\"} %.3f\n",
				    v[i].name, (double)v[i].last_seen_ms_ago / 1000.0);
	return r ? -1 : 0;
}

static int render_service(struct sbx_buf *b, struct api_server *srv)
{
	struct sandbox_metrics m;
	const union MHD_DaemonInfo *info;
	int r = 0;

	sandbox_metrics_get(srv->svc, &m);
	r |= sbx_buf_printf(b, "# HELP sandboxd_guests Guests of this node, by size and state.\n"
			       "# TYPE sandboxd_guests gauge\n");
	for (size_t i = 0; i < m.n_sizes; i++) {
		r |= sbx_buf_printf(b, "sandboxd_guests{size=\"%s\",state=\"running\"} %d\n",
				    m.sizes[i].size, m.sizes[i].running);
		r |= sbx_buf_printf(b, "sandboxd_guests{size=\"%s\",state=\"pooled\"} %d\n",
				    m.sizes[i].size, m.sizes[i].pooled);
	}
	r |= sbx_buf_printf(b,
			    "# HELP sandboxd_guests_booting Boots in flight (customers and "
			    "executions; the warm pool).\n# TYPE sandboxd_guests_booting gauge\n"
			    "sandboxd_guests_booting{for=\"customer\"} %d\n"
			    "sandboxd_guests_booting{for=\"pool\"} %d\n",
			    m.booting, m.pool_booting);
	r |= render_hosts(b, srv->svc);
	r |= sbx_buf_printf(b,
			    "# HELP sandboxd_output_budget_held_bytes Exec output budget held "
			    "now.\n# TYPE sandboxd_output_budget_held_bytes gauge\n"
			    "sandboxd_output_budget_held_bytes %llu\n",
			    (unsigned long long)m.output_held);
	if (m.ledger_ok)
		r |= sbx_buf_printf(
		    b,
		    "# HELP sandboxd_ledger_micro_usd The ledger's running totals over every "
		    "account, by kind (micro-USD).\n# TYPE sandboxd_ledger_micro_usd gauge\n"
		    "sandboxd_ledger_micro_usd{kind=\"credit\"} %lld\n"
		    "sandboxd_ledger_micro_usd{kind=\"hold\"} %lld\n"
		    "sandboxd_ledger_micro_usd{kind=\"release\"} %lld\n"
		    "sandboxd_ledger_micro_usd{kind=\"charge\"} %lld\n"
		    "# HELP sandboxd_accounts Accounts in the ledger.\n"
		    "# TYPE sandboxd_accounts gauge\nsandboxd_accounts %lld\n",
		    (long long)m.credits, (long long)m.holds, (long long)m.releases,
		    (long long)m.charges, (long long)m.accounts);
	info = MHD_get_daemon_info(srv->daemon, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
	r |=
	    sbx_buf_printf(b,
			   "# HELP sandboxd_http_connections Tenant connections open now "
			   "(limit http_max_connections).\n# TYPE sandboxd_http_connections gauge\n"
			   "sandboxd_http_connections %u\n",
			   info ? info->num_connections : 0);
	return r ? -1 : 0;
}

/* ------------------------------------------------------------- server */

struct api_metrics {
	struct MHD_Daemon *daemon;
	struct api_server *srv;
};

static enum MHD_Result metrics_handler(void *cls, struct MHD_Connection *c, const char *url,
				       const char *method, const char *version,
				       const char *upload_data, size_t *upload_data_size,
				       void **con_cls)
{
	struct api_metrics *m = cls;
	struct MHD_Response *resp;
	struct sbx_buf b;
	enum MHD_Result ret;
	unsigned status = 200;

	if (!*con_cls) { /* headers only so far */
		*con_cls = m;
		return MHD_YES;
	}
	if (*upload_data_size) {
		*upload_data_size = 0; /* no body wanted: drop it */
		return MHD_YES;
	}
	sbx_buf_init(&b, 4u * 1024 * 1024);
	if (strcmp(url, "/metrics") != 0 || strcmp(method, "GET") != 0) {
		status = 404;
		sbx_buf_printf(&b, "only GET /metrics here\n");
	} else if (sbx_metrics_render(&b) < 0 || api_metrics_render_requests(&b) < 0 ||
		   render_service(&b, m->srv) < 0) {
		status = 500;
	}
	resp = MHD_create_response_from_buffer(b.len, b.data ? b.data : (char *)"",
					       MHD_RESPMEM_MUST_COPY);
	sbx_buf_release(&b);
	if (!resp)
		return MHD_NO;
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
				"text/plain; version=0.0.4; charset=utf-8");
	ret = MHD_queue_response(c, status, resp);
	MHD_destroy_response(resp);
	return ret;
}

struct api_metrics *api_metrics_start(struct api_server *srv, const char *listen,
				      struct sbx_error *err)
{
	struct sockaddr_in sa;
	struct api_metrics *m;

	if (api_listen_parse(listen, &sa, err) < 0) {
		if (err)
			snprintf(err->param, sizeof err->param, "metrics_listen");
		return NULL;
	}
	m = calloc(1, sizeof(*m));
	if (!m) {
		sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
		return NULL;
	}
	m->srv = srv;
	m->daemon = MHD_start_daemon(
	    MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, ntohs(sa.sin_port), NULL, NULL,
	    metrics_handler, m, MHD_OPTION_SOCK_ADDR, (const struct sockaddr *)&sa,
	    MHD_OPTION_CONNECTION_LIMIT, 16u, MHD_OPTION_CONNECTION_TIMEOUT, 10u, MHD_OPTION_END);
	if (!m->daemon) {
		free(m);
		sbx_error_set(err, SBX_E_INTERNAL, "metrics_listen", "cannot listen on '%s'",
			      listen);
		return NULL;
	}
	sbx_info(MOD, "metrics on http://%s/metrics", listen);
	return m;
}

unsigned api_metrics_port(const struct api_metrics *m)
{
	const union MHD_DaemonInfo *info =
	    MHD_get_daemon_info(m->daemon, MHD_DAEMON_INFO_BIND_PORT);

	return info ? info->port : 0;
}

void api_metrics_stop(struct api_metrics *m)
{
	if (!m)
		return;
	MHD_stop_daemon(m->daemon);
	free(m);
}
