/**
 * PartitionLeases against a real nats-server: one owner per partition, fair shares, takeover after a
 * crash (lease TTL + one round) and after a clean stop (at once), and never two owners at a time.
 */
import { connect, type NatsConnection, type RequestOptions } from '@nats-io/transport-node';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { freeForLong, PartitionLeases, type LeaseLossReason } from '../src/transport/jetstream/leases.js';
import { metrics } from '../src/observability/metrics.js';
import type { Logger } from '../src/observability/logger.js';
import { capturingLogger } from './helpers/log-lines.js';
import { overriding, stallAfterSending } from './helpers/stall.js';
import { startNatsServer, type NatsServerHandle } from './helpers/nats-server.js';
import { sleep, waitFor, waitUntil } from './helpers/wait.js';
import { jetstream } from '@nats-io/jetstream';
import { Kvm, KvWatchInclude } from '@nats-io/kv';

const TTL = 1_000;
const ALL = [0, 1, 2, 3, 4, 5, 6, 7];
/** How long each lease callback works (as a consumer starting or draining does), so overlapping callbacks would show. */
const CALLBACK_WORK_MS = 3;

interface Event {
  node: string;
  partition: number;
  kind: 'acquired' | 'lost';
  reason?: LeaseLossReason;
  start: number;
  end: number;
}

describe('PartitionLeases', () => {
  let server: NatsServerHandle;
  const conns: NatsConnection[] = [];
  const started: PartitionLeases[] = [];
  let bucketN = 0;

  beforeAll(async () => {
    server = await startNatsServer();
  });
  afterAll(async () => {
    await server?.stop();
  });
  afterEach(async () => {
    await Promise.all(started.splice(0).map((l) => l.stop({ release: false }).catch(() => undefined)));
    await Promise.all(conns.splice(0).map((c) => c.close().catch(() => undefined)));
  });

  const connectNode = async () => {
    const nc = await connect({ ...server.asNode, maxReconnectAttempts: -1, reconnectTimeWait: 100 });
    conns.push(nc);
    return nc;
  };

  /** A node with callbacks that take a little time, so overlapping callbacks would show (on a connection of its own unless given one). */
  const makeNode = async (nodeId: string, bucket: string, events: Event[], ttl = TTL, opts: { nc?: NatsConnection; logger?: Logger } = {}) => {
    const nc = opts.nc ?? (await connectNode());
    const leases = new PartitionLeases({
      nc,
      tenant: 'demo',
      nodeId,
      leaseTtlMs: ttl,
      bucket,
      ...(opts.logger ? { logger: opts.logger } : {}),
      onAcquired: async (p) => {
        const start = Date.now();
        await sleep(CALLBACK_WORK_MS);
        events.push({ node: nodeId, partition: p, kind: 'acquired', start, end: Date.now() });
      },
      onLost: async (p, reason) => {
        const start = Date.now();
        await sleep(CALLBACK_WORK_MS);
        events.push({ node: nodeId, partition: p, kind: 'lost', reason, start, end: Date.now() });
      },
    });
    started.push(leases);
    return { nc, leases };
  };

  /** Samples every node's owned() every few ms and records any partition held by two at once. */
  const overlapSampler = (nodes: PartitionLeases[]) => {
    const overlaps: string[] = [];
    let samples = 0;
    const timer = setInterval(() => {
      samples++;
      const seen = new Map<number, string>();
      for (const n of nodes) {
        for (const p of n.owned()) {
          const other = seen.get(p);
          if (other) overlaps.push(`p${p}: ${other} and ${n.nodeId}`);
          seen.set(p, n.nodeId);
        }
      }
    }, 2);
    return {
      overlaps,
      get samples() {
        return samples;
      },
      stop: () => clearInterval(timer),
    };
  };

  /** Every callback of the nodes' current holdings has run: the net of the events matches owned(). */
  const callbacksSettled = (events: Event[], nodes: PartitionLeases[]) =>
    nodes.every((n) => {
      const net = new Set<number>();
      for (const e of events.filter((x) => x.node === n.nodeId).sort((x, y) => x.start - y.start)) {
        if (e.kind === 'acquired') net.add(e.partition);
        else net.delete(e.partition);
      }
      return [...net].sort().join() === n.owned().join();
    });

  /**
   * Resolves once every lease key of the bucket has been written `rounds` more times than now: the node's
   * renewals went on for that many rounds. A later marker, so a check that nothing changed meanwhile
   * (no flapping, no loss) covers that many rounds whatever the machine's speed.
   */
  const renewalRounds = async (nc: NatsConnection, bucket: string, rounds: number) => {
    // Right after a server restart JetStream may not answer yet: opening is retried until it does.
    const watch = await waitUntil(
      async () => {
        try {
          return await (await new Kvm(jetstream(nc, { timeout: 1_000 })).open(bucket)).watch({ key: 'demo.*', include: KvWatchInclude.UpdatesOnly });
        } catch {
          return undefined;
        }
      },
      `a watch of the bucket ${bucket}`,
      30_000,
      100,
    );
    const writes = new Map<string, number>();
    const counting = (async () => {
      for await (const e of watch) writes.set(e.key, (writes.get(e.key) ?? 0) + 1);
    })();
    try {
      await waitFor(() => ALL.every((p) => (writes.get(`demo.p${p}`) ?? 0) >= rounds), `${rounds} renewal rounds of every lease`, 30_000);
    } finally {
      watch.stop();
      await counting;
    }
  };

  /** For each partition, callbacks of one node never overlap and alternate acquired/lost. */
  const expectSerializedCallbacks = (events: Event[], node: string) => {
    for (const p of ALL) {
      const mine = events.filter((e) => e.node === node && e.partition === p).sort((a, b) => a.start - b.start);
      for (let i = 1; i < mine.length; i++) {
        expect(mine[i]!.start).toBeGreaterThanOrEqual(mine[i - 1]!.end);
        expect(mine[i]!.kind).not.toBe(mine[i - 1]!.kind);
      }
      if (mine.length > 0) expect(mine[0]!.kind).toBe('acquired');
    }
  };

  it('gives a lone node every partition', async () => {
    const events: Event[] = [];
    const { leases } = await makeNode('solo', `leases_${++bucketN}`, events);
    await leases.start();
    await waitFor(() => leases.owned().length === 8, 'all 8 partitions');
    expect(leases.owned()).toEqual(ALL);
    expect(leases.ttlMs).toBe(TTL);
    await waitFor(() => events.length === 8, 'the 8 onAcquired callbacks');
    expect(events.map((e) => e.partition).sort()).toEqual(ALL);
  });

  it('shares 4/4 with a second node, 3/3/2 with a third, never two owners, takeover after crash and clean stop', async () => {
    const bucket = `leases_${++bucketN}`;
    const events: Event[] = [];
    const a = await makeNode('node-a', bucket, events);
    const b = await makeNode('node-b', bucket, events);
    await a.leases.start();
    await waitFor(() => a.leases.owned().length === 8, 'node-a owning 8');

    const sampler = overlapSampler([a.leases, b.leases]);
    try {
      const joinedAt = Date.now();
      await b.leases.start();
      await waitFor(() => a.leases.owned().length === 4 && b.leases.owned().length === 4, '4/4', 4 * TTL);
      const converged = Date.now() - joinedAt;
      console.log(`[leases] second node joined: 4/4 after ${converged} ms (ttl ${TTL} ms)`);
      expect([...a.leases.owned(), ...b.leases.owned()].sort()).toEqual(ALL);
      // node-a gave its 4 back (a rebalance without anyone crashing), none aged out or was taken from it.
      await waitFor(() => callbacksSettled(events, [a.leases, b.leases]), 'callbacks of the join to settle');
      const givenBack = events.filter((e) => e.node === 'node-a' && e.kind === 'lost');
      expect(givenBack.map((e) => e.reason)).toEqual(Array(4).fill('released'));
      expect(givenBack.map((e) => e.partition).sort()).toEqual(b.leases.owned());

      // A third node: 8 split over 3 in node-id order (shareOf), so 3/3/2.
      const c = await makeNode('node-c', bucket, events);
      const sampler3 = overlapSampler([a.leases, b.leases, c.leases]);
      await c.leases.start();
      await waitFor(
        () => {
          const counts = [a, b, c].map((n) => n.leases.owned().length).sort();
          return counts.join() === '2,3,3';
        },
        '3/3/2',
        4 * TTL,
      );
      expect([...a.leases.owned(), ...b.leases.owned(), ...c.leases.owned()].sort()).toEqual(ALL);
      // c leaves cleanly: back to 4/4.
      await c.leases.stop({ release: true });
      await waitFor(() => a.leases.owned().length === 4 && b.leases.owned().length === 4, '4/4 again', 4 * TTL);
      sampler3.stop();
      expect(sampler3.overlaps).toEqual([]);

      // Let a few rounds pass: the balance is stable (no flapping).
      await waitFor(() => callbacksSettled(events, [a.leases, b.leases]), 'callbacks to settle');
      const before = events.length;
      await renewalRounds(a.nc, bucket, 3);
      expect(events.length).toBe(before);

      // Crash node-b: its connection goes away without stop(); node-a takes over once b's leases age out.
      // A random moment within the renewal period, so the measured time is not tied to one timer phase.
      await sleep(Math.random() * b.leases.renewIntervalMs);
      const bOwned = b.leases.owned();
      const crashedAt = Date.now();
      await b.nc.close();
      const takeover = await waitFor(() => a.leases.owned().length === 8, 'node-a owning 8 after the crash', 20 * TTL);
      console.log(
        `[leases] crash takeover: node-a owns all 8 ${takeover} ms after node-b's connection closed ` +
          `(ttl ${TTL} ms, renew every ${a.leases.renewIntervalMs} ms)`,
      );
      // How soon is for the bench (npm run bench: takeover min/median/max over a series of kills); here,
      // that it happened in order: b fenced each partition before a took it.
      // node-b fenced itself (onLost 'expired') before node-a took each of its partitions.
      await waitFor(() => callbacksSettled(events, [a.leases]), 'node-a callbacks to settle');
      await waitFor(
        () => bOwned.every((p) => events.some((e) => e.node === 'node-b' && e.partition === p && e.kind === 'lost' && e.start >= crashedAt)),
        'node-b fencing',
      );
      for (const p of bOwned) {
        const fenced = events.find((e) => e.node === 'node-b' && e.partition === p && e.kind === 'lost' && e.start >= crashedAt)!;
        const taken = events.find((e) => e.node === 'node-a' && e.partition === p && e.kind === 'acquired' && e.start >= crashedAt)!;
        expect(fenced.reason).toBe('expired');
        expect(fenced.start).toBeLessThan(taken.start);
      }
    } finally {
      sampler.stop();
    }
    expect(sampler.samples).toBeGreaterThan(100);
    expect(sampler.overlaps).toEqual([]);
    expectSerializedCallbacks(events, 'node-a');
    expectSerializedCallbacks(events, 'node-b');
  });

  it('hands over at once on a clean stop', async () => {
    const bucket = `leases_${++bucketN}`;
    const events: Event[] = [];
    // Leases of 60 s: a handover that waited for b's leases to age out could not finish within the test.
    const LONG_TTL = 60_000;
    const a = await makeNode('node-a', bucket, events, LONG_TTL);
    const b = await makeNode('node-b', bucket, events, LONG_TTL);
    await a.leases.start();
    await b.leases.start();
    await waitFor(() => a.leases.owned().length === 4 && b.leases.owned().length === 4, '4/4', LONG_TTL / 2);
    const sampler = overlapSampler([a.leases, b.leases]);
    const stoppedAt = Date.now();
    await b.leases.stop({ release: true });
    const stopTook = Date.now() - stoppedAt;
    expect(b.leases.owned()).toEqual([]);
    const takeover = await waitFor(() => a.leases.owned().length === 8, 'node-a owning 8 (given back, not aged out)', LONG_TTL / 2);
    sampler.stop();
    console.log(`[leases] clean stop: stop() took ${stopTook} ms, node-a owned all 8 ${takeover} ms later (ttl ${LONG_TTL} ms)`);
    expect(sampler.overlaps).toEqual([]);
    const released = events.filter((e) => e.node === 'node-b' && e.kind === 'lost' && e.start >= stoppedAt);
    expect(released).toHaveLength(4);
    expect(released.every((e) => e.reason === 'released')).toBe(true);
    expectSerializedCallbacks(events, 'node-a');
    expectSerializedCallbacks(events, 'node-b');
  });

  it('keeps its leases over a short server restart and resumes renewing', async () => {
    const bucket = `leases_${++bucketN}`;
    const events: Event[] = [];
    // Leases of 3 s (renewed every second, trusted for 2.7 s): a restart slowed by a busy machine still
    // fits in them more often than not; when it does not, the node fences and takes them back.
    const ttl = 3_000;
    const a = await makeNode('node-a', bucket, events, ttl);
    await a.leases.start();
    await waitFor(() => a.leases.owned().length === 8, 'all 8');
    const restartAt = Date.now();
    await server.restart();
    const restartTook = Date.now() - restartAt;
    // Whether the leases survived the restart or were fenced and taken back, node-a ends up with all 8.
    // Two writes of every key after the restart: a renewal sent before it and answered late (which may
    // fence the lease once its answer is read) has come and gone, and the node renews or has taken back.
    await renewalRounds(a.nc, bucket, 2);
    await waitFor(() => a.leases.owned().length === 8 && !a.nc.isClosed(), 'all 8 after the restart', 20 * ttl);
    await waitFor(() => callbacksSettled(events, [a.leases]), 'callbacks to settle');
    const lost = events.filter((e) => e.kind === 'lost' && e.start >= restartAt);
    console.log(
      `[leases] server restart took ${restartTook} ms; leases lost meanwhile: ${lost.length} (${[...new Set(lost.map((e) => e.reason))].join() || 'none'})`,
    );
    expect(lost.every((e) => e.reason === 'expired')).toBe(true);
    // Renewing again: two more rounds of writes to every key, and nothing lost or taken meanwhile.
    const before = events.length;
    await renewalRounds(a.nc, bucket, 2);
    expect(a.leases.owned()).toEqual(ALL);
    expect(events.length).toBe(before);
    expectSerializedCallbacks(events, 'node-a');
  });

  it("a lease write that landed but timed out (the process stalled) is not taken for someone else's: renewed on, or reclaimed after a fence", async () => {
    const bucket = `leases_${++bucketN}`;
    const events: Event[] = [];
    const { lines, log } = capturingLogger('debug');
    // Leases of 15 s: calls time out after 5 s, a renewal is trusted for 13.5 s after it starts, and a key
    // ages out 15 s after its last write, so the reclaim in step 2 has 1.4 s after the stall before the
    // keys are gone. A stall here blocks the whole process (the test's too).
    const ttl = 15_000;
    const callTimeout = 5_000;
    const validity = ttl - ttl / 10;
    const { nc, leases } = await makeNode('node-a', bucket, events, ttl, { logger: log });
    await leases.start();
    await waitFor(() => leases.owned().length === 8, 'all 8');
    const kv = await new Kvm(nc).open(bucket);

    /** A renewal goes out, then the process stalls for `ms`: the server takes the writes, but the calls time out before their answers are read. */
    const renewThenStall = async (ms: number) => {
      const before = await kv.get('demo.p0');
      void leases.refresh();
      await stallAfterSending(ms);
      return before!.revision;
    };

    /** troupe_partition_leases_taken_total by `how` and troupe_partition_leases_lost_total by `reason` (this process's registry). */
    const counted = async (): Promise<Record<string, number>> => {
      const [taken, lost] = await Promise.all([metrics.leasesTaken.get(), metrics.leasesLost.get()]);
      return Object.fromEntries([...taken.values.map((v) => [String(v.labels.how), v.value]), ...lost.values.map((v) => [String(v.labels.reason), v.value])]);
    };
    const countedBefore = await counted();
    const countedSince = async () => {
      const now = await counted();
      return Object.fromEntries(Object.entries(now).map(([k, v]) => [k, v - (countedBefore[k] ?? 0)]));
    };

    // 1. A stall longer than a call's timeout, shorter than the leases' validity: the renewal landed
    //    unanswered, and the next one, on the revision the node knew, is refused. The key is still this
    //    lease's: renewed on its revision, nothing lost.
    await leases.refresh();
    const known = await renewThenStall(callTimeout + 300);
    await leases.refresh();
    await leases.refresh();
    expect(events.filter((e) => e.kind === 'lost')).toEqual([]);
    expect(leases.owned()).toEqual(ALL);
    expect((await kv.get('demo.p0'))!.revision).toBeGreaterThan(known);
    expect(
      lines
        .filter((l) => l.msg === 'own lease write had landed unanswered; writing on its revision')
        .map((l) => l.partition)
        .sort(),
    ).toEqual(ALL);
    expect(await countedSince()).toEqual({ created: 0, reclaimed: 0, released: 0, expired: 0, conflict: 0 });

    // 2. A stall past the validity: every lease is fenced ('expired') while its key, at a revision the
    //    node never heard of, is still its own. The next round reclaims them on that revision rather than
    //    leaving them unconsumed until the keys age out (a whole ttl) and taking them afresh.
    await leases.refresh();
    const validUntil = Date.now() + validity;
    await renewThenStall(validUntil + 100 - Date.now());
    await waitFor(() => events.filter((e) => e.kind === 'lost').length === 8 && leases.owned().length === 8, 'all 8 fenced and back', ttl);
    expect(events.filter((e) => e.kind === 'lost').map((e) => e.reason)).toEqual(Array(8).fill('expired'));
    expect(
      lines
        .filter((l) => l.msg === 'lease acquired')
        .slice(-8)
        .map((l) => l.how),
    ).toEqual(Array(8).fill('reclaimed'));
    // troupe_partition_leases_*_total: 8 expired, 8 reclaimed, nothing else.
    expect(await countedSince()).toEqual({ created: 0, reclaimed: 8, released: 0, expired: 8, conflict: 0 });
    expectSerializedCallbacks(events, 'node-a');
  }, 60_000);

  it('a lease create that landed but timed out is taken at its revision, not left to age out', async () => {
    const bucket = `leases_${++bucketN}`;
    const events: Event[] = [];
    const { lines, log } = capturingLogger('debug');
    // Calls time out after 3.3 s; keys age out after 10 s.
    const ttl = 10_000;
    const real = await connectNode();
    // The connection as the leases see it: the first request that stores a value of this bucket (a create)
    // is followed by a stall of the process past the call timeout, as a long GC pause or a busy machine
    // makes it. The server stores the create; its answer is read only after the timeout fired.
    let armed = true;
    const nc = overriding(real, {
      request: (subject: string, data?: Uint8Array, opts?: RequestOptions) => {
        const answer = real.request(subject, data, opts);
        if (armed && subject.startsWith(`$KV.${bucket}.demo.p`) && data && data.length > 0) {
          armed = false;
          void stallAfterSending(ttl / 3 + 300);
        }
        return answer;
      },
    });
    const { leases } = await makeNode('node-a', bucket, events, ttl, { nc, logger: log });
    await leases.start();
    expect(armed).toBe(false);
    await waitFor(() => leases.owned().length === 8, 'all 8', 2 * ttl);
    // The creates that timed out were found stored as this node's and taken; none was given up to age out.
    const landed = lines.filter((l) => l.msg === 'own lease write had landed unanswered; taking the lease at its revision');
    expect(landed.length).toBeGreaterThan(0);
    expect(lines.filter((l) => l.msg === 'acquire failed')).toEqual([]);
    await waitFor(() => callbacksSettled(events, [leases]), 'the onAcquired callbacks');
    expect(events.map((e) => e.partition).sort()).toEqual(ALL);
  });

  it('a partition whose onAcquired fails is given back (onLost released, the key deleted) and taken again', async () => {
    const bucket = `leases_${++bucketN}`;
    const { lines, log: logger } = capturingLogger();
    const calls: string[] = [];
    let failed = false;
    const nc = await connectNode();
    const leases = new PartitionLeases({
      nc,
      tenant: 'demo',
      nodeId: 'node-a',
      leaseTtlMs: TTL,
      bucket,
      logger,
      onAcquired: (p) => {
        calls.push(`acquired ${p}`);
        if (p === 3 && !failed) {
          failed = true;
          throw new Error('cannot start on it');
        }
      },
      onLost: (p, reason) => void calls.push(`lost ${p} ${reason}`),
    });
    started.push(leases);
    const lost = async () => (await metrics.leasesLost.get()).values.find((v) => v.labels.reason === 'released')?.value ?? 0;
    const before = await lost();
    await leases.start();
    await waitFor(() => calls.filter((c) => c === 'acquired 3').length === 2 && leases.owned().length === 8, 'p3 taken again, and all 8 held');
    expect(calls.filter((c) => c.split(' ')[1] === '3')).toEqual(['acquired 3', 'lost 3 released', 'acquired 3']);
    expect(lines.filter((l) => l.msg === 'onAcquired failed; giving the partition back').map((l) => l.partition)).toEqual([3]);
    expect((await lost()) - before).toBe(1);
  });

  it('renews at once when JetStream announces a new leader of its bucket, not at the next round', async () => {
    const bucket = `leases_${++bucketN}`;
    // Rounds every 20 s: a renewal in the first 10 s is the announcement's.
    const { lines, log } = capturingLogger('info');
    const a = await makeNode('node-a', bucket, [], 60_000, { logger: log });
    await a.leases.start();
    await waitFor(() => a.leases.owned().length === 8, 'all 8');
    const kv = await new Kvm(a.nc).open(bucket);
    const revisionOf = async () => (await kv.get('demo.p0'))!.revision;
    const before = await revisionOf();
    // What a cluster's new leader of the bucket's stream publishes (its body is not read).
    const announcer = await connectNode();
    announcer.publish(`$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED.KV_${bucket}`, '{}');
    await announcer.flush();
    await waitUntil(async () => (await revisionOf()) > before || undefined, 'the lease renewed', 10_000);
    // Another stream's announcement is not this bucket's: published before a second one of this bucket's,
    // it would reach the node first (one publisher, one subscriber: in order), so when the node has heard
    // the second one it has heard once, not twice.
    const heard = () => lines.filter((l) => l.msg === 'lease bucket has a new leader; renewing and balancing now').length;
    const heardBefore = heard();
    announcer.publish('$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED.KV_other', '{}');
    announcer.publish(`$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED.KV_${bucket}`, '{}');
    await announcer.flush();
    await waitFor(() => heard() > heardBefore, "the node hearing its bucket's second announcement", 10_000);
    expect(heard()).toBe(heardBefore + 1);
  });
});

describe('freeForLong: when nodes may take more than their share', () => {
  /** Surveys of 4 partitions, a ttl of 1 s: the partitions held, when, and what freeForLong says then. */
  const surveys = (since: Map<number, number>, steps: [held: number[], atMs: number][]) =>
    steps.map(([held, at]) => freeForLong(since, new Set(held), 4, at, 1_000));

  it('is true only once one partition has been free in every survey for longer than a ttl', () => {
    const since = new Map<number, number>();
    const said = surveys(since, [
      [[0, 1, 2], 0],
      [[0, 1, 2], 600],
      [[0, 1, 2], 1_000],
      [[0, 1, 2], 1_001],
      // Taken at last: no longer.
      [[0, 1, 2, 3], 1_300],
    ]);
    expect(said).toEqual([false, false, false, true, false]);
    expect(since.size).toBe(0);
  });

  it('does not take partitions each free for a moment, one after another, for one free all along', () => {
    // p3 free, then p2, then p1: some partition is free in every survey from 0 on, but p1 only from 1.1 s,
    // so only at 2.101 s has one been free for longer than a ttl (before, true at 1.1 s).
    const said = surveys(new Map(), [
      [[0, 1, 2], 0],
      [[0, 1, 3], 500],
      [[0, 2, 3], 1_100],
      [[0, 2, 3], 1_500],
      [[0, 2, 3], 2_101],
    ]);
    expect(said).toEqual([false, false, false, false, true]);
  });
});
