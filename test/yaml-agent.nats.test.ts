/**
 * Agents from agent.yaml over a real nats-server, every agent its own `troupe agent` process, the models
 * scripted local servers speaking the OpenAI chat-completions and Anthropic messages wire formats (SSE
 * streaming, tool-call deltas). A YAML agent routes to a TS agent with the `route` tool, hands off with the `handoff` tool and
 * gets control back, is itself a handoff target that returns; its deltas stream in order; a failing tool,
 * a provider 500 and a model that never stops calling tools are survived or end in typed errors;
 * `ps` / `inspect` show where its loop is without the key; the example support agent runs its TS, Python
 * and prompt tools.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RouteStep } from '../src/machines/thread.js';
import { CLIENT_ROUTING_URI, CONVERSATION_URI, RegistryEventSchema, decode, type ActorInfo, type AgentCard, type ThreadEvent } from '../src/protocol/index.js';
import { TroupeClient, type SendResult } from '../src/sdk/client.js';
import { NatsTransport } from '../src/transport/nats.js';
import { subjects } from '../src/transport/subjects.js';
import { AnthropicScriptedServer, OpenAIScriptedServer, type SeenRequest } from './helpers/model-servers.js';
import { startNatsServer, type NatsServerHandle } from './helpers/nats-server.js';
import { cliTestTimeout, type Env, ProcessGroup, runTroupe, runTroupeJson } from './helpers/processes.js';
import { waitUntil } from './helpers/wait.js';

const TENANT = 'demo';
const SECRET = 'sk-test-SECRETKEY0123456789abcdef';
const CONCIERGE = 'concierge-model';
const RETURNER = 'returner-model';
const SUPPORT = 'gpt-4o-mini';

interface OpenAIMessage {
  role: string;
  content: string | null;
  tool_call_id?: string;
  tool_calls?: Array<{ id: string; function: { name: string; arguments: string } }>;
}
interface OpenAITool {
  function: { name: string; parameters: { properties: Record<string, { enum?: string[] }> } };
}

const messagesOf = (req: SeenRequest) => req.body.messages as OpenAIMessage[];
const toolsOf = (req: SeenRequest) => ((req.body.tools as OpenAITool[] | undefined) ?? []).map((t) => t.function);
const route = (r: { route: RouteStep[] }) => r.route.map((s) => [s.from, s.to, s.hop]);
const addressedTo = (recipient: string) => ({ [CLIENT_ROUTING_URI]: { recipient } });

describe('agents from agent.yaml over NATS', () => {
  let nats: NatsServerHandle;
  const openai = new OpenAIScriptedServer();
  const anthropic = new AnthropicScriptedServer();
  const procs = new ProcessGroup();
  let transport: NatsTransport;
  let client: TroupeClient;
  let natsArgs: string[];
  let modelEnv: Env;

  const send = (text: string, opts: Parameters<TroupeClient['send']>[1] = {}): Promise<SendResult> => client.send(text, { timeoutMs: 20_000, ...opts });

  /** Every event on a thread's output, as the user sees them. */
  const watch = (threadId: string): ThreadEvent[] => {
    const events: ThreadEvent[] = [];
    client.follow(threadId, (e) => events.push(e));
    return events;
  };
  const finals = (events: ThreadEvent[]) =>
    events.flatMap((e) =>
      e.kind === 'status-update' && e.final ? [(e.status.message?.parts ?? []).map((p) => (p.kind === 'text' ? p.text : '')).join('')] : [],
    );

  const agentActor = async (id: string): Promise<ActorInfo | undefined> =>
    (await client.ps(300)).flatMap((r) => r.actors).find((a) => a.kind === 'agent' && a.id === id);

  beforeAll(async () => {
    nats = await startNatsServer();
    await openai.start();
    await anthropic.start();
    natsArgs = ['--nats', nats.url];
    modelEnv = { ...nats.env, OPENAI_BASE_URL: openai.baseURL, OPENAI_API_KEY: SECRET, ANTHROPIC_BASE_URL: anthropic.baseURL, ANTHROPIC_API_KEY: SECRET };
    await procs.spawnTroupe(['up', ...natsArgs, '--team', 'test/fixtures/yaml-team.ts'], nats.env, { name: 'node' });
    await Promise.all([
      procs.spawnTroupe(['agent', 'test/fixtures/yaml-peers.ts', ...natsArgs], nats.env, { name: 'ts peers' }),
      procs.spawnTroupe(['agent', 'test/fixtures/yaml-agents/concierge/agent.yaml', ...natsArgs], modelEnv, { name: 'concierge' }),
      procs.spawnTroupe(['agent', 'test/fixtures/yaml-agents/returner/agent.yaml', ...natsArgs], modelEnv, { name: 'returner' }),
      procs.spawnTroupe(['agent', 'examples/yaml-agents/support/agent.yaml', ...natsArgs], modelEnv, { name: 'support' }),
    ]);
    transport = await NatsTransport.connect({ ...nats.asNode, name: 'yaml-e2e' });
    client = new TroupeClient(transport, TENANT);
    const want = ['concierge', 'returner', 'support', 'ledger', 'specialist', 'desk'];
    await waitUntil(
      async () => {
        const reg = (await client.ps(300)).flatMap((r) => r.actors).find((a) => a.kind === 'registry');
        const agents = ((reg?.detail?.agents as string[] | undefined) ?? []).map((a) => a.split('×')[0]);
        return want.every((id) => agents.includes(id));
      },
      `the registry to list ${want.join(', ')}`,
      20_000,
    );
  });

  afterAll(async () => {
    await transport?.close().catch(() => undefined);
    await procs.stopAll();
    await openai.stop();
    await anthropic.stop();
    await nats?.stop();
  });

  it('announces a card built from the agent.yaml: tools as skills, streaming, client routing', async () => {
    const cards: AgentCard[] = [];
    const sub = transport.subscribe(subjects.registryAll(TENANT), (m) => {
      const event = decode(RegistryEventSchema, m.data, 'registry event');
      if (event.kind === 'announce' && event.card.id === 'concierge') cards.push(event.card);
    });
    await transport.flush();
    // A node that starts asks every agent to announce at once: do the same.
    transport.publish(subjects.hello(TENANT), new Uint8Array());
    const card = await waitUntil(() => cards[0], 'the concierge to announce its card');
    sub.unsubscribe();
    expect(card).toMatchObject({
      id: 'concierge',
      name: 'concierge',
      description: 'Front desk of the test mesh; checks stock and routes work to the other agents',
      // Client routing, and the thread's conversation: every message after its last summary (memory on by default).
      capabilities: { streaming: true, extensions: [{ uri: CLIENT_ROUTING_URI }, { uri: CONVERSATION_URI, params: { maxMessages: 100 } }] },
    });
    expect(card.skills).toEqual([
      { id: 'check_stock', name: 'check_stock', description: 'Checks whether an item is in stock (fails for the item "broken")', tags: ['function'] },
      { id: 'warehouse', name: 'warehouse', description: 'Counts an item in the warehouse (a Python tool)', tags: ['function'] },
    ]);
    expect((await agentActor('concierge'))?.state).toBe('ready.idle');
  });

  it('routes to a TS agent with the route tool; the peers are in the prompt and the tool', async () => {
    openai.scriptFor(CONCIERGE, {
      text: 'Book 3 apples for the user.',
      toolCalls: [{ name: 'route', arguments: { recipient: 'ledger', reason: 'the ledger books orders' } }],
    });
    const res = await send('I want 3 apples');
    expect(res.error).toBeUndefined();
    expect(res.text).toBe('ledger: booked "Book 3 apples for the user." (from concierge)');
    expect(route(res)).toEqual([
      ['user', 'concierge', 0],
      ['concierge', 'ledger', 1],
    ]);
    expect(res.route[1]!.reason).toContain('the ledger books orders');

    const [req] = openai.requestsFor(CONCIERGE);
    expect(openai.requestsFor(CONCIERGE)).toHaveLength(1); // the answer came with the routing call
    const tools = toolsOf(req!);
    expect(tools.map((t) => t.name)).toEqual(['check_stock', 'warehouse', 'route', 'handoff', 'delegate']);
    const recipients = tools.find((t) => t.name === 'route')!.parameters.properties.recipient!.enum!;
    expect([...recipients].sort()).toEqual(['desk', 'ledger', 'returner', 'specialist', 'support', 'user']);
    const system = messagesOf(req!)[0]!;
    expect(system.role).toBe('system');
    expect(system.content).toContain('You are the concierge of a test shop.');
    expect(system.content).toContain('- ledger: Ledger — Books orders in the ledger');
    expect(messagesOf(req!)[1]).toEqual({ role: 'user', content: 'I want 3 apples' });
    openai.reset();
  });

  it('streams the model deltas to the user as they arrive, in order, before the final answer', async () => {
    openai.scriptFor(CONCIERGE, { chunks: ['The ', 'apples ', 'are ', 'in ', 'stock', '.'] });
    const events: ThreadEvent[] = [];
    const res = await send('Are apples in stock?', { onEvent: (e) => events.push(e) });
    expect(res.text).toBe('The apples are in stock.');
    const chunks = events.flatMap((e, i) => (e.kind === 'artifact-update' ? [{ i, e }] : []));
    expect(chunks.map(({ e }) => e.artifact.parts.map((p) => (p.kind === 'text' ? p.text : '')).join(''))).toEqual([
      'The ',
      'apples ',
      'are ',
      'in ',
      'stock',
      '.',
    ]);
    expect(chunks.every(({ e }) => e.artifact.metadata?.['troupe/agent'] === 'concierge')).toBe(true);
    const finalAt = events.findIndex((e) => e.kind === 'status-update' && e.final);
    expect(Math.max(...chunks.map((c) => c.i))).toBeLessThan(finalAt);
    openai.reset();
  });

  it('runs a TS and a Python tool in one round; the failing one reaches the model as a tool error', async () => {
    openai.scriptFor(
      CONCIERGE,
      {
        toolCalls: [
          { id: 'call_stock', name: 'check_stock', arguments: { item: 'broken' } },
          { id: 'call_count', name: 'warehouse', arguments: { item: 'apples' } },
        ],
      },
      { text: 'No record of that item, but 24 apples are in the warehouse.' },
    );
    const res = await send('Do you have broken apples?');
    expect(res.error).toBeUndefined();
    expect(res.text).toBe('No record of that item, but 24 apples are in the warehouse.');
    const second = openai.requestsFor(CONCIERGE)[1]!;
    const results = messagesOf(second).filter((m) => m.role === 'tool');
    expect(results).toEqual([
      { role: 'tool', tool_call_id: 'call_stock', content: JSON.stringify({ error: 'the stock service has no record of "broken"' }) },
      { role: 'tool', tool_call_id: 'call_count', content: JSON.stringify({ item: 'apples', count: 24, pid_is_separate: true }) },
    ]);
    openai.reset();
  });

  it('survives a provider 500 (retried with backoff), and a model error ends the turn typed while the agent keeps serving', async () => {
    openai.scriptFor(CONCIERGE, { status: 500, message: 'upstream hiccup' }, { text: 'Recovered after a server error.' });
    const ok = await send('hello?');
    expect(ok.error).toBeUndefined();
    expect(ok.text).toBe('Recovered after a server error.');
    expect(openai.requestsFor(CONCIERGE)).toHaveLength(2);

    openai.reset().scriptFor(CONCIERGE, { status: 401, message: `Incorrect API key provided: ${SECRET}` });
    const failed = await send('hello again?');
    expect(failed.error?.code).toBe('MODEL_ERROR');
    expect(failed.error?.message).toContain('Incorrect API key provided');
    expect(JSON.stringify(failed)).not.toContain(SECRET);
    expect(openai.requestsFor(CONCIERGE)).toHaveLength(1); // a 401 is not retried

    openai.reset().scriptFor(CONCIERGE, { text: 'Still here.' });
    expect((await send('still there?')).text).toBe('Still here.');
    openai.reset();
  });

  it('ends with TOOL_ROUND_LIMIT when the model never stops calling tools', async () => {
    const again = { toolCalls: [{ name: 'warehouse', arguments: { item: 'pears' } }] };
    openai.scriptFor(CONCIERGE, again, again, again);
    const res = await send('count pears forever');
    expect(res.error).toMatchObject({ code: 'TOOL_ROUND_LIMIT', message: 'agent "concierge": the model still asked for tools after 2 tool rounds' });
    expect(openai.requestsFor(CONCIERGE)).toHaveLength(3);
    expect(openai.unexpected).toEqual([]);
    openai.reset();
  });

  it('hands off to a TS specialist with the handoff tool, and resumes when it returns', async () => {
    const threadId = `handoff-${Date.now()}`;
    const events = watch(threadId);
    openai.scriptFor(
      CONCIERGE,
      {
        text: 'Passing you to our refunds specialist.',
        toolCalls: [{ name: 'handoff', arguments: { target: 'specialist', context_summary: 'The user wants a refund for order 42', reason: 'refunds' } }],
      },
      { text: 'Welcome back: your refund for order 42 is issued.' },
    );
    const first = await send('I want a refund for order 42', { threadId });
    expect(first.error).toBeUndefined();
    expect(first.text).toBe('specialist: I got "The user wants a refund for order 42" (refunds), 2 recent messages');
    expect(route(first).map(([from, to]) => `${from}>${to}`)).toEqual(['user>concierge', 'concierge>specialist']);

    // The specialist's last answer, then the concierge's, in the same turn.
    const done = await send('done, thanks', { threadId });
    const specialistAnswer = done.events.find((e) => e.kind === 'status-update' && !e.final && e.status.message?.metadata?.['troupe/agent'] === 'specialist');
    expect(specialistAnswer?.kind === 'status-update' ? specialistAnswer.status.message?.parts : undefined).toEqual([
      { kind: 'text', text: 'specialist: refund issued' },
    ]);
    expect(done.text).toBe('Welcome back: your refund for order 42 is issued.');
    expect(done.route.map((s) => s.to)).toEqual(['specialist', 'concierge']);
    expect(finals(events)).toContain('Welcome back: your refund for order 42 is issued.');

    const resumed = openai.requestsFor(CONCIERGE)[1]!;
    expect(messagesOf(resumed)[0]!.content).toContain('You handed the conversation to agent "specialist"; it has given control back (completed).');
    // The thread's conversation before the resume: its own answer as assistant, the specialist's named.
    expect(messagesOf(resumed).slice(1)).toEqual([
      { role: 'user', content: 'I want a refund for order 42' },
      { role: 'assistant', content: 'Passing you to our refunds specialist.' },
      { role: 'user', content: '[agent "specialist" answered] specialist: I got "The user wants a refund for order 42" (refunds), 2 recent messages' },
      { role: 'user', content: 'done, thanks' },
      { role: 'user', content: '[agent "specialist" answered] specialist: refund issued' },
      { role: 'user', content: 'Handoff to specialist completed: refund for order 42 issued' },
    ]);
    openai.reset();
  });

  it('as a handoff target (on Anthropic), gets the handoff context in its prompt and gives control back with return_handoff', async () => {
    const threadId = `target-${Date.now()}`;
    const events = watch(threadId);
    anthropic.scriptFor(
      RETURNER,
      { chunks: ['Returner here: ', 'what do you need?'] },
      { text: 'All sorted; handing you back.', toolCalls: [{ name: 'return_handoff', arguments: { status: 'completed', summary: 'sorted the visitor out' } }] },
    );
    const streamed: ThreadEvent[] = [];
    const first = await send('I need the returner', { threadId, metadata: addressedTo('desk'), onEvent: (e) => streamed.push(e) });
    expect(first.text).toBe('Returner here: what do you need?');
    expect(streamed.flatMap((e) => (e.kind === 'artifact-update' ? e.artifact.parts.map((p) => (p.kind === 'text' ? p.text : '')) : []))).toEqual([
      'Returner here: ',
      'what do you need?',
    ]);
    const [req] = anthropic.requestsFor(RETURNER);
    const system = req!.body.system as string;
    expect(system).toContain('Agent "desk" handed this conversation to you (needs the returner).');
    expect(system).toContain('What it told you: The visitor said: I need the returner');
    // The conversation comes as messages (the agent takes it), not as the handoff's lines in the prompt.
    expect(system).not.toContain('The conversation so far');
    expect(req!.body.messages).toEqual([
      { role: 'user', content: '[agent "desk" answered] desk: let me get the returner' },
      { role: 'user', content: 'I need the returner' },
    ]);
    // A target may route or give control back, but not start a second handoff.
    expect((req!.body.tools as Array<{ name: string }>).map((t) => t.name)).toEqual(['route', 'return_handoff']);

    // The returner's last answer, then the desk's, in the same turn.
    const back = await send('that is all', { threadId });
    const returnerAnswer = back.events.find((e) => e.kind === 'status-update' && !e.final && e.status.message?.metadata?.['troupe/agent'] === 'returner');
    expect(returnerAnswer?.kind === 'status-update' ? returnerAnswer.status.message?.parts : undefined).toEqual([
      { kind: 'text', text: 'All sorted; handing you back.' },
    ]);
    expect(back.text).toBe('desk: welcome back (completed) — Handoff to returner completed: sorted the visitor out');
    expect(finals(events).at(-1)).toBe('desk: welcome back (completed) — Handoff to returner completed: sorted the visitor out');
    anthropic.reset();
  });

  it('ps and inspect show where the loop is, with the model but never the key', async () => {
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    openai.scriptFor(CONCIERGE, { gate, then: { text: 'Thanks for waiting.' } });
    const threadId = `ps-loop-${process.pid}`; // no 13-digit run: redaction would mask it as a card number
    const pending = send('take your time', { threadId });
    // `ps` lists the model loop as an actor under the agent, with its thread.
    const loop = await waitUntil(async () => (await client.ps(300)).flatMap((r) => r.actors).find((a) => a.kind === 'llm-agent'), 'the loop in ps');
    expect(loop).toMatchObject({
      kind: 'llm-agent',
      id: `concierge/${threadId}`,
      state: 'thinking',
      threadId,
      parent: 'concierge',
      detail: { round: 0, attempt: 0, tools: [] },
    });
    expect((await agentActor('concierge'))?.state).toBe('ready.busy');

    // `inspect` shows what the agent last announced (a `ps` makes it announce): its loops and its model.
    type Inspected = {
      found: boolean;
      context: { instances: Array<{ status?: { state: string; detail?: { model: unknown; loops: Array<Record<string, unknown>> } } }> };
    };
    const inspected = await waitUntil(async () => {
      const res = await runTroupeJson<Inspected>(['inspect', 'concierge', ...natsArgs, '--json'], nats.env);
      return res.context.instances[0]?.status?.detail?.loops.length === 1 ? res : undefined;
    }, 'inspect to show the running loop');
    const status = inspected.context.instances[0]!.status!;
    expect(status.state).toBe('ready.busy');
    expect(status.detail!.model).toEqual({ provider: 'openai', name: CONCIERGE, endpoint: openai.baseURL });
    expect(status.detail!.loops[0]).toMatchObject({ threadId, state: 'thinking', round: 0 });
    const ps = await runTroupe(['ps', ...natsArgs], nats.env);
    expect(ps.stdout).toMatch(new RegExp(`llm-agent\\s+concierge/${threadId}\\s+thinking\\s`));
    expect(JSON.stringify(inspected) + ps.stdout).not.toContain(SECRET);

    release();
    expect((await pending).text).toBe('Thanks for waiting.');
    await waitUntil(async () => (await agentActor('concierge'))?.state === 'ready.idle', 'the concierge to be idle again');
    expect((await client.ps(300)).flatMap((r) => r.actors).filter((a) => a.kind === 'llm-agent')).toEqual([]);
    openai.reset();
  });

  it('the example support agent answers with its TS, Python and prompt tools', async () => {
    openai.scriptFor(
      SUPPORT,
      {
        toolCalls: [
          { id: 'o', name: 'lookup_order', arguments: { order_id: 'a-1001' } },
          { id: 's', name: 'shipping_quote', arguments: { destination: 'France', weight_kg: 2 } },
          { id: 'p', name: 'draft_apology', arguments: { customer: 'Ada', problem: 'a late parcel' } },
        ],
      },
      { text: 'We are so sorry, Ada. It will not happen again.' },
      { text: 'Order A-1001 has shipped and arrives Friday; shipping 2 kg to France costs 8.7 €.' },
    );
    const res = await send('Where is A-1001, and what does 2 kg to France cost?', { metadata: addressedTo('support') });
    expect(res.error).toBeUndefined();
    expect(res.text).toBe('Order A-1001 has shipped and arrives Friday; shipping 2 kg to France costs 8.7 €.');
    const [, prompt, last] = openai.requestsFor(SUPPORT);
    // The prompt tool's own model call: the template filled in, no tools.
    expect(prompt!.body.tools).toBeUndefined();
    expect(messagesOf(prompt!)).toEqual([
      { role: 'user', content: 'Write a two-sentence apology to Ada about this problem: a late parcel.\nBe warm and concrete; do not promise anything.\n' },
    ]);
    const results = Object.fromEntries(messagesOf(last!).flatMap((m) => (m.role === 'tool' ? [[m.tool_call_id, m.content]] : [])));
    expect(JSON.parse(results.o!)).toEqual({ order_id: 'A-1001', status: 'shipped', items: ['Sencha 100 g', 'Glass teapot'], eta: 'Friday' });
    expect(JSON.parse(results.s!)).toEqual({ destination: 'France', weight_kg: 2, price_eur: 8.7 });
    expect(results.p).toBe('We are so sorry, Ada. It will not happen again.');
    expect(messagesOf(last!)[0]!.content).toContain('You are the support agent of a small online shop');
    openai.reset();
  });

  it('never logs the key', () => {
    for (const p of procs.all) expect(p.stdout + p.stderr, p.name).not.toContain(SECRET);
  });

  it(
    'refuses to start an agent whose MCP server cannot start, an invalid agent.yaml, or no model key',
    async () => {
      const mcp = await runTroupe(['agent', 'test/fixtures/yaml-agents/with-mcp/agent.yaml', ...natsArgs], modelEnv);
      expect(mcp.code).toBe(1);
      expect(mcp.stderr).toContain('error TOOL_START_FAILED');
      expect(mcp.stderr).toContain(
        'tools[0] "files": MCP server "node -e \\"process.stderr.write(\'the docs folder is gone\'); process.exit(2)\\"" did not start',
      );
      expect(mcp.stderr).toContain('it wrote: the docs folder is gone');

      const invalid = await runTroupe(['agent', 'test/fixtures/agent-yaml/invalid/tool-name-with-space.yaml', ...natsArgs], modelEnv);
      expect(invalid.code).toBe(2);
      expect(invalid.stderr).toContain('error CONFIG_INVALID');
      expect(invalid.stderr).toContain(
        'test/fixtures/agent-yaml/invalid/tool-name-with-space.yaml:8:11 tools[0].name: "web search" may only contain letters, digits and _',
      );

      const keyless = await runTroupe(['agent', 'test/fixtures/yaml-agents/concierge/agent.yaml', ...natsArgs], {
        ...nats.env,
        OPENAI_API_KEY: undefined,
        OPENAI_BASE_URL: undefined,
      });
      expect(keyless.code).toBe(2);
      expect(keyless.stderr).toContain('model: provider openai needs OPENAI_API_KEY in the environment');
    },
    cliTestTimeout(3),
  );
});
