// Every request/reply pair the integration harness recorded
// (SBX_TEST_RECORD=DIR, tests/integration/harness.h) checked against
// docs/openapi.yaml:
//   node tests/contract/check-exchanges.mjs DIR [docs/openapi.yaml]
// - the description is loaded strictly (a key given twice is an error);
// - each exchange's path and method must be an operation of it (an unknown
//   path may only answer 404, a method not there only 405, both in the
//   Error shape);
// - its status must be one the operation lists;
// - a JSON reply must match the schema of that status and content type,
//   with every object closed: a field the daemon sends that the schema does
//   not name fails, as does a required one it leaves out;
// - a JSON request the daemon accepted (2xx) must match the request schema:
//   a field the daemon takes must be described.
// Exit 1 with one line per problem. docs/api.md, "How the description is
// checked".
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { parse } from 'yaml';
import Ajv2020 from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';

const [dir, specPath = 'docs/openapi.yaml'] = process.argv.slice(2);
if (!dir) {
  console.error('usage: check-exchanges.mjs DIR [openapi.yaml]');
  process.exit(2);
}

// uniqueKeys (the default) makes a duplicate key an error; say it anyway.
let spec;
try {
  spec = parse(readFileSync(specPath, 'utf8'), { uniqueKeys: true, prettyErrors: true });
} catch (e) {
  console.log(`check-exchanges: ${specPath}: ${e.message}`);
  process.exit(1);
}

// Close every object schema that lists properties and says nothing of
// others, so an undocumented field in a reply fails.
function closed(s) {
  if (Array.isArray(s)) return s.map(closed);
  if (!s || typeof s !== 'object') return s;
  const out = {};
  for (const [k, v] of Object.entries(s)) {
    out[k] = k === 'properties' ? Object.fromEntries(Object.entries(v).map(([p, ps]) => [p, closed(ps)])) : closed(v);
  }
  if (out.properties && out.additionalProperties === undefined) out.additionalProperties = false;
  return out;
}

const ajv = new Ajv2020({ strict: false, allErrors: true });
addFormats(ajv);
// OpenAPI keywords that are not JSON Schema
for (const k of ['example', 'xml', 'externalDocs', 'discriminator']) ajv.addKeyword(k);
ajv.addSchema({ $id: 'spec', components: closed(spec.components) });
const schemaRef = (s) => JSON.parse(JSON.stringify(closed(s)).replaceAll('"#/components/', '"spec#/components/'));

const METHODS = ['get', 'put', 'post', 'delete', 'patch', 'head', 'options', 'trace'];
const templates = Object.keys(spec.paths).map((p) => ({
  path: p,
  re: new RegExp('^' + p.replace(/[.*+?^$()|[\]\\]/g, '\\$&').replace(/\{[^}]+\}/g, '[^/]+') + '$'),
}));
// a literal path wins over a template (/v1/receipts/public-key, not {id})
const literal = (p) => !p.includes('{');

function resolve(ref) {
  if (!ref || !ref.$ref) return ref;
  return ref.$ref.split('/').slice(1).reduce((o, k) => o[k], spec);
}

const cache = new Map();
function validator(key, schema) {
  if (!cache.has(key)) cache.set(key, ajv.compile(schemaRef(schema)));
  return cache.get(key);
}

const problems = [];
let count = 0;
const seen = new Set();

function check(x, where) {
  const url = x.path.split('?')[0];
  const matches = templates.filter((t) => t.re.test(url));
  const t = matches.find((m) => literal(m.path)) || matches[0];
  const errorShape = validator('Error', { $ref: '#/components/schemas/Error' });
  if (!t) {
    if (x.status !== 404 || !errorShape(x.reply)) problems.push(`${where}: ${x.method} ${url}: not described, answered ${x.status}`);
    return;
  }
  const item = spec.paths[t.path];
  const m = x.method.toLowerCase();
  const op = item[m];
  if (!op || !METHODS.includes(m)) {
    if (x.status !== 405 || !errorShape(x.reply)) problems.push(`${where}: ${x.method} ${t.path}: not described, answered ${x.status}`);
    return;
  }
  seen.add(`${x.method} ${t.path}`);
  const resp = resolve(op.responses[String(x.status)] || op.responses.default);
  if (!resp) {
    problems.push(`${where}: ${x.method} ${t.path} answered ${x.status}, which it does not list`);
    return;
  }
  const type = (x.type || '').split(';')[0].trim();
  if (x.reply !== null && type === 'application/json') {
    const media = resp.content && resp.content['application/json'];
    if (!media) {
      problems.push(`${where}: ${x.method} ${t.path} ${x.status}: a JSON reply where none is described`);
    } else {
      const v = validator(`${m} ${t.path} ${x.status}`, media.schema);
      if (!v(x.reply))
        problems.push(`${where}: ${x.method} ${t.path} ${x.status}: reply ${ajv.errorsText(v.errors)}: ${JSON.stringify(x.reply).slice(0, 300)}`);
    }
  } else if (resp.content && !resp.content[type] && x.status !== 204) {
    problems.push(`${where}: ${x.method} ${t.path} ${x.status}: a reply of type '${type}' where ${Object.keys(resp.content).join(', ')} is described`);
  }
  if (x.status >= 200 && x.status < 300 && x.request !== null && x.request_type.split(';')[0] === 'application/json') {
    const body = op.requestBody && op.requestBody.content && op.requestBody.content['application/json'];
    if (!body) {
      problems.push(`${where}: ${x.method} ${t.path}: took a JSON body that is not described`);
    } else {
      const v = validator(`req ${m} ${t.path}`, body.schema);
      if (!v(x.request))
        problems.push(`${where}: ${x.method} ${t.path}: accepted request ${ajv.errorsText(v.errors)}: ${JSON.stringify(x.request).slice(0, 300)}`);
    }
  }
}

let files = [];
try {
  files = readdirSync(dir).filter((n) => n.endsWith('.jsonl')).sort();
} catch (e) {
  console.log(`check-exchanges: ${dir}: ${e.message}`);
}
for (const f of files) {
  readFileSync(join(dir, f), 'utf8').split('\n').forEach((line, i) => {
    if (!line) return;
    count++;
    check(JSON.parse(line), `${f}:${i + 1}`);
  });
}
console.log(`check-exchanges: ${count} exchanges, ${seen.size} operations of ${Object.values(spec.paths)
  .reduce((n, it) => n + METHODS.filter((m) => it[m]).length, 0)} seen, ${problems.length} problems`);
for (const p of problems) console.log('  ' + p);
if (count === 0) {
  console.log('  no exchanges recorded');
  process.exit(1);
}
process.exit(problems.length ? 1 : 0);
