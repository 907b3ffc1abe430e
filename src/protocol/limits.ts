/**
 * Caps on everything a participant sends, checked where it enters. Each has a typed error
 * (PAYLOAD_TOO_LARGE for sizes, INVALID_MESSAGE for shapes) and none needs recursion to check, so a
 * hostile payload cannot make the check itself expensive.
 */
import { TroupeError } from './errors.js';

export const LIMITS = {
  /** Largest payload on the bus (NATS' own default max_payload is 1 MiB). */
  payloadBytes: 1024 * 1024,
  /** A user message into a thread. */
  userMessageBytes: 256 * 1024,
  /** An agent's reply (its answer becomes part of the thread record, which must fit in one KV value). */
  agentReplyBytes: 256 * 1024,
  /** One streamed chunk from an agent. */
  chunkBytes: 64 * 1024,
  /** Parts in one message. */
  parts: 64,
  /**
   * A stream copy's Nats-Msg-Id (`<principal>[/<user>]/<threadId>/<messageId>[#<n>]`, at most 64 + 128 +
   * 128 + 256 characters and separators), as the thread record keeps it.
   */
  msgIdChars: 640,
  /** Nesting of any JSON value (metadata, data parts). */
  depth: 32,
  /** Serialized `metadata` of one message. */
  metadataBytes: 64 * 1024,
  /** An agent card as announced. */
  cardBytes: 16 * 1024,
  /** Live agents per tenant in one node's registry, and instances per agent. */
  agentsPerTenant: 256,
  instancesPerAgent: 64,
  /** Peers' simplified cards sent with each agent request. */
  peersPerRequest: 32,
  /** Agents one delegation may fan out to. */
  delegateAgents: 10,
  /** The input an agent gives its delegates. */
  delegateInputChars: 16 * 1024,
  /** A thread record as stored (the KV value). */
  recordBytes: 900 * 1024,
} as const;

/**
 * Whether a JSON value holds a container `max` levels down (the top-level value is level 0). Walked
 * depth-first and stopped as soon as it passes `max`, so the recursion is never deeper than `max` + 1
 * calls whatever the value (a value nested 50,000 deep costs `max` steps, not a stack overflow); callers
 * pass limits of a few dozen. Allocates nothing: it runs on every message that comes off the wire.
 */
export function exceedsDepth(value: unknown, max: number = LIMITS.depth): boolean {
  return deeperThan(value, 0, max);
}

function deeperThan(v: unknown, depth: number, max: number): boolean {
  if (v === null || typeof v !== 'object') return false;
  if (depth >= max) return true;
  if (Array.isArray(v)) {
    for (let i = 0; i < v.length; i++) if (deeperThan(v[i], depth + 1, max)) return true;
    return false;
  }
  for (const key in v) if (Object.hasOwn(v, key) && deeperThan((v as Record<string, unknown>)[key], depth + 1, max)) return true;
  return false;
}

/** Throws INVALID_MESSAGE when `value` nests deeper than the limit. */
export function checkDepth(value: unknown, what: string, max: number = LIMITS.depth): void {
  if (exceedsDepth(value, max)) throw new TroupeError('INVALID_MESSAGE', `${what} nests deeper than ${max} levels`, { limit: max });
}

/** Throws PAYLOAD_TOO_LARGE when `bytes` is over `limit`. */
export function checkSize(bytes: number, limit: number, what: string): void {
  if (bytes > limit) throw new TroupeError('PAYLOAD_TOO_LARGE', `${what} is ${bytes} bytes; the limit is ${limit}`, { size: bytes, limit });
}
