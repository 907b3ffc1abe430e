/**
 * The thread gauges of a node hosted in-process (`serveMetrics` from the package root, scraped over real
 * HTTP): live threads while they are in memory, dormant ones once their actors are stopped at rest (their
 * records kept), passivated ones once idle longer, and back to live when a message rehydrates one.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AgentHost } from '../src/actors/agent-host.js';
import { TroupeNode } from '../src/actors/node.js';
import { serveMetrics, type MetricsServer } from '../src/observability/metrics.js';
import { defineAgent, reply } from '../src/sdk/agent.js';
import { TroupeClient } from '../src/sdk/client.js';
import { MemoryBus, MemoryTransport } from '../src/transport/memory.js';
import { waitUntil } from './helpers/wait.js';

const echo = defineAgent({ card: { id: 'echo', name: 'Echo', description: 'Echoes' }, handle: (_m, ctx) => reply(`echo: ${ctx.text}`, { to: 'user' }) });

async function gauge(server: MetricsServer, series: string): Promise<number | undefined> {
  const text = await (await fetch(server.url)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

describe('thread gauges of an in-process node', () => {
  const bus = new MemoryBus();
  let node: TroupeNode;
  let host: AgentHost;
  let client: TroupeClient;
  let server: MetricsServer;

  beforeAll(async () => {
    node = await new TroupeNode({ transport: new MemoryTransport({ bus }), idleMs: 1_500, dormantMs: 300 }).start();
    host = await new AgentHost({ transport: new MemoryTransport({ bus }), agent: echo }).start();
    await node.registry.waitFor(['echo']);
    client = new TroupeClient(new MemoryTransport({ bus }));
    server = await serveMetrics(0, '127.0.0.1');
  });

  afterAll(async () => {
    await server?.close();
    await host?.stop();
    await node?.stop();
  });

  it('reports live threads, then dormant ones at rest, then passivated ones once idle, then live again on their next message', async () => {
    const a = await client.send('one', { to: 'echo' });
    await client.send('two', { to: 'echo' });
    expect(await gauge(server, 'troupe_threads{state="live"}')).toBe(2);
    await waitUntil(async () => (await gauge(server, 'troupe_threads{state="dormant"}')) === 2 || undefined, 'both threads to be dormant', 10_000);
    expect(await gauge(server, 'troupe_threads{state="live"}')).toBe(0);
    expect(await gauge(server, 'troupe_threads{state="passivated"}')).toBe(0);
    await waitUntil(async () => (await gauge(server, 'troupe_threads{state="passivated"}')) === 2 || undefined, 'both threads to be passivated', 10_000);
    expect(await gauge(server, 'troupe_threads{state="live"}')).toBe(0);
    expect(await gauge(server, 'troupe_threads{state="dormant"}')).toBe(0);
    await client.send('three', { to: 'echo', threadId: a.threadId });
    expect(await gauge(server, 'troupe_threads{state="live"}')).toBe(1);
    expect(await gauge(server, 'troupe_threads{state="passivated"}')).toBe(1);
  });
});
