/**
 * End to end over a real nats-server, every actor in its own process: a node (`troupe up --team
 * examples/agents/team.ts`), the demo agents, two `echo` replica processes logged in as the restricted
 * `echo` user, and the stdlib Python agent. The test process talks to the mesh through TroupeClient and
 * raw requests (anonymous connection = the demo `node` user), through the CLI as child processes, and
 * once as the restricted `client` user.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TroupeClient, userMessage, type SendResult } from '../src/sdk/client.js';
import type { RouteStep } from '../src/machines/thread.js';
import {
  AgentReplySchema,
  CLIENT_ROUTING_URI,
  ErrorReplySchema,
  ThreadEventSchema,
  TroupeError,
  encodeJson,
  type ActorInfo,
  type AgentReply,
  type ErrorBody,
  type Message,
  type TaskStatusUpdateEvent,
  type ThreadEvent,
} from '../src/protocol/index.js';
import { NatsTransport } from '../src/transport/nats.js';
import { subjects } from '../src/transport/subjects.js';
import type { InboundMessage } from '../src/transport/types.js';
import { REPO_ROOT, startNatsServer, type NatsServerHandle } from './helpers/nats-server.js';
import { ProcessGroup, runTroupeJson, type Env, type ManagedProcess } from './helpers/processes.js';
import { waitUntil } from './helpers/wait.js';

const TENANT = 'demo';
const ECHO_INBOX = subjects.agentInbox(TENANT, 'echo');
const PY_AGENT = join(REPO_ROOT, 'examples/python-agent/agent.py');
const HAS_PYTHON_AGENT = existsSync(PY_AGENT);
const PYTHON = process.env.PYTHON ?? 'python3';
/** The team config of examples/agents/team.ts. */
const MAX_HOPS = 4;
const AGENT_TIMEOUT_MS = 3_000;
/** AgentHost's default registry ttl (no CLI flag changes it) plus a sweep and some slack. */
const REGISTRY_TTL_MS = 15_000;

const enc = new TextEncoder();
const dec = new TextDecoder();

const json = (m: InboundMessage): unknown => JSON.parse(dec.decode(m.data));
const agentReply = (m: InboundMessage): AgentReply => AgentReplySchema.parse(json(m));
const route = (r: { route: RouteStep[] }) => r.route.map((s) => [s.from, s.to, s.hop]);
const textOf = (m: Message | undefined) => (m?.parts ?? []).flatMap((p) => (p.kind === 'text' ? [p.text] : [])).join('');
const addressedTo = (recipient: string) => ({ [CLIENT_ROUTING_URI]: { recipient } });
const facts = (topic: string) => `Facts on "${topic}": 3 sources agree it is worth writing about.`;

interface ThreadRecordJson {
  kind: 'thread';
  revision: number;
  record: {
    task: { status: { state: string }; history: Message[]; metadata: { 'troupe/routes': RouteStep[] } };
  };
}

interface PsJson {
  actors: ActorInfo[];
  live: number;
  passivated: number;
}

interface InspectJson {
  found: boolean;
  node: string;
  actor: ActorInfo;
  value: unknown;
  context: { threadId: string; turns: number; history: Message[]; config: { maxHops: number; entryAgent: string; agentTimeoutMs: number } };
  events: Array<{ at: string; type: string }>;
}

interface SendJson {
  threadId: string;
  state: string;
  text: string;
  route: RouteStep[];
  error?: { code: string; message: string };
  message?: Message;
}

describe('troupe end to end over NATS, one process per actor', () => {
  let nats: NatsServerHandle;
  const procs = new ProcessGroup();
  /** Anonymous connection: acts as the demo `node` user (no_auth_user). */
  let nodeT: NatsTransport;
  /** The restricted `client` user: may only talk to threads and the control plane. */
  let clientT: NatsTransport;
  let client: TroupeClient;
  let writer: ManagedProcess;
  let echoes: ManagedProcess[] = [];
  /** CLI children connect anonymously, i.e. as the demo `node` user. */
  const cliEnv: Env = {};
  let natsArgs: string[];
  const threads: string[] = [];

  const send = async (text: string, opts: Parameters<TroupeClient['send']>[1] = {}): Promise<SendResult> => {
    const res = await client.send(text, { timeoutMs: 15_000, ...opts });
    threads.push(res.threadId);
    return res;
  };

  /** `id -> instances` in the node's registry, from `ps`. */
  const registry = async (): Promise<Record<string, number>> => {
    const replies = await client.ps(300);
    const reg = replies.flatMap((r) => r.actors).find((a) => a.kind === 'registry');
    const agents = (reg?.detail?.agents as string[] | undefined) ?? [];
    return Object.fromEntries(agents.map((a) => a.split('×')).map(([id, n]) => [id!, Number(n)]));
  };

  /** The stored thread record, once it holds at least `minHistory` messages and is not mid-turn. */
  const storedThread = (threadId: string, minHistory: number) =>
    waitUntil(
      async () => {
        const res = (await client.ctl('thread', { threadId })) as unknown as ThreadRecordJson;
        const { task } = res.record;
        return task.history.length >= minHistory && task.status.state !== 'working' ? res : undefined;
      },
      `thread ${threadId} committed with ${minHistory} messages`,
      5_000,
      50,
    );

  beforeAll(async () => {
    nats = await startNatsServer();
    natsArgs = ['--nats', nats.url];
    // The CLI in this suite acts as the operator-capable node user; each agent has its own credentials.
    Object.assign(cliEnv, nats.env);
    await procs.spawnTroupe(['up', ...natsArgs, '--team', 'examples/agents/team.ts'], nats.env, { name: 'node' });
    const agentArgs = (id: string, module = `examples/agents/${id}.ts`) => ['agent', module, ...natsArgs, '--creds', nats.credsFile(id)];
    const started = await Promise.all([
      procs.spawnTroupe(agentArgs('triage'), {}, { name: 'triage' }),
      procs.spawnTroupe(agentArgs('researcher'), {}, { name: 'researcher' }),
      procs.spawnTroupe(agentArgs('writer'), {}, { name: 'writer' }),
      procs.spawnTroupe([...agentArgs('echo'), '--replicas', '1'], {}, { name: 'echo-1' }),
      procs.spawnTroupe([...agentArgs('echo'), '--replicas', '1'], {}, { name: 'echo-2' }),
      ...(HAS_PYTHON_AGENT
        ? [procs.spawn(PYTHON, [PY_AGENT, ...natsArgs, '--creds', nats.credsFile('pyecho')], {}, { name: 'pyecho', ready: /"msg": "joined"/ })]
        : []),
    ]);
    writer = started[2]!;
    echoes = [started[3]!, started[4]!];
    nodeT = await NatsTransport.connect({ ...nats.asNode, name: 'e2e-node-user' });
    clientT = await NatsTransport.connect({ ...nats.as('client'), name: 'e2e-client' });
    client = new TroupeClient(nodeT, TENANT);
    const want: Record<string, number> = { triage: 1, researcher: 1, writer: 1, echo: 2, ...(HAS_PYTHON_AGENT ? { pyecho: 1 } : {}) };
    await waitUntil(
      async () => {
        const reg = await registry();
        return Object.entries(want).every(([id, n]) => reg[id] === n) ? reg : undefined;
      },
      `the node's registry to list ${JSON.stringify(want)}`,
      15_000,
    );
  });

  afterAll(async () => {
    await Promise.all([nodeT?.close(), clientT?.close()].map((p) => p?.catch(() => undefined)));
    await procs.stopAll();
    await nats?.stop();
  });

  it('routes triage -> researcher -> writer -> user, streaming the writer chunks before the final status', async () => {
    const events: ThreadEvent[] = [];
    const topic = 'Write a note about otters';
    const res = await send(topic, { onEvent: (e) => events.push(e) });

    expect(res.error).toBeUndefined();
    expect(res.final.status.state).toBe('input-required');
    expect(res.text).toBe(`Here is your piece. ${facts(topic)}`);
    expect(res.final.status.message?.metadata?.['troupe/agent']).toBe('writer');
    expect(route(res)).toEqual([
      ['user', 'triage', 0],
      ['triage', 'researcher', 1],
      ['researcher', 'writer', 2],
    ]);

    const chunks = events.flatMap((e, i) => (e.kind === 'artifact-update' ? [{ i, e }] : []));
    const finalAt = events.findIndex((e) => e.kind === 'status-update' && e.final);
    expect(chunks.map(({ e }) => textOf({ parts: e.artifact.parts } as Message)).join('')).toBe('Here is your piece. ');
    expect(chunks.every(({ e }) => e.artifact.metadata?.['troupe/agent'] === 'writer')).toBe(true);
    expect(finalAt).toBe(events.length - 1);
    expect(Math.max(...chunks.map((c) => c.i))).toBeLessThan(finalAt);
    // The route steps were announced as working status updates, in order, before the final one.
    const announced = events.flatMap((e) =>
      e.kind === 'status-update' && !e.final && e.metadata?.['troupe/route'] ? [e.metadata['troupe/route'] as RouteStep] : [],
    );
    expect(announced.map((s) => s.to)).toEqual(['triage', 'researcher', 'writer']);

    // The persisted thread, read by the CLI in another process.
    await storedThread(res.threadId, 4);
    const stored = await runTroupeJson<ThreadRecordJson>(['thread', res.threadId, ...natsArgs, '--json'], cliEnv);
    const { task } = stored.record;
    expect(task.status.state).toBe('input-required');
    expect(task.history.map((m) => [m.role, m.role === 'user' ? 'user' : m.metadata?.['troupe/agent']])).toEqual([
      ['user', 'user'],
      ['agent', 'triage'],
      ['agent', 'researcher'],
      ['agent', 'writer'],
    ]);
    expect(textOf(task.history[0])).toBe(topic);
    expect(textOf(task.history[3])).toBe(res.text);
    expect(task.metadata['troupe/routes'].map((s) => [s.from, s.to, s.hop])).toEqual(route(res));
  });

  it('`troupe send --json` from another process gets the same routed, streamed answer', async () => {
    const topic = 'Write about owls';
    const out = await runTroupeJson<SendJson>(['send', topic, ...natsArgs, '--json', '--timeout', '15000'], cliEnv);
    threads.push(out.threadId);
    expect(out.state).toBe('input-required');
    expect(out.error).toBeUndefined();
    expect(out.text).toBe(`Here is your piece. ${facts(topic)}`);
    expect(out.route.map((s) => [s.from, s.to, s.hop])).toEqual([
      ['user', 'triage', 0],
      ['triage', 'researcher', 1],
      ['researcher', 'writer', 2],
    ]);
    expect(out.message?.metadata?.['troupe/agent']).toBe('writer');

    // Continue the same thread from the CLI.
    const next = await runTroupeJson<SendJson>(['send', 'Is it night?', '--thread', out.threadId, ...natsArgs, '--json', '--timeout', '15000'], cliEnv);
    expect(next.threadId).toBe(out.threadId);
    expect(next.text).toBe(`Checked with researcher: ${facts('Is it night?')}`);
  });

  it('the restricted `client` principal can drive its own thread (send, streamed chunks, answer) but not control the mesh', async () => {
    const asClient = new TroupeClient(clientT, { tenant: TENANT, principal: 'client' });
    const topic = 'Write about cranes';
    const outcome = await asClient.send(topic, { timeoutMs: 5_000 }).then(
      (res) => {
        threads.push(res.threadId);
        return { text: res.text, error: res.error?.code, streamed: res.events.some((e) => e.kind === 'artifact-update') };
      },
      (e: unknown) => ({ thrown: e instanceof Error ? `${e.name}: ${e.message}` : String(e) }),
    );
    // nats-server 2.9 checks publish permissions on the mapped (partitioned) subject: the client role allows
    // the client both `troupe.demo.in.client.*` and `troupe.demo.in.client.*.*`.
    expect(outcome).toEqual({ text: `Here is your piece. ${facts(topic)}`, error: undefined, streamed: true });
    // Control is for operators: the broker refuses the client's ps request.
    const ps = await asClient.ps(300).then(
      () => 'answered',
      (e: unknown) => (e as Error).message,
    );
    expect(ps).toMatch(/Permissions Violation for Publish to "troupe\.demo\.(ctl\.ps|hello)"/);
  });

  it('returns to the `sender`: triage -> researcher -> back to triage -> user', async () => {
    const question = 'Is it raining today?';
    const res = await send(question);
    expect(res.error).toBeUndefined();
    expect(route(res)).toEqual([
      ['user', 'triage', 0],
      ['triage', 'researcher', 1],
      ['researcher', 'triage', 2],
    ]);
    expect(res.route[2]!.reason).toContain('(back to sender)');
    expect(res.text).toBe(`Checked with researcher: ${facts(question)}`);
    expect(res.final.status.message?.metadata?.['troupe/agent']).toBe('triage');
    // Nothing was streamed: only the writer streams.
    expect(res.events.some((e) => e.kind === 'artifact-update')).toBe(false);
  });

  it('sends a user message that names an agent straight to it (echo, logged in as its restricted user)', async () => {
    const res = await send('hello echo', { metadata: addressedTo('echo') });
    expect(res.error).toBeUndefined();
    expect(route(res)).toEqual([['user', 'echo', 0]]);
    expect(res.route[0]!.reason).toBe('the user addressed echo');
    const m = /^echo\((\d+)\): hello echo$/.exec(res.text);
    expect(m, res.text).not.toBeNull();
    expect(echoes.map((p) => p.pid)).toContain(Number(m![1]));
    expect(res.final.status.message?.metadata?.['troupe/agent']).toBe('echo');
  });

  it('stops a loop at the hop limit with ROUTING_LOOP and the last answer; the thread then answers the next message', async () => {
    const res = await send('Please loop this');
    expect(route(res)).toEqual([
      ['user', 'triage', 0],
      ['triage', 'writer', 1],
      ['writer', 'triage', 2],
      ['triage', 'writer', 3],
      ['writer', 'triage', 4],
    ]);
    expect(res.error?.code).toBe('ROUTING_LOOP');
    expect(res.error?.details).toMatchObject({ hops: MAX_HOPS, maxHops: MAX_HOPS, from: 'triage', to: 'writer' });
    expect(res.final.status.state).toBe('input-required');
    expect(res.text).toBe(`triage: writer, once more please (${MAX_HOPS})`);
    expect(res.final.status.message?.metadata?.['troupe/agent']).toBe('triage');
    expect(res.final.status.message?.metadata?.['troupe/error']).toMatchObject({ code: 'ROUTING_LOOP' });

    const next = await send('Write about badgers', { threadId: res.threadId });
    expect(next.error).toBeUndefined();
    expect(next.text).toBe(`Here is your piece. ${facts('Write about badgers')}`);
    expect(route(next)[0]).toEqual(['user', 'triage', 0]);
  });

  it('shares the load between two echo processes: 20 messages, each answered exactly once, by both', async () => {
    const handledByInstance = async () => {
      const actors = (await client.ps(300)).flatMap((r) => r.actors).filter((a) => a.kind === 'agent' && a.id === 'echo');
      return new Map(actors.map((a) => [String(a.detail?.instance), Number(a.detail?.handled ?? 0)]));
    };
    const before = await handledByInstance();
    expect(before.size).toBe(2);

    const ids = Array.from({ length: 20 }, (_, i) => `t-e2e-load-${i}-${Date.now()}`);
    const finals = new Map<string, TaskStatusUpdateEvent[]>();
    const watch = nodeT.subscribe(`troupe.${TENANT}.out.*.*`, (msg) => {
      const threadId = msg.subject.split('.')[4] ?? '';
      const event = ThreadEventSchema.parse(json(msg));
      if (event.kind === 'status-update' && event.final) finals.set(threadId, [...(finals.get(threadId) ?? []), event]);
    });
    await nodeT.flush();
    try {
      const results = await Promise.all(ids.map((threadId, i) => send(`load ${i}`, { threadId, metadata: addressedTo('echo') })));
      await nodeT.flush();

      const pids = results.map((r, i) => {
        expect(r.error).toBeUndefined();
        expect(route(r)).toEqual([['user', 'echo', 0]]);
        const m = new RegExp(`^echo\\((\\d+)\\): load ${i}$`).exec(r.text);
        expect(m, r.text).not.toBeNull();
        return Number(m![1]);
      });
      const perPid = new Map<number, number>();
      for (const pid of pids) perPid.set(pid, (perPid.get(pid) ?? 0) + 1);
      expect([...perPid.keys()].sort()).toEqual(echoes.map((p) => p.pid).sort());

      // Exactly one final answer per thread, and exactly 20 handled requests across the replicas
      // (none answered twice, e.g. after a retry), split the way the pids say.
      for (const id of ids) expect(finals.get(id)?.length, id).toBe(1);
      const after = await handledByInstance();
      const deltas = [...after].map(([instance, n]) => n - (before.get(instance) ?? 0));
      expect(deltas.reduce((a, b) => a + b, 0)).toBe(20);
      expect(deltas.sort((a, b) => a - b)).toEqual([...perPid.values()].sort((a, b) => a - b));
    } finally {
      watch.unsubscribe();
    }
    // The restricted `echo` user was enough: no permission violation in either process.
    for (const p of echoes) expect(p.stderr).not.toMatch(/permission/i);
  });

  it.runIf(HAS_PYTHON_AGENT)('answers through the Python agent in a thread, with its streamed chunks', async () => {
    const events: ThreadEvent[] = [];
    const res = await send('hello from the node', { metadata: addressedTo('pyecho'), onEvent: (e) => events.push(e) });
    expect(res.error).toBeUndefined();
    expect(route(res)).toEqual([['user', 'pyecho', 0]]);
    expect(res.text).toBe('pyecho: HELLO FROM THE NODE');
    expect(res.final.status.message?.metadata?.['troupe/agent']).toBe('pyecho');
    const chunks = events.flatMap((e, i) => (e.kind === 'artifact-update' ? [i] : []));
    expect(chunks.length).toBeGreaterThanOrEqual(2);
    expect(Math.max(...chunks)).toBeLessThan(events.findIndex((e) => e.kind === 'status-update' && e.final));
    expect(
      events
        .flatMap((e) => (e.kind === 'artifact-update' ? e.artifact.parts : []))
        .map((p) => (p.kind === 'text' ? p.text : ''))
        .join(''),
    ).toBe(res.text);
  });

  describe('bad input to an agent inbox (raw requests to troupe.demo.agent.echo)', () => {
    const request = (data: Uint8Array, timeoutMs = 5_000) => nodeT.request(ECHO_INBOX, data, { timeoutMs });
    const errorOf = (m: InboundMessage) => ErrorReplySchema.parse(json(m)).error;
    const stillWorks = async (tag: string) => {
      const reply = agentReply(await request(encodeJson(userMessage(`still ok ${tag}`))));
      expect(reply.kind).toBe('message');
      expect(reply.kind === 'message' ? textOf(reply) : '').toMatch(new RegExp(`^echo\\(\\d+\\): still ok ${tag}$`));
    };

    it('malformed JSON -> INVALID_MESSAGE', async () => {
      const err = errorOf(await request(enc.encode('{"kind": "message", "parts": [')));
      expect(err.code).toBe('INVALID_MESSAGE');
      expect(err.message).toContain('not valid JSON');
      await stillWorks('json');
    });

    it('schema violation (no parts) -> INVALID_MESSAGE', async () => {
      const err = errorOf(await request(encodeJson({ kind: 'message', role: 'user', messageId: 'm-no-parts', parts: [] })));
      expect(err.code).toBe('INVALID_MESSAGE');
      expect(err.message).toContain('parts');
      await stillWorks('schema');
    });

    it('bad client-routing metadata -> EXTENSION_PARSE_ERROR', async () => {
      const bad = userMessage('hi', { metadata: { [CLIENT_ROUTING_URI]: { agentCards: 'nope' } } });
      const err = errorOf(await request(encodeJson(bad)));
      expect(err.code).toBe('EXTENSION_PARSE_ERROR');
      expect(err.message).toContain('agentCards');
      await stillWorks('extension');
    });

    it('a payload over max_payload (1 MiB) is refused at once with a clear error, not a hang', async () => {
      const big = encodeJson(userMessage('x'.repeat(1024 * 1024 + 16)));
      expect(big.byteLength).toBeGreaterThan(1024 * 1024);
      // The NATS client refuses to publish more than the server's max_payload: the caller gets an
      // error synchronously-fast (it is the client's InvalidArgumentError, not a TransportError).
      const err = await request(big, 10_000).then(
        () => undefined,
        (e: unknown) => e as Error,
      );
      expect(err).toBeInstanceOf(Error);
      // The max_payload error (not a timeout) is what shows it was refused at once.
      expect(err!.message).toMatch(/max_payload/);
      // The same through TroupeClient.send into a thread.
      await expect(client.send('y'.repeat(1024 * 1024 + 16), { timeoutMs: 10_000 })).rejects.toThrow(/max_payload/);
      await stillWorks('payload');
    });

    it('a request just under max_payload whose reply would exceed it gets a typed error, not a timeout', async () => {
      const overhead = encodeJson(userMessage('')).byteLength;
      const near = encodeJson(userMessage('z'.repeat(1024 * 1024 - overhead - 64)));
      expect(near.byteLength).toBeLessThanOrEqual(1024 * 1024);
      const started = Date.now();
      const outcome = await request(near, AGENT_TIMEOUT_MS + 500).then(
        (m) => json(m),
        (e: unknown) => ({ thrown: e instanceof Error ? `${e.name}: ${e.message}` : String(e) }),
      );
      const elapsed = Date.now() - started;
      await stillWorks('near-limit');
      // A reply larger than the server's max_payload becomes a PAYLOAD_TOO_LARGE error reply at once,
      // instead of leaving the caller to its timeout.
      expect({ outcome, fast: elapsed < AGENT_TIMEOUT_MS }).toMatchObject({ outcome: { kind: 'error', error: { code: 'PAYLOAD_TOO_LARGE' } }, fast: true });
    });
  });

  describe('bad input to a thread (requests to troupe.demo.thread.<id>.in)', () => {
    let threadId: string;
    /**
     * Sends raw bytes into the thread and returns the error the sender learns about: the request's typed
     * error reply or, when the input was accepted for processing (an ack), the error the node then
     * publishes on the thread's `.out` (a status update carrying `troupe/error`).
     */
    const threadError = async (data: Uint8Array): Promise<{ code: string; message: string; via: 'reply' | 'out' }> => {
      const routed: ErrorBody[] = [];
      const out = nodeT.subscribe(subjects.threadOut(TENANT, 'local', threadId), (m) => {
        const event = ThreadEventSchema.safeParse(json(m));
        const error = event.success ? event.data.metadata?.['troupe/error'] : undefined;
        if (error) routed.push(error as ErrorBody);
      });
      try {
        await nodeT.flush();
        const reply = json(await nodeT.request(subjects.threadIn(TENANT, 'local', threadId), data, { timeoutMs: 5_000 }));
        const typed = ErrorReplySchema.safeParse(reply);
        if (typed.success) return { ...typed.data.error, via: 'reply' };
        const error = await waitUntil(() => routed[0], `an error on the .out of ${threadId} after the ack ${JSON.stringify(reply)}`, 5_000, 20);
        return { ...error, via: 'out' };
      } finally {
        out.unsubscribe();
      }
    };

    beforeAll(async () => {
      const first = await send('Write about herons');
      expect(first.error).toBeUndefined();
      threadId = first.threadId;
      await storedThread(threadId, 4);
    });

    it('malformed JSON, schema violations and an agent-role message get typed errors; history stays intact and the thread still answers', async () => {
      const malformed = await threadError(enc.encode('{oops'));
      expect(malformed.code).toBe('INVALID_MESSAGE');
      expect(malformed.message).toContain('not valid JSON');

      const noParts = await threadError(encodeJson({ kind: 'message', role: 'user', messageId: 'm-empty', parts: [] }));
      expect(noParts.code).toBe('INVALID_MESSAGE');
      expect(noParts.message).toContain('parts');

      const wrongKind = await threadError(encodeJson({ kind: 'task', id: 'x' }));
      expect(wrongKind.code).toBe('INVALID_MESSAGE');

      const asAgent = await threadError(encodeJson({ ...userMessage('I am an agent'), role: 'agent' }));
      expect(asAgent.code).toBe('INVALID_MESSAGE');
      expect(asAgent.message).toContain('role "user"');

      const stored = await runTroupeJson<ThreadRecordJson>(['thread', threadId, ...natsArgs, '--json'], cliEnv);
      expect(stored.record.task.history.map((m) => textOf(m))).toEqual([
        'Write about herons',
        'Write about herons',
        facts('Write about herons'),
        `Here is your piece. ${facts('Write about herons')}`,
      ]);
      expect(stored.record.task.status.state).toBe('input-required');

      const next = await send('Write about storks', { threadId });
      expect(next.error).toBeUndefined();
      expect(next.text).toBe(`Here is your piece. ${facts('Write about storks')}`);
      const after = await storedThread(threadId, 8);
      expect(after.record.task.history.map((m) => textOf(m))).toEqual([
        ...stored.record.task.history.map((m) => textOf(m)),
        'Write about storks',
        'Write about storks',
        facts('Write about storks'),
        `Here is your piece. ${facts('Write about storks')}`,
      ]);
    });

    it('a user message whose client-routing recipient names an unknown agent gets a typed or routed error', async () => {
      const outcome = await send('Write about nobody', { threadId, metadata: addressedTo('nobody') }).then(
        (r) => ({ code: r.error?.code ?? 'none', route: r.route.map((s) => `${s.from}->${s.to}`).join(' '), text: r.text }),
        (e: unknown) => ({ code: e instanceof TroupeError ? e.code : String(e), route: '', text: '' }),
      );
      // Whatever happened, the thread keeps its history and keeps answering.
      const stored = await storedThread(threadId, 8);
      expect(textOf(stored.record.task.history[0])).toBe('Write about herons');
      const next = await send('Is it over?', { threadId });
      expect(next.text).toBe(`Checked with researcher: ${facts('Is it over?')}`);
      // A recipient that is not a live agent is refused (a typo must not reach the entry agent).
      expect(outcome.code, JSON.stringify(outcome)).toMatch(/^(INVALID_RECIPIENT|AGENT_NOT_FOUND)$/);
    });
  });

  it('`troupe ps --json` lists the node, every agent process and the live threads; `troupe inspect` shows a thread', async () => {
    const ps = await runTroupeJson<PsJson>(['ps', ...natsArgs, '--json', '--window', '700'], cliEnv);
    const kinds = (kind: ActorInfo['kind']) => ps.actors.filter((a) => a.kind === kind);
    expect(kinds('node')).toHaveLength(1);
    const nodeId = kinds('node')[0]!.id;
    const reg = kinds('registry')[0];
    expect(reg?.node).toBe(nodeId);
    expect(reg?.detail?.agents).toEqual(expect.arrayContaining(['triage×1', 'researcher×1', 'writer×1', 'echo×2', ...(HAS_PYTHON_AGENT ? ['pyecho×1'] : [])]));
    // Agents answer from their own processes (their own `node` names), not from the node.
    const agents = kinds('agent');
    const agentIds = agents.map((a) => a.id).sort();
    expect(agentIds).toEqual(['echo', 'echo', ...(HAS_PYTHON_AGENT ? ['pyecho'] : []), 'researcher', 'triage', 'writer'].sort());
    expect(agents.every((a) => a.node !== nodeId)).toBe(true);
    expect(new Set(agents.filter((a) => a.id === 'echo').map((a) => a.node)).size).toBe(2);
    // Every thread this suite started is live on the node.
    const live = new Set(kinds('thread').map((t) => t.id));
    for (const id of threads) expect(live.has(id), id).toBe(true);
    expect(ps.live).toBe(kinds('thread').length);
    expect(kinds('thread').every((t) => t.node === nodeId)).toBe(true);

    const threadId = threads[0]!;
    const found = await runTroupeJson<InspectJson>(['inspect', threadId, ...natsArgs, '--json'], cliEnv);
    expect(found.found).toBe(true);
    expect(found.node).toBe(nodeId);
    expect(found.actor).toMatchObject({ kind: 'thread', id: threadId, state: 'input-required' });
    expect(found.value).toBe('input-required');
    expect(found.context.threadId).toBe(threadId);
    expect(found.context.turns).toBe(1);
    expect(found.context.history).toHaveLength(4);
    // The team module's settings reached the node.
    expect(found.context.config).toMatchObject({ entryAgent: 'triage', maxHops: MAX_HOPS, agentTimeoutMs: AGENT_TIMEOUT_MS });
    expect(found.events.length).toBeGreaterThan(0);

    const missing = await runTroupeJson<{ found: boolean }>(['inspect', 't-no-such-thread', ...natsArgs, '--json'], cliEnv, { expectCode: 1 });
    expect(missing.found).toBe(false);
  });

  it(
    'an agent process killed with SIGKILL: calls to it end with AGENT_NOT_FOUND (no hang), and it leaves the registry once its ttl passes',
    async () => {
      expect((await registry()).writer).toBe(1);
      const exit = await writer.kill('SIGKILL');
      expect(exit.signal).toBe('SIGKILL');
      const killedAt = Date.now();

      // Still in the registry (no goodbye was said), but nobody serves the inbox: a clear error, no hang.
      const res = await send('Write about ghosts');
      expect(route(res)).toEqual([
        ['user', 'triage', 0],
        ['triage', 'researcher', 1],
        ['researcher', 'writer', 2],
      ]);
      expect(['AGENT_NOT_FOUND', 'AGENT_TIMEOUT']).toContain(res.error?.code);
      expect(res.text).toBe(facts('Write about ghosts'));
      expect(res.final.status.message?.metadata?.['troupe/agent']).toBe('researcher');

      // The process no longer answers `ps`; the registry forgets it once its ttl passes.
      const ps = (await client.ps(300)).flatMap((r) => r.actors);
      expect(ps.filter((a) => a.kind === 'agent' && a.id === 'writer')).toHaveLength(0);
      await waitUntil(async () => ((await registry()).writer === undefined ? true : undefined), 'writer to leave the registry', REGISTRY_TTL_MS + 5_000, 250);
      console.log(`[e2e] the killed writer left the registry ${Date.now() - killedAt} ms after the kill (ttl ${REGISTRY_TTL_MS} ms)`);

      // Now researcher names an agent that is not live: INVALID_RECIPIENT, with its answer.
      const after = await send('Write about ghosts');
      expect(route(after)).toEqual([
        ['user', 'triage', 0],
        ['triage', 'researcher', 1],
      ]);
      expect(after.error?.code).toBe('INVALID_RECIPIENT');
      expect(after.text).toBe(facts('Write about ghosts'));
    },
    REGISTRY_TTL_MS + 25_000,
  );
});
