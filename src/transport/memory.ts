/**
 * In-process transport with NATS core semantics, for the embedded single-process mode and for tests.
 * Several `MemoryTransport`s sharing one `MemoryBus` behave like several connections to one server, so
 * a test can run "many processes" in one.
 */
import { randomBytes } from 'node:crypto';
import {
  TransportError,
  type Headers,
  type InboundMessage,
  type MessageHandler,
  type RequestManyOptions,
  type RequestOptions,
  type SubscribeOptions,
  type Subscription,
  type Transport,
} from './types.js';

/** Where a handler failure happened: the message subject and the subscription's subject (pattern). */
export interface HandlerErrorContext {
  subject?: string;
  subscription?: string;
}

/** Receives handler exceptions, rejected handler promises and (NATS) asynchronous server errors. */
export type TransportErrorHandler = (err: unknown, context: HandlerErrorContext) => void;

/** Without an `onError`, failures still have to be visible somewhere: a swallowed handler error is a silent outage. */
export const logTransportError: TransportErrorHandler = (err, context) => {
  const where = context.subject ?? context.subscription ?? 'transport';
  console.error(`[troupe transport] error on ${where}:`, err);
};

/**
 * Runs message handlers so that neither a throw nor a rejection escapes into the delivery loop, and
 * remembers the async ones still running: `drain` must wait for them, and neither the bus nor the NATS
 * client does (NATS drain only waits until messages were handed to the callback).
 */
export class InflightHandlers {
  private readonly pending = new Set<Promise<void>>();

  constructor(private readonly report: (err: unknown, subject: string) => void) {}

  private onError(err: unknown, subject: string): void {
    try {
      this.report(err, subject);
    } catch (reportErr) {
      // A faulty error hook must not turn one bad message into a broken delivery loop (or, on NATS, a
      // throw inside the client's protocol parser).
      console.error('[troupe transport] onError threw:', reportErr, 'while reporting:', err);
    }
  }

  run(handler: MessageHandler, msg: InboundMessage): void {
    let result: unknown;
    try {
      result = handler(msg);
    } catch (err) {
      this.onError(err, msg.subject);
      return;
    }
    // A handler typed `=> void` may still return anything at runtime; only promises are tracked.
    if (!(result instanceof Promise)) return;
    const tracked: Promise<void> = result.then(
      () => {
        this.pending.delete(tracked);
      },
      (err: unknown) => {
        this.pending.delete(tracked);
        this.onError(err, msg.subject);
      },
    );
    this.pending.add(tracked);
  }

  /** Resolves once no handler is running, including ones started while waiting. */
  async idle(): Promise<void> {
    while (this.pending.size > 0) await Promise.all(this.pending);
  }
}

// ---------------------------------------------------------------------------------------------------
// Subjects

/** Whitespace anywhere; a token that is a wildcard. Linear: each test is one scan. */
const WHITESPACE = /\s/;
const WILDCARD_TOKEN = /(?:^|\.)[*>](?:\.|$)/;

/** A subscription's subject as tokens; throws on an empty token, whitespace or a `>` before the end. */
function subscriptionTokens(subject: string): string[] {
  const tokens = subject.split('.');
  for (let i = 0; i < tokens.length; i++) {
    const t = tokens[i] ?? '';
    if (t.length === 0 || WHITESPACE.test(t)) throw new Error(`invalid subject "${subject}": empty token or whitespace`);
    if (t === '>' && i !== tokens.length - 1) throw new Error(`invalid subject "${subject}": ">" must be the last token`);
  }
  return tokens;
}

/**
 * The same checks of a subject to publish to, without splitting it (a publish is on every turn's path), and
 * no wildcard: publishing to one is always a bug on our side; rejected rather than delivered oddly.
 */
function checkPublishSubject(subject: string): void {
  if (subject.length === 0 || subject.startsWith('.') || subject.endsWith('.') || subject.includes('..') || WHITESPACE.test(subject)) {
    throw new Error(`invalid subject "${subject}": empty token or whitespace`);
  }
  if (WILDCARD_TOKEN.test(subject)) throw new Error(`invalid subject "${subject}": cannot publish to a wildcard`);
}

/**
 * Whether a subscription's tokens match a (checked) subject, walking the subject's tokens in place: `*` is
 * one token, `>` one or more.
 */
export function subjectMatches(pattern: readonly string[], subject: string): boolean {
  let start = 0;
  for (const p of pattern) {
    // Past the end: the subject has fewer tokens than the pattern.
    if (start > subject.length) return false;
    if (p === '>') return true;
    let end = subject.indexOf('.', start);
    if (end === -1) end = subject.length;
    if (p !== '*' && (p.length !== end - start || !subject.startsWith(p, start))) return false;
    start = end + 1;
  }
  return start > subject.length;
}

// ---------------------------------------------------------------------------------------------------
// Bus

interface BusMessage {
  readonly subject: string;
  readonly data: Uint8Array;
  readonly headers: Headers;
  readonly reply?: string;
}

interface BusSubscriber {
  readonly subject: string;
  readonly tokens: readonly string[];
  readonly queue?: string;
  deliver(msg: BusMessage): void;
}

/** The "server" several MemoryTransports share. */
export class MemoryBus {
  // Literal subjects (thread and agent inboxes, request inboxes) are the common case: a map lookup keeps
  // publish cheap with thousands of them; only wildcard subscriptions are scanned.
  private readonly literal = new Map<string, Set<BusSubscriber>>();
  private readonly wildcard = new Set<BusSubscriber>();
  private readonly nextMember = new Map<string, number>();

  add(sub: BusSubscriber): void {
    if (sub.tokens.some((t) => t === '*' || t === '>')) {
      this.wildcard.add(sub);
      return;
    }
    let set = this.literal.get(sub.subject);
    if (!set) {
      set = new Set();
      this.literal.set(sub.subject, set);
    }
    set.add(sub);
  }

  remove(sub: BusSubscriber): void {
    if (this.wildcard.delete(sub)) return;
    const set = this.literal.get(sub.subject);
    if (set?.delete(sub) && set.size === 0) this.literal.delete(sub.subject);
  }

  /** Hands the message to every plain subscriber and one member per queue group; returns how many got it. */
  publish(msg: BusMessage): number {
    checkPublishSubject(msg.subject);
    // Snapshot first, deliver second: a deliver() may unsubscribe (one-shot request inboxes).
    const matched: BusSubscriber[] = [];
    const exact = this.literal.get(msg.subject);
    if (exact) for (const sub of exact) matched.push(sub);
    for (const sub of this.wildcard) if (subjectMatches(sub.tokens, msg.subject)) matched.push(sub);
    // As in nats-server, a queue group is its name: members subscribed on different matching subjects
    // still form one group.
    let groups: Map<string, BusSubscriber[]> | undefined;
    let receivers = 0;
    for (const sub of matched) {
      if (sub.queue === undefined) {
        sub.deliver(msg);
        receivers++;
        continue;
      }
      groups ??= new Map();
      const members = groups.get(sub.queue);
      if (members) members.push(sub);
      else groups.set(sub.queue, [sub]);
    }
    if (!groups) return receivers;
    for (const [queue, members] of groups) {
      const n = this.nextMember.get(queue) ?? 0;
      this.nextMember.set(queue, n + 1);
      members[n % members.length]?.deliver(msg);
    }
    return receivers + groups.size;
  }
}

// ---------------------------------------------------------------------------------------------------
// Transport

export interface MemoryTransportOptions {
  /** Share one bus between transports to simulate several connections; default: a fresh bus. */
  bus?: MemoryBus;
  onError?: TransportErrorHandler;
}

class MemoryInbound implements InboundMessage {
  constructor(
    private readonly transport: MemoryTransport,
    private readonly msg: BusMessage,
  ) {}

  get subject(): string {
    return this.msg.subject;
  }

  get data(): Uint8Array {
    return this.msg.data;
  }

  get headers(): Headers {
    return this.msg.headers;
  }

  get reply(): string | undefined {
    return this.msg.reply;
  }

  respond(data: Uint8Array, headers?: Headers): boolean {
    if (this.msg.reply === undefined) return false;
    this.transport.publish(this.msg.reply, data, headers ? { headers } : undefined);
    return true;
  }
}

const nextTick = () => new Promise<void>((resolve) => setImmediate(resolve));

class MemorySubscription implements Subscription, BusSubscriber {
  readonly tokens: readonly string[];
  private queued: BusMessage[] = [];
  private scheduled = false;
  private attached = true;
  private dropped = false;
  private draining?: Promise<void>;
  private readonly inflight: InflightHandlers;

  constructor(
    private readonly transport: MemoryTransport,
    private readonly bus: MemoryBus,
    readonly subject: string,
    private readonly handler: MessageHandler,
    readonly queue: string | undefined,
    onError: TransportErrorHandler,
    private readonly onDone: (sub: MemorySubscription) => void,
  ) {
    this.tokens = subscriptionTokens(subject);
    this.inflight = new InflightHandlers((err, msgSubject) => onError(err, { subject: msgSubject, subscription: subject }));
    bus.add(this);
  }

  deliver(msg: BusMessage): void {
    if (!this.attached) return;
    this.queued.push(msg);
    if (!this.scheduled) {
      this.scheduled = true;
      // Never run a handler inside publish (re-entrancy would differ from NATS); setImmediate rather than
      // a microtask so a handler that publishes to itself cannot starve timers (request timeouts) and I/O.
      setImmediate(this.pump);
    }
  }

  private readonly pump = (): void => {
    this.scheduled = false;
    const batch = this.queued;
    this.queued = [];
    for (const msg of batch) {
      if (this.dropped) return;
      // Handlers start in order; async ones overlap, exactly like NATS callback subscriptions.
      this.inflight.run(this.handler, new MemoryInbound(this.transport, msg));
    }
  };

  private detach(): void {
    if (!this.attached) return;
    this.attached = false;
    this.bus.remove(this);
  }

  unsubscribe(): void {
    this.detach();
    this.dropped = true;
    this.queued = [];
    this.onDone(this);
  }

  drain(): Promise<void> {
    this.draining ??= (async () => {
      this.detach();
      // Messages already handed to this subscription still run, like the ones a NATS client has read.
      while (this.scheduled && !this.dropped) await nextTick();
      await this.inflight.idle();
      this.onDone(this);
    })();
    return this.draining;
  }
}

let transportCounter = 0;

export class MemoryTransport implements Transport {
  readonly name = 'memory';
  readonly bus: MemoryBus;
  private state: 'open' | 'draining' | 'closed' = 'open';
  private readonly subs = new Set<MemorySubscription>();
  /** Rejecters of requests still waiting, so close() can fail them instead of leaving them to time out. */
  private readonly waiting = new Set<(err: TransportError) => void>();
  private readonly onError: TransportErrorHandler;
  private readonly inboxPrefix: string;
  private inboxCounter = 0;
  private drained?: Promise<void>;

  constructor(opts: MemoryTransportOptions = {}) {
    this.bus = opts.bus ?? new MemoryBus();
    this.onError = opts.onError ?? logTransportError;
    this.inboxPrefix = `_INBOX.${randomBytes(8).toString('hex')}${(transportCounter++).toString(36)}.`;
  }

  get closed(): boolean {
    return this.state === 'closed';
  }

  private closedError(action: string, subject: string): TransportError {
    return new TransportError('CLOSED', `cannot ${action} ${subject}: the transport is ${this.state === 'closed' ? 'closed' : 'draining'}`);
  }

  publish(subject: string, data: Uint8Array, opts?: { headers?: Headers; reply?: string }): void {
    // Publishing stays allowed while draining: in-flight handlers must be able to answer.
    if (this.state === 'closed') throw this.closedError('publish to', subject);
    this.bus.publish({
      subject,
      // Copies, like a network hop would: a publisher reusing its buffer or headers must not change what
      // subscribers see.
      data: new Uint8Array(data),
      headers: opts?.headers ? { ...opts.headers } : {},
      ...(opts?.reply !== undefined ? { reply: opts.reply } : {}),
    });
  }

  subscribe(subject: string, handler: MessageHandler, opts?: SubscribeOptions): Subscription {
    if (this.state !== 'open') throw this.closedError('subscribe to', subject);
    const sub = new MemorySubscription(this, this.bus, subject, handler, opts?.queue, this.onError, (s) => this.subs.delete(s));
    this.subs.add(sub);
    return sub;
  }

  /** Publishes with a private inbox as reply subject and settles through the three outcomes' callbacks. */
  private gather<T>(
    subject: string,
    data: Uint8Array,
    opts: RequestOptions,
    onReply: (msg: InboundMessage, done: (value: T) => void) => void,
    onTimeout: (done: (value: T) => void, fail: (err: TransportError) => void) => void,
    onNoResponders: (done: (value: T) => void, fail: (err: TransportError) => void) => void,
  ): Promise<T> {
    if (this.state !== 'open') return Promise.reject(this.closedError('send a request to', subject));
    const inbox = `${this.inboxPrefix}${(this.inboxCounter++).toString(36)}`;
    return new Promise<T>((resolve, reject) => {
      let finished = false;
      const finish = () => {
        finished = true;
        clearTimeout(timer);
        this.bus.remove(replies);
        this.waiting.delete(fail);
      };
      const done = (value: T) => {
        if (finished) return;
        finish();
        resolve(value);
      };
      const fail = (err: TransportError) => {
        if (finished) return;
        finish();
        reject(err);
      };
      const replies: BusSubscriber = {
        subject: inbox,
        tokens: [inbox],
        // Through the event loop like every subscription's messages (MemorySubscription.deliver), so a
        // reply never overtakes what its responder published before it on other subjects (an agent's
        // chunks before its answer), as on one NATS connection.
        deliver: (msg) => {
          setImmediate(() => {
            if (!finished) onReply(new MemoryInbound(this, msg), done);
          });
        },
      };
      this.bus.add(replies);
      this.waiting.add(fail);
      const timer = setTimeout(() => onTimeout(done, fail), opts.timeoutMs);
      let receivers: number;
      try {
        receivers = this.bus.publish({ subject, data: new Uint8Array(data), headers: opts.headers ? { ...opts.headers } : {}, reply: inbox });
      } catch (err) {
        finish();
        reject(err);
        return;
      }
      if (receivers === 0) onNoResponders(done, fail);
    });
  }

  request(subject: string, data: Uint8Array, opts: RequestOptions): Promise<InboundMessage> {
    return this.gather<InboundMessage>(
      subject,
      data,
      opts,
      (msg, done) => done(msg),
      (_done, fail) => fail(new TransportError('TIMEOUT', `no reply on ${subject} within ${opts.timeoutMs} ms`)),
      (_done, fail) => fail(new TransportError('NO_RESPONDERS', `no subscriber on ${subject}`)),
    );
  }

  requestMany(subject: string, data: Uint8Array, opts: RequestManyOptions): Promise<InboundMessage[]> {
    const collected: InboundMessage[] = [];
    const max = opts.maxReplies !== undefined && opts.maxReplies > 0 ? opts.maxReplies : Infinity;
    return this.gather<InboundMessage[]>(
      subject,
      data,
      opts,
      (msg, done) => {
        collected.push(msg);
        if (collected.length >= max) done(collected);
      },
      (done) => done(collected),
      // Scatter-gather over nobody is an empty answer, not a failure (e.g. `ps` with no nodes up).
      (done) => done(collected),
    );
  }

  flush(): Promise<void> {
    if (this.state === 'closed') return Promise.reject(this.closedError('flush', 'the connection'));
    return Promise.resolve();
  }

  drain(): Promise<void> {
    if (this.state === 'closed') return Promise.resolve();
    this.drained ??= (async () => {
      this.state = 'draining';
      await Promise.all([...this.subs].map((s) => s.drain()));
      this.shutdown();
    })();
    return this.drained;
  }

  close(): Promise<void> {
    if (this.state !== 'closed') {
      for (const sub of [...this.subs]) sub.unsubscribe();
      this.shutdown();
    }
    return Promise.resolve();
  }

  private shutdown(): void {
    this.state = 'closed';
    for (const fail of [...this.waiting]) fail(new TransportError('CLOSED', 'the transport closed before a reply arrived'));
  }
}
