/* receipt: JCS, fingerprints and Ed25519 receipts. See receipt.h. */
#include "receipt.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include <openssl/evp.h>
#include <openssl/pem.h>

#define MOD	      "receipt"
#define JCS_INT_MAX   INT64_C(9007199254740991) /* 2^53 - 1 */
#define JCS_MAX_DEPTH 16

enum rj_type { RJ_NULL, RJ_BOOL, RJ_INT, RJ_STR, RJ_OBJ };

struct rj_member {
	char *key;
	struct receipt_json *val;
};

struct receipt_json {
	enum rj_type type;
	bool b;
	int64_t i;
	char *s;
	size_t len;
	struct rj_member *m;
	size_t n, cap;
};

static void *xmalloc0(size_t n)
{
	void *p = calloc(1, n ? n : 1);

	if (!p)
		abort();
	return p;
}

static struct receipt_json *rj_new(enum rj_type t)
{
	struct receipt_json *v = xmalloc0(sizeof(*v));

	v->type = t;
	return v;
}

struct receipt_json *receipt_json_object(void)
{
	return rj_new(RJ_OBJ);
}

void receipt_json_free(struct receipt_json *v)
{
	if (!v)
		return;
	for (size_t k = 0; k < v->n; k++) {
		free(v->m[k].key);
		receipt_json_free(v->m[k].val);
	}
	free(v->m);
	free(v->s);
	free(v);
}

static void rj_set(struct receipt_json *o, const char *key, struct receipt_json *val)
{
	if (!o || o->type != RJ_OBJ || !key) {
		receipt_json_free(val);
		return;
	}
	for (size_t k = 0; k < o->n; k++) {
		if (strcmp(o->m[k].key, key) == 0) {
			receipt_json_free(o->m[k].val);
			o->m[k].val = val;
			return;
		}
	}
	if (o->n == o->cap) {
		o->cap = o->cap ? 2 * o->cap : 8;
		o->m = realloc(o->m, o->cap * sizeof(*o->m));
		if (!o->m)
			abort();
	}
	o->m[o->n].key = strdup(key);
	if (!o->m[o->n].key)
		abort();
	o->m[o->n++].val = val;
}

void receipt_json_set_str(struct receipt_json *o, const char *key, const char *s, size_t len)
{
	struct receipt_json *v = rj_new(RJ_STR);

	v->s = xmalloc0(len + 1);
	if (len)
		memcpy(v->s, s, len);
	v->len = len;
	rj_set(o, key, v);
}

void receipt_json_set_int(struct receipt_json *o, const char *key, int64_t i)
{
	struct receipt_json *v = rj_new(RJ_INT);

	v->i = i;
	rj_set(o, key, v);
}

void receipt_json_set_bool(struct receipt_json *o, const char *key, bool b)
{
	struct receipt_json *v = rj_new(RJ_BOOL);

	v->b = b;
	rj_set(o, key, v);
}

void receipt_json_set_null(struct receipt_json *o, const char *key)
{
	rj_set(o, key, rj_new(RJ_NULL));
}

void receipt_json_set_obj(struct receipt_json *o, const char *key, struct receipt_json *child)
{
	rj_set(o, key, child ? child : rj_new(RJ_NULL));
}

/* Decode one UTF-8 scalar at s[*i] (RFC 3629: no overlongs, surrogates or
 * values past U+10FFFF). The code point, or -1 when malformed. */
static int32_t utf8_next(const unsigned char *s, size_t len, size_t *i)
{
	unsigned char c = s[*i];
	int32_t cp;
	size_t n;

	if (c < 0x80) {
		(*i)++;
		return c;
	} else if (c >= 0xc2 && c <= 0xdf) {
		n = 1;
		cp = c & 0x1f;
	} else if (c >= 0xe0 && c <= 0xef) {
		n = 2;
		cp = c & 0x0f;
	} else if (c >= 0xf0 && c <= 0xf4) {
		n = 3;
		cp = c & 0x07;
	} else {
		return -1;
	}
	if (*i + n >= len)
		return -1; /* truncated sequence */
	for (size_t k = 1; k <= n; k++) {
		unsigned char d = s[*i + k];

		if ((d & 0xc0) != 0x80)
			return -1;
		cp = (cp << 6) | (d & 0x3f);
	}
	if ((n == 2 && cp < 0x800) || (n == 3 && (cp < 0x10000 || cp > 0x10ffff)) ||
	    (cp >= 0xd800 && cp <= 0xdfff))
		return -1;
	*i += n + 1;
	return cp;
}

bool receipt_utf8_valid(const char *s, size_t len)
{
	size_t i = 0;

	while (i < len)
		if (utf8_next((const unsigned char *)s, len, &i) < 0)
			return false;
	return true;
}

/* Compare two valid UTF-8 keys by their UTF-16 code units (RFC 8785 3.2.3). */
static int key_cmp_utf16(const char *a, const char *b)
{
	const unsigned char *x = (const unsigned char *)a, *y = (const unsigned char *)b;
	size_t lx = strlen(a), ly = strlen(b), i = 0, j = 0;
	uint16_t ux[2], uy[2];
	int nx = 0, ny = 0, px = 0, py = 0;

	for (;;) {
		if (px == nx) {
			if (i >= lx)
				break;
			int32_t cp = utf8_next(x, lx, &i);
			if (cp < 0x10000) {
				ux[0] = (uint16_t)cp;
				nx = 1;
			} else {
				ux[0] = (uint16_t)(0xd800 + ((cp - 0x10000) >> 10));
				ux[1] = (uint16_t)(0xdc00 + ((cp - 0x10000) & 0x3ff));
				nx = 2;
			}
			px = 0;
		}
		if (py == ny) {
			if (j >= ly)
				return 1;
			int32_t cp = utf8_next(y, ly, &j);
			if (cp < 0x10000) {
				uy[0] = (uint16_t)cp;
				ny = 1;
			} else {
				uy[0] = (uint16_t)(0xd800 + ((cp - 0x10000) >> 10));
				uy[1] = (uint16_t)(0xdc00 + ((cp - 0x10000) & 0x3ff));
				ny = 2;
			}
			py = 0;
		}
		if (ux[px] != uy[py])
			return ux[px] < uy[py] ? -1 : 1;
		px++;
		py++;
	}
	return (py == ny && j >= ly) ? 0 : -1;
}

static int jcs_string(struct sbx_buf *b, const char *s, size_t len)
{
	static const char hex[] = "0123456789abcdef";
	int rc = sbx_buf_append(b, "\"", 1);

	for (size_t k = 0; k < len && rc == 0; k++) {
		unsigned char c = (unsigned char)s[k];
		char esc[7];

		switch (c) {
		case '"':
			rc = sbx_buf_append(b, "\\\"", 2);
			break;
		case '\\':
			rc = sbx_buf_append(b, "\\\\", 2);
			break;
		case '\b':
			rc = sbx_buf_append(b, "\\b", 2);
			break;
		case '\t':
			rc = sbx_buf_append(b, "\\t", 2);
			break;
		case '\n':
			rc = sbx_buf_append(b, "\\n", 2);
			break;
		case '\f':
			rc = sbx_buf_append(b, "\\f", 2);
			break;
		case '\r':
			rc = sbx_buf_append(b, "\\r", 2);
			break;
		default:
			if (c < 0x20) {
				memcpy(esc, "\\u00", 4);
				esc[4] = hex[c >> 4];
				esc[5] = hex[c & 15];
				rc = sbx_buf_append(b, esc, 6);
			} else {
				rc = sbx_buf_append(b, &s[k], 1);
			}
		}
	}
	if (rc == 0)
		rc = sbx_buf_append(b, "\"", 1);
	return rc;
}

static int cmp_members(const void *a, const void *b)
{
	return key_cmp_utf16(((const struct rj_member *)a)->key,
			     ((const struct rj_member *)b)->key);
}

static int jcs_value(struct sbx_buf *b, const struct receipt_json *v, int depth,
		     struct sbx_error *err)
{
	if (depth > JCS_MAX_DEPTH)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, NULL, "json nested too deeply");
	switch (v->type) {
	case RJ_NULL:
		return sbx_buf_append(b, "null", 4) < 0 ? -2 : 0;
	case RJ_BOOL:
		return sbx_buf_append(b, v->b ? "true" : "false", v->b ? 4 : 5) < 0 ? -2 : 0;
	case RJ_INT:
		if (v->i > JCS_INT_MAX || v->i < -JCS_INT_MAX)
			return sbx_error_set(err, SBX_E_INVALID_REQUEST, NULL,
					     "integer outside the range JSON numbers keep exactly");
		return sbx_buf_printf(b, "%lld", (long long)v->i) < 0 ? -2 : 0;
	case RJ_STR:
		if (!receipt_utf8_valid(v->s, v->len))
			return sbx_error_set(err, SBX_E_INVALID_REQUEST, NULL,
					     "string is not valid UTF-8");
		return jcs_string(b, v->s, v->len) < 0 ? -2 : 0;
	case RJ_OBJ: {
		_cleanup_free_ struct rj_member *sorted = xmalloc0((v->n + 1) * sizeof(*sorted));

		for (size_t k = 0; k < v->n; k++) {
			if (!receipt_utf8_valid(v->m[k].key, strlen(v->m[k].key)))
				return sbx_error_set(err, SBX_E_INVALID_REQUEST, NULL,
						     "key is not valid UTF-8");
			sorted[k] = v->m[k];
		}
		if (v->n)
			qsort(sorted, v->n, sizeof(*sorted), cmp_members);
		if (sbx_buf_append(b, "{", 1) < 0)
			return -2;
		for (size_t k = 0; k < v->n; k++) {
			int rc;

			if (k && sbx_buf_append(b, ",", 1) < 0)
				return -2;
			if (jcs_string(b, sorted[k].key, strlen(sorted[k].key)) < 0 ||
			    sbx_buf_append(b, ":", 1) < 0)
				return -2;
			if ((rc = jcs_value(b, sorted[k].val, depth + 1, err)) < 0)
				return rc;
		}
		return sbx_buf_append(b, "}", 1) < 0 ? -2 : 0;
	}
	}
	return -1;
}

char *receipt_json_canonical(const struct receipt_json *v, size_t *len, struct sbx_error *err)
{
	struct sbx_buf b;
	int rc;

	sbx_buf_init(&b, 64 * 1024 * 1024);
	rc = jcs_value(&b, v, 0, err);
	if (rc < 0) {
		sbx_buf_release(&b);
		if (rc == -2)
			sbx_error_set(err, SBX_E_INVALID_REQUEST, NULL,
				      "json too large to canonicalise");
		return NULL;
	}
	if (!b.data && sbx_buf_append(&b, "", 0) < 0) {
		sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
		return NULL;
	}
	return sbx_buf_steal(&b, len);
}

/* ---------------------------------------------------------- fingerprints */

static int hex_nibble(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* "0x" + 2*n hex -> n bytes. 0 or -1. */
static int unhex0x(const char *s, uint8_t *out, size_t n)
{
	if (!s || strncmp(s, "0x", 2) != 0 || strlen(s) != 2 + 2 * n)
		return -1;
	for (size_t k = 0; k < n; k++) {
		int hi = hex_nibble(s[2 + 2 * k]), lo = hex_nibble(s[3 + 2 * k]);

		if (hi < 0 || lo < 0)
			return -1;
		out[k] = (uint8_t)(hi << 4 | lo);
	}
	return 0;
}

static void hex0x(const uint8_t *in, size_t n, char *out)
{
	out[0] = '0';
	out[1] = 'x';
	sbx_hex(in, n, out + 2);
}

int receipt_salt_new(char out[static RECEIPT_HEX32_LEN], struct sbx_error *err)
{
	uint8_t salt[RECEIPT_SALT_LEN];

	if (sbx_random_bytes(salt, sizeof salt) < 0)
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "no randomness available");
	hex0x(salt, sizeof salt, out);
	return 0;
}

static int sha256(const void *a, size_t alen, const void *b, size_t blen, uint8_t out[32])
{
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	unsigned int n = 0;
	int ok = ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) == 1 &&
		 (alen == 0 || EVP_DigestUpdate(ctx, a, alen) == 1) &&
		 (blen == 0 || EVP_DigestUpdate(ctx, b, blen) == 1) &&
		 EVP_DigestFinal_ex(ctx, out, &n) == 1 && n == 32;

	EVP_MD_CTX_free(ctx);
	return ok ? 0 : -1;
}

int receipt_fingerprint(const char *salt, const struct receipt_json *obj,
			char out[static RECEIPT_HEX32_LEN], struct sbx_error *err)
{
	uint8_t sb[RECEIPT_SALT_LEN], md[32];
	size_t len;
	_cleanup_free_ char *jcs = NULL;

	if (unhex0x(salt, sb, sizeof sb) < 0)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "fingerprint_salt",
				     "fingerprint_salt must be 0x and 64 hex digits");
	if (!(jcs = receipt_json_canonical(obj, &len, err)))
		return -1;
	if (sha256(sb, sizeof sb, jcs, len, md) < 0)
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "sha-256 failed");
	hex0x(md, sizeof md, out);
	return 0;
}

/* ----------------------------------------------------- signing & verify */

struct receipt_signer {
	EVP_PKEY *key;
	char pub[RECEIPT_HEX32_LEN];
};

void receipt_signer_free(struct receipt_signer *sg)
{
	if (!sg)
		return;
	EVP_PKEY_free(sg->key);
	free(sg);
}

static EVP_PKEY *key_create(const char *path, struct sbx_error *err)
{
	EVP_PKEY *k = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
	_cleanup_free_ char *tmp = NULL;
	FILE *f;
	int fd;

	if (!k) {
		sbx_error_set(err, SBX_E_INTERNAL, NULL, "cannot generate the receipt key");
		return NULL;
	}
	if (asprintf(&tmp, "%s.tmp.%d", path, (int)getpid()) < 0) {
		tmp = NULL;
		goto err_key;
	}
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0 || !(f = fdopen(fd, "w"))) {
		if (fd >= 0)
			close(fd);
		sbx_err(MOD, "create %s: %s", tmp, strerror(errno));
		goto err_key;
	}
	if (PEM_write_PrivateKey(f, k, NULL, NULL, 0, NULL, NULL) != 1 || fflush(f) != 0 ||
	    fsync(fileno(f)) != 0) {
		fclose(f);
		goto err_unlink;
	}
	fclose(f);
	/* link() fails if another process created the key meanwhile: use theirs. */
	if (link(tmp, path) < 0) {
		unlink(tmp);
		EVP_PKEY_free(k);
		return NULL; /* caller reloads */
	}
	unlink(tmp);
	sbx_info(MOD, "created the receipt signing key %s", path);
	return k;

err_unlink:
	unlink(tmp);
err_key:
	EVP_PKEY_free(k);
	sbx_error_set(err, SBX_E_INTERNAL, NULL, "cannot store the receipt key");
	return NULL;
}

static EVP_PKEY *key_load(const char *path, struct sbx_error *err)
{
	struct stat st;
	EVP_PKEY *k = NULL;
	FILE *f = fopen(path, "re");

	if (!f)
		return NULL;
	if (fstat(fileno(f), &st) < 0 || (st.st_mode & 077)) {
		fclose(f);
		sbx_err(MOD, "%s: the receipt key must be mode 0600", path);
		sbx_error_set(err, SBX_E_INTERNAL, NULL, "the receipt key file is not private");
		errno = EPERM;
		return NULL;
	}
	k = PEM_read_PrivateKey(f, NULL, NULL, NULL);
	fclose(f);
	if (!k || EVP_PKEY_get_id(k) != EVP_PKEY_ED25519) {
		EVP_PKEY_free(k);
		sbx_error_set(err, SBX_E_INTERNAL, NULL, "the receipt key is not an Ed25519 key");
		errno = EINVAL;
		return NULL;
	}
	return k;
}

struct receipt_signer *receipt_signer_load_or_create(const char *path, struct sbx_error *err)
{
	struct receipt_signer *sg;
	EVP_PKEY *k = NULL;
	uint8_t raw[32];
	size_t rawlen = sizeof raw;

	for (int attempt = 0; attempt < 3 && !k; attempt++) {
		errno = 0;
		k = key_load(path, err);
		if (!k && errno == ENOENT)
			k = key_create(path, err);
		else if (!k)
			return NULL;
	}
	if (!k) {
		sbx_error_set(err, SBX_E_INTERNAL, NULL, "cannot load the receipt key");
		return NULL;
	}
	if (EVP_PKEY_get_raw_public_key(k, raw, &rawlen) != 1 || rawlen != 32) {
		EVP_PKEY_free(k);
		sbx_error_set(err, SBX_E_INTERNAL, NULL, "cannot read the receipt public key");
		return NULL;
	}
	sg = xmalloc0(sizeof(*sg));
	sg->key = k;
	hex0x(raw, 32, sg->pub);
	return sg;
}

const char *receipt_signer_public(const struct receipt_signer *sg)
{
	return sg->pub;
}

char *receipt_signer_public_pem(const struct receipt_signer *sg)
{
	BIO *bio = BIO_new(BIO_s_mem());
	char *data = NULL, *out = NULL;
	long n;

	if (!bio)
		return NULL;
	if (PEM_write_bio_PUBKEY(bio, sg->key) == 1 && (n = BIO_get_mem_data(bio, &data)) > 0) {
		out = xmalloc0((size_t)n + 1);
		memcpy(out, data, (size_t)n);
	}
	BIO_free(bio);
	return out;
}

int receipt_public_pem_to_hex(const char *pem, size_t len, char out[static RECEIPT_HEX32_LEN],
			      struct sbx_error *err)
{
	BIO *bio = BIO_new_mem_buf(pem, (int)SBX_MIN(len, (size_t)INT32_MAX));
	EVP_PKEY *k = bio ? PEM_read_bio_PUBKEY(bio, NULL, NULL, NULL) : NULL;
	uint8_t pub[32];
	size_t n = sizeof pub;
	int ok = k && EVP_PKEY_get_base_id(k) == EVP_PKEY_ED25519 &&
		 EVP_PKEY_get_raw_public_key(k, pub, &n) == 1 && n == 32;

	EVP_PKEY_free(k);
	BIO_free(bio);
	if (!ok)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "signer",
				     "not a PEM Ed25519 public key");
	hex0x(pub, 32, out);
	return 0;
}

char *receipt_sign(const struct receipt_signer *sg, const struct receipt_json *body,
		   char hash[static RECEIPT_HEX32_LEN], char sig[static RECEIPT_SIG_HEX_LEN],
		   struct sbx_error *err)
{
	uint8_t md[32], s[64];
	size_t len, slen = sizeof s;
	char *jcs = receipt_json_canonical(body, &len, err);
	EVP_MD_CTX *ctx;
	int ok;

	if (!jcs)
		return NULL;
	ctx = EVP_MD_CTX_new();
	ok = ctx && sha256(jcs, len, NULL, 0, md) == 0 &&
	     EVP_DigestSignInit(ctx, NULL, NULL, NULL, sg->key) == 1 &&
	     EVP_DigestSign(ctx, s, &slen, (const unsigned char *)jcs, len) == 1 && slen == 64;
	EVP_MD_CTX_free(ctx);
	if (!ok) {
		free(jcs);
		sbx_error_set(err, SBX_E_INTERNAL, NULL, "signing the receipt failed");
		return NULL;
	}
	hex0x(md, 32, hash);
	hex0x(s, 64, sig);
	return jcs;
}

int receipt_verify(const char *canonical, size_t len, const char *hash, const char *sig,
		   const char *signer, struct sbx_error *err)
{
	uint8_t md[32], want[32], s[64], pub[32];
	EVP_PKEY *k;
	EVP_MD_CTX *ctx;
	int ok;

	if (unhex0x(hash, want, 32) < 0 || sha256(canonical, len, NULL, 0, md) < 0 ||
	    !sbx_ct_equal(md, want, 32))
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "hash",
				     "the receipt's hash does not match its body");
	if (unhex0x(signer, pub, 32) < 0 ||
	    !(k = EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, NULL, pub, 32)))
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "signer",
				     "the signer is not an Ed25519 public key");
	if (unhex0x(sig, s, 64) < 0) {
		EVP_PKEY_free(k);
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "signature",
				     "the signature is not 0x and 128 hex digits");
	}
	ctx = EVP_MD_CTX_new();
	ok = ctx && EVP_DigestVerifyInit(ctx, NULL, NULL, NULL, k) == 1 &&
	     EVP_DigestVerify(ctx, s, 64, (const unsigned char *)canonical, len) == 1;
	EVP_MD_CTX_free(ctx);
	EVP_PKEY_free(k);
	if (!ok)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "signature",
				     "the signature does not verify with the signer's key");
	return 0;
}
