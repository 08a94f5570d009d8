// A preview URL in a real browser (docs/api.md "Previews"): Debian's
// chromium, driven by playwright-core, opens SBX_PREVIEW_URL (a page of
// tests/integration/test_previews.c's guest site) and checks that its
// script ran (it sets document.title) and that its absolute link /second
// loads from the preview's own origin. Run by test_previews with
// SBX_PREVIEW_URL set; exit 0 when all held. Not a `node --test` file:
// tests/browser/'s *.test.mjs are the dashboard's.
import assert from 'node:assert/strict';
import { chromium } from 'playwright-core';

const URL = process.env.SBX_PREVIEW_URL;
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
// *.localhost is loopback in chromium already; the rule makes it so for
// any preview_domain a test might set.
const ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync',
  '--host-resolver-rules=MAP *.localhost 127.0.0.1'];

assert.ok(URL, 'SBX_PREVIEW_URL is not set');
const browser = await chromium.launch({ executablePath: CHROMIUM, args: ARGS });
try {
  const page = await browser.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  const res = await page.goto(URL);
  assert.equal(res.status(), 200);
  await page.waitForFunction(() => document.title.startsWith('script ran'));
  assert.equal(await page.title(), 'script ran on 8010');
  // the guest's host-only cookie is the page's own
  const cookies = await page.context().cookies(URL);
  assert.ok(cookies.some((c) => c.name === 'guest' && c.value === '1'), JSON.stringify(cookies));
  assert.ok(!cookies.some((c) => c.name === 'shared'));
  await page.click('#next');
  await page.waitForSelector('#p');
  assert.equal(new globalThis.URL(page.url()).pathname, '/second');
  assert.equal(new globalThis.URL(page.url()).host, new globalThis.URL(URL).host);
  assert.equal(await page.title(), 'second page');
  assert.deepEqual(errors, []);
  console.log('preview in chromium: script ran, /second loaded, cookie kept');
} finally {
  await browser.close();
}
