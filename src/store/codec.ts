/**
 * Keys and value encoding shared by every ThreadStore, so the memory store rejects and accepts exactly
 * what the KV store does.
 */
import { z } from 'zod';
import { DEFAULT_MAX_PAYLOAD, META, MessageSchema, TaskStateSchema, TroupeError, describeZodError } from '../protocol/index.js';
import { ThreadRecordSchema, type ThreadListEntry, type ThreadListFilter, type ThreadRecord } from './types.js';

/**
 * KV keys are NATS subjects: letters, digits, `-`, `_`, `/`, `=` in dot-separated tokens. The tenant is a
 * single token so that `<tenant>.>` selects exactly one tenant's keys (with a dot allowed, tenant `a.b`
 * thread `c` and tenant `a` thread `b.c` would share a key and `a.>` would list both).
 */
const KEY_TOKEN = '[A-Za-z0-9_=/-]+';
const TENANT_RE = new RegExp(`^${KEY_TOKEN}$`);
const THREAD_ID_RE = new RegExp(`^${KEY_TOKEN}(?:\\.${KEY_TOKEN})*$`);

function checkTenant(tenant: string): void {
  if (!TENANT_RE.test(tenant)) {
    throw new TroupeError('INVALID_MESSAGE', `invalid tenant "${tenant}" for the thread store: use A-Z, a-z, 0-9, -, _, / and =`);
  }
}

export function threadKey(tenant: string, threadId: string): string {
  checkTenant(tenant);
  if (!THREAD_ID_RE.test(threadId)) {
    throw new TroupeError(
      'INVALID_MESSAGE',
      `invalid thread id "${threadId}" for the thread store: use A-Z, a-z, 0-9, -, _, / and =, with single dots between`,
    );
  }
  return `${tenant}.${threadId}`;
}

/** Key prefix of one tenant's records; the thread id is what follows it. */
export function tenantPrefix(tenant: string): string {
  checkTenant(tenant);
  return `${tenant}.`;
}

const encoder = new TextEncoder();
// fatal: a value with broken UTF-8 is corrupt, not something to decode into replacement characters.
const decoder = new TextDecoder('utf-8', { fatal: true });

/**
 * History messages an earlier write already checked against the record's message schema. A message in a
 * history is never changed (the thread machine builds a new history array around the same message
 * objects), so each is checked once in its thread's life instead of once per turn; a history at its limit
 * is most of a record.
 */
const checkedMessages = new WeakSet<object>();

/**
 * Marks a record's history as checked: a record just read from the store and checked there, or a node's
 * own copy of a record it committed (a dormant thread's). Its next write then checks only what is new.
 */
export function historyChecked(record: ThreadRecord): void {
  for (const message of record.task.history ?? []) checkedMessages.add(message);
}

/**
 * Arrays of a record whose JSON is already known, as UTF-8 bytes (the elements joined by commas, no
 * brackets): a live thread's history and route log, kept by an `ArrayJson` across its writes. Looked up by
 * the array itself, so an entry goes with the array (a thread's context holds its arrays until its next turn).
 */
const preEncoded = new WeakMap<readonly unknown[], Uint8Array>();

/**
 * Where an array that follows `old` (the same objects: new ones appended, the oldest dropped, as a thread's
 * history and route log change) starts in it, and how many of its elements from there are `old`'s, in
 * order: `items[0, same)` are `old[from, from + same)`, the rest is new. `same` 0: nothing in common.
 * Compares references only, so it touches the arrays and none of their elements.
 */
export function overlapOf(old: readonly unknown[], items: readonly unknown[]): { from: number; same: number } {
  const from = items.length > 0 ? old.indexOf(items[0]) : -1;
  let same = 0;
  if (from >= 0) while (same < items.length && from + same < old.length && old[from + same] === items[same]) same++;
  return { from, same };
}

/**
 * The JSON of an append-mostly array of objects that are never changed once in it (a thread's history
 * and route log: new arrays around the same objects, the oldest pruned from the front, an element
 * replaced now and then), kept from one write to the next so that each element is encoded once: the
 * elements the last array also held (one run, by identity) are copied from the last bytes, the others
 * encoded. It holds one buffer (the last array's JSON as UTF-8) and where each element ends in it, which
 * `encodeRecord` copies into the record's bytes as they are: no string of the whole array is made.
 */
export class ArrayJson {
  #items: readonly unknown[] = [];
  #bytes = new Uint8Array(0);
  /** End offset of each element in #bytes (elements are separated by one comma). */
  #ends: number[] = [];

  /**
   * An ArrayJson that holds `items` as encoded already, from what `arrayJsonText` gave for them (a dormant
   * thread's history, read back into the same objects): its next `encode` encodes only what is new. When
   * the two do not agree, an empty one (it then encodes everything).
   */
  static seeded(items: readonly unknown[], text: string, ends: string): ArrayJson {
    const out = new ArrayJson();
    const offsets = ends === '' ? [] : ends.split(',').map((e) => parseInt(e, 36));
    const bytes = encoder.encode(text);
    if (offsets.length !== items.length || (offsets.at(-1) ?? 0) !== bytes.length) return out;
    out.#items = items;
    out.#bytes = bytes;
    out.#ends = offsets;
    return out;
  }

  /** Encodes `items` for `encodeRecord` (the elements' JSON, as bytes); returns `items`. */
  encode<T extends readonly unknown[]>(items: T): T {
    const old = this.#items;
    const { from, same } = overlapOf(old, items);
    const keepStart = same > 0 && from > 0 ? this.#ends[from - 1]! + 1 : 0;
    const keepEnd = same > 0 ? this.#ends[from + same - 1]! : 0;
    const ends: number[] = [];
    for (let i = 0; i < same; i++) ends.push(this.#ends[from + i]! - keepStart);
    // The new elements' JSON, encoded at once into the result.
    const added = elementsJson(items, same, keepEnd - keepStart, ends);
    const bytes = new Uint8Array(ends.at(-1) ?? 0);
    bytes.set(this.#bytes.subarray(keepStart, keepEnd));
    if (added.length > 0) encoder.encodeInto(`${same > 0 ? ',' : ''}${added.join(',')}`, bytes.subarray(keepEnd - keepStart));
    this.#items = items;
    this.#bytes = bytes;
    this.#ends = ends;
    preEncoded.set(items, bytes);
    return items;
  }
}

/**
 * An array's elements as JSON, joined by commas as in the array's own JSON, and where each element ends in
 * that text's UTF-8 bytes (base 36, comma-separated): what `ArrayJson.seeded` reads back.
 */
export function arrayJsonText(items: readonly unknown[]): { text: string; ends: string } {
  const ends: number[] = [];
  // Joined, not appended: a string made by `+=` is a tree of its pieces, and this one is kept while the
  // thread sleeps.
  return { text: elementsJson(items, 0, 0, ends).join(','), ends: ends.map((e) => e.toString(36)).join(',') };
}

/**
 * The JSON of each of `items` from `start` on; pushes to `ends` where each ends in the UTF-8 bytes of the
 * array's elements joined by commas, counting from `at` (where element `start` begins, less its comma).
 */
function elementsJson(items: readonly unknown[], start: number, at: number, ends: number[]): string[] {
  const parts: string[] = [];
  for (let i = start; i < items.length; i++) {
    const json = JSON.stringify(items[i]) ?? 'null';
    parts.push(json);
    at += Buffer.byteLength(json) + (i > 0 ? 1 : 0);
    ends.push(at);
  }
  return parts;
}

/** The objects on the way to the arrays an `ArrayJson` encodes: the record, its task, the task's metadata. */
const WALKED = new Set(['task', 'metadata']);

/**
 * A record's JSON as UTF-8 bytes, from text and the pre-encoded arrays: text is encoded when an array
 * comes and at the end; the pieces are copied once into the result.
 */
class RecordBytes {
  #text = '';
  #pieces: Uint8Array[] = [];
  #length = 0;

  text(json: string): void {
    this.#text += json;
  }

  /** `[…]` around an array's pre-encoded elements. */
  array(elements: Uint8Array): void {
    this.#text += '[';
    this.flush();
    this.piece(elements);
    this.#text = ']';
  }

  bytes(): Uint8Array {
    this.flush();
    if (this.#pieces.length === 1) return this.#pieces[0]!;
    const out = new Uint8Array(this.#length);
    let at = 0;
    for (const p of this.#pieces) {
      out.set(p, at);
      at += p.length;
    }
    return out;
  }

  private piece(bytes: Uint8Array): void {
    this.#pieces.push(bytes);
    this.#length += bytes.length;
  }

  private flush(): void {
    if (this.#text.length === 0) return;
    this.piece(encoder.encode(this.#text));
    this.#text = '';
  }
}

/** Whether `writeJson` walks `value` (with `walk`) rather than stringifying it whole. */
const walked = (value: unknown, walk: boolean): value is Record<string, unknown> | unknown[] =>
  Array.isArray(value) || (walk && value !== null && typeof value === 'object' && Object.getPrototypeOf(value) === Object.prototype);

/**
 * Writes `JSON.stringify(value)` to `out`, with the arrays an `ArrayJson` encoded put in as they are: the
 * record, its task and the task's metadata are walked, every other value is stringified whole.
 */
function writeJson(value: Record<string, unknown> | unknown[], out: RecordBytes): void {
  if (Array.isArray(value)) {
    const known = preEncoded.get(value);
    if (known) out.array(known);
    else out.text(JSON.stringify(value));
    return;
  }
  out.text('{');
  let first = true;
  for (const key of Object.keys(value)) {
    const v = value[key];
    const walk = walked(v, WALKED.has(key));
    const json = walk ? undefined : (JSON.stringify(v) as string | undefined);
    // What JSON leaves out of an object (undefined, functions) leaves its key out too.
    if (!walk && json === undefined) continue;
    out.text(`${first ? '' : ','}${JSON.stringify(key)}:`);
    first = false;
    if (walk) writeJson(v, out);
    else out.text(json!);
  }
  out.text('}');
}

/**
 * Validates a record before it is written (a store never holds what it would refuse to read) and
 * serializes it. Returns the key it belongs under.
 */
export function encodeRecord(record: ThreadRecord, maxBytes = DEFAULT_MAX_PAYLOAD): { key: string; data: Uint8Array } {
  const key = threadKey(record.tenant, record.threadId);
  const refuse = (problem: string) => new TroupeError('INVALID_MESSAGE', `refusing to write thread record "${key}": ${problem}`, { key });
  const history = record.task.history;
  const parsed = ThreadRecordSchema.safeParse(history ? { ...record, task: { ...record.task, history: [] } } : record);
  if (!parsed.success) throw refuse(describeZodError(parsed.error));
  if (history) {
    for (let i = 0; i < history.length; i++) {
      const message = history[i];
      if (typeof message === 'object' && message !== null && checkedMessages.has(message)) continue;
      const checked = MessageSchema.safeParse(message);
      if (!checked.success) throw refuse(`task.history.${i}: ${describeZodError(checked.error)}`);
      checkedMessages.add(message as object);
    }
  }
  let data: Uint8Array;
  try {
    const out = new RecordBytes();
    writeJson(record as unknown as Record<string, unknown>, out);
    data = out.bytes();
  } catch (err) {
    // A snapshot with a bigint or a cycle cannot be persisted; say so instead of a bare TypeError.
    throw new TroupeError('INVALID_MESSAGE', `refusing to write thread record "${key}": not serializable: ${(err as Error).message}`, { key });
  }
  if (data.byteLength > maxBytes) {
    throw new TroupeError(
      'PAYLOAD_TOO_LARGE',
      `thread record "${key}" is ${data.byteLength} bytes; the store accepts at most ${maxBytes} (prune history or artifacts)`,
      { key, size: data.byteLength, limit: maxBytes },
    );
  }
  return { key, data };
}

/**
 * Reads a stored value. Anything that is not a valid record of this very key is STORE_CORRUPT naming
 * the key, its revision and the first problems; the revision lets an operator repair it with `update`.
 */
export function decodeRecord(data: Uint8Array, tenant: string, threadId: string, revision: number): ThreadRecord {
  const key = `${tenant}.${threadId}`;
  const corrupt = (problem: string) =>
    new TroupeError('STORE_CORRUPT', `thread record "${key}" (revision ${revision}) ${problem}`, { key, tenant, threadId, revision });
  let text: string;
  try {
    text = decoder.decode(data);
  } catch {
    throw corrupt('is not UTF-8');
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (err) {
    throw corrupt(`is not valid JSON: ${(err as Error).message}`);
  }
  const parsed = ThreadRecordSchema.safeParse(json);
  if (!parsed.success) throw corrupt(`does not match the thread record schema: ${describeZodError(parsed.error)}`);
  // A record under someone else's key would leak one tenant's thread to another.
  if (parsed.data.tenant !== tenant || parsed.data.threadId !== threadId) {
    throw corrupt(`holds the record of "${parsed.data.tenant}.${parsed.data.threadId}"`);
  }
  historyChecked(parsed.data);
  return parsed.data;
}

export function storeClosed(): TroupeError {
  return new TroupeError('TRANSPORT_ERROR', 'the thread store is closed');
}

/**
 * What a listing reads of a record: its envelope and its task's state. A listing of thousands must not
 * validate every message of every history; `get` validates the whole record when one is opened.
 */
const ListEnvelopeSchema = z.object({
  version: ThreadRecordSchema.shape.version,
  tenant: z.string(),
  threadId: z.string(),
  task: z.object({
    id: z.string(),
    contextId: z.string(),
    status: z.object({ state: TaskStateSchema }),
    metadata: z
      .looseObject({
        [META.owner]: z.string().optional(),
        // What a listing shows of the thread; a record whose summary does not parse is listed without it.
        [META.thread]: z
          .object({ createdAt: z.string().max(40).optional(), activeAgent: z.string().max(256).optional(), totalMessages: z.number().int().nonnegative() })
          .optional()
          .catch(undefined),
        [META.handoff]: z
          .object({ targetAgentId: z.string().max(256) })
          .optional()
          .catch(undefined),
      })
      .optional(),
  }),
  updatedAt: z.string(),
});

/**
 * One `list` entry. A corrupt record is reported, not skipped and not thrown: skipping would hide it from
 * the operator, throwing would let one bad key stop a listing of thousands.
 */
export function listEntry(data: Uint8Array, tenant: string, threadId: string, revision: number, writtenAt: Date): ThreadListEntry {
  const key = `${tenant}.${threadId}`;
  const corrupt = (problem: string): ThreadListEntry => ({
    threadId,
    state: 'unknown',
    updatedAt: writtenAt.toISOString(),
    revision,
    corrupt: `thread record "${key}" (revision ${revision}) ${problem}`,
  });
  let json: unknown;
  try {
    json = JSON.parse(decoder.decode(data));
  } catch (err) {
    return corrupt(`is not valid JSON: ${(err as Error).message}`);
  }
  const parsed = ListEnvelopeSchema.safeParse(json);
  if (!parsed.success) return corrupt(`does not match the thread record schema: ${describeZodError(parsed.error)}`);
  if (parsed.data.tenant !== tenant || parsed.data.threadId !== threadId) return corrupt(`holds the record of "${parsed.data.tenant}.${parsed.data.threadId}"`);
  const { task } = parsed.data;
  const owner = task.metadata?.[META.owner];
  const summary = task.metadata?.[META.thread];
  const handoff = task.metadata?.[META.handoff];
  return {
    threadId,
    state: task.status.state,
    updatedAt: parsed.data.updatedAt,
    revision,
    contextId: task.contextId,
    ...(owner !== undefined ? { owner } : {}),
    ...(summary?.createdAt !== undefined ? { createdAt: summary.createdAt } : {}),
    ...(summary?.activeAgent !== undefined ? { currentActiveAgent: summary.activeAgent } : {}),
    ...(summary ? { totalMessages: summary.totalMessages } : {}),
    ...(summary || handoff ? { isHandoffActive: handoff !== undefined } : {}),
    ...(handoff ? { handoffTargetAgent: handoff.targetAgentId } : {}),
  };
}

export function matchesFilter(entry: ThreadListEntry, filter: ThreadListFilter | undefined): boolean {
  return filter?.state === undefined || entry.state === filter.state;
}
