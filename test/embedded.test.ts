/**
 * The embedded default: node, agents and client on one in-memory bus, as `troupe` runs without NATS.
 * Covers what the hosts add on top of the machines: streaming, ps/inspect, passivation and rehydration.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmbedded } from '../src/team/embedded.js';
import { TroupeNode } from '../src/actors/node.js';
import { MemoryBus, MemoryTransport } from '../src/transport/memory.js';
import { AgentHost } from '../src/actors/agent-host.js';
import { defineAgent, reply } from '../src/sdk/agent.js';
import { TroupeError } from '../src/protocol/errors.js';
import { silentLogger } from '../src/observability/logger.js';
import demoTeam from '../src/bin/demo/team.js';
import { ThreadEventSchema, decode } from '../src/protocol/index.js';
import { subjects } from '../src/transport/subjects.js';
import type { MessageHandler, SubscribeOptions, Transport } from '../src/transport/types.js';
import { TroupeClient, userMessage } from '../src/sdk/client.js';
import { waitFor } from './helpers/wait.js';

/** How long the slow agent thinks before it passes on: the second route step is stamped after it. */
const SLOW_AGENT_THINKS_MS = 80;

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
    // A third turn: more events than the recent-events log keeps.
    await mesh.client.send('And one about crabs', { threadId: first.threadId });
    const info = mesh.node.threads.inspect(first.threadId);
    const history = (info?.context as { history: unknown[] }).history;
    expect(history.length).toBeGreaterThanOrEqual(9);
    // The recent events of the thread (the last 25, kept compact, shown as times and types; children by their path).
    expect(info?.events.length).toBe(25);
    expect(info?.events.some((e) => e.type === 'troupe.user.message')).toBe(true);
    for (const e of info!.events) expect(new Date(e.at).toISOString()).toBe(e.at);
    expect(info?.events.every((e) => e.summary === undefined || e.summary.startsWith(`${first.threadId}/`))).toBe(true);
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
    await waitFor(() => seen.length === 1, 'the final answer, seen with the stored state');
    expect(seen).toEqual(['input-required']);
  });

  it('a redelivered message is answered again when the node that committed it cannot say it published it (it may have died before publishing), but not by the actor or node that published it', async () => {
    const threadId = 'redelivery-1';
    const host = mesh.node.threads;
    const message = userMessage('first', { messageId: 'redelivered-m1' });
    const answers: string[] = [];
    mesh.client.transport.subscribe(subjects.threadOut('demo', 'local', threadId), (m) => {
      const e = decode(ThreadEventSchema, m.data, 'event');
      if (e.kind === 'status-update' && e.final) answers.push(String(e.status.message?.metadata?.['troupe/inReplyTo']));
    });
    await mesh.client.transport.flush();
    // As the durable ingress hands it over: stream sequence 7, resolved once answered and committed; the
    // answer goes out when the ingress calls `publish` (after the server confirmed the ack).
    const first = await host.deliver(threadId, message, 'local', { seq: 7, until: 'answered' });
    expect(answers).toEqual([]);
    first.publish?.({ acked: true });
    await waitFor(() => answers.length === 1, 'the answer');
    // The ack was lost (a reconnect): the same actor gets it again and publishes nothing.
    expect(await host.deliver(threadId, message, 'local', { seq: 7, until: 'answered' })).toEqual({ duplicate: true });
    // A reload in this process still knows it published it.
    await host.rehydrate(threadId);
    expect(await host.deliver(threadId, message, 'local', { seq: 7, until: 'answered' })).toEqual({ duplicate: true });
    // Another process on the same store (the next owner) asks the node that committed the thread whether
    // it published the answer: it did, so nothing goes out again.
    await host.passivateThread(threadId);
    const bus = (mesh.client.transport as MemoryTransport).bus;
    const other = new TroupeNode({ transport: new MemoryTransport({ bus }), store: host.store, nodeId: 'other-node' });
    expect(await other.threads.deliver(threadId, message, 'local', { seq: 7, until: 'answered' })).toEqual({ duplicate: true });
    await mesh.client.transport.flush();
    expect(answers).toEqual(['redelivered-m1']);
    // Had that node died (nobody answers for it: it may have died between its commit and its ack), the
    // next owner cannot know whether the answer went out, so it publishes it.
    const stored = (await host.store.get('demo', threadId))!;
    await host.store.update({ ...stored.record, node: 'gone-node' }, stored.revision);
    const third = new TroupeNode({ transport: new MemoryTransport({ bus }), store: host.store, nodeId: 'third-node' });
    expect(await third.threads.deliver(threadId, message, 'local', { seq: 7, until: 'answered' })).toEqual({ duplicate: true });
    await waitFor(() => answers.length === 2, 'the answer again');
    expect(answers).toEqual(['redelivered-m1', 'redelivered-m1']);
  });

  it('an answer whose ack is not known to have taken goes out once, with the delivery that comes again; an older message the stream gives again after a later one is not answered again', async () => {
    const threadId = 'ack-unknown-1';
    const host = mesh.node.threads;
    const answers: string[] = [];
    mesh.client.transport.subscribe(subjects.threadOut('demo', 'local', threadId), (m) => {
      const e = decode(ThreadEventSchema, m.data, 'event');
      if (e.kind === 'status-update' && e.final) answers.push(String(e.status.message?.metadata?.['troupe/inReplyTo']));
    });
    await mesh.client.transport.flush();
    const m1 = userMessage('first', { messageId: 'unknown-m1' });
    const m2 = userMessage('second', { messageId: 'unknown-m2' });
    // The ack of m1 is not known to have taken (a consumer leader election): no answer goes out now.
    const first = await host.deliver(threadId, m1, 'local', { seq: 11, until: 'answered' });
    first.publish?.({ acked: false });
    // The message comes again (it was not acknowledged): that delivery publishes the stored answer.
    const again = await host.deliver(threadId, m1, 'local', { seq: 11, until: 'answered' });
    expect(again).toEqual({ duplicate: true });
    await waitFor(() => answers.length === 1, 'the answer of m1');
    // m2 is answered; then the stream gives m1 again (an acknowledged message it kept): m1 was settled
    // before m2 was accepted, so neither this process nor the next owner answers it a second time.
    const second = await host.deliver(threadId, m2, 'local', { seq: 12, until: 'answered' });
    second.publish?.({ acked: true });
    await waitFor(() => answers.length === 2, 'the answer of m2');
    expect(await host.deliver(threadId, m1, 'local', { seq: 11, until: 'answered' })).toEqual({ duplicate: true });
    await host.passivateThread(threadId);
    const other = new TroupeNode({
      transport: new MemoryTransport({ bus: (mesh.client.transport as MemoryTransport).bus }),
      store: host.store,
      nodeId: 'other-node-2',
    });
    expect(await other.threads.deliver(threadId, m1, 'local', { seq: 11, until: 'answered' })).toEqual({ duplicate: true });
    // The latest message given again (its ack confirmed, then lost with a consumer's leader): the node that
    // committed it says it published the answer, so the next owner does not.
    expect(await other.threads.deliver(threadId, m2, 'local', { seq: 12, until: 'answered' })).toEqual({ duplicate: true });
    await mesh.client.transport.flush();
    expect(answers).toEqual(['unknown-m1', 'unknown-m2']);
  });

  it('an answer whose publish the client missed (e.g. while reconnecting) is found in the stored thread', async () => {
    // A transport that loses every final answer on the thread's output, as a reconnecting subscriber would.
    const inner = mesh.client.transport;
    const lossy: Transport = Object.assign(Object.create(inner) as Transport, {
      subscribe: (subject: string, handler: MessageHandler, opts?: SubscribeOptions) =>
        inner.subscribe(subject, (m) => (subject.endsWith('.out') && new TextDecoder().decode(m.data).includes('"final":true') ? undefined : handler(m)), opts),
    });
    const client = new TroupeClient(lossy);
    // Every final event is lost on the way: only the recheck of the stored thread can answer it.
    const result = await client.send('find me in the store', { recheckMs: 100, timeoutMs: 20_000 });
    expect(result.text).toContain('find me in the store');
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

  it('a duplicate message id in the same thread gets the original answer at once and is not processed twice; in another thread it is a new message', async () => {
    const first = await mesh.client.send('once', { messageId: 'dup-1' });
    const again = await mesh.client.send('once', { messageId: 'dup-1', threadId: first.threadId, timeoutMs: 5_000 });
    expect(again.duplicate).toBe(true);
    expect(again.text).toBe(first.text);
    const stored = await mesh.node.threads.store.get('demo', first.threadId);
    expect(stored?.record.task.history?.filter((m) => m.messageId === 'dup-1')).toHaveLength(1);
    // The same messageId in another thread is another message: processed normally.
    const elsewhere = await mesh.client.send('once', { messageId: 'dup-1', timeoutMs: 5_000 });
    expect(elsewhere.threadId).not.toBe(first.threadId);
    expect(elsewhere.duplicate).toBeUndefined();
    expect(elsewhere.text).toBe(first.text);
  });

  it('past the history limit, a message id still in the history is a duplicate and one pruned from it is a new message', async () => {
    const first = await mesh.client.send('Is the sea cold?', { messageId: 'long-0' });
    const historyOf = () => (mesh.node.threads.inspect(first.threadId)?.context as { history: Array<{ messageId: string }> }).history.map((m) => m.messageId);
    let turns = 1;
    // Until the first message has been pruned, and a few turns after (the history's ids followed through several prunes).
    while (historyOf().includes('long-0') || turns < 20)
      await mesh.client.send(`Is the lake cold? ${turns}`, { messageId: `long-${turns++}`, threadId: first.threadId });
    expect(historyOf()).toHaveLength(50);
    // The oldest message of this test's still in the history.
    const oldest = historyOf().find((id) => id.startsWith('long-'))!;
    expect(historyOf().indexOf(oldest)).toBeLessThan(4);
    const again = await mesh.client.send('Is the lake cold?', { messageId: oldest, threadId: first.threadId, timeoutMs: 5_000 });
    expect(again.duplicate).toBe(true);
    const pruned = await mesh.client.send('Is the sea cold?', { messageId: 'long-0', threadId: first.threadId, timeoutMs: 5_000 });
    expect(pruned.duplicate).toBeUndefined();
    expect(pruned.route.map((s) => s.to)).toEqual(['triage', 'researcher', 'triage']);
    expect(historyOf().filter((id) => id === 'long-0')).toHaveLength(1);
  });
});

describe('cancel with messages queued behind the turn', () => {
  it('every message the thread took gets its own final answer: the one in its turn and each queued one', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let calls = 0;
    const { defineAgent, reply } = await import('../src/sdk/agent.js');
    const held = defineAgent({
      card: { id: 'held', name: 'Held', description: 'answers when the test lets it' },
      handle: async (_m, ctx) => {
        calls++;
        await gate;
        return reply(`done: ${ctx.text}`, { to: 'user' });
      },
    });
    const local = await startEmbedded({ name: 'cancel-queued', agents: [held], config: { entryAgent: 'held' } }, silentLogger());
    try {
      const threadId = 't-cancel-queued';
      const first = local.client.send('first', { threadId, timeoutMs: 10_000 });
      await waitFor(() => calls === 1, 'the first turn to reach the agent');
      const second = local.client.send('second', { threadId, timeoutMs: 10_000 });
      const third = local.client.send('third', { threadId, timeoutMs: 10_000 });
      await waitFor(() => (local.node.threads.inspect(threadId)?.context as { pending: unknown[] }).pending.length === 2, 'two messages queued');
      await local.client.cancel(threadId, 'the test cancels');
      const results = await Promise.all([first, second, third]);
      for (const r of results) {
        expect(r.final.status.state).toBe('canceled');
        expect(r.text).toBe('The task was canceled.');
      }
      // Each answer names the message it answers.
      expect(new Set(results.map((r) => r.final.status.message?.metadata?.['troupe/inReplyTo'])).size).toBe(3);
      expect(calls).toBe(1);
    } finally {
      release();
      await local.stop();
    }
  });
});

describe('a send before any node is up', () => {
  const echo = defineAgent({ card: { id: 'echo', name: 'Echo', description: 'echoes' }, handle: (_m, ctx) => reply(`echo: ${ctx.text}`, { to: 'user' }) });

  it('keeps trying while nothing takes the message (unavailableRetryMs) and is answered once a node starts', async () => {
    const bus = new MemoryBus();
    // Counts the client's attempts: each is a request that nobody takes until the node is up.
    const clientTransport = new MemoryTransport({ bus });
    let attempts = 0;
    const request = clientTransport.request.bind(clientTransport);
    clientTransport.request = (...args) => (attempts++, request(...args));
    const client = new TroupeClient(clientTransport, 'demo');
    const host = await new AgentHost({ transport: new MemoryTransport({ bus }), agent: echo, tenant: 'demo' }).start();
    let node: TroupeNode | undefined;
    try {
      const sent = client.send('are you there?', { threadId: 'early-1', unavailableRetryMs: 30_000, timeoutMs: 30_000 });
      // The first attempts found no subscriber; the node starts only once they have been made.
      await waitFor(() => attempts >= 3, 'three attempts that nobody took');
      node = await new TroupeNode({ transport: new MemoryTransport({ bus }), tenant: 'demo', config: { entryAgent: 'echo' } }).start();
      const res = await sent;
      expect(res.text).toBe('echo: are you there?');
    } finally {
      await node?.stop();
      await host.stop();
    }
  });

  it('without a node it fails after unavailableRetryMs with what to do, not after the whole timeout', async () => {
    const client = new TroupeClient(new MemoryTransport({ bus: new MemoryBus() }), 'demo');
    const err = await client.send('anyone?', { threadId: 'early-2', unavailableRetryMs: 300, timeoutMs: 120_000 }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(TroupeError);
    expect((err as TroupeError).code).toBe('TRANSPORT_ERROR');
    expect((err as TroupeError).message).toMatch(/no Troupe node is listening .*troupe up --nats/);
  });
});

describe("the thread's clock moves with the agents' answers", () => {
  it('a route step an answer makes is stamped with the time the answer came, not the time the turn began', async () => {
    let answeredAt = 0;
    const slow = defineAgent({
      card: { id: 'slow', name: 'Slow', description: 'thinks, then passes on' },
      handle: async () => {
        await new Promise((r) => setTimeout(r, SLOW_AGENT_THINKS_MS));
        answeredAt = Date.now();
        return reply('over to fast', { to: 'fast' });
      },
    });
    const fast = defineAgent({ card: { id: 'fast', name: 'Fast', description: 'answers' }, handle: () => reply('done', { to: 'user' }) });
    const team = await startEmbedded({ name: 'clock', agents: [slow, fast], config: { entryAgent: 'slow' } }, silentLogger());
    try {
      const result = await team.client.send('go');
      expect(result.route.map((s) => `${s.from}>${s.to}`)).toEqual(['user>slow', 'slow>fast']);
      const [first, second] = result.route;
      // The second step is stamped when slow's answer came (no earlier than slow returned it), the first
      // before slow began thinking.
      expect(second!.at!).toBeGreaterThanOrEqual(answeredAt);
      expect(first!.at!).toBeLessThan(answeredAt);
    } finally {
      await team.stop();
    }
  });
});
