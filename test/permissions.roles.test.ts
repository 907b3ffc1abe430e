/**
 * The roles of src/security/roles.ts, enforced by a real nats-server in operator mode: every role against
 * every subject class, publish and subscribe, allowed or denied. The expected table below is written out
 * by hand from the wire table (CONTEXT.md), not derived from roles.ts, so widening a role fails here.
 * Also: agents may stream many replies into a request they received, but only within the response limits
 * (max messages, ttl), and never anywhere else.
 */
import { join } from 'node:path';
import { credsAuthenticator, connect, type NatsConnection } from '@nats-io/transport-node';
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rolePermissions, type Role } from '../src/security/roles.js';
import { startSecureNatsServer, type SecureNatsServerHandle } from './helpers/nats-server.js';
import { mintCreds, Observer, Prober, ViolationLog, type Outcome } from './helpers/permissions.js';
import { waitUntil } from './helpers/wait.js';

const T = 'troupe.demo';
/**
 * The user each role is probed as: agent `echo`, client principal `cli`, the operator `operator`. The
 * gateway role has the client's rules on its own name (roles.ts); test/gateway-creds.nats.test.ts probes it.
 */
const AS: Record<Exclude<Role, 'gateway'>, string> = { node: 'node', agent: 'echo', client: 'cli', operator: 'operator' };

interface Row {
  what: string;
  pub?: string;
  sub?: { subject: string; literal: string };
  /** Roles that may publish / subscribe; every other role must be refused. */
  pubBy?: Role[];
  subBy?: Role[];
}

// Own = echo (agent), cli (client), operator (operator). Other = writer (agent), bob (client).
const TABLE: Row[] = [
  {
    what: 'own agent inbox',
    pub: `${T}.agent.echo`,
    pubBy: ['node'],
    sub: { subject: `${T}.agent.echo`, literal: `${T}.agent.echo` },
    subBy: ['node', 'agent'],
  },
  {
    what: "another agent's inbox",
    pub: `${T}.agent.writer`,
    pubBy: ['node'],
    sub: { subject: `${T}.agent.writer`, literal: `${T}.agent.writer` },
    subBy: ['node'],
  },
  { what: 'every agent inbox', sub: { subject: `${T}.agent.*`, literal: `${T}.agent.writer` }, subBy: ['node'] },
  { what: 'hello', pub: `${T}.hello`, pubBy: ['node', 'operator'], sub: { subject: `${T}.hello`, literal: `${T}.hello` }, subBy: ['node', 'agent'] },
  { what: 'the shared _INBOX', pub: '_INBOX.n1.1', pubBy: ['node'], sub: { subject: '_INBOX.>', literal: '_INBOX.n1.1' }, subBy: ['node'] },
  {
    what: "client cli's inbox",
    pub: '_INBOX_cli.a.1',
    pubBy: ['node'],
    sub: { subject: '_INBOX_cli.>', literal: '_INBOX_cli.a.1' },
    subBy: ['node', 'client'],
  },
  { what: "another principal's inbox", pub: '_INBOX_bob.a.1', pubBy: ['node'], sub: { subject: '_INBOX_bob.>', literal: '_INBOX_bob.a.1' }, subBy: ['node'] },
  {
    what: "the operator's inbox",
    pub: '_INBOX_operator.a.1',
    pubBy: ['node'],
    sub: { subject: '_INBOX_operator.>', literal: '_INBOX_operator.a.1' },
    subBy: ['node', 'operator'],
  },
  { what: 'ctl', pub: `${T}.ctl.ps`, pubBy: ['node', 'operator'], sub: { subject: `${T}.ctl.>`, literal: `${T}.ctl.thread` }, subBy: ['node'] },
  {
    what: 'between nodes',
    pub: `${T}.nodes.answered.node-1`,
    pubBy: ['node'],
    sub: { subject: `${T}.nodes.>`, literal: `${T}.nodes.answered.node-1` },
    subBy: ['node'],
  },
  // A forged marker would make a node withhold an answer: only nodes may publish or read them.
  {
    what: 'published-answer markers',
    pub: `${T}.nodes.published.T1`,
    pubBy: ['node'],
    sub: { subject: `${T}.nodes.published.*`, literal: `${T}.nodes.published.T1` },
    subBy: ['node'],
  },
  {
    what: 'own registry entry',
    pub: `${T}.registry.echo`,
    pubBy: ['node', 'agent'],
    sub: { subject: `${T}.registry.echo`, literal: `${T}.registry.echo` },
    subBy: ['node'],
  },
  {
    what: "another agent's registry entry",
    pub: `${T}.registry.writer`,
    pubBy: ['node'],
    sub: { subject: `${T}.registry.*`, literal: `${T}.registry.writer` },
    subBy: ['node'],
  },
  {
    what: 'own thread input',
    pub: `${T}.in.cli.T1`,
    pubBy: ['node', 'client'],
    sub: { subject: `${T}.in.cli.*.*`, literal: `${T}.in.cli.T1` },
    subBy: ['node'],
  },
  {
    what: "another principal's thread input",
    pub: `${T}.in.bob.T1`,
    pubBy: ['node'],
    sub: { subject: `${T}.in.>`, literal: `${T}.in.bob.T1` },
    subBy: ['node'],
  },
  // Allowed for cli, but the server maps it back onto T1's own partition (security.creds.test.ts).
  { what: 'own partition subject', pub: `${T}.in.cli.T1.3`, pubBy: ['node', 'client'] },
  {
    what: "another principal's partition subject",
    pub: `${T}.in.bob.T1.3`,
    pubBy: ['node'],
    sub: { subject: `${T}.in.*.*.*`, literal: `${T}.in.bob.T1.0` },
    subBy: ['node'],
  },
  {
    what: 'own thread events',
    pub: `${T}.out.cli.T1`,
    pubBy: ['node'],
    sub: { subject: `${T}.out.cli.*`, literal: `${T}.out.cli.T1` },
    subBy: ['node', 'client'],
  },
  {
    what: "another principal's thread events",
    pub: `${T}.out.bob.T1`,
    pubBy: ['node'],
    sub: { subject: `${T}.out.bob.*`, literal: `${T}.out.bob.T1` },
    subBy: ['node'],
  },
  { what: 'every thread event', sub: { subject: `${T}.out.>`, literal: `${T}.out.bob.T2` }, subBy: ['node'] },
  {
    what: 'own requests',
    pub: `${T}.req.cli.task`,
    pubBy: ['node', 'client'],
    sub: { subject: `${T}.req.cli.*`, literal: `${T}.req.cli.task` },
    subBy: ['node'],
  },
  {
    what: "another principal's requests",
    pub: `${T}.req.bob.cancel`,
    pubBy: ['node'],
    sub: { subject: `${T}.req.>`, literal: `${T}.req.bob.cancel` },
    subBy: ['node'],
  },
  {
    what: 'own chunk subjects',
    pub: `${T}.chunks.echo.caller-1.c1`,
    pubBy: ['node', 'agent'],
    sub: { subject: `${T}.chunks.*.caller-1.*`, literal: `${T}.chunks.echo.caller-1.c1` },
    subBy: ['node'],
  },
  {
    what: "another agent's chunk subjects",
    pub: `${T}.chunks.writer.caller-1.c1`,
    pubBy: ['node'],
    sub: { subject: `${T}.chunks.>`, literal: `${T}.chunks.writer.caller-1.c1` },
    subBy: ['node'],
  },
  {
    what: 'inspection',
    pub: `${T}.inspect.node-1`,
    pubBy: ['node'],
    sub: { subject: `${T}.inspect.>`, literal: `${T}.inspect.node-1` },
    subBy: ['node', 'operator'],
  },
  {
    what: 'own agent inspection',
    pub: `${T}.inspect.agent.echo.state`,
    pubBy: ['node', 'agent'],
    sub: { subject: `${T}.inspect.agent.echo.>`, literal: `${T}.inspect.agent.echo.state` },
    subBy: ['node', 'operator'],
  },
  { what: "another agent's inspection", pub: `${T}.inspect.agent.writer.state`, pubBy: ['node'] },
  { what: 'JetStream API', pub: '$JS.API.INFO', pubBy: ['node'], sub: { subject: '$JS.API.>', literal: '$JS.API.STREAM.NAMES' }, subBy: ['node'] },
  { what: 'KV', pub: '$KV.troupe_threads.T1', pubBy: ['node'], sub: { subject: '$KV.>', literal: '$KV.troupe_threads.T1' }, subBy: ['node'] },
  { what: "the tenant's subjects", pub: `${T}.anything`, pubBy: ['node'], sub: { subject: `${T}.>`, literal: `${T}.agent.writer` }, subBy: ['node'] },
  { what: 'everything', sub: { subject: '>', literal: 'elsewhere' }, subBy: ['node'] },
];

type Results = Record<string, Outcome>;

function expected(role: Role): Results {
  const out: Results = {};
  for (const row of TABLE) {
    if (row.pub) out[`pub ${row.pub} (${row.what})`] = row.pubBy?.includes(role) ? 'allowed' : 'denied';
    if (row.sub) out[`sub ${row.sub.subject} (${row.what})`] = row.subBy?.includes(role) ? 'allowed' : 'denied';
  }
  return out;
}

async function probeAll(prober: Prober, publisher: NatsConnection): Promise<Results> {
  const out: Results = {};
  for (const row of TABLE) {
    if (row.pub) out[`pub ${row.pub} (${row.what})`] = await prober.publish(row.pub);
    if (row.sub) out[`sub ${row.sub.subject} (${row.what})`] = await prober.subscribe(row.sub.subject, row.sub.literal, publisher);
  }
  return out;
}

describe('the roles table', () => {
  it('follows the one id rule (protocol/ids.ts) and needs explicit agent response limits', () => {
    expect(() => rolePermissions('agent', 'demo', 'a'.repeat(101))).toThrow(/limit is 100/);
    expect(() => rolePermissions('client', 'demo', 'x.y')).toThrow(/A-Z, a-z, 0-9, _ and -/);
    expect(() => rolePermissions('node', 't'.repeat(33), 'node')).toThrow(/tenant/);
    // 0 in a JWT means the server default (one reply in two minutes), not unlimited.
    expect(() => rolePermissions('agent', 'demo', 'echo', { responses: { max: 0, ttlMs: 1_000 } })).toThrow(/max >= 1/);
    expect(rolePermissions('agent', 'demo', 'echo').resp).toEqual({ max: 1, ttlMs: 600_000 });
    expect(rolePermissions('client', 'demo', 'cli').resp).toBeUndefined();
  });
});

describe('roles enforced by nats-server (operator mode)', () => {
  let nats: SecureNatsServerHandle;
  let observer: Observer;
  let publisher: NatsConnection;
  const open: NatsConnection[] = [];
  const connectAs = async (name: string, opts = {}) => {
    const nc = await nats.connect('demo', name, opts);
    open.push(nc);
    return nc;
  };

  beforeAll(async () => {
    nats = await startSecureNatsServer({ agents: ['echo', 'writer'], clients: ['cli', 'bob'] });
    observer = new Observer(await connectAs('node'));
    await observer.ready();
    publisher = await connectAs('node');
  });

  afterAll(async () => {
    await Promise.all(open.map((nc) => nc.close().catch(() => undefined)));
    await nats?.stop();
  });

  for (const role of ['node', 'agent', 'client', 'operator'] as const) {
    it(`${role} (${AS[role]}): allowed exactly what the wire table gives it, refused everything else`, async () => {
      const prober = new Prober(await connectAs(AS[role]), observer);
      expect(await probeAll(prober, publisher)).toEqual(expected(role));
    });
  }

  it('the probe notices a widened role: a client that may also subscribe to _INBOX.> fails the client table', async () => {
    const widened = rolePermissions('client', 'demo', 'cli');
    widened.sub.allow.push('_INBOX.>');
    const file = await mintCreds(nats.dir, 'demo', 'cli', widened, join(nats.dir, 'widened.creds'));
    const nc = await connect({ servers: nats.url, authenticator: credsAuthenticator(readFileSync(file)), inboxPrefix: '_INBOX_cli' });
    open.push(nc);
    const results = await probeAll(new Prober(nc, observer), publisher);
    const differences = Object.keys(results).filter((k) => results[k] !== expected('client')[k]);
    expect(differences).toEqual(['sub _INBOX.> (the shared _INBOX)']);
  });

  it("a user JWT without permissions of its own gets the account's default: nothing", async () => {
    const file = await mintCreds(nats.dir, 'demo', 'bare', undefined, join(nats.dir, 'bare.creds'));
    const nc = await connect({ servers: nats.url, authenticator: credsAuthenticator(readFileSync(file)) });
    open.push(nc);
    const prober = new Prober(nc, observer);
    expect(await prober.publish(`${T}.agent.echo`)).toBe('denied');
    expect(await prober.publish('_INBOX.x')).toBe('denied');
    expect(await prober.subscribe('>', `${T}.hello`, publisher)).toBe('denied');
    expect(await prober.subscribe('_INBOX.>', '_INBOX.y', publisher)).toBe('denied');
  });

  it('the system user may send server requests and nothing into tenant subjects', async () => {
    const nc = await connect({ servers: nats.url, authenticator: credsAuthenticator(readFileSync(nats.store.systemCredsFile)) });
    open.push(nc);
    const reply = await nc.request('$SYS.REQ.SERVER.PING', '', { timeout: 5_000 });
    expect(JSON.parse(new TextDecoder().decode(reply.data))).toHaveProperty('server');
    const violations = new ViolationLog(nc);
    nc.publish(`${T}.agent.echo`, 'x');
    await nc.flush();
    await waitUntil(() => violations.publish.length > 0, 'the violation for a system-user publish');
    expect(violations.publish[0]?.subject).toBe(`${T}.agent.echo`);
  });

  describe('agent replies', () => {
    /** The node sends a request to the agent's inbox; the agent gets it with the node's reply subject. */
    async function requestTo(agent: NatsConnection, agentId: string, replySubject: string): Promise<string> {
      const got = new Promise<string>((resolve) => {
        const sub = agent.subscribe(`${T}.agent.${agentId}`, {
          max: 1,
          callback: (_err, m) => {
            resolve(m.reply ?? '');
            sub.unsubscribe();
          },
        });
      });
      await agent.flush();
      publisher.publish(`${T}.agent.${agentId}`, 'request', { reply: replySubject });
      return got;
    }

    function collect(nc: NatsConnection, subject: string): string[] {
      const got: string[] = [];
      nc.subscribe(subject, {
        callback: (_e, m) => {
          got.push(new TextDecoder().decode(m.data));
        },
      });
      return got;
    }

    it('answers a request it received once, streams 500 chunks to its own chunk subject, and nothing into any other inbox', async () => {
      const agent = await connectAs('echo');
      const violations = new ViolationLog(agent);
      const answers = collect(publisher, '_INBOX.stream-500.*');
      const chunks = collect(publisher, `${T}.chunks.echo.caller-1.*`);
      const other = collect(publisher, '_INBOX.other.*');
      await publisher.flush();
      const reply = await requestTo(agent, 'echo', '_INBOX.stream-500.1');
      expect(reply).toBe('_INBOX.stream-500.1');
      for (let i = 0; i < 500; i++) agent.publish(`${T}.chunks.echo.caller-1.c1`, String(i));
      agent.publish(reply, 'the answer');
      await agent.flush();
      await waitUntil(() => chunks.length === 500 && answers.length === 1, '500 chunks and the answer at the node');
      expect(chunks).toEqual(Array.from({ length: 500 }, (_, i) => String(i)));
      expect(answers).toEqual(['the answer']);
      expect(violations.publish).toHaveLength(0);

      // A second answer to the same request is refused: one reply per request.
      agent.publish(reply, 'again');
      await agent.flush();
      await waitUntil(() => violations.publish.length === 1, 'the violation for a second reply');
      expect(violations.publish[0]?.subject).toBe(reply);

      agent.publish('_INBOX.other.1', 'forged');
      await agent.flush();
      await waitUntil(() => violations.publish.length === 2, 'the violation for an inbox the agent got no request from');
      expect(violations.publish[1]?.subject).toBe('_INBOX.other.1');
      await publisher.flush();
      expect(other).toEqual([]);
      expect(answers).toEqual(['the answer']);
    });

    it('refuses the reply after max messages', async () => {
      await nats.addUser({ tenant: 'demo', role: 'agent', name: 'capped', responses: { max: 3, ttlMs: 60_000 } });
      const agent = await connectAs('capped');
      const violations = new ViolationLog(agent);
      const got = collect(publisher, '_INBOX.capped.*');
      await publisher.flush();
      const reply = await requestTo(agent, 'capped', '_INBOX.capped.1');
      for (let i = 1; i <= 4; i++) agent.publish(reply, String(i));
      await agent.flush();
      await waitUntil(() => violations.publish.length === 1, 'the violation for the 4th reply');
      await publisher.flush();
      expect(got).toEqual(['1', '2', '3']);
      expect(violations.publish[0]?.subject).toBe(reply);
    });

    it('refuses the reply once the ttl has passed', async () => {
      await nats.addUser({ tenant: 'demo', role: 'agent', name: 'brief', responses: { max: 10_000, ttlMs: 300 } });
      const agent = await connectAs('brief');
      const violations = new ViolationLog(agent);
      const got = collect(publisher, '_INBOX.brief.*');
      await publisher.flush();
      const reply = await requestTo(agent, 'brief', '_INBOX.brief.1');
      agent.publish(reply, 'in time');
      await agent.flush();
      await waitUntil(() => got.length === 1, 'the first reply');
      // Keep replying until the server stops taking it: it must, once the ttl is over.
      let sent = 1;
      await waitUntil(
        async () => {
          agent.publish(reply, `late ${sent++}`);
          await agent.flush();
          return violations.publish.length > 0;
        },
        'the reply to be refused after its ttl',
        10_000,
        50,
      );
      const lateSent = sent - 1;
      agent.publish(reply, 'after');
      await agent.flush();
      await waitUntil(() => violations.publish.length >= 2, 'the next late reply to be refused too');
      await publisher.flush();
      expect(got).not.toContain('after');
      expect(got.length).toBeLessThan(1 + lateSent);
    });
  });
});
