"""The README's session through the SDK, against a real daemon and guest:
one sandbox shared by the tests (in file order), deleted by its context
manager at the end."""

import hashlib
import os
import threading
import time

import pytest

import sandboxd
from sandboxd import Sandbox
from conftest import need

HOME = "/home/sandbox"


def until(call, ok, timeout=30):
    """call() again every 0.3 s until ok(its result), at most timeout s."""
    deadline = time.monotonic() + timeout
    r = call()
    while not ok(r) and time.monotonic() < deadline:
        time.sleep(0.3)
        r = call()
    return r


@pytest.fixture(scope="module")
def sb(client):
    s = Sandbox.create(timeout_minutes=10, client=client)
    yield s
    s.delete()  # repeatable; the last test already left the `with`


def test_exec(sb):
    assert sb.status == "running" and sb.id.startswith("sbx_")
    r = sb.exec("echo hi; echo err >&2; exit 3")
    assert (r.stdout, r.stderr, r.exit_code, r.timed_out) == ("hi\n", "err\n", 3, False)
    r = sb.exec('pwd; echo "$GREETING"', env={"GREETING": "hello"}, cwd="/tmp")
    assert r.stdout == "/tmp\nhello\n" and r.exit_code == 0
    with pytest.raises(sandboxd.InvalidRequest) as ei:
        sb.exec("true", cwd="relative")
    assert ei.value.param == "cwd" and ei.value.request_id


def test_metrics(sb, client):
    m = sb.metrics()
    assert isinstance(m, sandboxd.SandboxMetrics) and m.sandbox_id == sb.id
    assert m.interval_ms == client.limits().raw["metrics_interval_ms"]
    assert m.history > 0 and len(m.samples) <= m.history
    if m.interval_ms == 0:
        assert m.samples == []
    with pytest.raises(sandboxd.NotFound):
        sandboxd.Sandbox(client, sandboxd.SandboxInfo(id="sbx_" + "0" * 24)).metrics()


def test_pause_resume(sb, client):
    sb.exec("echo before-pause > /tmp/paused-file")
    info = sb.pause()
    assert info.status == "paused" and info.paused_at and info.paused_bytes > 0
    assert sb.pause().status == "paused"  # a paused one is answered as it is
    with pytest.raises(sandboxd.SandboxPaused) as ei:
        sb.exec("true")
    assert ei.value.status == 409
    info = sb.resume()
    assert info.status == "running" and info.paused_at is None
    assert sb.resume().status == "running"
    assert sb.exec("cat /tmp/paused-file").stdout == "before-pause\n"


def test_terminal(sb, client):
    with sb.terminal(rows=33, cols=101) as t:
        t.send("stty size; echo MARK$((40+2))\r")
        assert "33 101" in t.read_until("MARK42", timeout=120).decode()
        t.resize(40, 120)
        t.send("stty size; exit 3\r")
        assert "40 120" in t.read_until("40 120", timeout=60).decode()
        while t.recv(timeout=60) is not None:
            pass
        assert t.exit_code == 3 and t.close_code == 1000 and t.close_reason == "exit 3"
    with pytest.raises(sandboxd.NotFound):
        sandboxd.Sandbox(client, sandboxd.SandboxInfo(id="sbx_" + "0" * 24)).terminal()


def test_labels(sb, client):
    info = sb.update({"job": "py-4711", "team": "sdk"})
    assert info.metadata == {"job": "py-4711", "team": "sdk"} and sb.info.metadata == info.metadata
    assert sb.update({"team": None}).metadata == {"job": "py-4711"}
    page = client.list_sandboxes(metadata={"job": "py-4711"})
    assert [s.id for s in page.data] == [sb.id]
    assert client.list_sandboxes(metadata={"job": "py-4711", "team": "sdk"}).data == []
    u = client.usage(group_by="job")
    assert sum(g["seconds"] for g in u.by_metadata) == sum(v["seconds"] for v in u.by_size.values())
    assert sum(g["cost_micro_usd"] for g in u.by_metadata) == sum(v["cost_micro_usd"] for v in u.by_size.values())
    assert "py-4711" in [g["value"] for g in u.by_metadata]
    with pytest.raises(sandboxd.InvalidRequest) as ei:
        sb.update({"bad key": "x"})
    assert ei.value.param == "metadata"


def test_network(sb, client):
    pol = {"egress": "allow_list", "allow": ["pypi.org", "*.pythonhosted.org:443"], "deny": []}
    info = sb.set_network({"egress": "allow_list", "allow": ["PyPI.org.", "*.pythonhosted.org:443"]})
    assert info.network == pol and sb.refresh().network == pol
    assert info.net_bytes_in == 0 and info.net_bytes_out == 0
    with pytest.raises(sandboxd.InvalidRequest) as ei:
        sb.set_network({"egress": "allow_list", "allow": ["ok.example", "not a name"]})
    assert ei.value.param == "network.allow[1]"
    assert sb.set_network({"egress": "none"}).network == {"egress": "none", "allow": [], "deny": []}
    assert client.limits().network["max_rules"] >= 2


def test_exec_stream(sb):
    events = list(sb.exec_stream("for i in 1 2 3; do echo $i; sleep 0.3; done; echo e >&2; exit 4"))
    out = [e.data for e in events if e.type == "stdout"]
    assert "".join(out) == "1\n2\n3\n" and len(out) >= 2  # as the guest wrote, not at the end
    assert "".join(e.data for e in events if e.type == "stderr") == "e\n"
    assert events[-1].type == "exit" and events[-1].exit_code == 4


def test_files(sb):
    data = bytes(range(256)) * 40
    info = sb.files.write(f"{HOME}/dir/data.bin", data, mode=0o640)
    assert (info.object, info.size, info.mode) == ("file", len(data), "0640")
    assert info.sha256 == hashlib.sha256(data).hexdigest()
    assert sb.files.read(f"{HOME}/dir/data.bin") == data
    assert sb.files.read(f"{HOME}/dir/data.bin", offset=250, length=10) == data[250:260]
    listing = sb.files.list(f"{HOME}/dir")
    [entry] = listing.data
    assert listing.has_more is False
    assert (entry.name, entry.type, entry.size, entry.mode) == ("data.bin", "file", len(data), "0640")
    sb.files.delete(f"{HOME}/dir", recursive=True)
    with pytest.raises(sandboxd.FileNotFound):
        sb.files.read(f"{HOME}/dir/data.bin")


def test_upload_and_download_a_tree(sb, tmp_path):
    src = tmp_path / "src"
    (src / "a" / "empty").mkdir(parents=True)
    (src / "a" / "b.txt").write_text("bee\n")
    (src / "run.sh").write_text("#!/bin/sh\necho ran\n")
    (src / "run.sh").chmod(0o755)
    (src / "link").symlink_to("a/b.txt")
    tree = sb.files.upload_dir(str(src), f"{HOME}/tree")
    assert tree.object == "tree" and tree.size > 0
    r = sb.exec("./run.sh; cat link; find . | sort", cwd=f"{HOME}/tree")
    assert r.stdout == "ran\nbee\n.\n./a\n./a/b.txt\n./a/empty\n./link\n./run.sh\n", r.stderr
    sb.exec(f"echo made in the guest > {HOME}/tree/a/new.txt")
    dst = tmp_path / "dst"
    names = sb.files.download_dir(f"{HOME}/tree", str(dst))
    assert "a/new.txt" in {os.path.normpath(n) for n in names}
    assert (dst / "a" / "new.txt").read_text() == "made in the guest\n"
    assert (dst / "a" / "b.txt").read_text() == "bee\n" and (dst / "a" / "empty").is_dir()
    assert os.readlink(dst / "link") == "a/b.txt" and os.access(dst / "run.sh", os.X_OK)


def test_background_process_by_offsets_then_signal(sb):
    p = sb.processes.start("i=0; while true; do i=$((i+1)); echo step $i; sleep 0.2; done")
    assert p.status == "running" and p.pid > 1
    assert p.pid in [q.pid for q in sb.processes.list()]
    first = until(p.output, lambda o: o.stdout_total >= len("step 1\nstep 2\n"))
    assert first.stdout.startswith("step 1\nstep 2\n") and first.stdout_offset == 0
    more = until(lambda: p.output(first.stdout_next_offset), lambda o: o.stdout)
    assert more.stdout_offset == first.stdout_next_offset and more.stdout.startswith("step ")
    assert p.output().stdout.startswith(first.stdout + more.stdout)  # offsets are bytes of one stream
    sig = p.signal("TERM")
    assert sig["sent"] is True
    done = p.wait(timeout=30)
    assert done.exit_code == 128 + 15 and done.stdout.startswith(first.stdout + more.stdout)
    assert p.signal("TERM")["sent"] is False  # already exited: nothing signalled


def test_process_stdin(sb):
    p = sb.processes.start("read line; echo got $line; echo bye >&2")
    assert p.write_stdin("hello\n", close=True)["closed"] is True
    r = p.wait(timeout=30)
    assert (r.exit_code, r.stdout, r.stderr) == (0, "got hello\n", "bye\n")


def test_run_code_with_a_receipt_verified_offline(client):
    pytest.importorskip("cryptography")
    code = "import statistics\nprint(statistics.mean([3, 5, 8, 13]))"
    ex = client.run_code(code, runtime="python", timeout_seconds=30)
    assert (ex.status, ex.exit_code, ex.stdout) == ("completed", 0, "7.25\n"), ex
    assert ex.receipt.id.startswith("rcpt_") and ex.billing["cost_micro_usd"] > 0
    assert client.get_execution(ex.id).stdout == "7.25\n"
    assert ex.id in [e["id"] for e in client.list_executions(limit=5).data]
    pem = client.receipt_public_key().public_key_pem  # pinned once
    rc = client.receipt(ex.receipt.id)
    ok = sandboxd.verify_receipt(rc, public_key_pem=pem, execution=ex.raw, code=code, runtime="python")
    assert "output fingerprint, input fingerprint verified" in ok
    with pytest.raises(sandboxd.ReceiptInvalid, match="output"):
        sandboxd.verify_receipt(rc, public_key_pem=pem, execution=dict(ex.raw, stdout="7.26\n"))
    with pytest.raises(sandboxd.ReceiptInvalid, match="input"):
        sandboxd.verify_receipt(rc, public_key_pem=pem, execution=ex.raw, code=code + " ", runtime="python")
    with pytest.raises(sandboxd.ReceiptInvalid, match="pinned"):
        sandboxd.verify_receipt(rc, signer="0x" + "00" * 32)


def test_exec_receipt(sb, client):
    pytest.importorskip("cryptography")
    r = sb.exec("echo signed", receipt=True)
    rc = client.receipt(r.receipt.id)
    ok = sandboxd.verify_receipt(rc, signer=r.receipt.signer, execution=r.raw,
                                 input={"command": "echo signed", "cwd": HOME, "env": {}})
    assert "input fingerprint verified" in ok


def test_429_is_waited_out(sb, client):
    cap = client.limits().execs_in_flight_per_account
    need(cap == 1, f"needs max_execs_in_flight_per_account 1 (it is {cap})")
    held = []
    holder = threading.Thread(target=lambda: held.append(sb.exec("sleep 5")))
    holder.start()
    try:
        time.sleep(1.5)  # the holder's exec is in flight
        impatient = Sandbox(client.with_options(max_retries=0), sb.info)
        with pytest.raises(sandboxd.RateLimited) as ei:
            impatient.exec("echo now")
        assert ei.value.retry_after == 1 and ei.value.status == 429
        retries = []
        patient = client.with_options(max_retries=10, on_retry=lambda n, e, w: retries.append((e.type, w)))
        r = Sandbox(patient, sb.info).exec("echo after")
        assert r.stdout == "after\n"
        assert retries and set(retries) == {("rate_limited", 1.0)}
    finally:
        holder.join()
    assert held[0].exit_code == 0


def test_402_raises(client):
    poor = os.environ.get("SBX_SDK_POOR_KEY")
    need(poor, "no SBX_SDK_POOR_KEY (a key of an account without credit)")
    retries = []
    c = client.with_options(api_key=poor, on_retry=lambda *a: retries.append(a))
    with pytest.raises(sandboxd.InsufficientCredit) as ei:
        Sandbox.create(client=c)
    assert ei.value.status == 402 and retries == []
    assert c.usage().available_micro_usd == 0


def test_extend_usage_limits(sb, client):
    before = sb.info.expires_at
    assert sb.extend(20).expires_at > before
    assert sb.refresh().status == "running"
    u = client.usage(granularity="hour")
    assert u.balance_micro_usd > 0 and u.sandboxes["running"] >= 1 and u.buckets is not None
    lim = client.limits()
    assert lim.sizes and lim.max_file_bytes > 0
    page = client.list_sandboxes(status="running")
    assert sb.id in [s.id for s in page.data]
    assert client.openapi()["openapi"].startswith("3.")


def test_api_keys(client):
    k = client.create_api_key(scopes=["sandboxes"])
    assert k.secret and k.scopes == ["sandboxes"]
    assert k.id in [x.id for x in client.list_api_keys()]
    other = client.with_options(api_key=k.secret)
    assert other.usage().balance_micro_usd > 0
    with pytest.raises(sandboxd.PermissionDenied):
        other.list_api_keys()
    assert client.revoke_api_key(k.id)["revoked"] is True
    with pytest.raises(sandboxd.AuthenticationError):
        other.usage()


def test_not_found(client):
    with pytest.raises(sandboxd.NotFound):
        Sandbox.get("sbx_000000000000000000000000", client=client)


def test_with_deletes_on_exit(sb):
    with pytest.raises(RuntimeError, match="inside"):
        with sb:
            raise RuntimeError("inside")  # not masked by the delete
    assert sb.status == "destroyed" and sb.info.ended_at
    with pytest.raises(sandboxd.SandboxNotRunning):
        sb.exec("true")
