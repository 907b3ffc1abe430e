/**
 * The model's turn of an LLM agent as a statechart:
 *
 *   thinking ──(tool calls)──> tools ──(all results in)──> thinking … ──> answered
 *      │  └──(retryable error)──> retrying ──(backoff)──> thinking              └──> failed
 *
 * `thinking` invokes the injected `model` actor (one streamed completion). When the model asks for tools,
 * `tools` spawns one `toolCall` child per call — they run in parallel, each with its own timeout — and
 * goes back to thinking with every result (a failed or timed-out tool is a tool error the model reads,
 * not a crash). A model that still asks for tools after `maxToolRounds` rounds ends in `failed` with
 * TOOL_ROUND_LIMIT; a model call that keeps failing ends in `failed` with MODEL_ERROR after `maxRetries`
 * retries with exponential backoff (429 / 5xx / lost connections only; the server's Retry-After wins).
 *
 * `controlTools` are calls that decide where the answer goes (client routing). When the model calls only
 * those, they succeed, and it already wrote its answer in the same response, the turn ends there
 * instead of asking the model again.
 *
 * A round that calls a tool a person must approve (`approvalTools`) runs none of its calls: the loop
 * ends in `awaitingApproval`, its output holding the round's calls; the host asks and, once decided,
 * starts a new loop with the results.
 *
 * Pure: the model call and the tool runs are injected actors (`llmAgentLogic({ callModel, runTool })`);
 * the clock is XState's delayed transitions. This actor lives for one turn in the agent's process.
 */
import { assign, enqueueActions, fromPromise, setup, type ActorRefFrom, type DoneActorEvent, type ErrorActorEvent } from 'xstate';
import type { ErrorBody } from '../protocol/errors.js';
import type { ChatMessage, Completion, ToolCall, ToolDefinition } from '../model/types.js';

const DEFAULT_MODEL_RETRIES = 3;
const DEFAULT_RETRY_BASE_MS = 500;
/** No computed backoff waits longer than this. */
const MAX_BACKOFF_MS = 8_000;
/** A server's Retry-After is honoured up to this. */
const MAX_RETRY_AFTER_MS = 30_000;

export interface ModelCallInput {
  /** The turn this call belongs to (LlmAgentInput.turnId). */
  turnId: string;
  messages: ChatMessage[];
  tools: ToolDefinition[];
  /** 0 for the first model call of the turn; one more after each tool round. */
  round: number;
  /** 0 for the first try of this call; one more per retry. */
  attempt: number;
}

export interface ToolRunInput {
  turnId: string;
  call: ToolCall;
  round: number;
}

/** What one tool call gives the model. */
export interface ToolResult {
  callId: string;
  name: string;
  content: string;
  isError: boolean;
}

export interface LlmAgentInput {
  /**
   * Names this turn in the inputs of the injected actors, so a host can build the logic once and find
   * the turn's own I/O (its stream, its routing tools) by this key. Default ''.
   */
  turnId?: string;
  /** The system prompt and the conversation so far, ending with the message to answer. */
  messages: ChatMessage[];
  tools: ToolDefinition[];
  /** Names of the routing tools (see the file header). */
  controlTools: string[];
  maxToolRounds: number;
  toolTimeoutMs: number;
  /** Per-tool timeouts by tool name, overriding `toolTimeoutMs`. */
  toolTimeouts?: Record<string, number>;
  /**
   * Tools a person must approve first: a round that calls one runs none of its calls, and the loop ends
   * in `awaitingApproval` with the round's calls in its output (the host asks, and resumes later).
   */
  approvalTools?: string[];
  maxRetries?: number;
  retryBaseMs?: number;
}

export interface LlmAgentContext {
  turnId: string;
  messages: ChatMessage[];
  tools: ToolDefinition[];
  controlTools: string[];
  maxToolRounds: number;
  toolTimeoutMs: number;
  toolTimeouts: Record<string, number>;
  approvalTools: string[];
  maxRetries: number;
  retryBaseMs: number;
  /** Tool rounds done. */
  round: number;
  /** Retries of the current model call. */
  attempt: number;
  retryDelayMs: number;
  /** Tool calls of the current round, in the model's order. */
  pending: ToolCall[];
  /** Results of the current round by call id (a null-prototype map: ids come from the model). */
  results: Record<string, ToolResult>;
  /** Text the model wrote alongside the current round's tool calls. */
  roundText: string;
  toolCallsMade: number;
  /** The loop ended in `awaitingApproval`. */
  awaitingApproval?: boolean;
  text?: string;
  error?: ErrorBody;
  lastModelError?: string;
}

export type LlmAgentOutput =
  { ok: true; text: string; rounds: number; toolCalls: number; approval?: ToolCall[] } | { ok: false; error: ErrorBody; rounds: number; toolCalls: number };

// ---------------------------------------------------------------------------------------------------
// One tool call: running -> succeeded | failed | timedOut, always with a result for the model.

interface ToolCallInput {
  turnId: string;
  call: ToolCall;
  round: number;
  timeoutMs: number;
}

interface ToolCallContext extends ToolCallInput {
  result?: ToolResult;
}

function errorText(err: unknown): string {
  return err instanceof Error ? err.message : typeof err === 'string' ? err : JSON.stringify(err);
}

export const toolCallMachine = setup({
  types: { input: {} as ToolCallInput, context: {} as ToolCallContext, output: {} as ToolResult },
  actors: {
    runTool: fromPromise<string, ToolRunInput>(async () => {
      throw new Error('toolCall: the host must provide the `runTool` actor');
    }),
  },
  delays: {
    toolTimeout: ({ context }) => context.timeoutMs,
  },
  actions: {
    recordResult: assign({
      result: ({ context }, content: string) => ({ callId: context.call.id, name: context.call.name, content, isError: false }),
    }),
    recordError: assign({
      result: ({ context }, err: unknown) => ({
        callId: context.call.id,
        name: context.call.name,
        content: JSON.stringify({ error: errorText(err) }),
        isError: true,
      }),
    }),
    recordTimeout: assign({
      result: ({ context }) => ({
        callId: context.call.id,
        name: context.call.name,
        content: JSON.stringify({ error: `the tool "${context.call.name}" did not finish within ${context.timeoutMs} ms` }),
        isError: true,
      }),
    }),
  },
}).createMachine({
  id: 'toolCall',
  context: ({ input }) => ({ ...input }),
  initial: 'running',
  states: {
    running: {
      invoke: {
        id: 'runTool',
        src: 'runTool',
        input: ({ context }) => ({ turnId: context.turnId, call: context.call, round: context.round }),
        onDone: { target: 'succeeded', actions: { type: 'recordResult', params: ({ event }) => event.output } },
        onError: { target: 'failed', actions: { type: 'recordError', params: ({ event }: { event: ErrorActorEvent }) => event.error } },
      },
      after: { toolTimeout: { target: 'timedOut', actions: 'recordTimeout' } },
    },
    succeeded: { type: 'final' },
    failed: { type: 'final' },
    timedOut: { type: 'final' },
  },
  output: ({ context }) => context.result!,
});

// ---------------------------------------------------------------------------------------------------
// The loop.

const TOOL_CHILD_PREFIX = 'tool';

function toolChildId(round: number, index: number): string {
  return `${TOOL_CHILD_PREFIX}-${round}-${index}`;
}

function modelFailure(err: unknown): { retryable: boolean; retryAfterMs?: number; message: string } {
  const e = err as { retryable?: unknown; retryAfterMs?: unknown } | null;
  return {
    retryable: e?.retryable === true,
    ...(typeof e?.retryAfterMs === 'number' ? { retryAfterMs: e.retryAfterMs } : {}),
    message: errorText(err),
  };
}

const llmAgentSetup = setup({
  types: {
    input: {} as LlmAgentInput,
    context: {} as LlmAgentContext,
    output: {} as LlmAgentOutput,
  },
  actors: {
    model: fromPromise<Completion, ModelCallInput>(async () => {
      throw new Error('llmAgent: the host must provide the `model` actor');
    }),
    toolCall: toolCallMachine,
  },
  delays: {
    retryDelay: ({ context }) => context.retryDelayMs,
  },
  guards: {
    asksForTools: (_, completion: Completion) => completion.toolCalls.length > 0,
    roundLimitReached: ({ context }) => context.round >= context.maxToolRounds,
    needsApproval: ({ context }) => context.pending.some((c) => context.approvalTools.includes(c.name)),
    canRetry: ({ context }, err: unknown) => modelFailure(err).retryable && context.attempt < context.maxRetries,
    allToolsDone: ({ context }) => context.pending.every((c) => context.results[c.id] !== undefined),
    /** Only routing tools, all accepted, and the answer already written: nothing more to ask. */
    answeredWithRouting: ({ context }) =>
      context.roundText.trim() !== '' && context.pending.every((c) => context.controlTools.includes(c.name) && context.results[c.id]?.isError === false),
  },
  actions: {
    startRound: assign(({ context }, completion: Completion) => {
      // Duplicate ids would pair results with the wrong calls: make each unique within the round.
      const seen = new Set<string>();
      const pending = completion.toolCalls.map((call, i) => {
        const id = seen.has(call.id) ? `${call.id}#${i}` : call.id;
        seen.add(id);
        return { ...call, id };
      });
      return {
        pending,
        results: Object.create(null) as Record<string, ToolResult>,
        roundText: completion.text,
        attempt: 0,
        messages: [...context.messages, { role: 'assistant' as const, content: completion.text, toolCalls: pending }],
      };
    }),
    spawnToolCalls: enqueueActions(({ context, enqueue }) => {
      context.pending.forEach((call, index) => {
        enqueue.spawnChild('toolCall', {
          id: toolChildId(context.round, index),
          input: { turnId: context.turnId, call, round: context.round, timeoutMs: context.toolTimeouts[call.name] ?? context.toolTimeoutMs },
        });
      });
    }),
    recordToolResult: assign({
      results: ({ context }, result: ToolResult) => {
        const results = Object.assign(Object.create(null) as Record<string, ToolResult>, context.results);
        results[result.callId] = result;
        return results;
      },
    }),
    endRound: assign(({ context }) => ({
      round: context.round + 1,
      toolCallsMade: context.toolCallsMade + context.pending.length,
      messages: [
        ...context.messages,
        ...context.pending.map((c) => {
          const r = context.results[c.id]!;
          return { role: 'tool' as const, toolCallId: c.id, name: c.name, content: r.content, ...(r.isError ? { isError: true } : {}) };
        }),
      ],
    })),
    answerWithRoundText: assign(({ context }) => ({
      text: context.roundText,
      round: context.round + 1,
      toolCallsMade: context.toolCallsMade + context.pending.length,
    })),
    recordAnswer: assign({ text: (_, completion: Completion) => completion.text }),
    markAwaitingApproval: assign({ awaitingApproval: true }),
    recordRoundLimit: assign({
      error: ({ context }) => ({
        code: 'TOOL_ROUND_LIMIT' as const,
        message: `the model still asked for tools after ${context.maxToolRounds} tool round${context.maxToolRounds === 1 ? '' : 's'}`,
        details: { maxToolRounds: context.maxToolRounds },
      }),
    }),
    scheduleRetry: assign(({ context }, err: unknown) => {
      const failure = modelFailure(err);
      const backoff = Math.min(MAX_BACKOFF_MS, context.retryBaseMs * 2 ** context.attempt);
      return {
        attempt: context.attempt + 1,
        retryDelayMs: failure.retryAfterMs !== undefined ? Math.min(MAX_RETRY_AFTER_MS, failure.retryAfterMs) : backoff,
        lastModelError: failure.message,
      };
    }),
    recordModelFailure: assign({
      error: ({ context }, err: unknown) => {
        const failure = modelFailure(err);
        const tries = context.attempt + 1;
        return {
          code: 'MODEL_ERROR' as const,
          message: `${failure.message}${failure.retryable ? ` (gave up after ${tries} attempt${tries === 1 ? '' : 's'})` : ''}`,
          details: { attempts: tries, retryable: failure.retryable },
        };
      },
    }),
  },
});

export const llmAgentMachine = llmAgentSetup.createMachine({
  id: 'llmAgent',
  context: ({ input }) => ({
    turnId: input.turnId ?? '',
    messages: input.messages,
    tools: input.tools,
    controlTools: input.controlTools,
    maxToolRounds: input.maxToolRounds,
    toolTimeoutMs: input.toolTimeoutMs,
    toolTimeouts: Object.assign(Object.create(null) as Record<string, number>, input.toolTimeouts),
    approvalTools: input.approvalTools ?? [],
    maxRetries: input.maxRetries ?? DEFAULT_MODEL_RETRIES,
    retryBaseMs: input.retryBaseMs ?? DEFAULT_RETRY_BASE_MS,
    round: 0,
    attempt: 0,
    retryDelayMs: 0,
    pending: [],
    results: Object.create(null) as Record<string, ToolResult>,
    roundText: '',
    toolCallsMade: 0,
  }),
  initial: 'thinking',
  states: {
    thinking: {
      invoke: {
        id: 'model',
        src: 'model',
        input: ({ context }) => ({ turnId: context.turnId, messages: context.messages, tools: context.tools, round: context.round, attempt: context.attempt }),
        onDone: [
          {
            guard: { type: 'asksForTools', params: ({ event }: { event: DoneActorEvent<Completion> }) => event.output },
            target: 'checkingRounds',
            actions: { type: 'startRound', params: ({ event }: { event: DoneActorEvent<Completion> }) => event.output },
          },
          { target: 'answered', actions: { type: 'recordAnswer', params: ({ event }: { event: DoneActorEvent<Completion> }) => event.output } },
        ],
        onError: [
          {
            guard: { type: 'canRetry', params: ({ event }: { event: ErrorActorEvent }) => event.error },
            target: 'retrying',
            actions: { type: 'scheduleRetry', params: ({ event }: { event: ErrorActorEvent }) => event.error },
          },
          { target: 'failed', actions: { type: 'recordModelFailure', params: ({ event }: { event: ErrorActorEvent }) => event.error } },
        ],
      },
    },
    // The model asked for tools: allowed unless it has used up its rounds.
    checkingRounds: {
      always: [
        { guard: 'roundLimitReached', target: 'failed', actions: 'recordRoundLimit' },
        { guard: 'needsApproval', target: 'awaitingApproval' },
        { target: 'tools' },
      ],
    },
    retrying: {
      after: { retryDelay: { target: 'thinking' } },
    },
    tools: {
      entry: 'spawnToolCalls',
      on: {
        'xstate.done.actor.*': {
          actions: { type: 'recordToolResult', params: ({ event }) => (event as DoneActorEvent<ToolResult>).output },
        },
      },
      always: [
        { guard: 'answeredWithRouting', target: 'answered', actions: 'answerWithRoundText' },
        { guard: 'allToolsDone', target: 'thinking', actions: 'endRound' },
      ],
    },
    /** A call of the round needs a person's approval: nothing ran; the output holds the round's calls. */
    awaitingApproval: { type: 'final', entry: 'markAwaitingApproval' },
    answered: { type: 'final' },
    failed: { type: 'final' },
  },
  output: ({ context }): LlmAgentOutput => {
    if (context.error) return { ok: false, error: context.error, rounds: context.round, toolCalls: context.toolCallsMade };
    if (context.awaitingApproval) {
      return { ok: true, text: context.roundText, rounds: context.round, toolCalls: context.toolCallsMade, approval: context.pending };
    }
    return { ok: true, text: context.text ?? '', rounds: context.round, toolCalls: context.toolCallsMade };
  },
});

/**
 * The loop with its I/O: `callModel` streams one completion, `runTool` runs one tool call. Building it
 * costs far more than running a turn: a host builds it once and tells turns apart by `turnId`.
 */
export function llmAgentLogic(impl: {
  callModel: (input: ModelCallInput, signal: AbortSignal) => Promise<Completion>;
  runTool: (input: ToolRunInput, signal: AbortSignal) => Promise<string>;
}) {
  return llmAgentMachine.provide({
    actors: {
      model: fromPromise<Completion, ModelCallInput>(({ input, signal }) => impl.callModel(input, signal)),
      toolCall: toolCallMachine.provide({
        actors: { runTool: fromPromise<string, ToolRunInput>(({ input, signal }) => impl.runTool(input, signal)) },
      }),
    },
  });
}

export type LlmAgentActor = ActorRefFrom<typeof llmAgentMachine>;

/** Where a loop is, for `troupe ps` / `inspect`: state, round, retries, tools in flight. */
export function describeLoop(snapshot: { value: unknown; context: LlmAgentContext }): {
  state: string;
  round: number;
  attempt: number;
  tools: string[];
} {
  const { context } = snapshot;
  const state = typeof snapshot.value === 'string' ? snapshot.value : JSON.stringify(snapshot.value);
  return {
    state,
    round: context.round,
    attempt: context.attempt,
    tools: state === 'tools' ? context.pending.filter((c) => !context.results[c.id]).map((c) => c.name) : [],
  };
}
