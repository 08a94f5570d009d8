// Compiled by `tsc --noEmit` (test/types.test.mjs): the declarations in
// index.d.ts and mcp.d.ts describe a usable API. Never run.
import {
  Sandbox, Sandboxd, ROUTES, RateLimitedError, InsufficientCreditError, NotFoundError,
  SandboxdError, type ExecResult, type ExecEvent, type FileEntry,
} from '@sandboxd/sdk';
import { TOOLS, McpServer } from '@sandboxd/sdk/mcp';

async function main(): Promise<void> {
  const ac = new AbortController();
  const sbx = await Sandbox.create({ size: 'small', timeoutMinutes: 5, signal: ac.signal });
  const r: ExecResult = await sbx.exec('echo hi', { env: { A: 'b' }, timeoutMs: 1000 });
  const code: number = r.exitCode;
  for await (const ev of sbx.execStream('ls')) {
    const e: ExecEvent = ev;
    if (e.type === 'exit') { const n: number = e.exitCode; void n; } else { const d: string = e.data; void d; }
  }
  await sbx.files.write('/tmp/a', 'text', { mode: '0600' });
  const bytes: Uint8Array = await sbx.files.read('/tmp/a', { start: 0, end: 3 });
  const entries: FileEntry[] = await sbx.files.list('/tmp');
  const more: boolean = (await sbx.files.list('/tmp')).hasMore;
  await sbx.files.uploadDir('./src', '/home/sandbox/src');
  await sbx.files.downloadDir('/home/sandbox/src', './out');
  const tar: Uint8Array = await sbx.files.downloadTar('/home', { gzip: true });
  await sbx.files.uploadTar('/x', tar, { gzip: true });
  const p = await sbx.processes.start('sleep 1', { cwd: '/tmp' });
  const out = await p.output({ stdoutOffset: 0 });
  const next: number = out.stdoutNextOffset;
  for await (const ev of p.stream({ pollMs: 100 })) if (ev.type === 'exit') { const c: number | null = ev.exitCode; void c; }
  await p.sendStdin('x', { close: true });
  const s = await p.signal('TERM');
  const sent: boolean = s.sent;
  const w = await p.wait();
  await sbx.extend(10);
  await sbx.pause();
  const pausedAt: string | null = sbx.info.paused_at;
  await sbx.resume();
  await sbx.update({ job: '1', gone: null });
  await sbx.setNetwork({ egress: 'allow_list', allow: ['registry.npmjs.org:443'] });
  const egress: 'none' | 'allow_list' | 'open' = sbx.info.network.egress;
  const bytesIn: number = sbx.info.net_bytes_in;
  const labels: Record<string, string> = sbx.info.metadata;
  const client = new Sandboxd({ url: 'http://127.0.0.1:8080', apiKey: 'k', maxRetries: 2 });
  const x = await client.runCode('print(1)', { runtime: 'python', timeoutSeconds: 5 });
  const rid: string | undefined = x.receipt?.id;
  const k = await client.apiKeys.create({ scopes: ['sandboxes'] });
  const secret: string = k.secret;
  await client.apiKeys.revoke(k.id);
  await client.usage({ granularity: 'day' });
  await client.limits();
  const routes: ReadonlyArray<readonly [string, string]> = ROUTES;
  try { await sbx.delete(); } catch (e) {
    if (e instanceof RateLimitedError) { const ra: number | null = e.retryAfter; void ra; }
    if (e instanceof InsufficientCreditError || e instanceof NotFoundError) { const t: string | null = e.type; void t; }
    if (e instanceof SandboxdError) { const id: string | null = e.requestId; void id; }
  }
  const names: string[] = TOOLS.map((t) => t.name);
  const srv = new McpServer({ send: () => {} });
  await srv.close();
  // @ts-expect-error: exec needs a command
  await sbx.exec();
  // @ts-expect-error: no such signal
  await p.signal('HUP');
  void [code, bytes, entries, more, next, sent, w, rid, secret, routes, names, labels, pausedAt];
}
void main;
