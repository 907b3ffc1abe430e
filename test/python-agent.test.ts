/**
 * The stdlib-only Python agent in examples/python-agent speaks the mesh contract against a real
 * nats-server: registry announce/goodbye on its own subject, request/reply with headers, chunks
 * streamed on the reply subject, typed errors, client routing, idempotent retries and the hello. The
 * test side is the node user, through NatsTransport.
 */
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  AgentReplySchema,
  CLIENT_ROUTING_URI,
  ErrorReplySchema,
  HEADERS,
  PsReplySchema,
  RegistryEventSchema,
  TaskArtifactUpdateEventSchema,
  type AgentReply,
  type Message,
  type RegistryEvent,
} from '../src/protocol/index.js';
import { subjects } from '../src/transport/subjects.js';
import { NatsTransport } from '../src/transport/nats.js';
import type { Headers, InboundMessage } from '../src/transport/types.js';
import { REPO_ROOT, startNatsServer, type NatsServerHandle } from './helpers/nats-server.js';
import { ProcessGroup, type ManagedProcess } from './helpers/processes.js';

const AGENT = join(REPO_ROOT, 'examples/python-agent/agent.py');
const PYTHON = process.env.PYTHON ?? 'python3';
const TENANT = 'demo';
const INBOX = subjects.agentInbox(TENANT, 'pyecho');

const enc = new TextEncoder();
const dec = new TextDecoder();
const json = (m: InboundMessage): unknown => JSON.parse(dec.decode(m.data));
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
/** How often a wait looks again. */
const POLL_MS = 10;

async function waitFor<T>(get: () => T | undefined, what: string, timeoutMs = 5_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = get();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(POLL_MS);
  }
}

function userMessage(text: string, extra: Partial<Message> = {}): Message {
  return { kind: 'message', role: 'user', messageId: randomUUID(), contextId: 'ctx-1', parts: [{ kind: 'text', text }], ...extra };
}

function requestHeaders(message: Message, threadId: string, extra: Headers = {}): Headers {
  return {
    [HEADERS.threadId]: threadId,
    [HEADERS.hop]: '1',
    [HEADERS.sender]: 'user',
    [HEADERS.callId]: `${threadId}/${message.messageId}`,
    [HEADERS.traceparent]: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
    ...extra,
  };
}

describe('python agent (examples/python-agent)', () => {
  let server: NatsServerHandle;
  let node: NatsTransport;
  // The agent runs in a process group of its own, killed with it when the suite ends or its start fails.
  const procs = new ProcessGroup();
  let agent: ManagedProcess;
  /** What the agent printed so far (its JSON log lines are on stderr, anything else on stdout). */
  const agentLog = () => `${agent.stderr}${agent.stdout}`;
  const registry: RegistryEvent[] = [];
  let exited: Promise<number | null>;

  const ask = async (body: Uint8Array, headers: Headers): Promise<AgentReply> => {
    // No Troupe-Chunks header: the agent streams nothing and answers once on the reply subject.
    const reply = await node.request(INBOX, body, { timeoutMs: 3_000, headers });
    return AgentReplySchema.parse(json(reply));
  };

  beforeAll(async () => {
    server = await startNatsServer();
    node = await NatsTransport.connect({ ...server.asNode });
    node.subscribe(subjects.registry(TENANT, 'pyecho'), (m) => {
      registry.push(RegistryEventSchema.parse(json(m)));
    });
    await node.flush();
    agent = await procs.spawn(PYTHON, [AGENT, '--nats', server.url, '--creds', server.credsFile('pyecho')], {}, { name: 'python agent' });
    exited = agent.exited.then((e) => e.code);
    await waitFor(() => registry.find((e) => e.kind === 'announce'), "the agent's announce").catch((err) => {
      throw new Error(`${(err as Error).message}\n${agent.describe()}`);
    });
  });

  afterAll(async () => {
    await procs.stopAll();
    await node?.close();
    await server?.stop();
  });

  it('announces a card that validates against RegistryEventSchema', async () => {
    const announce = registry.find((e) => e.kind === 'announce');
    expect(announce).toBeDefined();
    if (announce?.kind !== 'announce') throw new Error('no announce');
    expect(announce.card.id).toBe('pyecho');
    expect(announce.ttlMs).toBe(15_000);
    expect(announce.card.capabilities.streaming).toBe(true);
    expect(announce.card.capabilities.extensions?.map((e) => e.uri)).toContain(CLIENT_ROUTING_URI);
    expect(announce.card.skills[0]?.id).toBe('echo');
    // The structured "joined" line follows the announce.
    const joined = await waitFor(
      () =>
        agentLog()
          .split('\n')
          .find((l) => l.includes('"msg": "joined"')),
      'the joined log line',
    );
    expect(JSON.parse(joined)).toMatchObject({ agentId: 'pyecho', tenant: 'demo', instanceId: announce.instanceId });
  });

  it('answers a request with headers with an A2A message echoing the text to the sender', async () => {
    const message = userMessage('hello mesh', { taskId: 'task-1' });
    const reply = await ask(enc.encode(JSON.stringify(message)), requestHeaders(message, 'th-echo'));
    if (reply.kind !== 'message') throw new Error(`expected a message, got ${JSON.stringify(reply)}`);
    expect(reply.role).toBe('agent');
    expect(reply.messageId).not.toBe(message.messageId);
    expect(reply.parts).toEqual([{ kind: 'text', text: 'pyecho: HELLO MESH' }]);
    expect(reply.contextId).toBe('ctx-1');
    expect(reply.taskId).toBe('task-1');
    expect(reply.metadata?.[CLIENT_ROUTING_URI]).toMatchObject({ recipient: 'sender' });
    // One structured log line per handled message, with thread, agent and tenant.
    await waitFor(() => (agentLog().includes('"thread": "th-echo"') ? true : undefined), 'the handled log line');
    const line = agentLog()
      .split('\n')
      .find((l) => l.includes('"thread": "th-echo"'));
    expect(JSON.parse(line ?? '{}')).toMatchObject({ msg: 'handled', thread: 'th-echo', agentId: 'pyecho', tenant: 'demo' });
  });

  /** Asks with a Troupe-Chunks header naming `chunkSubject`; collects what arrives there until the answer. */
  const askStreaming = async (message: Message, threadId: string, chunkSubject: string, listen = chunkSubject) => {
    const events: unknown[] = [];
    const sub = node.subscribe(listen, (m) => {
      events.push(json(m));
    });
    await node.flush();
    const res = await node.request(INBOX, enc.encode(JSON.stringify(message)), {
      timeoutMs: 3_000,
      headers: requestHeaders(message, threadId, { [HEADERS.taskId]: 'task-s', [HEADERS.contextId]: 'ctx-s', [HEADERS.chunks]: chunkSubject }),
    });
    // What the agent sent before its answer arrived before it (one connection, in order).
    const before = [...events];
    sub.unsubscribe();
    return { reply: AgentReplySchema.parse(json(res)), events: before };
  };

  it('streams artifact-update chunks to the subject named in Troupe-Chunks, before its one reply', async () => {
    const { reply, events } = await askStreaming(
      userMessage('stream these words please'),
      'th-stream',
      subjects.agentChunks(TENANT, 'pyecho', 'test-caller', 'c1'),
    );
    expect(events.length).toBeGreaterThanOrEqual(2);
    const chunks = events.map((e) => TaskArtifactUpdateEventSchema.parse(e));
    for (const c of chunks) expect(c).toMatchObject({ taskId: 'task-s', contextId: 'ctx-s', append: true, lastChunk: false });
    expect(new Set(chunks.map((c) => c.artifact.artifactId)).size).toBe(1);
    const streamed = chunks.map((c) => c.artifact.parts.map((p) => (p.kind === 'text' ? p.text : '')).join('')).join('');
    if (reply.kind !== 'message') throw new Error(`expected a message, got ${JSON.stringify(reply)}`);
    expect(streamed).toBe('pyecho: STREAM THESE WORDS PLEASE');
    expect(reply.parts).toEqual([{ kind: 'text', text: streamed }]);
    expect(reply).toMatchObject({ taskId: 'task-s', contextId: 'ctx-s' });
  });

  it('streams nothing to a Troupe-Chunks subject that is not its own or not a subject, answers, and keeps serving', async () => {
    // Another agent's chunk subject (the broker would refuse it anyway) and a header that would break the
    // protocol line if it were used as a subject (a space): the agent streams nothing and answers.
    for (const [i, chunkSubject] of [subjects.agentChunks(TENANT, 'writer', 'test-caller', 'c2'), `troupe.${TENANT}.chunks.pyecho.a b.c`].entries()) {
      const { reply, events } = await askStreaming(userMessage(`not mine ${i}`), 'th-foreign', chunkSubject, `troupe.${TENANT}.chunks.>`);
      expect(events).toEqual([]);
      if (reply.kind !== 'message') throw new Error(`expected a message, got ${JSON.stringify(reply)}`);
      expect(reply.parts).toEqual([{ kind: 'text', text: `pyecho: NOT MINE ${i}` }]);
    }
    const { reply, events } = await askStreaming(userMessage('still streaming'), 'th-foreign', subjects.agentChunks(TENANT, 'pyecho', 'test-caller', 'c3'));
    expect(events.length).toBeGreaterThanOrEqual(2);
    expect(reply.kind).toBe('message');
  });

  it('answers malformed JSON and schema-invalid messages with INVALID_MESSAGE and keeps serving', async () => {
    const bad = await ask(enc.encode('{"kind": "message", "parts": ['), { [HEADERS.threadId]: 'th-bad' });
    expect(ErrorReplySchema.parse(bad).error.code).toBe('INVALID_MESSAGE');

    const invalid = await ask(enc.encode(JSON.stringify({ kind: 'message', role: 'user', messageId: 'm-1', parts: [] })), {
      [HEADERS.threadId]: 'th-bad',
    });
    const err = ErrorReplySchema.parse(invalid).error;
    expect(err.code).toBe('INVALID_MESSAGE');
    expect(err.message).toMatch(/parts/);

    const noKind = await ask(enc.encode(JSON.stringify({ role: 'user', parts: [{ kind: 'text', text: 'x' }] })), {});
    expect(ErrorReplySchema.parse(noKind).error.code).toBe('INVALID_MESSAGE');

    const message = userMessage('still here');
    const good = await ask(enc.encode(JSON.stringify(message)), requestHeaders(message, 'th-bad'));
    expect(good).toMatchObject({ kind: 'message', parts: [{ kind: 'text', text: 'pyecho: STILL HERE' }] });
  });

  it('routes "@writer ..." to writer when the router lists it, and to the sender otherwise', async () => {
    const card = (id: string) => ({ id, name: id, description: `the ${id}`, capabilities: {}, supportsClientRouting: true });
    const routed = userMessage('@writer hello', {
      metadata: { [CLIENT_ROUTING_URI]: { agentCards: [card('writer'), card('researcher')], sender: 'user' } },
    });
    const reply = await ask(enc.encode(JSON.stringify(routed)), requestHeaders(routed, 'th-route'));
    if (reply.kind !== 'message') throw new Error(`expected a message, got ${JSON.stringify(reply)}`);
    expect(reply.metadata?.[CLIENT_ROUTING_URI]).toMatchObject({ recipient: 'writer' });
    expect(reply.parts).toEqual([{ kind: 'text', text: 'pyecho: @WRITER HELLO' }]);

    const unknown = userMessage('@nobody hello', {
      metadata: { [CLIENT_ROUTING_URI]: { agentCards: [card('writer')], sender: 'user' } },
    });
    const back = await ask(enc.encode(JSON.stringify(unknown)), requestHeaders(unknown, 'th-route'));
    if (back.kind !== 'message') throw new Error(`expected a message, got ${JSON.stringify(back)}`);
    expect(back.metadata?.[CLIENT_ROUTING_URI]).toMatchObject({ recipient: 'sender' });
  });

  it("answers a retried call (same Troupe-Call-Id) with the same answer, and another thread's reuse of the messageId afresh", async () => {
    const message = userMessage('once only');
    const first = await ask(enc.encode(JSON.stringify(message)), requestHeaders(message, 'th-retry'));
    const again = await ask(enc.encode(JSON.stringify(message)), requestHeaders(message, 'th-retry'));
    const elsewhere = await ask(enc.encode(JSON.stringify(message)), requestHeaders(message, 'th-retry-2'));
    if (first.kind !== 'message' || again.kind !== 'message' || elsewhere.kind !== 'message') throw new Error('expected messages');
    expect(again.messageId).toBe(first.messageId);
    expect(elsewhere.messageId).not.toBe(first.messageId);
    await waitFor(() => (agentLog().includes('"msg": "answered again"') ? true : undefined), 'the cached answer log line');
  });

  it('announces and lists itself when a hello is a request (troupe ps)', async () => {
    const before = registry.length;
    const replies = await node.requestMany(subjects.hello(TENANT), enc.encode(''), { timeoutMs: 2_000, maxReplies: 1 });
    await waitFor(() => (registry.length > before ? true : undefined), 'an announce after the hello');
    expect(replies).toHaveLength(1);
    const ps = PsReplySchema.parse(json(replies[0]!));
    const announce = registry.find((e) => e.kind === 'announce');
    if (announce?.kind !== 'announce') throw new Error('no announce');
    expect(ps.node).toBe(`pyecho-${announce.instanceId.slice(0, 8)}`);
    // "busy" while a handler is still winding down after its reply (the previous test's), else "idle".
    expect(ps.actors).toEqual([
      { kind: 'agent', id: 'pyecho', state: expect.stringMatching(/^(idle|busy)$/), node: ps.node, status: 'live', detail: { instance: announce.instanceId } },
    ]);
  });

  it('says goodbye on SIGTERM and exits 0', async () => {
    const announce = registry.find((e) => e.kind === 'announce');
    if (announce?.kind !== 'announce') throw new Error('no announce');
    agent.child.kill('SIGTERM');
    expect(await exited).toBe(0);
    const goodbye = await waitFor(() => registry.find((e) => e.kind === 'goodbye'), 'the goodbye', 2_000);
    expect(goodbye).toEqual({ kind: 'goodbye', instanceId: announce.instanceId });
    expect(agentLog()).toMatch(/"msg": "left"/);
  });
});
