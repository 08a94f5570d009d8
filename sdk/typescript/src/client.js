// The account-level surface: sandboxes, one-shot code runs with their
// receipts, usage, limits, API keys, receipts.

import { HttpClient } from './http.js';
import { Sandbox } from './sandbox.js';

async function newIdempotencyKey() {
  if (globalThis.crypto?.randomUUID) return globalThis.crypto.randomUUID();
  const { randomUUID } = await import('node:crypto');
  return randomUUID();
}

function execution(r) {
  return {
    id: r.id, status: r.status, exitCode: r.exit_code, stdout: r.stdout, stderr: r.stderr,
    stdoutTruncated: r.stdout_truncated, stderrTruncated: r.stderr_truncated, durationMs: r.duration_ms,
    receipt: r.receipt ?? null, billing: r.billing ?? null, startupPath: r.startup_path, prestarted: r.prestarted, raw: r,
  };
}

export class Sandboxd {
  /** @param {object} [o] url, apiKey, maxRetries, maxRetryWaitMs, fetch, headers */
  constructor(o = {}) {
    this.http = new HttpClient(o);
    this.sandboxes = new Sandboxes(this);
    this.apiKeys = new ApiKeys(this);
    this.snapshots = new Snapshots(this);
    this.executions = new Executions(this);
  }

  /** Run code once in a fresh guest; the result carries its signed receipt. */
  async runCode(code, o = {}) {
    const body = { runtime: o.runtime ?? 'python', timeout_seconds: o.timeoutSeconds ?? 30, code };
    if (o.metadata !== undefined) body.metadata = o.metadata;
    return execution(await this.http.call('POST', '/v1/sandbox/executions', { json: body, signal: o.signal, retry: 'busy' }));
  }

  /** Usage and balance ({from, to, granularity, groupBy}: RFC 3339, 'day'|'hour', a metadata key). */
  usage(o = {}) {
    const groupBy = o.groupBy !== undefined ? `metadata.${o.groupBy}` : undefined;
    return this.http.call('GET', '/v1/usage', { query: { from: o.from, to: o.to, granularity: o.granularity, group_by: groupBy }, signal: o.signal });
  }

  /** The service's limits, sizes and prices (no key needed). */
  limits(o = {}) { return this.http.call('GET', '/v1/limits', { signal: o.signal }); }
  /** The image's runtime versions as measured at build time (no key needed). */
  async runtimes(o = {}) { return (await this.http.call('GET', '/v1/runtimes', { signal: o.signal })).versions ?? {}; }

  /** The full signed receipt `id`. */
  receipt(id, o = {}) { return this.http.call('GET', '/v1/receipts/{id}', { params: { id }, signal: o.signal }); }

  /** The node's Ed25519 signer key. */
  receiptPublicKey(o = {}) { return this.http.call('GET', '/v1/receipts/public-key', { signal: o.signal }); }

  /** The API in OpenAPI 3.1 (JSON). */
  openapi(o = {}) { return this.http.call('GET', '/v1/openapi.json', { signal: o.signal }); }
}

export class Sandboxes {
  constructor(client) { this.client = client; }

  /** Create a sandbox; {size, timeoutMinutes, metadata, network, snapshot, timeoutAction,
   * idempotencyKey, signal} (network: an egress policy, docs/network.md;
   * snapshot: a snapshot's id, its disk starts as the snapshot's, docs/api.md
   * Snapshots; timeoutAction: 'pause' pauses it at its expiry, 'expire' ends it). */
  async create(o = {}) {
    const body = {};
    if (o.size !== undefined) body.size = o.size;
    if (o.timeoutMinutes !== undefined) body.timeout_minutes = o.timeoutMinutes;
    if (o.metadata !== undefined) body.metadata = o.metadata;
    if (o.network !== undefined) body.network = o.network;
    if (o.snapshot !== undefined) body.snapshot = o.snapshot;
    if (o.timeoutAction !== undefined) body.timeout_action = o.timeoutAction;
    const key = o.idempotencyKey ?? await newIdempotencyKey();
    const info = await this.client.http.call('POST', '/v1/sandboxes', {
      json: body, signal: o.signal, retry: 'create', headers: { 'Idempotency-Key': key },
    });
    return new Sandbox(this.client, info);
  }

  async get(id, o = {}) {
    return new Sandbox(this.client, await this.client.http.call('GET', '/v1/sandboxes/{id}', { params: { id }, signal: o.signal }));
  }

  /** One page: {data: Sandbox[], hasMore}; {status, limit, startingAfter, metadata}
   * (metadata: only the sandboxes carrying every pair). */
  async list(o = {}) {
    const query = { status: o.status, limit: o.limit, starting_after: o.startingAfter };
    for (const [k, v] of Object.entries(o.metadata ?? {})) query[`metadata[${k}]`] = v;
    const r = await this.client.http.call('GET', '/v1/sandboxes', { query, signal: o.signal });
    return { data: r.data.map((s) => new Sandbox(this.client, s)), hasMore: r.has_more };
  }
}

export class Executions {
  constructor(client) { this.client = client; }

  /** The stored reply of execution `id`. */
  async get(id, o = {}) {
    return execution(await this.client.http.call('GET', '/v1/sandbox/executions/{id}', { params: { id }, signal: o.signal }));
  }

  /** The newest executions (no output): {data, hasMore}. */
  async list(o = {}) {
    const r = await this.client.http.call('GET', '/v1/sandbox/executions', { query: { limit: o.limit }, signal: o.signal });
    return { data: r.data, hasMore: r.has_more };
  }
}

/** The account's disk snapshots (docs/api.md, Snapshots); take one with
 * Sandbox.snapshot(). */
export class Snapshots {
  constructor(client) { this.client = client; }

  async list(o = {}) { return (await this.client.http.call('GET', '/v1/snapshots', { signal: o.signal })).data; }

  get(id, o = {}) { return this.client.http.call('GET', '/v1/snapshots/{id}', { params: { id }, signal: o.signal }); }

  /** Remove one; SnapshotInUseError while sandboxes made from it live. */
  delete(id, o = {}) { return this.client.http.call('DELETE', '/v1/snapshots/{id}', { params: { id }, signal: o.signal }); }
}

export class ApiKeys {
  constructor(client) { this.client = client; }

  /** A new key ({scopes}); its `secret` is shown only here. */
  create(o = {}) {
    const body = o.scopes !== undefined ? { scopes: o.scopes } : {};
    return this.client.http.call('POST', '/v1/api_keys', { json: body, signal: o.signal, retry: 'rate' });
  }

  async list(o = {}) { return (await this.client.http.call('GET', '/v1/api_keys', { signal: o.signal })).data; }

  revoke(keyId, o = {}) { return this.client.http.call('DELETE', '/v1/api_keys/{key_id}', { params: { key_id: keyId }, signal: o.signal }); }
}
