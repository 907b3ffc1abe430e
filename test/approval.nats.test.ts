/**
 * Tool approval over a real nats-server: a durable node (JetStream ingress, KV store) and YAML agents in
 * this process, the model a local OpenAI-compatible server. A tool marked `requires_approval` does not run
 * until a person decides: the turn ends waiting, with the pending call as a data part; the node and the
 * agent are replaced while it waits, and the approval (with edited arguments) sent afterwards is honoured
 * from the thread's record; a refusal reaches the model as a tool error; a call nobody decides on is
 * refused at its deadline by the thread itself, the model is told so, and the user gets its answer.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AgentHost } from '../src/actors/agent-host.js';
import { TroupeNode } from '../src/actors/node.js';
import { loadYamlAgent } from '../src/llm/agent.js';
import { CLIENT_ROUTING_URI, META, type ApprovalRequest, type Message, type TaskStatusUpdateEvent } from '../src/protocol/index.js';
import { TroupeClient, type SendResult } from '../src/sdk/client.js';
import { KvThreadStore } from '../src/store/kv.js';
import { NatsTransport } from '../src/transport/nats.js';
import { OpenAIScriptedServer, type SeenRequest } from './helpers/model-servers.js';
import { startNatsServer, type NatsServerHandle } from './helpers/nats-server.js';
import { runTroupe } from './helpers/processes.js';

const PARTITIONS = 4;
const AGENTS = ['cashier', 'clerk', 'hurried'];
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
    for (const name of AGENTS) {
      const agent = await loadYamlAgent(join(dir, `${name}.yaml`), { env: { OPENAI_API_KEY: 'sk-test', OPENAI_BASE_URL: openai.baseURL }, maxRetries: 0 });
      hosts.push(await new AgentHost({ transport: await connect(`approval-${name}`, name), agent }).start());
    }
    await node.registry.waitFor(AGENTS);
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
    for (const name of AGENTS) await nats.addUser({ tenant: 'demo', role: 'agent', name });
    await openai.start();
    dir = mkdtempSync(join(tmpdir(), 'troupe-approval-'));
    writeFileSync(
      join(dir, 'tools.ts'),
      `import { appendFileSync } from 'node:fs';\nexport function refund(args: { order: number; amount: number }) {\n  appendFileSync(${JSON.stringify(join(dir, 'ledger.txt'))}, \`refund \${args.order} \${args.amount}\\n\`);\n  return \`refunded \${args.amount} on order \${args.order}\`;\n}\n`,
    );
    writeFileSync(join(dir, 'cashier.yaml'), agentYaml('cashier'));
    writeFileSync(join(dir, 'clerk.yaml'), agentYaml('clerk'));
    // Nobody decides in time: the thread refuses at the deadline by itself.
    writeFileSync(join(dir, 'hurried.yaml'), agentYaml('hurried', 'approval_timeout_ms: 1500'));
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
    // The stored task says what it waits on, and until when.
    const request = requestOf(asked)!;
    expect((await client.task('approve-1')).metadata?.[META.awaitingApproval]).toEqual({
      agent: 'cashier',
      messageId: waiting.messageId,
      expiresAt: request.expiresAt,
    });

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
    // The decision is a message of the thread: in its record; nothing waits any more.
    const task = await client.task('approve-1');
    expect(task.metadata?.[META.awaitingApproval]).toBeUndefined();
    expect(
      task.history?.some((m) => m.parts.some((p) => p.kind === 'data' && (p.data[META.approval] as { decision?: string } | undefined)?.decision === 'approve')),
    ).toBe(true);
  });

  it('reports a refusal to the model, and runs nothing; the unaddressed decision goes to the agent that waits', async () => {
    openai.scriptFor(
      'clerk-model',
      { toolCalls: [{ id: 'call_d', name: 'refund', arguments: { order: 7, amount: 500 } }] },
      { text: 'I did not refund order 7.' },
    );
    const asked = await client.send(
      {
        kind: 'message',
        role: 'user',
        messageId: randomUUID(),
        parts: [{ kind: 'text', text: 'Refund 500 on order 7' }],
        metadata: { [CLIENT_ROUTING_URI]: { recipient: 'clerk' } },
      },
      { threadId: 'deny-1', timeoutMs: 20_000 },
    );
    expect(requestOf(asked)?.agent).toBe('clerk');
    // Not addressed: the thread sends the user's next message to the agent that waits (not the entry agent).
    const done = await decide('deny-1', { decision: 'deny', reason: 'too much' });
    expect(done.route.map((r) => r.to)).toEqual(['clerk']);
    expect(done.text).toBe('I did not refund order 7.');
    expect(messagesOf(openai.requestsFor('clerk-model').at(-1)!).at(-1)).toEqual({
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

  it('refuses a call nobody decides on at its deadline, by itself: the model is told it timed out, and the user gets its answer', async () => {
    openai.scriptFor(
      'hurried-model',
      { text: 'I will refund it once you agree.', toolCalls: [{ id: 'call_h', name: 'refund', arguments: { order: 11, amount: 3 } }] },
      { text: 'Nobody approved the refund of order 11 in time, so I did not make it.' },
    );
    const threadId = 'deadline-1';
    // The answer at the deadline answers no message of the user's: follow the thread to see it.
    let onTimeout!: (event: TaskStatusUpdateEvent) => void;
    const timedOut = new Promise<TaskStatusUpdateEvent>((resolve) => (onTimeout = resolve));
    const follow = client.follow(threadId, (event) => {
      const inReplyTo = event.kind === 'status-update' ? event.status.message?.metadata?.[META.inReplyTo] : undefined;
      if (event.kind === 'status-update' && event.final && typeof inReplyTo === 'string' && inReplyTo.endsWith(':timeout')) onTimeout(event);
    });
    try {
      const asked = await client.send(
        {
          kind: 'message',
          role: 'user',
          messageId: randomUUID(),
          parts: [{ kind: 'text', text: 'Refund 3 on order 11' }],
          metadata: { [CLIENT_ROUTING_URI]: { recipient: 'hurried' } },
        },
        { threadId, timeoutMs: 20_000 },
      );
      expect(asked.final.status.state).toBe('input-required');
      const waiting = asked.final.status.message!;
      expect(requestOf(asked)?.agent).toBe('hurried');

      const answer = await timedOut;
      expect(answer.status.state).toBe('input-required');
      expect(answer.status.message?.metadata?.[META.inReplyTo]).toBe(`${waiting.messageId}:timeout`);
      expect(answer.status.message?.metadata?.[META.agent]).toBe('hurried');
      expect(answer.status.message?.parts[0]).toEqual({ kind: 'text', text: 'Nobody approved the refund of order 11 in time, so I did not make it.' });
      // The model was told, as the call's result, that it timed out; the tool never ran.
      const last = messagesOf(openai.requestsFor('hurried-model').at(-1)!).at(-1)!;
      expect(last).toEqual({
        role: 'tool',
        tool_call_id: 'call_h',
        content: JSON.stringify({ error: 'the approval of "refund" timed out: nobody approved it in time; it did not run' }),
      });
      expect(ledger()).not.toContain('refund 11');
      // The thread's record has the refusal as a message of its own, and waits on nothing any more.
      const task = await client.task(threadId);
      expect(task.metadata?.[META.awaitingApproval]).toBeUndefined();
      const refusal = task.history?.find((m) => m.messageId === `${waiting.messageId}:timeout`);
      expect(refusal?.parts.find((p) => p.kind === 'data')).toEqual({ kind: 'data', data: { [META.approval]: { decision: 'timeout' } } });
      // A person's approval now is too late: nothing waits, and `troupe approve` says so.
      const late = await runTroupe(['approve', threadId, '--nats', nats.url], { TROUPE_NATS_CREDS: nats.credsFile('client') });
      expect(late.code).toBe(2);
      expect(late.stderr).toContain('waits for no approval');
    } finally {
      follow.unsubscribe();
    }
  });
});
