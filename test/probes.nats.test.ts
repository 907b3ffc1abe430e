/**
 * Health probes beside the metrics (`--metrics-port`: GET /healthz, GET /readyz) of a node and of an agent
 * process, over real HTTP, on a real nats-server that is frozen (SIGSTOP: the connection stays open, nothing
 * is answered), stopped and started again: what an orchestrator's liveness and readiness probes would see.
 * And `troupe status`, the mesh seen from outside by an operator, with its node up and gone.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Readiness, natsCheck } from '../src/observability/probes.js';
import { TroupeClient } from '../src/sdk/client.js';
import { meshStatus } from '../src/sdk/status.js';
import { NatsTransport } from '../src/transport/nats.js';
import { freePort, startNatsServer, type NatsServerHandle } from './helpers/nats-server.js';
import { cliTestTimeout, type ManagedProcess, ProcessGroup, runTroupe } from './helpers/processes.js';
import { waitUntil } from './helpers/wait.js';

interface Probe {
  status: number;
  body: { status?: string; ready?: boolean; checks?: Record<string, { ok: boolean; detail?: string }> };
}

async function probe(port: number, path: '/healthz' | '/readyz'): Promise<Probe> {
  const res = await fetch(`http://127.0.0.1:${port}${path}`, { signal: AbortSignal.timeout(5_000) });
  return { status: res.status, body: (await res.json()) as Probe['body'] };
}

/** Polls `path` until `ok(answer)`; the last answer is in the error. */
async function probeUntil(port: number, path: '/healthz' | '/readyz', ok: (p: Probe) => boolean, what: string, timeoutMs = 20_000): Promise<Probe> {
  let last: Probe | undefined;
  return waitUntil(
    async () => {
      last = await probe(port, path);
      return ok(last) ? last : undefined;
    },
    what,
    timeoutMs,
    100,
  ).catch((err: Error) => {
    throw new Error(`${err.message}; last answer: ${JSON.stringify(last)}`);
  });
}

describe('probes of a node and an agent process', () => {
  let nats: NatsServerHandle;
  const procs = new ProcessGroup();
  const ports = { node: 0, agent: 0 };
  let agentProc: ManagedProcess;
  let nodeProc: ManagedProcess;

  beforeAll(async () => {
    nats = await startNatsServer();
    ports.node = await freePort();
    ports.agent = await freePort();
    nodeProc = await procs.spawnTroupe(['up', '--nats', nats.url, '--lease-ttl', '1000', '--metrics-port', String(ports.node)], nats.env, { name: 'node' });
    agentProc = await procs.spawnTroupe(['agent', 'test/fixtures/observed-team.ts', '--nats', nats.url, '--metrics-port', String(ports.agent)], nats.env, {
      name: 'agents',
    });
  });

  afterAll(async () => {
    await nats.signal('SIGCONT').catch(() => undefined);
    await procs.stopAll();
    await nats.stop();
  });

  it('are ready once started, with each check; live; and the metrics port names them', async () => {
    const node = await probeUntil(ports.node, '/readyz', (p) => p.status === 200, 'the node ready');
    expect(node.body.ready).toBe(true);
    expect(node.body.checks?.started).toEqual({ ok: true });
    expect(node.body.checks?.nats).toEqual({ ok: true, detail: nats.url });
    expect(node.body.checks?.partitions?.ok).toBe(true);
    expect(node.body.checks?.partitions?.detail).toMatch(/^owns \d+ of 8 partitions$/);
    const agent = await probe(ports.agent, '/readyz');
    expect(agent).toEqual({ status: 200, body: { ready: true, checks: { started: { ok: true }, nats: { ok: true, detail: nats.url } } } });
    for (const port of [ports.node, ports.agent]) expect(await probe(port, '/healthz')).toEqual({ status: 200, body: { status: 'ok' } });
    const other = await fetch(`http://127.0.0.1:${ports.node}/ready`);
    expect(other.status).toBe(404);
    expect(await other.text()).toMatch(/probes at GET \/healthz and GET \/readyz/);
  });

  it(
    'troupe status, as an operator: every check with what it saw, exit 0; --json for scripts',
    async () => {
      const asOperator = { TROUPE_NATS_CREDS: nats.credsFile('operator') };
      const json = await runTroupe(['status', '--nats', nats.url, '--json'], asOperator);
      expect(json.code, json.stderr).toBe(0);
      const report = JSON.parse(json.stdout) as {
        tenant: string;
        ready: boolean;
        checks: Record<string, { ok: boolean; detail: string; seen?: string[]; owned?: number[] }>;
      };
      expect(report.tenant).toBe('demo');
      expect(report.ready).toBe(true);
      expect(report.checks.nats).toMatchObject({ ok: true, detail: `connected to ${nats.url}` });
      expect(report.checks.partitions?.owned).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
      expect(report.checks.partitions?.detail).toMatch(/^8 of 8 owned by 1 node: \S+ \(8\)$/);
      expect(report.checks.store).toMatchObject({ ok: true });
      expect(report.checks.agents?.seen).toEqual(['back', 'broken', 'front', 'greeter', 'specialist']);
      const human = await runTroupe(['status', '--nats', nats.url], asOperator);
      expect(human.code).toBe(0);
      expect(human.stdout).toContain(`mesh of tenant demo on ${nats.url}: ready`);
      expect(human.stdout).toMatch(/✓ partitions +8 of 8 owned by 1 node/);
      expect(human.stdout).toMatch(/✓ agents +back, broken, front, greeter, specialist/);
      // --streams asks JetStream, with a node's credentials; an operator's may not.
      const streams = await runTroupe(['status', '--nats', nats.url, '--streams', '--json'], nats.env);
      expect(streams.code, streams.stdout).toBe(0);
      const withStreams = JSON.parse(streams.stdout) as {
        checks: { streams: { ok: boolean; streams: Array<{ stream: string; ok: boolean; replicas: number }> } };
      };
      expect(withStreams.checks.streams.ok).toBe(true);
      expect(withStreams.checks.streams.streams.map((s) => [s.stream, s.ok, s.replicas])).toEqual([
        ['TROUPE_IN', true, 1],
        ['TROUPE_DLQ', true, 1],
        ['TROUPE_ANSWERED', true, 1],
        ['KV_troupe_threads', true, 1],
        ['KV_troupe_leases', true, 1],
      ]);
      const refused = await runTroupe(['status', '--nats', nats.url, '--streams'], asOperator);
      expect(refused.code).toBe(1);
      expect(refused.stdout).toMatch(/✗ streams +.*needs a node's credentials/);
    },
    cliTestTimeout(4),
  );

  it('troupe status and ps take only agent actors from an agent: one posing as a node (with 10^9 partitions) or listing a thread is not believed', async () => {
    const forger = await NatsTransport.connect({ ...nats.as('echo'), name: 'forger' });
    const operator = await NatsTransport.connect({ ...nats.as('operator'), name: 'status-operator' });
    try {
      const fake = {
        node: 'forged',
        actors: [
          { kind: 'node', id: 'forged', state: 'running', node: 'forged', detail: { partitions: [1e12, -1, 'x', 3.5], partitionCount: 1e9 } },
          { kind: 'thread', id: 'someone-elses-thread', state: 'working', node: 'forged' },
          { kind: 'agent', id: 'echo', state: 'idle', node: 'forged' },
        ],
      };
      forger.subscribe('troupe.demo.hello', (m) => {
        if (m.reply) forger.publish(m.reply, new TextEncoder().encode(JSON.stringify(fake)));
      });
      await forger.flush();
      const client = new TroupeClient(operator, 'demo');
      const forged = (await client.ps(300)).filter((r) => r.node === 'forged');
      // Not even its agent actor: a hello reply counts only for an instance the registry learned from the
      // agent's own announces (detail.instance), and this one names none.
      expect(forged.flatMap((r) => r.actors.map((a) => `${a.kind} ${a.id}`))).toEqual([]);
      const report = await meshStatus(client, { windowMs: 300 });
      expect(report.checks.partitions.owned).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
      expect(report.checks.partitions.detail).toMatch(/^8 of 8 owned by 1 node: \S+ \(8\)$/);
      // The agents are the registry's (announces only the agent itself may publish), not the forger's claim.
      expect(report.checks.agents.seen).not.toContain('echo');
      expect(report.ready).toBe(true);
    } finally {
      await forger.close();
      await operator.close();
    }
  });

  it('a frozen server: the node is not ready once its leases bucket stops answering, still live, and ready again after; an agent told to stop is not ready while it drains', async () => {
    await probeUntil(ports.node, '/readyz', (p) => p.status === 200, 'the node ready');
    await nats.signal('SIGSTOP');
    try {
      // Its TCP connection is still open: what tells is that the lease surveys go unanswered (3 ttls).
      const frozen = await probeUntil(ports.node, '/readyz', (p) => p.status === 503, 'the node not ready on a frozen server');
      expect(frozen.body.ready).toBe(false);
      expect(frozen.body.checks?.partitions?.ok).toBe(false);
      expect(frozen.body.checks?.partitions?.detail).toMatch(
        /^the leases bucket has not answered for \d+ s: this node can neither take nor keep partitions \(owns \d+ of 8 partitions\)$/,
      );
      expect(frozen.body.checks?.started).toEqual({ ok: true });
      expect(await probe(ports.node, '/healthz')).toEqual({ status: 200, body: { status: 'ok' } });
      // Its drain cannot finish while the server is frozen: it says it is stopping meanwhile.
      agentProc.child.kill('SIGTERM');
      const stopping = await probeUntil(ports.agent, '/readyz', (p) => p.status === 503, 'the agent not ready once told to stop');
      expect(stopping.body.checks?.started).toEqual({ ok: false, detail: 'stopping: draining' });
    } finally {
      await nats.signal('SIGCONT');
    }
    const back = await probeUntil(ports.node, '/readyz', (p) => p.status === 200, 'the node ready again after the server thawed');
    expect(back.body.checks?.partitions?.detail).toMatch(/^owns \d+ of 8 partitions$/);
    expect((await agentProc.exited).code).toBe(0);
  });

  it('a stopped server: the node is not ready while its connection is lost, and ready again once the server is back', async () => {
    await probeUntil(ports.node, '/readyz', (p) => p.status === 200, 'the node ready');
    await nats.shutdown();
    const lost = await probeUntil(ports.node, '/readyz', (p) => p.status === 503 && p.body.checks?.nats?.ok === false, 'the node not ready without its server');
    expect(lost.body.checks?.nats?.detail).toBe(`lost the connection to ${nats.url}; reconnecting`);
    expect(await probe(ports.node, '/healthz')).toEqual({ status: 200, body: { status: 'ok' } });
    await nats.restart();
    const back = await probeUntil(ports.node, '/readyz', (p) => p.status === 200, 'the node ready again with its server back', 30_000);
    expect(back.body.checks?.nats).toEqual({ ok: true, detail: nats.url });
  });

  it('troupe status without a node: not ready, exit 1, and it says what to start', async () => {
    await nodeProc.kill('SIGTERM');
    const res = await runTroupe(['status', '--nats', nats.url, '--window', '300'], { TROUPE_NATS_CREDS: nats.credsFile('operator') });
    expect(res.code).toBe(1);
    expect(res.stdout).toContain(`mesh of tenant demo on ${nats.url}: not ready`);
    expect(res.stdout).toMatch(/✗ partitions +no node answered\n +→ start a node: troupe up --nats <url>/);
    expect(res.stdout).toMatch(/✗ store +no node read the thread store: /);
    expect(res.stdout).toMatch(/✗ agents +no agent registered/);
  });
});

describe('Readiness', () => {
  it('is not ready while starting or stopping, nor while a check fails or throws; names each', () => {
    const readiness = new Readiness();
    let up = true;
    readiness.add(
      'nats',
      natsCheck({
        name: 'nats://x',
        closed: false,
        get connected() {
          return up;
        },
      }),
    );
    expect(readiness.report()).toEqual({
      ready: false,
      checks: { started: { ok: false, detail: 'starting: setting up' }, nats: { ok: true, detail: 'nats://x' } },
    });
    readiness.started();
    expect(readiness.report().ready).toBe(true);
    up = false;
    expect(readiness.report()).toEqual({
      ready: false,
      checks: { started: { ok: true }, nats: { ok: false, detail: 'lost the connection to nats://x; reconnecting' } },
    });
    up = true;
    readiness.add('broken', () => {
      throw new Error('no answer');
    });
    expect(readiness.report().checks.broken).toEqual({ ok: false, detail: 'the check failed: no answer' });
    readiness.add('broken', () => ({ ok: true }));
    expect(readiness.report().ready).toBe(true);
    readiness.stopping();
    readiness.started();
    expect(readiness.report().checks.started).toEqual({ ok: false, detail: 'stopping: draining' });
    expect(natsCheck({ name: 'nats://x', closed: true })()).toEqual({ ok: false, detail: 'the connection to nats://x is closed' });
  });
});
