/**
 * Opening the lease bucket (leases.ts): made when missing (history 1, max age = the lease TTL), scaled to
 * the replicas asked for, checked for what leases rely on — compare-and-set that is serialised across
 * the bucket's replicas, and a max age, without which a crashed node's leases would never expire.
 */
import { jetstream, StorageType, type JetStreamManager } from '@nats-io/jetstream';
import { Kvm, type KV } from '@nats-io/kv';
import type { NatsConnection } from '@nats-io/transport-node';
import type { Logger } from '../../observability/logger.js';
import { ensureReplicas } from './replicas.js';
import { isCreateOrBindTransient, retrySetup } from './retry.js';
import { requireSerializableCas } from './server-version.js';

export interface LeaseBucketOptions {
  nc: NatsConnection;
  bucket: string;
  /** The max age a new bucket gets. */
  ttlMs: number;
  replicas?: number;
  storage?: 'file' | 'memory';
  /** How long to keep asking a cluster that does not answer yet. */
  setupDeadlineMs?: number;
  log: Logger;
}

export interface LeaseBucket {
  kv: KV;
  jsm: JetStreamManager;
  /** The bucket's max age: the lease TTL every node of the bucket uses. */
  ttlMs: number;
}

export async function openLeaseBucket(opts: LeaseBucketOptions): Promise<LeaseBucket> {
  const { nc, bucket, log } = opts;
  const bucketName = `the lease bucket "${bucket}"`;
  requireSerializableCas(nc.info?.version, bucketName, opts.replicas ?? 1);
  // Creating (or scaling) the bucket may take a cluster a few seconds: the default timeout. Lease
  // calls afterwards time out well inside one renewal period, so a stuck call cannot hold a round past the TTL.
  const setup = jetstream(nc);
  const js = jetstream(nc, { timeout: Math.max(500, Math.min(5_000, Math.floor(opts.ttlMs / 3))) });
  const { kv, jsm, status } = await retrySetup(
    `opening the lease bucket "${bucket}"`,
    async () => {
      await new Kvm(setup).create(bucket, {
        history: 1,
        ttl: opts.ttlMs,
        storage: opts.storage === 'memory' ? StorageType.Memory : StorageType.File,
        replicas: opts.replicas ?? 1,
      });
      await ensureReplicas(await setup.jetstreamManager(), `KV_${bucket}`, opts.replicas, log);
      const kv = await new Kvm(js).open(bucket);
      return { kv, jsm: await js.jetstreamManager(), status: await kv.status() };
    },
    // The step makes the bucket when it is missing: "stream not found" is the cluster recovering.
    { log, deadlineMs: opts.setupDeadlineMs, transient: isCreateOrBindTransient },
  );
  // A bucket made by someone else with more replicas, or by a version of Troupe that did not check.
  requireSerializableCas(nc.info?.version, bucketName, status.replicas);
  if (status.ttl === 0) {
    throw new Error(`KV bucket "${bucket}" has no max age: leases would never expire; delete it or use another bucket`);
  }
  if (status.ttl !== opts.ttlMs) {
    log.warn({ bucket, bucketTtlMs: status.ttl, leaseTtlMs: opts.ttlMs }, "lease bucket exists with another max age; using the bucket's");
  }
  return { kv, jsm, ttlMs: status.ttl };
}
