/**
 * A test case's `files`, attached to its input message as A2A parts:
 *
 * - `text` and `csv`: file parts with the bytes (text/plain, text/csv), which the agent reads as text;
 * - `image`: a file part with the bytes (png, jpeg, gif or webp), which the agent's model looks at;
 * - `pdf`: its text, extracted with pdfjs-dist (Mozilla's PDF.js; only `pages` when given), as a text
 *   part headed by the file's name;
 * - `excel`, `word`, `powerpoint`: their text, tables kept as rows (`office/`), as a text part headed
 *   by the file's name — read with optional packages (exceljs, mammoth, fflate, @xmldom/xmldom) that a
 *   missing one names in a DEPENDENCY_MISSING error.
 *
 * A `description` goes before its file as a text part. A `url` is fetched (at most 10 MiB) and, unless
 * `cache: false`, kept under `<agent folder>/.troupe/files/` so the next run reads it from disk. What the
 * files say also becomes context for the groundedness judge.
 */
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { basename, extname, join, resolve } from 'node:path';
import type { FileInput } from '../config/agent.js';
import type { Part } from '../protocol/a2a.js';
import { TroupeError } from '../protocol/errors.js';
import { importOptional } from '../llm/optional.js';
import { META } from '../protocol/metadata.js';
import { excelText } from './office/excel.js';
import { powerpointText } from './office/powerpoint.js';
import type { ExtractedDocument } from './office/shared.js';
import { wordText } from './office/word.js';
import { OPTIONAL_FEATURES } from '../config/optional.js';

const MAX_FILE_BYTES = 10 * 1024 * 1024;
const IMAGE_TYPES: Record<string, string> = { '.png': 'image/png', '.jpg': 'image/jpeg', '.jpeg': 'image/jpeg', '.gif': 'image/gif', '.webp': 'image/webp' };

/** A case that cannot be run as written (a file type not supported yet, a file that cannot be read). */
export class CaseInputError extends Error {
  override readonly name = 'CaseInputError';
}

export interface AttachedFiles {
  parts: Part[];
  /** What the files say, for the groundedness judge. */
  context: string[];
}

async function readInput(file: FileInput, dir: string): Promise<{ bytes: Buffer; name: string }> {
  if (file.path) {
    const path = resolve(dir, file.path);
    const bytes = readFileSync(path);
    if (bytes.length > MAX_FILE_BYTES) throw new Error(`${file.path} is ${bytes.length} bytes; at most ${MAX_FILE_BYTES}`);
    return { bytes, name: basename(path) };
  }
  const url = file.url!;
  const name = basename(new URL(url).pathname) || 'download';
  const cached = join(dir, '.troupe', 'files', createHash('sha256').update(url).digest('hex').slice(0, 32));
  if (file.cache !== false && existsSync(cached)) return { bytes: readFileSync(cached), name };
  const res = await fetch(url, { signal: AbortSignal.timeout(60_000) });
  if (!res.ok) throw new Error(`${url} answered HTTP ${res.status}`);
  const declared = Number(res.headers.get('content-length') ?? 0);
  if (declared > MAX_FILE_BYTES) throw new Error(`${url} is ${declared} bytes; at most ${MAX_FILE_BYTES}`);
  const bytes = Buffer.from(await res.arrayBuffer());
  if (bytes.length > MAX_FILE_BYTES) throw new Error(`${url} is over ${MAX_FILE_BYTES} bytes`);
  if (file.cache !== false) {
    mkdirSync(join(dir, '.troupe', 'files'), { recursive: true });
    writeFileSync(cached, bytes);
  }
  return { bytes, name };
}

/** The text of a PDF's pages (all, or the 1-based `pages`), a page per paragraph. */
async function pdfText(bytes: Uint8Array, pages?: number[]): Promise<string> {
  const pdfjs = await importOptional<typeof import('pdfjs-dist/legacy/build/pdf.mjs')>('pdfjs-dist/legacy/build/pdf.mjs', OPTIONAL_FEATURES.pdf.feature);
  const doc = await pdfjs.getDocument({ data: new Uint8Array(bytes), isEvalSupported: false, disableFontFace: true, useSystemFonts: false, verbosity: 0 })
    .promise;
  try {
    const wanted = pages?.length ? pages : Array.from({ length: doc.numPages }, (_, i) => i + 1);
    const out: string[] = [];
    for (const n of wanted) {
      if (n > doc.numPages) throw new Error(`the PDF has ${doc.numPages} page${doc.numPages === 1 ? '' : 's'}, not ${n}`);
      const content = await (await doc.getPage(n)).getTextContent();
      out.push(
        content.items
          .map((item) => ('str' in item ? `${item.str}${item.hasEOL ? '\n' : ''}` : ''))
          .join('')
          .trim(),
      );
    }
    return out.join('\n\n');
  } finally {
    await doc.destroy();
  }
}

/** The text (and tables) of an office file; throws an Error saying what is wrong with it. */
export function officeText(file: Pick<FileInput, 'type' | 'pages' | 'sheet' | 'range'>, bytes: Uint8Array): Promise<ExtractedDocument> {
  if (file.type === 'excel')
    return excelText(bytes, { ...(file.sheet !== undefined ? { sheet: file.sheet } : {}), ...(file.range !== undefined ? { range: file.range } : {}) });
  if (file.type === 'word') return wordText(bytes, file.pages ? { pages: file.pages } : {});
  return powerpointText(bytes, file.pages ? { pages: file.pages } : {});
}

/** The parts for a case's files. Throws CaseInputError naming the case and the file. */
export async function attachFiles(caseName: string, files: FileInput[], dir: string): Promise<AttachedFiles> {
  const parts: Part[] = [];
  const context: string[] = [];
  for (const [i, file] of files.entries()) {
    const where = `test case "${caseName}" files[${i}] (${file.path ?? file.url})`;
    let read: { bytes: Buffer; name: string };
    try {
      read = await readInput(file, dir);
    } catch (err) {
      throw new CaseInputError(`${where}: cannot be read: ${(err as Error).message}`);
    }
    if (file.description) parts.push({ kind: 'text', text: `Attached ${read.name}: ${file.description}` });
    if (file.type === 'text' || file.type === 'csv') {
      parts.push({ kind: 'file', file: { name: read.name, mimeType: file.type === 'csv' ? 'text/csv' : 'text/plain', bytes: read.bytes.toString('base64') } });
      context.push(`${read.name}:\n${read.bytes.toString('utf8')}`);
    } else if (file.type === 'excel' || file.type === 'word' || file.type === 'powerpoint') {
      let doc: ExtractedDocument;
      try {
        doc = await officeText(file, read.bytes);
      } catch (err) {
        // A missing package is not this case's fault: say what to install, as its own error.
        if (err instanceof TroupeError) throw new CaseInputError(`${where}: ${err.message}`, { cause: err });
        throw new CaseInputError(`${where}: the ${file.type} file's text cannot be extracted: ${(err as Error).message}`);
      }
      const picked = [
        ...(file.sheet ? [`sheet ${file.sheet}`] : []),
        ...(file.range ? [`range ${file.range}`] : []),
        ...(file.pages?.length ? [`${file.type === 'powerpoint' ? 'slides' : 'pages'} ${file.pages.join(', ')}`] : []),
      ];
      const meta = {
        name: read.name,
        type: file.type,
        tables: doc.tables.length,
        ...(file.pages ? { pages: file.pages } : {}),
        ...(file.sheet ? { sheet: file.sheet } : {}),
        ...(file.range ? { range: file.range } : {}),
      };
      parts.push({ kind: 'text', text: `[file ${read.name} (${[file.type, ...picked].join(', ')})]\n${doc.text}`, metadata: { [META.file]: meta } });
      context.push(`${read.name}:\n${doc.text}`);
    } else if (file.type === 'image') {
      const mimeType = IMAGE_TYPES[extname(read.name).toLowerCase()];
      if (!mimeType) throw new CaseInputError(`${where}: images must be png, jpeg, gif or webp`);
      parts.push({ kind: 'file', file: { name: read.name, mimeType, bytes: read.bytes.toString('base64') } });
    } else {
      let text: string;
      try {
        text = await pdfText(read.bytes, file.pages);
      } catch (err) {
        throw new CaseInputError(`${where}: the PDF's text cannot be extracted: ${(err as Error).message}`);
      }
      const pages = file.pages?.length ? `, pages ${file.pages.join(', ')}` : '';
      parts.push({
        kind: 'text',
        text: `[file ${read.name} (pdf${pages})]\n${text}`,
        metadata: { [META.file]: { name: read.name, type: 'pdf', ...(file.pages ? { pages: file.pages } : {}) } },
      });
      context.push(`${read.name}:\n${text}`);
    }
  }
  return { parts, context };
}
