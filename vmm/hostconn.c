/* vmm: the minimal host-connection calls the hosts core needs (vmm.h
 * "hosts"), kept apart so that the remote hosts work can replace this
 * file with its own implementations. */
#include <libvirt/libvirt.h>
#include <string.h>

#include "vmm-priv.h"

bool vmm_connected(struct vmm *v)
{
	virConnectPtr c = vmm_conn(v);

	return c && virConnectIsAlive(c) == 1;
}

/* "driver[+transport]://[host]/path[?query]" */
bool vmm_uri_is_local(const char *uri)
{
	const char *sep = uri ? strstr(uri, "://") : NULL;

	if (!sep || memchr(uri, '+', (size_t)(sep - uri)))
		return false;
	/* no host part: "qemu:///system", "qemu:///session" */
	return sep[3] == '/';
}

bool vmm_uri_is_plaintext(const char *uri)
{
	const char *sep = uri ? strstr(uri, "://") : NULL;
	const char *plus = sep ? memchr(uri, '+', (size_t)(sep - uri)) : NULL;
	size_t n;

	if (!sep)
		return false;
	if (!plus) /* "qemu://host/system": TLS is libvirt's default remote transport */
		return false;
	plus++;
	n = (size_t)(sep - plus);
	/* tls, ssh, libssh, libssh2: encrypted; unix, ext: local or the
	 * operator's own; tcp: plain text */
	return n == 3 && strncmp(plus, "tcp", 3) == 0;
}
