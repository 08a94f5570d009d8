#!/usr/bin/env bash
# The tests' own "internet" on this machine: a network namespace on a veth
# pair with web servers and a DNS server of its own, for tests of guest
# egress under a policy (issue 27). No traffic leaves the machine.
#   scripts/netlab.sh up DIR              create it (idempotent), print DIR/env
#   scripts/netlab.sh down DIR            stop everything it started, remove it
#   scripts/netlab.sh status DIR          exit 0 when it is up and answering
#   scripts/netlab.sh name DIR NAME ADDR  add or change a DNS record (A), at once
#
# `up` makes a veth pair (this machine's side $NET.1/24 on $SBX_NL_VETH, the
# other end inside network namespace $SBX_NL_NS) and, inside the namespace:
#   $NET.53  dnsmasq, authoritative for $ZONE (default lab.test):
#              allowed.$ZONE, other.$ZONE  -> $NET.10 (one address, two names)
#              *.cdn.$ZONE                 -> $NET.10 (a wildcard)
#              second.$ZONE                -> $NET.11
#              host.$ZONE                  -> $NET.1 (this machine's address)
#              loopback.$ZONE              -> 127.0.0.1
#              metadata.$ZONE              -> 169.254.169.254
#            every other name in $ZONE is NXDOMAIN; names outside it are
#            REFUSED (no upstream), both at once. `name` adds more (another
#            guest's address, a rebinding answer) without a restart.
#   $NET.10, $NET.11  nginx on ports 80 (HTTP) and 443 (HTTPS, a certificate
#            for every name above from a test CA made by `up`):
#              GET /       "host=<Host> sni=<SNI> addr=<server address>\n"
#              GET /100M   100 MiB of zeros (a sparse file), for throughput
# The namespace's default route is $NET.1, so replies reach whatever this
# machine routes into it (guests behind it).
# Everything it makes lives in DIR:
#   DIR/env        the names and addresses (sourceable: NS VETH NET GW DNS WEB WEB2 ZONE CA)
#   DIR/pki/ca.pem the test CA a client trusts (curl --cacert DIR/pki/ca.pem)
#   DIR/log/       nginx's and dnsmasq's logs
# Needs root, iproute2, openssl, nginx, dnsmasq (dnsmasq-base); `status`
# uses dig (bind9-dnsutils) and curl.
#
# Environment (defaults; set them so two labs on one machine do not clash):
#   SBX_NL_NS=sbxnl0  SBX_NL_VETH=sbxnl0  SBX_NL_NET=198.18.0  SBX_NL_ZONE=lab.test
# 198.18.0.0/15 is the benchmarking range (RFC 2544): neither private
# (RFC 1918), nor CGNAT, nor a documentation range (these machines' own
# network and mirror sit in 192.0.2.0/24 and 203.0.113.0/24).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib/netns.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/netns.sh"

cmd=${1:-}
dir=${2:-}
usage() {
	echo "usage: $0 up|down|status DIR | name DIR NAME ADDR" >&2
	exit 2
}
if [ -z "$cmd" ] || [ -z "$dir" ]; then usage; fi
# Only `up` makes DIR; the others read it if it is there.
[ "$cmd" = up ] && mkdir -p "$dir"
[ -d "$dir" ] && dir=$(cd "$dir" && pwd)

if [ -r "$dir/env" ]; then
	# shellcheck disable=SC1091
	. "$dir/env"
fi
NS=${SBX_NL_NS:-${NS:-sbxnl0}}
VETH=${SBX_NL_VETH:-${VETH:-sbxnl0}}
NET=${SBX_NL_NET:-${NET:-198.18.0}}
ZONE=${SBX_NL_ZONE:-${ZONE:-lab.test}}
GW=$NET.1
DNS=$NET.53
WEB=$NET.10
WEB2=$NET.11
CA=$dir/pki/ca.pem

# A process that exited but is not yet reaped (a daemon's parent is the
# machine's init, which may take seconds) counts as gone.
gone() { # pid
	local st
	st=$(sed 's/.*) //' /proc/"$1"/stat 2>/dev/null) || return 0
	[ -z "$st" ] || [ "${st%% *}" = Z ]
}

alive() { # pidfile name
	local pid
	[ -r "$1" ] || return 1
	pid=$(cat "$1" 2>/dev/null) || return 1
	[ -n "$pid" ] && ! gone "$pid" && [ "$(cat /proc/"$pid"/comm 2>/dev/null)" = "$2" ]
}

kill_pidfile() { # pidfile name
	local pid
	if alive "$1" "$2"; then
		pid=$(cat "$1")
		kill "$pid" 2>/dev/null || true
		for _ in $(seq 1 50); do
			gone "$pid" && break
			sleep 0.1
		done
		kill -9 "$pid" 2>/dev/null || true
	fi
	rm -f "$1"
}

# ----------------------------------------------------------- certificates
# A CA and one server certificate for every name of the zone (and the two
# web addresses), EC keys: quick to make.
make_pki() {
	local p=$dir/pki
	[ -s "$p/server.key" ] && [ -s "$p/server.pem" ] && [ -s "$p/ca.pem" ] && return 0
	mkdir -p "$p"
	chmod 700 "$p"
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 30 \
		-subj "/O=sandboxd test/CN=sandboxd netlab CA" -keyout "$p/ca.key" -out "$p/ca.pem" \
		-addext "basicConstraints=critical,CA:TRUE" \
		-addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
	openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
		-subj "/O=sandboxd test/CN=allowed.$ZONE" -keyout "$p/server.key" \
		-out "$p/server.csr" 2>/dev/null
	cat >"$p/ext.cnf" <<EOF
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth
subjectAltName=DNS:allowed.$ZONE,DNS:other.$ZONE,DNS:second.$ZONE,DNS:*.cdn.$ZONE,IP:$WEB,IP:$WEB2
EOF
	openssl x509 -req -in "$p/server.csr" -CA "$p/ca.pem" -CAkey "$p/ca.key" -CAcreateserial \
		-days 30 -extfile "$p/ext.cnf" -out "$p/server.pem" 2>/dev/null
	rm -f "$p/server.csr" "$p/ext.cnf" "$p/ca.srl"
	chmod 644 "$p/ca.pem"
}

# ------------------------------------------------------------ config files
write_config() {
	mkdir -p "$dir/log" "$dir/www" "$dir/nginx"
	chmod 755 "$dir" "$dir/log" "$dir/www"
	echo ok >"$dir/www/hello.txt"
	[ -e "$dir/www/100M" ] || truncate -s 100M "$dir/www/100M"
	# nginx: standalone (no /etc/nginx include, no module), every path in DIR.
	cat >"$dir/nginx/nginx.conf" <<EOF
# Written by scripts/netlab.sh
daemon on;
pid $dir/nginx/nginx.pid;
error_log $dir/log/nginx-error.log warn;
worker_processes 1;
events { worker_connections 512; }
http {
	access_log $dir/log/nginx-access.log;
	client_body_temp_path $dir/nginx/body;
	proxy_temp_path $dir/nginx/proxy;
	fastcgi_temp_path $dir/nginx/fastcgi;
	uwsgi_temp_path $dir/nginx/uwsgi;
	scgi_temp_path $dir/nginx/scgi;
	default_type application/octet-stream;
	sendfile on;
	keepalive_timeout 10;
	server {
		listen $WEB:80;
		listen $WEB2:80;
		listen $WEB:443 ssl;
		listen $WEB2:443 ssl;
		ssl_certificate $dir/pki/server.pem;
		ssl_certificate_key $dir/pki/server.key;
		root $dir/www;
		location = / {
			default_type text/plain;
			return 200 "host=\$host sni=\$ssl_server_name addr=\$server_addr\n";
		}
	}
}
EOF
	# dnsmasq: answers only from this file and DIR/hosts (re-read on SIGHUP).
	cat >"$dir/dnsmasq.conf" <<EOF
# Written by scripts/netlab.sh
listen-address=$DNS
bind-interfaces
except-interface=lo
no-resolv
no-hosts
no-poll
local=/$ZONE/
domain-needed
addn-hosts=$dir/hosts
address=/cdn.$ZONE/$WEB
host-record=allowed.$ZONE,$WEB
host-record=other.$ZONE,$WEB
host-record=second.$ZONE,$WEB2
host-record=host.$ZONE,$GW
host-record=loopback.$ZONE,127.0.0.1
host-record=metadata.$ZONE,169.254.169.254
local-ttl=1
pid-file=$dir/dnsmasq.pid
log-facility=$dir/log/dnsmasq.log
log-queries
EOF
	[ -e "$dir/hosts" ] || : >"$dir/hosts"
	chmod 644 "$dir/hosts" "$dir/dnsmasq.conf"
	cat >"$dir/env" <<EOF
NS=$NS
VETH=$VETH
NET=$NET
GW=$GW
DNS=$DNS
WEB=$WEB
WEB2=$WEB2
ZONE=$ZONE
CA=$CA
EOF
}

# ---------------------------------------------------------------- network
net_up() {
	netns_veth_up "$NS" "$VETH" "$GW" "$DNS" "$WEB" "$WEB2"
	ip -n "$NS" route replace default via "$GW"
}

# ---------------------------------------------------------------- daemons
daemons_up() {
	alive "$dir/nginx/nginx.pid" nginx ||
		ip netns exec "$NS" nginx -e "$dir/log/nginx-error.log" -p "$dir/nginx" \
			-c "$dir/nginx/nginx.conf"
	alive "$dir/dnsmasq.pid" dnsmasq ||
		ip netns exec "$NS" dnsmasq --conf-file="$dir/dnsmasq.conf"
}

daemons_down() {
	kill_pidfile "$dir/nginx/nginx.pid" nginx
	kill_pidfile "$dir/dnsmasq.pid" dnsmasq
	# Whatever else still runs in the namespace (an nginx worker whose
	# master was killed): all ours, nothing else runs there.
	netns_kill_all "$NS"
}

# Both servers answer (the DNS with the web address, the web over HTTPS
# with the test CA), within a bound.
answers() {
	local a
	for _ in $(seq 1 50); do
		a=$(dig +short +time=1 +tries=1 @"$DNS" "allowed.$ZONE" A 2>/dev/null || true)
		if [ "$a" = "$WEB" ] &&
			curl -fsS -m 2 --cacert "$CA" --resolve "allowed.$ZONE:443:$WEB" \
				"https://allowed.$ZONE/" >/dev/null 2>&1; then
			return 0
		fi
		sleep 0.1
	done
	return 1
}

case "$cmd" in
up)
	make_pki
	write_config
	net_up
	daemons_up
	if ! answers; then
		echo "netlab: not answering; see $dir/log/" >&2
		exit 1
	fi
	cat "$dir/env"
	;;
status)
	[ -e "/run/netns/$NS" ] || {
		echo "netlab: no namespace $NS" >&2
		exit 1
	}
	alive "$dir/nginx/nginx.pid" nginx || {
		echo "netlab: nginx not running" >&2
		exit 1
	}
	alive "$dir/dnsmasq.pid" dnsmasq || {
		echo "netlab: dnsmasq not running" >&2
		exit 1
	}
	answers || {
		echo "netlab: not answering" >&2
		exit 1
	}
	echo "netlab: up ($NS, dns $DNS, web $WEB $WEB2, zone $ZONE)"
	;;
name)
	name=${3:-}
	addr=${4:-}
	if [ -z "$name" ] || [ -z "$addr" ]; then usage; fi
	[ -r "$dir/hosts" ] || {
		echo "netlab: not up in $dir" >&2
		exit 1
	}
	awk -v n="$name" '$2 != n' "$dir/hosts" >"$dir/hosts.new"
	printf '%s\t%s\n' "$addr" "$name" >>"$dir/hosts.new"
	chmod 644 "$dir/hosts.new"
	mv "$dir/hosts.new" "$dir/hosts"
	if alive "$dir/dnsmasq.pid" dnsmasq; then
		kill -HUP "$(cat "$dir/dnsmasq.pid")"
	fi
	;;
down)
	daemons_down
	netns_veth_down "$NS" "$VETH"
	if [ -d "$dir" ]; then
		rm -rf "$dir/pki" "$dir/log" "$dir/www" "$dir/nginx" "$dir/dnsmasq.conf" \
			"$dir/dnsmasq.pid" "$dir/hosts" "$dir/hosts.new" "$dir/env"
		rmdir "$dir" 2>/dev/null || true
	fi
	;;
*)
	usage
	;;
esac
