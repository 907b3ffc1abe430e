/** Handoffs through the real hosts on the embedded mesh: control passes to a specialist and comes back. */
import { afterEach, describe, expect, it } from 'vitest';
import { startEmbedded } from '../src/actors/embedded.js';
import { silentLogger } from '../src/observability/logger.js';
import { ThreadEventSchema, decode, type ThreadEvent } from '../src/protocol/index.js';
import { subjects } from '../src/transport/subjects.js';
import { handoffTeam } from '../src/bin/demo/handoff-team.js';
import { waitFor } from './helpers/wait.js';

let mesh: Awaited<ReturnType<typeof startEmbedded>> | undefined;
afterEach(async () => {
  await mesh?.stop();
  mesh = undefined;
});

async function start(config = {}) {
  mesh = await startEmbedded({ ...handoffTeam, config: { ...handoffTeam.config, ...config } }, silentLogger());
  return mesh;
}

/** Every event published on a thread's output, for assertions on what the user saw. */
function record(m: NonNullable<typeof mesh>, threadId: string): ThreadEvent[] {
  const events: ThreadEvent[] = [];
  m.client.transport.subscribe(subjects.threadOut('demo', 'local', threadId), (msg) => {
    events.push(decode(ThreadEventSchema, msg.data, 'event'));
  });
  return events;
}

const finalTexts = (events: ThreadEvent[]) =>
  events.flatMap((e) => (e.kind === 'status-update' && e.final ? [e.status.message?.parts.map((p) => (p.kind === 'text' ? p.text : '')).join('') ?? ''] : []));

describe('handoff on the embedded mesh', () => {
  it('hands off, talks to the specialist directly with streaming for three turns, returns, and the main agent resumes', async () => {
    const m = await start();
    const threadId = 'skill-1';
    const events = record(m, threadId);
    const first = await m.client.send('I want to create a skill', { threadId });
    expect(first.text).toContain('Skill builder step 1');
    expect(first.text).toContain('summary: The user said');
    expect(first.route.map((s) => `${s.from}>${s.to}`)).toEqual(['user>main', 'main>skills']);
    const ps = m.node.threads.list().actors;
    expect(ps.find((a) => a.id === `${threadId}/handoff`)?.state).toBe('active');

    for (const n of [2, 3, 4]) {
      const r = await m.client.send(`step ${n} details`, { threadId });
      expect(r.text).toContain(`Skill builder step ${n}`);
      // Every message to the specialist carries the context summary and the recent messages (at most
      // recentMessageCount = 5): before step 2 the thread holds 3 earlier messages, later at least 5.
      expect(r.text).toContain('summary: The user said: I want to create a skill');
      expect(r.text).toContain(`[recent: ${n === 2 ? 3 : 5}]`);
      expect(r.route.map((s) => s.to)).toEqual(['skills']); // straight to the specialist
    }
    // Chunks of the specialist reached the thread's output before each final answer.
    const chunkIdx = events.findIndex((e) => e.kind === 'artifact-update');
    expect(chunkIdx).toBeGreaterThan(-1);

    const done = await m.client.send("I'm done", { threadId });
    expect(done.text).toBe('Skill saved.');
    await waitFor(() => finalTexts(events).some((t) => t.startsWith('main: welcome back')), 'main to resume');
    const resumed = finalTexts(events).find((t) => t.startsWith('main: welcome back'))!;
    expect(resumed).toContain('(completed)');
    expect(resumed).toContain('created a skill in 4 steps');
    expect(m.node.threads.inspect(threadId)?.context).toMatchObject({ handoff: undefined });
    const after = await m.client.send('thanks', { threadId });
    expect(after.text).toBe('main: thanks');
  });

  it('cancel during an active handoff gives control back to the source', async () => {
    const m = await start();
    const threadId = 'cancel-1';
    const events = record(m, threadId);
    await m.client.send('build a skill', { threadId });
    await m.client.cancel(threadId, 'changed my mind');
    await waitFor(() => finalTexts(events).some((t) => t.includes('welcome back (cancelled)')), 'main to resume after the cancel');
    expect(finalTexts(events).at(-1)).toContain('changed my mind');
    const next = await m.client.send('hello again', { threadId });
    expect(next.text).toBe('main: hello again');
  });

  it('a specialist that fails ends the handoff in error and the source resumes with a clear message', async () => {
    const m = await start();
    const threadId = 'crash-1';
    const events = record(m, threadId);
    const first = await m.client.send('please crash', { threadId });
    expect(first.text).toBe('crashy: I am on it');
    const failed = await m.client.send('go on', { threadId });
    expect(failed.error?.code).toBe('AGENT_ERROR');
    await waitFor(() => finalTexts(events).some((t) => t.includes('welcome back (failed)')), 'main to resume after the failure');
    expect(finalTexts(events).at(-1)).toContain('crashy fell over');
  });

  it('a handoff past its deadline ends in error and control returns', async () => {
    const m = await start({ handoffMaxDurationMs: 300 });
    const threadId = 'slow-1';
    const events = record(m, threadId);
    await m.client.send('slow please', { threadId });
    await waitFor(() => finalTexts(events).some((t) => t.includes('welcome back (failed)')), 'the resume after the deadline', 3_000);
    expect(finalTexts(events).at(-1)).toContain('AGENT_TIMEOUT');
  });

  it('a second handoff while one is active is refused with HANDOFF_CONFLICT and the first stays active', async () => {
    const m = await start();
    const threadId = 'conflict-1';
    await m.client.send('make a skill', { threadId });
    const r = await m.client.send('nested handoff please', { threadId });
    expect(r.error?.code).toBe('HANDOFF_CONFLICT');
    expect(m.node.threads.list().actors.find((a) => a.id === `${threadId}/handoff`)?.state).toBe('active');
    const next = await m.client.send('still with you?', { threadId });
    expect(next.text).toContain('Skill builder step');
  });

  it('a declined handoff keeps control with the source and tells the user', async () => {
    const m = await start();
    const r = await m.client.send('decline me', { threadId: 'decline-1' });
    expect(r.text).toContain('picky did not take over (too busy)');
    const next = await m.client.send('ok then', { threadId: 'decline-1' });
    expect(next.text).toBe('main: ok then');
  });
});
