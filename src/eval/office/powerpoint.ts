/**
 * `powerpoint` files (.pptx): no well-kept npm reader extracts slides without a heavy tail (OCR, PDF), so
 * the package is unzipped with fflate and its XML read with @xmldom/xmldom. Slides come in the
 * presentation's order (`ppt/presentation.xml`, not the file names); a slide's shapes in their order —
 * a text box's paragraphs as lines, a table as rows, groups walked into — then its speaker notes.
 * `pages` picks slides by number, from 1.
 */
import { posix } from 'node:path';
import type { Element as XmlElement } from '@xmldom/xmldom';
import { checkZip, loadPackages, MAX_CELLS, tableText, tidy, unzipSome, type ExtractedDocument, type ExtractedTable } from './shared.js';
import { OPTIONAL_FEATURES } from '../../config/optional.js';

type Fflate = typeof import('fflate');
type XmlDom = typeof import('@xmldom/xmldom');

const NS = {
  p: 'http://schemas.openxmlformats.org/presentationml/2006/main',
  a: 'http://schemas.openxmlformats.org/drawingml/2006/main',
  r: 'http://schemas.openxmlformats.org/officeDocument/2006/relationships',
  rel: 'http://schemas.openxmlformats.org/package/2006/relationships',
  mc: 'http://schemas.openxmlformats.org/markup-compatibility/2006',
} as const;

/** Placeholders of a notes page that are not the notes. */
const NOT_NOTES = new Set(['sldImg', 'sldNum', 'hdr', 'ftr', 'dt']);

function children(el: XmlElement, ns: string, name: string): XmlElement[] {
  return Array.from(el.childNodes).filter(
    (c): c is XmlElement => c.nodeType === 1 && (c as XmlElement).localName === name && (c as XmlElement).namespaceURI === ns,
  );
}

function descendants(el: XmlElement, ns: string, name: string): XmlElement[] {
  return Array.from(el.getElementsByTagNameNS(ns, name));
}

/** A paragraph's text: its runs and fields, `<a:br>` as a line break. */
function paragraphText(p: XmlElement): string {
  let out = '';
  const walk = (el: XmlElement) => {
    for (const c of Array.from(el.childNodes)) {
      if (c.nodeType !== 1) continue;
      const e = c as XmlElement;
      if (e.namespaceURI === NS.a && e.localName === 't') out += e.textContent ?? '';
      else if (e.namespaceURI === NS.a && e.localName === 'br') out += '\n';
      else walk(e);
    }
  };
  walk(p);
  return out;
}

function bodyText(txBody: XmlElement): string {
  return children(txBody, NS.a, 'p')
    .map(paragraphText)
    .filter((t) => t.trim())
    .join('\n');
}

interface SlideContent {
  lines: string[];
  tables: string[][][];
}

/** Walks a shape tree (or group) in order. */
function walkShapes(tree: XmlElement, out: SlideContent, budget: { cells: number }): void {
  for (const c of Array.from(tree.childNodes)) {
    if (c.nodeType !== 1) continue;
    const el = c as XmlElement;
    if (el.namespaceURI === NS.p && el.localName === 'sp') {
      for (const body of children(el, NS.p, 'txBody')) {
        const text = bodyText(body);
        if (text.trim()) out.lines.push(text);
      }
    } else if (el.namespaceURI === NS.p && el.localName === 'grpSp') walkShapes(el, out, budget);
    else if (el.namespaceURI === NS.p && el.localName === 'graphicFrame') {
      for (const tbl of descendants(el, NS.a, 'tbl')) {
        const rows = children(tbl, NS.a, 'tr').map((tr) =>
          children(tr, NS.a, 'tc').map((tc) =>
            // A cell a merge covers is empty: its text is in the merge's first cell.
            tc.getAttribute('hMerge') === '1' || tc.getAttribute('vMerge') === '1'
              ? ''
              : children(tc, NS.a, 'txBody').map(bodyText).join(' ').replace(/\s+/g, ' ').trim(),
          ),
        );
        budget.cells += rows.reduce((n, r) => n + r.length, 0);
        if (budget.cells > MAX_CELLS) throw new Error(`the presentation has more than ${MAX_CELLS} table cells`);
        out.tables.push(rows);
        out.lines.push(tableText(rows));
      }
    } else if (el.namespaceURI === NS.mc && el.localName === 'AlternateContent') {
      // The same content twice (for new and old readers): read the first choice only.
      const choice = children(el, NS.mc, 'Choice')[0] ?? children(el, NS.mc, 'Fallback')[0];
      if (choice) walkShapes(choice, out, budget);
    }
  }
}

/** `Id → target path` of a part's relationships, targets resolved against the part's folder. */
function relationships(parse: (name: string) => XmlElement | undefined, part: string): Map<string, { target: string; type: string }> {
  const relsPath = posix.join(posix.dirname(part), '_rels', `${posix.basename(part)}.rels`);
  const rels = parse(relsPath);
  const out = new Map<string, { target: string; type: string }>();
  if (!rels) return out;
  for (const r of children(rels, NS.rel, 'Relationship')) {
    const target = r.getAttribute('Target') ?? '';
    if (r.getAttribute('TargetMode') === 'External') continue;
    const path = target.startsWith('/') ? target.slice(1) : posix.normalize(posix.join(posix.dirname(part), target));
    out.set(r.getAttribute('Id') ?? '', { target: path, type: r.getAttribute('Type') ?? '' });
  }
  return out;
}

export async function powerpointText(bytes: Uint8Array, opts: { pages?: number[] } = {}): Promise<ExtractedDocument> {
  const [fflate, xmldom] = await loadPackages<[Fflate, XmlDom]>(['fflate', '@xmldom/xmldom'], OPTIONAL_FEATURES.powerpoint.feature);
  checkZip(fflate, bytes, 'the presentation');
  const files = unzipSome(fflate, bytes, (name) => name.startsWith('ppt/') && (name.endsWith('.xml') || name.endsWith('.rels')));
  const decoder = new TextDecoder();
  const parse = (name: string): XmlElement | undefined => {
    const data = files[name];
    if (!data) return undefined;
    const doc = new xmldom.DOMParser({
      onError: (level, msg) => {
        if (level !== 'warning') throw new Error(`${name}: ${msg}`);
      },
    }).parseFromString(decoder.decode(data), 'text/xml');
    return doc.documentElement ?? undefined;
  };
  const presentation = parse('ppt/presentation.xml');
  if (!presentation) throw new Error('the presentation cannot be read: it has no ppt/presentation.xml');
  const rels = relationships(parse, 'ppt/presentation.xml');
  const slideIds = descendants(presentation, NS.p, 'sldId');
  const slides = slideIds.map((s) => rels.get(s.getAttributeNS(NS.r, 'id') ?? '')?.target).filter((t): t is string => t !== undefined);
  for (const n of opts.pages ?? [])
    if (n > slides.length) throw new Error(`the presentation has ${slides.length} slide${slides.length === 1 ? '' : 's'}, not ${n}`);
  const wanted = opts.pages?.length ? opts.pages : slides.map((_, i) => i + 1);
  const tables: ExtractedTable[] = [];
  const parts: string[] = [];
  const budget = { cells: 0 };
  for (const n of wanted) {
    const path = slides[n - 1]!;
    const slide = parse(path);
    const content: SlideContent = { lines: [], tables: [] };
    const tree = slide && descendants(slide, NS.p, 'spTree')[0];
    if (tree) walkShapes(tree, content, budget);
    for (const rows of content.tables) tables.push({ where: `slide ${n}`, rows });
    const notesPath = [...relationships(parse, path).values()].find((r) => r.type.endsWith('/notesSlide'))?.target;
    const notes = notesPath ? parse(notesPath) : undefined;
    // The notes page also holds the slide's image, its number, header and footer: the rest is the notes.
    const noteText = notes
      ? descendants(notes, NS.p, 'sp')
          .filter((sp) => !descendants(sp, NS.p, 'ph').some((ph) => NOT_NOTES.has(ph.getAttribute('type') ?? '')))
          .flatMap((sp) => children(sp, NS.p, 'txBody').map(bodyText))
          .join('\n')
          .trim()
      : '';
    parts.push(
      [`## Slide ${n}`, ...content.lines.map((l) => (l.startsWith('| ') ? l : tidy(l))), ...(noteText ? [`Notes: ${tidy(noteText)}`] : [])].join('\n'),
    );
  }
  return { text: parts.join('\n\n'), tables };
}
