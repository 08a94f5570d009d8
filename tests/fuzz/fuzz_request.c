/* Fuzz target: arbitrary bytes as the body of POST /v1/sandboxes/{id}/exec,
 * POST /v1/sandboxes and POST .../extend (the decoders a tenant reaches),
 * and, when the decode succeeds, the exec result encoder on the same bytes
 * as guest output. Must never crash, leak or read out of bounds. */
#include <stdint.h>
#include <string.h>

#include "api/api-priv.h"
#include "sandbox/sandbox.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct sandbox_config cfg;
	static int init;
	struct api_exec_body eb;
	struct api_create_body cb;
	struct sbx_error err;
	const char *body = (const char *)data;
	int minutes;

	if (!init) {
		sandbox_config_defaults(&cfg);
		cfg.max_command_bytes = 4096;
		init = 1;
	}
	sbx_error_clear(&err);
	if (api_exec_decode(body, size, &cfg, &eb, &err) == 0) {
		if (eb.req.command_len == 0 || strlen(eb.req.command) != eb.req.command_len)
			__builtin_trap();
		for (size_t i = 0; i < eb.req.n_env; i++)
			if (!strchr(eb.req.env[i], '='))
				__builtin_trap();
		api_exec_body_release(&eb);
	} else if (err.code != SBX_E_INVALID_REQUEST && err.code != SBX_E_INTERNAL) {
		__builtin_trap();
	}
	sbx_error_clear(&err);
	if (api_create_decode(body, size, &cfg, &cb, &err) == 0 && cb.req.size &&
	    strlen(cb.req.size) >= sizeof(cb.size_buf))
		__builtin_trap();
	sbx_error_clear(&err);
	(void)api_timeout_decode(body, size, &cfg, size & 1, &minutes, &err);

	/* The same bytes as guest output, both encodings. */
	struct agentless_exec_result r = {
	    .stdout_buf = (char *)data,
	    .stdout_len = size,
	    .stderr_buf = (char *)data,
	    .stderr_len = size / 2,
	    .truncated = size & 1,
	};
	for (int b64 = 0; b64 < 2; b64++) {
		struct json_object *o = api_exec_result_encode(&r, b64);
		if (o)
			(void)json_object_to_json_string(o);
		json_object_put(o);
	}
	return 0;
}
