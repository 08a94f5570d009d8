// The dashboard and the API reference page in a real browser: Debian's
// chromium driven by playwright-core. Run by tests/integration/
// test_dashboard.c against a daemon it started, with SBX_URL (the daemon),
// SBX_KEY (an account's key with both scopes) and SBX_KEY2 (another
// account's) in the environment;
// screenshots of each step go to SBX_ARTIFACTS (build/browser).
//   node --test tests/browser/
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import net from 'node:net';
import { join } from 'node:path';
import { chromium } from 'playwright-core';
import { Validator } from '@seriousme/openapi-schema-validator';

const URL = process.env.SBX_URL;
const KEY = process.env.SBX_KEY;
const KEY2 = process.env.SBX_KEY2;
const ART = process.env.SBX_ARTIFACTS || 'build/browser';
const HOSTILE = '<img src=x onerror="window.__pwned=1">';
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
// Without the background-networking flags chromium calls home on a
// closed network. Playwright gives each launch a fresh profile.
const ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync',
  // a preview's host name (PORT-TOKEN.preview.localhost) to the daemon
  '--host-resolver-rules=MAP *.localhost 127.0.0.1'];

let browser, page;
const problems = []; // CSP violations and script errors seen by the page
const missing = []; // requests of the pages answered 404 (e.g. a favicon)
let shot = 0;

async function screenshot(name, fullPage = true) {
  shot++;
  await page.screenshot({ path: join(ART, `${String(shot).padStart(2, '0')}-${name}.png`), fullPage });
}

async function call(method, path, body, key = KEY) {
  const res = await fetch(URL + path, {
    method,
    headers: { Authorization: `Bearer ${key}`, ...(body ? { 'Content-Type': 'application/json' } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  return { status: res.status, json: await res.json() };
}

async function refresh() {
  const before = await page.getAttribute('body', 'data-loaded');
  await page.click('#refresh');
  await page.waitForFunction((b) => document.body.getAttribute('data-loaded') !== b, before);
}

const chartTotal = async () => Number(await page.getAttribute('#chart', 'data-total'));

before(async () => {
  assert.ok(URL && KEY && KEY2, 'SBX_URL, SBX_KEY and SBX_KEY2 must be set (tests/integration/test_dashboard.c)');
  mkdirSync(ART, { recursive: true });
  for (const f of readdirSync(ART)) if (f.endsWith('.png')) rmSync(join(ART, f));
  browser = await chromium.launch({ executablePath: CHROMIUM, args: ARGS });
  page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  page.on('console', (m) => {
    if (/Content Security Policy|Refused to/i.test(m.text())) problems.push(m.text());
  });
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('response', (r) => { if (r.status() === 404) missing.push(r.url()); });
});

after(async () => {
  await browser?.close();
});

test('the OpenAPI description is valid OpenAPI 3.1', async () => {
  const res = await fetch(`${URL}/v1/openapi.json`);
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type'), /^application\/json/);
  const spec = await res.json();
  const v = new Validator();
  const r = await v.validate(spec);
  assert.equal(v.version, '3.1');
  assert.ok(r.valid, JSON.stringify(r.errors, null, 1));
  // every documented endpoint of docs/api.md is in it
  for (const p of ['/v1/sandboxes', '/v1/sandboxes/{id}/extend', '/v1/usage', '/v1/api_keys/{key_id}',
    '/v1/sandbox/executions', '/v1/receipts/{id}', '/v1/openapi.json'])
    assert.ok(spec.paths[p], `${p} is described`);
  assert.ok(spec.paths['/v1/sandbox/executions'].get, 'the executions list is described');
  // a comma in an unquoted flow-style description cuts it and makes the
  // rest a key of its own (one the validator lets pass inside a schema)
  const prose = [];
  const walk = (o, at) => {
    if (!o || typeof o !== 'object') return;
    for (const [k, v] of Object.entries(o)) {
      if (/ /.test(k) && at !== 'paths' && at !== 'content') prose.push(k);
      walk(v, k);
    }
  };
  walk(spec, '');
  assert.deepEqual(prose, [], 'keys that are the tail of a description cut at a comma');
});

test('the terminal emulator served is the pinned xterm.js', async () => {
  const pkg = JSON.parse(readFileSync('package.json', 'utf8'));
  const nm = (p) => readFileSync(`node_modules/@xterm/${p}`, 'utf8');
  for (const [name, dir] of [['@xterm/xterm', 'xterm'], ['@xterm/addon-fit', 'addon-fit']]) {
    const pin = pkg.devDependencies[name];
    assert.match(pin, /^\d+\.\d+\.\d+$/, `${name} is pinned exactly`);
    assert.equal(JSON.parse(nm(`${dir}/package.json`)).version, pin);
  }
  // web/vendor/ is node_modules' dist (scripts/vendor-web.sh), source map line dropped
  const nomap = (t) => t.replace(/^\/\/# sourceMappingURL=.*\n/m, '');
  for (const [path, file] of [['/vendor/xterm.mjs', 'xterm/lib/xterm.mjs'], ['/vendor/xterm.css', 'xterm/css/xterm.css'],
    ['/vendor/addon-fit.mjs', 'addon-fit/lib/addon-fit.mjs']]) {
    const res = await fetch(URL + path);
    assert.equal(res.status, 200, path);
    assert.equal(await res.text(), nomap(nm(file)), `${path} is ${file} of the pinned package (run make vendor-web)`);
  }
});

test('the reference page renders every operation', async () => {
  const spec = await (await fetch(`${URL}/v1/openapi.json`)).json();
  let ops = 0;
  for (const item of Object.values(spec.paths)) ops += ['get', 'put', 'post', 'patch', 'delete'].filter((m) => item[m]).length;
  await page.goto(`${URL}/reference.html`);
  await page.waitForSelector('body[data-loaded]');
  assert.equal(await page.locator('section.op h3 .method').count(), ops);
  assert.ok(await page.locator('#schema-Sandbox').isVisible());
  // every method badge has a colour (PUT was white on white)
  for (const m of ['get', 'post', 'put', 'delete']) {
    const bg = await page.locator(`section.op h3 .method.${m}`).first()
      .evaluate((e) => getComputedStyle(e).backgroundColor);
    assert.notEqual(bg, 'rgba(0, 0, 0, 0)', `${m} badge background`);
  }
  // the table of contents stays in its column: no entry spills over the
  // operations beside it
  const toc = await page.locator('#toc').boundingBox();
  const main = await page.locator("#spec").boundingBox();
  assert.ok(toc.x + toc.width <= main.x, `toc ends at ${toc.x + toc.width}, spec starts at ${main.x}`);
  const spill = await page.evaluate(() => [...document.querySelectorAll('#toc a')]
    .filter((a) => a.scrollWidth > a.clientWidth || a.getBoundingClientRect().right > document.querySelector('#spec').getBoundingClientRect().left)
    .map((a) => a.textContent));
  assert.deepEqual(spill, []);
  await screenshot('reference', false); // the whole page is ~10000 px tall
});

test('sign in, sandboxes, usage, executions, keys', async (t) => {
  let sandbox, total0;

  await t.test('a wrong key is refused', async () => {
    await page.goto(`${URL}/`);
    await page.fill('#key', 'aas_sk_0000000000000000000000000000000000000000000000000000000000000000');
    await page.click('#signin-form button');
    await page.waitForFunction(() => document.querySelector('#signin-error').textContent !== '');
    assert.ok(await page.isVisible('#signin'));
    assert.equal(await page.evaluate(() => sessionStorage.length), 0);
    await screenshot('signin-refused');
  });

  await t.test('sign in: the key stays in session storage only', async () => {
    await page.fill('#key', KEY);
    await page.click('#signin-form button');
    await page.waitForSelector('#app:not([hidden])');
    await page.waitForSelector('body[data-loaded]');
    assert.equal(await page.evaluate(() => sessionStorage.getItem('sandboxd.api_key')), KEY);
    assert.equal(await page.evaluate(() => document.cookie), '');
    assert.ok(!page.url().includes(KEY.slice(7)));
    assert.match(await page.textContent('#bal-balance'), /^\$10\.00$/);
    total0 = await chartTotal();
    await screenshot('signed-in');
  });

  await t.test('a created sandbox appears with its cost', async () => {
    const r = await call('POST', '/v1/sandboxes', { timeout_minutes: 10 });
    assert.equal(r.status, 201, JSON.stringify(r.json));
    sandbox = r.json.id;
    await refresh();
    const row = page.locator(`#running tr[data-id="${sandbox}"]`);
    await row.waitFor();
    assert.match(await row.locator('.cost').textContent(), /^\$\d+\.\d+$/);
    assert.match(await page.textContent('#bal-running'), /^1 \//);
    // dates are 24-hour, ISO-like, UTC (as the chart), never 12-hour
    assert.match(await row.locator('.expires').textContent(), /^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} UTC \(in /);
    assert.doesNotMatch(await page.textContent('#app'), /\d (AM|PM)\b/);
    await screenshot('sandbox-running');
  });

  await t.test('its page: facts, metrics off, files, a process, the terminal', async () => {
    // a file made by exec (its content hostile) and a background process
    let r = await call('POST', `/v1/sandboxes/${sandbox}/exec`,
      { command: `printf '%s' '${HOSTILE}' > /tmp/dash-note.txt`, timeout_ms: 60000 });
    assert.equal(r.status, 200, JSON.stringify(r.json));
    r = await call('POST', `/v1/sandboxes/${sandbox}/processes`, { command: 'echo bg-out; echo bg-err >&2' });
    assert.equal(r.status, 201, JSON.stringify(r.json));
    const pid = r.json.pid;
    await page.locator(`#running tr[data-id="${sandbox}"] a.sandbox-link`).click();
    await page.waitForSelector('#sandbox[data-loaded]');
    assert.equal(page.url(), `${URL}/#/sandboxes/${sandbox}`);
    assert.ok(await page.isHidden('#running'));
    assert.equal(await page.textContent('#sbx-facts dd[data-fact="status"]'), 'running');
    assert.equal(await page.textContent('#sbx-facts dd[data-fact="size"]'), 'small');
    assert.match(await page.textContent('#sbx-facts dd[data-fact="cost-so-far"]'), /^\$\d+\.\d+$/);
    // this daemon samples no metrics (its config sets metrics_interval_ms 0)
    assert.match(await page.textContent('#sbx-metrics-note'), /sampling is off/);
    await screenshot('sandbox-page');

    // files: list /tmp, the file is there; its download is its bytes
    await page.fill('#sbx-path', '/tmp');
    await page.click('#sbx-files-form button');
    const file = page.locator('#sbx-files tr[data-name="dash-note.txt"]');
    await file.waitFor();
    assert.equal(await file.locator('td').nth(2).textContent(), String(HOSTILE.length));
    const [dl] = await Promise.all([page.waitForEvent('download'), file.locator('button.download').click()]);
    assert.equal(dl.suggestedFilename(), 'dash-note.txt');
    assert.equal(readFileSync(await dl.path(), 'utf8'), HOSTILE);

    // the background process and its output, as text
    const proc = page.locator(`#sbx-procs tr[data-pid="${pid}"]`);
    await proc.waitFor();
    await proc.locator('button.output').click();
    await page.waitForFunction(() => document.querySelector('#sbx-output-stdout').textContent !== '');
    assert.equal(await page.textContent('#sbx-output-stdout'), 'bg-out\n');
    assert.equal(await page.textContent('#sbx-output-stderr'), 'bg-err\n');

    // the terminal: type `echo hi`, read `hi` back from xterm's buffer
    await page.click('#sbx-term-open');
    await page.waitForSelector('#sbx-term-status[data-state="open"]', { timeout: 60000 });
    await page.click('#sbx-term .xterm');
    const line = (want) => page.waitForFunction((w) => {
      const b = window.__sbxTerminal?.buffer.active;
      for (let i = 0; b && i < b.length; i++) if (b.getLine(i)?.translateToString(true).trim() === w) return true;
      return false;
    }, want, { timeout: 60000 });
    await page.keyboard.type('echo hi');
    await page.keyboard.press('Enter');
    await line('hi');
    // and on screen: a row of xterm's DOM renderer reads `hi`
    assert.ok((await page.locator('#sbx-term .xterm-rows > div').allTextContents()).some((t) => t.trim() === 'hi'));
    // the guest's hostile bytes are drawn as characters, never as HTML
    await page.keyboard.type('cat /tmp/dash-note.txt; echo; echo done-$((6*7))');
    await page.keyboard.press('Enter');
    await line('done-42');
    assert.equal(await page.locator('img').count(), 0);
    assert.equal(await page.evaluate(() => window.__pwned), undefined);
    await screenshot('sandbox-terminal');
    // the key went in the subprotocol, never in the URL
    assert.ok(!page.url().includes(KEY.slice(7)));
    // xterm's CSS went to constructable sheets (web/xterm-csp.js): 3 live
    // with the terminal, none once it is closed
    const live = () => page.evaluate(async () => (await import('/xterm-csp.js')).styleSheetsLive());
    assert.ok(await live() > 0);
    await page.click('#sbx-term-close');
    await page.waitForSelector('#sbx-term-status[data-state="closed"]');
    assert.equal(await live(), 0);
    await page.click('#sbx-back');
    await page.waitForSelector('#running tbody tr');
    assert.ok(await page.isVisible('#running'));
  });

  await t.test('its listening ports, and a preview link that opens one', async () => {
    // busybox's httpd on the guest's loopback, port 8123, and a port
    // listening on another address only (not reachable: no link)
    let r = await call('POST', `/v1/sandboxes/${sandbox}/exec`, {
      command: "mkdir -p /tmp/www && printf '<title>port-8123</title><p id=hi>served from 8123</p>' > /tmp/www/index.html",
      timeout_ms: 60000,
    });
    assert.equal(r.status, 200, JSON.stringify(r.json));
    r = await call('POST', `/v1/sandboxes/${sandbox}/processes`, { command: 'exec busybox httpd -f -p 127.0.0.1:8123 -h /tmp/www' });
    assert.equal(r.status, 201, JSON.stringify(r.json));
    r = await call('POST', `/v1/sandboxes/${sandbox}/processes`, { command: 'exec busybox httpd -f -p 127.0.0.2:8124 -h /tmp/www' });
    assert.equal(r.status, 201, JSON.stringify(r.json));
    await page.goto(`${URL}/#/sandboxes/${sandbox}`);
    await page.waitForSelector('#sandbox[data-loaded]');
    const row = page.locator('#sbx-ports tr[data-port="8123"]');
    for (let i = 0; i < 20 && !(await row.count()); i++) { // until both listen
      await page.click('#sbx-ports-find');
      await page.waitForFunction(() => !/looking/.test(document.querySelector('#sbx-ports-note').textContent));
      if (!(await row.count()) || !(await page.locator('#sbx-ports tr[data-port="8124"]').count())) await new Promise((ok) => setTimeout(ok, 500));
    }
    assert.equal(await row.locator('td').nth(1).textContent(), '127.0.0.1');
    assert.equal(await row.locator('td').nth(2).textContent(), 'yes');
    const other = page.locator('#sbx-ports tr[data-port="8124"]');
    assert.equal(await other.locator('td').nth(2).textContent(), 'no (not on 127.0.0.1)');
    assert.equal(await other.locator('button').count(), 0);
    // the guest agent's own egress proxy is named, never offered
    const proxy = page.locator('#sbx-ports tr[data-port="3128"]');
    assert.equal(await proxy.locator('td').nth(2).textContent(), "no: the sandbox's network proxy");
    assert.equal(await proxy.locator('button').count(), 0);
    await row.locator('button.preview').click();
    const link = row.locator('a.preview-url');
    await link.waitFor();
    const href = await link.getAttribute('href');
    assert.match(href, /^http:\/\/8123-[0-9a-f]{32}\.preview\.localhost:\d+\/$/);
    assert.equal(await link.getAttribute('rel'), 'noopener noreferrer');
    await screenshot('sandbox-ports');
    // the link opens the guest's page in a tab of its own
    const [tab] = await Promise.all([page.context().waitForEvent('page'), link.click()]);
    await tab.waitForLoadState();
    assert.equal(await tab.title(), 'port-8123');
    assert.equal(await tab.textContent('#hi'), 'served from 8123');
    await tab.close();
    // the preview is the account's: listed under the port
    r = await call('GET', `/v1/sandboxes/${sandbox}/ports/8123/previews`);
    assert.equal(r.status, 200);
    assert.equal(r.json.data.length, 1);
    await page.click('#sbx-back');
    await page.waitForSelector('#running tbody tr');
  });

  await t.test('the terminal reattaches after its connection drops', async () => {
    // the page through a TCP relay of this test's: cutting its
    // connections drops the WebSocket without a close frame, as a lost
    // network does; the daemon keeps the shell for its grace
    const seen = [];
    const conns = new Set();
    const daemon = new globalThis.URL(URL);
    const relay = net.createServer((c) => {
      const u = net.connect(Number(daemon.port), daemon.hostname);
      conns.add(c).add(u);
      c.once('data', (d) => seen.push(d.toString('latin1').split('\r\n')[0]));
      c.pipe(u).pipe(c);
      const end = () => { c.destroy(); u.destroy(); conns.delete(c); conns.delete(u); };
      c.on('error', end).on('close', end);
      u.on('error', end).on('close', end);
    });
    await new Promise((ok) => relay.listen(0, '127.0.0.1', ok));
    const via = `http://127.0.0.1:${relay.address().port}`;
    const p = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    p.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
    p.on('console', (m) => { if (/Content Security Policy|Refused to/i.test(m.text())) problems.push(m.text()); });
    try {
      await p.goto(`${via}/`);
      await p.fill('#key', KEY);
      await p.click('#signin-form button');
      await p.waitForSelector('#app:not([hidden])');
      await p.goto(`${via}/#/sandboxes/${sandbox}`);
      await p.waitForSelector('#sandbox[data-loaded]');
      await p.click('#sbx-term-open');
      await p.waitForSelector('#sbx-term-status[data-state="open"]', { timeout: 60000 });
      await p.click('#sbx-term .xterm');
      const line = (want) => p.waitForFunction((w) => {
        const b = window.__sbxTerminal?.buffer.active;
        for (let i = 0; b && i < b.length; i++) if (b.getLine(i)?.translateToString(true).trim() === w) return true;
        return false;
      }, want, { timeout: 60000 });
      await p.keyboard.type('export DROPVAR=still$((1+2)); echo set-$DROPVAR');
      await p.keyboard.press('Enter');
      await line('set-still3');
      for (const c of conns) c.destroy(); // no close frame: a drop
      await p.waitForFunction(() => /reattached/.test(document.querySelector('#sbx-term-status').textContent)
        && document.querySelector('#sbx-term-status').dataset.state === 'open', null, { timeout: 30000 });
      assert.ok(seen.some((l) => /\/terminal\?.*attach=term_/.test(l)), seen.join('\n'));
      // the same shell: its variable is still set
      await p.keyboard.type('echo back-$DROPVAR');
      await p.keyboard.press('Enter');
      await line('back-still3');
      await p.screenshot({ path: join(ART, 'sandbox-terminal-reattached.png') });
      await p.click('#sbx-term-close');
      await p.waitForSelector('#sbx-term-status[data-state="closed"]');
    } finally {
      await p.close();
      for (const c of conns) c.destroy();
      relay.close();
    }
  });

  await t.test("another account's sandbox id is not found", async () => {
    const other = await browser.newPage();
    other.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
    other.on('console', (m) => { if (/Content Security Policy|Refused to/i.test(m.text())) problems.push(m.text()); });
    await other.goto(`${URL}/`);
    await other.fill('#key', KEY2);
    await other.click('#signin-form button');
    await other.waitForSelector('#app:not([hidden])');
    await other.goto(`${URL}/#/sandboxes/${sandbox}`);
    await other.waitForSelector('#sandbox[data-state="not-found"]');
    assert.match(await other.textContent('#sbx-missing'), /not found/);
    assert.ok(await other.isHidden('#sbx-body'));
    await other.screenshot({ path: join(ART, 'sandbox-not-found.png') });
    await other.close();
  });

  await t.test('pause it from its page, see it paused with its storage, resume it from the list', async () => {
    await page.goto(`${URL}/#/sandboxes/${sandbox}`);
    await page.waitForSelector('#sandbox[data-state="running"]');
    assert.ok(await page.isHidden('#sbx-resume'));
    await page.click('#sbx-pause');
    await page.waitForSelector('#sandbox[data-state="paused"]', { timeout: 120000 });
    assert.ok(await page.isVisible('#sbx-resume'));
    assert.ok(await page.isHidden('#sbx-pause'));
    assert.match(await page.textContent('#sbx-facts dd[data-fact="kept-on-the-host"]'), /^\d+\.\d MiB$/);
    assert.match(await page.textContent('#sbx-files-note'), /paused: resume it/);
    await screenshot('sandbox-paused');
    // the dashboard: in the paused list (not the running one), its bytes
    // the API's, its storage priced by /v1/limits (0 here)
    await page.click('#sbx-back');
    await refresh();
    const row = page.locator(`#paused tr[data-id="${sandbox}"]`);
    await row.waitFor();
    assert.equal(await page.locator(`#running tr[data-id="${sandbox}"]`).count(), 0);
    const s = await call('GET', `/v1/sandboxes/${sandbox}`);
    assert.equal(s.json.status, 'paused');
    assert.equal(await row.locator('td.bytes').textContent(), `${(s.json.paused_bytes / 2 ** 20).toFixed(1)} MiB`);
    assert.equal(await row.locator('td.cost').textContent(), '$0.00');
    assert.match(await page.textContent('#paused-price'), /per GiB-hour, kept up to/);
    await screenshot('paused-list');
    await row.locator('button.resume').click();
    await page.waitForSelector(`#running tr[data-id="${sandbox}"]`, { timeout: 120000 });
    assert.equal(await page.locator(`#paused tr[data-id="${sandbox}"]`).count(), 0);
    assert.equal((await call('GET', `/v1/sandboxes/${sandbox}`)).json.status, 'running');
  });

  await t.test('the snapshots panel: the account has none, its price and caps are /v1/limits\'', async () => {
    // this daemon's guests (the tiny image) have no disk to snapshot:
    // the panel's rows are the API's list, empty here
    const list = await call('GET', '/v1/snapshots');
    assert.equal(list.status, 200);
    assert.equal(list.json.data.length, 0);
    const lim = await call('GET', '/v1/limits');
    assert.ok(await page.isVisible('#snapshots .empty'));
    assert.equal(await page.locator('#snapshots tbody tr').count(), 0);
    assert.equal(await page.textContent('#snapshots-price'),
      `$0.00 per GiB-hour; at most ${lim.json.snapshots} snapshots and ${(lim.json.snapshot_bytes / 2 ** 20).toFixed(1)} MiB in all`);
  });

  await t.test('extend it', async () => {
    const before = (await call('GET', `/v1/sandboxes/${sandbox}`)).json.expires_at;
    const row = page.locator(`#running tr[data-id="${sandbox}"]`);
    await row.locator('input[type=number]').fill('30');
    await row.locator('button.extend').click();
    await page.waitForFunction(([id, b]) =>
      document.querySelector(`#running tr[data-id="${id}"] .expires`)?.getAttribute('title') !== b, [sandbox, before]);
    const after = (await call('GET', `/v1/sandboxes/${sandbox}`)).json.expires_at;
    assert.ok(Date.parse(after) > Date.parse(before), `${after} > ${before}`);
    assert.equal(await row.locator('.expires').getAttribute('title'), after);
    await screenshot('sandbox-extended');
    // less than it already has: nothing changes, and the page says so
    await row.locator('input[type=number]').fill('1');
    await row.locator('button.extend').click();
    await page.waitForFunction(() => /nothing changed/.test(document.querySelector('#notice').textContent));
    assert.equal((await call('GET', `/v1/sandboxes/${sandbox}`)).json.expires_at, after);
    assert.ok(await page.isVisible('#notice'));
    await screenshot('sandbox-extend-unchanged');
  });

  await t.test('delete it: it leaves the running list and is charged', async () => {
    // one click only asks; Cancel keeps it
    await page.locator(`#running tr[data-id="${sandbox}"] button.delete`).click();
    await page.waitForSelector('#confirm[open]');
    assert.match(await page.textContent('#confirm-text'), new RegExp(`Delete sandbox ${sandbox}`));
    await screenshot('sandbox-delete-confirm', false);
    await page.click('#confirm-cancel');
    await page.waitForSelector('#confirm:not([open])', { state: 'attached' });
    assert.equal((await call('GET', `/v1/sandboxes/${sandbox}`)).json.status, 'running');
    await page.locator(`#running tr[data-id="${sandbox}"] button.delete`).click();
    await page.click('#confirm-ok');
    await page.locator(`#running tr[data-id="${sandbox}"]`).waitFor({ state: 'detached' });
    const recent = page.locator(`#recent tr[data-id="${sandbox}"]`);
    await recent.waitFor();
    assert.equal(await recent.locator('td').nth(1).textContent(), 'destroyed');
    const cost = (await call('GET', `/v1/sandboxes/${sandbox}`)).json.cost_micro_usd;
    assert.ok(cost > 0);
    await screenshot('sandbox-deleted');
  });

  await t.test('the usage chart changes', async () => {
    const total = await chartTotal();
    assert.ok(total > total0, `chart total ${total} > ${total0}`);
    assert.ok(await page.locator('#chart rect.bar[height]:not([height="0"])').count() >= 1);
    await page.selectOption('#period', '7d');
    await page.waitForFunction(() => document.querySelector('#chart').getAttribute('data-buckets') === '8' ||
      document.querySelector('#chart').getAttribute('data-buckets') === '7');
    assert.equal(await chartTotal(), total);
    assert.ok(await page.locator('#by-size tbody tr').count() >= 1);
    await screenshot('usage-7d');
    await page.selectOption('#period', '24h');
  });

  await t.test('hostile output is shown as text, with the receipt checked', async () => {
    const code = `printf '%s' '${HOSTILE}'; printf '%s' '${HOSTILE}' >&2; exit 7`;
    const r = await call('POST', '/v1/sandbox/executions', { runtime: 'sh', timeout_seconds: 10, code });
    assert.equal(r.status, 200, JSON.stringify(r.json));
    assert.equal(r.json.stdout, HOSTILE);
    await refresh();
    const row = page.locator(`#executions tr[data-id="${r.json.id}"]`);
    await row.waitFor();
    // the list shows how it ended: status and exit code
    assert.equal(await row.locator('td').nth(1).textContent(), 'completed');
    assert.equal(await row.locator('td.exit').textContent(), '7');
    await row.locator('a.receipt-link').click();
    await page.waitForFunction(() => document.querySelector('#receipt-stdout').textContent !== '');
    await page.waitForFunction(() => !/checking/.test(document.querySelector('#receipt-checks').textContent));
    assert.equal(await page.textContent('#receipt-stdout'), HOSTILE);
    assert.equal(await page.textContent('#receipt-stderr'), HOSTILE);
    assert.equal(await page.locator('img').count(), 0);
    assert.equal(await page.evaluate(() => window.__pwned), undefined);
    const checks = await page.locator('#receipt-checks li').allTextContents();
    assert.ok(checks.length >= 4, checks.join('\n'));
    assert.equal(await page.locator('#receipt-checks li.bad').count(), 0, checks.join('\n'));
    assert.ok(checks.some((c) => /signature: Ed25519 .* verifies/.test(c)), checks.join('\n'));
    assert.ok(!page.url().includes(KEY.slice(7)));
    await screenshot('execution-receipt');
  });

  await t.test('create a key (secret shown once), sign in with it, revoke it: signed out', async () => {
    await page.click('#key-form button');
    await page.waitForSelector('#new-secret:not([hidden])');
    const secret = await page.textContent('#new-secret-value');
    assert.match(secret, /^aas_sk_[0-9a-f]+$/);
    await screenshot('key-created');
    await page.click('#signout');
    assert.equal(await page.evaluate(() => sessionStorage.length), 0);
    assert.equal(await page.textContent('#new-secret-value'), '');
    await page.fill('#key', secret);
    await page.click('#signin-form button');
    await page.waitForSelector('#keys tr[data-current="yes"]');
    const mine = page.locator('#keys tr[data-current="yes"]');
    assert.equal(await mine.count(), 1);
    await mine.locator('button.revoke').click();
    await page.waitForSelector('#confirm[open]');
    assert.match(await page.textContent('#confirm-text'), /signs out/);
    await page.click('#confirm-ok');
    await page.waitForSelector('#signin:not([hidden])');
    assert.match(await page.textContent('#notice'), /signed out/);
    assert.equal(await page.evaluate(() => sessionStorage.length), 0);
    assert.equal((await call('GET', '/v1/usage', undefined, secret)).status, 401);
    await screenshot('revoked-signed-out');
  });

  await t.test('the page met no CSP refusal and no script error', () => {
    assert.deepEqual(problems, []);
  });

  await t.test('no page asked for something missing (the favicon is served)', async () => {
    assert.deepEqual(missing, []);
    const res = await fetch(`${URL}/favicon.ico`);
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type'), /^image\/svg\+xml/);
  });
});
