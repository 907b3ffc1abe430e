/**
 * An agent from an agent.yaml: a card built from its name, description and tools (as skills), and a
 * handler that runs the model loop (`src/machines/llm-agent.ts`) for each message it gets:
 *
 * - the system prompt is the instructions, plus who the agent is in the team, the peers it may route
 *   to, and — as the target of a handoff — the handoff's reason, context summary and recent messages;
 * - the thread's earlier messages come before the message to answer, within the agent.yaml's `memory`
 *   budget, older turns summarised (`memory.ts`; the summary goes back to the thread in `troupe/memory`);
 * - with `output`, the answer is checked against its JSON Schema and asked for again when it does not
 *   match (`output.ts`); it goes out as text and as a data part (OUTPUT_INVALID after the retries);
 * - every model call's tokens go into the reply's `troupe/usage`, the `troupe_model_tokens_total`
 *   metric and the call's span;
 * - the model is offered the agent's tools and the routing tools (`routing-tools.ts`); its routing
 *   choice becomes the reply's client-routing metadata (`reply(text, { to, reason } | { handoff } |
 *   { handoffReturn })`);
 * - text deltas go to the user through `ctx.stream` as they arrive (not for a structured answer);
 * - a loop that fails ends the turn with a typed error (MODEL_ERROR, TOOL_ROUND_LIMIT).
 *
 * It joins the mesh through AgentHost like any other agent. `status()` tells `troupe ps` (one `llm-agent`
 * row per running loop) and `inspect` where each loop is; the provider's key never appears there (only
 * provider, model, endpoint).
 */
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { createActor, toPromise } from 'xstate';
import type { ZodType } from 'zod';
import {
  DEFAULT_MAX_TOOL_ROUNDS,
  DEFAULT_TOOL_TIMEOUT_MS,
  loadAgentConfig,
  type AgentConfig,
  type LoadedAgentConfig,
  type ModelConfig,
} from '../config/agent.js';
import { seedCapabilitiesOf } from '../config/capabilities.js';
import { describeLoop, llmAgentLogic, type LlmAgentActor, type LlmAgentOutput, type ModelCallInput, type ToolRunInput } from '../machines/llm-agent.js';
import { TroupeError } from '../protocol/errors.js';
import { messageText, type AgentCapabilities, type Message } from '../protocol/a2a.js';
import { AGENT_CAPABILITIES_URI } from '../protocol/capabilities.js';
import type { DelegationResults } from '../protocol/delegation.js';
import { defineAgent, reply, type AgentContext, type AgentDefinition, type AgentResult } from '../sdk/agent.js';
import { createEmbeddingProvider, createProvider, DEFAULT_EMBEDDING_MODEL, type ProviderOptions } from './providers/index.js';
import { userContent } from './message-content.js';
import { routingTools, type RoutingTools } from './routing-tools.js';
import { buildTools, type RunnableTool } from './tools/index.js';
import { parseArguments } from './tools/parameters.js';
import type { ChatMessage, Completion, CompletionRequest, ModelProvider } from '../model/types.js';
import { META } from '../protocol/metadata.js';
import { MAX_HISTORY_MESSAGES, turnUsage, type CallUsage, type MemorySummary } from '../protocol/conversation.js';
import { DEFAULT_APPROVAL_TIMEOUT_MS, memoryOf } from '../config/conversation.js';
import { pendingApproval, readApprovalDecision, type ApprovalRequest } from '../protocol/approval.js';
import { approvalData, approvalRequest, approvalText, decideCalls, ofPausedTurn, turnMessages } from './approval.js';
import { nextSummary, planMemory, summaryParagraph, summaryRequest, toChatMessage } from './memory.js';
import { checkAnswer, outputInstruction, outputSpec, repairMessages } from './output.js';
import { createLogger, type Logger } from '../observability/logger.js';
import { metrics } from '../observability/metrics.js';
import { SpanKind, activeContext, endSpan, startSpan, tracing } from '../observability/tracing.js';

export interface LlmAgentOptions {
  env?: NodeJS.ProcessEnv;
  /** Model call retries on 429 / 5xx / lost connections (default 3), with backoff from `retryBaseMs` (500). */
  maxRetries?: number;
  retryBaseMs?: number;
  /** Per model request (default 120 s). */
  modelTimeoutMs?: number;
  /** Called after each turn, e.g. to measure: how long the model calls took in all, rounds, tool calls. */
  onTurn?: (stats: TurnStats) => void;
  /** Called after each call of one of the agent's own tools (not the routing tools), e.g. by `troupe eval`. */
  onToolCall?: (call: ToolCallRecord) => void;
  /**
   * A structured answer checked against a zod schema (instead of, or over, the agent.yaml's `output`):
   * the model is given its JSON Schema, the answer is parsed with it and goes out as a data part.
   */
  output?: { schema: ZodType; name?: string; retries?: number };
  /** Tools a person approves before each call, by the name the model calls, besides agent.yaml's `requires_approval`. */
  requiresApproval?: (toolName: string) => boolean;
  /** Where setting the agent up is logged (the agent.yaml's warnings, vector indexes built): default stderr. */
  logger?: Logger;
}

export interface ToolCallRecord {
  threadId: string;
  messageId: string;
  /** The name the model called. */
  name: string;
  /** The agent.yaml tool it belongs to (for an MCP server's tools, the mcp tool's name). */
  tool: string;
  arguments: string;
  /** What the model got back: the result, or the error. */
  result?: string;
  error?: string;
}

export interface TurnStats {
  threadId: string;
  ok: boolean;
  /** Wall time spent inside model calls (streaming included), in ms. */
  modelMs: number;
  modelCalls: number;
  rounds: number;
  toolCalls: number;
  /** Tokens of the turn's model calls (summaries and repairs included), as the provider reported them. */
  inputTokens: number;
  outputTokens: number;
}

/** What one turn's loop calls out to. */
interface TurnIO {
  callModel: (input: ModelCallInput, signal: AbortSignal) => Promise<Completion>;
  runTool: (input: ToolRunInput, signal: AbortSignal) => Promise<string>;
}

interface RunningLoop {
  threadId: string;
  messageId: string;
  /** The loop running now (a structured answer asked for again runs a second one); none before the first. */
  actor: LlmAgentActor | undefined;
}

const RECENT_MESSAGE_CHARS = 2_000;
/** Loops listed by `ps` / in the announced status, per agent instance. */
const MAX_REPORTED_LOOPS = 8;

function clip(text: string, max: number): string {
  return text.length > max ? `${text.slice(0, max)}…` : text;
}

/** The system prompt: instructions, then what the mesh tells this agent about the turn. */
function systemPrompt(
  instructions: string,
  agentId: string,
  message: Message,
  ctx: Pick<AgentContext, 'sender' | 'peers' | 'handoff' | 'recentMessages' | 'history'>,
): string {
  const lines = [instructions.trim(), '', `You are agent "${agentId}" in a team of agents.`];
  const peers = ctx.peers.filter((p) => p.id !== agentId);
  if (peers.length) {
    lines.push('Other agents you can pass work to:');
    for (const p of peers) lines.push(`- ${p.id}: ${p.name}${p.description ? ` — ${p.description}` : ''}`);
  }
  if (ctx.sender !== 'user') lines.push(`The message you are answering comes from agent "${ctx.sender}", not from the user.`);
  if (ctx.handoff) {
    lines.push(
      '',
      `Agent "${ctx.handoff.sourceAgentId}" handed this conversation to you (${ctx.handoff.handoffReason}). You are talking with the user directly.`,
      `What it told you: ${ctx.handoff.contextSummary}`,
    );
    // An agent given the conversation has these messages already, as messages.
    if (ctx.recentMessages?.length && !ctx.history) {
      lines.push('The conversation so far:');
      for (const m of ctx.recentMessages) {
        const who = m.role === 'user' ? 'user' : String(m.metadata?.['troupe/agent'] ?? 'agent');
        lines.push(`${who}: ${clip(messageText(m), RECENT_MESSAGE_CHARS)}`);
      }
    }
  }
  const resume = message.metadata?.['troupe/handoffResume'] as { targetAgentId?: string; status?: string } | undefined;
  if (resume) {
    lines.push(
      '',
      `You handed the conversation to agent "${resume.targetAgentId}"; it has given control back (${resume.status}). Its summary follows. Answer the user.`,
    );
  }
  return lines.join('\n');
}

/** Builds the agent from a loaded agent.yaml. Throws (CONFIG_INVALID, UNSUPPORTED) when it cannot run. */
export async function createLlmAgent(loaded: LoadedAgentConfig, opts: LlmAgentOptions = {}): Promise<AgentDefinition> {
  const { config } = loaded;
  const env = opts.env ?? process.env;
  const providerOptions = (where: string, maxRetries: number): ProviderOptions => ({
    env,
    where,
    maxRetries,
    ...(opts.modelTimeoutMs ? { timeoutMs: opts.modelTimeoutMs } : {}),
  });
  const provider: ModelProvider = createProvider(config.model, providerOptions('model', 0));
  // Prompt tools call their model inside a tool run: the SDK retries those itself.
  const logger = opts.logger ?? createLogger({ name: `troupe-agent-${config.name}` });
  for (const w of loaded.warnings ?? [])
    logger.warn({ file: w.file, line: w.line, column: w.column, path: w.path }, `${w.file}:${w.line}:${w.column} ${w.path}: ${w.message}`);
  const toolSet = await buildTools(loaded, {
    providerFor: (model: ModelConfig, where) => createProvider(model, providerOptions(where, 2)),
    embedderFor: (model, where) => createEmbeddingProvider(config.model, model ?? DEFAULT_EMBEDDING_MODEL, providerOptions(where, 2)),
    log: logger.child({ agent: config.name }),
  });
  const tools: RunnableTool[] = toolSet.tools;
  const byName = new Map(tools.map((t) => [t.definition.name, t]));
  const paramsByName = new Map((config.tools ?? []).map((t) => [t.name, 'parameters' in t ? t.parameters : undefined]));
  const instructions = config.instructions.inline ?? readFileSync(resolve(loaded.dir, config.instructions.file!), 'utf8');
  const toolTimeouts = Object.fromEntries(tools.flatMap((t) => (t.timeoutMs !== undefined ? [[t.definition.name, t.timeoutMs]] : [])));
  const loops = new Set<RunningLoop>();
  const memory = memoryOf(config);
  // The model's names of the tools a person approves first (an MCP entry marks all its server's tools).
  const needsApprovalBySource = new Set((config.tools ?? []).filter((t) => t.requires_approval).map((t) => t.name));
  const approvalTools = tools
    .filter((t) => needsApprovalBySource.has(t.source ?? t.definition.name) || opts.requiresApproval?.(t.definition.name) === true)
    .map((t) => t.definition.name);
  const approvalTimeoutMs = config.approval_timeout_ms ?? DEFAULT_APPROVAL_TIMEOUT_MS;
  const output = opts.output
    ? outputSpec({
        zod: opts.output.schema,
        ...(opts.output.name ? { name: opts.output.name } : {}),
        ...(opts.output.retries !== undefined ? { retries: opts.output.retries } : {}),
      })
    : config.output
      ? outputSpec(config.output)
      : undefined;
  const model = { provider: provider.provider, name: provider.model, endpoint: provider.endpoint };
  /** The I/O of each turn in flight, by turn id: the loop's logic is built once and looks its turn up here. */
  const turns = new Map<string, TurnIO>();
  const turnOf = (turnId: string): TurnIO => {
    const io = turns.get(turnId);
    if (!io) throw new Error(`turn ${turnId} has ended`);
    return io;
  };
  const logic = llmAgentLogic({
    callModel: (input, signal) => turnOf(input.turnId).callModel(input, signal),
    runTool: (input, signal) => turnOf(input.turnId).runTool(input, signal),
  });
  let turnSeq = 0;

  /** The message that brings a delegation's results back: what was asked, who answered what, what to do now. */
  function delegationPrompt(results: DelegationResults, answers: string): string {
    const failed = results.results.filter((r) => !r.success).map((r) => `${r.agentId} (${r.error?.message ?? 'failed'})`);
    return [
      `You asked ${results.results.map((r) => r.agentId).join(', ')}${results.input ? ` this: ${results.input}` : ''}.`,
      `Their answers:\n${answers}`,
      ...(failed.length ? [`These could not answer: ${failed.join('; ')}.`] : []),
      'Now write your answer to the user.',
    ].join('\n\n');
  }

  /**
   * One model call, measured: the `troupe_model_*` metrics, a `troupe.model.call` span with its tokens, and
   * its usage recorded in `calls` for the reply's `troupe/usage`.
   */
  async function observedCall(
    request: CompletionRequest,
    purpose: CallUsage['purpose'],
    turn: { calls: CallUsage[]; traceParent: ReturnType<typeof activeContext> | undefined; modelMs: number; modelCalls: number },
  ): Promise<Completion> {
    const started = performance.now();
    turn.modelCalls++;
    const span = turn.traceParent
      ? startSpan('troupe.model.call', {
          parent: turn.traceParent,
          kind: SpanKind.CLIENT,
          attributes: { 'gen_ai.system': model.provider, 'gen_ai.request.model': model.name, 'troupe.agent': config.name, 'troupe.model.purpose': purpose },
        })
      : undefined;
    try {
      const completion = await provider.complete(request);
      const usage = completion.usage;
      if (usage?.inputTokens) metrics.modelTokens.inc({ model: model.name, kind: 'input' }, usage.inputTokens);
      if (usage?.outputTokens) metrics.modelTokens.inc({ model: model.name, kind: 'output' }, usage.outputTokens);
      metrics.modelCalls.inc({ model: model.name, outcome: 'ok' });
      turn.calls.push({
        model: model.name,
        purpose,
        ...(usage?.inputTokens !== undefined ? { inputTokens: usage.inputTokens } : {}),
        ...(usage?.outputTokens !== undefined ? { outputTokens: usage.outputTokens } : {}),
      });
      if (span) {
        span.setAttributes({
          ...(usage?.inputTokens !== undefined ? { 'gen_ai.usage.input_tokens': usage.inputTokens } : {}),
          ...(usage?.outputTokens !== undefined ? { 'gen_ai.usage.output_tokens': usage.outputTokens } : {}),
          'troupe.tool_calls': completion.toolCalls.length,
        });
        endSpan(span);
      }
      return completion;
    } catch (err) {
      metrics.modelCalls.inc({ model: model.name, outcome: 'error' });
      if (span) endSpan(span, TroupeError.from(err, 'AGENT_ERROR'));
      throw err;
    } finally {
      turn.modelMs += performance.now() - started;
    }
  }

  async function handle(message: Message, ctx: AgentContext): Promise<AgentResult> {
    const routing: RoutingTools = routingTools({
      self: config.name,
      sender: ctx.sender,
      peers: ctx.peers,
      ...(ctx.handoff ? { handoff: ctx.handoff } : {}),
      ...(ctx.delegation ? { delegationResults: true } : {}),
      ...(config.capabilities?.handoff?.can_initiate === false ? { noHandoff: true } : {}),
      ...(config.capabilities?.orchestration?.can_delegate === false ? { noDelegate: true } : {}),
    });
    // Model and tool spans are children of the agent's span for this request (the host's active one).
    const turn = { calls: [] as CallUsage[], traceParent: tracing.on ? activeContext() : undefined, modelMs: 0, modelCalls: 0 };
    const signalOf = (signal: AbortSignal) => AbortSignal.any([signal, ctx.signal]);

    // The conversation so far: what fits the budget as written, older turns folded into the summary.
    // A turn paused for a person's approval resumes here: its messages come from the request, not the history.
    const paused = pendingApproval(ctx.history ?? [], config.name);
    const history = paused ? (ctx.history ?? []).filter((m) => !ofPausedTurn(m, config.name, paused.request, paused.messageId)) : (ctx.history ?? []);
    const plan = planMemory(history, ctx.memory, memory);
    let summary = plan.summary;
    let newSummary: MemorySummary | undefined;
    if (plan.fold.length) {
      try {
        const completion = await observedCall({ messages: summaryRequest(config.name, summary, plan.fold), signal: ctx.signal }, 'summary', turn);
        if (!completion.text.trim()) throw new Error('the model wrote nothing');
        newSummary = nextSummary(completion.text, summary, plan.fold);
        summary = newSummary;
        ctx.log.debug({ folded: plan.fold.length, summarised: newSummary.messages }, 'older turns summarised');
      } catch (err) {
        ctx.log.warn({ folded: plan.fold.length, err: (err as Error).message }, 'could not summarise older turns; they are left out this time');
      }
    }
    const system = [systemPrompt(instructions, config.name, message, ctx), summaryParagraph(summary), output ? outputInstruction(output) : undefined]
      .filter((p): p is string => p !== undefined)
      .join('\n\n');
    const prefix: ChatMessage[] = [{ role: 'system', content: system }, ...plan.kept.map((m) => toChatMessage(m, config.name))];
    const current: ChatMessage = { role: 'user', content: ctx.delegation ? delegationPrompt(ctx.delegation, ctx.text) : userContent(message, ctx.text) };
    let messages: ChatMessage[] = paused ? [...prefix, ...(await resumeTurn(paused.request, message, ctx, current))] : [...prefix, current];
    const turnId = String(++turnSeq);
    let purpose: CallUsage['purpose'] = 'answer';
    turns.set(turnId, {
      callModel: (input, signal) =>
        observedCall(
          {
            messages: input.messages,
            tools: input.tools,
            signal: signalOf(signal),
            // A structured answer goes out once it is checked, not as it streams.
            ...(output ? { responseFormat: output.format } : { onDelta: (text: string) => ctx.stream(text) }),
          },
          purpose,
          turn,
        ),
      runTool: async ({ call }, signal) => {
        if (routing.names.includes(call.name)) return routing.run(call.name, call.arguments);
        const span = turn.traceParent
          ? startSpan('troupe.tool.call', { parent: turn.traceParent, attributes: { 'troupe.tool': call.name, 'troupe.agent': config.name } })
          : undefined;
        try {
          const result = await runTool(call, signal);
          if (span) endSpan(span);
          return result;
        } catch (err) {
          if (span) endSpan(span, TroupeError.from(err, 'AGENT_ERROR'));
          throw err;
        }
      },
    });
    const runTool = (call: ToolRunInput['call'], signal: AbortSignal) => runToolFor(message, ctx, call, signal, routing.names);
    const stats = (ok: boolean, rounds: number, toolCalls: number): TurnStats => {
      const sums = turnUsage(turn.calls);
      return {
        threadId: ctx.threadId,
        ok,
        modelMs: turn.modelMs,
        modelCalls: turn.modelCalls,
        rounds,
        toolCalls,
        inputTokens: sums.inputTokens,
        outputTokens: sums.outputTokens,
      };
    };
    const loop: RunningLoop = { threadId: ctx.threadId, messageId: message.messageId, actor: undefined };
    loops.add(loop);
    try {
      let rounds = 0;
      let toolCalls = 0;
      let answer: { text: string; data?: Record<string, unknown> } | undefined;
      for (let attempt = 0; !answer; attempt++) {
        const { output: out, messages: sent } = await runLoop(loop, turnId, messages, ctx, routing);
        if (!out) throw new TroupeError('AGENT_ERROR', `agent "${config.name}" stopped before the model answered`);
        rounds += out.rounds;
        toolCalls += out.toolCalls;
        if (!out.ok) {
          opts.onTurn?.(stats(false, rounds, toolCalls));
          ctx.log.warn({ code: out.error.code, rounds }, out.error.message);
          throw new TroupeError(out.error.code, `agent "${config.name}": ${out.error.message}`, out.error.details);
        }
        if (out.approval) {
          // A tool waits for a person: ask, and keep what the turn needs to resume in the reply.
          const request = approvalRequest({
            agent: config.name,
            answering: paused?.request.answering ?? message.messageId,
            expiresAt: Date.now() + approvalTimeoutMs,
            text: out.text,
            calls: out.approval,
            needsApproval: (name) => approvalTools.includes(name),
            turn: sent.slice(prefix.length, -1),
            userText: ctx.text,
          });
          opts.onTurn?.(stats(true, rounds, toolCalls));
          ctx.log.info({ tools: request.calls.filter((c) => c.needsApproval).map((c) => c.tool) }, 'waiting for a person to approve a tool call');
          return reply(approvalText(request), {
            to: 'user',
            data: approvalData(request),
            metadata: {
              [META.usage]: turnUsage(turn.calls),
              ...(newSummary ? { [META.memory]: newSummary } : {}),
              [META.approval]: request,
              [META.inputRequired]: true,
            },
          });
        }
        if (!output) {
          answer = { text: out.text };
          break;
        }
        const checked = checkAnswer(out.text, output);
        if (checked.ok) {
          answer = { text: checked.text, data: checked.data };
          break;
        }
        if (attempt >= output.retries) {
          opts.onTurn?.(stats(false, rounds, toolCalls));
          throw new TroupeError(
            'OUTPUT_INVALID',
            `agent "${config.name}": the answer did not match the output schema after ${attempt + 1} tr${attempt === 0 ? 'y' : 'ies'}: ${checked.error}`,
            {
              attempts: attempt + 1,
              error: checked.error,
            },
          );
        }
        ctx.log.info({ attempt: attempt + 1, error: checked.error }, 'the answer did not match the output schema; asking again');
        messages = [...sent, ...repairMessages(out.text, checked.error)];
        purpose = 'repair';
      }
      opts.onTurn?.(stats(true, rounds, toolCalls));
      ctx.log.debug({ rounds, toolCalls, modelCalls: turn.modelCalls, modelMs: Math.round(turn.modelMs) }, 'model answered');
      const choice = routing.choice();
      const metadata = { [META.usage]: turnUsage(turn.calls), ...(newSummary ? { [META.memory]: newSummary } : {}) };
      return reply(answer.text, {
        metadata,
        ...(answer.data ? { data: answer.data } : {}),
        ...(choice?.to ? { to: choice.to } : {}),
        ...(choice?.reason ? { reason: choice.reason } : {}),
        ...(choice?.handoff ? { handoff: choice.handoff } : {}),
        ...(choice?.handoffReturn ? { handoffReturn: choice.handoffReturn } : {}),
        ...(choice?.delegate ? { delegate: choice.delegate } : {}),
      });
    } finally {
      loops.delete(loop);
      turns.delete(turnId);
    }
  }

  /** Runs one of the agent's own tools for a call of the model (the routing tools are not among them). */
  async function runToolFor(
    message: Message,
    ctx: AgentContext,
    call: ToolRunInput['call'],
    signal: AbortSignal,
    routingNames: readonly string[] = [],
  ): Promise<string> {
    const tool = byName.get(call.name);
    if (!tool) throw new Error(`there is no tool "${call.name}"; the tools are ${[...byName.keys(), ...routingNames].join(', ') || '(none)'}`);
    const record = { threadId: ctx.threadId, messageId: message.messageId, name: call.name, tool: tool.source ?? call.name, arguments: call.arguments };
    try {
      const args = parseArguments(call.arguments, paramsByName.get(call.name));
      const result = await tool.run(args, { signal: AbortSignal.any([signal, ctx.signal]), threadId: ctx.threadId, agentId: config.name });
      opts.onToolCall?.({ ...record, result });
      return result;
    } catch (err) {
      opts.onToolCall?.({ ...record, error: err instanceof Error ? err.message : String(err) });
      throw err;
    }
  }

  /**
   * The model messages a paused turn goes on from: the turn's messages the request holds, the round's
   * calls as decided (approved ones run now, with the tool's timeout), and — when the person wrote
   * something other than a decision — their message.
   */
  async function resumeTurn(request: ApprovalRequest, message: Message, ctx: AgentContext, current: ChatMessage): Promise<ChatMessage[]> {
    const decision = readApprovalDecision(message);
    const decided = decideCalls(request, decision, Date.now(), ctx.text);
    const results: ChatMessage[] = [];
    for (const d of decided) {
      if (!d.run) {
        results.push({ role: 'tool', toolCallId: d.call.id, name: d.call.name, content: JSON.stringify({ error: d.why }), isError: true });
        continue;
      }
      const timeout = AbortSignal.timeout(toolTimeouts[d.call.name] ?? config.tool_timeout_ms ?? DEFAULT_TOOL_TIMEOUT_MS);
      try {
        results.push({ role: 'tool', toolCallId: d.call.id, name: d.call.name, content: await runToolFor(message, ctx, d.call, timeout) });
      } catch (err) {
        results.push({ role: 'tool', toolCallId: d.call.id, name: d.call.name, content: JSON.stringify({ error: (err as Error).message }), isError: true });
      }
    }
    ctx.log.info(
      { decision: decision?.decision ?? 'none', calls: decided.map((d) => `${d.call.name}:${d.run ? 'ran' : 'refused'}`) },
      'resuming a turn after an approval',
    );
    return [
      ...turnMessages(request),
      { role: 'assistant', content: request.text, toolCalls: decided.map((d) => d.call) },
      ...results,
      ...(decision ? [] : [current]),
    ];
  }

  /** Runs the model loop once over `messages`; its output, and the messages of its last model call. */
  async function runLoop(
    loop: RunningLoop,
    turnId: string,
    messages: ChatMessage[],
    ctx: AgentContext,
    routing: RoutingTools,
  ): Promise<{ output: LlmAgentOutput | undefined; messages: ChatMessage[] }> {
    const actor = createActor(logic, {
      // On the mesh's inspection stream (under the thread) while the thread or this agent is inspected.
      ...(ctx.inspect ? { inspect: ctx.inspect } : {}),
      input: {
        turnId,
        messages,
        tools: [...tools.map((t) => t.definition), ...routing.definitions],
        controlTools: routing.names,
        maxToolRounds: config.max_tool_rounds ?? DEFAULT_MAX_TOOL_ROUNDS,
        toolTimeoutMs: config.tool_timeout_ms ?? DEFAULT_TOOL_TIMEOUT_MS,
        toolTimeouts,
        approvalTools,
        ...(opts.maxRetries !== undefined ? { maxRetries: opts.maxRetries } : {}),
        ...(opts.retryBaseMs !== undefined ? { retryBaseMs: opts.retryBaseMs } : {}),
      },
    });
    loop.actor = actor;
    const stopOnAbort = () => actor.stop();
    ctx.signal.addEventListener('abort', stopOnAbort, { once: true });
    try {
      actor.start();
      const output = await toPromise(actor);
      return { output, messages: actor.getSnapshot().context.messages };
    } finally {
      ctx.signal.removeEventListener('abort', stopOnAbort);
    }
  }

  const definition = defineAgent({
    card: {
      id: config.name,
      name: config.name,
      description: config.description ?? `${config.name} (${config.model.provider} ${config.model.name})`,
      capabilities: { streaming: true, ...cardCapabilities(config) },
      skills: (config.tools ?? []).map((t) => ({ id: t.name, name: t.name, description: t.description, tags: [t.type] })),
      // Summarising needs every message after the last summary; without it, the budget is all there is to send.
      // A paused turn resumes from its request, the agent's last message: an agent with approvals needs that one.
      history:
        memory.max_messages === 0 && approvalTools.length === 0
          ? false
          : { maxMessages: memory.summarize ? MAX_HISTORY_MESSAGES : Math.max(memory.max_messages, approvalTools.length ? 4 : 0) },
    },
    handle,
  });
  return {
    ...definition,
    status: () => {
      // At most a few loops: this goes into the announced status, which must stay small.
      const running = [...loops].slice(0, MAX_REPORTED_LOOPS).map((l) => ({
        threadId: l.threadId,
        messageId: l.messageId,
        ...(l.actor ? describeLoop(l.actor.getSnapshot()) : { state: 'summarising', round: 0, attempt: 0, tools: [] }),
      }));
      return {
        detail: { model, loops: running, ...toolSet.status() },
        actors: running.map((l) => ({
          kind: 'llm-agent' as const,
          id: `${config.name}/${l.threadId}`,
          state: l.state,
          threadId: l.threadId,
          detail: { messageId: l.messageId, round: l.round, attempt: l.attempt, tools: l.tools },
        })),
      };
    },
    close: () => toolSet.close(),
  };
}

/** The handoff and orchestration capabilities an agent.yaml declares, as its card states them. */
function cardCapabilities(config: AgentConfig): Pick<AgentCapabilities, 'handoff' | 'orchestration' | 'extensions'> {
  const c = config.capabilities;
  if (!c) return {};
  const seed = seedCapabilitiesOf(c);
  const handoff = c.handoff && {
    ...(c.handoff.can_initiate !== undefined ? { canInitiate: c.handoff.can_initiate } : {}),
    ...(c.handoff.can_accept !== undefined ? { canAccept: c.handoff.can_accept } : {}),
  };
  const orchestration = c.orchestration && {
    ...(c.orchestration.can_delegate !== undefined ? { canDelegate: c.orchestration.can_delegate } : {}),
    ...(c.orchestration.max_parallel !== undefined ? { maxParallel: c.orchestration.max_parallel } : {}),
  };
  return {
    ...(handoff ? { handoff } : {}),
    ...(orchestration ? { orchestration } : {}),
    ...(seed
      ? { extensions: [{ uri: AGENT_CAPABILITIES_URI, description: "The agent's capabilities as seed 004 names them", required: false, params: seed }] }
      : {}),
  };
}

/** Loads an agent.yaml and builds its agent (throws CONFIG_INVALID with every problem when invalid). */
export async function loadYamlAgent(file: string, opts: LlmAgentOptions = {}): Promise<AgentDefinition> {
  return createLlmAgent(loadAgentConfig(file, opts.env ?? process.env), opts);
}
