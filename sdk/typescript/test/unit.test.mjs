// Without a daemon: the declarations compile against a usage file, every
// route of docs/openapi.yaml is one the SDK calls, the errors map to their
// classes, and the retries (429 waited out by Retry-After and bounded,
// a create's Idempotency-Key kept across them, exec not replayed on 503,
// AbortSignal) behave, against a scripted fetch.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { dirname, join } from 'node:path';

import {
  Sandboxd, Sandbox, ROUTES, RateLimitedError, InsufficientCreditError, NotFoundError, FileNotFoundError,
  ConcurrencyLimitError, ServiceUnavailableError, SandboxError, SandboxNotRunningError, ConnectionError, ERROR_CLASSES, SandboxdError,
  PortUnreachableError, SnapshotInUseError,
} from '../src/index.js';
import { TOOLS, McpServer, checkArgs } from '../src/mcp.js';

const here = dirname(fileURLToPath(import.meta.url));
const sdkDir = join(here, '..');
const repo = join(sdkDir, '..', '..');

test('index.d.ts and mcp.d.ts type-check against test/usage.ts (tsc --noEmit)', () => {
  const tsc = join(repo, 'node_modules', '.bin', 'tsc');
  execFileSync(tsc, ['-p', join(here, 'tsconfig.json')], { stdio: 'inherit' });
});

// ---- routes ---------------------------------------------------------------

// A path as a key: parameter names do not matter ({id} = {sandbox_id}),
// nor a trailing slash or the method's case.
const norm = (m, p) => `${m.toUpperCase()} ${p.replace(/\{[^}]+\}/g, '{}').replace(/\/+$/, '')}`;

/**
 * The (method, path) pairs of an OpenAPI YAML document, read from its text
 * rather than by a YAML parser: a path's methods are the keys indented
 * one level under it, every occurrence counted, so a document with a
 * method given twice under one path (which a parser would reject or
 * silently keep one of) still yields every operation it declares.
 */
export function specRoutes(yamlText) {
  const out = new Set();
  let inPaths = false, path = null;
  for (const line of yamlText.split('\n')) {
    if (/^\S/.test(line)) { inPaths = line.startsWith('paths:'); path = null; continue; }
    if (!inPaths) continue;
    let m;
    if ((m = /^ {2}(['"]?)(\/[^'":]*)\1:\s*$/.exec(line))) path = m[2];
    else if (path && (m = /^ {4}(get|put|post|delete|patch|head|options|trace):/.exec(line))) out.add(norm(m[1], path));
  }
  return out;
}

/** The routes of docs/api.md's endpoint table (the contract), /v1 only. */
function contractRoutes(md) {
  const out = new Set();
  for (const m of md.matchAll(/^\| (GET|POST|PUT|DELETE|PATCH|HEAD|OPTIONS) \| `(\/v1\/[^`?]*)(?:\?[^`]*)?` \|/gm)) out.add(norm(m[1], m[2]));
  return out;
}

test('specRoutes reads a document with a method repeated under a path', () => {
  const y = 'openapi: 3.1.0\npaths:\n  /v1/a/{id}:\n    parameters: []\n    get:\n      x: 1\n    get:\n      y: 2\n    delete:\n      z: 3\n  /v1/b:\n    post: {}\ncomponents:\n  x:\n    get: {}\n';
  assert.deepEqual([...specRoutes(y)].sort(), ['DELETE /v1/a/{}', 'GET /v1/a/{}', 'POST /v1/b']);
});

test('every route of docs/openapi.yaml is reachable from the SDK', (t) => {
  const spec = specRoutes(readFileSync(join(repo, 'docs', 'openapi.yaml'), 'utf8'));
  const contract = contractRoutes(readFileSync(join(repo, 'docs', 'api.md'), 'utf8'));
  const sdk = new Set(ROUTES.map(([m, p]) => norm(m, p)));
  assert.ok(spec.size >= 20, `only ${spec.size} routes read from the spec`);
  assert.ok(contract.size >= 20, `only ${contract.size} routes read from docs/api.md`);
  const missing = [];
  for (const r of spec) {
    if (sdk.has(r)) continue;
    // the spec is the truth, except where it names a route the contract
    // (docs/api.md) does not have: a defect of the spec, reported
    if (!contract.has(r)) t.diagnostic(`docs/openapi.yaml has ${r}, which docs/api.md does not list: not required of the SDK`);
    else missing.push(r);
  }
  assert.deepEqual(missing, [], 'routes of the spec the SDK cannot reach');
  // and the SDK calls nothing the contract does not have
  assert.deepEqual([...sdk].filter((r) => !contract.has(r)), [], 'SDK routes not in docs/api.md');
  for (const r of sdk) if (!spec.has(r)) t.diagnostic(`the SDK calls ${r}, which docs/openapi.yaml does not list`);
});

test('ROUTES is exactly the routes the code calls', () => {
  const used = new Set();
  for (const f of readdirSync(join(sdkDir, 'src'))) {
    const src = readFileSync(join(sdkDir, 'src', f), 'utf8');
    for (const m of src.matchAll(/call\('(GET|POST|PUT|DELETE|HEAD|PATCH|OPTIONS)', '([^']+)'/g)) used.add(norm(m[1], m[2]));
  }
  assert.deepEqual([...used].sort(), ROUTES.map(([m, p]) => norm(m, p)).sort());
});

// ---- a scripted fetch ---------------------------------------------------------

function scripted(replies) {
  const calls = [];
  const fetch = async (url, init) => {
    calls.push({ url, init, at: Date.now() });
    const r = replies.shift();
    if (!r) throw new Error('no more scripted replies');
    if (r instanceof Error) throw r;
    const headers = { 'Content-Type': 'application/json', 'X-Request-Id': 'req_test', ...(r.headers ?? {}) };
    return new Response(JSON.stringify(r.body ?? {}), { status: r.status, headers });
  };
  return { fetch, calls };
}

const err = (status, type, message, headers) => ({ status, body: { error: { type, message } }, headers });
const sandbox = { id: 'sbx_1', object: 'sandbox', status: 'running', size: 'small' };

test('every error type of the API has its class', () => {
  const spec = readFileSync(join(repo, 'docs', 'openapi.yaml'), 'utf8');
  const m = /enum: \[(invalid_request[^\]]*)\]/s.exec(spec);
  assert.ok(m, 'the Error schema enum');
  for (const type of m[1].split(',').map((s) => s.trim())) {
    assert.ok(ERROR_CLASSES[type], `no class for ${type}`);
    assert.ok(new ERROR_CLASSES[type]('x') instanceof SandboxdError);
  }
  assert.ok(new FileNotFoundError('x') instanceof NotFoundError);
});

test('portFetch: the guest\'s answer whatever its status, the daemon\'s errors thrown', async () => {
  const mark = { 'Content-Security-Policy': 'sandbox allow-scripts' };
  const { fetch, calls } = scripted([
    { status: 404, body: { error: { type: 'not_found', message: 'the app\'s own' } }, headers: mark },
    { status: 201, body: { ok: true }, headers: mark },
    err(502, 'port_unreachable', 'nobody listens'),
  ]);
  const c = new Sandboxd({ url: 'http://x', apiKey: 'k', fetch, maxRetryWaitMs: 10 });
  const sb = new Sandbox(c, sandbox);
  const r = await sb.portFetch(8000, '/a b/c.txt', { query: { q: 1 } });
  assert.equal(r.status, 404);
  assert.equal((await r.json()).error.message, 'the app\'s own');
  assert.equal(calls[0].url, 'http://x/v1/sandboxes/sbx_1/ports/8000/a%20b/c.txt?q=1');
  const p = await sb.portFetch(8000, 'echo', { method: 'post', body: 'hi', headers: { 'X-Test': '1' } });
  assert.equal(p.status, 201);
  assert.equal(calls[1].init.method, 'POST');
  assert.equal(calls[1].init.body, 'hi');
  assert.equal(calls[1].init.headers['X-Test'], '1');
  await assert.rejects(sb.portFetch(8009), PortUnreachableError);
  await assert.rejects(sb.portFetch(8000, '/', { method: 'TRACE' }), TypeError);
  assert.equal(sb.portUrl(3000, '/app/'), 'http://x/v1/sandboxes/sbx_1/ports/3000/app/');
});

test('previews: create (the url shown once), list, revoke; a 429 concurrency_limit is not retried', async () => {
  const pv = { object: 'preview', id: 'pv_1', sandbox_id: 'sbx_1', port: 3000, url: `http://3000-${'a'.repeat(32)}.preview.localhost:8080/`,
    created_at: 't', expires_at: 'u', revoked: false };
  const { url: _u, ...listed } = pv;
  const { fetch, calls } = scripted([
    { status: 201, body: pv },
    { status: 200, body: { object: 'list', data: [listed], has_more: false } },
    { status: 200, body: { ...listed, revoked: true } },
    err(429, 'concurrency_limit', 'too many previews'),
  ]);
  const c = new Sandboxd({ url: 'http://x', apiKey: 'k', fetch, maxRetryWaitMs: 10 });
  const sb = new Sandbox(c, sandbox);
  const p = await sb.createPreview(3000, { expiresInSeconds: 60 });
  assert.equal(p.url, pv.url);
  assert.equal(calls[0].init.method, 'POST');
  assert.equal(calls[0].url, 'http://x/v1/sandboxes/sbx_1/ports/3000/previews');
  assert.deepEqual(JSON.parse(calls[0].init.body), { expires_in_seconds: 60 });
  assert.deepEqual((await sb.listPreviews(3000)).map((x) => x.id), ['pv_1']);
  assert.equal(calls[1].url, 'http://x/v1/sandboxes/sbx_1/ports/3000/previews');
  assert.equal((await sb.revokePreview('pv_1')).revoked, true);
  assert.equal(calls[2].init.method, 'DELETE');
  assert.equal(calls[2].url, 'http://x/v1/sandboxes/sbx_1/previews/pv_1');
  await assert.rejects(sb.createPreview(3000), (e) => e.status === 429);
  assert.equal(calls.length, 4);
  assert.deepEqual(JSON.parse(calls[3].init.body), {});
});

test('snapshots: take, list, get, delete (409 snapshot_in_use), create from one', async () => {
  const snap = { object: 'snapshot', id: 'snap_1', name: 'base', sandbox_id: 'sbx_1', disk_gib: 2, bytes: 4096, created_at: 't', cost_micro_usd: 0 };
  const { fetch, calls } = scripted([
    { status: 201, body: snap },
    { status: 200, body: { object: 'list', data: [snap], has_more: false } },
    { status: 200, body: snap },
    err(409, 'snapshot_in_use', 'in use'),
    { status: 201, body: sandbox },
  ]);
  const c = new Sandboxd({ url: 'http://x', apiKey: 'k', fetch, maxRetryWaitMs: 10 });
  const sb = new Sandbox(c, sandbox);
  assert.equal((await sb.snapshot({ name: 'base' })).id, 'snap_1');
  assert.equal(calls[0].url, 'http://x/v1/sandboxes/sbx_1/snapshots');
  assert.deepEqual(JSON.parse(calls[0].init.body), { name: 'base' });
  assert.deepEqual((await c.snapshots.list()).map((x) => x.id), ['snap_1']);
  assert.equal((await c.snapshots.get('snap_1')).disk_gib, 2);
  assert.equal(calls[2].url, 'http://x/v1/snapshots/snap_1');
  await assert.rejects(c.snapshots.delete('snap_1'), (e) => e instanceof SnapshotInUseError && e.status === 409);
  assert.equal(calls[3].init.method, 'DELETE');
  await c.sandboxes.create({ snapshot: 'snap_1' });
  assert.deepEqual(JSON.parse(calls[4].init.body), { snapshot: 'snap_1' });
  assert.equal(calls.length, 5);
});

test('a 429 is waited out by its Retry-After, with the same Idempotency-Key', async () => {
  const { fetch, calls } = scripted([err(429, 'rate_limited', 'too many', { 'Retry-After': '1' }), { status: 201, body: sandbox }]);
  const s = await Sandbox.create({ url: 'http://x', apiKey: 'k', fetch });
  assert.equal(s.id, 'sbx_1');
  assert.equal(calls.length, 2);
  assert.ok(calls[1].at - calls[0].at >= 950, `waited ${calls[1].at - calls[0].at} ms`);
  const key = calls[0].init.headers['Idempotency-Key'];
  assert.ok(key && key.length >= 16);
  assert.equal(calls[1].init.headers['Idempotency-Key'], key);
  assert.equal(calls[0].init.headers.Authorization, 'Bearer k');
});

test('a create whose guest did not boot (500 sandbox_error) is retried with its key; an exec\'s is not', async () => {
  let s = scripted([err(500, 'sandbox_error', 'the guest did not get ready'), { status: 201, body: sandbox }]);
  const c = new Sandboxd({ url: 'http://x', fetch: s.fetch, maxRetryWaitMs: 10 });
  assert.equal((await c.sandboxes.create({ idempotencyKey: 'k1' })).id, 'sbx_1');
  assert.deepEqual(s.calls.map((x) => x.init.headers['Idempotency-Key']), ['k1', 'k1']);
  s = scripted([err(500, 'sandbox_error', 'the guest broke')]);
  await assert.rejects(new Sandbox(new Sandboxd({ url: 'http://x', fetch: s.fetch }), sandbox).exec('true'), SandboxError);
  assert.equal(s.calls.length, 1);
});

test('retries are bounded: the last 429 is raised as RateLimitedError with retryAfter', async () => {
  const replies = Array.from({ length: 3 }, () => err(429, 'rate_limited', 'slow down', { 'Retry-After': '0' }));
  const { fetch, calls } = scripted(replies);
  const c = new Sandboxd({ url: 'http://x', apiKey: 'k', fetch, maxRetries: 2 });
  await assert.rejects(c.limits(), (e) => e instanceof RateLimitedError && e.retryAfter === 0 && e.status === 429 && e.requestId === 'req_test');
  assert.equal(calls.length, 3);
});

test('a long Retry-After is capped by maxRetryWaitMs', async () => {
  const { fetch, calls } = scripted([err(503, 'service_unavailable', 'busy', { 'Retry-After': '3600' }), { status: 200, body: {} }]);
  const c = new Sandboxd({ url: 'http://x', fetch, maxRetryWaitMs: 50 });
  await c.limits();
  assert.equal(calls.length, 2);
  assert.ok(calls[1].at - calls[0].at < 2000);
});

test('not retried: concurrency_limit, 402, and a 503 of exec (the command may have run)', async () => {
  let s = scripted([err(429, 'concurrency_limit', 'too many sandboxes', { 'Retry-After': '0' })]);
  await assert.rejects(Sandbox.create({ url: 'http://x', fetch: s.fetch }), ConcurrencyLimitError);
  assert.equal(s.calls.length, 1);
  s = scripted([err(402, 'insufficient_credit', 'no credit')]);
  await assert.rejects(Sandbox.create({ url: 'http://x', fetch: s.fetch }), InsufficientCreditError);
  s = scripted([err(503, 'service_unavailable', 'host dropped', { 'Retry-After': '0' })]);
  const sbx = new Sandbox(new Sandboxd({ url: 'http://x', fetch: s.fetch }), sandbox);
  await assert.rejects(sbx.exec('true'), ServiceUnavailableError);
  assert.equal(s.calls.length, 1);
  s = scripted([err(410, 'sandbox_not_running', 'gone')]);
  await assert.rejects(new Sandbox(new Sandboxd({ url: 'http://x', fetch: s.fetch }), sandbox).exec('true'), SandboxNotRunningError);
});

test('a network failure of a GET is retried; of a POST exec it is a ConnectionError', async () => {
  let s = scripted([new TypeError('fetch failed'), { status: 200, body: { object: 'limits' } }]);
  const c = new Sandboxd({ url: 'http://x', fetch: s.fetch, maxRetryWaitMs: 10 });
  assert.equal((await c.limits()).object, 'limits');
  s = scripted([new TypeError('fetch failed')]);
  const sbx = new Sandbox(new Sandboxd({ url: 'http://x', fetch: s.fetch }), sandbox);
  await assert.rejects(sbx.exec('true'), ConnectionError);
});

test('an AbortSignal ends the wait for a retry', async () => {
  const { fetch } = scripted([err(429, 'rate_limited', 'x', { 'Retry-After': '30' })]);
  const c = new Sandboxd({ url: 'http://x', fetch });
  const t0 = Date.now();
  await assert.rejects(c.limits({ signal: AbortSignal.timeout(100) }), (e) => e.name === 'TimeoutError' || e.name === 'AbortError');
  assert.ok(Date.now() - t0 < 5000);
});

test('the request: path parameters encoded, query, JSON body in wire names', async () => {
  const { fetch, calls } = scripted([{ status: 200, body: { stdout: 'a', stderr: '', exit_code: 3, duration_ms: 5, truncated: false, timed_out: false } }]);
  const sbx = new Sandbox(new Sandboxd({ url: 'http://x/', fetch }), { ...sandbox, id: 'sbx_a/b' });
  const r = await sbx.exec('echo a', { timeoutMs: 5, env: { A: '1' }, cwd: '/tmp' });
  assert.equal(r.exitCode, 3);
  assert.equal(calls[0].url, 'http://x/v1/sandboxes/sbx_a%2Fb/exec');
  assert.deepEqual(JSON.parse(calls[0].init.body), { command: 'echo a', timeout_ms: 5, cwd: '/tmp', env: { A: '1' } });
  const s2 = scripted([{ status: 200, body: { object: 'list', data: [], has_more: false } }]);
  await new Sandbox(new Sandboxd({ url: 'http://x', fetch: s2.fetch }), sandbox).files.list('/a b');
  assert.equal(s2.calls[0].url, 'http://x/v1/sandboxes/sbx_1/files?path=%2Fa+b&list=true');
});

test('network: a policy on create and setNetwork, in the API\'s wire form', async () => {
  const pol = { egress: 'allow_list', allow: ['registry.npmjs.org:443'], deny: [] };
  const { fetch, calls } = scripted([
    { status: 201, body: { ...sandbox, network: { egress: 'none', allow: [], deny: [] } } },
    { status: 200, body: { ...sandbox, network: pol, net_bytes_in: 0, net_bytes_out: 0 } },
  ]);
  const client = new Sandboxd({ url: 'http://x', fetch });
  const sbx = await client.sandboxes.create({ network: { egress: 'none' } });
  assert.deepEqual(JSON.parse(calls[0].init.body), { network: { egress: 'none' } });
  await sbx.setNetwork(pol);
  assert.equal(calls[1].init.method, 'POST');
  assert.equal(calls[1].url, 'http://x/v1/sandboxes/sbx_1/network');
  assert.deepEqual(JSON.parse(calls[1].init.body), pol);
  assert.deepEqual(sbx.info.network, pol);
});

// ---- the MCP tools ------------------------------------------------------------

test('every MCP tool has a strict input schema', () => {
  const names = TOOLS.map((t) => t.name);
  for (const n of ['create_sandbox', 'run_command', 'run_code', 'write_file', 'read_file', 'list_files',
    'start_process', 'read_process_output', 'delete_sandbox']) assert.ok(names.includes(n), n);
  for (const t of TOOLS) {
    assert.equal(t.inputSchema.type, 'object');
    assert.equal(t.inputSchema.additionalProperties, false, t.name);
    for (const r of t.inputSchema.required) assert.ok(r in t.inputSchema.properties, `${t.name}.${r}`);
  }
  const create = TOOLS.find((t) => t.name === 'create_sandbox');
  assert.deepEqual(checkArgs(create, { network: { egress: 'allow_list', allow: ['pypi.org'] } }), []);
  assert.match(checkArgs(create, { network: 'open' }).join(), /network' must be of type object/);
  const run = TOOLS.find((t) => t.name === 'run_command');
  assert.deepEqual(checkArgs(run, { sandbox_id: 's', command: 'ls' }), []);
  assert.match(checkArgs(run, { sandbox_id: 's', command: 'ls', shell: 'bash' }).join(), /unknown argument 'shell'/);
  assert.match(checkArgs(run, { sandbox_id: 's' }).join(), /missing required argument 'command'/);
  assert.match(checkArgs(run, { sandbox_id: 's', command: 'ls', timeout_ms: 1.5 }).join(), /timeout_ms' must be of type integer/);
  assert.match(checkArgs(run, { sandbox_id: 's', command: 'ls', env: { A: 1 } }).join(), /env.A' must be a string/);
});

test('an MCP tool error is an isError result with the API\'s type and message', async () => {
  const { fetch } = scripted([err(404, 'not_found', 'no such sandbox')]);
  const sent = [];
  const srv = new McpServer({ client: new Sandboxd({ url: 'http://x', fetch }), send: (m) => sent.push(m) });
  await srv.handle({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'run_command', arguments: { sandbox_id: 'sbx_x', command: 'ls' } } });
  assert.equal(sent[0].id, 1);
  assert.equal(sent[0].result.isError, true);
  assert.match(sent[0].result.content[0].text, /^not_found \(HTTP 404\): no such sandbox/);
  await srv.handle({ jsonrpc: '2.0', id: 2, method: 'nope' });
  assert.equal(sent[1].error.code, -32601);
});

test('the SDK\'s module graph imports nothing of Node statically (it runs in browsers)', () => {
  const seen = new Set();
  const visit = (f) => {
    if (seen.has(f)) return;
    seen.add(f);
    const src = readFileSync(join(sdkDir, 'src', f), 'utf8');
    for (const m of src.matchAll(/^(?:import|export)\s[^;]*?from\s+'([^']+)'/gms)) {
      assert.ok(m[1].startsWith('./'), `${f} imports ${m[1]} statically`);
      visit(m[1].slice(2));
    }
    assert.doesNotMatch(src.replace(/\/\/.*$/gm, ''), /\bBuffer\.|\brequire\(/, f);
  };
  visit('index.js');
  assert.ok(seen.has('sandbox.js') && seen.has('http.js') && !seen.has('node-tar.js'), [...seen].join());
});

test('at the end of an MCP session its sandboxes are deleted, but those to keep', async () => {
  const created = [{ ...sandbox, id: 'sbx_a' }, { ...sandbox, id: 'sbx_b' }];
  const { fetch, calls } = scripted([{ status: 201, body: created[0] }, { status: 201, body: created[1] },
    { status: 200, body: { ...created[0], status: 'destroyed' } }]);
  const sent = [];
  const srv = new McpServer({ client: new Sandboxd({ url: 'http://x', fetch }), send: (m) => sent.push(m) });
  await srv.handle({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'create_sandbox', arguments: {} } });
  await srv.handle({ jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'create_sandbox', arguments: { keep: true } } });
  assert.match(sent[0].result.content[0].text, /sbx_a .*deleted when this session ends/);
  assert.match(sent[1].result.content[0].text, /sbx_b .*kept after this session/);
  await srv.close();
  assert.deepEqual(calls.slice(2).map((c) => `${c.init.method} ${c.url}`), ['DELETE http://x/v1/sandboxes/sbx_a']);
  // and with --keep, nothing
  const s2 = scripted([{ status: 201, body: created[0] }]);
  const kept = new McpServer({ client: new Sandboxd({ url: 'http://x', fetch: s2.fetch }), send: () => {}, keep: true });
  await kept.handle({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'create_sandbox', arguments: {} } });
  await kept.close();
  assert.equal(s2.calls.length, 1);
});

test('sandboxd-mcp deletes its sandbox on SIGTERM (against a stand-in API on loopback)', async () => {
  const { createServer } = await import('node:http');
  const { spawn } = await import('node:child_process');
  const hits = [];
  const api = createServer((req, res) => {
    hits.push(`${req.method} ${req.url} ${req.headers.authorization}`);
    req.resume();
    req.on('end', () => {
      res.writeHead(req.method === 'POST' ? 201 : 200, { 'Content-Type': 'application/json' });
      res.end(JSON.stringify({ ...sandbox, id: 'sbx_sig', status: req.method === 'DELETE' ? 'destroyed' : 'running' }));
    });
  });
  await new Promise((r) => api.listen(0, '127.0.0.1', r));
  try {
    const child = spawn(process.execPath, [join(sdkDir, 'bin', 'sandboxd-mcp.js')], {
      env: { PATH: process.env.PATH, SANDBOXD_URL: `http://127.0.0.1:${api.address().port}`, SANDBOXD_KEY: 'aas_sk_test' },
      stdio: ['pipe', 'pipe', 'inherit'],
    });
    let out = '';
    const replied = new Promise((resolve) => child.stdout.on('data', (c) => { out += c; if (out.includes('"id":2')) resolve(); }));
    child.stdin.write(`${JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 't', version: '1' } } })}\n`);
    child.stdin.write(`${JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'create_sandbox', arguments: {} } })}\n`);
    await replied;
    const exited = new Promise((resolve) => child.on('exit', (code, sig) => resolve({ code, sig })));
    child.kill('SIGTERM'); // stdin still open
    assert.deepEqual(await exited, { code: 0, sig: null });
    assert.deepEqual(hits, ['POST /v1/sandboxes Bearer aas_sk_test', 'DELETE /v1/sandboxes/sbx_sig Bearer aas_sk_test']);
    assert.match(out.split('\n')[0], /"protocolVersion":"2025-06-18"/);
  } finally {
    api.close();
  }
});

// ---- the terminal's WebSocket client against a small RFC 6455 server ----------

test('terminal: the upgrade with the key, masked frames out, screen bytes, resize, exit code', async () => {
  const { createServer: netServer } = await import('node:net');
  const { createHash } = await import('node:crypto');
  const seen = { frames: [] };
  const srv = netServer((sock) => {
    let buf = Buffer.alloc(0), upgraded = false;
    sock.on('data', (d) => {
      buf = Buffer.concat([buf, d]);
      if (!upgraded) {
        const end = buf.indexOf('\r\n\r\n');
        if (end < 0) return;
        const head = buf.subarray(0, end).toString();
        buf = buf.subarray(end + 4);
        seen.head = head;
        const key = /sec-websocket-key: (\S+)/i.exec(head)[1];
        const accept = createHash('sha1').update(`${key}258EAFA5-E914-47DA-95CA-C5AB0DC85B11`).digest('base64');
        sock.write(`HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ${accept}\r\n\r\n`);
        sock.write(Buffer.concat([Buffer.from([0x82, 3]), Buffer.from('$ \n')]));
        upgraded = true;
      }
      while (buf.length >= 6) {
        const n = buf[1] & 0x7f; // the client's frames here are short
        if (buf.length < 6 + n) return;
        const masked = (buf[1] & 0x80) !== 0, op = buf[0] & 0x0f, key = buf.subarray(2, 6);
        const p = Buffer.from(buf.subarray(6, 6 + n).map((b, i) => b ^ key[i & 3]));
        buf = buf.subarray(6 + n);
        seen.frames.push({ masked, op, text: p.toString() });
        if (op === 0x2) sock.write(Buffer.concat([Buffer.from([0x82, p.length]), p]));
        if (op === 0x1) {
          const msg = Buffer.from('{"type":"exit","exit_code":3}');
          sock.write(Buffer.concat([Buffer.from([0x81, msg.length]), msg, Buffer.from([0x88, 8, 0x03, 0xe8]), Buffer.from('exit 3')]));
        }
      }
    });
  });
  await new Promise((r) => srv.listen(0, '127.0.0.1', r));
  try {
    const client = new Sandboxd({ url: `http://127.0.0.1:${srv.address().port}`, apiKey: 'aas_sk_t' });
    const sb = new Sandbox(client, sandbox);
    const term = await sb.terminal({ rows: 33, cols: 101 });
    assert.match(seen.head, /^GET \/v1\/sandboxes\/sbx_1\/terminal\?rows=33&cols=101 HTTP\/1.1/);
    assert.match(seen.head, /authorization: Bearer aas_sk_t/i);
    assert.equal(await term.readUntil('$ '), '$ \n');
    term.send('echo hi\r');
    assert.equal(await term.readUntil('hi'), 'echo hi\r');
    term.resize(50, 132);
    assert.equal(await term.recv(), null);
    assert.equal(term.exitCode, 3);
    assert.equal(term.closeCode, 1000);
    assert.equal(term.closeReason, 'exit 3');
    assert.deepEqual(seen.frames.slice(0, 2), [
      { masked: true, op: 2, text: 'echo hi\r' },
      { masked: true, op: 1, text: '{"type":"resize","rows":50,"cols":132}' },
    ]);
  } finally {
    srv.close();
  }
});

test('terminal: an error reply before the upgrade throws its class', async () => {
  const { createServer } = await import('node:http');
  const api = createServer((req, res) => {
    res.writeHead(404, { 'Content-Type': 'application/json' });
    res.end(JSON.stringify({ error: { type: 'not_found', message: 'no such sandbox' } }));
  });
  await new Promise((r) => api.listen(0, '127.0.0.1', r));
  try {
    const sb = new Sandbox(new Sandboxd({ url: `http://127.0.0.1:${api.address().port}`, apiKey: 'k' }), sandbox);
    await assert.rejects(sb.terminal(), NotFoundError);
  } finally {
    api.close();
  }
});
