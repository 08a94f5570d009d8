/* api/runtimes.c: GET /v1/runtimes, the versions of the runtimes in the
 * guest image as images/versions.sh measured them in the image when it was
 * built (versions.json next to the configured base_image). Read once at
 * start: the image does not change under a running daemon (docs/api.md
 * "Runtimes"). The file is the build's, but still bounded and checked: a
 * name not listed here is ignored, a value that is not a short version
 * string is not published. */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "api-priv.h"

#define MOD "api"

/* Larger than any versions.json images/versions.sh writes (~100 bytes). */
#define RUNTIMES_FILE_MAX 4096

static const char *const runtime_names[API_RUNTIMES_N] = {"python", "node", "npm", "gcc", "git"};

static bool version_valid(const char *v)
{
	size_t n = strlen(v);

	if (n == 0 || n >= API_RUNTIME_VERSION_MAX || !isdigit((unsigned char)v[0]))
		return false;
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char)v[i]) && !strchr(".+~-_", v[i]))
			return false;
	return true;
}

int api_runtimes_parse(struct api_runtimes *rt, const char *text)
{
	struct json_object *o = text ? json_tokener_parse(text) : NULL, *v;
	int bad = 0;

	memset(rt, 0, sizeof(*rt));
	if (!o || !json_object_is_type(o, json_type_object)) {
		json_object_put(o);
		return -1;
	}
	for (size_t i = 0; i < API_RUNTIMES_N; i++) {
		const char *s;

		if (!json_object_object_get_ex(o, runtime_names[i], &v))
			continue;
		s = json_object_is_type(v, json_type_string) ? json_object_get_string(v) : "";
		if (!version_valid(s)) {
			bad++;
			continue;
		}
		snprintf(rt->version[i], sizeof(rt->version[i]), "%s", s);
	}
	json_object_put(o);
	return bad ? -1 : 0;
}

void api_runtimes_load(struct api_runtimes *rt, const char *base_image)
{
	char path[PATH_MAX];
	const char *slash = base_image ? strrchr(base_image, '/') : NULL;
	char *text;

	memset(rt, 0, sizeof(*rt));
	if (!base_image || !base_image[0])
		return; /* the tiny image: none of them */
	if (!slash)
		snprintf(path, sizeof(path), "versions.json");
	else if (snprintf(path, sizeof(path), "%.*s/versions.json", (int)(slash - base_image),
			  base_image) >= (int)sizeof(path))
		return;
	text = sbx_read_file(path, RUNTIMES_FILE_MAX, NULL);
	if (!text) {
		sbx_warn(MOD,
			 "runtimes: cannot read %s (%s): GET /v1/runtimes publishes none "
			 "(images/build-full.sh writes it)",
			 path, strerror(errno));
		return;
	}
	if (api_runtimes_parse(rt, text) < 0)
		sbx_warn(MOD,
			 "runtimes: %s is not an object of short version strings: "
			 "publishing only the valid ones",
			 path);
	else {
		struct json_object *o = api_runtimes_encode(rt), *v;

		json_object_object_get_ex(o, "versions", &v);
		sbx_info(MOD, "runtimes: %s: %s", path,
			 json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN));
		json_object_put(o);
	}
	free(text);
}

struct json_object *api_runtimes_encode(const struct api_runtimes *rt)
{
	struct json_object *o = json_object_new_object(), *v = json_object_new_object();

	json_object_object_add(o, "object", json_object_new_string("runtimes"));
	for (size_t i = 0; i < API_RUNTIMES_N; i++)
		json_object_object_add(v, runtime_names[i],
				       rt->version[i][0] ? json_object_new_string(rt->version[i])
							 : NULL);
	json_object_object_add(o, "versions", v);
	return o;
}
