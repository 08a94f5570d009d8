#!/usr/bin/env bash
# Install the Debian packages sandboxd needs, skipping what is present.
#   scripts/deps.sh        build, run and test dependencies
#   scripts/deps.sh fuzz   plus clang and its fuzzer runtime
#   scripts/deps.sh bench  plus wrk, the HTTP load generator of bench/api
# The dashboard's browser tests (tests/browser/) drive Debian's chromium
# through playwright-core from npm (node 18 or later); python3-yaml turns
# docs/openapi.yaml into the JSON the daemon serves (at build time).
# openssl, iproute2 and util-linux (unshare, nsenter): scripts/remote-host.sh,
# the second libvirt host of tests/integration/test_remote.c.
# nginx, dnsmasq-base, bind9-dnsutils (dig): scripts/netlab.sh, the tests'
# own "internet" (tests/integration/test_netlab.c). On a machine run by
# systemd, Debian's nginx package also starts its own site on port 80.
# tmux: a real terminal for `sbx shell` (tests/integration/test_terminal.c).
# python3-pytest, -cryptography, -pip, -setuptools, -wheel: the Python SDK's
# tests (tests/integration/test_sdk_python.c builds its wheel offline).
set -euo pipefail
pkgs=(build-essential pkg-config libvirt-daemon-system libvirt-dev qemu-system-x86 qemu-utils
      linux-image-cloud-amd64 busybox-static libmicrohttpd-dev libjson-c-dev libsqlite3-dev
      libssl-dev libcmocka-dev libcurl4-openssl-dev e2fsprogs cpio lz4 curl jq procps
      systemd chromium python3 python3-yaml openssl iproute2 util-linux
      python3-pytest python3-cryptography python3-pip python3-setuptools python3-wheel
      nginx dnsmasq-base bind9-dnsutils tmux)
# node and npm: Debian's nodejs + npm unless a node with its own npm is there
# (the browser tests; images/build-full.sh fetches the full image's Node.js
# with `npm pack`, images/README.md).
command -v npm >/dev/null || pkgs+=(nodejs npm)
[ "${1:-}" = fuzz ] && pkgs+=(clang libclang-rt-14-dev)
[ "${1:-}" = image ] && pkgs+=(mmdebstrap)
[ "${1:-}" = bench ] && pkgs+=(wrk)
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
	echo "deps: missing packages ${missing[*]}; run as root or install them" >&2
	exit 1
fi
echo "deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
