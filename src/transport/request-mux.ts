/**
 * Request-reply over one wildcard reply subscription (NatsTransport.request).
 *
 * nats.js's own `request` does the same, but makes an `Error` (capturing a stack) for every request it
 * cleans up after its answer came (`RequestOne.cancel`): a third of a raw request-reply's CPU and 6% of an
 * agent hop's (bench/PROFILE.md). Here each waiting request is an entry in a map, settled once.
 *
 * Errors are the client's own types, so code written for the client's `request` (the JetStream client's
 * retries, NatsTransport's error mapping) reads them unchanged: `TimeoutError` after the timeout; a
 * `RequestError` caused by `NoRespondersError` when the server answers 503 (nobody subscribed); a
 * `RequestError` caused by the server's `PermissionViolationError` when it refuses the publish (reported
 * asynchronously, for the oldest request to that subject, as the client does); a `RequestError` when the
 * connection closes while the request waits.
 */
import { createInbox, errors, type Msg, type MsgHdrs, type NatsConnection, type Subscription } from '@nats-io/transport-node';
import { statusOf } from './nats-headers.js';

interface Waiting {
  subject: string;
  resolve: (msg: Msg) => void;
  reject: (err: unknown) => void;
  timer: ReturnType<typeof setTimeout>;
}

export class RequestMux {
  private readonly waiting = new Map<string, Waiting>();
  private replies?: { prefix: string; sub: Subscription };
  private nextToken = 0;

  constructor(
    private readonly nc: NatsConnection,
    private readonly inboxPrefix?: string,
  ) {
    void nc.closed().then(() => this.failAll(() => new errors.RequestError('connection closed')));
  }

  request(subject: string, data: Uint8Array, opts: { timeout: number; headers?: MsgHdrs }): Promise<Msg> {
    const timeout = opts.timeout;
    if (!(timeout >= 1)) return Promise.reject(errors.InvalidArgumentError.format('timeout', 'must be greater than 0'));
    let prefix: string;
    try {
      prefix = this.replySubscription();
    } catch (err) {
      return Promise.reject(err);
    }
    const token = (this.nextToken++).toString(36);
    return new Promise<Msg>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiting.delete(token);
        reject(new errors.TimeoutError());
      }, timeout);
      this.waiting.set(token, { subject, resolve, reject, timer });
      try {
        this.nc.publish(subject, data, { reply: prefix + token, headers: opts.headers });
      } catch (err) {
        clearTimeout(timer);
        this.waiting.delete(token);
        reject(err);
      }
    });
  }

  /** The server refused a publish to `subject`: the oldest request to it fails (the server names no more). */
  refused(subject: string, err: Error): void {
    for (const [token, w] of this.waiting) {
      if (w.subject !== subject) continue;
      this.waiting.delete(token);
      clearTimeout(w.timer);
      w.reject(new errors.RequestError(err.message, { cause: err }));
      return;
    }
  }

  /** The wildcard subscription every reply comes on, made on the first request (and again if refused). */
  private replySubscription(): string {
    if (this.replies && !this.replies.sub.isClosed()) return this.replies.prefix;
    const prefix = `${createInbox(this.inboxPrefix)}.`;
    const sub = this.nc.subscribe(`${prefix}*`, {
      callback: (err, msg) => {
        if (err) {
          // The subscription was refused (this user may not receive below its inbox prefix): every request
          // waiting on it fails, and the next request subscribes again.
          if (this.replies?.sub === sub) this.replies = undefined;
          this.failAll(() => new errors.RequestError(err.message, { cause: err }));
          return;
        }
        const token = msg.subject.slice(prefix.length);
        const w = this.waiting.get(token);
        if (!w) return;
        this.waiting.delete(token);
        clearTimeout(w.timer);
        // Status 503 with no data: nobody was subscribed to the request's subject.
        if (msg.data.length === 0 && statusOf(msg) === 503)
          w.reject(new errors.RequestError('no responders', { cause: new errors.NoRespondersError(w.subject) }));
        else w.resolve(msg);
      },
    });
    this.replies = { prefix, sub };
    return prefix;
  }

  private failAll(error: () => unknown): void {
    for (const w of this.waiting.values()) {
      clearTimeout(w.timer);
      w.reject(error());
    }
    this.waiting.clear();
  }
}
