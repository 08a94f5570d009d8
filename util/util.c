/* util: see util.h. */
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/crypto.h>

/* ---------------------------------------------------------------- errors */

static const struct {
	int status;
	const char *type;
} code_table[] = {
#define SBX_X_ROW(code, status, type) [code] = {status, type},
    SBX_FOR_EACH_ERROR(SBX_X_ROW)
#undef SBX_X_ROW
};

int sbx_code_status(enum sbx_code code)
{
	if ((unsigned)code >= SBX_CODE_COUNT)
		return 500;
	return code_table[code].status;
}

const char *sbx_code_type(enum sbx_code code)
{
	if ((unsigned)code >= SBX_CODE_COUNT)
		return "api_error";
	return code_table[code].type;
}

int sbx_error_set(struct sbx_error *err, enum sbx_code code, const char *param, const char *fmt,
		  ...)
{
	va_list ap;

	if (!err)
		return -1;
	err->code = code;
	err->retry_after_s = 0;
	snprintf(err->param, sizeof(err->param), "%s", param ? param : "");
	va_start(ap, fmt);
	vsnprintf(err->message, sizeof(err->message), fmt, ap);
	va_end(ap);
	return -1;
}

void sbx_error_clear(struct sbx_error *err)
{
	if (!err)
		return;
	memset(err, 0, sizeof(*err));
	err->code = SBX_OK;
}

/* --------------------------------------------------------------- logging */

static enum sbx_log_level log_level = SBX_LOG_INFO;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

void sbx_log_set_level(enum sbx_log_level level)
{
	log_level = level;
}

static enum sbx_log_format log_format = SBX_LOG_TEXT;

void sbx_log_set_format(enum sbx_log_format format)
{
	log_format = format;
}

static _Thread_local struct {
	char request_id[64], account_id[64], sandbox_id[64];
} log_ctx;

void sbx_log_context_set(const char *request_id, const char *account_id, const char *sandbox_id)
{
	snprintf(log_ctx.request_id, sizeof(log_ctx.request_id), "%s",
		 request_id ? request_id : "");
	snprintf(log_ctx.account_id, sizeof(log_ctx.account_id), "%s",
		 account_id ? account_id : "");
	snprintf(log_ctx.sandbox_id, sizeof(log_ctx.sandbox_id), "%s",
		 sandbox_id ? sandbox_id : "");
}

const char *sbx_log_request_id(void)
{
	return log_ctx.request_id;
}

/* `s` as a JSON string (quotes included) appended to b; control bytes
 * escaped, bytes >= 0x80 kept (messages are ASCII or UTF-8). */
static void log_json_str(struct sbx_buf *b, const char *s)
{
	sbx_buf_append(b, "\"", 1);
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;
		if (ch == '"' || ch == '\\')
			sbx_buf_printf(b, "\\%c", ch);
		else if (ch < 0x20 || ch == 0x7f)
			sbx_buf_printf(b, "\\u%04x", ch);
		else
			sbx_buf_append(b, s, 1);
	}
	sbx_buf_append(b, "\"", 1);
}

void sbx_log(enum sbx_log_level level, const char *module, const char *fmt, ...)
{
	static const char *names[] = {"debug", "info", "warn", "error"};
	static const char *keys[] = {"request_id", "account_id", "sandbox_id"};
	const char *vals[] = {log_ctx.request_id, log_ctx.account_id, log_ctx.sandbox_id};
	char ts[48], msg[1024];
	struct timespec now;
	struct sbx_buf line;
	struct tm tm;
	va_list ap;

	if (level < log_level)
		return;
	clock_gettime(CLOCK_REALTIME, &now);
	gmtime_r(&now.tv_sec, &tm);
	strftime(ts, 32, "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(ts + strlen(ts), sizeof(ts) - strlen(ts), ".%03ldZ", now.tv_nsec / 1000000);
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	sbx_buf_init(&line, 8192);
	if (log_format == SBX_LOG_JSON) {
		sbx_buf_printf(&line, "{\"time\":\"%s\",\"level\":\"%s\",\"module\":", ts,
			       names[level]);
		log_json_str(&line, module);
		sbx_buf_append(&line, ",\"message\":", 11);
		log_json_str(&line, msg);
		for (size_t i = 0; i < SBX_ARRAY_SIZE(keys); i++)
			if (vals[i][0]) {
				sbx_buf_printf(&line, ",\"%s\":", keys[i]);
				log_json_str(&line, vals[i]);
			}
		sbx_buf_append(&line, "}\n", 2);
	} else {
		sbx_buf_printf(&line, "%s %s %s: %s", ts, names[level], module, msg);
		for (size_t i = 0; i < SBX_ARRAY_SIZE(keys); i++)
			if (vals[i][0])
				sbx_buf_printf(&line, " %s=%s", keys[i], vals[i]);
		sbx_buf_append(&line, "\n", 1);
	}
	pthread_mutex_lock(&log_lock);
	if (line.data)
		fputs(line.data, stderr);
	pthread_mutex_unlock(&log_lock);
	sbx_buf_release(&line);
}

/* ------------------------------------------------------------------ time */

static int64_t clock_ms(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t sbx_mono_ms(void)
{
	return clock_ms(CLOCK_MONOTONIC);
}

int64_t sbx_wall_ms(void)
{
	return clock_ms(CLOCK_REALTIME);
}

void sbx_sleep_ms(int64_t ms)
{
	struct timespec ts = {.tv_sec = ms > 0 ? ms / 1000 : 0,
			      .tv_nsec = ms > 0 ? (long)(ms % 1000) * 1000000L : 0};

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

struct timespec sbx_timespec_in(clockid_t clock, int64_t ms)
{
	struct timespec ts;

	clock_gettime(clock, &ts);
	if (ms < 0)
		ms = 0;
	ts.tv_sec += (time_t)(ms / 1000);
	ts.tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	return ts;
}

void sbx_rfc3339(int64_t epoch_ms, char buf[static 32])
{
	time_t secs = (time_t)(epoch_ms / 1000);
	struct tm tm;

	gmtime_r(&secs, &tm);
	strftime(buf, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static int parse_digits(const char **p, int n, int *out)
{
	int v = 0;

	for (int i = 0; i < n; i++) {
		if ((*p)[i] < '0' || (*p)[i] > '9')
			return -1;
		v = v * 10 + ((*p)[i] - '0');
	}
	*p += n;
	*out = v;
	return 0;
}

int sbx_rfc3339_parse(const char *s, int64_t *epoch_ms)
{
	int Y, M, D, h, m, sec, ms = 0, oh = 0, om = 0, sign = 0;
	const char *p = s;
	struct tm tm = {0};
	time_t t;

	if (!s || parse_digits(&p, 4, &Y) || *p++ != '-' || parse_digits(&p, 2, &M) ||
	    *p++ != '-' || parse_digits(&p, 2, &D) || (*p != 'T' && *p != 't' && *p != ' '))
		return -1;
	p++;
	if (parse_digits(&p, 2, &h) || *p++ != ':' || parse_digits(&p, 2, &m) || *p++ != ':' ||
	    parse_digits(&p, 2, &sec))
		return -1;
	if (*p == '.') {
		int digits = 0;

		p++;
		while (*p >= '0' && *p <= '9') {
			if (digits < 3)
				ms = ms * 10 + (*p - '0');
			digits++;
			p++;
		}
		if (digits == 0)
			return -1;
		for (; digits < 3; digits++)
			ms *= 10;
	}
	if (*p == 'Z' || *p == 'z') {
		p++;
	} else if (*p == '+' || *p == '-') {
		sign = *p == '-' ? -1 : 1;
		p++;
		if (parse_digits(&p, 2, &oh) || *p++ != ':' || parse_digits(&p, 2, &om))
			return -1;
	} else {
		return -1;
	}
	if (*p != '\0' || M < 1 || M > 12 || D < 1 || D > 31 || h > 23 || m > 59 || sec > 60 ||
	    oh > 23 || om > 59)
		return -1;
	tm.tm_year = Y - 1900;
	tm.tm_mon = M - 1;
	tm.tm_mday = D;
	tm.tm_hour = h;
	tm.tm_min = m;
	tm.tm_sec = sec;
	t = timegm(&tm);
	if (t == (time_t)-1)
		return -1;
	*epoch_ms = ((int64_t)t - (int64_t)sign * (oh * 3600 + om * 60)) * 1000 + ms;
	return 0;
}

/* ------------------------------------------------------- bounded buffers */

void sbx_buf_init(struct sbx_buf *b, size_t max)
{
	b->data = NULL;
	b->len = 0;
	b->cap = 0;
	b->max = max;
}

static int buf_reserve(struct sbx_buf *b, size_t extra)
{
	size_t need, ncap;
	char *n;

	if (extra > b->max || b->len > b->max - extra)
		return -1;
	need = b->len + extra + 1;
	if (need <= b->cap)
		return 0;
	ncap = b->cap ? b->cap : 256;
	while (ncap < need)
		ncap = ncap > SIZE_MAX / 2 ? need : ncap * 2;
	if (ncap > b->max + 1)
		ncap = b->max + 1;
	n = realloc(b->data, ncap);
	if (!n)
		return -1;
	b->data = n;
	b->cap = ncap;
	return 0;
}

int sbx_buf_append(struct sbx_buf *b, const void *data, size_t len)
{
	if (buf_reserve(b, len) < 0)
		return -1;
	if (len)
		memcpy(b->data + b->len, data, len);
	b->len += len;
	b->data[b->len] = '\0';
	return 0;
}

int sbx_buf_printf(struct sbx_buf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0 || buf_reserve(b, (size_t)n) < 0)
		return -1;
	va_start(ap, fmt);
	vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
	return 0;
}

char *sbx_buf_steal(struct sbx_buf *b, size_t *len)
{
	char *d = b->data;

	if (!d) {
		d = calloc(1, 1);
		if (!d)
			return NULL;
	}
	if (len)
		*len = b->len;
	b->data = NULL;
	b->len = 0;
	b->cap = 0;
	return d;
}

void sbx_buf_release(struct sbx_buf *b)
{
	free(b->data);
	b->data = NULL;
	b->len = 0;
	b->cap = 0;
}

/* --------------------------------------------------------- random & ids */

int sbx_random_bytes(void *out, size_t len)
{
	if (len > INT_MAX)
		return -1;
	return RAND_bytes(out, (int)len) == 1 ? 0 : -1;
}

void sbx_hex(const void *in, size_t len, char *out)
{
	static const char digits[] = "0123456789abcdef";
	const unsigned char *p = in;

	for (size_t i = 0; i < len; i++) {
		out[2 * i] = digits[p[i] >> 4];
		out[2 * i + 1] = digits[p[i] & 15];
	}
	out[2 * len] = '\0';
}

int sbx_random_id(const char *prefix, size_t nbytes, char *out, size_t outlen)
{
	unsigned char raw[64];
	size_t plen = strlen(prefix);

	if (nbytes > sizeof(raw) || plen + 2 * nbytes + 1 > outlen)
		return -1;
	if (sbx_random_bytes(raw, nbytes) < 0)
		return -1;
	memcpy(out, prefix, plen);
	sbx_hex(raw, nbytes, out + plen);
	return 0;
}

void sbx_sha256_hex(const void *data, size_t len, char out[static 65])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;

	EVP_Digest(data, len, md, &mdlen, EVP_sha256(), NULL);
	sbx_hex(md, mdlen, out);
}

bool sbx_ct_equal(const void *a, const void *b, size_t len)
{
	return CRYPTO_memcmp(a, b, len) == 0;
}

/* ------------------------------------------------------------- encodings */

/* Length of the well-formed UTF-8 sequence at p (RFC 3629 table 3-7), 0 if
 * ill-formed, -1 if it is a valid prefix cut by the end of the input. */
static int utf8_seq_len(const unsigned char *p, size_t avail)
{
	unsigned char c = p[0];
	int n;
	unsigned char lo = 0x80, hi = 0xBF;

	if (c < 0x80)
		return 1;
	if (c >= 0xC2 && c <= 0xDF)
		n = 2;
	else if (c >= 0xE0 && c <= 0xEF)
		n = 3;
	else if (c >= 0xF0 && c <= 0xF4)
		n = 4;
	else
		return 0;
	if (c == 0xE0)
		lo = 0xA0;
	else if (c == 0xED)
		hi = 0x9F;
	else if (c == 0xF0)
		lo = 0x90;
	else if (c == 0xF4)
		hi = 0x8F;
	for (int i = 1; i < n; i++) {
		if ((size_t)i >= avail)
			return -1;
		unsigned char b = p[i];
		unsigned char l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
		if (b < l || b > h)
			return 0;
	}
	return n;
}

char *sbx_utf8_sanitize(const char *in, size_t len, bool cut_tail, size_t *out_len)
{
	const unsigned char *p = (const unsigned char *)in;
	size_t i = 0, o = 0;
	char *out;

	/* Worst case each byte becomes the 3-byte U+FFFD. */
	if (len > (SIZE_MAX - 1) / 3)
		return NULL;
	out = malloc(len * 3 + 1);
	if (!out)
		return NULL;
	while (i < len) {
		int n = utf8_seq_len(p + i, len - i);

		if (n > 0) {
			memcpy(out + o, p + i, (size_t)n);
			o += (size_t)n;
			i += (size_t)n;
			continue;
		}
		if (n < 0 && cut_tail)
			break;
		memcpy(out + o, "\xEF\xBF\xBD", 3);
		if (n < 0) { /* a valid prefix cut by the end: one U+FFFD for it */
			o += 3;
			break;
		}
		o += 3;
		i++;
	}
	out[o] = '\0';
	if (out_len)
		*out_len = o;
	return out;
}

static int b64_value(char c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	return c == '+' ? 62 : c == '/' ? 63 : -1;
}

char *sbx_base64_decode(const char *in, size_t len, size_t *out_len)
{
	size_t o = 0, pad = 0;
	char *out;

	if (len % 4)
		return NULL;
	if (len && in[len - 1] == '=')
		pad = len >= 2 && in[len - 2] == '=' ? 2 : 1;
	out = malloc(len / 4 * 3 + 1);
	if (!out)
		return NULL;
	for (size_t i = 0; i < len; i += 4) {
		uint32_t v = 0;

		for (size_t k = 0; k < 4; k++) {
			bool tail_pad = i + 4 == len && k >= 4 - pad;
			int d = tail_pad ? 0 : b64_value(in[i + k]);

			if (d < 0) {
				free(out);
				return NULL;
			}
			v = v << 6 | (uint32_t)d;
		}
		out[o++] = (char)(v >> 16);
		if (!(i + 4 == len && pad == 2))
			out[o++] = (char)(v >> 8);
		if (!(i + 4 == len && pad >= 1))
			out[o++] = (char)v;
	}
	out[o] = '\0';
	*out_len = o;
	return out;
}

char *sbx_base64_encode(const void *in, size_t len)
{
	static const char tbl[] =
	    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	const unsigned char *p = in;
	size_t olen, o = 0;
	char *out;

	if (len > (SIZE_MAX - 1) / 4 * 3 - 3)
		return NULL;
	olen = (len + 2) / 3 * 4;
	out = malloc(olen + 1);
	if (!out)
		return NULL;
	for (size_t i = 0; i < len; i += 3) {
		uint32_t v = (uint32_t)p[i] << 16;
		size_t rem = len - i;

		if (rem > 1)
			v |= (uint32_t)p[i + 1] << 8;
		if (rem > 2)
			v |= p[i + 2];
		out[o++] = tbl[(v >> 18) & 63];
		out[o++] = tbl[(v >> 12) & 63];
		out[o++] = rem > 1 ? tbl[(v >> 6) & 63] : '=';
		out[o++] = rem > 2 ? tbl[v & 63] : '=';
	}
	out[o] = '\0';
	return out;
}

/* ---------------------------------------------------------------- misc */

int sbx_mkdir_p(const char *path, unsigned mode)
{
	char tmp[PATH_MAX];
	size_t len = strlen(path);

	if (len == 0 || len >= sizeof(tmp)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	memcpy(tmp, path, len + 1);
	for (char *p = tmp + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(tmp, mode) == 0)
			chmod(tmp, mode);
		else if (errno != EEXIST)
			return -1;
		*p = '/';
	}
	if (mkdir(tmp, mode) == 0)
		chmod(tmp, mode);
	else if (errno != EEXIST)
		return -1;
	return 0;
}

char *sbx_read_file(const char *path, size_t max, size_t *len)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct sbx_buf b;
	char chunk[8192];
	ssize_t n;

	if (fd < 0)
		return NULL;
	sbx_buf_init(&b, max);
	for (;;) {
		n = read(fd, chunk, sizeof(chunk));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			sbx_buf_release(&b);
			return NULL;
		}
		if (n == 0)
			break;
		if (sbx_buf_append(&b, chunk, (size_t)n) < 0) {
			sbx_buf_release(&b);
			errno = EFBIG;
			return NULL;
		}
	}
	return sbx_buf_steal(&b, len);
}

int sbx_write_file(const char *path, const void *data, size_t len, unsigned mode)
{
	char tmp[PATH_MAX];
	const char *p = data;
	int fd;

	if (snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid()) >= (int)sizeof(tmp)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
	if (fd < 0)
		return -1;
	fchmod(fd, mode);
	while (len > 0) {
		ssize_t n = write(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			goto err_unlink;
		p += n;
		len -= (size_t)n;
	}
	if (fsync(fd) < 0)
		goto err_unlink;
	close(fd);
	if (rename(tmp, path) < 0) {
		unlink(tmp);
		return -1;
	}
	return 0;
err_unlink:
	close(fd);
	unlink(tmp);
	return -1;
}
