/**
 * What a thread record's encoding costs at the history limit (50 messages, 50 route steps), with and without
 * the history and route log kept encoded from one write to the next (`ArrayJson`, src/store/codec.ts): a
 * turn appends two messages and a route step, prunes to the limit and encodes the record (validation
 * included). Ten alternating blocks of 3,000 turns in one process, CPU per turn:
 *
 *   node --conditions=source --import tsx bench/record-encoding.ts
 */
import type { Message } from '../src/protocol/index.js';
import { ArrayJson, encodeRecord } from '../src/store/codec.js';
import type { ThreadRecord } from '../src/store/types.js';
const mk = (i: number): Message => ({
  kind: 'message',
  role: i % 2 ? 'agent' : 'user',
  parts: [{ kind: 'text', text: `echo: hello ${i}` }],
  messageId: crypto.randomUUID(),
  contextId: 'w0',
  taskId: 'w0',
  metadata: { 'https://ranch.woi.dev/extensions/client-routing/v1': { recipient: 'user' }, 'troupe/agent': 'echo' },
});
const route = (i: number) => ({ from: 'user', to: 'echo', hop: 0, reason: 'entry agent echo', at: 1795773079992 + i });
let use = false;
let history: Message[] = [];
let routes: Array<ReturnType<typeof route>> = [];
const enc = { h: new ArrayJson(), r: new ArrayJson() };
function turn(i: number) {
  history = [...history, mk(2 * i), mk(2 * i + 1)].slice(-50);
  routes = [...routes, route(i)].slice(-50);
  const rec: ThreadRecord = {
    version: 1,
    tenant: 'demo',
    threadId: 'w0',
    task: {
      kind: 'task',
      id: 'w0',
      contextId: 'w0',
      status: { state: 'input-required', message: history.at(-1), timestamp: new Date().toISOString() },
      history: use ? enc.h.encode(history) : history,
      artifacts: [],
      metadata: { 'troupe/owner': 'local', 'troupe/routes': use ? enc.r.encode(routes) : routes, 'troupe/turns': i },
    },
    snapshot: {
      status: 'active',
      value: 'input-required',
      historyValue: {},
      context: {
        threadId: 'w0',
        tenant: 'demo',
        owner: 'local',
        contextId: 'w0',
        config: {
          entryAgent: 'echo',
          maxHops: 10,
          historyLimit: 50,
          agentTimeoutMs: 30000,
          retries: 2,
          retryDelayMs: 1000,
          usePolicy: false,
          threshold: 0.7,
          maxAttempts: 3,
          clarifyText: "I'm not sure which of our agents should take this. Could you say a bit more about what you need?",
          orchestration: { strategy: 'parallel', maxParallelAgents: 3 },
          handoffMaxDurationMs: 600000,
        },
        agents: { echo: { supportsClientRouting: true } },
        pending: [],
        now: 1,
        turns: i,
        'troupe/slim': true,
      },
      children: {},
    },
    updatedAt: new Date().toISOString(),
    node: 'n1',
  };
  return encodeRecord(rec).data.byteLength;
}
for (let i = 0; i < 2000; i++) turn(i);
let i = 2000;
const res: Record<string, number[]> = { old: [], new: [] };
for (let round = 0; round < 10; round++)
  for (const mode of ['old', 'new']) {
    use = mode === 'new';
    for (let k = 0; k < 200; k++) turn(i++);
    const N = 3000;
    const t0 = process.cpuUsage();
    for (let k = 0; k < N; k++) turn(i++);
    const c = process.cpuUsage(t0);
    res[mode]!.push((c.user + c.system) / N);
  }
const med = (xs: number[]) => {
  const sorted = xs.slice().sort((a, b) => a - b);
  return sorted[xs.length >> 1]!.toFixed(1);
};
console.log(
  'µs per turn (median of 10 alternating blocks): without',
  med(res.old!),
  'with',
  med(res.new!),
  '; pairs won by with:',
  res.old!.filter((o, k) => res.new![k]! < o).length,
  '/ 10',
);
