#!/usr/bin/env bash
# Opt-in host memory settings for guest density (docs/benchmarks.md,
# "bench/density"). Does nothing unless asked:
#
#   SBX_HOST_KSM=1   start KSM (kernel samepage merging) at a steady-state
#                    cost of ~1-2 % of a core: pages_to_scan 1000 every
#                    100 ms (40 MB/s). QEMU marks guest RAM mergeable, so
#                    identical pages of idle guests (kernel text, page
#                    tables, zeroed buffers) are stored once.
#                    SBX_HOST_KSM=0 stops it and unmerges (run=2).
#
# KSM is a host-wide choice for the operator: merged pages are copy-on-write,
# so a tenant who can time its own writes can learn whether another guest on
# the host holds the same page (page-dedup side channels, e.g. CVE-2015-2877
# class attacks). That is why it is off unless SBX_HOST_KSM=1.
set -euo pipefail
KSM=/sys/kernel/mm/ksm
case "${SBX_HOST_KSM:-}" in
"") exit 0 ;;
1)
	[ -w "$KSM/run" ] || { echo "host-tune: no writable $KSM (not root, or no KSM)" >&2; exit 1; }
	echo "${SBX_HOST_KSM_PAGES:-1000}" >"$KSM/pages_to_scan"
	echo "${SBX_HOST_KSM_SLEEP_MS:-100}" >"$KSM/sleep_millisecs"
	echo 1 >"$KSM/run"
	echo "host-tune: KSM on ($(cat "$KSM/pages_to_scan") pages every $(cat "$KSM/sleep_millisecs") ms)"
	;;
0)
	[ -w "$KSM/run" ] && echo 2 >"$KSM/run"
	echo "host-tune: KSM off (pages unmerged)"
	;;
*) echo "host-tune: SBX_HOST_KSM must be 0 or 1" >&2; exit 1 ;;
esac
