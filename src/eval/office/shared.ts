/**
 * What the office readers share: the shape of what they extract (text in reading order, tables kept as
 * rows), how a table is written into the text, the zip-bomb check every OOXML file passes first (the
 * sizes its central directory declares, read without inflating anything), and loading the optional
 * packages a file type needs, all missing ones named in one error.
 */
import type { Unzipped, UnzipFileInfo } from 'fflate';
import { TroupeError } from '../../protocol/errors.js';
import { missingMessage } from '../../config/optional.js';
import { importOptional } from '../../llm/optional.js';

/** An OOXML file may unpack to at most this much; a bigger one is refused before it is parsed. */
export const MAX_UNZIPPED_BYTES = 64 * 1024 * 1024;
const MAX_ZIP_ENTRIES = 10_000;
/** Cells (excel) or table cells (word, powerpoint) one file may yield: past this, name a range or pages. */
export const MAX_CELLS = 200_000;

export interface ExtractedTable {
  /** `sheet Prices`, `page 2`, `slide 3`. */
  where: string;
  rows: string[][];
}

export interface ExtractedDocument {
  /** The text in reading order, each table as rows `| a | b |` in its place. */
  text: string;
  tables: ExtractedTable[];
}

/** A cell as table text: one line, `|` escaped. */
function cellText(cell: string): string {
  return cell.replace(/\s+/g, ' ').trim().replace(/\|/g, '\\|');
}

/** A table as Markdown-style rows, one per line. */
export function tableText(rows: string[][]): string {
  return rows.map((r) => `| ${r.map(cellText).join(' | ')} |`).join('\n');
}

/** A text block's whitespace tidied: runs of spaces kept single, lines trimmed, blank runs folded. */
export function tidy(text: string): string {
  return text
    .split('\n')
    .map((l) => l.replace(/[ \t\u00a0]+/g, ' ').trim())
    .join('\n')
    .replace(/\n{3,}/g, '\n\n')
    .trim();
}

type Fflate = typeof import('fflate');

/** Throws when the archive declares more than the caps, or is no zip at all. Inflates nothing. */
export function checkZip(fflate: Fflate, bytes: Uint8Array, what: string): void {
  let total = 0;
  let entries = 0;
  try {
    fflate.unzipSync(bytes, {
      filter: (f: UnzipFileInfo) => {
        total += f.originalSize;
        if (++entries > MAX_ZIP_ENTRIES) throw new ZipTooBig(`it holds more than ${MAX_ZIP_ENTRIES} files`);
        if (total > MAX_UNZIPPED_BYTES) throw new ZipTooBig(`it unpacks to more than ${MAX_UNZIPPED_BYTES} bytes`);
        return false;
      },
    });
  } catch (err) {
    if (err instanceof ZipTooBig) throw new Error(`${what} is too big to read: ${err.message}`);
    throw new Error(`${what} is not a valid file of its type (not a zip archive: ${(err as Error).message})`);
  }
}

class ZipTooBig extends Error {}

/** The files of an archive whose name `want` accepts, inflated (the archive checked with checkZip first). */
export function unzipSome(fflate: Fflate, bytes: Uint8Array, want: (name: string) => boolean): Unzipped {
  return fflate.unzipSync(bytes, { filter: (f) => want(f.name) });
}

/**
 * Imports the optional packages a file type needs. When any is missing, one DEPENDENCY_MISSING names
 * them all and the single `npm i` that installs them.
 */
export async function loadPackages<T extends unknown[]>(specifiers: { [K in keyof T]: string }, feature: string): Promise<T> {
  const results = await Promise.allSettled(specifiers.map((s) => importOptional<unknown>(s, feature)));
  const missing = results.flatMap((r) =>
    r.status === 'rejected' && r.reason instanceof TroupeError && r.reason.code === 'DEPENDENCY_MISSING' ? [String(r.reason.details?.package)] : [],
  );
  if (missing.length > 1) {
    throw new TroupeError('DEPENDENCY_MISSING', missingMessage(feature, missing), { packages: missing });
  }
  const failed = results.find((r) => r.status === 'rejected');
  if (failed) throw (failed as PromiseRejectedResult).reason;
  return results.map((r) => (r as PromiseFulfilledResult<unknown>).value) as T;
}
