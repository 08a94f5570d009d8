/* vmm: test-only entry points (libvirt's *priv.h convention). Not for
 * production code. */
#ifndef SBX_VMM_PRIV_H
#define SBX_VMM_PRIV_H

#include <stdbool.h>
#include <stddef.h>

#include "vmm.h"

/* Longest domain name vmm accepts (prefix + 12 hex digits must fit). */
#define VMM_NAME_MAX 64

/* A domain name vmm would use or accept: 1..VMM_NAME_MAX bytes of
 * [A-Za-z0-9_.-], not starting with '.'. */
bool vmm_name_valid(const char *name);

/* Make vmm_vm_start() emit <domain type='TYPE'> (e.g. "test" for libvirt's
 * test:///default driver) instead of kvm/qemu. `type` is copied; NULL
 * restores the normal behaviour. */
void vmm_priv_set_virt_type(struct vmm *v, const char *type);

/* The sandbox id inside a <metadata> element as libvirt returns it from
 * virDomainGetMetadata(), unescaped into out (outlen bytes). 0, or -1 when
 * there is no id element or it does not fit. */
int vmm_priv_metadata_id(const char *xml, char *out, size_t outlen);

/* ---- shared by vmm.c and channel.c (not for other modules) ---- */
#ifdef LIBVIRT_H
/* The libvirt error of this thread, for the log (never for tenants). */
const char *vmm_lv_msg(void);
/* The connection in use (replaced after a reconnect). */
virConnectPtr vmm_conn(struct vmm *v);
/* The handle's domain on the current connection (borrowed), NULL once it
 * is known gone. */
virDomainPtr vmm_vm_dom(struct vmm_vm *vm);
/* Open the exec channel `port` of `dom` as a libvirt stream. */
int vmm_chan_stream_open(virConnectPtr conn, virDomainPtr dom, const char *port, const char *name,
			 sbx_recv_fn recv, void *opaque, struct sbx_channel *out,
			 struct sbx_error *err);
#endif
/* Connect to a guest's channel socket at `path` (retrying while qemu has
 * not bound it yet); `name` is for the log. */
int vmm_chan_sock_open(const char *path, const char *name, sbx_recv_fn recv, void *opaque,
		       struct sbx_channel *out, struct sbx_error *err);

/* The socket transport over an already connected stream socket `fd`
 * (owned from now on, closed on error too): for tests with a socketpair.
 * Unlike vmm_chan_sock_open's, it has the credit window ops (send_window,
 * credit) the stream transport has, so the window can be tested here. */
int vmm_chan_sock_from_fd(int fd, const char *name, sbx_recv_fn recv, void *opaque,
			  struct sbx_channel *out, struct sbx_error *err);

#endif
