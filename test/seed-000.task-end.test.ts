/**
 * Seed 000's task lifecycle (`submitted → working → completed`; `input-required` only when the agent asks)
 * for a team with `taskEnd: answer`, through the A2A gateway with the SDK's own client: an answer completes
 * the task, a question keeps it open and the reply continues it, and the next message of the context is a
 * new task of the same context that names the one before and continues its conversation. Seed 003's request payload, verbatim, at the
 * orchestrator path gets `task_state: "completed"`. A team without the setting keeps the conversation open.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { TaskState, type Task as SdkTask } from '@a2a-js/sdk';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defineAgent, reply } from '../src/sdk/index.js';
import { defineTeam } from '../src/team/team.js';
import { startEmbedded } from '../src/team/embedded.js';
import { silentLogger } from '../src/observability/logger.js';
import { startGateway, type Gateway } from '../src/gateway/index.js';
import { META } from '../src/protocol/index.js';
import { loadTeamConfig, threadConfigOf, validateTeamFile } from '../src/config/team.js';
import { collect, send, textOf, userText, v1Client } from './helpers/a2a.js';
import { SEED_003_REQUEST as SEED_REQUEST } from './fixtures/seed-003.js';

type Mesh = Awaited<ReturnType<typeof startEmbedded>>;

/** Answers, except that "lights" without a room gets a question back (marked as one). */
const home = defineAgent({
  card: { id: 'home', name: 'Home', description: 'Lights and music' },
  handle: (_m, ctx) => {
    if (ctx.text === 'Turn on the lights') return reply('Which room?', { to: 'user', metadata: { [META.inputRequired]: true } });
    // "And the hall" means the lights only to an agent that sees the conversation before it.
    const earlier = (ctx.history ?? []).filter((m) => m.role === 'user').map((m) => m.parts.map((p) => (p.kind === 'text' ? p.text : '')).join(''));
    if (ctx.text === 'And the hall') return reply(earlier.includes('Turn on the lights') ? 'Hall lights on too.' : 'The hall what?', { to: 'user' });
    return reply(`Done: ${ctx.text}`, { to: 'user' });
  },
});

let answering: Mesh;
let conversing: Mesh;
let gateway: Gateway;
let openGateway: Gateway;

beforeAll(async () => {
  [answering, conversing] = await Promise.all([
    startEmbedded(defineTeam({ name: 'answers', agents: [home], config: { entryAgent: 'home', taskEnd: 'answer' } }), silentLogger()),
    startEmbedded(defineTeam({ name: 'conversation', agents: [home], config: { entryAgent: 'home' } }), silentLogger()),
  ]);
  [gateway, openGateway] = await Promise.all([startGateway({ clients: { demo: answering.client } }), startGateway({ clients: { demo: conversing.client } })]);
});

afterAll(async () => {
  await Promise.all([gateway?.close(), openGateway?.close()]);
  await Promise.all([answering?.stop(), conversing?.stop()]);
});

function taskOf(result: unknown): SdkTask {
  if (!result || typeof result !== 'object' || !('status' in result)) throw new Error(`expected a Task, got ${JSON.stringify(result)}`);
  return result as SdkTask;
}

/** The task states a stream went through, in order. */
function statesOf(events: Awaited<ReturnType<typeof collect>>): TaskState[] {
  return events.flatMap((e) => {
    const payload = (e as { payload?: { $case: string; value: { status?: { state: TaskState } } } }).payload;
    if (payload?.$case === 'task' || payload?.$case === 'statusUpdate') return payload.value.status ? [payload.value.status.state] : [];
    return [];
  });
}

describe('taskEnd: answer (seed 000)', () => {
  it('goes submitted → working → completed for an answer', async () => {
    const client = await v1Client(gateway.url);
    const events = await collect(client.sendMessageStream(send(userText('Play jazz in the kitchen'))));
    expect(statesOf(events)).toEqual([
      TaskState.TASK_STATE_SUBMITTED,
      TaskState.TASK_STATE_WORKING,
      TaskState.TASK_STATE_WORKING,
      TaskState.TASK_STATE_COMPLETED,
    ]);
  });

  it('keeps a question input-required, completes with the reply, and starts the next message as a new task of the context', async () => {
    const client = await v1Client(gateway.url);
    const asked = taskOf(await client.sendMessage(send(userText('Turn on the lights'))));
    expect(asked.status?.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED);
    const contextId = asked.contextId;
    const answered = taskOf(await client.sendMessage(send(userText('The kitchen', { contextId }))));
    expect(answered.id).toBe(asked.id);
    expect(answered.status?.state).toBe(TaskState.TASK_STATE_COMPLETED);
    expect(answered.status?.message?.metadata?.taskState).toBe('completed');
    const next = taskOf(await client.sendMessage(send(userText('And the hall', { contextId }))));
    expect(next.id).not.toBe(asked.id);
    expect(next.contextId).toBe(contextId);
    expect(next.status?.state).toBe(TaskState.TASK_STATE_COMPLETED);
    // The new task continues the conversation of the one before: the agent saw it.
    expect(textOf(next.status?.message?.parts)).toBe('Hall lights on too.');
    const sent = next.history.find((m) => m.role === 1 && textOf(m.parts) === 'And the hall');
    expect(sent?.referenceTaskIds).toContain(asked.id);
    // Its history starts with the earlier task's conversation, those messages still naming their task.
    expect(next.history.filter((m) => m.taskId === asked.id).map((m) => textOf(m.parts))).toEqual([
      'Turn on the lights',
      'Which room?',
      'The kitchen',
      'Done: The kitchen',
    ]);
  });

  it("does not continue another user's task, whatever a message references", async () => {
    const contextId = `ctx-${crypto.randomUUID()}`;
    const message = (text: string, referenceTaskIds?: string[]) => ({
      kind: 'message' as const,
      role: 'user' as const,
      messageId: crypto.randomUUID(),
      contextId,
      parts: [{ kind: 'text' as const, text }],
      ...(referenceTaskIds ? { referenceTaskIds } : {}),
    });
    const alices = await answering.client.send(message('Turn on the lights'), { user: 'alice', timeoutMs: 10_000 });
    const bobs = await answering.client.send(message('And the hall', [alices.threadId]), { user: 'bob', timeoutMs: 10_000 });
    expect(bobs.text).toBe('The hall what?');
  });

  it('answers the seed 003 request, verbatim, at the orchestrator path with task_state "completed"', async () => {
    const res = await fetch(gateway.orchestratorUrl, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(SEED_REQUEST) });
    const body = (await res.json()) as { result: { kind: string; role: string; metadata: Record<string, unknown> } };
    expect(body.result.kind).toBe('message');
    expect(body.result.role).toBe('assistant');
    expect(body.result.metadata.task_state).toBe('completed');
    expect(body.result.metadata.agents_used).toEqual(['home']);
  });
});

describe('taskEnd: open (the default)', () => {
  it('leaves an answered task input-required, and the next message of the context continues the same task', async () => {
    const client = await v1Client(openGateway.url);
    const first = taskOf(await client.sendMessage(send(userText('Play jazz'))));
    expect(first.status?.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED);
    const second = taskOf(await client.sendMessage(send(userText('Louder', { contextId: first.contextId }))));
    expect(second.id).toBe(first.id);
  });
});

describe('team.yaml routing.task_end', () => {
  const dir = mkdtempSync(join(tmpdir(), 'troupe-task-end-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('sets the thread config (answer), and is open when absent', () => {
    const file = (name: string, text: string) => (writeFileSync(join(dir, name), text), join(dir, name));
    const answers = loadTeamConfig(file('answers.yaml', 'id: t\nname: T\nagents:\n  - id: a\nrouting:\n  task_end: answer\n'), {}).config;
    expect(threadConfigOf(answers, 'a').taskEnd).toBe('answer');
    const plain = loadTeamConfig(file('plain.yaml', 'id: t\nname: T\nagents:\n  - id: a\n'), {}).config;
    expect(threadConfigOf(plain, 'a').taskEnd).toBeUndefined();
  });

  it('routing.clarification_agent names a member (seed 000 ClarificationAgentId), checked by troupe validate', () => {
    const file = (name: string, text: string) => (writeFileSync(join(dir, name), text), join(dir, name));
    const good = loadTeamConfig(file('clarify.yaml', 'id: t\nname: T\nagents:\n  - id: a\n  - id: asker\nrouting:\n  clarification_agent: asker\n'), {}).config;
    expect(threadConfigOf(good, 'a').clarificationAgent).toBe('asker');
    const bad = validateTeamFile(file('clarify-bad.yaml', 'id: t\nname: T\nagents:\n  - id: a\nrouting:\n  clarification_agent: ghost\n'), {});
    expect(bad.problems.map((p) => p.path)).toEqual(['routing.clarification_agent']);
  });
});
