/**
 * Gateway fuzz (issue 7): thousands of generated hostile HTTP requests against `troupe gateway` running as
 * its own process on a real nats-server (durable node, demo agents), while a control conversation runs
 * through the same gateway the whole time. It holds when: the gateway process never exits, every bad
 * request gets a typed answer (a JSON-RPC error object, a REST error body, or a 4xx from the HTTP layer;
 * never a 5xx, never a success), and every turn of the control conversation succeeds. Counts are printed.
 *
 * Inputs: bad JSON, deep nesting, bodies over the cap, Object.prototype method names, odd paths (`//`,
 * dot segments, NUL, over-long), bad task/message/context ids, bad params, header abuse (content types,
 * version headers, authorization forms, oversized and malformed headers over a raw socket). Seeded, so a
 * failure names a case that can be replayed.
 */
import { connect as netConnect } from 'node:net';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { TaskState } from '@a2a-js/sdk';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AgentHost } from '../src/actors/agent-host.js';
import { TroupeNode } from '../src/actors/node.js';
import demoTeam from '../src/bin/demo/team.js';
import { KvThreadStore } from '../src/store/kv.js';
import { NatsTransport } from '../src/transport/nats.js';
import { startNatsServer, type NatsServerHandle } from './helpers/nats-server.js';
import { ProcessGroup, type ManagedProcess } from './helpers/processes.js';
import { waitUntil } from './helpers/wait.js';
import { send, textOf, userText, v03Client, v03Text, v1Client } from './helpers/a2a.js';

const TOKEN = 'fuzz-token-0123456789abcdef';
const REQUESTS = 2_400;
const CONCURRENCY = 12;

let nats: NatsServerHandle;
let node: TroupeNode;
let store: KvThreadStore;
let gatewayProc: ManagedProcess;
let url: string;
const hosts: AgentHost[] = [];
const transports: NatsTransport[] = [];
const group = new ProcessGroup();
const dir = mkdtempSync(join(tmpdir(), 'troupe-gateway-fuzz-'));

beforeAll(async () => {
  nats = await startNatsServer();
  const nodeT = await NatsTransport.connect({ ...nats.as('node'), name: 'fuzz-node' });
  transports.push(nodeT);
  store = await KvThreadStore.open(nodeT.connection);
  node = await new TroupeNode({
    transport: nodeT,
    store,
    durable: { nc: nodeT.connection, partitions: 8 },
    ...(demoTeam.config ? { config: demoTeam.config } : {}),
  }).start();
  for (const agent of demoTeam.agents) {
    const t = await NatsTransport.connect({ ...nats.as(agent.card.id), name: `fuzz-${agent.card.id}` });
    transports.push(t);
    hosts.push(await new AgentHost({ transport: t, agent }).start());
  }
  await node.registry.waitFor(demoTeam.agents.map((a) => a.card.id));
  await waitUntil(() => ((node.ps().actors[0]?.detail?.['partitions'] as number[] | undefined) ?? []).length === 8, 'the node to own every partition');
  const tokens = join(dir, 'tokens.json');
  writeFileSync(tokens, JSON.stringify({ [TOKEN]: { tenant: 'demo', user: 'fuzzer' } }));
  gatewayProc = await group.spawnTroupe(
    ['gateway', '--nats', nats.url, '--port', '0', '--tokens', tokens, '--turn-timeout', '15000', '--log-level', 'error'],
    { TROUPE_NATS_CREDS: nats.credsFile('gateway') },
    { ready: /gateway listening on http:\/\/\S+/ },
  );
  url = /gateway listening on (http:\/\/\S+)/.exec(gatewayProc.stderr)![1]!;
}, 60_000);

afterAll(async () => {
  await group.stopAll();
  await node?.stop();
  await Promise.all(hosts.map((h) => h.stop()));
  await store?.close();
  await Promise.all(transports.map((t) => t.close().catch(() => undefined)));
  await nats?.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** mulberry32: a small seeded PRNG, so every run sends the same requests. */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

interface Case {
  kind: string;
  method?: string;
  path: string;
  headers?: Record<string, string>;
  body?: string | Buffer;
  /** Bytes to write on a raw socket instead of using fetch (malformed HTTP). */
  raw?: string;
}

const PROTO_NAMES = [
  'constructor',
  '__proto__',
  'toString',
  'valueOf',
  'hasOwnProperty',
  'isPrototypeOf',
  'propertyIsEnumerable',
  '__defineGetter__',
  '__lookupSetter__',
  'toLocaleString',
];
const BAD_IDS: unknown[] = [
  '',
  ' ',
  'a.b',
  '*',
  '>',
  'a b',
  'x'.repeat(5_000),
  '../etc',
  'crash=1',
  'ü',
  '\u0000',
  42,
  -1,
  1e308,
  null,
  true,
  [],
  {},
  { id: 'x' },
  ['t-1'],
];
/** Ids a message may not name a task by ('' and null mean "no task": a new one, which is fine). */
const BAD_TASK_REFS = BAD_IDS.filter((id) => id !== '' && id !== null);
/** Message ids are client-chosen printable text (`a.b` and `*` are fine); these are not. */
const BAD_MESSAGE_IDS: unknown[] = ['', ' ', 'a b', 'x'.repeat(300), '\u0000', 'ü', 'tab\there', 42, null, true, [], {}];
const ODD_PATHS = [
  '//',
  '///',
  '//rest',
  '/rest//tasks/x',
  '/%00',
  '/..%2f..%2fetc/passwd',
  '/rest/tasks/%2e%2e',
  '/rest/tasks/a.b',
  '/rest/tasks/%00',
  `/${'a'.repeat(9_000)}`,
  '/.well-known/../x',
  '/\u00e9',
  '/rest/v1/tasks/a*b',
  '/rest/message:explode',
  '/diagnostics/ready',
  '/?a=1&a=2&a=3',
];
const METHODS_V03 = [
  'message/send',
  'message/stream',
  'tasks/get',
  'tasks/cancel',
  'tasks/resubscribe',
  'tasks/pushNotificationConfig/set',
  'tasks/pushNotificationConfig/get',
  'tasks/pushNotificationConfig/list',
  'tasks/pushNotificationConfig/delete',
];
const METHODS_V1 = [
  'SendMessage',
  'SendStreamingMessage',
  'GetTask',
  'CancelTask',
  'SubscribeToTask',
  'CreateTaskPushNotificationConfig',
  'GetTaskPushNotificationConfig',
  'ListTaskPushNotificationConfigs',
  'DeleteTaskPushNotificationConfig',
  'ListTasks',
];

function deep(depth: number, open: string, close: string, inner = '1'): string {
  return `${open.repeat(depth)}${inner}${close.repeat(depth)}`;
}

function generate(rand: () => number, n: number): Case[] {
  const pick = <T>(items: readonly T[]): T => items[Math.floor(rand() * items.length)]!;
  const json = { 'content-type': 'application/json' };
  const rpcBody = (method: unknown, params: unknown, id: unknown = Math.floor(rand() * 1e6)) => JSON.stringify({ jsonrpc: '2.0', id, method, params });
  const v1 = { ...json, 'a2a-version': '1.0' };
  const message = (over: Record<string, unknown>) => ({
    kind: 'message',
    role: 'user',
    messageId: `m-${Math.floor(rand() * 1e9)}`,
    parts: [{ kind: 'text', text: 'hi' }],
    ...over,
  });
  const generators: Array<() => Case> = [
    // Bad JSON.
    () => ({
      kind: 'bad-json',
      path: '/',
      headers: json,
      body: pick([
        '{',
        '{"jsonrpc":',
        '[1,2',
        'nul',
        '"unterminated',
        '{"a":1}}',
        '\u0000\u0001',
        '{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"id":"x"}',
        '\ufeff{}',
        ',',
      ]),
    }),
    () => ({
      kind: 'bad-json',
      path: '/',
      headers: json,
      body: Buffer.from(Array.from({ length: 64 + Math.floor(rand() * 512) }, () => Math.floor(rand() * 256))),
    }),
    () => ({ kind: 'bad-json', path: '/rest/message:send', headers: { ...json, 'a2a-version': '1.0' }, body: pick(['{', '[[[', 'not json']) }),
    // Not a request.
    () => ({
      kind: 'not-a-request',
      path: '/',
      headers: json,
      body: pick([
        'null',
        '1',
        '"x"',
        '[]',
        '[{"jsonrpc":"2.0","id":1,"method":"tasks/get"}]',
        '{}',
        '{"jsonrpc":"1.0","id":1,"method":"tasks/get","params":{}}',
        '{"jsonrpc":"2.0","id":{},"method":"tasks/get","params":{}}',
        '{"jsonrpc":"2.0","id":1,"method":7}',
      ]),
    }),
    // Deep nesting.
    () => ({ kind: 'deep', path: '/', headers: json, body: deep(100 + Math.floor(rand() * 50_000), '[', ']') }),
    () => ({
      kind: 'deep',
      path: '/',
      headers: json,
      body: rpcBody('message/send', { message: message({ metadata: JSON.parse(deep(40 + Math.floor(rand() * 200), '{"a":', '}')) as unknown }) }),
    }),
    // Huge bodies.
    () => ({
      kind: 'huge',
      path: '/',
      headers: json,
      body: rpcBody('message/send', { message: message({ parts: [{ kind: 'text', text: 'x'.repeat(1024 * 1024 + Math.floor(rand() * 4096)) }] }) }),
    }),
    () => ({
      kind: 'huge',
      path: '/rest/message:send',
      headers: v1,
      body: JSON.stringify({ message: { messageId: 'h', role: 'ROLE_USER', parts: [{ text: 'y'.repeat(1024 * 1024 + 10) }] } }),
    }),
    // Object.prototype names as methods.
    () => ({ kind: 'proto-method', path: '/', headers: rand() < 0.5 ? json : v1, body: rpcBody(pick(PROTO_NAMES), {}) }),
    () => ({
      kind: 'unknown-method',
      path: '/',
      headers: rand() < 0.5 ? json : v1,
      body: rpcBody(pick(['tasks/frobnicate', '', 'a'.repeat(5000), 'message/send/../x', 'SendMessage ', 'rpc.discover']), {}),
    }),
    // Odd paths.
    () => ({ kind: 'odd-path', method: pick(['GET', 'POST', 'PUT', 'DELETE', 'PATCH']), path: pick(ODD_PATHS), headers: json, body: '{}' }),
    // Bad ids.
    () => ({ kind: 'bad-id', path: '/', headers: json, body: rpcBody(pick(['tasks/get', 'tasks/cancel', 'tasks/resubscribe']), { id: pick(BAD_IDS) }) }),
    () => ({ kind: 'bad-id', path: '/', headers: v1, body: rpcBody(pick(['GetTask', 'CancelTask', 'SubscribeToTask']), { id: pick(BAD_IDS) }) }),
    // (An empty id with no verb is GET /rest/tasks/, the list of the caller's own tasks: not a bad id.)
    () => ({
      kind: 'bad-id',
      method: pick(['GET', 'POST']),
      path: `/rest/tasks/${encodeURIComponent(String(pick(BAD_IDS.filter((id) => String(id) !== ''))))}${pick(['', ':cancel', ':subscribe'])}`,
      headers: v1,
      body: '{}',
    }),
    () => ({ kind: 'bad-id', path: '/', headers: json, body: rpcBody('message/send', { message: message({ taskId: pick(BAD_TASK_REFS) }) }) }),
    () => ({ kind: 'bad-id', path: '/', headers: json, body: rpcBody('message/send', { message: message({ messageId: pick(BAD_MESSAGE_IDS) }) }) }),
    () => ({
      kind: 'bad-id',
      path: '/',
      headers: json,
      body: rpcBody('message/send', { message: message({ contextId: pick(['a b', 'x'.repeat(300), '\u0001', 42, {}]) }) }),
    }),
    // Bad params.
    () => ({
      kind: 'bad-params',
      path: '/',
      headers: json,
      body: rpcBody(
        pick(METHODS_V03),
        pick<unknown>([
          null,
          'x',
          [],
          42,
          { message: message({ parts: [] }) },
          { message: message({ role: 'agent' }) },
          { message: message({ parts: Array.from({ length: 100 }, () => ({ kind: 'text', text: 'p' })) }) },
          { message: message({ parts: [{ kind: 'nope' }] }) },
          { message: message({ referenceTaskIds: Array.from({ length: 50 }, (_, i) => `t-${i}`) }) },
          { message: message({}), configuration: { historyLength: -5 } },
          {
            message: message({}),
            configuration: { pushNotificationConfig: { url: pick(['file:///etc/passwd', 'javascript:alert(1)', 'not a url', 'x'.repeat(3000)]) } },
          },
          { id: 'x', historyLength: 'lots' },
          { '': 1 },
        ]),
      ),
    }),
    () => ({
      kind: 'bad-params',
      path: '/',
      headers: v1,
      body: rpcBody(
        pick(METHODS_V1.filter((m) => m !== 'ListTasks')),
        pick<unknown>([
          null,
          [],
          'x',
          { message: { role: 'ROLE_AGENT', parts: [] } },
          { message: { messageId: '', parts: [{ text: 'x' }] } },
          { pageSize: 10_000 },
        ]),
      ),
    }),
    // ListTasks takes only optional fields (unknown ones are ignored): bad values of its own are what it refuses.
    () => ({
      kind: 'bad-params',
      path: '/',
      headers: v1,
      body: rpcBody(
        'ListTasks',
        pick<unknown>([
          { pageSize: 10_000 },
          { pageSize: 0 },
          { pageSize: -1 },
          { pageToken: 'not-a-token' },
          { statusTimestampAfter: 'yesterday' },
          { status: 'TASK_STATE_NONSENSE' },
        ]),
      ),
    }),
    // Header abuse.
    () => ({
      kind: 'content-type',
      path: '/',
      headers: {
        'content-type': pick(['text/plain', 'application/xml', 'multipart/form-data; boundary=x', 'application/json; charset=utf-7', '', 'a'.repeat(2000)]),
      },
      body: rpcBody('tasks/get', { id: 't-1' }),
    }),
    () => ({
      kind: 'version-header',
      path: '/',
      headers: { ...json, 'a2a-version': pick(['9.9', 'x', '0.2', '1.0.0.0', '-1', 'a'.repeat(500), '0.3.0', '1.0.0']) },
      body: rpcBody(pick(['tasks/get', 'GetTask']), { id: 'no-such-task' }),
    }),
    () => ({
      kind: 'auth',
      path: '/',
      headers: {
        ...json,
        authorization: pick([
          'Bearer',
          'Basic Zm9vOmJhcg==',
          'Bearer a b',
          `Bearer ${'t'.repeat(10_000)}`,
          'bearer wrong-token',
          `Bearer ${TOKEN.slice(0, -1)}`,
          'Bearer\tx',
          'Bearer \u00e9',
        ]),
      },
      body: rpcBody('tasks/get', { id: 't-1' }),
    }),
    () => ({ kind: 'big-header', path: '/', headers: { ...json, 'x-pad': 'p'.repeat(17_000) }, body: rpcBody('tasks/get', { id: 't-1' }) }),
    () => ({
      kind: 'raw-http',
      path: '/',
      raw: pick([
        'GET / HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n',
        'POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n',
        'BREW / HTCPCP/1.0\r\n\r\n',
        'GET /\r\n\r\n',
        `GET /${'a'.repeat(70_000)} HTTP/1.1\r\nHost: x\r\n\r\n`,
        'POST / HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n',
        'POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 7\r\n\r\n{}',
      ]),
    }),
  ];
  return Array.from({ length: n }, () => pick(generators)());
}

/** Status codes a bad request may get: typed JSON-RPC errors ride on 200; the rest are 4xx. */
const TYPED_STATUSES = new Set([200, 400, 401, 404, 405, 409, 413, 414, 415, 429, 431]);

async function fire(c: Case): Promise<{ status: number; typed: boolean; detail: string }> {
  if (c.raw !== undefined) return fireRaw(c.raw);
  const withToken = c.kind === 'auth' ? c.headers : { authorization: `Bearer ${TOKEN}`, ...c.headers };
  let res: Response;
  try {
    res = await fetch(`${url}${c.path}`, {
      method: c.method ?? 'POST',
      headers: withToken,
      ...(c.method === 'GET' ? {} : { body: c.body }),
      signal: AbortSignal.timeout(20_000),
    });
  } catch (err) {
    // Node may answer a request it cannot parse (a header too large) by closing; fetch reports that.
    const cause = (err as { cause?: { code?: string } }).cause?.code ?? (err as Error).message;
    return { status: 0, typed: c.kind === 'big-header', detail: `fetch failed: ${cause}` };
  }
  const text = await res.text();
  let body: unknown;
  try {
    body = text ? JSON.parse(text) : undefined;
  } catch {
    body = undefined;
  }
  const contentType = res.headers.get('content-type') ?? '';
  let typed = TYPED_STATUSES.has(res.status);
  if (contentType.includes('event-stream')) {
    // A stream that opened must end in an error event, not in results.
    typed = typed && /"error"/.test(text);
  } else if (res.status === 200) {
    const error = (body as { error?: { code?: unknown } } | undefined)?.error;
    typed = typeof error?.code === 'number' && (body as { result?: unknown }).result === undefined;
  } else if (res.status !== 431) {
    // A REST error body: A2A 1.0's `{ error: {…} }`, or A2A 0.3's `{ code, message, data }`.
    const b = body as { error?: unknown; code?: unknown; message?: unknown } | null | undefined;
    typed = typed && typeof b === 'object' && b !== null && ('error' in b || (typeof b.code === 'number' && typeof b.message === 'string'));
  }
  return { status: res.status, typed, detail: text.slice(0, 160) };
}

function fireRaw(raw: string): Promise<{ status: number; typed: boolean; detail: string }> {
  const { port, hostname } = new URL(url);
  return new Promise((resolve) => {
    const socket = netConnect(Number(port), hostname);
    let out = '';
    const done = () => {
      const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(out)?.[1] ?? 0);
      // Node's HTTP parser answers malformed requests with a 4xx and closes; closing alone is also a refusal.
      resolve({ status, typed: status === 0 || (status >= 400 && status < 500), detail: out.slice(0, 80) });
    };
    socket.setTimeout(10_000, () => socket.destroy());
    socket.on('data', (d) => (out += d.toString('latin1')));
    socket.on('close', done);
    socket.on('error', () => undefined);
    socket.write(raw);
    setTimeout(() => socket.end(), 200).unref();
  });
}

describe('gateway fuzz', () => {
  it(`${REQUESTS} hostile requests: no crash, each answered with a typed error, the control conversation never fails`, async () => {
    const cases = generate(prng(0x7e0b), REQUESTS);
    const counts = new Map<string, number>();
    const statuses = new Map<number, number>();
    const untyped: string[] = [];
    let stop = false;

    // The control conversation: turns on one task, A2A 1.0 and 0.3 in turn, the whole time.
    const control = (async () => {
      const v1 = await v1Client(url, { token: TOKEN });
      const v03 = await v03Client(url, { token: TOKEN });
      const first = await v1.sendMessage(send(userText('Write about the storm')));
      if (!('status' in first)) throw new Error('control: expected a task');
      let turns = 1;
      while (!stop) {
        if (turns % 2 === 0) {
          const task = await v1.sendMessage(send(userText(`Write about wave ${turns}`, { taskId: first.id })));
          if (
            !('status' in task) ||
            task.status?.state !== TaskState.TASK_STATE_INPUT_REQUIRED ||
            !textOf(task.status.message?.parts).includes(`wave ${turns}`)
          )
            throw new Error(`control turn ${turns} failed: ${JSON.stringify(task).slice(0, 300)}`);
        } else {
          const task = await v03.sendMessage({ message: v03Text(`Write about gust ${turns}`, { taskId: first.id }) });
          if (task.kind !== 'task' || task.status.state !== 'input-required')
            throw new Error(`control turn ${turns} failed: ${JSON.stringify(task).slice(0, 300)}`);
        }
        turns++;
      }
      return turns;
    })();

    let next = 0;
    const worker = async () => {
      while (next < cases.length) {
        const c = cases[next++]!;
        const outcome = await fire(c);
        counts.set(c.kind, (counts.get(c.kind) ?? 0) + 1);
        statuses.set(outcome.status, (statuses.get(outcome.status) ?? 0) + 1);
        if (!outcome.typed)
          untyped.push(
            `${c.kind} ${c.method ?? 'POST'} ${c.path.slice(0, 60)} ${String(c.body ?? c.raw ?? '').slice(0, 80)}…${String(c.body ?? c.raw ?? '').slice(-80)} -> ${outcome.status} ${outcome.detail}`,
          );
      }
    };
    await Promise.all(Array.from({ length: CONCURRENCY }, worker));
    stop = true;
    const turns = await control;

    const byKind = [...counts.entries()]
      .sort()
      .map(([k, v]) => `${k}=${v}`)
      .join(' ');
    const byStatus = [...statuses.entries()]
      .sort((a, b) => a[0] - b[0])
      .map(([k, v]) => `${k}:${v}`)
      .join(' ');
    console.log(
      `gateway fuzz: ${cases.length} requests (${byKind}); statuses ${byStatus}; untyped ${untyped.length}; control turns ${turns}; gateway exits ${gatewayProc.running ? 0 : 1}`,
    );
    if (untyped.length) console.log(gatewayProc.stderr.slice(-3000));
    expect(untyped).toEqual([]);
    expect(gatewayProc.running).toBe(true);
    expect(turns).toBeGreaterThan(3);
    // Still serving after the storm.
    const after = await v1Client(url, { token: TOKEN });
    const task = await after.sendMessage(send(userText('Write about the calm')));
    expect('status' in task && task.status?.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED);
  }, 300_000);
});
