/**
 * Where a thread's messages go: the partition nats-server's subject mapping puts a thread in, and the name
 * of each partition's consumer on TROUPE_IN.
 */
import { fnv1a32 } from './fnv.js';
import { DEFAULT_PARTITIONS } from './leases.js';

/** A partition's consumer on TROUPE_IN. */
export function consumerName(p: number): string {
  return `p${p}`;
}

/** The partition whose consumer has this name, if it is one of `partitions`. */
export function partitionOfConsumer(name: string, partitions: number): number | undefined {
  const m = /^p(\d{1,4})$/.exec(name);
  const p = m ? Number(m[1]) : -1;
  return p >= 0 && p < partitions && consumerName(p) === name ? p : undefined;
}

/**
 * The partition nats-server's `{{partition(n,1)}}` mapping puts a thread in: FNV-1a 32-bit over the
 * thread id's bytes, modulo n (checked against a real server in test/ingress.test.ts).
 */
export function partitionOf(threadId: string, partitions: number = DEFAULT_PARTITIONS): number {
  return fnv1a32(threadId) % partitions;
}
