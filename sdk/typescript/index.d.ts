// Types of @sandboxd/sdk (hand-written; checked against test/usage.ts by
// `tsc --noEmit`, and the code against the API by the tests).

export interface ClientOptions {
  /** Base URL; default SANDBOXD_URL, else http://127.0.0.1:8080. */
  url?: string;
  /** API key; default SANDBOXD_KEY. */
  apiKey?: string;
  /** Retries of a retryable failure (429 rate_limited, 503, ...); default 3. */
  maxRetries?: number;
  /** Longest single wait between retries in ms (Retry-After is honoured up to it); default 30000. */
  maxRetryWaitMs?: number;
  fetch?: typeof fetch;
  headers?: Record<string, string>;
}

export interface CallOptions {
  signal?: AbortSignal;
}

export type SandboxStatus = 'creating' | 'running' | 'paused' | 'destroyed' | 'expired' | 'failed';

/** The API's sandbox object, as sent. */
export interface SandboxInfo {
  id: string;
  object: 'sandbox';
  status: SandboxStatus;
  size: string;
  created_at: string;
  expires_at: string | null;
  ended_at: string | null;
  cost_micro_usd: number;
  cost_usd: string;
  startup_path: 'warm' | 'cold' | null;
  startup_ms: number | null;
  /** Labels (docs/api.md, Metadata). */
  metadata: Record<string, string>;
  /** While paused: when the pause began (else null). */
  paused_at: string | null;
  /** While paused: what it keeps on its host, host-observed (else null). */
  paused_bytes: number | null;
  /** The pauses already resumed, added up. */
  paused_seconds: number;
  /** Its egress policy (docs/api.md, Network). */
  network: NetworkPolicy;
  /** Bytes relayed toward the guest (0 until egress is wired). */
  net_bytes_in: number;
  /** Bytes relayed from the guest. */
  net_bytes_out: number;
  /** The snapshot its disk started from (docs/api.md, Snapshots); null for the image. */
  snapshot?: string | null;
  /** What its expiry does (create's timeoutAction). */
  timeout_action?: 'expire' | 'pause';
}

/** An egress policy (docs/network.md): rules are a domain, '*.domain', an
 * address or a CIDR, each with an optional ':port' or ':lo-hi'. */
export interface NetworkPolicy {
  egress: 'none' | 'allow_list' | 'open';
  allow?: string[];
  deny?: string[];
}

export interface Receipt {
  id: string;
  hash: string;
  signature: string;
  signer: string;
  url: string;
  fingerprint_salt?: string;
}

export interface ExecOptions extends CallOptions {
  timeoutMs?: number;
  cwd?: string;
  env?: Record<string, string>;
  encoding?: 'utf-8' | 'base64';
}

export interface ExecResult {
  stdout: string;
  stderr: string;
  exitCode: number;
  durationMs: number;
  truncated: boolean;
  timedOut: boolean;
  receipt: Receipt | null;
  raw: Record<string, unknown>;
}

export type OutputEvent = { type: 'stdout' | 'stderr'; data: string };
export type ExecExitEvent = { type: 'exit'; exitCode: number; durationMs: number; truncated: boolean; timedOut: boolean };
export type ExecEvent = OutputEvent | ExecExitEvent;
export type ProcessEvent = OutputEvent | { type: 'exit'; exitCode: number | null };

/** GET /v1/sandboxes/{id}/metrics (docs/api.md, Metrics). */
export interface MetricsSample {
  at: string;
  /** Host-observed: CPU time of the guest's threads over wall time. */
  cpu_cores: number | null;
  /** The guest's own word (null: it did not report). */
  memory_used_mib: number | null;
  memory_guest_reported: boolean;
  /** Host-observed: what the root disk's overlay takes. */
  disk_used_mib: number | null;
}
export interface SandboxMetrics {
  object: 'sandbox_metrics';
  sandbox_id: string;
  /** 0: the operator turned sampling off (no samples). */
  interval_ms: number;
  history: number;
  samples: MetricsSample[];
}

export interface CreateOptions extends ClientOptions, CallOptions {
  size?: string;
  timeoutMinutes?: number;
  metadata?: Record<string, string>;
  /** Its egress policy; default: the service's (docs/network.md). */
  network?: NetworkPolicy;
  /** A snapshot's id: its disk starts as the snapshot's (docs/api.md, Snapshots). */
  snapshot?: string;
  /** What its expiry does: 'expire' (default) ends it, 'pause' pauses it. */
  timeoutAction?: 'expire' | 'pause';
  /** Default: a new random key per call (shared by its retries). */
  idempotencyKey?: string;
  /** Use this client instead of one made from the other options. */
  client?: Sandboxd;
}

/** A terminal over a WebSocket (Sandbox.terminal). */
export interface Terminal {
  /** The shell's exit code once it exited, else null. */
  exitCode: number | null;
  /** Why the terminal failed, else null. */
  error: { type: string; message: string } | null;
  closeCode: number | null;
  closeReason: string;
  /** Type: a string goes as UTF-8. */
  send(data: string | Uint8Array): void;
  resize(rows: number, cols: number): void;
  /** The next screen bytes, or null once the terminal ended. */
  recv(): Promise<Uint8Array | null>;
  /** Screen text until `needle` appears. */
  readUntil(needle: string, timeoutMs?: number): Promise<string>;
  /** Close it: the shell is hung up. */
  close(): void;
}

export declare class Sandbox {
  constructor(client: Sandboxd, info: SandboxInfo);
  readonly client: Sandboxd;
  readonly id: string;
  info: SandboxInfo;
  readonly files: Files;
  readonly processes: Processes;
  readonly status: SandboxStatus;
  static create(options?: CreateOptions): Promise<Sandbox>;
  static connect(id: string, options?: ClientOptions & CallOptions & { client?: Sandboxd }): Promise<Sandbox>;
  exec(command: string, options?: ExecOptions & { receipt?: boolean }): Promise<ExecResult>;
  execStream(command: string, options?: ExecOptions): AsyncGenerator<ExecEvent, void, undefined>;
  refresh(options?: CallOptions): Promise<this>;
  update(metadata: Record<string, string | null> | null, options?: CallOptions): Promise<this>;
  /** POST /v1/sandboxes/{id}/network: replace its egress policy. */
  setNetwork(policy: NetworkPolicy, options?: CallOptions): Promise<this>;
  metrics(options?: CallOptions): Promise<SandboxMetrics>;
  /** GET /v1/sandboxes/{id}/terminal (docs/api.md, Terminal); Node only. */
  terminal(options?: { rows?: number; cols?: number }): Promise<Terminal>;
  /** One HTTP request to the server on the sandbox's 127.0.0.1:port
   * (/v1/sandboxes/{id}/ports/{port}/{path}, docs/api.md, Ports). Resolves
   * with the server's answer whatever its status (a fetch Response);
   * rejects with the daemon's own errors (PortUnreachableError when nothing
   * listens, PortTimeoutError, NotFoundError...). */
  portFetch(
    port: number,
    path?: string,
    options?: {
      method?: 'GET' | 'PUT' | 'POST' | 'DELETE';
      body?: string | Uint8Array | ArrayBuffer | Blob;
      headers?: Record<string, string>;
      query?: Record<string, string | number>;
      signal?: AbortSignal;
    },
  ): Promise<Response>;
  /** The URL of path on the sandbox's port through the API (it needs the
   * API key in an Authorization header, like every route). */
  portUrl(port: number, path?: string): string;
  /** POST /v1/sandboxes/{id}/ports/{port}/previews (docs/api.md, Previews):
   * a URL a browser opens without a key; `url` is shown only here. */
  createPreview(port: number, options?: CallOptions & { expiresInSeconds?: number }): Promise<Preview>;
  /** The port's live previews, newest first (no `url`). */
  listPreviews(port: number, options?: CallOptions): Promise<Preview[]>;
  /** DELETE /v1/sandboxes/{id}/previews/{preview_id}. */
  revokePreview(previewId: string, options?: CallOptions): Promise<Preview>;
  /** POST /v1/sandboxes/{id}/snapshots (docs/api.md, Snapshots). */
  snapshot(options?: CallOptions & { name?: string }): Promise<Snapshot>;
  extend(timeoutMinutes: number, options?: CallOptions): Promise<this>;
  pause(options?: CallOptions): Promise<this>;
  resume(options?: CallOptions & { timeoutMinutes?: number }): Promise<this>;
  delete(options?: CallOptions): Promise<SandboxInfo>;
}

export interface FileWritten {
  object: 'file' | 'tree';
  path: string;
  size: number;
  mode?: string;
  sha256: string;
}

export interface FileEntry {
  name: string;
  type: 'file' | 'dir' | 'symlink' | 'other';
  size: number;
  mode: string;
  mtime: string;
}

export type FileData = string | Uint8Array | ArrayBuffer | Blob | ReadableStream<Uint8Array>;

export declare class Files {
  write(path: string, data: FileData, options?: CallOptions & { mode?: string }): Promise<FileWritten>;
  read(path: string, options?: CallOptions & { start?: number; end?: number }): Promise<Uint8Array>;
  readText(path: string, options?: CallOptions & { start?: number; end?: number }): Promise<string>;
  list(path: string, options?: CallOptions): Promise<FileEntry[] & { hasMore: boolean }>;
  remove(path: string, options?: CallOptions & { recursive?: boolean }): Promise<{ object: 'file'; path: string; deleted: true }>;
  uploadTar(path: string, tar: FileData, options?: CallOptions & { gzip?: boolean }): Promise<FileWritten>;
  downloadTar(path: string, options?: CallOptions & { gzip?: boolean }): Promise<Uint8Array>;
  /** Node only (the system's tar). */
  uploadDir(localDir: string, path: string, options?: CallOptions): Promise<FileWritten>;
  /** Node only (the system's tar). */
  downloadDir(path: string, localDir: string, options?: CallOptions): Promise<void>;
}

export interface ProcessInfo {
  pid: number;
  command: string;
  startedAt: string;
  status: 'running' | 'exited';
  exitCode: number | null;
  raw: Record<string, unknown>;
}

export interface ProcessOutput {
  status: 'running' | 'exited';
  exitCode: number | null;
  stdout: string;
  stdoutOffset: number;
  stdoutNextOffset: number;
  stdoutLostBytes: number;
  stdoutTotal: number;
  stderr: string;
  stderrOffset: number;
  stderrNextOffset: number;
  stderrLostBytes: number;
  stderrTotal: number;
  raw: Record<string, unknown>;
}

export declare class Processes {
  start(command: string, options?: ExecOptions): Promise<Process>;
  list(options?: CallOptions): Promise<Process[]>;
  get(pid: number): Process;
}

export declare class Process {
  readonly pid: number;
  info: ProcessInfo;
  /** Where stream() and wait() go on from. */
  stdoutOffset: number;
  stderrOffset: number;
  output(options?: CallOptions & { stdoutOffset?: number; stderrOffset?: number; encoding?: 'utf-8' | 'base64' }): Promise<ProcessOutput>;
  stream(options?: CallOptions & { pollMs?: number; encoding?: 'utf-8' | 'base64' }): AsyncGenerator<ProcessEvent, void, undefined>;
  wait(options?: CallOptions & { pollMs?: number }): Promise<{ exitCode: number | null; stdout: string; stderr: string }>;
  sendStdin(data: string, options?: CallOptions & { close?: boolean; encoding?: 'utf-8' | 'base64' }): Promise<{ pid: number; written: number; closed: boolean }>;
  closeStdin(options?: CallOptions): Promise<{ pid: number; written: number; closed: boolean }>;
  signal(signal?: 'TERM' | 'KILL' | 'INT', options?: CallOptions): Promise<{ sent: boolean; status: 'running' | 'exited'; exitCode: number | null; raw: Record<string, unknown> }>;
  kill(options?: CallOptions): Promise<{ sent: boolean; status: 'running' | 'exited'; exitCode: number | null; raw: Record<string, unknown> }>;
}

export interface Execution {
  id: string;
  status: 'completed' | 'timed_out';
  exitCode: number;
  stdout: string;
  stderr: string;
  stdoutTruncated: boolean;
  stderrTruncated: boolean;
  durationMs: number;
  receipt: Receipt | null;
  billing: { cost_micro_usd: number; cost_usd: string; billed_ms: number; fingerprint_salt: string } | null;
  startupPath: 'warm' | 'cold';
  prestarted: boolean;
  raw: Record<string, unknown>;
}

export interface Preview {
  id: string;
  object: 'preview';
  sandbox_id: string;
  port: number;
  url?: string;
  created_at: string;
  expires_at: string;
  revoked: boolean;
}

export interface Snapshot {
  id: string;
  object: 'snapshot';
  name: string;
  sandbox_id: string;
  disk_gib: number;
  bytes: number;
  created_at: string;
  cost_micro_usd: number;
}

export declare class Snapshots {
  list(options?: CallOptions): Promise<Snapshot[]>;
  get(id: string, options?: CallOptions): Promise<Snapshot>;
  delete(id: string, options?: CallOptions): Promise<Snapshot>;
}

export interface ApiKey {
  id: string;
  object: 'api_key';
  prefix: string;
  created_at: string;
  scopes: string[];
  revoked?: boolean;
  revoked_at?: string | null;
  secret?: string;
}

export declare class Sandboxes {
  create(options?: Omit<CreateOptions, keyof ClientOptions | 'client'>): Promise<Sandbox>;
  get(id: string, options?: CallOptions): Promise<Sandbox>;
  list(options?: CallOptions & { status?: 'running' | 'destroyed' | 'expired' | 'failed'; limit?: number; startingAfter?: string; metadata?: Record<string, string> }): Promise<{ data: Sandbox[]; hasMore: boolean }>;
}

export declare class Executions {
  get(id: string, options?: CallOptions): Promise<Execution>;
  list(options?: CallOptions & { limit?: number }): Promise<{ data: Record<string, unknown>[]; hasMore: boolean }>;
}

export declare class ApiKeys {
  create(options?: CallOptions & { scopes?: string[] }): Promise<ApiKey & { secret: string }>;
  list(options?: CallOptions): Promise<ApiKey[]>;
  revoke(keyId: string, options?: CallOptions): Promise<{ id: string; object: 'api_key'; revoked: true }>;
}

export declare class HttpClient {
  constructor(options?: ClientOptions);
  readonly url: string;
  apiKey: string | null;
  maxRetries: number;
  maxRetryWaitMs: number;
}

export declare class Sandboxd {
  constructor(options?: ClientOptions);
  readonly http: HttpClient;
  readonly sandboxes: Sandboxes;
  readonly apiKeys: ApiKeys;
  readonly snapshots: Snapshots;
  readonly executions: Executions;
  runCode(code: string, options?: CallOptions & { runtime?: 'python' | 'node'; timeoutSeconds?: number; metadata?: Record<string, string> }): Promise<Execution>;
  usage(options?: CallOptions & { from?: string; to?: string; granularity?: 'day' | 'hour'; groupBy?: string }): Promise<Record<string, any>>;
  limits(options?: CallOptions): Promise<Record<string, any>>;
  /** The image's runtime versions (python, node, npm, gcc, git); null where unknown. */
  runtimes(options?: CallOptions): Promise<Record<string, string | null>>;
  receipt(id: string, options?: CallOptions): Promise<Record<string, any>>;
  receiptPublicKey(options?: CallOptions): Promise<Record<string, any>>;
  openapi(options?: CallOptions): Promise<Record<string, any>>;
}

/** Every (method, path) the SDK calls, as the OpenAPI document spells it. */
export declare const ROUTES: ReadonlyArray<readonly [string, string]>;

export interface ErrorFields {
  status?: number | null;
  type?: string | null;
  param?: string | null;
  requestId?: string | null;
  retryAfter?: number | null;
  body?: unknown;
}

export declare class SandboxdError extends Error {
  constructor(message: string, fields?: ErrorFields);
  /** HTTP status (null for a network failure or an error event of a stream). */
  readonly status: number | null;
  /** The API's error type, e.g. "rate_limited". */
  readonly type: string | null;
  readonly param: string | null;
  /** X-Request-Id of the reply: quote it in a report. */
  readonly requestId: string | null;
  /** Seconds, from Retry-After (429, 503). */
  readonly retryAfter: number | null;
  readonly body: unknown;
}
export declare class ConnectionError extends SandboxdError {}
export declare class InvalidRequestError extends SandboxdError {}
export declare class AuthenticationError extends SandboxdError {}
export declare class InsufficientCreditError extends SandboxdError {}
export declare class PermissionDeniedError extends SandboxdError {}
export declare class NotFoundError extends SandboxdError {}
export declare class FileNotFoundError extends NotFoundError {}
export declare class MethodNotAllowedError extends SandboxdError {}
export declare class IdempotencyConflictError extends SandboxdError {}
export declare class SandboxPausedError extends SandboxdError {}
export declare class TerminalAttachedError extends SandboxdError {}
export declare class SnapshotInUseError extends SandboxdError {}
export declare class SandboxNotRunningError extends SandboxdError {}
export declare class PayloadTooLargeError extends SandboxdError {}
export declare class UnsupportedMediaTypeError extends SandboxdError {}
export declare class RangeNotSatisfiableError extends SandboxdError {}
export declare class IdempotencyMismatchError extends SandboxdError {}
export declare class RateLimitedError extends SandboxdError {}
export declare class ConcurrencyLimitError extends SandboxdError {}
export declare class APIError extends SandboxdError {}
export declare class SandboxError extends SandboxdError {}
export declare class ServiceUnavailableError extends SandboxdError {}
export declare class InsufficientStorageError extends SandboxdError {}
export declare class PortUnreachableError extends SandboxdError {}
export declare class PortTimeoutError extends SandboxdError {}
export declare const ERROR_CLASSES: Readonly<Record<string, typeof SandboxdError>>;
export declare function errorFrom(err: { type?: string; message?: string; param?: string } | null, fields?: ErrorFields): SandboxdError;
