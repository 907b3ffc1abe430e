/** What `troupe ps` and `troupe inspect` show of live threads and their children. */
import { redact } from '../../observability/redact.js';
import type { ActorInfo } from '../../protocol/ctl.js';
import type { ThreadRecord } from '../../store/types.js';
import type { LiveThread, RecentEvent, RecentEventEntry } from './live.js';
import { fullSnapshot, wakeAtOf } from './record.js';

const CHILD_KINDS: Record<string, ActorInfo['kind']> = { router: 'router', agentCall: 'agent-call', handoff: 'handoff', orchestration: 'orchestration' };

/** One live thread and its children as `ps` shows them. */
export function actorsOf(t: LiveThread, nodeId: string): ActorInfo[] {
  const snap = t.actor.getSnapshot();
  const turn = snap.context.turn;
  const actors: ActorInfo[] = [
    {
      kind: 'thread',
      id: t.threadId,
      state: stateString(snap.value),
      node: nodeId,
      threadId: t.threadId,
      // The hops of the turn in progress, else of the last turn.
      hops: turn?.hops ?? lastTurnHops(t),
      status: 'live',
      detail: { turns: snap.context.turns, history: snap.context.history.length, current: turn?.current },
    },
  ];
  for (const [childId, child] of Object.entries(snap.children)) {
    if (!child) continue;
    const childSnap = child.getSnapshot() as { value?: unknown; status?: string };
    actors.push({
      kind: CHILD_KINDS[childId] ?? 'agent-call',
      id: `${t.threadId}/${childId}`,
      state: stateString(childSnap.value ?? childSnap.status),
      node: nodeId,
      threadId: t.threadId,
      parent: t.threadId,
      status: 'live',
      ...(childId === 'agentCall' && turn ? { detail: { agent: turn.current } } : {}),
    });
  }
  return actors;
}

function lastTurnHops(t: LiveThread): number {
  const routes = t.actor.getSnapshot().context.routeLog;
  return routes.at(-1)?.hop ?? 0;
}

/** State, context (redacted) and recent events of a live thread, or of a child `<threadId>/<childId>`. */
export function inspectThread(
  live: LiveThread,
  actorId: string,
  nodeId: string,
): { actor: ActorInfo; value: unknown; context: unknown; events: RecentEvent[] } | undefined {
  const slash = actorId.indexOf('/');
  const childId = slash < 0 ? undefined : actorId.slice(slash + 1);
  const info = actorsOf(live, nodeId).find((a) => a.id === actorId);
  if (!info) return undefined;
  const snap = live.actor.getSnapshot();
  if (childId) {
    const child = Object.hasOwn(snap.children, childId)
      ? (snap.children[childId as keyof typeof snap.children] as { getSnapshot(): { value?: unknown; context?: unknown } } | undefined)
      : undefined;
    const childSnap = child?.getSnapshot();
    return {
      actor: info,
      value: childSnap?.value,
      context: redact(childSnap?.context),
      events: live.events.filter((e) => e.child === childId).map((e) => recentEvent(live.threadId, e)),
    };
  }
  return { actor: info, value: snap.value, context: redact(snap.context), events: live.events.map((e) => recentEvent(live.threadId, e)) };
}

/**
 * A dormant thread as `troupe inspect` shows it: state and context (redacted) from the record it keeps, no
 * children (it is at rest), and the recent events its actor had. A thread in a handoff, or waiting for a
 * tool approval, says when its deadline wakes it (`wakesAt`).
 */
export function inspectDormant(
  threadId: string,
  record: ThreadRecord,
  nodeId: string,
  events: readonly RecentEventEntry[],
): { actor: ActorInfo; value: unknown; context: unknown; events: RecentEvent[] } {
  const snap = fullSnapshot(record) as { value?: unknown; context?: { turns?: number; history?: unknown[]; routeLog?: Array<{ hop?: number }> } };
  const deadline = wakeAtOf(record);
  const actor: ActorInfo = {
    kind: 'thread',
    id: threadId,
    state: stateString(snap.value),
    node: nodeId,
    threadId,
    hops: snap.context?.routeLog?.at(-1)?.hop ?? 0,
    status: 'passivated',
    detail: {
      dormant: true,
      turns: snap.context?.turns,
      history: snap.context?.history?.length ?? 0,
      ...(deadline !== undefined && Number.isFinite(deadline) ? { wakesAt: new Date(deadline).toISOString() } : {}),
    },
  };
  return { actor, value: snap.value, context: redact(snap.context), events: events.map((e) => recentEvent(threadId, e)) };
}

function recentEvent(threadId: string, e: RecentEventEntry): RecentEvent {
  return { at: new Date(e.at).toISOString(), type: e.type, ...(e.child !== undefined ? { summary: `${threadId}/${e.child}` } : {}) };
}

function stateString(value: unknown): string {
  if (typeof value === 'string') return value;
  if (value && typeof value === 'object') {
    return Object.entries(value)
      .map(([k, v]) => `${k}.${stateString(v)}`)
      .join(',');
  }
  return String(value);
}
