// The HTTP core: one request through fetch, the API's errors as classes,
// bounded retries that honour Retry-After, AbortSignal everywhere, and the
// table of every (method, path) the SDK calls (ROUTES): a call to a route
// not in the table throws, so the table is what the code can reach.

import { ConnectionError, SandboxdError, errorFrom } from './errors.js';

/** Every route of the API the SDK calls, as docs/openapi.yaml spells it. */
export const ROUTES = Object.freeze([
  ['POST', '/v1/sandboxes'],
  ['GET', '/v1/sandboxes'],
  ['GET', '/v1/sandboxes/{id}'],
  ['POST', '/v1/sandboxes/{id}'],
  ['DELETE', '/v1/sandboxes/{id}'],
  ['POST', '/v1/sandboxes/{id}/exec'],
  ['POST', '/v1/sandboxes/{id}/extend'],
  ['POST', '/v1/sandboxes/{id}/network'],
  ['POST', '/v1/sandboxes/{id}/pause'],
  ['POST', '/v1/sandboxes/{id}/resume'],
  ['GET', '/v1/sandboxes/{id}/metrics'],
  ['GET', '/v1/sandboxes/{id}/terminal'],
  ['GET', '/v1/sandboxes/{id}/ports/{port}/{path}'],
  ['PUT', '/v1/sandboxes/{id}/ports/{port}/{path}'],
  ['POST', '/v1/sandboxes/{id}/ports/{port}/{path}'],
  ['DELETE', '/v1/sandboxes/{id}/ports/{port}/{path}'],
  ['HEAD', '/v1/sandboxes/{id}/ports/{port}/{path}'],
  ['PATCH', '/v1/sandboxes/{id}/ports/{port}/{path}'],
  ['OPTIONS', '/v1/sandboxes/{id}/ports/{port}/{path}'],
  ['POST', '/v1/sandboxes/{id}/ports/{port}/previews'],
  ['GET', '/v1/sandboxes/{id}/ports/{port}/previews'],
  ['DELETE', '/v1/sandboxes/{id}/previews/{preview_id}'],
  ['POST', '/v1/sandboxes/{id}/snapshots'],
  ['GET', '/v1/snapshots'],
  ['GET', '/v1/snapshots/{id}'],
  ['DELETE', '/v1/snapshots/{id}'],
  ['PUT', '/v1/sandboxes/{id}/files'],
  ['GET', '/v1/sandboxes/{id}/files'],
  ['DELETE', '/v1/sandboxes/{id}/files'],
  ['POST', '/v1/sandboxes/{id}/processes'],
  ['GET', '/v1/sandboxes/{id}/processes'],
  ['GET', '/v1/sandboxes/{id}/processes/{pid}/output'],
  ['POST', '/v1/sandboxes/{id}/processes/{pid}/stdin'],
  ['POST', '/v1/sandboxes/{id}/processes/{pid}/signal'],
  ['GET', '/v1/usage'],
  ['GET', '/v1/limits'],
  ['GET', '/v1/runtimes'],
  ['POST', '/v1/api_keys'],
  ['GET', '/v1/api_keys'],
  ['DELETE', '/v1/api_keys/{key_id}'],
  ['POST', '/v1/sandbox/executions'],
  ['GET', '/v1/sandbox/executions'],
  ['GET', '/v1/sandbox/executions/{id}'],
  ['GET', '/v1/receipts/{id}'],
  ['GET', '/v1/receipts/public-key'],
  ['GET', '/v1/openapi.json'],
]);

const KNOWN = new Set(ROUTES.map(([m, p]) => `${m} ${p}`));

// What each retry mode retries besides a 429 rate_limited (which the API
// answers before it starts anything): '503', 'network' (no reply), or an
// error type.
const RETRY = {
  none: null,
  // exec, processes, stdin, signal: a 503 of exec may come after the command ran
  rate: new Set(),
  // runCode, extend: their 503s come before anything started
  busy: new Set(['503']),
  // GET, DELETE, file uploads: may run twice
  all: new Set(['503', 'network', 'idempotency_conflict']),
  // a create with its Idempotency-Key: never two, and a guest that did not
  // boot (500 sandbox_error) left nothing behind
  create: new Set(['503', 'network', 'idempotency_conflict', 'sandbox_error']),
};

const env = (name) => (typeof process !== 'undefined' && process.env ? process.env[name] : undefined);

/** Sleep `ms`, or reject with the signal's reason when it aborts first. */
export function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const t = setTimeout(() => { signal?.removeEventListener('abort', onAbort); resolve(); }, ms);
    function onAbort() { clearTimeout(t); reject(signal.reason); }
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

function retryAfterSeconds(res) {
  const v = res.headers.get('retry-after');
  if (v == null) return null;
  const n = Number(v);
  return Number.isFinite(n) && n >= 0 ? n : null;
}

function isAbort(e, signal) {
  return signal?.aborted || e?.name === 'AbortError' || e?.name === 'TimeoutError';
}

export class HttpClient {
  /**
   * @param {object} [o]
   * @param {string} [o.url] base URL (default SANDBOXD_URL, else http://127.0.0.1:8080)
   * @param {string} [o.apiKey] key (default SANDBOXD_KEY)
   * @param {number} [o.maxRetries] retries of a retryable failure (default 3)
   * @param {number} [o.maxRetryWaitMs] longest single wait (default 30000)
   * @param {typeof fetch} [o.fetch]
   */
  constructor(o = {}) {
    this.url = String(o.url ?? env('SANDBOXD_URL') ?? 'http://127.0.0.1:8080').replace(/\/+$/, '');
    this.apiKey = o.apiKey ?? env('SANDBOXD_KEY') ?? null;
    this.maxRetries = o.maxRetries ?? 3;
    this.maxRetryWaitMs = o.maxRetryWaitMs ?? 30000;
    this.fetch = o.fetch ?? globalThis.fetch.bind(globalThis);
    this.headers = { ...(o.headers ?? {}) };
  }

  /** The URL of route `path` with `params` filled in and `query` added. */
  urlFor(path, params = {}, query = {}) {
    const p = path.replace(/\{(\w+)\}/g, (_, k) => {
      if (params[k] === undefined || params[k] === null) throw new TypeError(`missing path parameter ${k}`);
      // {path} (the ports route) keeps its slashes
      return k === 'path' ? String(params[k]).split('/').map(encodeURIComponent).join('/') : encodeURIComponent(String(params[k]));
    });
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(query)) if (v !== undefined && v !== null) q.append(k, String(v));
    const qs = q.toString();
    return this.url + p + (qs ? `?${qs}` : '');
  }

  /**
   * One API call. Returns the parsed JSON (or the Response with raw: true,
   * whose body the caller reads). Options: params, query, json, body,
   * headers, signal, raw, retry (a key of RETRY; default 'all' for GET
   * and DELETE, else 'rate'), upgrade (a WebSocket: the Terminal).
   */
  async call(method, path, o = {}) {
    if (!KNOWN.has(`${method} ${path}`)) throw new TypeError(`route not in ROUTES: ${method} ${path}`);
    const url = this.urlFor(path, o.params, o.query);
    if (o.upgrade) { // a WebSocket route (Node only): a Terminal
      const { openTerminal } = await import('./terminal.js');
      return openTerminal(url, this.apiKey);
    }
    const headers = { ...this.headers, ...(o.headers ?? {}) };
    if (this.apiKey) headers.Authorization = `Bearer ${this.apiKey}`;
    let body = o.body;
    if (o.json !== undefined) {
      body = JSON.stringify(o.json);
      headers['Content-Type'] = 'application/json';
    }
    const streamBody = body != null && typeof body === 'object' && typeof body.getReader === 'function';
    const retry = streamBody ? 'none' : (o.retry ?? (method === 'GET' || method === 'DELETE' ? 'all' : 'rate'));
    for (let attempt = 0; ; attempt++) {
      let res;
      try {
        const init = { method, headers, body, signal: o.signal };
        if (streamBody) init.duplex = 'half';
        res = await this.fetch(url, init);
      } catch (e) {
        if (isAbort(e, o.signal)) throw e;
        if (RETRY[retry]?.has('network') && attempt < this.maxRetries) {
          await sleep(this.backoff(attempt, null), o.signal);
          continue;
        }
        throw new ConnectionError(`cannot reach ${this.url}: ${e?.cause?.code ?? e?.message ?? e}`, { body: String(e) });
      }
      if (res.ok) return o.raw ? res : res.status === 204 ? null : res.json();
      // the ports route: the guest's answers carry the daemon's CSP mark
      if (o.passthrough && /(^|,)\s*sandbox\b/.test(res.headers.get('content-security-policy') ?? '')) return res;
      const err = await this.errorOf(res);
      const modes = RETRY[retry];
      const retryable = modes && ((err.status === 429 && err.type === 'rate_limited') ||
        (err.status === 503 && modes.has('503')) || modes.has(err.type));
      if (!retryable || attempt >= this.maxRetries) throw err;
      await sleep(this.backoff(attempt, err.retryAfter), o.signal);
    }
  }

  backoff(attempt, retryAfter) {
    const ms = retryAfter != null ? retryAfter * 1000 : Math.min(8000, 500 * 2 ** attempt);
    return Math.min(ms, this.maxRetryWaitMs);
  }

  /** The error a non-2xx response stands for (its body read). */
  async errorOf(res) {
    const text = await res.text().catch(() => '');
    let parsed = null;
    try { parsed = JSON.parse(text); } catch { /* not JSON: a proxy's page */ }
    const extra = { status: res.status, requestId: res.headers.get('x-request-id'), retryAfter: retryAfterSeconds(res), body: parsed ?? text };
    if (parsed && parsed.error) return errorFrom(parsed.error, extra);
    return errorFrom({ message: `HTTP ${res.status}: ${text.slice(0, 200)}` }, extra);
  }
}

/** The lines of an NDJSON body, each parsed. */
export async function* ndjson(res, signal) {
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  let buf = '';
  try {
    for (;;) {
      if (signal?.aborted) throw signal.reason;
      const { done, value } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let nl;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, nl).trim();
        buf = buf.slice(nl + 1);
        if (line) yield JSON.parse(line);
      }
    }
    buf += dec.decode();
    if (buf.trim()) yield JSON.parse(buf);
  } finally {
    reader.cancel().catch(() => {});
  }
}

export { SandboxdError };
