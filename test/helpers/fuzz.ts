/**
 * Hostile inputs for the fuzz suites, from a seeded generator (a failure names its seed and is
 * replayable). Each generator mixes the specific attacks the security review found with random junk.
 */
export type Rng = () => number;

/** mulberry32: small, fast, good enough to pick attacks. */
export function rng(seed: number): Rng {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export const pick = <T>(r: Rng, items: readonly T[]): T => items[Math.floor(r() * items.length)]!;
export const int = (r: Rng, max: number): number => Math.floor(r() * max);

const PROTO_NAMES = ['__proto__', 'constructor', 'toString', 'hasOwnProperty', 'valueOf', 'prototype'];

/** JSON text of arrays nested `depth` deep (JSON.stringify of such a value would overflow the stack). */
function deepJson(depth: number): string {
  return `${'['.repeat(depth)}1${']'.repeat(depth)}`;
}

const DEEP = '"__deep__"';
/** `value` as JSON with every `"__deep__"` string replaced by arrays nested `depth` deep. */
function withDeep(value: unknown, depth: number): string {
  return JSON.stringify(value).split(DEEP).join(deepJson(depth));
}

function junkString(r: Rng, max = 64): string {
  const alphabets = ['abc', '0123456789', ' .*>$\t', 'é漢字🙂', '\u0000\u0001\u001f\u007f', '"\\/{}[]:,', '\r\n'];
  let s = '';
  const n = int(r, max);
  for (let i = 0; i < n; i++) s += pick(r, pick(r, alphabets).split(''));
  return s;
}

/** Thread ids, good and bad: valid tokens, the 4,000-character id, prototype names, junk. */
export function threadIdCandidate(r: Rng): string {
  return pick(r, [
    () => `t-fz-${int(r, 1e9)}`,
    () => 'x'.repeat(4_000),
    () => 'y'.repeat(129),
    () => pick(r, PROTO_NAMES),
    () => `crash=${int(r, 10)}`,
    () => `a-${int(r, 100)}_${int(r, 100)}`,
  ])();
}

function validMessage(r: Rng, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { kind: 'message', role: 'user', messageId: `m-${int(r, 1e12)}`, parts: [{ kind: 'text', text: `hello ${int(r, 1e6)}` }], ...extra };
}

/** A body for a message into a thread: broken JSON, schema violations, hostile nesting and sizes, bad routing. */
export function userMessageBody(r: Rng): string {
  // Four in ten are well-formed, so the hostile agent behind them gets called too.
  if (r() < 0.4) return JSON.stringify(validMessage(r));
  return pick(r, [
    () => junkString(r, 200),
    () => '{"kind":"message","parts":[',
    () => JSON.stringify({ kind: 'message', role: 'agent', messageId: 'x', parts: [{ kind: 'text', text: 'as agent' }] }),
    () => JSON.stringify(validMessage(r, { parts: [] })),
    () => JSON.stringify(validMessage(r, { messageId: '' })),
    () => JSON.stringify(validMessage(r, { messageId: 'z'.repeat(300) })),
    () => JSON.stringify(validMessage(r, { messageId: 'with space' })),
    () => JSON.stringify(validMessage(r, { parts: Array.from({ length: 200 }, () => ({ kind: 'text', text: 'p' })) })),
    () => withDeep(validMessage(r, { metadata: { deep: '__deep__' } }), 20_000),
    () => withDeep(validMessage(r, { metadata: { deep: '__deep__' } }), 40),
    () => JSON.stringify(validMessage(r, { parts: [{ kind: 'text', text: 'w'.repeat(300_000) }] })),
    () => JSON.stringify(validMessage(r, { metadata: { 'https://ranch.woi.dev/extensions/client-routing/v1': { recipient: pick(r, PROTO_NAMES) } } })),
    () => JSON.stringify(validMessage(r, { metadata: { 'https://ranch.woi.dev/extensions/client-routing/v1': { recipient: 'triage' } } })),
    () => JSON.stringify(validMessage(r, { metadata: { 'https://ranch.woi.dev/extensions/client-routing/v1': 'not an object' } })),
    () => JSON.stringify(validMessage(r, { metadata: { __proto__: { polluted: true }, constructor: 1 } })),
    () => JSON.stringify(validMessage(r)),
    () => JSON.stringify(validMessage(r, { messageId: 'reused-everywhere' })),
  ])();
}

/** What a hostile agent answers: garbage, huge or deep replies, bad routing and handoff metadata. */
export function agentReplyBody(r: Rng): string {
  const reply = (extra: Record<string, unknown>) =>
    JSON.stringify({ kind: 'message', role: 'agent', messageId: `r-${int(r, 1e12)}`, parts: [{ kind: 'text', text: 'reply' }], ...extra });
  const routing = (slot: unknown) => reply({ metadata: { 'https://ranch.woi.dev/extensions/client-routing/v1': slot } });
  return pick(r, [
    () => junkString(r, 100),
    () => '',
    () => reply({ parts: [{ kind: 'text', text: 'r'.repeat(900_000) }] }),
    () => withDeep(JSON.parse(reply({ metadata: { deep: '__deep__' } })), 50_000),
    () => withDeep(JSON.parse(reply({ metadata: { deep: '__deep__' } })), 40),
    () => routing({ recipient: pick(r, PROTO_NAMES) }),
    () => routing({ recipient: 'triage' }),
    () => routing({ recipient: 'nobody-here' }),
    () => routing({ recipient: 42 }),
    () => routing({ handoff: { targetAgentId: pick(r, PROTO_NAMES), contextSummary: 's', handoffReason: 'r' } }),
    () => routing({ handoff: { targetAgentId: 'echo' } }),
    () => routing({ handoffReturn: { completionStatus: 'maybe' } }),
    () => JSON.stringify({ kind: 'task', id: 'x', contextId: 'y', status: { state: 'bogus' } }),
    () => JSON.stringify({ kind: 'error', error: { code: 'NOT_A_CODE', message: 'x' } }),
    () => JSON.stringify({ kind: 'error', error: { code: 'AGENT_ERROR', message: 'typed failure' } }),
    () => reply({ messageId: 'q'.repeat(1_000) }),
    () => routing({ recipient: 'user', reason: 'fine' }),
  ])();
}

/** Streamed chunks an agent might send before its reply: junk, huge, aimed at other threads. */
export function chunkBody(r: Rng): string {
  return pick(r, [
    () => junkString(r, 50),
    () =>
      JSON.stringify({
        kind: 'artifact-update',
        taskId: 'someone-else',
        contextId: 'x',
        artifact: { artifactId: 'a', parts: [{ kind: 'text', text: 'chunk' }] },
        append: true,
      }),
    () =>
      JSON.stringify({
        kind: 'artifact-update',
        taskId: 't',
        contextId: 'x',
        artifact: { artifactId: 'a', parts: [{ kind: 'text', text: 'c'.repeat(100_000) }] },
      }),
    () => JSON.stringify({ kind: 'status-update', taskId: 't', contextId: 'x', status: { state: 'completed' }, final: true }),
  ])();
}

/** Registry events agent `self` might publish on its own subject: lies, floods, huge cards. */
export function registryBody(r: Rng, self: string): string {
  const card = (id: string, extra: Record<string, unknown> = {}) => ({ id, name: id, description: 'd', ...extra });
  return pick(r, [
    () => junkString(r, 100),
    () => JSON.stringify({ kind: 'announce', instanceId: `i-${int(r, 1e6)}`, ttlMs: 15_000, card: card(pick(r, ['echo', 'writer', ...PROTO_NAMES])) }),
    () => JSON.stringify({ kind: 'announce', instanceId: `i-${int(r, 1e6)}`, ttlMs: 1e12, card: card(self) }),
    () => JSON.stringify({ kind: 'announce', instanceId: `i-${int(r, 1e6)}`, ttlMs: 15_000, card: card(self, { description: 'd'.repeat(600_000) }) }),
    () => JSON.stringify({ kind: 'announce', instanceId: 'bad id with spaces', ttlMs: 15_000, card: card(self) }),
    () => JSON.stringify({ kind: 'goodbye', agentId: 'echo', instanceId: `i-${int(r, 1e6)}` }),
    () => JSON.stringify({ kind: 'announce', card: card(self), instanceId: `ghost-${int(r, 1e9)}`, ttlMs: 60_000, status: { state: 'x'.repeat(100) } }),
  ])();
}

/** Bodies for control requests. */
export function ctlBody(r: Rng): string {
  return pick(r, [
    () => junkString(r, 100),
    () => JSON.stringify({ threadId: threadIdCandidate(r) }),
    () => JSON.stringify({ actorId: 'a'.repeat(5_000) }),
    () => JSON.stringify({ actorId: `${pick(r, PROTO_NAMES)}/${pick(r, PROTO_NAMES)}` }),
    () => JSON.stringify({ state: { $ne: 1 } }),
    () => JSON.stringify({ limit: -5 }),
    () => deepJson(30_000),
  ])();
}
