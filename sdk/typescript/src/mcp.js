// The Model Context Protocol server (docs/mcp.md): JSON-RPC 2.0 over stdio,
// one message per line, with the tools an agent needs to work in a
// sandbox. Every tool's input schema is strict (additionalProperties:
// false) and checked here before the API is called; a failure comes back
// as an isError result carrying the API's error type and message.
// Sandboxes the session created are deleted when it ends (stdin closes,
// SIGTERM, SIGINT) unless they were created with keep: true or the server
// was started with --keep.

import { Sandboxd } from './client.js';
import { RangeNotSatisfiableError, SandboxdError } from './errors.js';

const PROTOCOL_VERSIONS = ['2025-11-25', '2025-06-18', '2025-03-26', '2024-11-05'];
const MAX_TEXT = 64 * 1024; // per stream or file shown to the model

const str = (description, extra = {}) => ({ type: 'string', description, ...extra });
const int = (description, minimum, maximum) => ({ type: 'integer', description, minimum, ...(maximum ? { maximum } : {}) });
const sandboxId = str('the sandbox id (sbx_...)', { minLength: 1, maxLength: 39 });
const envSchema = { type: 'object', description: 'environment variables', additionalProperties: { type: 'string' } };

function tool(name, description, properties, required) {
  return { name, description, inputSchema: { type: 'object', properties, required, additionalProperties: false } };
}

export const TOOLS = [
  tool('create_sandbox', 'Create a Linux sandbox (a fresh VM; commands run as root in /home/sandbox). Returns its id. It is deleted when this session ends unless keep is true.', {
    size: str('size name (see the service limits), default the service default'),
    timeout_minutes: int('minutes until it expires', 1),
    network: {
      type: 'object',
      description: 'its egress policy (default: the service default, usually none): {"egress": "none" | "allow_list" | "open", "allow": ["pypi.org", "*.pythonhosted.org:443"], "deny": [...]}',
      properties: {
        egress: { type: 'string', enum: ['none', 'allow_list', 'open'] },
        allow: { type: 'array', items: { type: 'string' } },
        deny: { type: 'array', items: { type: 'string' } },
      },
      required: ['egress'],
      additionalProperties: false,
    },
    snapshot: str('start from a snapshot\'s disk (snap_..., from snapshot_sandbox): its files, not its processes', { minLength: 1, maxLength: 40 }),
    keep: { type: 'boolean', description: 'keep it after this session ends' },
  }, []),
  tool('run_command', 'Run a shell command in a sandbox and wait for it (stdout, stderr, exit code).', {
    sandbox_id: sandboxId,
    command: str('the shell command', { minLength: 1 }),
    timeout_ms: int('deadline of the command in ms (default 60000)', 1),
    cwd: str('absolute working directory'),
    env: envSchema,
  }, ['sandbox_id', 'command']),
  tool('run_code', 'Run a snippet of code once in a fresh, isolated guest and return its output and signed receipt (no sandbox needed).', {
    runtime: { type: 'string', enum: ['python', 'node'], description: 'the interpreter' },
    code: str('the program', { minLength: 1 }),
    timeout_seconds: int('deadline in seconds (default 30)', 1, 3600),
  }, ['runtime', 'code']),
  tool('write_file', 'Write a file in a sandbox (parents created, atomic).', {
    sandbox_id: sandboxId,
    path: str('absolute path in the sandbox', { minLength: 1 }),
    content: str('the file content'),
    encoding: { type: 'string', enum: ['utf-8', 'base64'], description: 'how content is encoded (default utf-8)' },
    mode: str('octal permission bits, e.g. 0755', { pattern: '^[0-7]{1,5}$' }),
  }, ['sandbox_id', 'path', 'content']),
  tool('read_file', 'Read a file from a sandbox (at most max_bytes, default 65536).', {
    sandbox_id: sandboxId,
    path: str('absolute path in the sandbox', { minLength: 1 }),
    encoding: { type: 'string', enum: ['utf-8', 'base64'], description: 'how to return the bytes (default utf-8)' },
    max_bytes: int('bytes to read at most', 1, 1048576),
  }, ['sandbox_id', 'path']),
  tool('list_files', 'List a directory in a sandbox (name, type, size, mode, mtime).', {
    sandbox_id: sandboxId,
    path: str('absolute directory path', { minLength: 1 }),
  }, ['sandbox_id', 'path']),
  tool('start_process', 'Start a command in the background in a sandbox; returns its pid at once. Poll it with read_process_output.', {
    sandbox_id: sandboxId,
    command: str('the shell command', { minLength: 1 }),
    timeout_ms: int('kill it after this many ms (default: no deadline)', 1),
    cwd: str('absolute working directory'),
    env: envSchema,
  }, ['sandbox_id', 'command']),
  tool('read_process_output', 'A background process\'s status and output since the given offsets; call again from the next offsets until it has exited.', {
    sandbox_id: sandboxId,
    pid: int('the process id start_process returned', 1),
    stdout_offset: int('stdout byte offset to read from (default 0)', 0),
    stderr_offset: int('stderr byte offset to read from (default 0)', 0),
  }, ['sandbox_id', 'pid']),
  tool('signal_process', 'Send TERM, INT or KILL to a background process (its whole process group).', {
    sandbox_id: sandboxId,
    pid: int('the process id', 1),
    signal: { type: 'string', enum: ['TERM', 'INT', 'KILL'], description: 'default TERM' },
  }, ['sandbox_id', 'pid']),
  tool('preview_port', 'A URL a browser can open for a server listening on 127.0.0.1:port in a sandbox (no key needed: anyone with the URL can open it until it expires).', {
    sandbox_id: sandboxId,
    port: int('the TCP port the server listens on in the sandbox', 1, 65535),
    expires_in_seconds: int('how long the URL works (default 3600)', 1),
  }, ['sandbox_id', 'port']),
  tool('snapshot_sandbox', 'Save a sandbox\'s disk as a snapshot (it runs on); create_sandbox with its id starts new sandboxes with those files. Snapshots outlive the session and are billed for storage until deleted.', {
    sandbox_id: sandboxId,
    name: str('a name for it', { maxLength: 64 }),
  }, ['sandbox_id']),
  tool('delete_sandbox', 'Delete a sandbox (it stops being billed).', { sandbox_id: sandboxId }, ['sandbox_id']),
];

const BY_NAME = new Map(TOOLS.map((t) => [t.name, t]));

function typeOk(v, s) {
  switch (s.type) {
    case 'string': return typeof v === 'string';
    case 'integer': return Number.isInteger(v);
    case 'boolean': return typeof v === 'boolean';
    case 'object': return v !== null && typeof v === 'object' && !Array.isArray(v);
    default: return true;
  }
}

/** The argument errors of `args` against tool `t`'s schema ([] when none). */
export function checkArgs(t, args) {
  const s = t.inputSchema;
  if (!typeOk(args, { type: 'object' })) return ['arguments must be an object'];
  const errs = [];
  for (const k of Object.keys(args)) if (!(k in s.properties)) errs.push(`unknown argument '${k}' (known: ${Object.keys(s.properties).join(', ')})`);
  for (const k of s.required) if (args[k] === undefined) errs.push(`missing required argument '${k}'`);
  for (const [k, v] of Object.entries(args)) {
    const p = s.properties[k];
    if (!p) continue;
    if (!typeOk(v, p)) { errs.push(`argument '${k}' must be of type ${p.type}`); continue; }
    if (p.enum && !p.enum.includes(v)) errs.push(`argument '${k}' must be one of ${p.enum.join(', ')}`);
    if (p.minLength !== undefined && v.length < p.minLength) errs.push(`argument '${k}' must not be empty`);
    if (p.maxLength !== undefined && v.length > p.maxLength) errs.push(`argument '${k}' is too long`);
    if (p.pattern && !new RegExp(p.pattern).test(v)) errs.push(`argument '${k}' must match ${p.pattern}`);
    if (p.minimum !== undefined && v < p.minimum) errs.push(`argument '${k}' must be at least ${p.minimum}`);
    if (p.maximum !== undefined && v > p.maximum) errs.push(`argument '${k}' must be at most ${p.maximum}`);
    if (p.type === 'object' && p.additionalProperties?.type === 'string') {
      for (const [ek, ev] of Object.entries(v)) if (typeof ev !== 'string') errs.push(`argument '${k}.${ek}' must be a string`);
    }
  }
  return errs;
}

function clip(s) {
  if (typeof s !== 'string' || s.length <= MAX_TEXT) return s;
  return `${s.slice(0, MAX_TEXT)}\n[... ${s.length - MAX_TEXT} more characters not shown]`;
}

function b64(bytes) {
  let s = '';
  for (let i = 0; i < bytes.length; i += 0x8000) s += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(s);
}

function unb64(s) {
  const bin = atob(s);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

const execOpts = (a) => ({ timeoutMs: a.timeout_ms, cwd: a.cwd, env: a.env });

function outputText(r) {
  const lines = [`exit_code: ${r.exitCode}${r.timedOut ? ' (timed out)' : ''}${r.truncated ? ' (output truncated)' : ''}`];
  lines.push(`--- stdout ---\n${clip(r.stdout)}`, `--- stderr ---\n${clip(r.stderr)}`);
  return lines.join('\n');
}

export class McpServer {
  /**
   * @param {object} o
   * @param {Sandboxd} [o.client] (default: from SANDBOXD_URL / SANDBOXD_KEY)
   * @param {(msg: object) => void} o.send writes one JSON-RPC message
   * @param {boolean} [o.keep] keep every sandbox after the session
   * @param {(line: string) => void} [o.log]
   */
  constructor(o) {
    this.client = o.client ?? new Sandboxd();
    this.send = o.send;
    this.keepAll = !!o.keep;
    this.log = o.log ?? (() => {});
    this.created = new Map(); // id -> {sandbox, keep}
    this.inflight = new Set();
  }

  /** Handle one parsed JSON-RPC message (request or notification). */
  async handle(msg) {
    if (Array.isArray(msg) || msg === null || typeof msg !== 'object' || msg.jsonrpc !== '2.0') {
      this.send({ jsonrpc: '2.0', id: null, error: { code: -32600, message: 'invalid request' } });
      return;
    }
    if (typeof msg.method !== 'string') return; // a response: this server asks nothing
    const isRequest = msg.id !== undefined && msg.id !== null;
    if (!isRequest) return; // notifications: initialized, cancelled (the call runs to its end)
    try {
      const result = await this.dispatch(msg.method, msg.params ?? {});
      this.send({ jsonrpc: '2.0', id: msg.id, result });
    } catch (e) {
      const code = e.rpcCode ?? -32603;
      this.send({ jsonrpc: '2.0', id: msg.id, error: { code, message: e.message } });
    }
  }

  async dispatch(method, params) {
    switch (method) {
      case 'initialize': {
        const asked = params.protocolVersion;
        return {
          protocolVersion: PROTOCOL_VERSIONS.includes(asked) ? asked : PROTOCOL_VERSIONS[0],
          capabilities: { tools: { listChanged: false } },
          serverInfo: { name: 'sandboxd-mcp', version: '0.1.0' },
          instructions: 'Create a sandbox with create_sandbox, then run commands and move files in it by its id. Sandboxes created here are deleted when the session ends unless created with keep: true.',
        };
      }
      case 'ping': return {};
      case 'tools/list': return { tools: TOOLS };
      case 'tools/call': return this.callTool(params);
      default: throw Object.assign(new Error(`method not found: ${method}`), { rpcCode: -32601 });
    }
  }

  async callTool(params) {
    const t = BY_NAME.get(params?.name);
    if (!t) throw Object.assign(new Error(`unknown tool: ${params?.name}`), { rpcCode: -32602 });
    const args = params.arguments ?? {};
    const errs = checkArgs(t, args);
    if (errs.length) return { isError: true, content: [{ type: 'text', text: `invalid arguments for ${t.name}: ${errs.join('; ')}` }] };
    const p = this[`tool_${t.name}`](args);
    this.inflight.add(p);
    try {
      const out = await p;
      return typeof out === 'string' ? { content: [{ type: 'text', text: out }] } : out;
    } catch (e) {
      if (e instanceof SandboxdError) {
        const what = e.type ? `${e.type}${e.status ? ` (HTTP ${e.status})` : ''}` : 'error';
        const param = e.param ? ` [param: ${e.param}]` : '';
        return { isError: true, content: [{ type: 'text', text: `${what}: ${e.message}${param}` }] };
      }
      return { isError: true, content: [{ type: 'text', text: `error: ${e?.message ?? e}` }] };
    } finally {
      this.inflight.delete(p);
    }
  }

  sandbox(id) {
    return this.created.get(id)?.sandbox ?? this.client.sandboxes.get(id);
  }

  async tool_create_sandbox(a) {
    const s = await this.client.sandboxes.create({ size: a.size, timeoutMinutes: a.timeout_minutes, network: a.network, snapshot: a.snapshot });
    this.created.set(s.id, { sandbox: s, keep: !!a.keep });
    const keep = a.keep || this.keepAll ? 'kept after this session' : 'deleted when this session ends';
    return `sandbox ${s.id} is ${s.info.status} (size ${s.info.size}, expires ${s.info.expires_at}; ${keep})`;
  }

  async tool_run_command(a) {
    const r = await (await this.sandbox(a.sandbox_id)).exec(a.command, execOpts(a));
    return outputText(r);
  }

  async tool_run_code(a) {
    const r = await this.client.runCode(a.code, { runtime: a.runtime, timeoutSeconds: a.timeout_seconds });
    const text = [`status: ${r.status}, exit_code: ${r.exitCode}`, `--- stdout ---\n${clip(r.stdout)}`, `--- stderr ---\n${clip(r.stderr)}`];
    if (r.receipt) text.push(`receipt: ${r.receipt.id} (${r.receipt.url ?? ''})`);
    return text.join('\n');
  }

  async tool_write_file(a) {
    const data = a.encoding === 'base64' ? unb64(a.content) : a.content;
    const r = await (await this.sandbox(a.sandbox_id)).files.write(a.path, data, { mode: a.mode });
    return `wrote ${r.size} bytes to ${r.path} (mode ${r.mode}, sha256 ${r.sha256})`;
  }

  async tool_read_file(a) {
    const s = await this.sandbox(a.sandbox_id);
    const max = a.max_bytes ?? MAX_TEXT;
    let bytes;
    try {
      bytes = await s.files.read(a.path, { start: 0, end: max - 1 });
    } catch (e) {
      if (!(e instanceof RangeNotSatisfiableError)) throw e;
      bytes = new Uint8Array(0); // an empty file: range 0- starts at its end
    }
    return a.encoding === 'base64' ? b64(bytes) : new TextDecoder().decode(bytes);
  }

  async tool_list_files(a) {
    const entries = await (await this.sandbox(a.sandbox_id)).files.list(a.path);
    const lines = entries.map((e) => `${e.type.padEnd(7)} ${e.mode} ${String(e.size).padStart(10)} ${e.mtime} ${e.name}`);
    if (entries.hasMore) lines.push('[more entries not listed]');
    return lines.length ? lines.join('\n') : '(empty directory)';
  }

  async tool_start_process(a) {
    const p = await (await this.sandbox(a.sandbox_id)).processes.start(a.command, execOpts(a));
    return `started process ${p.pid} (${p.info.status})`;
  }

  async tool_read_process_output(a) {
    const s = await this.sandbox(a.sandbox_id);
    const r = await s.processes.get(a.pid).output({ stdoutOffset: a.stdout_offset, stderrOffset: a.stderr_offset });
    const more = r.stdoutNextOffset < r.stdoutTotal || r.stderrNextOffset < r.stderrTotal;
    return [
      `status: ${r.status}${r.status === 'exited' ? `, exit_code: ${r.exitCode}` : ''}`,
      `next offsets: stdout_offset=${r.stdoutNextOffset} stderr_offset=${r.stderrNextOffset}${more ? ' (more output waiting)' : ''}`,
      `--- stdout ---\n${clip(r.stdout)}`, `--- stderr ---\n${clip(r.stderr)}`,
    ].join('\n');
  }

  async tool_signal_process(a) {
    const s = await this.sandbox(a.sandbox_id);
    const r = await s.processes.get(a.pid).signal(a.signal ?? 'TERM');
    return r.sent ? `sent ${a.signal ?? 'TERM'} to ${a.pid}` : `process ${a.pid} had already exited (exit_code ${r.exitCode}); nothing sent`;
  }

  async tool_preview_port(a) {
    const pv = await (await this.sandbox(a.sandbox_id)).createPreview(a.port, { expiresInSeconds: a.expires_in_seconds });
    return `${pv.url} (preview ${pv.id} of port ${pv.port}, until ${pv.expires_at}; anyone with the URL can open it)`;
  }

  async tool_snapshot_sandbox(a) {
    const n = await (await this.sandbox(a.sandbox_id)).snapshot({ name: a.name });
    return `snapshot ${n.id} of ${n.sandbox_id} (${n.bytes} bytes); create_sandbox with snapshot "${n.id}" starts a sandbox with its files`;
  }

  async tool_delete_sandbox(a) {
    const s = await this.sandbox(a.sandbox_id);
    const info = await s.delete();
    this.created.delete(a.sandbox_id);
    return `sandbox ${info.id} is ${info.status}; cost ${info.cost_usd} USD`;
  }

  /** End of session: delete what it created (but what was to be kept). */
  async close() {
    const doomed = this.keepAll ? [] : [...this.created.values()].filter((c) => !c.keep);
    await Promise.allSettled(doomed.map(async ({ sandbox }) => {
      try {
        await sandbox.delete();
        this.log(`deleted ${sandbox.id}`);
      } catch (e) {
        this.log(`could not delete ${sandbox.id}: ${e.message}`);
      }
    }));
    this.created.clear();
  }
}

/** Serve MCP on stdin/stdout until stdin closes or SIGTERM/SIGINT, then clean up and exit. */
export async function serveStdio(o = {}) {
  const { createInterface } = await import('node:readline');
  const out = process.stdout;
  const log = (s) => process.stderr.write(`sandboxd-mcp: ${s}\n`);
  const server = new McpServer({ ...o, log, send: (m) => out.write(`${JSON.stringify(m)}\n`) });
  const pending = new Set();
  let ending = null;
  // stdin closed: answer what was asked first; a signal: clean up now
  // (deleting a sandbox ends the commands still running in it)
  const end = (wait) => {
    if (!ending) ending = (async () => {
      if (wait) await Promise.allSettled([...pending]);
      await server.close();
      process.exit(0);
    })();
    return ending;
  };
  const rl = createInterface({ input: process.stdin, crlfDelay: Infinity });
  rl.on('line', (line) => {
    if (!line.trim()) return;
    let msg;
    try { msg = JSON.parse(line); } catch {
      server.send({ jsonrpc: '2.0', id: null, error: { code: -32700, message: 'parse error' } });
      return;
    }
    const p = server.handle(msg).finally(() => pending.delete(p));
    pending.add(p);
  });
  rl.on('close', () => end(true));
  out.on('error', () => end(false)); // the client is gone (EPIPE): clean up all the same
  process.on('SIGTERM', () => end(false));
  process.on('SIGINT', () => end(false));
  return server;
}
