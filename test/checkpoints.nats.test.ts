/**
 * Time travel on a durable node process and a real nats-server: each committed turn keeps a checkpoint (the
 * record and what the turn did) in the stream TROUPE_CHECKPOINTS, at most the team's `checkpoints` per thread;
 * `troupe history` lists them and diffs two; `troupe fork` makes a new thread from one, continues it, or
 * replays the message that came next against today's agents; the owner checks of a thread apply to its
 * checkpoints; `troupe delete` erases them.
 */
import { jetstreamManager } from '@nats-io/jetstream';
import { beforeAll, describe, expect, it } from 'vitest';
import { AgentHost } from '../src/actors/agent-host.js';
import { defineAgent, reply } from '../src/sdk/agent.js';
import { TroupeClient } from '../src/sdk/client.js';
import { TroupeError } from '../src/protocol/errors.js';
import { META } from '../src/protocol/metadata.js';
import type { CheckpointDiff, ForkReply, HistoryReply } from '../src/protocol/checkpoint.js';
import { CHECKPOINT_STREAM } from '../src/store/checkpoint-stream.js';
import { natsSuite } from './helpers/nats-suite.js';
import { cliTestTimeout, runTroupe, runTroupeJson, spawnTroupe } from './helpers/processes.js';
import { waitUntil } from './helpers/wait.js';

const suite = natsSuite();
let client: TroupeClient;
let other: TroupeClient;
let operator: TroupeClient;
/** What the agent puts before the text it echoes: changed to show a replay meets today's agent. */
let prefix = 'echo';

const codeOf = async (p: Promise<unknown>): Promise<string> => {
  try {
    await p;
    return 'no error';
  } catch (err) {
    return err instanceof TroupeError ? err.code : `${(err as Error).name}: ${(err as Error).message}`;
  }
};

/** Sends `turns` messages into a new thread and waits until its last checkpoint is stored. */
async function thread(threadId: string, turns: number): Promise<void> {
  for (let i = 1; i <= turns; i++) expect((await client.send(`turn ${i}`, { threadId, timeoutMs: 15_000 })).text).toBe(`${prefix}: turn ${i}`);
  await waitUntil(
    async () => ((await operator.ctl('history', { threadId })).checkpoints.at(-1)?.turns === turns ? true : undefined),
    `checkpoint of turn ${turns}`,
  );
}

async function storedCheckpoints(threadId: string): Promise<{ count: number; bytes: number }> {
  const jsm = await jetstreamManager((await suite.connect('stream-reader')).connection);
  const subject = `troupe.demo.nodes.checkpoint.${threadId}`;
  const info = await jsm.streams.info(CHECKPOINT_STREAM, { subjects_filter: subject });
  return { count: info.state.subjects?.[subject] ?? 0, bytes: info.state.bytes };
}

beforeAll(async () => {
  const echo = defineAgent({
    card: { id: 'echo', name: 'Echo', description: 'Echoes the message' },
    handle: async (_m, ctx) => reply(`${prefix}: ${ctx.text}`, { to: 'user' }),
  });
  await new AgentHost({ transport: await suite.connect('echo', 'echo'), agent: echo, heartbeatMs: 300 }).start();
  await spawnTroupe(
    ['up', '--nats', suite.nats.url, '--team', 'test/fixtures/checkpoint-team.ts', '--no-agents', '--partitions', '8'],
    suite.nats.env,
    { name: 'node' },
    suite.group,
  );
  client = new TroupeClient(await suite.connect('cp-client', 'client'), { principal: 'client' });
  other = new TroupeClient(await suite.connect('cp-other', 'cli'), { principal: 'cli' });
  operator = new TroupeClient(await suite.connect('cp-operator', 'operator'), { principal: 'operator' });
  await waitUntil(
    async () =>
      (await operator.ps(300)).some((r) => r.actors.some((a) => a.kind === 'registry' && String(a.detail?.['agents']).includes('echo'))) ? true : undefined,
    'the node to see the agent',
  );
}, 60_000);

describe('checkpoints', () => {
  it('keeps one per committed turn, the last `checkpoints` (3) of a thread, with what each turn did', async () => {
    await thread('cp-1', 5);
    const { checkpoints, keep } = await operator.ctl('history', { threadId: 'cp-1' });
    expect(keep).toBe(3);
    expect(checkpoints.map((c) => [c.n, c.turns, c.state, c.messages, c.route])).toEqual([
      [3, 3, 'input-required', 6, ['echo']],
      [4, 4, 'input-required', 8, ['echo']],
      [5, 5, 'input-required', 10, ['echo']],
    ]);
    expect(checkpoints.map((c) => c.answer)).toEqual(['echo: turn 3', 'echo: turn 4', 'echo: turn 5']);
    // The broker holds three for the thread: the stream's per-thread limit, not only the listing.
    const stored = await storedCheckpoints('cp-1');
    expect(stored.count).toBe(3);

    const { checkpoint } = await client.checkpoints('checkpoint', { threadId: 'cp-1', n: 4 });
    expect(checkpoint.history.map((m) => m.parts[0]?.text)).toEqual([
      'turn 1',
      'echo: turn 1',
      'turn 2',
      'echo: turn 2',
      'turn 3',
      'echo: turn 3',
      'turn 4',
      'echo: turn 4',
    ]);
    const took = checkpoint.history.find((m) => m.messageId === checkpoint.turn.messageId);
    const answered = checkpoint.history.find((m) => m.messageId === checkpoint.turn.answerId);
    expect(took?.parts[0]?.text).toBe('turn 4');
    expect(answered?.parts[0]?.text).toBe('echo: turn 4');
    expect(checkpoint.turn.hops).toEqual([expect.objectContaining({ from: 'user', to: 'echo', hop: 0, reason: expect.any(String) as unknown })]);
    expect(checkpoint.turn.startedAt).toBeLessThanOrEqual(checkpoint.turn.endedAt);
    expect(checkpoint.value).toBe('input-required');
    expect(checkpoint.context).toMatchObject({ turns: 4, owner: 'client' });
    expect(checkpoint.context).not.toHaveProperty('agents');
    expect(await codeOf(client.checkpoints('checkpoint', { threadId: 'cp-1', n: 1 }))).toBe('CHECKPOINT_NOT_FOUND');
  });

  it("applies the thread's owner checks: another principal or user is told the thread does not exist", async () => {
    await thread('cp-owned', 1);
    expect(await codeOf(other.checkpoints('history', { threadId: 'cp-owned' }))).toBe('THREAD_NOT_FOUND');
    expect(await codeOf(other.checkpoints('checkpoint', { threadId: 'cp-owned', n: 1 }))).toBe('THREAD_NOT_FOUND');
    expect(await codeOf(other.checkpoints('fork', { threadId: 'cp-owned', n: 1 }))).toBe('THREAD_NOT_FOUND');
    // A plain client may not act for a user at all (only a gateway may).
    expect(await codeOf(client.checkpoints('history', { threadId: 'cp-owned' }, { user: 'mallory' }))).toBe('USER_FORBIDDEN');
    expect(await codeOf(other.checkpoints('history', { threadId: 'never-was' }))).toBe('THREAD_NOT_FOUND');
    expect((await client.checkpoints('history', { threadId: 'cp-owned' })).checkpoints.map((c) => c.n)).toEqual([1]);
    // A client cannot read them below `nodes` itself: the broker refuses the stream's subjects to it.
    const refused = await client.transport.request('troupe.demo.nodes.checkpoint.cp-owned', new Uint8Array(), { timeoutMs: 2_000 }).then(
      () => 'answered',
      (err: Error) => err.message,
    );
    expect(refused).toMatch(/permission/i);
  });

  it('forks a new thread (a new context) from a checkpoint: it goes on from that state, and says where it came from', async () => {
    await thread('cp-src', 3);
    const forked = await client.checkpoints('fork', { threadId: 'cp-src', n: 2 });
    expect(forked).toMatchObject({ kind: 'fork', state: 'input-required', forkedFrom: { threadId: 'cp-src', checkpoint: 2 } });
    expect(forked.threadId).not.toBe('cp-src');
    expect(forked.contextId).toBe(forked.threadId);
    expect((await client.send('a different turn 3', { threadId: forked.threadId, timeoutMs: 15_000 })).text).toBe('echo: a different turn 3');
    const task = await client.task(forked.threadId);
    expect(task.contextId).toBe(forked.threadId);
    expect(task.history?.map((m) => m.parts.map((p) => (p.kind === 'text' ? p.text : '')).join(''))).toEqual([
      'turn 1',
      'echo: turn 1',
      'turn 2',
      'echo: turn 2',
      'a different turn 3',
      'echo: a different turn 3',
    ]);
    expect(task.history?.every((m) => m.taskId === undefined || m.taskId === forked.threadId)).toBe(true);
    expect(task.metadata?.[META.forkedFrom]).toEqual({ threadId: 'cp-src', checkpoint: 2 });
    expect(task.metadata?.[META.turns]).toBe(3);
    // The fork keeps checkpoints of its own (from 1), each naming its origin; the source is as it was.
    await waitUntil(
      async () => ((await client.checkpoints('history', { threadId: forked.threadId })).checkpoints.length > 0 ? true : undefined),
      'the fork checkpoint',
    );
    const view = (await client.checkpoints('checkpoint', { threadId: forked.threadId, n: 1 })).checkpoint;
    expect(view.forkedFrom).toEqual({ threadId: 'cp-src', checkpoint: 2 });
    expect((await client.task('cp-src')).history).toHaveLength(6);
    expect(await codeOf(client.checkpoints('fork', { threadId: 'cp-src', n: 2, newThreadId: 'cp-src' }))).toBe('INVALID_MESSAGE');
  });

  it('is erased with its thread (troupe delete)', async () => {
    await thread('cp-gone', 2);
    expect((await storedCheckpoints('cp-gone')).count).toBe(2);
    await operator.deleteThread('cp-gone');
    expect((await storedCheckpoints('cp-gone')).count).toBe(0);
    expect(await codeOf(operator.ctl('history', { threadId: 'cp-gone' }))).toBe('THREAD_NOT_FOUND');
  });

  it(
    "from the CLI: history lists and diffs (readable and --json), fork continues with a message or replays the next one against today's agent",
    async () => {
      await thread('cp-cli', 3);
      const asOperator = { TROUPE_NATS_CREDS: suite.nats.credsFile('operator') };
      const asClient = { TROUPE_NATS_CREDS: suite.nats.credsFile('client') };

      const listed = await runTroupeJson<HistoryReply>(['history', 'cp-cli', '--nats', suite.nats.url, '--json'], asOperator);
      expect(listed.checkpoints.map((c) => c.n)).toEqual([1, 2, 3]);
      const table = await runTroupe(['history', 'cp-cli', '--nats', suite.nats.url], asOperator);
      expect(table.code, table.stderr).toBe(0);
      expect(table.stdout).toMatch(/^\s*3\s+\S+ \S+\s+3\s+input-required\s+echo\s+echo: turn 3\s*$/m);

      const diff = await runTroupeJson<CheckpointDiff>(['history', 'cp-cli', '--diff', '1..3', '--nats', suite.nats.url, '--json'], asOperator);
      expect(diff).toMatchObject({ from: 1, to: 3 });
      expect(diff.added.map((m) => [m.from, m.text])).toEqual([
        ['user', 'turn 2'],
        ['echo', 'echo: turn 2'],
        ['user', 'turn 3'],
        ['echo', 'echo: turn 3'],
      ]);
      expect(diff.removed).toEqual([]);
      expect(diff.context).toContainEqual({ field: 'turns', from: 1, to: 3 });
      const readable = await runTroupe(['history', 'cp-cli', '--diff', '2..3', '--nats', suite.nats.url], asOperator);
      expect(readable.stdout.split('\n')).toEqual(
        expect.arrayContaining(['checkpoint 2 → 3', '+ user: turn 3', '+ echo: echo: turn 3', '~ context.turns: 2 → 3']),
      );
      const bad = await runTroupe(['history', 'cp-cli', '--diff', '3', '--nats', suite.nats.url], asOperator);
      expect(bad.code).toBe(2);

      const continued = await runTroupeJson<ForkReply & { answer: { text: string } }>(
        ['fork', 'cp-cli', '--at', '1', '--message', 'another way', '--nats', suite.nats.url, '--json'],
        asClient,
      );
      expect(continued).toMatchObject({ forkedFrom: { threadId: 'cp-cli', checkpoint: 1 }, answer: { text: 'echo: another way' } });

      prefix = 'now';
      try {
        const replayed = await runTroupeJson<{ threadId: string; message: string; original: { text: string }; answer: { text: string } }>(
          ['fork', 'cp-cli', '--at', '1', '--replay', '--nats', suite.nats.url, '--json'],
          asClient,
        );
        expect(replayed).toMatchObject({ message: 'turn 2', original: { text: 'echo: turn 2' }, answer: { text: 'now: turn 2' } });
        const sideBySide = await runTroupe(['fork', 'cp-cli', '--at', '2', '--replay', '--nats', suite.nats.url], { ...asClient, COLUMNS: '80' });
        expect(sideBySide.code, sideBySide.stderr).toBe(0);
        expect(sideBySide.stdout).toMatch(/then \(checkpoint 3\)\s+│ now \(replayed\)/);
        expect(sideBySide.stdout).toMatch(/echo: turn 3\s+│ now: turn 3/);
        const nothingNext = await runTroupe(['fork', 'cp-cli', '--at', '3', '--replay', '--nats', suite.nats.url], asClient);
        expect(nothingNext.code).toBe(2);
        expect(nothingNext.stderr).toContain('has no checkpoint 4');
      } finally {
        prefix = 'echo';
      }
    },
    cliTestTimeout(8),
  );
});
