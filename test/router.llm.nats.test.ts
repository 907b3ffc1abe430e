/**
 * The LLM router of a team.yaml over a real nats-server, its model a local server speaking the OpenAI
 * chat-completions format, scripted per test: the configured prompt pieces and model settings reach the
 * model with the thread's earlier messages; a confident decision routes (confidence and reasoning in the
 * route log); an unsure one asks the user to clarify (in the route log too); invalid answers are retried
 * up to the router's max attempts, then the fallback agent answers when there is one, and otherwise the
 * user gets ROUTER_FAILURE saying what to do — never a silent substitute.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AgentHost } from '../src/actors/agent-host.js';
import { TroupeNode } from '../src/actors/node.js';
import { META, type RouteStep } from '../src/protocol/metadata.js';
import { TroupeClient, type SendResult } from '../src/sdk/client.js';
import { loadTeamYaml, nodeOptionsOf, type TeamDefinition } from '../src/team/team.js';
import { NatsTransport } from '../src/transport/nats.js';
import { OpenAIScriptedServer, type SeenRequest } from './helpers/model-servers.js';
import { startNatsServer, type NatsServerHandle } from './helpers/nats-server.js';
import { ProcessGroup } from './helpers/processes.js';
import { waitUntil } from './helpers/wait.js';

const TENANT = 'routers';
const AGENTS = join(process.cwd(), 'test/fixtures/team-yaml/router-agents.ts');

let nats: NatsServerHandle;
const openai = new OpenAIScriptedServer();
const tmp = mkdtempSync(join(tmpdir(), 'troupe-router-'));

beforeAll(async () => {
  nats = await startNatsServer();
  await openai.start();
});

afterAll(async () => {
  await openai.stop();
  await nats?.stop();
  rmSync(tmp, { recursive: true, force: true });
});

interface Mesh {
  client: TroupeClient;
  team: TeamDefinition;
  stop(): Promise<void>;
}

/** A team.yaml with the TS agents and the router on the scripted server; the node and each agent on their own connection. */
async function startMesh(name: string, extra: string): Promise<Mesh> {
  const file = join(tmp, `${name}.yaml`);
  writeFileSync(
    file,
    [
      `id: ${name}`,
      `name: ${name}`,
      'agents:',
      `  - module: ${AGENTS}`,
      '    ids: [billing, weather, helpdesk]',
      'router:',
      `  model: {provider: openai, name: ${name}-model, base_url: "${openai.baseURL}"}`,
      extra,
    ].join('\n'),
  );
  const team = await loadTeamYaml(file, { env: {} });
  const transports: NatsTransport[] = [];
  const connect = async (n: string) => {
    const t = await NatsTransport.connect({ ...nats.asNode, name: n });
    transports.push(t);
    return t;
  };
  const node = await new TroupeNode({ transport: await connect('node'), tenant: TENANT, ...nodeOptionsOf(team), idleMs: 0 }).start();
  const hosts = await Promise.all(team.agents.map(async (agent) => new AgentHost({ transport: await connect(agent.card.id), agent, tenant: TENANT }).start()));
  await node.registry.waitFor(team.agents.map((a) => a.card.id));
  const client = new TroupeClient(await connect('client'), TENANT);
  return {
    client,
    team,
    stop: async () => {
      await Promise.all(hosts.map((h) => h.stop()));
      await node.stop();
      await Promise.all(transports.map((t) => t.drain().catch(() => t.close())));
    },
  };
}

const decision = (d: Record<string, unknown>) => ({ text: JSON.stringify(d) });
const messagesOf = (req: SeenRequest) => req.body.messages as Array<{ role: string; content: string }>;
const routesOf = async (client: TroupeClient, threadId: string) => ((await client.task(threadId)).metadata?.[META.routes] ?? []) as RouteStep[];

describe('an LLM router configured in team.yaml', () => {
  let mesh: Mesh;
  const model = 'prompted-model';
  const send = (text: string, threadId?: string): Promise<SendResult> => mesh.client.send(text, { timeoutMs: 10_000, ...(threadId ? { threadId } : {}) });

  beforeAll(async () => {
    mesh = await startMesh(
      'prompted',
      [
        '  history_messages: 2',
        '  prompts:',
        '    system: "ROUTER OF THE SHOP. {{catalog}} Reply with JSON."',
        '    catalog_header: "Members:"',
        '    include_examples: false',
        '    clarification_template: "Did you mean {{candidate}} ({{confidence}})? Tell me more."',
        'routing:',
        '  retries: 0',
      ].join('\n'),
    );
  });

  afterAll(async () => {
    await mesh?.stop();
  });

  it('routes a confident decision; the model gets the configured prompt, temperature 0.3, 500 tokens and the thread so far', async () => {
    openai
      .reset()
      .scriptFor(
        'prompted-model',
        decision({ agentId: 'billing', confidence: 0.9, reasoning: 'an invoice question' }),
        decision({ agentId: 'weather', confidence: 0.95, reasoning: 'a forecast' }),
      );
    const first = await send('Where is my invoice?');
    expect(first.error).toBeUndefined();
    expect(first.text).toBe('billing: Where is my invoice?');
    expect(first.route).toMatchObject([{ from: 'user', to: 'billing', hop: 0, reason: 'an invoice question', confidence: 0.9 }]);

    const second = await send('And will it rain tomorrow?', first.threadId);
    expect(second.text).toBe('weather: And will it rain tomorrow?');

    const [req1, req2] = openai.requestsFor(model);
    expect(openai.requestsFor(model)).toHaveLength(2);
    expect(req1!.body.temperature).toBe(0.3);
    expect(req1!.body.max_tokens).toBe(500);
    const [system, user] = messagesOf(req1!);
    expect(system!.content.startsWith('ROUTER OF THE SHOP. Members:\n- id: billing')).toBe(true);
    expect(system!.content).toContain('skill billing help: Invoices, refunds and payments [billing]');
    expect(system!.content).not.toContain('a question for billing'); // include_examples: false
    expect(user!.content).toBe('Latest user message:\nWhere is my invoice?');
    // The second decision sees the earlier messages of the thread (the last 2: the question and its answer).
    expect(messagesOf(req2!)[1]!.content).toBe(
      'Earlier in the conversation:\nuser: Where is my invoice?\nagent: billing: Where is my invoice?\nLatest user message:\nAnd will it rain tomorrow?',
    );
    const routes = await routesOf(mesh.client, first.threadId);
    expect(routes.map((r) => [r.to, r.confidence, r.reason])).toEqual([
      ['billing', 0.9, 'an invoice question'],
      ['weather', 0.95, 'a forecast'],
    ]);
  });

  it('asks the user to clarify below the threshold, with the configured text, and logs the decision', async () => {
    openai.reset().scriptFor(model, decision({ agentId: 'weather', confidence: 0.4, reasoning: 'could be anything' }));
    const res = await send('Help me with the thing');
    expect(res.final.status.state).toBe('input-required');
    expect(res.text).toBe('Did you mean weather (0.40)? Tell me more.');
    const routes = await routesOf(mesh.client, res.threadId);
    expect(routes).toMatchObject([{ outcome: 'clarify', confidence: 0.4 }]);
    expect(routes[0]!.reason).toContain('could be anything');
  });

  it('without a fallback agent, max attempts of invalid answers end in ROUTER_FAILURE for the user, saying what to do', async () => {
    openai
      .reset()
      .scriptFor(
        model,
        decision({ agentId: 'nobody', confidence: 0.9, reasoning: 'x' }),
        { text: 'not json at all' },
        decision({ agentId: 'billing', confidence: 0.9, reasoning: 'x', additionalAgents: ['billing'] }),
      );
    const res = await send('Route me somewhere');
    expect(openai.requestsFor(model)).toHaveLength(3);
    expect(res.error?.code).toBe('ROUTER_FAILURE');
    expect(res.error?.message).toContain('router failed after 3 attempts');
    expect(res.error?.message).toContain('repeats the primary agent "billing"');
    expect(res.error?.message).toMatch(/address an agent directly/i);
    expect(res.text).toMatch(/^ROUTER_FAILURE: /);
    // No agent answered in its place.
    expect(res.route.filter((s) => s.outcome !== 'failure')).toEqual([]);
    const routes = await routesOf(mesh.client, res.threadId);
    expect(routes).toMatchObject([{ outcome: 'failure', from: 'user', to: 'user' }]);
  });
});

describe('an LLM router with a fallback agent', () => {
  let mesh: Mesh;
  const model = 'fallback-model';

  beforeAll(async () => {
    mesh = await startMesh(
      'fallback',
      [
        '  prompts:',
        '    fallback_reason_template: "{{agent}} answers: the router failed {{attempts}} times"',
        'routing:',
        '  router_max_attempts: 2',
        '  fallback_agent: helpdesk',
        '  retries: 0',
      ].join('\n'),
    );
  });

  afterAll(async () => {
    await mesh?.stop();
  });

  it('after max attempts the fallback agent answers, and the route says why', async () => {
    openai.reset().scriptFor(model, { status: 500, message: 'upstream down' }, decision({ agentId: 'ghost', confidence: 1, reasoning: 'x' }));
    const res = await mesh.client.send('Anyone there?', { timeoutMs: 10_000 });
    expect(openai.requestsFor(model)).toHaveLength(2);
    expect(res.error).toBeUndefined();
    expect(res.text).toBe('helpdesk: Anyone there?');
    expect(res.route).toMatchObject([{ from: 'user', to: 'helpdesk', reason: 'helpdesk answers: the router failed 2 times' }]);
  });
});

describe('natural-language joining (aggregation: synthesis)', () => {
  let mesh: Mesh;
  const model = 'synthesis-model';

  beforeAll(async () => {
    mesh = await startMesh('synthesis', ['orchestration:', '  aggregation: synthesis', 'routing:', '  retries: 0'].join('\n'));
  });

  afterAll(async () => {
    await mesh?.stop();
  });

  const fanOut = decision({ agentId: 'billing', confidence: 0.9, reasoning: 'two questions', additionalAgents: ['weather'] });

  it("the router's model writes one answer from the agents' answers, streamed before the final answer", async () => {
    openai.reset().scriptFor(model, fanOut, { chunks: ['Your invoice ', 'is on its way, ', 'and no rain.'] });
    const events: Array<{ kind: string; text: string; agent?: unknown }> = [];
    const res = await mesh.client.send('Invoice and weather?', {
      timeoutMs: 10_000,
      onEvent: (e) => {
        if (e.kind === 'artifact-update')
          events.push({
            kind: 'chunk',
            text: e.artifact.parts.map((p) => (p.kind === 'text' ? p.text : '')).join(''),
            agent: e.artifact.metadata?.['troupe/agent'],
          });
        else if (e.kind === 'status-update' && e.final) events.push({ kind: 'final', text: '' });
      },
    });
    expect(res.error).toBeUndefined();
    expect(res.text).toBe('Your invoice is on its way, and no rain.');
    expect(events).toEqual([
      { kind: 'chunk', text: 'Your invoice ', agent: 'troupe' },
      { kind: 'chunk', text: 'is on its way, ', agent: 'troupe' },
      { kind: 'chunk', text: 'and no rain.', agent: 'troupe' },
      { kind: 'final', text: '' },
    ]);
    const meta = res.final.status.message?.metadata ?? {};
    expect(meta[META.synthesis]).toBe('model');
    expect(meta.agentsUsed).toEqual(['billing', 'weather']);
    // The model read the question and each agent's answer.
    const synthesis = openai.requestsFor(model)[1]!;
    const user = messagesOf(synthesis).find((m) => m.role === 'user')!.content;
    expect(user).toContain("The user's message:\nInvoice and weather?");
    expect(user).toContain('### billing\nbilling: Invoice and weather?');
    expect(user).toContain('### weather\nweather: Invoice and weather?');
  });

  it('keeps the attributed join when the model fails', async () => {
    openai.reset().scriptFor(model, fanOut, { status: 500, message: 'model down' });
    const res = await mesh.client.send('Invoice and weather again?', { timeoutMs: 10_000 });
    expect(res.error).toBeUndefined();
    expect(res.text).toBe('**billing**: billing: Invoice and weather again?\n\n**weather**: weather: Invoice and weather again?');
    expect(res.final.status.message?.metadata?.[META.synthesis]).toBe('join');
  });
});

describe('troupe up --team team.yaml', () => {
  const procs = new ProcessGroup();
  let transport: NatsTransport;
  let client: TroupeClient;
  const model = 'cli-model';

  beforeAll(async () => {
    const file = join(tmp, 'cli.yaml');
    writeFileSync(
      file,
      [
        'id: cli',
        'name: cli',
        'agents:',
        `  - module: ${AGENTS}`,
        'router:',
        `  model: {provider: openai, name: ${model}, base_url: "${openai.baseURL}"}`,
        'routing:',
        '  retries: 0',
      ].join('\n'),
    );
    await procs.spawnTroupe(['up', '--nats', nats.url, '--team', file], nats.env, { name: 'node' });
    transport = await NatsTransport.connect({ ...nats.asNode, name: 'cli-client' });
    client = new TroupeClient(transport, 'demo');
    await waitUntil(
      async () => {
        const reg = (await client.ps(300)).flatMap((r) => r.actors).find((a) => a.kind === 'registry');
        const agents = ((reg?.detail?.agents as string[] | undefined) ?? []).map((a) => a.split('×')[0]);
        return ['billing', 'weather', 'helpdesk'].every((id) => agents.includes(id));
      },
      'the node to run the team.yaml agents',
      20_000,
    );
  });

  afterAll(async () => {
    await transport?.close().catch(() => undefined);
    await procs.stopAll();
  });

  it('runs the team: its agents, and its LLM router on the model of the file', async () => {
    openai.reset().scriptFor(model, decision({ agentId: 'weather', confidence: 0.8, reasoning: 'rain' }));
    const res = await client.send('Umbrella today?', { timeoutMs: 15_000 });
    expect(res.error).toBeUndefined();
    expect(res.text).toBe('weather: Umbrella today?');
    expect(res.route).toMatchObject([{ to: 'weather', confidence: 0.8, reason: 'rain' }]);
    expect(openai.requestsFor(model)).toHaveLength(1);
  });
});
