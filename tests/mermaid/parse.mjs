#!/usr/bin/env node
// Checks every ```mermaid fenced block of a Markdown file with Mermaid's own parser.
//
//   node tests/mermaid/parse.mjs FILE.md
//
// Exit status and output:
//   0  every block parses; one line "ok <diagram type>" per block, in order, on stdout;
//   1  a block does not parse (or a fence is never closed); for each such block, its number,
//      its lines in FILE and the parser's message on stderr ("ok ..." lines still on stdout for
//      the blocks that parse);
//   2  usage error, FILE unreadable, or the parser could not be loaded (run `npm ci` here);
//   3  FILE has no mermaid block.
//
// `mermaid.parse` is the parser the renderer uses (jison grammars and @mermaid-js/parser), and
// it throws on a syntax error. It needs a DOM even to parse: titles and labels go through
// DOMPurify, which binds to `window` when it is first imported, so jsdom's window is made
// global *before* mermaid is imported (dynamically, below). Nothing is rendered.

import { readFileSync } from 'node:fs';

const usage = 'usage: node tests/mermaid/parse.mjs FILE.md';
const args = process.argv.slice(2);
if (args.length !== 1 || args[0].startsWith('-')) {
  console.error(usage);
  process.exit(2);
}
const file = args[0];

let markdown;
try {
  markdown = readFileSync(file, 'utf8');
} catch (e) {
  console.error(`cannot read ${file}: ${e.message}`);
  process.exit(2);
}

// CommonMark fenced code blocks: an opening fence of 3+ backticks or tildes indented by at most
// 3 spaces, closed by a fence of the same character at least as long with nothing after it.
// Every fenced block is tracked (a ```mermaid inside a ````markdown block is not a diagram);
// the blocks whose info string's first word is `mermaid` are returned.
function mermaidBlocks(text) {
  const lines = text.split(/\r\n|\r|\n/);
  const blocks = [];
  let open = null; // { char, len, indent, mermaid, start, body }
  lines.forEach((line, i) => {
    if (open === null) {
      const m = /^( {0,3})(`{3,}|~{3,})(.*)$/.exec(line);
      if (!m) return;
      const [, indent, fence, info] = m;
      if (fence[0] === '`' && info.includes('`')) return; // not a fence (CommonMark)
      open = {
        char: fence[0],
        len: fence.length,
        indent: indent.length,
        mermaid: info.trim().split(/\s+/)[0].toLowerCase() === 'mermaid',
        start: i + 1,
        body: [],
      };
      return;
    }
    const close = /^ {0,3}(`{3,}|~{3,})[ \t]*$/.exec(line);
    if (close && close[1][0] === open.char && close[1].length >= open.len) {
      if (open.mermaid) blocks.push({ start: open.start, end: i + 1, text: open.body.join('\n') });
      open = null;
      return;
    }
    // content lines lose up to the opening fence's indentation
    let strip = 0;
    while (strip < open.indent && line[strip] === ' ') strip++;
    open.body.push(line.slice(strip));
  });
  if (open !== null && open.mermaid) {
    // GitHub would render to the end of the file; a writer that forgets the fence has a bug
    blocks.push({ start: open.start, end: null, text: open.body.join('\n') });
  }
  return blocks;
}

const blocks = mermaidBlocks(markdown);
if (blocks.length === 0) {
  console.error(`no \`\`\`mermaid block in ${file}`);
  process.exit(3);
}

let mermaid;
try {
  const { JSDOM } = await import('jsdom');
  const { window } = new JSDOM('<!DOCTYPE html><html><body></body></html>');
  globalThis.window = window;
  globalThis.document = window.document;
  mermaid = (await import('mermaid')).default;
  mermaid.initialize({ startOnLoad: false, logLevel: 'fatal' });
} catch (e) {
  console.error(
    `cannot load mermaid and jsdom (run \`npm ci --prefix tests/mermaid\`): ${e.message}`
  );
  process.exit(2);
}

// Mermaid accepts an xychart whose `line`/`bar` has fewer or more values than the band x-axis
// has categories (it pads with gaps or drops the excess without a word); lipfp's charts must
// not, so after the parse the chart's database is replayed with its setters counting values.
// (This check is ours, not Mermaid's: its messages say "xychart:", never "Parse error".)
async function checkXychartCounts(text) {
  const first = await mermaid.mermaidAPI.getDiagramFromText(text);
  const db = first.db;
  if (!db.lipfpCounts) {
    for (const kind of ['Line', 'Bar']) {
      const set = db[`set${kind}Data`];
      db[`set${kind}Data`] = function (title, data) {
        db.lipfpCounts.plots.push({ kind: kind.toLowerCase(), title: title?.text ?? '', n: data.length });
        return set.apply(this, arguments);
      };
    }
    const setBand = db.setXAxisBand;
    db.setXAxisBand = function (categories) {
      db.lipfpCounts.categories = categories.length;
      return setBand.apply(this, arguments);
    };
  }
  db.lipfpCounts = { categories: null, plots: [] };
  await mermaid.mermaidAPI.getDiagramFromText(text);
  const { categories, plots } = db.lipfpCounts;
  if (categories === null) return;
  for (const [i, p] of plots.entries()) {
    if (p.n !== categories) {
      const name = p.title ? ` "${p.title}"` : '';
      throw new Error(
        `xychart: ${p.kind} ${i + 1}${name} has ${p.n} values but the x-axis has ${categories} ` +
          'categories (Mermaid would draw it with gaps or drop values silently)'
      );
    }
  }
}

let failed = 0;
for (const [k, block] of blocks.entries()) {
  const where = block.end === null
    ? `lines ${block.start}- (never closed)`
    : `lines ${block.start}-${block.end}`;
  if (block.end === null) {
    failed++;
    console.error(`mermaid block ${k + 1} (${file}, ${where}): the fence is never closed`);
    continue;
  }
  try {
    const result = await mermaid.parse(block.text);
    if (!result || !result.diagramType) {
      throw new Error('mermaid.parse returned no diagram type');
    }
    if (result.diagramType === 'xychart') await checkXychartCounts(block.text);
    console.log(`ok ${result.diagramType}`);
  } catch (e) {
    failed++;
    const message = (e && (e.message ?? e.str)) || String(e);
    console.error(`mermaid block ${k + 1} (${file}, ${where}): ${message}`);
  }
}
process.exit(failed ? 1 : 0);
