/**
 * Traces across processes: a node (`troupe up`) and an agent process (`troupe agent`) export over
 * OTLP/HTTP (OTEL_EXPORTER_OTLP_ENDPOINT) to a receiver in this test — a plain HTTP server decoding the
 * exporter's JSON — and this process is the client, tracing too. One conversation turn (user → front →
 * back → user) is one trace: the client's send is its root, the node's turn its child, each hop under
 * the turn, each agent call under its hop, each agent's handling (in the other process) under its call.
 * A failing agent's spans carry its Troupe error code. The answer comes back with the turn's traceparent.
 * The router's decision is a span with its confidence; a YAML agent's model call is a span under its
 * handling, with the tokens. Log lines about a traced message carry its traceId. A request to the A2A
 * gateway (`troupe gateway`, a process of its own) starts the trace of its turn. Handoffs and fan-outs
 * keep every call under its turn.
 */
import { createServer, type Server } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTracing, type TracingHandle } from '../src/observability/tracing.js';
import { HEADERS } from '../src/protocol/headers.js';
import { TroupeClient, userMessage } from '../src/sdk/client.js';
import { encodeJson } from '../src/protocol/codec.js';
import { NatsTransport } from '../src/transport/nats.js';
import { subjects } from '../src/transport/subjects.js';
import { CLIENT_ROUTING_URI } from '../src/protocol/routing.js';
import { send as a2aSend, textOf, userText, v1Client } from './helpers/a2a.js';
import { AnthropicScriptedServer, OpenAIScriptedServer } from './helpers/model-servers.js';
import { startNatsServer, type NatsServerHandle } from './helpers/nats-server.js';
import { cliTestTimeout, type ManagedProcess, ProcessGroup, READY_TIMEOUT_MS, runTroupeJson } from './helpers/processes.js';
import { waitUntil } from './helpers/wait.js';

const TENANT = 'demo';

interface OtlpAttribute {
  key: string;
  value: { stringValue?: string; intValue?: string | number; doubleValue?: number; boolValue?: boolean };
}
interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind: number;
  attributes?: OtlpAttribute[];
  events?: Array<{ name: string; attributes?: OtlpAttribute[] }>;
  status?: { code?: number; message?: string };
}
interface ReceivedSpan extends OtlpSpan {
  service: string;
  attrs: Record<string, string | number | boolean | undefined>;
}
interface OtlpExport {
  resourceSpans?: Array<{ resource?: { attributes?: OtlpAttribute[] }; scopeSpans?: Array<{ spans?: OtlpSpan[] }> }>;
}

const valueOf = (v: OtlpAttribute['value']) => v.stringValue ?? (v.intValue !== undefined ? Number(v.intValue) : undefined) ?? v.doubleValue ?? v.boolValue;
const attrsOf = (list: OtlpAttribute[] | undefined) => Object.fromEntries((list ?? []).map((a) => [a.key, valueOf(a.value)]));

/** An OTLP/HTTP trace receiver: POST /v1/traces with the JSON encoding, every span kept. */
class OtlpReceiver {
  readonly spans: ReceivedSpan[] = [];
  readonly contentTypes = new Set<string>();
  private server?: Server;
  url = '';

  async start(): Promise<this> {
    this.server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        this.contentTypes.add(String(req.headers['content-type']));
        if (req.method !== 'POST' || req.url !== '/v1/traces' || !String(req.headers['content-type']).startsWith('application/json')) {
          res.writeHead(415).end();
          return;
        }
        const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as OtlpExport;
        for (const rs of body.resourceSpans ?? []) {
          const service = String(attrsOf(rs.resource?.attributes)['service.name']);
          for (const ss of rs.scopeSpans ?? []) for (const span of ss.spans ?? []) this.spans.push({ ...span, service, attrs: attrsOf(span.attributes) });
        }
        res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
      });
    });
    await new Promise<void>((resolve) => this.server!.listen(0, '127.0.0.1', resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as { port: number }).port}`;
    return this;
  }

  inTrace(traceId: string): ReceivedSpan[] {
    return this.spans.filter((s) => s.traceId === traceId);
  }

  async stop(): Promise<void> {
    await new Promise<void>((resolve) => this.server?.close(() => resolve()));
  }
}

describe('traces of a conversation across the client, a node and an agent process', () => {
  let nats: NatsServerHandle;
  const receiver = new OtlpReceiver();
  const anthropic = new AnthropicScriptedServer();
  const openai = new OpenAIScriptedServer();
  const procs = new ProcessGroup();
  let node: ManagedProcess;
  let agents: ManagedProcess;
  let transport: NatsTransport;
  let client: TroupeClient;
  let tracing: TracingHandle | undefined;

  beforeAll(async () => {
    nats = await startNatsServer();
    await receiver.start();
    await anthropic.start();
    await openai.start();
    const otel = { OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url };
    const natsArgs = ['--nats', nats.url];
    node = await procs.spawnTroupe(
      ['up', ...natsArgs, '--team', 'test/fixtures/observed-router-team.ts', '--no-agents'],
      { ...nats.env, ...otel },
      { name: 'node' },
    );
    [agents] = await Promise.all([
      procs.spawnTroupe(['agent', 'test/fixtures/observed-team.ts', ...natsArgs], { ...nats.env, ...otel, TROUPE_LOG_LEVEL: 'debug' }, { name: 'agents' }),
      procs.spawnTroupe(
        ['agent', 'test/fixtures/yaml-agents/returner/agent.yaml', ...natsArgs],
        {
          ...nats.env,
          ...otel,
          ANTHROPIC_BASE_URL: anthropic.baseURL,
          ANTHROPIC_API_KEY: 'sk-test-traces',
        },
        { name: 'returner' },
      ),
      procs.spawnTroupe(
        ['agent', 'test/fixtures/yaml-agents/concierge/agent.yaml', ...natsArgs],
        {
          ...nats.env,
          ...otel,
          OPENAI_BASE_URL: openai.baseURL,
          OPENAI_API_KEY: 'sk-test-traces',
        },
        { name: 'concierge' },
      ),
    ]);
    tracing = await startTracing({ serviceName: 'test-client', env: { ...otel } });
    transport = await NatsTransport.connect({ ...nats.asNode, name: 'traces-test' });
    client = new TroupeClient(transport, TENANT);
    await waitUntil(
      async () => {
        const reg = (await client.ps(300)).flatMap((r) => r.actors).find((a) => a.kind === 'registry');
        const agents = ((reg?.detail?.agents as string[] | undefined) ?? []).map((a) => a.split('×')[0]);
        return ['front', 'back', 'broken', 'greeter', 'specialist', 'returner', 'concierge'].every((id) => agents.includes(id));
      },
      'the registry to list every agent',
      READY_TIMEOUT_MS,
    );
  });

  afterAll(async () => {
    await tracing?.shutdown();
    await transport?.close().catch(() => undefined);
    await procs.stopAll();
    await receiver.stop();
    await anthropic.stop();
    await openai.stop();
    await nats?.stop();
  });

  it('makes one trace of a turn, with the right parent of every span, in every process', async () => {
    expect(tracing).toBeDefined();
    // What the node publishes on the thread's output carries the turn's traceparent.
    const threadId = `t-traced-${Date.now()}`;
    const outHeaders: Array<Record<string, string>> = [];
    const sub = transport.subscribe(subjects.threadOut(TENANT, client.principal, threadId), (m) => {
      outHeaders.push(m.headers);
    });
    await transport.flush();
    const result = await client.send('where is my parcel?', { to: 'front', threadId, timeoutMs: 15_000 });
    sub.unsubscribe();
    expect(result.text).toContain('back: answered');
    await tracing!.flush();

    const send = await waitUntil(() => receiver.spans.find((s) => s.name === 'troupe.send' && s.attrs['troupe.thread'] === threadId), 'the client span');
    // The node and the agent process export on their own schedule: wait for their spans of this trace.
    const spans = await waitUntil(
      () => {
        const inTrace = receiver.inTrace(send.traceId);
        const handled = inTrace.filter((s) => s.name === 'troupe.agent.handle').length;
        const turn = inTrace.find((s) => s.name === 'troupe.turn');
        return handled >= 2 && turn ? inTrace : undefined;
      },
      'the spans of the node and the agent process in the same trace',
      15_000,
    );
    const byName = (name: string) => spans.filter((s) => s.name === name);
    const one = (name: string) => {
      const found = byName(name);
      expect(found, name).toHaveLength(1);
      return found[0]!;
    };
    console.log(
      'trace',
      send.traceId,
      spans.map((s) => `${s.service}:${s.name}${s.attrs['troupe.agent'] ? `(${String(s.attrs['troupe.agent'])})` : ''}`),
    );

    // Every process contributed, to this one trace.
    expect(new Set(spans.map((s) => s.service))).toEqual(new Set(['test-client', 'troupe-node', 'troupe-agent']));
    expect(send.parentSpanId ?? '').toBe('');
    const turn = one('troupe.turn');
    expect(turn.service).toBe('troupe-node');
    expect(turn.parentSpanId).toBe(send.spanId);
    expect(turn.attrs['troupe.thread']).toBe(threadId);
    expect(turn.events?.map((e) => e.name)).toContain('troupe.routed');

    // One hop span per step, under the turn; one agent call per hop, under it; the agent's handling
    // in the agent process under the call.
    const hops = byName('troupe.hop').sort((a, b) => Number(a.attrs['troupe.hop']) - Number(b.attrs['troupe.hop']));
    expect(hops.map((h) => [h.attrs['troupe.hop'], h.attrs['troupe.agent']])).toEqual([
      [0, 'front'],
      [1, 'back'],
    ]);
    for (const hop of hops) {
      expect(hop.parentSpanId).toBe(turn.spanId);
      const calls = byName('troupe.agent.call').filter((c) => c.parentSpanId === hop.spanId);
      expect(calls).toHaveLength(1);
      const call = calls[0]!;
      expect(call.attrs['troupe.agent']).toBe(hop.attrs['troupe.agent']);
      expect(call.attrs['troupe.attempt']).toBe(0);
      const handled = byName('troupe.agent.handle').filter((h) => h.parentSpanId === call.spanId);
      expect(handled).toHaveLength(1);
      expect(handled[0]!.service).toBe('troupe-agent');
      expect(handled[0]!.attrs['troupe.agent']).toBe(hop.attrs['troupe.agent']);
    }
    expect(spans.every((s) => (s.status?.code ?? 0) !== 2)).toBe(true);

    // The final answer went out with the turn's trace context.
    const finalHeaders = outHeaders.at(-1) ?? {};
    expect(finalHeaders[HEADERS.traceparent]).toMatch(new RegExp(`^00-${send.traceId}-${turn.spanId}-0[01]$`));

    // Log lines about this message carry its traceId, in the node and in the agent process (JSON: not a TTY).
    const linesOf = (proc: ManagedProcess) =>
      proc.stderr
        .split('\n')
        .filter((l) => l.startsWith('{'))
        .map((l) => JSON.parse(l) as { msg?: string; traceId?: string; thread?: string });
    const routed = linesOf(node).filter((l) => l.msg === 'routed' && l.thread === threadId);
    expect(routed.length).toBeGreaterThanOrEqual(2);
    expect(routed.every((l) => l.traceId === send.traceId)).toBe(true);
    const agentLines = linesOf(agents).filter((l) => l.thread === threadId);
    expect(agentLines.length).toBeGreaterThanOrEqual(2);
    expect(agentLines.every((l) => l.traceId === send.traceId)).toBe(true);
  });

  it("makes the router's decision a span under the turn, with its confidence", async () => {
    const result = await client.send('answer what the front passes on', { timeoutMs: 15_000 });
    await tracing!.flush();
    const send = await waitUntil(() => receiver.spans.find((s) => s.name === 'troupe.send' && s.attrs['troupe.thread'] === result.threadId), 'the client span');
    const spans = await waitUntil(
      () => {
        const inTrace = receiver.inTrace(send.traceId);
        return inTrace.some((s) => s.name === 'troupe.route') && inTrace.some((s) => s.name === 'troupe.turn') ? inTrace : undefined;
      },
      'the router span',
      15_000,
    );
    const turn = spans.find((s) => s.name === 'troupe.turn')!;
    const decision = spans.find((s) => s.name === 'troupe.route')!;
    expect(decision.parentSpanId).toBe(turn.spanId);
    expect(typeof decision.attrs['troupe.route.confidence']).toBe('number');
    expect(decision.attrs['troupe.route.agent']).toBe('back');
    console.log('router decision', decision.attrs);
  });

  it("traces a YAML agent's model call under its handling, with the tokens", async () => {
    anthropic.script({ text: 'returner: settled' });
    const result = await client.send('settle this', { to: 'returner', timeoutMs: 15_000 });
    expect(result.text).toContain('settled');
    await tracing!.flush();
    const send = await waitUntil(() => receiver.spans.find((s) => s.name === 'troupe.send' && s.attrs['troupe.thread'] === result.threadId), 'the client span');
    const spans = await waitUntil(
      () => {
        const inTrace = receiver.inTrace(send.traceId);
        return inTrace.some((s) => s.name === 'troupe.model.call') && inTrace.some((s) => s.name === 'troupe.agent.handle') ? inTrace : undefined;
      },
      'the model span',
      15_000,
    );
    const handled = spans.find((s) => s.name === 'troupe.agent.handle')!;
    const model = spans.find((s) => s.name === 'troupe.model.call')!;
    expect(handled.attrs['troupe.agent']).toBe('returner');
    expect(model.parentSpanId).toBe(handled.spanId);
    expect(model.attrs['gen_ai.request.model']).toBe('returner-model');
    expect(model.attrs['gen_ai.usage.input_tokens']).toBe(10);
    expect(model.attrs['gen_ai.usage.output_tokens']).toBe(5);
  });

  it("records a failing agent's error code on its spans", async () => {
    const result = await client.send('please break', { to: 'broken', timeoutMs: 15_000 });
    expect(result.error?.code).toBe('AGENT_ERROR');
    await tracing!.flush();
    const send = await waitUntil(() => receiver.spans.find((s) => s.name === 'troupe.send' && s.attrs['troupe.thread'] === result.threadId), 'the client span');
    const spans = await waitUntil(
      () => {
        const inTrace = receiver.inTrace(send.traceId);
        return inTrace.some((s) => s.name === 'troupe.agent.handle') && inTrace.some((s) => s.name === 'troupe.turn') ? inTrace : undefined;
      },
      'the spans of the failed turn',
      15_000,
    );
    const handled = spans.find((s) => s.name === 'troupe.agent.handle')!;
    expect(handled.attrs['troupe.error.code']).toBe('AGENT_ERROR');
    expect(handled.status?.code).toBe(2);
    const call = spans.find((s) => s.name === 'troupe.agent.call')!;
    expect(call.attrs['troupe.error.code']).toBe('AGENT_ERROR');
    expect(handled.parentSpanId).toBe(call.spanId);
    expect(send.attrs['troupe.error.code']).toBe('AGENT_ERROR');
  });

  it(
    'starts the trace at the gateway for an A2A request',
    async () => {
      const gateway = await procs.spawnTroupe(
        ['gateway', '--nats', nats.url, '--port', '0', '--log-level', 'warn'],
        { TROUPE_NATS_CREDS: nats.credsFile('client'), OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url },
        { name: 'gateway', ready: /gateway listening on / },
      );
      const url = /gateway listening on (http:\/\/\S+)/.exec(gateway.stderr)![1]!;
      const a2a = await v1Client(url);
      const result = await a2a.sendMessage(a2aSend(userText('hello from A2A', { metadata: { [CLIENT_ROUTING_URI]: { recipient: 'back' } } })));
      if (!('status' in result)) throw new Error(`expected a Task, got ${JSON.stringify(result)}`);
      expect(textOf(result.status?.message?.parts)).toContain('back: answered');
      const root = await waitUntil(
        () => receiver.spans.find((s) => s.name === 'troupe.gateway.turn' && s.attrs['troupe.thread'] === result.id),
        'the gateway span',
        15_000,
      );
      const spans = await waitUntil(
        () => {
          const inTrace = receiver.inTrace(root.traceId);
          return ['troupe.send', 'troupe.turn', 'troupe.agent.handle'].every((n) => inTrace.some((s) => s.name === n)) ? inTrace : undefined;
        },
        'the spans of the gateway turn',
        15_000,
      );
      expect(root.service).toBe('troupe-gateway');
      expect(root.parentSpanId ?? '').toBe('');
      const sendSpan = spans.find((s) => s.name === 'troupe.send')!;
      expect(sendSpan.service).toBe('troupe-gateway');
      expect(sendSpan.parentSpanId).toBe(root.spanId);
      expect(spans.find((s) => s.name === 'troupe.turn')!.parentSpanId).toBe(sendSpan.spanId);
      expect(spans.find((s) => s.name === 'troupe.agent.handle')!.attrs['troupe.agent']).toBe('back');

      // An A2A client that traces: its `traceparent` header makes the gateway's turn part of its trace.
      const callerTrace = 'a1b2c3d4e5f60718293a4b5c6d7e8f90';
      const callerSpan = '1122334455667788';
      const res = await fetch(`${url}/`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', traceparent: `00-${callerTrace}-${callerSpan}-01` },
        body: JSON.stringify({
          jsonrpc: '2.0',
          id: 1,
          method: 'message/send',
          params: {
            message: {
              kind: 'message',
              role: 'user',
              messageId: `m-${Date.now()}`,
              parts: [{ kind: 'text', text: 'traced caller' }],
              metadata: { [CLIENT_ROUTING_URI]: { recipient: 'back' } },
            },
          },
        }),
      });
      expect(res.status).toBe(200);
      const continued = await waitUntil(
        () => receiver.spans.find((s) => s.name === 'troupe.gateway.turn' && s.traceId === callerTrace),
        "the gateway span in the caller's trace",
        15_000,
      );
      expect(continued.parentSpanId).toBe(callerSpan);
      await waitUntil(() => receiver.inTrace(callerTrace).find((s) => s.name === 'troupe.agent.handle'), "the agent's span in the caller's trace", 15_000);
    },
    cliTestTimeout(2),
  );

  it('follows a handoff: the handoff request, and the next message going straight to the target, each in its turn', async () => {
    const first = await client.send('my parcel is lost', { to: 'greeter', timeoutMs: 15_000 });
    expect(first.text).toContain('specialist');
    const second = await client.send('it was blue', { threadId: first.threadId, timeoutMs: 15_000 });
    expect(second.text).toContain('specialist: on it');
    await tracing!.flush();
    const traceOf = async (threadId: string, nth: number, agents: string[]) => {
      const sends = await waitUntil(() => {
        const found = receiver.spans.filter((s) => s.name === 'troupe.send' && s.attrs['troupe.thread'] === threadId);
        return found.length > nth ? found : undefined;
      }, 'the client spans');
      const root = sends[nth]!;
      return waitUntil(
        () => {
          const inTrace = receiver.inTrace(root.traceId);
          const handled = inTrace.filter((s) => s.name === 'troupe.agent.handle').map((s) => String(s.attrs['troupe.agent']));
          return agents.every((a) => handled.includes(a)) && inTrace.some((s) => s.name === 'troupe.turn') ? inTrace : undefined;
        },
        `the spans of ${agents.join(', ')}`,
        15_000,
      );
    };
    const handoff = await traceOf(first.threadId, 0, ['greeter', 'specialist']);
    const direct = await traceOf(first.threadId, 1, ['specialist']);
    console.log(
      'handoff trace',
      handoff.map((s) => `${s.name}${s.attrs['troupe.agent'] ? `(${String(s.attrs['troupe.agent'])})` : ''}`),
    );
    for (const spans of [handoff, direct]) {
      const turn = spans.find((s) => s.name === 'troupe.turn')!;
      const byId = new Map(spans.map((s) => [s.spanId, s]));
      // Every agent's handling hangs off a call of the node, which hangs (through its hop) off this turn.
      for (const handled of spans.filter((s) => s.name === 'troupe.agent.handle')) {
        const call = byId.get(handled.parentSpanId ?? '')!;
        expect(call.name).toBe('troupe.agent.call');
        expect(byId.get(call.parentSpanId ?? '')?.parentSpanId).toBe(turn.spanId);
      }
    }
    expect(direct.filter((s) => s.name === 'troupe.agent.handle').map((s) => s.attrs['troupe.agent'])).toEqual(['specialist']);
  });

  it('traces a fan-out: every call of it under the same hop of the turn', async () => {
    const result = await client.send('a question for everyone', { timeoutMs: 15_000 });
    expect(result.text).toContain('back: answered');
    await tracing!.flush();
    const root = await waitUntil(() => receiver.spans.find((s) => s.name === 'troupe.send' && s.attrs['troupe.thread'] === result.threadId), 'the client span');
    const spans = await waitUntil(
      () => {
        const inTrace = receiver.inTrace(root.traceId);
        return inTrace.filter((s) => s.name === 'troupe.agent.handle').length >= 2 && inTrace.some((s) => s.name === 'troupe.turn') ? inTrace : undefined;
      },
      'the spans of the fan-out',
      15_000,
    );
    const turn = spans.find((s) => s.name === 'troupe.turn')!;
    expect(spans.find((s) => s.name === 'troupe.route')!.attrs['troupe.route.additional']).toBe(1);
    const calls = spans.filter((s) => s.name === 'troupe.agent.call');
    expect(calls.map((c) => c.attrs['troupe.agent']).sort()).toEqual(['back', 'specialist']);
    expect(calls.every((c) => c.attrs['troupe.fan_out'] === true)).toBe(true);
    expect(new Set(calls.map((c) => c.parentSpanId)).size).toBe(1);
    const hop = spans.find((s) => s.spanId === calls[0]!.parentSpanId)!;
    expect(hop.name).toBe('troupe.hop');
    expect(hop.parentSpanId).toBe(turn.spanId);
    for (const call of calls) expect(spans.some((s) => s.name === 'troupe.agent.handle' && s.parentSpanId === call.spanId)).toBe(true);
  });

  it("traces a YAML agent's tool calls next to its model calls, a failing tool with its error", async () => {
    openai.script(
      { toolCalls: [{ name: 'check_stock', arguments: { item: 'apples' } }] },
      { toolCalls: [{ name: 'check_stock', arguments: { item: 'broken' } }] },
      { text: 'concierge: checked' },
    );
    const result = await client.send('are apples in stock?', { to: 'concierge', timeoutMs: 15_000 });
    expect(result.text).toContain('concierge: checked');
    await tracing!.flush();
    const root = await waitUntil(() => receiver.spans.find((s) => s.name === 'troupe.send' && s.attrs['troupe.thread'] === result.threadId), 'the client span');
    const spans = await waitUntil(
      () => {
        const inTrace = receiver.inTrace(root.traceId);
        return inTrace.filter((s) => s.name === 'troupe.model.call').length >= 3 && inTrace.filter((s) => s.name === 'troupe.tool.call').length >= 2
          ? inTrace
          : undefined;
      },
      'the model and tool spans',
      15_000,
    );
    const handled = spans.find((s) => s.name === 'troupe.agent.handle')!;
    const tools = spans.filter((s) => s.name === 'troupe.tool.call');
    expect(tools.every((t) => t.parentSpanId === handled.spanId && t.attrs['troupe.tool'] === 'check_stock')).toBe(true);
    expect(tools.filter((t) => t.status?.code === 2)).toHaveLength(1);
    expect(spans.filter((s) => s.name === 'troupe.model.call').every((m) => m.parentSpanId === handled.spanId)).toBe(true);
  });

  it('starts the trace in `troupe send` and exports it before the command exits', async () => {
    const out = await runTroupeJson<{ threadId: string; text: string }>(['send', 'hello from the CLI', '--to', 'back', '--nats', nats.url, '--json'], {
      TROUPE_NATS_CREDS: nats.credsFile('client'),
      OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
    });
    expect(out.text).toContain('back: answered');
    // The command has exited: its span was flushed on the way out.
    const root = receiver.spans.find((s) => s.name === 'troupe.send' && s.attrs['troupe.thread'] === out.threadId);
    expect(root?.service).toBe('troupe-cli');
    const turn = await waitUntil(() => receiver.inTrace(root!.traceId).find((s) => s.name === 'troupe.turn'), 'the node span of the CLI trace', 15_000);
    expect(turn.parentSpanId).toBe(root!.spanId);
  });

  it('answers a message whose traceparent is garbage, in a trace of its own', async () => {
    const threadId = `t-garbage-${Date.now()}`;
    const message = userMessage('garbage trace', { metadata: { [CLIENT_ROUTING_URI]: { recipient: 'back' } } });
    const finals: string[] = [];
    const sub = transport.subscribe(subjects.threadOut(TENANT, client.principal, threadId), (m) => {
      const event = JSON.parse(new TextDecoder().decode(m.data)) as { final?: boolean; status?: { message?: { parts?: Array<{ text?: string }> } } };
      if (event.final) finals.push(event.status?.message?.parts?.[0]?.text ?? '');
    });
    await transport.flush();
    await transport.request(subjects.threadIn(TENANT, client.principal, threadId), encodeJson(message), {
      timeoutMs: 5_000,
      headers: { [HEADERS.msgId]: `${threadId}/${message.messageId}`, [HEADERS.traceparent]: '00-not-a-trace-at-all-zz' },
    });
    await waitUntil(() => finals[0], 'the answer', 15_000);
    sub.unsubscribe();
    expect(finals[0]).toContain('back: answered');
    const turn = await waitUntil(() => receiver.spans.find((s) => s.name === 'troupe.turn' && s.attrs['troupe.thread'] === threadId), 'the turn span', 15_000);
    expect(turn.parentSpanId ?? '').toBe('');
  });
});
