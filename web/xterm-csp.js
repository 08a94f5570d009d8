// xterm.js under the dashboard's CSP (docs/dashboard.md, "Third-party
// code"). xterm's DOM renderer and viewport put their CSS (colours,
// row sizes, the scrollbar) in <style> elements whose text they set; the
// policy's `style-src 'self'` refuses every inline <style>, even an empty
// one, so the terminal would have no colours and collapsed rows. While
// xterm is created and opened, installStyleShim() makes
// document.createElement('style') return an inert <template> (never
// rendered, never parsed as CSS) whose `textContent` goes into a
// constructable stylesheet adopted by the document instead: CSS the
// page's own script made, which the policy does not cover, so nothing is
// loosened for anything else. The CSS is xterm's (colours and sizes from
// its options), never the guest's output.

const sheets = new Set();

function styleStandIn(doc, create) {
  const stand = create.call(doc, 'template');
  const sheet = new CSSStyleSheet();
  let text = '';
  sheets.add(sheet);
  doc.adoptedStyleSheets = [...doc.adoptedStyleSheets, sheet];
  Object.defineProperty(stand, 'textContent', {
    get: () => text,
    set: (v) => { text = String(v ?? ''); sheet.replaceSync(text); },
  });
  stand.remove = () => {
    sheets.delete(sheet);
    doc.adoptedStyleSheets = doc.adoptedStyleSheets.filter((s) => s !== sheet);
    Element.prototype.remove.call(stand);
  };
  return stand;
}

// Only document.createElement('style') is changed; the page's own code
// makes no <style> element. Installed once, before the first terminal.
export function installStyleShim(doc = document) {
  if (doc.__sbxStyleShim) return;
  const create = Document.prototype.createElement;
  doc.createElement = function createElement(tag, opts) {
    if (String(tag).toLowerCase() === 'style') return styleStandIn(this, create);
    return create.call(this, tag, opts);
  };
  doc.__sbxStyleShim = true;
}

// How many stand-in sheets are live (the tests check none is left).
export const styleSheetsLive = () => sheets.size;
