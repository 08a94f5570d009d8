#!/usr/bin/env bash
# `make fuzz`: build every tests/fuzz/fuzz_*.c with libFuzzer, ASan and
# UBSan (clang), and run each for FUZZ_SECONDS (default 60) on a scratch
# copy of its corpus. New crashes land in build/fuzz/NAME/ (crash-*).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${FUZZ_SECONDS:-60}
out=build/fuzz
mkdir -p "$out"
pkgs="libvirt libmicrohttpd json-c sqlite3 libcrypto"
cflags="-g -O1 -std=c11 -D_GNU_SOURCE -I. -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined $(pkg-config --cflags $pkgs)"
libs="$(pkg-config --libs $pkgs) -pthread -lm"
make -s build/gen/web_assets.c # the dashboard's assets, compiled into the library
lib_srcs="$(ls util/*.c agentless/*.c network/*.c vmm/*.c store/*.c billing/*.c receipt/*.c config/*.c fleet/*.c sandbox/*.c api/*.c | grep -v '^api/main.c$') build/gen/web_assets.c"
for src in tests/fuzz/fuzz_*.c; do
	name=$(basename "$src" .c); name=${name#fuzz_}
	extra=""
	[ "$name" = guest ] && extra="-DSBX_GUEST_FUZZ $(ls guest/*.c | grep -v '^guest/init.c$' | tr '\n' ' ')"
	echo "fuzz: building $name"
	# shellcheck disable=SC2086
	clang $cflags -o "$out/fuzz_$name" "$src" $extra $lib_srcs $libs
	rm -rf "$out/$name"; mkdir -p "$out/$name/corpus"
	cp tests/fuzz/corpus/"$name"/* "$out/$name/corpus/"
	echo "fuzz: running $name for ${secs}s"
	(cd "$out/$name" && ../fuzz_"$name" -max_total_time="$secs" -print_final_stats=1 corpus 2>&1 | tail -5)
done
