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
import {
  AgentCardSchema,
  CLIENT_ROUTING_URI,
  type AgentCard,
  type AgentCardInput,
  type Message,
  type Task,
} from '../protocol/index.js';
import type { ActorInfo } from '../protocol/ctl.js';
import type { RoutingRequest, SimplifiedAgentCard } from '../protocol/routing.js';
import type { HandoffAccept, HandoffDirective, HandoffRequest, HandoffReturnInput } from '../protocol/handoff.js';
import type { DelegateDirective, DelegationResults } from '../protocol/delegation.js';

export interface AgentContext {
  readonly tenant: string;
  readonly threadId: string;
  readonly taskId: string;
  readonly contextId: string;
  /** Who sent this message: `user` or an agent id. */
  readonly sender: string;
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
export type AgentHandler = (
  message: Message,
  ctx: AgentContext,
) => AgentResult | Promise<AgentResult> | AsyncGenerator<string, AgentResult | void, void>;

/** An agent's own account of its work, for diagnostics. Small, and never with secrets. */
export interface AgentWorkStatus {
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

export function defineAgent(def: { card: AgentCardInput & { routing?: boolean }; handle: AgentHandler }): AgentDefinition {
  const { routing = true, ...cardInput } = def.card;
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
  return { card, handle: def.handle };
}

/** Reply with text, optionally naming the next recipient (`user`, `sender` or an agent id). */
export function reply(text: string, opts: ReplyOptions = {}): ReplySpec {
  return { kind: 'reply', text, ...opts };
}

export function isAgentDefinition(value: unknown): value is AgentDefinition {
  return (
    typeof value === 'object' &&
    value !== null &&
    'card' in value &&
    'handle' in value &&
    typeof (value as { handle: unknown }).handle === 'function'
  );
}
