/** Handoffs through the real hosts on the embedded mesh: control passes to a specialist and comes back. */
import { afterEach, describe, expect, it } from 'vitest';
import { startEmbedded } from '../src/team/embedded.js';
import { silentLogger } from '../src/observability/logger.js';
import { ThreadEventSchema, decode, messageText, type Message, type ThreadEvent } from '../src/protocol/index.js';
import { CLIENT_ROUTING_URI } from '../src/protocol/routing.js';
import { META } from '../src/protocol/metadata.js';
import type { HandoffRequest, HandoffReturnInput } from '../src/protocol/handoff.js';
import { defineAgent, reply } from '../src/sdk/agent.js';
import type { TeamDefinition } from '../src/team/team.js';
import { subjects } from '../src/transport/subjects.js';
import { handoffTeam } from '../src/bin/demo/handoff-team.js';
import { waitFor } from './helpers/wait.js';

let mesh: Awaited<ReturnType<typeof startEmbedded>> | undefined;
afterEach(async () => {
  await mesh?.stop();
  mesh = undefined;
});

async function start(config = {}, team: TeamDefinition = handoffTeam) {
  mesh = await startEmbedded({ ...team, config: { ...team.config, ...config } }, silentLogger());
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

const finalTexts = (events: ThreadEvent[]) => events.flatMap((e) => (e.kind === 'status-update' && e.final ? [messageText(e.status.message)] : []));
/** What the user saw of a turn, in order: the answers (intermediate and final) with who wrote them. */
const answers = (events: ThreadEvent[]) =>
  events.flatMap((e) =>
    e.kind === 'status-update' && e.status.message ? [`${String(e.status.message.metadata?.[META.agent])}: ${messageText(e.status.message)}`] : [],
  );
const steps = (route: Array<{ from: string; to: string }>) => route.map((s) => `${s.from}>${s.to}`);

describe('handoff on the embedded mesh', () => {
  it('hands off, talks to the specialist directly with streaming for three turns, returns, and the main agent resumes in the same turn', async () => {
    const m = await start();
    const threadId = 'skill-1';
    const events = record(m, threadId);
    const first = await m.client.send('I want to create a skill', { threadId });
    expect(first.text).toContain('Skill builder step 1');
    expect(first.text).toContain('summary: The user said');
    expect(steps(first.route)).toEqual(['user>main', 'main>skills']);
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

    const done = await m.client.send("I'm done", { threadId });
    // One turn: the specialist's last answer, then main's, which answers the message.
    expect(answers(done.events)).toEqual([
      'skills: Skill saved.',
      'main: main: welcome back (completed) — Handoff to skills completed: created a skill in 4 steps',
    ]);
    expect(done.text).toBe('main: welcome back (completed) — Handoff to skills completed: created a skill in 4 steps');
    expect(done.error).toBeUndefined();
    // The route says what happened: the user talked to skills, skills gave control back to main.
    expect(done.route.map((s) => `${s.from}>${s.to}: ${s.reason}`)).toEqual([
      'user>skills: an active handoff holds control',
      'skills>main: handoff completed: created a skill in 4 steps',
    ]);
    // The specialist's chunks streamed before its answer.
    const kinds = done.events.map((e) =>
      e.kind === 'artifact-update' ? 'chunk' : e.status.message ? `answer:${String(e.status.message.metadata?.[META.agent])}` : 'step',
    );
    expect(kinds.indexOf('chunk')).toBeGreaterThan(-1);
    expect(kinds.indexOf('chunk')).toBeLessThan(kinds.indexOf('answer:skills'));
    expect(m.node.threads.inspect(threadId)?.context).toMatchObject({ handoff: undefined });
    expect(m.node.threads.list().actors.find((a) => a.id === `${threadId}/handoff`)).toBeUndefined();
    // The thread's history holds both answers, in order.
    const task = await m.client.task(threadId);
    const tail = (task.history ?? []).slice(-3).map((h) => `${h.role}:${messageText(h).slice(0, 24)}`);
    expect(tail).toEqual(['agent:Skill saved.', 'user:Handoff to skills comple', 'agent:main: welcome back (comp']);

    const after = await m.client.send('thanks', { threadId });
    expect(after.text).toBe('main: thanks');
    expect(steps(after.route)).toEqual(['user>main']);
    expect(events.length).toBeGreaterThan(0);
  });

  it('cancel during an active handoff gives control back to the source', async () => {
    const m = await start();
    const threadId = 'cancel-1';
    const events = record(m, threadId);
    await m.client.send('build a skill', { threadId });
    await m.client.cancel(threadId, 'changed my mind');
    await waitFor(() => finalTexts(events).some((t) => t.includes('welcome back (cancelled)')), 'main to resume after the cancel');
    expect(finalTexts(events).at(-1)).toContain('changed my mind');
    // The user is told, then main answers; its turn's route starts at the specialist, not at the user.
    const notice = events.findIndex(
      (e) => e.kind === 'status-update' && !e.final && messageText(e.status.message) === 'Handoff to skills cancelled; back to main.',
    );
    const resumed = events.findIndex((e) => e.kind === 'status-update' && e.final && messageText(e.status.message).includes('welcome back (cancelled)'));
    expect(notice).toBeGreaterThan(-1);
    expect(notice).toBeLessThan(resumed);
    const final = events[resumed]!;
    const route = final.kind === 'status-update' ? (final.status.message?.metadata?.[META.route] as Array<{ from: string; to: string; reason: string }>) : [];
    expect(route.map((s) => `${s.from}>${s.to}: ${s.reason}`)).toEqual(['skills>main: handoff cancelled: changed my mind']);
    const next = await m.client.send('hello again', { threadId });
    expect(next.text).toBe('main: hello again');
  });

  it('a specialist that fails ends the handoff in error and the source answers in the same turn', async () => {
    const m = await start();
    const threadId = 'crash-1';
    const first = await m.client.send('please crash', { threadId });
    expect(first.text).toBe('crashy: I am on it');
    const failed = await m.client.send('go on', { threadId });
    // The failure reaches the user as it happens, then main answers the message.
    const failure = failed.events.find((e) => e.kind === 'status-update' && !e.final && e.metadata?.[META.error]);
    expect(failure?.metadata?.[META.error]).toMatchObject({ code: 'AGENT_ERROR', message: 'agent "crashy" failed: crashy fell over' });
    expect(failed.text).toBe('main: welcome back (failed) — Handoff to crashy failed: AGENT_ERROR: agent "crashy" failed: crashy fell over');
    expect(failed.error).toBeUndefined();
    expect(steps(failed.route)).toEqual(['user>crashy', 'crashy>main']);
    const next = await m.client.send('are you there?', { threadId });
    expect(next.text).toBe('main: are you there?');
  });

  it('a handoff past its deadline ends in error and control returns', async () => {
    const m = await start({ handoffMaxDurationMs: 300 });
    const threadId = 'slow-1';
    const events = record(m, threadId);
    await m.client.send('slow please', { threadId });
    await waitFor(() => finalTexts(events).some((t) => t.includes('welcome back (failed)')), 'the resume after the deadline', 3_000);
    expect(finalTexts(events).at(-1)).toContain('AGENT_TIMEOUT');
    expect(answers(events).slice(-2)).toEqual([
      'troupe: Handoff to sloth failed; back to main.',
      'main: main: welcome back (failed) — Handoff to sloth failed: AGENT_TIMEOUT: the handoff to "sloth" did not finish within 300 ms',
    ]);
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

/**
 * A team to check what the agents receive: `desk` hands off (returnExpected as asked), `expert` returns
 * as told by the user's text, and both keep every message they got.
 */
function recordingTeam() {
  const seen = new Map<string, Message[]>();
  const requests: HandoffRequest[] = [];
  const keep = (id: string, m: Message) => seen.set(id, [...(seen.get(id) ?? []), m]);
  const desk = defineAgent({
    card: { id: 'desk', name: 'Desk', description: 'Hands over to the expert' },
    handle: (message, ctx) => {
      keep('desk', message);
      if (message.metadata?.[META.handoffResume]) return reply(`desk resumes: ${ctx.text}`, { to: 'user' });
      if (ctx.text.includes('expert')) {
        return reply('desk: one moment', {
          handoff: { targetAgentId: 'expert', contextSummary: 'needs the expert', handoffReason: 'expertise', returnExpected: !ctx.text.includes('for good') },
        });
      }
      return reply(`desk: ${ctx.text}`, { to: 'user' });
    },
  });
  const expert = defineAgent({
    card: { id: 'expert', name: 'Expert', description: 'Knows things' },
    handle: (message, ctx) => {
      keep('expert', message);
      if (ctx.handoff) requests.push(ctx.handoff);
      const ret = (r: HandoffReturnInput, text: string) => reply(text, { handoffReturn: r });
      if (ctx.text.includes('fail at once')) return ret({ completionStatus: 'error', resultSummary: 'the expert could not help' }, 'expert: sorry, no');
      if (ctx.text.includes('done'))
        return ret({ completionStatus: 'completed', resultSummary: 'made two files', artifactsCreated: ['a.txt', 'b.txt'] }, 'expert: all done');
      return reply(`expert: ${ctx.text}`);
    },
  });
  const team: TeamDefinition = { name: 'recording', agents: [desk, expert], config: { entryAgent: 'desk', retries: 0, agentTimeoutMs: 2_000 } };
  return { team, seen, requests };
}

const handoffReturnOf = (m: Message | undefined) => (m?.metadata?.[CLIENT_ROUTING_URI] as { handoffReturn?: unknown } | undefined)?.handoffReturn;

describe('handoff correctness on the embedded mesh', () => {
  it('artifactsCreated and the summary reach the source in the resume message', async () => {
    const { team, seen } = recordingTeam();
    const m = await start({}, team);
    const threadId = 'artifacts-1';
    await m.client.send('I need the expert', { threadId });
    const done = await m.client.send('done now', { threadId });
    expect(done.text).toBe('desk resumes: Handoff to expert completed: made two files');
    const resume = seen.get('desk')!.at(-1)!;
    expect(handoffReturnOf(resume)).toEqual({ completionStatus: 'completed', resultSummary: 'made two files', artifactsCreated: ['a.txt', 'b.txt'] });
    expect(resume.metadata?.[META.handoffResume]).toEqual({ sourceAgentId: 'desk', targetAgentId: 'expert', status: 'completed' });
  });

  it('a target whose first reply returns with completionStatus error is reported as failed, not completed', async () => {
    const { team, seen } = recordingTeam();
    const m = await start({}, team);
    const r = await m.client.send('expert please, fail at once', { threadId: 'first-error-1' });
    expect(answers(r.events)).toEqual(['expert: expert: sorry, no', 'desk: desk resumes: Handoff to expert failed: the expert could not help']);
    expect(steps(r.route)).toEqual(['user>desk', 'desk>expert', 'expert>desk']);
    expect(r.route.at(-1)?.reason).toBe('handoff failed: the expert could not help');
    const resume = seen.get('desk')!.at(-1)!;
    expect(handoffReturnOf(resume)).toEqual({ completionStatus: 'error', resultSummary: 'the expert could not help', artifactsCreated: [] });
    expect(resume.metadata?.[META.handoffResume]).toMatchObject({ status: 'failed' });
  });

  it('returnExpected: false — the source is not called again when the target returns; the next message is routed as usual', async () => {
    const { team, seen } = recordingTeam();
    const m = await start({}, team);
    const threadId = 'for-good-1';
    const first = await m.client.send('expert, take this for good', { threadId });
    expect(first.text).toBe('expert: expert, take this for good');
    const done = await m.client.send('done here', { threadId });
    expect(done.text).toBe('expert: all done');
    expect(steps(done.route)).toEqual(['user>expert']);
    expect(seen.get('desk')!.every((msg) => msg.metadata?.[META.handoffResume] === undefined)).toBe(true);
    expect(seen.get('desk')).toHaveLength(1);
    expect(m.node.threads.inspect(threadId)?.context).toMatchObject({ handoff: undefined });
    const next = await m.client.send('hello?', { threadId });
    expect(next.text).toBe('desk: hello?');
  });

  it('the handoff request carries the real user id of the thread', async () => {
    const { team, requests } = recordingTeam();
    const m = await start({}, team);
    await m.client.send('expert please', { threadId: 'user-1', user: 'ada' });
    expect(requests[0]).toMatchObject({ userId: 'ada', sourceAgentId: 'desk', targetAgentId: 'expert', threadId: 'user-1', tenantId: 'demo' });
  });
});
