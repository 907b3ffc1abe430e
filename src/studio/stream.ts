/**
 * The consuming side of the inspection stream (protocol/inspection.ts), shared by `troupe watch`, the
 * Stately relay, recordings and the studio: subscribing to what a target publishes, switching inspection
 * through `ctl.inspection`, and the table of actors a consumer has seen (each with its definition, last
 * snapshot and recent events), which late joiners are replayed from.
 */
import { decode, encodeJson, ErrorReplySchema, isValidId } from '../protocol/index.js';
import {
  applyContext,
  InspectionRecordSchema,
  InspectionStateReplySchema,
  type InspectionActorRecord,
  type InspectionControl,
  type InspectionRecord,
  type InspectionSnapshotRecord,
  type InspectionStateReply,
} from '../protocol/inspection.js';
import { subjects } from '../transport/subjects.js';
import type { Subscription, Transport } from '../transport/types.js';
import { stateLabel } from '../protocol/state-label.js';

export { stateLabel };

/** What to follow: everything, one thread (and the actors agents run for it), one actor, or one agent. */
export type InspectionTarget = { kind: 'all' } | { kind: 'thread'; threadId: string; actorId?: string } | { kind: 'agent'; agentId: string };

/**
 * Reads a `watch` argument: `T` (a thread, or an agent of that id), `T/<child>` (one actor of a thread),
 * `*` (everything). Throws a RangeError saying what is wrong.
 */
export function parseTarget(arg: string | undefined): InspectionTarget[] {
  if (arg === undefined || arg === '*' || arg === '>' || arg === '') return [{ kind: 'all' }];
  const slash = arg.indexOf('/');
  const head = slash < 0 ? arg : arg.slice(0, slash);
  if (!isValidId('thread', head)) throw new RangeError(`"${arg}" is not a thread, actor (<thread>/<child>) or agent id`);
  if (slash >= 0) return [{ kind: 'thread', threadId: head, actorId: arg }];
  // One id may name a thread or an agent: follow both, which costs nothing when one of them is silent.
  return isValidId('agent', head)
    ? [
        { kind: 'thread', threadId: head },
        { kind: 'agent', agentId: head },
      ]
    : [{ kind: 'thread', threadId: head }];
}

function matches(target: InspectionTarget, r: InspectionRecord): boolean {
  if (target.kind !== 'thread') return true;
  if (r.threadId !== target.threadId && r.rootId !== target.threadId) return false;
  return !target.actorId || r.actorId === target.actorId || r.actorId.startsWith(`${target.actorId}/`);
}

/**
 * Subscribes to the records of the targets, validated; anything that does not parse goes to `onInvalid`.
 * A thread's records come from its node and, for actors agents run for it, from the agents.
 */
export function subscribeInspection(
  transport: Transport,
  tenant: string,
  targets: InspectionTarget[],
  onRecord: (record: InspectionRecord) => void,
  onInvalid: (problem: string) => void = () => undefined,
): Subscription[] {
  const subs: Subscription[] = [];
  const sub = (subject: string, accept: (r: InspectionRecord) => boolean) =>
    subs.push(
      transport.subscribe(subject, (msg) => {
        let record: InspectionRecord;
        try {
          record = decode(InspectionRecordSchema, msg.data, `inspection record on ${msg.subject}`, 1024 * 1024);
        } catch (err) {
          onInvalid((err as Error).message);
          return;
        }
        if (accept(record)) onRecord(record);
      }),
    );
  for (const target of targets) {
    if (target.kind === 'all') sub(subjects.inspectAll(tenant), () => true);
    else if (target.kind === 'agent') sub(subjects.inspectAgentAll(tenant, target.agentId), () => true);
    else {
      sub(subjects.inspectThread(tenant, target.threadId), (r) => matches(target, r));
      sub(subjects.inspectAgents(tenant), (r) => r.threadId === target.threadId && matches(target, r));
    }
  }
  return subs;
}

/**
 * Asks every node what it inspects, or switches it (`{ on, threadId? }`); one answer per node that
 * answered within the window. Nodes relay a mesh-wide switch to agents (hello).
 */
export async function controlInspection(transport: Transport, tenant: string, control: InspectionControl, windowMs = 500): Promise<InspectionStateReply[]> {
  const replies = await transport.requestMany(subjects.ctl(tenant, 'inspection'), encodeJson(control), { timeoutMs: windowMs });
  const states: InspectionStateReply[] = [];
  for (const r of replies) {
    const parsed = InspectionStateReplySchema.safeParse(JSON.parse(new TextDecoder().decode(r.data)));
    if (parsed.success) states.push(parsed.data);
    else {
      const err = ErrorReplySchema.safeParse(JSON.parse(new TextDecoder().decode(r.data)));
      if (err.success) throw new Error(`${err.data.error.code}: ${err.data.error.message}`);
    }
  }
  return states;
}

export interface ActorEntry {
  /** The `actor` record (definition, first state, meta). */
  actor: InspectionActorRecord;
  /** The latest snapshot record, if any came after the actor record. */
  last?: InspectionSnapshotRecord;
  /** The latest records of this actor, oldest first (bounded). */
  recent: InspectionSnapshotRecord[];
}

/**
 * Every actor a consumer has seen, in the order they were first registered (parents before children),
 * with its latest state. Bounded: past `maxActors`, actors that have stopped are forgotten first.
 */
export class ActorTable {
  private readonly actors = new Map<string, ActorEntry>();

  constructor(
    private readonly maxActors = 5_000,
    private readonly recentPerActor = 25,
  ) {}

  /**
   * Adds a record; returns it as kept (a snapshot with the whole context merged in), or undefined when it
   * is a snapshot of an actor never registered (nothing to draw it with).
   */
  add(record: InspectionRecord): InspectionRecord | undefined {
    if (record.kind === 'actor') {
      const existing = this.actors.get(record.actorId);
      if (existing) {
        // Re-announced: keep its history, take the new definition and state.
        existing.actor = record;
        existing.last = undefined;
      } else {
        this.actors.set(record.actorId, { actor: record, recent: [] });
        this.trim();
      }
      return record;
    }
    const entry = this.actors.get(record.actorId);
    if (!entry) return undefined;
    // Records carry context changes: the entry keeps the whole context, merged.
    const context = applyContext(entry.last?.context ?? entry.actor.context, record);
    const { contextChanged: _changed, contextRemoved: _removed, ...rest } = record;
    entry.last = context === undefined ? rest : { ...rest, context };
    entry.recent.push(entry.last);
    if (entry.recent.length > this.recentPerActor) entry.recent.shift();
    return entry.last;
  }

  get(actorId: string): ActorEntry | undefined {
    return this.actors.get(actorId);
  }

  entries(): ActorEntry[] {
    return [...this.actors.values()];
  }

  /** What a late joiner needs: each actor's record, then its latest snapshot, parents first. */
  replay(): InspectionRecord[] {
    return this.entries().flatMap((e) => (e.last ? [e.actor, e.last] : [e.actor]));
  }

  get size(): number {
    return this.actors.size;
  }

  private trim(): void {
    if (this.actors.size <= this.maxActors) return;
    for (const [id, e] of this.actors) {
      const status = e.last?.status ?? e.actor.status;
      if (status !== 'active') this.actors.delete(id);
      if (this.actors.size <= this.maxActors) return;
    }
    const oldest = this.actors.keys().next().value;
    if (oldest !== undefined) this.actors.delete(oldest);
  }
}
