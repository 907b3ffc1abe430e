/**
 * Dormant threads in a handoff (ThreadHost `dormantMs`): a thread whose specialist holds the conversation
 * goes dormant like any thread at rest; the user's next message wakes it and goes straight to the
 * specialist, and when nobody writes, the host wakes it at the handoff's deadline, which then ends the
 * handoff as it would have on a live actor. It is never passivated (nothing would wake it). Embedded mesh
 * (memory bus and store, which counts its reads), the demo's handoff team.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { handoffTeam } from '../src/bin/demo/handoff-team.js';
import { ThreadEventSchema, decode, messageText, type ThreadEvent } from '../src/protocol/index.js';
import { subjects } from '../src/transport/subjects.js';
import { handoffDeadlineOf } from '../src/actors/threads/record.js';
import { TENANT, dormantMesh } from './helpers/dormant-mesh.js';
import { waitFor } from './helpers/wait.js';

const stops: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const stop of stops.splice(0).reverse()) await stop().catch(() => undefined);
});

async function mesh(opts: { dormantMs: number; idleMs?: number; handoffMaxDurationMs?: number }) {
  const config = { ...handoffTeam.config, ...(opts.handoffMaxDurationMs ? { handoffMaxDurationMs: opts.handoffMaxDurationMs } : {}) };
  const { store, node, threads, client } = await dormantMesh(stops, handoffTeam.agents, { ...opts, config });
  /** Every event published on a thread's output. */
  const record = (threadId: string): ThreadEvent[] => {
    const events: ThreadEvent[] = [];
    client.transport.subscribe(subjects.threadOut(TENANT, 'local', threadId), (msg) => void events.push(decode(ThreadEventSchema, msg.data, 'event')));
    return events;
  };
  return { store, node, threads, client, record };
}

const finalTexts = (events: ThreadEvent[]) => events.flatMap((e) => (e.kind === 'status-update' && e.final ? [messageText(e.status.message)] : []));
const handoffState = (m: Awaited<ReturnType<typeof mesh>>, threadId: string) => m.node.threads.list().actors.find((a) => a.id === `${threadId}/handoff`)?.state;

describe('dormant threads in a handoff', () => {
  it('a thread whose specialist holds the conversation goes dormant; the next message wakes it without a store read and goes straight to the specialist', async () => {
    const m = await mesh({ dormantMs: 60_000 });
    const threadId = 'skill-dormant';
    const first = await m.client.send('I want to create a skill', { threadId });
    expect(first.text).toContain('Skill builder step 1');
    expect(handoffState(m, threadId)).toBe('active');

    const stored = await m.store.get(TENANT, threadId);
    const deadline = handoffDeadlineOf(stored!.record)!;
    expect(await m.threads.sleepThreads()).toBe(1);
    expect(m.threads.isLive(threadId)).toBe(false);
    // `troupe inspect` says when the handoff's deadline wakes it.
    expect(m.threads.inspect(threadId)?.actor.detail).toMatchObject({ dormant: true, wakesAt: new Date(deadline).toISOString() });
    const reads = m.store.gets;

    const second = await m.client.send('step 2 details', { threadId });
    expect(m.store.gets).toBe(reads);
    expect(second.text).toContain('Skill builder step 2');
    expect(second.route.map((s) => `${s.from}>${s.to}`)).toEqual(['user>skills']);
    expect(handoffState(m, threadId)).toBe('active');

    // Asleep again, it ends the handoff as a live one does: the specialist's last answer, then main's.
    await m.threads.sleepThreads();
    const done = await m.client.send("I'm done", { threadId });
    expect(done.text).toBe('main: welcome back (completed) — Handoff to skills completed: created a skill in 2 steps');
    expect(handoffState(m, threadId)).toBeUndefined();
  });

  it('a dormant thread is woken at its handoff deadline: the handoff ends in AGENT_TIMEOUT and the source answers, with no message from the user', async () => {
    // idleMs shorter than the deadline: a thread in a handoff stays dormant past it, never passivated.
    const m = await mesh({ dormantMs: 50, idleMs: 200, handoffMaxDurationMs: 1_500 });
    const threadId = 'slow-dormant';
    const events = m.record(threadId);
    const first = await m.client.send('slow please', { threadId });
    expect(first.text).toBe('sloth: accepted, thinking…');
    await waitFor(() => m.threads.dormantCount() === 1, 'the thread in a handoff to become dormant');
    // Past idleMs, shown by a thread at rest since later: a plain one, dropped from memory (neither live
    // nor dormant) once idle for idleMs.
    await m.client.send('hello', { threadId: 'idle-marker' });
    const reads = m.store.gets;
    await waitFor(() => !m.threads.isLive('idle-marker') && m.threads.inspect('idle-marker') === undefined, 'a thread at rest since later, passivated');
    expect(m.threads.inspect(threadId)).toBeDefined(); // kept in memory, dormant
    expect(m.threads.dormantCount()).toBe(1);
    expect(m.threads.isLive(threadId)).toBe(false);

    await waitFor(() => finalTexts(events).some((t) => t.includes('welcome back (failed)')), 'the resume after the deadline', 5_000);
    expect(finalTexts(events).at(-1)).toBe(
      'main: welcome back (failed) — Handoff to sloth failed: AGENT_TIMEOUT: the handoff to "sloth" did not finish within 1500 ms',
    );
    // Woken from its dormant copy, not read back from the store.
    expect(m.store.gets).toBe(reads);
    const task = await m.client.task(threadId);
    expect(task.status.state).toBe('input-required');
    expect(messageText(task.history!.at(-1)!)).toContain('welcome back (failed)');
    const next = await m.client.send('hello again', { threadId });
    expect(next.text).toBe('main: hello again');
  });

  it('a release forgets a dormant thread in a handoff: its deadline is the next owner’s to keep, this node writes nothing more', async () => {
    const m = await mesh({ dormantMs: 60_000, handoffMaxDurationMs: 600 });
    const threadId = 'slow-released';
    const events = m.record(threadId);
    await m.client.send('slow please', { threadId });
    expect(await m.threads.sleepThreads()).toBe(1);
    const stored = await m.store.get(TENANT, threadId);
    const seen = events.length;

    await m.threads.releaseThreads(() => true);
    expect(m.threads.dormantCount()).toBe(0);
    // Past the deadline, shown by a thread that went into the same handoff later: its deadline has fired.
    const markerEvents = m.record('slow-released-marker');
    await m.client.send('slow please', { threadId: 'slow-released-marker' });
    await waitFor(() => finalTexts(markerEvents).some((t) => t.includes('welcome back (failed)')), "the later thread's deadline", 10_000);
    expect(m.threads.isLive(threadId)).toBe(false);
    expect(events.length).toBe(seen);
    expect((await m.store.get(TENANT, threadId))?.revision).toBe(stored?.revision);
  });

  it('an operator’s rehydrate of a dormant thread in a handoff: the live actor keeps the deadline, which ends the handoff once', async () => {
    const m = await mesh({ dormantMs: 60_000, handoffMaxDurationMs: 800 });
    const threadId = 'slow-rehydrated';
    const events = m.record(threadId);
    await m.client.send('slow please', { threadId });
    await m.threads.sleepThreads();
    expect(await m.threads.rehydrate(threadId)).toBe('input-required');
    expect(m.threads.isLive(threadId)).toBe(true);
    await waitFor(() => finalTexts(events).some((t) => t.includes('welcome back (failed)')), 'the resume after the deadline', 5_000);
    // Once: the wake was dropped with the dormant copy, the live actor's timer ended the handoff.
    expect(finalTexts(events).filter((t) => t.includes('welcome back (failed)'))).toHaveLength(1);
  });
});
