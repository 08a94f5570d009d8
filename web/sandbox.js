// The dashboard's sandbox page (#/sandboxes/ID): status, cost, metadata,
// metrics, listening ports with preview links, files, background processes
// and a terminal (xterm.js, loaded on first use from /vendor/). Public API
// only, with the key of this tab; every value from the API is put in the
// page as text, and the guest's terminal output goes to xterm, which draws
// it as a terminal and never as HTML. docs/dashboard.md, "The sandbox page".

import { api, el, svg, usd, when, duration, SignedOut, KEY_STORE, signOut } from './app.js';

const $ = (sel) => document.querySelector(sel);
const REFRESH_MS = 10000;
const OUTPUT_MAX = 256 * 1024; // characters of a process's output shown

const view = { id: null, timer: null, term: null, ws: null, fit: null, termId: null, dir: '/home/sandbox' };

const sbxPath = (id, rest = '') => `/v1/sandboxes/${encodeURIComponent(id)}${rest}`;

// A section's message (an error, "not running") as text.
function note(sel, text, cls = 'muted') {
  const n = $(sel);
  n.className = cls;
  n.textContent = text || '';
  n.hidden = !text;
}

// ------------------------------------------------------------ the page

export async function showSandbox(id) {
  if (view.id !== id) closeSandbox();
  view.id = id;
  document.body.dataset.view = 'sandbox';
  $('#sandbox').hidden = false;
  $('#sbx-id').textContent = id;
  await loadSandbox(true);
  clearInterval(view.timer);
  view.timer = setInterval(() => { if (view.id === id) loadSandbox(false); }, REFRESH_MS);
}

export function closeSandbox() {
  clearInterval(view.timer);
  view.timer = null;
  closeTerminal('closed');
  view.id = null;
  delete document.body.dataset.view;
  $('#sandbox').hidden = true;
}

async function loadSandbox(first) {
  const id = view.id;
  let s;
  try {
    s = await api('GET', sbxPath(id));
  } catch (e) {
    if (e instanceof SignedOut) return;
    $('#sbx-body').hidden = true;
    note('#sbx-missing', e.status === 404
      ? `No sandbox ${id} in this account (not found).`
      : `${id}: ${e.message}`, 'error');
    $('#sandbox').dataset.state = e.status === 404 ? 'not-found' : 'error';
    return;
  }
  if (view.id !== id) return;
  note('#sbx-missing', '');
  $('#sbx-body').hidden = false;
  $('#sandbox').dataset.state = s.status;
  facts(s);
  $('#sbx-pause').hidden = s.status !== 'running';
  $('#sbx-resume').hidden = s.status !== 'paused';
  metadata(s.metadata || {});
  const running = s.status === 'running';
  for (const sel of ['#sbx-files-form', '#sbx-term-open', '#sbx-procs-table', '#sbx-ports-find'])
    $(sel).hidden = !running;
  if (!running) {
    $('#sbx-ports').hidden = true;
    note('#sbx-ports-note', s.status === 'paused' ? 'The sandbox is paused: nothing answers until it is resumed.'
      : `The sandbox is ${s.status}: nothing listens.`);
  }
  await Promise.all([loadMetrics(running), loadProcesses(running), first && running ? listDir(view.dir) : null]);
  if (!running) {
    note('#sbx-files-note', s.status === 'paused' ? 'The sandbox is paused: resume it to see its files.'
      : `The sandbox is ${s.status}: its files are gone.`);
    $('#sbx-files tbody').replaceChildren();
  }
  $('#sandbox').dataset.loaded = String(Date.now());
}

function facts(s) {
  const now = Date.now();
  const rows = [
    ['status', s.status],
    ['size', s.size],
    ['created', when(s.created_at)],
    [s.ended_at ? 'ended' : 'expires', s.ended_at ? when(s.ended_at)
      : `${when(s.expires_at)} (in ${duration(Date.parse(s.expires_at) - now)})`],
    [s.ended_at ? 'ran for' : 'age', duration((s.ended_at ? Date.parse(s.ended_at) : now) - Date.parse(s.created_at))],
    [s.ended_at ? 'cost' : 'cost so far', usd(s.cost_micro_usd)],
  ];
  if (s.status === 'paused')
    rows.push(['paused since', `${when(s.paused_at)} (${duration(now - Date.parse(s.paused_at))})`],
      ['kept on the host', typeof s.paused_bytes === 'number' ? `${(s.paused_bytes / 2 ** 20).toFixed(1)} MiB` : '–']);
  $('#sbx-facts').replaceChildren(...rows.flatMap(([k, v]) =>
    [el('dt', {}, k), el('dd', { 'data-fact': k.replace(/ /g, '-') }, v ?? '–')]));
}

function metadata(m) {
  const pairs = Object.entries(m);
  $('#sbx-meta tbody').replaceChildren(...pairs.map(([k, v]) =>
    el('tr', {}, el('td', { class: 'id' }, k), el('td', { class: 'id' }, v))));
  $('#sbx-meta').hidden = !pairs.length;
  note('#sbx-meta-note', pairs.length ? '' : 'No labels (set them with "metadata" at create or by update).');
}

// ------------------------------------------------------------ metrics

async function loadMetrics(running) {
  const box = $('#sbx-metrics');
  if (!running) {
    box.replaceChildren();
    return note('#sbx-metrics-note', 'Not running: no metrics.');
  }
  let m;
  try {
    m = await api('GET', sbxPath(view.id, '/metrics'));
  } catch (e) {
    if (!(e instanceof SignedOut)) note('#sbx-metrics-note', e.message, 'error');
    return;
  }
  const samples = m.samples || [];
  if (!m.interval_ms) {
    box.replaceChildren();
    return note('#sbx-metrics-note', 'Metrics sampling is off on this server (metrics_interval_ms is 0).');
  }
  note('#sbx-metrics-note', samples.length
    ? `${samples.length} samples, one every ${m.interval_ms / 1000} s; CPU and disk as the host measured them, memory as the guest reported it.`
    : `No sample yet (the first comes ${m.interval_ms / 1000} s after the guest runs).`);
  const last = samples.slice(-120);
  box.replaceChildren(
    spark('CPU (cores, host-observed)', last.map((x) => x.cpu_cores), (v) => v.toFixed(2)),
    spark('memory (MiB, guest-reported)', last.map((x) => x.memory_used_mib), (v) => String(Math.round(v))),
    spark('disk (MiB, host-observed)', last.map((x) => x.disk_used_mib), (v) => String(Math.round(v))));
}

// One line of the last samples (nulls skipped) and the latest value.
function spark(label, values, fmt) {
  const W = 260, H = 60;
  const known = values.filter((v) => typeof v === 'number');
  const max = Math.max(1e-9, ...known);
  const pts = [];
  values.forEach((v, i) => {
    if (typeof v !== 'number') return;
    const x = values.length > 1 ? (i * (W - 4)) / (values.length - 1) + 2 : W / 2;
    pts.push(`${x.toFixed(1)},${(H - 4 - ((H - 8) * v) / max).toFixed(1)}`);
  });
  const chart = svg('svg', { viewBox: `0 0 ${W} ${H}`, class: 'spark', role: 'img', 'aria-label': label });
  chart.append(svg('polyline', { points: pts.join(' ') }));
  const latest = known.length ? fmt(known[known.length - 1]) : '–';
  return el('figure', { class: 'metric' }, el('figcaption', {}, `${label}: `, el('strong', {}, latest)), chart);
}

// -------------------------------------------------------------- files

async function listDir(path) {
  let page;
  try {
    page = await api('GET', sbxPath(view.id, `/files?${new URLSearchParams({ path, list: 'true', limit: '200' })}`));
  } catch (e) {
    if (!(e instanceof SignedOut)) note('#sbx-files-note', `${path}: ${e.message}`, 'error');
    return;
  }
  view.dir = page.path || path;
  $('#sbx-path').value = view.dir;
  const join = (name) => `${view.dir.replace(/\/+$/, '')}/${name}`;
  const rows = [];
  if (view.dir !== '/') {
    const up = view.dir.replace(/\/+$/, '').replace(/\/[^/]*$/, '') || '/';
    rows.push(el('tr', { 'data-name': '..' }, el('td', {}, el('button', { type: 'button', class: 'link', onclick: () => listDir(up) }, '..')),
      el('td', {}, 'dir'), el('td', {}), el('td', {}), el('td', {}), el('td', {})));
  }
  for (const f of page.data || []) {
    const open = f.type === 'dir'
      ? el('button', { type: 'button', class: 'link', onclick: () => listDir(join(f.name)) }, f.name)
      : el('span', { class: 'id' }, f.name);
    const get = f.type === 'file'
      ? el('button', { type: 'button', class: 'download', onclick: () => download(join(f.name), f.name) }, 'Download')
      : '';
    rows.push(el('tr', { 'data-name': f.name }, el('td', {}, open), el('td', {}, f.type), el('td', {}, f.type === 'file' ? String(f.size) : ''),
      el('td', { class: 'id' }, f.mode ?? ''), el('td', {}, when(f.mtime)), el('td', {}, get)));
  }
  $('#sbx-files tbody').replaceChildren(...rows);
  note('#sbx-files-note', page.has_more ? 'The first 200 entries (sorted by name) are shown.' : (page.data?.length ? '' : 'Empty directory.'));
}

// A download needs the key, so it is fetched here and handed to the
// browser as a blob (its bytes are never put in the page).
async function download(path, name) {
  const key = sessionStorage.getItem(KEY_STORE);
  if (!key) return;
  try {
    const res = await fetch(sbxPath(view.id, `/files?${new URLSearchParams({ path })}`),
      { headers: { Authorization: `Bearer ${key}` }, cache: 'no-store', credentials: 'omit' });
    if (res.status === 401) return signOut('The service refused this key (revoked or unknown): you are signed out.');
    if (!res.ok) {
      const j = await res.json().catch(() => null);
      throw new Error(j?.error?.message || `HTTP ${res.status}`);
    }
    const url = URL.createObjectURL(await res.blob());
    const a = el('a', { href: url, download: name, hidden: true });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 60000);
    note('#sbx-files-note', '');
  } catch (e) {
    note('#sbx-files-note', `${path}: ${e.message}`, 'error');
  }
}

// -------------------------------------------------------------- ports

const LISTEN = '0A'; // /proc/net/tcp's st of a listening socket
const GUEST_PROXY = 3128; // the guest agent's own egress proxy (docs/network.md)

// The listening TCP sockets of /proc/net/tcp and tcp6 text: [{port, addr}],
// one per port and address, by port. The text is the guest's: only
// numbers are taken from it.
export function listeningPorts(text) {
  const seen = new Map();
  for (const line of text.split('\n')) {
    const f = line.trim().split(/\s+/);
    if (f.length < 4 || f[3] !== LISTEN || !/^[0-9A-F]+:[0-9A-F]{4}$/.test(f[1])) continue;
    const [hex, p] = f[1].split(':');
    const port = parseInt(p, 16);
    const addr = hex === '0100007F' ? '127.0.0.1' : hex === '00000000' ? '0.0.0.0'
      : /^0{32}$/.test(hex) ? '::' : hex === '00000000000000000000000001000000' ? '::1' : 'another address';
    if (port > 0) seen.set(`${port} ${addr}`, { port, addr });
  }
  return [...seen.values()].sort((a, b) => a.port - b.port || a.addr.localeCompare(b.addr));
}

async function findPorts() {
  const id = view.id;
  note('#sbx-ports-note', 'looking…');
  let r;
  try {
    r = await api('POST', sbxPath(id, '/exec'),
      { command: 'cat /proc/net/tcp /proc/net/tcp6 2>/dev/null', timeout_ms: 30000 });
  } catch (e) {
    if (!(e instanceof SignedOut)) note('#sbx-ports-note', e.message, 'error');
    return;
  }
  if (view.id !== id) return;
  const ports = listeningPorts(r.stdout || '');
  // the proxy reaches the guest's 127.0.0.1 (so 0.0.0.0, and :: unless v6-only)
  const rows = ports.map(({ port, addr }) => {
    const proxy = port === GUEST_PROXY && addr === '127.0.0.1';
    const reach = !proxy && (addr === '127.0.0.1' || addr === '0.0.0.0' || addr === '::');
    const cell = el('td', {});
    if (reach) cell.append(el('button', { type: 'button', class: 'preview', onclick: () => previewLink(port, cell) }, 'Preview link'));
    return el('tr', { 'data-port': String(port) }, el('td', { class: 'id' }, String(port)), el('td', { class: 'id' }, addr),
      el('td', {}, proxy ? 'no: the sandbox\'s network proxy' : reach ? 'yes' : 'no (not on 127.0.0.1)'), cell);
  });
  $('#sbx-ports tbody').replaceChildren(...rows);
  $('#sbx-ports').hidden = !rows.length;
  note('#sbx-ports-note', rows.length ? `${rows.length} listening` : 'Nothing listens on a TCP port.');
}

// A preview of the port for an hour, shown as a link (opened by the user:
// no pop-up).
async function previewLink(port, cell) {
  let pv;
  try {
    pv = await api('POST', sbxPath(view.id, `/ports/${port}/previews`), { expires_in_seconds: 3600 });
  } catch (e) {
    if (!(e instanceof SignedOut)) note('#sbx-ports-note', `port ${port}: ${e.message}`, 'error');
    return;
  }
  cell.replaceChildren(el('a', { href: pv.url, target: '_blank', rel: 'noopener noreferrer', class: 'preview-url' }, 'open ↗'),
    el('span', { class: 'muted' }, ` until ${when(pv.expires_at)}`));
}

// ---------------------------------------------------------- processes

async function loadProcesses(running) {
  if (!running) return $('#sbx-procs tbody').replaceChildren();
  let list;
  try {
    list = await api('GET', sbxPath(view.id, '/processes'));
  } catch (e) {
    if (!(e instanceof SignedOut)) note('#sbx-procs-note', e.message, 'error');
    return;
  }
  const rows = (list.data || []).map((p) => el('tr', { 'data-pid': p.pid },
    el('td', { class: 'id' }, p.pid), el('td', { class: 'id' }, p.command), el('td', { class: `status-${p.status}` }, p.status),
    el('td', {}, p.exit_code ?? '–'), el('td', {}, when(p.started_at)),
    el('td', {}, el('button', { type: 'button', class: 'output', onclick: () => showOutput(p.pid) }, 'Output'))));
  const body = $('#sbx-procs tbody');
  if (!(rows.length === body.children.length && rows.every((r, i) => r.isEqualNode(body.children[i]))))
    body.replaceChildren(...rows);
  note('#sbx-procs-note', rows.length ? '' : 'No background process (POST /v1/sandboxes/{id}/processes starts one).');
}

// Read both streams from offset 0 until all is read (or OUTPUT_MAX).
async function showOutput(pid) {
  const out = { stdout: '', stderr: '' };
  const off = { stdout: 0, stderr: 0 };
  let o;
  $('#sbx-output').hidden = false;
  $('#sbx-output-pid').textContent = String(pid);
  try {
    for (let round = 0; round < 64; round++) {
      o = await api('GET', sbxPath(view.id, `/processes/${encodeURIComponent(pid)}/output?stdout_offset=${off.stdout}&stderr_offset=${off.stderr}`));
      let more = false;
      for (const k of ['stdout', 'stderr']) {
        if (out[k].length < OUTPUT_MAX) out[k] += o[k] ?? '';
        more ||= o[`${k}_next_offset`] < o[`${k}_total`];
        off[k] = o[`${k}_next_offset`] ?? off[k];
      }
      if (!more || (out.stdout.length >= OUTPUT_MAX && out.stderr.length >= OUTPUT_MAX)) break;
    }
  } catch (e) {
    if (!(e instanceof SignedOut)) note('#sbx-procs-note', e.message, 'error');
    return;
  }
  $('#sbx-output-status').textContent = `${o.status}${o.exit_code !== null && o.exit_code !== undefined ? `, exit code ${o.exit_code}` : ''}` +
    `${o.stdout_lost_bytes || o.stderr_lost_bytes ? ` (${o.stdout_lost_bytes + o.stderr_lost_bytes} bytes were overwritten before they were read)` : ''}`;
  $('#sbx-output-stdout').textContent = out.stdout;
  $('#sbx-output-stderr').textContent = out.stderr;
}

// ----------------------------------------------------------- terminal

function termStatus(state, text) {
  const s = $('#sbx-term-status');
  s.dataset.state = state;
  s.textContent = text;
  $('#sbx-term-open').disabled = state === 'open' || state === 'opening';
  $('#sbx-term-close').hidden = !(state === 'open' || state === 'opening');
}

async function openTerminal() {
  const key = sessionStorage.getItem(KEY_STORE);
  if (!key || !view.id || view.ws) return;
  termStatus('opening', 'opening…');
  // loaded on first use: 340 KB the rest of the dashboard does not need
  const [{ installStyleShim }, { Terminal }, { FitAddon }] = await Promise.all([
    import('./xterm-csp.js'), import('./vendor/xterm.mjs'), import('./vendor/addon-fit.mjs')]);
  installStyleShim();
  const box = $('#sbx-term');
  box.replaceChildren();
  const term = new Terminal({ cursorBlink: true, scrollback: 2000, fontSize: 14, lineHeight: 1.2 });
  const fit = new FitAddon();
  term.loadAddon(fit);
  term.open(box);
  fit.fit();
  view.term = term;
  view.fit = fit;
  window.__sbxTerminal = term; // for tests/browser: its buffer, not the DOM

  view.termId = null;
  connectTerminal(term, null);
  const enc = new TextEncoder();
  const send = (data) => { if (view.ws?.readyState === WebSocket.OPEN) view.ws.send(data); };
  term.onData((d) => send(enc.encode(d)));
  term.onBinary((d) => send(Uint8Array.from(d, (c) => c.charCodeAt(0) & 0xff)));
  term.onResize(({ rows, cols }) => send(JSON.stringify({ type: 'resize', rows, cols })));
}

// One connection of the terminal: a new one, or (attach: its id) the same
// shell again after a drop. A connection that drops without a close frame
// (1006) while the shell runs is reattached, retried until the server's
// grace is over (docs/api.md "Terminal": 409 until the server has seen the
// drop, 404 once the grace is over).
function connectTerminal(term, attach, until = 0) {
  const key = sessionStorage.getItem(KEY_STORE);
  if (!key || view.term !== term) return;
  const proto = location.protocol === 'https:' ? 'wss:' : 'ws:';
  const q = new URLSearchParams({ rows: String(term.rows), cols: String(term.cols) });
  if (attach) q.set('attach', attach);
  // The key as a subprotocol entry: never in the URL (docs/api.md, "Terminal")
  const ws = new WebSocket(`${proto}//${location.host}${sbxPath(view.id, '/terminal')}?${q}`,
    ['sandboxd.v1', `bearer.${key}`]);
  ws.binaryType = 'arraybuffer';
  view.ws = ws;
  let opened = false;
  let grace = 0;
  ws.onopen = () => {
    opened = true;
    termStatus('open', attach ? 'connected (reattached)' : 'connected');
    term.focus();
  };
  ws.onmessage = (ev) => {
    if (typeof ev.data !== 'string') return term.write(new Uint8Array(ev.data));
    let m = null;
    try { m = JSON.parse(ev.data); } catch { /* not ours */ }
    if (m?.type === 'terminal') { view.termId = m.id; grace = m.reconnect_grace_ms; }
    else if (m?.type === 'exit') termStatus('exited', `the shell exited with ${m.exit_code}`);
    else if (m?.type === 'error') termStatus('error', `${m.error?.type ?? 'error'}: ${m.error?.message ?? ''}`);
  };
  ws.onclose = (ev) => {
    if (view.ws !== ws) return;
    view.ws = null;
    const st = $('#sbx-term-status').dataset.state;
    const retry = (deadline) => {
      termStatus('opening', 'the connection dropped; reattaching…');
      setTimeout(() => { if (view.term === term && !view.ws) connectTerminal(term, view.termId, deadline); }, 1000);
    };
    if (opened && ev.code === 1006 && st === 'open' && view.termId && grace > 0) return retry(Date.now() + grace);
    if (!opened && attach && Date.now() < until) return retry(until);
    if (st === 'opening') termStatus('error', attach
      ? 'the terminal could not be reattached (its grace is over): open a new one'
      : 'the terminal could not be opened (not running, or too many terminals open)');
    else if (st === 'open') termStatus('closed', `closed${ev.reason ? `: ${ev.reason}` : ''} (${ev.code})`);
  };
}

function closeTerminal(text) {
  const ws = view.ws;
  view.ws = null;
  if (ws) ws.close(1000);
  view.term?.dispose();
  view.term = null;
  view.fit = null;
  window.__sbxTerminal = undefined;
  if (text) termStatus('closed', text);
}

// ------------------------------------------------------ pause, resume

// Pause or resume (seconds: the guest's memory is written or read back),
// then the page again.
async function pauseResume(what) {
  const id = view.id;
  const buttons = ['#sbx-pause', '#sbx-resume'].map((sel) => $(sel));
  buttons.forEach((b) => { b.disabled = true; });
  note('#sbx-state-note', what === 'pause' ? 'pausing (the guest\'s memory is saved)…' : 'resuming…');
  try {
    if (what === 'pause') closeTerminal('the sandbox was paused');
    await api('POST', sbxPath(id, `/${what}`));
    note('#sbx-state-note', '');
  } catch (e) {
    if (!(e instanceof SignedOut)) note('#sbx-state-note', `${what}: ${e.message}`, 'error');
  } finally {
    buttons.forEach((b) => { b.disabled = false; });
  }
  if (view.id === id) await loadSandbox(what === 'resume');
}

// ------------------------------------------------------------- events

export function startSandboxPage() {
  $('#sbx-files-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const p = $('#sbx-path').value.trim();
    if (p) listDir(p);
  });
  $('#sbx-term-open').addEventListener('click', () => openTerminal().catch((e) => termStatus('error', e.message)));
  $('#sbx-term-close').addEventListener('click', () => closeTerminal('closed'));
  $('#sbx-ports-find').addEventListener('click', () => findPorts());
  $('#sbx-pause').addEventListener('click', () => pauseResume('pause'));
  $('#sbx-resume').addEventListener('click', () => pauseResume('resume'));
  $('#sbx-reload').addEventListener('click', () => view.id && loadSandbox(false));
  window.addEventListener('resize', () => view.fit?.fit());
}
