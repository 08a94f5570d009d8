# shellcheck shell=bash
# A network namespace on a veth pair, for the scripts that stand test
# networks up on this machine (scripts/netlab.sh, scripts/remote-host.sh).
# Sourced, not run. Needs root and iproute2.
#
# The pair: VETH on this machine, its peer VETHp inside namespace NS.

# Make namespace NS and the pair (each only if missing), put GW/24 on VETH
# and every ADDR/24 on the peer, and bring VETH, the peer and the
# namespace's loopback up. Run again, it changes nothing.
netns_veth_up() { # ns veth gw addr...
	local ns=$1 veth=$2 gw=$3 a
	local peer="${veth}p"
	shift 3
	[ -e "/run/netns/$ns" ] || ip netns add "$ns"
	if ! ip link show "$veth" >/dev/null 2>&1; then
		ip link add "$veth" type veth peer name "$peer"
		ip link set "$peer" netns "$ns"
	fi
	ip addr replace "$gw/24" dev "$veth"
	ip link set "$veth" up
	for a in "$@"; do
		ip -n "$ns" addr replace "$a/24" dev "$peer"
	done
	ip -n "$ns" link set "$peer" up
	ip -n "$ns" link set lo up
}

# SIGKILL every process still in namespace NS (if it is there): for the
# callers' own namespaces, in which nothing else runs.
netns_kill_all() { # ns
	local pid
	if [ -e "/run/netns/$1" ]; then
		for pid in $(ip netns pids "$1" 2>/dev/null); do
			kill -9 "$pid" 2>/dev/null || true
		done
	fi
}

# Remove namespace NS and the pair (whichever of them is there).
netns_veth_down() { # ns veth
	if [ -e "/run/netns/$1" ]; then
		ip netns del "$1" || true
	fi
	ip link del "$2" 2>/dev/null || true
}
