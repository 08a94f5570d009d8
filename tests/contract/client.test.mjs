// A client no one here wrote: openapi-fetch, typed by what openapi-typescript
// generates from docs/openapi.yaml (build/contract/api.d.ts), drives a
// session against a real daemon. tsc checks this file against those types
// first (tests/contract/tsconfig.json): a path, method, parameter, body
// field or reply field the description lacks fails the check; then node
// runs it. Run by tests/integration/test_contract.c with SBX_URL and SBX_KEY.
//   node --test tests/contract/
// @ts-check
import { test } from 'node:test';
import assert from 'node:assert/strict';
import createClient from 'openapi-fetch';

/** @typedef {import('../../build/contract/api.d.ts').paths} paths */

const URL = process.env.SBX_URL;
const KEY = process.env.SBX_KEY;

/** @type {import('openapi-fetch').Client<paths>} */
const api = createClient({ baseUrl: URL, headers: { Authorization: `Bearer ${KEY}` } });

test('a generated client drives a session', async () => {
  assert.ok(URL && KEY, 'SBX_URL and SBX_KEY must be set (tests/integration/test_contract.c)');

  const limits = await api.GET('/v1/limits');
  assert.equal(limits.response.status, 200);
  assert.ok((limits.data?.max_file_bytes ?? 0) > 0);

  const created = await api.POST('/v1/sandboxes', { body: { size: 'small', timeout_minutes: 5 } });
  assert.equal(created.response.status, 201, JSON.stringify(created.error));
  const id = created.data?.id ?? '';
  assert.match(id, /^sbx_/);
  const sbx = { params: { path: { id } } };

  const ran = await api.POST('/v1/sandboxes/{id}/exec', { ...sbx, body: { command: 'echo hi; exit 3', receipt: true } });
  // the reply is one of the described media types: the JSON one here
  const res = ran.data;
  assert.ok(typeof res === 'object' && 'stdout' in res, JSON.stringify(ran.error));
  assert.equal(res.stdout, 'hi\n');
  assert.equal(res.exit_code, 3);
  assert.match(res.receipt?.url ?? '', /^\/v1\/receipts\//);

  const bytes = new TextEncoder().encode('generated, uploaded, downloaded\n');
  const put = await api.PUT('/v1/sandboxes/{id}/files', {
    params: { path: { id }, query: { path: '/tmp/g/up.txt', mode: '0600' } },
    // openapi-typescript types a binary body as a string; fetch takes bytes
    body: /** @type {any} */ (bytes),
    bodySerializer: (b) => b,
    headers: { 'Content-Type': 'application/octet-stream' },
  });
  assert.equal(put.response.status, 201, JSON.stringify(put.error));
  assert.equal(put.data?.size, bytes.length);
  assert.equal(put.data?.mode, '0600');

  const got = await api.GET('/v1/sandboxes/{id}/files', {
    params: { path: { id }, query: { path: '/tmp/g/up.txt' } },
    parseAs: 'text',
  });
  assert.equal(got.response.status, 200);
  assert.equal(got.data, 'generated, uploaded, downloaded\n');
  assert.equal(got.response.headers.get('x-file-mode'), '0600');

  const listed = await api.GET('/v1/sandboxes/{id}/files', {
    params: { path: { id }, query: { path: '/tmp/g', list: true } },
  });
  assert.equal(listed.response.status, 200);
  const list = /** @type {{data: {name: string}[]}} */ (listed.data);
  assert.deepEqual(list.data.map((e) => e.name), ['up.txt']);

  const gone = await api.DELETE('/v1/sandboxes/{id}/files', { params: { path: { id }, query: { path: '/tmp/g/up.txt' } } });
  assert.equal(gone.response.status, 200);
  assert.equal(gone.data?.deleted, true);

  const started = await api.POST('/v1/sandboxes/{id}/processes', { ...sbx, body: { command: 'echo bg' } });
  assert.equal(started.response.status, 201);
  const procs = await api.GET('/v1/sandboxes/{id}/processes', sbx);
  assert.ok(procs.data?.data.some((p) => p.pid === started.data?.pid));

  const usage = await api.GET('/v1/usage');
  assert.equal(usage.data?.object, 'usage');

  const ended = await api.DELETE('/v1/sandboxes/{id}', sbx);
  assert.equal(ended.data?.status, 'destroyed');
});
