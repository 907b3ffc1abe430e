/**
 * A vectorstore's index: the source's chunks, embedded, in an embedded LanceDB table on disk next to the
 * agent (`<agent folder>/.troupe/vectors`, one table per agent and tool named `<agent>-<tool>-<key>`).
 *
 * The key in the name is a hash of what the vectors depend on: the source's content hash (`source.ts`),
 * the embedding model, its endpoint and the dimension it answers in — learnt at each start from one
 * short probe text, so a server that changes its model behind the same name is noticed. At start a
 * table with the current key is opened as it is — nothing is read or embedded again — and otherwise the
 * source is chunked, embedded in batches and written as a new table (the key's parts kept in the
 * table's schema metadata), after which the tables of older keys are dropped, with a log line saying
 * what changed.
 *
 * Every vector is checked before it is stored or searched with: one per text, all of the probe's
 * dimension, every number finite, not all zeros (cosine distance is undefined for it). A server that
 * answers otherwise gets a MODEL_ERROR naming the vector and what is wrong — never a table of garbage
 * whose searches find nothing.
 *
 * A Lance table is committed in one step, so a table that exists is complete; two processes building
 * the same one at once both end up using whichever was committed first. Replicas of an agent in one
 * process share one open table.
 *
 * Searches embed the query with the same model and return the nearest chunks by cosine distance as
 * SearchResults, `relevance_score` = 1 − distance (the cosine similarity), clamped to 0–1.
 */
import { createHash } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import type { Connection, Table } from '@lancedb/lancedb';
import { importOptional } from '../optional.js';
import { TroupeError } from '../../protocol/errors.js';
import type { EmbeddingProvider } from '../../model/types.js';
import type { SourceChunk } from './source.js';
import type { SearchResult } from './types.js';
import { OPTIONAL_FEATURES } from '../../config/optional.js';

const EMBEDDING_BATCH = 64;
export const MAX_TOP_K = 20;
/** Embedded once per start to learn the dimension the model answers in. */
export const EMBEDDING_PROBE = 'Troupe vectorstore: which dimension do your embeddings have?';
/** Bumped when what goes into a key changes, so every older table is rebuilt. */
const KEY_VERSION = 2;
const META_PREFIX = 'troupe.';

export interface VectorIndexOptions {
  /** The LanceDB folder. */
  dbDir: string;
  /** `<agent>-<tool>`: this index's tables are `<name>-<key>`. */
  name: string;
  /** The source's content hash (files and settings). */
  sourceHash: string;
  embedder: EmbeddingProvider;
  /** Reads the source into chunks; called only when the table has to be built. */
  chunks: () => SourceChunk[];
  /** Told when a table is built, and why the one before it was not used. */
  log?: { info(fields: Record<string, unknown>, message: string): void };
}

/** What a table's vectors depend on: the parts of its key, kept in its schema metadata. */
interface IndexKey {
  source: string;
  model: string;
  endpoint: string;
  dimensions: number;
}

export interface VectorIndex {
  readonly table: string;
  /** True when this start built the table; false when it found one for the same content. */
  readonly built: boolean;
  readonly rows: number;
  search(query: string, topK: number, signal?: AbortSignal): Promise<SearchResult[]>;
  close(): Promise<void>;
}

let lancedb: typeof import('@lancedb/lancedb') | undefined;
async function loadLanceDb(): Promise<typeof import('@lancedb/lancedb')> {
  // LanceDB logs a warning for every table it creates; keep its log to errors unless asked otherwise.
  process.env.LANCEDB_LOG ??= 'error';
  // An optional peer dependency: the core install stays small; a missing one is named with its npm i.
  lancedb ??= await importOptional<typeof import('@lancedb/lancedb')>('@lancedb/lancedb', OPTIONAL_FEATURES.vectorstore.feature);
  return lancedb;
}

function tableName(name: string, key: IndexKey): string {
  const hash = createHash('sha256')
    .update(JSON.stringify({ v: KEY_VERSION, ...key }))
    .digest('hex');
  return `${name}-${hash.slice(0, 16)}`;
}

/**
 * Throws MODEL_ERROR unless `vectors` holds `count` vectors, each of `dims` finite numbers (or, without
 * `dims`, of the first one's length), not all zero. `offset` numbers the vectors in messages.
 */
function checkVectors(
  vectors: unknown,
  count: number,
  dims: number | undefined,
  embedder: Pick<EmbeddingProvider, 'model' | 'endpoint'>,
  offset = 0,
): number[][] {
  const fail = (what: string) => {
    throw new TroupeError('MODEL_ERROR', `the embeddings of ${embedder.model} at ${embedder.endpoint} are unusable: ${what}`, { model: embedder.model });
  };
  if (!Array.isArray(vectors) || vectors.length !== count) fail(`${Array.isArray(vectors) ? vectors.length : 'no'} vectors for ${count} texts`);
  const list = vectors as unknown[];
  const want = dims ?? (Array.isArray(list[0]) ? list[0].length : 0);
  list.forEach((v, i) => {
    const n = offset + i;
    if (!Array.isArray(v) || v.length === 0) return fail(`vector ${n} is empty or not a list`);
    if (v.length !== want)
      fail(`vector ${n} has ${v.length} dimensions, not ${want}${dims === undefined ? '' : ' (the dimension the model answered in at start)'}`);
    let zero = true;
    for (let j = 0; j < v.length; j++) {
      const x: unknown = v[j];
      if (typeof x !== 'number' || !Number.isFinite(x))
        fail(`vector ${n} holds ${x === null ? 'null' : typeof x === 'number' ? String(x) : typeof x} at [${j}]`);
      if (x !== 0) zero = false;
    }
    if (zero) fail(`vector ${n} is all zeros (it has no direction to compare)`);
  });
  return list as number[][];
}

async function embedAll(embedder: EmbeddingProvider, texts: string[], dims: number): Promise<number[][]> {
  const vectors: number[][] = [];
  for (let i = 0; i < texts.length; i += EMBEDDING_BATCH) {
    const batch = texts.slice(i, i + EMBEDDING_BATCH);
    vectors.push(...checkVectors(await embedder.embed(batch), batch.length, dims, embedder, i));
  }
  return vectors;
}

async function buildTable(db: Connection, lancedb: typeof import('@lancedb/lancedb'), name: string, key: IndexKey, opts: VectorIndexOptions): Promise<Table> {
  const chunks = opts.chunks();
  const vectors = await embedAll(
    opts.embedder,
    chunks.map((c) => c.text),
    key.dimensions,
  );
  const rows = chunks.map((c, i) => ({ id: i, text: c.text, reference: c.reference, metadata: JSON.stringify(c.metadata), vector: vectors[i]! }));
  const data = lancedb.makeArrowTable(rows);
  for (const [k, v] of Object.entries(key)) data.schema.metadata.set(`${META_PREFIX}${k}`, String(v));
  try {
    return await db.createTable(name, data, { mode: 'create' });
  } catch (err) {
    // Another process committed the same table first: it holds the same content.
    if ((await db.tableNames()).includes(name)) return db.openTable(name);
    throw err;
  }
}

/** The key a table was built with, from its schema metadata (undefined for tables of older versions). */
async function keyOf(db: Connection, name: string): Promise<Partial<IndexKey> | undefined> {
  try {
    const table = await db.openTable(name);
    try {
      const meta = (await table.schema()).metadata;
      const get = (k: keyof IndexKey) => meta.get(`${META_PREFIX}${k}`);
      if (!get('model')) return undefined;
      return { source: get('source'), model: get('model'), endpoint: get('endpoint'), dimensions: Number(get('dimensions')) };
    } finally {
      table.close();
    }
  } catch {
    return undefined;
  }
}

/** Why a table of `old` key is not the one for `key`, in words. */
function changes(old: Partial<IndexKey> | undefined, key: IndexKey): string[] {
  if (!old) return ['the table was built by an older version of Troupe, whose key left out the embedding model and dimension'];
  const out: string[] = [];
  if (old.model !== key.model) out.push(`the embedding model changed (${old.model} → ${key.model})`);
  if (old.dimensions !== key.dimensions) out.push(`the embedding dimension changed (${old.dimensions} → ${key.dimensions})`);
  if (old.endpoint !== key.endpoint) out.push(`the embeddings endpoint changed (${old.endpoint} → ${key.endpoint})`);
  if (old.source !== key.source) out.push('the source or its settings changed');
  return out;
}

async function openIndex(opts: VectorIndexOptions): Promise<VectorIndex> {
  const lancedb = await loadLanceDb();
  // The dimension is part of the key: ask the model for it (and check its answer) before anything else.
  const [probe] = checkVectors(await opts.embedder.embed([EMBEDDING_PROBE]), 1, undefined, opts.embedder);
  const key: IndexKey = { source: opts.sourceHash, model: opts.embedder.model, endpoint: opts.embedder.endpoint, dimensions: probe!.length };
  mkdirSync(opts.dbDir, { recursive: true });
  const db = await lancedb.connect(opts.dbDir);
  const name = tableName(opts.name, key);
  const existing = await db.tableNames();
  const built = !existing.includes(name);
  // Other versions of this index (the same name, another key): what they were built from no longer holds.
  const older = existing.filter((t) => t !== name && t.startsWith(`${opts.name}-`) && /^[0-9a-f]{16}$/.test(t.slice(opts.name.length + 1)));
  let table: Table;
  try {
    if (built) {
      const previous = older.length ? await keyOf(db, older[0]!) : undefined;
      const reasons = older.length ? changes(previous, key) : ['there was none'];
      opts.log?.info(
        { index: opts.name, table: name, previous: older[0], model: key.model, dimensions: key.dimensions, reasons },
        `building vector index ${name}: ${reasons.join('; ')}`,
      );
      table = await buildTable(db, lancedb, name, key, opts);
    } else table = await db.openTable(name);
    for (const old of older) await db.dropTable(old);
  } catch (err) {
    db.close();
    throw err;
  }
  const rows = await table.countRows();
  return {
    table: name,
    built,
    rows,
    async search(query, topK, signal) {
      const [vector] = checkVectors(await opts.embedder.embed([query], signal), 1, key.dimensions, opts.embedder);
      const found = (await table
        .vectorSearch(vector!)
        .distanceType('cosine')
        .limit(Math.max(1, Math.min(MAX_TOP_K, topK)))
        .toArray()) as Array<{ text: string; reference: string; metadata: string; _distance: number }>;
      return found.map((r) => ({
        matched_content: r.text,
        metadata_dict: JSON.parse(r.metadata) as Record<string, unknown>,
        source_reference: r.reference,
        relevance_score: Math.round(Math.max(0, Math.min(1, 1 - r._distance)) * 10_000) / 10_000,
      }));
    },
    async close() {
      table.close();
      db.close();
    },
  };
}

interface PoolEntry {
  index: Promise<VectorIndex>;
  refs: number;
}

/** Open indexes of this process by folder, name and hash: replicas of an agent share one. */
const open = new Map<string, PoolEntry>();

/** Opens (or builds) the index, shared with the other holders in this process; `release` when done. */
export async function acquireVectorIndex(opts: VectorIndexOptions): Promise<{ index: VectorIndex; release: () => Promise<void> }> {
  const key = JSON.stringify([opts.dbDir, opts.name, opts.sourceHash, opts.embedder.model, opts.embedder.endpoint]);
  let entry = open.get(key);
  if (!entry) {
    entry = { index: openIndex(opts), refs: 0 };
    open.set(key, entry);
    entry.index.catch(() => open.delete(key));
  }
  entry.refs++;
  let index: VectorIndex;
  try {
    index = await entry.index;
  } catch (err) {
    entry.refs--;
    throw err;
  }
  const held = entry;
  let released = false;
  return {
    index,
    release: async () => {
      if (released) return;
      released = true;
      if (--held.refs > 0) return;
      if (open.get(key) === held) open.delete(key);
      await index.close();
    },
  };
}
