"""The SDK without a daemon: error mapping, retries, streamed events, the
tar safety of download_dir, canonical JSON and receipt checks."""

import hashlib
import io
import json
import os
import re
import tarfile

import pytest

import sandboxd
from sandboxd import Sandbox, SandboxInfo
from conftest import REPO

ERR = {"Content-Type": "application/json"}


def err(type_, message="m", param=None):
    e = {"type": type_, "message": message}
    if param:
        e["param"] = param
    return {"error": e}


SBX = {"id": "sbx_1", "object": "sandbox", "status": "running", "size": "small"}


def test_every_error_type_of_the_api_has_its_exception():
    spec = open(os.path.join(REPO, "docs", "openapi.yaml")).read()
    enum = re.search(r"enum: \[(invalid_request[^\]]*)\]", spec).group(1)
    types = {t.strip() for t in enum.replace("\n", " ").split(",")}
    api = open(os.path.join(REPO, "docs", "api.md")).read()
    statuses = dict((t, int(s)) for s, t in re.findall(r"`(\d{3}) ([a-z_]+)`", api) if "_" in t or t == "sandbox_error")
    types |= set(statuses) - {"timed_out"}
    assert len(types) >= 19
    for t in sorted(types):
        cls = sandboxd.ERROR_TYPES.get(t)
        assert cls is not None, f"no exception for error type {t!r}"
        if t in statuses:
            assert cls.status == statuses[t], t
        e = sandboxd.errors.error_from_reply(cls.status, err(t, "why", "p"), request_id="req_1", retry_after=2)
        assert type(e) is cls and e.message == "why" and e.param == "p" and e.retry_after == 2
        assert "req_1" in str(e)
    assert issubclass(sandboxd.FileNotFound, sandboxd.NotFound)
    unknown = sandboxd.errors.error_from_reply(418, err("teapot"))
    assert type(unknown) is sandboxd.APIError and unknown.status == 418


def test_create_retries_429_and_503_with_one_idempotency_key(fake):
    fake.replies = [(429, {"Retry-After": "0"}, err("rate_limited")), (503, {"Retry-After": "0"}, err("service_unavailable")),
                    (409, {"Retry-After": "0"}, err("idempotency_conflict")), (201, ERR, SBX)]
    retries = []
    sb = Sandbox.create("small", 5, client=fake.client(on_retry=lambda n, e, w: retries.append((n, e.status, w))))
    assert sb.id == "sbx_1" and sb.info.status == "running"
    assert retries == [(1, 429, 0.0), (2, 503, 0.0), (3, 409, 0.0)]
    keys = {h["Idempotency-Key"] for _, _, h, _ in fake.seen}
    assert len(fake.seen) == 4 and len(keys) == 1 and keys.pop().startswith("sdk-py-")
    assert json.loads(fake.seen[0][3]) == {"size": "small", "timeout_minutes": 5}


def test_metadata_is_sent_and_the_filter_is_a_query(fake):
    fake.replies = [(201, ERR, SBX), (200, ERR, {"object": "list", "data": [], "has_more": False})]
    c = fake.client()
    c.create_sandbox(metadata={"job": "4711"})
    c.list_sandboxes(metadata={"job": "a b", "team": "x"})
    assert json.loads(fake.seen[0][3]) == {"metadata": {"job": "4711"}}
    assert fake.seen[1][1] == "/v1/sandboxes?metadata%5Bjob%5D=a+b&metadata%5Bteam%5D=x"


def test_network_is_sent_on_create_and_set(fake):
    pol = {"egress": "allow_list", "allow": ["pypi.org", "*.pythonhosted.org:443"], "deny": []}
    fake.replies = [(201, ERR, dict(SBX, network={"egress": "none", "allow": [], "deny": []})),
                    (200, ERR, dict(SBX, network=pol, net_bytes_in=3, net_bytes_out=4))]
    sb = fake.client().create_sandbox(network={"egress": "none"})
    assert json.loads(fake.seen[0][3]) == {"network": {"egress": "none"}}
    assert sb.info.network["egress"] == "none"
    info = sb.set_network(pol)
    assert fake.seen[1][0] == "POST" and fake.seen[1][1] == "/v1/sandboxes/sbx_1/network"
    assert json.loads(fake.seen[1][3]) == pol
    assert info.network == pol and info.net_bytes_in == 3 and info.net_bytes_out == 4


def test_retries_are_bounded_and_waits_capped(fake):
    fake.replies = [(429, {"Retry-After": "100"}, err("rate_limited"))]
    waits = []
    c = fake.client(max_retries=2, max_retry_wait=0.01, on_retry=lambda n, e, w: waits.append(w))
    with pytest.raises(sandboxd.RateLimited) as ei:
        c.usage()
    assert ei.value.retry_after == 100 and ei.value.status == 429
    assert waits == [0.01, 0.01] and len(fake.seen) == 3


def test_exec_is_not_retried_after_503_but_after_429(fake):
    sb = Sandbox(fake.client(), SandboxInfo(id="sbx_1"))
    fake.replies = [(503, {"Retry-After": "0"}, err("service_unavailable"))]
    with pytest.raises(sandboxd.ServiceUnavailable):
        sb.exec("true")  # it may have run: the caller decides
    assert len(fake.seen) == 1
    fake.seen.clear()
    fake.replies = [(429, {"Retry-After": "0"}, err("rate_limited")),
                    (200, ERR, {"stdout": "x", "stderr": "", "exit_code": 0, "duration_ms": 1,
                                "truncated": False, "timed_out": False})]
    r = sb.exec("echo x", env={"A": "1"}, timeout_ms=5000)
    assert r.stdout == "x" and r.exit_code == 0 and len(fake.seen) == 2
    assert json.loads(fake.seen[1][3]) == {"command": "echo x", "env": {"A": "1"}, "timeout_ms": 5000}


def test_402_and_concurrency_limit_raise_at_once(fake):
    fake.replies = [(402, ERR, err("insufficient_credit"))]
    with pytest.raises(sandboxd.InsufficientCredit):
        Sandbox.create(client=fake.client())
    fake.replies = [(429, {"Retry-After": "0"}, err("concurrency_limit"))]
    with pytest.raises(sandboxd.ConcurrencyLimit):
        Sandbox.create(client=fake.client())
    assert len(fake.seen) == 2


def test_a_lost_connection_is_retried_for_idempotent_calls_only():
    c = sandboxd.Client("http://127.0.0.1:9", "k", max_retries=1, max_retry_wait=0.01)  # discard port: refused
    with pytest.raises(sandboxd.APIConnectionError):
        c.limits()
    seen = []
    c = c.with_options(on_retry=lambda n, e, w: seen.append(n))
    with pytest.raises(sandboxd.APIConnectionError):
        c.limits()
    with pytest.raises(sandboxd.APIConnectionError):
        Sandbox(c, SandboxInfo(id="sbx_1")).exec("true")
    assert seen == [1]


def test_streamed_exec_yields_events_and_raises_an_error_event(fake):
    sb = Sandbox(fake.client(), SandboxInfo(id="sbx_1"))
    lines = [{"type": "stdout", "data": "1\n"}, {"type": "stderr", "data": "e"},
             {"type": "exit", "exit_code": 3, "duration_ms": 5, "truncated": False, "timed_out": False}]
    fake.replies = [(200, {"Content-Type": "application/x-ndjson"}, b"".join(json.dumps(x).encode() + b"\n" for x in lines))]
    evs = list(sb.exec_stream("x"))
    assert [e.type for e in evs] == ["stdout", "stderr", "exit"] and evs[2].exit_code == 3
    assert fake.seen[0][2]["Accept"] == "application/x-ndjson"
    fake.replies = [(200, {}, b'{"type":"stdout","data":"a"}\n{"type":"error","error":{"type":"sandbox_not_running","message":"gone"}}\n')]
    it = sb.exec_stream("x")
    assert next(it).data == "a"
    with pytest.raises(sandboxd.SandboxNotRunning):
        next(it)


def _tar(*members):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for name, kind, arg in members:
            ti = tarfile.TarInfo(name)
            if kind == "file":
                ti.size = len(arg)
                t.addfile(ti, io.BytesIO(arg))
            else:
                ti.type, ti.linkname = tarfile.SYMTYPE, arg
                t.addfile(ti)
    return buf.getvalue()


# each would land in tmp_path, next to the destination, if it were let through
@pytest.mark.parametrize("members", [
    lambda tmp: [("../evil", "file", b"x")],
    lambda tmp: [(f"{tmp}/evil", "file", b"x")],
    lambda tmp: [("link", "sym", str(tmp)), ("link/evil", "file", b"x")],
    lambda tmp: [("link", "sym", ".."), ("link/evil", "file", b"x")],
], ids=["dotdot", "absolute", "symlink-absolute", "symlink-up"])
def test_download_dir_refuses_what_leads_outside(fake, tmp_path, members):
    tar = _tar(("ok.txt", "file", b"fine"), *members(tmp_path))
    fake.replies = [(200, {"Content-Type": "application/x-tar"}, tar)]
    dest = tmp_path / "in"
    with pytest.raises(sandboxd.SandboxdError, match="refused"):
        Sandbox(fake.client(), SandboxInfo(id="sbx_1")).files.download_dir("/d", str(dest))
    assert (dest / "ok.txt").read_bytes() == b"fine"
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["in", "ok.txt"]


def test_canonical_json_is_jcs():
    # RFC 8785: keys sorted by UTF-16 code units (U+1F600 is D83D DE00, so
    # before U+FB33), JSON.stringify's escapes, integers as they are
    obj = {"\ufb33": 1, "\U0001f600": 2, "\u20ac": 3, "a": "\u0001\n\"\\\u007f\u00e9", "n": None, "t": True, "i": -12}
    assert sandboxd.canonical_json(obj) == (
        '{"a":"\\u0001\\n\\"\\\\\u007f\u00e9","i":-12,"n":null,"t":true,"\u20ac":3,"\U0001f600":2,"\ufb33":1}'
    ).encode()
    with pytest.raises(ValueError):
        sandboxd.canonical_json({"f": 1.5})
    salt = "0x" + "11" * 32
    want = "0x" + hashlib.sha256(bytes(32 * [0x11]) + b'{"exit_code":0,"stderr":"","stdout":"hi\\n"}').hexdigest()
    assert sandboxd.fingerprint(salt, {"stdout": "hi\n", "stderr": "", "exit_code": 0}) == want


def test_verify_receipt_offline():
    ed = pytest.importorskip("cryptography.hazmat.primitives.asymmetric.ed25519")
    from cryptography.hazmat.primitives import serialization

    key = ed.Ed25519PrivateKey.generate()
    pub = key.public_key()
    signer = "0x" + pub.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex()
    pem = pub.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    salt = "0x" + "ab" * 32
    ex = {"id": "sbxr_1", "exit_code": 0, "stdout": "7.25\n", "stderr": "",
          "receipt": {"id": "rcpt_1"}, "billing": {"fingerprint_salt": salt}}
    body = {"id": "rcpt_1", "operation": "sandbox.execute", "execution_id": "sbxr_1", "signer": signer,
            "output_fingerprint": sandboxd.fingerprint(salt, {k: ex[k] for k in ("exit_code", "stdout", "stderr")}),
            "input_fingerprint": sandboxd.fingerprint(salt, {"code": "print(1)", "runtime": "python"})}
    canon = sandboxd.canonical_json(body)
    rc = {"id": "rcpt_1", "hash": "0x" + hashlib.sha256(canon).hexdigest(), "signature": "0x" + key.sign(canon).hex(),
          "signer": signer, "body": body}
    ok = sandboxd.verify_receipt(rc, public_key_pem=pem, execution=ex, code="print(1)", runtime="python")
    assert ok.endswith("(hash, signature, output fingerprint, input fingerprint verified)")
    assert sandboxd.verify_receipt(rc, signer=signer.upper().replace("0X", "0x"))
    bad = [
        (dict(rc, body=dict(body, execution_id="sbxr_2")), {"signer": signer}, "hash"),
        (rc, {"signer": "0x" + "00" * 32}, "pinned signer"),
        (rc, {"signer": signer, "execution": dict(ex, stdout="7.26\n")}, "output"),
        (rc, {"signer": signer, "execution": ex, "code": "print(2)", "runtime": "python"}, "input"),
        (dict(rc, signature="0x" + key.sign(canon + b" ").hex()), {"signer": signer}, "signature"),
    ]
    for receipt, kw, what in bad:
        with pytest.raises(sandboxd.ReceiptInvalid, match=what):
            sandboxd.verify_receipt(receipt, **kw)
    with pytest.raises(ValueError):
        sandboxd.verify_receipt(rc)  # no pinned signer


def test_port_fetch_passes_the_guests_answer_and_raises_the_daemons(fake):
    proxied = {"Content-Type": "text/plain", "Content-Security-Policy": "sandbox allow-scripts"}
    fake.replies = [(200, ERR, SBX), (404, proxied, b"no such page"),
                    (404, dict(proxied, **{"Content-Type": "application/json"}), err("not_found")),
                    (502, ERR, err("port_unreachable")), (201, proxied, b'{"ok": true}')]
    sb = Sandbox.get("sbx_1", client=fake.client())
    r = sb.port_fetch(8000, "/a b/c.txt", query={"q": "1"})
    assert r.status == 404 and r.body == b"no such page" and r.text == "no such page"
    # a guest's answer in the API's error shape is still the guest's (it carries the CSP mark)
    assert sb.port_fetch(8000, "/x").status == 404
    with pytest.raises(sandboxd.PortUnreachable):
        sb.port_fetch(8009)
    r = sb.port_fetch(8000, "/echo", method="post", body=b"hi", headers={"X-Test": "1"})
    assert r.status == 201 and r.json() == {"ok": True}
    methods = [(m, p) for m, p, _, _ in fake.seen]
    assert methods[1] == ("GET", "/v1/sandboxes/sbx_1/ports/8000/a%20b/c.txt?q=1")
    assert methods[4] == ("POST", "/v1/sandboxes/sbx_1/ports/8000/echo") and fake.seen[4][3] == b"hi"
    assert fake.seen[4][2]["X-Test"] == "1"
    assert sb.port_url(3000, "/app/") .endswith("/v1/sandboxes/sbx_1/ports/3000/app/")


def test_previews_create_list_revoke(fake):
    pv = {"object": "preview", "id": "pv_1", "sandbox_id": "sbx_1", "port": 3000,
          "url": "http://3000-" + "a" * 32 + ".preview.localhost:8080/", "created_at": "t",
          "expires_at": "u", "revoked": False}
    listed = {k: v for k, v in pv.items() if k != "url"}
    fake.replies = [(200, ERR, SBX), (201, ERR, json.dumps(pv).encode()),
                    (200, ERR, json.dumps({"object": "list", "data": [listed], "has_more": False}).encode()),
                    (200, ERR, json.dumps(dict(listed, revoked=True)).encode()),
                    (429, ERR, err("concurrency_limit"))]
    sb = Sandbox.get("sbx_1", client=fake.client())
    p = sb.create_preview(3000, expires_in_seconds=60)
    assert p.id == "pv_1" and p.port == 3000 and p.url.startswith("http://3000-")
    assert [x.id for x in sb.list_previews(3000)] == ["pv_1"]
    assert sb.list_previews.__doc__ and sb.revoke_preview("pv_1").revoked is True
    with pytest.raises(sandboxd.ConcurrencyLimit):  # never retried: it could make two
        sb.create_preview(3000)
    seen = [(m, p) for m, p, _, _ in fake.seen]
    assert seen[1] == ("POST", "/v1/sandboxes/sbx_1/ports/3000/previews")
    assert json.loads(fake.seen[1][3]) == {"expires_in_seconds": 60}
    assert seen[2] == ("GET", "/v1/sandboxes/sbx_1/ports/3000/previews")
    assert seen[3] == ("DELETE", "/v1/sandboxes/sbx_1/previews/pv_1")
    assert len(seen) == 5 and json.loads(fake.seen[4][3]) == {}


def test_snapshots_take_list_get_delete_and_create_from_one(fake):
    snap = {"object": "snapshot", "id": "snap_1", "name": "base", "sandbox_id": "sbx_1",
            "disk_gib": 2, "bytes": 4096, "created_at": "t", "cost_micro_usd": 0}
    fake.replies = [(200, ERR, SBX), (201, ERR, json.dumps(snap).encode()),
                    (200, ERR, json.dumps({"object": "list", "data": [snap], "has_more": False}).encode()),
                    (200, ERR, json.dumps(snap).encode()),
                    (409, ERR, err("snapshot_in_use")),
                    (201, ERR, SBX)]
    c = fake.client()
    sb = Sandbox.get("sbx_1", client=c)
    s = sb.snapshot("base")
    assert s.id == "snap_1" and s.disk_gib == 2 and s.bytes == 4096
    assert [x.id for x in c.list_snapshots()] == ["snap_1"]
    assert c.get_snapshot("snap_1").sandbox_id == "sbx_1"
    with pytest.raises(sandboxd.SnapshotInUse):
        c.delete_snapshot("snap_1")
    c.create_sandbox(snapshot="snap_1")
    seen = [(m, p) for m, p, _, _ in fake.seen]
    assert seen[1] == ("POST", "/v1/sandboxes/sbx_1/snapshots")
    assert json.loads(fake.seen[1][3]) == {"name": "base"}
    assert seen[2] == ("GET", "/v1/snapshots") and seen[3] == ("GET", "/v1/snapshots/snap_1")
    assert seen[4] == ("DELETE", "/v1/snapshots/snap_1")
    assert seen[5][0] == "POST" and json.loads(fake.seen[5][3]) == {"snapshot": "snap_1"}
