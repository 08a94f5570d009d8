#!/usr/bin/env bash
# Print, as one JSON object, the versions of the runtimes in a root
# filesystem, measured by running them in it (chroot):
#   images/versions.sh ROOTDIR > versions.json
# images/build-full.sh writes it next to base.qcow2; the daemon publishes it
# (GET /v1/runtimes, docs/api.md).
set -euo pipefail
R=${1:?usage: $0 ROOTDIR}
run() {
	chroot "$R" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/tmp LANG=C.UTF-8 \
		npm_config_update_notifier=false "$@"
}
python=$(run python3 -c 'import platform; print(platform.python_version())')
node=$(run node -p process.versions.node)
npm=$(run npm --version)
gcc=$(run gcc -dumpfullversion)
git=$(run git --version | awk '{print $3}')
jq -cn --arg python "$python" --arg node "$node" --arg npm "$npm" --arg gcc "$gcc" --arg git "$git" \
	'{python: $python, node: $node, npm: $npm, gcc: $gcc, git: $git}'
