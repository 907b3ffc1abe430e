/**
 * `troupe eval`: runs an agent.yaml's test cases through the real agent and scores them.
 *
 * The agent is built from the file as `troupe agent` builds it (its tools, MCP servers and indexes
 * included) and joins a mesh — an in-process one, or a running one over NATS — and each case's input
 * (with its files as A2A parts) is sent to it as a user message on a thread of its own. What the agent
 * does is watched from inside: which of its tools it called and what they returned.
 *
 * Then for each case:
 * - `expected_tools` must all have been called (an MCP tool counts when any of its server's tools was);
 * - each metric — the case's `evaluations`, else every enabled one — is scored: lexical metrics against
 *   `ground_truth` (skipped when a case has none, unless it names the metric), judged metrics by the
 *   evaluation model (the metric's `model`, else `evaluations.model`, else the agent's);
 * - a score under its threshold (the metric's own, else its default: `defaultThreshold`) fails the case;
 *   a metric that errs (the judge times out, gives no score) fails it when `fail_on_error: true`, and is
 *   a soft failure otherwise.
 *
 * A case without a name is reported, and picked with `--case`, as `case <n>`.
 *
 * A case whose agent turn fails, whose files cannot be attached, or that misses an expected tool fails.
 * The report says what every case got; `ok` is false when any case failed (not for soft failures).
 */
import { randomUUID } from 'node:crypto';
import {
  MODEL_JUDGED_METRICS,
  metricMax,
  metricThreshold,
  testCaseName,
  type AgentConfig,
  type LoadedAgentConfig,
  type MetricConfig,
  type ModelConfig,
  type TestCase,
} from '../config/agent.js';
import { AgentHost } from '../actors/agent-host.js';
import { startEmbedded } from '../team/embedded.js';
import type { Logger } from '../observability/logger.js';
import type { Message, Part } from '../protocol/a2a.js';
import { CLIENT_ROUTING_URI } from '../protocol/routing.js';
import { LIMITS } from '../protocol/limits.js';
import { TroupeError } from '../protocol/errors.js';
import { TroupeClient } from '../sdk/client.js';
import type { AgentDefinition } from '../sdk/agent.js';
import type { Transport } from '../transport/types.js';
import { createLlmAgent, type ToolCallRecord } from '../llm/agent.js';
import { createProvider } from '../llm/providers/index.js';
import type { ModelProvider } from '../model/types.js';
import { attachFiles, CaseInputError } from './files.js';
import { judge, type JudgedMetric } from './judge.js';
import { LEXICAL_SCORERS } from './lexical.js';

const DEFAULT_CASE_TIMEOUT_MS = 300_000;
/** Tool results kept per case as the groundedness context. */
const MAX_CONTEXT_PER_CALL = 8_000;

type MetricStatus = 'passed' | 'failed' | 'error' | 'skipped';

export interface MetricResult {
  metric: MetricConfig['metric'];
  status: MetricStatus;
  /** For status `failed` or `error`: whether it fails the case (an error with fail_on_error false does not). */
  hard: boolean;
  threshold: number;
  /** The top of the metric's scale: 1 for lexical metrics, `scale` (default 5) for judged ones. */
  max: number;
  score?: number;
  /** The judge's reason, a skip's reason, or the error. */
  note?: string;
  attempts?: number;
}

export interface CaseResult {
  name: string;
  input: string;
  status: 'passed' | 'failed';
  answer?: string;
  /** Why the case could not be run or the agent's turn failed. */
  error?: string;
  expectedTools: string[];
  calledTools: string[];
  missingTools: string[];
  metrics: MetricResult[];
  softFailures: number;
  durationMs: number;
  /** The tokens of the agent's model calls in the case (as the provider reported them; judges not counted). */
  usage?: { inputTokens: number; outputTokens: number; modelCalls: number };
}

export interface EvalReport {
  agent: string;
  file: string;
  mesh: 'embedded' | 'nats';
  /** `defaultThreshold`: the file gives no threshold, so the metric's default applies. */
  metrics: Array<{
    metric: string;
    kind: 'lexical' | 'judged';
    threshold: number;
    defaultThreshold: boolean;
    max: number;
    enabled: boolean;
    fail_on_error: boolean;
    model?: string;
  }>;
  cases: CaseResult[];
  summary: { cases: number; passed: number; failed: number; softFailures: number; ok: boolean };
}

export interface EvalOptions {
  /** Only the case with this name. */
  caseName?: string;
  env?: NodeJS.ProcessEnv;
  logger: Logger;
  /** Run on this mesh (a NATS transport) instead of an in-process one. */
  nats?: { transport: Transport; tenant: string; principal: string };
  caseTimeoutMs?: number;
  /** Called as each case finishes. */
  onCase?: (result: CaseResult) => void;
}

const isJudged = (metric: string): metric is JudgedMetric => (MODEL_JUDGED_METRICS as readonly string[]).includes(metric);

interface Observed {
  calls: ToolCallRecord[];
  handled: boolean;
  usage: { inputTokens: number; outputTokens: number; modelCalls: number };
}

/** The mesh a run uses: send one message to the agent, stop. */
interface EvalMesh {
  /** `onThread` learns of each thread the message goes out on (a retry takes a new one). */
  send(
    message: Message,
    threadId: string,
    timeoutMs: number,
    onThread: (threadId: string) => void,
  ): Promise<{ text: string; error?: { code: string; message: string } }>;
  stop(): Promise<void>;
}

async function startMesh(agent: AgentDefinition, config: AgentConfig, opts: EvalOptions): Promise<EvalMesh> {
  if (!opts.nats) {
    const mesh = await startEmbedded({ name: `eval-${config.name}`, agents: [agent], config: { entryAgent: config.name } }, opts.logger);
    return {
      send: (message, threadId, timeoutMs, onThread) => {
        onThread(threadId);
        return mesh.client.send(message, { threadId, timeoutMs });
      },
      stop: mesh.stop,
    };
  }
  const { transport, tenant, principal } = opts.nats;
  const host = await new AgentHost({ transport, agent, tenant, logger: opts.logger }).start();
  const client = new TroupeClient(transport, { tenant, principal });
  return {
    async send(message, threadId, timeoutMs, onThread) {
      // The node learns of the agent from its announcement: until then it does not know the id.
      const deadline = Date.now() + 10_000;
      for (let attempt = 0; ; attempt++) {
        const thread = attempt === 0 ? threadId : `${threadId}-${attempt}`;
        onThread(thread);
        // Addressed to the agent (client routing), not to the mesh's entry agent or router.
        const addressed: Message = { ...message, messageId: randomUUID(), metadata: { ...message.metadata, [CLIENT_ROUTING_URI]: { recipient: config.name } } };
        const res = await client.send(addressed, { threadId: thread, timeoutMs });
        if (res.error?.code !== 'AGENT_NOT_FOUND' || Date.now() > deadline) return res;
        await new Promise((r) => setTimeout(r, 250));
      }
    },
    stop: () => host.stop(),
  };
}

function judgeModel(config: AgentConfig, metric: MetricConfig): ModelConfig {
  return metric.model ?? config.evaluations?.model ?? config.model;
}

/** The metrics a case is scored on: the ones it names, else every enabled one. */
function metricsFor(config: AgentConfig, tc: TestCase): Array<{ metric: MetricConfig; named: boolean }> {
  const all = config.evaluations?.metrics ?? [];
  if (tc.evaluations?.length)
    return tc.evaluations.flatMap((name) => all.filter((m) => m.metric === name && m.enabled).map((metric) => ({ metric, named: true })));
  return all.filter((m) => m.enabled).map((metric) => ({ metric, named: false }));
}

async function scoreMetric(
  metric: MetricConfig,
  named: boolean,
  tc: TestCase,
  answer: string,
  context: string,
  judgeFor: (metric: MetricConfig) => ModelProvider,
): Promise<MetricResult> {
  const threshold = metricThreshold(metric);
  const base = { metric: metric.metric, threshold, max: metricMax(metric) };
  const fail = (note: string): MetricResult => ({ ...base, status: 'error', hard: metric.fail_on_error, note });
  if (!isJudged(metric.metric)) {
    if (tc.ground_truth === undefined) {
      return named ? fail(`${metric.metric} needs the case's ground_truth`) : { ...base, status: 'skipped', hard: false, note: 'no ground_truth' };
    }
    const score = LEXICAL_SCORERS[metric.metric](answer, tc.ground_truth);
    return { ...base, score, status: score >= threshold ? 'passed' : 'failed', hard: score < threshold };
  }
  if (metric.metric === 'groundedness' && !context.trim()) {
    return fail('nothing to judge groundedness against: the agent called no tool and the case has no files or ground_truth');
  }
  try {
    const verdict = await judge(judgeFor(metric), metric, {
      metric: metric.metric,
      input: tc.input,
      answer,
      context,
      ...(tc.ground_truth !== undefined ? { groundTruth: tc.ground_truth } : {}),
      scale: metricMax(metric),
    });
    const passed = verdict.score >= threshold;
    return { ...base, score: verdict.score, status: passed ? 'passed' : 'failed', hard: !passed, note: verdict.reason, attempts: verdict.attempts };
  } catch (err) {
    return fail((err as Error).message);
  }
}

/** Runs the test cases of a loaded agent.yaml. Throws only when the agent cannot start or --case names no case. */
export async function runEvaluation(loaded: LoadedAgentConfig, opts: EvalOptions): Promise<EvalReport> {
  const { config } = loaded;
  const env = opts.env ?? process.env;
  const named = (config.test_cases ?? []).map((tc, i) => ({ tc, name: testCaseName(tc, i) }));
  const cases = named.filter((c) => opts.caseName === undefined || c.name === opts.caseName);
  if (opts.caseName !== undefined && cases.length === 0) {
    const names = named.map((c) => c.name);
    throw new TroupeError(
      'CONFIG_INVALID',
      `${loaded.file} has no test case "${opts.caseName}"${names.length ? ` (cases: ${names.join(', ')})` : ' (it has no test_cases)'}`,
    );
  }
  const report: EvalReport = {
    agent: config.name,
    file: loaded.file,
    mesh: opts.nats ? 'nats' : 'embedded',
    metrics: (config.evaluations?.metrics ?? []).map((m) => ({
      metric: m.metric,
      kind: isJudged(m.metric) ? 'judged' : 'lexical',
      threshold: metricThreshold(m),
      defaultThreshold: m.threshold === undefined,
      max: metricMax(m),
      enabled: m.enabled,
      fail_on_error: m.fail_on_error,
      ...(isJudged(m.metric) ? { model: judgeModel(config, m).name } : {}),
    })),
    cases: [],
    summary: { cases: 0, passed: 0, failed: 0, softFailures: 0, ok: true },
  };
  if (cases.length === 0) return report;

  // Judges are built up front, so a missing key fails the run before any case does.
  const judges = new Map<MetricConfig, ModelProvider>();
  for (const m of config.evaluations?.metrics ?? []) {
    if (m.enabled && isJudged(m.metric)) {
      const where = m.model
        ? `evaluations.metrics[${config.evaluations!.metrics.indexOf(m)}].model`
        : config.evaluations?.model
          ? 'evaluations.model'
          : 'model';
      judges.set(m, createProvider(judgeModel(config, m), { env, where, maxRetries: 0, ...(m.timeout_ms ? { timeoutMs: m.timeout_ms } : {}) }));
    }
  }

  const observed = new Map<string, Observed>();
  const agent = await createLlmAgent(loaded, {
    env,
    logger: opts.logger,
    onToolCall: (call) => observed.get(call.threadId)?.calls.push(call),
    onTurn: (turn) => {
      const o = observed.get(turn.threadId);
      if (!o) return;
      o.handled = true;
      o.usage.inputTokens += turn.inputTokens;
      o.usage.outputTokens += turn.outputTokens;
      o.usage.modelCalls += turn.modelCalls;
    },
  });
  const mesh = await startMesh(agent, config, opts).catch(async (err: unknown) => {
    await agent.close?.();
    throw err;
  });
  const runId = randomUUID().slice(0, 8);
  try {
    for (const [i, { tc, name }] of cases.entries()) {
      const started = performance.now();
      const threadId = `eval-${runId}-${i}`;
      const watch: Observed = { calls: [], handled: false, usage: { inputTokens: 0, outputTokens: 0, modelCalls: 0 } };
      const result: CaseResult = {
        name,
        input: tc.input,
        status: 'passed',
        expectedTools: tc.expected_tools ?? [],
        calledTools: [],
        missingTools: [],
        metrics: [],
        softFailures: 0,
        durationMs: 0,
      };
      try {
        const files = await attachFiles(name, tc.files ?? [], loaded.dir);
        const parts: Part[] = [{ kind: 'text', text: tc.input }, ...files.parts];
        const message: Message = { kind: 'message', role: 'user', messageId: randomUUID(), parts };
        const size = Buffer.byteLength(JSON.stringify(message));
        if (size > LIMITS.userMessageBytes)
          throw new CaseInputError(
            `test case "${name}": its input and files make a ${size}-byte message; a user message may be at most ${LIMITS.userMessageBytes} bytes`,
          );
        const threads: string[] = [];
        const res = await mesh.send(message, threadId, opts.caseTimeoutMs ?? DEFAULT_CASE_TIMEOUT_MS, (t) => {
          threads.push(t);
          observed.set(t, watch);
        });
        for (const t of threads) observed.delete(t);
        if (res.error) throw new Error(`the agent's turn failed: ${res.error.code}: ${res.error.message}`);
        if (!watch.handled)
          throw new Error(`the answer came from another instance of ${config.name} on the mesh; stop it while evaluating, so every case runs here`);
        result.answer = res.text;
        result.usage = watch.usage;
        result.calledTools = [...new Set(watch.calls.map((c) => c.tool))];
        result.missingTools = result.expectedTools.filter((t) => !result.calledTools.includes(t));
        const context = [
          ...watch.calls.map((c) => `${c.name}(${c.arguments}) → ${(c.result ?? `error: ${c.error}`).slice(0, MAX_CONTEXT_PER_CALL)}`),
          ...files.context,
          ...(tc.ground_truth ? [`Expected answer: ${tc.ground_truth}`] : []),
        ].join('\n\n');
        for (const { metric, named } of metricsFor(config, tc)) {
          result.metrics.push(await scoreMetric(metric, named, tc, res.text, context, (m) => judges.get(m)!));
        }
      } catch (err) {
        result.error = (err as Error).message;
      }
      result.softFailures = result.metrics.filter((m) => m.status === 'error' && !m.hard).length;
      if (result.error || result.missingTools.length || result.metrics.some((m) => m.hard)) result.status = 'failed';
      result.durationMs = Math.round(performance.now() - started);
      report.cases.push(result);
      opts.onCase?.(result);
    }
  } finally {
    await mesh.stop();
    // The embedded mesh's host closes the agent; a NATS run's host does too. Closing twice is harmless.
    await agent.close?.();
  }
  const passed = report.cases.filter((c) => c.status === 'passed').length;
  const softFailures = report.cases.reduce((n, c) => n + c.softFailures, 0);
  report.summary = { cases: report.cases.length, passed, failed: report.cases.length - passed, softFailures, ok: passed === report.cases.length };
  return report;
}
