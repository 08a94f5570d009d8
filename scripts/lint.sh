#!/usr/bin/env bash
# Layering check (STYLE.md): data flows api -> sandbox -> config/billing/
# store/vmm/agentless -> util. A module may include only the headers below it.
# guest/ (the guest's PID 1) stands apart: it may include only agentless/wire.h.
set -euo pipefail
cd "$(dirname "$0")/.."
fail=0
check() { # module allowed-includes-regex
	local mod=$1 allowed=$2 f inc
	for f in $(git ls-files "$mod/*.c" "$mod/*.h"); do
		while read -r inc; do
			[ -z "$inc" ] && continue
			if ! [[ $inc =~ $allowed ]]; then
				echo "lint: $f includes $inc (not allowed for $mod/)"
				fail=1
			fi
		done < <(sed -n 's/^#include "\(.*\)"/\1/p' "$f" | sed -e 's#^\.\./##' -e "s#^$mod/##")
	done
}
check util '^(util\.h)$'
check agentless '^(util/util\.h|wire\.h|agentless\.h|agentless-priv\.h)$'
# guest/ is PID 1 of every guest: a program of its own in the guest's trust
# domain. It shares only the wire format with the host; nothing of the
# daemon (not even util/) links into it.
check guest '^(agentless/wire\.h|init\.h|files-priv\.h|exec-priv\.h)$'
# network/ (egress policy, forbidden set, connector) sits beside store/:
# util/ only; sandbox/ and api/ use it.
check network '^(util/util\.h|network\.h)$'
check vmm '^(util/util\.h|vmm\.h|vmm-priv\.h)$'
check config '^(util/util\.h|vmm/vmm\.h|config\.h)$'
check store '^(util/util\.h|store\.h|store-priv\.h)$'
check billing '^(util/util\.h|store/store\.h|billing\.h)$'
check receipt '^(util/util\.h|receipt\.h|verify\.h)$'
# fleet/ (hosts, placement, pools, boot slots, live guests) sits below
# sandbox/: never sandbox/ nor store/.
check fleet '^(util/util\.h|config/config\.h|vmm/vmm\.h|agentless/agentless\.h|fleet\.h|fleet-priv\.h)$'
check sandbox '^(util/util\.h|config/config\.h|network/network\.h|store/store\.h|billing/billing\.h|vmm/vmm\.h|agentless/agentless\.h|receipt/receipt\.h|fleet/fleet\.h|sandbox\.h|sandbox-priv\.h)$'
check api '^(util/util\.h|config/config\.h|network/network\.h|sandbox/sandbox\.h|api\.h|assets\.h|api-priv\.h|http-priv\.h|terminal-priv\.h|reqctx\.h|receipt/receipt\.h|receipt/verify\.h)$'
# Only main.c, the composition root, may use receipt/ directly: its
# `verify-receipt` checks a receipt offline, with no service or database.
# And execution_json.c, for receipt/'s canonical JSON only (RFC 8785: the
# execution's 200 body is stored and served again byte for byte); signing
# stays in sandbox/.
if git grep -l '#include "\(\.\./\)\?receipt/\(receipt\|verify\)\.h"' -- 'api/*.c' 'api/*.h' |
	grep -v -e '^api/main\.c$' -e '^api/execution_json\.c$'; then
	echo "lint: only api/main.c (and api/execution_json.c, for canonical JSON) may include receipt/"
	fail=1
fi
[ $fail -eq 0 ] && echo "lint: layering ok"
# The docs stand alone: every path and link they name is in the repository,
# and docs/api.md's error table is util/util.h's (scripts/check-docs.py).
python3 scripts/check-docs.py || fail=1
exit $fail
