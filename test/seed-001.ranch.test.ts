/**
 * Seed 001, the `ranch` client-routing extension, with the seed's own payloads (verbatim): ranch's
 * SimplifiedAgentCard (`capabilities` a list of strings) in a registry card and in a routing request,
 * a routing response whose `reason` is `null` (serde's `None`), Troupe's routing requests in ranch's
 * shape, replies that declare the extension (`extensions: [URI]`), and the gateway's card declaring it.
 * The ranch agent is raw: its own announce and its own replies on the mesh's bus, no Troupe SDK.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defineAgent, reply, type AgentContext } from '../src/sdk/index.js';
import { defineTeam } from '../src/team/team.js';
import { startEmbedded } from '../src/team/embedded.js';
import { silentLogger } from '../src/observability/logger.js';
import { startGateway, type Gateway } from '../src/gateway/index.js';
import { MemoryTransport } from '../src/transport/memory.js';
import { subjects } from '../src/transport/subjects.js';
import { AgentCardSchema, CLIENT_ROUTING_URI, RoutingRequestSchema, encodeJson, readRoutingResponse, type Message } from '../src/protocol/index.js';
import { waitUntil } from './helpers/wait.js';

type Mesh = Awaited<ReturnType<typeof startEmbedded>>;

/** Seed 001, "Request Extension Data (Router → Agent)", verbatim. */
const SEED_REQUEST = {
  'https://ranch.woi.dev/extensions/client-routing/v1': {
    agentCards: [
      {
        id: 'researcher',
        name: 'Research Agent',
        description: 'Searches the web and summarizes findings',
        capabilities: ['search', 'summarize', 'citations'],
        supportsClientRouting: true,
      },
      {
        id: 'writer',
        name: 'Writer Agent',
        description: 'Creates formatted documents',
        capabilities: ['write', 'format', 'markdown'],
        supportsClientRouting: false,
      },
    ],
    sender: 'user',
  },
};

/** Seed 001, "Response Extension Data (Agent → Router)", verbatim. */
const SEED_RESPONSE = {
  'https://ranch.woi.dev/extensions/client-routing/v1': {
    recipient: 'researcher',
    reason: 'User query requires web search capabilities',
  },
};

/** The same, as serde writes `reason: None`. */
const SEED_RESPONSE_NO_REASON = { 'https://ranch.woi.dev/extensions/client-routing/v1': { recipient: 'researcher', reason: null } };

const agentMessage = (metadata: Record<string, unknown>): Message => ({
  kind: 'message',
  role: 'agent',
  messageId: 'r-1',
  parts: [{ kind: 'text', text: 'routing' }],
  metadata,
});

describe('seed 001 payloads, parsed', () => {
  it('reads the request with ranch capability lists, and the response with a reason or with reason null', () => {
    const request = RoutingRequestSchema.parse(SEED_REQUEST[CLIENT_ROUTING_URI]);
    expect(request.agentCards.map((c) => c.capabilities)).toEqual([
      ['search', 'summarize', 'citations'],
      ['write', 'format', 'markdown'],
    ]);
    expect(readRoutingResponse(agentMessage(SEED_RESPONSE))).toMatchObject({ recipient: 'researcher', reason: 'User query requires web search capabilities' });
    expect(readRoutingResponse(agentMessage(SEED_RESPONSE_NO_REASON))).toMatchObject({ recipient: 'researcher', reason: undefined });
  });

  it('reads a ranch-shaped agent card: the names kept, the extension URI among them an extension', () => {
    const card = AgentCardSchema.parse({
      id: 'researcher',
      name: 'Research Agent',
      description: 'Searches the web and summarizes findings',
      capabilities: ['search', 'summarize', CLIENT_ROUTING_URI],
    });
    expect(card.capabilities).toEqual({ names: ['search', 'summarize'], extensions: [{ uri: CLIENT_ROUTING_URI, required: false }] });
  });
});

describe('a ranch agent on the mesh', () => {
  let mesh: Mesh;
  let ranch: MemoryTransport;
  let gateway: Gateway;
  const seenByLead: AgentContext['peers'][] = [];
  const seenByRanch: Message[] = [];

  /** Troupe's lead hands every message to the ranch researcher, and answers with what came back. */
  const lead = defineAgent({
    card: { id: 'lead', name: 'Lead', description: 'Hands research to the researcher', capabilities: { names: ['plan'] } },
    handle: (_m, ctx) => {
      seenByLead.push(ctx.peers);
      if (ctx.sender === 'researcher') return reply(`lead got: ${ctx.text}`, { to: 'user' });
      return reply('asking the researcher', { to: 'researcher', reason: 'research needed' });
    },
  });

  beforeAll(async () => {
    mesh = await startEmbedded(defineTeam({ name: 'ranch', agents: [lead], config: { entryAgent: 'lead', retries: 0 } }), silentLogger());
    ranch = new MemoryTransport({ bus: mesh.bus });
    // The researcher as ranch writes it: its card with ranch's capability list, its replies by hand.
    ranch.subscribe(subjects.agentInbox('demo', 'researcher'), (msg) => {
      const message = JSON.parse(new TextDecoder().decode(msg.data)) as Message;
      seenByRanch.push(message);
      const answer: Message = {
        kind: 'message',
        role: 'agent',
        messageId: `ranch-${message.messageId}`,
        parts: [{ kind: 'text', text: 'three papers on quantum computing' }],
        extensions: [CLIENT_ROUTING_URI],
        metadata: { [CLIENT_ROUTING_URI]: { recipient: 'sender', reason: null } },
      };
      msg.respond(encodeJson(answer));
    });
    const card = {
      id: 'researcher',
      name: 'Research Agent',
      description: 'Searches the web and summarizes findings',
      capabilities: ['search', 'summarize', 'citations', CLIENT_ROUTING_URI],
    };
    ranch.publish(subjects.registry('demo', 'researcher'), encodeJson({ kind: 'announce', card, instanceId: 'ranch-1', ttlMs: 60_000 }));
    await mesh.node.registry.waitFor(['researcher']);
    gateway = await startGateway({ clients: { demo: mesh.client } });
  });

  afterAll(async () => {
    await gateway?.close();
    await ranch?.close();
    await mesh?.stop();
  });

  it('joins with its ranch card, gets the routing request in ranch shape, and its reason: null answer goes back to its sender', async () => {
    const res = await mesh.client.send('Find recent papers on quantum computing', { timeoutMs: 10_000 });
    expect(res.error).toBeUndefined();
    expect(res.text).toBe('lead got: three papers on quantum computing');
    expect(res.route.map((s) => [s.from, s.to])).toEqual([
      ['user', 'lead'],
      ['lead', 'researcher'],
      ['researcher', 'lead'],
    ]);
    // What the ranch agent was sent: the extension declared, agentCards in ranch's shape.
    const request = seenByRanch.at(-1)!;
    expect(request.extensions).toContain(CLIENT_ROUTING_URI);
    const cards = (request.metadata?.[CLIENT_ROUTING_URI] as { agentCards: Array<{ id: string; capabilities: unknown; supportsClientRouting: boolean }> })
      .agentCards;
    expect(cards).toContainEqual({
      id: 'lead',
      name: 'Lead',
      description: 'Hands research to the researcher',
      capabilities: ['plan', CLIENT_ROUTING_URI],
      supportsClientRouting: true,
    });
    // Troupe's own agent sees the ranch agent as ranch declared it.
    const peer = seenByLead.flat().find((p) => p.id === 'researcher');
    expect(peer).toEqual({
      id: 'researcher',
      name: 'Research Agent',
      description: 'Searches the web and summarizes findings',
      capabilities: ['search', 'summarize', 'citations', CLIENT_ROUTING_URI],
      supportsClientRouting: true,
    });
  });

  it("declares the extension on the Troupe agent's replies that use it, and on the gateway's card", async () => {
    const res = await mesh.client.send('Find recent papers on otters', { timeoutMs: 10_000 });
    const task = await mesh.client.task(res.final.taskId);
    const leadsRouting = await waitUntil(
      () => task.history?.find((m) => m.role === 'agent' && m.metadata?.['troupe/agent'] === 'lead' && m.metadata?.[CLIENT_ROUTING_URI] !== undefined),
      "lead's routing reply",
    );
    expect(leadsRouting.extensions).toEqual([CLIENT_ROUTING_URI]);
    const card = (await (await fetch(`${gateway.url}/.well-known/agent-card.json`)).json()) as {
      capabilities: { extensions: Array<{ uri: string; required: boolean }> };
    };
    expect(card.capabilities.extensions).toContainEqual(expect.objectContaining({ uri: CLIENT_ROUTING_URI, required: false }));
    const v1 = (await (await fetch(`${gateway.url}/.well-known/agent-card.json`, { headers: { 'a2a-version': '1.0' } })).json()) as {
      capabilities: { extensions: Array<{ uri: string }> };
    };
    expect(v1.capabilities.extensions.map((e) => e.uri)).toContain(CLIENT_ROUTING_URI);
  });

  it('answers a send that uses the extension with the A2A-Extensions header, over A2A 1.0 and 0.3; a send that does not, without it', async () => {
    const post = (body: unknown, headers: Record<string, string>) =>
      fetch(`${gateway.url}/`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
    // The seed's message, addressed to the ranch researcher with the seed's routing decision.
    const routed = (messageId: string) => ({
      kind: 'message',
      role: 'user',
      messageId,
      parts: [{ kind: 'text', text: 'Find recent papers on quantum computing' }],
      extensions: [CLIENT_ROUTING_URI],
      metadata: { [CLIENT_ROUTING_URI]: { recipient: 'researcher', reason: 'Query requires search capability' } },
    });
    const v03 = await post({ jsonrpc: '2.0', id: 1, method: 'message/send', params: { message: routed('ext-03') } }, {});
    expect(v03.headers.get('x-a2a-extensions')).toBe(CLIENT_ROUTING_URI);
    const v03Body = (await v03.json()) as { result: { history: Array<{ metadata?: Record<string, unknown> }> } };
    expect(v03Body.result.history.some((m) => m.metadata?.['troupe/agent'] === 'researcher')).toBe(true);

    const v1 = await post(
      {
        jsonrpc: '2.0',
        id: 2,
        method: 'SendMessage',
        params: { message: { role: 'ROLE_USER', messageId: 'ext-10', parts: [{ text: 'Find recent papers on quantum computing' }] } },
      },
      { 'a2a-version': '1.0', 'a2a-extensions': CLIENT_ROUTING_URI },
    );
    expect(v1.status).toBe(200);
    expect(v1.headers.get('a2a-extensions')).toBe(CLIENT_ROUTING_URI);
    await v1.body?.cancel();

    const plain = await post(
      { jsonrpc: '2.0', id: 3, method: 'message/send', params: { message: { ...routed('ext-plain'), extensions: [], metadata: {} } } },
      {},
    );
    expect(plain.headers.get('x-a2a-extensions')).toBeNull();
    expect(plain.headers.get('a2a-extensions')).toBeNull();
    await plain.body?.cancel();
  });
});
