/* receipt/verify: the offline check of a receipt a user holds, shared by
 * `sandboxd verify-receipt` and `sbx receipt verify`. Everything is
 * recomputed from files the user has; nothing is asked of a server.
 * docs/receipts.md describes the checks.
 *
 * Depends on util/, receipt.h and json-c (to read the JSON files).
 * Thread-safe: no state.
 */
#ifndef SBX_RECEIPT_VERIFY_H
#define SBX_RECEIPT_VERIFY_H

#include <stddef.h>

/* What to check. Paths are files; every one is read whole, at most 64 MiB. */
struct receipt_check {
	const char *receipt_path;    /* GET /v1/receipts/{id} reply (required) */
	const char *signer;	     /* pinned signer "0x" + 64 hex, or NULL */
	const char *public_key_path; /* or: a PEM (GET /v1/receipts/public-key) */
	const char *execution_path;  /* optional: the execution / exec reply */
	const char *code_path;	     /* optional, with runtime: the code sent */
	const char *runtime;
	const char *input_path; /* optional, instead of code: the input object */
};

enum receipt_check_result {
	RECEIPT_CHECK_VALID = 0,   /* msg: "receipt ID signed by 0x... (... verified)" */
	RECEIPT_CHECK_INVALID = 1, /* msg: why it is not valid */
	RECEIPT_CHECK_USAGE = 2,   /* msg: what is wrong with the request itself */
};

/* Check the receipt: hash and signature against the pinned signer, the id
 * and signer in the signed body, then (when given) the output fingerprint
 * against the execution file and the input fingerprint against the code or
 * input file. Fills msg (one line, no newline, truncated to msglen) and
 * returns the result. */
enum receipt_check_result receipt_check_files(const struct receipt_check *c, char *msg,
					      size_t msglen);

#endif
