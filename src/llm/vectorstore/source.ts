/**
 * The source of a vectorstore tool, read into chunks of text to embed: what each chunk says, its
 * metadata, and where it came from.
 *
 * - `.json`: the records at `record_path` (dot notation; lists along the way are walked, as pandas'
 *   `json_normalize` does), or the document itself (a list of records, or one record). Nested objects
 *   are flattened to dotted columns (`author.name`), prefixed with `record_prefix` (json only). `meta_fields` may also
 *   name fields of the objects around the records (the nearest one that has it wins), written with
 *   `meta_prefix` in front when one is set — `json_normalize`'s `meta` / `meta_prefix`.
 * - `.jsonl`: one record per line. `.csv`: one record per row, the header names the columns.
 * - `.txt` / `.md`: the whole file is text; markdown is cut at its headings first, and each chunk carries
 *   the heading it falls under.
 * - a directory: every such file in it and below (sorted, dot-files skipped).
 *
 * A record's text is its `vector_field`(s) — when absent, the string fields that read like prose (on
 * average at least 20 characters, most with spaces), else every string field — and its metadata the
 * `meta_fields` (when absent: the other scalar fields). Text longer than `chunk_size` characters (default
 * 1000) is cut at word boundaries into chunks that overlap by `chunk_overlap` (default 100, at most a
 * tenth of a small chunk_size).
 *
 * The content hash covers every file's path and bytes and every setting that changes the chunks; with
 * the embedding model, its endpoint and dimension it makes the index's key (`index.ts`), so an index is
 * rebuilt exactly when one of them changes.
 */
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { extname, join, relative, resolve, sep } from 'node:path';
import { parse as parseCsv } from 'csv-parse/sync';

const VECTOR_SOURCE_EXTENSIONS = ['.json', '.jsonl', '.csv', '.txt', '.md'] as const;
const DEFAULT_CHUNK_SIZE = 1000;
const DEFAULT_CHUNK_OVERLAP = 100;
/** Caps on what one vectorstore reads: a source beyond them is refused with a message saying which. */
const SOURCE_LIMITS = {
  files: 1_000,
  fileBytes: 50 * 1024 * 1024,
  totalBytes: 200 * 1024 * 1024,
  chunks: 50_000,
  /** Deeper objects are kept as JSON text rather than flattened further. */
  depth: 16,
  columns: 1_000,
} as const;
/** Bumped when the way chunks are made changes, so old indexes are rebuilt. */
const FORMAT_VERSION = 1;

export interface SourceSettings {
  source: string;
  vector_field?: string | string[];
  meta_fields?: string[];
  chunk_size?: number;
  chunk_overlap?: number;
  record_path?: string;
  record_prefix?: string;
  meta_prefix?: string;
}

export interface SourceChunk {
  text: string;
  metadata: Record<string, unknown>;
  /** `faq.json#data.records[3]`, `guide.md#chunk-2`, `faq.json#records[0]/chunk-1`. */
  reference: string;
}

export interface SourceFile {
  /** Absolute path. */
  path: string;
  /** Relative to the agent's folder, with `/`: what references name. */
  name: string;
}

type Row = Record<string, unknown>;

/** The files of a source (one file, or the supported files of a directory), checked against the caps. */
export function sourceFiles(settings: Pick<SourceSettings, 'source'>, dir: string): SourceFile[] {
  const root = resolve(dir, settings.source);
  const name = (path: string) => relative(dir, path).split(sep).join('/') || path;
  if (!statSync(root).isDirectory()) return [{ path: root, name: name(root) }];
  const found: SourceFile[] = [];
  const walk = (folder: string) => {
    for (const entry of readdirSync(folder, { withFileTypes: true }).sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))) {
      if (entry.name.startsWith('.')) continue;
      const path = join(folder, entry.name);
      if (entry.isDirectory()) walk(path);
      else if (entry.isFile() && (VECTOR_SOURCE_EXTENSIONS as readonly string[]).includes(extname(entry.name).toLowerCase())) {
        found.push({ path, name: name(path) });
        if (found.length > SOURCE_LIMITS.files) throw new Error(`${settings.source} holds more than ${SOURCE_LIMITS.files} files`);
      }
    }
  };
  walk(root);
  if (found.length === 0) throw new Error(`${settings.source} holds no ${VECTOR_SOURCE_EXTENSIONS.join(', ')} files`);
  return found;
}

/** The hash of the files' names and bytes and of the settings (plus `extra`, anything else it should cover). */
export function sourceHash(files: SourceFile[], settings: SourceSettings, extra: Record<string, unknown>): string {
  const hash = createHash('sha256');
  const { source: _source, ...rest } = settings;
  hash.update(JSON.stringify({ v: FORMAT_VERSION, settings: rest, extra }));
  let total = 0;
  for (const file of files) {
    const bytes = readFileSync(file.path);
    total += bytes.length;
    if (bytes.length > SOURCE_LIMITS.fileBytes)
      throw new Error(`${file.name} is ${bytes.length} bytes; a source file may be at most ${SOURCE_LIMITS.fileBytes}`);
    if (total > SOURCE_LIMITS.totalBytes) throw new Error(`the source is over ${SOURCE_LIMITS.totalBytes} bytes`);
    hash.update(`\0${file.name}\0${bytes.length}\0`);
    hash.update(bytes);
  }
  return hash.digest('hex');
}

/** chunk_size and chunk_overlap with their defaults (the overlap always smaller than the size). */
function chunkSettings(settings: Pick<SourceSettings, 'chunk_size' | 'chunk_overlap'>): { size: number; overlap: number } {
  const size = settings.chunk_size ?? DEFAULT_CHUNK_SIZE;
  const overlap = settings.chunk_overlap ?? Math.min(DEFAULT_CHUNK_OVERLAP, Math.floor(size / 10));
  return { size, overlap: Math.min(overlap, size - 1) };
}

/**
 * Cuts text into pieces of at most `size` characters, each starting `overlap` characters before the
 * previous one ended. A cut falls on whitespace in the last 40% of a piece when there is some there.
 */
export function chunkText(text: string, size: number, overlap: number): Array<{ text: string; start: number }> {
  const clean = text.trim();
  if (clean.length <= size) return clean ? [{ text: clean, start: 0 }] : [];
  const out: Array<{ text: string; start: number }> = [];
  let pos = 0;
  while (pos < clean.length) {
    let end = Math.min(clean.length, pos + size);
    if (end < clean.length) {
      const floor = pos + Math.floor(size * 0.6);
      for (let i = end; i > floor; i--) {
        if (/\s/.test(clean[i]!)) {
          end = i;
          break;
        }
      }
    }
    const piece = clean.slice(pos, end).trim();
    if (piece) out.push({ text: piece, start: pos });
    if (end >= clean.length) break;
    let next = Math.max(pos + 1, end - overlap);
    // Start the next piece on a word: move past the rest of a word the overlap cut into.
    if (next > 0 && !/\s/.test(clean[next - 1]!)) {
      let i = next;
      while (i < end && !/\s/.test(clean[i]!)) i++;
      if (i < end) next = i;
    }
    while (next < clean.length && /\s/.test(clean[next]!)) next++;
    pos = next;
  }
  return out;
}

/** `json_normalize`-style flattening: nested objects become dotted columns; lists and deep values stay as they are. */
export function flattenRecord(value: unknown, prefix = ''): Row {
  const out: Row = Object.create(null) as Row;
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    out[prefix ? prefix.replace(/\.$/, '') : 'value'] = value;
    return out;
  }
  let columns = 0;
  const walk = (obj: Record<string, unknown>, path: string, depth: number) => {
    for (const [key, v] of Object.entries(obj)) {
      const name = path ? `${path}.${key}` : key;
      if (v !== null && typeof v === 'object' && !Array.isArray(v) && depth < SOURCE_LIMITS.depth) walk(v as Record<string, unknown>, name, depth + 1);
      else {
        if (++columns > SOURCE_LIMITS.columns) throw new Error(`a record has more than ${SOURCE_LIMITS.columns} fields`);
        out[`${prefix}${name}`] = v !== null && typeof v === 'object' && !Array.isArray(v) ? JSON.stringify(v) : v;
      }
    }
  };
  walk(value as Record<string, unknown>, '', 0);
  return out;
}

/** A value as text for embedding: strings as they are, lists of scalars joined, the rest as JSON. */
function asText(value: unknown): string {
  if (value === null || value === undefined) return '';
  if (typeof value === 'string') return value.trim();
  if (typeof value === 'number' || typeof value === 'boolean') return String(value);
  if (Array.isArray(value) && value.every((v) => v === null || typeof v !== 'object')) return value.filter((v) => v !== null).join(', ');
  return JSON.stringify(value);
}

function isScalar(value: unknown): boolean {
  return value === null || typeof value !== 'object' || (Array.isArray(value) && value.every((v) => v === null || typeof v !== 'object'));
}

/** The string columns that read like prose (see the file header), else every string column. */
export function detectVectorFields(rows: Row[], exclude: ReadonlySet<string>): string[] {
  const stats = new Map<string, { count: number; chars: number; spaced: number }>();
  for (const row of rows) {
    for (const [key, value] of Object.entries(row)) {
      if (typeof value !== 'string' || exclude.has(key)) continue;
      const s = stats.get(key) ?? { count: 0, chars: 0, spaced: 0 };
      s.count++;
      s.chars += value.length;
      if (/\s/.test(value.trim())) s.spaced++;
      stats.set(key, s);
    }
  }
  const prose = [...stats].filter(([, s]) => s.chars / s.count >= 20 && s.spaced * 2 >= s.count).map(([k]) => k);
  return prose.length ? prose : [...stats.keys()];
}

interface RecordWithContext {
  row: Row;
  /** The objects around the record, nearest first (for meta fields from outside it). */
  parents: unknown[];
  /** e.g. `data.records[3]`, `row-4`, `line-2`. */
  where: string;
}

function getPath(obj: unknown, path: string): unknown {
  let node = obj;
  for (const key of path.split('.')) {
    if (node === null || typeof node !== 'object' || Array.isArray(node) || !Object.prototype.hasOwnProperty.call(node, key)) return undefined;
    node = (node as Record<string, unknown>)[key];
  }
  return node;
}

/** The records of a JSON document at `record_path` (walking lists on the way), with the objects around each. */
function jsonRecords(doc: unknown, settings: SourceSettings, fileName: string): RecordWithContext[] {
  const prefix = settings.record_prefix ?? '';
  const out: RecordWithContext[] = [];
  const emit = (value: unknown, parents: unknown[], where: string) => {
    if (Array.isArray(value)) value.forEach((v, i) => out.push({ row: flattenRecord(v, prefix), parents, where: `${where}[${i}]` }));
    else if (value !== undefined) out.push({ row: flattenRecord(value, prefix), parents, where });
  };
  if (!settings.record_path) {
    emit(doc, [], 'records');
    return out;
  }
  const keys = settings.record_path.split('.');
  const walk = (node: unknown, depth: number, parents: unknown[], where: string) => {
    if (depth === keys.length) return emit(node, parents, where);
    if (Array.isArray(node)) {
      node.forEach((item, i) => walk(item, depth, parents, `${where}[${i}]`));
      return;
    }
    if (node === null || typeof node !== 'object') return;
    const key = keys[depth]!;
    if (!Object.prototype.hasOwnProperty.call(node, key)) return;
    walk((node as Record<string, unknown>)[key], depth + 1, [node, ...parents], where ? `${where}.${key}` : key);
  };
  walk(doc, 0, [], '');
  if (out.length === 0) throw new Error(`${fileName}: record_path ${JSON.stringify(settings.record_path)} leads to no records`);
  return out;
}

function structuredRecords(file: SourceFile, text: string, settings: SourceSettings): RecordWithContext[] {
  const ext = extname(file.path).toLowerCase();
  if (ext === '.json') {
    let doc: unknown;
    try {
      doc = JSON.parse(text);
    } catch (err) {
      throw new Error(`${file.name} is not valid JSON: ${(err as Error).message}`);
    }
    return jsonRecords(doc, settings, file.name);
  }
  if (ext === '.jsonl') {
    const out: RecordWithContext[] = [];
    text.split('\n').forEach((line, i) => {
      if (!line.trim()) return;
      let value: unknown;
      try {
        value = JSON.parse(line);
      } catch (err) {
        throw new Error(`${file.name} line ${i + 1} is not valid JSON: ${(err as Error).message}`);
      }
      out.push({ row: flattenRecord(value), parents: [], where: `line-${i + 1}` });
    });
    return out;
  }
  // csv: the header names the columns.
  let rows: Array<Record<string, string>>;
  try {
    rows = parseCsv(text, { columns: true, skip_empty_lines: true, trim: true, bom: true, relax_column_count: true }) as Array<Record<string, string>>;
  } catch (err) {
    throw new Error(`${file.name} is not valid CSV: ${(err as Error).message}`);
  }
  return rows.map((r, i) => {
    const row: Row = Object.create(null) as Row;
    for (const [k, v] of Object.entries(r)) row[k] = v;
    return { row, parents: [], where: `row-${i + 1}` };
  });
}

interface Found {
  vector: Set<string>;
  meta: Set<string>;
}

function recordChunks(file: SourceFile, records: RecordWithContext[], settings: SourceSettings, size: number, overlap: number, found: Found): SourceChunk[] {
  const metaFields = settings.meta_fields;
  const explicit = settings.vector_field === undefined ? undefined : Array.isArray(settings.vector_field) ? settings.vector_field : [settings.vector_field];
  // In a directory of different files, a file that has none of the vector fields gets its own.
  const present = explicit?.filter((f) => records.some((r) => f in r.row));
  for (const f of present ?? []) found.vector.add(f);
  const vectorFields = present?.length
    ? present
    : detectVectorFields(
        records.map((r) => r.row),
        new Set(metaFields ?? []),
      );
  if (vectorFields.length === 0 && records.length) throw new Error(`${file.name}: found no text fields to embed; name them with vector_field`);
  const metaPrefix = settings.meta_prefix ?? '';
  const chunks: SourceChunk[] = [];
  for (const record of records) {
    // Keys may come from the data: no prototype to write through.
    const metadata: Record<string, unknown> = Object.create(null) as Record<string, unknown>;
    if (metaFields) {
      for (const field of metaFields) {
        let value = record.row[field];
        if (value === undefined) {
          const outer = metaPrefix && field.startsWith(metaPrefix) ? field.slice(metaPrefix.length) : metaPrefix ? undefined : field;
          if (outer) for (const parent of record.parents) if ((value = getPath(parent, outer)) !== undefined) break;
        }
        if (value !== undefined) {
          metadata[field] = value;
          found.meta.add(field);
        }
      }
    } else {
      for (const [key, value] of Object.entries(record.row)) if (!vectorFields.includes(key) && isScalar(value)) metadata[key] = value;
    }
    const text = vectorFields
      .map((f) => asText(record.row[f]))
      .filter(Boolean)
      .join('\n');
    const pieces = chunkText(text, size, overlap);
    pieces.forEach((piece, i) => {
      chunks.push({ text: piece.text, metadata, reference: `${file.name}#${record.where}${pieces.length > 1 ? `/chunk-${i + 1}` : ''}` });
    });
  }
  return chunks;
}

const HEADING = /^#{1,6}[ \t]+(.+?)[ \t#]*$/gm;

function textChunks(file: SourceFile, text: string, size: number, overlap: number): SourceChunk[] {
  // Markdown is cut at its headings first, so a chunk stays within one section and carries its heading.
  const sections: Array<{ heading?: string; text: string }> = [];
  if (extname(file.path).toLowerCase() === '.md') {
    let last = 0;
    let heading: string | undefined;
    for (const m of text.matchAll(HEADING)) {
      if (m.index > last) sections.push({ ...(heading ? { heading } : {}), text: text.slice(last, m.index) });
      heading = m[1]!;
      last = m.index;
    }
    sections.push({ ...(heading ? { heading } : {}), text: text.slice(last) });
  } else sections.push({ text });
  const out: SourceChunk[] = [];
  for (const section of sections) {
    for (const piece of chunkText(section.text, size, overlap)) {
      out.push({ text: piece.text, metadata: section.heading ? { heading: section.heading } : {}, reference: `${file.name}#chunk-${out.length + 1}` });
    }
  }
  return out;
}

/** Reads every file of the source into chunks. Throws an Error naming the file and what is wrong. */
export function readSourceChunks(files: SourceFile[], settings: SourceSettings): SourceChunk[] {
  const { size, overlap } = chunkSettings(settings);
  const chunks: SourceChunk[] = [];
  const found: Found = { vector: new Set(), meta: new Set() };
  let records = 0;
  for (const file of files) {
    const text = readFileSync(file.path, 'utf8').replace(/^\uFEFF/, '');
    const ext = extname(file.path).toLowerCase();
    let made: SourceChunk[];
    if (ext === '.txt' || ext === '.md') made = textChunks(file, text, size, overlap);
    else {
      const structured = structuredRecords(file, text, settings);
      records += structured.length;
      made = recordChunks(file, structured, settings, size, overlap, found);
    }
    for (const c of made) {
      chunks.push(c);
      if (chunks.length > SOURCE_LIMITS.chunks) throw new Error(`the source makes more than ${SOURCE_LIMITS.chunks} chunks; raise chunk_size or index less`);
    }
  }
  if (records > 0) {
    const wanted = settings.vector_field === undefined ? [] : Array.isArray(settings.vector_field) ? settings.vector_field : [settings.vector_field];
    const noVector = wanted.filter((f) => !found.vector.has(f));
    if (noVector.length) throw new Error(`vector_field ${noVector.map((f) => JSON.stringify(f)).join(', ')} is in no record`);
    const noMeta = (settings.meta_fields ?? []).filter((f) => !found.meta.has(f));
    if (noMeta.length) throw new Error(`meta_fields ${noMeta.map((f) => JSON.stringify(f)).join(', ')} found in no record`);
  }
  if (chunks.length === 0) throw new Error(`${settings.source} has no text to index`);
  return chunks;
}
