/**
 * What the durable ingress (ingress.ts) is made of, shared by its files: the stream names and the headers of
 * a dead-lettered message, the ingress's options, a message as the handler gets it, and one consumption
 * run of a partition.
 */
import type { ConsumerMessages } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import type { TroupeError } from '../../protocol/errors.js';
import type { Logger } from '../../observability/logger.js';

export const INGRESS_STREAM = 'TROUPE_IN';
export const DEAD_LETTER_STREAM = 'TROUPE_DLQ';
/** Headers of a dead-lettered message (the original headers are kept too). */
export const DEAD_LETTER_HEADERS = {
  code: 'Troupe-Error-Code',
  message: 'Troupe-Error',
  subject: 'Troupe-Original-Subject',
  seq: 'Troupe-Original-Seq',
  attempts: 'Troupe-Attempts',
} as const;
export const DEFAULT_INGRESS_MAX_AGE_MS = 24 * 60 * 60 * 1000;
export const INGRESS_DUPLICATE_WINDOW_MS = 2 * 60 * 1000;

export interface IngressMessage {
  threadId: string;
  /** The broker-checked principal that published the message. */
  principal: string;
  partition: number;
  /** `Nats-Msg-Id`: the A2A messageId. */
  messageId: string | undefined;
  data: Uint8Array;
  headers: Record<string, string>;
  /** Seen before by some node (redelivery after a failure, a takeover or a lost ack). */
  redelivered: boolean;
  deliveryCount: number;
  /**
   * At or below the ack floor of the partition's previous consumer: acknowledged before, yet the stream
   * gave it again. A replicated work-queue stream on nats-server 2.9 can keep acknowledged messages when a
   * consumer's leader changes or the consumer is deleted right after the acks (the deletes ride on the
   * consumer's replication, not the stream's). A hint for what to publish, not a reason to skip the
   * message: the floor comes from the server's consumer state, which these same faults can leave ahead
   * of what was handled, so the handler still sees it (and finds it handled in its own state).
   */
  ackedBefore: boolean;
  /** Stream sequence. */
  seq: number;
  /** When the stream stored this copy (ms since the epoch, the server's clock). */
  storedAt: number;
  subject: string;
}

interface IngressHandlerContext {
  /** Aborted when this node lost the partition (another node may already be handling the thread). */
  signal: AbortSignal;
}

/**
 * Handles one message. It may return a function to run once the message's ack is settled (e.g.
 * publishing an answer: a crash before the ack makes the message come back to the next owner, which
 * answers it; a crash after cannot, so nothing is answered twice). It is told whether the message is
 * known to be acknowledged (`acked`): the server confirmed the ack, or the stream no longer holds the
 * message. When that is not known (the consumer's leader was being elected, the consumer was remade by
 * the partition's next owner), the message may come again, to this node or another, and is answered then.
 * The thread's next message is handed over only after this step ran.
 */
export type AfterAck = (outcome: { acked: boolean }) => void;
export type IngressHandler = (msg: IngressMessage, ctx: IngressHandlerContext) => void | Promise<void | AfterAck | undefined>;

export interface JetStreamIngressOptions {
  nc: NatsConnection;
  tenant: string;
  nodeId: string;
  /** Must equal the partition count of the server's mapping. Default 8. */
  partitions?: number;
  leaseTtlMs?: number;
  /** Lease KV bucket; default `troupe_leases`. */
  leaseBucket?: string;
  /** Resolve when the message is done with (the host: its turn answered and committed); throw to refuse or retry. It may run longer than ack_wait: the ingress keeps the message in progress meanwhile. */
  handler: IngressHandler;
  /** This node now consumes partition p (e.g. rehydrate its threads that were mid-turn). */
  onPartitionAcquired?: (partition: number) => void | Promise<void>;
  /** This node no longer consumes partition p and its handlers have finished (e.g. passivate its threads). */
  onPartitionReleased?: (partition: number) => void | Promise<void>;
  /** A message was refused before the handler saw it (malformed subject, wrong partition). */
  onRefused?: (msg: { subject: string; principal?: string; threadId?: string; messageId?: string; error: TroupeError }) => void;
  /** A message failed `maxDeliver` times and was dead-lettered. */
  onDeadLetter?: (msg: IngressMessage, error: TroupeError) => void;
  logger?: Logger;
  /** Stream max age; default 24 h. */
  maxAgeMs?: number;
  /** Default 30 s: a message unacked this long (node stuck) is redelivered. */
  ackWaitMs?: number;
  /** Default 1000 per partition. */
  maxAckPending?: number;
  /** Failed attempts after which a message is terminated; default 10. */
  maxDeliver?: number;
  /** Nak backoff: `base * 2^(attempt-1)`, capped at `max`. Default 250 ms .. 30 s. */
  retryDelayMs?: { base?: number; max?: number };
  /**
   * Replicas of TROUPE_IN, TROUPE_DLQ and the lease bucket (1..5). Created with 1 when absent; given, an
   * existing stream with another count is scaled to it.
   */
  replicas?: number;
  /** How long setup keeps asking a cluster that does not answer yet (a leader election); default 60 s. */
  setupDeadlineMs?: number;
  /**
   * On a voluntary release (rebalance, stop), how long in-flight handlers may run before their signal is
   * aborted. Default 10 s. On a lost lease they are aborted at once.
   */
  releaseTimeoutMs?: number;
}

/**
 * A thread held behind a message that failed: the sequences it sent back to the stream (the failed one,
 * and each later one nak'ed behind it) and has not taken again. It takes them in stream order, and nothing
 * newer meanwhile.
 */
interface Hold {
  back: Set<number>;
  /** When the oldest of them is due back (then: when the hold last moved on); a hold stuck long after it is given up. */
  until: number;
}

/** One consumption run of a partition; a restart makes a new one, and the old one's messages are dropped. */
export interface PartitionRun {
  readonly partition: number;
  readonly abort: AbortController;
  /** Tail of each thread's FIFO chain. */
  readonly chains: Map<string, Promise<void>>;
  /** Every queued or running message, plus pending ack confirmations. */
  readonly inflight: Set<Promise<unknown>>;
  /** Threads held behind a nak'ed message: later messages wait until it, and every one sent back behind it, came back. */
  readonly held: Map<string, Hold>;
  /**
   * Stream sequence up to which the partition's previous consumer had every message acknowledged (its ack
   * floor, read before it was deleted; 0 when it could not be read). See `IngressMessage.ackedBefore`.
   */
  readonly ackedThrough: number;
  messages?: ConsumerMessages;
  active: boolean;
  /**
   * The lease was lost (expired, or another node holds it), not given back: another node may consume the
   * partition now, with a consumer of the same name that would take this run's acks as its own.
   */
  lost?: boolean;
  /** Pulls the server refused since the consumer last delivered a message (see REFUSED_PULLS in consumer-watch.ts). */
  refusedPulls: number;
  /** The server leading the partition's consumer, as its info said at the start or an advisory since (clusters only). */
  leader?: string;
}

export function msToNanos(ms: number): number {
  return ms * 1_000_000;
}

export function errText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** Resolves true when `p` settled within `ms`, false otherwise. */
export async function withTimeout(p: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<false>((res) => (timer = setTimeout(() => res(false), ms)));
  try {
    return await Promise.race([
      p.then(
        () => true as const,
        () => true as const,
      ),
      timeout,
    ]);
  } finally {
    clearTimeout(timer);
  }
}
