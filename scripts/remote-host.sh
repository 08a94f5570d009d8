#!/usr/bin/env bash
# A second libvirt host on this machine, reached over TLS like a real
# remote one (docs/remote-hosts.md):
#   scripts/remote-host.sh up DIR     create it (idempotent), print its URI
#   scripts/remote-host.sh down DIR   destroy its guests, stop it, remove it
#   scripts/remote-host.sh uri DIR    print the URI of a host that is up
#
# `up` makes a veth pair (gateway side $SBX_RH_GW/24 on $SBX_RH_VETH, the
# other end $SBX_RH_ADDR/24 inside network namespace $SBX_RH_NS), a test CA
# with a server certificate for $SBX_RH_ADDR (IP SAN) and a client
# certificate, and starts virtlogd + libvirtd (--listen, TLS on port 16514)
# inside that network namespace and a mount namespace of their own, in
# which DIR/{run,lib,cache,log,etc} are bind-mounted over /run/libvirt,
# /var/lib/libvirt, /var/cache/libvirt, /var/log/libvirt and /etc/libvirt.
# Everything it makes lives in DIR:
#   DIR/pki/client      pkipath for the client (cacert.pem, clientcert.pem, clientkey.pem)
#   DIR/pki/server      the server's certificate and key
#   DIR/state           the host's state dir (images/, run/, overlays)
#   DIR/uri             qemu+tls://ADDR/system?pkipath=DIR/pki/client
#   DIR/env             the names and addresses used (for `down`)
# The machine's own libvirtd, its config and the client's default
# certificates are not touched. Needs root, iproute2, util-linux, openssl.
#
# Environment (defaults; set them so two hosts on one machine do not clash):
#   SBX_RH_NS=sbxrh0  SBX_RH_VETH=sbxrh0  SBX_RH_GW=10.77.0.1  SBX_RH_ADDR=10.77.0.2
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib/netns.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/netns.sh"

cmd=${1:-}
dir=${2:-}
if [ -z "$cmd" ] || [ -z "$dir" ]; then
	echo "usage: $0 up|down|uri DIR" >&2
	exit 2
fi
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

if [ -r "$dir/env" ]; then
	# shellcheck disable=SC1091
	. "$dir/env"
fi
NS=${SBX_RH_NS:-${NS:-sbxrh0}}
VETH=${SBX_RH_VETH:-${VETH:-sbxrh0}}
GW=${SBX_RH_GW:-${GW:-10.77.0.1}}
ADDR=${SBX_RH_ADDR:-${ADDR:-10.77.0.2}}
URI="qemu+tls://$ADDR/system?pkipath=$dir/pki/client"

alive() { # pidfile name
	local pid
	[ -r "$1" ] || return 1
	pid=$(cat "$1" 2>/dev/null) || return 1
	[ -n "$pid" ] && [ "$(cat /proc/"$pid"/comm 2>/dev/null)" = "$2" ]
}

# ----------------------------------------------------------- certificates
# A CA, a server certificate for ADDR (IP SAN, serverAuth) and a client
# certificate (clientAuth) whose DN is what tls_allowed_dn_list admits.
make_pki() {
	local p=$dir/pki
	[ -s "$p/client/clientkey.pem" ] && [ -s "$p/server/serverkey.pem" ] && return 0
	mkdir -p "$p/ca" "$p/server" "$p/client"
	chmod 700 "$p/ca"
	openssl req -x509 -newkey rsa:3072 -nodes -days 30 -subj "/O=sandboxd test/CN=sandboxd test CA" \
		-keyout "$p/ca/cakey.pem" -out "$p/ca/cacert.pem" \
		-addext "basicConstraints=critical,CA:TRUE" \
		-addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
	local kind cn ext
	for kind in server client; do
		if [ "$kind" = server ]; then
			cn=$ADDR
			ext="subjectAltName=IP:$ADDR
extendedKeyUsage=serverAuth"
		else
			cn=gateway
			ext="extendedKeyUsage=clientAuth"
		fi
		openssl req -newkey rsa:3072 -nodes -subj "/O=sandboxd test/CN=$cn" \
			-keyout "$p/$kind/${kind}key.pem" -out "$p/$kind/$kind.csr" 2>/dev/null
		printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n%s\n' \
			"$ext" >"$p/$kind/ext.cnf"
		openssl x509 -req -in "$p/$kind/$kind.csr" -CA "$p/ca/cacert.pem" -CAkey "$p/ca/cakey.pem" \
			-CAcreateserial -days 30 -extfile "$p/$kind/ext.cnf" \
			-out "$p/$kind/${kind}cert.pem" 2>/dev/null
		cp "$p/ca/cacert.pem" "$p/$kind/cacert.pem"
		chmod 600 "$p/$kind/${kind}key.pem"
		rm -f "$p/$kind/$kind.csr" "$p/$kind/ext.cnf"
	done
}

# ------------------------------------------------------------ config files
write_config() {
	mkdir -p "$dir/etc" "$dir/run" "$dir/lib" "$dir/cache" "$dir/log" "$dir/state/images"
	chmod 711 "$dir" "$dir/state"
	cat >"$dir/etc/libvirtd.conf" <<EOF
# Written by scripts/remote-host.sh: TLS only, on this host's own address.
listen_tls = 1
listen_tcp = 0
listen_addr = "$ADDR"
tls_port = "16514"
auth_tls = "none"
key_file = "$dir/pki/server/serverkey.pem"
cert_file = "$dir/pki/server/servercert.pem"
ca_file = "$dir/pki/server/cacert.pem"
tls_no_verify_certificate = 0
tls_allowed_dn_list = ["O=sandboxd test,CN=gateway"]
unix_sock_group = "root"
unix_sock_rw_perms = "0700"
log_outputs = "3:file:/var/log/libvirt/libvirtd.log"
keepalive_interval = 5
keepalive_count = 5
EOF
	# No security driver (apparmor/selinux/dac relabelling would touch the
	# files the machine's own libvirtd manages), no cgroups (both daemons
	# would manage the same machine.slice), qemu as root.
	cat >"$dir/etc/qemu.conf" <<EOF
# Written by scripts/remote-host.sh
security_driver = "none"
dynamic_ownership = 0
user = "root"
group = "root"
cgroup_controllers = [ ]
remember_owner = 0
stdio_handler = "logd"
EOF
	cat >"$dir/etc/virtlogd.conf" <<EOF
log_outputs = "3:file:/var/log/libvirt/virtlogd.log"
max_size = 1048576
max_backups = 1
EOF
	: >"$dir/etc/libvirt.conf"
	cat >"$dir/env" <<EOF
NS=$NS
VETH=$VETH
GW=$GW
ADDR=$ADDR
EOF
	echo "$URI" >"$dir/uri"
}

# ---------------------------------------------------------------- daemons
# Runs inside the new mount namespace (and the host's network namespace).
inner() {
	mount --bind "$dir/run" /run/libvirt
	mount --bind "$dir/lib" /var/lib/libvirt
	mount --bind "$dir/cache" /var/cache/libvirt
	mount --bind "$dir/log" /var/log/libvirt
	mount --bind "$dir/etc" /etc/libvirt
	# A virtlogd that outlived libvirtd still holds the running guests'
	# console logs: keep it (its socket is in the same $dir/run).
	alive "$dir/virtlogd.pid" virtlogd ||
		/usr/sbin/virtlogd -d -p "$dir/virtlogd.pid" -f /etc/libvirt/virtlogd.conf
	/usr/sbin/libvirtd -d --listen -p "$dir/libvirtd.pid" -f /etc/libvirt/libvirtd.conf
}

daemons_up() {
	if alive "$dir/libvirtd.pid" libvirtd; then
		return 0
	fi
	# libvirtd died (or never ran): start it again. Guests that outlived
	# it keep running and the new libvirtd takes them back, as after a
	# libvirtd restart on a real host.
	rm -f "$dir/libvirtd.pid"
	mkdir -p /run/libvirt /var/lib/libvirt /var/cache/libvirt /var/log/libvirt
	unshare --mount --propagation private -- \
		nsenter --net="/run/netns/$NS" -- "$0" inner "$dir"
}

wait_answer() {
	for _ in $(seq 1 150); do
		if virsh -c "$URI" version >/dev/null 2>&1; then
			return 0
		fi
		sleep 0.2
	done
	echo "remote-host: $URI does not answer; see $dir/log/libvirtd.log" >&2
	virsh -c "$URI" version >&2 || true
	return 1
}

kill_pidfile() { # pidfile name
	local pid
	if alive "$1" "$2"; then
		pid=$(cat "$1")
		kill "$pid" 2>/dev/null || true
		for _ in $(seq 1 50); do
			[ -d "/proc/$pid" ] || break
			sleep 0.1
		done
		kill -9 "$pid" 2>/dev/null || true
	fi
	rm -f "$1"
}

daemons_down() {
	local d
	# Its guests first, while libvirtd still answers.
	if alive "$dir/libvirtd.pid" libvirtd; then
		for d in $(timeout 20 virsh -c "$URI" list --name 2>/dev/null || true); do
			timeout 20 virsh -c "$URI" destroy "$d" >/dev/null 2>&1 || true
		done
	fi
	kill_pidfile "$dir/libvirtd.pid" libvirtd
	kill_pidfile "$dir/virtlogd.pid" virtlogd
	# Whatever else runs in the network namespace (qemu of guests that
	# libvirtd did not get to destroy). These are all ours: nothing else
	# runs in this namespace.
	netns_kill_all "$NS"
}

case "$cmd" in
up)
	make_pki
	write_config
	netns_veth_up "$NS" "$VETH" "$GW" "$ADDR"
	daemons_up
	wait_answer
	echo "$URI"
	;;
inner)
	inner
	;;
uri)
	echo "$URI"
	;;
down)
	daemons_down
	netns_veth_down "$NS" "$VETH"
	;;
*)
	echo "usage: $0 up|down|uri DIR" >&2
	exit 2
	;;
esac
