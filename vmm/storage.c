/* vmm: run_dir on a remote host as a libvirt `dir` storage pool: overlays
 * are volumes with a <backingStore> of the base image, console logs are
 * read (virStorageVolDownload) and deleted as volumes. Nothing here touches
 * this machine's filesystem (docs/vmm.md, "Remote hosts"). */
#include "vmm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>

#include "vmm-priv.h"

#define MOD "vmm"

/* The files vmm keeps per domain in run_dir (vmm.c deletes the same set
 * locally): the overlay, and the console log with virtlogd's rotations. */
static const char *const vmm_vol_suffixes[] = {".qcow2",	 ".save",	   ".console.log",
					       ".console.log.0", ".console.log.1", ".console.log.2",
					       ".console.log.3"};

void vmm_storage_init(struct vmm *v)
{
	/* One pool per directory (libvirt refuses two pools with one target
	 * path): FNV-1a of run_dir, so daemons sharing a run_dir share the
	 * pool and two with their own run_dirs do not. */
	uint64_t h = 1469598103934665603ULL;
	for (const char *p = v->run_dir; *p; p++)
		h = (h ^ (unsigned char)*p) * 1099511628211ULL;
	snprintf(v->pool_name, sizeof(v->pool_name), "%s%016llx", VMM_POOL_PREFIX,
		 (unsigned long long)h);
}

/* An active pool of any name whose target is run_dir (an operator's, or
 * one of ours made under another name), or NULL. */
static virStoragePoolPtr vmm_pool_by_path(struct vmm *v, virConnectPtr c)
{
	virStoragePoolPtr *pools = NULL, found = NULL;
	struct sbx_buf want;
	sbx_buf_init(&want, 4096);
	int r = sbx_buf_printf(&want, "<path>");
	r |= vmm_xml_escape(&want, v->run_dir);
	r |= sbx_buf_printf(&want, "</path>");
	int n = r ? -1
		  : virConnectListAllStoragePools(c, &pools, VIR_CONNECT_LIST_STORAGE_POOLS_ACTIVE);
	for (int i = 0; i < n; i++) {
		char *xml = found ? NULL : virStoragePoolGetXMLDesc(pools[i], 0);
		/* The pool's own <target><path> (a <source> path comes first). */
		const char *t = xml ? strstr(xml, "<target>") : NULL;
		if (t && strncmp(strstr(t, "<path>") ? strstr(t, "<path>") : "", want.data,
				 want.len) == 0)
			found = pools[i];
		else
			virStoragePoolFree(pools[i]);
		free(xml);
	}
	free(pools);
	sbx_buf_release(&want);
	return found;
}

/* The pool at run_dir, started (and its directory built) when missing.
 * NULL when libvirt refused (logged). Caller frees. */
static virStoragePoolPtr vmm_pool(struct vmm *v)
{
	virConnectPtr c = vmm_conn(v);
	virStoragePoolPtr p = virStoragePoolLookupByName(c, v->pool_name);
	if (p) {
		if (virStoragePoolIsActive(p) == 1 ||
		    virStoragePoolCreate(p, VIR_STORAGE_POOL_CREATE_WITH_BUILD) == 0)
			return p;
		sbx_err(MOD, "start pool '%s': %s", v->pool_name, vmm_lv_msg());
		virStoragePoolFree(p);
		return NULL;
	}
	if (vmm_lv_code() != VIR_ERR_NO_STORAGE_POOL) {
		sbx_err(MOD, "lookup pool '%s': %s", v->pool_name, vmm_lv_msg());
		return NULL;
	}
	struct sbx_buf b;
	sbx_buf_init(&b, 4096);
	int r = sbx_buf_printf(&b, "<pool type='dir'><name>%s</name><target><path>", v->pool_name);
	r |= vmm_xml_escape(&b, v->run_dir);
	r |= sbx_buf_printf(&b, "</path><permissions><mode>0711</mode></permissions>"
				"</target></pool>");
	if (r) {
		sbx_buf_release(&b);
		return NULL;
	}
	/* Transient: it goes with the host's libvirtd and vmm makes it again
	 * on first use. */
	p = virStoragePoolCreateXML(c, b.data, VIR_STORAGE_POOL_CREATE_WITH_BUILD);
	sbx_buf_release(&b);
	if (!p) {
		/* Another thread of ours may have made it meanwhile, or a pool of
		 * another name already has this directory. */
		char msg[256];
		snprintf(msg, sizeof(msg), "%s", vmm_lv_msg());
		p = virStoragePoolLookupByName(c, v->pool_name);
		if (!p)
			p = vmm_pool_by_path(v, c);
		if (!p)
			sbx_err(MOD, "create pool '%s' at '%s': %s", v->pool_name, v->run_dir, msg);
		return p;
	}
	sbx_info(MOD, "storage pool '%s' at '%s' on '%s'", v->pool_name, v->run_dir, v->uri);
	return p;
}

virStoragePoolPtr vmm_storage_pool(struct vmm *v)
{
	return vmm_pool(v);
}

int vmm_storage_overlay_create(struct vmm *v, const char *name, uint64_t gib)
{
	virStoragePoolPtr p = vmm_pool(v);
	if (!p)
		return -1;
	struct sbx_buf b;
	sbx_buf_init(&b, 4096);
	int r = sbx_buf_printf(&b, "<volume><name>");
	r |= vmm_xml_escape(&b, name);
	r |= sbx_buf_printf(&b,
			    ".qcow2</name><capacity unit='GiB'>%llu</capacity>"
			    "<allocation>0</allocation>"
			    "<target><format type='qcow2'/></target><backingStore><path>",
			    (unsigned long long)gib);
	r |= vmm_xml_escape(&b, v->base_image);
	r |= sbx_buf_printf(&b, "</path><format type='qcow2'/></backingStore></volume>");
	virStorageVolPtr vol = r ? NULL : virStorageVolCreateXML(p, b.data, 0);
	if (!vol && !r)
		sbx_err(MOD, "create overlay volume '%s.qcow2': %s", name, vmm_lv_msg());
	sbx_buf_release(&b);
	virStoragePoolFree(p);
	if (!vol)
		return -1;
	virStorageVolFree(vol);
	return 0;
}

/* Delete volume `file` of pool p; a missing one is fine. */
static int vmm_vol_delete(virStoragePoolPtr p, const char *file)
{
	virStorageVolPtr vol = virStorageVolLookupByName(p, file);
	if (!vol)
		return 0;
	int r = virStorageVolDelete(vol, 0);
	if (r < 0)
		sbx_warn(MOD, "delete volume '%s': %s", file, vmm_lv_msg());
	virStorageVolFree(vol);
	return r < 0 ? -1 : 1;
}

void vmm_storage_delete(struct vmm *v, const char *name)
{
	virStoragePoolPtr p = vmm_pool(v);
	if (!p)
		return;
	/* The console logs are virtlogd's files, unknown to the pool until a
	 * refresh (which libvirt refuses while a volume is being built: those
	 * leftovers go at the next vmm_prune_files). */
	if (virStoragePoolRefresh(p, 0) < 0)
		sbx_debug(MOD, "refresh pool '%s': %s", v->pool_name, vmm_lv_msg());
	for (size_t i = 0; i < SBX_ARRAY_SIZE(vmm_vol_suffixes); i++) {
		char file[VMM_NAME_MAX + 32];
		snprintf(file, sizeof(file), "%s%s", name, vmm_vol_suffixes[i]);
		vmm_vol_delete(p, file);
	}
	virStoragePoolFree(p);
}

void vmm_storage_delete_file(struct vmm *v, const char *name, const char *suffix)
{
	virStoragePoolPtr p = vmm_pool(v);
	char file[VMM_NAME_MAX + 32];

	if (!p)
		return;
	if (virStoragePoolRefresh(p, 0) < 0)
		sbx_debug(MOD, "refresh pool '%s': %s", v->pool_name, vmm_lv_msg());
	snprintf(file, sizeof(file), "%s%s", name, suffix);
	vmm_vol_delete(p, file);
	virStoragePoolFree(p);
}

char *vmm_storage_tail(struct vmm *v, const char *name, size_t max)
{
	char file[VMM_NAME_MAX + 32];
	virStoragePoolPtr p = vmm_pool(v);
	virStorageVolPtr vol = NULL;
	virStreamPtr st = NULL;
	virStorageVolInfo info;
	char *buf = NULL;
	size_t got = 0;

	if (!p)
		return NULL;
	snprintf(file, sizeof(file), "%s.console.log", name);
	vol = virStorageVolLookupByName(p, file);
	if (!vol && virStoragePoolRefresh(p, 0) == 0)
		vol = virStorageVolLookupByName(p, file);
	if (!vol || virStorageVolGetInfo(vol, &info) < 0 || info.capacity == 0)
		goto out;
	/* A plain file's capacity is its size. */
	size_t want = info.capacity < max ? (size_t)info.capacity : max;
	st = virStreamNew(vmm_conn(v), 0);
	buf = malloc(want + 1);
	if (!st || !buf || virStorageVolDownload(vol, st, info.capacity - want, want, 0) < 0) {
		sbx_warn(MOD, "download '%s': %s", file, vmm_lv_msg());
		goto fail;
	}
	for (;;) {
		int n = virStreamRecv(st, buf + got, want - got);
		if (n < 0) {
			virStreamAbort(st);
			goto fail;
		}
		if (n == 0 || (got += (size_t)n) == want)
			break;
	}
	if (virStreamFinish(st) < 0 && got < want)
		goto fail;
	if (got == 0)
		goto fail;
	buf[got] = '\0';
	goto out;
fail:
	free(buf);
	buf = NULL;
out:
	if (st)
		virStreamFree(st);
	if (vol)
		virStorageVolFree(vol);
	virStoragePoolFree(p);
	return buf;
}

int vmm_storage_prune(struct vmm *v,
		      bool (*prunable)(struct vmm *v, const char *file, char **live, int n),
		      char **live, int n)
{
	virStoragePoolPtr p = vmm_pool(v);
	virStorageVolPtr *vols = NULL;
	int removed = 0;

	if (!p)
		return -1;
	if (virStoragePoolRefresh(p, 0) < 0)
		sbx_debug(MOD, "refresh pool '%s': %s", v->pool_name, vmm_lv_msg());
	int nv = virStoragePoolListAllVolumes(p, &vols, 0);
	if (nv < 0) {
		sbx_err(MOD, "list volumes of '%s': %s", v->pool_name, vmm_lv_msg());
		virStoragePoolFree(p);
		return -1;
	}
	for (int i = 0; i < nv; i++) {
		const char *file = virStorageVolGetName(vols[i]);
		if (file && prunable(v, file, live, n) && virStorageVolDelete(vols[i], 0) == 0) {
			sbx_info(MOD, "removed stale volume '%s' (domain not running)", file);
			removed++;
		}
		virStorageVolFree(vols[i]);
	}
	free(vols);
	virStoragePoolFree(p);
	return removed;
}
