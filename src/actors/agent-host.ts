/**
 * Joins an agent to the mesh: answers requests on its inbox (queue group per agent id, so replicas share
 * the load), announces its card on its own registry subject on start, on a heartbeat and when a node
 * says hello, streams chunks back on the request's reply subject (the node relays them to the user; an
 * agent never publishes into a thread itself), and validates everything that arrives. Bad input gets a
 * typed error reply; the host keeps serving.
 */
import { randomUUID } from 'node:crypto';
import { createActor, type Actor } from 'xstate';
import type { Logger } from 'pino';
import { agentMachine, type AgentActorEvent, type AgentCounters } from '../machines/agent.js';
import {
  CLIENT_ROUTING_URI,
  DEFAULT_MAX_PAYLOAD,
  HEADERS,
  LIMITS,
  MessageSchema,
  RoutingRequestSchema,
  TroupeError,
  decode,
  declaringRouting,
  describeZodError,
  encodeJson,
  messageText,
  type ActorInfo,
  type AgentReply,
  type Message,
  type AgentStatus,
  type PsReply,
  type RegistryEvent,
  type TaskArtifactUpdateEvent,
} from '../protocol/index.js';
import { readHandoffRequest, type HandoffRequest } from '../protocol/handoff.js';
import { readDelegationResults, type DelegationResults } from '../protocol/delegation.js';
import { MAX_HISTORY_MESSAGES, readMemorySummary, type MemorySummary } from '../protocol/conversation.js';
import { parseAgentChunks, subjects } from '../transport/subjects.js';
import type { InboundMessage, Subscription, Transport } from '../transport/types.js';
import type { AgentContext, AgentDefinition, AgentResult, AgentSource, AgentWorkStatus } from '../sdk/agent.js';
import { silentLogger } from '../observability/logger.js';
import { redact } from '../observability/redact.js';
import { META } from '../protocol/metadata.js';
import { InspectionPublisher, InspectionSwitch, type InspectObserver } from '../inspection/inspection.js';
import { readHello } from '../inspection/control.js';
import { metrics, outcomeLabel } from '../observability/metrics.js';
import { SpanKind, contextFromHeaders, endSpan, startSpan, tracing, withSpan } from '../observability/tracing.js';

export interface AgentHostOptions {
  transport: Transport;
  agent: AgentDefinition;
  tenant?: string;
  logger?: Logger;
  /** How often the card is announced again. */
  heartbeatMs?: number;
  /** How long the registry keeps the card without a heartbeat. */
  ttlMs?: number;
  maxPayload?: number;
  /** Replies remembered per messageId, so a retried call gets the same answer without redoing work. */
  idempotencyCacheSize?: number;
  /** Publish inspection records from the start (a `hello` with `inspection` switches it later). */
  inspect?: boolean;
}

/** What this agent's delegates answered, when the thread brings it back. */
/** What one request came to, for the bookkeeping done after its reply is sent. */
interface Outcome {
  /** performance.now() when the request arrived. */
  started: number;
  /** The error the request was answered with, if any. */
  error?: TroupeError;
  /** Set once the handler ran (a request refused at the edge never counted as started). */
  ended?: { messageId: string; how: 'answered' | 'failed'; inspected: boolean };
}

function delegationContext(message: Message): { delegation?: DelegationResults } {
  const delegation = readDelegationResults(message);
  return delegation ? { delegation } : {};
}

/** The handoff request and recent messages a thread attached, when this agent is a handoff target. */
function handoffContext(message: Message): { handoff?: HandoffRequest; recentMessages?: Message[] } {
  let handoff: HandoffRequest | undefined;
  try {
    handoff = readHandoffRequest(message);
  } catch {
    handoff = undefined;
  }
  const recent = message.metadata?.[META.recentMessages];
  const parsed = Array.isArray(recent)
    ? recent.flatMap((m) => {
        const r = MessageSchema.safeParse(m);
        return r.success ? [r.data] : [];
      })
    : undefined;
  return { ...(handoff ? { handoff } : {}), ...(parsed ? { recentMessages: parsed } : {}) };
}

/** The thread's earlier messages and this agent's summary, when the thread sent them (protocol/conversation.ts). */
function conversationContext(message: Message): { history?: Message[]; memory?: MemorySummary } {
  const raw = message.metadata?.[META.history];
  const history = Array.isArray(raw)
    ? raw.slice(-MAX_HISTORY_MESSAGES).flatMap((m) => {
        const r = MessageSchema.safeParse(m);
        return r.success ? [r.data] : [];
      })
    : undefined;
  const memory = readMemorySummary(message);
  return { ...(history ? { history } : {}), ...(memory ? { memory } : {}) };
}

export class AgentHost {
  readonly instanceId = randomUUID();
  readonly tenant: string;
  readonly agentId: string;
  readonly actor: Actor<typeof agentMachine>;
  private readonly transport: Transport;
  private readonly agent: AgentDefinition;
  private readonly log: Logger;
  private readonly heartbeatMs: number;
  private readonly ttlMs: number;
  private readonly maxPayload: number;
  private readonly cacheSize: number;
  /** Answers by idempotency key (`Troupe-Call-Id`, scoped to the thread), so a retried call is not redone. */
  private readonly replies = new Map<string, Promise<Uint8Array>>();
  private readonly abort = new AbortController();
  private subs: Subscription[] = [];
  private heartbeat?: NodeJS.Timeout;
  readonly inspection: InspectionPublisher;
  /** Calls in progress whose thread is inspected (`Troupe-Inspect`): the agent actor is published meanwhile. */
  private inspectedCalls = 0;
  /**
   * The requests this instance counts. Its actor takes them with each request's events while it is watched;
   * otherwise it is brought up to date (`syncActor`) whenever it is read (src/machines/agent.ts).
   */
  private readonly counters: AgentCounters = { inFlight: 0, handled: 0, failed: 0 };
  /** The counters changed since the actor last took them (nobody watched): `syncActor` sends them. */
  private actorBehind = false;
  private readonly inspector: { sync(): void };

  constructor(opts: AgentHostOptions) {
    this.transport = opts.transport;
    this.agent = opts.agent;
    this.tenant = opts.tenant ?? 'demo';
    this.agentId = opts.agent.card.id;
    this.log = (opts.logger ?? silentLogger()).child({ tenant: this.tenant, agent: this.agentId, instance: this.instanceId.slice(0, 8) });
    this.heartbeatMs = opts.heartbeatMs ?? 5_000;
    this.ttlMs = opts.ttlMs ?? Math.max(15_000, this.heartbeatMs * 3);
    this.maxPayload = opts.maxPayload ?? DEFAULT_MAX_PAYLOAD;
    this.cacheSize = opts.idempotencyCacheSize ?? 1_000;
    this.inspection = new InspectionPublisher({
      transport: this.transport,
      process: `agent-${this.agentId}-${this.instanceId.slice(0, 8)}`,
      switch: new InspectionSwitch(opts.inspect ?? false),
    });
    this.actor = createActor(agentMachine, { input: { agentId: this.agentId }, id: `agent:${this.agentId}` });
    // Attached only while this agent or a call's thread is inspected.
    this.inspector = this.inspection.attach(this.actor, {
      subject: subjects.inspectAgent(this.tenant, this.agentId, this.instanceId),
      rootId: `agent:${this.agentId}:${this.instanceId.slice(0, 8)}`,
      enabled: () => this.watched(),
      meta: { agentId: this.agentId, instanceId: this.instanceId, card: this.agent.card },
    });
    // A watcher's first snapshot holds the counters as they are now.
    this.inspection.switch.onChange(() => {
      this.syncActor();
      this.inspector.sync();
    });
    this.inspector.sync();
  }

  /** Someone watches this agent (or the thread of a call it is handling): every request event goes to the actor. */
  private watched(): boolean {
    return this.inspection.switch.all || this.inspectedCalls > 0;
  }

  /** Counts a request that starts; a watched actor takes it as an event. */
  private started(messageId: string, threadId: string): void {
    this.counters.inFlight++;
    this.tell(() => ({ type: 'troupe.agent.received', messageId, threadId, ...this.counters }));
  }

  /** Counts a request that ended; a watched actor takes it as an event. */
  private ended(messageId: string, how: 'answered' | 'failed'): void {
    this.counters.inFlight = Math.max(0, this.counters.inFlight - 1);
    if (how === 'answered') this.counters.handled++;
    else this.counters.failed++;
    this.tell(() => ({ type: `troupe.agent.${how}`, messageId, ...this.counters }));
  }

  /** A request's event to the actor while it is watched; otherwise only a note that the actor is behind. */
  private tell(event: () => AgentActorEvent): void {
    if (!this.watched()) {
      this.actorBehind = true;
      return;
    }
    this.syncActor();
    this.actor.send(event());
  }

  /**
   * Brings the actor up to date with the counters (one `troupe.agent.counted`: idle or busy as they say)
   * before anyone reads it — `troupe ps`, an announce, a watcher attaching. Unwatched, the requests
   * themselves send it nothing: two XState events per request were a tenth of an agent hop's latency at
   * one request at a time (bench/PROFILE.md).
   */
  private syncActor(): void {
    if (!this.actorBehind) return;
    this.actorBehind = false;
    this.actor.send({ type: 'troupe.agent.counted', ...this.counters });
  }

  async start(): Promise<this> {
    this.actor.start();
    const inbox = subjects.agentInbox(this.tenant, this.agentId);
    this.subs.push(this.transport.subscribe(inbox, (msg) => this.onRequest(msg), { queue: subjects.agentQueue(this.agentId) }));
    // A node that starts asks every agent to announce at once instead of waiting for the heartbeat; an
    // operator's `troupe ps` asks the same way and gets this instance's status as the reply.
    this.subs.push(this.transport.subscribe(subjects.hello(this.tenant), (msg) => this.onHello(msg)));
    await this.transport.flush();
    this.announce();
    this.heartbeat = setInterval(() => this.announce(), this.heartbeatMs);
    this.heartbeat.unref();
    this.actor.send({ type: 'troupe.agent.joined' });
    this.log.info({ inbox }, 'agent joined the mesh');
    return this;
  }

  /** Says goodbye, stops taking requests and waits for the ones in flight. */
  async stop(): Promise<void> {
    if (this.heartbeat) clearInterval(this.heartbeat);
    this.actor.send({ type: 'troupe.agent.leave' });
    if (!this.transport.closed) {
      const goodbye: RegistryEvent = { kind: 'goodbye', instanceId: this.instanceId };
      this.transport.publish(subjects.registry(this.tenant, this.agentId), encodeJson(goodbye));
      await Promise.all(this.subs.map((s) => s.drain().catch(() => undefined)));
      await this.transport.flush().catch(() => undefined);
    }
    this.subs = [];
    this.abort.abort();
    await this.agent.close?.().catch((err: unknown) => this.log.warn({ err: (err as Error)?.message }, 'the agent did not close cleanly'));
    this.actor.send({ type: 'troupe.agent.left' });
    this.actor.stop();
    this.log.info('agent left the mesh');
  }

  info(node: string): ActorInfo {
    this.syncActor();
    const snap = this.actor.getSnapshot();
    const work = this.agent.status?.();
    const state = typeof snap.value === 'string' ? snap.value : `ready.${String((snap.value as { ready: string }).ready)}`;
    return {
      kind: 'agent',
      id: this.agentId,
      // An agent that says it cannot serve (a remote whose endpoint is down) is not shown ready.
      state: work?.ready === false && state.startsWith('ready') ? 'unavailable' : state,
      node,
      status: 'live',
      detail: { instance: this.instanceId, ...sourceOf(work), ...(work?.ready === false && work.reason ? { reason: work.reason } : {}), ...this.counters },
    };
  }

  private status(): AgentStatus {
    const info = this.info('');
    // What the agent reports about its own work (e.g. where its model loops are), redacted like every diagnostic.
    const work = this.agent.status?.();
    const detail = { ...sourceOf(work), ...(work?.ready === false && work.reason ? { reason: work.reason } : {}), ...work?.detail };
    return { state: info.state, ...this.counters, detail: redact(detail) as Record<string, unknown> };
  }

  private announce(): void {
    if (this.transport.closed) return;
    const event: RegistryEvent = { kind: 'announce', card: this.agent.card, instanceId: this.instanceId, ttlMs: this.ttlMs, status: this.status() };
    try {
      this.transport.publish(subjects.registry(this.tenant, this.agentId), encodeJson(event));
    } catch (err) {
      this.log.warn({ err }, 'could not announce the agent card');
    }
  }

  /** Announces, and answers a hello that is a request (`troupe ps`) with this instance as an actor. */
  private onHello(msg: InboundMessage): void {
    const { inspection } = readHello(msg.data);
    if (inspection) {
      // Switching brings the actor up to date first (the switch's change, in the constructor).
      this.inspection.switch.set(inspection.on);
      if (inspection.on) this.inspection.announce();
    }
    this.announce();
    if (!msg.reply) return;
    const node = `agent-${this.agentId}-${this.instanceId.slice(0, 8)}`;
    // Actors the agent runs inside (e.g. one model loop per message in flight) are listed under it.
    const inner: ActorInfo[] = (this.agent.status?.().actors ?? []).map((a) => ({
      ...a,
      ...(a.detail ? { detail: redact(a.detail) as Record<string, unknown> } : {}),
      node,
      parent: this.agentId,
      status: 'live',
    }));
    const reply: PsReply = { node, actors: [this.info(node), ...inner], passivated: 0 };
    msg.respond(encodeJson(reply));
  }

  private async onRequest(msg: InboundMessage): Promise<void> {
    const callId = msg.headers[HEADERS.callId];
    const key = callId && callId.length <= 512 ? callId : undefined;
    if (key) {
      const cached = this.replies.get(key);
      if (cached) {
        msg.respond(await cached);
        return;
      }
    }
    const outcome: Outcome = { started: performance.now() };
    const work = this.observed(msg, outcome).then((data) => this.fitReply(data));
    if (key) {
      this.replies.set(key, work);
      if (this.replies.size > this.cacheSize) this.replies.delete(this.replies.keys().next().value as string);
    }
    const data = await work;
    try {
      msg.respond(data);
    } catch (err) {
      // Never leave the caller waiting for its timeout: say why the answer could not be sent.
      this.log.error({ err: (err as Error).message }, 'could not send the reply');
      msg.respond(encodeJson(new TroupeError('AGENT_ERROR', `agent "${this.agentId}" could not send its reply: ${(err as Error).message}`).toReply()));
    } finally {
      // After the reply has left: the client writes what was published in this task in a microtask queued
      // at the first publish, which this one follows.
      queueMicrotask(() => this.settle(outcome));
    }
  }

  /**
   * The bookkeeping of a request, done once its reply has left: the counters and the actor's move back to
   * idle, the metrics. None of it is part of the answer, so none of it is on the caller's wait (about 2% of
   * a hop at one request at a time: bench/PROFILE.md).
   */
  private settle(outcome: Outcome): void {
    if (outcome.ended) {
      this.ended(outcome.ended.messageId, outcome.ended.how);
      if (outcome.ended.inspected) this.uninspectCall();
    }
    metrics.agentRequests.inc({ agent: this.agentId, outcome: outcome.error ? outcomeLabel(outcome.error.code) : 'ok' });
    metrics.agentRequestSeconds.observe({ agent: this.agentId }, (performance.now() - outcome.started) / 1000);
  }

  /** A reply larger than a thread can store becomes a PAYLOAD_TOO_LARGE error the caller can read. */
  private fitReply(data: Uint8Array): Uint8Array {
    const limit = Math.min(LIMITS.agentReplyBytes, this.maxPayload - 4096);
    if (data.byteLength <= limit) return data;
    const error = new TroupeError('PAYLOAD_TOO_LARGE', `agent "${this.agentId}" produced a ${data.byteLength}-byte reply; the limit is ${limit}`, {
      size: data.byteLength,
      limit,
    });
    this.log.warn({ code: error.code, size: data.byteLength }, error.message);
    return encodeJson(error.toReply());
  }

  /** `handle`, traced when tracing is on; measured once the reply is sent (`settle`). */
  private async observed(msg: InboundMessage, outcome: Outcome): Promise<Uint8Array> {
    if (!tracing.on) return await this.handle(msg, outcome);
    const span = startSpan('troupe.agent.handle', {
      parent: contextFromHeaders(msg.headers),
      kind: SpanKind.SERVER,
      attributes: {
        'troupe.agent': this.agentId,
        'troupe.instance': this.instanceId,
        'troupe.thread': msg.headers[HEADERS.threadId] ?? '',
        'troupe.hop': Number(msg.headers[HEADERS.hop] ?? 0),
      },
    });
    const data = await withSpan(span, () => this.handle(msg, outcome));
    endSpan(span, outcome.error);
    return data;
  }

  /** Produces the encoded reply; never throws. The error it answers with, if any, goes in `outcome`. */
  /** The chunk subject a request names, if it is one of this agent's own in its tenant; else none. */
  private chunkSubjectOf(header: string | undefined): string | undefined {
    if (header === undefined) return undefined;
    const at = parseAgentChunks(header);
    if (at && at.tenant === this.tenant && at.agentId === this.agentId) return header;
    this.log.warn(
      { subject: header.slice(0, 200) },
      `ignored a ${HEADERS.chunks} header that is not one of this agent's chunk subjects: this call streams no chunks`,
    );
    return undefined;
  }

  private async handle(msg: InboundMessage, outcome: Outcome): Promise<Uint8Array> {
    const threadId = msg.headers[HEADERS.threadId] ?? '';
    let message: Message;
    try {
      message = decode(MessageSchema, msg.data, `message to agent "${this.agentId}"`, this.maxPayload);
    } catch (err) {
      const error = TroupeError.from(err, 'INVALID_MESSAGE');
      this.callLog(threadId).warn({ code: error.code }, error.message);
      outcome.error = error;
      return encodeJson(error.toReply());
    }
    const rawRouting = message.metadata?.[CLIENT_ROUTING_URI];
    let routing;
    // The slot may also carry handoff fields only; it is a routing request when it says who may be routed to.
    const isRoutingRequest =
      rawRouting !== undefined && (typeof rawRouting !== 'object' || rawRouting === null || 'agentCards' in rawRouting || 'sender' in rawRouting);
    if (isRoutingRequest) {
      const parsed = RoutingRequestSchema.safeParse(rawRouting);
      if (!parsed.success) {
        const error = new TroupeError(
          'EXTENSION_PARSE_ERROR',
          `client-routing metadata on message ${message.messageId} is invalid: ${describeZodError(parsed.error)}`,
        );
        this.callLog(threadId).warn({ code: error.code }, error.message);
        outcome.error = error;
        return encodeJson(error.toReply());
      }
      routing = parsed.data;
    }

    const inspected = msg.headers[HEADERS.inspect] === '1';
    if (inspected) {
      this.inspectedCalls++;
      // The watcher's first snapshot holds the counters as they are now.
      this.syncActor();
      this.inspector.sync();
    }
    this.started(message.messageId, threadId);
    const taskId = msg.headers[HEADERS.taskId] ?? message.taskId ?? threadId;
    const contextId = msg.headers[HEADERS.contextId] ?? message.contextId ?? threadId;
    // Chunks go to the subject the caller named (Troupe-Chunks), which must be one of this agent's own
    // (the broker refuses any other); the caller relays them to the user. The reply subject takes the one
    // answer only. A request without the header takes no chunks.
    const chunkSubject = this.chunkSubjectOf(msg.headers[HEADERS.chunks]);
    // The context's functions are made when a handler first reads them (most read none of them): its
    // logger, its chunk stream and its inspector. Methods and getters of a plain object (a handler may
    // take them out of it, `const { stream } = ctx`, or spread it), which reach the host by name.
    // eslint-disable-next-line @typescript-eslint/no-this-alias -- `this` in a method is the context
    const host = this;
    let child: Logger | undefined;
    let inspect: InspectObserver | undefined;
    const ctx: AgentContext = {
      tenant: this.tenant,
      threadId,
      taskId,
      contextId,
      sender: msg.headers[HEADERS.sender] ?? routing?.sender ?? 'user',
      ...(msg.headers[HEADERS.callId] !== undefined ? { callId: msg.headers[HEADERS.callId] } : {}),
      hop: Number(msg.headers[HEADERS.hop] ?? 0),
      text: messageText(message),
      peers: routing?.agentCards ?? [],
      ...(routing ? { routing } : {}),
      ...handoffContext(message),
      ...delegationContext(message),
      ...conversationContext(message),
      signal: this.abort.signal,
      get log() {
        return (child ??= host.callLog(threadId));
      },
      stream(text: string) {
        host.streamChunk(chunkSubject, { taskId, contextId, artifactId: `${message.messageId}:stream` }, text);
      },
      get inspect() {
        return (inspect ??= host.callInspector(threadId, message.messageId, inspected));
      },
    };

    try {
      const result = await this.run(message, ctx);
      const replyMessage = this.toReply(result, ctx);
      outcome.ended = { messageId: message.messageId, how: 'answered', inspected };
      if (this.log.isLevelEnabled('debug')) ctx.log.debug({ messageId: message.messageId, reply: replyMessage.kind }, 'answered');
      return encodeJson(replyMessage);
    } catch (err) {
      outcome.ended = { messageId: message.messageId, how: 'failed', inspected };
      const error =
        err instanceof TroupeError ? err : new TroupeError('AGENT_ERROR', `agent "${this.agentId}" failed: ${(err as Error)?.message ?? String(err)}`);
      ctx.log.error({ err, code: error.code }, 'handler failed');
      outcome.error = error;
      return encodeJson(error.toReply());
    }
  }

  /** The logger of one call (made when a call logs: most log nothing at the default level). */
  private callLog(threadId: string): Logger {
    return this.log.child({ thread: threadId || undefined });
  }

  /** One streamed chunk of a call, to the chunk subject its caller named (none: the call takes no chunks). */
  private streamChunk(chunkSubject: string | undefined, call: { taskId: string; contextId: string; artifactId: string }, text: string): void {
    if (!chunkSubject || this.transport.closed || text.length === 0) return;
    const event: TaskArtifactUpdateEvent = {
      kind: 'artifact-update',
      taskId: call.taskId,
      contextId: call.contextId,
      artifact: { artifactId: call.artifactId, parts: [{ kind: 'text', text }], metadata: { [META.agent]: this.agentId } },
      append: true,
      lastChunk: false,
    };
    this.transport.publish(chunkSubject, encodeJson(event));
  }

  private uninspectCall(): void {
    this.inspectedCalls--;
    this.inspector.sync();
  }

  /**
   * `ctx.inspect` for the actors one call's handler runs: published under the thread, with the thread as
   * their parent, while the thread (or this agent) is inspected. Built on first use: a handler that runs
   * no actor pays nothing.
   */
  private callInspector(threadId: string, messageId: string, inspected: boolean): InspectObserver {
    let observer: InspectObserver | undefined;
    return (event) => {
      observer ??= this.inspection.observe({
        subject: subjects.inspectAgent(this.tenant, this.agentId, this.instanceId),
        rootId: `${threadId || 'call'}/agent:${this.agentId}:${messageId.slice(0, 64)}`,
        ...(threadId ? { threadId, parentId: threadId } : {}),
        enabled: () => inspected || this.inspection.switch.all,
      });
      observer(event);
    };
  }

  private async run(message: Message, ctx: AgentContext): Promise<AgentResult> {
    const out = this.agent.handle(message, ctx);
    if (out && typeof out === 'object' && Symbol.asyncIterator in out) {
      const gen = out as AsyncGenerator<string, AgentResult | void, void>;
      const chunks: string[] = [];
      for (;;) {
        const step = await gen.next();
        if (step.done) return step.value ?? chunks.join('');
        chunks.push(step.value);
        ctx.stream(step.value);
      }
    }
    return await (out as AgentResult | Promise<AgentResult>);
  }

  private toReply(result: AgentResult, ctx: AgentContext): AgentReply {
    const base = { messageId: randomUUID(), contextId: ctx.contextId, taskId: ctx.taskId };
    if (typeof result === 'string') {
      return { kind: 'message', role: 'agent', ...base, parts: [{ kind: 'text', text: result }] };
    }
    if (result.kind === 'reply') {
      const slot = {
        ...(result.to ? { recipient: result.to } : {}),
        ...(result.to && result.reason ? { reason: result.reason } : {}),
        ...(result.handoff ? { handoff: result.handoff } : {}),
        ...(result.handoffReturn ? { handoffReturn: { artifactsCreated: [], ...result.handoffReturn } } : {}),
        ...(result.handoffAccept ? { handoffAccept: result.handoffAccept } : {}),
      };
      const routing = Object.keys(slot).length ? { [CLIENT_ROUTING_URI]: slot } : {};
      const metadata = { ...result.metadata, ...routing, ...(result.delegate ? { [META.delegate]: result.delegate } : {}) };
      // A reply that uses the client-routing extension declares it (`extensions: [URI]`, seed 001).
      return declaringRouting({
        kind: 'message',
        role: 'agent',
        ...base,
        parts: [{ kind: 'text', text: result.text }, ...(result.data ? [{ kind: 'data' as const, data: result.data }] : [])],
        ...(Object.keys(metadata).length ? { metadata } : {}),
      });
    }
    if (result.kind === 'message') return declaringRouting({ ...base, ...result, role: 'agent' });
    return result;
  }
}

/** `source` and, for a remote agent, `endpoint` (seed 003's AgentResolutionResult). */
function sourceOf(work: AgentWorkStatus | undefined): AgentSource {
  return work?.source ?? { source: 'local' };
}
