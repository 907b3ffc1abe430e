/**
 * The wire call from a thread to an agent: one request on the agent's inbox with the thread's headers,
 * streamed chunks coming back on the call's chunk subject (named in the request's Troupe-Chunks header;
 * relayed by the host to the thread's owner), then the one answer on the reply subject. Everything an agent sends back is validated here, at the edge: size, nesting, schema.
 * A reply that fails is turned into a typed error reply, never thrown into the thread machine.
 */
import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import { toErrorBody, type AgentRequestInput } from '../../machines/agent-call.js';
import type { PolicyInput } from '../../machines/router.js';
import type { RouterPolicy } from '../../routing/policy.js';
import { TaskArtifactUpdateEventSchema, type TaskArtifactUpdateEvent } from '../../protocol/a2a.js';
import { TroupeError } from '../../protocol/errors.js';
import { HEADERS, scopedMessageKey } from '../../protocol/headers.js';
import { LIMITS } from '../../protocol/limits.js';
import { META } from '../../protocol/metadata.js';
import { USER, supportsClientRouting, withRoutingRequest, type RouterDecision } from '../../protocol/routing.js';
import type { AgentCard, Message, Task } from '../../protocol/a2a.js';
import { historyWanted } from '../../protocol/conversation.js';
import type { AgentConversation } from '../../machines/thread/memory.js';
import { DEFAULT_SANITISER_POLICY, appliesTo, sanitiseMessage, type SanitiserPolicy } from '../../sanitiser/sanitiser.js';
import { AgentReplySchema, type AgentReply } from '../../protocol/wire.js';
import { decode, encodeJson } from '../../protocol/codec.js';
import { parseAgentChunks, subjects } from '../../transport/subjects.js';
import type { InboundMessage, Subscription, Transport } from '../../transport/types.js';
import type { Registry } from '../registry.js';
import { metrics, outcomeLabel } from '../../observability/metrics.js';
import { SpanKind, endSpan, injectTraceparent, startSpan, tracing, type Span } from '../../observability/tracing.js';

export interface AgentCallerOptions {
  tenant: string;
  transport: Transport;
  registry: Registry;
  log: Logger;
  policy?: RouterPolicy;
  /** A validated chunk for the thread's owner. */
  relayChunk: (threadId: string, event: TaskArtifactUpdateEvent) => void;
  /**
   * What one agent passes to another (routed messages, handoff requests with their recent messages,
   * fan-out inputs) goes through this policy; the thread keeps the original. Default: every detector
   * on those three paths. `false` turns it off.
   */
  sanitiser?: SanitiserPolicy | false;
  /**
   * The conversation an agent whose card asks for it gets with a message of thread `threadId`
   * (`troupe/history`, `troupe/memory`): from the thread's context as it is now; undefined when the thread
   * is not here.
   */
  conversation?: (threadId: string, agentId: string, message: Message, maxMessages: number) => AgentConversation | undefined;
  /** Whether the thread is inspected: its calls then ask the agent to publish inspection records too. */
  inspected?: (threadId: string) => boolean;
  /** With tracing on: the span an agent call of this thread at this hop belongs to (its hop span). */
  hopSpan?: (threadId: string, hop: number, agentId: string) => Span | undefined;
  /** With tracing on: the span of the thread's turn in progress (the router decision's parent). */
  turnSpan?: (threadId: string) => Span | undefined;
}

/** A call in progress, by its token in the chunk subject. */
interface OpenCall {
  agentId: string;
  onChunk: (chunk: InboundMessage) => void;
}

export class AgentCaller {
  /** Chunks refused at the edge (too large, malformed, for no open call), for diagnostics. */
  refusedChunks = 0;
  /** This caller's token in chunk subjects: `troupe.<t>.chunks.<A>.<token>.<call>`. */
  private readonly token = randomUUID();
  private nextCall = 0;
  private readonly open = new Map<string, OpenCall>();
  private chunkSub?: Subscription;

  constructor(private readonly opts: AgentCallerOptions) {}

  /**
   * One subscription for the chunks of every call this caller makes. The broker lets only agent A publish
   * below `chunks.A`, so the agent named in a chunk's subject is the one that sent it; a chunk must also
   * belong to an open call to that agent.
   */
  private chunks(): void {
    if (this.chunkSub) return;
    this.chunkSub = this.opts.transport.subscribe(subjects.agentChunksFor(this.opts.tenant, this.token), (msg) => {
      const at = parseAgentChunks(msg.subject);
      const call = at ? this.open.get(at.call) : undefined;
      if (!at || !call || call.agentId !== at.agentId) {
        this.refusedChunks++;
        return;
      }
      call.onChunk(msg);
    });
  }

  /** Ends the chunk subscription (the host is stopping). */
  stop(): void {
    this.chunkSub?.unsubscribe();
    this.chunkSub = undefined;
    this.open.clear();
  }

  /** Calls an agent; `fanOut` marks one call of a fan-out (the sanitiser's `fanOut` path). */
  async call(input: AgentRequestInput, opts: { fanOut?: boolean } = {}): Promise<AgentReply> {
    const { tenant, transport, registry, log } = this.opts;
    const threadId = input.message.taskId ?? '';
    const card = registry.card(input.agentId);
    const outgoing = this.sanitise(this.withConversation(input, threadId, card), opts.fanOut === true, threadId);
    const message =
      card && supportsClientRouting(card) ? withRoutingRequest(outgoing, { agentCards: registry.peersOf(input.agentId), sender: input.sender }) : outgoing;
    const headers: Record<string, string> = {
      [HEADERS.threadId]: threadId,
      [HEADERS.tenant]: tenant,
      [HEADERS.hop]: String(input.hop),
      [HEADERS.sender]: input.sender,
      [HEADERS.callId]: scopedMessageKey(threadId, input.message.messageId),
      [HEADERS.taskId]: threadId,
      [HEADERS.contextId]: input.message.contextId ?? threadId,
      ...(this.opts.inspected?.(threadId) ? { [HEADERS.inspect]: '1' } : {}),
    };
    let span: Span | undefined;
    if (tracing.on) {
      span = startSpan('troupe.agent.call', {
        parent: this.opts.hopSpan?.(threadId, input.hop, input.agentId),
        kind: SpanKind.CLIENT,
        attributes: {
          'troupe.agent': input.agentId,
          'troupe.attempt': input.attempt,
          'troupe.hop': input.hop,
          'troupe.thread': threadId,
          'troupe.fan_out': opts.fanOut === true,
        },
      });
      injectTraceparent(headers, span);
    }
    this.chunks();
    const callToken = (this.nextCall++).toString(36);
    headers[HEADERS.chunks] = subjects.agentChunks(tenant, input.agentId, this.token, callToken);
    const contextId = input.message.contextId ?? threadId;
    this.open.set(callToken, { agentId: input.agentId, onChunk: (chunk) => this.relay(threadId, input.agentId, contextId, chunk) });
    const started = performance.now();
    log.debug({ thread: threadId, agent: input.agentId, attempt: input.attempt, messageId: input.message.messageId }, 'calling agent');
    let res: InboundMessage;
    try {
      res = await transport.request(subjects.agentInbox(tenant, input.agentId), encodeJson(message), { timeoutMs: input.timeoutMs, headers });
    } catch (err) {
      const error = toErrorBody(err, input.agentId);
      this.settled(input.agentId, started, error, span);
      log.warn({ thread: threadId, agent: input.agentId, attempt: input.attempt, code: error.code, err: (err as Error).message }, 'agent call failed');
      throw err;
    } finally {
      // Chunks the agent sent before its answer were delivered before it (one connection, in order).
      this.open.delete(callToken);
    }
    let reply: AgentReply;
    try {
      reply = decode(AgentReplySchema, res.data, `reply from agent "${input.agentId}"`, LIMITS.agentReplyBytes);
    } catch (err) {
      const error = TroupeError.from(err, 'AGENT_ERROR');
      const code = error.code === 'PAYLOAD_TOO_LARGE' ? 'PAYLOAD_TOO_LARGE' : 'AGENT_ERROR';
      log.warn({ thread: threadId, agent: input.agentId, code }, error.message);
      reply = { kind: 'error', error: { code, message: `agent "${input.agentId}" sent an invalid reply: ${error.message}` } };
    }
    this.settled(input.agentId, started, reply.kind === 'error' ? reply.error : undefined, span);
    if (reply.kind === 'task') this.relayArtifacts(threadId, input.agentId, input.message.contextId ?? threadId, reply);
    return reply;
  }

  /**
   * The artifacts of a Task an agent answers with become the thread's, like streamed chunks: each one
   * whole (`append: false`, `lastChunk: true`), with the thread's ids and the agent's name, before the
   * answer itself, so a streaming client sees them before the final status and the turn's write keeps them.
   */
  private relayArtifacts(threadId: string, agentId: string, contextId: string, task: Task): void {
    for (const artifact of task.artifacts ?? [])
      this.forward(threadId, agentId, contextId, { kind: 'artifact-update', taskId: threadId, contextId, artifact, append: false, lastChunk: true });
  }

  /** Metrics and span of one finished call (attempt). */
  private settled(agentId: string, started: number, error: { code: string; message: string } | undefined, span: Span | undefined): void {
    const outcome = error ? outcomeLabel(error.code) : 'ok';
    metrics.agentCallSeconds.observe({ agent: agentId, outcome }, (performance.now() - started) / 1000);
    if (error) metrics.agentCallErrors.inc({ agent: agentId, code: outcome });
    if (span) endSpan(span, error);
  }

  /** The input with the thread's conversation attached, when the agent's card asks for it. */
  private withConversation(input: AgentRequestInput, threadId: string, card: AgentCard | undefined): AgentRequestInput {
    const wanted = historyWanted(card);
    if (wanted === undefined || !this.opts.conversation) return input;
    const conversation = this.opts.conversation(threadId, input.agentId, input.message, wanted);
    if (!conversation) return input;
    const metadata = {
      ...input.message.metadata,
      [META.history]: conversation.history,
      ...(conversation.memory ? { [META.memory]: conversation.memory } : {}),
    };
    return { ...input, message: { ...input.message, metadata } };
  }

  /** The copy of the message the agent may see, under the team's sanitiser policy. */
  private sanitise(input: AgentRequestInput, fanOut: boolean, threadId: string): Message {
    const policy = this.opts.sanitiser === undefined ? DEFAULT_SANITISER_POLICY : this.opts.sanitiser;
    if (!policy) return input.message;
    const flow = fanOut ? 'fanOut' : input.message.metadata?.[META.recentMessages] !== undefined ? 'handoff' : input.sender !== USER ? 'routed' : 'entry';
    if (!appliesTo(policy, flow)) return input.message;
    const result = sanitiseMessage(input.message, { policy, recipientAgentId: input.agentId });
    const masked = Object.entries(result.counts).filter(([, n]) => n > 0);
    if (masked.length)
      this.opts.log.info({ thread: threadId, agent: input.agentId, flow, masked: Object.fromEntries(masked) }, 'sanitised context passed to an agent');
    return result.value;
  }

  /** Validates a streamed chunk and hands it on with the thread's own ids (an agent cannot aim it elsewhere). */
  private relay(threadId: string, agentId: string, contextId: string, chunk: InboundMessage): void {
    let event: TaskArtifactUpdateEvent;
    try {
      event = decode(TaskArtifactUpdateEventSchema, chunk.data, `chunk from agent "${agentId}"`, LIMITS.chunkBytes);
    } catch (err) {
      this.refusedChunks++;
      this.opts.log.warn({ thread: threadId, agent: agentId, err: (err as Error).message }, 'refused a streamed chunk');
      return;
    }
    this.forward(threadId, agentId, contextId, event);
  }

  /** Hands an artifact update to the thread's owner under the thread's own ids, marked with the agent that made it. */
  private forward(threadId: string, agentId: string, contextId: string, event: TaskArtifactUpdateEvent): void {
    this.opts.relayChunk(threadId, {
      ...event,
      taskId: threadId,
      contextId,
      artifact: { ...event.artifact, metadata: { ...event.artifact.metadata, [META.agent]: agentId } },
    });
  }

  async decide(input: PolicyInput): Promise<RouterDecision> {
    if (!this.opts.policy) throw new TroupeError('ROUTER_FAILURE', 'no router policy configured');
    const agents = this.opts.registry.agents().filter((a) => input.agentIds.includes(a.id));
    const request = { message: input.message, agents, ...(input.history ? { history: input.history } : {}) };
    if (!tracing.on) return this.opts.policy.decide(request);
    const threadId = input.message.taskId ?? '';
    const span = startSpan('troupe.route', {
      parent: this.opts.turnSpan?.(threadId),
      attributes: { 'troupe.thread': threadId, 'troupe.candidates': agents.length },
    });
    try {
      const decision = await this.opts.policy.decide(request);
      span.setAttributes({
        'troupe.route.agent': decision.agentId,
        'troupe.route.confidence': decision.confidence,
        'troupe.route.additional': decision.additionalAgents?.length ?? 0,
      });
      endSpan(span);
      return decision;
    } catch (err) {
      endSpan(span, TroupeError.from(err, 'ROUTER_FAILURE'));
      throw err;
    }
  }
}
