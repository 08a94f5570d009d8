#!/usr/bin/env bash
# `make run`: put the guest image into the state dir (qemu, running as
# libvirt-qemu, must be able to read it: not under /root), create the dev
# account on first run (key kept in a 0600 file), print the key and a curl
# line, then serve in the foreground. Ctrl-C stops the daemon; guests keep
# running and the next start reattaches them (docs/operations.md).
#   scripts/run-dev.sh BIN IMAGE_DIR
# Environment: SBX_STATE_DIR (/var/lib/sandboxd), SBX_CONFIG (etc/dev.json),
# SBX_LISTEN (127.0.0.1:8080).
set -euo pipefail
bin=$(realpath "$1")
image=$(realpath "$2")
state=${SBX_STATE_DIR:-/var/lib/sandboxd}
config=$(realpath "${SBX_CONFIG:-etc/dev.json}")
listen=${SBX_LISTEN:-127.0.0.1:8080}

install -d -m 0755 "$state" "$state/images" "$state/images/tiny"
for f in vmlinux initramfs.cpio.gz; do
	if ! cmp -s "$image/$f" "$state/images/tiny/$f"; then
		install -m 0644 "$image/$f" "$state/images/tiny/$f.new"
		mv -f "$state/images/tiny/$f.new" "$state/images/tiny/$f"
	fi
done

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
