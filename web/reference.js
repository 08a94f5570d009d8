// The API reference page: renders /v1/openapi.json (OpenAPI 3.1) with
// plain DOM. Every string of the document is put in the page as text.

const METHODS = ['get', 'post', 'put', 'patch', 'delete'];

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) if (v !== undefined && v !== null) e.setAttribute(k, String(v));
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c ?? '')));
  return e;
}

const anchor = (s) => s.replace(/[^A-Za-z0-9]+/g, '-');
const refName = (ref) => ref.split('/').pop();

function typeOf(s) {
  if (!s) return '';
  if (s.$ref) return el('a', { href: `#schema-${anchor(refName(s.$ref))}` }, refName(s.$ref));
  let t = Array.isArray(s.type) ? s.type.join(' | ') : (s.type || '');
  if (s.type === 'array' && s.items) {
    const inner = typeOf(s.items);
    return inner instanceof Node ? el('span', {}, 'array of ', inner) : `array of ${inner}`;
  }
  if (s.enum) t += ` (${s.enum.map((v) => JSON.stringify(v)).join(', ')})`;
  if (s.format) t += `, ${s.format}`;
  return t;
}

function limits(s) {
  const out = [];
  for (const k of ['minimum', 'maximum', 'minLength', 'maxLength', 'maxItems', 'maxProperties', 'default'])
    if (s && s[k] !== undefined) out.push(`${k} ${JSON.stringify(s[k])}`);
  return out.join(', ');
}

function schemaTable(s, doc) {
  if (s?.$ref) s = doc.components.schemas[refName(s.$ref)] || s;
  if (!s || !s.properties) return el('p', { class: 'muted' }, typeOf(s) || 'any JSON');
  const req = new Set(s.required || []);
  const rows = Object.entries(s.properties).map(([name, p]) => el('tr', {},
    el('td', {}, name, req.has(name) ? ' *' : ''), el('td', {}, typeOf(p)), el('td', {}, limits(p)),
    el('td', { class: 'desc' }, p.description || '')));
  return el('table', { class: 'schema' }, el('thead', {}, el('tr', {}, el('th', {}, 'field'), el('th', {}, 'type'),
    el('th', {}, 'limits'), el('th', {}, 'description'))), el('tbody', {}, ...rows));
}

function operation(path, method, op, shared, doc) {
  const id = `op-${method}-${anchor(path)}`;
  const box = el('section', { class: 'card op', id },
    el('h3', {}, el('span', { class: `method ${method}` }, method.toUpperCase()), path),
    el('p', {}, op.summary || ''));
  if (op.description) box.append(el('p', { class: 'desc' }, op.description));
  const auth = op.security && op.security.length === 0 ? 'no auth' : 'Authorization: Bearer aas_sk_…';
  box.append(el('p', { class: 'muted' }, auth));
  const params = [...(shared || []), ...(op.parameters || [])];
  if (params.length) {
    box.append(el('h4', {}, 'Parameters'), el('table', { class: 'schema' },
      el('tbody', {}, ...params.map((p) => el('tr', {}, el('td', {}, p.name, p.required ? ' *' : ''),
        el('td', {}, p.in), el('td', {}, typeOf(p.schema)), el('td', {}, limits(p.schema)),
        el('td', { class: 'desc' }, p.description || ''))))));
  }
  const body = op.requestBody?.content?.['application/json']?.schema;
  if (body) box.append(el('h4', {}, 'Request body (JSON)'), schemaTable(body, doc));
  const rows = Object.entries(op.responses || {}).map(([code, r]) => {
    const rr = r.$ref ? doc.components.responses[refName(r.$ref)] : r;
    const schema = rr?.content?.['application/json']?.schema;
    return el('tr', {}, el('td', {}, code), el('td', {}, rr?.description || ''), el('td', {}, schema ? typeOf(schema) : ''));
  });
  box.append(el('h4', {}, 'Responses'), el('table', { class: 'schema' }, el('tbody', {}, ...rows)));
  return box;
}

async function main() {
  const spec = document.getElementById('spec');
  const toc = document.getElementById('toc');
  let doc;
  try {
    const res = await fetch('/v1/openapi.json', { credentials: 'omit' });
    doc = await res.json();
  } catch (e) {
    spec.replaceChildren(el('p', { class: 'error' }, `cannot load /v1/openapi.json: ${e.message}`));
    return;
  }
  const parts = [el('section', { class: 'card' }, el('h2', {}, `${doc.info?.title || 'API'} ${doc.info?.version || ''}`),
    el('p', { class: 'desc' }, doc.info?.description || ''), el('p', { class: 'muted' }, `OpenAPI ${doc.openapi}`))];
  for (const [path, item] of Object.entries(doc.paths || {})) {
    for (const m of METHODS) {
      if (!item[m]) continue;
      parts.push(operation(path, m, item[m], item.parameters, doc));
      toc.append(el('a', { href: `#op-${m}-${anchor(path)}` }, `${m.toUpperCase()} ${path}`));
    }
  }
  toc.append(el('h2', {}, 'Schemas'));
  for (const [name, s] of Object.entries(doc.components?.schemas || {})) {
    parts.push(el('section', { class: 'card op', id: `schema-${anchor(name)}` }, el('h3', {}, name),
      s.description ? el('p', { class: 'desc' }, s.description) : '', schemaTable(s, doc)));
    toc.append(el('a', { href: `#schema-${anchor(name)}` }, name));
  }
  spec.replaceChildren(...parts);
  document.body.setAttribute('data-loaded', 'yes');
  if (location.hash) document.getElementById(location.hash.slice(1))?.scrollIntoView();
}

main();
