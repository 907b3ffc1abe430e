/**
 * An agent's liveness comes from what only it can publish: its announces on `registry.<A>`, which the
 * broker lets only A publish. A `hello` reply can come from anyone subscribed to `hello` (every agent is):
 * here `sloth`, with its own credentials, answers every hello as `writer`. After the real `writer` stops,
 * neither `troupe status` (meshStatus) nor `troupe ps` (TroupeClient.ps) shows writer as live.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AgentHost } from '../src/actors/agent-host.js';
import { defineAgent } from '../src/sdk/agent.js';
import { TroupeClient } from '../src/sdk/client.js';
import { meshStatus } from '../src/sdk/status.js';
import { encodeJson } from '../src/protocol/index.js';
import { NatsTransport } from '../src/transport/nats.js';
import { subjects } from '../src/transport/subjects.js';
import { startNatsServer, type NatsServerHandle } from './helpers/nats-server.js';
import { ProcessGroup } from './helpers/processes.js';
import { waitUntil } from './helpers/wait.js';

const TENANT = 'demo';

describe("liveness is an agent's own word, over NATS with operator-mode credentials", () => {
  let nats: NatsServerHandle;
  const transports: NatsTransport[] = [];
  const procs = new ProcessGroup();
  let writer: AgentHost | undefined;
  let echo: AgentHost;
  let operator: TroupeClient;
  /** Hello requests the impostor answered. */
  let impostorAnswered = 0;

  const connect = async (user: string, name: string) => {
    const t = await NatsTransport.connect({ ...nats.as(user), name });
    transports.push(t);
    return t;
  };
  const agent = (id: string) => defineAgent({ card: { id, name: id, description: `${id} agent` }, handle: (_m, ctx) => `${id}: ${ctx.text}` });
  /** Agent ids `troupe ps` lists as agent actors, and `troupe status`'s agents check. */
  const seen = async () => {
    const replies = await operator.ps(1_000);
    const ps = [...new Set(replies.flatMap((r) => r.actors.filter((a) => a.kind === 'agent').map((a) => a.id)))].sort();
    const status = (await meshStatus(operator, { windowMs: 1_000 })).checks.agents.seen as string[];
    return { ps, status };
  };

  beforeAll(async () => {
    nats = await startNatsServer();
    await procs.spawnTroupe(['up', '--nats', nats.url, '--team', 'test/fixtures/durable-team.ts', '--no-agents', '--log-level', 'warn'], nats.env, {
      name: 'node',
    });
    writer = await new AgentHost({ transport: await connect('writer', 'liveness-writer'), agent: agent('writer'), tenant: TENANT }).start();
    echo = await new AgentHost({ transport: await connect('echo', 'liveness-echo'), agent: agent('echo'), tenant: TENANT }).start();
    // The impostor: an agent of the tenant answering every hello that is a request as writer, the way a
    // real agent answers (docs/wire-contract.md, step 2).
    const impostor = await connect('sloth', 'liveness-impostor');
    impostor.subscribe(subjects.hello(TENANT), (m) => {
      if (!m.reply) return;
      impostorAnswered++;
      const actor = { kind: 'agent', id: 'writer', state: 'ready.idle', node: 'node-FAKE', status: 'live', detail: { instance: 'fake-instance' } };
      m.respond(encodeJson({ node: 'node-FAKE', actors: [actor], passivated: 0 }));
    });
    await impostor.flush();
    operator = new TroupeClient(await connect('operator', 'liveness-operator'), { tenant: TENANT, principal: 'operator' });
  }, 90_000);

  afterAll(async () => {
    await procs.stopAll();
    await writer?.stop();
    await echo?.stop();
    await Promise.all(transports.map((t) => t.close().catch(() => undefined)));
    await nats?.stop();
  });

  it('a third party answering hello as writer keeps writer live in neither ps nor status once writer stopped', async () => {
    // Both real agents are seen while they run (the node's registry has their announces).
    const before = await waitUntil(
      async () => {
        const s = await seen();
        return s.ps.includes('writer') && s.ps.includes('echo') && s.status.includes('writer') && s.status.includes('echo') && s;
      },
      'writer and echo live',
      30_000,
    );
    expect(before.ps).toEqual(['echo', 'writer']);
    // The impostor's claim adds no writer process of its own.
    const writerProcesses = (await operator.ps(1_000)).filter((r) => r.actors.some((a) => a.kind === 'agent' && a.id === 'writer'));
    expect(writerProcesses.map((r) => r.node)).not.toContain('node-FAKE');

    await writer!.stop(); // says goodbye on registry.writer
    writer = undefined;
    const after = await waitUntil(
      async () => {
        const s = await seen();
        return !s.status.includes('writer') && s;
      },
      "writer gone from status's agents",
      30_000,
    );
    expect(impostorAnswered).toBeGreaterThan(0);
    expect(after.status).toEqual(['echo']);
    expect(after.ps).toEqual(['echo']);
  }, 90_000);
});
