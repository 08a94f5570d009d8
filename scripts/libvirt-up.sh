#!/usr/bin/env bash
# Start virtlogd and libvirtd if they are not running (no systemd here) and
# wait until qemu:///system answers.
set -euo pipefail
alive() { # pidfile name
	local pid
	[ -r "$1" ] || return 1
	pid=$(cat "$1" 2>/dev/null) || return 1
	[ -n "$pid" ] && [ "$(cat /proc/"$pid"/comm 2>/dev/null)" = "$2" ]
}
if ! alive /run/virtlogd.pid virtlogd; then
	rm -f /run/virtlogd.pid
	/usr/sbin/virtlogd -d
fi
if ! alive /run/libvirtd.pid libvirtd; then
	rm -f /run/libvirtd.pid
	/usr/sbin/libvirtd -d
fi
for _ in $(seq 1 100); do
	if virsh -c qemu:///system list >/dev/null 2>&1; then
		# Opt-in host settings (KSM with SBX_HOST_KSM=1); a no-op otherwise.
		"$(dirname "$0")/host-tune.sh"
		exit 0
	fi
	sleep 0.1
done
echo "libvirt-up: qemu:///system does not answer; see /var/log/libvirt/libvirtd.log" >&2
exit 1
