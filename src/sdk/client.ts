/**
 * Talking to the mesh as a user or an operator: send into a thread and follow its stream, list actors,
 * inspect one, cancel a thread. The CLI, the benchmark and the tests use this; so can any app.
 */
import { randomUUID } from 'node:crypto';
import { z } from 'zod';
import { META, type RouteStep } from '../protocol/metadata.js';
import {
  ErrorReplySchema,
  InspectReplySchema,
  PsReplySchema,
  ThreadAckSchema,
  ThreadEventSchema,
  TaskSchema,
  TroupeError,
  decode,
  encodeJson,
  type ErrorBody,
  type InspectReply,
  type Message,
  type PsReply,
  type TaskStatusUpdateEvent,
  type ThreadEvent,
} from '../protocol/index.js';
import { isSubjectToken, subjects } from '../transport/subjects.js';
import { TransportError, type Transport } from '../transport/types.js';

export interface SendOptions {
  threadId?: string;
  /**
   * The output subject is plain pub/sub: an answer published while this connection was reconnecting is
   * missed. After this many ms without a final answer (and as often again), the stored thread is asked
   * whether it already answered this message. Default 2000; 0 turns it off.
   */
  recheckMs?: number;
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
}

/** JetStream's answer when the thread's inbound stream took the message (durable mode). */
const PubAckSchema = z.object({ stream: z.string(), seq: z.number(), duplicate: z.boolean().optional() });
const JsErrorSchema = z.object({ error: z.object({ code: z.number(), description: z.string() }) });
const AckOrError = z.union([ThreadAckSchema, ErrorReplySchema, PubAckSchema, JsErrorSchema]);
const StoredTaskReply = z.object({ kind: z.literal('thread'), record: z.object({ task: TaskSchema }) });
const ThreadCtlReply = z.union([z.object({ kind: z.literal('ok'), threadId: z.string(), state: z.string(), node: z.string() }), ErrorReplySchema]);

export function textOfMessage(message: Message | undefined): string {
  return (message?.parts ?? []).flatMap((p) => (p.kind === 'text' ? [p.text] : [])).join('\n');
}

export function userMessage(text: string, opts: { messageId?: string; metadata?: Record<string, unknown> } = {}): Message {
  return {
    kind: 'message',
    role: 'user',
    messageId: opts.messageId ?? randomUUID(),
    parts: [{ kind: 'text', text }],
    ...(opts.metadata ? { metadata: opts.metadata } : {}),
  };
}

export class TroupeClient {
  constructor(
    readonly transport: Transport,
    readonly tenant = 'demo',
  ) {}

  /** Sends a user message into a thread and resolves with the turn's final status. */
  async send(input: string | Message, opts: SendOptions = {}): Promise<SendResult> {
    const threadId = opts.threadId ?? `t-${randomUUID()}`;
    if (!isSubjectToken(threadId)) throw new TroupeError('INVALID_MESSAGE', `thread id "${threadId}" may only use A-Z, a-z, 0-9, _ and -`);
    const message = typeof input === 'string' ? userMessage(input, { ...(opts.messageId ? { messageId: opts.messageId } : {}), ...(opts.metadata ? { metadata: opts.metadata } : {}) }) : input;
    const timeoutMs = opts.timeoutMs ?? 60_000;
    const events: ThreadEvent[] = [];
    let settle!: (e: TaskStatusUpdateEvent) => void;
    let fail!: (e: Error) => void;
    const finalEvent = new Promise<TaskStatusUpdateEvent>((resolve, reject) => {
      settle = resolve;
      fail = reject;
    });
    const sub = this.transport.subscribe(subjects.threadOut(this.tenant, threadId), (msg) => {
      let event: ThreadEvent;
      try {
        event = decode(ThreadEventSchema, msg.data, 'thread event');
      } catch {
        return;
      }
      events.push(event);
      opts.onEvent?.(event);
      // Several sends may be in flight on one thread: a final answer names the message it answers.
      const inReplyTo = event.kind === 'status-update' ? event.status.message?.metadata?.[META.inReplyTo] : undefined;
      if (event.kind === 'status-update' && event.final && (inReplyTo === undefined || inReplyTo === message.messageId)) settle(event);
    });
    // Handled here so a timeout before anything awaits the answer is not an unhandled rejection.
    finalEvent.catch(() => undefined);
    const timer = setTimeout(() => fail(new TroupeError('AGENT_TIMEOUT', `no final answer on thread ${threadId} within ${timeoutMs} ms`)), timeoutMs);
    try {
      await this.transport.flush();
      const res = await this.requestOrExplain(subjects.threadIn(this.tenant, threadId), encodeJson(message), Math.min(timeoutMs, 10_000), {
        // JetStream de-duplicates on this header: a re-sent message is stored once.
        'Nats-Msg-Id': message.messageId,
      });
      const ack = decode(AckOrError, res, 'thread acknowledgement');
      if ('kind' in ack && ack.kind === 'error') throw TroupeError.fromBody(ack.error);
      if ('error' in ack && !('kind' in ack)) {
        throw new TroupeError('TRANSPORT_ERROR', `the thread stream refused the message: ${ack.error.description} (is a node running with durable ingress?)`);
      }
      const recheckMs = opts.recheckMs ?? 2_000;
      const recheck = recheckMs > 0 ? setInterval(() => void this.storedAnswer(threadId, message.messageId).then((e) => e && settle(e)), recheckMs) : undefined;
      let final: TaskStatusUpdateEvent;
      try {
        final = await finalEvent;
      } finally {
        if (recheck) clearInterval(recheck);
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
      const error = final.metadata?.[META.error] as ErrorBody | undefined;
      return { threadId, final, events, route, text: textOfMessage(final.status.message), ...(error ? { error } : {}) };
    } finally {
      clearTimeout(timer);
      sub.unsubscribe();
    }
  }

  /** The stored thread's final status when it answers `messageId` (a missed publish), else undefined. */
  private async storedAnswer(threadId: string, messageId: string): Promise<TaskStatusUpdateEvent | undefined> {
    try {
      const res = StoredTaskReply.safeParse(await this.ctl('thread', { threadId, redact: false }));
      if (!res.success) return undefined;
      const { task } = res.data.record;
      if (task.status.message?.metadata?.[META.inReplyTo] !== messageId) return undefined;
      const error = task.status.message.metadata?.[META.error];
      return {
        kind: 'status-update',
        taskId: task.id,
        contextId: task.contextId,
        status: task.status,
        final: true,
        ...(error ? { metadata: { [META.error]: error } } : {}),
      };
    } catch {
      return undefined;
    }
  }

  /** Whether the thread has a stored record (false for an id never used, or one that expired). */
  async exists(threadId: string): Promise<boolean> {
    try {
      await this.ctl('thread', { threadId });
      return true;
    } catch (err) {
      if (err instanceof TroupeError && err.code === 'THREAD_NOT_FOUND') return false;
      throw err;
    }
  }

  /** Every live actor on every node and agent process that answers within the window. */
  async ps(windowMs = 500): Promise<PsReply[]> {
    const replies = await this.transport.requestMany(subjects.ctl(this.tenant, 'ps'), new Uint8Array(), { timeoutMs: windowMs });
    return replies.flatMap((r) => {
      try {
        return [decode(PsReplySchema, r.data, 'ps reply')];
      } catch {
        return [];
      }
    });
  }

  async inspect(actorId: string, windowMs = 500): Promise<InspectReply | undefined> {
    const replies = await this.transport.requestMany(subjects.ctl(this.tenant, 'inspect'), encodeJson({ actorId }), { timeoutMs: windowMs });
    for (const r of replies) {
      const parsed = InspectReplySchema.safeParse(JSON.parse(new TextDecoder().decode(r.data)));
      if (parsed.success && parsed.data.found) return parsed.data;
    }
    return undefined;
  }

  async cancel(threadId: string, reason?: string): Promise<string> {
    return this.threadCtl('cancel', threadId, reason);
  }

  async rehydrate(threadId: string): Promise<string> {
    return this.threadCtl('rehydrate', threadId);
  }

  private async threadCtl(verb: 'cancel' | 'rehydrate', threadId: string, reason?: string): Promise<string> {
    const data = await this.requestOrExplain(subjects.ctl(this.tenant, verb), encodeJson({ threadId, ...(reason ? { reason } : {}) }), 10_000);
    const reply = decode(ThreadCtlReply, data, `${verb} reply`);
    if (reply.kind === 'error') throw TroupeError.fromBody(reply.error);
    return reply.state;
  }

  /** Raw control request (threads, thread). */
  async ctl(verb: string, body: unknown): Promise<unknown> {
    const data = await this.requestOrExplain(subjects.ctl(this.tenant, verb), encodeJson(body), 10_000);
    const json: unknown = JSON.parse(new TextDecoder().decode(data));
    const err = ErrorReplySchema.safeParse(json);
    if (err.success) throw TroupeError.fromBody(err.data.error);
    return json;
  }

  private async requestOrExplain(subject: string, data: Uint8Array, timeoutMs: number, headers?: Record<string, string>): Promise<Uint8Array> {
    try {
      return (await this.transport.request(subject, data, { timeoutMs, ...(headers ? { headers } : {}) })).data;
    } catch (err) {
      if (err instanceof TransportError && err.code === 'NO_RESPONDERS') {
        throw new TroupeError('TRANSPORT_ERROR', `no Troupe node is listening on ${this.transport.name}: start one with \`troupe up --nats <url>\``);
      }
      if (err instanceof TransportError && err.code === 'TIMEOUT') {
        throw new TroupeError('AGENT_TIMEOUT', `no answer on ${subject} within ${timeoutMs} ms: is a node running? (\`troupe ps\`)`);
      }
      throw err;
    }
  }
}
