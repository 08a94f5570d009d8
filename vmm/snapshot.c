/* vmm: disk snapshots (docs/lifecycle.md "Snapshots and templates").
 * A snapshot is one qcow2 file in run_dir, SNAP_ID.qcow2 (mode 0600),
 * whose only backing is the base image: qemu-img convert -B flattens the
 * guest's chain (overlay, and the snapshot it was made from if any) into
 * it. A running domain is suspended (virDomainSuspend: QEMU stops the
 * vCPUs and drains and flushes its block devices) for the copy and
 * resumed after, whatever happened; qemu-img reads the image QEMU holds
 * with -U (shared, no write lock asked for). Every qemu-img run has a
 * deadline: past it the child is killed and the copy fails.
 *
 * Remote hosts are refused: their run_dir is reached only through a
 * storage pool, which has no convert (docs/vmm.md "Remote hosts"). */
#include "vmm.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>

#include "vmm-priv.h"

#define MOD		 "vmm"
#define SNAP_PREFIX	 "snap_"
#define SNAP_SUFFIX	 ".qcow2"
#define QEMU_IMG_POLL_MS 10

extern char **environ;

int vmm_qemu_img(char *const argv[], uint32_t timeout_ms)
{
	posix_spawn_file_actions_t fa;
	int64_t deadline = timeout_ms ? sbx_mono_ms() + timeout_ms : 0;
	pid_t pid;
	int status, r;

	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
	r = posix_spawnp(&pid, "qemu-img", &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	if (r != 0) {
		sbx_err(MOD, "cannot run qemu-img: %s", strerror(r));
		return -1;
	}
	for (;;) {
		pid_t w = waitpid(pid, &status, deadline ? WNOHANG : 0);

		if (w == pid)
			break;
		if (w < 0 && errno != EINTR) {
			sbx_err(MOD, "waitpid qemu-img: %s", strerror(errno));
			return -1;
		}
		if (deadline && sbx_mono_ms() >= deadline) {
			sbx_warn(MOD, "qemu-img %s: past its deadline (%u ms): killed", argv[1],
				 timeout_ms);
			kill(pid, SIGKILL);
			while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
			}
			return -2;
		}
		if (w == 0)
			nanosleep(&(struct timespec){0, QEMU_IMG_POLL_MS * 1000000L}, NULL);
	}
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		sbx_err(MOD, "qemu-img %s failed (status %d)", argv[1], status);
		return -1;
	}
	return 0;
}

/* A snapshot id vmm accepts as a file name: "snap_" and [0-9a-f]. */
static bool snap_id_valid(const char *id)
{
	size_t n = strlen(SNAP_PREFIX);

	if (strncmp(id, SNAP_PREFIX, n) != 0 || !id[n] || strlen(id) > VMM_NAME_MAX)
		return false;
	for (const char *p = id + n; *p; p++)
		if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
			return false;
	return true;
}

char *vmm_snapshot_path(const struct vmm *v, const char *snap_id)
{
	if (!snap_id_valid(snap_id))
		return NULL;
	return vmm_path(v->run_dir, snap_id, SNAP_SUFFIX);
}

/* Suspend or resume the running domain `name`: 0, or -1 (logged). */
static int dom_pause(struct vmm *v, const char *name, bool suspend)
{
	virDomainPtr dom = virDomainLookupByName(vmm_conn(v), name);
	int r;

	if (!dom) {
		sbx_err(MOD, "snapshot: lookup '%s': %s", name, vmm_lv_msg());
		return -1;
	}
	r = suspend ? virDomainSuspend(dom) : virDomainResume(dom);
	if (r < 0)
		sbx_err(MOD, "snapshot: %s '%s': %s", suspend ? "suspend" : "resume", name,
			vmm_lv_msg());
	virDomainFree(dom);
	return r;
}

static int snap_convert(struct vmm *v, const char *domain, const char *dst, uint32_t timeout_ms)
{
	_cleanup_free_ char *src = vmm_path(v->run_dir, domain, ".qcow2");
	char *const argv[] = {"qemu-img", "convert", "-U",    "-q",	   "-f",
			      "qcow2",	  "-O",	     "qcow2", "-B",	   v->base_image,
			      "-F",	  "qcow2",   src,     (char *)dst, NULL};

	if (!src)
		return -1;
	return vmm_qemu_img(argv, timeout_ms);
}

int vmm_snapshot_take(struct vmm *v, const char *domain, bool running, const char *snap_id,
		      uint32_t timeout_ms, int64_t *bytes, struct sbx_error *err)
{
	_cleanup_free_ char *dst = vmm_snapshot_path(v, snap_id);
	struct stat st;
	int rc;

	if (v->remote)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, NULL,
				     "this sandbox's host is remote: snapshots are taken only of "
				     "sandboxes on the service's own host (docs/lifecycle.md)");
	if (!v->base_image || !dst || !vmm_name_valid(domain) || !vmm_has_prefix(v, domain))
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, NULL,
				     "this sandbox has no disk to snapshot");
	if (running && dom_pause(v, domain, true) < 0)
		return sbx_error_set(err, SBX_E_SERVICE_UNAVAILABLE, NULL,
				     "the sandbox could not be suspended for its snapshot; retry");
	rc = snap_convert(v, domain, dst, timeout_ms);
	if (running && dom_pause(v, domain, false) < 0 && rc == 0) {
		/* the copy is good; the guest's fate is the caller's */
		sbx_err(MOD, "snapshot %s: '%s' stays suspended", snap_id, domain);
	}
	if (rc < 0 || chmod(dst, 0600) < 0 || stat(dst, &st) < 0) {
		if (unlink(dst) < 0 && errno != ENOENT)
			sbx_warn(MOD, "cannot remove '%s': %s", dst, strerror(errno));
		if (rc == -2)
			return sbx_error_set(err, SBX_E_SERVICE_UNAVAILABLE, NULL,
					     "the snapshot was not written in time; retry");
		return sbx_error_set(err, SBX_E_SANDBOX_ERROR, NULL,
				     "the snapshot could not be written");
	}
	if (bytes)
		*bytes = (int64_t)st.st_blocks * 512;
	return 0;
}

void vmm_snapshot_delete(struct vmm *v, const char *snap_id)
{
	_cleanup_free_ char *p = vmm_snapshot_path(v, snap_id);

	if (p && unlink(p) < 0 && errno != ENOENT)
		sbx_warn(MOD, "cannot remove '%s': %s", p, strerror(errno));
}

int vmm_list_snapshots(struct vmm *v, void (*fn)(void *opaque, const char *snap_id), void *opaque)
{
	DIR *d;
	struct dirent *e;
	int n = 0;

	if (v->remote)
		return 0;
	d = opendir(v->run_dir);
	if (!d)
		return -1;
	while ((e = readdir(d))) {
		char id[VMM_NAME_MAX + 1];
		size_t len = strlen(e->d_name), sl = strlen(SNAP_SUFFIX);

		if (len <= sl || len - sl > VMM_NAME_MAX ||
		    strcmp(e->d_name + len - sl, SNAP_SUFFIX) != 0)
			continue;
		memcpy(id, e->d_name, len - sl);
		id[len - sl] = '\0';
		if (!snap_id_valid(id))
			continue;
		fn(opaque, id);
		n++;
	}
	closedir(d);
	return n;
}

int vmm_resume_suspended(struct vmm *v, const char *name)
{
	virDomainPtr dom;
	int state = 0, reason = 0, rc = 0;

	if (!vmm_name_valid(name) || !vmm_has_prefix(v, name))
		return 0;
	dom = virDomainLookupByName(vmm_conn(v), name);
	if (!dom)
		return 0;
	if (virDomainGetState(dom, &state, &reason, 0) == 0 && state == VIR_DOMAIN_PAUSED &&
	    reason == VIR_DOMAIN_PAUSED_USER) {
		rc = virDomainResume(dom) == 0 ? 1 : -1;
		if (rc < 0)
			sbx_err(MOD, "resume '%s': %s", name, vmm_lv_msg());
	}
	virDomainFree(dom);
	return rc;
}
