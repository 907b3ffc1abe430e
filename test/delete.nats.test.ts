/**
 * `troupe delete`: an operator erases a thread for good — its record in the KV bucket, its actor on the node
 * that owns it, its dead letters — on a durable node process and a real nats-server. A turn in flight
 * refuses it; a thread that is nowhere says so; a user cannot ask for it (the broker refuses ctl); and the
 * next message with the same id starts a new thread with nothing of the old one.
 */
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { beforeAll, describe, expect, it } from 'vitest';
import { AgentHost } from '../src/actors/agent-host.js';
import { defineAgent, reply } from '../src/sdk/agent.js';
import { TroupeClient } from '../src/sdk/client.js';
import { TroupeError } from '../src/protocol/errors.js';
import { DEAD_LETTER_STREAM } from '../src/transport/jetstream/ingress.js';
import { CTL, type CtlVerb } from '../src/protocol/ctl.js';
import { encodeJson } from '../src/protocol/codec.js';
import { subjects } from '../src/transport/subjects.js';
import { natsSuite } from './helpers/nats-suite.js';
import { cliTestTimeout, runTroupe, spawnTroupe } from './helpers/processes.js';
import { waitUntil } from './helpers/wait.js';

const suite = natsSuite();
let client: TroupeClient;
let operator: TroupeClient;
/** Opened by the test: a message starting with "wait" holds its turn until then. */
let openGate: () => void = () => undefined;

const codeOf = async (p: Promise<unknown>): Promise<string> => {
  try {
    await p;
    return 'no error';
  } catch (err) {
    return err instanceof TroupeError ? err.code : `${(err as Error).name}: ${(err as Error).message}`;
  }
};

beforeAll(async () => {
  const echo = defineAgent({
    card: { id: 'slowecho', name: 'Echo', description: 'Echoes, or waits for the test first' },
    handle: async (_m, ctx) => {
      if (ctx.text.startsWith('wait')) await new Promise<void>((resolve) => (openGate = resolve));
      return reply(`echo: ${ctx.text}`, { to: 'user' });
    },
  });
  await new AgentHost({ transport: await suite.connect('slowecho'), agent: echo, heartbeatMs: 300 }).start();
  await spawnTroupe(
    ['up', '--nats', suite.nats.url, '--team', 'test/fixtures/resend-team.ts', '--no-agents', '--partitions', '8'],
    suite.nats.env,
    { name: 'node' },
    suite.group,
  );
  client = new TroupeClient(await suite.connect('delete-client', 'gateway'), { principal: 'gateway' });
  operator = new TroupeClient(await suite.connect('delete-operator', 'operator'), { principal: 'operator' });
  await waitUntil(
    async () =>
      (await operator.ps(300)).some((r) => r.actors.some((a) => a.kind === 'registry' && String(a.detail?.['agents']).includes('slowecho'))) ? true : undefined,
    'the node to see the agent',
  );
}, 60_000);

describe('troupe delete', () => {
  it("erases the record, the live actor and the thread's dead letters, and nothing of another thread; the next message starts afresh", async () => {
    expect((await client.send('first', { threadId: 'gone-1', timeoutMs: 15_000 })).text).toBe('echo: first');
    expect((await client.send('second', { threadId: 'gone-1', timeoutMs: 15_000 })).text).toBe('echo: second');
    expect((await client.send('kept', { threadId: 'kept-1', timeoutMs: 15_000 })).text).toBe('echo: kept');
    // Dead letters of each thread, as a node writes them.
    const js = jetstream((await suite.connect('dlq-writer')).connection);
    await js.publish('troupe.demo.dlq.gone-1', 'a message of gone-1 that failed');
    await js.publish('troupe.demo.dlq.gone-1', 'another');
    await js.publish('troupe.demo.dlq.kept-1', 'a message of kept-1 that failed');
    expect((await operator.ps(300)).flatMap((r) => r.actors).some((a) => a.kind === 'thread' && a.id === 'gone-1')).toBe(true);

    expect(await operator.deleteThread('gone-1')).toEqual({ node: expect.any(String) as unknown as string, deadLetters: 2 });

    expect(await codeOf(operator.ctl('thread', { threadId: 'gone-1' }))).toBe('THREAD_NOT_FOUND');
    expect(await codeOf(client.task('gone-1'))).toBe('THREAD_NOT_FOUND');
    expect((await operator.ps(300)).flatMap((r) => r.actors).some((a) => a.kind === 'thread' && a.id === 'gone-1')).toBe(false);
    const jsm = await jetstreamManager((await suite.connect('dlq-reader')).connection);
    expect((await jsm.streams.info(DEAD_LETTER_STREAM, { subjects_filter: 'troupe.demo.dlq.>' })).state.subjects).toEqual({ 'troupe.demo.dlq.kept-1': 1 });
    expect((await client.task('kept-1')).history).toHaveLength(2);

    // The same id again: a new thread, with this turn only.
    expect((await client.send('anew', { threadId: 'gone-1', timeoutMs: 15_000 })).text).toBe('echo: anew');
    const task = await client.task('gone-1');
    expect(task.history?.map((m) => m.parts.map((p) => (p.kind === 'text' ? p.text : '')).join(''))).toEqual(['anew', 'echo: anew']);
  });

  it('refuses while a turn is in flight (THREAD_BUSY), and deletes once it is answered; a thread that is nowhere is THREAD_NOT_FOUND', async () => {
    const answer = client.send('wait for the gate', { threadId: 'busy-1', timeoutMs: 30_000 });
    await waitUntil(
      async () =>
        (await operator.ps(300)).flatMap((r) => r.actors).some((a) => a.kind === 'thread' && a.id === 'busy-1' && a.state.startsWith('working'))
          ? true
          : undefined,
      'the turn to be in flight',
    );
    expect(await codeOf(operator.deleteThread('busy-1'))).toBe('THREAD_BUSY');
    openGate();
    expect((await answer).text).toBe('echo: wait for the gate');
    expect((await operator.deleteThread('busy-1')).deadLetters).toBe(0);
    expect(await codeOf(operator.deleteThread('busy-1'))).toBe('THREAD_NOT_FOUND');
    expect(await codeOf(operator.deleteThread('never-was'))).toBe('THREAD_NOT_FOUND');
  });

  it("is for operators: a user's client cannot send the request (the broker refuses it)", async () => {
    expect((await client.send('mine', { threadId: 'user-1', timeoutMs: 15_000 })).text).toBe('echo: mine');
    const refused = await client.deleteThread('user-1').then(
      () => 'no error',
      (err: Error) => err.message,
    );
    expect(refused).toMatch(/permission/i);
    expect((await client.task('user-1')).history).toHaveLength(2);
  });

  it(
    "every thread of one owner (a user who asks to be forgotten): theirs go, another user's stay",
    async () => {
      for (const [user, threadId] of [
        ['alice', 'alice-1'],
        ['alice', 'alice-2'],
        ['bob', 'bob-1'],
      ] as const) {
        expect((await client.send(`hi from ${user}`, { threadId, user, timeoutMs: 15_000 })).text).toBe(`echo: hi from ${user}`);
      }
      const asOperator = { TROUPE_NATS_CREDS: suite.nats.credsFile('operator') };
      const listed = await runTroupe(['threads', '--owner', 'gateway/alice', '--nats', suite.nats.url, '--json'], asOperator);
      expect((JSON.parse(listed.stdout) as Array<{ threadId: string }>).map((t) => t.threadId).sort()).toEqual(['alice-1', 'alice-2']);
      const res = await runTroupe(['delete', '--owner', 'gateway/alice', '--nats', suite.nats.url, '--json'], asOperator);
      expect(res.code, res.stderr).toBe(0);
      expect(JSON.parse(res.stdout)).toMatchObject({ owner: 'gateway/alice', deleted: 2, kept: 0, more: false });
      expect(await codeOf(client.task('alice-1', { user: 'alice' }))).toBe('THREAD_NOT_FOUND');
      expect(await codeOf(client.task('alice-2', { user: 'alice' }))).toBe('THREAD_NOT_FOUND');
      expect((await client.task('bob-1', { user: 'bob' })).history).toHaveLength(2);
      const again = await runTroupe(['delete', '--owner', 'gateway/alice', '--nats', suite.nats.url], asOperator);
      expect(again.stdout).toBe('0 threads of gateway/alice deleted\n');
      const neither = await runTroupe(['delete', '--nats', suite.nats.url], asOperator);
      expect(neither.code).toBe(2);
      expect(neither.stderr).toContain('name a thread, or every thread of an owner with --owner');
    },
    cliTestTimeout(4),
  );

  it(
    'from the CLI: says what went, --json for scripts, exit 1 with the code for a thread that is not there',
    async () => {
      expect((await client.send('bye', { threadId: 'cli-1', timeoutMs: 15_000 })).text).toBe('echo: bye');
      const asOperator = { TROUPE_NATS_CREDS: suite.nats.credsFile('operator') };
      const json = await runTroupe(['delete', 'cli-1', '--nats', suite.nats.url, '--json'], asOperator);
      expect(json.code, json.stderr).toBe(0);
      expect(JSON.parse(json.stdout)).toMatchObject({ threadId: 'cli-1', deleted: true, deadLetters: 0 });
      const missing = await runTroupe(['delete', 'cli-1', '--nats', suite.nats.url], asOperator);
      expect(missing.code).toBe(1);
      expect(missing.stderr).toContain('THREAD_NOT_FOUND');
      expect((await client.send('again', { threadId: 'cli-1', timeoutMs: 15_000 })).text).toBe('echo: again');
      const human = await runTroupe(['delete', 'cli-1', '--nats', suite.nats.url], asOperator);
      expect(human.code).toBe(0);
      expect(human.stdout).toMatch(/^thread cli-1 deleted on \S+: its record; a new message with this id starts a new thread\n$/);
    },
    cliTestTimeout(3),
  );

  it('every control verb a node answers replies as CTL says, and refuses a request outside its schema with INVALID_MESSAGE', async () => {
    expect((await client.send('typed', { threadId: 'ctl-1', timeoutMs: 15_000 })).text).toBe('echo: typed');
    const raw = await suite.connect('ctl-raw', 'operator');
    const ask = async (verb: CtlVerb, body: unknown): Promise<unknown> =>
      JSON.parse(new TextDecoder().decode((await raw.request(subjects.ctl('demo', verb), encodeJson(body), { timeoutMs: 10_000 })).data)) as unknown;
    // The node's own bytes, parsed strictly against the verb's reply schema (not through the client, which parses too).
    const bodies: Array<[CtlVerb, unknown]> = [
      ['threads', { limit: 5 }],
      ['thread', { threadId: 'ctl-1' }],
      ['dlq', { limit: 5 }],
      ['memory', {}],
    ];
    for (const [verb, body] of bodies) {
      const reply = await ask(verb, body);
      expect(CTL[verb].reply.safeParse(reply).success, `${verb}: ${JSON.stringify(reply).slice(0, 300)}`).toBe(true);
    }
    const typed = await operator.ctl('thread', { threadId: 'ctl-1' });
    expect(typed.record.task.history?.map((m) => m.role)).toEqual(['user', 'agent']);
    for (const [verb, body] of [
      ['dlq', { limit: 0 }],
      ['memory', { gc: 'yes' }],
      ['threads', { limit: 'all' }],
      ['thread', { threadId: 'a b' }],
    ] as Array<[CtlVerb, unknown]>) {
      expect(await ask(verb, body), verb).toMatchObject({ kind: 'error', error: { code: 'INVALID_MESSAGE' } });
    }
  });
});
