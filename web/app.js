// The sandboxd dashboard: plain DOM, public API only, the user's key in
// sessionStorage. Every value from the API is put in the page as text
// (textContent, text nodes, attributes): a sandbox's output is hostile.
// docs/dashboard.md. The sandbox page is sandbox.js's.

import { showSandbox, closeSandbox, startSandboxPage } from './sandbox.js';

export const KEY_STORE = 'sandboxd.api_key';
const REFRESH_MS = 15000;
const $ = (sel) => document.querySelector(sel);

export class SignedOut extends Error {}

// el('td', {class: 'x'}, 'text', child...): strings become text nodes.
export function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c ?? '')));
  return e;
}

export function svg(tag, attrs = {}, text) {
  const e = document.createElementNS('http://www.w3.org/2000/svg', tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  if (text !== undefined) e.textContent = text;
  return e;
}

function notice(msg) {
  const n = $('#notice');
  n.textContent = msg || '';
  n.hidden = !msg;
}

// ------------------------------------------------------------------ API

export async function api(method, path, body) {
  const key = sessionStorage.getItem(KEY_STORE);
  if (!key) throw new SignedOut();
  const opts = { method, headers: { Authorization: `Bearer ${key}` }, cache: 'no-store', credentials: 'omit' };
  if (body !== undefined) {
    opts.headers['Content-Type'] = 'application/json';
    opts.body = JSON.stringify(body);
  }
  const res = await fetch(path, opts);
  let data = null;
  try { data = await res.json(); } catch { /* not JSON */ }
  if (res.status === 401) {
    signOut('The service refused this key (revoked or unknown): you are signed out.');
    throw new SignedOut();
  }
  if (!res.ok) {
    const err = new Error(data?.error?.message || `HTTP ${res.status}`);
    err.status = res.status;
    err.type = data?.error?.type;
    throw err;
  }
  return data;
}

// ------------------------------------------------------------- formats

// Exact dollars from micro-dollars: 6 places, trailing zeros cut to 2.
export const usd = (micro) => {
  if (typeof micro !== 'number') return '–';
  const neg = micro < 0;
  const m = Math.abs(micro);
  const frac = String(m % 1e6).padStart(6, '0').replace(/0{1,4}$/, '');
  return `${neg ? '-' : ''}$${Math.floor(m / 1e6)}.${frac}`;
};

export function duration(ms) {
  if (ms < 0) ms = 0;
  const s = Math.floor(ms / 1000);
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${s % 60} s`;
  const h = Math.floor(m / 60);
  if (h < 48) return `${h} h ${m % 60} min`;
  return `${Math.floor(h / 24)} d ${h % 24} h`;
}

// Times in UTC, 24-hour, ISO-like ("2026-08-01 14:05:09 UTC"), as the
// chart's buckets (whole UTC hours and days) and the API.
const isoUtc = (iso) => {
  const d = iso ? new Date(iso) : null;
  return d && !Number.isNaN(d.getTime()) ? d.toISOString() : null;
};
export const when = (iso) => {
  const s = isoUtc(iso);
  return s ? `${s.slice(0, 10)} ${s.slice(11, 19)} UTC` : '–';
};
const shortTime = (iso, hourly) => {
  const s = isoUtc(iso) || '';
  return hourly ? `${s.slice(11, 13)}:00` : s.slice(5, 10);
};

// A sandbox id opens its page (#/sandboxes/ID: the key is never in the URL).
const sandboxLink = (id) => el('a', { href: `#/sandboxes/${encodeURIComponent(id)}`, class: 'sandbox-link' }, id);

function statusCell(status) {
  return el('td', { class: `status-${status}` }, status);
}

// ---------------------------------------------------------- sign in/out

export function signOut(msg) {
  closeSandbox();
  sessionStorage.removeItem(KEY_STORE);
  clearInterval(state.timer);
  state.timer = null;
  $('#app').hidden = true;
  $('#who').hidden = true;
  $('#signin').hidden = false;
  $('#new-secret').hidden = true;
  $('#new-secret-value').textContent = '';
  notice(msg);
}

async function signIn(key) {
  sessionStorage.setItem(KEY_STORE, key);
  try {
    await api('GET', '/v1/usage');
  } catch (e) {
    if (!(e instanceof SignedOut)) {
      sessionStorage.removeItem(KEY_STORE);
      $('#signin-error').textContent = e.message;
    } else {
      $('#signin-error').textContent = 'This key was refused.';
    }
    return;
  }
  $('#signin-error').textContent = '';
  notice('');
  showApp();
  route();
}

function showApp() {
  const key = sessionStorage.getItem(KEY_STORE);
  $('#signin').hidden = true;
  $('#app').hidden = false;
  $('#who').hidden = false;
  $('#who-key').textContent = `key ${key.slice(0, 14)}…`;
  refresh();
  clearInterval(state.timer);
  state.timer = setInterval(refresh, REFRESH_MS);
}

// ----------------------------------------------------------------- views

const state = { timer: null, loading: null };

function fill(section, rows) {
  const body = $(`${section} tbody`);
  // Rows that did not change stay where they are: the refresh every
  // REFRESH_MS must not swap a button out from under a click.
  const same = rows.length === body.children.length &&
    rows.every((r, i) => r.isEqualNode(body.children[i]));
  if (!same) body.replaceChildren(...rows);
  const empty = $(`${section} .empty`);
  if (empty) empty.hidden = rows.length > 0;
}

function sectionError(section, e) {
  fill(section, [el('tr', {}, el('td', { colspan: 7, class: 'error' }, e.message))]);
}

// A confirm step for what cannot be undone: resolves true on OK.
function confirmStep(text, okLabel) {
  const d = $('#confirm');
  $('#confirm-text').textContent = text;
  $('#confirm-ok').textContent = okLabel;
  d.returnValue = '';
  d.showModal();
  return new Promise((resolve) => d.addEventListener('close', () => resolve(d.returnValue === 'ok'), { once: true }));
}

async function loadBalanceAndUsage() {
  const period = $('#period').value;
  const hourly = period.endsWith('h');
  const hours = hourly ? parseInt(period, 10) : parseInt(period, 10) * 24;
  const to = new Date();
  const from = new Date(to.getTime() - hours * 3600 * 1000);
  const q = new URLSearchParams({ granularity: hourly ? 'hour' : 'day', from: from.toISOString().replace(/\.\d+Z$/, 'Z'), to: to.toISOString().replace(/\.\d+Z$/, 'Z') });
  const u = await api('GET', `/v1/usage?${q}`);
  $('#bal-balance').textContent = usd(u.balance_micro_usd);
  $('#bal-reserved').textContent = usd(u.reserved_micro_usd);
  $('#bal-available').textContent = usd(u.available_micro_usd);
  $('#bal-running').textContent = `${u.sandboxes?.running ?? '–'} / ${u.sandboxes?.limit ?? '–'}`;
  const sizes = Object.entries(u.by_size || {});
  const inSandboxes = sizes.reduce((a, [, s]) => a + (s.cost_micro_usd || 0), 0);
  $('#usage-summary').textContent =
    `${usd(u.consumed_micro_usd)} consumed from ${when(u.period?.from)} to ${when(u.period?.to)} ` +
    `(whole UTC ${hourly ? 'hours' : 'days'}): ${usd(inSandboxes)} in sandboxes (chart and sizes below), ` +
    `${usd(u.consumed_micro_usd - inSandboxes)} in one-shot executions.`;
  drawChart(u.buckets || [], hourly);
  fill('#by-size', sizes.map(([name, s]) =>
    el('tr', { 'data-size': name }, el('td', {}, name), el('td', {}, duration((s.seconds || 0) * 1000)), el('td', {}, usd(s.cost_micro_usd)))));
}

// Bars of sandbox cost per bucket (hour or day), in the SVG's own units
// (one per CSS pixel of the chart's width); each bar's <title> says more.
function drawChart(buckets, hourly) {
  const chart = $('#chart');
  const W = Math.max(400, chart.clientWidth || 900), H = 220, L = 72, B = 24, T = 10;
  chart.setAttribute('viewBox', `0 0 ${W} ${H}`);
  chart.setAttribute('data-total', String(buckets.reduce((a, b) => a + (b.cost_micro_usd || 0), 0)));
  chart.setAttribute('data-buckets', String(buckets.length));
  const max = Math.max(1, ...buckets.map((b) => b.cost_micro_usd || 0));
  const bw = (W - L - 4) / Math.max(1, buckets.length);
  const parts = [
    svg('line', { class: 'axis', x1: L, y1: H - B, x2: W, y2: H - B }),
    svg('text', { x: L - 6, y: T + 8, 'text-anchor': 'end' }, usd(max)),
    svg('text', { x: L - 6, y: H - B, 'text-anchor': 'end' }, '$0'),
  ];
  const every = Math.max(1, Math.ceil(buckets.length / Math.floor((W - L) / 60)));
  buckets.forEach((b, i) => {
    const v = b.cost_micro_usd || 0;
    const h = v > 0 ? Math.max(2, ((H - B - T) * v) / max) : 0;
    const x = L + i * bw;
    const bar = svg('rect', { class: 'bar', x: x + 1, y: H - B - h, width: Math.max(1, bw - 2), height: h, 'data-cost': v });
    bar.append(svg('title', {}, `${when(b.start)}: ${usd(v)}, ${duration((b.seconds || 0) * 1000)} of sandbox time`));
    parts.push(bar);
    if (i % every === 0) parts.push(svg('text', { x: x + bw / 2, y: H - 6, 'text-anchor': 'middle' }, shortTime(b.start, hourly)));
  });
  chart.replaceChildren(...parts);
}

async function loadRunning() {
  const list = await api('GET', '/v1/sandboxes?status=running&limit=100');
  const now = Date.now();
  fill('#running', list.data.map((s) => {
    const minutes = el('input', { type: 'number', min: 1, max: 1440, value: 15, 'aria-label': 'minutes from now' });
    const extend = el('button', { type: 'button', class: 'extend', onclick: () => act(`extend ${s.id}`, async () => {
      const m = parseInt(minutes.value, 10);
      const r = await api('POST', `/v1/sandboxes/${encodeURIComponent(s.id)}/extend`, { timeout_minutes: m });
      // extend sets the expiry to now + m and never shortens it
      if (r.expires_at === s.expires_at)
        return `${s.id} already expires at ${when(r.expires_at)}, later than ${m} min from now: nothing changed (extend sets the expiry to now + the minutes given, never earlier).`;
      return '';
    }) }, 'Extend');
    const del = el('button', { type: 'button', class: 'delete danger', onclick: async () => {
      if (await confirmStep(`Delete sandbox ${s.id}? It stops now, its files are lost, and it is billed up to now.`, 'Delete'))
        act(`delete ${s.id}`, () => api('DELETE', `/v1/sandboxes/${encodeURIComponent(s.id)}`));
    } }, 'Delete');
    return el('tr', { 'data-id': s.id },
      el('td', { class: 'id' }, sandboxLink(s.id)), el('td', {}, s.size),
      el('td', {}, duration(now - Date.parse(s.created_at))),
      el('td', { class: 'expires', title: s.expires_at }, `${when(s.expires_at)} (in ${duration(Date.parse(s.expires_at) - now)})`),
      el('td', { class: 'cost' }, usd(s.cost_micro_usd)),
      el('td', {}, minutes, ' min ', extend, ' ', del));
  }));
}

// The storage a paused sandbox has run up in its current pause, as the
// service bills it at resume or end (docs/api.md, "Pause and resume"):
// ceil(bytes x paused ms x price per GiB-hour / (2^30 x 3 600 000)).
export function pausedStorageMicro(bytes, pausedMs, microPerGibHour) {
  if (!(bytes > 0 && pausedMs > 0 && microPerGibHour > 0)) return 0;
  return Math.ceil((bytes * pausedMs * microPerGibHour) / (2 ** 30 * 3600000));
}

const mib = (bytes) => (typeof bytes === 'number' ? `${(bytes / 2 ** 20).toFixed(1)} MiB` : '–');

async function loadPaused() {
  state.limits ??= await api('GET', '/v1/limits');
  const price = Math.round(Number(state.limits.paused_storage_usd_per_gib_hour || 0) * 1e6);
  const ttlMs = (state.limits.paused_ttl_minutes || 0) * 60000;
  $('#paused-price').textContent = `${usd(price)} per GiB-hour, kept up to ${duration(ttlMs)}`;
  const list = await api('GET', '/v1/sandboxes?status=paused&limit=100');
  const now = Date.now();
  fill('#paused', list.data.map((s) => {
    const since = Date.parse(s.paused_at);
    const resume = el('button', { type: 'button', class: 'resume', onclick: () => act(`resume ${s.id}`,
      () => api('POST', `/v1/sandboxes/${encodeURIComponent(s.id)}/resume`)) }, 'Resume');
    const del = el('button', { type: 'button', class: 'delete danger', onclick: async () => {
      if (await confirmStep(`Delete paused sandbox ${s.id}? Its memory and files are lost; its storage is billed up to now.`, 'Delete'))
        act(`delete ${s.id}`, () => api('DELETE', `/v1/sandboxes/${encodeURIComponent(s.id)}`));
    } }, 'Delete');
    return el('tr', { 'data-id': s.id },
      el('td', { class: 'id' }, sandboxLink(s.id)), el('td', {}, s.size),
      el('td', { title: s.paused_at }, `${when(s.paused_at)} (${duration(now - since)})`),
      el('td', { class: 'bytes' }, mib(s.paused_bytes)),
      el('td', { class: 'cost' }, usd(pausedStorageMicro(s.paused_bytes, now - since, price))),
      el('td', {}, ttlMs ? when(new Date(since + ttlMs).toISOString()) : '–'),
      el('td', {}, resume, ' ', del));
  }));
}

async function loadSnapshots() {
  state.limits ??= await api('GET', '/v1/limits');
  const price = Math.round(Number(state.limits.snapshot_storage_usd_per_gib_hour || 0) * 1e6);
  $('#snapshots-price').textContent = `${usd(price)} per GiB-hour; at most ${state.limits.snapshots ?? '–'} ` +
    `snapshots and ${mib(state.limits.snapshot_bytes)} in all`;
  const list = await api('GET', '/v1/snapshots');
  fill('#snapshots', list.data.map((n) => {
    const del = el('button', { type: 'button', class: 'delete danger', onclick: async () => {
      if (await confirmStep(`Delete snapshot ${n.id}? Sandboxes can no longer start from it; its storage is billed up to now.`, 'Delete'))
        act(`delete ${n.id}`, () => api('DELETE', `/v1/snapshots/${encodeURIComponent(n.id)}`));
    } }, 'Delete');
    return el('tr', { 'data-id': n.id },
      el('td', { class: 'id' }, n.id), el('td', {}, n.name || '–'), el('td', { class: 'id' }, sandboxLink(n.sandbox_id)),
      el('td', { class: 'bytes' }, mib(n.bytes)), el('td', {}, when(n.created_at)),
      el('td', { class: 'cost' }, usd(n.cost_micro_usd)), el('td', {}, del));
  }));
}

async function loadRecent() {
  const list = await api('GET', '/v1/sandboxes?limit=20');
  fill('#recent', list.data.map((s) => el('tr', { 'data-id': s.id },
    el('td', { class: 'id' }, sandboxLink(s.id)), statusCell(s.status), el('td', {}, s.size),
    el('td', {}, when(s.created_at)), el('td', {}, when(s.ended_at)), el('td', { class: 'cost' }, usd(s.cost_micro_usd)))));
}

async function loadExecutions() {
  let list;
  try {
    list = await api('GET', '/v1/sandbox/executions?limit=20');
  } catch (e) {
    if (e.status === 403) return fill('#executions', [el('tr', {}, el('td', { colspan: 7, class: 'muted' }, 'This key lacks the sandboxes scope.'))]);
    throw e;
  }
  fill('#executions', list.data.map((x) => el('tr', { 'data-id': x.id },
    el('td', { class: 'id' }, x.id), statusCell(x.status),
    el('td', { class: `exit${x.exit_code ? ' bad' : ''}` }, x.exit_code ?? '–'), el('td', {}, x.runtime),
    el('td', {}, when(x.requested_at)), el('td', { class: 'cost' }, usd(x.cost_micro_usd)),
    el('td', {}, x.receipt_id ? el('a', { href: `#execution=${encodeURIComponent(x.id)}`, class: 'receipt-link' }, 'receipt') : '–'))));
}

async function loadKeys() {
  let list;
  try {
    list = await api('GET', '/v1/api_keys');
  } catch (e) {
    if (e.status === 403) {
      $('#keys-note').textContent = 'This key lacks the keys scope: it cannot list or create keys.';
      return fill('#keys', []);
    }
    throw e;
  }
  const mine = sessionStorage.getItem(KEY_STORE) || '';
  $('#keys-note').textContent = 'A revoked key is refused from its next call; revoking the key this browser uses signs you out.';
  fill('#keys', list.data.map((k) => {
    const current = k.prefix && mine.startsWith(k.prefix);
    const revoke = k.revoked ? '' : el('button', { type: 'button', class: 'revoke danger', onclick: async () => {
      const what = `Revoke key ${k.id}? Every call with it is refused from then on${current ? '; this browser uses it and signs out' : ''}.`;
      if (await confirmStep(what, 'Revoke')) act(`revoke ${k.id}`, () => api('DELETE', `/v1/api_keys/${encodeURIComponent(k.id)}`));
    } }, 'Revoke');
    return el('tr', { 'data-id': k.id, 'data-current': current ? 'yes' : 'no' },
      el('td', { class: 'id' }, k.id, current ? ' (this browser)' : ''), el('td', { class: 'id' }, k.prefix),
      el('td', {}, (k.scopes || []).join(', ') || 'none'), el('td', {}, when(k.created_at)),
      el('td', { class: k.revoked ? 'bad' : 'ok' }, k.revoked ? `revoked ${when(k.revoked_at)}` : 'active'), el('td', {}, revoke));
  }));
}

async function refresh() {
  if (state.loading) return state.loading;
  const views = [['#usage', loadBalanceAndUsage], ['#running', loadRunning], ['#paused', loadPaused],
    ['#snapshots', loadSnapshots], ['#recent', loadRecent],
    ['#executions', loadExecutions], ['#keys', loadKeys]];
  state.loading = (async () => {
    for (const [section, load] of views) {
      try {
        await load();
      } catch (e) {
        if (e instanceof SignedOut) return;
        if (section === '#usage') $('#usage-summary').textContent = e.message;
        else sectionError(section, e);
      }
    }
    document.body.setAttribute('data-loaded', String(Date.now()));
  })();
  try { await state.loading; } finally { state.loading = null; }
}

// An action, then a refresh; its error shown in the notice.
// fn may return a message to show (else the notice is cleared).
async function act(what, fn) {
  try {
    const msg = await fn();
    notice(typeof msg === 'string' ? msg : '');
  } catch (e) {
    if (e instanceof SignedOut) return;
    notice(`${what}: ${e.message}`);
  }
  await refresh();
}

// ------------------------------------------------------------- receipts

// RFC 8785 for what receipts hold: objects, strings, integers, booleans, null.
function jcs(v) {
  if (v === null || typeof v !== 'object') return JSON.stringify(v);
  if (Array.isArray(v)) return `[${v.map(jcs).join(',')}]`;
  return `{${Object.keys(v).sort().map((k) => `${JSON.stringify(k)}:${jcs(v[k])}`).join(',')}}`;
}

const hex = (buf) => [...new Uint8Array(buf)].map((b) => b.toString(16).padStart(2, '0')).join('');
const unhex = (s) => new Uint8Array((s.replace(/^0x/, '').match(/../g) || []).map((h) => parseInt(h, 16)));

async function showExecution(id) {
  const box = $('#receipt');
  box.hidden = false;
  const checks = $('#receipt-checks');
  const facts = $('#receipt-facts');
  checks.replaceChildren(el('li', {}, 'checking…'));
  facts.replaceChildren();
  for (const p of ['#receipt-stdout', '#receipt-stderr', '#receipt-json']) $(p).textContent = '';
  box.scrollIntoView({ block: 'start' });
  const check = (ok, text) => el('li', { class: ok ? 'ok' : 'bad' }, `${ok ? '✓' : '✗'} ${text}`);
  try {
    const x = await api('GET', `/v1/sandbox/executions/${encodeURIComponent(id)}`);
    const add = (k, v) => facts.append(el('dt', {}, k), el('dd', {}, v));
    add('execution', x.id);
    add('status', `${x.status}, exit code ${x.exit_code}`);
    add('cost', `${usd(x.billing?.cost_micro_usd)} for ${x.billing?.billed_ms} ms (host-measured)`);
    $('#receipt-stdout').textContent = x.stdout ?? '';
    $('#receipt-stderr').textContent = x.stderr ?? '';
    if (!x.receipt?.id) {
      checks.replaceChildren(el('li', {}, 'This execution has no receipt.'));
      return;
    }
    const [r, pk] = await Promise.all([api('GET', `/v1/receipts/${encodeURIComponent(x.receipt.id)}`), api('GET', '/v1/receipts/public-key')]);
    add('receipt', r.id ?? x.receipt.id);
    add('signer', r.signer ?? '');
    $('#receipt-json').textContent = JSON.stringify(r, null, 2);
    const body = new TextEncoder().encode(jcs(r.body));
    const out = [];
    const digest = `0x${hex(await crypto.subtle.digest('SHA-256', body))}`;
    out.push(check(digest === r.hash, `hash: SHA-256 of the canonical body is ${digest.slice(0, 18)}…, the receipt says ${String(r.hash).slice(0, 18)}…`));
    out.push(check(r.signer === pk.signer, 'signer: the receipt names the key this node publishes'));
    try {
      const key = await crypto.subtle.importKey('raw', unhex(r.signer), { name: 'Ed25519' }, false, ['verify']);
      const ok = await crypto.subtle.verify({ name: 'Ed25519' }, key, unhex(r.signature), body);
      out.push(check(ok, `signature: Ed25519 over the canonical body ${ok ? 'verifies' : 'does NOT verify'} with the signer key`));
    } catch (e) {
      out.push(el('li', { class: 'muted' }, `signature: this browser cannot check Ed25519 (${e.message}); use sandboxd verify-receipt`));
    }
    out.push(check(r.body?.execution_id === x.id, 'the receipt is about this execution'));
    if (x.stored_truncated) {
      out.push(el('li', { class: 'muted' }, 'output fingerprint: the stored output is cut, check it with the reply you kept'));
    } else if (x.receipt?.fingerprint_salt || x.billing?.fingerprint_salt) {
      // in receipt; in billing for executions made before it moved (docs/receipts.md)
      const o = { exit_code: x.exit_code, stderr: x.stderr, stdout: x.stdout };
      const salt = unhex(x.receipt?.fingerprint_salt || x.billing.fingerprint_salt);
      const j = new TextEncoder().encode(jcs(o));
      const both = new Uint8Array(salt.length + j.length);
      both.set(salt);
      both.set(j, salt.length);
      const fp = `0x${hex(await crypto.subtle.digest('SHA-256', both))}`;
      out.push(check(fp === r.body?.output_fingerprint, 'output fingerprint: stdout, stderr and exit code are the ones signed'));
    }
    checks.replaceChildren(...out);
  } catch (e) {
    if (e instanceof SignedOut) return;
    checks.replaceChildren(el('li', { class: 'bad' }, e.message));
  }
}

function route() {
  const signedIn = !!sessionStorage.getItem(KEY_STORE);
  const m = location.hash.match(/^#execution=([A-Za-z0-9_]{1,40})$/);
  if (m && signedIn) showExecution(m[1]);
  else $('#receipt').hidden = true;
  const sb = location.hash.match(/^#\/sandboxes\/([A-Za-z0-9_]{1,40})$/);
  if (sb && signedIn) showSandbox(sb[1]);
  else closeSandbox();
}

// ------------------------------------------------------------------ keys

async function createKey(ev) {
  ev.preventDefault();
  const scopes = [...document.querySelectorAll('#key-form input[name=scope]:checked')].map((i) => i.value);
  try {
    const k = await api('POST', '/v1/api_keys', { scopes });
    $('#new-secret-value').textContent = k.secret;
    $('#new-secret').hidden = false;
    notice('');
  } catch (e) {
    if (!(e instanceof SignedOut)) notice(`create key failed: ${e.message}`);
  }
  await loadKeys().catch(() => {});
}

// ------------------------------------------------------------------ start

function start() {
  $('#signin-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const key = $('#key').value.trim();
    $('#key').value = '';
    if (key) signIn(key);
  });
  $('#signout').addEventListener('click', () => signOut('Signed out.'));
  $('#refresh').addEventListener('click', () => refresh());
  $('#period').addEventListener('change', () => loadBalanceAndUsage().catch((e) => { if (!(e instanceof SignedOut)) $('#usage-summary').textContent = e.message; }));
  $('#key-form').addEventListener('submit', createKey);
  $('#copy-secret').addEventListener('click', () => navigator.clipboard?.writeText($('#new-secret-value').textContent));
  $('#confirm-ok').addEventListener('click', () => $('#confirm').close('ok'));
  $('#confirm-cancel').addEventListener('click', () => $('#confirm').close('cancel'));
  $('#receipt-close').addEventListener('click', (ev) => { ev.preventDefault(); history.replaceState(null, '', location.pathname); route(); });
  window.addEventListener('hashchange', route);
  startSandboxPage();
  if (sessionStorage.getItem(KEY_STORE)) {
    showApp();
    route();
  }
}

start();
