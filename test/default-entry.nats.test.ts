/**
 * A node without a team (`troupe up` without --team) over a real nats-server: a message nobody addressed
 * goes to the only agent on the mesh; with several and no `triage` among them, the user gets
 * NO_ENTRY_AGENT naming --team and --to (not AGENT_NOT_FOUND for a `triage` nobody runs); addressing one
 * with `to` still works. The rule itself, as a pure function, for every case.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AgentHost } from '../src/actors/agent-host.js';
import { TroupeNode } from '../src/actors/node.js';
import { defaultEntry, decideWithoutPolicy } from '../src/machines/router.js';
import { DEFAULT_THREAD_CONFIG } from '../src/config/thread.js';
import { defineAgent, type AgentDefinition } from '../src/sdk/agent.js';
import { TroupeClient } from '../src/sdk/client.js';
import { NatsTransport } from '../src/transport/nats.js';
import { startNatsServer, type NatsServerHandle } from './helpers/nats-server.js';

let nats: NatsServerHandle;
const transports: NatsTransport[] = [];
const stops: Array<() => Promise<unknown>> = [];

beforeAll(async () => {
  nats = await startNatsServer();
});

afterAll(async () => {
  for (const stop of stops.reverse()) await stop();
  await Promise.all(transports.map((t) => t.drain().catch(() => t.close())));
  await nats?.stop();
});

const echo = (id: string) => defineAgent({ card: { id, name: id, description: `The ${id} agent` }, handle: (_m, ctx) => `${id}: ${ctx.text}` });

/** A node with no team config at all (the thread defaults), the agents on their own connections. */
async function teamless(tenant: string, agents: AgentDefinition[]): Promise<TroupeClient> {
  const connect = async (name: string) => {
    const t = await NatsTransport.connect({ ...nats.asNode, name });
    transports.push(t);
    return t;
  };
  const node = await new TroupeNode({ transport: await connect('node'), tenant, idleMs: 0 }).start();
  stops.push(() => node.stop());
  const hosts = await Promise.all(agents.map(async (agent) => new AgentHost({ transport: await connect(agent.card.id), agent, tenant }).start()));
  stops.push(() => Promise.all(hosts.map((h) => h.stop())));
  await node.registry.waitFor(agents.map((a) => a.card.id));
  return new TroupeClient(await connect('client'), tenant);
}

describe('a node without a team', () => {
  it('sends a message nobody addressed to the only agent on the mesh', async () => {
    const client = await teamless('solo', [echo('notes')]);
    const res = await client.send('remember milk', { timeoutMs: 10_000 });
    expect(res.error).toBeUndefined();
    expect(res.text).toBe('notes: remember milk');
    expect(res.route.map((s) => [s.from, s.to, s.reason])).toEqual([['user', 'notes', 'notes is the only agent on the mesh (no team names an entry agent)']]);
  });

  it('answers NO_ENTRY_AGENT naming --team and --to when several agents are live and none is triage; --to still reaches one', async () => {
    const client = await teamless('pair', [echo('notes'), echo('weather')]);
    const res = await client.send('hello', { timeoutMs: 10_000 });
    expect(res.error?.code).toBe('NO_ENTRY_AGENT');
    expect(res.error?.message).toContain('--team');
    expect(res.error?.message).toContain('--to');
    expect(res.error?.message).toContain('notes, weather');
    const addressed = await client.send('hello', { to: 'weather', timeoutMs: 10_000 });
    expect(addressed.text).toBe('weather: hello');
  });
});

describe('the default entry rule', () => {
  const input = (agents: string[]) => ({
    kind: 'user' as const,
    message: { kind: 'message' as const, role: 'user' as const, messageId: 'm', parts: [{ kind: 'text' as const, text: 'hi' }] },
    agents: Object.fromEntries(agents.map((a) => [a, { supportsClientRouting: false }])),
    entryAgent: DEFAULT_THREAD_CONFIG.entryAgent,
    usePolicy: false,
    threshold: 0.7,
    maxAttempts: 1,
  });

  it('is the only agent, else triage when live, else an error; a named entry agent always wins', () => {
    expect(DEFAULT_THREAD_CONFIG.entryAgent).toBe('');
    expect(decideWithoutPolicy(input(['notes']))).toMatchObject({ to: 'agent', agentId: 'notes' });
    expect(decideWithoutPolicy(input(['triage', 'writer']))).toMatchObject({ to: 'agent', agentId: 'triage' });
    expect(decideWithoutPolicy(input(['a', 'b']))).toMatchObject({ to: 'user', error: { code: 'NO_ENTRY_AGENT' } });
    expect(defaultEntry({})).toMatchObject({ to: 'user', error: { code: 'NO_ENTRY_AGENT', message: expect.stringContaining('no agent is on the mesh') } });
    expect(decideWithoutPolicy({ ...input(['a', 'b']), entryAgent: 'b' })).toMatchObject({ to: 'agent', agentId: 'b' });
  });
});
