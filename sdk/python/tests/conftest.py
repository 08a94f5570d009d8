"""Fixtures. The live tests run against the daemon named by SANDBOXD_URL
and SANDBOXD_KEY (tests/integration/test_sdk_python.c starts one); without
them they are skipped, and with SBX_SDK_STRICT=1 a skip is a failure.
SBX_SDK_POOR_KEY: a key of an account without credit (the 402 test).
SBX_SDK_EXPECT_DIR: the package must be imported from there (the wheel
installed by the integration test), not from the source tree."""

import http.server
import json
import os
import threading

import pytest

import sandboxd

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def need(cond, reason):
    if not cond:
        (pytest.fail if os.environ.get("SBX_SDK_STRICT") else pytest.skip)(reason)


def pytest_report_header(config):
    return f"sandboxd {sandboxd.__version__} from {os.path.dirname(sandboxd.__file__)}"


@pytest.fixture(scope="session", autouse=True)
def imported_from_expected_dir():
    want = os.environ.get("SBX_SDK_EXPECT_DIR")
    if want:
        assert os.path.realpath(sandboxd.__file__).startswith(os.path.realpath(want) + os.sep)


@pytest.fixture(scope="session")
def client():
    need(os.environ.get("SANDBOXD_URL") and os.environ.get("SANDBOXD_KEY"), "no daemon (SANDBOXD_URL, SANDBOXD_KEY)")
    return sandboxd.Client()


class Fake:
    """A scripted HTTP server: ``replies`` is a list of (status, headers,
    body) served in order (the last one repeats); ``seen`` records each
    request as (method, path, headers, body)."""

    def __init__(self):
        self.replies, self.seen = [], []
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _any(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                fake.seen.append((self.command, self.path, dict(self.headers), body))
                reply = fake.replies[min(len(fake.seen), len(fake.replies)) - 1]
                status, headers, data = reply(self) if callable(reply) else reply
                if not isinstance(data, bytes):
                    data = json.dumps(data).encode()
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":  # a head only: the length is the GET's
                    self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = do_PATCH = do_OPTIONS = _any

            def log_message(self, *a):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def client(self, **kw):
        return sandboxd.Client(self.url, "aas_sk_test", **kw)


@pytest.fixture
def fake():
    f = Fake()
    yield f
    f.server.shutdown()
    f.server.server_close()
