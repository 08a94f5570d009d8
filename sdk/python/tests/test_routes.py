"""Every route of the API is reachable from the SDK.

``sandboxd.ROUTES`` is the SDK's table of (method, path); the transport
refuses any other. Checked here: each entry is issued by a public call;
the table equals docs/api.md's endpoint table (the contract); every route
of docs/openapi.yaml is in it, and with a daemon (SANDBOXD_URL) every
entry is served. The spec is read line by line (a repeated key, which a
YAML parser would drop silently, still counts) and compared on
normalized (METHOD, path) pairs; a spec route that the SDK lacks fails
unless the daemon does not serve it either (a misplaced entry of the
spec: reported as a warning), and an SDK route missing from the spec is a
warning as long as the contract and the daemon have it.
"""

import http.client
import io
import json
import os
import re
import tarfile
import urllib.parse
import warnings

import pytest

import sandboxd
from conftest import REPO

METHODS = ("get", "put", "post", "delete", "patch", "head", "options")


def norm(method, path):
    return method.upper(), re.sub(r"\{[^}]*\}", "{}", path.split("?")[0].rstrip("/") or "/")


def spec_routes():
    routes, path = set(), None
    with open(os.path.join(REPO, "docs", "openapi.yaml")) as f:
        for line in f:
            m = re.match(r"^  (/\S*):\s*$", line)
            if m:
                path = m.group(1)
            elif re.match(r"^\S", line):
                path = None  # left the paths section
            else:
                m = re.match(r"^    (%s):" % "|".join(METHODS), line)
                if m and path:
                    routes.add(norm(m.group(1), path))
    return routes


def contract_routes():
    text = open(os.path.join(REPO, "docs", "api.md")).read()
    return {norm(m, p) for m, p in re.findall(r"^\| (GET|POST|PUT|DELETE|PATCH|HEAD|OPTIONS) \| `(/v1/[^`]*)`", text, re.M)}


SDK = {norm(m, p) for m, p in sandboxd.ROUTES}


def served(method, path):
    """Whether the daemon has this route: without a key, a known route is
    401 (or 200 when public), an unknown one 404 and another method 405."""
    u = urllib.parse.urlsplit(os.environ["SANDBOXD_URL"])
    p = path.replace("{}", "sbx_000000000000000000000000", 1).replace("{}", "2")
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    try:
        conn.request(method, u.path.rstrip("/") + p, body=b"" if method in ("POST", "PUT") else None)
        status = conn.getresponse().status
    finally:
        conn.close()
    return status not in (404, 405)


def test_the_table_is_the_contract():
    contract = contract_routes()
    assert len(contract) >= 25
    assert SDK - contract == set(), "the SDK calls routes docs/api.md does not list"
    assert contract - SDK == set(), "docs/api.md lists routes the SDK cannot reach"


def test_the_spec_routes_are_in_the_sdk(request):
    spec = spec_routes()
    assert len(spec) >= 20, "docs/openapi.yaml: paths not found"
    live = bool(os.environ.get("SANDBOXD_URL"))
    for route in sorted(spec - SDK):
        if live:
            assert not served(*route), f"the daemon serves {route} (docs/openapi.yaml) but the SDK cannot reach it"
            warnings.warn(f"docs/openapi.yaml lists {route}, which the daemon does not serve (a misplaced entry)")
        else:
            assert route not in contract_routes()
            warnings.warn(f"docs/openapi.yaml lists {route}, which docs/api.md does not (a misplaced entry?)")
    for route in sorted(SDK - spec):
        warnings.warn(f"docs/openapi.yaml lacks {route}, which docs/api.md lists")


def test_every_sdk_route_is_served(client):
    assert [r for r in sorted(SDK) if not served(*r)] == []


def _universal(h):
    """One reply that satisfies any call of the SDK (the fake daemon)."""
    q = urllib.parse.parse_qs(urllib.parse.urlsplit(h.path).query)
    if q.get("format") == ["tar"]:
        buf = io.BytesIO()
        tarfile.open(fileobj=buf, mode="w").close()
        return 200, {"Content-Type": "application/x-tar"}, buf.getvalue()
    if h.headers.get("Accept") == "application/x-ndjson":
        return 200, {}, b'{"type":"exit","exit_code":0}\n'
    if h.command == "GET" and "/files" in h.path and "list" not in q:
        return 200, {"Content-Type": "application/octet-stream"}, b"bytes"
    obj = {"id": "sbx_1", "object": "x", "status": "exited", "pid": 5, "exit_code": 0, "stdout": "", "stderr": "",
           "data": [], "has_more": False, "stdout_next_offset": 0, "stdout_total": 0, "stderr_next_offset": 0,
           "stderr_total": 0}
    return 200, {"Content-Type": "application/json"}, json.dumps(obj).encode()


def test_every_table_entry_is_issued_by_a_public_call(fake, tmp_path):
    fake.replies = [_universal]
    c = fake.client()
    sb = c.create_sandbox()
    c.sandbox(sb.id), c.list_sandboxes(), c.usage(), c.limits(), c.runtimes(), c.openapi()
    c.run_code("print(1)"), c.list_executions(), c.get_execution("sbxr_1")
    c.receipt("rcpt_1"), c.receipt_public_key()
    c.create_api_key(), c.list_api_keys(), c.revoke_api_key("key_1")
    sb.refresh(), sb.update({"job": "1"}), sb.extend(5), sb.set_network({"egress": "none"}), sb.metrics(), sb.pause(), sb.resume(), sb.exec("true"), list(sb.exec_stream("true"))
    for m in ("GET", "PUT", "POST", "DELETE", "HEAD", "PATCH", "OPTIONS"):
        sb.port_fetch(8000, "/a/b", method=m, body=b"x" if m in ("PUT", "POST", "PATCH") else None)
    sb.create_preview(8000, 60), sb.list_previews(8000), sb.revoke_preview("pv_1")
    sb.snapshot("s"), c.list_snapshots(), c.get_snapshot("snap_1"), c.delete_snapshot("snap_1")
    (tmp_path / "up").mkdir()
    sb.files.write("/f", b"x"), sb.files.read("/f"), sb.files.list("/"), sb.files.delete("/f")
    sb.files.upload_dir(str(tmp_path / "up"), "/d"), sb.files.download_dir("/d", str(tmp_path / "down"))
    with pytest.raises(sandboxd.APIError):  # a 200 where the upgrade's 101 belongs
        sb.terminal()
    p = sb.processes.start("sleep 1")
    sb.processes.list(), p.output(), p.write_stdin("x"), p.signal("TERM"), p.wait()
    sb.delete()
    templates = sorted(sandboxd.ROUTES, key=lambda r: r[1].count("{"))
    issued = set()
    for method, path, _, _ in fake.seen:
        path = urllib.parse.urlsplit(path).path
        for m, t in templates:
            pattern = re.escape(t).replace(r"\{path\}", ".*")  # the ports route's tail
            if m == method and re.fullmatch(re.sub(r"\\\{[^}]*\\\}", "[^/]+", pattern), path):
                issued.add(norm(m, t))
                break
        else:
            pytest.fail(f"{method} {path} matches no route of the table")
    assert issued == SDK
