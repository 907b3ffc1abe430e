/**
 * A vectorstore's index: the source's chunks, embedded, in an embedded LanceDB table on disk next to the
 * agent (`<agent folder>/.troupe/vectors`, one table per agent and tool named `<agent>-<tool>-<hash>`).
 *
 * The hash in the name is the source's content hash (`source.ts`): at start, a table with the current
 * hash is opened as it is — nothing is read or embedded again — and otherwise the source is chunked,
 * embedded in batches and written as a new table, after which the tables of older hashes are dropped.
 * A Lance table is committed in one step, so a table that exists is complete; two processes building
 * the same one at once both end up using whichever was committed first. Replicas of an agent in one
 * process share one open table.
 *
 * Searches embed the query with the same model and return the nearest chunks by cosine distance as
 * SearchResults, `relevance_score` = 1 − distance (the cosine similarity), clamped to 0–1.
 */
import { mkdirSync } from 'node:fs';
import type { Connection, Table } from '@lancedb/lancedb';
import type { EmbeddingProvider } from '../../model/types.js';
import type { SourceChunk } from './source.js';
import type { SearchResult } from './types.js';

export const EMBEDDING_BATCH = 64;
export const MAX_TOP_K = 20;

export interface VectorIndexOptions {
  /** The LanceDB folder. */
  dbDir: string;
  /** `<agent>-<tool>`: this index's tables are `<name>-<hash>`. */
  name: string;
  /** The source's content hash. */
  hash: string;
  embedder: EmbeddingProvider;
  /** Reads the source into chunks; called only when the table has to be built. */
  chunks: () => SourceChunk[];
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
  lancedb ??= await import('@lancedb/lancedb');
  return lancedb;
}

function tableName(name: string, hash: string): string {
  return `${name}-${hash.slice(0, 16)}`;
}

async function embedAll(embedder: EmbeddingProvider, texts: string[]): Promise<number[][]> {
  const vectors: number[][] = [];
  for (let i = 0; i < texts.length; i += EMBEDDING_BATCH) vectors.push(...(await embedder.embed(texts.slice(i, i + EMBEDDING_BATCH))));
  const dims = vectors[0]?.length ?? 0;
  const odd = vectors.findIndex((v) => v.length !== dims);
  if (odd !== -1) throw new Error(`the embeddings differ in length (${dims} and ${vectors[odd]!.length})`);
  return vectors;
}

async function buildTable(db: Connection, name: string, opts: VectorIndexOptions): Promise<Table> {
  const chunks = opts.chunks();
  const vectors = await embedAll(
    opts.embedder,
    chunks.map((c) => c.text),
  );
  const rows = chunks.map((c, i) => ({ id: i, text: c.text, reference: c.reference, metadata: JSON.stringify(c.metadata), vector: vectors[i]! }));
  try {
    return await db.createTable(name, rows, { mode: 'create' });
  } catch (err) {
    // Another process committed the same table first: it holds the same content.
    if ((await db.tableNames()).includes(name)) return db.openTable(name);
    throw err;
  }
}

async function openIndex(opts: VectorIndexOptions): Promise<VectorIndex> {
  const { connect } = await loadLanceDb();
  mkdirSync(opts.dbDir, { recursive: true });
  const db = await connect(opts.dbDir);
  const name = tableName(opts.name, opts.hash);
  const existing = await db.tableNames();
  const built = !existing.includes(name);
  let table: Table;
  try {
    table = built ? await buildTable(db, name, opts) : await db.openTable(name);
    // Older versions of this index: their source or settings changed.
    for (const old of existing) if (old !== name && old.startsWith(`${opts.name}-`) && /^[0-9a-f]{16}$/.test(old.slice(opts.name.length + 1))) await db.dropTable(old);
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
      const [vector] = await opts.embedder.embed([query], signal);
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
  const key = JSON.stringify([opts.dbDir, opts.name, opts.hash]);
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
