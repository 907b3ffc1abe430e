/**
 * What an agent may end, over NATS: one node (`troupe up`, durable, as shipped), a client principal, and
 * two agents as their own NATS users. `picky` (the SDK) answers with a Task that gives up (`failed`,
 * `rejected`); `crashy` (raw NATS, no SDK) answers with a message of role `user`. Neither ends the
 * thread: the user gets the agent's words with a typed AGENT_ERROR, and the next message on the same
 * thread is answered.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AgentHost } from '../src/actors/agent-host.js';
import { defineAgent } from '../src/sdk/agent.js';
import { TroupeClient } from '../src/sdk/client.js';
import { encodeJson, type Task } from '../src/protocol/index.js';
import { NatsTransport } from '../src/transport/nats.js';
import { subjects } from '../src/transport/subjects.js';
import { startNatsServer, type NatsServerHandle } from './helpers/nats-server.js';
import { ProcessGroup } from './helpers/processes.js';
import { waitUntil } from './helpers/wait.js';

const TENANT = 'demo';

describe('an agent ends a task only as completed, over NATS', () => {
  let nats: NatsServerHandle;
  const transports: NatsTransport[] = [];
  const procs = new ProcessGroup();
  let picky: AgentHost;
  let client: TroupeClient;
  let operator: TroupeClient;
  let announcing: ReturnType<typeof setInterval> | undefined;

  const connect = async (user: string, name: string) => {
    const t = await NatsTransport.connect({ ...nats.as(user), name });
    transports.push(t);
    return t;
  };

  beforeAll(async () => {
    nats = await startNatsServer();
    const agent = defineAgent({
      card: { id: 'picky', name: 'Picky', description: 'gives up on some requests' },
      handle: (message, ctx): Task | string => {
        const state = ctx.text === 'fail' ? 'failed' : ctx.text === 'reject' ? 'rejected' : undefined;
        if (!state) return `picky: ${ctx.text}`;
        return {
          kind: 'task',
          id: ctx.taskId,
          contextId: ctx.contextId,
          status: {
            state,
            message: { kind: 'message', role: 'agent', messageId: `${message.messageId}-${state}`, parts: [{ kind: 'text', text: `cannot: ${state}` }] },
          },
        };
      },
    });
    picky = await new AgentHost({ transport: await connect('picky', 'ends-picky'), agent, tenant: TENANT }).start();

    // crashy speaks the wire contract by hand: its card on registry.crashy, answers on the reply subject.
    const raw = await connect('crashy', 'ends-crashy');
    const announce = () =>
      raw.publish(
        subjects.registry(TENANT, 'crashy'),
        encodeJson({ kind: 'announce', card: { id: 'crashy', name: 'Crashy', description: 'speaks for the user' }, instanceId: 'crashy-1', ttlMs: 3_000 }),
      );
    raw.subscribe(subjects.hello(TENANT), () => announce());
    raw.subscribe(
      subjects.agentInbox(TENANT, 'crashy'),
      (m) => {
        const parts = [{ kind: 'text', text: 'I am the user now' }];
        m.respond(encodeJson({ kind: 'message', role: 'user', messageId: `crashy-${Date.now()}`, parts }));
      },
      { queue: subjects.agentQueue('crashy') },
    );
    announce();
    announcing = setInterval(announce, 1_000);

    await procs.spawnTroupe(['up', '--nats', nats.url, '--team', 'test/fixtures/durable-team.ts', '--no-agents', '--log-level', 'warn'], nats.env, {
      name: 'node',
    });
    client = new TroupeClient(await connect('client', 'ends-client'), { tenant: TENANT, principal: 'client' });
    operator = new TroupeClient(await connect('operator', 'ends-operator'), { tenant: TENANT, principal: 'operator' });
    // Both agents are in the node's registry before any message names them.
    await waitUntil(
      async () => {
        const replies = await operator.ps();
        const agents = replies.flatMap((r) => r.actors.filter((a) => a.kind === 'registry').flatMap((a) => (a.detail?.agents as string[] | undefined) ?? []));
        return agents.some((a) => a.startsWith('picky×')) && agents.some((a) => a.startsWith('crashy×'));
      },
      'picky and crashy in the registry',
      30_000,
    );
  }, 90_000);

  afterAll(async () => {
    clearInterval(announcing);
    await procs.stopAll();
    await picky?.stop();
    await Promise.all(transports.map((t) => t.close().catch(() => undefined)));
    await nats?.stop();
  });

  it.each(['fail', 'reject'])(
    'a Task that gives up (%s) answers the turn with AGENT_ERROR; the thread stays open and answers the next message',
    async (word) => {
      const threadId = `gives-up-${word}`;
      const first = await client.send(word, { threadId, to: 'picky', timeoutMs: 20_000 });
      expect(first.final.status.state).toBe('input-required');
      expect(first.text).toBe(`cannot: ${word === 'fail' ? 'failed' : 'rejected'}`);
      expect(first.error?.code).toBe('AGENT_ERROR');
      expect(first.error?.message).toContain('"picky" answered with a task in state');
      expect((await client.task(threadId)).status.state).toBe('input-required');
      const next = await client.send('and now?', { threadId, to: 'picky', timeoutMs: 20_000 });
      expect(next.text).toBe('picky: and now?');
    },
    60_000,
  );

  it('a reply with role user is refused with a typed error; the thread goes on', async () => {
    const threadId = 'speaks-for-user';
    const first = await client.send('hi', { threadId, to: 'crashy', timeoutMs: 20_000 });
    expect(first.error?.code).toBe('AGENT_ERROR');
    expect(first.error?.message).toContain('an agent answers with role "agent", not "user"');
    expect(first.text).not.toContain('I am the user now');
    // Nothing crashy said entered the thread as the user's.
    const task = await client.task(threadId);
    expect(task.history?.filter((m) => m.role === 'user').map((m) => m.parts.map((p) => (p.kind === 'text' ? p.text : '')).join(''))).toEqual(['hi']);
    const next = await client.send('still there?', { threadId, to: 'picky', timeoutMs: 20_000 });
    expect(next.text).toBe('picky: still there?');
  }, 60_000);
});
