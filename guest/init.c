/* sandboxd-init: bring the guest up, then serve the exec port (serve.c).
 * See init.h for the initramfs layout this expects. */
#include "guest/init.h"
#include "agentless/wire.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/statfs.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/types.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include <linux/fs.h>

/* ext4's online resize (fs/ext4/ext4.h, not in the uapi headers): grow a
 * mounted ext4 to the given count of fs blocks. */
#ifndef EXT4_IOC_RESIZE_FS
#define EXT4_IOC_RESIZE_FS _IOW('f', 16, uint64_t)
#endif

/* How long to wait for the root disk after virtio_blk loads. */
#define ROOT_WAIT_MS 5000
#define NEWROOT	     "/newroot"

/* How long to wait for the exec port to appear after virtio_console loads. */
#define PORT_WAIT_MS 10000
#define PORT_POLL_MS 10

/* Open files per process: the soft limit every command starts with (npm,
 * webpack and test runners open thousands of files; 1024 is too few) and
 * the hard limit it may raise itself to (the kernel's default fs.nr_open). */
#define NOFILE_SOFT 65536
#define NOFILE_HARD 1048576

char guest_cgroup_root[64];

static int console_fd = -1;

void guest_log(const char *fmt, ...)
{
	char line[512];
	va_list ap;
	int n;

	if (console_fd < 0)
		return;
	n = snprintf(line, sizeof(line), "sandboxd-init: ");
	va_start(ap, fmt);
	vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	n = (int)strlen(line);
	line[n++] = '\n';
	if (write(console_fd, line, (size_t)n) < 0) {
		/* nothing useful to do: the console is our only log */
	}
}

static int64_t clock_ms(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t guest_mono_ms(void)
{
	return clock_ms(CLOCK_MONOTONIC);
}

int64_t guest_boot_ms(void)
{
	return clock_ms(CLOCK_BOOTTIME);
}

/* Write a short string to a file (sysfs, cgroupfs). 0 or -1 with errno. */
static int write_file(const char *path, const char *s)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	ssize_t n;
	int saved;

	if (fd < 0)
		return -1;
	n = write(fd, s, strlen(s));
	saved = errno;
	close(fd);
	errno = saved;
	return n < 0 ? -1 : 0;
}

/* Read a small file into buf (NUL-terminated, trailing newline cut). */
static int read_file(const char *path, char *buf, size_t size)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -1;
	n = read(fd, buf, size - 1);
	close(fd);
	if (n < 0)
		return -1;
	buf[n] = '\0';
	if (n > 0 && buf[n - 1] == '\n')
		buf[n - 1] = '\0';
	return 0;
}

static void mount_one(const char *src, const char *target, const char *fstype, unsigned long flags,
		      const char *data, mode_t dir_mode)
{
	mkdir(target, dir_mode);
	if (mount(src, target, fstype, flags, data) < 0 && errno != EBUSY)
		guest_log("mount %s on %s: %s", fstype, target, strerror(errno));
}

/* Make sure fds 0, 1, 2 are the console (the kernel opens /dev/console for
 * init only when the initramfs has the node). */
static void console_open(void)
{
	int fd = open("/dev/console", O_RDWR | O_NOCTTY | O_CLOEXEC);

	if (fd < 0)
		return;
	for (int i = 0; i < 3; i++)
		if (fcntl(i, F_GETFD) < 0)
			dup2(fd, i);
	console_fd = fd;
}

static void mount_all(void)
{
	const unsigned long nosuid = MS_NOSUID | MS_NODEV | MS_NOEXEC;

	mount_one("proc", "/proc", "proc", nosuid, NULL, 0555);
	mount_one("sysfs", "/sys", "sysfs", nosuid, NULL, 0555);
	mount_one("devtmpfs", "/dev", "devtmpfs", MS_NOSUID, "mode=0755", 0755);
	console_open();
	mount_one("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
		  "gid=5,mode=620,ptmxmode=666", 0755);
	mount_one("shm", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777", 01777);
	mount_one("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777", 01777);
	mount_one("tmpfs", "/run", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755", 0755);
	if (symlink("/proc/self/fd", "/dev/fd") < 0 && errno != EEXIST) {
		/* optional */
	}
	symlink("/proc/self/fd/0", "/dev/stdin");
	symlink("/proc/self/fd/1", "/dev/stdout");
	symlink("/proc/self/fd/2", "/dev/stderr");

	mkdir("/sys/fs/cgroup", 0755);
	if (mount("cgroup2", "/sys/fs/cgroup", "cgroup2", nosuid, "nsdelegate") < 0 &&
	    mount("cgroup2", "/sys/fs/cgroup", "cgroup2", nosuid, NULL) < 0) {
		guest_log("cgroup2 unavailable (%s): timeouts kill by process group",
			  strerror(errno));
		return;
	}
	if (access("/sys/fs/cgroup/cgroup.kill", F_OK) < 0 &&
	    access("/sys/fs/cgroup/cgroup.procs", F_OK) < 0)
		return;
	snprintf(guest_cgroup_root, sizeof(guest_cgroup_root), "/sys/fs/cgroup");
	/* Controllers are a bonus (limits may come later); each may be absent. */
	write_file("/sys/fs/cgroup/cgroup.subtree_control", "+cpu");
	write_file("/sys/fs/cgroup/cgroup.subtree_control", "+memory");
	write_file("/sys/fs/cgroup/cgroup.subtree_control", "+pids");
}

/* finit_module(2) each virtio module of our kernel, in dependency order.
 * Missing files are skipped (the driver may be built in). */
static void modules_load(void)
{
	static const char *const names[] = {
	    "virtio_ring",
	    "virtio",
	    "virtio_pci_modern_dev",
	    "virtio_pci_legacy_dev",
	    "virtio_pci",
	    "virtio_console",
	    "virtio_blk",
	    "virtio_balloon", /* free page reporting (vmm's <memballoon>) */
	    "virtio-rng",     /* entropy from the host (vmm's <rng>) */
	};
	struct utsname u;
	char path[512];

	if (uname(&u) < 0)
		return;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		int fd;

		snprintf(path, sizeof(path), "/lib/modules/%s/%s.ko", u.release, names[i]);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		if (syscall(SYS_finit_module, fd, "", 0) < 0 && errno != EEXIST)
			guest_log("finit_module %s: %s", names[i], strerror(errno));
		close(fd);
	}
}

/* Look for the virtio port named WIRE_PORT_NAME; fills dev ("vport1p1").
 * 0 when found, -1 otherwise. */
static int port_find_once(char *dev, size_t size)
{
	DIR *d = opendir("/sys/class/virtio-ports");
	struct dirent *de;
	int found = -1;

	if (!d)
		return -1;
	while ((de = readdir(d))) {
		char path[512], name[128];

		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/sys/class/virtio-ports/%s/name", de->d_name);
		if (read_file(path, name, sizeof(name)) < 0 || strcmp(name, WIRE_PORT_NAME) != 0)
			continue;
		if (strlen(de->d_name) >= size)
			continue;
		snprintf(dev, size, "%s", de->d_name);
		found = 0;
		break;
	}
	closedir(d);
	return found;
}

/* Open /dev/<dev>, creating the node from sysfs' major:minor when
 * devtmpfs did not (yet). */
static int port_open(const char *dev)
{
	char path[256], sys[256], mm[32];
	unsigned maj, min;
	int fd;

	snprintf(path, sizeof(path), "/dev/%s", dev);
	fd = open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
	if (fd >= 0 || errno != ENOENT)
		return fd;
	snprintf(sys, sizeof(sys), "/sys/class/virtio-ports/%s/dev", dev);
	if (read_file(sys, mm, sizeof(mm)) < 0 || sscanf(mm, "%u:%u", &maj, &min) != 2)
		return -1;
	if (mknod(path, S_IFCHR | 0600, makedev(maj, min)) < 0 && errno != EEXIST)
		return -1;
	return open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
}

static int port_wait_open(void)
{
	int64_t deadline = guest_mono_ms() + PORT_WAIT_MS;
	char dev[64];

	for (;;) {
		if (port_find_once(dev, sizeof(dev)) == 0) {
			int fd = port_open(dev);

			if (fd >= 0) {
				char link[256];

				mkdir("/dev/virtio-ports", 0755);
				snprintf(link, sizeof(link), "../%s", dev);
				symlink(link, "/dev/virtio-ports/" WIRE_PORT_NAME);
				return fd;
			}
			if (errno == EBUSY) {
				guest_log("port %s is held by another process", dev);
				return -1;
			}
		}
		if (guest_mono_ms() >= deadline)
			return -1;
		/* Boot-time only: the port appears within a few ms of the
		 * module load, and nothing else runs yet. */
		poll(NULL, 0, PORT_POLL_MS);
	}
}

/* The value of `key` (e.g. "sandboxd.root=") on the kernel command line,
 * copied into out; 0 when present, -1 otherwise. */
static int cmdline_get(const char *key, char *out, size_t size)
{
	char line[4096];
	size_t klen = strlen(key);
	char *save = NULL;

	if (read_file("/proc/cmdline", line, sizeof(line)) < 0)
		return -1;
	for (char *w = strtok_r(line, " \t\n", &save); w; w = strtok_r(NULL, " \t\n", &save)) {
		if (strncmp(w, key, klen) != 0)
			continue;
		if (strlen(w + klen) >= size)
			return -1;
		snprintf(out, size, "%s", w + klen);
		return 0;
	}
	return -1;
}

/* Grow the ext4 mounted at `dir` to fill block device `dev` (online
 * resize in the kernel, no resize2fs needed). Only ever grows. */
static void root_grow(const char *dev, const char *dir)
{
	uint64_t dev_bytes = 0, blocks;
	int64_t t0 = guest_mono_ms();
	struct statfs sf;
	int fd;

	fd = open(dev, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || ioctl(fd, BLKGETSIZE64, &dev_bytes) < 0) {
		guest_log("root: size of %s: %s", dev, strerror(errno));
		if (fd >= 0)
			close(fd);
		return;
	}
	close(fd);
	if (statfs(dir, &sf) < 0 || sf.f_bsize <= 0)
		return;
	blocks = dev_bytes / (uint64_t)sf.f_bsize;
	if (blocks <= (uint64_t)sf.f_blocks + 1024)
		return; /* already (nearly) full size */
	fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return;
	if (ioctl(fd, EXT4_IOC_RESIZE_FS, &blocks) < 0)
		guest_log("root: grow to %llu blocks: %s", (unsigned long long)blocks,
			  strerror(errno));
	else
		guest_log("root: grew to %llu MiB in %lld ms",
			  (unsigned long long)(dev_bytes >> 20), (long long)(guest_mono_ms() - t0));
	close(fd);
}

/* The runtimes' bootstraps (images/runtimes/) live in the initramfs at
 * RUNTIMES_DIR; a root disk gets them at the same path, bound read-only
 * from underneath (nothing is written into the disk but the empty
 * directories, when the image has none). A failure is logged: the guest
 * still serves everything but the executions that need them. */
#define RUNTIMES_DIR "/usr/lib/sandboxd/runtimes"
static void runtimes_bind(void)
{
	static const char *const dirs[] = {NEWROOT "/usr", NEWROOT "/usr/lib",
					   NEWROOT "/usr/lib/sandboxd", NEWROOT RUNTIMES_DIR};

	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++)
		if (mkdir(dirs[i], 0755) < 0 && errno != EEXIST)
			break;
	if (mount(RUNTIMES_DIR, NEWROOT RUNTIMES_DIR, NULL, MS_BIND, NULL) < 0 ||
	    mount(NULL, NEWROOT RUNTIMES_DIR, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY, NULL) < 0)
		guest_log("root: bind %s: %s", RUNTIMES_DIR, strerror(errno));
}

/* When the command line says sandboxd.root=/dev/XXX (vmm/ adds it when the
 * guest has a root disk): mount that ext4, grow it to the disk's size, move
 * /proc /sys /dev /run into it and make it the root, like switch_root, so
 * commands run the disk's /bin/sh. PID 1 keeps running (it is static and
 * holds nothing on the initramfs). The initramfs stays underneath, hidden
 * (a few MiB of RAM). Returns 0, or -1 and stays on the initramfs. */
static int root_switch(void)
{
	static const char *const moves[] = {"/proc", "/sys", "/dev", "/run"};
	int64_t deadline = guest_mono_ms() + ROOT_WAIT_MS;
	char dev[64], target[128];
	struct stat st;

	if (cmdline_get("sandboxd.root=", dev, sizeof(dev)) < 0)
		return 0;
	if (strncmp(dev, "/dev/", 5) != 0 || strstr(dev, "..")) {
		guest_log("root: ignoring sandboxd.root=%s", dev);
		return -1;
	}
	while (stat(dev, &st) < 0 || !S_ISBLK(st.st_mode)) {
		if (guest_mono_ms() >= deadline) {
			guest_log("root: %s did not appear", dev);
			return -1;
		}
		poll(NULL, 0, PORT_POLL_MS);
	}
	mkdir(NEWROOT, 0755);
	/* noinit_itable: groups added by the resize stay "uninit" instead of
	 * the kernel zeroing their inode tables in the background, which
	 * would write ~1.6% of the disk into the host's overlay. */
	if (mount(dev, NEWROOT, "ext4", MS_NOATIME, "noinit_itable") < 0) {
		guest_log("root: mount %s: %s", dev, strerror(errno));
		return -1;
	}
	root_grow(dev, NEWROOT);
	runtimes_bind();
	/* /tmp is the disk's own (sticky, 1777), not RAM: big files fit. */
	umount2("/tmp", MNT_DETACH);
	for (size_t i = 0; i < sizeof(moves) / sizeof(moves[0]); i++) {
		snprintf(target, sizeof(target), NEWROOT "%s", moves[i]);
		mkdir(target, 0755);
		if (mount(moves[i], target, NULL, MS_MOVE, NULL) < 0)
			guest_log("root: move %s: %s", moves[i], strerror(errno));
	}
	if (chdir(NEWROOT) < 0 || mount(NEWROOT, "/", NULL, MS_MOVE, NULL) < 0 || chroot(".") < 0 ||
	    chdir("/") < 0) {
		/* Half-switched: nothing sane to serve from. */
		guest_log("root: switch to %s: %s", dev, strerror(errno));
		return -1;
	}
	chmod("/tmp", 01777);
	guest_log("root: %s after %lld ms", dev, (long long)guest_boot_ms());
	return 0;
}

static void limits_raise(void)
{
	struct rlimit rl;

	/* Background pipes kept open after EXIT need fds, and every command
	 * inherits these limits (`ulimit -n`). */
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return;
	if (rl.rlim_max < NOFILE_HARD)
		rl.rlim_max = NOFILE_HARD;
	rl.rlim_cur = NOFILE_SOFT < rl.rlim_max ? NOFILE_SOFT : rl.rlim_max;
	if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
		guest_log("RLIMIT_NOFILE %llu/%llu: %s", (unsigned long long)rl.rlim_cur,
			  (unsigned long long)rl.rlim_max, strerror(errno));
}

/* 1 when the kernel lists ::1 on lo (IPv6 can be disabled by sysctl). */
static int loopback_has_ipv6(void)
{
	char buf[4096];

	if (read_file("/proc/net/if_inet6", buf, sizeof(buf)) < 0)
		return 0;
	return strstr(buf, "00000000000000000000000000000001") != NULL;
}

/* Bring the loopback interface up. Guests have no NIC and nothing else
 * does it, yet servers that talk to themselves on localhost (test and dev
 * servers, databases, language servers) need it. Coming up, lo gets
 * 127.0.0.1/8 and ::1 from the kernel; 127.0.0.1 is set by hand should it
 * be missing. No `ip` binary: the tiny image has none to rely on. */
static void loopback_up(void)
{
	struct ifreq ifr;
	struct sockaddr_in *sin = (struct sockaddr_in *)&ifr.ifr_addr;
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	if (fd < 0) {
		guest_log("lo: socket: %s", strerror(errno));
		return;
	}
	memset(&ifr, 0, sizeof(ifr));
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
	if (ioctl(fd, SIOCGIFFLAGS, &ifr) < 0) {
		guest_log("lo: get flags: %s", strerror(errno));
		goto out;
	}
	ifr.ifr_flags |= IFF_UP;
	if (ioctl(fd, SIOCSIFFLAGS, &ifr) < 0) {
		guest_log("lo: up: %s", strerror(errno));
		goto out;
	}
	memset(&ifr.ifr_addr, 0, sizeof(ifr.ifr_addr));
	if (ioctl(fd, SIOCGIFADDR, &ifr) < 0) {
		sin->sin_family = AF_INET;
		sin->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		if (ioctl(fd, SIOCSIFADDR, &ifr) < 0)
			guest_log("lo: 127.0.0.1: %s", strerror(errno));
		sin->sin_addr.s_addr = htonl(0xff000000u);
		if (ioctl(fd, SIOCSIFNETMASK, &ifr) < 0)
			guest_log("lo: netmask: %s", strerror(errno));
	}
	if (!loopback_has_ipv6())
		guest_log("lo: no ::1 (IPv6 disabled?)");
out:
	close(fd);
}

int main(void)
{
	int port;

	if (getpid() != 1 && !getenv("SBX_INIT_NOT_PID1")) {
		fprintf(stderr, "sandboxd-init: must run as PID 1 of a guest\n");
		return 2;
	}
	umask(022);
	mount_all();
	modules_load();
	/* A root disk was asked for and is unusable: better no guest (the
	 * host sees the domain go, with the reason on the console) than a
	 * busybox guest posing as the full image. */
	if (root_switch() < 0)
		return 1;
	sethostname("sandbox", 7);
	loopback_up();
	limits_raise();
	setenv("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", 1);
	if (chdir("/") < 0)
		return 1;

	port = port_wait_open();
	if (port < 0) {
		/* Unrecoverable: without the port nobody can reach this guest.
		 * PID 1 exiting panics the kernel and (panic=-1, on_reboot =
		 * destroy) the host sees the domain go away. */
		guest_log("no virtio port named %s after %d ms; giving up", WIRE_PORT_NAME,
			  PORT_WAIT_MS);
		return 1;
	}
	guest_log("port %s open after %lld ms", WIRE_PORT_NAME, (long long)guest_boot_ms());
	return guest_serve(port) < 0 ? 1 : 0;
}
