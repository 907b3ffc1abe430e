/**
 * A client that gets no answer sends its message again (SendOptions.resendAfterMs, HEADERS.resend): on a
 * real nats-server with the node as its own process. A message the inbound stream lost after
 * acknowledging it (a replicated stream can, in a failover: docs/cluster.md) is answered once the copy
 * arrives; a message whose turn is only slow is not run again nor answered twice for its copies — on
 * NATS, and on the embedded mesh, where copies reach the node as requests.
 */
import { jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AgentHost } from '../src/actors/agent-host.js';
import { defineAgent, reply } from '../src/sdk/agent.js';
import { defineTeam } from '../src/team/team.js';
import { startEmbedded } from '../src/team/embedded.js';
import { silentLogger } from '../src/observability/logger.js';
import { MemoryTransport } from '../src/transport/memory.js';
import { TroupeClient } from '../src/sdk/client.js';
import { HEADERS, ThreadEventSchema } from '../src/protocol/index.js';
import { INGRESS_STREAM } from '../src/transport/jetstream/ingress.js';
import { NatsTransport } from '../src/transport/nats.js';
import { startNatsServer, type NatsServerHandle } from './helpers/nats-server.js';
import { ProcessGroup, type ManagedProcess } from './helpers/processes.js';
import { waitUntil } from './helpers/wait.js';

const dec = new TextDecoder();

describe('a client sends again what got no answer', () => {
  const procs = new ProcessGroup();
  let nats: NatsServerHandle;
  let node: ManagedProcess;
  let nodeNc: NatsConnection;
  let jsm: JetStreamManager;
  const transports: NatsTransport[] = [];
  let agent: AgentHost;
  let client: TroupeClient;
  /** How often the agent was called for each messageId. */
  const calls = new Map<string, number>();
  /** Gates per message text: the agent waits on the gate of its message's text, if there is one. */
  const gates = new Map<string, Promise<void>>();
  /** Final events on the client's output, by the messageId they answer. */
  const finals = new Map<string, number>();

  const startNode = () =>
    procs.spawnTroupe(['up', '--nats', nats.url, '--team', 'test/fixtures/resend-team.ts', '--no-agents', '--log-level', 'error'], nats.env, { name: 'node' });
  const streamState = async () => (await jsm.streams.info(INGRESS_STREAM)).state;

  beforeAll(async () => {
    nats = await startNatsServer();
    node = await startNode();
    const agentT = await NatsTransport.connect({ ...nats.as('slowecho'), name: 'resend-agent' });
    transports.push(agentT);
    agent = await new AgentHost({
      transport: agentT,
      heartbeatMs: 1_000,
      agent: defineAgent({
        card: { id: 'slowecho', name: 'Slow echo', description: 'Echoes, when its gate opens' },
        handle: async (message, ctx) => {
          calls.set(message.messageId, (calls.get(message.messageId) ?? 0) + 1);
          await gates.get(ctx.text);
          return reply(`echo: ${ctx.text}`, { to: 'user' });
        },
      }),
    }).start();
    const clientT = await NatsTransport.connect({ ...nats.as('client'), name: 'resend-client' });
    transports.push(clientT);
    client = new TroupeClient(clientT, { tenant: 'demo', principal: 'client' });
    clientT.subscribe('troupe.demo.out.client.*', (m) => {
      const parsed = ThreadEventSchema.safeParse(JSON.parse(dec.decode(m.data)));
      if (!parsed.success || parsed.data.kind !== 'status-update' || !parsed.data.final) return;
      const to = String(parsed.data.status.message?.metadata?.['troupe/inReplyTo']);
      finals.set(to, (finals.get(to) ?? 0) + 1);
    });
    nodeNc = await connect({ ...nats.as('node'), name: 'resend-stream-reader' });
    jsm = await jetstreamManager(nodeNc);
    // The node is up and takes messages.
    expect((await client.send('warm up', { threadId: 't-resend-warm', timeoutMs: 60_000 })).text).toBe('echo: warm up');
  });

  afterAll(async () => {
    await agent?.stop().catch(() => undefined);
    await nodeNc?.close();
    await Promise.all(transports.map((t) => t.close()));
    await procs.stopAll();
    await nats?.stop();
  });

  /** Any second final event of `messageId` would arrive before the answer to a later message of the thread. */
  async function expectOneFinal(threadId: string, messageId: string): Promise<void> {
    expect((await client.send('and then', { threadId, timeoutMs: 60_000 })).text).toBe('echo: and then');
    expect(finals.get(messageId)).toBe(1);
    const history = (await client.task(threadId)).history ?? [];
    expect(history.filter((m) => m.messageId === messageId)).toHaveLength(1);
  }

  it('a message the stream lost after its ack is answered once its copy arrives', { timeout: 120_000 }, async () => {
    await node.kill('SIGTERM');
    const threadId = 't-resend-lost';
    const messageId = `m-lost-${Date.now()}`;
    const before = await streamState();
    const sending = client.send('lost once', { threadId, messageId, resendAfterMs: 500, timeoutMs: 90_000 });
    // JetStream acknowledged the message; then it is gone from the stream, as in the failover that loses one.
    await waitUntil(async () => (await streamState()).last_seq > before.last_seq, 'the stream to take the message', 30_000);
    const seq = (await streamState()).last_seq;
    expect(await jsm.streams.deleteMessage(INGRESS_STREAM, seq)).toBe(true);
    // The client, with no answer, sends a copy; a node that starts now finds only the copy.
    await waitUntil(async () => (await streamState()).last_seq > seq, 'the client to send a copy', 30_000);
    node = await startNode();
    const result = await sending;
    expect(result.text).toBe('echo: lost once');
    expect(result.resent).toBeGreaterThanOrEqual(1);
    expect(calls.get(messageId)).toBe(1);
    await expectOneFinal(threadId, messageId);
  });

  it('a slow turn gets copies of its message: each is only acknowledged, the turn runs and is answered once', { timeout: 120_000 }, async () => {
    const threadId = 't-resend-slow';
    const messageId = `m-slow-${Date.now()}`;
    let open!: () => void;
    gates.set('slow one', new Promise<void>((resolve) => (open = resolve)));
    const first = (await streamState()).last_seq;
    const sending = client.send('slow one', { threadId, messageId, resendAfterMs: 200, timeoutMs: 90_000 });
    // The original and at least two copies reached the stream while the agent was still working.
    await waitUntil(async () => (await streamState()).last_seq >= first + 3, 'two copies of the slow message', 60_000);
    await waitUntil(() => calls.get(messageId) === 1, 'the agent to be called', 30_000);
    open();
    const result = await sending;
    expect(result.text).toBe('echo: slow one');
    expect(result.resent).toBeGreaterThanOrEqual(2);
    // The copies waited behind the original (a thread takes its next message once the previous one's ack
    // settled), then were acknowledged without a turn or an answer.
    await waitUntil(async () => (await streamState()).messages === 0, 'the copies to be acknowledged', 30_000);
    expect(calls.get(messageId)).toBe(1);
    await expectOneFinal(threadId, messageId);
  });
});

describe('a client sends again what got no answer: the embedded mesh (no JetStream)', () => {
  it('copies of a slow message reach the node as requests: each is acknowledged as a duplicate, the turn runs and is answered once', async () => {
    let open!: () => void;
    const gate = new Promise<void>((resolve) => (open = resolve));
    let called = 0;
    const team = defineTeam({
      name: 'resend-embedded',
      agents: [
        defineAgent({
          card: { id: 'slow', name: 'Slow', description: 'Answers when the test opens its gate' },
          handle: async (_message, ctx) => {
            called++;
            await gate;
            return reply(`done: ${ctx.text}`, { to: 'user' });
          },
        }),
      ],
      config: { entryAgent: 'slow', agentTimeoutMs: 60_000, retries: 0 },
    });
    const mesh = await startEmbedded(team, silentLogger());
    try {
      const finals: string[] = [];
      mesh.client.follow('t-embedded-resend', (e) => {
        if (e.kind === 'status-update' && e.final) finals.push(String(e.status.message?.metadata?.['troupe/inReplyTo']));
      });
      let copies = 0;
      const sending = mesh.client.send('slow', { threadId: 't-embedded-resend', messageId: 'm-embedded', resendAfterMs: 50, timeoutMs: 60_000 });
      // Three copies went while the agent works (each acknowledged by the node: the send keeps waiting).
      const seen = new Set<string>();
      const sub = new MemoryTransport({ bus: mesh.bus }).subscribe('troupe.demo.in.>', (m) => {
        const id = m.headers[HEADERS.msgId];
        if (!id || seen.has(id)) return;
        seen.add(id);
        if (id.includes('#')) copies++;
      });
      await waitUntil(() => copies >= 3 || undefined, 'three copies of the slow message', 30_000);
      sub.unsubscribe();
      open();
      const result = await sending;
      expect(result.text).toBe('done: slow');
      expect(result.resent).toBeGreaterThanOrEqual(3);
      expect(called).toBe(1);
      expect((await mesh.client.send('and then', { threadId: 't-embedded-resend' })).text).toBe('done: and then');
      expect(finals.filter((id) => id === 'm-embedded')).toHaveLength(1);
    } finally {
      await mesh.stop();
    }
  });
});
