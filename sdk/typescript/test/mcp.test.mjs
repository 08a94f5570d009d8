// The MCP server (bin/sandboxd-mcp.js) driven over stdio by the official
// MCP client library (@modelcontextprotocol/sdk) against a real daemon
// (SBX_URL, SBX_KEY): the tools listed with strict schemas, each called,
// a tool error read, a scripted agent loop (write a Python module and its
// tests, run them, read the failure, fix it, run them again), and the
// session's sandbox deleted when it ends (test/unit.test.mjs checks that
// one created with keep: true is not).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';
import { dirname, join } from 'node:path';
import http from 'node:http';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';

import { Sandboxd } from '../src/index.js';

const here = dirname(fileURLToPath(import.meta.url));
const bin = join(here, '..', 'bin', 'sandboxd-mcp.js');
const url = process.env.SBX_URL;
const skip = url ? false : 'no daemon (SBX_URL)';

let mcp, transport, sdk, sbxId, fromSnapId, snapId;
let stderr = '';

// a create or a run_code boots a guest: minutes on a loaded TCG host, more
// than the client's default 60 s request timeout
const CALL_TIMEOUT_MS = 300000;

async function call(name, args) {
  const r = await mcp.callTool({ name, arguments: args }, undefined, { timeout: CALL_TIMEOUT_MS });
  const text = r.content.map((c) => c.text).join('');
  return { text, isError: !!r.isError };
}

async function ok(name, args) {
  const r = await call(name, args);
  assert.equal(r.isError, false, `${name}: ${r.text}`);
  return r.text;
}

before(async () => {
  if (skip) return;
  sdk = new Sandboxd({ url, apiKey: process.env.SBX_KEY });
  transport = new StdioClientTransport({
    command: process.execPath, args: [bin], stderr: 'pipe',
    env: { PATH: process.env.PATH, SANDBOXD_URL: url, SANDBOXD_KEY: process.env.SBX_KEY },
  });
  transport.stderr.on('data', (c) => { stderr += c; });
  mcp = new Client({ name: 'sandboxd-test', version: '1.0.0' });
  await mcp.connect(transport);
});

after(async () => {
  await mcp?.close().catch(() => {});
  for (const id of [sbxId, fromSnapId])
    if (id) await sdk.sandboxes.get(id).then((s) => s.status === 'running' && s.delete()).catch(() => {});
  if (snapId) await sdk.snapshots.delete(snapId).catch(() => {});
});

// GET path from the daemon with another Host (a preview's host name)
function getWithHost(host, path) {
  const d = new URL(url);
  return new Promise((resolve, reject) => {
    http.get({ host: d.hostname, port: d.port, path, headers: { Host: host } }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c) => { body += c; });
      res.on('end', () => resolve({ status: res.statusCode, body }));
    }).on('error', reject);
  });
}

test('the server lists its tools, each with a strict schema', { skip }, async () => {
  assert.equal(mcp.getServerVersion().name, 'sandboxd-mcp');
  const { tools } = await mcp.listTools();
  const names = tools.map((t) => t.name).sort();
  assert.deepEqual(names, ['create_sandbox', 'delete_sandbox', 'list_files', 'preview_port', 'read_file',
    'read_process_output', 'run_code', 'run_command', 'signal_process', 'snapshot_sandbox', 'start_process',
    'write_file']);
  for (const t of tools) assert.equal(t.inputSchema.additionalProperties, false, t.name);
});

test('create_sandbox, run_command, write_file, read_file, list_files', { skip }, async () => {
  const created = await ok('create_sandbox', { timeout_minutes: 10 });
  sbxId = /(sbx_[0-9a-f]+)/.exec(created)[1];
  assert.match(created, /deleted when this session ends/);
  const run = await ok('run_command', { sandbox_id: sbxId, command: 'echo "$X"; echo oops >&2; exit 2', env: { X: 'from env' } });
  assert.match(run, /^exit_code: 2\n--- stdout ---\nfrom env\n\n--- stderr ---\noops\n/);
  assert.match(await ok('write_file', { sandbox_id: sbxId, path: '/home/sandbox/notes/a.txt', content: 'alpha\n' }), /wrote 6 bytes/);
  await ok('write_file', { sandbox_id: sbxId, path: '/home/sandbox/notes/run.sh', content: Buffer.from('#!/bin/sh\necho ran\n').toString('base64'), encoding: 'base64', mode: '0755' });
  assert.equal(await ok('read_file', { sandbox_id: sbxId, path: '/home/sandbox/notes/a.txt' }), 'alpha\n');
  assert.equal(await ok('read_file', { sandbox_id: sbxId, path: '/home/sandbox/notes/a.txt', max_bytes: 3 }), 'alp');
  assert.match(await ok('run_command', { sandbox_id: sbxId, command: './run.sh', cwd: '/home/sandbox/notes' }), /ran/);
  const ls = await ok('list_files', { sandbox_id: sbxId, path: '/home/sandbox/notes' });
  assert.match(ls, /file\s+0644\s+6 \S+ a\.txt/);
  assert.match(ls, /file\s+0755\s+\d+ \S+ run\.sh/);
});

test('start_process, read_process_output by offsets, signal_process', { skip }, async () => {
  const started = await ok('start_process', { sandbox_id: sbxId, command: 'echo one; sleep 1; echo two; exit 5' });
  const pid = Number(/process (\d+)/.exec(started)[1]);
  let text, offset = 0, out = '';
  for (let i = 0; i < 100; i++) {
    text = await ok('read_process_output', { sandbox_id: sbxId, pid, stdout_offset: offset });
    out += /--- stdout ---\n([\s\S]*)\n--- stderr ---/.exec(text)[1];
    offset = Number(/stdout_offset=(\d+)/.exec(text)[1]);
    if (/status: exited/.test(text)) break;
    await new Promise((r) => setTimeout(r, 200));
  }
  assert.match(text, /status: exited, exit_code: 5/);
  assert.equal(out, 'one\ntwo\n');
  assert.equal(offset, 8);
  const sleeper = Number(/process (\d+)/.exec(await ok('start_process', { sandbox_id: sbxId, command: 'sleep 100' }))[1]);
  assert.match(await ok('signal_process', { sandbox_id: sbxId, pid: sleeper, signal: 'KILL' }), /sent KILL/);
});

test('tool errors are isError results with the API\'s message', { skip }, async () => {
  let r = await call('read_file', { sandbox_id: sbxId, path: '/home/sandbox/nope.txt' });
  assert.equal(r.isError, true);
  assert.match(r.text, /^file_not_found \(HTTP 404\): .+\[param: path\]/);
  r = await call('run_command', { sandbox_id: sbxId, command: 'ls', cwd: 'relative' });
  assert.equal(r.isError, true);
  assert.match(r.text, /^invalid_request \(HTTP 400\): .+\[param: cwd\]/);
  r = await call('run_command', { sandbox_id: sbxId, command: 'ls', shell: 'bash' });
  assert.equal(r.isError, true);
  assert.match(r.text, /unknown argument 'shell'/);
  r = await call('delete_sandbox', { sandbox_id: 'sbx_000000000000000000000000' });
  assert.equal(r.isError, true);
  assert.match(r.text, /^not_found \(HTTP 404\)/);
  await assert.rejects(mcp.callTool({ name: 'no_such_tool', arguments: {} }), /unknown tool/);
});

test('run_code (node) with its receipt', { skip }, async () => {
  const t = await ok('run_code', { runtime: 'node', code: 'console.log(6 * 7)', timeout_seconds: 60 });
  assert.match(t, /^status: completed, exit_code: 0\n--- stdout ---\n42\n/);
  assert.match(t, /receipt: \S+/);
});

test('a scripted agent loop: write code and tests, run them, read the failure, fix it', { skip }, async () => {
  const dir = '/home/sandbox/proj';
  await ok('write_file', { sandbox_id: sbxId, path: `${dir}/calc.py`, content: 'def add(a, b):\n    return a - b\n' });
  await ok('write_file', {
    sandbox_id: sbxId, path: `${dir}/test_calc.py`,
    content: 'import unittest\nfrom calc import add\n\nclass T(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n\nif __name__ == "__main__":\n    unittest.main()\n',
  });
  const steps = [];
  for (let turn = 0; turn < 3; turn++) {
    const run = await ok('run_command', { sandbox_id: sbxId, command: 'python3 -m unittest -v 2>&1', cwd: dir, timeout_ms: 60000 });
    steps.push(run);
    if (/^exit_code: 0/.test(run)) break;
    // read the failure: which file and line, then look at that line
    const where = /File "([^"]*calc\.py)", line (\d+), in add/.exec(run) ?? /File "([^"]*test_calc\.py)", line (\d+)/.exec(run);
    assert.ok(where, `no traceback in: ${run}`);
    assert.match(run, /AssertionError: -1 != 5/);
    const src = await ok('read_file', { sandbox_id: sbxId, path: `${dir}/calc.py` });
    const fixed = src.replace('return a - b', 'return a + b');
    assert.notEqual(fixed, src);
    await ok('write_file', { sandbox_id: sbxId, path: `${dir}/calc.py`, content: fixed });
  }
  assert.equal(steps.length, 2, steps.join('\n====\n'));
  assert.match(steps[0], /^exit_code: 1/);
  assert.match(steps[0], /FAIL: test_add/);
  assert.match(steps[1], /^exit_code: 0/);
  assert.match(steps[1], /\nOK\n/);
  const ls = await ok('list_files', { sandbox_id: sbxId, path: dir });
  assert.match(ls, /calc\.py/);
});

test('snapshot_sandbox, create_sandbox from the snapshot, preview_port to a server in it', { skip }, async () => {
  await ok('write_file', { sandbox_id: sbxId, path: '/home/sandbox/www/index.html', content: '<p>from the template</p>' });
  const snap = await ok('snapshot_sandbox', { sandbox_id: sbxId, name: 'mcp-test' });
  snapId = /(snap_[0-9a-f]+)/.exec(snap)[1];
  assert.match(snap, new RegExp(`of ${sbxId} \\(\\d+ bytes\\)`));
  const created = await ok('create_sandbox', { snapshot: snapId, timeout_minutes: 10 });
  fromSnapId = /(sbx_[0-9a-f]+)/.exec(created)[1];
  assert.notEqual(fromSnapId, sbxId);
  assert.equal(await ok('read_file', { sandbox_id: fromSnapId, path: '/home/sandbox/www/index.html' }), '<p>from the template</p>');
  await ok('start_process', { sandbox_id: fromSnapId, command: 'cd /home/sandbox/www && exec python3 -m http.server 8000 --bind 127.0.0.1' });
  const pv = await ok('preview_port', { sandbox_id: fromSnapId, port: 8000, expires_in_seconds: 600 });
  const u = new URL(/^(\S+)/.exec(pv)[1]);
  assert.match(u.hostname, /^8000-[0-9a-f]{32}\.preview\.localhost$/);
  let r;
  for (let i = 0; i < 120; i++) { // until the server listens (502 before)
    r = await getWithHost(u.host, '/');
    if (r.status !== 502) break;
    await new Promise((ok2) => setTimeout(ok2, 500));
  }
  assert.equal(r.status, 200, r.body);
  assert.match(r.body, /from the template/);
  // a tool argument out of its schema is refused before the API
  const bad = await call('preview_port', { sandbox_id: fromSnapId, port: 70000 });
  assert.equal(bad.isError, true);
});

test('when the session ends (stdin closed) its sandbox is deleted', { skip }, async () => {
  await mcp.close(); // closes the server's stdin
  let status;
  for (let i = 0; i < 50; i++) {
    status = (await sdk.sandboxes.get(sbxId)).status;
    if (status !== 'running') break;
    await new Promise((r) => setTimeout(r, 200));
  }
  assert.equal(status, 'destroyed', stderr);
  assert.match(stderr, new RegExp(`deleted ${sbxId}`));
  // the one made from the snapshot too; the snapshot outlives the session
  for (let i = 0; i < 50 && !stderr.includes(`deleted ${fromSnapId}`); i++) await new Promise((r) => setTimeout(r, 200));
  assert.equal((await sdk.sandboxes.get(fromSnapId)).status, 'destroyed');
  assert.match(stderr, new RegExp(`deleted ${fromSnapId}`));
  assert.equal((await sdk.snapshots.get(snapId)).id, snapId);
});
