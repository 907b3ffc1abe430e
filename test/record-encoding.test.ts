/**
 * A thread's history and route log are encoded once per element across writes (`ArrayJson`): what the
 * store gets must be exactly what encoding the whole record gives, whatever the thread did to its arrays
 * (appended, pruned from the front, replaced an element, started over after a reload).
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import { startEmbedded } from '../src/team/embedded.js';
import { silentLogger } from '../src/observability/logger.js';
import { defineAgent, reply } from '../src/sdk/agent.js';
import { ArrayJson, decodeRecord, encodeRecord } from '../src/store/codec.js';
import { dormantJson, wakeFromDormant } from '../src/actors/threads/record.js';
import type { Message } from '../src/protocol/index.js';
import type { ThreadRecord } from '../src/store/types.js';
import { pick as pickOf, rng } from './helpers/fuzz.js';

let n = 0;
function message(text: string): Message {
  n++;
  return {
    kind: 'message',
    role: n % 2 ? 'user' : 'agent',
    parts: [{ kind: 'text', text }],
    messageId: `m-${n}`,
    contextId: 'c',
    taskId: 't',
    metadata: { 'troupe/agent': 'echo', n },
  };
}

function recordWith(history: Message[], routes: unknown[]): ThreadRecord {
  return {
    version: 1,
    tenant: 'demo',
    threadId: 't',
    task: {
      kind: 'task',
      id: 't',
      contextId: 'c',
      status: { state: 'input-required', timestamp: '2026-11-27T10:00:00.000Z' },
      history,
      artifacts: [],
      metadata: { 'troupe/owner': 'local', 'troupe/routes': routes, 'troupe/turns': history.length },
    },
    snapshot: { status: 'active', value: 'input-required', context: { threadId: 't', pending: [], 'troupe/slim': true }, children: {} },
    updatedAt: '2026-11-27T10:00:00.000Z',
    node: 'n1',
  };
}

describe('the record encoded with its arrays kept from the last write', () => {
  it('gives the bytes encoding the whole record gives, over 2,000 random steps of 20 threads', () => {
    const texts = ['hello', 'a "quoted" word', 'ünïcödé ✓', 'sea otters 🦦 \ud83e', 'line\nbreak', '', '\u0000 and \u2028', '{"not":"json"}]', ','];
    for (let seed = 1; seed <= 20; seed++) {
      const rnd = rng(seed);
      const pick = <T>(xs: readonly T[]): T => pickOf(rnd, xs);
      let history: Message[] = [];
      let routes: Array<{ from: string; to: string; hop: number; at: number }> = [];
      let encoders = { history: new ArrayJson(), routes: new ArrayJson() };
      for (let step = 0; step < 100; step++) {
        const op = rnd();
        if (op < 0.5) {
          history = [...history, message(pick(texts))].slice(-12);
          routes = [...routes, { from: 'user', to: pick(['a', 'b']), hop: step, at: step }].slice(-7);
        } else if (op < 0.65 && history.length > 0) {
          const i = Math.floor(rnd() * history.length);
          history = history.map((m, j) => (j === i ? message(`${pick(texts)} (replaced)`) : m));
        } else if (op < 0.75) {
          history = history.slice(Math.floor(rnd() * (history.length + 1)));
        } else if (op < 0.8) {
          // Rehydrated from the store: equal objects, none of them the same.
          history = structuredClone(history);
          routes = structuredClone(routes);
        } else if (op < 0.85) {
          encoders = { history: new ArrayJson(), routes: new ArrayJson() };
        } else if (op < 0.9 && history.length > 1) {
          history = [history[1]!, history[0]!, ...history.slice(2)];
        }
        const record = recordWith(encoders.history.encode(history.slice()), encoders.routes.encode(routes));
        const { data } = encodeRecord(record);
        expect(new TextDecoder().decode(data), `seed ${seed}, step ${step}`).toBe(JSON.stringify(record));
        expect(decodeRecord(data, 'demo', 't', 1)).toEqual(record);
      }
    }
  });

  it('leaves out what JSON leaves out, in the objects it walks and below them', () => {
    const record = recordWith(new ArrayJson().encode([message('ok')]), new ArrayJson().encode([{ from: 'user', to: 'a' }]));
    const metadata = record.task.metadata as Record<string, unknown>;
    metadata.gone = undefined;
    metadata.fn = () => 1;
    metadata.hidden = { toJSON: () => undefined };
    metadata.at = new Date('2026-11-27T10:00:00.000Z');
    (record as unknown as Record<string, unknown>).first = undefined;
    (record.snapshot as { context: Record<string, unknown> }).context.nested = { gone: undefined, list: [undefined, 1] };
    expect(new TextDecoder().decode(encodeRecord(record).data)).toBe(JSON.stringify(record));
  });

  it('still refuses what it refused before: an invalid message, a value that cannot be serialized', () => {
    const encoder = new ArrayJson();
    const bad = { ...message('x'), role: 'robot' } as unknown as Message;
    expect(() => encodeRecord(recordWith(encoder.encode([message('ok'), bad]), []))).toThrow(/task\.history\.1/);
    const record = recordWith(new ArrayJson().encode([message('ok')]), []);
    (record.snapshot as { context: Record<string, unknown> }).context.big = 1n;
    expect(() => encodeRecord(record)).toThrow(/not serializable/);
  });
});

describe("a dormant thread's copy keeps its history's encoding", () => {
  const givens = { config: { entryAgent: 'echo' } as never, configJson: '{}', agents: () => ({}) };

  it('read back, the next write encodes only the new messages and gives the bytes encoding the whole record gives', () => {
    const texts = ['hello', 'ünïcödé ✓', 'sea otters 🦦', 'a "quoted"\nline', '\u2028'];
    const history = Array.from({ length: 20 }, (_, i) => message(texts[i % texts.length]!));
    const routes = Array.from({ length: 10 }, (_, i) => ({ from: 'user', to: `agent-${i}`, hop: i, reason: texts[i % texts.length] }));
    const copy = dormantJson(recordWith(history, routes), givens);
    expect(copy.arrays).toBeDefined();
    expect(JSON.parse(copy.json).task.history).toBeUndefined();
    const woken = wakeFromDormant(copy, givens);
    expect(woken.record.task).toEqual(recordWith(history, routes).task);
    const next = [...woken.record.task.history!.slice(2), message('three 🦦'), message('four')];
    const nextRoutes = [...(woken.record.task.metadata!['troupe/routes'] as unknown[]), { from: 'user', to: 'agent-0', hop: 0 }];
    const stringify = vi.spyOn(JSON, 'stringify');
    const encoded = woken.encoded!.history.encode(next);
    const encodedRoutes = woken.encoded!.routes.encode(nextRoutes);
    // The two new messages and the new route, not the 20 and the 11.
    expect(stringify).toHaveBeenCalledTimes(3);
    stringify.mockRestore();
    const record = recordWith(encoded, encodedRoutes);
    expect(new TextDecoder().decode(encodeRecord(record).data)).toBe(JSON.stringify(record));
  });

  it('a short history stays in the JSON; ends that do not match their text encode everything again', () => {
    const short = dormantJson(recordWith([message('one'), message('two')], []), givens);
    expect(short.arrays).toBeUndefined();
    expect(wakeFromDormant(short, givens).encoded).toBeUndefined();
    const history = Array.from({ length: 16 }, (_, i) => message(`m${i}`));
    const copy = dormantJson(recordWith(history, []), givens);
    const woken = wakeFromDormant({ ...copy, arrays: { ...copy.arrays!, historyEnds: copy.arrays!.historyEnds.split(',').slice(1).join(',') } }, givens);
    const stringify = vi.spyOn(JSON, 'stringify');
    const encoded = woken.encoded!.history.encode(woken.record.task.history!);
    expect(stringify).toHaveBeenCalledTimes(16);
    stringify.mockRestore();
    const record = recordWith(encoded, []);
    expect(new TextDecoder().decode(encodeRecord(record).data)).toBe(JSON.stringify(record));
  });
});

describe('a live thread keeps its encoding while it talks, and gives it back at rest', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('kept after its turns and a rest under 10 s; gone at the first sweep 10 s after its last turn; kept again with its next turn', async () => {
    // The host's sweep (every 10 s) and its clock are faked; everything else runs for real.
    vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval', 'Date'] });
    const echo = defineAgent({ card: { id: 'echo', name: 'Echo', description: 'echoes' }, handle: (_m, ctx) => reply(ctx.text, { to: 'user' }) });
    const mesh = await startEmbedded({ name: 'keep', agents: [echo], config: { entryAgent: 'echo' } }, silentLogger());
    try {
      const turn = async () => {
        const res = await mesh.client.send('hello', { threadId: 'kept', recheckMs: 0, resendAfterMs: 0 });
        expect(res.text).toBe('hello');
      };
      const live = () => (mesh.node.threads as unknown as { threads: Map<string, { encoded?: unknown }> }).threads.get('kept');
      // 10 turns: 20 messages, past the 16 from which the history is kept encoded.
      for (let i = 0; i < 10; i++) await turn();
      expect(live()?.encoded).toBeDefined();
      await vi.advanceTimersByTimeAsync(5_000);
      await turn();
      // The sweep at 10 s: its last turn was 5 s ago.
      await vi.advanceTimersByTimeAsync(5_000);
      expect(live()?.encoded).toBeDefined();
      // The sweep at 20 s: 15 s at rest.
      await vi.advanceTimersByTimeAsync(10_000);
      expect(live()).toBeDefined();
      expect(live()?.encoded).toBeUndefined();
      await turn();
      expect(live()?.encoded).toBeDefined();
    } finally {
      await mesh.stop();
    }
  });
});
