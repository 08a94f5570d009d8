/* api/assets.h: the files the daemon serves itself (the dashboard, the
 * API reference page, /v1/openapi.json), compiled in from web/ and
 * docs/openapi.yaml by scripts/web-assets.py (a generated C file in the
 * build directory, never committed). Read-only, static storage. */
#ifndef SBX_API_ASSETS_H
#define SBX_API_ASSETS_H

#include <stdbool.h>
#include <stddef.h>

struct api_asset {
	const char *path; /* the URL path, e.g. "/app.js" */
	const char *type; /* Content-Type */
	bool page;	  /* an HTML page: gets the page's security headers */
	const unsigned char *data;
	size_t len; /* bytes of data (not counting the NUL after them) */
};

extern const struct api_asset api_assets[];
extern const size_t api_assets_count;

#endif
