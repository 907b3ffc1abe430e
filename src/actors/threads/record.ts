/**
 * The stored form of a thread: the A2A Task (history, route log, owner) plus the persisted XState
 * snapshot. History and route log are kept once, in the Task, and left out of the snapshot (they are
 * the largest part of a record); `fullSnapshot` puts them back on read. A dormant thread's copy of its
 * record (`dormantJson`) leaves out, besides, what its node gives back when it wakes it (`fromDormant`).
 */
import { taskStateOf } from '../../machines/thread.js';
import { META, type ThreadSummaryMeta } from '../../protocol/metadata.js';
import type { Artifact, Task, TaskArtifactUpdateEvent, TaskState } from '../../protocol/a2a.js';
import { ArrayJson, arrayJsonText, historyChecked } from '../../store/codec.js';
import type { ThreadRecord } from '../../store/types.js';
import type { ThreadConfig, ThreadContext } from '../../machines/thread.js';
import type { AgentDirectory } from '../../routing/route.js';
import { checkpointMark, type DormantThread, type LiveThread } from './live.js';

const SLIM = 'troupe/slim';
/** In a dormant thread's copy: its config is its node's, left out. */
const NODE_CONFIG = 'troupe/nodeConfig';

/**
 * From this many history messages on, a thread keeps the JSON of its history and route log from one write
 * to the next (`ArrayJson`) and encodes only what is new: below it, encoding them again costs less than
 * keeping them.
 */
const ENCODE_ONCE_FROM = 16;

/** `checkpoints`: mark a write that is a checkpoint (checkpoints.ts `checkpointMark`). */
export function recordOf(live: LiveThread, opts: { tenant: string; node: string; now: number; checkpoints?: boolean }): ThreadRecord {
  const snap = live.actor.getSnapshot();
  const ctx = snap.context;
  const state = taskStateOf(snap.value);
  const statusMessage = live.lastStatus?.final ? live.lastStatus.message : undefined;
  const at = new Date(opts.now).toISOString();
  const checkpoint = opts.checkpoints ? checkpointMark(live, snap) : live.checkpoint;
  // A long history is kept encoded for the next write (a short one costs little to encode again).
  const encoded = ctx.history.length >= ENCODE_ONCE_FROM ? (live.encoded ??= { history: new ArrayJson(), routes: new ArrayJson() }) : undefined;
  const kept = live.historyTrimmed > 0 ? ctx.history.slice(Math.min(live.historyTrimmed, ctx.history.length - 1)) : ctx.history;
  const history = encoded ? encoded.history.encode(kept) : kept;
  const task: Task = {
    kind: 'task',
    id: live.threadId,
    contextId: ctx.contextId,
    status: { state, ...(statusMessage ? { message: statusMessage } : {}), timestamp: statusTimestamp(live, state, at) },
    history,
    artifacts: live.artifacts,
    metadata: {
      [META.owner]: ctx.owner,
      [META.routes]: encoded ? encoded.routes.encode(ctx.routeLog) : ctx.routeLog,
      ...(ctx.lastError ? { [META.error]: ctx.lastError } : {}),
      ...(ctx.handoff
        ? { [META.handoff]: { targetAgentId: ctx.handoff.request.targetAgentId, sourceAgentId: ctx.handoff.request.sourceAgentId, phase: ctx.handoff.phase } }
        : {}),
      ...(ctx.approval ? { [META.awaitingApproval]: ctx.approval } : {}),
      [META.turns]: ctx.turns,
      [META.thread]: threadSummary(ctx, kept.length),
      ...(live.forkedFrom ? { [META.forkedFrom]: live.forkedFrom } : {}),
    },
  };
  return {
    version: 1,
    tenant: opts.tenant,
    threadId: live.threadId,
    task,
    snapshot: slimPersistedSnapshot(live),
    updatedAt: at,
    node: opts.node,
    ...(live.inboundSeq !== undefined ? { inboundSeq: live.inboundSeq } : {}),
    ...(live.taken?.length ? { taken: live.taken } : {}),
    ...(checkpoint ? { checkpoint } : {}),
  };
}

/** What a listing shows of the thread (`troupe/thread`). */
function threadSummary(ctx: ThreadContext, totalMessages: number): ThreadSummaryMeta {
  const answeredLast = ctx.history.findLast((m) => m.role === 'agent' && typeof m.metadata?.[META.agent] === 'string' && m.metadata[META.agent] !== 'troupe');
  const activeAgent =
    ctx.handoff?.request.targetAgentId ?? ctx.turn?.current ?? (answeredLast?.metadata?.[META.agent] as string | undefined) ?? ctx.config.entryAgent;
  return {
    ...(ctx.createdAt !== undefined ? { createdAt: new Date(ctx.createdAt).toISOString() } : {}),
    ...(activeAgent ? { activeAgent } : {}),
    totalMessages,
  };
}

/** When the thread's status last changed; `at` (now) if its state is not the one last stamped. */
function statusTimestamp(live: LiveThread, state: TaskState, at: string): string {
  if (live.statusAt?.state !== state) live.statusAt = { state, at };
  return live.statusAt.at;
}

/** Most artifacts a thread keeps (the oldest go first), and the most text one artifact holds. */
export const ARTIFACT_LIMITS = { count: 20, textChars: 64 * 1024 } as const;

/**
 * Adds a streamed chunk to the thread's artifacts: appended to its artifact when `append` is set, else
 * replacing it. Text beyond the per-artifact cap is cut (marked in the artifact's metadata); past the
 * count cap the oldest artifact goes.
 */
export function appendArtifact(artifacts: Artifact[], chunk: TaskArtifactUpdateEvent): Artifact[] {
  const incoming = chunk.artifact;
  const existing = artifacts.find((a) => a.artifactId === incoming.artifactId);
  let next: Artifact;
  if (existing && chunk.append) {
    const parts = [...existing.parts];
    for (const part of incoming.parts) {
      const last = parts.at(-1);
      if (part.kind === 'text' && last?.kind === 'text') parts[parts.length - 1] = { ...last, text: last.text + part.text };
      else parts.push(part);
    }
    next = { ...existing, parts };
  } else {
    next = { ...incoming };
  }
  let cut = false;
  next = {
    ...next,
    parts: next.parts.map((p) => {
      if (p.kind !== 'text' || p.text.length <= ARTIFACT_LIMITS.textChars) return p;
      cut = true;
      return { ...p, text: p.text.slice(0, ARTIFACT_LIMITS.textChars) };
    }),
  };
  if (cut) next = { ...next, metadata: { ...next.metadata, [META.truncated]: true } };
  const rest = artifacts.filter((a) => a.artifactId !== incoming.artifactId);
  return [...rest, next].slice(-ARTIFACT_LIMITS.count);
}

/** The owner recorded with a stored thread (threads written before owners existed belong to `local`). */
export function ownerOfRecord(record: ThreadRecord): string {
  const owner = record.task.metadata?.[META.owner];
  return typeof owner === 'string' ? owner : 'local';
}

/**
 * The persisted snapshot without history and route log (the Task holds them): XState persists the
 * context by walking and copying all of it, so they are left out before, not after (at the history
 * limit they are most of the context, and this runs once per turn).
 */
function slimPersistedSnapshot(live: LiveThread): unknown {
  const snap = live.actor.getSnapshot();
  const { history: _h, routeLog: _r, ...context } = snap.context;
  const persisted = live.actor.logic.getPersistedSnapshot({ ...snap, context } as never) as { context?: Record<string, unknown> };
  return { ...persisted, context: { ...persisted.context, [SLIM]: true } };
}

export function fullSnapshot(record: ThreadRecord): unknown {
  const snap = record.snapshot as { context?: Record<string, unknown> };
  if (!snap?.context?.[SLIM]) return record.snapshot;
  const { [SLIM]: _s, ...context } = snap.context;
  const routes = record.task.metadata?.[META.routes];
  return {
    ...snap,
    context: {
      ...context,
      owner: typeof context.owner === 'string' ? context.owner : ownerOfRecord(record),
      history: record.task.history ?? [],
      routeLog: Array.isArray(routes) ? routes : [],
    },
  };
}

/**
 * The deadline (epoch ms) of a record's open handoff, as its handoff child's persisted context holds it;
 * undefined when no handoff is open (Infinity for an open one whose child says none: never woken for it).
 */
export function handoffDeadlineOf(record: ThreadRecord): number | undefined {
  const snapshot = record.snapshot as
    { context?: { handoff?: unknown }; children?: { handoff?: { snapshot?: { context?: { deadline?: unknown } } } } } | undefined;
  if (!snapshot?.context?.handoff) return undefined;
  const deadline = snapshot.children?.handoff?.snapshot?.context?.deadline;
  return typeof deadline === 'number' ? deadline : Number.POSITIVE_INFINITY;
}

/** The deadline (epoch ms) of the tool approval a record's thread waits on, as its persisted context holds it. */
function approvalDeadlineOf(record: ThreadRecord): number | undefined {
  const expiresAt = (record.snapshot as { context?: { approval?: { expiresAt?: unknown } } } | undefined)?.context?.approval?.expiresAt;
  return typeof expiresAt === 'number' ? expiresAt : undefined;
}

/**
 * When a thread at rest must be woken to act on its own: the earliest of its handoff's deadline and its
 * approval's; undefined when it waits on neither (Infinity: a handoff with no deadline).
 */
export function wakeAtOf(record: ThreadRecord): number | undefined {
  const times = [handoffDeadlineOf(record), approvalDeadlineOf(record)].filter((t): t is number => t !== undefined);
  return times.length ? Math.min(...times) : undefined;
}

/** What a node gives every thread it wakes: its config (as JSON too, to compare) and the agent directory. */
export interface NodeGivens {
  config: ThreadConfig;
  configJson: string;
  agents: () => AgentDirectory;
}

/**
 * A dormant thread's copy of its record, as JSON: without the agent directory (every load sends the
 * current one) and without the config when it is the node's (it is, unless the thread was loaded from a
 * record another config wrote). A history long enough to be kept encoded (`ENCODE_ONCE_FROM`) is kept
 * apart with the route log, each with where its elements end in its bytes (`arrayJsonText`): the woken
 * thread's first write then encodes only what is new in them. `record` must be one `recordOf` just made:
 * its task and its snapshot's context are changed.
 */
export function dormantJson(record: ThreadRecord, node: Pick<NodeGivens, 'configJson'>): Pick<DormantThread, 'json' | 'arrays'> {
  const context = (record.snapshot as { context: Record<string, unknown> }).context;
  delete context['agents'];
  if (JSON.stringify(context['config']) === node.configJson) {
    delete context['config'];
    context[NODE_CONFIG] = true;
  }
  const { history, metadata } = record.task;
  const routes = metadata?.[META.routes];
  if (!history || history.length < ENCODE_ONCE_FROM || !Array.isArray(routes)) return { json: JSON.stringify(record) };
  const h = arrayJsonText(history);
  const r = arrayJsonText(routes);
  delete record.task.history;
  delete metadata![META.routes];
  return { json: JSON.stringify(record), arrays: { history: h.text, historyEnds: h.ends, routes: r.text, routesEnds: r.ends } };
}

/**
 * The record `dormantJson` made, read back with what it left out put back. Not checked: it is the node's
 * own copy of a record it committed (what comes from a store is checked there).
 */
export function fromDormant(kept: Pick<DormantThread, 'json' | 'arrays'>, node: Pick<NodeGivens, 'config' | 'agents'>): ThreadRecord {
  const record = JSON.parse(kept.json) as ThreadRecord;
  if (kept.arrays) {
    record.task.history = JSON.parse(`[${kept.arrays.history}]`) as NonNullable<ThreadRecord['task']['history']>;
    record.task.metadata = { ...record.task.metadata, [META.routes]: JSON.parse(`[${kept.arrays.routes}]`) as unknown };
  }
  const context = (record.snapshot as { context: Record<string, unknown> }).context;
  context['agents'] = node.agents();
  if (context[NODE_CONFIG]) {
    delete context[NODE_CONFIG];
    context['config'] = node.config;
  }
  return record;
}

/**
 * A dormant thread's record to wake it from (`fromDormant`), with its history counted as checked for the
 * thread's next write, and the encodings of its history and route log when the copy kept them.
 */
export function wakeFromDormant(
  kept: Pick<DormantThread, 'json' | 'arrays'>,
  node: Pick<NodeGivens, 'config' | 'agents'>,
): { record: ThreadRecord; encoded?: LiveThread['encoded'] } {
  const record = fromDormant(kept, node);
  historyChecked(record);
  if (!kept.arrays) return { record };
  const { history, historyEnds, routes, routesEnds } = kept.arrays;
  const routeLog = record.task.metadata![META.routes] as unknown[];
  return { record, encoded: { history: ArrayJson.seeded(record.task.history!, history, historyEnds), routes: ArrayJson.seeded(routeLog, routes, routesEnds) } };
}
