#!/usr/bin/env bash
# Manual boot check of the tiny image under plain QEMU (no libvirt).
#
#   images/smoke.sh [OUTDIR] [--bench]
#
# Boots OUTDIR (default build/images/tiny) with TCG, connects to the exec
# port's socket with a small Python client (this check only; the project's
# own host side is agentless/agentless.c), waits for HELLO, answers
# WELCOME, runs `echo hi; echo err >&2; exit 3` and prints the frames.
# With --bench it also measures: boot to HELLO (median of 3 boots), the
# round trip of `true` (median of 20), a 2 s timeout on `sleep 100` with a
# TERM-ignoring, setsid'd grandchild, `yes | head -c 50000000` with a 1 MiB
# cap, and `sleep 100 & echo started`. Exits non-zero when a check fails.
set -euo pipefail

OUTDIR=build/images/tiny
BENCH=0
for a in "$@"; do
	case "$a" in
	--bench) BENCH=1 ;;
	*) OUTDIR=$a ;;
	esac
done
[ -f "$OUTDIR/vmlinux" ] && [ -f "$OUTDIR/initramfs.cpio.gz" ] ||
	{ echo "smoke: no image in $OUTDIR (make image-tiny)" >&2; exit 1; }

# SMOKE_APPEND / SMOKE_SMP: try another kernel command line or vCPU count.
APPEND=${SMOKE_APPEND:-console=ttyS0 panic=-1 acpi=off rdinit=/init quiet}
SMP=${SMOKE_SMP:-2}
WORK=$(mktemp -d /tmp/sbx-smoke.XXXXXX)
QPID=
stop_qemu() {
	if [ -n "$QPID" ]; then
		kill "$QPID" 2>/dev/null || true
		wait "$QPID" 2>/dev/null || true
		QPID=
	fi
}
cleanup() { stop_qemu; rm -rf "$WORK"; }
trap cleanup EXIT

cat >"$WORK/client.py" <<'EOF'
import os, socket, struct, sys, time

HELLO, WELCOME, TIME, PING, PONG = 1, 2, 3, 4, 5
EXEC, STDOUT, STDERR, EXIT, ERROR, KILL = 10, 11, 12, 13, 14, 15
NAMES = {1: "HELLO", 5: "PONG", 11: "STDOUT", 12: "STDERR", 13: "EXIT", 14: "ERROR"}
T = dict(VERSION=1, VERSION_MIN=2, TIME_NS=3, BOOT_MS=4, COMMAND=10, CWD=11, ENV=12,
         TIMEOUT_MS=13, STDOUT_CAP=14, STDERR_CAP=15, EXIT_CODE=20, DURATION_MS=21,
         TIMED_OUT=22, STDOUT_TOTAL=23, STDERR_TOTAL=24, ERROR_KIND=30, PARAM=31, MESSAGE=32)
TN = {v: k for k, v in T.items()}

def tlv(tag, val):
    if isinstance(val, int):
        val = struct.pack(">Q" if tag == T["TIME_NS"] else ">I", val)
    elif isinstance(val, str):
        val = val.encode()
    return struct.pack(">HI", tag, len(val)) + val

def fields(p):
    out, off = {}, 0
    while off < len(p):
        tag, n = struct.unpack_from(">HI", p, off)
        v = p[off + 6: off + 6 + n]
        off += 6 + n
        name = TN.get(tag, str(tag))
        if name in ("MESSAGE", "PARAM"):
            v = v.decode(errors="replace")
        elif n in (4, 8):
            v = int.from_bytes(v, "big")
        out[name] = v
    return out

class Conn:
    def __init__(self, path, deadline):
        while True:
            try:
                self.s = socket.socket(socket.AF_UNIX)
                self.s.connect(path)
                break
            except OSError:
                if time.time() > deadline:
                    raise
                time.sleep(0.01)
        self.buf = b""

    def send(self, typ, fid, payload=b""):
        self.s.sendall(struct.pack(">BBHII", typ, 0, 0, fid, len(payload)) + payload)

    def recv(self, timeout=30):
        self.s.settimeout(timeout)
        while True:
            if len(self.buf) >= 12:
                typ, _, _, fid, n = struct.unpack_from(">BBHII", self.buf)
                assert n <= 64 * 1024, "guest frame over 64 KiB"
                if len(self.buf) >= 12 + n:
                    p = self.buf[12:12 + n]
                    self.buf = self.buf[12 + n:]
                    return typ, fid, p
            d = self.s.recv(1 << 20)
            if not d:
                raise EOFError("port closed")
            self.buf += d

    def run(self, eid, cmd, timeout_ms=60000, cap=1 << 20, cwd=None, env=(), show=False):
        p = tlv(T["COMMAND"], cmd) + tlv(T["TIMEOUT_MS"], timeout_ms)
        p += tlv(T["STDOUT_CAP"], cap) + tlv(T["STDERR_CAP"], cap)
        if cwd:
            p += tlv(T["CWD"], cwd)
        for e in env:
            p += tlv(T["ENV"], e)
        t0 = time.perf_counter()
        self.send(EXEC, eid, p)
        out, err, frames = bytearray(), bytearray(), 0
        while True:
            typ, fid, pl = self.recv(timeout=max(30, timeout_ms / 1000 + 30))
            assert fid == eid, f"frame for id {fid}, want {eid}"
            frames += 1
            if show:
                shown = fields(pl) if typ in (EXIT, ERROR) else pl
                print(f"  {NAMES.get(typ, typ)} id={fid} {shown!r}")
            if typ == STDOUT:
                out += pl
            elif typ == STDERR:
                err += pl
            elif typ in (EXIT, ERROR):
                r = fields(pl)
                r.update(type=NAMES[typ], stdout=bytes(out), stderr=bytes(err), frames=frames,
                         rtt_ms=(time.perf_counter() - t0) * 1000)
                return r

def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]

def check(ok, what):
    print(("  ok   " if ok else "  FAIL ") + what)
    if not ok:
        check.failed = True
check.failed = False

def main():
    global c
    sock, t_start, bench = sys.argv[1], float(sys.argv[2]), sys.argv[3] == "1"
    c = Conn(sock, time.time() + 60)
    typ, fid, p = c.recv(timeout=60)
    hello_s = time.time() - t_start
    f = fields(p)
    print(f"HELLO after {hello_s:.2f} s from qemu start: {f}")
    assert typ == HELLO and f["VERSION"] == 1
    c.send(WELCOME, 0, tlv(T["VERSION"], 1) + tlv(T["TIME_NS"], time.time_ns()))
    print(f"BOOT {hello_s:.3f}")
    print("exec: echo hi; echo err >&2; exit 3")
    r = c.run(1, "echo hi; echo err >&2; exit 3", show=True)
    check(r["stdout"] == b"hi\n" and r["stderr"] == b"err\n" and r["EXIT_CODE"] == 3,
          "stdout 'hi', stderr 'err', exit 3")
    c.send(PING, 0, b"abc")
    typ, fid, p = c.recv()
    check(typ == PONG and p == b"abc", "PING -> PONG with the same payload")
    r = c.run(10, "nproc")
    print(f"  guest CPUs (nproc): {r['stdout'].decode().strip()}")
    r = c.run(2, "date +%Y; pwd; echo $FOO", env=["FOO=a b;$(x)"], cwd="/tmp")
    year = time.gmtime().tm_year
    check(r["stdout"] == f"{year}\n/tmp\na b;$(x)\n".encode(),
          f"clock set, cwd, env as data: {r['stdout']!r}")
    r = c.run(3, "true", cwd="/nonexistent")
    check(r["type"] == "ERROR" and r.get("PARAM") == "cwd", f"missing cwd -> ERROR cwd: {r}")
    r = c.run(4, "true", env=["1BAD=x"])
    check(r["type"] == "ERROR" and r.get("PARAM") == "env", "bad env name -> ERROR env")
    # host goes away mid-exec, comes back: fresh HELLO, ids reusable
    c.send(EXEC, 7, tlv(T["COMMAND"], "sleep 1; echo gone") + tlv(T["TIMEOUT_MS"], 5000))
    c.s.close()
    time.sleep(0.3)  # a real reconnect takes longer; see serve.c on coalesced SIGIO
    c = Conn(sock, time.time() + 10)
    typ, fid, p = c.recv(timeout=10)
    check(typ == HELLO, "HELLO again after the host reconnects")
    r = c.run(7, "echo again")
    time.sleep(1.2)
    r2 = c.run(8, "echo later")
    check(r["stdout"] == b"again\n" and r2["stdout"] == b"later\n",
          "exec id reused on the new connection; detached exec sent nothing")
    # a header over WIRE_MAX_PAYLOAD: the guest discards input until reconnect
    c.send(99, 0, b"")
    c.s.sendall(struct.pack(">BBHII", PING, 0, 0, 1, 2 << 20))
    c.send(PING, 0, b"x")
    c.s.settimeout(1.0)
    try:
        c.recv(timeout=1.0)
        silent = False
    except socket.timeout:
        silent = True
    c.s.close()
    time.sleep(0.3)
    c = Conn(sock, time.time() + 10)
    typ, fid, p = c.recv(timeout=10)
    r = c.run(9, "echo ok")
    check(silent and typ == HELLO and r["stdout"] == b"ok\n",
          "oversized header: input dropped until the host reconnects, then all is well")
    if not bench:
        return
    # backpressure: 20 MB kept output while the host does not read for 3 s
    c.send(EXEC, 150, tlv(T["COMMAND"], "head -c 20000000 /dev/zero; echo done >&2") +
           tlv(T["STDOUT_CAP"], 20000000) + tlv(T["TIMEOUT_MS"], 60000))
    time.sleep(3)
    n, typ, t0 = 0, 0, time.perf_counter()
    while typ != EXIT:
        typ, fid, p = c.recv()
        if typ == STDOUT:
            n += len(p)
    el = time.perf_counter() - t0
    f = fields(p)
    print(f"BENCH 20 MB kept output, host paused 3 s: got {n} B, then {el:.2f} s to drain "
          f"({n / el / 1048576:.0f} MiB/s), in-guest duration {f['DURATION_MS']} ms")
    check(n == 20000000 and f["STDOUT_TOTAL"] == 20000000, "no byte lost under backpressure")
    def rtt(base, what):
        rs = [c.run(base + i, "true") for i in range(20)]
        rt, du = [r["rtt_ms"] for r in rs], [r["DURATION_MS"] for r in rs]
        print(f"BENCH exec 'true' round trip{what}: median {median(rt):.1f} ms "
              f"(min {min(rt):.1f}, max {max(rt):.1f}, n=20), in-guest duration median "
              f"{median(du)} ms")
    rtt(100, "")
    t0 = time.perf_counter()
    r = c.run(200, "trap '' TERM; setsid sh -c 'trap \"\" TERM; sleep 300' & sleep 100",
              timeout_ms=2000)
    el = time.perf_counter() - t0
    print(f"BENCH timeout 2 s on sleep 100: returned after {el:.2f} s, exit {r['EXIT_CODE']}, "
          f"timed_out {r['TIMED_OUT']}")
    check(r["TIMED_OUT"] == 1 and r["EXIT_CODE"] == 137 and el < 4, "timeout kills, 137")
    r = c.run(201, "ps -o pid,args | grep -c '[s]leep 300' || true")
    check(r["stdout"] == b"0\n", f"setsid TERM-ignoring grandchild died too ({r['stdout']!r})")
    t0 = time.perf_counter()
    r = c.run(202, "yes | head -c 50000000", cap=1 << 20)
    el = time.perf_counter() - t0
    print(f"BENCH yes | head -c 50000000, cap 1 MiB: {el:.2f} s (in guest "
          f"{r['DURATION_MS']} ms), kept {len(r['stdout'])} B in "
          f"{r['frames'] - 1} frames, stdout_total {r['STDOUT_TOTAL']}, exit {r['EXIT_CODE']}")
    check(len(r["stdout"]) == 1 << 20 and r["STDOUT_TOTAL"] == 50000000, "cap and total")
    t0 = time.perf_counter()
    r = c.run(203, "sleep 100 & echo started")
    el = time.perf_counter() - t0
    print(f"BENCH 'sleep 100 & echo started': {el * 1000:.0f} ms, stdout {r['stdout']!r}")
    check(r["stdout"] == b"started\n" and el < 2, "background child does not hold the exec")
    r = c.run(204, "(sleep 1; echo late) & echo now", timeout_ms=10000)
    time.sleep(1.5)
    r2 = c.run(205, "echo next")
    check(r["stdout"] == b"now\n" and r2["stdout"] == b"next\n",
          "late output of a background child is dropped, no stray frames")
    for i in range(8):
        c.send(EXEC, 300 + i, tlv(T["COMMAND"], f"sleep 0.{8 - i}; echo {i}") +
               tlv(T["TIMEOUT_MS"], 10000))
    got, codes = {}, {}
    while len(codes) < 8:
        typ, fid, p = c.recv()
        if typ == STDOUT:
            got[fid] = got.get(fid, b"") + p
        elif typ == EXIT:
            codes[fid] = fields(p)["EXIT_CODE"]
    check(all(got.get(300 + i) == f"{i}\n".encode() for i in range(8)) and
          set(codes.values()) == {0}, "8 execs in flight at once, frames tagged by id")

try:
    main()
except Exception as e:
    print(f"  FAIL {type(e).__name__}: {e}")
    sys.exit(1)
sys.exit(1 if check.failed else 0)
EOF

boot() {
	rm -f "$WORK/sock" "$WORK/console.log"
	T0=$(python3 -c 'import time; print(time.time())')
	qemu-system-x86_64 -accel tcg -machine pc -nodefaults -nographic -m 512 -smp "$SMP" \
		-kernel "$OUTDIR/vmlinux" -initrd "$OUTDIR/initramfs.cpio.gz" \
		-append "$APPEND" -no-reboot \
		-device virtio-serial -chardev socket,id=ch0,path="$WORK/sock",server=on,wait=off \
		-device virtserialport,chardev=ch0,name=org.sandboxd.exec.0 \
		-serial file:"$WORK/console.log" -monitor none </dev/null >"$WORK/qemu.out" 2>&1 &
	QPID=$!
}

rc=0
boots=()
runs=1
[ $BENCH = 1 ] && runs=3
for i in $(seq 1 $runs); do
	echo "== boot $i"
	boot
	out=$(python3 "$WORK/client.py" "$WORK/sock" "$T0" "$([ "$i" = $runs ] && echo $BENCH || echo 0)") || rc=1
	echo "$out" | grep -v '^BOOT '
	boots+=("$(echo "$out" | sed -n 's/^BOOT //p')")
	stop_qemu
	if [ $rc != 0 ]; then
		echo "-- console.log:"; cat "$WORK/console.log"; echo "-- qemu:"; cat "$WORK/qemu.out"
		break
	fi
done
if [ $BENCH = 1 ] && [ $rc = 0 ]; then
	printf '%s\n' "${boots[@]}" | sort -n |
		awk '{a[NR]=$1} END {printf "BENCH qemu start to HELLO: median %.2f s of %d (%s .. %s)\n", a[int((NR+1)/2)], NR, a[1], a[NR]}'
fi
exit $rc
