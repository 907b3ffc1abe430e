/**
 * The peers a user would pick instead of Troupe, measured in the same run, on the same machine, in the same
 * shape as the Troupe rows they stand beside (bench/run.ts):
 *
 *   - LangGraph.js (`@langchain/langgraph`): a one-node graph that echoes the last user message, each worker
 *     one thread (`thread_id`) with one turn in flight, its messages kept to the same 50 as a Troupe thread's
 *     history. With `MemorySaver` beside the embedded turn (both in process, nothing durable); with
 *     `PostgresSaver` on the machine's PostgreSQL and `durability: "sync"` (the checkpoint written before the
 *     call returns) beside the durable turn (committed to JetStream KV before the stream message is acked).
 *   - the OpenAI Agents SDK (`@openai/agents`): a triage agent whose model hands off at once to a specialist
 *     whose model streams one chunk at once (scripted models in process, no HTTP), timed from `run` to the
 *     specialist's first text delta, beside Troupe's handoff transition (publish to the target's first chunk
 *     on the thread's `.out`, over NATS, the thread state committed). The SDK keeps nothing between runs and
 *     nothing durable: its guarantees are weaker than the row it stands beside.
 *
 * PostgreSQL: `BENCH_PG_URL` (default `postgresql://postgres@127.0.0.1:5432/test`, the machine's own server);
 * the checkpointer's tables live in a schema of their own, dropped at the end.
 */
import { randomUUID } from 'node:crypto';
import { AIMessage, HumanMessage, type BaseMessage } from '@langchain/core/messages';
import { Annotation, END, MemorySaver, START, StateGraph, type BaseCheckpointSaver } from '@langchain/langgraph';
import { PostgresSaver } from '@langchain/langgraph-checkpoint-postgres';
import { Agent, Runner, Usage, type Model, type StreamEvent } from '@openai/agents';
import pg from 'pg';
import { elapsedUs, type Op } from './measure.js';

export const PG_URL = process.env.BENCH_PG_URL ?? 'postgresql://postgres@127.0.0.1:5432/test';

/** What each peer keeps of a conversation: the same bound as a Troupe thread's history. */
const HISTORY_LIMIT = 50;

const State = Annotation.Root({
  messages: Annotation<BaseMessage[]>({
    reducer: (kept, added) => kept.concat(added).slice(-HISTORY_LIMIT),
    default: () => [],
  }),
});

export interface PeerRig {
  op: Op;
  stop(): Promise<void>;
}

function lastText(messages: BaseMessage[]): string {
  const last = messages[messages.length - 1];
  return typeof last?.content === 'string' ? last.content : '';
}

function echoGraph(checkpointer: BaseCheckpointSaver) {
  return new StateGraph(State)
    .addNode('echo', (s: typeof State.State) => ({ messages: [new AIMessage(lastText(s.messages))] }))
    .addEdge(START, 'echo')
    .addEdge('echo', END)
    .compile({ checkpointer });
}

/** The echo turn on a LangGraph graph: the user's text in, the graph's answer checked. */
function graphOp(graph: ReturnType<typeof echoGraph>, text: string, prefix: string, durability: 'async' | 'sync'): Op {
  return async (w) => {
    const out = await graph.invoke({ messages: [new HumanMessage(text)] }, { configurable: { thread_id: `${prefix}-${w}` }, durability });
    const answer = lastText(out.messages);
    if (answer !== text) throw new Error(`LangGraph answered "${answer}"`);
  };
}

export function startLangGraphMemory(text: string): PeerRig {
  const run = randomUUID().slice(0, 8);
  return { op: graphOp(echoGraph(new MemorySaver()), text, `lg-mem-${run}`, 'async'), stop: async () => undefined };
}

export async function startLangGraphPostgres(text: string, url = PG_URL): Promise<PeerRig> {
  const schema = `bench_langgraph_${randomUUID().replaceAll('-', '').slice(0, 12)}`;
  const admin = new pg.Client({ connectionString: url });
  await admin.connect();
  await admin.query(`CREATE SCHEMA ${schema}`);
  const saver = PostgresSaver.fromConnString(url, { schema });
  await saver.setup();
  return {
    op: graphOp(echoGraph(saver), text, 'lg-pg', 'sync'),
    stop: async () => {
      await saver.end();
      await admin.query(`DROP SCHEMA ${schema} CASCADE`);
      await admin.end();
    },
  };
}

const usage = () => new Usage({ requests: 1, inputTokens: 1, outputTokens: 1, totalTokens: 2 });

type Output = Extract<StreamEvent, { type: 'response_done' }>['response']['output'];

/** A model that answers every request with `text`, or with a call of the handoff tool `handoff`, streamed as the SDK's own events. */
function scriptedModel(answer: { text: string } | { handoff: string }): Model {
  const output = (): Output =>
    'text' in answer
      ? [{ type: 'message', role: 'assistant', status: 'completed', content: [{ type: 'output_text', text: answer.text }] }]
      : [{ type: 'function_call', callId: randomUUID(), name: answer.handoff, arguments: '{}', status: 'completed' }];
  return {
    getResponse: () => Promise.resolve({ usage: usage(), output: output(), responseId: randomUUID() }),
    async *getStreamedResponse(): AsyncIterable<StreamEvent> {
      yield { type: 'response_started' };
      if ('text' in answer) yield { type: 'output_text_delta', delta: answer.text };
      yield { type: 'response_done', response: { id: randomUUID(), usage: { inputTokens: 1, outputTokens: 1, totalTokens: 2 }, output: output() } };
    },
  };
}

/**
 * One run: triage hands off to the specialist, which streams `text`. Resolves with the µs from `run` to the
 * specialist's first text delta, once the run has completed (so runs never overlap).
 */
export function startOpenAIAgentsHandoff(text: string): { firstChunkUs(): Promise<number> } {
  const specialist = new Agent({
    name: 'specialist',
    instructions: 'Answer the user.',
    model: scriptedModel({ text }),
  });
  const triage = Agent.create({
    name: 'triage',
    instructions: 'Hand the user to the specialist.',
    handoffs: [specialist],
    model: scriptedModel({ handoff: 'transfer_to_specialist' }),
  });
  const runner = new Runner({ tracingDisabled: true });
  return {
    firstChunkUs: async () => {
      const start = process.hrtime.bigint();
      const result = await runner.run(triage, 'I need the specialist.', { stream: true });
      let first: string | undefined;
      let firstUs = 0;
      for await (const event of result) {
        if (first === undefined && event.type === 'raw_model_stream_event' && event.data.type === 'output_text_delta') {
          firstUs = elapsedUs(start);
          first = event.data.delta;
        }
      }
      await result.completed;
      if (first !== text) throw new Error(`the specialist's first chunk was "${String(first)}"`);
      if (result.lastAgent?.name !== 'specialist') throw new Error(`the run ended with ${String(result.lastAgent?.name)}`);
      return firstUs;
    },
  };
}
