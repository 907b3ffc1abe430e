/**
 * Ack after commit, shown directly: a node's commit of a turn is held back (a proxy between the node and
 * nats-server keeps its writes to the thread bucket from the server), and the inbound message stays
 * unacknowledged meanwhile: the server counts it pending an ack, and no ack of it ever left the node. The
 * node is killed with the commit still held; the message is delivered again to the next node and answered
 * once. The client sends it once (resends off), so the answer can only come from that redelivery.
 */
import { jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AgentHost } from '../src/actors/agent-host.js';
import { ThreadEventSchema, decode, type Message, type ThreadEvent } from '../src/protocol/index.js';
import { defineAgent, reply } from '../src/sdk/agent.js';
import { TroupeClient, userMessage } from '../src/sdk/client.js';
import { DEFAULT_THREAD_BUCKET } from '../src/store/kv.js';
import { INGRESS_STREAM, partitionOf } from '../src/transport/jetstream/ingress.js';
import type { NatsTransport } from '../src/transport/nats.js';
import { subjects } from '../src/transport/subjects.js';
import { startFrameProxy, type FrameProxy } from './helpers/frame-proxy.js';
import { natsSuite } from './helpers/nats-suite.js';
import type { ManagedProcess } from './helpers/processes.js';
import { waitUntil } from './helpers/wait.js';

const PARTITIONS = 8;
const LEASE_TTL_MS = 1_500;
const inReplyTo = (e: ThreadEvent) => (e.kind === 'status-update' && e.final ? e.status.message?.metadata?.['troupe/inReplyTo'] : undefined);
const textOf = (m: Message) => m.parts.flatMap((p) => (p.kind === 'text' ? [p.text] : [])).join('');

const suite = natsSuite();

describe('a node acknowledges an inbound message only after its turn is committed', () => {
  let proxy: FrameProxy;
  let jsm: JetStreamManager;
  let clientTransport: NatsTransport;
  let client: TroupeClient;
  const executions = new Map<string, number>();

  const startNode = (name: string, url: string): Promise<ManagedProcess> =>
    suite.group.spawnTroupe(
      [
        'up',
        '--nats',
        url,
        '--team',
        'test/fixtures/durable-team.ts',
        '--no-agents',
        '--lease-ttl',
        String(LEASE_TTL_MS),
        '--partitions',
        String(PARTITIONS),
        '--log-level',
        'warn',
      ],
      suite.nats.env,
      { name },
    );

  beforeAll(async () => {
    proxy = await startFrameProxy(suite.nats.port);
    const agentTransport = await suite.connect('ack-agent', 'slowecho');
    const echo = defineAgent({
      card: { id: 'slowecho', name: 'Echo', description: 'Echoes' },
      handle: (message) => {
        executions.set(message.messageId, (executions.get(message.messageId) ?? 0) + 1);
        return reply(`echo: ${textOf(message)}`, { to: 'user' });
      },
    });
    await new AgentHost({ transport: agentTransport, agent: echo, heartbeatMs: 500 }).start();
    clientTransport = await suite.connect('ack-client');
    client = new TroupeClient(clientTransport);
    jsm = await jetstreamManager(clientTransport.connection);
  });

  afterAll(async () => {
    await suite.group.stopAll();
    await proxy?.close();
  });

  it('holds the message unacked while its commit is held; killed then, the node leaves it to the next, which answers it once', async () => {
    // Node A alone, through the proxy: it owns every partition, so the thread's too.
    const nodeA = await startNode('node A (through the proxy)', proxy.url);
    await client.send('warm up', { threadId: 'ack-warm-up', timeoutMs: 30_000 });

    const threadId = 'ack-after-commit-1';
    const consumer = `p${partitionOf(threadId, PARTITIONS)}`;
    const finals: string[] = [];
    clientTransport.subscribe(subjects.threadOut('demo', 'local', threadId), (m) => {
      const id = inReplyTo(decode(ThreadEventSchema, m.data, 'event'));
      if (id !== undefined) finals.push(String(id));
    });
    await clientTransport.flush();

    const held = proxy.hold((subject) => subject.startsWith(`$KV.${DEFAULT_THREAD_BUCKET}.`));
    const forwardedBefore = proxy.forwarded.length;
    const message = userMessage('commit me');
    // Sent once: no resend can rescue it, only the stream's redelivery.
    const answer = client.send(message, { threadId, timeoutMs: 60_000, resendAfterMs: 0 });
    const heldSubject = await held;
    expect(heldSubject.startsWith(`$KV.${DEFAULT_THREAD_BUCKET}.`)).toBe(true);

    // The commit is held: the message is delivered and pending its ack.
    expect((await jsm.consumers.info(INGRESS_STREAM, consumer)).num_ack_pending).toBe(1);
    expect(finals).toEqual([]);

    // Node A dies with its commit held. Once its connections are closed, all it sent but the held writes
    // has reached the server: still pending, and no ack of that consumer ever went out.
    await nodeA.kill('SIGKILL');
    await waitUntil(() => proxy.connections === 0 || undefined, "node A's connections closed");
    const sentByA = proxy.forwarded.slice(forwardedBefore);
    expect(sentByA.filter((s) => s.startsWith(`$JS.ACK.${INGRESS_STREAM}.${consumer}.`))).toEqual([]);
    const pending = await jsm.consumers.info(INGRESS_STREAM, consumer).catch(() => undefined);
    expect(pending?.num_ack_pending ?? 0).toBe(1);
    expect((await jsm.streams.info(INGRESS_STREAM)).state.messages).toBe(1);

    // Node B, straight to the server, takes the partition once A's lease ages out and is given the message again.
    await startNode('node B', suite.nats.url);
    const result = await answer;
    expect(result.text).toBe('echo: commit me');
    expect(result.resent ?? 0).toBe(0);

    // Once: a later message on the thread is answered after any second answer to the first would have been.
    const later = userMessage('and then');
    expect((await client.send(later, { threadId, timeoutMs: 30_000, resendAfterMs: 0 })).text).toBe('echo: and then');
    await waitUntil(() => finals.includes(later.messageId) || undefined, 'the later answer on out');
    expect(finals.filter((id) => id === message.messageId)).toHaveLength(1);
    // The agent did the work once: node B's call, with the same idempotency key, was answered from its cache.
    expect(executions.get(message.messageId)).toBe(1);
  }, 120_000);
});
