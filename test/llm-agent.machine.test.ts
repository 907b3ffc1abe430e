/**
 * The model loop machine (src/machines/llm-agent.ts) with injected model and tool actors: answers,
 * parallel tool rounds, tool errors and timeouts fed back to the model, retries with backoff, the round
 * limit, routing-only rounds that end the turn — and every state and transition of both machines reached.
 */
import { describe, expect, it } from 'vitest';
import { createActor, toPromise, type AnyStateMachine } from 'xstate';
import { CoverageRecorder } from './helpers/machine-coverage.js';
import { waitFor } from './helpers/wait.js';
import { llmAgentLogic, type LlmAgentInput, type LlmAgentOutput, type ModelCallInput, type ToolRunInput } from '../src/machines/llm-agent.js';
import { llmAgentMachine, toolCallMachine } from '../src/machines/llm-agent.js';
import type { ChatMessage, Completion, ToolCall } from '../src/model/types.js';
import { ModelCallError } from '../src/model/types.js';

/** Every run of this file records here: the loop and the tool calls it spawns, from the inspection stream. */
const coverage = new CoverageRecorder();

const answer = (text: string): Completion => ({ text, toolCalls: [], stopReason: 'stop' });
const calls = (text: string, ...list: Array<[id: string, name: string, args?: unknown]>): Completion => ({
  text,
  toolCalls: list.map(([id, name, args]): ToolCall => ({ id, name, arguments: JSON.stringify(args ?? {}) })),
  stopReason: 'tool_calls',
});

interface Run {
  output: LlmAgentOutput;
  modelInputs: ModelCallInput[];
  toolRuns: Array<ToolRunInput & { signal: AbortSignal }>;
  states: string[];
}

async function run(
  model: (input: ModelCallInput) => Completion | Promise<Completion>,
  tools: (input: ToolRunInput, signal: AbortSignal) => Promise<string>,
  input: Partial<LlmAgentInput> = {},
): Promise<Run> {
  const modelInputs: ModelCallInput[] = [];
  const toolRuns: Run['toolRuns'] = [];
  const states: string[] = [];
  const logic = llmAgentLogic({
    callModel: async (i) => {
      modelInputs.push(structuredClone(i));
      return model(i);
    },
    runTool: (i, signal) => {
      toolRuns.push({ ...i, signal });
      return tools(i, signal);
    },
  });
  const actor = createActor(logic, {
    input: {
      messages: [
        { role: 'system', content: 'Be helpful.' },
        { role: 'user', content: 'Where is order 42?' },
      ],
      tools: [],
      controlTools: ['route'],
      maxToolRounds: 3,
      toolTimeoutMs: 5_000,
      retryBaseMs: 1,
      ...input,
    },
    inspect: coverage.inspect,
  });
  actor.subscribe((s) => {
    if (states.at(-1) !== s.value) states.push(String(s.value));
  });
  actor.start();
  return { output: await toPromise(actor), modelInputs, toolRuns, states };
}

const never = (_i: ToolRunInput, signal: AbortSignal) =>
  new Promise<string>((_resolve, reject) => signal.addEventListener('abort', () => reject(new Error('aborted')), { once: true }));

describe('llm agent loop', () => {
  it('answers at once when the model asks for no tools', async () => {
    const r = await run(() => answer('It has shipped.'), never);
    expect(r.output).toEqual({ ok: true, text: 'It has shipped.', rounds: 0, toolCalls: 0 });
    expect(r.states).toEqual(['thinking', 'answered']);
    expect(r.toolRuns).toEqual([]);
  });

  it('runs the tool calls of a round in parallel and gives the model every result, in its order', async () => {
    const started: string[] = [];
    const release = new Map<string, (v: string) => void>();
    const pending = run(
      (i) => (i.round === 0 ? calls('Checking.', ['a', 'lookup', { id: 42 }], ['b', 'lookup', { id: 43 }]) : answer('Both shipped.')),
      (i) =>
        new Promise<string>((resolve) => {
          started.push(i.call.id);
          release.set(i.call.id, resolve);
        }),
    );
    // Both calls run before either has finished.
    await waitFor(() => started.length === 2, 'both tool calls to start');
    release.get('b')!('{"status":"shipped","id":43}');
    release.get('a')!('{"status":"shipped","id":42}');
    const r = await pending;
    expect(r.output).toEqual({ ok: true, text: 'Both shipped.', rounds: 1, toolCalls: 2 });
    expect(r.states).toEqual(['thinking', 'tools', 'thinking', 'answered']);
    const second = r.modelInputs[1]!;
    expect(second.round).toBe(1);
    expect(second.messages.slice(2)).toEqual<ChatMessage[]>([
      {
        role: 'assistant',
        content: 'Checking.',
        toolCalls: [
          { id: 'a', name: 'lookup', arguments: '{"id":42}' },
          { id: 'b', name: 'lookup', arguments: '{"id":43}' },
        ],
      },
      { role: 'tool', toolCallId: 'a', name: 'lookup', content: '{"status":"shipped","id":42}' },
      { role: 'tool', toolCallId: 'b', name: 'lookup', content: '{"status":"shipped","id":43}' },
    ]);
  });

  it('reports a failing tool to the model as a tool error and carries on', async () => {
    const r = await run(
      (i) => (i.round === 0 ? calls('', ['a', 'refund']) : answer('I could not refund it.')),
      async () => {
        throw new Error('the refund service is down');
      },
    );
    expect(r.output).toMatchObject({ ok: true, text: 'I could not refund it.' });
    expect(r.modelInputs[1]!.messages.at(-1)).toEqual({
      role: 'tool',
      toolCallId: 'a',
      name: 'refund',
      content: '{"error":"the refund service is down"}',
      isError: true,
    });
  });

  it('times a tool out (its own timeout over the default), aborts it and tells the model', async () => {
    const r = await run(
      (i) => (i.round === 0 ? calls('', ['a', 'slow'], ['b', 'fast']) : answer('The slow one timed out.')),
      (i, signal) => (i.call.name === 'fast' ? Promise.resolve('done') : never(i, signal)),
      { toolTimeoutMs: 60_000, toolTimeouts: { slow: 20 } },
    );
    expect(r.output).toMatchObject({ ok: true, text: 'The slow one timed out.' });
    expect(r.toolRuns.find((t) => t.call.name === 'slow')!.signal.aborted).toBe(true);
    expect(r.modelInputs[1]!.messages.slice(-2)).toEqual([
      { role: 'tool', toolCallId: 'a', name: 'slow', content: '{"error":"the tool \\"slow\\" did not finish within 20 ms"}', isError: true },
      { role: 'tool', toolCallId: 'b', name: 'fast', content: 'done' },
    ]);
  });

  it('retries a retryable model failure with backoff (Retry-After wins) and then answers', async () => {
    let n = 0;
    const r = await run(() => {
      n++;
      if (n === 1) throw new ModelCallError('HTTP 500', true, 500);
      if (n === 2) throw new ModelCallError('HTTP 429', true, 429, 5);
      return answer('Third time lucky.');
    }, never);
    expect(r.output).toMatchObject({ ok: true, text: 'Third time lucky.' });
    expect(r.modelInputs.map((i) => [i.round, i.attempt])).toEqual([
      [0, 0],
      [0, 1],
      [0, 2],
    ]);
    expect(r.states).toEqual(['thinking', 'retrying', 'thinking', 'retrying', 'thinking', 'answered']);
  });

  it('gives up with MODEL_ERROR after the retries, and at once for an error a retry cannot fix', async () => {
    const down = await run(
      () => {
        throw new ModelCallError('HTTP 503 unavailable', true, 503);
      },
      never,
      { maxRetries: 2 },
    );
    expect(down.output).toEqual({
      ok: false,
      error: { code: 'MODEL_ERROR', message: 'HTTP 503 unavailable (gave up after 3 attempts)', details: { attempts: 3, retryable: true } },
      rounds: 0,
      toolCalls: 0,
    });
    const bad = await run(() => {
      throw new ModelCallError('HTTP 401 bad key', false, 401);
    }, never);
    expect(bad.output).toMatchObject({ ok: false, error: { code: 'MODEL_ERROR', message: 'HTTP 401 bad key' } });
    expect(bad.modelInputs).toHaveLength(1);
  });

  it('ends with TOOL_ROUND_LIMIT when the model never stops calling tools', async () => {
    const r = await run(
      (i) => calls('', [`c${i.round}`, 'lookup']),
      async () => 'more',
      { maxToolRounds: 2 },
    );
    expect(r.output).toEqual({
      ok: false,
      error: { code: 'TOOL_ROUND_LIMIT', message: 'the model still asked for tools after 2 tool rounds', details: { maxToolRounds: 2 } },
      rounds: 2,
      toolCalls: 2,
    });
    expect(r.modelInputs).toHaveLength(3);
    expect(r.toolRuns).toHaveLength(2);
  });

  it('ends the turn after a routing-only round when the answer is already written', async () => {
    const r = await run(
      () => calls('Passing you to billing.', ['r', 'route', { recipient: 'billing' }]),
      async () => 'ok',
    );
    expect(r.output).toEqual({ ok: true, text: 'Passing you to billing.', rounds: 1, toolCalls: 1 });
    expect(r.modelInputs).toHaveLength(1);
  });

  it('asks the model again after a routing call without text, or one that failed', async () => {
    const noText = await run(
      (i) => (i.round === 0 ? calls('', ['r', 'route']) : answer('For billing: refund 42.')),
      async () => 'ok',
    );
    expect(noText.output).toMatchObject({ ok: true, text: 'For billing: refund 42.', rounds: 1 });
    const refused = await run(
      (i) => (i.round === 0 ? calls('To nobody.', ['r', 'route', { recipient: 'nobody' }]) : answer('Sorry, I answer myself.')),
      async () => {
        throw new Error('recipient must be one of user, billing');
      },
    );
    expect(refused.output).toMatchObject({ ok: true, text: 'Sorry, I answer myself.' });
  });

  it('keeps results apart when the model reuses a call id in one round', async () => {
    const r = await run(
      (i) => (i.round === 0 ? calls('', ['same', 'a'], ['same', 'b']) : answer('ok')),
      async (i) => `ran ${i.call.name}`,
    );
    expect(r.modelInputs[1]!.messages.filter((m) => m.role === 'tool').map((m) => m.role === 'tool' && [m.toolCallId, m.content])).toEqual([
      ['same', 'ran a'],
      ['same#1', 'ran b'],
    ]);
  });

  it('stops before a round that calls a tool needing approval, running none of its calls, and hands the round out', async () => {
    const r = await run(() => calls('I will refund it.', ['r1', 'refund', { order: 42 }], ['l1', 'lookup', { id: 42 }]), never, { approvalTools: ['refund'] });
    expect(r.states).toEqual(['thinking', 'awaitingApproval']);
    expect(r.toolRuns).toEqual([]);
    expect(r.output).toEqual({
      ok: true,
      text: 'I will refund it.',
      rounds: 0,
      toolCalls: 0,
      approval: [
        { id: 'r1', name: 'refund', arguments: '{"order":42}' },
        { id: 'l1', name: 'lookup', arguments: '{"id":42}' },
      ],
    });
    // A round without such a tool runs as usual.
    const plain = await run(
      (i) => (i.round === 0 ? calls('', ['l1', 'lookup', { id: 42 }]) : answer('Shipped.')),
      async () => 'shipped',
      { approvalTools: ['refund'] },
    );
    expect(plain.output).toEqual({ ok: true, text: 'Shipped.', rounds: 1, toolCalls: 1 });
  });

  it('reached every state and transition of the loop and of a tool call', () => {
    expect(coverage.missingOf(llmAgentMachine as AnyStateMachine)).toEqual({ states: [], transitions: [] });
    expect(coverage.missingOf(toolCallMachine as AnyStateMachine)).toEqual({ states: [], transitions: [] });
  });
});
