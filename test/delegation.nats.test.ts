/**
 * Agents that delegate, over a real nats-server (node, every agent and the client on their own
 * connections): `reply(text, { delegate })` fans the work out with the orchestration machine, the
 * results (success and latency per delegate) go back to the delegating agent — not to the user — which
 * answers; a failing delegate is reported to it; the delegation counts against the hop limit; a card
 * that does not allow delegating (or accepting a handoff) gets a typed error. A router fan-out's answer
 * carries agentsUsed, executionTimeMs and per-agent latencyMs.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AgentHost } from '../src/actors/agent-host.js';
import { TroupeNode } from '../src/actors/node.js';
import type { ThreadConfig } from '../src/machines/thread.js';
import type { DelegationResults } from '../src/protocol/delegation.js';
import { RESULT_META } from '../src/protocol/metadata.js';
import type { RouterDecision } from '../src/protocol/routing.js';
import { defineAgent, reply, type AgentDefinition } from '../src/sdk/agent.js';
import { TroupeClient, type SendResult } from '../src/sdk/client.js';
import type { RouterPolicy } from '../src/routing/policy.js';
import { loadYamlAgent } from '../src/team/team.js';
import { NatsTransport } from '../src/transport/nats.js';
import { OpenAIScriptedServer, type SeenRequest } from './helpers/model-servers.js';
import { startNatsServer, type NatsServerHandle } from './helpers/nats-server.js';

let nats: NatsServerHandle;

beforeAll(async () => {
  nats = await startNatsServer();
});

afterAll(async () => {
  await nats?.stop();
});

interface Mesh {
  client: TroupeClient;
  stop(): Promise<void>;
}

async function startMesh(tenant: string, agents: AgentDefinition[], config: Partial<ThreadConfig>, policy?: RouterPolicy): Promise<Mesh> {
  const transports: NatsTransport[] = [];
  const connect = async (name: string) => {
    const t = await NatsTransport.connect({ ...nats.asNode, name });
    transports.push(t);
    return t;
  };
  const node = await new TroupeNode({
    transport: await connect('node'),
    tenant,
    config: { retries: 0, agentTimeoutMs: 5_000, ...config },
    ...(policy ? { policy } : {}),
    idleMs: 0,
  }).start();
  const hosts = await Promise.all(agents.map(async (agent) => new AgentHost({ transport: await connect(agent.card.id), agent, tenant }).start()));
  await node.registry.waitFor(agents.map((a) => a.card.id));
  const client = new TroupeClient(await connect('client'), tenant);
  return {
    client,
    stop: async () => {
      await Promise.all(hosts.map((h) => h.stop()));
      await node.stop();
      await Promise.all(transports.map((t) => t.drain().catch(() => t.close())));
    },
  };
}

/** What each delegate was sent (text and sender), and what the lead got back. */
const seen: Array<{ agent: string; text: string; sender: string; hop: number }> = [];
const delegations: DelegationResults[] = [];

const delegate = (id: string, answer: (text: string) => string) =>
  defineAgent({
    card: { id, name: id, description: `The ${id} desk` },
    handle: (_m, ctx) => {
      seen.push({ agent: id, text: ctx.text, sender: ctx.sender, hop: ctx.hop });
      return answer(ctx.text);
    },
  });

const billing = delegate('billing', (t) => `billing checked "${t}": paid`);
const weather = delegate('weather', () => 'weather: sunny');
const broken = defineAgent({
  card: { id: 'broken', name: 'broken', description: 'Always fails' },
  handle: () => {
    throw new Error('the broken desk is on fire');
  },
});

/** Delegates to the agents named in the user's message (`ask a,b: question`), then sums up their answers. */
const lead = defineAgent({
  card: { id: 'lead', name: 'lead', description: 'Asks the desks and sums up', capabilities: { orchestration: { canDelegate: true, maxParallel: 3 } } },
  handle: (_m, ctx) => {
    if (ctx.delegation) {
      delegations.push(ctx.delegation);
      const lines = ctx.delegation.results.map((r) => `${r.agentId}=${r.success ? 'ok' : (r.error?.code ?? 'failed')}`);
      return `lead sums up (${lines.join(', ')}): ${ctx.text}`;
    }
    const match = /^ask ([\w,-]+): (.*)$/.exec(ctx.text);
    if (!match) return 'lead: nothing to ask';
    return reply('Asking the desks.', { delegate: { agents: match[1]!.split(','), strategy: 'parallel', input: match[2]! } });
  },
});

/** Tries to delegate, but its card says it may not. */
const solo = defineAgent({
  card: { id: 'solo', name: 'solo', description: 'Not allowed to delegate', capabilities: { orchestration: { canDelegate: false } } },
  handle: () => reply('Let me ask billing.', { delegate: { agents: ['billing'] } }),
});

/** Hands off to `closed`, whose card accepts no handoffs. */
const passer = defineAgent({
  card: { id: 'passer', name: 'passer', description: 'Hands off to closed' },
  handle: () => reply('Passing you on.', { handoff: { targetAgentId: 'closed', contextSummary: 'wants closed', handoffReason: 'closed knows' } }),
});
const closed = defineAgent({
  card: { id: 'closed', name: 'closed', description: 'Takes no handoffs', capabilities: { handoff: { canAccept: false } } },
  handle: () => 'closed: hello',
});

const routes = (r: SendResult) => r.route.map((s) => [s.from, s.to, s.hop]);

describe('delegation', () => {
  let mesh: Mesh;
  const send = (text: string, to: string) => mesh.client.send(text, { to, timeoutMs: 10_000 });

  beforeAll(async () => {
    mesh = await startMesh('delegation', [lead, billing, weather, broken, solo, passer, closed], { entryAgent: 'lead' });
  }, 30_000);

  afterAll(async () => {
    await mesh?.stop();
  });

  it('fans out, returns the results to the delegating agent, which answers the user', async () => {
    seen.length = 0;
    delegations.length = 0;
    const events: string[] = [];
    const res = await mesh.client.send('ask billing,weather: invoice 42?', {
      to: 'lead',
      timeoutMs: 10_000,
      onEvent: (e) => {
        if (e.kind === 'status-update' && e.final) events.push('final');
        else if (e.kind === 'status-update' && e.status.message)
          events.push(`status: ${e.status.message.parts.map((p) => (p.kind === 'text' ? p.text : '')).join('')}`);
      },
    });
    expect(res.error).toBeUndefined();
    expect(res.text).toBe('lead sums up (billing=ok, weather=ok): **billing**: billing checked "invoice 42?": paid\n\n**weather**: weather: sunny');
    // The user sees what the lead said while its delegates work, then one final answer.
    expect(events).toEqual(['status: Asking the desks.', 'final']);
    // The delegates got the lead's input, from the lead, one hop on.
    expect(seen.map((s) => [s.agent, s.text, s.sender, s.hop]).sort()).toEqual([
      ['billing', 'invoice 42?', 'lead', 1],
      ['weather', 'invoice 42?', 'lead', 1],
    ]);
    expect(routes(res)).toEqual([
      ['user', 'lead', 0],
      ['lead', 'billing', 1],
      ['lead', 'weather', 1],
      ['troupe', 'lead', 2],
    ]);
    expect(res.final.status.message?.metadata?.['troupe/hops']).toBe(2);
    const [d] = delegations;
    expect(d).toMatchObject({ delegator: 'lead', strategy: 'parallel', agentsUsed: ['billing', 'weather'] });
    expect(d!.results.map((r) => [r.agentId, r.success])).toEqual([
      ['billing', true],
      ['weather', true],
    ]);
    for (const r of d!.results) expect(r.latencyMs).toBeGreaterThanOrEqual(0);
    expect(Object.keys(d!.latencyMs).sort()).toEqual(['billing', 'weather']);
    expect(d!.executionTimeMs).toBeGreaterThanOrEqual(0);
    console.log(`delegation latencyMs ${JSON.stringify(d!.latencyMs)}, executionTimeMs ${d!.executionTimeMs}`);
  });

  it('reports a failing delegate to the delegating agent, which still answers', async () => {
    delegations.length = 0;
    const res = await send('ask billing,broken: invoice 7?', 'lead');
    expect(res.error).toBeUndefined();
    expect(res.text).toContain('lead sums up (billing=ok, broken=AGENT_ERROR)');
    expect(res.text).toContain('broken failed');
    const [d] = delegations;
    expect(d!.agentsUsed).toEqual(['billing']);
    expect(d!.results.find((r) => r.agentId === 'broken')).toMatchObject({ success: false, error: { code: 'AGENT_ERROR' } });
  });

  it('refuses a delegation the card does not allow, and a delegation to more agents than its maxParallel', async () => {
    seen.length = 0;
    const refused = await send('anything', 'solo');
    expect(refused.error?.code).toBe('DELEGATION_NOT_ALLOWED');
    expect(refused.text).toBe('Let me ask billing.');
    const tooMany = await send('ask billing,weather,broken,passer: hi', 'lead');
    expect(tooMany.error?.code).toBe('DELEGATION_NOT_ALLOWED');
    expect(tooMany.error?.message).toContain('at most 3');
    expect(seen).toEqual([]);
  });

  it('refuses a delegation to an agent that is not live, and to itself', async () => {
    expect((await send('ask ghost: hi', 'lead')).error?.code).toBe('AGENT_NOT_FOUND');
    expect((await send('ask lead: hi', 'lead')).error?.code).toBe('INVALID_RECIPIENT');
  });

  it('refuses a handoff to an agent whose card does not accept handoffs', async () => {
    const res = await send('help', 'passer');
    expect(res.error?.code).toBe('HANDOFF_NOT_ALLOWED');
    expect(res.error?.message).toContain('closed');
    expect(routes(res)).toEqual([['user', 'passer', 0]]);
  });
});

describe('delegation past the hop limit', () => {
  let mesh: Mesh;

  beforeAll(async () => {
    mesh = await startMesh('delegation-hops', [lead, billing, weather], { entryAgent: 'lead', maxHops: 1 });
  }, 30_000);

  afterAll(async () => {
    await mesh?.stop();
  });

  it('ends the turn with ROUTING_LOOP and calls no delegate', async () => {
    seen.length = 0;
    const res = await mesh.client.send('ask billing: hi', { to: 'lead', timeoutMs: 10_000 });
    expect(res.error?.code).toBe('ROUTING_LOOP');
    expect(res.error?.message).toContain('a delegation takes 2 hops and the limit is 1');
    expect(seen).toEqual([]);
    expect(routes(res)).toEqual([['user', 'lead', 0]]);
  });
});

describe('a router fan-out', () => {
  let mesh: Mesh;
  /** A policy of the test's own: every message goes to billing and weather. */
  const both: RouterPolicy = {
    name: 'both',
    decide: async (): Promise<RouterDecision> => ({ agentId: 'billing', confidence: 1, reasoning: 'both desks', additionalAgents: ['weather'] }),
  };

  beforeAll(async () => {
    mesh = await startMesh('fanout', [billing, weather], { entryAgent: 'billing' }, both);
  }, 30_000);

  afterAll(async () => {
    await mesh?.stop();
  });

  it('answers with agentsUsed, executionTimeMs and per-agent latencyMs in the metadata', async () => {
    const res = await mesh.client.send('status?', { timeoutMs: 10_000 });
    expect(res.error).toBeUndefined();
    const meta = res.final.status.message?.metadata ?? {};
    expect(meta[RESULT_META.agentsUsed]).toEqual(['billing', 'weather']);
    expect(typeof meta[RESULT_META.executionTimeMs]).toBe('number');
    expect(Object.keys(meta[RESULT_META.latencyMs] as Record<string, number>).sort()).toEqual(['billing', 'weather']);
    expect((meta[RESULT_META.results] as Array<{ agentId: string; success: boolean }>).map((r) => [r.agentId, r.success])).toEqual([
      ['billing', true],
      ['weather', true],
    ]);
    console.log(`fan-out latencyMs ${JSON.stringify(meta[RESULT_META.latencyMs])}, executionTimeMs ${String(meta[RESULT_META.executionTimeMs])}`);
  });
});

describe('a YAML agent that delegates with the delegate tool', () => {
  let mesh: Mesh;
  const openai = new OpenAIScriptedServer();
  const MODEL = 'lead-model';
  type ChatMessage = { role: string; content: string | null };
  const messagesOf = (req: SeenRequest) => req.body.messages as ChatMessage[];

  beforeAll(async () => {
    await openai.start();
    const yamlLead = await loadYamlAgent('test/fixtures/team-yaml/lead/agent.yaml', {
      env: { OPENAI_BASE_URL: openai.baseURL, OPENAI_API_KEY: 'sk-test' },
      maxRetries: 0,
    });
    mesh = await startMesh('delegation-yaml', [yamlLead, billing, weather], { entryAgent: 'yaml-lead' });
  }, 30_000);

  afterAll(async () => {
    await mesh?.stop();
    await openai.stop();
  });

  it('the model calls delegate; the results come back to it in its next message and it answers the user', async () => {
    seen.length = 0;
    openai.scriptFor(
      MODEL,
      {
        text: 'Let me ask the desks.',
        toolCalls: [{ name: 'delegate', arguments: { agents: ['billing', 'weather'], input: 'order 42: paid? and the weather for delivery?' } }],
      },
      { text: 'Order 42 is paid and it will be sunny.' },
    );
    const res = await mesh.client.send('Is order 42 paid, and will it be sunny?', { timeoutMs: 15_000 });
    expect(res.error).toBeUndefined();
    expect(res.text).toBe('Order 42 is paid and it will be sunny.');
    expect(seen.map((s) => [s.agent, s.text, s.sender]).sort()).toEqual([
      ['billing', 'order 42: paid? and the weather for delivery?', 'yaml-lead'],
      ['weather', 'order 42: paid? and the weather for delivery?', 'yaml-lead'],
    ]);
    expect(routes(res)).toEqual([
      ['user', 'yaml-lead', 0],
      ['yaml-lead', 'billing', 1],
      ['yaml-lead', 'weather', 1],
      ['troupe', 'yaml-lead', 2],
    ]);
    const requests = openai.requestsFor(MODEL);
    // Two model calls: the one that delegates (with text, so its loop ends there), and the results turn.
    expect(requests).toHaveLength(2);
    const first = requests[0]!;
    const delegateTool = (first.body.tools as Array<{ function: { name: string } }>).map((t) => t.function.name);
    expect(delegateTool).toContain('delegate');
    const last = requests.at(-1)!;
    // The message it answers comes last, after the thread's conversation (the user's question, its own delegating answer).
    const user = messagesOf(last)
      .filter((m) => m.role === 'user')
      .at(-1)!.content!;
    expect(messagesOf(last)[1]).toEqual({ role: 'user', content: 'Is order 42 paid, and will it be sunny?' });
    expect(user).toContain('You asked billing, weather this: order 42: paid? and the weather for delivery?');
    expect(user).toContain('**billing**: billing checked "order 42: paid? and the weather for delivery?": paid');
    expect(user).toContain('**weather**: weather: sunny');
    expect((last.body.tools as Array<{ function: { name: string } }> | undefined)?.map((t) => t.function.name) ?? []).not.toContain('delegate');
  });
});

describe('team permissions on top of the cards', () => {
  let mesh: Mesh;
  /** Hands off to `open`, whose card accepts handoffs; the team lets only `lead` start one. */
  const opener = defineAgent({
    card: { id: 'opener', name: 'opener', description: 'Hands off to open' },
    handle: () => reply('Passing you on.', { handoff: { targetAgentId: 'open', contextSummary: 'wants open', handoffReason: 'open knows' } }),
  });
  const open = defineAgent({ card: { id: 'open', name: 'open', description: 'Takes handoffs' }, handle: () => 'open: hello' });

  beforeAll(async () => {
    mesh = await startMesh('delegation-rbac', [lead, billing, opener, open], {
      entryAgent: 'lead',
      permissions: { delegate: ['opener'], handoffInitiate: ['lead'] },
    });
  }, 30_000);

  afterAll(async () => {
    await mesh?.stop();
  });

  it('refuses a delegation and a handoff the cards allow but the team does not, naming the team rule; nobody is called', async () => {
    seen.length = 0;
    const delegation = await mesh.client.send('ask billing: hi', { to: 'lead', timeoutMs: 10_000 });
    expect(delegation.error?.code).toBe('DELEGATION_NOT_ALLOWED');
    expect(delegation.error?.message).toContain('permissions.delegate');
    expect(seen).toEqual([]);
    const handoff = await mesh.client.send('help', { to: 'opener', timeoutMs: 10_000 });
    expect(handoff.error?.code).toBe('HANDOFF_NOT_ALLOWED');
    expect(handoff.error?.message).toContain('permissions.handoff.initiate');
    expect(routes(handoff)).toEqual([['user', 'opener', 0]]);
  });
});
