/* `make install`: the staged file list under DESTDIR (FHS paths under
 * PREFIX, /etc for PREFIX=/usr), modes, the generated config (accepted by
 * the daemon's own parser) and unit, a kept config on reinstall, and
 * `systemd-analyze verify` on the unit of a real install under a scratch
 * PREFIX (verify works offline; it also checks that ExecStart exists).
 * No guest is booted.
 *
 * Run from the source tree (or set SBX_SRC_DIR); SBX_TEST_IMAGE_DIR names
 * the tiny image to install.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "harness.h"

static char src[512], tmp[256], tiny[512];

static int setup(void **state)
{
	const char *s = getenv("SBX_SRC_DIR"), *img = getenv("SBX_TEST_IMAGE_DIR");
	char probe[600];

	if (s)
		snprintf(src, sizeof(src), "%s", s);
	else if (!getcwd(src, sizeof(src)))
		return -1;
	snprintf(probe, sizeof(probe), "%s/etc/sandboxd.service.in", src);
	if (access(probe, R_OK) != 0) {
		fprintf(stderr, "test_install: run from the source tree or set SBX_SRC_DIR\n");
		return -1;
	}
	snprintf(tiny, sizeof(tiny), "%s", img ? img : "build/images/tiny");
	snprintf(tmp, sizeof(tmp), "/tmp/sbx-test-install-%d", (int)getpid());
	return sbx_mkdir_p(tmp, 0700);
}

static int teardown(void **state)
{
	char cmd[300];

	if (!getenv("SBX_TEST_KEEP")) {
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
		run_cmd(cmd);
	}
	return 0;
}

/* `make -s install` with extra make variables; its exit code. */
static int make_install(const char *vars)
{
	char cmd[2048];

	snprintf(cmd, sizeof(cmd),
		 "make -s -C '%s' install INSTALL_TINY='%s' INSTALL_FULL=/nonexistent %s "
		 ">%s/make.log 2>&1",
		 src, tiny, vars, tmp);
	return run_cmd(cmd);
}

/* A command's whole stdout (NUL-terminated, free it). */
static char *output_of(const char *cmd)
{
	struct sbx_buf b;
	char chunk[4096];
	size_t n;
	FILE *p = popen(cmd, "r");

	assert_non_null(p);
	sbx_buf_init(&b, 1u << 20);
	while ((n = fread(chunk, 1, sizeof(chunk), p)) > 0)
		assert_int_equal(sbx_buf_append(&b, chunk, n), 0);
	pclose(p);
	assert_int_equal(sbx_buf_append(&b, "", 0), 0);
	return sbx_buf_steal(&b, &n);
}

static void destdir_file_list(void **state)
{
	char vars[400], cmd[600], path[600];
	_cleanup_free_ char *files = NULL, *modes = NULL, *unit = NULL, *cfg = NULL;
	json_object *o;
	size_t n;

	snprintf(vars, sizeof(vars), "DESTDIR=%s/dest", tmp);
	assert_int_equal(make_install(vars), 0);
	/* everything but the docs, which are checked for README.md below */
	snprintf(cmd, sizeof(cmd),
		 "cd %s/dest && find . -type f -not -path './usr/local/share/doc/*' | sort", tmp);
	files = output_of(cmd);
	assert_string_equal(files, "./usr/local/bin/sbx\n"
				   "./usr/local/etc/sandboxd/config.json\n"
				   "./usr/local/lib/sandboxd/images/tiny/initramfs.cpio.gz\n"
				   "./usr/local/lib/sandboxd/images/tiny/vmlinux\n"
				   "./usr/local/lib/systemd/system/sandboxd.service\n"
				   "./usr/local/sbin/sandboxd\n");
	snprintf(path, sizeof(path), "%s/dest/usr/local/share/doc/sandboxd/README.md", tmp);
	assert_int_equal(access(path, R_OK), 0);
	/* docs/ keeps its place beside the README (its links are relative,
	 * and docs/README.md is another file of that name) */
	snprintf(path, sizeof(path), "%s/dest/usr/local/share/doc/sandboxd/docs/README.md", tmp);
	assert_int_equal(access(path, R_OK), 0);
	snprintf(path, sizeof(path), "%s/dest/usr/local/share/doc/sandboxd/docs/api.md", tmp);
	assert_int_equal(access(path, R_OK), 0);
	snprintf(cmd, sizeof(cmd),
		 "cd %s/dest/usr/local && stat -c '%%a %%n' bin/sbx sbin/sandboxd "
		 "lib/systemd/system/sandboxd.service",
		 tmp);
	modes = output_of(cmd);
	assert_string_equal(modes, "755 bin/sbx\n755 sbin/sandboxd\n"
				   "644 lib/systemd/system/sandboxd.service\n");

	snprintf(path, sizeof(path), "%s/dest/usr/local/lib/systemd/system/sandboxd.service", tmp);
	assert_non_null(unit = sbx_read_file(path, 1u << 20, &n));
	assert_non_null(strstr(unit, "\nExecStart=/usr/local/sbin/sandboxd serve --config "
				     "/usr/local/etc/sandboxd/config.json\n"));
	assert_null(strstr(unit, "DIR@")); /* every @...DIR@ placeholder filled */
	for (const char *const *k =
		 (const char *const[]){"\nType=notify\n", "\nWants=libvirtd.service\n",
				       "libvirtd.service\n", "\nRestart=on-failure\n",
				       "\nStateDirectory=sandboxd\n", "\nProtectSystem=strict\n",
				       "\nNoNewPrivileges=yes\n", "\nPrivateTmp=yes\n",
				       "\nWantedBy=multi-user.target\n", NULL};
	     *k; k++)
		if (!strstr(unit, *k))
			fail_msg("the unit lacks '%s'", *k);

	snprintf(path, sizeof(path), "%s/dest/usr/local/etc/sandboxd/config.json", tmp);
	assert_non_null(cfg = sbx_read_file(path, 1u << 20, &n));
	assert_non_null(o = json_tokener_parse(cfg));
	assert_string_equal(jstr(o, "mode"), "production");
	assert_string_equal(jstr(o, "state_dir"), "/var/lib/sandboxd");
	assert_string_equal(jstr(o, "kernel"), "/usr/local/lib/sandboxd/images/tiny/vmlinux");
	assert_string_equal(jstr(o, "base_image"), "");
	json_object_put(o);

	/* a reinstall keeps the operator's config */
	assert_int_equal(sbx_write_file(path, "{\"listen\": \"127.0.0.1:9\"}\n", 26, 0644), 0);
	assert_int_equal(make_install(vars), 0);
	free(cfg);
	assert_non_null(cfg = sbx_read_file(path, 1u << 20, &n));
	assert_string_equal(cfg, "{\"listen\": \"127.0.0.1:9\"}\n");

	/* PREFIX=/usr: the config goes to /etc */
	snprintf(vars, sizeof(vars), "DESTDIR=%s/usr PREFIX=/usr", tmp);
	assert_int_equal(make_install(vars), 0);
	snprintf(path, sizeof(path), "%s/usr/etc/sandboxd/config.json", tmp);
	assert_int_equal(access(path, R_OK), 0);
	snprintf(path, sizeof(path), "%s/usr/usr/lib/systemd/system/sandboxd.service", tmp);
	assert_int_equal(access(path, R_OK), 0);
}

static void systemd_analyze_verify_passes(void **state)
{
	char vars[400], cmd[900];
	_cleanup_free_ char *out = NULL, *admin = NULL;

	snprintf(vars, sizeof(vars), "PREFIX=%s/pfx", tmp);
	assert_int_equal(make_install(vars), 0);
	/* verify prints warnings (an unknown key, a missing binary) but may
	 * still exit 0: both must be clean */
	snprintf(cmd, sizeof(cmd),
		 "systemd-analyze verify %s/pfx/lib/systemd/system/sandboxd.service 2>&1; "
		 "echo rc=$?",
		 tmp);
	out = output_of(cmd);
	assert_string_equal(out, "rc=0\n");

	/* the daemon's own parser accepts the installed config (admin only
	 * reads it and opens the database: nothing boots) */
	snprintf(
	    cmd, sizeof(cmd),
	    "%s/pfx/sbin/sandboxd admin list-accounts --config %s/pfx/etc/sandboxd/config.json "
	    "--state-dir %s/state 2>&1; echo rc=$?",
	    tmp, tmp, tmp);
	admin = output_of(cmd);
	assert_non_null(strstr(admin, "[]"));
	assert_non_null(strstr(admin, "rc=0\n"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(destdir_file_list),
	    cmocka_unit_test(systemd_analyze_verify_passes),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
