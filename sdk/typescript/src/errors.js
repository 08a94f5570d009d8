// One error class per error `type` of the API (docs/api.md, util/util.h's
// table); SandboxdError is the base of all of them, ConnectionError the
// network's failures (no reply at all).

export class SandboxdError extends Error {
  constructor(message, { status = null, type = null, param = null, requestId = null, retryAfter = null, body = null } = {}) {
    super(message);
    this.name = new.target.name;
    this.status = status;
    this.type = type;
    this.param = param;
    this.requestId = requestId;
    this.retryAfter = retryAfter;
    this.body = body;
  }
}

export class ConnectionError extends SandboxdError {}
export class InvalidRequestError extends SandboxdError {}
export class AuthenticationError extends SandboxdError {}
export class InsufficientCreditError extends SandboxdError {}
export class PermissionDeniedError extends SandboxdError {}
export class NotFoundError extends SandboxdError {}
export class FileNotFoundError extends NotFoundError {}
export class MethodNotAllowedError extends SandboxdError {}
export class IdempotencyConflictError extends SandboxdError {}
export class SandboxPausedError extends SandboxdError {}
export class TerminalAttachedError extends SandboxdError {}
export class SnapshotInUseError extends SandboxdError {}
export class SandboxNotRunningError extends SandboxdError {}
export class PayloadTooLargeError extends SandboxdError {}
export class UnsupportedMediaTypeError extends SandboxdError {}
export class RangeNotSatisfiableError extends SandboxdError {}
export class IdempotencyMismatchError extends SandboxdError {}
export class RateLimitedError extends SandboxdError {}
export class ConcurrencyLimitError extends SandboxdError {}
export class APIError extends SandboxdError {}
export class SandboxError extends SandboxdError {}
export class ServiceUnavailableError extends SandboxdError {}
export class InsufficientStorageError extends SandboxdError {}
export class PortUnreachableError extends SandboxdError {}
export class PortTimeoutError extends SandboxdError {}

export const ERROR_CLASSES = Object.freeze({
  invalid_request: InvalidRequestError,
  authentication_error: AuthenticationError,
  insufficient_credit: InsufficientCreditError,
  permission_error: PermissionDeniedError,
  not_found: NotFoundError,
  file_not_found: FileNotFoundError,
  method_not_allowed: MethodNotAllowedError,
  idempotency_conflict: IdempotencyConflictError,
  sandbox_paused: SandboxPausedError,
  terminal_attached: TerminalAttachedError,
  snapshot_in_use: SnapshotInUseError,
  sandbox_not_running: SandboxNotRunningError,
  payload_too_large: PayloadTooLargeError,
  unsupported_media_type: UnsupportedMediaTypeError,
  range_not_satisfiable: RangeNotSatisfiableError,
  idempotency_mismatch: IdempotencyMismatchError,
  rate_limited: RateLimitedError,
  concurrency_limit: ConcurrencyLimitError,
  api_error: APIError,
  sandbox_error: SandboxError,
  service_unavailable: ServiceUnavailableError,
  insufficient_storage: InsufficientStorageError,
  port_unreachable: PortUnreachableError,
  port_timeout: PortTimeoutError,
});

// The class for a status when the body named no known type (a proxy's
// page, libmicrohttpd's own 414/431).
const BY_STATUS = { 400: InvalidRequestError, 401: AuthenticationError, 402: InsufficientCreditError,
  403: PermissionDeniedError, 404: NotFoundError, 405: MethodNotAllowedError, 409: IdempotencyConflictError,
  410: SandboxNotRunningError, 413: PayloadTooLargeError, 415: UnsupportedMediaTypeError,
  416: RangeNotSatisfiableError, 422: IdempotencyMismatchError, 429: RateLimitedError,
  502: PortUnreachableError, 503: ServiceUnavailableError, 504: PortTimeoutError, 507: InsufficientStorageError };

/** Build the error for an API error object `{type, message, param?}`. */
export function errorFrom(err, extra = {}) {
  const type = err && typeof err.type === 'string' ? err.type : null;
  const cls = (type && ERROR_CLASSES[type]) || BY_STATUS[extra.status] || (extra.status >= 500 ? APIError : SandboxdError);
  const message = err && typeof err.message === 'string' ? err.message : `HTTP ${extra.status ?? '?'}`;
  return new cls(message, { ...extra, type, param: err && typeof err.param === 'string' ? err.param : null });
}
