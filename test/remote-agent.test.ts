/**
 * Remote A2A agents as mesh members, against real A2A servers built in the test with the SDK's server
 * side: "weather" speaks A2A 1.0 (the SDK 1.x), streams, declares the client-routing extension, needs a
 * bearer token and routes its answer back to `sender`; "calc" speaks A2A 0.3 (the SDK's 0.3 release),
 * does not stream and has no routing extension, so it answers the user. A team lists both by card URL.
 * Then `troupe agent --a2a` joins weather to a NATS mesh from its own process, and its token shows up in
 * no log line and no thread record.
 */
import { randomUUID } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import express from 'express';
import { Role, TaskState, type AgentCard } from '@a2a-js/sdk';
import { AgentEvent, DefaultRequestHandler, InMemoryTaskStore, type AgentExecutor } from '@a2a-js/sdk/server';
import { UserBuilder, agentCardHandler, jsonRpcHandler } from '@a2a-js/sdk/server/express';
import { DefaultRequestHandler as V03RequestHandler, InMemoryTaskStore as V03TaskStore, type AgentExecutor as V03Executor } from 'a2a-sdk-v03/server';
import { A2AExpressApp } from 'a2a-sdk-v03/server/express';
import type { AgentCard as V03Card } from 'a2a-sdk-v03';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmbedded } from '../src/team/embedded.js';
import { TroupeNode } from '../src/actors/node.js';
import { defineAgent, reply } from '../src/sdk/index.js';
import { defineTeam, withRemoteAgents } from '../src/team/team.js';
import { remoteAgent } from '../src/sdk/remote-agent.js';
import { TroupeClient } from '../src/sdk/client.js';
import { silentLogger } from '../src/observability/logger.js';
import { CLIENT_ROUTING_URI } from '../src/protocol/routing.js';
import type { ThreadEvent, TroupeError } from '../src/protocol/index.js';
import { KvThreadStore } from '../src/store/kv.js';
import { NatsTransport } from '../src/transport/nats.js';
import { freePort, startNatsServer, type NatsServerHandle } from './helpers/nats-server.js';
import { cliTestTimeout, ProcessGroup } from './helpers/processes.js';
import { waitUntil } from './helpers/wait.js';

const WEATHER_TOKEN = 'weather-secret-4f1c9a7e2b';
const servers: Server[] = [];
/** Authorization headers the weather server saw, and what each call asked (for the assertions). */
const seenAuth: Array<string | undefined> = [];
const weatherAsked: Array<{ text: string; routing: unknown }> = [];
/** The slow server's executor waits on this and never gets it: its caller must time out. */
const hang: Promise<void> = new Promise(() => undefined);

async function listen(app: express.Express, port = 0): Promise<string> {
  const server = createServer(app);
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

/** A2A 1.0 server (SDK 1.x): streams two chunks, then completes, routing its answer back to `sender`. */
async function startWeather(opts: { slow?: boolean; port?: number } = {}): Promise<string> {
  const app = express();
  let base = '';
  const card = (): AgentCard => ({
    name: 'Weather Service',
    description: 'Forecasts for any town',
    supportedInterfaces: [{ url: `${base}/`, protocolBinding: 'JSONRPC', tenant: '', protocolVersion: '1.0' }],
    provider: undefined,
    version: '2.1.0',
    capabilities: {
      streaming: true,
      pushNotifications: false,
      extensions: [{ uri: CLIENT_ROUTING_URI, description: 'routes its answers', required: false, params: undefined }],
    },
    securitySchemes: {},
    securityRequirements: [],
    defaultInputModes: ['text/plain'],
    defaultOutputModes: ['text/plain'],
    skills: [
      {
        id: 'forecast',
        name: 'Forecast',
        description: 'Weather forecasts',
        tags: ['weather'],
        examples: ['Weather in Oslo?'],
        inputModes: [],
        outputModes: [],
        securityRequirements: [],
      },
    ],
    signatures: [],
  });
  const executor: AgentExecutor = {
    execute: async (rc, bus) => {
      const text = rc.userMessage.parts.map((p) => (p.content?.$case === 'text' ? p.content.value : '')).join('');
      weatherAsked.push({ text, routing: rc.userMessage.metadata?.[CLIENT_ROUTING_URI] });
      bus.publish(
        AgentEvent.task({
          id: rc.taskId,
          contextId: rc.contextId,
          status: { state: TaskState.TASK_STATE_WORKING, message: undefined, timestamp: undefined },
          history: [rc.userMessage],
          artifacts: [],
          metadata: {},
        }),
      );
      if (opts.slow) await hang;
      for (const chunk of ['Sunny ', 'tomorrow']) {
        bus.publish(
          AgentEvent.artifactUpdate({
            taskId: rc.taskId,
            contextId: rc.contextId,
            artifact: {
              artifactId: 'forecast',
              name: '',
              description: '',
              parts: [{ content: { $case: 'text', value: chunk }, metadata: undefined, filename: '', mediaType: 'text/plain' }],
              metadata: undefined,
              extensions: [],
            },
            append: true,
            lastChunk: false,
            metadata: undefined,
          }),
        );
      }
      const answer = {
        messageId: randomUUID(),
        contextId: rc.contextId,
        taskId: rc.taskId,
        role: Role.ROLE_AGENT,
        parts: [{ content: { $case: 'text' as const, value: `Sunny tomorrow (${text})` }, metadata: undefined, filename: '', mediaType: 'text/plain' }],
        metadata: { [CLIENT_ROUTING_URI]: { recipient: 'sender', reason: 'forecast ready' } },
        extensions: [],
        referenceTaskIds: [],
      };
      bus.publish(
        AgentEvent.statusUpdate({
          taskId: rc.taskId,
          contextId: rc.contextId,
          status: { state: TaskState.TASK_STATE_COMPLETED, message: answer, timestamp: new Date().toISOString() },
          metadata: undefined,
        }),
      );
    },
    cancelTask: async () => undefined,
  };
  app.use((req, res, next) => {
    if (req.path.startsWith('/.well-known')) return next();
    seenAuth.push(req.headers.authorization);
    if (req.headers.authorization !== `Bearer ${WEATHER_TOKEN}`) return void res.status(401).json({ error: 'unauthorized' });
    next();
  });
  base = await listen(app, opts.port);
  const handler = new DefaultRequestHandler(card(), new InMemoryTaskStore(), executor);
  app.use('/.well-known/agent-card.json', agentCardHandler({ agentCardProvider: async () => card() }));
  app.use(jsonRpcHandler({ requestHandler: handler, userBuilder: UserBuilder.noAuthentication }));
  return `${base}/.well-known/agent-card.json`;
}

/** A2A 0.3 server (the SDK's 0.3 release): answers with a message, no streaming, no routing extension. */
async function startCalc(): Promise<string> {
  const app = express();
  let base = '';
  const base0 = await listen(app);
  base = base0;
  const card: V03Card = {
    name: 'Calc',
    description: 'Adds numbers',
    url: `${base}/`,
    protocolVersion: '0.3.0',
    version: '0.3.0',
    preferredTransport: 'JSONRPC',
    capabilities: { streaming: false },
    defaultInputModes: ['text/plain'],
    defaultOutputModes: ['text/plain'],
    skills: [{ id: 'add', name: 'Add', description: 'Adds', tags: ['math'] }],
  };
  const executor: V03Executor = {
    execute: async (rc, bus) => {
      const text = rc.userMessage.parts.map((p) => (p.kind === 'text' ? p.text : '')).join('');
      bus.publish({ kind: 'message', role: 'agent', messageId: randomUUID(), contextId: rc.contextId, parts: [{ kind: 'text', text: `calc: ${text}` }] });
      bus.finished();
    },
    cancelTask: async () => undefined,
  };
  new A2AExpressApp(new V03RequestHandler(card, new V03TaskStore(), executor)).setupRoutes(app);
  return `${base}/.well-known/agent-card.json`;
}

/** The local entry agent: sends weather questions to `weather` and relays what comes back. */
const main = defineAgent({
  card: { id: 'main', name: 'Main', description: 'Front desk' },
  handle: (_message, ctx) => {
    if (ctx.sender === 'weather') return reply(`main relays: ${ctx.text}`, { to: 'user' });
    if (/weather/i.test(ctx.text)) return reply(ctx.text, { to: 'weather', reason: 'a forecast' });
    if (/calc/i.test(ctx.text)) return reply(ctx.text, { to: 'calc', reason: 'arithmetic' });
    return reply('ask me about the weather', { to: 'user' });
  },
});

let weatherCard: string;
let calcCard: string;

beforeAll(async () => {
  [weatherCard, calcCard] = await Promise.all([startWeather(), startCalc()]);
});

afterAll(async () => {
  await Promise.all(
    servers.map(
      (s) =>
        new Promise<void>((resolve) => {
          s.closeAllConnections();
          s.close(() => resolve());
        }),
    ),
  );
});

describe('remote A2A agents in a team', () => {
  let mesh: Awaited<ReturnType<typeof startEmbedded>>;
  beforeAll(async () => {
    const team = defineTeam({
      name: 'with-remotes',
      agents: [main, { id: 'weather', a2a: weatherCard, token: WEATHER_TOKEN }, { id: 'calc', a2a: calcCard }],
      config: { entryAgent: 'main', retries: 0, agentTimeoutMs: 10_000 },
    });
    mesh = await startEmbedded(await withRemoteAgents(team), silentLogger());
  });
  afterAll(() => mesh?.stop());

  it('an A2A 1.0 remote with client routing: gets the routing request, streams its chunks to the user, routes back to sender', async () => {
    const events: ThreadEvent[] = [];
    const result = await mesh.client.send('What is the weather in Oslo?', { onEvent: (e) => events.push(e) });
    expect(result.text).toBe('main relays: Sunny tomorrow (What is the weather in Oslo?)');
    expect(result.route.map((s) => `${s.from}->${s.to}`)).toEqual(['user->main', 'main->weather', 'weather->main']);
    const chunks = events.flatMap((e) => (e.kind === 'artifact-update' ? e.artifact.parts.flatMap((p) => (p.kind === 'text' ? [p.text] : [])) : []));
    expect(chunks.join('')).toBe('Sunny tomorrow');
    const asked = weatherAsked.at(-1);
    expect(asked?.routing).toMatchObject({ sender: 'main', agentCards: expect.arrayContaining([expect.objectContaining({ id: 'main' })]) });
    expect(seenAuth.at(-1)).toBe(`Bearer ${WEATHER_TOKEN}`);
    // The card the mesh sees is the remote one, under the team's id; no token in it.
    const card = mesh.node.registry.card('weather');
    expect(card).toMatchObject({ id: 'weather', name: 'Weather Service', capabilities: { streaming: true } });
    expect(card?.skills.map((s) => s.id)).toEqual(['forecast']);
    expect(JSON.stringify(card)).not.toContain(WEATHER_TOKEN);
    const record = await mesh.node.threads.store.get('demo', result.threadId);
    expect(JSON.stringify(record)).not.toContain(WEATHER_TOKEN);
  });

  it('an A2A 0.3 remote without the routing extension answers the user', async () => {
    const result = await mesh.client.send('calc 2 + 2');
    expect(result.text).toBe('calc: calc 2 + 2');
    expect(result.final.status.message?.metadata?.['troupe/agent']).toBe('calc');
    expect(result.route.map((s) => s.to)).toEqual(['main', 'calc']);
  });
});

describe("remote agent failures are typed like a local agent's", () => {
  it('a remote that does not answer in time is AGENT_TIMEOUT; a wrong token or a bad card URL is a typed error', async () => {
    const slowCard = await startWeather({ slow: true });
    const slow = await remoteAgent({ card: slowCard, token: WEATHER_TOKEN, id: 'weather', timeoutMs: 200 });
    const mesh = await startEmbedded(defineTeam({ name: 'slow', agents: [slow], config: { entryAgent: 'weather', retries: 0 } }), silentLogger());
    try {
      const result = await mesh.client.send('forecast please');
      expect(result.error?.code).toBe('AGENT_TIMEOUT');
    } finally {
      await mesh.stop();
    }
    const noToken = await remoteAgent({ card: weatherCard, id: 'weather' });
    const mesh2 = await startEmbedded(defineTeam({ name: 'no-token', agents: [noToken], config: { entryAgent: 'weather', retries: 0 } }), silentLogger());
    try {
      const result = await mesh2.client.send('forecast please');
      expect(result.error?.code).toBe('AGENT_ERROR');
    } finally {
      await mesh2.stop();
    }
    // Without an id the agent has no name until its card is read: a clear error, not "no agent with that id".
    const refused = await remoteAgent({ card: 'http://127.0.0.1:9/.well-known/agent-card.json' }).catch((err: unknown) => err as TroupeError);
    expect(refused).toMatchObject({ code: 'AGENT_UNREACHABLE', message: expect.stringContaining('cannot read the remote agent card at http://127.0.0.1:9/') });
    expect((refused as TroupeError).hint).not.toContain('no agent with that id');
  });
});

describe('a remote agent whose endpoint is down when it starts', () => {
  it('joins under its id, unavailable in ps with its source and endpoint; its calls are AGENT_UNREACHABLE; once the endpoint is up, a card read makes it ready', async () => {
    const port = await freePort();
    const cardUrl = `http://127.0.0.1:${port}/.well-known/agent-card.json`;
    const late = await remoteAgent({ card: cardUrl, token: WEATHER_TOKEN, id: 'weather', refreshMs: 100 });
    const mesh = await startEmbedded(defineTeam({ name: 'late', agents: [main, late], config: { entryAgent: 'main', retries: 0 } }), silentLogger());
    try {
      const weatherRow = async () => (await mesh.client.ps(200)).flatMap((r) => r.actors).find((a) => a.kind === 'agent' && a.id === 'weather');
      const down = await weatherRow();
      expect(down?.state).toBe('unavailable');
      expect(down?.detail).toMatchObject({
        source: 'a2a',
        endpoint: cardUrl,
        reason: expect.stringContaining(`the remote card at ${cardUrl} could not be read`),
      });
      expect(mesh.node.registry.card('weather')).toMatchObject({ id: 'weather', name: 'weather' });
      const refused = await mesh.client.send('Weather in Oslo?');
      expect(refused.error?.code).toBe('AGENT_UNREACHABLE');

      await startWeather({ port });
      // A ps makes every agent announce: the registry gets the card the last read found.
      const up = await waitUntil(async () => {
        const row = await weatherRow();
        return row?.state.startsWith('ready') && mesh.node.registry.card('weather')?.name === 'Weather Service' && row;
      }, 'the remote card read again');
      expect(up.detail).toMatchObject({ source: 'a2a', endpoint: `http://127.0.0.1:${port}/` });
      expect(up.detail?.['reason']).toBeUndefined();
      expect(mesh.node.registry.card('weather')?.skills.map((s) => s.id)).toEqual(['forecast']);
      const answered = await mesh.client.send('Weather in Oslo?');
      expect(answered.text).toBe('main relays: Sunny tomorrow (Weather in Oslo?)');
    } finally {
      await mesh.stop();
    }
  });
});

describe('`troupe agent --a2a` on a NATS mesh', () => {
  let nats: NatsServerHandle;
  let node: TroupeNode;
  let store: KvThreadStore;
  const transports: NatsTransport[] = [];
  const group = new ProcessGroup();

  beforeAll(async () => {
    nats = await startNatsServer();
    const nodeT = await NatsTransport.connect({ ...nats.as('node'), name: 'remote-test-node' });
    transports.push(nodeT);
    store = await KvThreadStore.open(nodeT.connection);
    node = await new TroupeNode({
      transport: nodeT,
      store,
      durable: { nc: nodeT.connection, partitions: 8 },
      config: { entryAgent: 'weather', retries: 0 },
    }).start();
  });
  afterAll(async () => {
    await group.stopAll();
    await node?.stop();
    await store?.close();
    await Promise.all(transports.map((t) => t.close().catch(() => undefined)));
    await nats?.stop();
  });

  it(
    'joins a remote A2A agent from its own process; the token is in no log line and no record',
    async () => {
      const proc = await group.spawnTroupe(
        ['agent', '--a2a', weatherCard, '--id', 'weather', '--nats', nats.url, '--log-level', 'trace'],
        {
          TROUPE_NATS_CREDS: nats.credsFile('weather'),
          TROUPE_A2A_TOKEN: WEATHER_TOKEN,
        },
        { ready: /agent instance\(s\) joined .*weather \(remote A2A agent\)/ },
      );
      await node.registry.waitFor(['weather']);
      const client = new TroupeClient(await NatsTransport.connect({ ...nats.as('client'), name: 'remote-test-client' }).then((t) => (transports.push(t), t)), {
        tenant: 'demo',
        principal: 'client',
      });
      const result = await client.send('Weather in Bergen?', { timeoutMs: 15_000 });
      expect(result.text).toBe('Sunny tomorrow (Weather in Bergen?)');
      expect(result.final.status.message?.metadata?.['troupe/agent']).toBe('weather');
      const record = await waitUntil(() => store.get('demo', result.threadId), 'the thread record');
      expect(JSON.stringify(record)).not.toContain(WEATHER_TOKEN);
      expect(proc.stdout + proc.stderr).not.toContain(WEATHER_TOKEN);
      expect(proc.stdout + proc.stderr).toContain('weather');
      expect(seenAuth.at(-1)).toBe(`Bearer ${WEATHER_TOKEN}`);
    },
    cliTestTimeout(2),
  );
});
