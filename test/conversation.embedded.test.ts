/**
 * A TypeScript agent's view of its thread's conversation (`ctx.history`, `ctx.memory`) on the in-process
 * mesh: the earlier messages, oldest first, with its own answers and the user's, as many as its card asks
 * for; none for a card that asks for none; and the summary it sent back in `troupe/memory` the next time.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { silentLogger } from '../src/observability/logger.js';
import { META, type MemorySummary, type Message } from '../src/protocol/index.js';
import { defineAgent, reply } from '../src/sdk/agent.js';
import { startEmbedded } from '../src/team/embedded.js';
import { conversationFor } from '../src/machines/thread/memory.js';

const seen: Array<{ agent: string; history: readonly Message[] | undefined; memory: MemorySummary | undefined }> = [];
const textOf = (m: Message) => m.parts.map((p) => (p.kind === 'text' ? p.text : '')).join('');

const recaller = defineAgent({
  card: { id: 'recaller', name: 'Recaller', description: 'Counts what came before', history: { maxMessages: 3 } },
  handle: (message, ctx) => {
    seen.push({ agent: 'recaller', history: ctx.history, memory: ctx.memory });
    // With two earlier messages or more, it folds them into a summary (as a YAML agent over its budget does).
    const last = ctx.history?.at(-1);
    const summary: MemorySummary | undefined =
      last && ctx.history!.length >= 2 ? { text: `up to ${message.messageId}`, through: last.messageId, messages: ctx.history!.length } : undefined;
    return reply(`heard ${ctx.text}; ${ctx.history?.length ?? 0} before`, { to: 'user', ...(summary ? { metadata: { [META.memory]: summary } } : {}) });
  },
});
const forgetful = defineAgent({
  card: { id: 'forgetful', name: 'Forgetful', description: 'Takes no history', history: false },
  handle: (_message, ctx) => {
    seen.push({ agent: 'forgetful', history: ctx.history, memory: ctx.memory });
    return reply('ok', { to: 'user' });
  },
});

describe("a TS agent's ctx.history", () => {
  let mesh: Awaited<ReturnType<typeof startEmbedded>>;
  beforeAll(async () => {
    mesh = await startEmbedded({ name: 'history', agents: [recaller, forgetful], config: { entryAgent: 'recaller' } }, silentLogger());
  });
  afterAll(async () => {
    await mesh?.stop();
  });

  it('gets the earlier messages (its own answers included, the message it answers left out) and the summary it sent back', async () => {
    await mesh.client.send('one', { threadId: 'h1' });
    await mesh.client.send('two', { threadId: 'h1' });
    const third = await mesh.client.send('three', { threadId: 'h1' });
    expect(third.text).toBe('heard three; 2 before');
    const [first, second, last] = seen.filter((s) => s.agent === 'recaller');
    expect(first!.history).toEqual([]);
    expect(first!.memory).toBeUndefined();
    expect(second!.history!.map((m) => [m.role, textOf(m), m.metadata?.[META.agent]])).toEqual([
      ['user', 'one', undefined],
      ['agent', 'heard one; 0 before', 'recaller'],
    ]);
    // The summary it sent with its second answer came back, and the history starts after what it covers.
    expect(last!.memory).toMatchObject({ text: expect.stringMatching(/^up to /), messages: 2 });
    expect(last!.history!.map(textOf)).toEqual(['two', 'heard two; 2 before']);
    // Its summaries stay with the thread: the user's answers carry none.
    expect(third.final.status.message?.metadata?.[META.memory]).toBeUndefined();
  });

  it('gets none when its card asks for none', async () => {
    await mesh.client.send('hello', { threadId: 'h2', to: 'forgetful' });
    await mesh.client.send('again', { threadId: 'h2', to: 'forgetful' });
    expect(seen.filter((s) => s.agent === 'forgetful').map((s) => s.history)).toEqual([undefined, undefined]);
  });
});

describe('what the thread sends (conversationFor)', () => {
  const msg = (id: string, role: 'user' | 'agent' = 'user'): Message => ({ kind: 'message', role, messageId: id, parts: [{ kind: 'text', text: id }] });
  const history = [msg('u1'), msg('a1', 'agent'), msg('u2'), msg('a2', 'agent'), msg('u3')];

  it('the newest maxMessages before the message sent, without it or the answer it was forwarded from', () => {
    expect(conversationFor({ history }, 'x', msg('u3'), 3).history.map((m) => m.messageId)).toEqual(['a1', 'u2', 'a2']);
    expect(conversationFor({ history }, 'b', msg('a2>b'), 10).history.map((m) => m.messageId)).toEqual(['u1', 'a1', 'u2', 'u3']);
    expect(conversationFor({ history }, 'x', msg('u3'), 0).history).toEqual([]);
  });

  it('only what comes after the summary the agent wrote, with the summary', () => {
    const memory = { x: { text: 'earlier', through: 'a1' } };
    const out = conversationFor({ history, memory }, 'x', msg('u3'), 10);
    expect(out.history.map((m) => m.messageId)).toEqual(['u2', 'a2']);
    expect(out.memory).toEqual({ text: 'earlier', through: 'a1' });
    // Another agent's summary is not this one's.
    expect(conversationFor({ history, memory }, 'y', msg('u3'), 10).memory).toBeUndefined();
  });
});
