/* A TCP relay for integration tests, in a child process: what a client
 * sends to it goes to the daemon and back, and SIGUSR1 cuts every
 * connection it relays at once (close(), no WebSocket close frame: the
 * drop of a lost network). Header-only, after harness.h. */
#ifndef SBX_TEST_RELAY_H
#define SBX_TEST_RELAY_H

#include <poll.h>
#include <sys/prctl.h>

static volatile sig_atomic_t relay_cut;

static void relay_on_usr1(int sig)
{
	(void)sig;
	relay_cut = 1;
}

/* The relay's child: accept, connect to the daemon, copy bytes both ways;
 * SIGUSR1 closes every connection it has (no close frame: a drop). */
static void relay_child(int ls, int to_port)
{
	struct sigaction sa = {.sa_handler = relay_on_usr1};
	int pair[32][2], n = 0;

	sigaction(SIGUSR1, &sa, NULL);
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	for (;;) {
		struct pollfd p[1 + 64];
		char buf[16384];

		if (relay_cut) {
			for (int i = 0; i < n; i++) {
				close(pair[i][0]);
				close(pair[i][1]);
			}
			n = 0;
			relay_cut = 0;
		}
		p[0] = (struct pollfd){.fd = ls, .events = POLLIN};
		for (int i = 0; i < n; i++) {
			p[1 + 2 * i] = (struct pollfd){.fd = pair[i][0], .events = POLLIN};
			p[2 + 2 * i] = (struct pollfd){.fd = pair[i][1], .events = POLLIN};
		}
		if (poll(p, (nfds_t)(1 + 2 * n), 200) <= 0)
			continue;
		for (int i = n - 1; i >= 0; i--) {
			for (int side = 0; side < 2; side++) {
				ssize_t r;

				if (!(p[1 + 2 * i + side].revents & (POLLIN | POLLHUP | POLLERR)))
					continue;
				r = recv(pair[i][side], buf, sizeof buf, 0);
				if (r > 0 &&
				    send(pair[i][!side], buf, (size_t)r, MSG_NOSIGNAL) == r)
					continue;
				close(pair[i][0]);
				close(pair[i][1]);
				pair[i][0] = pair[n - 1][0];
				pair[i][1] = pair[n - 1][1];
				n--;
				break;
			}
		}
		if ((p[0].revents & POLLIN) && n < 32) {
			struct sockaddr_in sa_d = {.sin_family = AF_INET,
						   .sin_port = htons((uint16_t)to_port)};
			int c = accept(ls, NULL, NULL), u = socket(AF_INET, SOCK_STREAM, 0);

			inet_pton(AF_INET, "127.0.0.1", &sa_d.sin_addr);
			if (c >= 0 && u >= 0 &&
			    connect(u, (struct sockaddr *)&sa_d, sizeof sa_d) == 0) {
				pair[n][0] = c;
				pair[n][1] = u;
				n++;
			} else {
				close(c);
				close(u);
			}
		}
	}
}

/* A relay to 127.0.0.1:to_port on 127.0.0.1:*port: its pid (SIGUSR1
 * cuts its connections, SIGKILL ends it). */
static pid_t relay_start(int to_port, int *port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	socklen_t sl = sizeof sa;
	int ls = socket(AF_INET, SOCK_STREAM, 0);
	pid_t pid;

	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	assert_int_equal(bind(ls, (struct sockaddr *)&sa, sizeof sa), 0);
	assert_int_equal(listen(ls, 8), 0);
	assert_int_equal(getsockname(ls, (struct sockaddr *)&sa, &sl), 0);
	*port = ntohs(sa.sin_port);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		relay_child(ls, to_port);
	close(ls);
	return pid;
}

#endif
