"""The HTTP transport: one request per connection (http.client), error
replies turned into exceptions, bounded retries after ``Retry-After``."""

from __future__ import annotations

import http.client
import io
import json
import random
import time
import urllib.parse
from typing import Any, Callable, Dict, Iterator, Mapping, Optional, Tuple

from .errors import ERROR_TYPES, APIConnectionError, APIError, error_from_reply
from .routes import ROUTES

VERSION = "0.1.0"

# What may be retried. NEVER: nothing. RATE: a 429 rate_limited only
# (nothing was started; safe for any call). SAFE: also a 503 and a failed
# connection (calls that are idempotent: GET, DELETE, PUT of a file, a
# create with its Idempotency-Key). CREATE: SAFE plus 409
# idempotency_conflict (the first create with the key is still running).
NEVER, RATE, SAFE, CREATE = 0, 1, 2, 3

OnRetry = Callable[[int, Exception, float], None]


class PassedResponse:
    """A reply of a server in a sandbox (the ports route) read whole:
    any status, its headers and body, as the daemon passed them on."""

    def __init__(self, status: int, headers: Any, body: bytes):
        self.status, self.headers, self.body = status, headers, body


class Response:
    """A reply whose status is below 400, body not read yet. Close it (or use
    ``with``); ``json()`` and ``read()`` read it whole and close."""

    def __init__(self, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse):
        self._conn, self._resp = conn, resp
        self.status = resp.status
        self.headers = resp.headers

    def read(self, amt: Optional[int] = None) -> bytes:
        return self._resp.read(amt)

    def readline(self) -> bytes:
        return self._resp.readline()

    def json(self) -> Any:
        try:
            return json.loads(self._resp.read())
        finally:
            self.close()

    def iter_lines(self) -> Iterator[bytes]:
        try:
            while True:
                line = self._resp.readline()
                if not line:
                    return
                yield line
        finally:
            self.close()

    def close(self) -> None:
        self._resp.close()
        self._conn.close()

    def __enter__(self) -> "Response":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _retry_after(value: Optional[str]) -> Optional[float]:
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None  # an HTTP date: the daemon never sends one


def _query(params: Optional[Mapping[str, Any]]) -> str:
    if not params:
        return ""
    items = []
    for k, v in params.items():
        if v is None:
            continue
        if isinstance(v, bool):
            v = "true" if v else "false"
        items.append((k, str(v)))
    return "?" + urllib.parse.urlencode(items) if items else ""


class Transport:
    """Sends requests to one daemon. Thread-safe (no shared connection)."""

    def __init__(
        self,
        url: str,
        api_key: Optional[str],
        *,
        timeout: Optional[float],
        max_retries: int,
        max_retry_wait: float,
        on_retry: Optional[OnRetry],
    ) -> None:
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        self.url = url
        self._https = u.scheme == "https"
        self._host = u.hostname
        self._port = u.port
        self._prefix = u.path.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout
        self.max_retries = max_retries
        self.max_retry_wait = max_retry_wait
        self.on_retry = on_retry

    def _connect(self) -> http.client.HTTPConnection:
        cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        return cls(self._host, self._port, timeout=self.timeout, blocksize=65536)

    def request(
        self,
        method: str,
        template: str,
        *,
        path_params: Optional[Mapping[str, Any]] = None,
        query: Optional[Mapping[str, Any]] = None,
        json_body: Any = None,
        body: Any = None,
        headers: Optional[Dict[str, str]] = None,
        retry: int = SAFE,
        passthrough: bool = False,
    ) -> Any:
        """Send one API call and return the reply (status < 400), or raise
        the error's exception once the retries allowed are spent."""
        if (method, template) not in ROUTES:
            raise AssertionError(f"route not in sandboxd.routes.ROUTES: {method} {template}")
        # {path} (the ports route) keeps its slashes
        path = template.format(
            **{k: urllib.parse.quote(str(v), safe="/" if k == "path" else "")
               for k, v in (path_params or {}).items()}
        )
        target = self._prefix + path + _query(query)
        hdrs = {"User-Agent": f"sandboxd-python/{VERSION}", "Accept": "application/json"}
        if self.api_key:
            hdrs["Authorization"] = f"Bearer {self.api_key}"
        if json_body is not None:
            body = json.dumps(json_body).encode()
            hdrs["Content-Type"] = "application/json"
        hdrs.update(headers or {})
        if isinstance(body, str):
            body = body.encode()
        start, replayable = _body_start(body)
        if not replayable:
            retry = min(retry, RATE)  # a stream read once cannot be sent again
        attempt = 0
        while True:
            try:
                if start is not None:
                    body.seek(start)
                return self._once(method, target, body, hdrs, passthrough)
            except (APIError, APIConnectionError) as e:
                wait = self._wait(e, retry, attempt)
                if wait is None:
                    raise
                attempt += 1
                if self.on_retry:
                    self.on_retry(attempt, e, wait)
            time.sleep(wait)

    def _once(self, method: str, target: str, body: Any, hdrs: Dict[str, str],
              passthrough: bool = False) -> Any:
        conn = self._connect()
        try:
            if body is not None and "Content-Length" not in hdrs:
                n = _body_length(body)
                if n is not None:
                    hdrs = dict(hdrs, **{"Content-Length": str(n)})
            conn.request(method, target, body=body, headers=hdrs)
            resp = conn.getresponse()
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise APIConnectionError(f"{method} {target}: {e}") from e
        if resp.status < 400 and not passthrough:
            return Response(conn, resp)
        try:
            raw = resp.read()
        except (OSError, http.client.HTTPException) as e:
            if passthrough:
                raise APIConnectionError(f"{method} {target}: {e}") from e
            raw = b""
        finally:
            conn.close()
        try:
            parsed = json.loads(raw)
        except ValueError:
            parsed = None
        if passthrough and not _api_error(resp.status, parsed, resp.headers):
            return PassedResponse(resp.status, resp.headers, raw)
        raise error_from_reply(
            resp.status,
            parsed,
            request_id=resp.headers.get("X-Request-Id"),
            retry_after=_retry_after(resp.headers.get("Retry-After")),
        )

    def websocket(self, template: str, *, path_params: Mapping[str, Any], query: Mapping[str, Any]) -> Any:
        """Open a WebSocket route (GET + Upgrade): a terminal.Terminal."""
        from .terminal import open_terminal

        if ("GET", template) not in ROUTES:
            raise AssertionError(f"route not in sandboxd.routes.ROUTES: GET {template}")
        path = template.format(**{k: urllib.parse.quote(str(v), safe="") for k, v in path_params.items()})
        return open_terminal(self.url, self.api_key, self._prefix + path + _query(query), self.timeout)

    def _wait(self, e: Exception, retry: int, attempt: int) -> Optional[float]:
        """Seconds to wait before retrying after e, or None to give up."""
        if attempt >= self.max_retries:
            return None
        if isinstance(e, APIConnectionError):
            ok = retry >= SAFE
        else:
            assert isinstance(e, APIError)
            ok = (
                (e.type == "rate_limited" and retry >= RATE)
                or (e.status == 503 and retry >= SAFE)
                or (e.type == "idempotency_conflict" and retry >= CREATE)
            )
        if not ok:
            return None
        hint = getattr(e, "retry_after", None)
        # without a Retry-After: 0.5, 1, 2, 4 s ... with jitter
        wait = hint if hint is not None else min(8.0, 0.5 * 2**attempt) * (0.5 + random.random() / 2)
        return min(wait, self.max_retry_wait)


def _api_error(status: int, parsed: Any, headers: Any) -> bool:
    """Whether a reply of the ports route is the daemon's own error rather
    than the guest's: the daemon marks every proxied reply with its
    ``Content-Security-Policy: sandbox ...`` (docs/api.md "Ports"), which a
    guest can add to but not take away."""
    csp = headers.get_all("Content-Security-Policy") or []
    if status < 400 or any(v.startswith("sandbox") for v in csp) or not isinstance(parsed, dict):
        return False
    err = parsed.get("error")
    return isinstance(err, dict) and err.get("type") in ERROR_TYPES


def _body_start(body: Any) -> Tuple[Optional[int], bool]:
    """(position to rewind to before each attempt, whether it can be resent)."""
    if body is None or isinstance(body, (bytes, bytearray, memoryview, str)):
        return None, True
    try:
        if body.seekable():
            return body.tell(), True
    except (AttributeError, OSError, ValueError):
        pass
    return None, False


def _body_length(body: Any) -> Optional[int]:
    if isinstance(body, (bytes, bytearray)):
        return len(body)
    if isinstance(body, memoryview):
        return body.nbytes
    try:
        if body.seekable():
            here = body.tell()
            end = body.seek(0, io.SEEK_END)
            body.seek(here)
            return end - here
    except (AttributeError, OSError, ValueError):
        pass
    return None  # sent chunked


