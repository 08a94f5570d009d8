/* receipt: signed receipts for executions (issue 8). RFC 8785 JSON
 * canonicalisation (JCS) of the shapes receipts use, salted SHA-256
 * fingerprints and Ed25519 signatures with a node key.
 *
 * Depends on util/ and OpenSSL only. docs/receipts.md describes every
 * definition here so that a third party can check a receipt with openssl.
 *
 *   fingerprint(obj) = "0x" || hex(SHA-256(salt_bytes || JCS(obj)))
 *   hash             = "0x" || hex(SHA-256(JCS(body)))
 *   signature        = "0x" || hex(Ed25519-sign(node key, JCS(body)))
 *   signer           = "0x" || hex(raw 32-byte Ed25519 public key)
 *
 * where salt_bytes are the 32 bytes behind the execution's
 * fingerprint_salt ("0x" + 64 hex).
 */
#ifndef SBX_RECEIPT_H
#define SBX_RECEIPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../util/util.h"

/* ------------------------------------------------------------------ JCS */

/* A JSON value of the subset receipts use: null, booleans, integers in
 * [-(2^53-1), 2^53-1] (JCS prints them as plain decimals), strings (any
 * bytes; must be valid UTF-8 for receipt_json_canonical to accept them)
 * and objects with string keys. No floats, no arrays. */
struct receipt_json;

/* A new empty object. Never NULL (aborts on ENOMEM). Free the root with
 * receipt_json_free(); members belong to their object. */
struct receipt_json *receipt_json_object(void);
void receipt_json_free(struct receipt_json *v);

/* Set a member of object `o` (a key set twice keeps the last value). The
 * key and string are copied; `len` is the string's length in bytes (it may
 * hold NUL). set_obj takes ownership of `child`. Integers outside the
 * exact range are refused by receipt_json_canonical. */
void receipt_json_set_str(struct receipt_json *o, const char *key, const char *s, size_t len);
void receipt_json_set_int(struct receipt_json *o, const char *key, int64_t v);
void receipt_json_set_bool(struct receipt_json *o, const char *key, bool v);
void receipt_json_set_null(struct receipt_json *o, const char *key);
void receipt_json_set_obj(struct receipt_json *o, const char *key, struct receipt_json *child);

/* RFC 8785 canonical form: members sorted by their keys' UTF-16 code
 * units, no whitespace, strings escaped as JCS says (\" \\ \b \t \n \f \r,
 * other controls as \u00xx, everything else literal UTF-8). Returns a new
 * NUL-terminated string (free it) and its length, or NULL with
 * SBX_E_INVALID_REQUEST when a string or key is not valid UTF-8 or an
 * integer is out of range. */
char *receipt_json_canonical(const struct receipt_json *v, size_t *len, struct sbx_error *err);

/* Is s[0..len) valid UTF-8 by RFC 3629 (no overlong forms such as C0 80,
 * no surrogates ED A0..BF xx, nothing past U+10FFFF: no F5..FF lead bytes,
 * no truncated sequence)? NUL bytes are valid. The one check of text that
 * reaches a receipt: POST /v1/sandbox/executions refuses code that fails
 * it before anything is reserved. */
bool receipt_utf8_valid(const char *s, size_t len);

/* ---------------------------------------------------------- fingerprints */

#define RECEIPT_SALT_LEN 32
/* "0x" + 64 hex + NUL */
#define RECEIPT_HEX32_LEN 67

/* A fresh random salt as "0x" + 64 hex. 0 or -1. */
int receipt_salt_new(char out[static RECEIPT_HEX32_LEN], struct sbx_error *err);

/* "0x" + hex(SHA-256(salt_bytes || JCS(obj))). salt is "0x" + 64 hex
 * (SBX_E_INVALID_REQUEST otherwise). 0 or -1. */
int receipt_fingerprint(const char *salt, const struct receipt_json *obj,
			char out[static RECEIPT_HEX32_LEN], struct sbx_error *err);

/* ----------------------------------------------------- signing & verify */

/* The node's Ed25519 key. */
struct receipt_signer;

/* Load the PEM private key at path, or create it (0600, parent directory
 * must exist) when the file does not exist. NULL with SBX_E_INTERNAL when
 * the file is unreadable, not an Ed25519 key, or readable by others. */
struct receipt_signer *receipt_signer_load_or_create(const char *path, struct sbx_error *err);
void receipt_signer_free(struct receipt_signer *sg);
/* "0x" + 64 hex of the raw public key (borrowed, lives as long as sg). */
const char *receipt_signer_public(const struct receipt_signer *sg);
/* The public key as PEM (SubjectPublicKeyInfo), new string; NULL on ENOMEM. */
char *receipt_signer_public_pem(const struct receipt_signer *sg);

/* A PEM SubjectPublicKeyInfo Ed25519 key (as GET /v1/receipts/public-key
 * publishes it) to "0x" + 64 hex. 0, or -1 with SBX_E_INVALID_REQUEST. */
int receipt_public_pem_to_hex(const char *pem, size_t len, char out[static RECEIPT_HEX32_LEN],
			      struct sbx_error *err);

#define RECEIPT_SIG_HEX_LEN 131 /* "0x" + 128 hex + NUL */

/* Sign: canonicalise body, fill hash and signature. Returns the canonical
 * body (new string, free it) or NULL. */
char *receipt_sign(const struct receipt_signer *sg, const struct receipt_json *body,
		   char hash[static RECEIPT_HEX32_LEN], char sig[static RECEIPT_SIG_HEX_LEN],
		   struct sbx_error *err);

/* Verify a canonical body (exact bytes) against hash, signature and a
 * signer public key ("0x" + 64 hex). 0 when all match; -1 with
 * SBX_E_INVALID_REQUEST naming what failed ("hash", "signature",
 * "signer"). */
int receipt_verify(const char *canonical, size_t len, const char *hash, const char *sig,
		   const char *signer, struct sbx_error *err);

#endif
