/**
 * The app's state: every actor the inspection stream has told about (from the studio server's SSE), the
 * stored threads, and the chat of each thread. Components re-render through `useStore()`, at most once a
 * frame however fast records come.
 */
import { useEffect, useState } from 'preact/hooks';
import type { InspectionActorRecord, InspectionRecord, InspectionSnapshotRecord } from './types.js';
import { stateLabel } from '../../protocol/state-label.js';

export { stateLabel };

export interface ActorView {
  actor: InspectionActorRecord;
  last?: InspectionSnapshotRecord;
  recent: InspectionSnapshotRecord[];
  /** ms of the latest record of this actor. */
  seenAt: number;
}

interface StoredThread {
  threadId: string;
  state: string;
  updatedAt?: string;
  live?: boolean;
}

interface AgentInstanceView {
  instanceId: string;
  state: string;
  seenAt: number;
  process: string;
}

interface AgentView {
  agentId: string;
  card: { name?: string; description?: string; skills?: Array<{ name?: string; tags?: string[] }> } | undefined;
  instances: AgentInstanceView[];
}

interface ThreadView {
  threadId: string;
  state: string;
  live: boolean;
  at: number;
}

const RECENT = 25;

class Store {
  readonly actors = new Map<string, ActorView>();
  stored: StoredThread[] = [];
  connected = false;
  version = 0;
  private readonly listeners = new Set<() => void>();
  private scheduled = false;

  add(record: InspectionRecord): void {
    const at = Date.parse(record.at) || Date.now();
    if (record.kind === 'actor') {
      const existing = this.actors.get(record.actorId);
      if (existing) {
        existing.actor = record;
        existing.last = undefined;
        existing.seenAt = at;
      } else this.actors.set(record.actorId, { actor: record, recent: [], seenAt: at });
    } else {
      const view = this.actors.get(record.actorId);
      if (!view) return;
      // A record without context means "unchanged": keep the one it had.
      const context = record.context !== undefined ? record.context : (view.last?.context ?? view.actor.context);
      view.last = context === undefined ? record : { ...record, context };
      view.seenAt = at;
      view.recent.push(record);
      if (view.recent.length > RECENT) view.recent.shift();
    }
    this.changed();
  }

  changed(): void {
    if (this.scheduled) return;
    this.scheduled = true;
    requestAnimationFrame(() => {
      this.scheduled = false;
      this.version++;
      for (const fn of this.listeners) fn();
    });
  }

  subscribe(fn: () => void): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  /** Agents by id, with their instances (replicas), from the agents' own actors. */
  agents(): AgentView[] {
    const byId = new Map<string, AgentView>();
    for (const v of this.actors.values()) {
      if (v.actor.machineId !== 'agent' || v.actor.actorId !== v.actor.rootId) continue;
      const meta = (v.actor.meta ?? {}) as { agentId?: string; instanceId?: string; card?: AgentView['card'] };
      const agentId = meta.agentId ?? v.actor.actorId;
      let view = byId.get(agentId);
      if (!view) byId.set(agentId, (view = { agentId, card: meta.card, instances: [] }));
      const status = v.last?.status ?? v.actor.status;
      if (status !== 'active') continue;
      view.instances.push({ instanceId: meta.instanceId ?? v.actor.actorId, state: stateOf(v), seenAt: v.seenAt, process: v.actor.process });
    }
    return [...byId.values()].filter((a) => a.instances.length).sort((a, b) => a.agentId.localeCompare(b.agentId));
  }

  /** Threads: live ones from the stream, the rest from the store. Newest activity first. */
  threads(): ThreadView[] {
    const byId = new Map<string, ThreadView>();
    for (const t of this.stored) byId.set(t.threadId, { threadId: t.threadId, state: t.state, live: Boolean(t.live), at: Date.parse(t.updatedAt ?? '') || 0 });
    for (const v of this.actors.values()) {
      if (v.actor.machineId !== 'thread' || v.actor.actorId !== v.actor.rootId) continue;
      const status = v.last?.status ?? v.actor.status;
      const prior = byId.get(v.actor.actorId);
      byId.set(v.actor.actorId, { threadId: v.actor.actorId, state: stateOf(v), live: status === 'active', at: Math.max(v.seenAt, prior?.at ?? 0) });
    }
    return [...byId.values()].sort((a, b) => b.at - a.at);
  }

  /** The thread and every actor under it, including actors agents run for it; parents first. */
  actorsOf(threadId: string): ActorView[] {
    return [...this.actors.values()].filter((v) => v.actor.rootId === threadId || v.actor.threadId === threadId);
  }
}

export function stateOf(v: ActorView): string {
  const status = v.last?.status ?? v.actor.status;
  const label = stateLabel(v.last ? v.last.value : v.actor.value);
  return status === 'active' || !label ? label || status : label;
}

export const store = new Store();

/** Re-renders the calling component when the store changes. */
export function useStore(): Store {
  const [, setVersion] = useState(0);
  useEffect(() => store.subscribe(() => setVersion(store.version)), []);
  return store;
}

/** Follows the studio server's inspection stream (the browser reconnects by itself). */
export function connectStream(): void {
  const source = new EventSource('/api/stream');
  source.addEventListener('record', (e) => {
    try {
      store.add(JSON.parse((e as MessageEvent<string>).data) as InspectionRecord);
    } catch {
      // a record the app cannot read is skipped
    }
  });
  source.addEventListener('ready', () => {
    store.connected = true;
    store.changed();
  });
  source.onerror = () => {
    store.connected = false;
    store.changed();
  };
}

export async function refreshThreads(): Promise<void> {
  try {
    const res = await fetch('/api/threads');
    const body = (await res.json()) as { threads?: StoredThread[] };
    store.stored = body.threads ?? [];
    store.changed();
  } catch {
    // kept as it was
  }
}
