"""Exceptions: one class per error ``type`` of the API (docs/api.md).

Every reply that is an error carries ``{"error": {"type", "message",
"param"?}}``; :func:`error_from_reply` turns it into the matching class.
A type this SDK does not know yet becomes a plain :class:`APIError`.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Type


class SandboxdError(Exception):
    """Base class of everything this package raises on purpose."""


class APIConnectionError(SandboxdError):
    """No answer: the connection failed, was reset or timed out."""


class ReceiptInvalid(SandboxdError):
    """An offline receipt check failed; the message says which check."""


class APIError(SandboxdError):
    """An error reply of the API.

    Attributes: ``status`` (HTTP status), ``type`` (the error type, e.g.
    ``"rate_limited"``), ``message``, ``param`` (the field to blame, or
    None), ``request_id`` (the ``X-Request-Id`` to quote in a report),
    ``retry_after`` (seconds from ``Retry-After``, or None) and ``body``
    (the parsed reply, or None when it was not JSON).
    """

    status: Optional[int] = None
    type: Optional[str] = None

    def __init__(
        self,
        message: str,
        *,
        status: Optional[int] = None,
        type: Optional[str] = None,
        param: Optional[str] = None,
        request_id: Optional[str] = None,
        retry_after: Optional[float] = None,
        body: Any = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status
        if type is not None:
            self.type = type
        self.param = param
        self.request_id = request_id
        self.retry_after = retry_after
        self.body = body

    def __str__(self) -> str:
        s = f"{self.status} {self.type}: {self.message}"
        if self.param:
            s += f" (param {self.param})"
        if self.request_id:
            s += f" [request {self.request_id}]"
        return s


class InvalidRequest(APIError):
    """400 ``invalid_request``: A bad field or parameter (``param`` names it)."""

    status, type = 400, "invalid_request"


class AuthenticationError(APIError):
    """401 ``authentication_error``: No valid API key."""

    status, type = 401, "authentication_error"


class InsufficientCredit(APIError):
    """402 ``insufficient_credit``: The account has not enough credit."""

    status, type = 402, "insufficient_credit"


class PermissionDenied(APIError):
    """403 ``permission_error``: The key lacks a scope the call needs."""

    status, type = 403, "permission_error"


class NotFound(APIError):
    """404 ``not_found``: No such object (or another account's)."""

    status, type = 404, "not_found"


class FileNotFound(NotFound):
    """404 ``file_not_found``: No such path in the guest."""

    status, type = 404, "file_not_found"


class MethodNotAllowed(APIError):
    """405 ``method_not_allowed``: The path does not take this method."""

    status, type = 405, "method_not_allowed"


class IdempotencyConflict(APIError):
    """409 ``idempotency_conflict``: A create with this Idempotency-Key is still running."""

    status, type = 409, "idempotency_conflict"


class SandboxPaused(APIError):
    """409 ``sandbox_paused``: The sandbox is paused (resume it first), or is being paused or resumed."""

    status, type = 409, "sandbox_paused"


class TerminalAttached(APIError):
    """409 ``terminal_attached``: a client is attached to that terminal
    (a reattach waits until the other connection is gone)."""

    status, type = 409, "terminal_attached"


class SnapshotInUse(APIError):
    """409 ``snapshot_in_use``: live sandboxes' disks start from that
    snapshot; delete them first."""

    status, type = 409, "snapshot_in_use"


class SandboxNotRunning(APIError):
    """410 ``sandbox_not_running``: The sandbox has ended."""

    status, type = 410, "sandbox_not_running"


class PayloadTooLarge(APIError):
    """413 ``payload_too_large``: The body (or the file) is over the limit."""

    status, type = 413, "payload_too_large"


class UnsupportedMediaType(APIError):
    """415 ``unsupported_media_type``: The body's Content-Type is not accepted."""

    status, type = 415, "unsupported_media_type"


class RangeNotSatisfiable(APIError):
    """416 ``range_not_satisfiable``: The byte range is outside the file."""

    status, type = 416, "range_not_satisfiable"


class IdempotencyMismatch(APIError):
    """422 ``idempotency_mismatch``: The Idempotency-Key was used with other parameters."""

    status, type = 422, "idempotency_mismatch"


class RateLimited(APIError):
    """429 ``rate_limited``: Too many requests in flight: retry after ``retry_after`` seconds."""

    status, type = 429, "rate_limited"


class ConcurrencyLimit(APIError):
    """429 ``concurrency_limit``: Too many live sandboxes: only ending one frees a slot."""

    status, type = 429, "concurrency_limit"


class APIServerError(APIError):
    """500 ``api_error``: The service failed to handle the request."""

    status, type = 500, "api_error"


class SandboxError(APIError):
    """500 ``sandbox_error``: The guest could not run it."""

    status, type = 500, "sandbox_error"


class ServiceUnavailable(APIError):
    """503 ``service_unavailable``: No capacity now: retry after ``retry_after`` seconds."""

    status, type = 503, "service_unavailable"


class InsufficientStorage(APIError):
    """507 ``insufficient_storage``: The guest's disk is full."""

    status, type = 507, "insufficient_storage"


class PortUnreachable(APIError):
    """502 ``port_unreachable``: nothing in the sandbox accepts connections
    on the port, or its server broke the connection."""

    status, type = 502, "port_unreachable"


class PortTimeout(APIError):
    """504 ``port_timeout``: the server in the sandbox did not answer in time."""

    status, type = 504, "port_timeout"


#: error type -> exception class
ERROR_TYPES: Dict[str, Type[APIError]] = {
    c.type: c
    for c in (
        InvalidRequest, AuthenticationError, InsufficientCredit, PermissionDenied, NotFound,
        FileNotFound, MethodNotAllowed, IdempotencyConflict, SandboxPaused, TerminalAttached, SnapshotInUse, SandboxNotRunning, PayloadTooLarge,
        UnsupportedMediaType, RangeNotSatisfiable, IdempotencyMismatch, RateLimited,
        ConcurrencyLimit, APIServerError, SandboxError, ServiceUnavailable, InsufficientStorage,
        PortUnreachable, PortTimeout,
    )
}


def error_from_reply(
    status: Optional[int],
    body: Any,
    *,
    request_id: Optional[str] = None,
    retry_after: Optional[float] = None,
) -> APIError:
    """The exception for an error reply (or a streamed ``error`` event)."""
    err = body.get("error") if isinstance(body, dict) else None
    if not isinstance(err, dict):
        return APIError(f"HTTP {status} without an API error body", status=status,
                        request_id=request_id, retry_after=retry_after, body=body)
    type_ = err.get("type")
    cls = ERROR_TYPES.get(type_, APIError) if isinstance(type_, str) else APIError
    return cls(
        str(err.get("message", "")),
        status=status if status is not None else cls.status,
        type=type_ if isinstance(type_, str) else None,
        param=err.get("param"),
        request_id=request_id,
        retry_after=retry_after,
        body=body,
    )
