/* api/http_terminal_reg.c: GET /v1/sandboxes/{id}/terminal, the route
 * (docs/api.md "Terminal"), the registry of terminals and the callbacks
 * of their shells' execs; the thread is http_terminal.c's, the object and
 * the lock order api/terminal-priv.h's.
 *
 * A new terminal: the handler checks the upgrade request, takes the
 * terminal's place in the per-sandbox and per-account counts, gives it an
 * id, starts the exec user's login shell on a pseudo-terminal in the
 * guest (a streamed exec with pty_rows/pty_cols, protocol v5) and answers
 * 101. ?attach=<id>: the handler claims the detached terminal of that id
 * (same account and sandbox: 404 otherwise; 409 while a client has it)
 * and answers 101; the socket goes to the terminal's thread.
 *
 * A terminal struct lives until its thread, its exec's done and its
 * requests are through (refs); it counts against the limits until then,
 * detached or not.
 *
 * Locking: reg.lock, then t->lock (term_claim only); never across
 * socket I/O or a sandbox/ call but sandbox_output_shrink (a leaf lock);
 * api/terminal-priv.h. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "terminal-priv.h"

#define MOD "api"

#define TERM_HOST_MAX	  1024 /* terminals on this host, whatever the config */
#define TERM_DEFAULT_ROWS 24
#define TERM_DEFAULT_COLS 80

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct term *head;
	unsigned n;	  /* terminals counted (until freed) */
	unsigned threads; /* terminals' threads alive */
	bool stopping;
} reg = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

void term_wake(struct term *t)
{
	uint64_t one = 1;

	if (write(t->efd, &one, sizeof one) < 0) {
		/* the counter is full: it is awake already */
	}
}

/* Count t against its sandbox's and account's limits. 0, or -1 with 429. */
static int reg_add(struct term *t, const struct sandbox_config *cfg, struct sbx_error *err)
{
	int per_sb = 0, per_acct = 0;

	pthread_mutex_lock(&reg.lock);
	for (struct term *o = reg.head; o; o = o->next) {
		if (strcmp(o->account_id, t->account_id) != 0)
			continue;
		per_acct++;
		if (strcmp(o->sandbox_id, t->sandbox_id) == 0)
			per_sb++;
	}
	if (reg.stopping || reg.n >= TERM_HOST_MAX || per_sb >= cfg->max_terminals_per_sandbox ||
	    per_acct >= cfg->max_terminals_per_account) {
		bool sb = per_sb >= cfg->max_terminals_per_sandbox;
		bool acct = per_acct >= cfg->max_terminals_per_account;
		bool stopping = reg.stopping;

		pthread_mutex_unlock(&reg.lock);
		if (stopping)
			return sbx_error_set(err, SBX_E_SERVICE_UNAVAILABLE, NULL,
					     "the server is stopping");
		if (!sb && !acct)
			sbx_error_set(
			    err, SBX_E_CONCURRENCY_LIMIT, NULL,
			    "this server has %d terminals open (its limit); try again later",
			    TERM_HOST_MAX);
		else if (sb)
			sbx_error_set(err, SBX_E_CONCURRENCY_LIMIT, NULL,
				      "sandbox '%s' has %d terminals open (the limit); close one",
				      t->sandbox_id, per_sb);
		else
			sbx_error_set(err, SBX_E_CONCURRENCY_LIMIT, NULL,
				      "this account has %d terminals open (the limit); close one",
				      per_acct);
		err->retry_after_s = 1;
		return -1;
	}
	t->next = reg.head;
	if (reg.head)
		reg.head->prev = t;
	reg.head = t;
	reg.n++;
	pthread_mutex_unlock(&reg.lock);
	return 0;
}

void term_unref(struct term *t)
{
	bool last;

	pthread_mutex_lock(&t->lock);
	last = --t->refs == 0;
	pthread_mutex_unlock(&t->lock);
	if (!last)
		return;
	pthread_mutex_lock(&reg.lock);
	if (t->prev)
		t->prev->next = t->next;
	else
		reg.head = t->next;
	if (t->next)
		t->next->prev = t->prev;
	reg.n--;
	pthread_cond_broadcast(&reg.cond);
	pthread_mutex_unlock(&reg.lock);
	close(t->efd);
	sandbox_output_release(&t->hold);
	free(t->out);
	free(t->text);
	free(t->hand_in);
	pthread_mutex_destroy(&t->lock);
	free(t);
}

void api_terminals_stop(void)
{
	int64_t deadline = sbx_mono_ms() + 5000;

	pthread_mutex_lock(&reg.lock);
	reg.stopping = true;
	for (struct term *t = reg.head; t; t = t->next)
		term_wake(t);
	/* every thread is gone before the server (and the service its
	 * terminals call) is: past 5 s their sockets are shut, which ends
	 * any wait on the client, and the wait goes on */
	for (;;) {
		if (reg.threads == 0)
			break;
		if (sbx_mono_ms() >= deadline) {
			for (struct term *t = reg.head; t; t = t->next)
				if (t->reg_sock >= 0)
					shutdown(t->reg_sock, SHUT_RDWR);
			deadline = INT64_MAX;
		}
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 100 * 1000000L;
		ts.tv_sec += ts.tv_nsec / 1000000000L;
		ts.tv_nsec %= 1000000000L;
		pthread_cond_timedwait(&reg.cond, &reg.lock, &ts);
	}
	pthread_mutex_unlock(&reg.lock);
}

void api_terminals_start(void)
{
	pthread_mutex_lock(&reg.lock);
	reg.stopping = false;
	pthread_mutex_unlock(&reg.lock);
}

bool term_reg_stopping(void)
{
	bool s;

	pthread_mutex_lock(&reg.lock);
	s = reg.stopping;
	pthread_mutex_unlock(&reg.lock);
	return s;
}

void term_reg_sock(struct term *t, int sock)
{
	pthread_mutex_lock(&reg.lock);
	t->reg_sock = sock;
	pthread_mutex_unlock(&reg.lock);
}

void term_reg_thread_enter(void)
{
	pthread_mutex_lock(&reg.lock);
	reg.threads++;
	pthread_mutex_unlock(&reg.lock);
}

void term_reg_thread_exit(void)
{
	pthread_mutex_lock(&reg.lock);
	reg.threads--;
	pthread_cond_broadcast(&reg.cond);
	pthread_mutex_unlock(&reg.lock);
}

/* Claim terminal `id` of this account's sandbox for a reattach: q gets a
 * reference and the claim. 0, or -1 with 404 (no such terminal, another
 * account's or sandbox's, or ended) or 409 (a client has it). */
static int term_claim(const char *account_id, const char *sandbox_id, const char *id,
		      struct term_req *q, struct sbx_error *err)
{
	struct term *t;
	int rc = -1;

	pthread_mutex_lock(&reg.lock);
	for (t = reg.head; t; t = t->next)
		if (strcmp(t->id, id) == 0 && strcmp(t->account_id, account_id) == 0 &&
		    strcmp(t->sandbox_id, sandbox_id) == 0)
			break;
	if (t) {
		pthread_mutex_lock(&t->lock);
		if (t->refs > 0 && !t->ended && t->client == TERM_DETACHED) {
			t->client = TERM_CLAIMED;
			q->seq = ++t->claim_seq;
			q->t = t;
			t->refs++; /* the request's */
			rc = 0;
		} else if (t->refs > 0 && !t->ended) {
			rc = -2;
		}
		pthread_mutex_unlock(&t->lock);
	}
	pthread_mutex_unlock(&reg.lock);
	if (rc == -2)
		return sbx_error_set(err, SBX_E_TERMINAL_ATTACHED, "attach",
				     "terminal '%s' has a client; close its WebSocket first", id);
	if (rc < 0)
		return sbx_error_set(err, SBX_E_NOT_FOUND, "attach",
				     "no terminal '%s' on sandbox '%s' (it ended, or its "
				     "reconnect grace is over); open a new one",
				     id, sandbox_id);
	return 0;
}

/* ------------------------------------------------------ exec callbacks */

/* The shell's output (the channel's thread): keep it; PAUSE past the mark. */
/* Keep len more bytes of output (t->lock held): false out of memory. */
static bool out_append(struct term *t, const void *data, size_t len)
{
	if (t->out_len + len > t->out_cap) {
		size_t cap = t->out_cap ? t->out_cap : 64 * 1024;
		uint8_t *p;

		while (cap < t->out_len + len)
			cap *= 2;
		p = realloc(t->out, cap);
		if (!p)
			return false;
		t->out = p;
		t->out_cap = cap;
	}
	memcpy(t->out + t->out_len, data, len);
	t->out_len += len;
	return true;
}

/* The shell's output (the channel's thread): keep it; PAUSE past the mark.
 * Detached, only the newest TERM_DETACHED_TAIL bytes are kept and the
 * guest is paused at that mark: the shell blocks until a client is back. */
static bool term_output(void *opaque, uint32_t exec_id, bool is_stderr, const void *data,
			size_t len)
{
	struct term *t = opaque;
	bool pause;
	/* what is kept for the client counts against its account's and the
	 * host's output budgets, like a streamed exec's (a guest ignoring
	 * PAUSE meets them; then the terminal ends as too slow) */
	bool paid = sandbox_output_charge(&t->hold, len, SANDBOX_OUTPUT_WITHIN, NULL, NULL) == 0;

	pthread_mutex_lock(&t->lock);
	if (t->detached) {
		/* nobody reads: the oldest bytes give way, never the terminal */
		if (paid && !out_append(t, data, len))
			sandbox_output_shrink(&t->hold, len);
		term_out_trim(t, TERM_DETACHED_TAIL);
		pause = t->out_len >= TERM_DETACHED_TAIL;
	} else {
		if (!paid || t->too_slow || t->out_len + len > TERM_OUT_HARD ||
		    !out_append(t, data, len)) {
			if (paid)
				sandbox_output_shrink(&t->hold, len);
			t->too_slow = true; /* dropped: the terminal ends */
		}
		pause = t->out_len >= TERM_OUT_PAUSE || t->too_slow;
	}
	if (pause)
		t->paused = true;
	pthread_mutex_unlock(&t->lock);
	term_wake(t);
	return pause;
}

static void term_ack(void *opaque)
{
	term_wake(opaque);
}

static void term_done(void *opaque, struct agentless_exec_result *res,
		      const struct sandbox_exec_receipt *receipt, const struct sbx_error *err)
{
	struct term *t = opaque;

	pthread_mutex_lock(&t->lock);
	t->done = true;
	if (res) {
		t->exit_code = res->exit_code;
	} else {
		t->failed = true;
		t->err = *err;
	}
	pthread_mutex_unlock(&t->lock);
	if (res)
		agentless_exec_result_release(res);
	term_wake(t);
	term_unref(t);
}

/* ---------------------------------------------------------------- route */

static bool header_has_token(struct MHD_Connection *c, const char *name, const char *token)
{
	const char *v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, name);
	size_t tl = strlen(token);

	while (v && *v) {
		size_t n;

		v += strspn(v, " \t,");
		n = strcspn(v, " \t,");
		if (n == tl && strncasecmp(v, token, tl) == 0)
			return true;
		v += n;
	}
	return false;
}

/* rows or cols from the query: default, or 1..AGENTLESS_PTY_DIM_MAX. */
static int dim_arg(struct MHD_Connection *c, const char *name, uint32_t def, uint32_t *out,
		   struct sbx_error *err)
{
	const char *v = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, name);
	char *end;
	unsigned long n;

	*out = def;
	if (!v)
		return 0;
	errno = 0;
	n = strtoul(v, &end, 10);
	if (!*v || *end || errno || v[0] < '0' || v[0] > '9' || n < 1 || n > AGENTLESS_PTY_DIM_MAX)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, name,
				     "%s must be an integer 1..%d", name, AGENTLESS_PTY_DIM_MAX);
	*out = (uint32_t)n;
	return 0;
}

/* The upgrade request's own headers: Sec-WebSocket-Accept into accept. */
static int upgrade_check(struct MHD_Connection *c, char accept[WS_ACCEPT_LEN + 1],
			 struct sbx_error *err)
{
	const char *ver = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Sec-WebSocket-Version");
	const char *key = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Sec-WebSocket-Key");

	if (!header_has_token(c, MHD_HTTP_HEADER_UPGRADE, "websocket") ||
	    !header_has_token(c, MHD_HTTP_HEADER_CONNECTION, "upgrade"))
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "Upgrade",
				     "a terminal is a WebSocket: send 'Connection: Upgrade' and "
				     "'Upgrade: websocket'");
	if (!ver || strcmp(ver, "13") != 0)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "Sec-WebSocket-Version",
				     "Sec-WebSocket-Version must be 13");
	if (ws_accept(key, accept) < 0)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "Sec-WebSocket-Key",
				     "Sec-WebSocket-Key must be 16 bytes in base64");
	return 0;
}

static struct term *term_new(struct req *r)
{
	struct term *t = calloc(1, sizeof(*t));

	if (!t)
		return NULL;
	t->text = malloc(TERM_TEXT_MAX);
	t->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (!t->text || t->efd < 0 || sbx_random_id("term_", 12, t->id, sizeof t->id) < 0) {
		if (t->efd >= 0)
			close(t->efd);
		free(t->text);
		free(t);
		return NULL;
	}
	pthread_mutex_init(&t->lock, NULL);
	t->svc = r->srv->svc;
	t->idle_ms = r->srv->cfg->terminal_idle_timeout_ms;
	t->grace_ms = r->srv->cfg->terminal_reconnect_grace_ms;
	t->sock = MHD_INVALID_SOCKET;
	t->reg_sock = -1;
	t->client = TERM_CLAIMED;
	snprintf(t->account_id, sizeof t->account_id, "%s", r->account_id);
	snprintf(t->sandbox_id, sizeof t->sandbox_id, "%s", r->id);
	return t;
}

/* An upgrade refused: the error, with 'Connection: close'. Answered on a
 * keep-alive connection, a request that asked for 'Connection: Upgrade'
 * left libmicrohttpd holding the connection without telling the
 * connection table it closed (api_conn_notify): 30 s on, the receive
 * deadline shut down whatever connection had reused its descriptor
 * (tests/unit/test_api_http.c). err NULL: out of memory. */
static enum MHD_Result term_refuse(struct req *r, const struct sbx_error *err)
{
	struct sbx_error oom;

	if (!err) {
		sbx_error_set(&oom, SBX_E_INTERNAL, NULL, "out of memory");
		err = &oom;
	}
	return api_reply_error_ex(r->conn, err, NULL, true);
}

/* The 101, its upgrade callback given q (r->term owns q from now). */
static enum MHD_Result term_switch(struct req *r, struct term_req *q, const char *accept,
				   MHD_UpgradeHandler upgraded)
{
	struct MHD_Response *resp;
	enum MHD_Result ret;

	r->term = q; /* a 101 never sent ends the claim (api_terminal_req_free) */
	resp = MHD_create_response_for_upgrade(upgraded, q);
	if (!resp)
		return term_refuse(r, NULL);
	MHD_add_response_header(resp, MHD_HTTP_HEADER_UPGRADE, "websocket");
	MHD_add_response_header(resp, "Sec-WebSocket-Accept", accept);
	MHD_add_response_header(resp, "X-Terminal-Id", q->t->id);
	/* a browser's offer (http_wsauth.c): answered with this one only,
	 * never with its bearer.<key> entry */
	if (api_ws_protocol_offered(
		MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Sec-WebSocket-Protocol"),
		API_WS_PROTOCOL))
		MHD_add_response_header(resp, "Sec-WebSocket-Protocol", API_WS_PROTOCOL);
	ret = MHD_queue_response(r->conn, MHD_HTTP_SWITCHING_PROTOCOLS, resp);
	MHD_destroy_response(resp);
	return ret;
}

/* ?attach=<id>: the detached terminal gets this connection. */
static enum MHD_Result term_attach(struct req *r, const char *id, const char *accept)
{
	const char *qr = MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "rows");
	const char *qc = MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "cols");
	struct term_req *q = calloc(1, sizeof(*q));
	struct sbx_error err;
	uint32_t rows, cols;

	sbx_error_clear(&err);
	if (!q)
		return term_refuse(r, NULL);
	q->attach = true;
	if (dim_arg(r->conn, "rows", TERM_DEFAULT_ROWS, &rows, &err) < 0 ||
	    dim_arg(r->conn, "cols", TERM_DEFAULT_COLS, &cols, &err) < 0 ||
	    term_claim(r->account_id, r->id, id, q, &err) < 0) {
		free(q);
		return term_refuse(r, &err);
	}
	/* the new client's window, when it said it */
	if (qr && qc)
		sandbox_pty_resize(q->t->svc, q->t->sandbox_id, q->t->exec_id, rows, cols);
	return term_switch(r, q, accept, term_reattached);
}

enum MHD_Result api_terminal_handle(struct req *r)
{
	static const char login[] = "exec \"$SHELL\" -l"; /* ignored by the guest */
	const char *attach = MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "attach");
	char accept[WS_ACCEPT_LEN + 1];
	struct sbx_error err;
	uint32_t rows, cols;
	struct term_req *q;
	struct term *t;

	sbx_error_clear(&err);
	if (upgrade_check(r->conn, accept, &err) < 0)
		return term_refuse(r, &err);
	if (attach)
		return term_attach(r, attach, accept);
	if (dim_arg(r->conn, "rows", TERM_DEFAULT_ROWS, &rows, &err) < 0 ||
	    dim_arg(r->conn, "cols", TERM_DEFAULT_COLS, &cols, &err) < 0)
		return term_refuse(r, &err);
	q = calloc(1, sizeof(*q));
	t = q ? term_new(r) : NULL;
	if (!t) {
		free(q);
		return term_refuse(r, NULL);
	}
	t->refs = 1; /* the request's (api_terminal_req_free) */
	q->t = t;
	q->seq = t->claim_seq = 1;
	if (reg_add(t, r->srv->cfg, &err) < 0) {
		close(t->efd);
		free(t->text);
		pthread_mutex_destroy(&t->lock);
		free(t);
		free(q);
		return term_refuse(r, &err);
	}

	struct sandbox_exec_req req = {
	    .command = login,
	    .command_len = sizeof login - 1,
	    .on_output = term_output,
	    .pty_rows = rows,
	    .pty_cols = cols,
	    .on_pty_ack = term_ack,
	    .exec_id = &t->exec_id,
	    .hold = &t->hold,
	};
	t->refs++; /* the exec's, dropped by term_done */
	if (sandbox_exec_start(t->svc, t->account_id, t->sandbox_id, &req, term_done, t, &err) <
	    0) {
		t->refs--;
		term_unref(t);
		free(q);
		return term_refuse(r, &err);
	}
	return term_switch(r, q, accept, term_upgraded);
}

void api_terminal_req_free(struct term_req *q)
{
	struct term *t;
	bool upgraded, claim;

	if (!q)
		return;
	t = q->t;
	pthread_mutex_lock(&t->lock);
	upgraded = q->upgraded;
	claim = !upgraded && t->client == TERM_CLAIMED && t->claim_seq == q->seq;
	if (claim && q->attach)
		t->client = TERM_DETACHED; /* the grace goes on */
	else if (!upgraded && !q->attach)
		t->ended = true; /* the client never got its socket */
	pthread_mutex_unlock(&t->lock);
	if (!upgraded && !q->attach)
		sandbox_pty_hangup(t->svc, t->sandbox_id, t->exec_id);
	if (claim && q->attach)
		term_wake(t);
	term_unref(t);
	free(q);
}
