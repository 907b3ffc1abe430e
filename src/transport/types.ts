/**
 * The transport seam. Hosts accept a `Transport`, never a NATS connection, so one node or twenty, NATS
 * or in-memory, run the same code. Semantics follow NATS core (subjects with `*`/`>` wildcards, queue
 * groups, request/reply with timeouts and no-responder detection, headers).
 */
import { TroupeError } from '../protocol/errors.js';

export type Headers = Record<string, string>;

export interface InboundMessage {
  readonly subject: string;
  readonly data: Uint8Array;
  readonly headers: Headers;
  /** Reply subject, when the sender made a request. */
  readonly reply?: string;
  /** Answers a request; returns false when there is no reply subject. */
  respond(data: Uint8Array, headers?: Headers): boolean;
}

export interface Subscription {
  readonly subject: string;
  /** Stops delivery at once. */
  unsubscribe(): void;
  /** Stops taking new messages and resolves once the handlers of delivered ones have finished. */
  drain(): Promise<void>;
}

export interface SubscribeOptions {
  /** Queue group: each message goes to one member of the group. */
  queue?: string;
}

export interface RequestOptions {
  timeoutMs: number;
  headers?: Headers;
}

export interface RequestManyOptions extends RequestOptions {
  /** Stop early once this many replies arrived. */
  maxReplies?: number;
}

export type MessageHandler = (msg: InboundMessage) => void | Promise<void>;

export interface Transport {
  /** Human name of the backend, e.g. `nats://127.0.0.1:4222` or `memory`. */
  readonly name: string;
  publish(subject: string, data: Uint8Array, opts?: { headers?: Headers; reply?: string }): void;
  subscribe(subject: string, handler: MessageHandler, opts?: SubscribeOptions): Subscription;
  /** Rejects with TransportError code TIMEOUT or NO_RESPONDERS. */
  request(subject: string, data: Uint8Array, opts: RequestOptions): Promise<InboundMessage>;
  /** Scatter-gather: every reply that arrives within the timeout. */
  requestMany(subject: string, data: Uint8Array, opts: RequestManyOptions): Promise<InboundMessage[]>;
  /** Resolves when everything published so far reached the server (memory: immediately). */
  flush(): Promise<void>;
  /** Drains every subscription, then closes. */
  drain(): Promise<void>;
  close(): Promise<void>;
  readonly closed: boolean;
  /** The largest message the bus takes (NATS: the server's max_payload); unset: LIMITS.payloadBytes. */
  readonly maxPayload?: number;
}

export type TransportErrorCode = 'TIMEOUT' | 'NO_RESPONDERS' | 'CLOSED' | 'CONNECT';

/**
 * A failure of the message bus: a TroupeError with code TRANSPORT_ERROR, saying which (`reason`, also in
 * `details.reason`) and keeping the client's own error as `cause`.
 */
export class TransportError extends TroupeError {
  override readonly name = 'TransportError';
  constructor(
    readonly reason: TransportErrorCode,
    message: string,
    options?: { cause?: unknown },
  ) {
    super('TRANSPORT_ERROR', message, { reason }, options);
  }
}
