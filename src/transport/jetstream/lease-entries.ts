/** What a lease bucket's values hold and how they are read (leases.ts), and the JetStream error of a lost race. */
import { JetStreamApiCodes, JetStreamApiError } from '@nats-io/jetstream';
import type { KvEntry, KvWatchEntry } from '@nats-io/kv';

const enc = new TextEncoder();
const dec = new TextDecoder();

export function encode(value: unknown): Uint8Array {
  return enc.encode(JSON.stringify(value));
}

function leaseValue(e: KvEntry | KvWatchEntry): { nodeId?: unknown; acquiredAt?: unknown } {
  try {
    return (JSON.parse(dec.decode(e.value)) as { nodeId?: unknown; acquiredAt?: unknown } | null) ?? {};
  } catch {
    return {};
  }
}

export function isOwnWrite(e: KvWatchEntry, nodeId: string): boolean {
  return leaseValue(e).nodeId === nodeId;
}

/** Whether a lease key's value was written by node `nodeId` in the tenure that began at `acquiredAt`. */
export function isLeaseOf(e: KvEntry, nodeId: string, acquiredAt: number): boolean {
  const v = leaseValue(e);
  return v.nodeId === nodeId && v.acquiredAt === acquiredAt;
}

export function isWrongLastSequence(err: unknown): boolean {
  return (
    err instanceof JetStreamApiError &&
    (err.code === JetStreamApiCodes.StreamWrongLastSequence || err.code === JetStreamApiCodes.StreamWrongLastSequenceUnknown)
  );
}
