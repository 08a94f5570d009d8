/* The store unit tests' fixture: a real SQLite file in a mkdtemp dir, no
 * mocks, with two accounts, alice and bob. Header-only: a test program
 * includes it once, after store/store.h. */
#ifndef SBX_TEST_STORE_FX_H
#define SBX_TEST_STORE_FX_H

#include <stdio.h>
#include <stdlib.h>

struct fx {
	char dir[64];
	char path[96]; /* dir/sandboxd.db */
	struct store *s;
	struct store_account a, b;
	struct store_sandbox sb; /* a sandbox row, for the tests that make one */
};

/* *state: a new fixture, its store in /tmp/t-TAG-XXXXXX, alice and bob
 * with `credit` micro-USD each. 0, or -1. */
static inline int fx_open(void **state, const char *tag, int64_t credit)
{
	struct fx *f = calloc(1, sizeof *f);
	struct sbx_error err = {0};

	if (!f)
		return -1;
	snprintf(f->dir, sizeof f->dir, "/tmp/t-%s-XXXXXX", tag);
	if (!mkdtemp(f->dir))
		return -1;
	snprintf(f->path, sizeof f->path, "%s/sandboxd.db", f->dir);
	f->s = store_open(f->path, &err);
	if (!f->s || store_account_create(f->s, "alice", credit, &f->a, &err) < 0 ||
	    store_account_create(f->s, "bob", credit, &f->b, &err) < 0)
		return -1;
	*state = f;
	return 0;
}

/* Close the store and remove its dir. */
static inline int fx_teardown(void **state)
{
	struct fx *f = *state;
	char cmd[160];
	int rc;

	store_close(f->s);
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->dir);
	rc = system(cmd) == 0 ? 0 : -1;
	free(f);
	return rc;
}

#endif
