// Node only: pack and unpack a local directory with the system's tar
// (GNU or bsdtar), so the SDK carries no archive code of its own.

import { spawn } from 'node:child_process';
import { mkdir } from 'node:fs/promises';

function run(args, input, signal) {
  return new Promise((resolve, reject) => {
    const child = spawn('tar', args, { stdio: ['pipe', 'pipe', 'pipe'], signal });
    const out = [];
    let err = '';
    child.stdout.on('data', (c) => out.push(c));
    child.stderr.on('data', (c) => { if (err.length < 4096) err += c; });
    child.on('error', reject);
    child.on('close', (code) => {
      if (code === 0) resolve(new Uint8Array(Buffer.concat(out)));
      else reject(new Error(`tar ${args.join(' ')} failed (${code}): ${err.trim()}`));
    });
    child.stdin.on('error', () => {});
    child.stdin.end(input ?? undefined);
  });
}

/** The tar archive of directory `dir`'s contents (entries relative to it). */
export function tarCreate(dir, signal) {
  return run(['-c', '-f', '-', '-C', dir, '.'], null, signal);
}

/** Extract archive `bytes` into `dir` (created if missing). */
export async function tarExtract(bytes, dir, signal) {
  await mkdir(dir, { recursive: true });
  await run(['-x', '-f', '-', '-C', dir], bytes, signal);
}
