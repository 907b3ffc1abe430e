/**
 * Every message a node accepts into a thread gets exactly one final event naming it (`troupe/inReplyTo`):
 * its answer, or a typed error such as `canceled` or `rejected` — never nothing (issue 7). On a real
 * nats-server, with the node as its own process and a slow agent, one thread gets a stream of messages
 * while the operator keeps reloading it in the middle of its turns (each reload sends the delivery of the
 * turn's message back to the stream, and the messages queued behind it with it), the node passivates it
 * whenever it is idle for a moment, and a cancel comes in the middle of the stream. The thread must take
 * its messages in the order they were accepted, and answer each of them once. And a message that reuses a
 * messageId the thread already had is a message of its own: it gets a final event, and the first one
 * keeps its own.
 */
import { jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import { connect, headers as natsHeaders, type NatsConnection } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { AgentHost } from '../src/actors/agent-host.js';
import { defineAgent, reply } from '../src/sdk/agent.js';
import { TroupeClient, userMessage } from '../src/sdk/client.js';
import { HEADERS, ThreadEventSchema, encodeJson } from '../src/protocol/index.js';
import { INGRESS_STREAM } from '../src/transport/jetstream/ingress.js';
import { NatsTransport } from '../src/transport/nats.js';
import { startNatsServer, type NatsServerHandle } from './helpers/nats-server.js';
import { ProcessGroup, type ManagedProcess } from './helpers/processes.js';
import { sleep, waitUntil, waitWhileProgressing } from './helpers/wait.js';

const T = 'troupe.demo';
/** How long the agent thinks before it answers, so a burst's messages overlap the turns in flight. */
const AGENT_THINKS_MS = 30;
const dec = new TextDecoder();

describe('every accepted message gets exactly one final event', () => {
  const procs = new ProcessGroup();
  let nats: NatsServerHandle;
  let node: ManagedProcess;
  let nc: NatsConnection;
  /** The inbound stream, read as the node user (clients may only publish into it). */
  let nodeNc: NatsConnection;
  let jsm: JetStreamManager;
  /** Nothing waits in the inbound stream: everything sent so far was taken (answered, or lost). */
  const drained = async () => (await jsm.streams.info(INGRESS_STREAM)).state.messages === 0;
  const transports: NatsTransport[] = [];
  let agent: AgentHost;
  /** The messageIds the agent was called for, in the order of their first call. */
  const called: string[] = [];

  beforeAll(async () => {
    nats = await startNatsServer();
    // Idle threads passivate after 300 ms: between two bursts the node unloads the thread while the next
    // message may already be on its way.
    node = await procs.spawnTroupe(
      ['up', '--nats', nats.url, '--team', 'test/fixtures/durable-team.ts', '--no-agents', '--idle', '300', '--log-level', 'error'],
      nats.env,
      { name: 'node' },
    );
    const agentT = await NatsTransport.connect({ ...nats.as('slowecho'), name: 'final-events-agent' });
    transports.push(agentT);
    agent = await new AgentHost({
      transport: agentT,
      heartbeatMs: 1_000,
      agent: defineAgent({
        card: { id: 'slowecho', name: 'Slow echo', description: 'Echoes after a while' },
        handle: async (message, ctx) => {
          if (!called.includes(message.messageId)) called.push(message.messageId);
          await sleep(AGENT_THINKS_MS);
          return reply(`echo: ${ctx.text}`, { to: 'user' });
        },
      }),
    }).start();
    nc = await connect({ ...nats.as('client'), name: 'final-events-client' });
    nodeNc = await connect({ ...nats.as('node'), name: 'final-events-stream-reader' });
    jsm = await jetstreamManager(nodeNc);
  });

  afterAll(async () => {
    await agent?.stop().catch(() => undefined);
    await nc?.close();
    await nodeNc?.close();
    await Promise.all(transports.map((t) => t.close()));
    await procs.stopAll();
    await nats?.stop();
  });

  it('a stream of messages into one thread, reloaded mid-turn again and again and canceled midway: each accepted message is answered once, in order', async () => {
    const operatorT = await NatsTransport.connect({ ...nats.as('operator'), name: 'final-events-operator' });
    transports.push(operatorT);
    const operator = new TroupeClient(operatorT, { principal: 'operator' });
    const threadId = 't-final-events';
    /** Final events by the message they name, in arrival order; and finals naming none. */
    const finals = new Map<string, string[]>();
    let unnamed = 0;
    nc.subscribe(`${T}.out.client.${threadId}`, {
      callback: (_err, m) => {
        const parsed = ThreadEventSchema.safeParse(JSON.parse(dec.decode(m.data)));
        if (!parsed.success || parsed.data.kind !== 'status-update' || !parsed.data.final) return;
        const to = parsed.data.status.message?.metadata?.['troupe/inReplyTo'];
        if (typeof to !== 'string') {
          unnamed++;
          return;
        }
        finals.set(to, [...(finals.get(to) ?? []), parsed.data.status.state]);
      },
    });
    await nc.flush();
    const cliT = await NatsTransport.connect({ ...nats.as('cli'), name: 'final-events-cli' });
    transports.push(cliT);
    const cli = new TroupeClient(cliT, { principal: 'cli' });
    await waitUntil(
      async () =>
        (await cli.send('warm up', { timeoutMs: 10_000 }).then(
          (x) => x.text === 'echo: warm up',
          () => false,
        )) || undefined,
      'the mesh to answer',
      30_000,
    );
    called.length = 0;

    const TOTAL = 160;
    const CANCEL_AFTER = 120;
    const accepted: string[] = [];
    let sent = 0;
    let canceled = false;
    const send = async (i: number) => {
      const message = userMessage(`message ${i}`, { messageId: `m-${i}` });
      const h = natsHeaders();
      h.set(HEADERS.msgId, `${threadId}/${message.messageId}`);
      const ack = JSON.parse(dec.decode((await nc.request(`${T}.in.client.${threadId}`, encodeJson(message), { headers: h, timeout: 10_000 })).data)) as {
        seq?: number;
        duplicate?: boolean;
      };
      expect(ack.duplicate).toBeFalsy();
      expect(ack.seq).toBeGreaterThan(0);
      accepted.push(message.messageId);
    };
    // The stream of messages: bursts of 1–7 sent one after another (each waits for the stream's ack only).
    const sender = (async () => {
      for (let i = 0; i < TOTAL;) {
        const burst = 1 + (i % 7);
        for (let k = 0; k < burst && i < TOTAL; k++, i++) {
          await send(i);
          sent = i + 1;
        }
        // The next burst comes once the thread is busy with this one.
        const before = called.length;
        await waitUntil(async () => called.length > before || canceled || (await drained()) || undefined, 'the thread to take the burst', 60_000, 10);
      }
    })();
    // The operator: reloads the thread whenever the agent is in the middle of a turn, a cancel once midway.
    const reloads = { ok: 0, other: 0 };
    const operatorLoop = (async () => {
      let seen = 0;
      while (sent < TOTAL) {
        if (!canceled && sent >= CANCEL_AFTER) {
          canceled = true;
          await operator.cancelAny(threadId).catch(() => undefined);
          continue;
        }
        // Every other agent call.
        await waitUntil(async () => called.length > seen + 1 || sent >= TOTAL || (await drained()) || undefined, 'another agent call', 60_000, 10);
        seen = called.length;
        // A reload mid-turn: the turn's delivery goes back to the stream, with everything queued behind it.
        await operator.rehydrate(threadId).then(
          () => reloads.ok++,
          () => reloads.other++,
        );
      }
    })();
    await Promise.all([sender, operatorLoop]);
    expect(accepted).toHaveLength(TOTAL);

    // Every accepted message gets a final event naming it. A lost one stops the count: no progress for 30 s.
    const named = () => accepted.filter((id) => (finals.get(id)?.length ?? 0) > 0).length;
    await waitWhileProgressing(() => named() === accepted.length || undefined, named, 'a final event for every accepted message', 30_000).catch(
      (err: unknown) => {
        const missing = accepted.filter((id) => !finals.has(id));
        throw new Error(
          `${(err as Error).message}: ${missing.length} of ${accepted.length} accepted messages got no final event: ${JSON.stringify(missing.slice(0, 30))}`,
          { cause: err },
        );
      },
    );
    // Nothing is left to come: the stream is empty and nothing is in flight.
    await waitUntil(async () => (await drained()) || undefined, 'the inbound stream to be empty', 30_000);
    await nc.flush();

    const states = accepted.map((id) => finals.get(id) ?? []);
    const answered = accepted.filter((id) => finals.get(id)?.[0] === 'input-required');
    const calledSet = new Set(called);
    console.log(
      `[final-events] ${accepted.length} accepted: ${answered.length} answered, ${states.filter((s) => s[0] === 'canceled').length} canceled, ${states.filter((s) => s[0] === 'rejected').length} rejected; ` +
        `${reloads.ok} reloads (${reloads.other} refused), agent calls ${called.length}, finals naming no message ${unnamed}`,
    );
    // Exactly one final event each.
    expect(accepted.filter((id) => finals.get(id)?.length !== 1)).toEqual([]);
    // The reloads hit turns in progress, and the cancel ended the thread midway: messages after it were refused.
    expect(reloads.ok).toBeGreaterThan(0);
    expect(answered.length).toBeGreaterThan(0);
    expect(states.filter((s) => s[0] === 'rejected').length).toBeGreaterThan(0);
    // In order: the agent got the answered messages in the order the stream accepted them.
    const answeredSet = new Set(answered);
    expect(called.filter((id) => answeredSet.has(id))).toEqual(answered.filter((id) => calledSet.has(id)));
    expect(node.running, node.stderr.slice(-3_000)).toBe(true);
  }, 240_000);

  it('a messageId sent again is a message of its own: the first answer again while the thread has it, a turn of its own once it left the history', async () => {
    const threadId = 't-reused-ids';
    const finals = new Map<string, number>();
    const sub = nc.subscribe(`${T}.out.client.${threadId}`, {
      callback: (_err, m) => {
        const parsed = ThreadEventSchema.safeParse(JSON.parse(dec.decode(m.data)));
        if (!parsed.success || parsed.data.kind !== 'status-update' || !parsed.data.final) return;
        const to = parsed.data.status.message?.metadata?.['troupe/inReplyTo'];
        if (typeof to === 'string') finals.set(to, (finals.get(to) ?? 0) + 1);
      },
    });
    onTestFinished(() => sub.unsubscribe());
    await nc.flush();
    let n = 0;
    const send = async (messageId: string) => {
      const h = natsHeaders();
      // A de-duplication id of its own each time: these are new messages that happen to reuse a messageId.
      h.set(HEADERS.msgId, `${threadId}/${messageId}/${n++}`);
      const ack = JSON.parse(
        dec.decode(
          (await nc.request(`${T}.in.client.${threadId}`, encodeJson(userMessage(`text of ${messageId}`, { messageId })), { headers: h, timeout: 10_000 }))
            .data,
        ),
      ) as { duplicate?: boolean };
      expect(ack.duplicate).toBeFalsy();
    };
    const finalsFor = (id: string) => finals.get(id) ?? 0;

    // Sent twice in a row: the second gets the first one's answer, and the first keeps its own.
    await send('r-0');
    await send('r-0');
    await waitUntil(() => finalsFor('r-0') >= 2 || undefined, 'both answers to r-0', 30_000);
    // 30 more turns push r-0 out of the thread's history (the last 50 messages).
    for (let i = 1; i <= 30; i++) await send(`r-${i}`);
    await waitUntil(() => finalsFor('r-30') >= 1 || undefined, 'the answer to r-30', 60_000);
    // Sent a third time: the thread no longer has it, so it is a turn of its own, with its own answer.
    await send('r-0');
    await waitUntil(() => finalsFor('r-0') >= 3 || undefined, 'the third answer to r-0', 30_000);
    await waitUntil(async () => (await drained()) || undefined, 'the inbound stream to be empty', 30_000);
    await nc.flush();
    expect(finalsFor('r-0')).toBe(3);
    expect(Array.from({ length: 30 }, (_, i) => finalsFor(`r-${i + 1}`))).toEqual(Array.from({ length: 30 }, () => 1));
  }, 120_000);
});
