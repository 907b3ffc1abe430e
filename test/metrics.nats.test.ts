/**
 * Prometheus metrics over real HTTP: a node (`troupe up --metrics-port`), a TS agent process and a YAML
 * agent process (`troupe agent --metrics-port`, the model a local server speaking Anthropic's messages
 * API) on a real nats-server. The metrics are scraped during a conversation and after it: turns by
 * outcome, hops, latencies, agent call errors by agent and code, threads, KV writes, partitions, inbound
 * lag on the node; requests and model tokens on the agents; A2A turns (and readiness) on a gateway.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CLIENT_ROUTING_URI } from '../src/protocol/routing.js';
import { TroupeClient } from '../src/sdk/client.js';
import { NatsTransport } from '../src/transport/nats.js';
import { send, textOf, userText, v1Client } from './helpers/a2a.js';
import { AnthropicScriptedServer } from './helpers/model-servers.js';
import { freePort, startNatsServer, type NatsServerHandle } from './helpers/nats-server.js';
import { cliTestTimeout, ProcessGroup, runTroupe } from './helpers/processes.js';
import { waitUntil } from './helpers/wait.js';

const TENANT = 'demo';

/** One scrape: GET /metrics over HTTP, parsed into `name{labels}` → value. */
async function scrape(port: number): Promise<{ text: string; value: (series: string) => number | undefined; contentType: string | null }> {
  const res = await fetch(`http://127.0.0.1:${port}/metrics`);
  expect(res.status).toBe(200);
  const text = await res.text();
  const values = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const space = line.lastIndexOf(' ');
    values.set(line.slice(0, space), Number(line.slice(space + 1)));
  }
  return { text, value: (series) => values.get(series), contentType: res.headers.get('content-type') };
}

describe('Prometheus metrics of a node and its agents', () => {
  let nats: NatsServerHandle;
  const anthropic = new AnthropicScriptedServer();
  const procs = new ProcessGroup();
  let transport: NatsTransport;
  let client: TroupeClient;
  const ports = { node: 0, agents: 0, llm: 0 };

  beforeAll(async () => {
    nats = await startNatsServer();
    await anthropic.start();
    ports.node = await freePort();
    ports.agents = await freePort();
    ports.llm = await freePort();
    const natsArgs = ['--nats', nats.url];
    await procs.spawnTroupe(['up', ...natsArgs, '--metrics-port', String(ports.node)], nats.env, { name: 'node' });
    await Promise.all([
      procs.spawnTroupe(['agent', 'test/fixtures/observed-team.ts', ...natsArgs, '--metrics-port', String(ports.agents)], nats.env, { name: 'agents' }),
      procs.spawnTroupe(
        ['agent', 'test/fixtures/yaml-agents/returner/agent.yaml', ...natsArgs, '--metrics-port', String(ports.llm)],
        {
          ...nats.env,
          ANTHROPIC_BASE_URL: anthropic.baseURL,
          ANTHROPIC_API_KEY: 'sk-test-metrics',
        },
        { name: 'returner' },
      ),
    ]);
    transport = await NatsTransport.connect({ ...nats.asNode, name: 'metrics-test' });
    client = new TroupeClient(transport, TENANT);
    await waitUntil(
      async () => {
        const reg = (await client.ps(300)).flatMap((r) => r.actors).find((a) => a.kind === 'registry');
        const agents = ((reg?.detail?.agents as string[] | undefined) ?? []).map((a) => a.split('×')[0]);
        return ['front', 'back', 'broken', 'returner'].every((id) => agents.includes(id));
      },
      'the registry to list front, back, broken and returner',
      20_000,
    );
  });

  afterAll(async () => {
    await transport?.close().catch(() => undefined);
    await procs.stopAll();
    await anthropic.stop();
    await nats?.stop();
  });

  it('counts turns, hops, agent calls, errors, KV writes and model tokens while a conversation runs', async () => {
    const before = await scrape(ports.node);
    expect(before.contentType).toMatch(/^text\/plain/);
    // Every metric is declared from the start, so dashboards see zeros rather than gaps.
    for (const name of [
      'troupe_turns_total',
      'troupe_hops_total',
      'troupe_turn_duration_seconds',
      'troupe_hop_duration_seconds',
      'troupe_threads',
      'troupe_partitions_owned',
      'troupe_inbound_pending_messages',
    ]) {
      expect(before.text).toContain(`# TYPE ${name} `);
    }
    expect(before.value('troupe_partitions_owned')).toBe(8);
    // The node took its 8 partitions free, and has lost none (every reason is there from the start, at 0).
    expect(before.value('troupe_partition_leases_taken_total{how="created"}')).toBe(8);
    for (const reason of ['released', 'expired', 'conflict']) expect(before.value(`troupe_partition_leases_lost_total{reason="${reason}"}`)).toBe(0);

    // First turn: front forwards to back (one hop), back answers the user.
    const first = await client.send('where is my order?', { to: 'front', timeoutMs: 15_000 });
    expect(first.text).toContain('back: answered');
    expect(first.route.map((s) => [s.from, s.to])).toEqual([
      ['user', 'front'],
      ['front', 'back'],
    ]);

    // Scraped mid-conversation: the first turn is counted.
    const during = await scrape(ports.node);
    const answered = (s: Awaited<ReturnType<typeof scrape>>) => s.value('troupe_turns_total{outcome="input-required"}') ?? 0;
    expect(answered(during)).toBe(1);
    expect(during.value('troupe_hops_total')).toBeGreaterThanOrEqual(1);
    expect(during.value('troupe_agent_call_duration_seconds_count{agent="front",outcome="ok"}')).toBe(1);
    expect(during.value('troupe_agent_call_duration_seconds_count{agent="back",outcome="ok"}')).toBe(1);
    expect(during.value('troupe_kv_writes_total{result="ok"}')).toBeGreaterThanOrEqual(1);
    expect(during.value('troupe_threads{state="live"}')).toBe(1);
    expect(during.value('troupe_inbound_pending_messages')).toBe(0);

    // Same thread, a second turn; then a thread whose agent fails; then an LLM agent's turn.
    await client.send('and when does it arrive?', { to: 'front', threadId: first.threadId, timeoutMs: 15_000 });
    const failed = await client.send('please break', { to: 'broken', timeoutMs: 15_000 });
    expect(failed.error?.code).toBe('AGENT_ERROR');
    anthropic.script({ text: 'returner: all settled' });
    const llm = await client.send('settle this', { to: 'returner', timeoutMs: 15_000 });
    expect(llm.text).toContain('all settled');

    const after = await scrape(ports.node);
    expect(answered(after)).toBe(3);
    expect(after.value('troupe_turns_total{outcome="error"}')).toBe(1);
    expect(after.value('troupe_turn_duration_seconds_count{outcome="input-required"}')).toBe(3);
    expect(after.value('troupe_agent_call_errors_total{agent="broken",code="AGENT_ERROR"}')).toBeGreaterThanOrEqual(1);
    expect(after.value('troupe_agent_call_duration_seconds_count{agent="front",outcome="ok"}')).toBe(2);
    expect(after.value('troupe_threads{state="live"}')).toBe(3);
    expect(after.value('troupe_kv_conflicts_total')).toBe(0);
    console.log(
      'node metrics after 4 turns:',
      after.text
        .split('\n')
        .filter((l) => /^troupe_(turns_total|hops_total|kv_writes_total|threads|partitions_owned|inbound_pending|agent_call_errors)/.test(l))
        .join(' | '),
    );

    // The agent processes: requests by agent and outcome; the LLM agent's tokens by model.
    const agents = await scrape(ports.agents);
    expect(agents.value('troupe_agent_requests_total{agent="front",outcome="ok"}')).toBe(2);
    expect(agents.value('troupe_agent_requests_total{agent="back",outcome="ok"}')).toBe(2);
    expect(agents.value('troupe_agent_requests_total{agent="broken",outcome="AGENT_ERROR"}')).toBeGreaterThanOrEqual(1);
    expect(agents.value('troupe_agent_request_duration_seconds_count{agent="front"}')).toBe(2);
    const model = await scrape(ports.llm);
    expect(model.value('troupe_model_tokens_total{model="returner-model",kind="input"}')).toBe(10);
    expect(model.value('troupe_model_tokens_total{model="returner-model",kind="output"}')).toBe(5);
    expect(model.value('troupe_model_calls_total{model="returner-model",outcome="ok"}')).toBe(1);
    // Process metrics come along, under the same prefix.
    expect(model.text).toContain('troupe_process_resident_memory_bytes');
  });

  it('answers anything but GET /metrics with a 404 that says where the metrics are', async () => {
    const res = await fetch(`http://127.0.0.1:${ports.node}/nope`);
    expect(res.status).toBe(404);
    expect(await res.text()).toContain('GET /metrics');
  });

  it(
    'counts the A2A turns a gateway serves (`troupe gateway --metrics-port`)',
    async () => {
      const port = await freePort();
      const gateway = await procs.spawnTroupe(
        ['gateway', '--nats', nats.url, '--port', '0', '--metrics-port', String(port), '--log-level', 'warn'],
        { TROUPE_NATS_CREDS: nats.credsFile('client') },
        {
          name: 'gateway',
          ready: /gateway listening on /,
        },
      );
      const url = /gateway listening on (http:\/\/\S+)/.exec(gateway.stderr)![1]!;
      const a2a = await v1Client(url);
      const result = await a2a.sendMessage(send(userText('how are you?', { metadata: { [CLIENT_ROUTING_URI]: { recipient: 'back' } } })));
      if (!('status' in result)) throw new Error(`expected a Task, got ${JSON.stringify(result)}`);
      expect(textOf(result.status?.message?.parts)).toContain('back: answered');
      const scraped = await scrape(port);
      expect(scraped.value('troupe_gateway_turns_total{outcome="input-required"}')).toBe(1);
      expect(scraped.value('troupe_gateway_turn_duration_seconds_count')).toBe(1);
      // Its readiness probe on the same port: started once it listens, and its NATS connection.
      const ready = await fetch(`http://127.0.0.1:${port}/readyz`);
      expect(ready.status).toBe(200);
      expect(await ready.json()).toEqual({ ready: true, checks: { started: { ok: true }, nats: { ok: true, detail: nats.url } } });
    },
    cliTestTimeout(2),
  );

  it('refuses a metrics port already in use with exit code 2 and what to do', async () => {
    const res = await runTroupe(['agent', 'test/fixtures/observed-team.ts', '--nats', nats.url, '--metrics-port', String(ports.node)], nats.env);
    expect(res.code).toBe(2);
    expect(res.stderr).toContain('pick another --metrics-port');
  });
});
