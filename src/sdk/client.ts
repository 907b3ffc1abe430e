/**
 * Talking to the mesh as a user (send into a thread and follow its stream, read or cancel your threads)
 * and as an operator (ps, inspect, threads, dead letters). The CLI, the gateway, the benchmark and the
 * tests use this; so can any app.
 *
 * A client is a principal: the broker lets it publish only under `in.<principal>` and `req.<principal>`
 * and receive only `out.<principal>` and its own inbox (src/security/roles.ts), so what it may touch is
 * enforced by NATS, not by this class. A principal that fronts many users (the gateway) names the user
 * per call; threads then belong to `<principal>/<user>` and one user cannot see another's.
 */
import { SpanKind, endSpan, injectTraceparent, startSpan, tracing, type Span } from '../observability/tracing.js';
import { v7 as uuidv7 } from 'uuid';
import { z } from 'zod';
import {
  CTL,
  DeleteReplySchema,
  ErrorReplySchema,
  HEADERS,
  InspectReplySchema,
  META,
  OkReplySchema,
  answerIn,
  PsReplySchema,
  RegistryInstancesSchema,
  TaskReplySchema,
  TaskListReplySchema,
  type ClientListRequest,
  type TaskListReply,
  ThreadAckSchema,
  ThreadEventSchema,
  TroupeError,
  checkId,
  decode,
  encodeJson,
  messageText,
  inboundDedupId,
  type ActorInfo,
  type CtlReply,
  type CtlRequest,
  type CtlVerb,
  type ErrorBody,
  type InspectReply,
  type Message,
  type PsReply,
  type RouteStep,
  type Task,
  type TaskStatusUpdateEvent,
  type ThreadEvent,
  type ClientCheckpointVerb,
} from '../protocol/index.js';
import { CLIENT_ROUTING_URI } from '../protocol/routing.js';
import { subjects } from '../transport/subjects.js';
import { TransportError, type InboundMessage, type Subscription, type Transport } from '../transport/types.js';

export interface ClientOptions {
  tenant?: string;
  /**
   * Who this connection is on the mesh (its NATS user name). Default `local`, the principal of the
   * in-process mesh. On NATS the broker refuses anything outside this principal's subjects.
   */
  principal?: string;
}

export interface SendOptions {
  threadId?: string;
  /** The end user this call acts for (a principal serving many users, such as the gateway). */
  user?: string;
  /** Address an agent directly instead of the entry agent or the router. */
  to?: string;
  /**
   * The output subject is plain pub/sub: an answer published while this connection was reconnecting is
   * missed. After this many ms without a final answer (and as often again), the stored thread is asked
   * whether it already answered this message. Default 2000; 0 turns it off.
   */
  recheckMs?: number;
  /**
   * After this many ms without an answer (stored or published), the message is sent again as a resend
   * (HEADERS.resend), then after twice as long, and so on: a thread that has the message only acknowledges
   * the copy; one that never had it (a replicated stream that lost an acknowledged message in a failover)
   * takes it then — late rather than never. Default 10000; 0 turns it off.
   */
  resendAfterMs?: number;
  /**
   * How long a send keeps trying while nothing takes the message (no responders: a replicated stream
   * electing its leader after a server died, or a node restarting). Default 3000; 0 fails at once. A
   * message that is not acknowledged in time is sent again until `timeoutMs` (JetStream keeps one copy).
   */
  unavailableRetryMs?: number;
  /** Called for every event on the thread's output, as it arrives (chunks, route steps, final). */
  onEvent?: (event: ThreadEvent) => void;
  timeoutMs?: number;
  metadata?: Record<string, unknown>;
  messageId?: string;
}

export interface SendResult {
  threadId: string;
  final: TaskStatusUpdateEvent;
  events: ThreadEvent[];
  route: RouteStep[];
  text: string;
  error?: ErrorBody;
  /** The message was a duplicate of one the thread already had; `final` is its original answer. */
  duplicate?: boolean;
  /** How many times it was sent again for want of an answer (SendOptions.resendAfterMs). */
  resent?: number;
}

/** JetStream's answer when the thread's inbound stream took the message (durable mode). */
const PubAckSchema = z.object({ stream: z.string(), seq: z.number(), duplicate: z.boolean().optional() });
const JsErrorSchema = z.object({ error: z.object({ code: z.number(), description: z.string() }) });
const AckOrError = z.union([ThreadAckSchema, ErrorReplySchema, PubAckSchema, JsErrorSchema]);
const OkOrError = z.union([OkReplySchema, ErrorReplySchema]);
/** A node's control reply may list many threads; it comes from a node (only nodes may answer on ctl). */
const MAX_CTL_REPLY_BYTES = 64 * 1024 * 1024;

function isErrorReply(reply: unknown): reply is z.infer<typeof ErrorReplySchema> {
  return typeof reply === 'object' && reply !== null && (reply as { kind?: unknown }).kind === 'error';
}
const TaskOrError = z.union([TaskReplySchema, ErrorReplySchema]);
const TaskListOrError = z.union([TaskListReplySchema, ErrorReplySchema]);
/** What an agent process lists when it answers a hello: its instance, and the model loops it runs. */
const AGENT_ACTOR_KINDS: ReadonlySet<ActorInfo['kind']> = new Set(['agent', 'llm-agent']);
const instanceKey = (agentId: string, instanceId: string) => `${agentId}\n${instanceId}`;

/** The text of a message (its text parts, one per line): `messageText` of the protocol, under the SDK's name. */
export const textOfMessage = messageText;

/** A user message with a time-ordered id (UUID v7: ids sort in creation order). */
export function userMessage(text: string, opts: { messageId?: string; metadata?: Record<string, unknown> } = {}): Message {
  return {
    kind: 'message',
    role: 'user',
    messageId: opts.messageId ?? uuidv7(),
    parts: [{ kind: 'text', text }],
    ...(opts.metadata ? { metadata: opts.metadata } : {}),
  };
}

/** A new thread id: time-ordered, so the thread bucket lists threads in the order they were started. */
function newThreadId(): string {
  return `t-${uuidv7()}`;
}

export class TroupeClient {
  readonly tenant: string;
  readonly principal: string;

  constructor(
    readonly transport: Transport,
    opts: string | ClientOptions = {},
  ) {
    const o = typeof opts === 'string' ? { tenant: opts } : opts;
    this.tenant = checkId('tenant', o.tenant ?? 'demo');
    this.principal = checkId('principal', o.principal ?? 'local');
  }

  /**
   * Sends a user message into a thread and resolves with the turn's final status. With tracing on, the
   * message starts a trace (or continues the active one): its `traceparent` header carries it to the mesh.
   */
  async send(input: string | Message, opts: SendOptions = {}): Promise<SendResult> {
    if (!tracing.on) return this.sendTraced(input, opts);
    const span = startSpan('troupe.send', { kind: SpanKind.CLIENT, attributes: { 'troupe.tenant': this.tenant, 'troupe.principal': this.principal } });
    try {
      const result = await this.sendTraced(input, opts, span);
      span.setAttributes({ 'troupe.thread': result.threadId, 'troupe.outcome': result.final.status.state });
      endSpan(span, result.error);
      return result;
    } catch (err) {
      endSpan(span, TroupeError.from(err, 'WORKFLOW_ERROR'));
      throw err;
    }
  }

  private async sendTraced(input: string | Message, opts: SendOptions, span?: Span): Promise<SendResult> {
    const threadId = checkId('thread', opts.threadId ?? newThreadId());
    const user = opts.user !== undefined ? checkId('user', opts.user) : undefined;
    const metadata = opts.to ? { ...opts.metadata, [CLIENT_ROUTING_URI]: { recipient: checkId('agent', opts.to) } } : opts.metadata;
    const message =
      typeof input === 'string' ? userMessage(input, { ...(opts.messageId ? { messageId: opts.messageId } : {}), ...(metadata ? { metadata } : {}) }) : input;
    checkId('message', message.messageId);
    const timeoutMs = opts.timeoutMs ?? 60_000;
    const events: ThreadEvent[] = [];
    let settle!: (e: TaskStatusUpdateEvent) => void;
    let fail!: (e: Error) => void;
    const finalEvent = new Promise<TaskStatusUpdateEvent>((resolve, reject) => {
      settle = resolve;
      fail = reject;
    });
    const sub = this.follow(threadId, (event) => {
      events.push(event);
      opts.onEvent?.(event);
      // Several sends may be in flight on one thread: a final answer names the message it answers.
      const inReplyTo = event.kind === 'status-update' ? event.status.message?.metadata?.[META.inReplyTo] : undefined;
      if (event.kind === 'status-update' && event.final && (inReplyTo === undefined || inReplyTo === message.messageId)) settle(event);
    });
    // Handled here so a timeout before anything awaits the answer is not an unhandled rejection.
    finalEvent.catch(() => undefined);
    const timer = setTimeout(() => fail(new TroupeError('AGENT_TIMEOUT', `no final answer on thread ${threadId} within ${timeoutMs} ms`)), timeoutMs);
    let duplicate = false;
    /** Set once the send is over (answered, failed or timed out): no more copies. */
    let over = false;
    let resent = 0;
    let resendTimer: ReturnType<typeof setTimeout> | undefined;
    const subject = subjects.threadIn(this.tenant, this.principal, threadId);
    const body = encodeJson(message);
    const headers = {
      // JetStream de-duplicates on this header, scoped to the owner and the thread: a re-sent message is
      // stored once, another owner's message under the same messageId is another message.
      [HEADERS.msgId]: inboundDedupId({ principal: this.principal, user }, threadId, message.messageId),
      ...(user ? { [HEADERS.user]: user } : {}),
      ...(span ? injectTraceparent({}, span) : {}),
    };
    /**
     * No answer yet (published, or stored: `recheck` reads the store meanwhile): a copy the thread takes
     * only if it never had the message.
     */
    const resendAfter = (delayMs: number) => {
      resendTimer = setTimeout(() => {
        if (over || this.transport.closed) return;
        resent++;
        const copy = { ...headers, [HEADERS.msgId]: `${headers[HEADERS.msgId]}#${resent}`, [HEADERS.resend]: String(resent) };
        void this.transport
          .request(subject, body, { timeoutMs: 10_000, headers: copy })
          .catch(() => undefined)
          .then(() => {
            if (!over) resendAfter(delayMs * 2);
          });
      }, delayMs);
    };
    try {
      // No flush before the publish: a connection's SUB reaches the server before its later PUB, so the
      // thread's output subscription is in place before the message can be taken (a round trip per send saved).
      const res = await this.publishUntilTaken(subject, body, headers, { timeoutMs, unavailableRetryMs: opts.unavailableRetryMs ?? 3_000 });
      const ack = decode(AckOrError, res, 'thread acknowledgement');
      if ('kind' in ack && ack.kind === 'error') throw TroupeError.fromBody(ack.error);
      if ('error' in ack && !('kind' in ack)) {
        throw new TroupeError('TRANSPORT_ERROR', `the thread stream refused the message: ${ack.error.description} (is a node running with durable ingress?)`);
      }
      duplicate = 'duplicate' in ack && ack.duplicate === true;
      const recheckMs = opts.recheckMs ?? 2_000;
      const recheck = () => void this.storedAnswer(threadId, message.messageId, user).then((e) => e && settle(e));
      // A duplicate's original answer may be stored already: look at once.
      if (duplicate) recheck();
      const interval = recheckMs > 0 ? setInterval(recheck, recheckMs) : undefined;
      const resendAfterMs = opts.resendAfterMs ?? 10_000;
      if (resendAfterMs > 0) resendAfter(resendAfterMs);
      let final: TaskStatusUpdateEvent;
      try {
        final = await finalEvent;
      } finally {
        if (interval) clearInterval(interval);
      }
      // In durable mode a refused message comes back on the thread's output, not as the reply.
      const refused = final.status.state === 'rejected' ? (final.metadata?.[META.error] as ErrorBody | undefined) : undefined;
      if (refused) throw TroupeError.fromBody(refused);
      // The final answer carries the whole route; the streamed steps are the fallback.
      const finalRoute = final.status.message?.metadata?.[META.route];
      const route = Array.isArray(finalRoute)
        ? (finalRoute as RouteStep[])
        : events.flatMap((e) => {
            const step = e.metadata?.[META.route];
            return step && typeof step === 'object' && !Array.isArray(step) ? [step as RouteStep] : [];
          });
      const error = (final.metadata?.[META.error] ?? final.status.message?.metadata?.[META.error]) as ErrorBody | undefined;
      return {
        threadId,
        final,
        events,
        route,
        text: textOfMessage(final.status.message),
        ...(error ? { error } : {}),
        ...(duplicate ? { duplicate } : {}),
        ...(resent ? { resent } : {}),
      };
    } finally {
      over = true;
      clearTimeout(resendTimer);
      clearTimeout(timer);
      sub.unsubscribe();
    }
  }

  /** Every event of one of this principal's threads, as it comes, until unsubscribed. */
  follow(threadId: string, onEvent: (event: ThreadEvent) => void): Subscription {
    return this.transport.subscribe(subjects.threadOut(this.tenant, this.principal, checkId('thread', threadId)), (msg) => {
      let event: ThreadEvent;
      try {
        event = decode(ThreadEventSchema, msg.data, 'thread event');
      } catch {
        return;
      }
      onEvent(event);
    });
  }

  /** The stored Task of one of your threads. THREAD_NOT_FOUND when it does not exist or is not yours. */
  async task(threadId: string, opts: { user?: string; historyLength?: number } = {}): Promise<Task> {
    const data = await this.requestOrExplain(
      subjects.clientRequest(this.tenant, this.principal, 'task'),
      encodeJson({ threadId: checkId('thread', threadId), ...(opts.historyLength !== undefined ? { historyLength: opts.historyLength } : {}) }),
      10_000,
      opts.user !== undefined ? { [HEADERS.user]: checkId('user', opts.user) } : undefined,
    );
    const reply = decode(TaskOrError, data, 'task reply');
    if (reply.kind === 'error') throw TroupeError.fromBody(reply.error);
    return reply.task;
  }

  /**
   * Your threads (with `user`: that user's), newest update first, a page at a time: pass the reply's
   * `nextPageToken` for the next page ('' when there is none).
   */
  async list(opts: ClientListRequest & { user?: string } = {}): Promise<Omit<TaskListReply, 'kind'>> {
    const { user, ...req } = opts;
    const data = await this.requestOrExplain(
      subjects.clientRequest(this.tenant, this.principal, 'list'),
      encodeJson(req),
      15_000,
      user !== undefined ? { [HEADERS.user]: checkId('user', user) } : undefined,
    );
    const reply = decode(TaskListOrError, data, 'list reply');
    if (reply.kind === 'error') throw TroupeError.fromBody(reply.error);
    const { kind: _kind, ...page } = reply;
    return page;
  }

  /** Whether one of your threads exists (false for an id never used, expired, or someone else's). */
  async exists(threadId: string, opts: { user?: string } = {}): Promise<boolean> {
    try {
      await this.task(threadId, { ...opts, historyLength: 0 });
      return true;
    } catch (err) {
      if (err instanceof TroupeError && err.code === 'THREAD_NOT_FOUND') return false;
      throw err;
    }
  }

  /** Cancels one of your threads; returns its state after. */
  async cancel(threadId: string, reason?: string, opts: { user?: string } = {}): Promise<string> {
    const data = await this.requestOrExplain(
      subjects.clientRequest(this.tenant, this.principal, 'cancel'),
      encodeJson({ threadId: checkId('thread', threadId), ...(reason ? { reason } : {}) }),
      10_000,
      opts.user !== undefined ? { [HEADERS.user]: checkId('user', opts.user) } : undefined,
    );
    const reply = decode(OkOrError, data, 'cancel reply');
    if (reply.kind === 'error') throw TroupeError.fromBody(reply.error);
    return reply.state;
  }

  /** The stored final status when the thread answered `messageId` already (a missed publish), else undefined. */
  private async storedAnswer(threadId: string, messageId: string, user: string | undefined): Promise<TaskStatusUpdateEvent | undefined> {
    try {
      const task = await this.task(threadId, user !== undefined ? { user } : {});
      const answer = answerIn(task.history ?? [], messageId, task.status.state === 'working');
      if (!answer) return undefined;
      const error = answer.metadata?.[META.error];
      return {
        kind: 'status-update',
        taskId: task.id,
        contextId: task.contextId,
        status: { ...task.status, message: answer },
        final: true,
        ...(error ? { metadata: { [META.error]: error } } : {}),
      };
    } catch {
      return undefined;
    }
  }

  // ---- operator views (need operator credentials on a secured mesh) --------------------------------

  /**
   * Every live actor on every node, and every agent instance, that answers within the window. Only nodes
   * can answer on ctl (the broker's rule). Any agent can answer a hello, so an agent's reply counts only
   * for an instance some node's registry has from the agent's own announces (`registry.<A>`, which only A
   * may publish): its agent actor, and the actors it runs under it. A third party answering hello in
   * another agent's name adds nothing.
   */
  async ps(windowMs = 500): Promise<PsReply[]> {
    const [nodes, agents] = await Promise.all([
      this.transport.requestMany(subjects.ctl(this.tenant, 'ps'), new Uint8Array(), { timeoutMs: windowMs }),
      this.transport.requestMany(subjects.hello(this.tenant), new Uint8Array(), { timeoutMs: windowMs }),
    ]);
    const parse = (r: InboundMessage): PsReply[] => {
      try {
        return [decode(PsReplySchema, r.data, 'ps reply')];
      } catch {
        return [];
      }
    };
    const nodeReplies = nodes.flatMap(parse);
    const announced = new Set<string>();
    for (const reply of nodeReplies) {
      for (const registry of reply.actors.filter((a) => a.kind === 'registry')) {
        const listed = RegistryInstancesSchema.safeParse(registry.detail?.['instances']);
        if (listed.success) for (const [agentId, instanceId] of listed.data) announced.add(instanceKey(agentId, instanceId));
      }
    }
    const counted = new Set<string>();
    const agentReplies = agents.flatMap(parse).flatMap((reply) => {
      const self = reply.actors.find((a) => a.kind === 'agent');
      const key = self && instanceKey(self.id, String(self.detail?.['instance']));
      // One reply per announced instance: a copy of a live instance's answer counts once.
      if (!self || !key || !announced.has(key) || counted.has(key)) return [];
      counted.add(key);
      const actors = reply.actors.filter((a) => a === self || (AGENT_ACTOR_KINDS.has(a.kind) && a.kind !== 'agent' && a.parent === self.id));
      return [{ ...reply, actors }];
    });
    return [...nodeReplies, ...agentReplies];
  }

  async inspect(actorId: string, windowMs = 500): Promise<InspectReply | undefined> {
    const replies = await this.transport.requestMany(subjects.ctl(this.tenant, 'inspect'), encodeJson({ actorId }), { timeoutMs: windowMs });
    for (const r of replies) {
      try {
        const parsed = decode(InspectReplySchema, r.data, 'inspect reply');
        if (parsed.found) return parsed;
      } catch {
        // not an inspect reply (an error from a node that does not hold it)
      }
    }
    return undefined;
  }

  /** Operator cancel of any thread of the tenant. */
  async cancelAny(threadId: string, reason?: string): Promise<string> {
    return this.threadCtl('cancel', threadId, reason);
  }

  async rehydrate(threadId: string): Promise<string> {
    return this.threadCtl('rehydrate', threadId);
  }

  /**
   * A checkpoint request about one of your threads (with `user`: that user's): `history` lists its
   * checkpoints, `checkpoint` reads one whole, `fork` makes a new thread (yours) from one. THREAD_NOT_FOUND
   * when the thread does not exist or is not yours; CHECKPOINT_NOT_FOUND when it does not keep that one.
   */
  async checkpoints<V extends ClientCheckpointVerb>(verb: V, body: CtlRequest<V>, opts: { user?: string } = {}): Promise<CtlReply<V>> {
    checkId('thread', body.threadId);
    const data = await this.requestOrExplain(
      subjects.clientRequest(this.tenant, this.principal, verb),
      encodeJson(body),
      10_000,
      opts.user !== undefined ? { [HEADERS.user]: checkId('user', opts.user) } : undefined,
    );
    const reply = decode(z.union([CTL[verb].reply as unknown as z.ZodType<CtlReply<V>>, ErrorReplySchema]), data, `${verb} reply`, MAX_CTL_REPLY_BYTES);
    if (isErrorReply(reply)) throw TroupeError.fromBody(reply.error);
    return reply;
  }

  /**
   * Erases a thread for good (operators): its record, its actor wherever it lives, its dead letters. A turn
   * in flight refuses it (THREAD_BUSY). A later message with the same id starts a new thread.
   */
  async deleteThread(threadId: string): Promise<{ node: string; deadLetters: number }> {
    checkId('thread', threadId);
    const data = await this.requestOrExplain(subjects.ctl(this.tenant, 'delete'), encodeJson({ threadId }), 10_000);
    const reply = decode(z.union([DeleteReplySchema, ErrorReplySchema]), data, 'delete reply');
    if (reply.kind === 'error') throw TroupeError.fromBody(reply.error);
    return { node: reply.node, deadLetters: reply.deadLetters };
  }

  private async threadCtl(verb: 'cancel' | 'rehydrate', threadId: string, reason?: string): Promise<string> {
    const data = await this.requestOrExplain(subjects.ctl(this.tenant, verb), encodeJson({ threadId, ...(reason ? { reason } : {}) }), 10_000);
    const reply = decode(OkOrError, data, `${verb} reply`);
    if (reply.kind === 'error') throw TroupeError.fromBody(reply.error);
    return reply.state;
  }

  /**
   * An operator request one node answers (`CTL`: threads, thread, cancel, rehydrate, delete, dlq, memory):
   * the body as the verb takes it, the reply validated and typed; an error reply is thrown as a TroupeError.
   * `timeoutMs` (default 10 s): how long to wait for the answer.
   */
  async ctl<V extends CtlVerb>(verb: V, body: CtlRequest<V>, opts: { timeoutMs?: number } = {}): Promise<CtlReply<V>> {
    const data = await this.requestOrExplain(subjects.ctl(this.tenant, verb), encodeJson(body), opts.timeoutMs ?? 10_000);
    const reply = decode(z.union([CTL[verb].reply as unknown as z.ZodType<CtlReply<V>>, ErrorReplySchema]), data, `${verb} reply`, MAX_CTL_REPLY_BYTES);
    if (isErrorReply(reply)) throw TroupeError.fromBody(reply.error);
    return reply;
  }

  /**
   * The first publish of a message: no responders (a stream without a leader for a moment) is tried again
   * for `unavailableRetryMs`, an unanswered publish until `timeoutMs`; both are safe to repeat because
   * the message carries its de-duplication id. Then the error says what to do.
   */
  private async publishUntilTaken(
    subject: string,
    body: Uint8Array,
    headers: Record<string, string>,
    opts: { timeoutMs: number; unavailableRetryMs: number },
  ): Promise<Uint8Array> {
    const started = Date.now();
    let pause = 100;
    for (;;) {
      const left = opts.timeoutMs - (Date.now() - started);
      try {
        return (await this.transport.request(subject, body, { timeoutMs: Math.max(1, Math.min(left, 10_000)), headers })).data;
      } catch (err) {
        const elapsed = Date.now() - started;
        const unavailable =
          err instanceof TransportError && err.reason === 'NO_RESPONDERS' && elapsed + pause <= Math.min(opts.unavailableRetryMs, opts.timeoutMs);
        const unanswered = err instanceof TransportError && err.reason === 'TIMEOUT' && elapsed < opts.timeoutMs && !this.transport.closed;
        if (!unavailable && !unanswered) return this.explain(err, subject, opts.timeoutMs);
        if (unavailable) {
          await new Promise((r) => setTimeout(r, pause));
          pause = Math.min(pause * 2, 1_000);
        }
      }
    }
  }

  private explain(err: unknown, subject: string, timeoutMs: number): never {
    if (err instanceof TransportError && err.reason === 'NO_RESPONDERS') {
      throw new TroupeError(
        'TRANSPORT_ERROR',
        `no Troupe node is listening on ${this.transport.name}: start one with \`troupe up --nats <url>\` (on a cluster, the inbound stream may have no leader: check that most servers are up)`,
        undefined,
        { cause: err },
      );
    }
    if (err instanceof TransportError && err.reason === 'TIMEOUT') {
      throw new TroupeError('AGENT_TIMEOUT', `no answer on ${subject} within ${timeoutMs} ms: is a node running? (\`troupe ps\`)`, undefined, { cause: err });
    }
    throw err;
  }

  private async requestOrExplain(subject: string, data: Uint8Array, timeoutMs: number, headers?: Record<string, string>): Promise<Uint8Array> {
    try {
      return (await this.transport.request(subject, data, { timeoutMs, ...(headers ? { headers } : {}) })).data;
    } catch (err) {
      return this.explain(err, subject, timeoutMs);
    }
  }
}
