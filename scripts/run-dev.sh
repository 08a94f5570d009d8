#!/usr/bin/env bash
# `make run`: put the guest image (full by default, see the Makefile's
# RUN_IMAGE) into the state dir (qemu, running as
# libvirt-qemu, must be able to read it: not under /root), create the dev
# account on first run (key kept in a 0600 file), print the key and a curl
# line, then serve in the foreground. Ctrl-C stops the daemon; guests keep
# running and the next start reattaches them (docs/lifecycle.md).
#   scripts/run-dev.sh BIN IMAGE_DIR   (build/images/full or build/images/tiny)
# Environment: SBX_STATE_DIR (/var/lib/sandboxd), SBX_CONFIG (etc/dev.json),
# SBX_LISTEN (127.0.0.1:8080).
set -euo pipefail
bin=$(realpath "$1")
image=$(realpath "$2")
state=${SBX_STATE_DIR:-/var/lib/sandboxd}
config=$(realpath "${SBX_CONFIG:-etc/dev.json}")
listen=${SBX_LISTEN:-127.0.0.1:8080}

# The image: a full one (IMAGE_DIR has base.qcow2: Debian root disk) or
# the tiny one (initramfs only). Copied only when it changed.
kind=tiny
[ -f "$image/base.qcow2" ] && kind=full
dst=$state/images/$kind
install -d -m 0755 "$state" "$state/images" "$dst"
for f in vmlinux initramfs.cpio.gz; do
	if ! cmp -s "$image/$f" "$dst/$f"; then
		install -m 0644 "$image/$f" "$dst/$f.new"
		mv -f "$dst/$f.new" "$dst/$f"
	fi
done
if [ $kind = full ]; then
	# The base is ~900 MB: compare digests, not bytes. Guests still running
	# on an older base keep its inode (rename, not overwrite).
	if ! cmp -s "$image/base.sha256" "$dst/base.sha256" || [ ! -f "$dst/base.qcow2" ]; then
		echo "run-dev: installing $image/base.qcow2 into $dst"
		cp --reflink=auto "$image/base.qcow2" "$dst/base.qcow2.new"
		chmod 0444 "$dst/base.qcow2.new"
		mv -f "$dst/base.qcow2.new" "$dst/base.qcow2"
		install -m 0644 "$image/base.sha256" "$dst/base.sha256"
	fi
	# the image's runtime versions, which GET /v1/runtimes publishes
	if [ -f "$image/versions.json" ] && ! cmp -s "$image/versions.json" "$dst/versions.json"; then
		install -m 0644 "$image/versions.json" "$dst/versions.json"
	fi
	# The dev config plus the full image's paths, kept in the state dir.
	jq --arg d "$dst" '. + {kernel: ($d + "/vmlinux"), initrd: ($d + "/initramfs.cpio.gz"),
		base_image: ($d + "/base.qcow2")}' "$config" >"$state/config-full.json.new"
	mv -f "$state/config-full.json.new" "$state/config-full.json"
	config=$state/config-full.json
else
	# The tiny image has no interpreters: no execution guests for it.
	jq 'del(.execution_pool)' "$config" >"$state/config-tiny.json.new"
	mv -f "$state/config-tiny.json.new" "$state/config-tiny.json"
	config=$state/config-tiny.json
fi

keyfile=$state/dev-account.json
if [ ! -s "$keyfile" ]; then
	(umask 077; "$bin" admin create-account --name dev --credit-usd 10 \
		--config "$config" --state-dir "$state" > "$keyfile.new")
	mv -f "$keyfile.new" "$keyfile"
fi
chmod 0600 "$keyfile"
key=$(sed -n 's/.*"api_key": *"\([^"]*\)".*/\1/p' "$keyfile")
cat <<EOT

  sandboxd dev account (key kept in $keyfile):
    export SANDBOXD_KEY=$key

  try:
    curl -s -X POST http://$listen/v1/sandboxes -H "Authorization: Bearer \$SANDBOXD_KEY" -d '{"timeout_minutes": 5}'

EOT
exec "$bin" serve --config "$config" --state-dir "$state" --listen "$listen"
