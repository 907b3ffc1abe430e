/**
 * An agent.yaml agent holds a conversation over a real nats-server: a durable node (JetStream ingress, KV
 * thread store) and the agent in this process, the model a local server speaking OpenAI's chat
 * completions API that answers from what it received. The agent is given the thread's earlier messages
 * (its own answers as `assistant`), a later answer depends on an early turn across a restart of the node
 * and the agent, older turns beyond the budget are folded into a summary kept in the thread's record and
 * reused after another restart; each reply says its tokens (`troupe/usage`), as do the metrics and spans.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { context, propagation, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { InMemorySpanExporter, SimpleSpanProcessor, TracerProvider } from '@opentelemetry/sdk-trace';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AgentHost } from '../src/actors/agent-host.js';
import { TroupeNode } from '../src/actors/node.js';
import { loadYamlAgent } from '../src/llm/agent.js';
import { metrics } from '../src/observability/metrics.js';
import { useGlobalTracing } from '../src/observability/tracing.js';
import { CLIENT_ROUTING_URI, META, type MemorySummary, type TurnUsage } from '../src/protocol/index.js';
import { TroupeClient, type SendResult } from '../src/sdk/client.js';
import { KvThreadStore } from '../src/store/kv.js';
import { NatsTransport } from '../src/transport/nats.js';
import { OpenAIScriptedServer, type SeenRequest } from './helpers/model-servers.js';
import { startNatsServer, type NatsServerHandle } from './helpers/nats-server.js';

const AGENT = 'keeper';
const CONCIERGE = 'concierge';
const MODEL = 'memory-model';
const PARTITIONS = 4;

interface OpenAIMessage {
  role: string;
  content: string;
}
const messagesOf = (req: SeenRequest) => req.body.messages as OpenAIMessage[];
const isSummaryRequest = (req: SeenRequest) => messagesOf(req)[0]!.content.startsWith('You keep the memory');

/**
 * The model: a summary request is answered with the facts it was given; a question about the order
 * number with the number found anywhere in what it received (so the answer depends on the delivered
 * conversation), anything else with a short acknowledgement. Tokens: 100 in, 10 out (summaries 40 / 8).
 */
function answer(req: SeenRequest) {
  const msgs = messagesOf(req);
  const all = msgs.map((m) => m.content).join('\n');
  if (isSummaryRequest(req)) {
    const order = /order number is (\d+)/.exec(all)?.[1];
    return { text: `The user is Ada; her order number is ${order ?? 'unknown'}.`, usage: { input: 40, output: 8 } };
  }
  const last = msgs.at(-1)!.content;
  if (/order number\?/.test(last))
    return { text: `Your order number is ${/order number is (\d+)/.exec(all)?.[1] ?? 'unknown'}.`, usage: { input: 100, output: 10 } };
  return { text: `Noted: ${last}`, usage: { input: 100, output: 10 } };
}

describe('conversation memory of an agent.yaml agent over NATS', () => {
  let nats: NatsServerHandle;
  const openai = new OpenAIScriptedServer();
  const exporter = new InMemorySpanExporter();
  const tracer = new TracerProvider({ spanProcessors: [new SimpleSpanProcessor({ exporter })] });
  const transports: NatsTransport[] = [];
  let dir: string;
  let node: TroupeNode | undefined;
  let store: KvThreadStore | undefined;
  let host: AgentHost | undefined;
  let concierge: AgentHost | undefined;
  let client: TroupeClient;

  const connect = async (name: string, user: string) => {
    const t = await NatsTransport.connect({ ...nats.as(user), name });
    transports.push(t);
    return t;
  };

  /** A node and the agent, each new: what the thread knows must come from its record. */
  async function start(): Promise<void> {
    const nodeT = await connect('conversation-node', 'node');
    node = await new TroupeNode({
      transport: nodeT,
      store: (store = await KvThreadStore.open(nodeT.connection)),
      durable: { nc: nodeT.connection, partitions: PARTITIONS, leaseTtlMs: 1_500 },
      config: { entryAgent: AGENT, retries: 0, agentTimeoutMs: 20_000 },
    }).start();
    const agent = await loadYamlAgent(join(dir, 'agent.yaml'), { env: { OPENAI_API_KEY: 'sk-test', OPENAI_BASE_URL: openai.baseURL }, maxRetries: 0 });
    host = await new AgentHost({ transport: await connect('conversation-agent', AGENT), agent }).start();
    const second = await loadYamlAgent(join(dir, 'concierge.yaml'), { env: { OPENAI_API_KEY: 'sk-test', OPENAI_BASE_URL: openai.baseURL }, maxRetries: 0 });
    concierge = await new AgentHost({ transport: await connect('conversation-concierge', CONCIERGE), agent: second }).start();
    await node.registry.waitFor([AGENT, CONCIERGE]);
  }

  async function restart(): Promise<void> {
    await concierge?.stop();
    await host?.stop();
    await node?.stop();
    await start();
  }

  const send = (text: string): Promise<SendResult> => client.send(text, { threadId: 'conversation-1', timeoutMs: 20_000 });
  const usageOf = (res: SendResult) => res.final.status.message?.metadata?.[META.usage] as TurnUsage | undefined;

  beforeAll(async () => {
    context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
    propagation.setGlobalPropagator(new W3CTraceContextPropagator());
    trace.setGlobalTracerProvider(tracer);
    useGlobalTracing(true);
    nats = await startNatsServer({ partitions: PARTITIONS });
    await nats.addUser({ tenant: 'demo', role: 'agent', name: AGENT });
    await nats.addUser({ tenant: 'demo', role: 'agent', name: CONCIERGE });
    await openai.start();
    openai.respondWith(answer);
    dir = mkdtempSync(join(tmpdir(), 'troupe-conversation-'));
    writeFileSync(
      join(dir, 'agent.yaml'),
      [
        `name: ${AGENT}`,
        'description: Remembers what the user said',
        'model: { provider: openai, name: memory-model }',
        'instructions: { inline: You help the user with their orders. }',
        'memory: { max_messages: 4, max_tokens: 4000, summarize: true }',
        '',
      ].join('\n'),
    );
    writeFileSync(
      join(dir, 'concierge.yaml'),
      [
        `name: ${CONCIERGE}`,
        'description: Greets the user and passes questions on',
        'model: { provider: openai, name: concierge-model }',
        'instructions: { inline: You pass questions about orders to the keeper. }',
        '',
      ].join('\n'),
    );
    await start();
    client = new TroupeClient(await connect('conversation-client', 'client'), { tenant: 'demo', principal: 'client' });
  });

  afterAll(async () => {
    await concierge?.stop();
    await host?.stop();
    await node?.stop();
    await Promise.all(transports.map((t) => t.close().catch(() => undefined)));
    await openai.stop();
    await nats?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
    useGlobalTracing(false);
    await tracer.shutdown();
    trace.disable();
    propagation.disable();
    context.disable();
  });

  it('gives the model the earlier turns, its own answers as assistant, and an answer depends on the first turn after a restart', async () => {
    const first = await send('My name is Ada and my order number is 4417.');
    expect(first.text).toBe('Noted: My name is Ada and my order number is 4417.');
    expect(messagesOf(openai.requests[0]!).map((m) => m.role)).toEqual(['system', 'user']);

    const second = await send('Is it sunny today?');
    expect(second.text).toBe('Noted: Is it sunny today?');
    expect(messagesOf(openai.requests[1]!).slice(1)).toEqual([
      { role: 'user', content: 'My name is Ada and my order number is 4417.' },
      { role: 'assistant', content: 'Noted: My name is Ada and my order number is 4417.' },
      { role: 'user', content: 'Is it sunny today?' },
    ]);

    // A new node and a new agent process: the conversation comes from the thread's record.
    await restart();
    const third = await send('What was my order number?');
    expect(third.error).toBeUndefined();
    expect(third.text).toBe('Your order number is 4417.');
    const req = openai.requests[2]!;
    expect(isSummaryRequest(req)).toBe(false);
    expect(messagesOf(req).slice(1)).toEqual([
      { role: 'user', content: 'My name is Ada and my order number is 4417.' },
      { role: 'assistant', content: 'Noted: My name is Ada and my order number is 4417.' },
      { role: 'user', content: 'Is it sunny today?' },
      { role: 'assistant', content: 'Noted: Is it sunny today?' },
      { role: 'user', content: 'What was my order number?' },
    ]);
    expect(usageOf(third)).toEqual({
      inputTokens: 100,
      outputTokens: 10,
      calls: [{ model: MODEL, purpose: 'answer', inputTokens: 100, outputTokens: 10, agent: AGENT }],
      agents: [{ agent: AGENT, inputTokens: 100, outputTokens: 10 }],
    });
  });

  it('folds turns beyond the budget into a summary by the model, kept in the thread record and reused after a restart', async () => {
    const before = openai.requests.length;
    // Six earlier messages, four allowed: the oldest four are summarised, the newest two stay as written.
    const fourth = await send('Please remind me: what is my order number?');
    expect(fourth.text).toBe('Your order number is 4417.');
    const [summaryReq, answerReq, ...more] = openai.requests.slice(before);
    expect(more).toEqual([]);
    expect(isSummaryRequest(summaryReq!)).toBe(true);
    const folded = messagesOf(summaryReq!)[1]!.content;
    expect(folded).toContain('User: My name is Ada and my order number is 4417.');
    expect(folded).toContain('You: Noted: Is it sunny today?');
    expect(folded).not.toContain('What was my order number?');
    const sent = messagesOf(answerReq!);
    expect(sent[0]!.content).toContain('The user is Ada; her order number is 4417.');
    expect(sent.slice(1)).toEqual([
      { role: 'user', content: 'What was my order number?' },
      { role: 'assistant', content: 'Your order number is 4417.' },
      { role: 'user', content: 'Please remind me: what is my order number?' },
    ]);
    // The reply says what both calls cost; the summary itself stays with the thread, not with the user.
    expect(usageOf(fourth)).toEqual({
      inputTokens: 140,
      outputTokens: 18,
      calls: [
        { model: MODEL, purpose: 'summary', inputTokens: 40, outputTokens: 8, agent: AGENT },
        { model: MODEL, purpose: 'answer', inputTokens: 100, outputTokens: 10, agent: AGENT },
      ],
      agents: [{ agent: AGENT, inputTokens: 140, outputTokens: 18 }],
    });
    expect(fourth.final.status.message?.metadata?.[META.memory]).toBeUndefined();
    const record = await store!.get('demo', 'conversation-1');
    const stored = (record?.record.snapshot as { context?: { memory?: Record<string, MemorySummary> } } | undefined)?.context?.memory?.[AGENT];
    expect(stored).toMatchObject({ text: 'The user is Ada; her order number is 4417.', messages: 4 });

    await restart();
    const at = openai.requests.length;
    const fifth = await send('And again, my order number?');
    expect(fifth.text).toBe('Your order number is 4417.');
    // No new summary: the stored one is sent with the messages after it, which fit the budget.
    const [only, ...rest] = openai.requests.slice(at);
    expect(rest).toEqual([]);
    expect(isSummaryRequest(only!)).toBe(false);
    expect(messagesOf(only!)[0]!.content).toContain('The user is Ada; her order number is 4417.');
    expect(
      messagesOf(only!)
        .slice(1)
        .map((m) => m.content),
    ).toEqual([
      'What was my order number?',
      'Your order number is 4417.',
      'Please remind me: what is my order number?',
      'Your order number is 4417.',
      'And again, my order number?',
    ]);
  });

  it('counts the tokens in troupe_model_tokens_total and on the model call spans', async () => {
    const tokens = await metrics.modelTokens.get();
    const value = (kind: string) => tokens.values.find((v) => v.labels.model === MODEL && v.labels.kind === kind)?.value;
    // Five answers (100 / 10) and one summary (40 / 8).
    expect(value('input')).toBe(540);
    expect(value('output')).toBe(58);
    await tracer.forceFlush();
    const calls = exporter.getFinishedSpans().filter((s) => s.name === 'troupe.model.call');
    expect(
      calls.map((s) => [s.attributes['troupe.model.purpose'], s.attributes['gen_ai.usage.input_tokens'], s.attributes['gen_ai.usage.output_tokens']]),
    ).toEqual([
      ['answer', 100, 10],
      ['answer', 100, 10],
      ['answer', 100, 10],
      ['summary', 40, 8],
      ['answer', 100, 10],
      ['answer', 100, 10],
    ]);
  });

  it("a turn through two LLM agents reports the whole turn's tokens, each agent's share, in the reply, the metrics and the turn's span", async () => {
    // The counter's values copied now (prom-client hands out its live objects).
    const before = async () => {
      const values = (await metrics.turnTokens.get()).values.map((v) => ({ agent: v.labels.agent, kind: v.labels.kind, value: v.value }));
      return (agent: string, kind: string) => values.find((v) => v.agent === agent && v.kind === kind)?.value ?? 0;
    };
    const was = await before();
    // The concierge's model passes the question on (the route tool) with its own words; the keeper answers.
    openai.scriptFor('concierge-model', {
      text: 'Passing you to the keeper: what is my order number?',
      toolCalls: [{ id: 'call_route', name: 'route', arguments: { recipient: AGENT, reason: 'the keeper knows orders' } }],
      usage: { input: 30, output: 3 },
    });
    const res = await client.send(
      {
        kind: 'message',
        role: 'user',
        messageId: 'two-agents-1',
        parts: [{ kind: 'text', text: 'Hello, what is my order number?' }],
        metadata: { [CLIENT_ROUTING_URI]: { recipient: CONCIERGE } },
      },
      { threadId: 'two-agents', timeoutMs: 20_000 },
    );
    expect(res.error).toBeUndefined();
    expect(res.route.map((r) => r.to)).toEqual([CONCIERGE, AGENT]);
    expect(res.final.status.message?.metadata?.[META.agent]).toBe(AGENT);
    expect(usageOf(res)).toEqual({
      inputTokens: 130,
      outputTokens: 13,
      calls: [
        { model: 'concierge-model', purpose: 'answer', inputTokens: 30, outputTokens: 3, agent: CONCIERGE },
        { model: MODEL, purpose: 'answer', inputTokens: 100, outputTokens: 10, agent: AGENT },
      ],
      agents: [
        { agent: CONCIERGE, inputTokens: 30, outputTokens: 3 },
        { agent: AGENT, inputTokens: 100, outputTokens: 10 },
      ],
    });
    const now = await before();
    expect([now(CONCIERGE, 'input') - was(CONCIERGE, 'input'), now(CONCIERGE, 'output') - was(CONCIERGE, 'output')]).toEqual([30, 3]);
    expect([now(AGENT, 'input') - was(AGENT, 'input'), now(AGENT, 'output') - was(AGENT, 'output')]).toEqual([100, 10]);
    await tracer.forceFlush();
    const turn = exporter.getFinishedSpans().find((s) => s.name === 'troupe.turn' && s.attributes['troupe.thread'] === 'two-agents');
    expect(turn?.attributes).toMatchObject({
      'gen_ai.usage.input_tokens': 130,
      'gen_ai.usage.output_tokens': 13,
      'troupe.usage.agents': [`${CONCIERGE}:30/3`, `${AGENT}:100/10`],
    });
  });
});
