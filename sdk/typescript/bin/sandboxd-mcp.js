#!/usr/bin/env node
// sandboxd-mcp: the Model Context Protocol server over stdio (docs/mcp.md).
// SANDBOXD_URL and SANDBOXD_KEY as the sbx CLI; --keep (or
// SANDBOXD_MCP_KEEP=1) keeps the sandboxes it created after the session.
import { serveStdio } from '../src/mcp.js';

const args = process.argv.slice(2);
if (args.includes('--help') || args.includes('-h')) {
  process.stdout.write('usage: sandboxd-mcp [--keep]\n  env: SANDBOXD_URL (default http://127.0.0.1:8080), SANDBOXD_KEY (required)\n');
  process.exit(0);
}
for (const a of args) {
  if (a !== '--keep') {
    process.stderr.write(`sandboxd-mcp: unknown argument '${a}' (usage: sandboxd-mcp [--keep])\n`);
    process.exit(2);
  }
}
if (!process.env.SANDBOXD_KEY) {
  process.stderr.write('sandboxd-mcp: set SANDBOXD_KEY (and SANDBOXD_URL) in the environment\n');
  process.exit(2);
}
await serveStdio({ keep: args.includes('--keep') || process.env.SANDBOXD_MCP_KEEP === '1' });
