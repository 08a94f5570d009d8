// Packaging: `npm pack` of the SDK, the tarball installed into a clean
// directory (offline: the package has no dependencies), then imported by
// its name, its types found by tsc, its bin installed, and, with a daemon
// (SBX_URL), one call made through it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtemp, rm, writeFile, readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { fileURLToPath } from 'node:url';
import { dirname, join } from 'node:path';

const here = dirname(fileURLToPath(import.meta.url));
const sdkDir = join(here, '..');
const repo = join(sdkDir, '..', '..');

test('npm pack, install the tarball in a clean directory, import it', async (t) => {
  const tmp = await mkdtemp(join(tmpdir(), 'sbx-pack-'));
  t.after(() => rm(tmp, { recursive: true, force: true }));
  const npm = (args, cwd) => execFileSync('npm', [...args, '--no-audit', '--no-fund', '--loglevel=error'], { cwd, encoding: 'utf8' });

  const packed = JSON.parse(npm(['pack', '--json', '--pack-destination', tmp], sdkDir));
  const files = packed[0].files.map((f) => f.path).sort();
  assert.ok(files.includes('index.d.ts') && files.includes('src/index.js') && files.includes('bin/sandboxd-mcp.js'), files.join(' '));
  assert.ok(!files.some((f) => f.startsWith('test/')), 'tests are not shipped');
  const pkg = JSON.parse(await readFile(join(sdkDir, 'package.json'), 'utf8'));
  assert.equal(pkg.dependencies, undefined, 'no runtime dependencies');

  const app = join(tmp, 'app');
  execFileSync('mkdir', ['-p', app]);
  await writeFile(join(app, 'package.json'), JSON.stringify({ name: 'app', private: true, type: 'module' }));
  npm(['install', '--offline', join(tmp, packed[0].filename)], app);

  await writeFile(join(app, 'main.mjs'), `
import { Sandboxd, Sandbox, RateLimitedError, ROUTES } from '@sandboxd/sdk';
import { TOOLS } from '@sandboxd/sdk/mcp';
const out = { routes: ROUTES.length, tools: TOOLS.length, sandbox: typeof Sandbox.create, error: new RateLimitedError('x').name };
if (process.env.SBX_URL) out.limits = (await new Sandboxd({ url: process.env.SBX_URL }).limits()).object;
console.log(JSON.stringify(out));
`);
  const out = JSON.parse(execFileSync(process.execPath, ['main.mjs'], { cwd: app, encoding: 'utf8' }));
  assert.equal(out.sandbox, 'function');
  assert.equal(out.error, 'RateLimitedError');
  assert.ok(out.routes >= 20 && out.tools >= 9);
  if (process.env.SBX_URL) assert.equal(out.limits, 'limits');

  // the types resolve from the installed package
  await writeFile(join(app, 'check.ts'), "import { Sandbox, type ExecResult } from '@sandboxd/sdk';\nexport async function f(s: Sandbox): Promise<number> { const r: ExecResult = await s.exec('ls'); return r.exitCode; }\n");
  await writeFile(join(app, 'tsconfig.json'), JSON.stringify({ compilerOptions: { module: 'nodenext', moduleResolution: 'nodenext', target: 'es2022', strict: true, noEmit: true, lib: ['es2022', 'dom', 'dom.asynciterable'], types: [] }, files: ['check.ts'] }));
  execFileSync(join(repo, 'node_modules', '.bin', 'tsc'), ['-p', app], { stdio: 'inherit' });

  // the bin
  const help = execFileSync(join(app, 'node_modules', '.bin', 'sandboxd-mcp'), ['--help'], { encoding: 'utf8' });
  assert.match(help, /usage: sandboxd-mcp/);
});
