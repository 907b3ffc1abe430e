/**
 * Tool approval over a real nats-server: a durable node (JetStream ingress, KV store) and YAML agents in
 * this process, the model a local OpenAI-compatible server. A tool marked `requires_approval` does not run
 * until a person decides: the turn ends waiting, with the pending call as a data part; the node and the
 * agent are replaced while it waits, and the approval (with edited arguments) sent afterwards is honoured
 * from the thread's record; a refusal and a decision after the timeout reach the model as tool errors.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AgentHost } from '../src/actors/agent-host.js';
import { TroupeNode } from '../src/actors/node.js';
import { loadYamlAgent } from '../src/llm/agent.js';
import { CLIENT_ROUTING_URI, META, type ApprovalRequest, type Message } from '../src/protocol/index.js';
import { TroupeClient, type SendResult } from '../src/sdk/client.js';
import { KvThreadStore } from '../src/store/kv.js';
import { NatsTransport } from '../src/transport/nats.js';
import { OpenAIScriptedServer, type SeenRequest } from './helpers/model-servers.js';
import { startNatsServer, type NatsServerHandle } from './helpers/nats-server.js';
import { runTroupe } from './helpers/processes.js';

const PARTITIONS = 4;
interface OpenAIMessage {
  role: string;
  content: string | null;
  tool_call_id?: string;
  tool_calls?: Array<{ id: string; function: { name: string; arguments: string } }>;
}
const messagesOf = (req: SeenRequest) => req.body.messages as OpenAIMessage[];

const agentYaml = (name: string, extra = '') =>
  [
    `name: ${name}`,
    'description: Refunds orders after a person approves',
    `model: { provider: openai, name: ${name}-model }`,
    'instructions: { inline: You refund orders. }',
    'tools:',
    '  - name: refund',
    '    description: Refunds an order',
    '    type: function',
    '    file: tools.ts',
    '    function: refund',
    '    requires_approval: true',
    '    parameters:',
    '      order: { type: int, description: The order }',
    '      amount: { type: int, description: The amount }',
    extra,
    '',
  ].join('\n');

describe('tool approval over NATS', () => {
  let nats: NatsServerHandle;
  const openai = new OpenAIScriptedServer();
  const transports: NatsTransport[] = [];
  const hosts: AgentHost[] = [];
  let node: TroupeNode | undefined;
  let client: TroupeClient;
  let dir: string;
  const ledger = () => (existsSync(join(dir, 'ledger.txt')) ? readFileSync(join(dir, 'ledger.txt'), 'utf8') : '');

  const connect = async (name: string, user: string) => {
    const t = await NatsTransport.connect({ ...nats.as(user), name });
    transports.push(t);
    return t;
  };

  async function start(): Promise<void> {
    const nodeT = await connect('approval-node', 'node');
    node = await new TroupeNode({
      transport: nodeT,
      store: await KvThreadStore.open(nodeT.connection),
      durable: { nc: nodeT.connection, partitions: PARTITIONS, leaseTtlMs: 1_500 },
      config: { entryAgent: 'cashier', retries: 0, agentTimeoutMs: 20_000 },
    }).start();
    for (const name of ['cashier', 'laggard']) {
      const agent = await loadYamlAgent(join(dir, `${name}.yaml`), { env: { OPENAI_API_KEY: 'sk-test', OPENAI_BASE_URL: openai.baseURL }, maxRetries: 0 });
      hosts.push(await new AgentHost({ transport: await connect(`approval-${name}`, name), agent }).start());
    }
    await node.registry.waitFor(['cashier', 'laggard']);
  }

  async function restart(): Promise<void> {
    await Promise.all(hosts.splice(0).map((h) => h.stop()));
    await node?.stop();
    await start();
  }

  const decide = (threadId: string, decision: Record<string, unknown>, to?: string): Promise<SendResult> => {
    const message: Message = {
      kind: 'message',
      role: 'user',
      messageId: randomUUID(),
      parts: [{ kind: 'data', data: { [META.approval]: decision } }],
      ...(to ? { metadata: { [CLIENT_ROUTING_URI]: { recipient: to } } } : {}),
    };
    return client.send(message, { threadId, timeoutMs: 20_000 });
  };
  const requestOf = (res: SendResult) => res.final.status.message?.metadata?.[META.approval] as ApprovalRequest | undefined;

  beforeAll(async () => {
    nats = await startNatsServer({ partitions: PARTITIONS });
    for (const name of ['cashier', 'laggard']) await nats.addUser({ tenant: 'demo', role: 'agent', name });
    await openai.start();
    dir = mkdtempSync(join(tmpdir(), 'troupe-approval-'));
    writeFileSync(
      join(dir, 'tools.ts'),
      `import { appendFileSync } from 'node:fs';\nexport function refund(args: { order: number; amount: number }) {\n  appendFileSync(${JSON.stringify(join(dir, 'ledger.txt'))}, \`refund \${args.order} \${args.amount}\\n\`);\n  return \`refunded \${args.amount} on order \${args.order}\`;\n}\n`,
    );
    writeFileSync(join(dir, 'cashier.yaml'), agentYaml('cashier'));
    // Any decision reaches it too late.
    writeFileSync(join(dir, 'laggard.yaml'), agentYaml('laggard', 'approval_timeout_ms: 1'));
    await start();
    client = new TroupeClient(await connect('approval-client', 'client'), { tenant: 'demo', principal: 'client' });
  });

  afterAll(async () => {
    await Promise.all(hosts.map((h) => h.stop()));
    await node?.stop();
    await Promise.all(transports.map((t) => t.close().catch(() => undefined)));
    await openai.stop();
    await nats?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('waits for approval with the pending call, survives a restart, and runs the call with the edited arguments', async () => {
    openai.scriptFor('cashier-model', { text: 'I will refund it.', toolCalls: [{ id: 'call_r', name: 'refund', arguments: { order: 42, amount: 30 } }] });
    const asked = await client.send('Refund 30 on order 42', { threadId: 'approve-1', timeoutMs: 20_000 });
    expect(asked.error).toBeUndefined();
    expect(asked.final.status.state).toBe('input-required');
    const waiting = asked.final.status.message!;
    expect(waiting.parts[0]).toMatchObject({ kind: 'text', text: expect.stringContaining('refund({"order":42,"amount":30}) [call_r]') });
    expect(waiting.parts[1]).toMatchObject({
      kind: 'data',
      data: {
        [META.approval]: { agent: 'cashier', calls: [{ callId: 'call_r', tool: 'refund', arguments: '{"order":42,"amount":30}', needsApproval: true }] },
      },
    });
    expect(ledger()).toBe('');

    // The node and the agent go away while the person thinks: the request is in the thread's record.
    await restart();
    openai.scriptFor('cashier-model', { text: 'Refunded 20 on order 42.' });
    const done = await decide('approve-1', { decision: 'approve', callId: 'call_r', arguments: { order: 42, amount: 20 } });
    expect(done.error).toBeUndefined();
    expect(done.text).toBe('Refunded 20 on order 42.');
    expect(ledger()).toBe('refund 42 20\n');
    const resumed = openai.requestsFor('cashier-model').at(-1)!;
    expect(messagesOf(resumed).slice(1)).toEqual([
      { role: 'user', content: 'Refund 30 on order 42' },
      {
        role: 'assistant',
        content: 'I will refund it.',
        tool_calls: [{ id: 'call_r', type: 'function', function: { name: 'refund', arguments: '{"order":42,"amount":20}' } }],
      },
      { role: 'tool', tool_call_id: 'call_r', content: 'refunded 20 on order 42' },
    ]);
    // The decision is a message of the thread: in its record.
    const task = await client.task('approve-1');
    expect(
      task.history?.some((m) => m.parts.some((p) => p.kind === 'data' && (p.data[META.approval] as { decision?: string } | undefined)?.decision === 'approve')),
    ).toBe(true);
  });

  it('reports a refusal to the model, and runs nothing', async () => {
    openai.scriptFor(
      'cashier-model',
      { toolCalls: [{ id: 'call_d', name: 'refund', arguments: { order: 7, amount: 500 } }] },
      { text: 'I did not refund order 7.' },
    );
    await client.send('Refund 500 on order 7', { threadId: 'deny-1', timeoutMs: 20_000 });
    const done = await decide('deny-1', { decision: 'deny', reason: 'too much' });
    expect(done.text).toBe('I did not refund order 7.');
    expect(messagesOf(openai.requestsFor('cashier-model').at(-1)!).at(-1)).toEqual({
      role: 'tool',
      tool_call_id: 'call_d',
      content: JSON.stringify({ error: 'the user refused "refund": too much; it did not run' }),
    });
    expect(ledger()).toBe('refund 42 20\n');
  });

  it('troupe approve sends the decision to the waiting agent and prints its answer; troupe deny refuses', async () => {
    const env = { TROUPE_NATS_CREDS: nats.credsFile('client') };
    openai.scriptFor(
      'cashier-model',
      { toolCalls: [{ id: 'call_c', name: 'refund', arguments: { order: 5, amount: 1 } }] },
      { text: 'Refunded 1 on order 5.' },
    );
    await client.send('Refund 1 on order 5', { threadId: 'cli-1', timeoutMs: 20_000 });
    const approved = await runTroupe(['approve', 'cli-1', '--nats', nats.url, '--json'], env);
    expect(approved.code, approved.stderr).toBe(0);
    expect(JSON.parse(approved.stdout)).toMatchObject({
      threadId: 'cli-1',
      agent: 'cashier',
      decision: { decision: 'approve' },
      text: 'Refunded 1 on order 5.',
    });
    expect(ledger()).toBe('refund 42 20\nrefund 5 1\n');
    // Nothing waits any more.
    const again = await runTroupe(['deny', 'cli-1', '--nats', nats.url], env);
    expect(again.code).toBe(2);
    expect(again.stderr).toContain('waits for no approval');
  });

  it('refuses a call whose approval comes after the timeout, and tells the model so', async () => {
    openai.scriptFor(
      'laggard-model',
      { toolCalls: [{ id: 'call_t', name: 'refund', arguments: { order: 9, amount: 5 } }] },
      { text: 'The refund was not approved in time.' },
    );
    const asked = await client.send(
      {
        kind: 'message',
        role: 'user',
        messageId: randomUUID(),
        parts: [{ kind: 'text', text: 'Refund 5 on order 9' }],
        metadata: { [CLIENT_ROUTING_URI]: { recipient: 'laggard' } },
      },
      { threadId: 'late-1', timeoutMs: 20_000 },
    );
    expect(requestOf(asked)?.agent).toBe('laggard');
    // Not addressed: the thread sends the user's next message to the agent that waits (not the entry agent).
    const done = await decide('late-1', { decision: 'approve' });
    expect(done.route.map((r) => r.to)).toEqual(['laggard']);
    expect(done.text).toBe('The refund was not approved in time.');
    const last = messagesOf(openai.requestsFor('laggard-model').at(-1)!).at(-1)!;
    expect(last.role).toBe('tool');
    expect(last.content).toContain('timed out');
    expect(ledger()).not.toContain('refund 9');
  });
});
