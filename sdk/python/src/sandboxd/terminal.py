"""A terminal in a sandbox: ``GET /v1/sandboxes/{id}/terminal`` over a
WebSocket (RFC 6455), with the standard library only.

Binary messages carry keystrokes to the shell and the screen's bytes back;
a text message ``{"type":"resize","rows":R,"cols":C}`` resizes. When the
shell exits, the daemon sends ``{"type":"exit","exit_code":N}`` and closes
(a failure: ``{"type":"error","error":{...}}``). See docs/api.md
"Terminal".
"""

from __future__ import annotations

import base64
import json
import os
import socket
import ssl
import struct
import urllib.parse
from typing import Any, Optional, Union

from .errors import APIConnectionError, error_from_reply

FRAME_MAX = 64 * 1024  # the daemon's cap on a client frame
_HEAD_MAX = 64 * 1024


class Terminal:
    """One open terminal. ``recv()`` returns screen bytes, or ``None`` once
    the terminal ended: then ``exit_code`` is the shell's (or ``error`` says
    why it failed, or both are ``None``: the connection closed)."""

    def __init__(self, sock: socket.socket, leftover: bytes) -> None:
        self._sock = sock
        self._buf = bytearray(leftover)
        self._closed = False
        self.exit_code: Optional[int] = None
        self.error: Optional[dict] = None
        self.close_code: Optional[int] = None
        self.close_reason: str = ""

    # ------------------------------------------------------------ sending

    def _frame(self, op: int, payload: bytes) -> None:
        key = os.urandom(4)
        n = len(payload)
        if n < 126:
            head = struct.pack("!BB", 0x80 | op, 0x80 | n)
        elif n <= 0xFFFF:
            head = struct.pack("!BBH", 0x80 | op, 0x80 | 126, n)
        else:
            head = struct.pack("!BBQ", 0x80 | op, 0x80 | 127, n)
        masked = bytes(b ^ key[i & 3] for i, b in enumerate(payload))
        self._sock.sendall(head + key + masked)

    def send(self, data: Union[bytes, str]) -> None:
        """Type ``data`` (bytes, or text sent as UTF-8)."""
        if isinstance(data, str):
            data = data.encode()
        for i in range(0, len(data), FRAME_MAX):
            self._frame(0x2, data[i : i + FRAME_MAX])

    def resize(self, rows: int, cols: int) -> None:
        self._frame(0x1, json.dumps({"type": "resize", "rows": rows, "cols": cols}).encode())

    def close(self) -> None:
        """Close the terminal (the shell is hung up)."""
        if not self._closed:
            try:
                self._frame(0x8, struct.pack("!H", 1000))
            except OSError:
                pass
            self._closed = True
        self._sock.close()

    def __enter__(self) -> "Terminal":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------ receiving

    def _fill(self, n: int) -> bool:
        while len(self._buf) < n:
            chunk = self._sock.recv(65536)
            if not chunk:
                return False
            self._buf += chunk
        return True

    def _next_frame(self):
        if not self._fill(2):
            return None
        b0, b1 = self._buf[0], self._buf[1]
        if b1 & 0x80 or b0 & 0x70:
            raise APIConnectionError("terminal: the server sent a masked or extended frame")
        n, off = b1 & 0x7F, 2
        if n == 126:
            if not self._fill(4):
                return None
            n, off = struct.unpack("!H", self._buf[2:4])[0], 4
        elif n == 127:
            if not self._fill(10):
                return None
            n, off = struct.unpack("!Q", self._buf[2:10])[0], 10
        if n > 16 * 1024 * 1024:
            raise APIConnectionError("terminal: a frame of %d bytes" % n)
        if not self._fill(off + n):
            return None
        payload = bytes(self._buf[off : off + n])
        del self._buf[: off + n]
        return b0 & 0x80 != 0, b0 & 0x0F, payload

    def recv(self, timeout: Optional[float] = None) -> Optional[bytes]:
        """The next screen bytes (waits up to ``timeout`` seconds: then
        raises ``socket.timeout``), or ``None`` once the terminal ended."""
        self._sock.settimeout(timeout)
        text = b""
        while True:
            if self._closed:
                return None
            f = self._next_frame()
            if f is None:
                self._closed = True
                return None
            fin, op, payload = f
            if op == 0x2 or (op == 0x0 and not text):
                return payload
            if op in (0x1, 0x0):
                text += payload
                if not fin:
                    continue
                try:
                    msg = json.loads(text)
                except ValueError:
                    msg = None
                text = b""
                if isinstance(msg, dict) and msg.get("type") == "exit":
                    self.exit_code = msg.get("exit_code")
                elif isinstance(msg, dict) and msg.get("type") == "error":
                    self.error = msg.get("error")
            elif op == 0x8:
                if len(payload) >= 2:
                    self.close_code = struct.unpack("!H", payload[:2])[0]
                    self.close_reason = payload[2:].decode("utf-8", "replace")
                try:
                    self._sock.sendall(bytes([0x88, 0x82]) + b"\0\0\0\0" + payload[:2])
                except OSError:
                    pass
                self._closed = True
                self._sock.close()
                return None
            elif op == 0x9:
                self._frame(0xA, payload)

    def read_until(self, needle: Union[bytes, str], timeout: float = 30.0) -> bytes:
        """Screen bytes until ``needle`` appears (all of them, needle
        included); raises ``TimeoutError`` (with what came) otherwise."""
        import time

        if isinstance(needle, str):
            needle = needle.encode()
        got = b""
        end = time.monotonic() + timeout
        while needle not in got:
            left = end - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"terminal: {needle!r} not seen in {got[-400:]!r}")
            try:
                chunk = self.recv(timeout=left)
            except socket.timeout:
                continue
            if chunk is None:
                raise TimeoutError(f"terminal ended before {needle!r}: {got[-400:]!r}")
            got += chunk
        return got


def open_terminal(url: str, api_key: Optional[str], target: str, timeout: Optional[float]) -> Terminal:
    """The WebSocket handshake to ``target`` (path and query) on ``url``'s
    host; an error reply raises its exception, as any call."""
    u = urllib.parse.urlsplit(url)
    port = u.port or (443 if u.scheme == "https" else 80)
    try:
        sock = socket.create_connection((u.hostname, port), timeout=timeout)
        if u.scheme == "https":
            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=u.hostname)
        key = base64.b64encode(os.urandom(16)).decode()
        lines = [
            f"GET {target} HTTP/1.1",
            f"Host: {u.hostname}:{port}",
            "Upgrade: websocket",
            "Connection: Upgrade",
            f"Sec-WebSocket-Key: {key}",
            "Sec-WebSocket-Version: 13",
        ]
        if api_key:
            lines.append(f"Authorization: Bearer {api_key}")
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        buf = b""
        while b"\r\n\r\n" not in buf:
            chunk = sock.recv(4096)
            if not chunk or len(buf) > _HEAD_MAX:
                raise APIConnectionError(f"GET {target}: the connection closed during the handshake")
            buf += chunk
    except OSError as e:
        raise APIConnectionError(f"GET {target}: {e}") from e
    head, rest = buf.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    if status != 101:
        n = int(headers.get("content-length", "0"))
        try:
            while len(rest) < n:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                rest += chunk
        except OSError:
            pass
        sock.close()
        try:
            parsed = json.loads(rest[:n])
        except ValueError:
            parsed = None
        ra = headers.get("retry-after")
        raise error_from_reply(status, parsed, request_id=headers.get("x-request-id"),
                               retry_after=float(ra) if ra and ra.isdigit() else None)
    import hashlib

    want = base64.b64encode(hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()).decode()
    if headers.get("sec-websocket-accept") != want:
        sock.close()
        raise APIConnectionError(f"GET {target}: bad Sec-WebSocket-Accept")
    sock.settimeout(None)
    return Terminal(sock, rest)
