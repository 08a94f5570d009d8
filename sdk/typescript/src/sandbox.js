// A sandbox and what runs in it: exec (buffered and streamed), files,
// background processes. The wire names (snake_case) become camelCase here.

import { Sandboxd } from './client.js';
import { SandboxdError, errorFrom } from './errors.js';
import { ndjson, sleep } from './http.js';

const enc = new TextEncoder();

function execBody(command, o = {}) {
  if (typeof command !== 'string' || command === '') throw new TypeError('command must be a non-empty string');
  const b = { command };
  if (o.timeoutMs !== undefined) b.timeout_ms = o.timeoutMs;
  if (o.cwd !== undefined) b.cwd = o.cwd;
  if (o.env !== undefined) b.env = o.env;
  if (o.encoding !== undefined) b.encoding = o.encoding;
  return b;
}

/** The exec result, typed. */
export function execResult(r) {
  return {
    stdout: r.stdout, stderr: r.stderr, exitCode: r.exit_code, durationMs: r.duration_ms,
    truncated: r.truncated, timedOut: r.timed_out, receipt: r.receipt ?? null, raw: r,
  };
}

function exitEvent(ev) {
  return { type: 'exit', exitCode: ev.exit_code, durationMs: ev.duration_ms, truncated: ev.truncated, timedOut: ev.timed_out };
}

function processInfo(p) {
  return { pid: p.pid, command: p.command, startedAt: p.started_at, status: p.status, exitCode: p.exit_code, raw: p };
}

async function toBody(data) {
  if (typeof data === 'string') return enc.encode(data);
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  if (ArrayBuffer.isView(data)) return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  if (typeof Blob !== 'undefined' && data instanceof Blob) return data;
  if (data && typeof data.getReader === 'function') return data; // a ReadableStream: streamed, not retried
  throw new TypeError('data must be a string, Uint8Array, ArrayBuffer, Blob or ReadableStream');
}

export class Sandbox {
  /** @param {import('./client.js').Sandboxd} client @param {object} info the API's sandbox object */
  constructor(client, info) {
    this.client = client;
    this.id = info.id;
    this.info = info;
    this.files = new Files(this);
    this.processes = new Processes(this);
  }

  get status() { return this.info.status; }

  /** Create a sandbox (with an Idempotency-Key, so a retried create never makes two). */
  static async create(o = {}) {
    const client = o.client ?? new Sandboxd(o);
    return client.sandboxes.create(o);
  }

  /** A handle on an existing sandbox. */
  static async connect(id, o = {}) {
    const client = o.client ?? new Sandboxd(o);
    return client.sandboxes.get(id, o);
  }

  _call(method, path, o = {}) {
    return this.client.http.call(method, path, { ...o, params: { id: this.id, ...(o.params ?? {}) } });
  }

  /** Run a command and wait for it. */
  async exec(command, o = {}) {
    const body = execBody(command, o);
    if (o.receipt !== undefined) body.receipt = o.receipt;
    return execResult(await this._call('POST', '/v1/sandboxes/{id}/exec', { json: body, signal: o.signal, retry: 'rate' }));
  }

  /**
   * Run a command and yield its output as it comes (NDJSON streamed exec):
   * {type:'stdout'|'stderr', data} events, then one {type:'exit', ...}. An
   * `error` event of the API is thrown as its error class.
   */
  async *execStream(command, o = {}) {
    const res = await this._call('POST', '/v1/sandboxes/{id}/exec', {
      json: execBody(command, o), signal: o.signal, retry: 'rate', raw: true,
      headers: { Accept: 'application/x-ndjson' },
    });
    for await (const ev of ndjson(res, o.signal)) {
      if (ev.type === 'stdout' || ev.type === 'stderr') yield { type: ev.type, data: ev.data };
      else if (ev.type === 'exit') { yield exitEvent(ev); return; }
      else if (ev.type === 'error') throw errorFrom(ev.error, { status: null, requestId: res.headers.get('x-request-id') });
    }
    throw new SandboxdError('the exec stream ended without an exit event', { type: 'api_error' });
  }

  /** Fetch the sandbox again (status, expiry, cost so far). */
  async refresh(o = {}) {
    this.info = await this._call('GET', '/v1/sandboxes/{id}', { signal: o.signal });
    return this;
  }

  /** Update its metadata: the keys given are set, a value '' or null removes
   * its key, `null` for the whole removes every key. */
  async update(metadata, o = {}) {
    this.info = await this._call('POST', '/v1/sandboxes/{id}', { json: { metadata }, signal: o.signal, retry: 'rate' });
    return this;
  }

  /** Replace its egress policy (docs/api.md, Network): {egress: 'none' |
   * 'allow_list' | 'open', allow: [...], deny: [...]}; new connections
   * obey it at once. */
  async setNetwork(policy, o = {}) {
    this.info = await this._call('POST', '/v1/sandboxes/{id}/network', { json: policy, signal: o.signal, retry: 'rate' });
    return this;
  }

  /** CPU, memory and disk samples over the last hour, oldest first
   * (docs/api.md, Metrics): { interval_ms, history, samples: [{ at,
   * cpu_cores, memory_used_mib, memory_guest_reported, disk_used_mib }] }. */
  async metrics(o = {}) {
    return this._call('GET', '/v1/sandboxes/{id}/metrics', { signal: o.signal });
  }

  /** One HTTP request to the server on the sandbox's 127.0.0.1:port
   * (docs/api.md, Ports): the server's answer as a fetch Response whatever
   * its status; the daemon's own errors reject (PortUnreachableError when
   * nothing listens, PortTimeoutError, NotFoundError...). Options: method
   * (GET, PUT, POST, DELETE, HEAD, PATCH, OPTIONS), body, headers, query,
   * signal. */
  async portFetch(port, path = '/', o = {}) {
    const opts = {
      params: { port: Number(port), path: String(path).replace(/^\/+/, '') },
      query: o.query ?? {}, body: o.body, headers: o.headers, signal: o.signal,
      raw: true, passthrough: true, retry: 'rate',
    };
    switch (String(o.method ?? 'GET').toUpperCase()) {
      case 'GET': return this._call('GET', '/v1/sandboxes/{id}/ports/{port}/{path}', opts);
      case 'PUT': return this._call('PUT', '/v1/sandboxes/{id}/ports/{port}/{path}', opts);
      case 'POST': return this._call('POST', '/v1/sandboxes/{id}/ports/{port}/{path}', opts);
      case 'DELETE': return this._call('DELETE', '/v1/sandboxes/{id}/ports/{port}/{path}', opts);
      case 'HEAD': return this._call('HEAD', '/v1/sandboxes/{id}/ports/{port}/{path}', opts);
      case 'PATCH': return this._call('PATCH', '/v1/sandboxes/{id}/ports/{port}/{path}', opts);
      case 'OPTIONS': return this._call('OPTIONS', '/v1/sandboxes/{id}/ports/{port}/{path}', opts);
      default: throw new TypeError(`portFetch: method must be GET, PUT, POST, DELETE, HEAD, PATCH or OPTIONS, not ${o.method}`);
    }
  }

  /** The URL of path on the sandbox's port through the API (it needs the
   * API key in an Authorization header, like every route). */
  portUrl(port, path = '/') {
    return this.client.http.urlFor('/v1/sandboxes/{id}/ports/{port}/{path}',
      { id: this.id, port: Number(port), path: String(path).replace(/^\/+/, '') });
  }

  /** A preview URL of the port for a browser (docs/api.md, Previews):
   * { id, sandbox_id, port, url, created_at, expires_at, revoked }; url
   * opens the server's pages without a key until it expires (expiresInSeconds,
   * default an hour) or is revoked, and is shown only here. */
  async createPreview(port, o = {}) {
    const json = o.expiresInSeconds == null ? {} : { expires_in_seconds: o.expiresInSeconds };
    return this._call('POST', '/v1/sandboxes/{id}/ports/{port}/previews',
      { params: { port: Number(port) }, json, signal: o.signal, retry: 'rate' });
  }

  /** The port's live previews, newest first (without their urls). */
  async listPreviews(port, o = {}) {
    return (await this._call('GET', '/v1/sandboxes/{id}/ports/{port}/previews',
      { params: { port: Number(port) }, signal: o.signal })).data;
  }

  /** Revoke a preview: its URL answers 404 from then on. */
  async revokePreview(previewId, o = {}) {
    return this._call('DELETE', '/v1/sandboxes/{id}/previews/{preview_id}',
      { params: { preview_id: previewId }, signal: o.signal });
  }

  /** Keep a copy of its disk (running or paused; it runs on): {name, signal}.
   * Never retried past a 429 rate_limited (a retry could make two). */
  async snapshot(o = {}) {
    const json = o.name == null ? {} : { name: o.name };
    return this._call('POST', '/v1/sandboxes/{id}/snapshots', { json, signal: o.signal, retry: 'rate' });
  }

  /** A terminal (docs/api.md, Terminal): the exec user's login shell on a
   * pseudo-terminal of rows x cols over a WebSocket (Node only: the key
   * goes in a header). send(data), resize(rows, cols), recv() (screen
   * bytes, null at the end: then exitCode), readUntil(text), close(). */
  async terminal(o = {}) {
    return this._call('GET', '/v1/sandboxes/{id}/terminal', { upgrade: true, query: { rows: o.rows ?? 24, cols: o.cols ?? 80 } });
  }

  /** Set the session's timeout (minutes from now, as the API's extend). */
  async extend(timeoutMinutes, o = {}) {
    this.info = await this._call('POST', '/v1/sandboxes/{id}/extend', { json: { timeout_minutes: timeoutMinutes }, signal: o.signal, retry: 'busy' });
    return this;
  }

  /** Pause it (docs/api.md, Pause and resume): its memory saved on its
   * host, runtime billing and the session clock stopped; calls into it
   * throw SandboxPausedError until resume(). A paused one is returned as it is. */
  async pause(o = {}) {
    this.info = await this._call('POST', '/v1/sandboxes/{id}/pause', { signal: o.signal, retry: 'rate' });
    return this;
  }

  /** Resume a paused sandbox: files, processes and clock as they were,
   * expires_at moved out by the pause; {timeoutMinutes}: run at least that
   * long from now (held as an extend; without it, a sandbox paused at its
   * expiry gets the default timeout). A running one is returned as it is. */
  async resume(o = {}) {
    const json = o.timeoutMinutes == null ? undefined : { timeout_minutes: o.timeoutMinutes };
    this.info = await this._call('POST', '/v1/sandboxes/{id}/resume', { json, signal: o.signal, retry: 'rate' });
    return this;
  }

  /** Destroy it; returns the final sandbox object (cost). */
  async delete(o = {}) {
    this.info = await this._call('DELETE', '/v1/sandboxes/{id}', { signal: o.signal });
    return this.info;
  }
}

export class Files {
  constructor(sandbox) { this.sandbox = sandbox; }

  /** Write one file (atomic in the guest); parents are created. */
  async write(path, data, o = {}) {
    const body = await toBody(data);
    return this.sandbox._call('PUT', '/v1/sandboxes/{id}/files', {
      query: { path, mode: o.mode }, body, signal: o.signal, retry: 'all',
      headers: { 'Content-Type': 'application/octet-stream' },
    });
  }

  /** The file's bytes (a range with {start, end}: end inclusive). */
  async read(path, o = {}) {
    const headers = {};
    if (o.start !== undefined || o.end !== undefined) headers.Range = `bytes=${o.start ?? 0}-${o.end ?? ''}`;
    const res = await this.sandbox._call('GET', '/v1/sandboxes/{id}/files', { query: { path }, headers, raw: true, signal: o.signal });
    return new Uint8Array(await res.arrayBuffer());
  }

  /** The file as text (UTF-8). */
  async readText(path, o = {}) {
    return new TextDecoder().decode(await this.read(path, o));
  }

  /** The entries of a directory: [{name, type, size, mode, mtime}] (at most 10000; see hasMore). */
  async list(path, o = {}) {
    const r = await this.sandbox._call('GET', '/v1/sandboxes/{id}/files', { query: { path, list: 'true' }, signal: o.signal });
    return Object.assign(r.data, { hasMore: r.has_more });
  }

  /** Delete a file, symlink or empty directory (a tree with {recursive: true}). */
  async remove(path, o = {}) {
    return this.sandbox._call('DELETE', '/v1/sandboxes/{id}/files', { query: { path, recursive: o.recursive ? 'true' : undefined }, signal: o.signal });
  }

  /** Extract a tar archive (bytes or a stream; {gzip: true} for .tar.gz) into directory `path`. */
  async uploadTar(path, tar, o = {}) {
    const body = await toBody(tar);
    return this.sandbox._call('PUT', '/v1/sandboxes/{id}/files', {
      query: { path, gzip: o.gzip ? 'true' : undefined }, body, signal: o.signal, retry: 'all',
      headers: { 'Content-Type': 'application/x-tar' },
    });
  }

  /** Directory `path` as a tar archive (gzip with {gzip: true}). */
  async downloadTar(path, o = {}) {
    const res = await this.sandbox._call('GET', '/v1/sandboxes/{id}/files', {
      query: { path, format: 'tar', gzip: o.gzip ? 'true' : undefined }, raw: true, signal: o.signal,
    });
    return new Uint8Array(await res.arrayBuffer());
  }

  /** Node only: upload local directory `localDir` into `path` (packed by the system's tar). */
  async uploadDir(localDir, path, o = {}) {
    const { tarCreate } = await import('./node-tar.js');
    return this.uploadTar(path, await tarCreate(localDir, o.signal), o);
  }

  /** Node only: download directory `path` into local directory `localDir` (created if missing). */
  async downloadDir(path, localDir, o = {}) {
    const { tarExtract } = await import('./node-tar.js');
    await tarExtract(await this.downloadTar(path, o), localDir, o.signal);
  }
}

export class Processes {
  constructor(sandbox) { this.sandbox = sandbox; }

  /** Start a background process; returns at once. */
  async start(command, o = {}) {
    const p = await this.sandbox._call('POST', '/v1/sandboxes/{id}/processes', { json: execBody(command, o), signal: o.signal, retry: 'rate' });
    return new Process(this.sandbox, p);
  }

  /** The processes the guest keeps (running and ended, up to 64). */
  async list(o = {}) {
    const r = await this.sandbox._call('GET', '/v1/sandboxes/{id}/processes', { signal: o.signal });
    return r.data.map((p) => new Process(this.sandbox, p));
  }

  /** A handle on process `pid`. */
  get(pid) { return new Process(this.sandbox, { pid, status: 'running', exit_code: null }); }
}

export class Process {
  constructor(sandbox, p) {
    this.sandbox = sandbox;
    this.pid = p.pid;
    this.info = processInfo(p);
    this.stdoutOffset = 0;
    this.stderrOffset = 0;
  }

  _call(method, path, o = {}) {
    return this.sandbox._call(method, path, { ...o, params: { pid: this.pid } });
  }

  /** Output since the given offsets (at most 30 KiB of each stream per call), typed. */
  async output(o = {}) {
    const r = await this._call('GET', '/v1/sandboxes/{id}/processes/{pid}/output', {
      query: { stdout_offset: o.stdoutOffset ?? 0, stderr_offset: o.stderrOffset ?? 0, encoding: o.encoding }, signal: o.signal,
    });
    this.info = { ...this.info, status: r.status, exitCode: r.exit_code };
    return {
      status: r.status, exitCode: r.exit_code,
      stdout: r.stdout, stdoutOffset: r.stdout_offset, stdoutNextOffset: r.stdout_next_offset, stdoutLostBytes: r.stdout_lost_bytes, stdoutTotal: r.stdout_total,
      stderr: r.stderr, stderrOffset: r.stderr_offset, stderrNextOffset: r.stderr_next_offset, stderrLostBytes: r.stderr_lost_bytes, stderrTotal: r.stderr_total,
      raw: r,
    };
  }

  /**
   * Follow the output from where the last read stopped (this.stdoutOffset,
   * this.stderrOffset) until the process exits: {type:'stdout'|'stderr',
   * data} events, then one {type:'exit', exitCode}. Polls every pollMs
   * (default 250) while nothing is new.
   */
  async *stream(o = {}) {
    const pollMs = o.pollMs ?? 250;
    for (;;) {
      const r = await this.output({ stdoutOffset: this.stdoutOffset, stderrOffset: this.stderrOffset, encoding: o.encoding, signal: o.signal });
      this.stdoutOffset = r.stdoutNextOffset;
      this.stderrOffset = r.stderrNextOffset;
      if (r.stdout) yield { type: 'stdout', data: r.stdout };
      if (r.stderr) yield { type: 'stderr', data: r.stderr };
      const drained = r.stdoutNextOffset >= r.stdoutTotal && r.stderrNextOffset >= r.stderrTotal;
      if (r.status === 'exited' && drained) { yield { type: 'exit', exitCode: r.exitCode }; return; }
      if (drained) await sleep(pollMs, o.signal);
    }
  }

  /** Wait for the process to exit; returns {exitCode, stdout, stderr} (the output not read before). */
  async wait(o = {}) {
    let stdout = '', stderr = '', exitCode = null;
    for await (const ev of this.stream(o)) {
      if (ev.type === 'stdout') stdout += ev.data;
      else if (ev.type === 'stderr') stderr += ev.data;
      else exitCode = ev.exitCode;
    }
    return { exitCode, stdout, stderr };
  }

  /** Write to its stdin ({close: true} closes it after the data); returns {written, closed}. */
  async sendStdin(data, o = {}) {
    const body = { data };
    if (o.encoding) body.encoding = o.encoding;
    if (o.close) body.close = true;
    return this._call('POST', '/v1/sandboxes/{id}/processes/{pid}/stdin', { json: body, signal: o.signal, retry: 'rate' });
  }

  /** Close its stdin. */
  async closeStdin(o = {}) {
    return this._call('POST', '/v1/sandboxes/{id}/processes/{pid}/stdin', { json: { close: true }, signal: o.signal, retry: 'rate' });
  }

  /** Send TERM, KILL or INT to its process group; returns {sent, status, exitCode}. */
  async signal(signal = 'TERM', o = {}) {
    const r = await this._call('POST', '/v1/sandboxes/{id}/processes/{pid}/signal', { json: { signal }, signal: o.signal, retry: 'rate' });
    return { sent: r.sent, status: r.status, exitCode: r.exit_code, raw: r };
  }

  /** Same as signal('KILL'). */
  kill(o = {}) { return this.signal('KILL', o); }
}
