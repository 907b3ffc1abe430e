/**
 * One behavioural contract, run against the in-memory transport and against a real nats-server: the
 * embedded mode is only trustworthy if it behaves like the network it stands in for.
 */
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { connectTransport } from '../src/transport/index.js';
import { MemoryBus, MemoryTransport } from '../src/transport/memory.js';
import { NatsTransport } from '../src/transport/nats.js';
import { TransportError, type InboundMessage, type Transport } from '../src/transport/types.js';
import type { HandlerErrorContext } from '../src/transport/memory.js';
import { freePort, natsProcess, startNatsServer, type NatsServerHandle } from './helpers/nats-server.js';
import { cliTestTimeout, ProcessGroup, runTroupe } from './helpers/processes.js';
import { bytes, sleep, text, waitFor } from './helpers/wait.js';

/**
 * How long a test's handler works before it is done (awaiting, as a real handler awaits its I/O), so a
 * drain or a close has handlers still running to wait for.
 */
const HANDLER_WORK_MS = { brief: 1, short: 5, slow: 50 } as const;

interface Backend {
  readonly name: string;
  setup(): Promise<void>;
  teardown(): Promise<void>;
  /** A new "connection"; several of them model several processes. */
  connect(onError?: (err: unknown, ctx: HandlerErrorContext) => void): Promise<Transport>;
}

function memoryBackend(): Backend {
  let bus = new MemoryBus();
  return {
    name: 'memory',
    setup: async () => {
      bus = new MemoryBus();
    },
    teardown: async () => undefined,
    connect: async (onError) => new MemoryTransport({ bus, ...(onError ? { onError } : {}) }),
  };
}

function natsBackend(): Backend {
  let server: NatsServerHandle | undefined;
  return {
    name: 'nats',
    setup: async () => {
      server = await startNatsServer();
    },
    teardown: async () => {
      await server?.stop();
    },
    connect: async (onError) => {
      if (!server) throw new Error('nats-server not started');
      return NatsTransport.connect({ ...server.asNode, name: 'conformance', ...(onError ? { onError } : {}) });
    },
  };
}

async function rejection(p: Promise<unknown>): Promise<unknown> {
  try {
    await p;
  } catch (err) {
    return err;
  }
  throw new Error('expected a rejection');
}

function thrown(fn: () => unknown): unknown {
  try {
    fn();
  } catch (err) {
    return err;
  }
  throw new Error('expected a throw');
}

function expectTransportError(err: unknown, reason: TransportError['reason']): void {
  expect(err).toBeInstanceOf(TransportError);
  expect((err as TransportError).code).toBe('TRANSPORT_ERROR');
  expect((err as TransportError).reason).toBe(reason);
}

describe.each([memoryBackend(), natsBackend()])('Transport conformance: $name', (backend) => {
  const open: Transport[] = [];
  let n = 0;
  /** A subject prefix of its own per test, so a slow delivery from one test cannot satisfy another. */
  let p = '';

  const connect = async (onError?: (err: unknown, ctx: HandlerErrorContext) => void) => {
    const t = await backend.connect(onError);
    open.push(t);
    return t;
  };

  beforeAll(() => backend.setup());
  afterAll(() => backend.teardown());
  beforeEach(() => {
    p = `c${++n}`;
  });
  afterEach(async () => {
    await Promise.all(open.splice(0).map((t) => (t.closed ? undefined : t.close())));
  });

  it('delivers on the exact subject, with data and headers, and nowhere else', async () => {
    const [pub, subT] = [await connect(), await connect()];
    const got: InboundMessage[] = [];
    subT.subscribe(`${p}.orders.new`, (m) => void got.push(m));
    await subT.flush();

    pub.publish(`${p}.orders`, bytes('parent'));
    pub.publish(`${p}.orders.new.x`, bytes('child'));
    pub.publish(`${p}.orders.newer`, bytes('sibling'));
    pub.publish(`${p}.orders.new`, bytes('hit'), { headers: { 'Troupe-Thread': 'th-1', traceparent: '00-abc-01' } });
    await waitFor(() => got.length >= 1, 'the message');
    // Round-trip on both sides so a wrongly routed message would have arrived by now.
    await pub.flush();
    await subT.flush();

    expect(got).toHaveLength(1);
    const [m] = got;
    expect(m?.subject).toBe(`${p}.orders.new`);
    expect(text(m!)).toBe('hit');
    expect(m?.headers).toEqual({ 'Troupe-Thread': 'th-1', traceparent: '00-abc-01' });
    expect(m?.reply).toBeUndefined();
    expect(m?.respond(bytes('nobody asked'))).toBe(false);
  });

  it('matches * to exactly one token and > to one or more trailing tokens', async () => {
    const [pub, subT] = [await connect(), await connect()];
    const star: string[] = [];
    const tail: string[] = [];
    subT.subscribe(`${p}.thread.*.in`, (m) => void star.push(m.subject));
    subT.subscribe(`${p}.thread.>`, (m) => void tail.push(m.subject));
    await subT.flush();

    for (const s of ['thread.t1.in', 'thread.t1.out', 'thread.t1.x.in', 'thread', 'other.t1.in', 'thread.end.in']) {
      pub.publish(`${p}.${s}`, bytes(s));
    }
    // Per-subscription order is preserved, so once the last message arrived every earlier one has.
    await waitFor(() => star.includes(`${p}.thread.end.in`) && tail.includes(`${p}.thread.end.in`), 'the last message');

    expect(star).toEqual([`${p}.thread.t1.in`, `${p}.thread.end.in`]);
    expect(tail).toEqual([`${p}.thread.t1.in`, `${p}.thread.t1.out`, `${p}.thread.t1.x.in`, `${p}.thread.end.in`]);
  });

  it('spreads a queue group over its members, each message once, while a plain subscriber sees all', async () => {
    const [pub, a, b, watcher] = [await connect(), await connect(), await connect(), await connect()];
    const gotA: number[] = [];
    const gotB: number[] = [];
    const all: number[] = [];
    a.subscribe(`${p}.work`, (m) => void gotA.push(Number(text(m))), { queue: 'workers' });
    b.subscribe(`${p}.work`, (m) => void gotB.push(Number(text(m))), { queue: 'workers' });
    watcher.subscribe(`${p}.work`, (m) => void all.push(Number(text(m))));
    await Promise.all([a.flush(), b.flush(), watcher.flush()]);

    const N = 200;
    for (let i = 0; i < N; i++) pub.publish(`${p}.work`, bytes(String(i)));
    await pub.flush();
    await waitFor(() => all.length === N && gotA.length + gotB.length >= N, 'all deliveries');
    await Promise.all([a.flush(), b.flush()]);

    expect(all).toEqual(Array.from({ length: N }, (_, i) => i));
    expect(gotA.length + gotB.length).toBe(N);
    expect(new Set([...gotA, ...gotB]).size).toBe(N);
    expect(gotA.length).toBeGreaterThan(0);
    expect(gotB.length).toBeGreaterThan(0);
  });

  it('round-trips a request and its reply, headers both ways', async () => {
    const [client, server] = [await connect(), await connect()];
    let seen: InboundMessage | undefined;
    server.subscribe(`${p}.svc.upper`, (m) => {
      seen = m;
      m.respond(bytes(text(m).toUpperCase()), { 'Troupe-Sender': 'upper', 'X-Echo': m.headers['Troupe-Hop'] ?? 'missing' });
    });
    await server.flush();

    const reply = await client.request(`${p}.svc.upper`, bytes('hello'), {
      timeoutMs: 2_000,
      headers: { 'Troupe-Hop': '3', 'Nats-Msg-Id': 'm-1' },
    });

    expect(text(reply)).toBe('HELLO');
    expect(reply.headers).toEqual({ 'Troupe-Sender': 'upper', 'X-Echo': '3' });
    expect(seen?.headers).toEqual({ 'Troupe-Hop': '3', 'Nats-Msg-Id': 'm-1' });
    expect(seen?.reply).toMatch(/^_INBOX\./);
  });

  it('rejects a request nobody answers with TIMEOUT after the timeout', async () => {
    const [client, server] = [await connect(), await connect()];
    server.subscribe(`${p}.svc.silent`, () => undefined);
    await server.flush();

    // TIMEOUT, not NO_RESPONDERS or CLOSED: the request reached a subscriber and was given up by the clock.
    const err = await rejection(client.request(`${p}.svc.silent`, bytes('?'), { timeoutMs: 150 }));
    expectTransportError(err, 'TIMEOUT');
  });

  it('rejects a request with no subscriber at all with NO_RESPONDERS, not by waiting for the timeout', async () => {
    const client = await connect();
    // A timeout far beyond the test's own: only an immediate NO_RESPONDERS can settle it in time.
    const err = await rejection(client.request(`${p}.svc.nobody`, bytes('?'), { timeoutMs: 120_000 }));
    expectTransportError(err, 'NO_RESPONDERS');
  });

  it('gives each of many requests in flight its own reply, whatever order the replies come in', async () => {
    const [client, server] = [await connect(), await connect()];
    const held: InboundMessage[] = [];
    server.subscribe(`${p}.svc.later`, (m) => {
      held.push(m);
      // Answered all at once, last asked first.
      if (held.length === 50) for (const q of held.slice().reverse()) q.respond(bytes(`re:${text(q)}`));
    });
    await server.flush();
    const replies = await Promise.all(Array.from({ length: 50 }, (_, i) => client.request(`${p}.svc.later`, bytes(String(i)), { timeoutMs: 5_000 })));
    expect(replies.map((r) => text(r))).toEqual(Array.from({ length: 50 }, (_, i) => `re:${i}`));
  });

  it('fails a request still waiting when the transport closes with CLOSED, not by its timeout', async () => {
    const [client, server] = [await connect(), await connect()];
    server.subscribe(`${p}.svc.silent`, () => undefined);
    await server.flush();
    // A timeout far beyond the test's own: only the close can settle it in time.
    const waiting = rejection(client.request(`${p}.svc.silent`, bytes('?'), { timeoutMs: 120_000 }));
    await client.flush();
    await client.close();
    expectTransportError(await waiting, 'CLOSED');
  });

  it('gathers replies from several responders with requestMany', async () => {
    const client = await connect();
    for (const id of ['r1', 'r2', 'r3']) {
      const t = await connect();
      t.subscribe(`${p}.ctl.ps`, (m) => void m.respond(bytes(id), { 'Troupe-Sender': id }));
      await t.flush();
    }

    const replies = await client.requestMany(`${p}.ctl.ps`, bytes('ps'), { timeoutMs: 300 });
    expect(replies.map(text).sort()).toEqual(['r1', 'r2', 'r3']);
    expect(replies.map((r) => r.headers['Troupe-Sender']).sort()).toEqual(['r1', 'r2', 'r3']);

    // maxReplies ends the gathering early rather than at the timeout (far beyond the test's own).
    const two = await client.requestMany(`${p}.ctl.ps`, bytes('ps'), { timeoutMs: 120_000, maxReplies: 2 });
    expect(two).toHaveLength(2);

    // Nobody there: an empty answer, quickly.
    const none = await client.requestMany(`${p}.ctl.nobody`, bytes('ps'), { timeoutMs: 2_000 });
    expect(none).toEqual([]);
  });

  it('subscription drain delivers what was in flight and waits for running async handlers', async () => {
    const [pub, subT] = [await connect(), await connect()];
    const events: string[] = [];
    let started = 0;
    let finished = 0;
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const sub = subT.subscribe(`${p}.jobs`, async (m) => {
      started++;
      // The first handler stays mid-way until the test releases it, after drain has begun.
      if (text(m) === '0') await gate;
      else await sleep(HANDLER_WORK_MS.short);
      finished++;
      if (text(m) === '0') events.push('first handler done');
    });
    await subT.flush();

    const N = 20;
    for (let i = 0; i < N; i++) pub.publish(`${p}.jobs`, bytes(String(i)));
    await pub.flush();
    await waitFor(() => started >= 1, 'the first handler to start');

    const drained = sub.drain().then(() => events.push('drained'));
    // Every other message in flight is delivered and handled: only the gated handler is left, and the
    // drain has not ended for it.
    await waitFor(() => started === N && finished === N - 1, 'every message but the gated one handled');
    expect(events).toEqual([]);
    events.push('released');
    release();
    await drained;

    expect(events).toEqual(['released', 'first handler done', 'drained']);
    expect(started).toBe(N);
    expect(finished).toBe(N);

    // Drained means no new deliveries: a marker published after 'late', to a subscription of the same
    // connection, arrives after 'late' would have (one publisher, one subscriber connection: in order).
    const markers: string[] = [];
    subT.subscribe(`${p}.jobs-marker`, (m) => void markers.push(text(m)));
    await subT.flush();
    pub.publish(`${p}.jobs`, bytes('late'));
    pub.publish(`${p}.jobs-marker`, bytes('after late'));
    await pub.flush();
    await waitFor(() => markers.length === 1, 'the marker after the late message');
    expect(started).toBe(N);
  });

  it('drain right after publishing loses none of the messages already published', async () => {
    const [pub, subT] = [await connect(), await connect()];
    const got: number[] = [];
    const sub = subT.subscribe(`${p}.burst`, async (m) => {
      await sleep(HANDLER_WORK_MS.brief);
      got.push(Number(text(m)));
    });
    await subT.flush();

    const N = 100;
    for (let i = 0; i < N; i++) pub.publish(`${p}.burst`, bytes(String(i)));
    await pub.flush();
    // No waiting for deliveries: whatever is still queued towards the subscriber must be handled.
    await sub.drain();
    expect(got.sort((x, y) => x - y)).toEqual(Array.from({ length: N }, (_, i) => i));
  });

  it('never runs a handler inside publish', async () => {
    const t = await connect();
    const got: string[] = [];
    t.subscribe(`${p}.self`, (m) => void got.push(text(m)));
    await t.flush();
    t.publish(`${p}.self`, bytes('a'));
    // A handler run synchronously would see state the publisher has not finished changing.
    expect(got).toEqual([]);
    await waitFor(() => got.length === 1, 'the delivery');
  });

  it('transport drain finishes running handlers, then closes', async () => {
    const [client, server] = [await connect(), await connect()];
    let started = false;
    let handled = false;
    server.subscribe(`${p}.slow`, async (m) => {
      started = true;
      await sleep(HANDLER_WORK_MS.slow);
      // Answering while the transport drains must still work.
      m.respond(bytes('done'));
      handled = true;
    });
    await server.flush();

    const reply = client.request(`${p}.slow`, bytes('go'), { timeoutMs: 2_000 });
    await waitFor(() => started, 'the handler to start');
    await server.drain();
    expect(handled).toBe(true);
    expect(server.closed).toBe(true);
    expect(text(await reply)).toBe('done');
    expectTransportError(
      thrown(() => server.publish(`${p}.slow`, bytes('x'))),
      'CLOSED',
    );
  });

  it('after close, publish, subscribe and request fail with CLOSED', async () => {
    const t = await connect();
    await t.close();
    expect(t.closed).toBe(true);
    expectTransportError(
      thrown(() => t.publish(`${p}.x`, bytes('x'))),
      'CLOSED',
    );
    expectTransportError(
      thrown(() => t.subscribe(`${p}.x`, () => undefined)),
      'CLOSED',
    );
    expectTransportError(await rejection(t.request(`${p}.x`, bytes('x'), { timeoutMs: 100 })), 'CLOSED');
  });

  it('keeps delivering after a handler throws or rejects, and reports both', async () => {
    const errorsSeen: { err: unknown; ctx: HandlerErrorContext }[] = [];
    const pub = await connect();
    const subT = await connect((err, ctx) => errorsSeen.push({ err, ctx }));
    const got: string[] = [];
    subT.subscribe(`${p}.fragile`, async (m) => {
      const body = text(m);
      got.push(body);
      if (body === 'reject') throw new Error('async boom');
    });
    subT.subscribe(`${p}.fragile`, (m) => {
      if (text(m) === 'throw') throw new Error('sync boom');
    });
    await subT.flush();

    for (const body of ['throw', 'reject', 'after']) pub.publish(`${p}.fragile`, bytes(body));
    await waitFor(() => got.includes('after') && errorsSeen.length >= 2, 'the later message and both errors');

    expect(got).toEqual(['throw', 'reject', 'after']);
    expect(errorsSeen.map((e) => (e.err as Error).message).sort()).toEqual(['async boom', 'sync boom']);
    expect(errorsSeen.every((e) => e.ctx.subject === `${p}.fragile`)).toBe(true);
    expect(subT.closed).toBe(false);
  });

  it('unsubscribe stops delivery at once', async () => {
    const [pub, subT] = [await connect(), await connect()];
    const got: string[] = [];
    const other: string[] = [];
    const sub = subT.subscribe(`${p}.u`, (m) => void got.push(text(m)));
    subT.subscribe(`${p}.u`, (m) => void other.push(text(m)));
    await subT.flush();
    pub.publish(`${p}.u`, bytes('1'));
    await waitFor(() => got.length === 1, 'the first message');
    sub.unsubscribe();
    await subT.flush();
    pub.publish(`${p}.u`, bytes('2'));
    await waitFor(() => other.length === 2, 'the second message on the other subscription');
    expect(got).toEqual(['1']);
  });
});

describe('requests on NATS', () => {
  let server: NatsServerHandle;
  // The troupe processes a test starts: stopped after it, also when its readiness wait or an assertion failed.
  const procs = new ProcessGroup();
  beforeAll(async () => {
    server = await startNatsServer();
  });
  afterEach(() => procs.stopAll());
  afterAll(() => server?.stop());

  it('a request the server refuses (no publish permission) fails at once with its permission violation', async () => {
    // The client role may publish into its own threads only, never to an agent's inbox.
    const client = await NatsTransport.connect({ ...server.as('client'), name: 'refused', onError: () => undefined });
    try {
      const err = await rejection(client.request('troupe.demo.agent.echo', bytes('?'), { timeoutMs: 120_000 }));
      expect((err as Error).message).toMatch(/permission/i);
      // Still usable: the next request to a subject it may use gets its answer.
      const node = await NatsTransport.connect({ ...server.asNode, name: 'ctl' });
      node.subscribe('troupe.demo.req.client.ps', (m) => {
        m.respond(bytes('pong'));
      });
      await node.flush();
      expect(text(await client.request('troupe.demo.req.client.ps', bytes('?'), { timeoutMs: 5_000 }))).toBe('pong');
      await node.close();
    } finally {
      await client.close();
    }
  });

  it(
    "troupe up with acme's credentials and no --tenant runs as tenant acme (the tenant the credentials name)",
    async () => {
      const node = await procs.spawnTroupe(
        ['up', '--nats', server.url, '--creds', server.credsFile('node', 'acme'), '--no-agents', '--log-level', 'warn'],
        {},
        { name: 'acme node' },
      );
      expect(node.stderr).toMatch(/up on .*\(tenant acme, 8 partitions\)/);
    },
    cliTestTimeout(2),
  );

  it("troupe up with acme's credentials and --tenant demo refuses at once: the tenants disagree (exit 2)", async () => {
    const res = await runTroupe(['up', '--nats', server.url, '--creds', server.credsFile('node', 'acme'), '--tenant', 'demo'], {}, { timeoutMs: 30_000 });
    expect(res.code).toBe(2);
    expect(res.stderr).toMatch(/--tenant \(or TROUPE_TENANT\) is "demo" but the credentials .* are for tenant "acme": leave out --tenant/);
  });

  it('a user that may not receive on the default inbox gets its replies below its own prefix', async () => {
    const node = await NatsTransport.connect({ ...server.asNode, name: 'ctl' });
    let replyTo = '';
    node.subscribe('troupe.demo.req.client.ps', (m) => {
      replyTo = m.reply ?? '';
      m.respond(bytes('pong'));
    });
    await node.flush();
    const client = await NatsTransport.connect({ ...server.as('client'), name: 'prefixed' });
    try {
      expect(text(await client.request('troupe.demo.req.client.ps', bytes('?'), { timeoutMs: 5_000 }))).toBe('pong');
      expect(replyTo.startsWith(`${server.as('client').inboxPrefix}.`)).toBe(true);
    } finally {
      await client.close();
      await node.close();
    }
  });
});

describe('connecting', () => {
  it('uses the memory transport without a NATS URL', async () => {
    const t = await connectTransport({});
    expect(t).toBeInstanceOf(MemoryTransport);
    expect(t.name).toBe('memory');
    await t.close();
  });

  it('troupe up on a server without JetStream exits 1 at once (no waiting for a leader) and says how to enable it', async () => {
    const port = await freePort();
    const plain = natsProcess(['-a', '127.0.0.1', '-p', String(port)], port);
    await plain.launch();
    try {
      const res = await runTroupe(['up', '--nats', `nats://127.0.0.1:${port}`], {}, { timeoutMs: 30_000 });
      expect(res.code).toBe(1);
      expect(res.stderr).toMatch(/jetstream is not enabled \(no JetStream server answered: run nats-server with JetStream, `-js`/);
    } finally {
      await plain.shutdown();
    }
  });

  it('turns "nothing listening" into CONNECT with the command that fixes it', async () => {
    const url = `nats://127.0.0.1:${await freePort()}`;
    const err = await rejection(connectTransport({ natsUrl: url }));
    expectTransportError(err, 'CONNECT');
    expect((err as Error).message).toContain(`no NATS at ${url}: start one with \`troupe creds init && nats-server -c .troupe/server.conf\``);
    expect((err as Error).cause).toBeInstanceOf(Error);
  });
});
