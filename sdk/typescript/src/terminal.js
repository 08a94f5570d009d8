// A terminal in a sandbox over a WebSocket (docs/api.md, Terminal), for
// Node. The API key goes in the Authorization header, which the WHATWG
// WebSocket (Node 22's global one, browsers) cannot send, so this is a
// small RFC 6455 client over node:http's upgrade (imported when used, so
// the rest of the SDK still loads in a browser).

import { ConnectionError, errorFrom } from './errors.js';

const FRAME_MAX = 64 * 1024; // the daemon's cap on a client frame
const GUID = '258EAFA5-E914-47DA-95CA-C5AB0DC85B11';

export class Terminal {
  constructor(socket, head, crypto) {
    this.socket = socket;
    this.crypto = crypto;
    this.buf = Buffer.from(head ?? []);
    this.chunks = [];
    this.waiters = [];
    this.ended = false;
    this.text = [];
    /** The shell's exit code once it exited, else null. */
    this.exitCode = null;
    /** {type, message} when the terminal failed, else null. */
    this.error = null;
    this.closeCode = null;
    this.closeReason = '';
    socket.on('data', (d) => { this.buf = Buffer.concat([this.buf, d]); this.parse(); });
    socket.on('close', () => this.end());
    socket.on('error', () => this.end());
    if (this.buf.length) this.parse();
  }

  frame(op, payload) {
    const key = this.crypto.randomBytes(4);
    const n = payload.length;
    let head;
    if (n < 126) head = Buffer.from([0x80 | op, 0x80 | n]);
    else if (n <= 0xffff) { head = Buffer.alloc(4); head[0] = 0x80 | op; head[1] = 0x80 | 126; head.writeUInt16BE(n, 2); }
    else { head = Buffer.alloc(10); head[0] = 0x80 | op; head[1] = 0x80 | 127; head.writeBigUInt64BE(BigInt(n), 2); }
    const body = Buffer.alloc(n);
    for (let i = 0; i < n; i++) body[i] = payload[i] ^ key[i & 3];
    this.socket.write(Buffer.concat([head, key, body]));
  }

  /** Type `data` (a string is sent as UTF-8). */
  send(data) {
    const b = typeof data === 'string' ? Buffer.from(data, 'utf8') : Buffer.from(data);
    for (let i = 0; i < b.length; i += FRAME_MAX) this.frame(0x2, b.subarray(i, i + FRAME_MAX));
  }

  /** The terminal's new window size. */
  resize(rows, cols) {
    this.frame(0x1, Buffer.from(JSON.stringify({ type: 'resize', rows, cols })));
  }

  /** Close it: the shell is hung up. */
  close() {
    if (!this.ended) {
      try { this.frame(0x8, Buffer.from([0x03, 0xe8])); } catch { /* gone already */ }
    }
    this.socket.end();
    this.end();
  }

  end() {
    if (this.ended) return;
    this.ended = true;
    for (const w of this.waiters.splice(0)) w(null);
  }

  push(chunk) {
    const w = this.waiters.shift();
    if (w) w(chunk); else this.chunks.push(chunk);
  }

  parse() {
    for (;;) {
      const b = this.buf;
      if (b.length < 2) return;
      if (b[1] & 0x80 || b[0] & 0x70) { this.error = { type: 'api_error', message: 'the server sent a masked frame' }; this.close(); return; }
      let n = b[1] & 0x7f, off = 2;
      if (n === 126) { if (b.length < 4) return; n = b.readUInt16BE(2); off = 4; }
      else if (n === 127) { if (b.length < 10) return; n = Number(b.readBigUInt64BE(2)); off = 10; }
      if (b.length < off + n) return;
      const fin = (b[0] & 0x80) !== 0, op = b[0] & 0x0f, p = b.subarray(off, off + n);
      this.buf = b.subarray(off + n);
      if (op === 0x2 || (op === 0x0 && !this.text.length)) this.push(new Uint8Array(p));
      else if (op === 0x1 || op === 0x0) {
        this.text.push(Buffer.from(p));
        if (!fin) continue;
        let msg = null;
        try { msg = JSON.parse(Buffer.concat(this.text).toString('utf8')); } catch { /* not JSON */ }
        this.text = [];
        if (msg?.type === 'exit') this.exitCode = msg.exit_code;
        else if (msg?.type === 'error') this.error = msg.error;
      } else if (op === 0x8) {
        if (p.length >= 2) { this.closeCode = p.readUInt16BE(0); this.closeReason = p.subarray(2).toString('utf8'); }
        try { this.frame(0x8, p.subarray(0, 2)); } catch { /* gone */ }
        this.socket.end();
        this.end();
        return;
      } else if (op === 0x9) this.frame(0xa, p);
    }
  }

  /** The next screen bytes, or null once the terminal ended (then
   * exitCode, or error, says how). */
  recv() {
    if (this.chunks.length) return Promise.resolve(this.chunks.shift());
    if (this.ended) return Promise.resolve(null);
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  /** Screen text until `needle` appears (all of it); rejects after
   * timeoutMs or when the terminal ends first. */
  async readUntil(needle, timeoutMs = 30000) {
    const dec = new TextDecoder();
    let got = '';
    const deadline = Date.now() + timeoutMs;
    while (!got.includes(needle)) {
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`terminal: ${JSON.stringify(needle)} not seen in ${JSON.stringify(got.slice(-400))}`);
      let timer;
      const chunk = await Promise.race([this.recv(), new Promise((r) => { timer = setTimeout(() => r(undefined), left); })]);
      clearTimeout(timer);
      if (chunk === null) throw new Error(`terminal ended before ${JSON.stringify(needle)}: ${JSON.stringify(got.slice(-400))}`);
      if (chunk !== undefined) got += dec.decode(chunk, { stream: true });
    }
    return got;
  }
}

/** Open the WebSocket at `url` (http or https) with `apiKey`; an error
 * reply throws its error class, as any call. */
export async function openTerminal(url, apiKey) {
  const https = url.startsWith('https:');
  const mod = await import(https ? 'node:https' : 'node:http');
  const crypto = await import('node:crypto');
  const key = crypto.randomBytes(16).toString('base64');
  const headers = { Connection: 'Upgrade', Upgrade: 'websocket', 'Sec-WebSocket-Version': '13', 'Sec-WebSocket-Key': key };
  if (apiKey) headers.Authorization = `Bearer ${apiKey}`;
  return new Promise((resolve, reject) => {
    const req = mod.request(url, { headers });
    req.on('upgrade', (res, socket, head) => {
      const want = crypto.createHash('sha1').update(key + GUID).digest('base64');
      if (res.headers['sec-websocket-accept'] !== want) {
        socket.destroy();
        reject(new ConnectionError(`GET ${url}: bad Sec-WebSocket-Accept`, { body: '' }));
        return;
      }
      resolve(new Terminal(socket, head, crypto));
    });
    req.on('response', (res) => {
      const parts = [];
      res.on('data', (d) => parts.push(d));
      res.on('end', () => {
        const text = Buffer.concat(parts).toString('utf8');
        let parsed = null;
        try { parsed = JSON.parse(text); } catch { /* not JSON */ }
        const ra = Number(res.headers['retry-after']);
        const extra = { status: res.statusCode, requestId: res.headers['x-request-id'] ?? null, retryAfter: Number.isFinite(ra) ? ra : null, body: parsed ?? text };
        reject(errorFrom(parsed?.error ?? { message: `HTTP ${res.statusCode}: ${text.slice(0, 200)}` }, extra));
      });
    });
    req.on('error', (e) => reject(new ConnectionError(`cannot reach ${url}: ${e?.code ?? e?.message ?? e}`, { body: String(e) })));
    req.end();
  });
}
