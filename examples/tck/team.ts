/**
 * The system under test for the official A2A TCK (github a2aproject/a2a-tck, branch 1.0-dev): one agent
 * that behaves as the TCK's scenarios (`scenarios/*.feature` there) say, chosen by the prefix of the
 * user message's `messageId` (`tck-complete-task-…`, `tck-artifact-file-…`, …). Everything else — the
 * thread, the task store, both protocol versions and transports, errors — is Troupe's gateway as it is.
 *
 *   troupe gateway --team examples/tck/team.ts --port 9999 --card-version 1.0
 *
 * Not a team to build on: it exists so the TCK's scenario tests have the agent they are written for.
 */
import { randomUUID } from 'node:crypto';
import { META, defineAgent, defineTeam, reply, type AgentContext, type AgentResult } from 'troupe';
import type { Message, Part, Task, TaskState } from 'troupe';

/** The TCK's streaming timeout is 2 s; the resubscribe scenario runs for twice that. */
const RESUBSCRIBE_WORK_MS = 4_000;

function agentMessage(ctx: AgentContext, text: string): Message {
  return { kind: 'message', role: 'agent', messageId: randomUUID(), taskId: ctx.taskId, contextId: ctx.contextId, parts: [{ kind: 'text', text }] };
}

/** The task in `state`, with an answer and artifacts of one part each. */
function task(ctx: AgentContext, state: TaskState, text: string, parts: Part[] = []): Task {
  const artifacts: NonNullable<Task['artifacts']> = parts.map((part) => ({ artifactId: randomUUID(), parts: [part] }));
  return {
    kind: 'task',
    id: ctx.taskId,
    contextId: ctx.contextId,
    status: { state, message: agentMessage(ctx, text) },
    ...(artifacts.length ? { artifacts } : {}),
  };
}

const FILE: Part = { kind: 'file', file: { bytes: Buffer.from('tck').toString('base64'), name: 'output.txt', mimeType: 'text/plain' } };
const FILE_URL: Part = { kind: 'file', file: { uri: 'https://example.com/output.txt', name: 'output.txt', mimeType: 'text/plain' } };

/** Scenario by messageId prefix; longer prefixes first where one starts another (`tck-artifact-file-url`). */
const SCENARIOS: Array<[string, (ctx: AgentContext, message: Message) => AgentResult | AsyncGenerator<string, AgentResult | void, void>]> = [
  ['tck-complete-task', (ctx) => task(ctx, 'completed', 'Hello from TCK')],
  ['tck-artifact-text', (ctx) => task(ctx, 'completed', 'Artifact attached', [{ kind: 'text', text: 'Generated text content' }])],
  ['tck-artifact-file-url', (ctx) => task(ctx, 'completed', 'Artifact attached', [FILE_URL])],
  ['tck-artifact-file', (ctx) => task(ctx, 'completed', 'Artifact attached', [FILE])],
  ['tck-artifact-data', (ctx) => task(ctx, 'completed', 'Artifact attached', [{ kind: 'data', data: { key: 'value', count: 42 } }])],
  // An answer that needs no task: a blocking SendMessage gets this Message instead of the Task (the thread waits for the next message of the context).
  ['tck-message-response', () => reply('Direct message response', { metadata: { [META.response]: 'message' } })],
  // The thread waits for the user: Troupe's `input-required` after an answer to the user.
  ['tck-input-required', () => reply('Input required: send the next message', { to: 'user' })],
  ['tck-reject-task', (ctx) => task(ctx, 'rejected', 'rejected')],
  ['tck-stream-artifact-chunked', (ctx) => streamed(ctx, ['chunk-1 ', 'chunk-2'])],
  ['tck-stream-artifact-text', (ctx) => streamed(ctx, ['Streamed text content'])],
  ['tck-stream-artifact-file', (ctx) => task(ctx, 'completed', 'Artifact attached', [FILE])],
  ['tck-stream-ordering-001', (ctx) => streamed(ctx, ['Ordered output'])],
  ['tck-stream-001', (ctx) => streamed(ctx, ['Stream hello from TCK'])],
  ['tck-stream-002', (ctx) => task(ctx, 'completed', 'Done')],
  ['tck-stream-003', (ctx) => streamed(ctx, ['Stream task lifecycle'])],
  ['test-resubscribe-message-id', (ctx) => longRunning(ctx)],
];

async function* streamed(ctx: AgentContext, chunks: string[]): AsyncGenerator<string, AgentResult, void> {
  for (const chunk of chunks) yield chunk;
  return task(ctx, 'completed', chunks.join(''));
}

async function* longRunning(ctx: AgentContext): AsyncGenerator<string, AgentResult, void> {
  yield 'Working';
  await new Promise<void>((resolve) => {
    const timer = setTimeout(resolve, RESUBSCRIBE_WORK_MS);
    ctx.signal.addEventListener('abort', () => (clearTimeout(timer), resolve()), { once: true });
  });
  return task(ctx, 'completed', 'Done');
}

export const tckAgent = defineAgent({
  card: {
    id: 'tck',
    name: 'TCK SUT',
    description: 'Behaves as the A2A TCK scenarios say, by the messageId prefix of the user message',
    capabilities: { streaming: true },
    skills: [{ id: 'tck', name: 'TCK Conformance', description: 'Handles TCK conformance test messages', tags: ['tck'], examples: ['tck-complete-task-…'] }],
    routing: false,
  },
  handle: (message, ctx) => {
    const scenario = SCENARIOS.find(([prefix]) => message.messageId.startsWith(prefix));
    if (scenario) return scenario[1](ctx, message);
    return task(ctx, 'completed', `Unhandled messageId prefix: ${message.messageId}`);
  },
});

export default defineTeam({ name: 'tck', agents: [tckAgent], config: { entryAgent: 'tck', retries: 0, agentTimeoutMs: 30_000, agentEndsFailed: true } });
