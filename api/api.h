/* api: the HTTP front of sandboxd. The only module that knows HTTP
 * (libmicrohttpd), JSON (json-c) and status codes; it decodes requests into
 * the plain structs of sandbox/sandbox.h, calls sandbox/, and encodes the
 * replies (API.md is the contract, docs/api.md the choices made here).
 *
 * What api/main.c needs: the server's lifecycle, the config-file loader and
 * the money parser of the command line.
 */
#ifndef SBX_API_H
#define SBX_API_H

#include <stddef.h>
#include <stdint.h>

#include "../sandbox/sandbox.h"
#include "../util/util.h"

/* ------------------------------------------------------------- the server */

struct api_server;

/* Start the HTTP server on sandbox_svc_config(svc)->listen ("HOST:PORT",
 * IPv4 dotted quad or "localhost"; port 0 binds a free port), with an
 * epoll thread pool of cfg->http_threads workers. `svc` is borrowed and must
 * outlive the server. Returns NULL with SBX_E_INVALID_REQUEST (param
 * "listen") for a bad address, SBX_E_INTERNAL when the socket cannot be
 * bound. */
struct api_server *api_server_start(struct sandbox_svc *svc, struct sbx_error *err);

/* The TCP port the server is bound to (the real one when 0 was asked). */
unsigned api_server_port(const struct api_server *srv);

/* Stop accepting new connections (the listening socket is closed);
 * requests already received are still answered. Idempotent. */
void api_server_quiesce(struct api_server *srv);

/* Wait until no request is in flight (received and not yet answered,
 * including suspended execs), or until `timeout_ms` passed.
 * Returns the number of requests still in flight (0 = idle). */
int api_server_drain(struct api_server *srv, int64_t timeout_ms);

/* Answer every still-suspended exec with 503 service_unavailable, stop the
 * server's threads, close every connection and free. NULL is a no-op.
 * Execs still running in sandbox/ complete into the void afterwards (their
 * callbacks stay safe to call until sandbox_svc_free). */
void api_server_stop(struct api_server *srv);

/* ------------------------------------------------------------- metrics */

struct api_metrics;
/* Serve GET /metrics (Prometheus text, docs/operations.md) on `listen`
 * ("HOST:PORT", the operator's address: never the tenants' port) for the
 * tenant server `srv` (borrowed; stop the metrics first). NULL with err
 * (param "metrics_listen"). */
struct api_metrics *api_metrics_start(struct api_server *srv, const char *listen,
				      struct sbx_error *err);
/* The bound port (the real one when 0 was asked). */
unsigned api_metrics_port(const struct api_metrics *m);
/* Stop and free; NULL is a no-op. */
void api_metrics_stop(struct api_metrics *m);

/* ------------------------------------------------------------ the config */

/* Apply the JSON config file at `path` over `cfg` (normally filled by
 * sandbox_config_defaults first). Every key of docs/configuration.md is
 * accepted; a key absent from the file keeps its value in `cfg`. Errors
 * (SBX_E_INVALID_REQUEST, `param` naming the key as "sizes.small.vcpus"):
 * unreadable file (param "config"), not JSON, unknown key, wrong type, out
 * of range, a string longer than its field. On error `cfg` may be partly
 * written. */
int api_config_load(const char *path, struct sandbox_config *cfg, struct sbx_error *err);

/* ------------------------------------------------------------------ money */

/* Parse a decimal US-dollar amount ("12", "0.5", "3.141592") into
 * micro-USD using integers only: digits, optionally '.' and 1..6 more
 * digits; no sign, no exponent, no spaces. 0, or -1 with
 * SBX_E_INVALID_REQUEST when malformed or over INT64_MAX micro-USD. */
int api_usd_parse(const char *s, int64_t *micro, struct sbx_error *err);

/* Format micro-USD as a decimal string with 6 places ("0.090000",
 * "-1.250000") into buf. */
void api_usd_format(int64_t micro, char buf[static 32]);

#endif
