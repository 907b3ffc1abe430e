/**
 * The inspection stream: what every host publishes about the actors it runs when inspection is on, and
 * the control messages that switch it. One record per event, on
 *
 *   troupe.<t>.inspect.thread.<T>               a thread and every actor under it (router, agent call, …)
 *   troupe.<t>.inspect.agent.<A>.<instance>     an agent instance's actor, and actors its handler runs
 *                                               (the broker lets agent A publish only here)
 *
 * Records of one actor arrive in order (one publisher, one connection). An `actor` record, carrying the
 * machine definition, always precedes the first `snapshot` of that actor, and is sent again for every live
 * actor whenever inspection is switched on, so a consumer that joins late learns every actor by asking.
 */
import { z } from 'zod';
import { idSchema } from './ids.js';

export const INSPECTION_VERSION = 1;

/** A state value as XState has it: a string, or nested objects of them. */
const StateValueSchema: z.ZodType<unknown> = z.unknown();

const RecordBase = {
  v: z.literal(INSPECTION_VERSION),
  /** Per publishing process, increasing: orders the records of one process. */
  seq: z.number().int().nonnegative(),
  /** ISO time of the event. */
  at: z.string().max(40),
  /** The process that runs the actor: a node id, or `agent-<A>-<instance>`. */
  process: z.string().max(200),
  /** `T`, `T/router`, `agent:<A>:<instance>`, … Unique in the tenant while the actor lives. */
  actorId: z.string().min(1).max(400),
  parentId: z.string().max(400).optional(),
  /** The root actor of this actor's tree (a thread id, an agent instance actor). */
  rootId: z.string().max(400),
  /** The machine's id (its `id` in createMachine): `thread`, `router`, `agent-call`, `agent`, … */
  machineId: z.string().max(200),
  threadId: z.string().max(200).optional(),
  value: StateValueSchema,
  status: z.enum(['active', 'done', 'error', 'stopped']),
  /**
   * The actor's context, secrets redacted and large parts cut (see inspection/inspection.ts). Always on
   * an `actor` record; a snapshot record carries changes instead (or a consumer's own merge, see below).
   */
  context: z.unknown().optional(),
};

/** An actor exists: its machine definition (the JSON `troupe graph` prints) and its snapshot now. */
const InspectionActorRecordSchema = z.object({
  ...RecordBase,
  kind: z.literal('actor'),
  definition: z.record(z.string(), z.unknown()),
  /** What the host knows of the actor beyond its machine (an agent's card and instance). */
  meta: z.record(z.string(), z.unknown()).optional(),
});

/**
 * An actor took an event: the event, the state before it and the snapshot after it. The context travels
 * as a change of the previous record's: `contextChanged` holds the top-level keys whose value changed
 * (redacted and cut), `contextRemoved` the keys that went away; neither when nothing changed. Apply them
 * in order, starting from the `actor` record's `context` (protocol/inspection.ts `applyContext`).
 */
const InspectionSnapshotRecordSchema = z.object({
  ...RecordBase,
  kind: z.literal('snapshot'),
  contextChanged: z.record(z.string(), z.unknown()).optional(),
  contextRemoved: z.array(z.string().max(300)).max(1_000).optional(),
  event: z.object({ type: z.string().max(300) }).catchall(z.unknown()),
  /** The state value before the event, when the publisher saw it. */
  from: StateValueSchema.optional(),
});

export const InspectionRecordSchema = z.discriminatedUnion('kind', [InspectionActorRecordSchema, InspectionSnapshotRecordSchema]);
export type InspectionActorRecord = z.infer<typeof InspectionActorRecordSchema>;
export type InspectionSnapshotRecord = z.infer<typeof InspectionSnapshotRecordSchema>;
export type InspectionRecord = z.infer<typeof InspectionRecordSchema>;

/**
 * `troupe.<t>.ctl.inspection`: switch inspection on or off on every node, for the whole mesh or for one
 * thread; without `on`, only asks. Each node answers with its InspectionStateReply.
 */
export const InspectionControlSchema = z.object({
  on: z.boolean().optional(),
  threadId: idSchema('thread').optional(),
});
export type InspectionControl = z.infer<typeof InspectionControlSchema>;

export const InspectionStateReplySchema = z.object({
  kind: z.literal('inspection'),
  node: z.string(),
  /** Every actor of the process is inspected. */
  all: z.boolean(),
  /** Threads inspected on their own (besides `all`). */
  threads: z.array(z.string()),
});
export type InspectionStateReply = z.infer<typeof InspectionStateReplySchema>;

/**
 * The body of a `troupe.<t>.hello` (nodes and operators may publish it; agents subscribe). Empty means
 * "announce now". With `inspection`, an agent also switches its own inspection (agents may not read ctl,
 * so this is how `troupe inspect --on/--off` reaches them) and, when on, re-announces its actors.
 */
export const HelloSchema = z.object({
  inspection: z.object({ on: z.boolean() }).optional(),
});
export type Hello = z.infer<typeof HelloSchema>;

/**
 * The context after a record, given the context before it: a record's own `context` wins; otherwise its
 * `contextChanged` and `contextRemoved` are applied. Returns a new object (a null-prototype copy: keys come
 * from the wire).
 */
export function applyContext(before: unknown, record: { context?: unknown; contextChanged?: Record<string, unknown>; contextRemoved?: string[] }): unknown {
  if (record.context !== undefined) return record.context;
  if (!record.contextChanged && !record.contextRemoved) return before;
  const out: Record<string, unknown> = Object.assign(Object.create(null) as Record<string, unknown>, before && typeof before === 'object' ? before : {});
  for (const [k, v] of Object.entries(record.contextChanged ?? {})) out[k] = v;
  for (const k of record.contextRemoved ?? []) delete out[k];
  return out;
}
