/**
 * Who is alive and which partitions are taken in a tenant's lease bucket (leases.ts), from the server:
 * one stream-info request listing the tenant's keys (subjects) in the bucket, then a get per key that
 * might be a delete marker. No consumer is made (kv.keys() would make one per call, which a cluster's
 * meta layer pays for).
 */
import type { JetStreamManager } from '@nats-io/jetstream';
import type { KV } from '@nats-io/kv';
import type { LeaseKeys } from './lease-keys.js';

export interface LeaseSurvey {
  /** Nodes with a live heartbeat, this one included. */
  nodes: Set<string>;
  /** Partitions whose lease someone holds (this node's own included). */
  taken: Set<number>;
  /** Local time at which the earliest key of another node ages out (Infinity: none). */
  nextExpiry: number;
}

export interface LeaseSurveyContext {
  jsm: JetStreamManager;
  kv: KV;
  bucket: string;
  keys: LeaseKeys;
  /** The bucket's max age. */
  ttlMs: number;
  /** Whether this node holds partition p: its key is not read again. */
  holds: (p: number) => boolean;
}

export async function surveyLeases({ jsm, kv, bucket, keys, ttlMs, holds }: LeaseSurveyContext): Promise<LeaseSurvey> {
  const prefix = `$KV.${bucket}.`;
  const info = await jsm.streams.info(`KV_${bucket}`, { subjects_filter: `${prefix}${keys.tenant}.>` });
  const found = Object.keys(info.state.subjects ?? {}).map((subject) => subject.slice(prefix.length));
  const nodes = new Set<string>([keys.nodeId]);
  const taken = new Set<number>();
  let nextExpiry = Infinity;
  await Promise.all(
    found.map(async (key) => {
      const isNode = key.startsWith(keys.nodePrefix);
      const p = isNode ? undefined : keys.partitionOf(key);
      if (!isNode && p === undefined) return;
      if (p !== undefined && holds(p)) {
        taken.add(p);
        return;
      }
      // A deleted key keeps its delete marker until it ages out: only a PUT counts.
      const entry = await kv.get(key);
      if (!entry || entry.operation !== 'PUT') return;
      if (isNode) nodes.add(key.slice(keys.nodePrefix.length));
      else taken.add(p!);
      // The server drops the key `ttl` after its last write (its own timestamp): a live owner writes it
      // again long before; a dead one's is gone then, and the next balance round should be right there.
      if (!isNode || key !== keys.node()) nextExpiry = Math.min(nextExpiry, entry.created.getTime() + ttlMs);
    }),
  );
  return { nodes, taken, nextExpiry };
}
