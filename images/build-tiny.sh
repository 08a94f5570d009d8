#!/usr/bin/env bash
# Build the tiny guest image: an uncompressed kernel and a busybox initramfs
# whose /init is sandboxd-init. See images/README.md.
#
#   images/build-tiny.sh GUEST_INIT OUTDIR
#
# Output (all world-readable, qemu runs as libvirt-qemu):
#   OUTDIR/vmlinux             uncompressed ELF kernel, booted via PVH
#                              (falls back to a copy of the bzImage)
#   OUTDIR/initramfs.cpio.gz   newc cpio (compression: TINY_COMPRESS)
#   OUTDIR/kernel.version      e.g. 6.1.0-57-cloud-amd64
#   OUTDIR/inputs.sha256       digest of every input; equal digest -> no work
#
# Environment: TINY_KERNEL (a /boot/vmlinuz-* file; default: the newest
# *-cloud-amd64), TINY_COMPRESS (lz4 | gzip | none; default lz4, the fastest
# boot measured: see README.md).
set -euo pipefail

log() { echo "build-tiny: $*"; }
die() { echo "build-tiny: error: $*" >&2; exit 1; }

[ $# -eq 2 ] || die "usage: $0 GUEST_INIT OUTDIR"
GUEST_INIT=$1
OUTDIR=${2%/}
COMPRESS=${TINY_COMPRESS:-lz4}
MODULES=(virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci
	 virtio_console virtio_blk virtio_balloon virtio-rng)

[ -f "$GUEST_INIT" ] || die "guest init '$GUEST_INIT' not found (make build/guest/sandboxd-init)"
BUSYBOX=$(command -v busybox || true)
[ -n "$BUSYBOX" ] || die "busybox not found (apt-get install busybox-static)"
# Must be static (busybox-static): nothing else lives in the initramfs.
if LC_ALL=C readelf -l "$BUSYBOX" 2>/dev/null | grep -q 'INTERP'; then
	die "'$BUSYBOX' is dynamically linked (apt-get install busybox-static)"
fi
for t in lz4 cpio gzip sha256sum; do
	command -v "$t" >/dev/null || die "'$t' not found (scripts/deps.sh)"
done

KERNEL=${TINY_KERNEL:-$(ls -1 /boot/vmlinuz-*-cloud-amd64 2>/dev/null | sort -V | tail -n1)}
[ -n "$KERNEL" ] && [ -f "$KERNEL" ] ||
	die "no /boot/vmlinuz-*-cloud-amd64 (apt-get install linux-image-cloud-amd64)"
KVER=${KERNEL##*/vmlinuz-}
MODDIR=/lib/modules/$KVER
[ -d "$MODDIR" ] || die "no modules for kernel $KVER in $MODDIR"

# Module files of this kernel, wherever they are and however compressed.
declare -A MODFILE=()
for m in "${MODULES[@]}"; do
	f=$(find "$MODDIR/kernel/drivers" \( -name "$m.ko" -o -name "$m.ko.xz" -o \
		-name "$m.ko.zst" -o -name "$m.ko.gz" \) 2>/dev/null | head -n1)
	if [ -n "$f" ]; then
		MODFILE[$m]=$f
	elif grep -q "/$m.ko" "$MODDIR/modules.builtin" 2>/dev/null; then
		log "module $m is built into $KVER"
	else
		die "module $m not found for $KVER"
	fi
done

# --- cache: a digest over everything that goes in
SELF=$(readlink -f "$0")
# The runtimes' bootstraps (images/runtimes/: what the execution launchers
# run), installed in /usr/lib/sandboxd/runtimes (sandbox/execution.c).
RUNTIMES=$(dirname "$SELF")/runtimes
mapfile -t RUNTIME_FILES < <(find "$RUNTIMES" -maxdepth 1 -type f | LC_ALL=C sort)
[ ${#RUNTIME_FILES[@]} -gt 0 ] || die "no runtime bootstraps in $RUNTIMES"
digest=$({
	echo "compress=$COMPRESS kver=$KVER"
	sha256sum "$SELF" "$GUEST_INIT" "$BUSYBOX" "$KERNEL" "${RUNTIME_FILES[@]}" | awk '{print $1}'
	for m in "${MODULES[@]}"; do
		[ -n "${MODFILE[$m]:-}" ] && sha256sum "${MODFILE[$m]}" | awk '{print $1}'
	done
} | sha256sum | awk '{print $1}')
if [ -f "$OUTDIR/inputs.sha256" ] && [ "$(cat "$OUTDIR/inputs.sha256")" = "$digest" ] &&
	[ -f "$OUTDIR/vmlinux" ] && [ -f "$OUTDIR/initramfs.cpio.gz" ]; then
	log "image up to date ($OUTDIR, kernel $KVER)"
	exit 0
fi

# --- build into a temp dir next to OUTDIR, then swap it in
mkdir -p "$(dirname "$OUTDIR")"
TMP=$(mktemp -d "$OUTDIR.tmp.XXXXXX")
cleanup() { rm -rf "$TMP"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

log "kernel $KERNEL ($KVER)"
# The bzImage's payload is LZ4 (magic 02 21 4c 18); lz4 -dc stops at the end
# of the frame and complains about the trailer, so judge by the result.
off=$(LC_ALL=C grep -obUaP '\x02\x21\x4c\x18' "$KERNEL" | head -n1 | cut -d: -f1 || true)
extracted=0
if [ -n "$off" ]; then
	tail -c +"$((off + 1))" "$KERNEL" | lz4 -dc >"$TMP/vmlinux" 2>/dev/null || true
	if [ "$(head -c4 "$TMP/vmlinux" 2>/dev/null | od -An -tx1 | tr -d ' \n')" = 7f454c46 ]; then
		extracted=1
	fi
fi
if [ $extracted = 1 ]; then
	log "vmlinux: extracted ELF from LZ4 payload at offset $off ($(stat -c %s "$TMP/vmlinux") bytes)"
else
	log "WARNING: could not extract an ELF vmlinux; using the bzImage as vmlinux (slower boot)"
	cp "$KERNEL" "$TMP/vmlinux"
fi
echo "$KVER" >"$TMP/kernel.version"

log "initramfs root"
R=$TMP/root
mkdir -p "$R"/{bin,dev,etc,proc,sys,run,tmp,root,home/sandbox,usr,"lib/modules/$KVER"}
chmod 1777 "$R/tmp"
chmod 0700 "$R/root"
ln -s ../bin "$R/sbin"
ln -s ../bin "$R/usr/bin"
ln -s ../bin "$R/usr/sbin"
install -m 0755 "$GUEST_INIT" "$R/init"
strip "$R/init" 2>/dev/null || true
install -m 0755 "$BUSYBOX" "$R/bin/busybox"
napplets=0
for a in $("$BUSYBOX" --list); do
	case "$a" in busybox | init | linuxrc) continue ;; esac
	[ -e "$R/bin/$a" ] || { ln -s busybox "$R/bin/$a"; napplets=$((napplets + 1)); }
done
log "busybox: $napplets applet links in /bin"

for m in "${MODULES[@]}"; do
	f=${MODFILE[$m]:-}
	[ -n "$f" ] || continue
	dst=$R/lib/modules/$KVER/$m.ko
	case "$f" in
	*.ko.xz) xz -dc "$f" >"$dst" ;;
	*.ko.zst) zstd -qdc "$f" >"$dst" ;;
	*.ko.gz) gzip -dc "$f" >"$dst" ;;
	*) cp "$f" "$dst" ;;
	esac
done
log "modules: $(ls "$R/lib/modules/$KVER" | tr '\n' ' ')"

# Read-only for everyone but root; the init binds the directory read-only
# into a root disk (guest/init.c), so both images have them at one path.
install -d -m 0755 "$R/usr/lib/sandboxd/runtimes"
install -m 0644 "${RUNTIME_FILES[@]}" "$R/usr/lib/sandboxd/runtimes/"
log "runtimes: $(ls "$R/usr/lib/sandboxd/runtimes" | tr '\n' ' ')"

cat >"$R/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/bin/sh
sandbox:x:1000:1000:sandbox:/home/sandbox:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
EOF
cat >"$R/etc/group" <<'EOF'
root:x:0:
tty:x:5:
sandbox:x:1000:
nogroup:x:65534:
EOF
echo sandbox >"$R/etc/hostname"
# localhost and the hostname resolve on lo (the init brings it up).
printf '127.0.0.1 localhost\n127.0.1.1 sandbox\n::1 localhost ip6-localhost ip6-loopback\n' \
	>"$R/etc/hosts"
chown -R 1000:1000 "$R/home/sandbox"
# The kernel opens /dev/console for init before devtmpfs is mounted.
mknod -m 0600 "$R/dev/console" c 5 1 2>/dev/null || log "no mknod here: relying on the kernel's /dev/console"

log "initramfs ($COMPRESS)"
case "$COMPRESS" in
lz4) comp=(lz4 -l -9 -q) ;;
gzip) comp=(gzip -6 -n) ;;
none) comp=(cat) ;;
*) die "TINY_COMPRESS must be lz4, gzip or none" ;;
esac
(cd "$R" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet) |
	"${comp[@]}" >"$TMP/initramfs.cpio.gz"
rm -rf "$R"
log "initramfs.cpio.gz: $(stat -c %s "$TMP/initramfs.cpio.gz") bytes"

echo "$digest" >"$TMP/inputs.sha256"
chmod 0755 "$TMP"
chmod 0644 "$TMP"/*

# Swap: OUTDIR is either the old image or the new one, never half of one.
if [ -e "$OUTDIR" ]; then
	OLD=$(mktemp -d "$OUTDIR.old.XXXXXX")
	rmdir "$OLD"
	mv -T "$OUTDIR" "$OLD"
	mv -T "$TMP" "$OUTDIR"
	rm -rf "$OLD"
else
	mv -T "$TMP" "$OUTDIR"
fi
trap - EXIT
log "done: $OUTDIR (kernel $KVER)"
