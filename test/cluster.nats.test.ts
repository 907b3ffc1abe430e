/**
 * Troupe on a real 3-server NATS cluster (test/helpers/nats-cluster.ts: the configs `troupe cluster up`
 * writes, from the same credential store as `troupe creds init`):
 *   - `troupe cluster up` starts a working cluster (routes, JetStream with replicas 3);
 *   - `troupe up --replicas 3` makes TROUPE_IN, TROUPE_DLQ and the thread and lease buckets with 3
 *     replicas, nodes given every server URL;
 *   - 3 nodes share 64 partitions 22/21/21; killing one (kill -9) moves its partitions to the other two;
 *   - a node whose --partitions disagrees with the server's mapping refuses to start (exit 1, says the
 *     server's count), and its probes leave nothing in the stream;
 *   - with two servers of three down (no JetStream quorum) a starting node waits and says so, and starts
 *     once they are back; opening a store past its setup deadline fails with what to check;
 *   - a thread's latest message given again to its next owner while the marker stream has no quorum and
 *     the answering node is gone: the node keeps asking, finds the marker once the servers are back, and
 *     does not publish the answer again.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { jetstreamManager } from '@nats-io/jetstream';
import { Kvm } from '@nats-io/kv';
import { AgentHost } from '../src/actors/agent-host.js';
import { defineAgent, reply } from '../src/sdk/agent.js';
import { TroupeClient } from '../src/sdk/client.js';
import { NatsTransport } from '../src/transport/nats.js';
import { TroupeNode } from '../src/actors/node.js';
import { KvThreadStore } from '../src/store/kv.js';
import { TroupeError } from '../src/protocol/errors.js';
import { checkPartitionMapping } from '../src/transport/jetstream/partition-check.js';
import { pushAccountJwts } from '../src/security/creds.js';
import { TimeoutError, type NatsConnection, type RequestOptions } from '@nats-io/transport-node';
import { overriding } from './helpers/stall.js';
import { clusterServerBin, startNatsCluster, type NatsClusterHandle } from './helpers/nats-cluster.js';
import { ProcessGroup, runTroupe, spawnTroupe, type ManagedProcess } from './helpers/processes.js';
import { parseLogLines } from './helpers/log-lines.js';
import { sleep, waitUntil, waitWhileProgressing } from './helpers/wait.js';
import { capturingLogger } from './helpers/log-lines.js';
import { partitionOf } from '../src/transport/jetstream/ingress.js';
import { retryTransient } from '../src/transport/jetstream/retry.js';
import { Registry } from '../src/actors/registry.js';
import { ThreadHost } from '../src/actors/threads/host.js';
import { metrics } from '../src/observability/metrics.js';
import { META } from '../src/protocol/metadata.js';
import { ThreadEventSchema, decode } from '../src/protocol/index.js';
import { userMessage } from '../src/sdk/client.js';
import { MemoryThreadStore } from '../src/store/memory.js';
import { JetStreamAnsweredLog } from '../src/transport/jetstream/answered.js';
import { subjects } from '../src/transport/subjects.js';

const PARTITIONS = 64;
const LEASE_TTL_MS = 1_500;

let cluster: NatsClusterHandle;
const group = new ProcessGroup();
const transports: NatsTransport[] = [];

function transport(name: string, user = 'node'): Promise<NatsTransport> {
  return transportOn(name, user);
}

async function transportOn(name: string, user = 'node', servers?: string[]): Promise<NatsTransport> {
  const t = await NatsTransport.connect({ ...cluster.as(user), ...(servers ? { servers } : {}), name, maxReconnectAttempts: -1 });
  transports.push(t);
  return t;
}

function startNode(name: string, extra: string[] = [], logLevel = 'warn'): Promise<ManagedProcess> {
  return spawnTroupe(
    [
      'up',
      '--team',
      'test/fixtures/chaos-team.ts',
      '--no-agents',
      '--partitions',
      String(PARTITIONS),
      '--replicas',
      '3',
      '--lease-ttl',
      String(LEASE_TTL_MS),
      '--log-level',
      logLevel,
      ...extra,
    ],
    cluster.env,
    { name, readyTimeoutMs: 40_000 },
    group,
  );
}

async function owners(client: TroupeClient): Promise<Map<string, number[]>> {
  const nodes = (await client.ps(400)).flatMap((r) => r.actors).filter((a) => a.kind === 'node');
  return new Map(nodes.map((n) => [n.id, ((n.detail?.partitions as number[] | undefined) ?? []).slice().sort((a, b) => a - b)]));
}

beforeAll(async () => {
  cluster = await startNatsCluster(3, { partitions: PARTITIONS });
}, 150_000);
afterAll(async () => {
  await group.stopAll();
  await Promise.all(transports.map((t) => t.close().catch(() => undefined)));
  await cluster?.stop();
});

describe('troupe cluster up', () => {
  it('starts 3 routed servers with JetStream; a bucket with 3 replicas works through any of them', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'troupe-cluster-up-'));
    try {
      const proc = await spawnTroupe(
        ['cluster', 'up', '--dir', dir, '--json'],
        { NATS_SERVER_BIN: clusterServerBin() },
        { name: 'cluster up', ready: /"url"/, readyOn: 'stdout', readyTimeoutMs: 30_000 },
        group,
      );
      const out = JSON.parse(proc.stdout) as { url: string; servers: Array<{ name: string; url: string; configFile: string }> };
      expect(out.servers.map((s) => s.name)).toEqual(['n1', 'n2', 'n3']);
      const t = await NatsTransport.connect({ servers: out.url.split(','), creds: join(dir, 'creds/tenants/demo/users/node.creds'), name: 'cluster-up-check' });
      try {
        // JetStream elects its meta leader once the routes are up: retry until it answers.
        // A fresh 2.10 cluster on 2 busy cores can take over a minute to place a stream on every peer
        // (test/helpers/nats-cluster.ts waits 90 s for the same).
        // On a timeout: the cluster's last answer, and what `troupe cluster up` said (what it saw of the
        // JetStream meta group, the servers it restarted).
        let last = 'no attempt finished';
        const create = () =>
          new Kvm(t.connection).create('cluster_up_check', { replicas: 3 }).catch((err: unknown) => {
            last = (err as Error)?.message ?? String(err);
            return undefined;
          });
        const kv = await waitUntil(create, 'a bucket with 3 replicas', 90_000, 500).catch((err: unknown) => {
          throw new Error(`${(err as Error).message} (the cluster's last answer: ${last})\n${proc.describe()}`);
        });
        await kv.put('k', 'v');
        expect((await kv.get('k'))?.string()).toBe('v');
        const info = await (await jetstreamManager(t.connection)).streams.info('KV_cluster_up_check');
        expect(info.config.num_replicas).toBe(3);
        expect(1 + (info.cluster?.replicas?.length ?? 0)).toBe(3);
      } finally {
        await t.close();
      }
      const exit = await proc.kill('SIGTERM');
      expect(exit.code).toBe(0);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 150_000);
});

describe('the same accounts on every server', () => {
  it('a revocation rewrites every server config and, pushed to one server, cuts the user off on all of them', async () => {
    await cluster.store.addUser({ tenant: 'demo', role: 'client', name: 'leaver' });
    const before = readFileSync(join(cluster.dir, 'cluster', 'n2.conf'), 'utf8');
    // A new user needs no server change: it connects through every server.
    for (const url of cluster.urls) {
      const t = await NatsTransport.connect({
        servers: url,
        creds: cluster.credsFile('leaver'),
        name: 'leaver',
        inboxPrefix: '_INBOX_leaver',
        maxReconnectAttempts: 0,
      });
      await t.close();
    }
    const { accountJwt } = await cluster.store.revoke('demo', 'leaver');
    expect(readFileSync(join(cluster.dir, 'cluster', 'n2.conf'), 'utf8')).not.toBe(before);
    await pushAccountJwts([accountJwt], { servers: cluster.urls[0]!, systemCreds: cluster.store.systemCredsFile });
    for (const url of cluster.urls) {
      await waitUntil(
        () =>
          NatsTransport.connect({
            servers: url,
            creds: cluster.credsFile('leaver'),
            name: 'leaver',
            inboxPrefix: '_INBOX_leaver',
            maxReconnectAttempts: 0,
          }).then(
            async (t) => (await t.close(), undefined),
            () => true,
          ),
        `the revoked user refused by ${url}`,
        10_000,
        200,
      );
    }
  }, 60_000);
});

describe('nodes on the cluster', () => {
  let client: TroupeClient;
  const nodes: ManagedProcess[] = [];
  let agentHost: AgentHost;

  beforeAll(async () => {
    const echo = defineAgent({ card: { id: 'echo', name: 'Echo', description: 'echoes' }, handle: (_m, ctx) => reply(`echo: ${ctx.text}`, { to: 'user' }) });
    agentHost = await new AgentHost({ transport: await transport('cluster-echo', 'echo'), agent: echo, heartbeatMs: 300 }).start();
    client = new TroupeClient(await transport('cluster-client'));
  });
  afterAll(async () => {
    await agentHost?.stop();
  });

  it('compare-and-set on a bucket of 3 replicas: of 6 writes at the same revision from 3 servers, exactly one is stored, round after round', async () => {
    // What one owner per partition and per thread rests on (src/transport/jetstream/server-version.ts):
    // nats-server before 2.9.21 stored several of them in almost every round.
    const conns = await Promise.all(cluster.urls.map((url, i) => NatsTransport.connect({ ...cluster.asNode, servers: [url], name: `cas-${i}` })));
    transports.push(...conns);
    const kv = await new Kvm(conns[0]!.connection).create('cas_check', { replicas: 3, history: 1 });
    const kvs = await Promise.all(conns.map((c) => new Kvm(c.connection).open('cas_check')));
    const winners: number[] = [];
    for (let round = 0; round < 60; round++) {
      const key = `k${round}`;
      const revision = await kv.put(key, 'start');
      const writes = await Promise.allSettled(kvs.flatMap((k, i) => [0, 1].map((j) => k.update(key, `${i}.${j}`, revision))));
      const stored = writes.flatMap((w) => (w.status === 'fulfilled' ? [w.value] : []));
      winners.push(stored.length);
      // The one stored is what the key holds. A KV get may be answered by a replica a little behind (direct
      // get), so read until it has caught up to that revision, then it must be that write, no other.
      if (stored.length === 1) {
        const held = await waitUntil(
          async () => {
            const e = await kv.get(key);
            return e && e.revision >= stored[0]! ? e : undefined;
          },
          `key ${key} at revision ${stored[0]} or later`,
          10_000,
          50,
        );
        expect(held.revision).toBe(stored[0]);
      }
    }
    expect(
      winners.every((n) => n === 1),
      `writes stored per round: ${winners.join(',')}`,
    ).toBe(true);
  }, 60_000);

  /**
   * A TroupeNode of this process (the one consumer of every partition), its lines kept, on `servers`; its
   * ingress on `ingressNc(connection)` when given (a proxy that changes some answers).
   */
  async function leaderNode(name: string, servers?: string[], ingressNc?: (nc: NatsConnection) => NatsConnection) {
    const { lines, log } = capturingLogger();
    const t = await transportOn(name, 'node', servers);
    const store = await KvThreadStore.open(t.connection, { replicas: 3 });
    const node = await new TroupeNode({
      transport: t,
      nodeId: name,
      logger: log,
      store,
      durable: { nc: ingressNc ? ingressNc(t.connection) : t.connection, partitions: PARTITIONS, replicas: 3, leaseTtlMs: LEASE_TTL_MS },
      config: { entryAgent: 'echo' },
    }).start();
    await node.registry.waitFor(['echo']);
    const consuming = (p: number) =>
      waitUntil(
        () => ((node.ps().actors[0]?.detail?.partitions as number[] | undefined) ?? []).includes(p) || undefined,
        `${name} consuming partition ${p}`,
        30_000,
      );
    // Asked again while JetStream answers "temporarily unavailable" (a CI run: 64 of these right after the
    // leases bucket's leader stepped down).
    const consumerLeader = async (p: number) =>
      (await retryTransient(async () => (await jetstreamManager(t.connection)).consumers.info('TROUPE_IN', `p${p}`), { deadlineMs: 30_000 })).cluster?.leader;
    /** The line that says the node pulled from partition p's new leader, from `lines[from]` on. */
    const pulledLine = (p: number, from: number) =>
      waitUntil(
        () => lines.slice(from).find((l) => l.msg === 'partition consumer has a new leader; pulling again' && l.partition === p),
        `partition ${p} pulling from its new leader`,
        60_000,
      );
    const stepdown = async (api: string) => {
      const answer = JSON.parse(new TextDecoder().decode((await t.request(`$JS.API.${api}`, new Uint8Array(), { timeoutMs: 10_000 })).data)) as {
        success?: boolean;
      };
      expect(answer.success, api).toBe(true);
    };
    return {
      t,
      lines,
      consuming,
      consumerLeader,
      pulledLine,
      stepdown,
      stop: async () => {
        await node.stop();
        await store.close();
      },
    };
  }

  /**
   * Steps a leader down (`stepdown`, an API subject after `$JS.API.`) until `leader()` names a server other
   * than `server`, pausing `pauseMs` after each; fails after 10 tries.
   */
  async function moveLeaderOff(
    rig: { stepdown(subject: string): Promise<unknown> },
    what: string,
    leader: () => Promise<string | undefined>,
    server: string,
    stepdown: string,
    pauseMs: number,
  ): Promise<void> {
    for (let i = 0; (await leader()) === server; i++) {
      expect(i, `stepdowns to move ${what} off ${server}`).toBeLessThan(10);
      await rig.stepdown(stepdown);
      await sleep(pauseMs);
    }
  }

  /** A node (see `leaderNode`), a client and an echo agent, all on server 1. */
  async function homeRig(name: string) {
    const home = cluster.servers[0]!;
    const rig = await leaderNode(`${name}-node`, [home.url]);
    const local = new TroupeClient(await transportOn(`${name}-client`, 'node', [home.url]));
    const echo = defineAgent({ card: { id: 'echo', name: 'Echo', description: 'echoes' }, handle: (_m, ctx) => reply(`echo: ${ctx.text}`, { to: 'user' }) });
    const localEcho = await new AgentHost({ transport: await transportOn(`${name}-echo`, 'echo', [home.url]), agent: echo, heartbeatMs: 300 }).start();
    return { rig, local, localEcho };
  }

  it("a partition consumer whose leader steps down pulls again when the new leader is announced, and the thread's next turn is answered", async () => {
    // Before the node watched the advisories, the lost pull was noticed after two missed heartbeats (2 s
    // and more: bench/cluster.ts); that path is covered in test/ingress.test.ts. Here the new leader's
    // announcement must be what sends the pull: the line below is said only on that path.
    const rig = await leaderNode('leader-change-node');
    try {
      const threadId = 'leader-change-1';
      const p = partitionOf(threadId, PARTITIONS);
      await rig.consuming(p);
      expect((await client.send('before', { threadId, timeoutMs: 20_000 })).text).toBe('echo: before');
      const before = await rig.consumerLeader(p);
      expect(before).toBeTruthy();
      const mark = rig.lines.length;
      await rig.stepdown(`CONSUMER.LEADER.STEPDOWN.TROUPE_IN.p${p}`);
      const pulled = await rig.pulledLine(p, mark);
      expect(pulled.leader).not.toBe(before);
      expect((await client.send('after', { threadId, timeoutMs: 20_000 })).text).toBe('echo: after');
    } finally {
      await rig.stop();
    }
  }, 90_000);

  it('a make of a partition consumer that timed out but was stored is taken only once its replicas have started it: an answer from its assignment (no leader) is asked again', async () => {
    const threadId = 'landed-not-started';
    const p = partitionOf(threadId, PARTITIONS);
    const calls: string[] = [];
    let step: 'make' | 'assignment' | 'done' = 'make';
    const rig = await leaderNode('landed-make-node', undefined, (real) =>
      overriding(real, {
        request: async (subject: string, data?: Uint8Array, opts?: RequestOptions) => {
          const call = new RegExp(`\\.CONSUMER\\.(?:DURABLE\\.)?(CREATE|DELETE|INFO)\\.TROUPE_IN\\.p${p}(?:\\.|$)`).exec(subject)?.[1];
          const answer = await real.request(subject, data, opts);
          if (call === undefined) return answer;
          calls.push(call);
          // The make is stored but answered too late (a slow meta leader): the caller sees a timeout.
          if (call === 'CREATE' && step === 'make') {
            step = 'assignment';
            throw new TimeoutError();
          }
          // The next info is answered as a member answers before the replicas started the consumer: the
          // config and zero state from its assignment, no cluster info (nats-server jsConsumerInfoRequest).
          if (call === 'INFO' && step === 'assignment') {
            step = 'done';
            const info = JSON.parse(new TextDecoder().decode(answer.data)) as Record<string, unknown>;
            delete info.cluster;
            return overriding(answer, { data: new TextEncoder().encode(JSON.stringify(info)) });
          }
          return answer;
        },
      }),
    );
    try {
      await rig.consuming(p);
      expect(step).toBe('done');
      // Made once: after the make that timed out, only infos (the one from the assignment asked again).
      const made = calls.lastIndexOf('CREATE');
      expect(calls.slice(made + 1).filter((c) => c !== 'INFO')).toEqual([]);
      const ours = rig.lines.filter((l) => l.partition === p);
      const retry = ours.find((l) => l.msg === 'could not make the partition consumer yet; trying again' && String(l.err).includes('not started yet'));
      expect(retry, JSON.stringify(ours.map((l) => [l.msg, l.err]))).toBeDefined();
      expect(ours.some((l) => l.msg === 'a make of the partition consumer that timed out had been stored; taking it')).toBe(true);
      expect((await client.send('after a landed make', { threadId, timeoutMs: 20_000 })).text).toBe('echo: after a landed make');
    } finally {
      await rig.stop();
    }
  }, 90_000);

  it("a partition consumer whose leader's server is killed pulls from the new leader as soon as it is announced: the partition is not silent between the announcement and the next answer", async () => {
    // After a crash the client notices the silence first (two missed heartbeats) and starts a reset of its
    // own that asks for the consumer's info, which nobody answers until the election; a pull asked for
    // through that reset waited for it, and the partition stayed silent seconds after the new leader was
    // announced (a .tmp rig: the turn 10-13 s after the kill, against 5-8 s now, the election's time).
    // Everything of this test is on server 1, and the server killed leads none of the leases' bucket.
    const home = cluster.servers[0]!;
    const { rig, local, localEcho } = await homeRig('leader-crash');
    let victim: (typeof cluster.servers)[number] | undefined;
    try {
      const threadId = 'leader-crash-1';
      const p = partitionOf(threadId, PARTITIONS);
      await rig.consuming(p);
      expect((await local.send('before', { threadId, timeoutMs: 20_000 })).text).toBe('echo: before');
      await moveLeaderOff(rig, 'the consumer leader', () => rig.consumerLeader(p), home.name, `CONSUMER.LEADER.STEPDOWN.TROUPE_IN.p${p}`, 500);
      const leader = (await rig.consumerLeader(p))!;
      await moveLeaderOff(rig, 'the leases bucket', () => cluster.streamLeader('KV_troupe_leases'), leader, 'STREAM.LEADER.STEPDOWN.KV_troupe_leases', 1_000);
      victim = cluster.servers.find((s) => s.name === leader)!;
      const mark = rig.lines.length;
      await victim.kill();
      const pulled = await rig.pulledLine(p, mark);
      const announced = rig.lines.indexOf(pulled);
      const res = await local.send('after the crash', { threadId, timeoutMs: 60_000, unavailableRetryMs: 60_000 });
      expect(res.text).toBe('echo: after the crash');
      const silent = rig.lines.slice(announced).filter((l) => l.msg === 'partition consumer silent; pulling again' && l.partition === p);
      expect(silent, 'silence warnings for the partition after its new leader was announced').toEqual([]);
    } finally {
      await victim?.restart();
      await cluster.ready(60_000);
      await localEcho.stop();
      await rig.stop();
    }
  }, 180_000);

  it("a crash of the server leading the leases' bucket: the node fences itself off every partition, takes them back once the bucket has a new leader, with their consumers as they were, and the thread's next turn is answered", async () => {
    // Every lease lapses (the election outlasts the 1.5 s TTL). Taking them back keeps each partition's
    // consumer as it was rather than making it again: two requests each to a meta layer recovering from
    // the same crash would delay the next turn by seconds (bench/cluster-crash.ts with CRASH_LEASES=1).
    const home = cluster.servers[0]!;
    const { rig, local, localEcho } = await homeRig('lease-crash');
    let victim: (typeof cluster.servers)[number] | undefined;
    try {
      const threadId = 'lease-crash-1';
      // Every partition first: one still being taken over from an earlier test's node is made afresh.
      for (let p = 0; p < PARTITIONS; p++) await rig.consuming(p);
      expect((await local.send('before', { threadId, timeoutMs: 20_000 })).text).toBe('echo: before');
      await moveLeaderOff(
        rig,
        'the leases bucket',
        () => cluster.streamLeader('KV_troupe_leases'),
        home.name,
        'STREAM.LEADER.STEPDOWN.KV_troupe_leases',
        1_000,
      );
      const leasesLeader = await cluster.streamLeader('KV_troupe_leases');
      victim = cluster.servers.find((s) => s.name === leasesLeader)!;
      // A consumer led by the server killed answers again only once its replicas elect another leader; every
      // other one must be taken back as it was.
      const consumerLeaders = await Promise.all(Array.from({ length: PARTITIONS }, (_, p) => rig.consumerLeader(p)));
      const mark = rig.lines.length;
      await victim.kill();
      const after = () => rig.lines.slice(mark);
      // However slow the machine: it fails only when the node has logged nothing more for 90 s (stuck).
      await waitWhileProgressing(
        () => after().filter((l) => l.msg === 'consuming partition').length >= PARTITIONS || undefined,
        () => after().length,
        'every partition consumed again',
        90_000,
      );
      expect(after().filter((l) => l.msg === 'lease lost').length, 'leases lapsed while the bucket elected a leader').toBe(PARTITIONS);
      const notLedByVictim = consumerLeaders.flatMap((leader, p) => (leader === victim!.name ? [] : [p]));
      expect(notLedByVictim.length).toBeGreaterThan(0);
      // Kept, unless the cluster did not answer for its info (while the meta leader is elected, consumers
      // whose leader lives may not answer either): then made afresh, as before, and the line says why.
      const back = after().filter((l) => l.msg === 'consuming partition' && notLedByVictim.includes(l.partition as number));
      const made = back.filter((l) => l.consumer !== 'kept');
      if (made.length > 0)
        console.log(`[cluster] consumers made again after the leases' crash: ${JSON.stringify(made.map((l) => [l.partition, l.madeBecause]))}`);
      expect(back.length - made.length, 'consumers kept').toBeGreaterThan(0);
      expect(made.filter((l) => !String(l.madeBecause).startsWith('no info of it:')).map((l) => [l.partition, l.madeBecause])).toEqual([]);
      const res = await local.send('after the crash', { threadId, timeoutMs: 60_000, unavailableRetryMs: 60_000 });
      expect(res.text).toBe('echo: after the crash');
    } finally {
      await victim?.restart();
      await cluster.ready(60_000);
      await localEcho.stop();
      await rig.stop();
    }
  }, 420_000);

  it("a node whose --partitions disagrees with the mapping refuses to start: exit 1, and it names the server's count", async () => {
    const res = await runTroupe(['up', '--partitions', '8', '--log-level', 'warn'], cluster.env, { timeoutMs: 30_000 });
    expect(res.code).toBe(1);
    expect(res.stderr).toMatch(/PARTITIONS_MISMATCH/);
    expect(res.stderr).toMatch(/maps tenant "demo" into 64: start it with --partitions 64/);
    // The library check agrees, and passes with the right count.
    const t = await transport('probe');
    await expect(checkPartitionMapping(t.connection, 'demo', 63)).rejects.toSatisfy(
      (e: unknown) => e instanceof TroupeError && e.code === 'PARTITIONS_MISMATCH' && e.details?.serverPartitions === 64,
    );
    await expect(checkPartitionMapping(t.connection, 'demo', PARTITIONS)).resolves.toEqual({ serverPartitions: PARTITIONS });
    // A TroupeNode does the same before it takes anything.
    const node = new TroupeNode({ transport: t, nodeId: 'wrong-count', durable: { nc: t.connection, partitions: 16 } });
    await expect(node.start()).rejects.toThrow(/into 64: start it with --partitions 64/);
  }, 60_000);

  it('troupe up --replicas 3 on the 3 servers: every stream and bucket has 3 replicas; 3 nodes own 22/21/21 of 64 partitions', async () => {
    // What the stream holds already (the leader-change test's messages), or nothing (run alone).
    // Asked again while JetStream is "temporarily unavailable" (an earlier test's server has just restarted):
    // a 0 then would fail the check below.
    const before = await jetstreamManager((await transport('stored-before')).connection);
    const storedBefore = await retryTransient(() => before.streams.info('TROUPE_IN'), { deadlineMs: 30_000 }).then(
      (i) => i.state.last_seq,
      () => 0,
    );
    // At info: what each node did with its partitions, for the line below when settling is slow.
    nodes.push(await startNode('node 1', [], 'info'), await startNode('node 2', [], 'info'), await startNode('node 3', [], 'info'));
    // Each poll's answer (ms since the third node was ready, then each answering node's count), for the
    // failure message: a node that did not answer `ps` in time, or shares still moving (the nodes' own
    // warnings, such as 'lease lost', are in their stderr below).
    const readyAt = Date.now();
    const polls: string[] = [];
    const shares = await waitUntil(
      async () => {
        const o = await owners(client);
        const counts = [...o.values()].map((p) => p.length).sort((a, b) => a - b);
        polls.push(`${Date.now() - readyAt} ms: ${counts.join('/') || 'no answer'}`);
        return o.size === 3 && counts.join() === '21,21,22' ? o : undefined;
      },
      '3 nodes sharing 64 partitions 22/21/21',
      30_000,
    ).catch((err: Error) => {
      throw new Error(`${err.message}; polls (last 20 of ${polls.length}): ${polls.slice(-20).join(', ')}\n${nodes.map((n) => n.describe()).join('\n')}`);
    });
    expect([...shares.values()].flat().sort((a, b) => a - b)).toEqual(Array.from({ length: PARTITIONS }, (_, i) => i));
    // How it got there (each change of the answers), and what the nodes said (counts of each line). When it
    // was slow, each node's lines after the third was ready, with their time.
    const changes = polls.filter((p, i) => i === 0 || p.split(': ')[1] !== polls[i - 1]!.split(': ')[1]);
    const said = nodes.map((n) => parseLogLines(n.stderr));
    const seen = new Map<string, number>();
    for (const l of said.flat()) seen.set(l.msg, (seen.get(l.msg) ?? 0) + 1);
    const counts = [...seen].map(([m, n]) => `${n}× ${m}`).join('; ');
    const tookMs = Date.now() - readyAt;
    console.log(
      `[cluster] 3 nodes × ${PARTITIONS} partitions: ${[...shares.values()].map((p) => p.length).join('/')} after ${tookMs} ms (${polls.length} polls; answers: ${changes.join(', ')}; the nodes said: ${counts})`,
    );
    if (tookMs > 5_000) {
      for (const [i, lines] of said.entries()) {
        const after = lines
          .filter((l) => (l.time as number) >= readyAt)
          .map(
            (l) =>
              `+${(l.time as number) - readyAt} ${l.msg}${l.partition !== undefined ? ` p${l.partition as number}` : ''}${Array.isArray(l.partitions) ? ` [${l.partitions.join(',')}]` : ''}`,
          );
        console.log(`[cluster]   node ${i + 1} after the third was ready: ${after.slice(0, 60).join(' | ') || 'nothing'}`);
      }
    }

    const t = await transport('replica-check');
    const jsm = await jetstreamManager(t.connection);
    for (const stream of ['TROUPE_IN', 'TROUPE_DLQ', 'TROUPE_ANSWERED', 'KV_troupe_threads', 'KV_troupe_leases']) {
      const info = await jsm.streams.info(stream);
      expect(info.config.num_replicas, stream).toBe(3);
    }
    // The probes of the three nodes' partition checks were refused by the stream: nothing was stored.
    expect((await jsm.streams.info('TROUPE_IN')).state.last_seq).toBe(storedBefore);
    // What an operator sees of it: every stream and bucket with 3 replicas and a leader, and the shares.
    const status = await runTroupe(['status', '--streams', '--json'], cluster.env, { timeoutMs: 30_000 });
    const shown = JSON.parse(status.stdout) as {
      ready: boolean;
      checks: { partitions: { detail: string }; streams: { streams: Array<{ stream: string; replicas: number; leader?: string }> } };
    };
    expect(shown.checks.streams.streams.map((s) => [s.stream, s.replicas, cluster.servers.some((srv) => srv.name === s.leader)])).toEqual(
      ['TROUPE_IN', 'TROUPE_DLQ', 'TROUPE_ANSWERED', 'KV_troupe_threads', 'KV_troupe_leases'].map((name) => [name, 3, true]),
    );
    expect(shown.checks.partitions.detail).toMatch(/^64 of 64 owned by 3 nodes: /);

    const res = await client.send('hello cluster', { threadId: 'cluster-1', timeoutMs: 20_000 });
    expect(res.text).toBe('echo: hello cluster');
  }, 120_000);

  it('kill -9 of one node: the other two take its partitions (32/32) and keep answering', async () => {
    const victim = nodes.shift()!;
    const killedAt = Date.now();
    await victim.kill('SIGKILL');
    const o = await waitUntil(
      async () => {
        const m = await owners(client);
        const counts = [...m.values()].map((p) => p.length).sort((a, b) => a - b);
        return m.size === 2 && counts.join() === '32,32' ? m : undefined;
      },
      'two nodes owning 32/32',
      30_000,
    );
    console.log(
      `[cluster] after kill -9 of a node: ${[...o.values()].map((p) => p.length).join('/')} after ${Date.now() - killedAt} ms (lease ttl ${LEASE_TTL_MS} ms)`,
    );
    expect([...o.values()].flat().length).toBe(PARTITIONS);
    const res = await client.send('still here', { threadId: 'cluster-1', timeoutMs: 20_000 });
    expect(res.text).toBe('echo: still here');
  }, 60_000);
});

describe('a cluster that has lost its JetStream quorum', () => {
  // Tenant acme: its account has no streams or buckets yet, so setting them up needs the meta leader,
  // which one server of three cannot elect. (Demo's exist: a lone server that led them may still answer
  // their info for a while, so a demo node could come up without waiting.)
  const acmeEnv = () => ({ ...cluster.env, TROUPE_NATS_CREDS: cluster.credsFile('node', 'acme') });
  const acmeTransport = async (name: string, user = 'node') => {
    const t = await NatsTransport.connect({ ...cluster.as(user, 'acme'), name, maxReconnectAttempts: -1 });
    transports.push(t);
    return t;
  };

  it('a cluster whose third server has not joined yet: a bucket of 3 replicas cannot be placed, so opening it waits, and opens once the server is up', async () => {
    // Seen on a fresh 2.10 cluster: a node opening its buckets before the meta layer knew every peer got
    // "no suitable peers for placement" and exited; it now waits as for an election.
    const young = await startNatsCluster(3, { startNow: 2 });
    const t = await NatsTransport.connect({ ...young.asNode, name: 'placement-store', maxReconnectAttempts: -1 });
    try {
      await young.ready(60_000);
      const failed = await KvThreadStore.open(t.connection, { bucket: 'placement_probe', replicas: 3, setupDeadlineMs: 1_500 }).then(
        () => undefined,
        (err: unknown) => err,
      );
      expect(failed).toBeInstanceOf(TroupeError);
      expect((failed as TroupeError).message).toMatch(
        /JetStream did not answer while opening the thread bucket "placement_probe" .*no suitable peers.*needs N JetStream servers that know each other/,
      );
      const { lines, log } = capturingLogger('warn');
      const opening = KvThreadStore.open(t.connection, { bucket: 'placement_probe', replicas: 3, setupDeadlineMs: 60_000, logger: log });
      let settled = false;
      void opening.then(
        () => (settled = true),
        () => (settled = true),
      );
      // It keeps asking (two rounds said so in its log) and has not settled: it waits for the third server.
      await waitUntil(
        () => lines.filter((l) => /^JetStream did not answer while .*; asking again/.test(l.msg)).length >= 2 || undefined,
        'two rounds of asking while the bucket cannot be placed',
        30_000,
      );
      expect(settled).toBe(false);
      await young.servers[2]!.restart();
      // A fresh 2.10 cluster may leave the server that joined late out of its meta group, which then
      // places nothing on it until that server is restarted (docs/cluster.md): the helper does so.
      const [store] = await Promise.all([opening, young.placeable(60_000)]);
      const info = await (await jetstreamManager(t.connection)).streams.info('KV_placement_probe');
      expect(info.config.num_replicas).toBe(3);
      await store.close();
    } finally {
      await t.close();
      await young.stop();
    }
  }, 120_000);

  it('a node started meanwhile waits, says so, and starts once the servers are back; past its --setup-timeout (or a store open past its deadline) it says what to check', async () => {
    const client = new TroupeClient(await acmeTransport('quorum-client'), 'acme');
    const echo = defineAgent({ card: { id: 'echo', name: 'Echo', description: 'echoes' }, handle: (_m, ctx) => reply(`echo: ${ctx.text}`, { to: 'user' }) });
    const agentHost = await new AgentHost({ transport: await acmeTransport('quorum-echo', 'echo'), agent: echo, tenant: 'acme', heartbeatMs: 300 }).start();
    const [, down1, down2] = cluster.servers;
    await Promise.all([down1!.kill(), down2!.kill()]);
    try {
      // One server of three: no meta leader, so no stream can be created.
      const t = await acmeTransport('quorum-store');
      const failed = await KvThreadStore.open(t.connection, { bucket: 'quorum_probe', replicas: 3, setupDeadlineMs: 1_500 }).then(
        () => undefined,
        (err: unknown) => err,
      );
      expect(failed).toBeInstanceOf(TroupeError);
      expect((failed as TroupeError).code).toBe('TRANSPORT_ERROR');
      expect((failed as TroupeError).message).toMatch(
        /JetStream did not answer while opening the thread bucket "quorum_probe" .*most servers of the cluster are up/,
      );

      // So does a node given a short --setup-timeout: exit 1 with what to check.
      const gaveUp = await runTroupe(
        [
          'up',
          '--tenant',
          'acme',
          '--team',
          'test/fixtures/chaos-team.ts',
          '--no-agents',
          '--partitions',
          String(PARTITIONS),
          '--replicas',
          '3',
          '--setup-timeout',
          '1000',
        ],
        acmeEnv(),
        { timeoutMs: 60_000 },
      );
      expect(gaveUp.code).toBe(1);
      expect(gaveUp.stderr).toMatch(/JetStream did not answer while .*most servers of the cluster are up/);

      // A node started now (a restart after a crash, a rolling deploy) does not exit: it reports that it waits.
      const node = await spawnTroupe(
        [
          'up',
          '--tenant',
          'acme',
          '--team',
          'test/fixtures/chaos-team.ts',
          '--no-agents',
          '--partitions',
          String(PARTITIONS),
          '--replicas',
          '3',
          '--lease-ttl',
          String(LEASE_TTL_MS),
          '--log-level',
          'warn',
        ],
        acmeEnv(),
        { name: 'node q', readyTimeoutMs: 40_000, ready: /JetStream did not answer while/ },
        group,
      );
      expect(node.running).toBe(true);
      await Promise.all([down1!.restart(), down2!.restart()]);
      await cluster.ready(60_000);
      await node.waitFor(/troupe node \S+ up on /, { timeoutMs: 90_000 });
      // The inbound stream elects its leader after the servers return: the send keeps trying meanwhile.
      const res = await client.send('after the quorum came back', { threadId: 'quorum-1', timeoutMs: 60_000, unavailableRetryMs: 45_000 });
      expect(res.text).toBe('echo: after the quorum came back');
    } finally {
      await agentHost.stop();
      for (const s of [down1!, down2!]) if (!s.running) await s.restart();
    }
  }, 180_000);
});

describe('a redelivered latest message while the marker stream cannot be read', () => {
  // Two thread hosts of tenant demo (the two nodes a thread moves between) share a memory store: what is
  // under test is the marker stream (TROUPE_ANSWERED, 3 replicas) losing its quorum, not the store.
  /** An echo agent, a factory of thread hosts sharing one store and the marker stream, and the finals on the thread's `out`. */
  const markerScene = async (threadId: string) => {
    // Every connection of the scene on the server that stays up: what is under test is the marker stream
    // without its quorum while the nodes can still ask each other (a node reconnecting after its server's
    // kill is another case, see docs/cluster.md).
    const transport = (name: string, user = 'node') => transportOn(name, user, [cluster.servers[0]!.url]);
    const store = new MemoryThreadStore();
    const agentHost = await new AgentHost({
      transport: await transport(`${threadId}-echo`, 'echo'),
      agent: defineAgent({ card: { id: 'echo', name: 'Echo', description: 'echoes' }, handle: (_m, ctx) => reply(`echo: ${ctx.text}`, { to: 'user' }) }),
    }).start();
    /** A thread host and its log lines (debug: each round of asking whether an answer went out). */
    const host = async (nodeId: string) => {
      const t = await transport(nodeId);
      const { lines, log } = capturingLogger('debug');
      const answered = await new JetStreamAnsweredLog({ nc: t.connection, tenant: 'demo', replicas: 3 }).start();
      const registry = await new Registry(t, 'demo').start();
      const threads = new ThreadHost({ transport: t, registry, tenant: 'demo', nodeId, store, config: { entryAgent: 'echo' }, answered, logger: log }).start();
      await registry.waitFor(['echo']);
      return { threads, answered, lines, t, stop: async () => (await threads.stop(), await registry.stop(), await t.close()) };
    };
    const finals: string[] = [];
    const watcher = await transport(`${threadId}-watch`);
    watcher.subscribe(subjects.threadOut('demo', 'local', threadId), (m) => {
      const e = decode(ThreadEventSchema, m.data, 'thread event');
      if (e.kind === 'status-update' && e.final) finals.push(String(e.status.message?.metadata?.[META.inReplyTo]));
    });
    await watcher.flush();
    /**
     * A later marker for `finals`: a round trip on each host's connection, then on the watcher's (all on one
     * server), so whatever those hosts published before now has reached the watcher.
     */
    const settledFinals = async (...hosts: Array<{ t: NatsTransport }>) => {
      for (const h of hosts) await h.t.flush();
      await watcher.flush();
      return finals;
    };
    return { threadId, agentHost, host, finals, settledFinals };
  };
  /**
   * Resolves once the host logged a round of asking whether a redelivered message was answered that ended
   * undecided (it asks again); a timeout says what the host logged last.
   */
  const undecidedRound = (h: { lines: Array<{ msg: string }> }, what: string, orSettled: () => boolean = () => false) =>
    waitUntil(
      () => h.lines.some((l) => l.msg.startsWith('cannot tell yet whether a redelivered message was answered')) || orSettled() || undefined,
      what,
      90_000,
    ).catch((err: Error) => {
      throw new Error(`${err.message}; the host's last lines: ${JSON.stringify(h.lines.slice(-8))}`);
    });

  it('the next owner keeps asking until the stream answers, finds the marker and does not publish again', async () => {
    const { threadId, agentHost, host, finals, settledFinals } = await markerScene('unreadable-marker-1');
    const [, down1, down2] = cluster.servers;
    try {
      const a = await host('node-unreadable-a');
      const first = await a.threads.deliver(threadId, userMessage('hello', { messageId: 'm1' }), 'local', { seq: 1, until: 'answered' });
      first.publish?.({ acked: true });
      await waitUntil(() => finals.length === 1 || undefined, 'the answer');
      await waitUntil(async () => (await a.answered.published(threadId, 'm1')) || undefined, 'the marker, stored');
      const b = await host('node-unreadable-b');
      // Node a dies; two servers of three go down, so the marker stream cannot be read; the stream gives m1
      // to node b again (its ack lost with a consumer's leader).
      await a.stop();
      await Promise.all([down1!.kill(), down2!.kill()]);
      // How b settles it: by the marker once the stream answers (or, on a machine slow enough that the
      // servers are back before b asks, by another "already published" rule); never by publishing.
      const decisions = async () => {
        const values = (await metrics.redeliveredAnswers.get()).values;
        return {
          notPublished: values.filter((v) => v.labels.decision !== 'published').reduce((n, v) => n + v.value, 0),
          published: values.find((v) => v.labels.decision === 'published')?.value ?? 0,
        };
      };
      const before = await decisions();
      let settled = false;
      const again = b.threads
        .deliver(threadId, userMessage('hello', { messageId: 'm1' }), 'local', { seq: 1, until: 'answered' })
        .finally(() => (settled = true));
      // Past one round of asking (the stream's lookup deadline, 3 questions to the dead node), which ends
      // undecided (before the node waited while nobody could tell, it published here), or settled already.
      await undecidedRound(b, 'a round of asking that ends undecided, or a decision', () => settled);
      expect(await settledFinals(b)).toEqual(['m1']);
      await Promise.all([down1!.restart(), down2!.restart()]);
      expect(await again).toEqual({ duplicate: true });
      const after = await decisions();
      expect(after.notPublished - before.notPublished).toBe(1);
      expect(after.published).toBe(before.published);
      expect(await settledFinals(b)).toEqual(['m1']);
      await b.stop();
    } finally {
      await agentHost.stop();
      for (const s of [down1!, down2!]) if (!s.running) await s.restart();
      await cluster.ready(60_000);
    }
  }, 120_000);

  it('the committer deciding on its own redelivery, asked meanwhile by the next owner: after saying "not published" it does not publish', async () => {
    const { threadId, agentHost, host, finals, settledFinals } = await markerScene('unreadable-marker-2');
    const [, down1, down2] = cluster.servers;
    try {
      const a = await host('node-deciding-a');
      const b = await host('node-deciding-b');
      // Node a answers m1, but cannot tell whether its ack took: the answer is left to the redelivery.
      const first = await a.threads.deliver(threadId, userMessage('hello', { messageId: 'm1' }), 'local', { seq: 1, until: 'answered' });
      first.publish?.({ acked: false });
      // The marker stream cannot be read; the stream gives m1 again to node a (its own redelivery: it
      // committed, so it asks nobody and waits for the stream) and to node b, the partition's next owner.
      await Promise.all([down1!.kill(), down2!.kill()]);
      // The premise: the marker stream cannot be read now. The server left may still answer a read for a
      // moment after losing its peers (it answers "no marker", and node a would rightly publish); wait until
      // a read says nothing.
      await waitUntil(
        async () => ((await a.answered.published(threadId, 'm1')) === undefined ? true : undefined),
        'the marker stream, unreadable with two servers of three down',
        60_000,
      );
      const own = a.threads.deliver(threadId, userMessage('hello', { messageId: 'm1' }), 'local', { seq: 1, until: 'answered' });
      // Node a waits for the stream (a round of it ended undecided) before node b asks it.
      await undecidedRound(a, "node a's own redelivery waiting for the stream");
      // Node b asks node a, which says it did not publish: node b publishes it.
      await b.threads.deliver(threadId, userMessage('hello', { messageId: 'm1' }), 'local', { seq: 1, until: 'answered' });
      await waitUntil(() => finals.length >= 1 || undefined, "node b's answer");
      // Node a's wait for the stream runs out (30 s): having said "not published", it must not publish.
      expect(await own).toEqual({ duplicate: true });
      expect(await settledFinals(a, b)).toEqual(['m1']);
      await Promise.all([a.stop(), b.stop()]);
    } finally {
      await agentHost.stop();
      for (const s of [down1!, down2!]) if (!s.running) await s.restart();
      await cluster.ready(60_000);
    }
  }, 120_000);
});
