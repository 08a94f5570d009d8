/* vmm: pause and resume of a guest (docs/lifecycle.md "Pause and
 * resume"). A pause saves the domain's memory and device state to
 * run_dir/NAME.save beside its overlay (virDomainSave: the transient domain
 * is gone afterwards, its files stay); a resume starts it again from that
 * file (virDomainRestore: same name, same UUID, same XML) and deletes the
 * file. On a remote host the same paths are the host's and sizes and
 * deletes go through the run_dir pool (storage.c). Every call here is a
 * libvirt call, bounded like every other one by the connection's keepalive
 * (vmm.h); call with no lock held, off any request's thread.
 *
 * A save or a restore also has a deadline of its own (a stuck disk, a
 * wedged qemu answer keepalive but never finish): a watchdog thread wakes
 * at it and aborts the job (save: virDomainAbortJob, libvirt resumes the
 * guest; restore: the half-restored domain is destroyed), again every
 * WATCHDOG_RETRY_MS until the call returns. It holds its own mutex only
 * to wait, never across a libvirt call. */
#include "vmm.h"

#include <dirent.h>
#include <pthread.h>
#include <stdbool.h>
#include <time.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>

#include "vmm-priv.h"

#define MOD		  "vmm"
#define VMM_SAVE_SUFFIX	  ".save"
#define WATCHDOG_RETRY_MS 250

/* ----------------------------------------------------------- watchdog */

struct watchdog {
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool done;	       /* the call returned (under lock) */
	bool fired;	       /* the deadline passed (under lock) */
	int64_t deadline_mono; /* 0: no watchdog */
	struct vmm *v;
	char name[VMM_NAME_MAX + 1];
	virDomainPtr dom; /* a save's domain (a ref of the watchdog's); NULL: a restore */
};

/* Abort the save job of dom (a save) or destroy the domain `name` (a
 * restore under way, or one restored past its deadline); files stay. */
static void job_end(struct vmm *v, virDomainPtr save_dom, const char *name)
{
	bool save = save_dom != NULL;
	virDomainPtr dom = save ? save_dom : virDomainLookupByName(vmm_conn(v), name);

	if (!dom)
		return; /* not there (yet, or any more) */
	if (save) {
		if (virDomainAbortJob(dom) == 0)
			sbx_warn(MOD, "save '%s': past its deadline: aborted", name);
		else
			sbx_warn(MOD, "save '%s': past its deadline: abort refused: %s", name,
				 vmm_lv_msg());
	} else if (virDomainDestroy(dom) == 0) {
		sbx_warn(MOD, "restore '%s': past its deadline: destroyed", name);
	}
	if (!save)
		virDomainFree(dom);
}

static void watchdog_fire(struct watchdog *w)
{
	job_end(w->v, w->dom, w->name);
}

static void *watchdog_main(void *arg)
{
	struct watchdog *w = arg;
	int64_t at = w->deadline_mono;

	pthread_mutex_lock(&w->lock);
	for (;;) {
		struct timespec ts = {.tv_sec = at / 1000, .tv_nsec = (long)(at % 1000) * 1000000L};

		while (!w->done && pthread_cond_timedwait(&w->cond, &w->lock, &ts) == 0) {
		}
		if (w->done)
			break;
		w->fired = true;
		pthread_mutex_unlock(&w->lock);
		watchdog_fire(w); /* a libvirt call: no lock held */
		at = sbx_mono_ms() + WATCHDOG_RETRY_MS;
		pthread_mutex_lock(&w->lock);
	}
	pthread_mutex_unlock(&w->lock);
	return NULL;
}

/* Start a watchdog for the save of dom, or the restore of `name` (dom
 * NULL); timeout_ms 0: none. */
static void watchdog_start(struct watchdog *w, struct vmm *v, virDomainPtr dom, const char *name,
			   uint32_t timeout_ms)
{
	pthread_condattr_t ca;

	memset(w, 0, sizeof(*w));
	if (!timeout_ms)
		return;
	if (dom && virDomainRef(dom) < 0) {
		sbx_warn(MOD, "save '%s': no watchdog: no deadline of its own", name);
		return; /* never a restore's watchdog for a save */
	}
	w->v = v;
	w->dom = dom;
	snprintf(w->name, sizeof(w->name), "%s", name);
	w->deadline_mono = sbx_mono_ms() + timeout_ms;
	pthread_mutex_init(&w->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&w->cond, &ca);
	pthread_condattr_destroy(&ca);
	if (pthread_create(&w->thread, NULL, watchdog_main, w) != 0) {
		sbx_warn(MOD, "'%s': no watchdog thread: no deadline of its own", name);
		pthread_cond_destroy(&w->cond);
		pthread_mutex_destroy(&w->lock);
		if (w->dom)
			virDomainFree(w->dom);
		w->deadline_mono = 0;
	}
}

/* The call returned: stop the watchdog; true when it fired. */
static bool watchdog_stop(struct watchdog *w)
{
	bool fired;

	if (!w->deadline_mono)
		return false;
	pthread_mutex_lock(&w->lock);
	w->done = true;
	pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->lock);
	pthread_join(w->thread, NULL);
	fired = w->fired;
	pthread_cond_destroy(&w->cond);
	pthread_mutex_destroy(&w->lock);
	if (w->dom)
		virDomainFree(w->dom);
	return fired;
}

static int save_path(const struct vmm *v, const char *name, const char *suffix, char *out,
		     size_t len)
{
	int n = snprintf(out, len, "%s/%s%s", v->run_dir, name, suffix);
	return n < 0 || (size_t)n >= len ? -1 : 0;
}

/* Host-observed bytes a file takes (allocated blocks), 0 when absent. */
static int64_t local_bytes(const char *path)
{
	struct stat st;

	if (stat(path, &st) < 0)
		return 0;
	return (int64_t)st.st_blocks * 512;
}

/* The same through the pool (remote host). */
static int64_t remote_bytes(virStoragePoolPtr p, const char *file)
{
	virStorageVolPtr vol = virStorageVolLookupByName(p, file);
	virStorageVolInfo info;
	int64_t b = 0;

	if (!vol)
		return 0;
	if (virStorageVolGetInfo(vol, &info) == 0)
		b = (int64_t)info.allocation;
	virStorageVolFree(vol);
	return b;
}

int64_t vmm_saved_bytes(struct vmm *v, const char *name)
{
	char save[PATH_MAX], ov[PATH_MAX];

	if (!vmm_name_valid(name))
		return -1;
	if (v->remote) {
		virStoragePoolPtr p = vmm_storage_pool(v);
		char f1[VMM_NAME_MAX + 16], f2[VMM_NAME_MAX + 16];
		int64_t b;

		if (!p)
			return -1;
		if (virStoragePoolRefresh(p, 0) < 0)
			sbx_debug(MOD, "refresh pool '%s': %s", v->pool_name, vmm_lv_msg());
		snprintf(f1, sizeof(f1), "%s%s", name, VMM_SAVE_SUFFIX);
		snprintf(f2, sizeof(f2), "%s.qcow2", name);
		b = remote_bytes(p, f1) + remote_bytes(p, f2);
		virStoragePoolFree(p);
		return b;
	}
	if (save_path(v, name, VMM_SAVE_SUFFIX, save, sizeof(save)) < 0 ||
	    save_path(v, name, ".qcow2", ov, sizeof(ov)) < 0)
		return -1;
	return local_bytes(save) + local_bytes(ov);
}

int vmm_saved(struct vmm *v, const char *name)
{
	char path[PATH_MAX];

	if (!vmm_name_valid(name) || !vmm_has_prefix(v, name))
		return 0;
	if (v->remote) {
		virStoragePoolPtr p = vmm_storage_pool(v);
		char file[VMM_NAME_MAX + 16];
		virStorageVolPtr vol;

		if (!p)
			return -1;
		if (virStoragePoolRefresh(p, 0) < 0)
			sbx_debug(MOD, "refresh pool '%s': %s", v->pool_name, vmm_lv_msg());
		snprintf(file, sizeof(file), "%s%s", name, VMM_SAVE_SUFFIX);
		vol = virStorageVolLookupByName(p, file);
		virStoragePoolFree(p);
		if (vol)
			virStorageVolFree(vol);
		return vol ? 1 : 0;
	}
	if (save_path(v, name, VMM_SAVE_SUFFIX, path, sizeof(path)) < 0)
		return -1;
	return access(path, F_OK) == 0 ? 1 : 0;
}

int vmm_vm_save(struct vmm_vm *vm, uint32_t timeout_ms, int64_t *bytes, struct sbx_error *err)
{
	struct vmm *v = vm->v;
	char path[PATH_MAX];
	virDomainPtr dom = vmm_vm_dom(vm);
	struct watchdog w;
	int rc;
	bool late;

	if (!dom)
		return sbx_error_set(err, SBX_E_SANDBOX_ERROR, NULL, "the sandbox's guest is gone");
	if (save_path(v, vm->name, VMM_SAVE_SUFFIX, path, sizeof(path)) < 0)
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "save path too long");
	watchdog_start(&w, v, dom, vm->name, timeout_ms);
	rc = virDomainSave(dom, path);
	late = watchdog_stop(&w);
	/* an abort before QEMU's migration to the file began does not stop
	 * libvirt's save: one that finished is a pause, late but done */
	if (rc == 0 && late)
		sbx_warn(MOD, "save '%s': finished past its deadline of %u ms", vm->name,
			 timeout_ms);
	if (rc < 0) {
		int code = vmm_lv_code();
		const char *msg = vmm_lv_msg();
		bool full = msg && (strstr(msg, "No space left") || strstr(msg, "ENOSPC"));

		sbx_err(MOD, "save '%s': %s", vm->name, msg ? msg : "?");
		/* libvirt removes a partial file and resumes the guest; be sure */
		if (!v->remote)
			unlink(path);
		if (late) {
			sbx_error_set(err, SBX_E_SERVICE_UNAVAILABLE, NULL,
				      "the sandbox could not be paused within %u ms (its host's "
				      "disk is slow); it keeps running: retry later",
				      timeout_ms);
			if (err)
				err->retry_after_s = 30;
			return -1;
		}
		if (full)
			return sbx_error_set(err, SBX_E_INSUFFICIENT_STORAGE, NULL,
					     "the host has no room to save the sandbox's memory; "
					     "it keeps running");
		return sbx_error_set(err,
				     code == VIR_ERR_NO_DOMAIN ? SBX_E_SANDBOX_ERROR
							       : SBX_E_SERVICE_UNAVAILABLE,
				     NULL, "the sandbox could not be paused; it keeps running");
	}
	/* private to the daemon whoever wrote it (libvirt makes it 0600) */
	if (!v->remote && chmod(path, 0600) < 0)
		sbx_warn(MOD, "chmod '%s': %s", path, strerror(errno));
	if (bytes)
		*bytes = vmm_saved_bytes(v, vm->name);
	return 0;
}

struct vmm_vm *vmm_vm_restore(struct vmm *v, const char *name, uint32_t timeout_ms, bool *timed_out,
			      struct sbx_error *err)
{
	char path[PATH_MAX];
	struct watchdog w;
	int rc;

	if (!vmm_name_valid(name) || !vmm_has_prefix(v, name) ||
	    save_path(v, name, VMM_SAVE_SUFFIX, path, sizeof(path)) < 0) {
		sbx_error_set(err, SBX_E_NOT_FOUND, NULL, "no such guest");
		return NULL;
	}
	if (timed_out)
		*timed_out = false;
	watchdog_start(&w, v, NULL, name, timeout_ms);
	rc = virDomainRestore(vmm_conn(v), path);
	if (watchdog_stop(&w)) {
		/* past its deadline: whatever the call said, no guest of it
		 * runs (one restored just before the watchdog is ended too) */
		sbx_err(MOD, "restore '%s': not done within %u ms", name, timeout_ms);
		job_end(v, NULL, name);
		if (timed_out)
			*timed_out = true;
		sbx_error_set(err, SBX_E_SANDBOX_ERROR, NULL,
			      "the sandbox could not be resumed within %u ms; it has failed",
			      timeout_ms);
		return NULL;
	}
	if (rc < 0) {
		const char *msg = vmm_lv_msg();

		sbx_err(MOD, "restore '%s': %s", name, msg ? msg : "?");
		/* restored by an earlier try whose answer was lost? */
		struct vmm_vm *vm = vmm_vm_lookup(v, name, NULL);
		if (vm) {
			vmm_saved_delete(v, name);
			return vm;
		}
		sbx_error_set(err, SBX_E_SERVICE_UNAVAILABLE, NULL,
			      "the sandbox could not be resumed; it stays paused: retry");
		if (err)
			err->retry_after_s = 5;
		return NULL;
	}
	struct vmm_vm *vm = vmm_vm_lookup(v, name, err);
	if (vm)
		vmm_saved_delete(v, name);
	return vm;
}

void vmm_saved_delete(struct vmm *v, const char *name)
{
	char path[PATH_MAX];

	if (!vmm_name_valid(name))
		return;
	if (v->remote) {
		vmm_storage_delete_file(v, name, VMM_SAVE_SUFFIX);
		return;
	}
	if (save_path(v, name, VMM_SAVE_SUFFIX, path, sizeof(path)) == 0 && unlink(path) < 0 &&
	    errno != ENOENT)
		sbx_warn(MOD, "cannot remove '%s': %s", path, strerror(errno));
}

/* The names of ours with a save file, each once: fn(opaque, name). */
int vmm_list_saved(struct vmm *v, void (*fn)(void *opaque, const char *name), void *opaque)
{
	size_t sl = strlen(VMM_SAVE_SUFFIX);
	int count = 0;

	if (v->remote) {
		virStoragePoolPtr p = vmm_storage_pool(v);
		virStorageVolPtr *vols = NULL;
		int nv;

		if (!p)
			return -1;
		if (virStoragePoolRefresh(p, 0) < 0)
			sbx_debug(MOD, "refresh pool '%s': %s", v->pool_name, vmm_lv_msg());
		nv = virStoragePoolListAllVolumes(p, &vols, 0);
		for (int i = 0; i < nv; i++) {
			const char *file = virStorageVolGetName(vols[i]);
			size_t fl = file ? strlen(file) : 0;
			char name[VMM_NAME_MAX + 1];

			if (fl > sl && fl - sl <= VMM_NAME_MAX &&
			    strcmp(file + fl - sl, VMM_SAVE_SUFFIX) == 0) {
				memcpy(name, file, fl - sl);
				name[fl - sl] = '\0';
				if (vmm_has_prefix(v, name) && vmm_name_valid(name)) {
					fn(opaque, name);
					count++;
				}
			}
			virStorageVolFree(vols[i]);
		}
		free(vols);
		virStoragePoolFree(p);
		return nv < 0 ? -1 : count;
	}
	DIR *d = opendir(v->run_dir);
	struct dirent *de;

	if (!d)
		return errno == ENOENT ? 0 : -1;
	while ((de = readdir(d))) {
		size_t fl = strlen(de->d_name);
		char name[VMM_NAME_MAX + 1];

		if (fl <= sl || fl - sl > VMM_NAME_MAX ||
		    strcmp(de->d_name + fl - sl, VMM_SAVE_SUFFIX) != 0)
			continue;
		memcpy(name, de->d_name, fl - sl);
		name[fl - sl] = '\0';
		if (vmm_has_prefix(v, name) && vmm_name_valid(name)) {
			fn(opaque, name);
			count++;
		}
	}
	closedir(d);
	return count;
}
