#!/bin/sh
# scripts/vendor-web.sh [--check]: copy the dashboard's third-party files
# (the terminal emulator xterm.js and its fit addon, pinned exactly in
# package.json's devDependencies) from node_modules/ into web/vendor/,
# which is committed and compiled into the daemon like the rest of web/
# (docs/dashboard.md, "Third-party code"). Run after `npm ci` when a pin
# changes (`make vendor-web`); --check fails when web/vendor/ differs from
# what node_modules/ would give (tests/browser checks the same).
# The `//# sourceMappingURL=` line is dropped: the maps are not shipped.
set -eu
cd "$(dirname "$0")/.."
NM=node_modules/@xterm
OUT=web/vendor
[ -f "$NM/xterm/package.json" ] || { echo "no $NM: run 'npm ci' first" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
nomap() { sed '/^\/\/# sourceMappingURL=/d' "$1" > "$2"; }
nomap "$NM/xterm/lib/xterm.mjs" "$tmp/xterm.mjs"
cp "$NM/xterm/css/xterm.css" "$tmp/xterm.css"
nomap "$NM/addon-fit/lib/addon-fit.mjs" "$tmp/addon-fit.mjs"
cp "$NM/xterm/LICENSE" "$tmp/xterm-LICENSE.txt"
ver() { node -p "require('./$NM/$1/package.json').version"; }
{
	echo "Third-party files of the dashboard, copied from the npm registry's"
	echo "packages by scripts/vendor-web.sh (do not edit; MIT, xterm-LICENSE.txt):"
	echo "@xterm/xterm $(ver xterm): xterm.mjs (lib/xterm.mjs), xterm.css (css/xterm.css)"
	echo "@xterm/addon-fit $(ver addon-fit): addon-fit.mjs (lib/addon-fit.mjs)"
} > "$tmp/VERSIONS.txt"
if [ "${1:-}" = --check ]; then
	diff -r "$tmp" "$OUT" && echo "web/vendor matches node_modules"
	exit
fi
mkdir -p "$OUT"
rm -f "$OUT"/*
cp "$tmp"/* "$OUT"/
echo "web/vendor: $(cat "$OUT/VERSIONS.txt" | tail -2 | tr '\n' ' ')"
