/* util: sbx_notify, the sd_notify(3) protocol (util.h). One datagram of
 * "KEY=VALUE\n..." to the AF_UNIX socket in $NOTIFY_SOCKET; systemd
 * documents it as a stable interface that a service may speak itself. */
#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "util.h"

int sbx_notify(const char *state)
{
	const char *path = getenv("NOTIFY_SOCKET");
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	size_t n, len = strlen(state);
	socklen_t salen;
	ssize_t sent;
	int fd;

	if (!path || !path[0])
		return 0;
	n = strlen(path);
	if ((path[0] != '/' && path[0] != '@') || n >= sizeof(sa.sun_path))
		return -1;
	memcpy(sa.sun_path, path, n);
	if (path[0] == '@')
		sa.sun_path[0] = '\0'; /* abstract namespace */
	salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + (path[0] == '/'));
	if ((fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0)) < 0)
		return -1;
	do
		sent = sendto(fd, state, len, MSG_NOSIGNAL, (struct sockaddr *)&sa, salen);
	while (sent < 0 && errno == EINTR);
	close(fd);
	return sent == (ssize_t)len ? 1 : -1;
}
