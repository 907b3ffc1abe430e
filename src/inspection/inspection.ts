/**
 * The inspection stream's publishing side: one `InspectionPublisher` per process (node or agent), one
 * observer per root actor, handed to XState as `createActor(machine, { inspect })`:
 *
 *   const inspect = publisher.observe({ subject: subjects.inspectThread(t, id), rootId: id, threadId: id });
 *   const actor = createActor(machine, { id, inspect });
 *
 * Every machine actor of that tree (the root, what it invokes and spawns) is published: first an `actor`
 * record with its machine definition, then one `snapshot` record per event it takes, carrying the event,
 * the state before and the snapshot AFTER it (XState's `@xstate.snapshot` inspection event; reading
 * `getSnapshot()` when the event arrives, as the first version did, gives the state before).
 *
 * Off by default, and free when off: every inspection event then costs one switch read (and, for the root
 * actor only, two comparisons that keep the list of live roots for `announce`). Turning inspection on
 * re-announces every live actor, so a consumer that joins later still gets each definition first.
 */
import type { AnyActorRef, AnyStateMachine, InspectionEvent } from 'xstate';
import { machineJson } from '../machines/graph.js';
import { encodeJson } from '../protocol/codec.js';
import { INSPECTION_VERSION, type InspectionActorRecord, type InspectionRecord, type InspectionSnapshotRecord } from '../protocol/inspection.js';
import type { Transport } from '../transport/types.js';
import { redact } from '../observability/redact.js';

/** Which actors a process inspects: all of them, or the actors of some threads. */
export class InspectionSwitch {
  private allOn: boolean;
  private readonly threadSet = new Set<string>();
  private readonly listeners = new Set<(on: boolean, threadId?: string) => void>();

  constructor(all = false) {
    this.allOn = all;
  }

  get all(): boolean {
    return this.allOn;
  }

  get threads(): string[] {
    return [...this.threadSet];
  }

  /** Whether actors of this thread (or, without one, every actor) are inspected now. */
  isOn(threadId?: string): boolean {
    return this.allOn || (threadId !== undefined && this.threadSet.size > 0 && this.threadSet.has(threadId));
  }

  /** Switches the whole process, or one thread. Switching everything off also forgets the single threads. */
  set(on: boolean, threadId?: string): void {
    if (threadId === undefined) {
      this.allOn = on;
      if (!on) this.threadSet.clear();
    } else if (on) this.threadSet.add(threadId);
    else this.threadSet.delete(threadId);
    for (const fn of this.listeners) fn(on, threadId);
  }

  onChange(fn: (on: boolean, threadId?: string) => void): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }
}

/** Where one root actor's records go and what they say about it. */
export interface InspectionScope {
  /** The subject its records are published on (subjects.inspectThread / inspectAgent). */
  subject: string;
  /** The root actor's id in records (a thread id, `agent:<A>:<instance>`, …); children are `<rootId>/<childId>`. */
  rootId: string;
  /** The thread the actors work for; per-thread inspection and `watch <thread>` use it. */
  threadId?: string;
  /** The root's parent in another process (a thread, for an agent's own actors). */
  parentId?: string;
  /** Whether to publish now. Default: the publisher's switch for `threadId`. */
  enabled?: () => boolean;
  /** Extra facts for the root's `actor` record (an agent's card and instance). */
  meta?: Record<string, unknown>;
}

/** XState's `inspect` option for one root actor and its tree. */
export type InspectObserver = (event: InspectionEvent) => void;

export interface InspectionPublisherOptions {
  transport: Transport;
  /** The process in every record: the node id or `agent-<A>-<instance>`. */
  process: string;
  switch?: InspectionSwitch;
  now?: () => number;
  /** Called when publishing fails (closed transport, a record too large to send). */
  onError?: (err: unknown) => void;
}

/** What the publisher remembers of one actor while inspection is on. */
interface ActorFacts {
  actorId: string;
  parentId: string | undefined;
  machineId: string;
  definition: Record<string, unknown>;
  registered: boolean;
}

/** Records larger than this lose their context (NATS' default max payload is 1 MiB). */
const MAX_RECORD_BYTES = 256 * 1024;

interface Bounds {
  depth: number;
  items: number;
  keys: number;
  chars: number;
}
const CONTEXT_BOUNDS: Bounds = { depth: 8, items: 20, keys: 100, chars: 2_000 };

/**
 * A copy fit for diagnostics: arrays cut to their last `items`, strings to `chars`, objects to `keys` and
 * nesting to `depth`, functions and actor references left out, then secrets redacted (observability/redact).
 */
export function inspectable(value: unknown, bounds: Bounds = CONTEXT_BOUNDS): unknown {
  return redact(bounded(value, bounds, 0));
}

function bounded(value: unknown, bounds: Bounds, depth: number): unknown {
  if (typeof value === 'string') return value.length > bounds.chars ? `${value.slice(0, bounds.chars)}… (${value.length} chars)` : value;
  if (value === null || typeof value !== 'object')
    return typeof value === 'function' || typeof value === 'symbol' || typeof value === 'bigint' ? undefined : value;
  if (depth >= bounds.depth) return '…';
  if (Array.isArray(value)) {
    const kept = value.length > bounds.items ? value.slice(-bounds.items) : value;
    const out = kept.map((v) => bounded(v, bounds, depth + 1));
    return value.length > bounds.items ? [`… ${value.length - bounds.items} earlier`, ...out] : out;
  }
  // An actor reference (a child in context) is not data.
  if (typeof (value as { send?: unknown }).send === 'function' && typeof (value as { getSnapshot?: unknown }).getSnapshot === 'function') return undefined;
  const out: Record<string, unknown> = {};
  let n = 0;
  for (const [k, v] of Object.entries(value)) {
    if (n++ >= bounds.keys) {
      out['…'] = `${Object.keys(value).length - bounds.keys} more keys`;
      break;
    }
    const copy = bounded(v, bounds, depth + 1);
    if (copy !== undefined) out[k] = copy;
  }
  return out;
}

function machineOf(ref: AnyActorRef): AnyStateMachine | undefined {
  const logic = (ref as { logic?: unknown }).logic;
  return logic && typeof logic === 'object' && 'config' in logic && 'root' in logic ? (logic as AnyStateMachine) : undefined;
}

function snapshotOf(ref: AnyActorRef): { value?: unknown; status?: string; context?: unknown; children?: Record<string, AnyActorRef | undefined> } | undefined {
  try {
    return ref.getSnapshot() as never;
  } catch {
    return undefined;
  }
}

type Status = InspectionRecord['status'];
const statusOf = (s: unknown): Status => (s === 'done' || s === 'error' || s === 'stopped' ? s : 'active');

export class InspectionPublisher {
  readonly switch: InspectionSwitch;
  private readonly transport: Transport;
  private readonly process: string;
  private readonly now: () => number;
  private readonly onError: (err: unknown) => void;
  private readonly definitions = new WeakMap<AnyStateMachine, Record<string, unknown>>();
  /** Live roots, for `announce`. A root leaves when its snapshot stops being active. */
  private readonly live = new Map<AnyActorRef, { scope: InspectionScope; announce: () => void }>();
  private seq = 0;
  /** Bounded, redacted copies of context and event parts, by identity (see `view`). */
  private readonly parts = new WeakMap<object, unknown>();
  private readonly secretKeys = new Map<string, boolean>();

  constructor(opts: InspectionPublisherOptions) {
    this.transport = opts.transport;
    this.process = opts.process;
    this.switch = opts.switch ?? new InspectionSwitch(false);
    this.now = opts.now ?? Date.now;
    this.onError = opts.onError ?? (() => undefined);
  }

  /** Live root actors this publisher watches (for diagnostics and tests). */
  get liveRoots(): number {
    return this.live.size;
  }

  /** The `inspect` observer for one root actor and everything under it. */
  observe(scope: InspectionScope): InspectObserver {
    const sw = this.switch;
    const threadId = scope.threadId;
    const enabled = scope.enabled ?? (() => sw.isOn(threadId));
    /**
     * What the observer remembers of the tree, made the first time it is on: most trees (a node's idle
     * threads) are never inspected, and four WeakMaps per thread are most of what inspection costs one.
     */
    let tree:
      | {
          facts: WeakMap<AnyActorRef, ActorFacts>;
          parents: WeakMap<AnyActorRef, AnyActorRef>;
          /** The state each actor was last seen in: the `from` of its next snapshot. */
          last: WeakMap<AnyActorRef, unknown>;
          /** The context object each actor's last record carried. */
          contexts: WeakMap<AnyActorRef, unknown>;
          /** Actors whose event is being processed, innermost last: the parent of an actor created now is the last one. */
          open: AnyActorRef[];
        }
      | undefined;
    const state = () => (tree ??= { facts: new WeakMap(), parents: new WeakMap(), last: new WeakMap(), contexts: new WeakMap(), open: [] });
    let root: AnyActorRef | undefined;

    const factsOf = (ref: AnyActorRef, machine: AnyStateMachine): ActorFacts => {
      const { facts, parents } = state();
      let f = facts.get(ref);
      if (f) return f;
      const parent = ref === root ? undefined : (parents.get(ref) ?? this.findParent(root, ref) ?? root);
      const parentFacts = parent ? facts.get(parent) : undefined;
      const parentId = ref === root ? scope.parentId : (parentFacts?.actorId ?? (parent && parent !== root ? `${scope.rootId}/${parent.id}` : scope.rootId));
      f = {
        actorId: ref === root ? scope.rootId : `${parentId ?? scope.rootId}/${ref.id}`,
        parentId,
        machineId: machine.id,
        definition: this.definitionOf(machine),
        registered: false,
      };
      facts.set(ref, f);
      return f;
    };

    const register = (ref: AnyActorRef, f: ActorFacts, value: unknown, status: Status, context: unknown) => {
      f.registered = true;
      const record: InspectionActorRecord = {
        ...this.base(scope, f, value, status, context),
        kind: 'actor',
        definition: f.definition,
        ...(ref === root && scope.meta ? { meta: scope.meta } : {}),
      };
      this.publish(scope.subject, record);
    };

    const announce = () => {
      if (!root) return;
      const { parents, contexts, last } = state();
      const walk = (ref: AnyActorRef, parent: AnyActorRef | undefined) => {
        if (parent) parents.set(ref, parent);
        const snap = snapshotOf(ref);
        const machine = machineOf(ref);
        if (machine && snap) {
          register(ref, factsOf(ref, machine), snap.value, statusOf(snap.status), this.view(snap.context));
          contexts.set(ref, snap.context);
          last.set(ref, snap.value);
        }
        for (const child of Object.values(snap?.children ?? {})) if (child) walk(child, ref);
      };
      walk(root, undefined);
    };

    return (ev: InspectionEvent) => {
      // Kept even when off, at the cost of two comparisons: which roots are live, for `announce`.
      const ref = ev.actorRef as AnyActorRef;
      if (ref === root) {
        if (ev.type === '@xstate.snapshot' && (ev.snapshot as { status?: string }).status !== 'active') this.live.delete(ref);
      } else if (ev.type === '@xstate.actor' && ref.sessionId === ev.rootId) {
        root = ref;
        this.live.set(ref, { scope, announce });
      }
      if (!enabled()) {
        if (tree?.open.length) tree.open.length = 0;
        return;
      }
      const { parents, last, contexts, open } = state();
      switch (ev.type) {
        case '@xstate.actor': {
          const parent = open.at(-1);
          if (parent && parent !== ref) parents.set(ref, parent);
          return;
        }
        case '@xstate.event': {
          open.push(ref);
          // First event seen since inspection came on: the state now is the state before it.
          if (!last.has(ref) && machineOf(ref)) last.set(ref, snapshotOf(ref)?.value);
          return;
        }
        case '@xstate.snapshot': {
          const i = open.lastIndexOf(ref);
          if (i >= 0) open.splice(i, 1);
          const machine = machineOf(ref);
          if (!machine) return;
          const f = factsOf(ref, machine);
          const snap = ev.snapshot as { value?: unknown; status?: string; context?: unknown };
          const from = last.get(ref);
          last.set(ref, snap.value);
          const status = statusOf(snap.status);
          // Consumers have the context of the actor's previous record: only the top-level parts XState
          // replaced travel (`contextChanged`, `contextRemoved`); the whole context after registration.
          const registering = !f.registered;
          if (registering) register(ref, f, from ?? snap.value, 'active', this.view(snap.context));
          const delta = registering ? undefined : this.delta(contexts.get(ref), snap.context);
          contexts.set(ref, snap.context);
          const record: InspectionSnapshotRecord = {
            ...this.base(scope, f, snap.value, status, undefined),
            ...(delta?.changed ? { contextChanged: delta.changed } : {}),
            ...(delta?.removed ? { contextRemoved: delta.removed } : {}),
            kind: 'snapshot',
            event: { ...(this.view(ev.event) as Record<string, unknown>), type: String(ev.event.type).slice(0, 300) },
            ...(from !== undefined ? { from } : {}),
          };
          this.publish(scope.subject, record);
          return;
        }
        default:
          return;
      }
    };
  }

  /**
   * Inspects a long-lived root actor (an agent host's) only while `scope.enabled()` holds: XState makes an
   * object per inspection event and calls every observer, which costs even when the observer does nothing
   * (5–7% of an agent hop's CPU). Detached, it costs nothing. `sync()` attaches or detaches it; call it
   * whenever what `enabled` reads changes, between events, never while the actor handles one.
   */
  attach(actor: AnyActorRef, scope: InspectionScope & { enabled: () => boolean }): { sync(): void } {
    const observer = this.observe(scope);
    // The root as the observer learns it from XState's `@xstate.actor` event, which it may never see.
    observer({ type: '@xstate.actor', actorRef: actor, rootId: actor.sessionId } as InspectionEvent);
    let subscription: { unsubscribe(): void } | undefined;
    return {
      sync: () => {
        const on = scope.enabled();
        if (on && !subscription) subscription = actor.system.inspect(observer);
        else if (!on && subscription) {
          subscription.unsubscribe();
          subscription = undefined;
        }
      },
    };
  }

  /**
   * Publishes an `actor` record for every live actor (of one thread, or all), with its snapshot now:
   * what a consumer that has just switched inspection on needs before the next snapshot.
   */
  announce(threadId?: string): number {
    let n = 0;
    for (const [root, { scope, announce }] of [...this.live]) {
      if (threadId !== undefined && scope.threadId !== threadId) continue;
      const status = snapshotOf(root)?.status;
      if (status !== 'active') {
        this.live.delete(root);
        continue;
      }
      announce();
      n++;
    }
    return n;
  }

  private base(scope: InspectionScope, f: ActorFacts, value: unknown, status: Status, context: unknown) {
    return {
      v: INSPECTION_VERSION as typeof INSPECTION_VERSION,
      seq: ++this.seq,
      at: new Date(this.now()).toISOString(),
      process: this.process,
      actorId: f.actorId,
      ...(f.parentId !== undefined ? { parentId: f.parentId } : {}),
      rootId: scope.rootId,
      machineId: f.machineId,
      ...(scope.threadId !== undefined ? { threadId: scope.threadId } : {}),
      value: bounded(value, { depth: 12, items: 50, keys: 100, chars: 200 }, 0),
      status,
      ...(context !== undefined ? { context } : {}),
    };
  }

  private publish(subject: string, record: InspectionRecord): void {
    if (this.transport.closed) return;
    try {
      let data = encodeJson(record);
      if (data.byteLength > MAX_RECORD_BYTES) data = encodeJson({ ...record, context: { '…': `context of ${data.byteLength} bytes left out` } });
      this.transport.publish(subject, data);
    } catch (err) {
      this.onError(err);
    }
  }

  /**
   * `inspectable(value)` for a context or an event, reusing work across records: XState keeps the parts
   * of a context that did not change (the history array, each message in it) as the same objects, so each
   * top-level part is bounded and redacted once and remembered by identity. Top-level keys that look
   * secret to the redactor hide their whole value, as they would inside a single `redact()` pass.
   */
  private view(value: unknown): unknown {
    if (value === null || typeof value !== 'object' || Array.isArray(value)) return inspectable(value);
    const out: Record<string, unknown> = {};
    let n = 0;
    for (const [k, v] of Object.entries(value)) {
      if (n++ >= CONTEXT_BOUNDS.keys) break;
      const part = this.part(k, v);
      if (part !== undefined) out[k] = part;
    }
    return out;
  }

  /**
   * One part of a context or event, bounded and redacted. Objects and arrays near the top are rebuilt from
   * their parts and every object is remembered by identity, so a new history array costs only its new
   * messages; deeper than that, a subtree is bounded and redacted in one pass.
   */
  private part(key: string | undefined, value: unknown, level = 0): unknown {
    if (key !== undefined && this.secretKey(key)) return '[redacted]';
    if (value === null || typeof value !== 'object') return inspectable(value);
    const cached = this.parts.get(value);
    if (cached !== undefined) return cached;
    let out: unknown;
    if (level >= 2) out = inspectable(value, { ...CONTEXT_BOUNDS, depth: Math.max(1, CONTEXT_BOUNDS.depth - level - 1) });
    else if (Array.isArray(value)) {
      const kept = value.length > CONTEXT_BOUNDS.items ? value.slice(-CONTEXT_BOUNDS.items) : value;
      const parts = kept.map((v) => this.part(undefined, v, level + 1) ?? null);
      out = value.length > CONTEXT_BOUNDS.items ? [`… ${value.length - CONTEXT_BOUNDS.items} earlier`, ...parts] : parts;
    } else if (typeof (value as { send?: unknown }).send === 'function' && typeof (value as { getSnapshot?: unknown }).getSnapshot === 'function') {
      out = undefined;
    } else {
      const obj: Record<string, unknown> = {};
      let n = 0;
      for (const [k, v] of Object.entries(value)) {
        if (n++ >= CONTEXT_BOUNDS.keys) break;
        const p = this.part(k, v, level + 1);
        if (p !== undefined) obj[k] = p;
      }
      out = obj;
    }
    if (out !== undefined) this.parts.set(value, out);
    return out;
  }

  /** The top-level parts of `next` that are not those of `prev` (by identity), and the keys it dropped. */
  private delta(prev: unknown, next: unknown): { changed?: Record<string, unknown>; removed?: string[] } | undefined {
    if (prev === next) return undefined;
    const p = prev !== null && typeof prev === 'object' && !Array.isArray(prev) ? (prev as Record<string, unknown>) : {};
    const n = next !== null && typeof next === 'object' && !Array.isArray(next) ? (next as Record<string, unknown>) : {};
    const changed: Record<string, unknown> = {};
    let count = 0;
    for (const [k, v] of Object.entries(n)) {
      if (count >= CONTEXT_BOUNDS.keys) break;
      count++;
      if (Object.hasOwn(p, k) && p[k] === v) continue;
      const part = this.part(k, v);
      changed[k] = part === undefined ? null : part;
    }
    const removed = Object.keys(p).filter((k) => !Object.hasOwn(n, k));
    return { ...(Object.keys(changed).length ? { changed } : {}), ...(removed.length ? { removed } : {}) };
  }

  /** Whether the redactor hides a value under this key (asked once per key name, bounded). */
  private secretKey(key: string): boolean {
    let secret = this.secretKeys.get(key);
    if (secret === undefined) {
      secret = (redact({ [key]: 'x' }) as Record<string, unknown>)[key] !== 'x';
      if (this.secretKeys.size < 10_000) this.secretKeys.set(key, secret);
    }
    return secret;
  }

  private definitionOf(machine: AnyStateMachine): Record<string, unknown> {
    let d = this.definitions.get(machine);
    if (!d) {
      try {
        d = machineJson(machine) as Record<string, unknown>;
      } catch (err) {
        // A config machineJson cannot turn into data (an inline actor logic in it): the id still names it.
        this.onError(err);
        d = { id: machine.id };
      }
      this.definitions.set(machine, d);
    }
    return d;
  }

  /** The actor whose snapshot lists `ref` as a child, searching down from the root (public snapshots only). */
  private findParent(root: AnyActorRef | undefined, ref: AnyActorRef): AnyActorRef | undefined {
    if (!root) return undefined;
    const stack = [root];
    for (let guard = 0; stack.length && guard < 1_000; guard++) {
      const at = stack.pop()!;
      for (const child of Object.values(snapshotOf(at)?.children ?? {})) {
        if (!child) continue;
        if (child === ref) return at;
        stack.push(child);
      }
    }
    return undefined;
  }
}
