/**
 * The A2A HTTP gateway over real HTTP (global fetch) against embedded demo meshes: the agent card,
 * message/send, message/stream over SSE, tasks/get, tasks/cancel, every JSON-RPC error, bearer tokens and
 * tenant isolation (two meshes, tenants `demo` and `acme`), and the `troupe gateway` command.
 */
import { randomUUID } from 'node:crypto';
import { Role, TaskState, type Message as SdkMessage } from '@a2a-js/sdk';
import { ClientFactory, DefaultAgentCardResolver, JsonRpcTransportFactory } from '@a2a-js/sdk/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defineAgent, reply } from '../src/sdk/agent.js';
import { startEmbedded } from '../src/actors/embedded.js';
import { silentLogger } from '../src/observability/logger.js';
import demoTeam from '../src/bin/demo/team.js';
import { skillsOfAgents, startGateway, type Gateway } from '../src/gateway/index.js';
import { TaskSchema, ThreadEventSchema, type Message, type Task, type ThreadEvent } from '../src/protocol/index.js';
import { ProcessGroup } from './helpers/processes.js';

type Mesh = Awaited<ReturnType<typeof startEmbedded>>;

interface RpcReply {
  jsonrpc: '2.0';
  id: string | number | null;
  result?: unknown;
  error?: { code: number; message: string; data?: { code?: string; hint?: string } };
}

let demo: Mesh;
let acme: Mesh;
/** Open: no tokens, everything goes to tenant demo. */
let open: Gateway;
/** Bearer tokens for two tenants, each with its own mesh. */
let guarded: Gateway;
const TOKENS = { 'demo-token-1': 'demo', 'acme-token-1': 'acme' };

beforeAll(async () => {
  [demo, acme] = await Promise.all([startEmbedded(demoTeam, silentLogger()), startEmbedded(demoTeam, silentLogger(), 'acme')]);
  open = await startGateway({ clients: { demo: demo.client }, card: { name: 'Troupe demo', skills: skillsOfAgents(demoTeam.agents.map((a) => a.card)) } });
  guarded = await startGateway({ clients: { demo: demo.client, acme: acme.client }, tokens: TOKENS });
});

afterAll(async () => {
  await Promise.all([open?.close(), guarded?.close()]);
  await Promise.all([demo?.stop(), acme?.stop()]);
});

const userMessage = (text: string, extra: Partial<Message> = {}): Message => ({
  kind: 'message',
  role: 'user',
  messageId: randomUUID(),
  parts: [{ kind: 'text', text }],
  ...extra,
});

function post(gw: Gateway, body: string, token?: string): Promise<Response> {
  return fetch(`${gw.url}/`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(token ? { authorization: `Bearer ${token}` } : {}) },
    body,
  });
}

async function rpc(gw: Gateway, method: string, params: unknown, token?: string): Promise<RpcReply & { status: number }> {
  const res = await post(gw, JSON.stringify({ jsonrpc: '2.0', id: method, method, params }), token);
  expect(res.headers.get('content-type')).toBe('application/json');
  return { status: res.status, ...((await res.json()) as RpcReply) };
}

async function task(gw: Gateway, method: string, params: unknown, token?: string): Promise<Task> {
  const reply = await rpc(gw, method, params, token);
  expect(reply.error).toBeUndefined();
  expect(reply.id).toBe(method);
  return TaskSchema.parse(reply.result);
}

const textOf = (m: Message | undefined) => (m?.parts ?? []).flatMap((p) => (p.kind === 'text' ? [p.text] : [])).join('');

/** Reads a whole SSE response: one JSON-RPC response per `data:` line. */
async function sseResponses(res: Response): Promise<RpcReply[]> {
  const body = await res.text();
  return body
    .split('\n\n')
    .filter((block) => block.trim())
    .map((block) => {
      const data = block
        .split('\n')
        .filter((line) => line.startsWith('data: '))
        .map((line) => line.slice('data: '.length))
        .join('\n');
      return JSON.parse(data) as RpcReply;
    });
}

describe('agent card', () => {
  it('serves an A2A v0.3 card for the mesh at both well-known paths', async () => {
    for (const path of ['/.well-known/agent-card.json', '/.well-known/agent.json']) {
      const res = await fetch(`${open.url}${path}`);
      expect(res.status).toBe(200);
      const card = (await res.json()) as Record<string, unknown> & { capabilities: Record<string, unknown>; skills: Array<{ id: string }> };
      expect(card).toMatchObject({ name: 'Troupe demo', protocolVersion: '0.3.0', url: `${open.url}/`, preferredTransport: 'JSONRPC' });
      expect(card.capabilities).toMatchObject({ streaming: true, pushNotifications: false });
      expect(card.skills.map((s) => s.id)).toEqual(['triage/triage', 'researcher/research', 'writer/write']);
      expect(card.securitySchemes).toBeUndefined();
    }
  });

  it('declares bearer auth when the gateway has tokens, and serves the card without one', async () => {
    const card = (await (await fetch(`${guarded.url}/.well-known/agent-card.json`)).json()) as Record<string, unknown>;
    expect(card.securitySchemes).toEqual({ bearer: expect.objectContaining({ type: 'http', scheme: 'bearer' }) });
    expect(card.security).toEqual([{ bearer: [] }]);
  });
});

describe('message/send and tasks/get', () => {
  it('message/send runs one turn and returns the Task with the writer\'s answer, waiting for input', async () => {
    const message = userMessage('Write about otters');
    const t = await task(open, 'message/send', { message });
    expect(t.id).toMatch(/^t-/);
    expect(t.status.state).toBe('input-required');
    expect(textOf(t.status.message)).toBe('Here is your piece. Facts on "Write about otters": 3 sources agree it is worth writing about.');
    expect(t.status.message?.metadata?.['troupe/agent']).toBe('writer');
    expect(t.status.message?.metadata?.['troupe/inReplyTo']).toBe(message.messageId);
    expect(t.history?.map((m) => m.role)).toEqual(['user', 'agent', 'agent', 'agent']);
  });

  it('continuing the task with message.taskId keeps its history: tasks/get shows 4 then 8 messages', async () => {
    const first = await task(open, 'message/send', { message: userMessage('Tell me about kelp') });
    expect((await task(open, 'tasks/get', { id: first.id })).history).toHaveLength(4);
    const second = await task(open, 'message/send', { message: userMessage('More please', { taskId: first.id }) });
    expect(second.id).toBe(first.id);
    expect(second.contextId).toBe(first.contextId);
    expect(textOf(second.status.message)).toContain('Facts on "More please"');
    const stored = await task(open, 'tasks/get', { id: first.id });
    expect(stored.history).toHaveLength(8);
    expect(stored.status.state).toBe('input-required');
    expect(textOf(stored.history?.[4])).toBe('More please');
    const recent = await task(open, 'tasks/get', { id: first.id, historyLength: 2 });
    expect(recent.history?.map(textOf)).toEqual(stored.history?.slice(-2).map(textOf));
  });

  it('message/send with configuration.historyLength trims the returned history', async () => {
    const t = await task(open, 'message/send', { message: userMessage('Is the sea cold?'), configuration: { historyLength: 1, blocking: true } });
    expect(t.history).toHaveLength(1);
    expect(textOf(t.history?.[0])).toBe(textOf(t.status.message));
  });

  it('tasks/get on an unknown id is -32001 "Task not found", as is continuing one', async () => {
    const reply = await rpc(open, 'tasks/get', { id: 'no-such-task' });
    expect(reply.status).toBe(200);
    expect(reply.error).toMatchObject({ code: -32001, message: expect.stringMatching(/^Task not found/), data: { code: 'THREAD_NOT_FOUND' } });
    expect(reply.error?.data?.hint).toBeTruthy();
    const cont = await rpc(open, 'message/send', { message: userMessage('hello?', { taskId: 'no-such-task' }) });
    expect(cont.error).toMatchObject({ code: -32001, data: { code: 'THREAD_NOT_FOUND' } });
  });
});

describe('message/stream', () => {
  it('streams route steps and artifact-update chunks over SSE, then the final status-update, then ends', async () => {
    const res = await post(open, JSON.stringify({ jsonrpc: '2.0', id: 7, method: 'message/stream', params: { message: userMessage('Write about seals') } }));
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('text/event-stream');
    const responses = await sseResponses(res);
    expect(responses.every((r) => r.jsonrpc === '2.0' && r.id === 7 && r.error === undefined)).toBe(true);
    const events: ThreadEvent[] = responses.map((r) => ThreadEventSchema.parse(r.result));
    const kinds = events.map((e) => e.kind);
    const last = events.at(-1)!;
    expect(last).toMatchObject({ kind: 'status-update', final: true, status: { state: 'input-required' } });
    expect(events.filter((e) => e.kind === 'status-update' && e.final)).toHaveLength(1);
    const chunks = events.flatMap((e) => (e.kind === 'artifact-update' ? [e] : []));
    expect(chunks.map((c) => textOf({ ...userMessage(''), parts: c.artifact.parts })).join('')).toBe('Here is your piece. ');
    expect(kinds.lastIndexOf('artifact-update')).toBeLessThan(kinds.length - 1);
    // Route steps come first, as non-final status updates of the same task.
    const taskIds = new Set(events.map((e) => e.taskId));
    expect(taskIds.size).toBe(1);
    const steps = events.flatMap((e) => (e.kind === 'status-update' && e.metadata?.['troupe/route'] ? [(e.metadata['troupe/route'] as { to: string }).to] : []));
    expect(steps).toEqual(['triage', 'researcher', 'writer']);
    // The streamed task is stored like any other.
    const stored = await task(open, 'tasks/get', { id: last.taskId });
    expect(stored.history).toHaveLength(4);
  });

  it('a turn that fails after the stream started ends the stream with a JSON-RPC error event', async () => {
    const slow = defineAgent({
      card: { id: 'slow', name: 'Slow', description: 'Streams a word, then thinks too long' },
      async *handle() {
        yield 'Thinking';
        await new Promise((r) => setTimeout(r, 400));
        return reply('done', { to: 'user' });
      },
    });
    const mesh = await startEmbedded({ name: 'slow', agents: [slow], config: { entryAgent: 'slow' } }, silentLogger());
    const gw = await startGateway({ clients: { demo: mesh.client }, turnTimeoutMs: 150 });
    try {
      const res = await post(gw, JSON.stringify({ jsonrpc: '2.0', id: 's', method: 'message/stream', params: { message: userMessage('hurry') } }));
      expect(res.headers.get('content-type')).toBe('text/event-stream');
      const responses = await sseResponses(res);
      expect(responses.some((r) => (r.result as ThreadEvent | undefined)?.kind === 'artifact-update')).toBe(true);
      expect(responses.at(-1)).toMatchObject({ id: 's', error: { code: -32603, data: { code: 'AGENT_TIMEOUT' } } });
    } finally {
      await gw.close();
      await mesh.stop();
    }
  });

  it('continues a task over SSE; a failure before the stream starts is a plain JSON-RPC error', async () => {
    const first = await task(open, 'message/send', { message: userMessage('Write about crabs') });
    const res = await post(open, JSON.stringify({ jsonrpc: '2.0', id: 'c', method: 'message/stream', params: { message: userMessage('again', { taskId: first.id }) } }));
    const events = (await sseResponses(res)).map((r) => ThreadEventSchema.parse(r.result));
    expect(events.at(-1)).toMatchObject({ kind: 'status-update', final: true, taskId: first.id });
    const missing = await post(open, JSON.stringify({ jsonrpc: '2.0', id: 'm', method: 'message/stream', params: { message: userMessage('x', { taskId: 'nope' }) } }));
    expect(missing.headers.get('content-type')).toBe('application/json');
    expect(((await missing.json()) as RpcReply).error).toMatchObject({ code: -32001 });
  });
});

describe('tasks/cancel', () => {
  it('cancels a task; a second cancel is -32002 "Task cannot be canceled", and the task takes no more messages', async () => {
    const t = await task(open, 'message/send', { message: userMessage('Write about owls') });
    const canceled = await task(open, 'tasks/cancel', { id: t.id });
    expect(canceled.id).toBe(t.id);
    expect(canceled.status.state).toBe('canceled');
    expect((await task(open, 'tasks/get', { id: t.id })).status.state).toBe('canceled');
    const again = await rpc(open, 'tasks/cancel', { id: t.id });
    expect(again.error).toMatchObject({ code: -32002, message: expect.stringMatching(/^Task cannot be canceled/), data: { code: 'THREAD_CLOSED' } });
    const late = await rpc(open, 'message/send', { message: userMessage('still there?', { taskId: t.id }) });
    expect(late.error).toMatchObject({ code: -32002, data: { code: 'THREAD_CLOSED' } });
    expect(late.error?.message).toContain('without taskId');
    expect((await rpc(open, 'tasks/cancel', { id: 'nope' })).error).toMatchObject({ code: -32001, data: { code: 'THREAD_NOT_FOUND' } });
  });
});

describe('JSON-RPC errors', () => {
  it('malformed JSON is -32700', async () => {
    const res = await post(open, '{"jsonrpc": "2.0", "id": 1, "method": ');
    expect(res.status).toBe(200);
    expect((await res.json()) as RpcReply).toMatchObject({ jsonrpc: '2.0', id: null, error: { code: -32700 } });
  });

  it('a body that is not a JSON-RPC request is -32600 (keeping its id when it has one), and so is a batch', async () => {
    const noVersion = (await (await post(open, JSON.stringify({ id: 4, method: 'tasks/get', params: { id: 'x' } }))).json()) as RpcReply;
    expect(noVersion).toMatchObject({ id: 4, error: { code: -32600, message: expect.stringContaining('jsonrpc') } });
    const noMethod = (await (await post(open, JSON.stringify({ jsonrpc: '2.0', id: 5 }))).json()) as RpcReply;
    expect(noMethod.error?.code).toBe(-32600);
    const batch = (await (await post(open, JSON.stringify([{ jsonrpc: '2.0', id: 1, method: 'tasks/get' }]))).json()) as RpcReply;
    expect(batch.error).toMatchObject({ code: -32600, message: expect.stringContaining('batch') });
  });

  it('params that fail the schema are -32602 naming the problem', async () => {
    const noParts = await rpc(open, 'message/send', { message: { kind: 'message', role: 'user', messageId: 'p-1', parts: [] } });
    expect(noParts.error).toMatchObject({ code: -32602, data: { code: 'INVALID_MESSAGE' } });
    expect(noParts.error?.message).toContain('message.parts: a message needs at least one part');
    const agentRole = await rpc(open, 'message/send', { message: userMessage('hi', { role: 'agent' }) });
    expect(agentRole.error?.message).toContain('message.role');
    const badId = await rpc(open, 'tasks/get', { id: 'a.b' });
    expect(badId.error).toMatchObject({ code: -32602, message: expect.stringContaining('id:') });
    expect((await rpc(open, 'tasks/cancel', undefined)).error?.code).toBe(-32602);
  });

  it('an unknown method is -32601; known A2A methods the gateway does not offer are -32004', async () => {
    const unknown = await rpc(open, 'tasks/frobnicate', {});
    expect(unknown.error).toMatchObject({ code: -32601, message: expect.stringContaining('message/send') });
    expect((await rpc(open, 'tasks/resubscribe', { id: 'x' })).error?.code).toBe(-32004);
    const push = await rpc(open, 'message/send', { message: userMessage('x'), configuration: { pushNotificationConfig: { url: 'http://example.invalid' } } });
    expect(push.error?.code).toBe(-32003);
  });

  it('a body over maxBodyBytes is 413 with a PAYLOAD_TOO_LARGE JSON-RPC error, and the gateway keeps serving', async () => {
    const big = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'message/send', params: { message: userMessage('x'.repeat(1024 * 1024 + 1)) } });
    const res = await post(open, big);
    expect(res.status).toBe(413);
    expect((await res.json()) as RpcReply).toMatchObject({ error: { code: -32602, data: { code: 'PAYLOAD_TOO_LARGE' } } });
    expect((await task(open, 'message/send', { message: userMessage('small again') })).status.state).toBe('input-required');
  });

  it('other paths are 404 and other HTTP methods on / are 405', async () => {
    expect((await fetch(`${open.url}/nope`)).status).toBe(404);
    const get = await fetch(`${open.url}/`);
    expect(get.status).toBe(405);
    expect(get.headers.get('allow')).toBe('POST');
  });
});

describe('bearer tokens and tenants', () => {
  it('a missing or unknown token is 401 with a JSON-RPC error', async () => {
    for (const token of [undefined, 'wrong-token']) {
      const reply = await rpc(guarded, 'tasks/get', { id: 'x' }, token);
      expect(reply.status).toBe(401);
      expect(reply.error?.message).toContain('Authorization: Bearer');
    }
    const res = await post(guarded, '{}');
    expect(res.headers.get('www-authenticate')).toBe('Bearer');
  });

  it("each token reaches its own tenant's mesh, and tenant acme cannot read, continue or cancel demo's task", async () => {
    const demoTask = await task(guarded, 'message/send', { message: userMessage('Write about foxes') }, 'demo-token-1');
    expect(demoTask.status.state).toBe('input-required');
    // The task lives in demo's mesh only.
    expect(await demo.node.threads.store.get('demo', demoTask.id)).toBeDefined();
    expect(await acme.node.threads.store.get('acme', demoTask.id)).toBeUndefined();

    // Another tenant's task answers exactly like one that does not exist: nobody can probe which ids exist.
    const notFound = { code: -32001, data: { code: 'THREAD_NOT_FOUND' } };
    const missing = await rpc(guarded, 'tasks/get', { id: 't-never-existed' }, 'acme-token-1');
    const foreign = await rpc(guarded, 'tasks/get', { id: demoTask.id }, 'acme-token-1');
    expect(foreign.error).toMatchObject(notFound);
    expect(foreign.error?.message.replace(demoTask.id, 'ID')).toBe(missing.error?.message.replace('t-never-existed', 'ID'));
    expect((await rpc(guarded, 'tasks/cancel', { id: demoTask.id }, 'acme-token-1')).error).toMatchObject(notFound);
    const cont = await rpc(guarded, 'message/send', { message: userMessage('mine now', { taskId: demoTask.id }) }, 'acme-token-1');
    expect(cont.error).toMatchObject(notFound);
    expect(cont.error?.message).not.toContain('demo');

    // Nothing happened to demo's task; acme has its own tasks.
    const stillDemo = await task(guarded, 'tasks/get', { id: demoTask.id }, 'demo-token-1');
    expect(stillDemo.status.state).toBe('input-required');
    expect(stillDemo.history).toHaveLength(4);
    const acmeTask = await task(guarded, 'message/send', { message: userMessage('Write about badgers') }, 'acme-token-1');
    expect(await acme.node.threads.store.get('acme', acmeTask.id)).toBeDefined();
    expect((await rpc(guarded, 'tasks/get', { id: acmeTask.id }, 'demo-token-1')).error).toMatchObject({ code: -32001, data: { code: "THREAD_NOT_FOUND" } });
    // Unknown everywhere is still "not found", not "forbidden".
    expect((await rpc(guarded, 'tasks/get', { id: 'nowhere' }, 'acme-token-1')).error).toMatchObject({ code: -32001, data: { code: 'THREAD_NOT_FOUND' } });
  });

  it('refuses a configuration that could not serve: a token for a tenant without a client, a client keyed by the wrong tenant', async () => {
    await expect(startGateway({ clients: { demo: demo.client }, tokens: { t: 'acme' } })).rejects.toThrow(/no client for it/);
    await expect(startGateway({ clients: { acme: demo.client } })).rejects.toThrow(/talks to tenant "demo"/);
    await expect(startGateway({ clients: { acme: acme.client } })).rejects.toThrow(/default tenant "demo"/);
  });
});

describe('interoperability', () => {
  it('the official A2A JS SDK (its v0.3 JSON-RPC client) resolves the card, sends, streams, gets and cancels', async () => {
    const factory = new ClientFactory({
      transports: [new JsonRpcTransportFactory({ legacyCompat: { enabled: true } })],
      cardResolver: new DefaultAgentCardResolver({ legacyCompat: { enabled: true } }),
    });
    const client = await factory.createFromUrl(open.url);
    expect(client.protocolVersion).toBe('0.3');
    const sdkMessage = (text: string, taskId = ''): SdkMessage => ({
      messageId: randomUUID(),
      contextId: '',
      taskId,
      role: Role.ROLE_USER,
      parts: [{ content: { $case: 'text', value: text }, metadata: undefined, filename: '', mediaType: '' }],
      metadata: undefined,
      extensions: [],
      referenceTaskIds: [],
    });
    const sent = await client.sendMessage({ tenant: '', message: sdkMessage('Write about otters'), configuration: undefined, metadata: undefined });
    if (!('status' in sent)) throw new Error(`expected a Task, got ${JSON.stringify(sent)}`);
    expect(sent.status?.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED);
    const cases: string[] = [];
    for await (const event of client.sendMessageStream({ tenant: '', message: sdkMessage('again', sent.id), configuration: undefined, metadata: undefined })) {
      cases.push(event.payload?.$case ?? 'none');
    }
    expect(cases).toContain('artifactUpdate');
    expect(cases.at(-1)).toBe('statusUpdate');
    expect((await client.getTask({ tenant: '', id: sent.id })).history).toHaveLength(8);
    expect((await client.cancelTask({ tenant: '', id: sent.id, metadata: undefined })).status?.state).toBe(TaskState.TASK_STATE_CANCELED);
    await expect(client.cancelTask({ tenant: '', id: sent.id, metadata: undefined })).rejects.toThrow(/Task cannot be canceled/);
    await expect(client.getTask({ tenant: '', id: 'no-such-task' })).rejects.toThrow(/Task not found/);
  });
});

describe('troupe gateway (CLI)', () => {
  const group = new ProcessGroup();
  afterAll(() => group.stopAll());

  it('serves the embedded demo mesh and prints where it listens', async () => {
    const proc = await group.spawnTroupe(['gateway', '--port', '0', '--log-level', 'warn'], {}, { ready: /gateway listening on http:\/\/\S+/ });
    const url = /gateway listening on (http:\/\/[^\s]+)/.exec(proc.stderr)![1]!;
    const card = (await (await fetch(`${url}/.well-known/agent-card.json`)).json()) as { url: string; skills: unknown[] };
    expect(card.url).toBe(`${url}/`);
    expect(card.skills).toHaveLength(3);
    const res = await fetch(`${url}/`, { method: 'POST', body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'message/send', params: { message: userMessage('Write about moles') } }) });
    const t = TaskSchema.parse(((await res.json()) as RpcReply).result);
    expect(t.status.state).toBe('input-required');
    expect(textOf(t.status.message)).toContain('Here is your piece.');
  });
});
