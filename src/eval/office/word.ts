/**
 * `word` files (.docx) with mammoth: the document as mammoth's HTML (headings, paragraphs, lists,
 * tables; images left out), walked into text — headings as `#` lines, list items as `- ` lines, tables
 * as rows. A .docx holds no layout, so its pages are the parts between explicit page breaks (a page
 * break Word or LibreOffice wrote into the file); `pages` picks among those.
 */
import type { Element as XmlElement, Node as XmlNode } from '@xmldom/xmldom';
import { checkZip, loadPackages, MAX_CELLS, tableText, tidy, type ExtractedDocument, type ExtractedTable } from './shared.js';
import { OPTIONAL_FEATURES } from '../../config/optional.js';

type Mammoth = typeof import('mammoth');
type Fflate = typeof import('fflate');
type XmlDom = typeof import('@xmldom/xmldom');

type Block = { page: number; text: string } | { page: number; rows: string[][] };

const ELEMENT = 1;
const TEXT = 3;

function textOf(node: XmlNode): string {
  if (node.nodeType === TEXT) return node.nodeValue ?? '';
  let out = '';
  for (let c = node.firstChild; c; c = c.nextSibling) out += (c as XmlElement).nodeName === 'br' ? '\n' : textOf(c);
  return out;
}

/** Walks mammoth's HTML into blocks, counting pages at `<hr>` (a page break, by our style map). */
function blocksOf(root: XmlNode): { blocks: Block[]; pages: number } {
  const blocks: Block[] = [];
  let page = 1;
  let line = '';
  let cells = 0;
  const flush = (prefix = '') => {
    const text = line.trim();
    if (text) blocks.push({ page, text: `${prefix}${text}` });
    line = '';
  };
  const walk = (node: XmlNode, prefix: string): void => {
    for (let c = node.firstChild; c; c = c.nextSibling) {
      if (c.nodeType === TEXT) {
        line += c.nodeValue ?? '';
        continue;
      }
      if (c.nodeType !== ELEMENT) continue;
      const name = (c as XmlElement).nodeName.toLowerCase();
      if (name === 'hr') {
        flush(prefix);
        page++;
      } else if (name === 'br') line += '\n';
      else if (name === 'table') {
        flush(prefix);
        const rows: string[][] = [];
        for (const tr of Array.from((c as XmlElement).getElementsByTagName('tr'))) {
          // Only this table's rows: a nested table's rows are text inside its cell.
          if (tr.parentNode !== c && tr.parentNode?.parentNode !== c) continue;
          const row = Array.from(tr.childNodes).flatMap((td) =>
            ['td', 'th'].includes((td as XmlElement).nodeName) ? [textOf(td).replace(/\s+/g, ' ').trim()] : [],
          );
          cells += row.length;
          if (cells > MAX_CELLS) throw new Error(`the document has more than ${MAX_CELLS} table cells`);
          rows.push(row);
        }
        blocks.push({ page, rows });
      } else if (/^h[1-6]$/.test(name)) {
        flush(prefix);
        walk(c, prefix);
        flush(`${'#'.repeat(Number(name[1]))} `);
      } else if (name === 'li') {
        flush(prefix);
        walk(c, prefix);
        flush('- ');
      } else if (name === 'p') {
        flush(prefix);
        walk(c, prefix);
        flush(prefix);
      } else walk(c, prefix);
    }
  };
  walk(root, '');
  flush();
  return { blocks, pages: page };
}

export async function wordText(bytes: Uint8Array, opts: { pages?: number[] } = {}): Promise<ExtractedDocument> {
  const [mammoth, fflate, xmldom] = await loadPackages<[Mammoth & { default?: Mammoth }, Fflate, XmlDom]>(
    ['mammoth', 'fflate', '@xmldom/xmldom'],
    OPTIONAL_FEATURES.word.feature,
  );
  checkZip(fflate, bytes, 'the document');
  const m = mammoth.default ?? mammoth;
  let html: string;
  try {
    const res = await m.convertToHtml(
      { buffer: Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength) },
      // Page breaks become <hr>; images are left out (not read, not inlined as data URIs).
      { styleMap: ["br[type='page'] => hr"], convertImage: m.images.imgElement(() => Promise.resolve({ src: '' })) },
    );
    html = res.value;
  } catch (err) {
    throw new Error(`the document cannot be read: ${(err as Error).message}`);
  }
  const doc = new xmldom.DOMParser({
    onError: (level, msg) => {
      if (level !== 'warning') throw new Error(msg);
    },
  }).parseFromString(`<body>${html}</body>`, 'text/xml');
  const { blocks, pages } = blocksOf(doc.documentElement!);
  const wanted = opts.pages?.length ? opts.pages : undefined;
  for (const p of wanted ?? [])
    if (p > pages) throw new Error(`the document has ${pages} page${pages === 1 ? '' : 's'} (counted at its page breaks), not ${p}`);
  const tables: ExtractedTable[] = [];
  const parts: string[] = [];
  let current = 0;
  for (const b of blocks) {
    if (wanted && !wanted.includes(b.page)) continue;
    if (wanted && b.page !== current) parts.push(`## Page ${b.page}`);
    current = b.page;
    if ('rows' in b) {
      tables.push({ where: `page ${b.page}`, rows: b.rows });
      parts.push(tableText(b.rows));
    } else parts.push(tidy(b.text));
  }
  return { text: parts.join('\n'), tables };
}
