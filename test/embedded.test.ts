/**
 * The embedded default: node, agents and client on one in-memory bus, as `troupe` runs without NATS.
 * Covers what the hosts add on top of the machines: streaming, ps/inspect, passivation and rehydration.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmbedded } from '../src/actors/embedded.js';
import { silentLogger } from '../src/observability/logger.js';
import demoTeam from '../src/bin/demo/team.js';
import { ThreadEventSchema, decode } from '../src/protocol/index.js';
import { subjects } from '../src/transport/subjects.js';
import type { MessageHandler, SubscribeOptions, Transport } from '../src/transport/types.js';
import { TroupeClient } from '../src/sdk/client.js';

let mesh: Awaited<ReturnType<typeof startEmbedded>>;

beforeAll(async () => {
  mesh = await startEmbedded(demoTeam, silentLogger());
});
afterAll(async () => {
  await mesh.stop();
});

describe('embedded mesh with the demo team', () => {
  it('routes triage -> researcher -> writer, streaming the writer before the final answer', async () => {
    const kinds: string[] = [];
    const result = await mesh.client.send('Write about otters', { onEvent: (e) => kinds.push(e.kind) });
    expect(result.route.map((s) => s.to)).toEqual(['triage', 'researcher', 'writer']);
    expect(result.text).toContain('Here is your piece.');
    expect(result.final.status.state).toBe('input-required');
    const firstChunk = kinds.indexOf('artifact-update');
    expect(firstChunk).toBeGreaterThan(-1);
    expect(firstChunk).toBeLessThan(kinds.length - 1);
  });

  it('continues a thread and keeps its history across turns', async () => {
    const first = await mesh.client.send('Is the sea cold?');
    expect(first.route.map((s) => s.to)).toEqual(['triage', 'researcher', 'triage']);
    const second = await mesh.client.send('Write a poem', { threadId: first.threadId });
    expect(second.threadId).toBe(first.threadId);
    const info = mesh.node.threads.inspect(first.threadId);
    const history = (info?.context as { history: unknown[] }).history;
    expect(history.length).toBeGreaterThanOrEqual(6);
  });

  it('ps lists the node, registry, agents and live threads', async () => {
    const replies = await mesh.client.ps(200);
    const kinds = new Set(replies.flatMap((r) => r.actors.map((a) => a.kind)));
    expect([...kinds]).toEqual(expect.arrayContaining(['node', 'registry', 'agent', 'thread']));
    const agents = replies.flatMap((r) => r.actors.filter((a) => a.kind === 'agent').map((a) => a.id));
    expect(agents.sort()).toEqual(['researcher', 'triage', 'writer']);
  });

  it('a passivated thread is rehydrated from the store on its next message with its history', async () => {
    const first = await mesh.client.send('Tell me about kelp');
    const live = mesh.node.threads.list().actors.find((a) => a.id === first.threadId);
    expect(live?.state).toBe('input-required');
    await mesh.node.threads.rehydrate(first.threadId); // passivate + reload through the store
    const stored = await mesh.node.threads.store.get('demo', first.threadId);
    expect(stored?.record.task.history?.length).toBe(4);
    const second = await mesh.client.send('More please', { threadId: first.threadId });
    expect(second.text).toContain('Here is your piece.');
    const after = await mesh.node.threads.store.get('demo', first.threadId);
    expect(after?.record.task.history?.length).toBe(8);
    expect(after!.revision).toBeGreaterThan(stored!.revision);
  });

  it('several messages in flight on one thread each get their own answer, in order', async () => {
    const threadId = 'concurrent-1';
    const texts = await Promise.all(['a', 'b', 'c', 'd'].map((t) => mesh.client.send(`note ${t}`, { threadId }).then((r) => r.text)));
    texts.forEach((text, i) => expect(text).toContain(`note ${'abcd'[i]}`));
  });

  it('publishes a final answer only after the state that includes it is committed', async () => {
    const threadId = 'commit-order-1';
    const seen: string[] = [];
    mesh.client.transport.subscribe(subjects.threadOut('demo', 'local', threadId), async (m) => {
      const e = decode(ThreadEventSchema, m.data, 'event');
      if (e.kind === 'status-update' && e.final) seen.push((await mesh.node.threads.store.get('demo', threadId))?.record.task.status.state ?? 'none');
    });
    await mesh.client.send('order check', { threadId });
    await new Promise((r) => setTimeout(r, 20));
    expect(seen).toEqual(['input-required']);
  });

  it("an answer committed by a node that died before publishing it is published when the thread is reloaded", async () => {
    const threadId = 'outbox-1';
    await mesh.client.send('first', { threadId });
    expect(await mesh.node.threads.passivateThread(threadId)).toBe(true);
    const store = mesh.node.threads.store;
    const stored = (await store.get('demo', threadId))!;
    expect(stored.record.outbox).toBeUndefined(); // a clean passivation leaves no outbox
    const lost = { kind: 'status-update', taskId: threadId, contextId: threadId, status: { state: 'input-required' }, final: true, metadata: { marker: 'unpublished' } };
    await store.update({ ...stored.record, outbox: [lost] }, stored.revision);
    const republished: unknown[] = [];
    mesh.client.transport.subscribe(subjects.threadOut('demo', 'local', threadId), (m) => {
      const e = decode(ThreadEventSchema, m.data, 'event');
      if (e.metadata?.marker) republished.push(e);
    });
    await mesh.client.transport.flush();
    await mesh.node.threads.rehydrate(threadId);
    await new Promise((r) => setTimeout(r, 20));
    expect(republished).toHaveLength(1);
    // The next write replaces the outbox (it then holds that turn's answer until the write after), so a
    // lost answer is published once per crash, not on every reload; a clean passivation empties it.
    await mesh.client.send('second', { threadId });
    const outbox = ((await store.get('demo', threadId))?.record.outbox ?? []) as Array<{ metadata?: Record<string, unknown> }>;
    expect(outbox.some((e) => e.metadata?.marker)).toBe(false);
    await mesh.node.threads.passivateThread(threadId);
    expect((await store.get('demo', threadId))?.record.outbox).toBeUndefined();
  });

  it('an answer whose publish the client missed (e.g. while reconnecting) is found in the stored thread', async () => {
    // A transport that loses every final answer on the thread's output, as a reconnecting subscriber would.
    const inner = mesh.client.transport;
    const lossy: Transport = Object.assign(Object.create(inner) as Transport, {
      subscribe: (subject: string, handler: MessageHandler, opts?: SubscribeOptions) =>
        inner.subscribe(subject, (m) => (subject.endsWith('.out') && new TextDecoder().decode(m.data).includes('"final":true') ? undefined : handler(m)), opts),
    });
    const client = new TroupeClient(lossy);
    const started = Date.now();
    const result = await client.send('find me in the store', { recheckMs: 100, timeoutMs: 5_000 });
    expect(result.text).toContain('find me in the store');
    expect(Date.now() - started).toBeLessThan(2_000);
  });

  it('refuses a thread id that is not a subject token, with a typed error', async () => {
    await expect(mesh.client.send('x', { threadId: 'a.b' })).rejects.toMatchObject({ code: 'INVALID_MESSAGE' });
  });

  it('rejects a message with the wrong role and keeps serving', async () => {
    const bad = mesh.client.send({ kind: 'message', role: 'agent', messageId: 'x-1', parts: [{ kind: 'text', text: 'hi' }] });
    await expect(bad).rejects.toMatchObject({ code: 'INVALID_MESSAGE' });
    const ok = await mesh.client.send('still there?');
    expect(ok.final.status.state).toBe('input-required');
  });

  it('a duplicate message id is acknowledged once and not processed twice', async () => {
    const first = await mesh.client.send('once', { messageId: 'dup-1' });
    const again = mesh.client.send('once', { messageId: 'dup-1', threadId: first.threadId, timeoutMs: 500 });
    await expect(again).rejects.toMatchObject({ code: 'AGENT_TIMEOUT' });
    const stored = await mesh.node.threads.store.get('demo', first.threadId);
    expect(stored?.record.task.history?.filter((m) => m.messageId === 'dup-1')).toHaveLength(1);
  });
});
