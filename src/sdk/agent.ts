/**
 * What an agent author writes: a card and a handler. `defineAgent` checks the card once, up front.
 *
 *   export default defineAgent({
 *     card: { id: 'echo', name: 'Echo', description: 'Repeats you' },
 *     handle: (message, ctx) => reply(`you said ${ctx.text}`, { to: 'sender' }),
 *   });
 */
import type { Logger } from 'pino';
import type { InspectionEvent } from 'xstate';
import { AgentCardSchema, CLIENT_ROUTING_URI, type AgentCard, type AgentCardInput, type Message, type Task } from '../protocol/index.js';
import type { ActorInfo } from '../protocol/ctl.js';
import type { RoutingRequest, SimplifiedAgentCard } from '../protocol/routing.js';
import type { HandoffAccept, HandoffDirective, HandoffRequest, HandoffReturnInput } from '../protocol/handoff.js';
import type { DelegateDirective, DelegationResults } from '../protocol/delegation.js';
import { CONVERSATION_URI, DEFAULT_HISTORY_MESSAGES, type MemorySummary } from '../protocol/conversation.js';

export interface AgentContext {
  readonly tenant: string;
  readonly threadId: string;
  readonly taskId: string;
  readonly contextId: string;
  /** Who sent this message: `user` or an agent id. */
  readonly sender: string;
  /**
   * The call's `Troupe-Call-Id` (`<thread>/<messageId>`), when the caller sent one: the same on every retry
   * of the call, so an agent with effects of its own can key them on it (docs/wire-contract.md).
   */
  readonly callId?: string;
  readonly hop: number;
  /** The message's text parts joined. */
  readonly text: string;
  /** The other agents this one may route to (present when the agent declares client routing). */
  readonly peers: readonly SimplifiedAgentCard[];
  readonly routing?: RoutingRequest;
  /** Set when this agent is the target of a handoff: who handed over, why, and the context summary. */
  readonly handoff?: HandoffRequest;
  /** Recent messages of the thread, sent along with a handoff. */
  readonly recentMessages?: readonly Message[];
  /**
   * The thread's earlier messages, oldest first, without the one being answered: the user's, this agent's
   * own answers (`role: 'agent'`, `metadata['troupe/agent']` its id) and other agents' (their id there).
   * Present when the card asks for them (`defineAgent`'s `history`, on by default); read from the thread's
   * record, so a node restart or a takeover loses none of it.
   */
  readonly history?: readonly Message[];
  /** The summary this agent wrote earlier of turns older than `history` (sent back in a reply's `troupe/memory`). */
  readonly memory?: MemorySummary;
  /** Set when this message brings back what this agent's delegates answered (after `reply(text, { delegate })`). */
  readonly delegation?: DelegationResults;
  /** Aborted when the host stops. */
  readonly signal: AbortSignal;
  readonly log: Logger;
  /** Publishes a chunk to the user at once (no-op when the caller did not ask for streaming). */
  stream(text: string): void;
  /**
   * XState's `inspect` option for actors the handler runs (an LLM loop): `createActor(machine, { inspect:
   * ctx.inspect })` puts them on the mesh's inspection stream, under this thread, when it is inspected.
   */
  readonly inspect?: (event: InspectionEvent) => void;
}

/** A reply in its simplest form: text and, optionally, who should get it next. */
export interface ReplySpec extends ReplyOptions {
  kind: 'reply';
  text: string;
}

export interface ReplyOptions {
  /** Next recipient: `user`, `sender` or an agent id. */
  to?: string;
  reason?: string;
  metadata?: Record<string, unknown>;
  /** A structured answer: sent as a data part after the text (A2A `{ kind: 'data', data }`). */
  data?: Record<string, unknown>;
  /** Hand the conversation to another agent, which then talks to the user until it returns. */
  handoff?: HandoffDirective;
  /** As a handoff's target: give control back to the source with a result. */
  handoffReturn?: HandoffReturnInput;
  /** As a handoff's target, in the first reply: decline it (absent = accepted). */
  handoffAccept?: HandoffAccept;
  /**
   * Ask the thread to call these agents (with `input`, default this reply's text) and bring their answers
   * back to this agent (`ctx.delegation` of the next message), which then answers the user itself.
   */
  delegate?: DelegateDirective;
}

export type AgentResult = string | ReplySpec | Message | Task;

/**
 * A handler returns a result, or yields text chunks (streamed to the user as they come) and may
 * return a final result; when it returns nothing, the chunks joined are the reply.
 */
export type AgentHandler = (message: Message, ctx: AgentContext) => AgentResult | Promise<AgentResult> | AsyncGenerator<string, AgentResult | void, void>;

/** Where an agent runs (seed 003's AgentResolutionResult `source` / `endpoint`): in its host's process, or behind an A2A endpoint. */
export type AgentSource = { source: 'local' } | { source: 'a2a'; endpoint: string };

/** An agent's own account of its work, for diagnostics. Small, and never with secrets. */
export interface AgentWorkStatus {
  /** Default `{ source: 'local' }`. */
  source?: AgentSource;
  /**
   * False while the agent cannot serve (a remote agent whose endpoint does not answer): `troupe ps` shows
   * it `unavailable` with `reason`, and its calls fail with a typed error.
   */
  ready?: boolean;
  reason?: string;
  /** Goes into the status the agent announces (`troupe inspect <agentId>` shows it). */
  detail?: Record<string, unknown>;
  /** Actors running inside the agent (e.g. a model loop per message in flight), listed by `troupe ps` under it. */
  actors?: Array<Pick<ActorInfo, 'kind' | 'id' | 'state'> & { threadId?: string; detail?: Record<string, unknown> }>;
}

export interface AgentDefinition {
  card: AgentCard;
  handle: AgentHandler;
  /** What `troupe ps` / `inspect` show about the agent's work in flight (e.g. where its model loops are). */
  status?: () => AgentWorkStatus;
  /** Releases what the agent holds (subprocesses, connections) when its host stops; may be called once per replica. */
  close?: () => Promise<void>;
}

/**
 * `history`: whether the agent gets the thread's earlier messages as `ctx.history` (default true: the newest
 * DEFAULT_HISTORY_MESSAGES), or how many at most (`{ maxMessages }`); the card says so to the thread.
 */
export function defineAgent(def: {
  card: AgentCardInput & { routing?: boolean; history?: boolean | { maxMessages: number } };
  handle: AgentHandler;
}): AgentDefinition {
  const { routing = true, history = true, ...cardInput } = def.card;
  const card = AgentCardSchema.parse(cardInput);
  if (routing && !(card.capabilities.extensions ?? []).some((e) => e.uri === CLIENT_ROUTING_URI)) {
    card.capabilities = {
      ...card.capabilities,
      extensions: [
        ...(card.capabilities.extensions ?? []),
        { uri: CLIENT_ROUTING_URI, description: 'Names the next recipient of its replies', required: false },
      ],
    };
  }
  if (history !== false && !(card.capabilities.extensions ?? []).some((e) => e.uri === CONVERSATION_URI)) {
    const maxMessages = history === true ? DEFAULT_HISTORY_MESSAGES : history.maxMessages;
    card.capabilities = {
      ...card.capabilities,
      extensions: [
        ...(card.capabilities.extensions ?? []),
        { uri: CONVERSATION_URI, description: "Takes the thread's earlier messages with each message", required: false, params: { maxMessages } },
      ],
    };
  }
  return { card, handle: def.handle };
}

/** Reply with text, optionally naming the next recipient (`user`, `sender` or an agent id). */
export function reply(text: string, opts: ReplyOptions = {}): ReplySpec {
  return { kind: 'reply', text, ...opts };
}

export function isAgentDefinition(value: unknown): value is AgentDefinition {
  return typeof value === 'object' && value !== null && 'card' in value && 'handle' in value && typeof (value as { handle: unknown }).handle === 'function';
}
