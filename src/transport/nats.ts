/**
 * The NATS transport: a thin layer over `@nats-io/transport-node` v3 that maps its errors to
 * TransportError codes, its headers to plain records, and makes drain wait for async handlers.
 */
import {
  connect,
  credsAuthenticator,
  errors,
  type Authenticator,
  type Msg,
  type NatsConnection,
  type NodeConnectionOptions,
  type Payload,
  type RequestOptions as ClientRequestOptions,
  type Status,
  type Subscription as NatsSubscriptionHandle,
} from '@nats-io/transport-node';
import type { Logger } from '../observability/logger.js';
import { InflightHandlers, logTransportError, type TransportErrorHandler } from './memory.js';
import { RequestMux } from './request-mux.js';
import { clientHeaders, headersOf, wireHeaders } from './nats-headers.js';
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

const textEncoder = new TextEncoder();

export interface NatsConnectOptions {
  servers: string | string[];
  user?: string;
  pass?: string;
  /** Path of a NATS credentials file (user JWT + seed), as `troupe creds` writes them. */
  creds?: string;
  /** Any nats.js authenticator (e.g. `credsAuthenticator(bytes)`); `creds` is the usual way. */
  authenticator?: Authenticator;
  /**
   * Prefix of this connection's reply inboxes. A client principal P may only subscribe below
   * `_INBOX_P` (src/security/roles.ts), so its connection must use that prefix.
   */
  inboxPrefix?: string;
  /** Client name shown by the server's monitoring (`nats server report connections`). */
  name?: string;
  /** How long the first connect may take; default 5000 ms. */
  timeoutMs?: number;
  /** Handler exceptions and asynchronous server errors (e.g. permission violations); default: `log`, else stderr. */
  onError?: TransportErrorHandler;
  /**
   * Where the connection's life is told (a node's and an agent's log): a lost connection and the one
   * regained, a stale connection, a server going into lame-duck mode (warn); each reconnect attempt
   * (debug). Without it these go untold.
   */
  log?: Logger;
  /** Reconnect attempts after a lost connection; -1 = forever (long-lived nodes and agents). Default 10. */
  maxReconnectAttempts?: number;
  /**
   * TLS: the CA to trust (a server certificate from `troupe creds init --tls`), and a client certificate
   * and key where the server asks for one. Use `tls://` URLs; without this a server that requires TLS is
   * checked against the system's CAs.
   */
  tls?: { caFile?: string; certFile?: string; keyFile?: string };
}

class NatsInbound implements InboundMessage {
  private decodedHeaders?: Headers;

  constructor(
    private readonly transport: NatsTransport,
    private readonly msg: Msg,
  ) {}

  get subject(): string {
    return this.msg.subject;
  }

  get data(): Uint8Array {
    return this.msg.data;
  }

  /** Decoded on first use: most handlers on hot paths read only a header or two, many none. */
  get headers(): Headers {
    this.decodedHeaders ??= headersOf(this.msg);
    return this.decodedHeaders;
  }

  get reply(): string | undefined {
    // The client reports "no reply subject" as an empty string.
    return this.msg.reply || undefined;
  }

  respond(data: Uint8Array, headers?: Headers): boolean {
    const reply = this.msg.reply;
    if (!reply) return false;
    this.transport.publish(reply, data, headers ? { headers } : undefined);
    return true;
  }
}

/** A NATS subscription whose drain also waits for the async handlers it started. */
export class NatsSubscription implements Subscription {
  /**
   * Resolves when the subscription ends; with the error when the server ended it, e.g. a
   * `PermissionViolationError` because this user may not subscribe to the subject.
   */
  readonly closed: Promise<Error | undefined>;
  private readonly sub: NatsSubscriptionHandle;
  private readonly inflight: InflightHandlers;
  private draining?: Promise<void>;

  constructor(
    transport: NatsTransport,
    private readonly nc: NatsConnection,
    readonly subject: string,
    handler: MessageHandler,
    opts: SubscribeOptions | undefined,
    onError: TransportErrorHandler,
    private readonly onDone: (sub: NatsSubscription) => void,
  ) {
    this.inflight = new InflightHandlers((err, msgSubject) => onError(err, { subject: msgSubject, subscription: subject }));
    this.sub = nc.subscribe(subject, {
      ...(opts?.queue !== undefined ? { queue: opts.queue } : {}),
      callback: (err, msg) => {
        // The client calls back with an error (and an empty msg) when the server refuses the
        // subscription; the subscription is closed right after.
        if (err) {
          try {
            onError(err, { subscription: subject });
          } catch (hookErr) {
            console.error('[troupe transport] onError threw:', hookErr, 'while reporting:', err);
          }
          return;
        }
        this.inflight.run(handler, new NatsInbound(transport, msg));
      },
    });
    this.closed = this.sub.closed.then((err) => {
      this.onDone(this);
      return err instanceof Error ? err : undefined;
    });
  }

  unsubscribe(): void {
    // The client drops the subscription from its table at once, so nothing already read is delivered.
    if (!this.sub.isClosed() && !this.nc.isClosed()) this.sub.unsubscribe();
    this.onDone(this);
  }

  drain(): Promise<void> {
    this.draining ??= (async () => {
      if (!this.sub.isClosed() && !this.nc.isClosed()) {
        // Sends UNSUB and resolves after a PING/PONG: everything the server routed to us before the
        // UNSUB has been handed to the callback by then. It does not wait for the callbacks' promises.
        await this.sub.drain().catch(() => undefined);
      }
      await this.inflight.idle();
      this.onDone(this);
    })();
    return this.draining;
  }
}

/**
 * A request nothing took: no subscriber on its subject (for a JetStream subject: no stream, or no leader yet).
 * A single request rejects with a RequestError whose cause is the NoRespondersError (the client's own and
 * the reply multiplexer's alike); requestMany's iterator throws the NoRespondersError itself.
 */
export function isNoResponders(err: unknown): boolean {
  return err instanceof errors.NoRespondersError || (err instanceof errors.RequestError && err.isNoResponders());
}

/**
 * One line for a status of the connection worth an operator's notice. A disconnect is followed by
 * reconnect attempts (each a `reconnecting`, at debug) until `reconnect` or the connection's close.
 */
function logConnectionStatus(log: Logger, status: Status): void {
  switch (status.type) {
    case 'disconnect':
      log.warn({ server: status.server }, 'lost the connection to NATS; reconnecting');
      return;
    case 'reconnect':
      log.warn({ server: status.server }, 'reconnected to NATS');
      return;
    case 'reconnecting':
      log.debug('trying to reconnect to NATS');
      return;
    case 'staleConnection':
      log.warn('NATS stopped answering pings: the connection is stale; reconnecting');
      return;
    case 'ldm':
      log.warn({ server: status.server }, 'the NATS server is going into lame-duck mode: the client moves to another server of the cluster');
      return;
    default:
      return;
  }
}

export class NatsTransport implements Transport {
  readonly name: string;
  private state: 'open' | 'draining' | 'closed' = 'open';
  private readonly subs = new Set<NatsSubscription>();
  private drained?: Promise<void>;
  /**
   * Every request of this transport goes through one reply multiplexer: the client's own makes an Error
   * per answered request (src/transport/request-mux.ts).
   */
  private readonly mux: RequestMux;
  #jetstreamConnection?: NatsConnection;
  /** What the client's status stream last said of the connection (`connected`). */
  #connected = true;

  private constructor(
    /** The raw client connection, for JetStream / KV and anything the Transport seam does not cover. */
    readonly connection: NatsConnection,
    name: string,
    private readonly onError: TransportErrorHandler,
    inboxPrefix?: string,
    private readonly log?: Logger,
  ) {
    this.name = name;
    this.mux = new RequestMux(connection, inboxPrefix);
    void this.watchStatus();
  }

  /**
   * The connection for a JetStream or KV client (`new Kvm(t.jetstreamConnection)`): the same connection,
   * whose `request` — a KV write's compare-and-set, a stream publish, a JetStream API call — goes through this
   * transport's reply multiplexer, with the client's error types, instead of making an Error per answer.
   */
  get maxPayload(): number | undefined {
    return this.connection.info?.max_payload;
  }

  get jetstreamConnection(): NatsConnection {
    if (this.#jetstreamConnection) return this.#jetstreamConnection;
    const nc = this.connection;
    const request = (subject: string, data?: Payload, opts?: ClientRequestOptions): Promise<Msg> =>
      opts?.noMux || opts?.reply
        ? nc.request(subject, data, opts)
        : this.mux.request(subject, typeof data === 'string' ? textEncoder.encode(data) : (data ?? new Uint8Array(0)), {
            timeout: opts?.timeout ?? 1_000,
            ...(opts?.headers ? { headers: opts.headers } : {}),
          });
    // The connection's other methods, bound to it once (a JetStream client calls them per publish).
    const bound = new Map<PropertyKey, unknown>([['request', request]]);
    this.#jetstreamConnection = new Proxy(nc, {
      get(target, prop) {
        if (bound.has(prop)) return bound.get(prop);
        const value: unknown = Reflect.get(target, prop, target);
        if (typeof value !== 'function') return value;
        const method = (value as (...args: unknown[]) => unknown).bind(target);
        bound.set(prop, method);
        return method;
      },
    });
    return this.#jetstreamConnection;
  }

  static async connect(opts: NatsConnectOptions): Promise<NatsTransport> {
    const servers = Array.isArray(opts.servers) ? opts.servers : [opts.servers];
    const url = servers.join(',');
    const options: NodeConnectionOptions = {
      servers,
      timeout: opts.timeoutMs ?? 5_000,
      // Skips capturing a stack per request (measured: ~60% more pipelined request throughput). Errors
      // then carry the client's internal stack rather than the caller's.
      noAsyncTraces: true,
    };
    if (opts.user !== undefined) options.user = opts.user;
    if (opts.pass !== undefined) options.pass = opts.pass;
    if (opts.authenticator !== undefined) options.authenticator = opts.authenticator;
    if (opts.creds !== undefined) {
      const { readFileSync } = await import('node:fs');
      options.authenticator = credsAuthenticator(readFileSync(opts.creds));
    }
    if (opts.name !== undefined) options.name = opts.name;
    if (opts.inboxPrefix !== undefined) options.inboxPrefix = opts.inboxPrefix;
    if (opts.maxReconnectAttempts !== undefined) options.maxReconnectAttempts = opts.maxReconnectAttempts;
    if (opts.tls) {
      const { caFile, certFile, keyFile } = opts.tls;
      options.tls = { ...(caFile ? { caFile } : {}), ...(certFile ? { certFile } : {}), ...(keyFile ? { keyFile } : {}) };
    }
    let nc: NatsConnection;
    try {
      nc = await connect(options);
    } catch (err) {
      const cause = err instanceof Error ? err.message : String(err);
      // A server that requires TLS, and a certificate this client does not trust, fail before any NATS.
      const tlsFailure = /certificate|\bTLS\b|\bSSL\b/i.test(cause) || (opts.tls !== undefined && /doesn't exist/.test(cause));
      const e =
        err instanceof errors.AuthorizationError
          ? new TransportError(
              'CONNECT',
              `NATS at ${url} refused ${opts.creds ? `the credentials in ${opts.creds}` : `user "${opts.user ?? '(none)'}"`}: ${cause}`,
              { cause: err },
            )
          : tlsFailure
            ? new TransportError(
                'CONNECT',
                `TLS with NATS at ${url} failed (${cause}): trust the server's CA with --tls-ca <file> (\`troupe creds init --tls\` writes <dir>/tls/ca.pem)`,
                { cause: err },
              )
            : new TransportError('CONNECT', `no NATS at ${url}: start one with \`troupe creds init && nats-server -c .troupe/server.conf\` (${cause})`, {
                cause: err,
              });
      throw e;
    }
    // Lines name the connection as the server's monitoring does (its client name).
    const log = opts.log?.child({ connection: opts.name ?? url });
    const onError: TransportErrorHandler = opts.onError ?? (log ? (err, context) => log.error({ ...context, err }, 'NATS transport error') : logTransportError);
    return new NatsTransport(nc, url, onError, opts.inboxPrefix, log);
  }

  /**
   * The client's status stream. Errors the server sends asynchronously (-ERR) only surface here; a refused
   * publish is otherwise silent (refused subscriptions are left out: their subscription reports them).
   * The connection's life goes to `log`, when there is one.
   */
  private async watchStatus(): Promise<void> {
    for await (const status of this.connection.status()) {
      if (status.type !== 'error') {
        if (status.type === 'disconnect' || status.type === 'staleConnection') this.#connected = false;
        else if (status.type === 'reconnect') this.#connected = true;
        if (this.log) logConnectionStatus(this.log, status);
        continue;
      }
      const err = status.error;
      // A refused request fails at once (the oldest one to that subject: the server names no more).
      if (err instanceof errors.PermissionViolationError && err.operation === 'publish') this.mux.refused(err.subject, err);
      if (err instanceof errors.PermissionViolationError && err.operation === 'subscription') continue;
      try {
        this.onError(err, err instanceof errors.PermissionViolationError ? { subject: err.subject } : {});
      } catch (hookErr) {
        console.error('[troupe transport] onError threw:', hookErr, 'while reporting:', err);
      }
    }
  }

  get closed(): boolean {
    return this.state === 'closed' || this.connection.isClosed();
  }

  /** False from a lost connection (or a stale one) until the client is back on a server; and once closed. */
  get connected(): boolean {
    return this.#connected && !this.closed;
  }

  /** The client's errors, as TransportErrors where one of our codes fits; anything else unchanged. */
  private mapError(err: unknown, subject: string, timeoutMs?: number): unknown {
    if (err instanceof TransportError) return err;
    if (err instanceof errors.TimeoutError || (err instanceof errors.RequestError && err.cause instanceof errors.TimeoutError)) {
      return new TransportError('TIMEOUT', `no reply on ${subject} within ${timeoutMs ?? '?'} ms`, { cause: err });
    }
    if (isNoResponders(err)) {
      return new TransportError('NO_RESPONDERS', `no subscriber on ${subject}`, { cause: err });
    }
    if (err instanceof errors.ClosedConnectionError || err instanceof errors.DrainingConnectionError || this.connection.isClosed()) {
      return new TransportError('CLOSED', `${subject}: the NATS connection is closed`, { cause: err });
    }
    return err;
  }

  private closedError(action: string, subject: string): TransportError {
    return new TransportError('CLOSED', `cannot ${action} ${subject}: the transport is ${this.state === 'closed' ? 'closed' : 'draining'}`);
  }

  publish(subject: string, data: Uint8Array, opts?: { headers?: Headers; reply?: string }): void {
    // Allowed while draining: in-flight handlers must be able to answer.
    if (this.state === 'closed') throw this.closedError('publish to', subject);
    try {
      if (opts) {
        const headers = wireHeaders(opts.headers);
        this.connection.publish(subject, data, {
          ...(headers ? { headers } : {}),
          ...(opts.reply !== undefined ? { reply: opts.reply } : {}),
        });
      } else {
        this.connection.publish(subject, data);
      }
    } catch (err) {
      throw this.mapError(err, subject);
    }
  }

  subscribe(subject: string, handler: MessageHandler, opts?: SubscribeOptions): Subscription {
    if (this.state !== 'open') throw this.closedError('subscribe to', subject);
    try {
      const sub = new NatsSubscription(this, this.connection, subject, handler, opts, this.onError, (s) => this.subs.delete(s));
      this.subs.add(sub);
      return sub;
    } catch (err) {
      throw this.mapError(err, subject);
    }
  }

  async request(subject: string, data: Uint8Array, opts: RequestOptions): Promise<InboundMessage> {
    if (this.state !== 'open') throw this.closedError('send a request to', subject);
    const headers = wireHeaders(opts.headers);
    try {
      const msg = await this.mux.request(subject, data, { timeout: opts.timeoutMs, headers });
      return new NatsInbound(this, msg);
    } catch (err) {
      throw this.mapError(err, subject, opts.timeoutMs);
    }
  }

  async requestMany(subject: string, data: Uint8Array, opts: RequestManyOptions): Promise<InboundMessage[]> {
    if (this.state !== 'open') throw this.closedError('send a request to', subject);
    const headers = clientHeaders(opts.headers);
    const max = opts.maxReplies !== undefined && opts.maxReplies > 0 ? opts.maxReplies : undefined;
    const replies: InboundMessage[] = [];
    try {
      const iter = await this.connection.requestMany(subject, data, {
        maxWait: opts.timeoutMs,
        // "count" still ends at maxWait; "timer" ignores maxMessages.
        strategy: max !== undefined ? 'count' : 'timer',
        ...(max !== undefined ? { maxMessages: max } : {}),
        ...(headers ? { headers } : {}),
      });
      for await (const msg of iter) replies.push(new NatsInbound(this, msg));
    } catch (err) {
      const mapped = this.mapError(err, subject, opts.timeoutMs);
      // Scatter-gather over nobody is an empty answer, not a failure (e.g. `ps` with no nodes up).
      if (mapped instanceof TransportError && mapped.reason === 'NO_RESPONDERS') return replies;
      throw mapped;
    }
    return replies;
  }

  async flush(): Promise<void> {
    if (this.state === 'closed') throw this.closedError('flush', 'the connection');
    try {
      await this.connection.flush();
    } catch (err) {
      throw this.mapError(err, 'flush');
    }
  }

  drain(): Promise<void> {
    if (this.state === 'closed') return Promise.resolve();
    this.drained ??= (async () => {
      this.state = 'draining';
      // Ours first, so handlers can still respond over the open connection; the client's drain then
      // flushes what they published and closes.
      try {
        await Promise.all([...this.subs].map((s) => s.drain()));
        if (!this.connection.isClosed()) {
          await this.connection.drain().catch((err: unknown) => {
            if (!this.connection.isClosed()) throw err;
          });
        }
      } finally {
        this.state = 'closed';
      }
    })();
    return this.drained;
  }

  async close(): Promise<void> {
    this.state = 'closed';
    this.subs.clear();
    if (!this.connection.isClosed()) await this.connection.close();
  }
}
