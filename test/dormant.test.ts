/**
 * Dormant threads (ThreadHost `dormantMs`): a thread at rest has its actor stopped and its committed record
 * kept in the node as JSON; its next message wakes it from that, without a store read, and it goes on
 * exactly where it was. Embedded mesh (memory bus and store); the store counts its reads.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { defineAgent, reply } from '../src/sdk/agent.js';
import type { ThreadConfig } from '../src/machines/thread.js';
import { CountingStore, TENANT, dormantMesh } from './helpers/dormant-mesh.js';
import { waitFor } from './helpers/wait.js';

/** An echo agent that, for a message saying "hold", answers only once `release()` is called. */
function echoAgent() {
  let release: () => void = () => undefined;
  const held = new Promise<void>((r) => (release = r));
  const agent = defineAgent({
    card: { id: 'echo', name: 'Echo', description: 'Echoes' },
    handle: async (_m, ctx) => {
      if (ctx.text === 'hold') await held;
      return reply(`echo: ${ctx.text}`, { to: 'user' });
    },
  });
  return { agent, release: () => release() };
}

const stops: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const stop of stops.splice(0).reverse()) await stop().catch(() => undefined);
});

async function mesh(opts: { dormantMs: number; idleMs?: number; store?: CountingStore; nodeId?: string; config?: Partial<ThreadConfig> }) {
  const echo = echoAgent();
  const m = await dormantMesh(stops, [echo.agent], { ...opts, config: { entryAgent: 'echo', ...opts.config } });
  return { ...m, release: echo.release };
}

const texts = (history: Array<{ parts: Array<{ kind: string; text?: string }> }> | undefined) =>
  (history ?? []).map((m) => m.parts.map((p) => p.text).join(''));

describe('dormant threads', () => {
  it('a thread at rest for dormantMs keeps its record in memory, not its actor; its next message wakes it without a store read and it goes on where it was', async () => {
    const m = await mesh({ dormantMs: 100 });
    const first = await m.client.send('one');
    await m.client.send('two', { threadId: first.threadId });
    const before = await m.store.get(TENANT, first.threadId);
    const liveEvents = m.threads.inspect(first.threadId)!.events;
    expect(liveEvents.map((e) => e.type)).toContain('troupe.user.message');
    expect(liveEvents.some((e) => e.summary === `${first.threadId}/agentCall`)).toBe(true);
    await waitFor(() => m.threads.dormantCount() === 1, 'the thread to become dormant');
    expect(m.threads.isLive(first.threadId)).toBe(false);
    expect(m.threads.liveCount()).toBe(0);
    // Becoming dormant wrote nothing: the record was committed at the end of the turn.
    const atRest = await m.store.get(TENANT, first.threadId);
    expect(atRest!.revision).toBe(before!.revision);
    // `troupe inspect` shows it from the record it keeps (state and context, no children) and the recent
    // events its actor had, as they were.
    const seen = m.threads.inspect(first.threadId);
    expect(seen?.actor).toMatchObject({
      kind: 'thread',
      id: first.threadId,
      state: 'input-required',
      status: 'passivated',
      detail: { dormant: true, turns: 2, history: 4 },
    });
    expect(seen?.value).toBe('input-required');
    expect((seen?.context as { history: unknown[] }).history).toHaveLength(4);
    expect(seen?.events).toEqual(liveEvents);
    expect(m.threads.inspect(`${first.threadId}/agentCall`)).toBeUndefined();
    // The copy leaves out what the node gives back on waking (its config, the agent directory); shown, they are there.
    expect(seen?.context).toMatchObject({ config: { entryAgent: 'echo', maxHops: 10 }, agents: { echo: {} } });

    const gets = m.store.gets;
    const third = await m.client.send('three', { threadId: first.threadId });
    expect(third.text).toBe('echo: three');
    expect(m.store.gets).toBe(gets);
    expect(m.threads.isLive(first.threadId)).toBe(true);
    expect(m.threads.dormantCount()).toBe(0);
    expect(m.threads.inspect(first.threadId)?.context).toMatchObject({ config: { entryAgent: 'echo', maxHops: 10 }, agents: { echo: {} } });
    // Woken, the log goes on from where it was.
    const woken = m.threads.inspect(first.threadId)!.events;
    expect(woken.slice(0, liveEvents.length)).toEqual(liveEvents);
    expect(woken.slice(liveEvents.length).map((e) => e.type)).toContain('troupe.user.message');
    await m.threads.flushCommits(first.threadId);
    const after = await m.store.get(TENANT, first.threadId);
    // The write after waking is a compare-and-set on the revision the dormant record was committed at.
    expect(after!.revision).toBeGreaterThan(atRest!.revision);
    expect(texts(after!.record.task.history)).toEqual(['one', 'echo: one', 'two', 'echo: two', 'three', 'echo: three']);
    expect(after!.record.task.metadata?.['troupe/turns']).toBe(3);
    const routes = after!.record.task.metadata?.['troupe/routes'] as Array<{ to: string }>;
    expect(routes.map((r) => r.to)).toEqual(['echo', 'echo', 'echo']);
  });

  it('a thread with a long history wakes with its encoding: the next write holds the whole history, the new messages after it', async () => {
    const m = await mesh({ dormantMs: 0 });
    const sent = Array.from({ length: 9 }, (_, i) => `turn ${i} ✓ 🦦`);
    for (const text of sent) await m.client.send(text, { threadId: 'long-1' });
    await m.threads.flushCommits('long-1');
    expect(await m.threads.sleepThreads()).toBe(1);
    expect((m.threads.inspect('long-1')?.context as { history: unknown[] }).history).toHaveLength(18);
    expect((await m.client.send('after', { threadId: 'long-1' })).text).toBe('echo: after');
    await m.threads.flushCommits('long-1');
    const stored = await m.store.get(TENANT, 'long-1');
    expect(texts(stored!.record.task.history)).toEqual([...sent, 'after'].flatMap((t) => [t, `echo: ${t}`]));
  });

  it('a dormant thread is passivated after idleMs: nothing of it stays in memory and its next message reads the store', async () => {
    const m = await mesh({ dormantMs: 50, idleMs: 600 });
    const first = await m.client.send('one');
    await waitFor(() => m.threads.dormantCount() === 1, 'the thread to become dormant');
    await waitFor(() => m.threads.dormantCount() === 0, 'the dormant thread to be passivated', 5_000);
    expect(m.threads.passivatedCount()).toBe(1);
    const gets = m.store.gets;
    const second = await m.client.send('two', { threadId: first.threadId });
    expect(second.text).toBe('echo: two');
    expect(m.store.gets).toBe(gets + 1);
    expect(texts((await m.store.get(TENANT, first.threadId))!.record.task.history)).toEqual(['one', 'echo: one', 'two', 'echo: two']);
  });

  it('a thread in a turn is not made dormant; one someone inspects stays live until the inspection ends', async () => {
    const m = await mesh({ dormantMs: 0 });
    const held = m.client.send('hold', { threadId: 'held-1' });
    await waitFor(() => m.threads.isLive('held-1'), 'the thread to start its turn');
    expect(await m.threads.sleepThreads()).toBe(0);
    expect(m.threads.isLive('held-1')).toBe(true);
    m.release();
    expect((await held).text).toBe('echo: hold');

    m.node.inspection.switch.set(true, 'held-1');
    await m.threads.flushCommits('held-1');
    expect(await m.threads.sleepThreads()).toBe(0);
    expect(m.threads.isLive('held-1')).toBe(true);
    m.node.inspection.switch.set(false, 'held-1');
    expect(await m.threads.sleepThreads()).toBe(1);
    expect(m.threads.isLive('held-1')).toBe(false);
    expect((await m.client.send('again', { threadId: 'held-1' })).text).toBe('echo: again');
  });

  it('a node that gives a thread up forgets it dormant: after another node wrote it, the next message here reads that state', async () => {
    const store = new CountingStore();
    const a = await mesh({ dormantMs: 0, store, nodeId: 'node-a' });
    const first = await a.client.send('one', { threadId: 'moved-1' });
    expect(first.text).toBe('echo: one');
    expect(await a.threads.sleepThreads()).toBe(1);
    // Another node takes the thread over (its partition moved) and writes it.
    await a.threads.releaseThreads((id) => id === 'moved-1');
    expect(a.threads.dormantCount()).toBe(0);
    const stored = (await store.get(TENANT, 'moved-1'))!;
    const written = { kind: 'message' as const, role: 'user' as const, messageId: 'b-1', parts: [{ kind: 'text' as const, text: 'written by node-b' }] };
    await store.update(
      { ...stored.record, node: 'node-b', task: { ...stored.record.task, history: [...(stored.record.task.history ?? []), written] } },
      stored.revision,
    );
    // The partition comes back: the thread is read from the store, with what node-b wrote.
    const gets = store.gets;
    const second = await a.client.send('two', { threadId: 'moved-1' });
    expect(second.text).toBe('echo: two');
    expect(store.gets).toBeGreaterThan(gets);
    expect(texts((await store.get(TENANT, 'moved-1'))!.record.task.history)).toEqual(['one', 'echo: one', 'written by node-b', 'two', 'echo: two']);
  });

  it("a thread loaded with another config than the node's keeps it through dormancy", async () => {
    const store = new CountingStore();
    const a = await mesh({ dormantMs: 0, store, nodeId: 'node-a', config: { maxHops: 3 } });
    await a.client.send('one', { threadId: 'config-1' });
    await a.threads.passivateThread('config-1');
    const b = await mesh({ dormantMs: 0, store, nodeId: 'node-b' });
    await b.client.send('two', { threadId: 'config-1' });
    expect(b.threads.inspect('config-1')?.context).toMatchObject({ config: { maxHops: 3 } });
    expect(await b.threads.sleepThreads()).toBe(1);
    expect(b.threads.inspect('config-1')?.context).toMatchObject({ config: { maxHops: 3 } });
    expect((await b.client.send('three', { threadId: 'config-1' })).text).toBe('echo: three');
    expect(b.threads.inspect('config-1')?.context).toMatchObject({ config: { maxHops: 3 } });
  });

  it('rehydrate and passivateThread drop a dormant thread: the next load reads the store', async () => {
    const m = await mesh({ dormantMs: 0 });
    await m.client.send('one', { threadId: 'drop-1' });
    expect(await m.threads.sleepThreads()).toBe(1);
    const gets = m.store.gets;
    expect(await m.threads.rehydrate('drop-1')).toBe('input-required');
    expect(m.store.gets).toBe(gets + 1);
    expect(await m.threads.sleepThreads()).toBe(1);
    expect(await m.threads.passivateThread('drop-1')).toBe(true);
    expect(m.threads.dormantCount()).toBe(0);
    expect(await m.threads.passivateThread('drop-1')).toBe(false);
    expect((await m.client.send('two', { threadId: 'drop-1' })).text).toBe('echo: two');
    expect(m.store.gets).toBe(gets + 2);
  });
});
