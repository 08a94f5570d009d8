// The SDK against a real daemon (SBX_URL, SBX_KEY; SBX_POOR_KEY an account
// with almost no credit): one sandbox for the whole session. Skipped
// without SBX_URL. Run by tests/integration/test_sdk_typescript.c, whose
// daemon allows 2 execs at once per sandbox (so a third is a 429).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, mkdir, writeFile, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import {
  Sandbox, Sandboxd, RateLimitedError, InsufficientCreditError, NotFoundError, FileNotFoundError,
  SandboxNotRunningError, AuthenticationError, SandboxPausedError,
} from '../src/index.js';

const url = process.env.SBX_URL;
const skip = url ? false : 'no daemon (SBX_URL)';

// every reply's status and error type, to show what the SDK waited out
const seen = [];
async function recordingFetch(u, init) {
  const res = await fetch(u, init);
  let type = null;
  if (!res.ok) type = (await res.clone().json().catch(() => ({})))?.error?.type ?? null;
  seen.push({ method: init.method, url: String(u), status: res.status, type });
  return res;
}

let client, sbx, tmp;

before(async () => {
  if (skip) return;
  client = new Sandboxd({ url, apiKey: process.env.SBX_KEY, fetch: recordingFetch, maxRetries: 5 });
  tmp = await mkdtemp(join(tmpdir(), 'sbx-sdk-'));
});

after(async () => {
  if (sbx && sbx.status === 'running') await sbx.delete().catch(() => {});
  if (tmp) await rm(tmp, { recursive: true, force: true });
});

test('create', { skip }, async () => {
  sbx = await Sandbox.create({ client, timeoutMinutes: 10 });
  assert.match(sbx.id, /^sbx_/);
  assert.equal(sbx.status, 'running');
  const again = await Sandbox.connect(sbx.id, { client });
  assert.equal(again.id, sbx.id);
  assert.ok((await client.sandboxes.list({ status: 'running' })).data.some((s) => s.id === sbx.id));
});

test('exec returns a typed result', { skip }, async () => {
  const r = await sbx.exec('echo hi; echo err >&2; echo "$GREETING in $(pwd)"; exit 3', { env: { GREETING: 'hello' }, cwd: '/tmp' });
  assert.equal(r.stdout, 'hi\nhello in /tmp\n');
  assert.equal(r.stderr, 'err\n');
  assert.equal(r.exitCode, 3);
  assert.equal(r.timedOut, false);
  assert.equal(r.truncated, false);
  assert.equal(typeof r.durationMs, 'number');
  const t = await sbx.exec('sleep 5', { timeoutMs: 300 });
  assert.equal(t.timedOut, true);
});

test('streamed exec yields output as it comes', { skip }, async () => {
  const events = [];
  for await (const ev of sbx.execStream('for i in 1 2 3; do echo line$i; sleep 0.4; done; echo e >&2; exit 4')) {
    events.push({ ...ev, at: Date.now() });
  }
  const out = events.filter((e) => e.type === 'stdout');
  assert.equal(out.map((e) => e.data).join(''), 'line1\nline2\nline3\n');
  assert.equal(events.filter((e) => e.type === 'stderr').map((e) => e.data).join(''), 'e\n');
  const last = events.at(-1);
  assert.equal(last.type, 'exit');
  assert.equal(last.exitCode, 4);
  assert.ok(out.length >= 2, `one event for all the output: ${JSON.stringify(out)}`);
  assert.ok(last.at - out[0].at >= 500, 'the first line came only at the end');
});

test('files: write, read, range, list, remove, errors', { skip }, async () => {
  const bin = new Uint8Array(256).map((_, i) => i);
  const w = await sbx.files.write('/home/sandbox/d/bin.dat', bin, { mode: '0600' });
  assert.equal(w.size, 256);
  assert.equal(w.mode, '0600');
  assert.deepEqual(await sbx.files.read('/home/sandbox/d/bin.dat'), bin);
  assert.deepEqual(await sbx.files.read('/home/sandbox/d/bin.dat', { start: 10, end: 19 }), bin.subarray(10, 20));
  await sbx.files.write('/home/sandbox/d/hello.txt', 'héllo\n');
  assert.equal(await sbx.files.readText('/home/sandbox/d/hello.txt'), 'héllo\n');
  const list = await sbx.files.list('/home/sandbox/d');
  assert.deepEqual(list.map((e) => e.name).sort(), ['bin.dat', 'hello.txt']);
  assert.equal(list.find((e) => e.name === 'bin.dat').mode, '0600');
  assert.equal(list.hasMore, false);
  await sbx.files.remove('/home/sandbox/d/hello.txt');
  await assert.rejects(sbx.files.read('/home/sandbox/d/hello.txt'), (e) => e instanceof FileNotFoundError && e.param === 'path');
  await sbx.files.remove('/home/sandbox/d', { recursive: true });
});

test('a directory tree up (tar) and down again', { skip }, async () => {
  const src = join(tmp, 'src');
  await mkdir(join(src, 'a', 'b'), { recursive: true });
  await writeFile(join(src, 'a', 'b', 'deep.txt'), 'deep\n');
  await writeFile(join(src, 'top.txt'), 'top\n');
  const up = await sbx.files.uploadDir(src, '/home/sandbox/tree');
  assert.equal(up.object, 'tree');
  const r = await sbx.exec('cd /home/sandbox/tree && find . -type f | sort && cat a/b/deep.txt && echo new > made-here.txt');
  assert.equal(r.stdout, './a/b/deep.txt\n./top.txt\ndeep\n');
  const dst = join(tmp, 'dst');
  await sbx.files.downloadDir('/home/sandbox/tree', dst);
  assert.equal(await readFile(join(dst, 'a', 'b', 'deep.txt'), 'utf8'), 'deep\n');
  assert.equal(await readFile(join(dst, 'made-here.txt'), 'utf8'), 'new\n');
  const gz = await sbx.files.downloadTar('/home/sandbox/tree', { gzip: true });
  assert.deepEqual([...gz.subarray(0, 2)], [0x1f, 0x8b]);
});

test('a background process: output by offsets, stdin, wait', { skip }, async () => {
  const p = await sbx.processes.start("for i in 0 1 2; do echo out$i; sleep 0.2; done; read x; echo got:$x; echo bye >&2; exit 7");
  assert.ok(p.pid > 1);
  let o;
  for (let i = 0; i < 100; i++) {
    o = await p.output();
    if (o.stdout.includes('out2')) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.equal(o.stdout, 'out0\nout1\nout2\n');
  assert.equal(o.status, 'running');
  assert.equal(o.stdoutNextOffset, 15);
  const later = await p.output({ stdoutOffset: 5 });
  assert.equal(later.stdout, 'out1\nout2\n');
  assert.equal((await p.output({ stdoutOffset: o.stdoutNextOffset })).stdout, '');
  const w = await p.sendStdin('hello\n', { close: true });
  assert.equal(w.written, 6);
  assert.equal(w.closed, true);
  p.stdoutOffset = o.stdoutNextOffset; // wait() goes on from what was read
  const end = await p.wait({ pollMs: 100 });
  assert.deepEqual(end, { exitCode: 7, stdout: 'got:hello\n', stderr: 'bye\n' });
  assert.ok((await sbx.processes.list()).some((q) => q.pid === p.pid && q.info.status === 'exited'));
});

test('signal a background process; its output as an async iterator', { skip }, async () => {
  const p = await sbx.processes.start('echo started; exec sleep 100');
  const events = [];
  for await (const ev of p.stream({ pollMs: 100 })) {
    events.push(ev);
    if (ev.type === 'stdout') { // it runs: stop it
      const s = await p.signal('TERM');
      assert.equal(s.sent, true);
      assert.equal(s.status, 'running');
    }
  }
  assert.deepEqual(events, [{ type: 'stdout', data: 'started\n' }, { type: 'exit', exitCode: 143 }]);
  const again = await p.signal('KILL');
  assert.equal(again.sent, false);
  assert.equal(again.status, 'exited');
  assert.equal(again.exitCode, 143);
});

test('a 429 is waited out (Retry-After), or raised when retries are off', { skip }, async () => {
  // this daemon allows 2 execs at once per sandbox: hold both until the
  // file /tmp/go appears (files do not count as commands)
  const hold = (n) => sbx.exec(`touch /tmp/held${n}; while [ ! -e /tmp/go ]; do sleep 0.1; done`, { timeoutMs: 120000 });
  const exists = (p) => sbx.files.read(p).then(() => true, (e) => { if (e instanceof FileNotFoundError) return false; throw e; });
  const busy = [hold(1), hold(2)];
  for (let i = 0; !(await exists('/tmp/held1') && await exists('/tmp/held2')); i++) {
    assert.ok(i < 600, 'the two commands did not start');
    await new Promise((r) => setTimeout(r, 100));
  }
  const noRetry = new Sandbox(new Sandboxd({ url, apiKey: process.env.SBX_KEY, maxRetries: 0 }), sbx.info);
  await assert.rejects(noRetry.exec('echo no'), (e) => e instanceof RateLimitedError && e.status === 429 && e.retryAfter >= 1);
  const patient = new Sandbox(new Sandboxd({ url, apiKey: process.env.SBX_KEY, fetch: recordingFetch, maxRetries: 100 }), sbx.info);
  const n = seen.length;
  const third = patient.exec('echo third');
  await new Promise((r) => setTimeout(r, 1500));
  await sbx.files.write('/tmp/go', '');
  assert.equal((await third).stdout, 'third\n');
  const mine = seen.slice(n).filter((x) => x.url.endsWith(`/${sbx.id}/exec`));
  assert.ok(mine.some((x) => x.status === 429 && x.type === 'rate_limited'), JSON.stringify(mine));
  assert.equal(mine.at(-1).status, 200);
  for (const r of await Promise.all(busy)) assert.equal(r.exitCode, 0);
});

test('extend, usage, limits, openapi, receipts key', { skip }, async () => {
  const before = Date.parse(sbx.info.expires_at);
  await sbx.extend(30);
  assert.ok(Date.parse(sbx.info.expires_at) > before);
  const u = await client.usage();
  assert.equal(u.object, 'usage');
  assert.ok(u.sandboxes.running >= 1);
  const l = await client.limits();
  assert.ok(Array.isArray(l.sizes));
  assert.equal((await client.openapi()).openapi, '3.1.0');
  assert.ok(await client.receiptPublicKey());
});

test('pause and resume: a file kept, 409 while paused, running again', { skip }, async () => {
  await sbx.exec('echo before-pause > /tmp/paused-file');
  await sbx.pause();
  assert.equal(sbx.info.status, 'paused');
  assert.ok(sbx.info.paused_at && sbx.info.paused_bytes > 0);
  assert.equal((await sbx.pause()).info.status, 'paused');
  await assert.rejects(sbx.exec('true'), (e) => e instanceof SandboxPausedError && e.status === 409);
  await sbx.resume();
  assert.equal(sbx.info.status, 'running');
  assert.equal(sbx.info.paused_at, null);
  assert.equal((await sbx.exec('cat /tmp/paused-file')).stdout, 'before-pause\n');
});

test('terminal: stty size, a resize, the exit code', { skip }, async () => {
  const t = await sbx.terminal({ rows: 33, cols: 101 });
  t.send('stty size; echo MARK$((40+2))\r');
  assert.match(await t.readUntil('MARK42', 120000), /33 101/);
  t.resize(40, 120);
  t.send('stty size; exit 3\r');
  await t.readUntil('40 120', 60000);
  while ((await t.recv()) !== null);
  assert.equal(t.exitCode, 3);
  assert.equal(t.closeReason, 'exit 3');
});

test('metrics: the samples of its own sandbox, the interval the operator set', { skip }, async () => {
  const m = await sbx.metrics();
  assert.equal(m.object, 'sandbox_metrics');
  assert.equal(m.sandbox_id, sbx.id);
  assert.equal(m.interval_ms, (await client.limits()).metrics_interval_ms);
  assert.ok(m.history > 0 && m.samples.length <= m.history);
  if (m.interval_ms === 0) assert.deepEqual(m.samples, []);
});

test('labels: update, list filter, usage grouped by a key', { skip }, async () => {
  await sbx.update({ job: 'ts-4711', team: 'sdk' });
  assert.deepEqual(sbx.info.metadata, { job: 'ts-4711', team: 'sdk' });
  await sbx.update({ team: null });
  assert.deepEqual(sbx.info.metadata, { job: 'ts-4711' });
  const page = await client.sandboxes.list({ metadata: { job: 'ts-4711' } });
  assert.deepEqual(page.data.map((s) => s.id), [sbx.id]);
  assert.equal((await client.sandboxes.list({ metadata: { job: 'ts-4711', team: 'sdk' } })).data.length, 0);
  const u = await client.usage({ groupBy: 'job' });
  const sum = (xs, k) => xs.reduce((a, x) => a + x[k], 0);
  assert.equal(sum(u.by_metadata, 'seconds'), sum(Object.values(u.by_size), 'seconds'));
  assert.equal(sum(u.by_metadata, 'cost_micro_usd'), sum(Object.values(u.by_size), 'cost_micro_usd'));
  assert.ok(u.by_metadata.some((g) => g.value === 'ts-4711'));
  await assert.rejects(sbx.update({ 'bad key': 'x' }), (e) => e.param === 'metadata');
});

test('network: setNetwork, canonical, 400 naming the rule', { skip }, async () => {
  await sbx.setNetwork({ egress: 'allow_list', allow: ['Registry.NPMJS.org.:443'] });
  assert.deepEqual(sbx.info.network, { egress: 'allow_list', allow: ['registry.npmjs.org:443'], deny: [] });
  assert.equal(sbx.info.net_bytes_in, 0);
  await assert.rejects(sbx.setNetwork({ egress: 'allow_list', allow: ['a.test', 'b..test'] }),
    (e) => e.param === 'network.allow[1]');
  await sbx.setNetwork({ egress: 'none' });
  assert.equal(sbx.info.network.egress, 'none');
});

test('runCode with its receipt', { skip }, async () => {
  const r = await client.runCode('import sys\nprint(6 * 7)\nprint("e", file=sys.stderr)', { runtime: 'python', timeoutSeconds: 60 });
  assert.equal(r.status, 'completed');
  assert.equal(r.exitCode, 0);
  assert.equal(r.stdout, '42\n');
  assert.equal(r.stderr, 'e\n');
  assert.match(r.receipt.id, /\S/);
  assert.match(r.receipt.signature, /\S/);
  assert.ok(r.billing.cost_micro_usd > 0);
  const stored = await client.executions.get(r.id);
  assert.equal(stored.stdout, '42\n');
  assert.equal(stored.receipt.id, r.receipt.id);
  const full = await client.receipt(r.receipt.id);
  assert.ok(JSON.stringify(full).includes(r.id));
  assert.ok((await client.executions.list({ limit: 5 })).data.some((e) => e.id === r.id));
});

test('a 402 raises InsufficientCreditError; unknown ids NotFoundError', { skip }, async () => {
  const poor = new Sandboxd({ url, apiKey: process.env.SBX_POOR_KEY });
  await assert.rejects(Sandbox.create({ client: poor }), (e) => e instanceof InsufficientCreditError && e.status === 402 && e.type === 'insufficient_credit' && /\S/.test(e.message));
  await assert.rejects(Sandbox.connect('sbx_000000000000000000000000', { client }), NotFoundError);
});

test('API keys: create, use, list, revoke', { skip }, async () => {
  const k = await client.apiKeys.create({ scopes: ['sandboxes'] });
  assert.match(k.secret, /^aas_sk_/);
  assert.deepEqual(k.scopes, ['sandboxes']);
  const other = new Sandboxd({ url, apiKey: k.secret });
  assert.equal((await other.usage()).object, 'usage');
  const listed = (await client.apiKeys.list()).find((x) => x.id === k.id);
  assert.ok(listed && !('secret' in listed));
  await client.apiKeys.revoke(k.id);
  await assert.rejects(other.usage(), AuthenticationError);
});

test('an AbortSignal cancels a call', { skip }, async () => {
  const t0 = Date.now();
  await assert.rejects(sbx.exec('sleep 2', { signal: AbortSignal.timeout(300) }), (e) => e.name === 'TimeoutError' || e.name === 'AbortError');
  assert.ok(Date.now() - t0 < 1900);
});

test('delete', { skip }, async () => {
  const final = await sbx.delete();
  assert.equal(final.status, 'destroyed');
  assert.match(final.cost_usd, /^\d+\.\d{6}$/);
  await assert.rejects(sbx.exec('true'), SandboxNotRunningError);
});
