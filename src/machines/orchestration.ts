/**
 * Orchestration: fan one message out to the router's primary agent and its additional agents, then
 * aggregate the answers into one agent message.
 *
 *   running.dispatching --(strategy)--> running.parallel | running.sequential | running.firstSuccess
 *   running --(all calls settled, or first success in firstSuccess)--> aggregating --> done (final)
 *
 * - `parallel`: every agent at once (at most `maxParallelAgents`; the rest are reported as skipped).
 * - `sequential`: one after another, each with the original message; all answers are collected.
 * - `first_success`: every agent at once (same limit); the first success wins, the other calls are
 *   stopped (their request's AbortSignal fires) and reported as cancelled. The answer is the winner's
 *   content; agents that failed before it are listed in `failures` only.
 *
 * Each agent is called by an `agentCall` child (agent-call.ts, the same machine a thread invokes for one
 * agent) with id `call:<agentId>`: it owns the per-attempt timeout, the retries and their delays, and it
 * marks its request as a fan-out call (`fanOut: true`, the sanitiser's fan-out path). This machine
 * keeps what is particular to a fan-out: the strategy, the limits, cancelling the losers of a
 * first_success, and the aggregation.
 *
 * Pure: the clock comes in from `startedAt` and `troupe.orchestration.tick { now }` (the thread forwards
 * its own ticks, which the host sends as agents answer); `executionTimeMs` is `now - startedAt`.
 * After a restore the host sends `troupe.orchestration.restored { now }`, which passes
 * `troupe.agentCall.restored` on to every running call so it re-arms its timers (XState does not
 * persist delays) and runs its request again with the same idempotency key (the message's messageId).
 */
import { assign, enqueueActions, setup, type SnapshotFrom } from 'xstate';
import { messageText, type Message, type Part } from '../protocol/a2a.js';
import type { ErrorCode } from '../protocol/errors.js';
import { META } from '../protocol/metadata.js';
import { readTurnUsage, type TurnUsage } from '../protocol/conversation.js';
import { USER, type RouterDecision } from '../protocol/routing.js';
import { agentCallMachine, type AgentCallInput, type AgentCallOutput } from './agent-call.js';
import type { OrchestrationStrategy } from '../config/thread.js';

export type { OrchestrationStrategy };

export interface OrchestrationInput {
  decision: RouterDecision;
  message: Message;
  strategy: OrchestrationStrategy;
  /** Limit for `parallel` and `first_success` (default 3). */
  maxParallelAgents?: number;
  /** Per attempt (default 30000). */
  agentTimeoutMs?: number;
  /** Retries after the first attempt (default 2). */
  retries?: number;
  retryDelayMs?: number;
  /** Epoch ms. */
  startedAt: number;
  /** Answer when every agent failed; `{failureMessage}` is replaced. */
  fallbackMessage?: string;
  /** Answer when some agents failed; default `{successMessage} However, {failureMessage}`. */
  partialFailureTemplate?: string;
  /** Who the calls come from (default `user`; a delegating agent's id for a delegation) and at which hop (default 0). */
  sender?: string;
  hop?: number;
}

export interface AgentFailure {
  agentId: string;
  code: ErrorCode;
  message: string;
}

type AgentCallStatus = 'queued' | 'running' | 'succeeded' | 'failed' | 'cancelled';

interface AgentCallRecord {
  agentId: string;
  status: AgentCallStatus;
  /** Id of the `agentCall` child once started. */
  actorId?: string;
  /** Attempts the call made (known when it settled). */
  attempts?: number;
  reply?: Message;
  error?: { code: ErrorCode; message: string };
  /** The machine's `now` when the call started and when it settled (its latency is the difference). */
  startedAt?: number;
  finishedAt?: number;
}

/**
 * One agent's part in a fan-out, in the aggregated metadata: seed 003's AgentResponse (`agentId`, `content`,
 * `success`, `errorMessage`, `executionTimeMs`) with Troupe's `latencyMs` and typed `error` beside them.
 */
interface AgentCallSummary {
  agentId: string;
  success: boolean;
  /** The agent's answer as text ('' when it gave none), at most AGENT_CONTENT_CHARS characters. */
  content: string;
  /** How long its call took (retries included); 0 for a call that never started. */
  latencyMs: number;
  /** The same, by seed 003's name. */
  executionTimeMs: number;
  error?: { code: ErrorCode; message: string };
  /** `error.message`, by seed 003's name. */
  errorMessage?: string;
}

/** Longest `content` kept per agent in a fan-out's metadata (the whole answers are the message's parts). */
const AGENT_CONTENT_CHARS = 8_000;

interface OrchestrationMetadata {
  /** Agents that answered, in agent order. */
  agentsUsed: string[];
  executionTimeMs: number;
  taskState: 'completed' | 'failed';
  strategy: OrchestrationStrategy;
  failures: AgentFailure[];
  /** first_success: calls stopped because another agent answered first. */
  cancelled: string[];
  /** Agents left out by `maxParallelAgents`. */
  skipped: string[];
  /** Per agent called, in agent order: success and latency. */
  results: AgentCallSummary[];
  /** Per agent called: how long its call took. */
  latencyMs: Record<string, number>;
}

export interface OrchestrationOutput {
  message: Message;
  metadata: OrchestrationMetadata;
  /** The text of each answer that made it into the aggregate, in agent order (what a synthesis reads). */
  answers: Array<{ agentId: string; text: string; usage?: TurnUsage }>;
}

export interface OrchestrationContext {
  decision: RouterDecision;
  message: Message;
  strategy: OrchestrationStrategy;
  /** The agents called, in order (primary first, deduplicated, limited for parallel strategies). */
  agents: string[];
  skipped: string[];
  maxParallelAgents: number;
  agentTimeoutMs: number;
  retries: number;
  retryDelayMs: number;
  startedAt: number;
  now: number;
  fallbackMessage?: string;
  partialFailureTemplate?: string;
  sender: string;
  hop: number;
  calls: AgentCallRecord[];
  result?: OrchestrationOutput;
}

type CallDoneEvent = { type: `xstate.done.actor.${string}`; output: AgentCallOutput; actorId?: string };
/** An `agentCall` child that crashed (it reports failed requests in its output, so this is a bug in it). */
type CallErrorEvent = { type: `xstate.error.actor.${string}`; error: unknown; actorId?: string };

export type OrchestrationEvent =
  | CallDoneEvent
  | CallErrorEvent
  /** From the host (through the thread): the current time. */
  | { type: 'troupe.orchestration.tick'; now: number }
  /** From the host right after restoring a snapshot: the running calls re-arm their timers. */
  | { type: 'troupe.orchestration.restored'; now: number };

const DEFAULT_PARTIAL_FAILURE_TEMPLATE = '{successMessage} However, {failureMessage}';
const DEFAULT_FALLBACK_MESSAGE = "Sorry, I couldn't get an answer from any of the agents: {failureMessage} Please try again in a moment.";

/* ------------------------------------------------------------------------------------------------ */
/* Aggregation (pure)                                                                               */
/* ------------------------------------------------------------------------------------------------ */

export interface AgentResult {
  agentId: string;
  status: 'succeeded' | 'failed' | 'cancelled';
  reply?: Message;
  error?: { code: ErrorCode; message: string };
}

export interface AggregateOptions {
  /** Used when every agent failed; `{failureMessage}` is replaced. */
  fallbackMessage?: string;
  /** Used when some failed; `{successMessage}` and `{failureMessage}` are replaced. */
  partialFailureTemplate?: string;
}

export interface Aggregation {
  text: string;
  /** Parts of the aggregated message: the single answer's own parts, or the text plus the answers' non-text parts. */
  parts: Part[];
  agentsUsed: string[];
  failures: AgentFailure[];
  cancelled: string[];
  taskState: 'completed' | 'failed';
}

function fill(template: string, values: Record<string, string>): string {
  return template.replace(/\{(\w+)\}/g, (whole, key: string) => values[key] ?? whole);
}

/** One sentence naming the failed agents and why, e.g. `writer did not answer in time; coder failed (boom).` */
export function describeFailures(failures: readonly AgentFailure[]): string {
  const reasons = failures.map((f) => (f.code === 'AGENT_TIMEOUT' ? `${f.agentId} did not answer in time` : `${f.agentId} failed (${f.message})`));
  return reasons.length ? `${reasons.join('; ')}.` : '';
}

function failuresOf(results: readonly AgentResult[]): AgentFailure[] {
  return results
    .filter((r) => r.status === 'failed')
    .map((r) => ({ agentId: r.agentId, code: r.error?.code ?? 'AGENT_ERROR', message: r.error?.message ?? 'unknown error' }));
}

/**
 * Combines the agents' results (given in agent order): one success -> its content; several ->
 * `**<agentId>**: text` blocks; some failed -> the partial-failure template; all failed -> the fallback.
 */
export function aggregate(results: readonly AgentResult[], opts: AggregateOptions = {}): Aggregation {
  const successes = results.filter((r): r is AgentResult & { reply: Message } => r.status === 'succeeded' && r.reply !== undefined);
  const failures = failuresOf(results);
  const cancelled = results.filter((r) => r.status === 'cancelled').map((r) => r.agentId);
  const agentsUsed = successes.map((r) => r.agentId);
  const failureMessage = describeFailures(failures);

  if (successes.length === 0) {
    const text = fill(opts.fallbackMessage ?? DEFAULT_FALLBACK_MESSAGE, { failureMessage }).trim();
    return { text, parts: [{ kind: 'text', text }], agentsUsed, failures, cancelled, taskState: 'failed' };
  }

  const successMessage =
    successes.length === 1 ? messageText(successes[0]!.reply) : successes.map((r) => `**${r.agentId}**: ${messageText(r.reply)}`).join('\n\n');
  const text = failures.length ? fill(opts.partialFailureTemplate ?? DEFAULT_PARTIAL_FAILURE_TEMPLATE, { successMessage, failureMessage }) : successMessage;
  const parts: Part[] =
    successes.length === 1 && failures.length === 0
      ? successes[0]!.reply.parts
      : [{ kind: 'text', text }, ...successes.flatMap((r) => r.reply.parts.filter((p) => p.kind !== 'text'))];
  return { text, parts, agentsUsed, failures, cancelled, taskState: 'completed' };
}

/* ------------------------------------------------------------------------------------------------ */
/* Helpers over context and events                                                                  */
/* ------------------------------------------------------------------------------------------------ */

/** Agents in order: the primary, then the additional ones, without duplicates or blanks. */
export function orchestrationAgents(decision: RouterDecision): string[] {
  return Array.from(new Set([decision.agentId, ...(decision.additionalAgents ?? [])].filter((id) => id.length > 0)));
}

/** The id of the `agentCall` child that calls one agent. */
export function callActorId(agentId: string): string {
  return `call:${agentId}`;
}

const DONE_PREFIX = 'xstate.done.actor.';
const ERROR_PREFIX = 'xstate.error.actor.';

function isDoneEvent(event: OrchestrationEvent): event is CallDoneEvent {
  return event.type.startsWith(DONE_PREFIX);
}
function isErrorEvent(event: OrchestrationEvent): event is CallErrorEvent {
  return event.type.startsWith(ERROR_PREFIX);
}

/** The running call a child's done / error event is about. */
function runningCallFor(context: OrchestrationContext, event: OrchestrationEvent): AgentCallRecord | undefined {
  if (!isDoneEvent(event) && !isErrorEvent(event)) return undefined;
  const actorId = event.type.slice(isDoneEvent(event) ? DONE_PREFIX.length : ERROR_PREFIX.length);
  return context.calls.find((c) => c.status === 'running' && c.actorId === actorId);
}

/**
 * What one agent's call came to, for the aggregate: its answer (marked with the agent), or why it
 * failed — the call's own failure, an error reply, or a task the agent failed or left without a message.
 */
export function callResultOf(output: AgentCallOutput): { reply: Message } | { error: { code: ErrorCode; message: string } } {
  if (!output.ok) return { error: { code: output.error.code, message: output.error.message } };
  const { reply, agentId } = output;
  if (reply.kind === 'error') return { error: { code: reply.error.code, message: reply.error.message } };
  const message = reply.kind === 'task' ? reply.status.message : reply;
  if (reply.kind === 'task' && (reply.status.state === 'failed' || reply.status.state === 'rejected')) {
    const why = messageText(message);
    return { error: { code: 'AGENT_ERROR', message: why || `agent "${agentId}" ${reply.status.state} the task` } };
  }
  if (!message) return { error: { code: 'AGENT_ERROR', message: `agent "${agentId}" returned a task without a message` } };
  return { reply: { ...message, metadata: { ...message.metadata, [META.agent]: agentId } } };
}

function succeeded(event: OrchestrationEvent): boolean {
  return isDoneEvent(event) && 'reply' in callResultOf(event.output);
}

function updateCall(calls: AgentCallRecord[], agentId: string, patch: Partial<AgentCallRecord>): AgentCallRecord[] {
  return calls.map((c) => (c.agentId === agentId ? { ...c, ...patch } : c));
}

/** The input of the `agentCall` child for one agent of the fan-out. */
function callInputOf(context: OrchestrationContext, agentId: string): AgentCallInput {
  return {
    agentId,
    message: context.message,
    sender: context.sender,
    hop: context.hop,
    timeoutMs: context.agentTimeoutMs,
    retries: context.retries,
    retryDelayMs: context.retryDelayMs,
    now: context.now,
    fanOut: true,
  };
}

/** The output for a context whose calls have settled. */
function orchestrationOutputOf(context: OrchestrationContext): OrchestrationOutput {
  const results: AgentResult[] = context.calls.map((c) => ({
    agentId: c.agentId,
    status: c.status === 'succeeded' ? 'succeeded' : c.status === 'failed' ? 'failed' : 'cancelled',
    ...(c.reply ? { reply: c.reply } : {}),
    ...(c.error ? { error: c.error } : {}),
  }));
  // first_success: once an agent has answered, the others' earlier failures do not change the answer
  // (they are still reported in the metadata).
  const winnerOnly = context.strategy === 'first_success' && results.some((r) => r.status === 'succeeded');
  const agg = aggregate(winnerOnly ? results.filter((r) => r.status !== 'failed') : results, {
    ...(context.fallbackMessage !== undefined ? { fallbackMessage: context.fallbackMessage } : {}),
    ...(context.partialFailureTemplate !== undefined ? { partialFailureTemplate: context.partialFailureTemplate } : {}),
  });
  const original = context.message;
  const used = winnerOnly ? results.filter((r) => r.status !== 'failed') : results;
  const answers = used.flatMap((r) => {
    if (r.status !== 'succeeded' || !r.reply) return [];
    const usage = readTurnUsage(r.reply);
    return [{ agentId: r.agentId, text: messageText(r.reply), ...(usage ? { usage } : {}) }];
  });
  const summaries: AgentCallSummary[] = context.calls.map((c) => {
    const latencyMs = c.startedAt !== undefined ? Math.max(0, (c.finishedAt ?? context.now) - c.startedAt) : 0;
    return {
      agentId: c.agentId,
      success: c.status === 'succeeded',
      content: c.reply ? messageText(c.reply).slice(0, AGENT_CONTENT_CHARS) : '',
      latencyMs,
      executionTimeMs: latencyMs,
      ...(c.error ? { error: c.error, errorMessage: c.error.message } : {}),
    };
  });
  const latency: Record<string, number> = Object.create(null) as Record<string, number>;
  for (const r of summaries) latency[r.agentId] = r.latencyMs;
  return {
    message: {
      kind: 'message',
      role: 'agent',
      messageId: `${original.messageId}-orchestrated`,
      ...(original.contextId !== undefined ? { contextId: original.contextId } : {}),
      ...(original.taskId !== undefined ? { taskId: original.taskId } : {}),
      parts: agg.parts,
    },
    metadata: {
      agentsUsed: agg.agentsUsed,
      executionTimeMs: Math.max(0, context.now - context.startedAt),
      taskState: agg.taskState,
      strategy: context.strategy,
      failures: failuresOf(results),
      cancelled: agg.cancelled,
      skipped: context.skipped,
      results: summaries,
      latencyMs: { ...latency },
    },
    answers,
  };
}

function nonNegativeInt(value: number | undefined, fallback: number): number {
  return typeof value === 'number' && Number.isFinite(value) && value >= 0 ? Math.floor(value) : fallback;
}

function orchestrationContextOf(input: OrchestrationInput): OrchestrationContext {
  const maxParallelAgents = Math.max(1, nonNegativeInt(input.maxParallelAgents, 3));
  const all = orchestrationAgents(input.decision);
  const agents = input.strategy === 'sequential' ? all : all.slice(0, maxParallelAgents);
  return {
    decision: input.decision,
    message: input.message,
    strategy: input.strategy,
    agents,
    skipped: all.slice(agents.length),
    maxParallelAgents,
    agentTimeoutMs: nonNegativeInt(input.agentTimeoutMs, 30_000),
    retries: nonNegativeInt(input.retries, 2),
    retryDelayMs: nonNegativeInt(input.retryDelayMs, 1_000),
    startedAt: input.startedAt,
    now: input.startedAt,
    ...(input.fallbackMessage !== undefined ? { fallbackMessage: input.fallbackMessage } : {}),
    ...(input.partialFailureTemplate !== undefined ? { partialFailureTemplate: input.partialFailureTemplate } : {}),
    sender: input.sender ?? USER,
    hop: nonNegativeInt(input.hop, 0),
    calls: agents.map((agentId) => ({ agentId, status: 'queued' })),
  };
}

/* ------------------------------------------------------------------------------------------------ */
/* Machine                                                                                          */
/* ------------------------------------------------------------------------------------------------ */

const orchestrationSetup = setup({
  types: {
    input: {} as OrchestrationInput,
    context: {} as OrchestrationContext,
    events: {} as OrchestrationEvent,
    output: {} as OrchestrationOutput,
  },
  actors: {
    /** One agent's call, with its timeout and retries. Hosts provide it with their `request` actor. */
    agentCall: agentCallMachine,
  },
  guards: {
    isSequential: ({ context }) => context.strategy === 'sequential',
    isFirstSuccess: ({ context }) => context.strategy === 'first_success',
    /** The done / error event of a call still running (not one cancelled before it settled). */
    isRunningCall: ({ context, event }) => runningCallFor(context, event) !== undefined,
    /** A running call that settled with an answer. */
    isRunningSuccess: ({ context, event }) => runningCallFor(context, event) !== undefined && succeeded(event),
    allCallsSettled: ({ context }) => context.calls.every((c) => c.status === 'succeeded' || c.status === 'failed' || c.status === 'cancelled'),
  },
  actions: {
    /** Starts queued calls: all of them (parallel, first_success) or the next one when none is in flight (sequential). */
    startQueuedCalls: enqueueActions(({ context, enqueue }) => {
      const inFlight = context.calls.filter((c) => c.status === 'running').length;
      let slots = (context.strategy === 'sequential' ? 1 : context.agents.length) - inFlight;
      for (const call of context.calls) {
        if (slots <= 0) break;
        if (call.status !== 'queued') continue;
        slots -= 1;
        const { agentId } = call;
        const id = callActorId(agentId);
        enqueue.assign(({ context: ctx }) => ({ calls: updateCall(ctx.calls, agentId, { status: 'running', actorId: id, startedAt: ctx.now }) }));
        enqueue.spawnChild('agentCall', { id, input: callInputOf(context, agentId) });
      }
    }),
    /** A running call settled: its answer, or its failure. */
    recordCallResult: enqueueActions(({ context, event, enqueue }) => {
      const call = runningCallFor(context, event);
      if (!call || !isDoneEvent(event)) return;
      const result = callResultOf(event.output);
      const settled = { attempts: event.output.attempts, finishedAt: context.now };
      enqueue.assign({
        calls: updateCall(
          context.calls,
          call.agentId,
          'reply' in result ? { ...settled, status: 'succeeded', reply: result.reply } : { ...settled, status: 'failed', error: result.error },
        ),
      });
    }),
    /** A call's actor crashed: the call failed. */
    recordCrash: enqueueActions(({ context, event, enqueue }) => {
      const call = runningCallFor(context, event);
      if (!call || !isErrorEvent(event)) return;
      const message = event.error instanceof Error ? event.error.message : String(event.error);
      enqueue.assign({
        calls: updateCall(context.calls, call.agentId, { status: 'failed', error: { code: 'AGENT_ERROR', message }, finishedAt: context.now }),
      });
    }),
    /** first_success: stop every other call in flight (its request is aborted) and mark it cancelled. */
    cancelOtherCalls: enqueueActions(({ context, enqueue }) => {
      let calls = context.calls;
      for (const call of context.calls) {
        if (call.status !== 'running' && call.status !== 'queued') continue;
        if (call.status === 'running' && call.actorId) enqueue.stopChild(call.actorId);
        calls = updateCall(calls, call.agentId, { status: 'cancelled' });
      }
      enqueue.assign({ calls });
    }),
    recordNow: assign({
      now: ({ context, event }) =>
        'now' in event && typeof event.now === 'number' && Number.isFinite(event.now) ? Math.max(context.now, event.now) : context.now,
    }),
    /** After a restore: every running call re-arms its timers and runs its request again. */
    rearmCalls: enqueueActions(({ context, enqueue }) => {
      for (const call of context.calls) {
        if (call.status === 'running' && call.actorId) enqueue.sendTo(call.actorId, { type: 'troupe.agentCall.restored' });
      }
    }),
    aggregateResults: assign({ result: ({ context }) => orchestrationOutputOf(context) }),
  },
});

export const orchestrationMachine = orchestrationSetup.createMachine({
  id: 'orchestration',
  initial: 'running',
  context: ({ input }) => orchestrationContextOf(input),
  on: {
    'troupe.orchestration.tick': { actions: 'recordNow' },
  },
  states: {
    running: {
      initial: 'dispatching',
      always: { guard: 'allCallsSettled', target: 'aggregating' },
      on: {
        'xstate.done.actor.*': { guard: 'isRunningCall', actions: ['recordCallResult', 'startQueuedCalls'] },
        'xstate.error.actor.*': { guard: 'isRunningCall', actions: ['recordCrash', 'startQueuedCalls'] },
        'troupe.orchestration.restored': { actions: ['recordNow', 'rearmCalls'] },
      },
      states: {
        dispatching: {
          always: [{ guard: 'isSequential', target: 'sequential' }, { guard: 'isFirstSuccess', target: 'firstSuccess' }, { target: 'parallel' }],
        },
        parallel: {
          description: 'Every agent at once; collect all answers.',
          entry: 'startQueuedCalls',
        },
        sequential: {
          description: 'One agent after another, each with the original message.',
          entry: 'startQueuedCalls',
        },
        firstSuccess: {
          description: 'Every agent at once; the first answer wins and the others are stopped. A failure is recorded as in the other strategies.',
          entry: 'startQueuedCalls',
          on: {
            'xstate.done.actor.*': {
              guard: 'isRunningSuccess',
              target: '#orchestration.aggregating',
              actions: ['recordCallResult', 'cancelOtherCalls'],
            },
          },
        },
      },
    },
    aggregating: {
      entry: 'aggregateResults',
      always: { target: 'done' },
    },
    done: { type: 'final' },
  },
  output: ({ context }) => context.result ?? orchestrationOutputOf(context),
});

export type OrchestrationSnapshot = SnapshotFrom<typeof orchestrationMachine>;
