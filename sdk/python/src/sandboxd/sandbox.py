"""A sandbox and what runs in it: exec (buffered or streamed), files,
background processes."""

from __future__ import annotations

import json
import os
import tarfile
import tempfile
import time
import urllib.parse
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, BinaryIO, Dict, Iterator, List, Optional, Union

from ._http import CREATE, NEVER, RATE, SAFE, Response
from .errors import APIConnectionError, SandboxdError, error_from_reply
from .models import (
    ExecEvent,
    ExecResult,
    FileEntry,
    FileInfo,
    Page,
    Preview,
    Snapshot,
    ProcessOutput,
    ProcessResult,
    SandboxInfo,
    SandboxMetrics,
    from_json,
)


@dataclass
class PortResponse:
    """What the server in the sandbox answered (``Sandbox.port_fetch``)."""

    status: int
    headers: Dict[str, str]
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    def json(self) -> Any:
        return json.loads(self.body)


if TYPE_CHECKING:
    from .client import Client
    from .terminal import Terminal

SB = "/v1/sandboxes/{id}"


def _exec_body(command: str, timeout_ms, cwd, env, encoding, **more: Any) -> Dict[str, Any]:
    body = {"command": command, "timeout_ms": timeout_ms, "cwd": cwd, "env": env, "encoding": encoding}
    body.update(more)
    return {k: v for k, v in body.items() if v is not None}


class Sandbox:
    """A running sandbox. ``with Sandbox.create() as sb:`` deletes it on exit.

    ``info`` is the sandbox as last seen (refreshed by :meth:`refresh`,
    :meth:`extend` and :meth:`delete`); ``files`` and ``processes`` reach
    into the guest.
    """

    def __init__(self, client: "Client", info: SandboxInfo) -> None:
        self.client = client
        self.info = info
        self.files = Files(self)
        self.processes = Processes(self)

    @property
    def id(self) -> str:
        return self.info.id

    @property
    def status(self) -> Optional[str]:
        return self.info.status

    def __repr__(self) -> str:
        return f"Sandbox(id={self.id!r}, status={self.status!r})"

    @classmethod
    def create(
        cls,
        size: Optional[str] = None,
        timeout_minutes: Optional[int] = None,
        *,
        client: Optional["Client"] = None,
        idempotency_key: Optional[str] = None,
        metadata: Optional[Dict[str, str]] = None,
        network: Optional[Dict[str, Any]] = None,
        snapshot: Optional[str] = None,
        timeout_action: Optional[str] = None,
    ) -> "Sandbox":
        """``POST /v1/sandboxes``: returns once the guest accepts commands.
        ``metadata``: labels, string pairs (docs/api.md, Metadata).
        ``network``: its egress policy, e.g. ``{"egress": "allow_list",
        "allow": ["pypi.org", "*.pythonhosted.org:443"]}`` (docs/api.md,
        Network); without it, the service's default. ``snapshot``: a
        snapshot's id (:meth:`snapshot`): its disk starts as the snapshot's.
        ``timeout_action``: ``"pause"`` pauses it at its expiry instead of
        ending it (``"expire"``, the default); :meth:`resume` gives it time
        again.

        One ``Idempotency-Key`` (given, or made here) is sent with every
        attempt, so the retries after a 429, 503, 409 or a lost connection
        never make a second sandbox.
        """
        from .client import Client

        client = client or Client()
        body = {k: v for k, v in (("size", size), ("timeout_minutes", timeout_minutes),
                                  ("metadata", metadata), ("network", network),
                                  ("snapshot", snapshot), ("timeout_action", timeout_action))
                if v is not None}
        key = idempotency_key or f"sdk-py-{uuid.uuid4().hex}"
        with client._request("POST", "/v1/sandboxes", json_body=body,
                             headers={"Idempotency-Key": key}, retry=CREATE) as r:
            return cls(client, from_json(SandboxInfo, r.json()))

    @classmethod
    def get(cls, sandbox_id: str, *, client: Optional["Client"] = None) -> "Sandbox":
        """``GET /v1/sandboxes/{id}``: a handle on an existing sandbox."""
        from .client import Client

        client = client or Client()
        return cls(client, client._sandbox_info(sandbox_id))

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            self.delete()
        except SandboxdError:
            if exc_type is None:
                raise  # else the error in the block is the one to see

    def _req(self, method: str, tail: str, **kw: Any) -> Response:
        path_params = dict(kw.pop("path_params", {}), id=self.id)
        return self.client._request(method, SB + tail, path_params=path_params, **kw)

    def refresh(self) -> SandboxInfo:
        self.info = self.client._sandbox_info(self.id)
        return self.info

    def delete(self) -> SandboxInfo:
        """``DELETE``: destroy and settle (repeatable)."""
        self.info = from_json(SandboxInfo, self._req("DELETE", "").json())
        return self.info

    def update(self, metadata: Optional[Dict[str, Optional[str]]]) -> SandboxInfo:
        """``POST /v1/sandboxes/{id}``: set the keys given; a value of ``""``
        or ``None`` removes its key; ``metadata=None`` removes every key."""
        r = self._req("POST", "", json_body={"metadata": metadata}, retry=RATE)
        self.info = from_json(SandboxInfo, r.json())
        return self.info

    def set_network(self, policy: Dict[str, Any]) -> SandboxInfo:
        """``POST /v1/sandboxes/{id}/network``: replace its egress policy
        (``{"egress": "none" | "allow_list" | "open", "allow": [...],
        "deny": [...]}``); new connections obey it at once."""
        r = self._req("POST", "/network", json_body=policy, retry=RATE)
        self.info = from_json(SandboxInfo, r.json())
        return self.info

    def metrics(self) -> SandboxMetrics:
        """``GET /v1/sandboxes/{id}/metrics``: CPU, memory and disk samples
        over the last hour (docs/api.md, Metrics)."""
        return from_json(SandboxMetrics, self._req("GET", "/metrics").json())

    def terminal(self, rows: int = 24, cols: int = 80) -> "Terminal":
        """``GET /v1/sandboxes/{id}/terminal``: the exec user's login shell
        on a pseudo-terminal of ``rows`` x ``cols``, over a WebSocket. The
        :class:`Terminal` sends keystrokes (``send``), reads the screen's
        bytes (``recv``, ``read_until``), resizes, and ``close`` hangs up."""
        return self.client._t.websocket(SB + "/terminal", path_params={"id": self.id},
                                        query={"rows": rows, "cols": cols})

    def port_fetch(
        self,
        port: int,
        path: str = "/",
        *,
        method: str = "GET",
        body: Any = None,
        headers: Optional[Dict[str, str]] = None,
        query: Optional[Dict[str, Any]] = None,
    ) -> PortResponse:
        """One HTTP request to the server listening on the sandbox's
        ``127.0.0.1:port`` (``/v1/sandboxes/{id}/ports/{port}/{path}``,
        docs/api.md "Ports"). The server's answer comes back whatever its
        status; the daemon's own errors raise (``PortUnreachable`` when
        nothing listens, ``PortTimeout``, ``NotFound``...)."""
        r = self._req(method.upper(), "/ports/{port}/{path}",
                      path_params={"port": port, "path": path.lstrip("/")},
                      query=query, body=body, headers=headers, retry=RATE, passthrough=True)
        return PortResponse(r.status, {k: v for k, v in r.headers.items()}, r.body)

    def port_url(self, port: int, path: str = "/") -> str:
        """The URL of ``path`` on the sandbox's ``port`` through the API; it
        needs the API key (``Authorization: Bearer``) like every route."""
        return (self.client._t.url.rstrip("/") + f"/v1/sandboxes/{self.id}/ports/{int(port)}/"
                + urllib.parse.quote(path.lstrip("/"), safe="/"))

    def create_preview(self, port: int, expires_in_seconds: Optional[int] = None) -> Preview:
        """A preview URL of ``port`` for a browser (``POST
        /v1/sandboxes/{id}/ports/{port}/previews``, docs/api.md "Previews"):
        ``url`` opens the server's pages without a key until it expires
        (default an hour) or is revoked. The URL is shown only here. Never
        retried (a retry could make two)."""
        body = {} if expires_in_seconds is None else {"expires_in_seconds": expires_in_seconds}
        r = self._req("POST", "/ports/{port}/previews", path_params={"port": int(port)},
                      json_body=body, retry=NEVER)
        return from_json(Preview, r.json())

    def list_previews(self, port: int) -> List[Preview]:
        """The port's live previews, newest first (without their urls)."""
        r = self._req("GET", "/ports/{port}/previews", path_params={"port": int(port)}, retry=SAFE)
        return [from_json(Preview, p) for p in r.json()["data"]]

    def revoke_preview(self, preview_id: str) -> Preview:
        """Revoke one: its URL answers 404 from then on."""
        r = self._req("DELETE", "/previews/{preview_id}", path_params={"preview_id": preview_id},
                      retry=SAFE)
        return from_json(Preview, r.json())

    def extend(self, timeout_minutes: int) -> SandboxInfo:
        """Set the session to end ``timeout_minutes`` from now."""
        r = self._req("POST", "/extend", json_body={"timeout_minutes": timeout_minutes}, retry=RATE)
        self.info = from_json(SandboxInfo, r.json())
        return self.info

    def snapshot(self, name: Optional[str] = None) -> Snapshot:
        """``POST /v1/sandboxes/{id}/snapshots``: keep a copy of its disk
        (running or paused; it runs on). Never retried (a retry could make
        two)."""
        body = {} if name is None else {"name": name}
        r = self._req("POST", "/snapshots", json_body=body, retry=NEVER)
        return from_json(Snapshot, r.json())

    def pause(self) -> SandboxInfo:
        """``POST /v1/sandboxes/{id}/pause``: save the guest's memory on its
        host and stop it; runtime billing and the session clock stop. Calls
        into it raise :class:`SandboxPaused` until :meth:`resume`. A paused
        sandbox is returned as it is."""
        self.info = from_json(SandboxInfo, self._req("POST", "/pause", retry=RATE).json())
        return self.info

    def resume(self, timeout_minutes: Optional[int] = None) -> SandboxInfo:
        """``POST /v1/sandboxes/{id}/resume``: bring a paused sandbox back
        with its files, processes and clock; ``expires_at`` moves out by the
        pause. ``timeout_minutes``: run at least that long from now (held
        as an extend); without it, a sandbox paused at its expiry gets the
        default timeout. A running sandbox is returned as it is."""
        body = {"timeout_minutes": timeout_minutes} if timeout_minutes is not None else None
        self.info = from_json(SandboxInfo, self._req("POST", "/resume", json_body=body,
                                                      retry=RATE).json())
        return self.info

    def exec(
        self,
        command: str,
        *,
        timeout_ms: Optional[int] = None,
        cwd: Optional[str] = None,
        env: Optional[Dict[str, str]] = None,
        encoding: Optional[str] = None,
        receipt: bool = False,
    ) -> ExecResult:
        """Run ``command`` with ``/bin/sh -c`` and wait for it. A non-zero exit
        is a result, not an exception (branch on ``exit_code``)."""
        body = _exec_body(command, timeout_ms, cwd, env, encoding, receipt=receipt or None)
        return from_json(ExecResult, self._req("POST", "/exec", json_body=body, retry=RATE).json())

    def exec_stream(
        self,
        command: str,
        *,
        timeout_ms: Optional[int] = None,
        cwd: Optional[str] = None,
        env: Optional[Dict[str, str]] = None,
        encoding: Optional[str] = None,
    ) -> Iterator[ExecEvent]:
        """Run ``command`` and yield its ``stdout``/``stderr`` events as the
        guest produces them, then one ``exit`` event. A command that cannot
        end normally raises the error of its ``error`` event."""
        body = _exec_body(command, timeout_ms, cwd, env, encoding)
        r = self._req("POST", "/exec", json_body=body, headers={"Accept": "application/x-ndjson"}, retry=RATE)
        return _events(r)


def _events(r: Response) -> Iterator[ExecEvent]:
    for line in r.iter_lines():
        if not line.strip():
            continue
        ev = json.loads(line)
        if ev.get("type") == "error":
            raise error_from_reply(None, ev, request_id=r.headers.get("X-Request-Id"))
        yield from_json(ExecEvent, ev)
        if ev.get("type") == "exit":
            return
    raise APIConnectionError("the exec stream ended before its exit event")


class Files:
    """``/v1/sandboxes/{id}/files``: files and trees in and out of the guest."""

    def __init__(self, sandbox: Sandbox) -> None:
        self._sb = sandbox

    def write(self, path: str, data: Union[bytes, str, BinaryIO], *, mode: Optional[Union[int, str]] = None) -> FileInfo:
        """Upload ``data`` to ``path`` (atomic; parents created). ``mode``: octal
        permission bits, e.g. ``0o640`` or ``"0640"``."""
        if isinstance(mode, int):
            mode = format(mode, "04o")
        r = self._sb._req("PUT", "/files", query={"path": path, "mode": mode}, body=data,
                          headers={"Content-Type": "application/octet-stream"})
        return from_json(FileInfo, r.json())

    def read(self, path: str, *, offset: Optional[int] = None, length: Optional[int] = None) -> bytes:
        """The file's bytes (from ``offset``, at most ``length`` of them)."""
        headers = {"Accept": "application/octet-stream"}
        if offset is not None or length is not None:
            start = offset or 0
            headers["Range"] = f"bytes={start}-" + (str(start + length - 1) if length else "")
        with self._sb._req("GET", "/files", query={"path": path}, headers=headers) as r:
            return r.read()

    def list(self, path: str) -> Page[FileEntry]:
        """The entries of a directory, in its order (at most 10000: then
        ``has_more``)."""
        r = self._sb._req("GET", "/files", query={"path": path, "list": True}).json()
        return Page([from_json(FileEntry, e) for e in r["data"]], bool(r.get("has_more")))

    def delete(self, path: str, *, recursive: bool = False) -> None:
        self._sb._req("DELETE", "/files", query={"path": path, "recursive": recursive or None}).close()

    def upload_dir(self, local_dir: str, remote_dir: str) -> FileInfo:
        """Send the contents of ``local_dir`` as a tar, extracted into
        ``remote_dir`` (created if missing) by the guest."""
        with tempfile.TemporaryFile() as buf:
            with tarfile.open(fileobj=buf, mode="w") as tar:
                for name in sorted(os.listdir(local_dir)):
                    tar.add(os.path.join(local_dir, name), arcname=name, filter=_as_root)
            buf.seek(0)
            r = self._sb._req("PUT", "/files", query={"path": remote_dir}, body=buf,
                              headers={"Content-Type": "application/x-tar"})
            return from_json(FileInfo, r.json())

    def download_dir(self, remote_dir: str, local_dir: str) -> List[str]:
        """Fetch ``remote_dir`` as a tar and extract it into ``local_dir``;
        returns the names extracted. The guest is not trusted: absolute
        names, ``..``, links that lead out of ``local_dir`` and device files
        raise :class:`SandboxdError` (what was extracted before stays)."""
        os.makedirs(local_dir, exist_ok=True)
        names = []
        with self._sb._req("GET", "/files", query={"path": remote_dir, "format": "tar"},
                           headers={"Accept": "application/x-tar"}) as r:
            with tarfile.open(fileobj=r, mode="r|") as tar:
                for m in tar:
                    if _safe_member(m, local_dir):
                        tar.extract(m, local_dir, **_EXTRACT_KW)
                        names.append(m.name)
        return names


_EXTRACT_KW: Dict[str, Any] = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}


def _as_root(ti: tarfile.TarInfo) -> tarfile.TarInfo:
    ti.uid = ti.gid = 0
    ti.uname = ti.gname = "root"
    return ti


def _inside(root: str, path: str) -> bool:
    root = os.path.realpath(root)
    return os.path.commonpath([root, os.path.realpath(path)]) == root


def _safe_member(m: tarfile.TarInfo, dest: str) -> bool:
    """Whether m may be extracted under dest (False: the root entry "./");
    raises on anything that would write outside it."""
    name = os.path.normpath(m.name)
    if name == ".":
        return False
    target = os.path.join(dest, name)
    if os.path.isabs(m.name) or name.startswith(".." + os.sep) or name == ".." or not _inside(dest, target):
        raise SandboxdError(f"refused tar entry {m.name!r}: outside the destination")
    if m.issym() and (os.path.isabs(m.linkname) or not _inside(dest, os.path.join(os.path.dirname(target), m.linkname))):
        raise SandboxdError(f"refused symlink {m.name!r} -> {m.linkname!r}: it leads outside")
    if m.islnk() and not _inside(dest, os.path.join(dest, m.linkname)):
        raise SandboxdError(f"refused hard link {m.name!r} -> {m.linkname!r}: it leads outside")
    if not (m.isreg() or m.isdir() or m.issym() or m.islnk()):
        raise SandboxdError(f"refused tar entry {m.name!r}: not a file, directory or link")
    m.mode = (m.mode & 0o755) | (0o700 if m.isdir() else 0o600)
    m.uid, m.gid, m.uname, m.gname = os.getuid(), os.getgid(), "", ""
    return True


@dataclass
class Process:
    """A background process in the guest (``pid`` is its pid there)."""

    pid: int = 0
    command: Optional[str] = None
    started_at: Optional[str] = None
    status: Optional[str] = None  # running | exited
    exit_code: Optional[int] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)
    sandbox: Optional[Sandbox] = field(default=None, repr=False, compare=False)

    def _req(self, method: str, tail: str, **kw: Any) -> Response:
        assert self.sandbox is not None, "a Process from Processes.start() or list()"
        return self.sandbox._req(method, "/processes/{pid}" + tail, path_params={"pid": self.pid}, **kw)

    def output(self, stdout_offset: int = 0, stderr_offset: int = 0, *, encoding: Optional[str] = None) -> ProcessOutput:
        """Output since those byte offsets (at most 30 KiB of each stream a call)."""
        q = {"stdout_offset": stdout_offset, "stderr_offset": stderr_offset, "encoding": encoding}
        out = from_json(ProcessOutput, self._req("GET", "/output", query=q).json())
        self.status, self.exit_code = out.status, out.exit_code
        return out

    def write_stdin(self, data: str = "", *, close: bool = False, encoding: Optional[str] = None) -> Dict[str, Any]:
        """Write to its stdin (up to 64 KiB; ``written`` says how much was taken)."""
        body = {"data": data, "close": close or None, "encoding": encoding}
        body = {k: v for k, v in body.items() if v is not None}
        return self._req("POST", "/stdin", json_body=body, retry=RATE).json()

    def close_stdin(self) -> Dict[str, Any]:
        return self.write_stdin(close=True)

    def signal(self, signal: str = "TERM") -> Dict[str, Any]:
        """Send ``TERM``, ``KILL`` or ``INT`` to its process group; ``sent`` is
        False when it had already exited."""
        return self._req("POST", "/signal", json_body={"signal": signal}, retry=RATE).json()

    def wait(self, *, timeout: Optional[float] = None, poll_interval: float = 0.5) -> ProcessResult:
        """Read its output by offsets until it has exited and all is read.
        ``timeout`` (seconds) raises :class:`TimeoutError`; the process runs on."""
        deadline = None if timeout is None else time.monotonic() + timeout
        so = se = lost = 0
        stdout: List[str] = []
        stderr: List[str] = []
        while True:
            out = self.output(so, se)
            stdout.append(out.stdout)
            stderr.append(out.stderr)
            lost += out.stdout_lost_bytes + out.stderr_lost_bytes
            progressed = (out.stdout_next_offset, out.stderr_next_offset) != (so, se)
            so, se = out.stdout_next_offset, out.stderr_next_offset
            if out.complete:
                return ProcessResult(self.pid, out.exit_code, "".join(stdout), "".join(stderr), lost)
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"process {self.pid} still {out.status} after {timeout} s")
            if not progressed:
                time.sleep(poll_interval)


class Processes:
    """``/v1/sandboxes/{id}/processes``."""

    def __init__(self, sandbox: Sandbox) -> None:
        self._sb = sandbox

    def start(
        self,
        command: str,
        *,
        cwd: Optional[str] = None,
        env: Optional[Dict[str, str]] = None,
        timeout_ms: Optional[int] = None,
    ) -> Process:
        """Start ``command`` in the background; returns at once."""
        body = _exec_body(command, timeout_ms, cwd, env, None)
        p = self._sb._req("POST", "/processes", json_body=body, retry=RATE).json()
        return self._proc(p)

    def list(self) -> List[Process]:
        return [self._proc(p) for p in self._sb._req("GET", "/processes").json().get("data", [])]

    def _proc(self, obj: Dict[str, Any]) -> Process:
        p = from_json(Process, obj)
        p.sandbox = self._sb
        return p


__all__ = ["Sandbox", "Files", "Processes", "Process"]
