"""The account-level calls: sandboxes, usage, limits, one-shot runs and
their receipts, API keys."""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional

from ._http import NEVER, RATE, SAFE, OnRetry, Response, Transport
from .models import (ApiKey, Execution, Limits, Page, ReceiptKey, SandboxInfo, Snapshot, Usage,
                     from_json)
from .sandbox import Sandbox

DEFAULT_URL = "http://127.0.0.1:8080"


class Client:
    """A connection to one sandboxd.

    ``url`` and ``api_key`` default to ``$SANDBOXD_URL`` (else
    ``http://127.0.0.1:8080``) and ``$SANDBOXD_KEY``, as for the ``sbx``
    CLI. ``timeout``: seconds of socket inactivity per request (None, the
    default, waits as long as the daemon takes; each call's own deadlines,
    such as ``exec(timeout_ms=...)``, are the daemon's to enforce).
    ``max_retries``: attempts after the first for a retryable error (429
    ``rate_limited`` always; 503 and lost connections for idempotent calls;
    see docs/sdk-python.md), each after the reply's ``Retry-After`` (at most
    ``max_retry_wait`` seconds). ``on_retry(attempt, error, wait)`` is
    called before each retry.
    """

    def __init__(
        self,
        url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        timeout: Optional[float] = None,
        max_retries: int = 3,
        max_retry_wait: float = 30.0,
        on_retry: Optional[OnRetry] = None,
    ) -> None:
        self._t = Transport(
            url or os.environ.get("SANDBOXD_URL") or DEFAULT_URL,
            api_key if api_key is not None else os.environ.get("SANDBOXD_KEY"),
            timeout=timeout,
            max_retries=max_retries,
            max_retry_wait=max_retry_wait,
            on_retry=on_retry,
        )

    @property
    def url(self) -> str:
        return self._t.url

    def with_options(self, **options: Any) -> "Client":
        """A copy with some of the constructor's options changed."""
        t = self._t
        kw: Dict[str, Any] = dict(url=t.url, api_key=t.api_key, timeout=t.timeout, max_retries=t.max_retries,
                                  max_retry_wait=t.max_retry_wait, on_retry=t.on_retry)
        kw.update(options)
        return Client(**kw)

    def _request(self, method: str, template: str, **kw: Any) -> Response:
        return self._t.request(method, template, **kw)

    def _get(self, template: str, **kw: Any) -> Any:
        return self._request("GET", template, **kw).json()

    # ------------------------------------------------------------ sandboxes

    def create_sandbox(self, size: Optional[str] = None, timeout_minutes: Optional[int] = None, *,
                       idempotency_key: Optional[str] = None,
                       metadata: Optional[Dict[str, str]] = None,
                       network: Optional[Dict[str, Any]] = None,
                       snapshot: Optional[str] = None,
                       timeout_action: Optional[str] = None) -> Sandbox:
        """Same as ``Sandbox.create(..., client=self)``."""
        return Sandbox.create(size, timeout_minutes, client=self, idempotency_key=idempotency_key,
                              metadata=metadata, network=network, snapshot=snapshot,
                              timeout_action=timeout_action)

    def sandbox(self, sandbox_id: str) -> Sandbox:
        """A handle on an existing sandbox (``GET /v1/sandboxes/{id}``)."""
        return Sandbox(self, self._sandbox_info(sandbox_id))

    def _sandbox_info(self, sandbox_id: str) -> SandboxInfo:
        return from_json(SandboxInfo, self._get("/v1/sandboxes/{id}", path_params={"id": sandbox_id}))

    def list_sandboxes(self, *, status: Optional[str] = None, limit: Optional[int] = None,
                       starting_after: Optional[str] = None,
                       metadata: Optional[Dict[str, str]] = None) -> Page[SandboxInfo]:
        """The account's sandboxes, newest first; with ``metadata``, only
        those carrying every pair."""
        q: Dict[str, Any] = {"status": status, "limit": limit, "starting_after": starting_after}
        for k, v in (metadata or {}).items():
            q[f"metadata[{k}]"] = v
        r = self._get("/v1/sandboxes", query=q)
        return Page([from_json(SandboxInfo, s) for s in r["data"]], bool(r.get("has_more")))

    # -------------------------------------------------------- usage, limits

    def usage(self, *, from_: Optional[str] = None, to: Optional[str] = None,
              granularity: Optional[str] = None, group_by: Optional[str] = None) -> Usage:
        """Balance and consumption; ``from_``/``to`` RFC 3339, ``granularity``
        ``day`` or ``hour`` adds ``buckets``; ``group_by`` a metadata key
        adds ``by_metadata`` (the usage per value of that label)."""
        q = {"from": from_, "to": to, "granularity": granularity,
             "group_by": f"metadata.{group_by}" if group_by else None}
        return from_json(Usage, self._get("/v1/usage", query=q))

    def limits(self) -> Limits:
        """The published limits, sizes and prices (no key needed)."""
        return from_json(Limits, self._get("/v1/limits"))

    def runtimes(self) -> Dict[str, Optional[str]]:
        """The image's runtime versions (python, node, npm, gcc, git) as
        measured when it was built; ``None`` where unknown (no key needed)."""
        return dict(self._get("/v1/runtimes").get("versions") or {})

    def openapi(self) -> Dict[str, Any]:
        """The API's OpenAPI 3.1 description, as the daemon serves it."""
        return self._get("/v1/openapi.json")

    # ----------------------------------------------- one-shot runs, receipts

    def run_code(self, code: str, *, runtime: str = "python", timeout_seconds: int = 30,
                 metadata: Optional[Dict[str, str]] = None) -> Execution:
        """Run a Python or Node.js snippet in a fresh guest; the reply carries
        a signed receipt (check it offline with :func:`verify_receipt`).
        Retried only after a 429 (nothing started): a 503 may come from a
        run that had started."""
        body: Dict[str, Any] = {"runtime": runtime, "timeout_seconds": timeout_seconds, "code": code}
        if metadata is not None:
            body["metadata"] = metadata
        return from_json(Execution, self._request("POST", "/v1/sandbox/executions", json_body=body,
                                                  retry=RATE).json())

    def list_executions(self, *, limit: Optional[int] = None) -> Page[Dict[str, Any]]:
        """The newest one-shot runs (summaries without output)."""
        r = self._get("/v1/sandbox/executions", query={"limit": limit})
        return Page(list(r["data"]), bool(r.get("has_more")))

    def get_execution(self, execution_id: str) -> Execution:
        """The stored reply of a run (the same bytes as its POST, when small)."""
        return from_json(Execution, self._get("/v1/sandbox/executions/{id}", path_params={"id": execution_id}))

    def receipt(self, receipt_id: str) -> Dict[str, Any]:
        """The full signed receipt (``id, hash, signature, signer, body``)."""
        return self._get("/v1/receipts/{id}", path_params={"id": receipt_id})

    def receipt_public_key(self) -> ReceiptKey:
        """The node's Ed25519 signer key: fetch it once and keep it (pin it)."""
        return from_json(ReceiptKey, self._get("/v1/receipts/public-key"))

    # ----------------------------------------------------------- snapshots

    def list_snapshots(self) -> List[Snapshot]:
        """The account's disk snapshots, newest first (docs/api.md
        "Snapshots"); take one with ``Sandbox.snapshot()``."""
        return [from_json(Snapshot, s) for s in self._get("/v1/snapshots")["data"]]

    def get_snapshot(self, snapshot_id: str) -> Snapshot:
        return from_json(Snapshot, self._get("/v1/snapshots/{id}", path_params={"id": snapshot_id}))

    def delete_snapshot(self, snapshot_id: str) -> Snapshot:
        """Remove one (its final cost in ``cost_micro_usd``); raises
        :class:`SnapshotInUse` while sandboxes made from it live."""
        return from_json(Snapshot, self._request("DELETE", "/v1/snapshots/{id}",
                                                 path_params={"id": snapshot_id},
                                                 retry=SAFE).json())

    # ---------------------------------------------------------------- keys

    def create_api_key(self, scopes: Optional[List[str]] = None) -> ApiKey:
        """A new key of this account (``secret`` shown only here); its scopes
        are at most this key's. Never retried (a retry could make two)."""
        body = {} if scopes is None else {"scopes": scopes}
        return from_json(ApiKey, self._request("POST", "/v1/api_keys", json_body=body, retry=NEVER).json())

    def list_api_keys(self) -> List[ApiKey]:
        return [from_json(ApiKey, k) for k in self._get("/v1/api_keys")["data"]]

    def revoke_api_key(self, key_id: str) -> Dict[str, Any]:
        return self._request("DELETE", "/v1/api_keys/{key_id}", path_params={"key_id": key_id},
                             retry=SAFE).json()
