/**
 * The node's answers to requests: `req.<P>.<verb>` (a principal's owner-checked requests about its own
 * threads: task, list, cancel, history, checkpoint, fork) and `ctl.<verb>` (operator requests: ps, inspect,
 * cancel, rehydrate, delete, threads, thread, memory, dlq, history, checkpoint, fork). Each validates its
 * request, calls into the thread host or the registry, and answers with a reply or a typed error. The node
 * subscribes them (node.ts).
 */
import type { Logger } from 'pino';
import type { NatsConnection } from '@nats-io/transport-node';
import {
  ClientListRequestSchema,
  ClientThreadRequestSchema,
  InspectRequestSchema,
  ThreadCtlSchema,
  ThreadsRequestSchema,
  DlqRequestSchema,
  MemoryRequestSchema,
  type CtlReply,
  type DeadLetterEntry,
  TroupeError,
  decode,
  encodeJson,
  isValidId,
  type InspectReply,
  type PsReply,
  type Task,
  type TaskListReply,
  CTL,
  type ClientCheckpointVerb,
} from '../protocol/index.js';
import { summaryOf, viewOf } from './threads/checkpoints.js';
import { principalOfRequest } from '../transport/subjects.js';
import type { InboundMessage } from '../transport/types.js';
import { redact, redactKeeping } from '../observability/redact.js';
import type { Registry } from './registry.js';
import type { ThreadHost } from './threads/host.js';
import { listDeadLetters, purgeDeadLetters } from './dead-letters.js';
import { byteLength, fitPage, fitTask, replyBudget } from './reply-fit.js';

export interface ControlOptions {
  tenant: string;
  nodeId: string;
  threads: ThreadHost;
  registry: Registry;
  log: Logger;
  /** What this node runs (`TroupeNode.ps`). */
  ps: () => PsReply;
  /** This node owns the thread: only the owner acts on it. */
  ownsThread: (threadId: string) => boolean;
  /** The owner a request of `principal` speaks for (`P` or `P/<user>`), or why it may not. */
  ownerOf: (principal: string, headers: Record<string, string>) => string | TroupeError;
  /** The server's max_payload: no answer may be larger (reply-fit.ts). */
  maxPayload: () => number;
}

export class ControlHandlers {
  constructor(private readonly opts: ControlOptions) {}

  // ---- a client's requests about its threads ------------------------------------------------------------

  async onClientRequest(msg: InboundMessage, verb: 'task' | 'cancel'): Promise<void> {
    try {
      const principal = principalOfRequest(msg.subject);
      if (!principal) throw new TroupeError('INVALID_MESSAGE', 'request on a malformed subject');
      const owner = this.opts.ownerOf(principal, msg.headers);
      if (owner instanceof TroupeError) throw owner;
      const req = decode(ClientThreadRequestSchema, msg.data, `${verb} request`, 4096);
      if (verb === 'task') {
        const { task, revision } = await this.opts.threads.task(req.threadId, owner);
        const n = req.historyLength;
        const trimmed = n === undefined ? task : { ...task, history: n === 0 ? [] : (task.history ?? []).slice(-n) };
        msg.respond(encodeJson({ kind: 'task', task: fitTask(trimmed, replyBudget(this.opts.maxPayload())), revision }));
        return;
      }
      if (!this.opts.ownsThread(req.threadId)) return; // the owning node answers
      const state = await this.opts.threads.cancel(req.threadId, req.reason, owner);
      msg.respond(encodeJson({ kind: 'ok', threadId: req.threadId, state, node: this.opts.nodeId }));
    } catch (err) {
      msg.respond(encodeJson(TroupeError.from(err, 'WORKFLOW_ERROR').toReply()));
    }
  }

  /**
   * A principal's (or its user's) own threads, newest update first, a page at a time. The owner is read
   * from every stored record's envelope (at most LIST_SCAN_CAP of them); the page's Tasks are then read
   * whole, live ones from their actor. The page token is the sort key of the page's last entry, so a page
   * stays right while threads are added.
   */
  async onClientList(msg: InboundMessage): Promise<void> {
    try {
      const principal = principalOfRequest(msg.subject);
      if (!principal) throw new TroupeError('INVALID_MESSAGE', 'request on a malformed subject');
      const owner = this.opts.ownerOf(principal, msg.headers);
      if (owner instanceof TroupeError) throw owner;
      const req = decode(ClientListRequestSchema, msg.data, 'list request', 4096);
      const after = req.pageToken !== undefined ? parseListToken(req.pageToken) : undefined;
      const since = req.updatedAfter !== undefined ? Date.parse(req.updatedAfter) : undefined;
      const mine: Array<{ threadId: string; updatedAt: string }> = [];
      let scanned = 0;
      for await (const entry of this.opts.threads.store.list(this.opts.tenant, req.state ? { state: req.state } : undefined)) {
        if (++scanned > LIST_SCAN_CAP) break;
        if (entry.owner !== owner || entry.corrupt) continue;
        if (req.contextId !== undefined && entry.contextId !== req.contextId) continue;
        if (since !== undefined && !(Date.parse(entry.updatedAt) >= since)) continue;
        mine.push({ threadId: entry.threadId, updatedAt: entry.updatedAt });
      }
      // Newest first; ties by thread id, so the order (and the token) is total.
      mine.sort((a, b) => (a.updatedAt === b.updatedAt ? (a.threadId < b.threadId ? -1 : 1) : a.updatedAt < b.updatedAt ? 1 : -1));
      const start = after ? mine.findIndex((e) => e.updatedAt < after.updatedAt || (e.updatedAt === after.updatedAt && e.threadId > after.threadId)) : 0;
      const page = start < 0 ? [] : mine.slice(start, start + req.pageSize);
      const read: Array<{ entry: (typeof page)[number]; task: Task }> = [];
      for (const e of page) {
        try {
          const { task } = await this.opts.threads.task(e.threadId, owner);
          const n = req.historyLength;
          read.push({ entry: e, task: n === undefined ? task : { ...task, history: n === 0 ? [] : (task.history ?? []).slice(-n) } });
        } catch (err) {
          if (!(err instanceof TroupeError && err.code === 'THREAD_NOT_FOUND')) throw err; // expired since the listing
        }
      }
      // A page holds as many tasks as fit in one answer; the next page starts after the last one that did.
      const tasks = fitPage(
        read.map((r) => r.task),
        replyBudget(this.opts.maxPayload()),
      );
      const cutShort = tasks.length < read.length;
      const last = cutShort ? read[tasks.length - 1]!.entry : page.at(-1);
      const more = cutShort || (start >= 0 && start + req.pageSize < mine.length);
      const reply: TaskListReply = { kind: 'tasks', tasks, nextPageToken: more && last ? listToken(last) : '', totalSize: mine.length, pageSize: req.pageSize };
      msg.respond(encodeJson(reply));
    } catch (err) {
      msg.respond(encodeJson(TroupeError.from(err, 'WORKFLOW_ERROR').toReply()));
    }
  }

  /**
   * A thread's checkpoints for its owner (`req.<P>.history|checkpoint|fork`): the same answers as the
   * operator verbs, unredacted (they are the owner's own messages), and "not yours" is THREAD_NOT_FOUND.
   */
  async onClientCheckpoint(msg: InboundMessage, verb: ClientCheckpointVerb): Promise<void> {
    try {
      const principal = principalOfRequest(msg.subject);
      if (!principal) throw new TroupeError('INVALID_MESSAGE', 'request on a malformed subject');
      const owner = this.opts.ownerOf(principal, msg.headers);
      if (owner instanceof TroupeError) throw owner;
      msg.respond(encodeJson(await this.checkpointReply(msg, verb, owner)));
    } catch (err) {
      msg.respond(encodeJson(TroupeError.from(err, 'WORKFLOW_ERROR').toReply()));
    }
  }

  // ---- operator control --------------------------------------------------------------------------------

  /** `ctl.history|checkpoint|fork`: any thread of the tenant, its messages redacted as `ctl.thread` shows them. */
  async onCheckpointCtl(msg: InboundMessage, verb: ClientCheckpointVerb): Promise<void> {
    try {
      msg.respond(encodeJson(await this.checkpointReply(msg, verb, undefined)));
    } catch (err) {
      msg.respond(encodeJson(TroupeError.from(err, 'WORKFLOW_ERROR').toReply()));
    }
  }

  private async checkpointReply(msg: InboundMessage, verb: ClientCheckpointVerb, owner: string | undefined): Promise<CtlReply<ClientCheckpointVerb>> {
    const operator = owner === undefined;
    const shown = <T>(value: T, threadId: string): T => (operator ? (redactKeeping(value, threadId) as T) : value);
    if (verb === 'history') {
      const { threadId } = decode(CTL.history.request, msg.data, 'history request', 4096);
      const { keep, checkpoints } = await this.opts.threads.history(threadId, owner);
      return { kind: 'history', threadId, keep, checkpoints: checkpoints.map((c) => shown(summaryOf(c), threadId)) };
    }
    if (verb === 'checkpoint') {
      const { threadId, n } = decode(CTL.checkpoint.request, msg.data, 'checkpoint request', 4096);
      return { kind: 'checkpoint', checkpoint: shown(viewOf(await this.opts.threads.checkpoint(threadId, n, owner)), threadId) };
    }
    const { threadId, n, newThreadId } = decode(CTL.fork.request, msg.data, 'fork request', 4096);
    return this.opts.threads.fork(threadId, n, { ...(owner !== undefined ? { owner } : {}), ...(newThreadId ? { newThreadId } : {}) });
  }

  onPs(msg: InboundMessage): void {
    msg.respond(encodeJson(this.opts.ps()));
  }

  onInspect(msg: InboundMessage): void {
    try {
      const { actorId } = decode(InspectRequestSchema, msg.data, 'inspect request', 4096);
      if (actorId === this.opts.nodeId || actorId === `${this.opts.nodeId}/registry`) {
        const actor = this.opts.ps().actors.find((a) => a.id === actorId);
        const reply: InspectReply = {
          found: true,
          node: this.opts.nodeId,
          ...(actor ? { actor } : {}),
          value: actor?.state,
          context: actor?.detail,
          events: [],
        };
        msg.respond(encodeJson(reply));
        return;
      }
      const card = isValidId('agent', actorId) ? this.opts.registry.card(actorId) : undefined;
      if (card) {
        // An agent: its card and its instances as this node's registry sees them.
        const reply: InspectReply = {
          found: true,
          node: this.opts.nodeId,
          actor: { kind: 'agent', id: actorId, state: `${this.opts.registry.instanceCount(actorId)} instance(s)`, node: this.opts.nodeId, status: 'live' },
          value: this.opts.registry.statuses(actorId).map((s) => s.status?.state ?? 'unknown'),
          context: redact({ card, instances: this.opts.registry.statuses(actorId) }),
          events: [],
        };
        msg.respond(encodeJson(reply));
        return;
      }
      const found = this.opts.threads.inspect(actorId);
      // Only the node holding the actor answers; the CLI gathers answers from every node.
      if (found) {
        const reply: InspectReply = {
          found: true,
          node: this.opts.nodeId,
          actor: found.actor,
          value: found.value,
          context: found.context,
          events: found.events,
        };
        msg.respond(encodeJson(reply));
      }
    } catch (err) {
      msg.respond(encodeJson(TroupeError.from(err, 'INVALID_MESSAGE').toReply()));
    }
  }

  async onThreadCtl(msg: InboundMessage, verb: 'cancel' | 'rehydrate'): Promise<void> {
    try {
      const { threadId, reason } = decode(ThreadCtlSchema, msg.data, `${verb} request`, 4096);
      if (!this.opts.ownsThread(threadId)) return; // the owner answers
      const state = verb === 'cancel' ? await this.opts.threads.cancel(threadId, reason) : await this.opts.threads.rehydrate(threadId);
      msg.respond(encodeJson({ kind: 'ok', threadId, state, node: this.opts.nodeId }));
    } catch (err) {
      msg.respond(encodeJson(TroupeError.from(err, 'WORKFLOW_ERROR').toReply()));
    }
  }

  /** `troupe delete`: the owner erases the thread (host.erase), then its dead letters. */
  async onDelete(msg: InboundMessage, nc: NatsConnection | undefined): Promise<void> {
    try {
      const { threadId } = decode(ThreadCtlSchema, msg.data, 'delete request', 4096);
      if (!this.opts.ownsThread(threadId)) return; // the owner answers
      await this.opts.threads.erase(threadId);
      const deadLetters = nc ? await purgeDeadLetters(nc, this.opts.tenant, threadId) : 0;
      this.opts.log.info({ threadId, deadLetters }, 'thread deleted');
      msg.respond(encodeJson({ kind: 'ok', threadId, state: 'deleted', node: this.opts.nodeId, deadLetters }));
    } catch (err) {
      msg.respond(encodeJson(TroupeError.from(err, 'WORKFLOW_ERROR').toReply()));
    }
  }

  async onThreads(msg: InboundMessage): Promise<void> {
    try {
      const filter = msg.data.length ? decode(ThreadsRequestSchema, msg.data, 'threads request', 4096) : {};
      const limit = filter.limit ?? 1_000;
      const budget = replyBudget(this.opts.maxPayload());
      const rows = [];
      let bytes = 0;
      let full = false;
      for await (const entry of this.opts.threads.store.list(this.opts.tenant)) {
        if (filter.state && entry.state !== filter.state) continue;
        if (filter.owner !== undefined && entry.owner !== filter.owner) continue;
        // As many rows as the limit asks for and one answer holds.
        bytes += byteLength(entry) + 1;
        if (bytes > budget) {
          full = true;
          break;
        }
        // Which are live is for the nodes holding them to say (`troupe threads` asks every node with ps).
        rows.push(entry);
        if (rows.length >= limit) break;
      }
      msg.respond(encodeJson({ kind: 'threads', threads: rows, truncated: full || rows.length >= limit } satisfies CtlReply<'threads'>));
    } catch (err) {
      msg.respond(encodeJson(TroupeError.from(err, 'WORKFLOW_ERROR').toReply()));
    }
  }

  async onThread(msg: InboundMessage): Promise<void> {
    try {
      const { threadId } = decode(ThreadCtlSchema, msg.data, 'thread request', 4096);
      const stored = await this.opts.threads.store.get(this.opts.tenant, threadId);
      if (!stored) throw new TroupeError('THREAD_NOT_FOUND', `no thread ${threadId} in tenant ${this.opts.tenant}`);
      const record = redactKeeping({ ...stored.record, snapshot: undefined, outbox: undefined }, threadId) as CtlReply<'thread'>['record'];
      const ttlMs = this.opts.threads.store.ttlMs ?? 0;
      const expiresAt = ttlMs > 0 ? Date.parse(stored.record.updatedAt) + ttlMs : NaN;
      // Redaction can make a record longer than it was stored (a marker for each short value it masks).
      const budget = replyBudget(this.opts.maxPayload()) - (byteLength(record) - byteLength(record.task));
      const view = { ...record, task: fitTask(record.task, budget) };
      msg.respond(
        encodeJson({
          kind: 'thread',
          revision: stored.revision,
          ...(Number.isFinite(expiresAt) ? { expiresAtUtc: new Date(expiresAt).toISOString() } : {}),
          record: view,
        } satisfies CtlReply<'thread'>),
      );
    } catch (err) {
      msg.respond(encodeJson(TroupeError.from(err, 'WORKFLOW_ERROR').toReply()));
    }
  }

  /**
   * This process's memory. With `{ gc: true }` and a process started with `--expose-gc` (NODE_OPTIONS),
   * after a full collection first: what the process holds, not what it has yet to collect.
   */
  onMemory(msg: InboundMessage): void {
    try {
      const req = msg.data.length ? decode(MemoryRequestSchema, msg.data, 'memory request', 256) : {};
      const gc = (globalThis as { gc?: () => void }).gc;
      const collected = req.gc === true && typeof gc === 'function';
      if (collected) gc();
      const m = process.memoryUsage();
      msg.respond(
        encodeJson({
          kind: 'memory',
          node: this.opts.nodeId,
          collected,
          rssBytes: m.rss,
          heapUsedBytes: m.heapUsed,
          heapTotalBytes: m.heapTotal,
          externalBytes: m.external,
          liveThreads: this.opts.threads.liveCount(),
          dormantThreads: this.opts.threads.dormantCount(),
        } satisfies CtlReply<'memory'>),
      );
    } catch (err) {
      msg.respond(encodeJson(TroupeError.from(err, 'INVALID_MESSAGE').toReply()));
    }
  }

  async onDeadLetters(msg: InboundMessage, nc: NatsConnection): Promise<void> {
    try {
      const req = msg.data.length ? decode(DlqRequestSchema, msg.data, 'dlq request', 1024) : {};
      const entries = await listDeadLetters(nc, req.limit ?? 100);
      msg.respond(encodeJson({ kind: 'dlq', entries: redact(entries) as DeadLetterEntry[] } satisfies CtlReply<'dlq'>));
    } catch (err) {
      msg.respond(encodeJson(TroupeError.from(err, 'WORKFLOW_ERROR').toReply()));
    }
  }
}

/** Stored records a `list` request reads at most (a tenant with more lists the first this many). */
const LIST_SCAN_CAP = 10_000;

/** A list page token: the sort key of the last entry of the page before (opaque to clients). */
function listToken(e: { threadId: string; updatedAt: string }): string {
  return Buffer.from(`${e.updatedAt}|${e.threadId}`, 'utf8').toString('base64url');
}

function parseListToken(token: string): { updatedAt: string; threadId: string } {
  const text = Buffer.from(token, 'base64url').toString('utf8');
  const bar = text.indexOf('|');
  const updatedAt = text.slice(0, bar);
  const threadId = text.slice(bar + 1);
  if (bar < 0 || Number.isNaN(Date.parse(updatedAt)) || !isValidId('thread', threadId)) {
    throw new TroupeError('INVALID_MESSAGE', 'pageToken is not one this mesh gave out: pass the nextPageToken of the page before, or none');
  }
  return { updatedAt, threadId };
}
