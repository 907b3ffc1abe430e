/**
 * The A2A gateway over real HTTP against embedded meshes, with real A2A clients: the SDK's default
 * ClientFactory (A2A 1.0, JSON-RPC and REST) and the SDK's 0.3 release (A2A 0.3). Card, send, stream,
 * get, cancel, resubscribe, contextId continuation, result metadata, errors, tokens with users, rate
 * limits, HTTPS, diagnostics, push notifications with retries, and the `troupe gateway` command.
 */
import { request as httpsRequest } from 'node:https';
import { createServer, request as httpRequest, type IncomingMessage, type Server } from 'node:http';
import { connect as netConnect, type AddressInfo } from 'node:net';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { TaskState, type Task as SdkTask } from '@a2a-js/sdk';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defineAgent, reply } from '../src/sdk/index.js';
import { defineTeam } from '../src/team/team.js';
import { startEmbedded } from '../src/team/embedded.js';
import { silentLogger } from '../src/observability/logger.js';
import demoTeam from '../src/bin/demo/team.js';
import tckTeam from '../examples/tck/team.js';
import { skillsOfAgents, startGateway, type Gateway } from '../src/gateway/index.js';
import { bearerFetch, collect, rpc, send, textOf, userText, v03Client, v03Text, v1Client } from './helpers/a2a.js';
import { testCertificates, type TestCertificates } from './helpers/tls.js';
import { ProcessGroup, runTroupe } from './helpers/processes.js';
import { waitFor } from './helpers/wait.js';

type Mesh = Awaited<ReturnType<typeof startEmbedded>>;

let demo: Mesh;
let acme: Mesh;
/** Open: no tokens, everything goes to tenant demo as the principal itself. */
let open: Gateway;
/** Bearer tokens: alice and bob are users of demo; the old form maps a token to acme only. */
let guarded: Gateway;
const ALICE = 'alice-token-0123456789';
const BOB = 'bob-token-0123456789abc';
const ACME_LEGACY = 'acme-token-1';
const OPERATOR = 'operator-token-0123456789';
const TOKENS = { [ALICE]: { tenant: 'demo', user: 'alice' }, [BOB]: { tenant: 'demo', user: 'bob' }, [ACME_LEGACY]: 'acme' };

/** A gate the slow agent waits on, opened by the test (no sleeps). */
let openGate: () => void = () => undefined;
let gate = Promise.resolve();
function closeGate(): void {
  gate = new Promise<void>((resolve) => (openGate = resolve));
}

const slowTeam = defineTeam({
  name: 'slow',
  agents: [
    defineAgent({
      card: { id: 'slow', name: 'Slow', description: 'Streams a word, then waits for the test', capabilities: { streaming: true } },
      async *handle(_message, ctx) {
        yield 'Thinking ';
        await gate;
        return reply(`done: ${ctx.text}`, { to: 'user' });
      },
    }),
  ],
  config: { entryAgent: 'slow', agentTimeoutMs: 20_000, retries: 0 },
});

beforeAll(async () => {
  [demo, acme] = await Promise.all([startEmbedded(demoTeam, silentLogger()), startEmbedded(demoTeam, silentLogger(), 'acme')]);
  open = await startGateway({ clients: { demo: demo.client }, card: { name: 'Troupe demo', skills: skillsOfAgents(demoTeam.agents.map((a) => a.card)) } });
  guarded = await startGateway({ clients: { demo: demo.client, acme: acme.client }, tokens: TOKENS, diagnostics: { token: OPERATOR, client: demo.client } });
});

afterAll(async () => {
  await Promise.all([open?.close(), guarded?.close()]);
  await Promise.all([demo?.stop(), acme?.stop()]);
});

const RESULT_KEYS = ['agentsUsed', 'executionTimeMs', 'taskState'];

function taskOf(result: unknown): SdkTask {
  if (!result || typeof result !== 'object' || !('status' in result)) throw new Error(`expected a Task, got ${JSON.stringify(result)}`);
  return result as SdkTask;
}

describe('agent card', () => {
  it('serves A2A 1.0 to clients that ask for it and 0.3 to the others, at both well-known paths', async () => {
    for (const path of ['/.well-known/agent-card.json', '/.well-known/agent.json']) {
      const v1 = (await (await fetch(`${open.url}${path}`, { headers: { 'A2A-Version': '1.0' } })).json()) as Record<string, unknown> & {
        supportedInterfaces: Array<{ url: string; protocolBinding: string; protocolVersion: string }>;
        capabilities: Record<string, unknown>;
        skills: Array<{ id: string }>;
      };
      expect(v1.name).toBe('Troupe demo');
      expect(v1.supportedInterfaces).toEqual(
        expect.arrayContaining([
          { url: `${open.url}/`, protocolBinding: 'JSONRPC', protocolVersion: '1.0' },
          { url: `${open.url}/rest`, protocolBinding: 'HTTP+JSON', protocolVersion: '1.0' },
          { url: `${open.url}/`, protocolBinding: 'JSONRPC', protocolVersion: '0.3' },
          { url: `${open.url}/rest`, protocolBinding: 'HTTP+JSON', protocolVersion: '0.3' },
        ]),
      );
      expect(v1.capabilities).toMatchObject({ streaming: true, pushNotifications: true });
      expect(v1.skills.map((s) => s.id)).toEqual(['triage/triage', 'researcher/research', 'writer/write']);
      const v03 = (await (await fetch(`${open.url}${path}`)).json()) as Record<string, unknown>;
      expect(v03).toMatchObject({ name: 'Troupe demo', url: `${open.url}/`, preferredTransport: 'JSONRPC', protocolVersion: '0.3' });
    }
  });

  it('can be cached (A2A 1.0 §8.6.1): Cache-Control max-age, ETag, Last-Modified; a conditional GET is 304 (both versions)', async () => {
    for (const headers of [{ 'A2A-Version': '1.0' }, {}] as Array<Record<string, string>>) {
      const res = await fetch(`${open.url}/.well-known/agent-card.json`, { headers });
      expect(res.status).toBe(200);
      expect(res.headers.get('cache-control')).toMatch(/max-age=\d+/);
      const etag = res.headers.get('etag');
      const lastModified = res.headers.get('last-modified');
      expect(etag).toBeTruthy();
      expect(Number.isNaN(Date.parse(lastModified ?? ''))).toBe(false);
      await res.arrayBuffer();
      // node:http, not fetch: fetch adds `Cache-Control: no-cache` to a conditional request, which asks the server not to answer 304.
      const statusOf = (extra: Record<string, string>) =>
        new Promise<number | undefined>((resolve, reject) => {
          httpRequest(`${open.url}/.well-known/agent-card.json`, { headers: { ...headers, ...extra } }, (r) => (r.resume(), resolve(r.statusCode)))
            .on('error', reject)
            .end();
        });
      expect(await statusOf({ 'if-none-match': etag! })).toBe(304);
      expect(await statusOf({ 'if-modified-since': lastModified! })).toBe(304);
    }
  });

  it('declares bearer auth when the gateway has tokens, and serves the card without one', async () => {
    const v1 = (await (await fetch(`${guarded.url}/.well-known/agent-card.json`, { headers: { 'A2A-Version': '1.0' } })).json()) as Record<string, unknown>;
    expect(v1.securitySchemes).toEqual({ bearer: { httpAuthSecurityScheme: expect.objectContaining({ scheme: 'bearer' }) } });
    const v03 = (await (await fetch(`${guarded.url}/.well-known/agent-card.json`)).json()) as Record<string, unknown>;
    expect(v03.securitySchemes).toEqual({ bearer: expect.objectContaining({ type: 'http', scheme: 'bearer' }) });
    expect(v03.security).toEqual([{ bearer: [] }]);
  });
});

describe('A2A 1.0: the SDK default ClientFactory with no options', () => {
  it('sends: one turn, the Task with the whole history and the result metadata (taskState fresh)', async () => {
    const client = await v1Client(open.url);
    expect(client.protocolVersion).toBe('1.0');
    const task = taskOf(await client.sendMessage(send(userText('Write about otters'))));
    expect(task.status?.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED);
    expect(textOf(task.status?.message?.parts)).toBe('Here is your piece. Facts on "Write about otters": 3 sources agree it is worth writing about.');
    expect(task.history.map((m) => m.role)).toEqual([1, 2, 2, 2]);
    expect(task.metadata).toMatchObject({ agentsUsed: ['triage', 'researcher', 'writer'], taskState: 'fresh' });
    expect(task.metadata?.['executionTimeMs']).toEqual(expect.any(Number));
    expect(task.status?.message?.metadata).toMatchObject({ agentsUsed: ['triage', 'researcher', 'writer'], taskState: 'fresh' });
  });

  it('streams: the Task first, route steps, chunks that accumulate into the Task artifacts, the final status last', async () => {
    const client = await v1Client(open.url);
    const events = await collect(client.sendMessageStream(send(userText('Write about seals'))));
    const cases = events.map((e) => e.payload?.$case);
    expect(cases[0]).toBe('task');
    const last = events.at(-1)?.payload;
    if (last?.$case !== 'statusUpdate') throw new Error(`last event is ${last?.$case}`);
    expect(last.value.status?.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED);
    for (const key of RESULT_KEYS) expect(last.value.metadata).toHaveProperty(key);
    const chunks = events.flatMap((e) => (e.payload?.$case === 'artifactUpdate' ? [textOf(e.payload.value.artifact?.parts)] : []));
    expect(chunks.join('')).toBe('Here is your piece. ');
    expect(cases.lastIndexOf('artifactUpdate')).toBeLessThan(cases.length - 1);
    const routeSteps = events.flatMap((e) =>
      e.payload?.$case === 'statusUpdate' && e.payload.value.metadata?.['troupe/route']
        ? [(e.payload.value.metadata['troupe/route'] as { to: string }).to]
        : [],
    );
    expect(routeSteps).toEqual(['triage', 'researcher', 'writer']);
    const taskId = events[0]?.payload?.$case === 'task' ? events[0].payload.value.id : '';
    const stored = await client.getTask({ tenant: '', id: taskId });
    expect(stored.history).toHaveLength(4);
    expect(stored.artifacts).toHaveLength(1);
    expect(textOf(stored.artifacts[0]?.parts)).toBe('Here is your piece. ');
  });

  it('continues a task by taskId (taskState resumed) and trims history on get', async () => {
    const client = await v1Client(open.url);
    const first = taskOf(await client.sendMessage(send(userText('Tell me about kelp'))));
    const second = taskOf(await client.sendMessage(send(userText('Is the sea cold?', { taskId: first.id }))));
    expect(second.id).toBe(first.id);
    expect(second.metadata?.['taskState']).toBe('resumed');
    expect(textOf(second.status?.message?.parts)).toContain('Checked with researcher');
    const stored = await client.getTask({ tenant: '', id: first.id });
    expect(stored.history.length).toBeGreaterThanOrEqual(7);
    expect((await client.getTask({ tenant: '', id: first.id, historyLength: 2 })).history).toHaveLength(2);
    const trimmed = taskOf(await client.sendMessage(send(userText('More please', { taskId: first.id }), { historyLength: 1 })));
    expect(trimmed.history).toHaveLength(1);
  });

  it("a known contextId without taskId continues the context's open task; after cancel it starts a new one", async () => {
    const client = await v1Client(open.url);
    const first = taskOf(await client.sendMessage(send(userText('Write about crabs'))));
    const again = taskOf(await client.sendMessage(send(userText('and lobsters?', { contextId: first.contextId }))));
    expect(again.id).toBe(first.id);
    expect(again.contextId).toBe(first.contextId);
    expect(again.metadata?.['taskState']).toBe('resumed');
    const canceled = await client.cancelTask({ tenant: '', id: first.id, metadata: undefined });
    expect(canceled.status?.state).toBe(TaskState.TASK_STATE_CANCELED);
    const next = taskOf(await client.sendMessage(send(userText('new topic: whales', { contextId: first.contextId }))));
    expect(next.id).not.toBe(first.id);
    expect(next.contextId).toBe(first.contextId);
    expect(next.metadata?.['taskState']).toBe('fresh');
    // A context the client names itself works the same way.
    const own = taskOf(await client.sendMessage(send(userText('Write about herons', { contextId: 'my-context-1' }))));
    expect(own.contextId).toBe('my-context-1');
    expect(taskOf(await client.sendMessage(send(userText('again', { contextId: 'my-context-1' })))).id).toBe(own.id);
  });

  it('cancel: canceled, then TaskNotCancelable; a message to the ended task is UnsupportedOperation; an unknown task is TaskNotFound', async () => {
    const client = await v1Client(open.url);
    const task = taskOf(await client.sendMessage(send(userText('Write about owls'))));
    expect((await client.cancelTask({ tenant: '', id: task.id, metadata: undefined })).status?.state).toBe(TaskState.TASK_STATE_CANCELED);
    await expect(client.cancelTask({ tenant: '', id: task.id, metadata: undefined })).rejects.toThrow(/not cancelable/i);
    await expect(client.sendMessage(send(userText('still there?', { taskId: task.id })))).rejects.toThrow(/terminal state/);
    await expect(client.getTask({ tenant: '', id: 'no-such-task' })).rejects.toThrow('Task not found: no-such-task');
  });

  it('speaks HTTP+JSON (REST) the same way', async () => {
    const client = await v1Client(open.url, { rest: true });
    const task = taskOf(await client.sendMessage(send(userText('Write about moles'))));
    expect(task.status?.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED);
    expect((await client.getTask({ tenant: '', id: task.id })).history).toHaveLength(4);
    const events = await collect(client.sendMessageStream(send(userText('again', { taskId: task.id }))));
    expect(events[0]?.payload?.$case).toBe('task');
    expect(events.at(-1)?.payload?.$case).toBe('statusUpdate');
    expect((await client.cancelTask({ tenant: '', id: task.id, metadata: undefined })).status?.state).toBe(TaskState.TASK_STATE_CANCELED);
    await expect(client.getTask({ tenant: '', id: 'no-such-task' })).rejects.toThrow(/Task not found/);
  });

  it("a messageId reused in another task is answered there too (no hang, no other task's answer)", async () => {
    const client = await v1Client(open.url);
    const first = taskOf(await client.sendMessage(send(userText('Write about voles', { messageId: 'reused-id-1' }))));
    const second = taskOf(await client.sendMessage(send(userText('Write about shrews', { messageId: 'reused-id-1' }))));
    expect(second.id).not.toBe(first.id);
    expect(textOf(second.status?.message?.parts)).toContain('Write about shrews');
  });
});

describe('the A2A TCK system under test (examples/tck/team.ts)', () => {
  let tck: Mesh;
  let sut: Gateway;
  beforeAll(async () => {
    tck = await startEmbedded(tckTeam, silentLogger());
    sut = await startGateway({ clients: { demo: tck.client }, cardVersionWithoutHeader: '1.0' });
  });
  afterAll(async () => {
    await sut?.close();
    await tck?.stop();
  });

  const rest = (path: string, init: { body?: unknown; accept?: string } = {}) =>
    fetch(`${sut.url}/rest${path}`, {
      method: init.body === undefined ? 'GET' : 'POST',
      headers: {
        'a2a-version': '1.0',
        ...(init.body === undefined ? {} : { 'content-type': 'application/json' }),
        ...(init.accept ? { accept: init.accept } : {}),
      },
      ...(init.body === undefined ? {} : { body: JSON.stringify(init.body) }),
    });
  const restSend = (messageId: string, accept?: string) =>
    rest('/message:send', { body: { message: { role: 'ROLE_USER', parts: [{ text: 'TCK artifact test' }], messageId } }, ...(accept ? { accept } : {}) });

  it("an agent's Task answer brings its artifacts (text, file bytes, file URL, data) into the A2A Task, kept by the node", async () => {
    const client = await v1Client(sut.url);
    const expected: Record<string, unknown> = {
      'tck-artifact-text': { $case: 'text', value: 'Generated text content' },
      'tck-artifact-file': { $case: 'raw', value: new Uint8Array(Buffer.from('tck')) },
      'tck-artifact-file-url': { $case: 'url', value: 'https://example.com/output.txt' },
      'tck-artifact-data': { $case: 'data', value: { key: 'value', count: 42 } },
    };
    for (const [prefix, content] of Object.entries(expected)) {
      const task = taskOf(await client.sendMessage(send(userText('TCK artifact test', { messageId: `${prefix}-${crypto.randomUUID()}` }))));
      expect(task.status?.state, prefix).toBe(TaskState.TASK_STATE_COMPLETED);
      expect(task.artifacts, prefix).toHaveLength(1);
      const part = task.artifacts[0]!.parts[0]!;
      expect({ ...part.content, value: part.content?.value instanceof Uint8Array ? new Uint8Array(part.content.value) : part.content?.value }, prefix).toEqual(
        content,
      );
      if (prefix.startsWith('tck-artifact-file')) expect([part.filename, part.mediaType], prefix).toEqual(['output.txt', 'text/plain']);
      expect(task.artifacts[0]!.metadata?.['troupe/agent']).toBe('tck');
      // What the node stored, read back through another transport.
      const stored = (await (await rest(`/tasks/${task.id}`)).json()) as { artifacts: Array<{ artifactId: string; parts: unknown[] }> };
      expect(stored.artifacts.map((a) => a.artifactId)).toEqual([task.artifacts[0]!.artifactId]);
      expect(stored.artifacts[0]!.parts).toHaveLength(1);
    }
  });

  it('an answer marked troupe/response "message" is a bare Message to a blocking send (JSON-RPC and REST); a stream still gets the Task', async () => {
    for (const rest of [false, true]) {
      const client = await v1Client(sut.url, { rest });
      const result = await client.sendMessage(send(userText('TCK message response', { messageId: `tck-message-response-${crypto.randomUUID()}` })));
      expect('status' in result, `rest=${rest}: ${JSON.stringify(result)}`).toBe(false);
      const message = result as { messageId: string; taskId: string; parts: Array<{ content?: { value?: unknown } }>; metadata?: Record<string, unknown> };
      expect(message.parts[0]?.content?.value).toBe('Direct message response');
      expect(Object.keys(message.metadata ?? {})).toEqual(expect.arrayContaining(RESULT_KEYS));
      // The turn ran on a thread all the same: the Message names its task, which waits for the next message.
      const task = await client.getTask({ id: message.taskId, historyLength: undefined, tenant: '' });
      expect(task.status?.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED);
      expect(task.status?.message?.messageId).toBe(message.messageId);
      // The client keeps the conversation by its contextId alone.
      const next = taskOf(
        await client.sendMessage(send(userText('and then', { messageId: `tck-complete-task-${crypto.randomUUID()}`, contextId: task.contextId }))),
      );
      expect([next.id, next.status?.state]).toEqual([message.taskId, TaskState.TASK_STATE_COMPLETED]);
    }
    const client = await v1Client(sut.url);
    const events = await collect(
      client.sendMessageStream(send(userText('TCK message response', { messageId: `tck-message-response-${crypto.randomUUID()}` }))),
    );
    expect(events[0]?.payload?.$case).toBe('task');
    expect(events.at(-1)?.payload?.$case).toBe('statusUpdate');
  });

  it("streamed: the Task answer's artifact arrives as an artifact update before the final status", async () => {
    const client = await v1Client(sut.url, { rest: true });
    const events = await collect(client.sendMessageStream(send(userText('TCK stream', { messageId: `tck-stream-artifact-file-${crypto.randomUUID()}` }))));
    const cases = events.map((e) => e.payload?.$case);
    expect(cases[0]).toBe('task');
    expect(cases.at(-1)).toBe('statusUpdate');
    const updates = events.flatMap((e) => (e.payload?.$case === 'artifactUpdate' ? [e.payload.value] : []));
    expect(updates).toHaveLength(1);
    expect(updates[0]!.lastChunk).toBe(true);
    expect(updates[0]!.artifact?.parts[0]?.filename).toBe('output.txt');
  });

  it('REST answers are application/json (A2A 1.0 §11.1), errors too; application/a2a+json to a client that asks for it', async () => {
    const plain = await restSend(`tck-complete-task-${crypto.randomUUID()}`);
    expect(plain.status).toBe(200);
    expect(plain.headers.get('content-type')).toMatch(/^application\/json(;|$)/);
    const id = ((await plain.json()) as { task: { id: string } }).task.id;
    const missing = await rest('/tasks/no-such-task', { accept: 'application/json' });
    expect(missing.status).toBe(404);
    expect(missing.headers.get('content-type')).toMatch(/^application\/json(;|$)/);
    expect(((await missing.json()) as { error: { details: Array<{ reason: string }> } }).error.details[0]?.reason).toBe('TASK_NOT_FOUND');
    // The SDK's client asks for `application/a2a+json, application/json`: it gets the registered type.
    const asked = await rest(`/tasks/${id}`, { accept: 'application/a2a+json, application/json' });
    expect(asked.headers.get('content-type')).toMatch(/^application\/a2a\+json(;|$)/);
    expect(((await asked.json()) as { id: string }).id).toBe(id);
    // Preferring application/json by q-value gets application/json.
    const prefers = await rest(`/tasks/${id}`, { accept: 'application/a2a+json;q=0.5, application/json' });
    expect(prefers.headers.get('content-type')).toMatch(/^application\/json(;|$)/);
    // SSE is left alone.
    const stream = await rest('/message:stream', {
      body: { message: { role: 'ROLE_USER', parts: [{ text: 'x' }], messageId: `tck-complete-task-${crypto.randomUUID()}` } },
    });
    expect(stream.headers.get('content-type')).toMatch(/^text\/event-stream/);
    await stream.text();
  });

  it("a task's status timestamp is when its status changed: every read of an unchanged task says the same", async () => {
    const client = await v1Client(sut.url);
    const task = taskOf(await client.sendMessage(send(userText('wait for me', { messageId: `tck-input-required-${crypto.randomUUID()}` }))));
    expect(task.status?.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED);
    const at = task.status!.timestamp!;
    // Let the clock pass the status time, so a read that stamped "now" could not match it.
    await waitFor(() => Date.now() > Date.parse(at) + 1, 'the clock to move past the status timestamp');
    const [a, b] = await Promise.all([client.getTask({ tenant: '', id: task.id }), client.getTask({ tenant: '', id: task.id })]);
    expect(a.status?.timestamp).toBe(at);
    expect(b.status?.timestamp).toBe(at);
    // Two subscribers of the same task get the same events.
    const first = async () => {
      const events = client.resubscribeTask({ tenant: '', id: task.id })[Symbol.asyncIterator]();
      const event = await events.next();
      await events.return?.(undefined);
      return event.value;
    };
    const [s1, s2] = await Promise.all([first(), first()]);
    expect(JSON.stringify(s1)).toBe(JSON.stringify(s2));
    // A new status gets a new time.
    const done = taskOf(await client.sendMessage(send(userText('done', { taskId: task.id, messageId: `tck-complete-task-${crypto.randomUUID()}` }))));
    expect(done.status?.state).toBe(TaskState.TASK_STATE_COMPLETED);
    expect(Date.parse(done.status!.timestamp!)).toBeGreaterThan(Date.parse(at));
    expect((await client.getTask({ tenant: '', id: task.id })).status?.timestamp).toBe(done.status!.timestamp);
  });
});

describe('A2A 0.3: the SDK 0.3 client', () => {
  it('resolves the 0.3 card and sends, streams, gets and cancels over JSON-RPC', async () => {
    const client = await v03Client(open.url);
    const sent = await client.sendMessage({ message: v03Text('Write about otters') });
    if (sent.kind !== 'task') throw new Error(`expected a task, got ${sent.kind}`);
    expect(sent.status.state).toBe('input-required');
    expect(sent.metadata).toMatchObject({ taskState: 'fresh', agentsUsed: ['triage', 'researcher', 'writer'] });
    const kinds: string[] = [];
    for await (const event of client.sendMessageStream({ message: v03Text('again', { taskId: sent.id }) })) kinds.push(event.kind);
    expect(kinds[0]).toBe('task');
    expect(kinds).toContain('artifact-update');
    expect(kinds.at(-1)).toBe('status-update');
    const got = await client.getTask({ id: sent.id });
    expect(got.history?.length).toBeGreaterThanOrEqual(8);
    expect((await client.cancelTask({ id: sent.id })).status.state).toBe('canceled');
    await expect(client.cancelTask({ id: sent.id })).rejects.toThrow(/cannot be canceled|not cancelable/i);
    await expect(client.getTask({ id: 'no-such-task' })).rejects.toThrow(/Task not found/);
  });

  it('sends over 0.3 REST', async () => {
    const client = await v03Client(open.url, { rest: true });
    const sent = await client.sendMessage({ message: v03Text('Write about newts') });
    if (sent.kind !== 'task') throw new Error(`expected a task, got ${sent.kind}`);
    expect(sent.status.state).toBe('input-required');
    expect((await client.getTask({ id: sent.id })).id).toBe(sent.id);
  });
});

describe('resubscribe', () => {
  let slow: Mesh;
  let gw: Gateway;
  beforeAll(async () => {
    slow = await startEmbedded(slowTeam, silentLogger());
    gw = await startGateway({ clients: { demo: slow.client }, turnTimeoutMs: 20_000 });
  });
  afterAll(async () => {
    openGate();
    await gw?.close();
    await slow?.stop();
  });

  it("a running task: the Task, then the turn's events from the mesh until its final status (1.0 and 0.3)", async () => {
    closeGate();
    const client = await v1Client(gw.url);
    const stream = client.sendMessageStream(send(userText('take your time')))[Symbol.asyncIterator]();
    const first = await stream.next();
    if (first.value?.payload?.$case !== 'task') throw new Error('the first event is not the Task');
    const taskId = first.value.payload.value.id;
    // Wait until the turn is under way (the slow agent streamed its first word).
    for (;;) {
      const next = await stream.next();
      if (next.done) throw new Error('stream ended early');
      if (next.value.payload?.$case === 'artifactUpdate') break;
    }
    const resubscribed = client.resubscribeTask({ tenant: '', id: taskId })[Symbol.asyncIterator]();
    const snapshot = await resubscribed.next();
    expect(snapshot.value?.payload?.$case).toBe('task');
    const legacy = await v03Client(gw.url);
    const legacyEvents: string[] = [];
    const legacyDone = (async () => {
      for await (const event of legacy.resubscribeTask({ id: taskId })) legacyEvents.push(event.kind);
    })();
    await waitFor(() => legacyEvents.length > 0, 'the 0.3 resubscriber to get the task');
    openGate();
    const rest: string[] = [];
    // The turn's final status arrives on both; the task waits for input, so the subscriptions go on.
    for (;;) {
      const next = await resubscribed.next();
      if (next.done) break;
      rest.push(next.value.payload?.$case ?? 'none');
      if (next.value.payload?.$case === 'statusUpdate' && next.value.payload.value.status?.state === TaskState.TASK_STATE_INPUT_REQUIRED) break;
    }
    expect(rest.at(-1)).toBe('statusUpdate');
    await waitFor(() => legacyEvents.includes('status-update'), 'the 0.3 resubscriber to get the final status');
    await resubscribed.return?.(undefined);
    expect(legacyEvents[0]).toBe('task');
    for (;;) if ((await stream.next()).done) break;
    // A task waiting for input: followed across turns until it ends (here: canceled). An unknown one: not found.
    const idle = client.resubscribeTask({ tenant: '', id: taskId })[Symbol.asyncIterator]();
    expect((await idle.next()).value?.payload?.$case).toBe('task');
    await client.cancelTask({ tenant: '', id: taskId, metadata: undefined });
    const tail: number[] = [];
    for (;;) {
      const next = await idle.next();
      if (next.done) break;
      if (next.value.payload?.$case === 'statusUpdate') tail.push(next.value.payload.value.status?.state ?? -1);
    }
    expect(tail.at(-1)).toBe(TaskState.TASK_STATE_CANCELED);
    await legacyDone;
    expect(legacyEvents.at(-1)).toBe('status-update');
    await expect(collect(client.resubscribeTask({ tenant: '', id: 'no-such-task' }))).rejects.toThrow(/Task not found/);
  });
});

describe('errors at the edge', () => {
  it('method names that are Object.prototype members are -32601 (both versions), not -32603', async () => {
    for (const method of ['constructor', '__proto__', 'toString', 'hasOwnProperty', 'valueOf']) {
      for (const version of [undefined, '1.0']) {
        const reply = await rpc(open.url, method, {}, version ? { version } : {});
        expect(reply.status).toBe(200);
        expect(reply.body.error?.code, `${method} ${version ?? '0.3'}`).toBe(-32601);
      }
    }
  });

  it('bad JSON is -32700, a batch or a non-request -32600, deep nesting refused, bad ids -32602', async () => {
    const bad = await fetch(`${open.url}/`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{"jsonrpc": "2.0", "id": 1, "method": ',
    });
    expect(bad.status).toBe(200);
    expect(((await bad.json()) as { error: { code: number } }).error.code).toBe(-32700);
    const batch = await fetch(`${open.url}/`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify([{ jsonrpc: '2.0', id: 1, method: 'tasks/get' }]),
    });
    expect(((await batch.json()) as { error: { code: number } }).error.code).toBe(-32600);
    const deep = await fetch(`${open.url}/`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: `${'['.repeat(5_000)}${']'.repeat(5_000)}`,
    });
    expect(deep.status).toBe(400);
    expect(((await deep.json()) as { error: { code: number } }).error.code).toBe(-32600);
    for (const id of ['a.b', 'x'.repeat(200), '']) {
      const reply = await rpc(open.url, 'tasks/get', { id });
      expect(reply.body.error?.code, JSON.stringify(id)).toBe(-32602);
    }
    const v1 = await rpc(open.url, 'GetTask', { id: 'a b' }, { version: '1.0' });
    expect(v1.body.error?.code).toBe(-32602);
  });

  it('params that fail the message rules are -32602 naming the problem', async () => {
    const noParts = await rpc(open.url, 'message/send', { message: { kind: 'message', role: 'user', messageId: 'p-1', parts: [] } });
    expect(noParts.body.error?.code).toBe(-32602);
    expect(noParts.body.error?.message).toContain('at least one part');
    const agentRole = await rpc(open.url, 'message/send', {
      message: { kind: 'message', role: 'agent', messageId: 'p-2', parts: [{ kind: 'text', text: 'hi' }] },
    });
    expect(agentRole.body.error?.message).toContain('role');
    const nested = { a: {} as Record<string, unknown> };
    let cursor = nested.a;
    for (let i = 0; i < 35; i++) cursor = cursor.a = {} as Record<string, unknown>;
    const deepMeta = await rpc(open.url, 'message/send', {
      message: { kind: 'message', role: 'user', messageId: 'p-3', parts: [{ kind: 'text', text: 'hi' }], metadata: nested },
    });
    expect(deepMeta.body.error?.code).toBe(-32602);
    const badId = await rpc(open.url, 'message/send', {
      message: { kind: 'message', role: 'user', messageId: 'has space', parts: [{ kind: 'text', text: 'hi' }] },
    });
    expect(badId.body.error?.code).toBe(-32602);
  });

  it('odd paths are 404 (// included), other methods on / are 405, and the gateway keeps serving', async () => {
    for (const path of ['//', '/nope', '/%2e%2e/etc', '///.well-known/agent-card.json']) {
      const res = await fetch(`${open.url}${path}`, { method: 'POST', body: '{}' });
      expect(res.status, path).toBe(404);
    }
    const get = await fetch(`${open.url}/`);
    expect(get.status).toBe(405);
    expect(get.headers.get('allow')).toBe('POST');
  });

  it('a body over the cap is 413 with PAYLOAD_TOO_LARGE, and the gateway keeps serving', async () => {
    const big = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'message/send', params: { message: v03Text('x'.repeat(1024 * 1024 + 1)) } });
    const res = await fetch(`${open.url}/`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: big });
    expect(res.status).toBe(413);
    expect((await res.json()) as unknown).toMatchObject({ error: { data: { code: 'PAYLOAD_TOO_LARGE' } } });
    // Under the HTTP cap but over the mesh's message cap: a typed -32602, not a hang.
    const tooBigForMesh = await rpc(open.url, 'message/send', { message: v03Text('y'.repeat(300 * 1024)) });
    expect(tooBigForMesh.body.error).toMatchObject({ code: -32602, data: { code: 'PAYLOAD_TOO_LARGE' } });
    const client = await v1Client(open.url);
    expect(taskOf(await client.sendMessage(send(userText('small again')))).status?.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED);
  });
});

describe('slow clients', () => {
  /** Writes `head` (and nothing after it) on a raw connection; resolves with what the gateway answers before it closes. */
  const rawExchange = (url: string, head: string) =>
    new Promise<string>((resolve, reject) => {
      const { hostname, port } = new URL(url);
      const socket = netConnect(Number(port), hostname, () => socket.write(head));
      let answer = '';
      socket.on('data', (chunk: Buffer) => (answer += chunk.toString('utf8')));
      socket.on('close', () => resolve(answer));
      socket.on('error', reject);
    });

  it('a body declared over the cap is refused at once with 413, before any of it arrives (the read timeout far away)', async () => {
    const gw = await startGateway({ clients: { demo: demo.client }, readTimeoutMs: 600_000 });
    try {
      const { hostname, port } = new URL(gw.url);
      const answer = await new Promise<string>((resolve, reject) => {
        const socket = netConnect(Number(port), hostname, () =>
          socket.write('POST / HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 10000000\r\n\r\n{"jsonrpc"'),
        );
        let text = '';
        socket.on('data', (chunk: Buffer) => {
          text += chunk.toString('utf8');
          // The status line is the event: 10 bytes of 10,000,000 sent, and the answer is already here.
          if (text.includes('\r\n\r\n')) {
            socket.destroy();
            resolve(text);
          }
        });
        socket.on('error', reject);
      });
      expect(answer).toMatch(/^HTTP\/1\.1 413 /);
    } finally {
      await gw.close();
    }
  });

  it('a body that stops arriving gets 408 once the read timeout passes, and its connection is closed', async () => {
    const gw = await startGateway({ clients: { demo: demo.client }, readTimeoutMs: 300 });
    try {
      const answer = await rawExchange(gw.url, 'POST / HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{"jsonrpc"');
      expect(answer).toMatch(/^HTTP\/1\.1 408 /);
      expect(answer).toContain('did not arrive within');
      // Headers that never end: the connection is closed too (Node's own header timeout).
      const headers = await rawExchange(gw.url, 'POST / HTTP/1.1\r\nhost: x\r\n');
      expect(headers).toMatch(/^(HTTP\/1\.1 408 |$)/);
      // And the gateway keeps serving.
      const client = await v1Client(gw.url);
      expect(taskOf(await client.sendMessage(send(userText('still here')))).status?.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED);
    } finally {
      await gw.close();
    }
  });
});

describe('tokens: tenants and users', () => {
  it('a missing or unknown token is 401 with a JSON-RPC error and WWW-Authenticate', async () => {
    for (const token of [undefined, 'wrong-token']) {
      const reply = await rpc(guarded.url, 'tasks/get', { id: 'x' }, token ? { token } : {});
      expect(reply.status).toBe(401);
      expect(reply.headers.get('www-authenticate')).toBe('Bearer');
      expect(reply.body.error?.message).toContain('Authorization: Bearer');
    }
  });

  it("user bob cannot read, continue, cancel or follow alice's task: the same answer as for a task that does not exist", async () => {
    const alice = await v1Client(guarded.url, { token: ALICE });
    const bob = await v1Client(guarded.url, { token: BOB });
    const task = taskOf(await alice.sendMessage(send(userText('Write about foxes'))));
    const stored = await demo.node.threads.store.get('demo', task.id);
    expect(stored?.record.task.metadata?.['troupe/owner']).toBe('local/alice');

    const messageOf = async (p: Promise<unknown>) => {
      try {
        await p;
      } catch (err) {
        return (err as Error).message;
      }
      throw new Error('expected an error');
    };
    const missing = await messageOf(bob.getTask({ tenant: '', id: 't-never-existed' }));
    const foreign = await messageOf(bob.getTask({ tenant: '', id: task.id }));
    expect(foreign.replace(task.id, 'ID')).toBe(missing.replace('t-never-existed', 'ID'));
    expect(foreign).toMatch(/Task not found/);
    expect(await messageOf(bob.cancelTask({ tenant: '', id: task.id, metadata: undefined }))).toMatch(/Task not found/);
    expect(await messageOf(bob.sendMessage(send(userText('mine now', { taskId: task.id }))))).toMatch(/Task not found/);
    expect(await messageOf(collect(bob.resubscribeTask({ tenant: '', id: task.id })))).toMatch(/Task not found/);
    // Raw JSON-RPC: the error objects are identical but for the id.
    const rawMissing = await rpc(guarded.url, 'GetTask', { id: 't-never-existed' }, { token: BOB, version: '1.0' });
    const rawForeign = await rpc(guarded.url, 'GetTask', { id: task.id }, { token: BOB, version: '1.0' });
    expect(rawForeign.body.error?.code).toBe(-32001);
    expect(JSON.stringify(rawForeign.body.error).replace(task.id, 'ID')).toBe(JSON.stringify(rawMissing.body.error).replace('t-never-existed', 'ID'));
    // Bob's own context with the same contextId is his own task, not alice's.
    const bobs = taskOf(await bob.sendMessage(send(userText('Write about badgers', { contextId: task.contextId }))));
    expect(bobs.id).not.toBe(task.id);
    // Nothing happened to alice's task.
    expect((await alice.getTask({ tenant: '', id: task.id })).history).toHaveLength(4);
  });

  it('the older token form {"<token>": "<tenant>"} still works and reaches its own tenant', async () => {
    const client = await v1Client(guarded.url, { token: ACME_LEGACY });
    const task = taskOf(await client.sendMessage(send(userText('Write about lynx'))));
    expect(await acme.node.threads.store.get('acme', task.id)).toBeDefined();
    expect(await demo.node.threads.store.get('demo', task.id)).toBeUndefined();
    const alice = await v1Client(guarded.url, { token: ALICE });
    await expect(alice.getTask({ tenant: '', id: task.id })).rejects.toThrow(/Task not found/);
  });

  it('refuses a configuration that could not serve', async () => {
    await expect(startGateway({ clients: { demo: demo.client }, tokens: { t: 'acme' } })).rejects.toThrow(/no client for it/);
    await expect(startGateway({ clients: { acme: demo.client } })).rejects.toThrow(/talks to tenant "demo"/);
    await expect(
      startGateway({
        clients: { demo: demo.client },
        tokens: { [ALICE]: { tenant: 'demo', user: 'alice' } },
        diagnostics: { token: ALICE, client: demo.client },
      }),
    ).rejects.toThrow(/also a user token/);
  });
});

describe('rate limit', () => {
  it('per token: over the burst is 429 with Retry-After; another token is not affected', async () => {
    const gw = await startGateway({
      clients: { demo: demo.client },
      tokens: { [ALICE]: { tenant: 'demo', user: 'alice' }, [BOB]: { tenant: 'demo', user: 'bob' } },
      rateLimit: { perSecond: 0.001, burst: 2 },
    });
    try {
      const statuses: number[] = [];
      let retryAfter: string | null = null;
      for (let i = 0; i < 3; i++) {
        const reply = await rpc(gw.url, 'tasks/get', { id: 'x' }, { token: ALICE });
        statuses.push(reply.status);
        if (reply.status === 429) retryAfter = reply.headers.get('retry-after');
      }
      expect(statuses).toEqual([200, 200, 429]);
      expect(Number(retryAfter)).toBeGreaterThan(0);
      expect((await rpc(gw.url, 'tasks/get', { id: 'x' }, { token: BOB })).status).toBe(200);
    } finally {
      await gw.close();
    }
  });
});

describe('HTTPS', () => {
  let certs: TestCertificates;
  beforeAll(async () => {
    certs = await testCertificates();
  });
  afterAll(() => certs?.cleanup());

  function httpsJson(url: string, body?: string, headers: Record<string, string> = {}): Promise<{ status: number; json: unknown }> {
    return new Promise((resolve, reject) => {
      const req = httpsRequest(
        url,
        { method: body ? 'POST' : 'GET', ca: certs.ca, headers: { 'content-type': 'application/json', ...headers } },
        (res: IncomingMessage) => {
          let text = '';
          res.setEncoding('utf8');
          res.on('data', (d: string) => (text += d));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, json: JSON.parse(text) }));
        },
      );
      req.on('error', reject);
      req.end(body);
    });
  }

  it('serves the card and JSON-RPC over TLS with the given certificate; the card names https URLs', async () => {
    const gw = await startGateway({ clients: { demo: demo.client }, host: '127.0.0.1', tls: { cert: certs.cert, key: certs.key } });
    try {
      expect(gw.url).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/);
      const card = await httpsJson(`${gw.url}/.well-known/agent-card.json`);
      expect(card.json).toMatchObject({ url: `${gw.url}/` });
      const sent = await httpsJson(
        `${gw.url}/`,
        JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'message/send', params: { message: v03Text('Write about terns') } }),
      );
      expect(sent.json).toMatchObject({ result: { kind: 'task', status: { state: 'input-required' } } });
      // A client that does not trust the CA is refused by TLS itself.
      await expect(fetch(`${gw.url}/.well-known/agent-card.json`)).rejects.toThrow();
    } finally {
      await gw.close();
    }
  });
});

describe('diagnostics', () => {
  const diag = (path: string, token?: string, method = 'GET') =>
    fetch(`${guarded.diagnosticsUrl}${path}`, { method, ...(token ? { headers: { authorization: `Bearer ${token}` } } : {}) });

  it('need the operator token: none, a user token or a wrong one is 401', async () => {
    for (const token of [undefined, ALICE, 'operator-token-wrong-00']) expect((await diag('/health', token)).status).toBe(401);
    expect((await diag('/health', OPERATOR)).status).toBe(200);
    // And the operator token is no user token.
    expect((await rpc(guarded.url, 'tasks/get', { id: 'x' }, { token: OPERATOR })).status).toBe(401);
  });

  it('readiness, the redacted task view, the paginated routing log and rehydrate', async () => {
    const alice = await v1Client(guarded.url, { token: ALICE });
    const task = taskOf(await alice.sendMessage(send(userText('Write to me at someone@example.com about tides'))));
    const ready = (await (await diag('/ready', OPERATOR)).json()) as { ready: boolean; checks: Record<string, { ok: boolean; seen?: string[] }> };
    expect(ready.ready).toBe(true);
    expect(ready.checks.agents?.seen).toEqual(expect.arrayContaining(['triage', 'researcher', 'writer']));
    const view = (await (await diag(`/threads/${task.id}`, OPERATOR)).json()) as { record: { task: { history: unknown[] } } };
    expect(JSON.stringify(view)).not.toContain('someone@example.com');
    expect(view.record.task.history).toHaveLength(4);
    expect((await diag('/threads/a.b', OPERATOR)).status).toBe(400);
    expect((await diag('/threads/t-never-existed', OPERATOR)).status).toBe(404);
    const pages: Array<{ threads: Array<{ threadId: string; steps: unknown[] }>; nextCursor?: string }> = [];
    let cursor: string | undefined;
    do {
      const page = (await (await diag(`/routes?limit=2${cursor ? `&cursor=${cursor}` : ''}`, OPERATOR)).json()) as (typeof pages)[number];
      pages.push(page);
      cursor = page.nextCursor;
    } while (cursor && pages.length < 100);
    const seen = pages.flatMap((p) => p.threads.map((t) => t.threadId));
    expect(new Set(seen).size).toBe(seen.length);
    expect(seen).toContain(task.id);
    expect(pages.every((p) => p.threads.length <= 2)).toBe(true);
    expect(pages.flatMap((p) => p.threads).find((t) => t.threadId === task.id)?.steps).toHaveLength(3);
    expect((await diag(`/routes?cursor=not-a-cursor`, OPERATOR)).status).toBe(400);
    const rehydrated = (await (await diag(`/threads/${task.id}/rehydrate`, OPERATOR, 'POST')).json()) as { state: string };
    expect(rehydrated.state).toBe('input-required');
    // Erased: its record and its actor; then it is not found, by the operator or by its user.
    const deleted = await diag(`/threads/${task.id}`, OPERATOR, 'DELETE');
    expect(deleted.status).toBe(200);
    expect(await deleted.json()).toMatchObject({ threadId: task.id, deleted: true, deadLetters: 0 });
    expect((await diag(`/threads/${task.id}`, OPERATOR)).status).toBe(404);
    expect((await diag(`/threads/${task.id}`, OPERATOR, 'DELETE')).status).toBe(404);
    await expect(alice.getTask({ tenant: '', id: task.id })).rejects.toThrow(/Task not found/);
    expect((await diag(`/threads/${task.id}`, ALICE, 'DELETE')).status).toBe(401);
  });
});

describe('push notifications', () => {
  let receiver: Server;
  let receiverUrl: string;
  const received: Array<{ body: Record<string, unknown>; token: string | undefined }> = [];
  let failuresLeft = 0;
  let attempts = 0;

  beforeAll(async () => {
    receiver = createServer((req, res) => {
      let text = '';
      req.on('data', (d: Buffer) => (text += d.toString()));
      req.on('end', () => {
        attempts++;
        if (failuresLeft > 0) {
          failuresLeft--;
          res.writeHead(503).end();
          return;
        }
        received.push({ body: JSON.parse(text) as Record<string, unknown>, token: req.headers['x-a2a-notification-token'] as string | undefined });
        res.writeHead(200).end();
      });
    });
    await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
    receiverUrl = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`;
  });
  afterAll(() => new Promise<void>((resolve) => receiver.close(() => resolve())));

  it('set/get/list/delete configs; each event of a turn is POSTed to the receiver, retried when it fails', async () => {
    const client = await v1Client(open.url);
    const task = taskOf(await client.sendMessage(send(userText('Write about geese'))));
    const config = await client.createTaskPushNotificationConfig({
      tenant: '',
      id: 'hook-1',
      taskId: task.id,
      url: receiverUrl,
      token: 'secret-hook-token',
      authentication: undefined,
    });
    expect(config).toMatchObject({ id: 'hook-1', taskId: task.id, url: receiverUrl });
    expect(await client.getTaskPushNotificationConfig({ tenant: '', taskId: task.id, id: 'hook-1' })).toMatchObject({ url: receiverUrl });
    expect((await client.listTaskPushNotificationConfig({ tenant: '', taskId: task.id, pageSize: 0, pageToken: '' })).configs).toHaveLength(1);
    failuresLeft = 1;
    const attemptsBefore = attempts;
    await client.sendMessage(send(userText('and ducks', { taskId: task.id })));
    const isFinal = (body: Record<string, unknown>) => 'statusUpdate' in body && JSON.stringify(body).includes('TASK_STATE_INPUT_REQUIRED');
    await waitFor(() => received.some((r) => isFinal(r.body)), 'the final status at the receiver');
    // The first POST got a 503 and was tried again: one attempt more than deliveries.
    expect(attempts - attemptsBefore).toBe(received.length + 1);
    const kinds = received.map((r) => Object.keys(r.body)[0]);
    expect(kinds[0]).toBe('task');
    expect(kinds.at(-1)).toBe('statusUpdate');
    expect(received.every((r) => r.token === 'secret-hook-token')).toBe(true);
    expect(received.some((r) => JSON.stringify(r.body).includes('agentsUsed'))).toBe(true);
    await client.deleteTaskPushNotificationConfig({ tenant: '', taskId: task.id, id: 'hook-1' });
    expect((await client.listTaskPushNotificationConfig({ tenant: '', taskId: task.id, pageSize: 0, pageToken: '' })).configs).toHaveLength(0);
    // A config for someone else's task, or a bad URL, is refused.
    await expect(
      client.createTaskPushNotificationConfig({ tenant: '', id: 'h', taskId: 'no-such-task', url: receiverUrl, token: '', authentication: undefined }),
    ).rejects.toThrow(/Task not found/);
    await expect(
      client.createTaskPushNotificationConfig({ tenant: '', id: 'h', taskId: task.id, url: 'file:///etc/passwd', token: '', authentication: undefined }),
    ).rejects.toThrow(/http or https/);
  });

  it("a config set without an id is the task's own: a 0.3 client gets it back with the task id alone", async () => {
    const sent = await rpc(open.url, 'message/send', { message: v03Text('Write about swans') });
    const taskId = (sent.body.result as { id: string }).id;
    const set = await rpc(open.url, 'tasks/pushNotificationConfig/set', { taskId, pushNotificationConfig: { url: receiverUrl } });
    expect(set.body.result).toMatchObject({ taskId, pushNotificationConfig: { id: taskId, url: receiverUrl } });
    const got = await rpc(open.url, 'tasks/pushNotificationConfig/get', { id: taskId });
    expect(got.body.result).toMatchObject({ taskId, pushNotificationConfig: { id: taskId, url: receiverUrl } });
    expect((await rpc(open.url, 'tasks/pushNotificationConfig/get', { id: taskId, pushNotificationConfigId: taskId })).body.result).toMatchObject({ taskId });
    // A 0.3 client that asks for "default" (as 0.3's Python reference server allows) gets the task's one config …
    expect((await rpc(open.url, 'tasks/pushNotificationConfig/get', { id: taskId, pushNotificationConfigId: 'default' })).body.result).toMatchObject({
      taskId,
      pushNotificationConfig: { id: taskId, url: receiverUrl },
    });
    // … but not once the task has two, and a task with none is still not found.
    expect(
      (await rpc(open.url, 'tasks/pushNotificationConfig/set', { taskId, pushNotificationConfig: { id: 'second', url: receiverUrl } })).body.result,
    ).toMatchObject({ pushNotificationConfig: { id: 'second' } });
    expect((await rpc(open.url, 'tasks/pushNotificationConfig/get', { id: taskId, pushNotificationConfigId: 'other' })).body.error).toMatchObject({
      code: -32001,
    });
    expect((await rpc(open.url, 'tasks/pushNotificationConfig/delete', { id: taskId, pushNotificationConfigId: 'second' })).body.result).toBeNull();
    const bare = (await rpc(open.url, 'message/send', { message: v03Text('Write about geese') })).body.result as { id: string };
    expect((await rpc(open.url, 'tasks/pushNotificationConfig/get', { id: bare.id, pushNotificationConfigId: 'default' })).body.error).toMatchObject({
      code: -32001,
    });
    // The same in A2A 1.0, where a get is exact.
    const client = await v1Client(open.url);
    const v1 = await client.createTaskPushNotificationConfig({ tenant: '', id: '', taskId, url: receiverUrl, token: '', authentication: undefined });
    expect(v1.id).toBe(taskId);
    expect(await client.getTaskPushNotificationConfig({ tenant: '', taskId, id: '' })).toMatchObject({ id: taskId, url: receiverUrl });
    await expect(client.getTaskPushNotificationConfig({ tenant: '', taskId, id: 'default' })).rejects.toThrow(/not found/i);
    expect((await rpc(open.url, 'tasks/pushNotificationConfig/delete', { id: taskId, pushNotificationConfigId: taskId })).body.result).toBeNull();
  });
});

describe('troupe gateway (CLI)', () => {
  const group = new ProcessGroup();
  const dir = mkdtempSync(join(tmpdir(), 'troupe-gateway-cli-'));
  afterAll(async () => {
    await group.stopAll();
    rmSync(dir, { recursive: true, force: true });
  });

  it('serves the embedded demo mesh; the SDK default client talks to it', async () => {
    const proc = await group.spawnTroupe(['gateway', '--port', '0', '--log-level', 'warn'], {}, { ready: /gateway listening on http:\/\/\S+/ });
    const url = /gateway listening on (http:\/\/[^\s]+)/.exec(proc.stderr)![1]!;
    const client = await v1Client(url);
    const task = taskOf(await client.sendMessage(send(userText('Write about moles'))));
    expect(textOf(task.status?.message?.parts)).toContain('Here is your piece.');
  });

  it('with tokens, an operator token and a rate limit', async () => {
    const tokens = join(dir, 'tokens.json');
    writeFileSync(tokens, JSON.stringify({ [ALICE]: { tenant: 'demo', user: 'alice' } }));
    const proc = await group.spawnTroupe(
      ['gateway', '--port', '0', '--tokens', tokens, '--operator-token', OPERATOR, '--rate-limit', '100', '--log-level', 'warn'],
      {},
      { ready: /diagnostics: \S+/ },
    );
    const url = /gateway listening on (http:\/\/[^\s]+)/.exec(proc.stderr)![1]!;
    const client = await v1Client(url, { token: ALICE });
    expect(taskOf(await client.sendMessage(send(userText('Write about voles')))).status?.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED);
    const ready = await fetch(`${url}/diagnostics/ready`, { headers: { authorization: `Bearer ${OPERATOR}` } });
    expect(ready.status).toBe(200);
    expect((await bearerFetch(ALICE)(`${url}/diagnostics/ready`)).status).toBe(401);
  });

  it('bad usage exits 2: an unreadable token file, half a TLS pair', async () => {
    const missing = await runTroupe(['gateway', '--port', '0', '--tokens', join(dir, 'missing.json')], {});
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain('cannot read the token file');
    const half = await runTroupe(['gateway', '--port', '0', '--tls-cert', join(dir, 'cert.pem')], {});
    expect(half.code).toBe(2);
    expect(half.stderr).toContain('--tls-key');
  });
});
