/**
 * Another principal's thread looks like a missing one, at the NATS level: two client principals of one
 * tenant (users `client` and `cli`, each confined by nats-server to its own `in.P.*`, `out.P.>`, `req.P.*`),
 * one node (`troupe up`, durable, as shipped). The second principal asking for the first one's thread — its task, a cancel, its events on
 * `out` — gets byte for byte what it gets for a thread that never existed (the thread id aside).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AgentHost } from '../src/actors/agent-host.js';
import { defineAgent, reply } from '../src/sdk/agent.js';
import { TroupeClient } from '../src/sdk/client.js';
import { LIMITS, encodeJson } from '../src/protocol/index.js';
import { NatsTransport } from '../src/transport/nats.js';
import { subjects } from '../src/transport/subjects.js';
import { startNatsServer, type NatsServerHandle } from './helpers/nats-server.js';
import { ProcessGroup } from './helpers/processes.js';
import { waitUntil } from './helpers/wait.js';

const TENANT = 'demo';
const dec = new TextDecoder();

describe("another principal's thread, over NATS", () => {
  let nats: NatsServerHandle;
  const transports: NatsTransport[] = [];
  const procs = new ProcessGroup();
  let agent: AgentHost;
  let alice: TroupeClient;
  let bobT: NatsTransport;
  /** Every text the agent was called with. */
  const agentSaw: string[] = [];

  const connect = async (user: string, name: string) => {
    const t = await NatsTransport.connect({ ...nats.as(user), name });
    transports.push(t);
    return t;
  };

  beforeAll(async () => {
    nats = await startNatsServer();
    // test/fixtures/durable-team.ts: entry agent slowecho, run here.
    const echo = defineAgent({
      card: { id: 'slowecho', name: 'Echo', description: 'echoes' },
      handle: (_m, ctx) => {
        agentSaw.push(ctx.text);
        return reply(`echo: ${ctx.text}`, { to: 'user' });
      },
    });
    agent = await new AgentHost({ transport: await connect('slowecho', 'principals-echo'), agent: echo, tenant: TENANT }).start();
    await procs.spawnTroupe(['up', '--nats', nats.url, '--team', 'test/fixtures/durable-team.ts', '--no-agents', '--log-level', 'warn'], nats.env, {
      name: 'node',
    });
    alice = new TroupeClient(await connect('client', 'principals-alice'), { tenant: TENANT, principal: 'client' });
    bobT = await connect('cli', 'principals-bob');
  });

  afterAll(async () => {
    await procs.stopAll();
    await agent?.stop();
    await Promise.all(transports.map((t) => t.close().catch(() => undefined)));
    await nats?.stop();
  });

  /** Bob's raw request about thread `threadId` (`task` or `cancel`), the reply's bytes with the id replaced. */
  const bobAsks = async (verb: 'task' | 'cancel', threadId: string): Promise<string> => {
    const reply = await bobT.request(subjects.clientRequest(TENANT, 'cli', verb), encodeJson({ threadId }), { timeoutMs: 10_000 });
    return dec.decode(reply.data).replaceAll(threadId, '<thread>');
  };

  it("task and cancel of alice's thread answer bob as for a thread that never existed; its events never reach him", async () => {
    const threadId = 'alice-thread-1';
    const missing = 'never-existed-1';
    // Bob listens on his own `out` for the thread id, as for any thread of his.
    const bobSees: string[] = [];
    bobT.subscribe(subjects.threadOut(TENANT, 'cli', threadId), (m) => void bobSees.push(dec.decode(m.data)));
    await bobT.flush();

    const first = await alice.send('hello', { threadId, timeoutMs: 15_000 });
    expect(first.text).toBe('echo: hello');

    const foreignTask = await bobAsks('task', threadId);
    const missingTask = await bobAsks('task', missing);
    expect(foreignTask).toBe(missingTask);
    expect(JSON.parse(foreignTask)).toMatchObject({ kind: 'error' });

    const foreignCancel = await bobAsks('cancel', threadId);
    const missingCancel = await bobAsks('cancel', missing);
    expect(foreignCancel).toBe(missingCancel);
    expect(JSON.parse(foreignCancel)).toMatchObject({ kind: 'error' });

    // Alice's thread is untouched by bob's cancel, and goes on.
    expect((await alice.task(threadId)).status.state).toBe('input-required');
    const second = await alice.send('again', { threadId, timeoutMs: 15_000 });
    expect(second.text).toBe('echo: again');
    // The node's reply to bob comes on his connection after anything it published to bob before it (one
    // publisher, one subscriber: in order): nothing of alice's two turns was.
    await bobAsks('task', missing);
    expect(bobSees).toEqual([]);
  });

  it("a message on a thread id that breaks the id rule gets a typed rejection on the subject mirroring it under the sender's out", async () => {
    // Ids the broker takes as one subject token but the id rule refuses: the node cannot build a thread
    // from them, and still answers the sender where it listens for that thread.
    const badIds = ['a=b', 'a/b', 'ü', 'x'.repeat(129), 'z'.repeat(4_000)];
    for (const bad of badIds) {
      const t = await connect('cli', 'principals-bad-id');
      const seen: string[] = [];
      t.subscribe(`troupe.${TENANT}.out.cli.${bad}`, (m) => void seen.push(dec.decode(m.data)));
      await t.flush();
      const message = { kind: 'message', role: 'user', messageId: 'bad-id-1', parts: [{ kind: 'text', text: `to ${bad.slice(0, 20)}` }] };
      await t.request(`troupe.${TENANT}.in.cli.${bad}`, encodeJson(message), {
        timeoutMs: 10_000,
        headers: { 'Nats-Msg-Id': `cli/${bad.slice(0, 100)}/bad-id-1` },
      });
      const rejection = await waitUntil(() => seen.find((e) => e.includes('"rejected"')), `the rejection for thread id ${bad.slice(0, 20)}`, 15_000);
      const event = JSON.parse(rejection) as {
        final: boolean;
        metadata?: unknown;
        status: { message: { metadata: { 'troupe/error': { code: string; message: string } } } };
      };
      expect(event.final).toBe(true);
      expect(event.status.message.metadata['troupe/error'].code).toBe('INVALID_MESSAGE');
      expect(event.status.message.metadata['troupe/error'].message).toMatch(/thread id/);
      await t.close();
    }
    expect(agentSaw.filter((s) => s.startsWith('to '))).toEqual([]);
  }, 120_000);

  it("bob sending into alice's thread is told THREAD_NOT_FOUND alike with a messageId alice used and with a new one", async () => {
    const threadId = 'alice-thread-reuse';
    const used = 'alice-msg-reused';
    expect((await alice.send('mine', { threadId, messageId: used, timeoutMs: 15_000 })).text).toBe('echo: mine');
    // Bob as any client of the SDK would (the de-duplication id is the SDK's), waiting for the node's word
    // alone: no copy sent again, no look at the store.
    const bob = new TroupeClient(bobT, { tenant: TENANT, principal: 'cli' });
    const bobSees: string[] = [];
    bobT.subscribe(subjects.threadOut(TENANT, 'cli', threadId), (m) => void bobSees.push(dec.decode(m.data)));
    await bobT.flush();
    const refusal = async (messageId: string) => {
      const err = (await bob.send('yours?', { threadId, messageId, timeoutMs: 15_000, resendAfterMs: 0, recheckMs: 0 }).then(
        () => undefined,
        (e: unknown) => e,
      )) as { code?: string; message?: string } | undefined;
      return { code: err?.code, message: err?.message?.replaceAll(messageId, '<id>') };
    };
    const reused = await refusal(used);
    const fresh = await refusal('bob-msg-new');
    expect(reused).toEqual({ code: 'THREAD_NOT_FOUND', message: expect.any(String) as string });
    expect(reused).toEqual(fresh);
    // On bob's out, the two refusals are one and the same but for the message ids.
    await waitUntil(() => bobSees.length >= 2 || undefined, "both refusals on bob's out", 15_000);
    expect(bobSees[0]!.replaceAll(used, '<id>')).toBe(bobSees[1]!.replaceAll('bob-msg-new', '<id>'));
    // Alice's thread took nothing of bob's.
    expect(agentSaw).not.toContain('yours?');
  }, 60_000);

  it("a Nats-Msg-Id over its cap is refused before any work: a typed rejection on the sender's out, the agent never called", async () => {
    const threadId = 'long-msg-id-1';
    const aliceT = await connect('client', 'principals-long-id');
    const events: string[] = [];
    aliceT.subscribe(subjects.threadOut(TENANT, 'client', threadId), (m) => void events.push(dec.decode(m.data)));
    await aliceT.flush();
    const message = { kind: 'message', role: 'user', messageId: 'long-1', parts: [{ kind: 'text', text: 'with a long id' }] };
    // As a client publishes into the stream: a core request answered by JetStream's PubAck.
    await aliceT.request(subjects.threadIn(TENANT, 'client', threadId), encodeJson(message), {
      timeoutMs: 10_000,
      headers: { 'Nats-Msg-Id': `${threadId}/${'x'.repeat(2_000)}` },
    });
    await waitUntil(() => events.find((e) => e.includes('"rejected"')), "the rejection on alice's out", 30_000);
    const rejection = JSON.parse(events.find((e) => e.includes('"rejected"'))!) as { metadata: { 'troupe/error': { code: string; message: string } } };
    expect(rejection.metadata['troupe/error'].code).toBe('INVALID_MESSAGE');
    expect(rejection.metadata['troupe/error'].message).toContain(`Nats-Msg-Id is 2014 characters; the limit is ${LIMITS.msgIdChars}`);
    // A later message of alice's is answered: had the first reached the agent, it would have come before.
    expect((await alice.send('after the long id', { threadId: 'long-msg-id-2', timeoutMs: 15_000 })).text).toBe('echo: after the long id');
    expect(agentSaw).not.toContain('with a long id');
  });
});
