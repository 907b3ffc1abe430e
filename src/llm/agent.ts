/**
 * An agent from an agent.yaml: a card built from its name, description and tools (as skills), and a
 * handler that runs the model loop (`src/machines/llm-agent.ts`) for each message it gets:
 *
 * - the system prompt is the instructions, plus who the agent is in the team, the peers it may route
 *   to, and — as the target of a handoff — the handoff's reason, context summary and recent messages;
 * - the model is offered the agent's tools and the routing tools (`routing-tools.ts`); its routing
 *   choice becomes the reply's client-routing metadata (`reply(text, { to, reason } | { handoff } |
 *   { handoffReturn })`);
 * - text deltas go to the user through `ctx.stream` as they arrive;
 * - a loop that fails ends the turn with a typed error (MODEL_ERROR, TOOL_ROUND_LIMIT).
 *
 * It joins the mesh through AgentHost like any other agent. `status()` tells `troupe ps` (one `llm-agent`
 * row per running loop) and `inspect` where each loop is; the provider's key never appears there (only
 * provider, model, endpoint).
 */
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { createActor, toPromise } from 'xstate';
import { DEFAULT_MAX_TOOL_ROUNDS, DEFAULT_TOOL_TIMEOUT_MS, loadAgentConfig, type AgentConfig, type LoadedAgentConfig, type ModelConfig } from '../config/agent.js';
import { describeLoop, llmAgentLogic, type LlmAgentActor, type ModelCallInput, type ToolRunInput } from '../machines/llm-agent.js';
import { TroupeError } from '../protocol/errors.js';
import { messageText, type AgentCapabilities, type Message } from '../protocol/a2a.js';
import type { DelegationResults } from '../protocol/delegation.js';
import { defineAgent, reply, type AgentContext, type AgentDefinition, type AgentResult } from '../sdk/agent.js';
import { createEmbeddingProvider, createProvider, DEFAULT_EMBEDDING_MODEL, type ProviderOptions } from './providers/index.js';
import { userContent } from './message-content.js';
import { routingTools, type RoutingTools } from './routing-tools.js';
import { buildTools, type RunnableTool } from './tools/index.js';
import { parseArguments } from './tools/parameters.js';
import type { ChatMessage, Completion, ModelProvider } from '../model/types.js';
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
}

/** What one turn's loop calls out to. */
interface TurnIO {
  callModel: (input: ModelCallInput, signal: AbortSignal) => Promise<Completion>;
  runTool: (input: ToolRunInput, signal: AbortSignal) => Promise<string>;
}

interface RunningLoop {
  threadId: string;
  messageId: string;
  actor: LlmAgentActor;
}

const RECENT_MESSAGE_CHARS = 2_000;
/** Loops listed by `ps` / in the announced status, per agent instance. */
const MAX_REPORTED_LOOPS = 8;

function clip(text: string, max: number): string {
  return text.length > max ? `${text.slice(0, max)}…` : text;
}

/** The system prompt: instructions, then what the mesh tells this agent about the turn. */
export function systemPrompt(instructions: string, agentId: string, message: Message, ctx: Pick<AgentContext, 'sender' | 'peers' | 'handoff' | 'recentMessages'>): string {
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
    if (ctx.recentMessages?.length) {
      lines.push('The conversation so far:');
      for (const m of ctx.recentMessages) {
        const who = m.role === 'user' ? 'user' : String(m.metadata?.['troupe/agent'] ?? 'agent');
        lines.push(`${who}: ${clip(messageText(m), RECENT_MESSAGE_CHARS)}`);
      }
    }
  }
  const resume = message.metadata?.['troupe/handoffResume'] as { targetAgentId?: string; status?: string } | undefined;
  if (resume) {
    lines.push('', `You handed the conversation to agent "${resume.targetAgentId}"; it has given control back (${resume.status}). Its summary follows. Answer the user.`);
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
  for (const w of loaded.warnings ?? []) logger.warn({ file: w.file, line: w.line, column: w.column, path: w.path }, `${w.file}:${w.line}:${w.column} ${w.path}: ${w.message}`);
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
    const messages: ChatMessage[] = [
      { role: 'system', content: systemPrompt(instructions, config.name, message, ctx) },
      { role: 'user', content: ctx.delegation ? delegationPrompt(ctx.delegation, ctx.text) : userContent(message, ctx.text) },
    ];
    let modelMs = 0;
    let modelCalls = 0;
    const turnId = String(++turnSeq);
    // Model and tool spans are children of the agent's span for this request (the host's active one).
    const traceParent = tracing.on ? activeContext() : undefined;
    turns.set(turnId, {
      callModel: async (input, signal) => {
        const started = performance.now();
        modelCalls++;
        const span = traceParent
          ? startSpan('troupe.model.call', { parent: traceParent, kind: SpanKind.CLIENT, attributes: { 'gen_ai.system': model.provider, 'gen_ai.request.model': model.name, 'troupe.agent': config.name } })
          : undefined;
        try {
          const completion = await provider.complete({ messages: input.messages, tools: input.tools, signal: AbortSignal.any([signal, ctx.signal]), onDelta: (text) => ctx.stream(text) });
          const usage = completion.usage;
          if (usage?.inputTokens) metrics.modelTokens.inc({ model: model.name, kind: 'input' }, usage.inputTokens);
          if (usage?.outputTokens) metrics.modelTokens.inc({ model: model.name, kind: 'output' }, usage.outputTokens);
          metrics.modelCalls.inc({ model: model.name, outcome: 'ok' });
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
          modelMs += performance.now() - started;
        }
      },
      runTool: async ({ call }, signal) => {
        if (routing.names.includes(call.name)) return routing.run(call.name, call.arguments);
        const span = traceParent ? startSpan('troupe.tool.call', { parent: traceParent, attributes: { 'troupe.tool': call.name, 'troupe.agent': config.name } }) : undefined;
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
    async function runTool(call: ToolRunInput['call'], signal: AbortSignal): Promise<string> {
      const tool = byName.get(call.name);
      if (!tool) throw new Error(`there is no tool "${call.name}"; the tools are ${[...byName.keys(), ...routing.names].join(', ') || '(none)'}`);
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
        ...(opts.maxRetries !== undefined ? { maxRetries: opts.maxRetries } : {}),
        ...(opts.retryBaseMs !== undefined ? { retryBaseMs: opts.retryBaseMs } : {}),
      },
    });
    const loop: RunningLoop = { threadId: ctx.threadId, messageId: message.messageId, actor };
    loops.add(loop);
    const stopOnAbort = () => actor.stop();
    ctx.signal.addEventListener('abort', stopOnAbort, { once: true });
    try {
      actor.start();
      const output = await toPromise(actor);
      // Stopped before it finished (the host is stopping): there is no answer to give.
      if (!output) throw new TroupeError('AGENT_ERROR', `agent "${config.name}" stopped before the model answered`);
      opts.onTurn?.({ threadId: ctx.threadId, ok: output.ok, modelMs, modelCalls, rounds: output.rounds, toolCalls: output.toolCalls });
      if (!output.ok) {
        ctx.log.warn({ code: output.error.code, rounds: output.rounds }, output.error.message);
        throw new TroupeError(output.error.code, `agent "${config.name}": ${output.error.message}`, output.error.details);
      }
      ctx.log.debug({ rounds: output.rounds, toolCalls: output.toolCalls, modelCalls, modelMs: Math.round(modelMs) }, 'model answered');
      const choice = routing.choice();
      if (!choice) return output.text;
      return reply(output.text, {
        ...(choice.to ? { to: choice.to } : {}),
        ...(choice.reason ? { reason: choice.reason } : {}),
        ...(choice.handoff ? { handoff: choice.handoff } : {}),
        ...(choice.handoffReturn ? { handoffReturn: choice.handoffReturn } : {}),
        ...(choice.delegate ? { delegate: choice.delegate } : {}),
      });
    } finally {
      ctx.signal.removeEventListener('abort', stopOnAbort);
      loops.delete(loop);
      turns.delete(turnId);
    }
  }

  const definition = defineAgent({
    card: {
      id: config.name,
      name: config.name,
      description: config.description ?? `${config.name} (${config.model.provider} ${config.model.name})`,
      capabilities: { streaming: true, ...cardCapabilities(config) },
      skills: (config.tools ?? []).map((t) => ({ id: t.name, name: t.name, description: t.description, tags: [t.type] })),
    },
    handle,
  });
  return {
    ...definition,
    status: () => {
      // At most a few loops: this goes into the announced status, which must stay small.
      const running = [...loops].slice(0, MAX_REPORTED_LOOPS).map((l) => ({ threadId: l.threadId, messageId: l.messageId, ...describeLoop(l.actor.getSnapshot()) }));
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
function cardCapabilities(config: AgentConfig): Pick<AgentCapabilities, 'handoff' | 'orchestration'> {
  const c = config.capabilities;
  if (!c) return {};
  const handoff = c.handoff && {
    ...(c.handoff.can_initiate !== undefined ? { canInitiate: c.handoff.can_initiate } : {}),
    ...(c.handoff.can_accept !== undefined ? { canAccept: c.handoff.can_accept } : {}),
  };
  const orchestration = c.orchestration && {
    ...(c.orchestration.can_delegate !== undefined ? { canDelegate: c.orchestration.can_delegate } : {}),
    ...(c.orchestration.max_parallel !== undefined ? { maxParallel: c.orchestration.max_parallel } : {}),
  };
  return { ...(handoff ? { handoff } : {}), ...(orchestration ? { orchestration } : {}) };
}

/** Loads an agent.yaml and builds its agent (throws CONFIG_INVALID with every problem when invalid). */
export async function loadYamlAgent(file: string, opts: LlmAgentOptions = {}): Promise<AgentDefinition> {
  return createLlmAgent(loadAgentConfig(file, opts.env ?? process.env), opts);
}
