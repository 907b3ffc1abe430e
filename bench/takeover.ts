/**
 * Takeover time: how long after a node dies (its connection drops without a goodbye, as in kill -9) the
 * other node owns its partitions, over a series of crashes at random moments of the renewal cycle. The
 * README's "within about one lease TTL" rests on these figures, not on a timed test.
 */
import { connect } from '@nats-io/transport-node';
import { PartitionLeases } from '../src/transport/jetstream/leases.js';
import type { UserConnectOptions } from '../test/helpers/nats-server.js';

export interface TakeoverResults {
  ttlMs: number;
  kills: number;
  partitions: number;
  /** ms from the crash to the survivor owning every partition, in kill order. */
  takeoverMs: number[];
  minMs: number;
  medianMs: number;
  maxMs: number;
  /** medianMs / ttlMs and maxMs / ttlMs. */
  medianVsTtl: number;
  maxVsTtl: number;
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

async function until(cond: () => boolean, what: string, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`takeover bench: timed out waiting for ${what}`);
    await sleep(2);
  }
}

export async function runTakeoverBench(opts: {
  asNode: UserConnectOptions;
  kills: number;
  ttlMs: number;
  partitions?: number;
  log: (s: string) => void;
}): Promise<TakeoverResults> {
  const partitions = opts.partitions ?? 8;
  const bucket = `bench_leases_${Date.now()}`;
  const node = async (nodeId: string) => {
    const nc = await connect({ ...opts.asNode, name: `bench-${nodeId}` });
    const leases = new PartitionLeases({ nc, tenant: 'demo', nodeId, leaseTtlMs: opts.ttlMs, partitions, bucket });
    await leases.start();
    return { nc, leases };
  };
  opts.log(`takeover (${opts.kills} crashes, lease ttl ${opts.ttlMs} ms):`);
  const survivor = await node('survivor');
  const takeoverMs: number[] = [];
  try {
    for (let i = 0; i < opts.kills; i++) {
      const victim = await node(`victim-${i}`);
      await until(() => victim.leases.owned().length === partitions / 2 && survivor.leases.owned().length === partitions / 2, 'an even share', 30 * opts.ttlMs);
      // A random moment of the renewal cycle, so the figure is not tied to one timer phase.
      await sleep(Math.random() * victim.leases.renewIntervalMs);
      const crashed = performance.now();
      await victim.nc.close();
      await until(() => survivor.leases.owned().length === partitions, 'the survivor to own every partition', 30 * opts.ttlMs);
      takeoverMs.push(Math.round(performance.now() - crashed));
      await victim.leases.stop().catch(() => undefined);
      opts.log('.');
    }
  } finally {
    await survivor.leases.stop({ release: true }).catch(() => undefined);
    await survivor.nc.close();
  }
  opts.log(' done\n');
  const sorted = [...takeoverMs].sort((a, b) => a - b);
  const median = sorted.length % 2 ? sorted[(sorted.length - 1) / 2]! : (sorted[sorted.length / 2 - 1]! + sorted[sorted.length / 2]!) / 2;
  return {
    ttlMs: opts.ttlMs,
    kills: opts.kills,
    partitions,
    takeoverMs,
    minMs: sorted[0]!,
    medianMs: median,
    maxMs: sorted.at(-1)!,
    medianVsTtl: median / opts.ttlMs,
    maxVsTtl: sorted.at(-1)! / opts.ttlMs,
  };
}

export function renderTakeoverReport(r: TakeoverResults): string {
  return (
    `Takeover after a crash (${r.kills} crashes at random moments, lease ttl ${r.ttlMs} ms, ${r.partitions} partitions):\n` +
    `  min ${r.minMs} ms · median ${r.medianMs} ms (${r.medianVsTtl.toFixed(2)}× ttl) · max ${r.maxMs} ms (${r.maxVsTtl.toFixed(2)}× ttl)`
  );
}
