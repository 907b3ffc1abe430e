/**
 * A tool approval's deadline is the thread's, not a process timer: the node process that holds a thread
 * waiting for a person is killed (SIGKILL), and the node that takes its partition over refuses the waiting
 * call at the same deadline, by itself — the model is told it timed out and the user gets its answer.
 *
 * Real `troupe up` processes on a real nats-server; the YAML agent (its model a local OpenAI-compatible
 * server) and the client in this process.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Kvm } from '@nats-io/kv';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AgentHost } from '../src/actors/agent-host.js';
import { loadYamlAgent } from '../src/llm/agent.js';
import { META, type ApprovalRequest, type TaskStatusUpdateEvent } from '../src/protocol/index.js';
import { TroupeClient } from '../src/sdk/client.js';
import { OpenAIScriptedServer } from './helpers/model-servers.js';
import { natsSuite } from './helpers/nats-suite.js';
import { spawnTroupe, type ManagedProcess } from './helpers/processes.js';

const LEASE_TTL_MS = 1_500;
const PARTITIONS = 8;
/** Long enough for the node to be killed before it passes; the next owner waits for the rest of it. */
const APPROVAL_TIMEOUT_MS = 8_000;

const suite = natsSuite();
const openai = new OpenAIScriptedServer();
let dir: string;

function startNode(name: string): Promise<ManagedProcess> {
  return spawnTroupe(
    [
      'up',
      '--nats',
      suite.nats.url,
      '--team',
      'test/fixtures/approval-team.ts',
      '--no-agents',
      '--lease-ttl',
      String(LEASE_TTL_MS),
      '--partitions',
      String(PARTITIONS),
    ],
    { ...suite.nats.env, TROUPE_LOG_LEVEL: 'info' },
    { name },
    suite.group,
  );
}

const nodeIdOf = (node: ManagedProcess) => /node (\S+) up on/.exec(node.stderr)?.[1];

beforeAll(async () => {
  await openai.start();
  dir = mkdtempSync(join(tmpdir(), 'troupe-approval-takeover-'));
  writeFileSync(join(dir, 'tools.ts'), 'export function refund(args: { order: number }) {\n  throw new Error(`refund ${args.order} must not run`);\n}\n');
  writeFileSync(
    join(dir, 'teller.yaml'),
    [
      'name: teller',
      'description: Refunds orders after a person approves',
      'model: { provider: openai, name: teller-model }',
      'instructions: { inline: You refund orders. }',
      `approval_timeout_ms: ${APPROVAL_TIMEOUT_MS}`,
      'tools:',
      '  - name: refund',
      '    description: Refunds an order',
      '    type: function',
      '    file: tools.ts',
      '    function: refund',
      '    requires_approval: true',
      '    parameters:',
      '      order: { type: int, description: The order }',
      '',
    ].join('\n'),
  );
});

afterAll(async () => {
  await openai.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe('an approval deadline across a takeover', () => {
  it('the node holding the waiting thread dies; the next owner refuses the call at the same deadline and the user gets the answer', async () => {
    await suite.nats.addUser({ tenant: 'demo', role: 'agent', name: 'teller' });
    const agent = await loadYamlAgent(join(dir, 'teller.yaml'), { env: { OPENAI_API_KEY: 'sk-test', OPENAI_BASE_URL: openai.baseURL }, maxRetries: 0 });
    const host = await new AgentHost({ transport: await suite.connect('teller', 'teller'), agent, heartbeatMs: 500 }).start();
    const clientT = await suite.connect('client');
    const client = new TroupeClient(clientT);
    const threadId = 'waits-1';
    openai.scriptFor(
      'teller-model',
      { text: 'I need your approval first.', toolCalls: [{ id: 'call_w', name: 'refund', arguments: { order: 8 } }] },
      { text: 'Nobody approved the refund of order 8, so I did not make it.' },
    );

    let onTimeout!: (event: TaskStatusUpdateEvent) => void;
    const timedOut = new Promise<TaskStatusUpdateEvent>((resolve) => (onTimeout = resolve));
    const follow = client.follow(threadId, (event) => {
      const inReplyTo = event.kind === 'status-update' ? event.status.message?.metadata?.[META.inReplyTo] : undefined;
      if (event.kind === 'status-update' && event.final && typeof inReplyTo === 'string' && inReplyTo.endsWith(':timeout')) onTimeout(event);
    });
    try {
      const nodeA = await startNode('node A');
      const asked = await client.send('Refund order 8', { threadId, timeoutMs: 30_000 });
      expect(asked.final.status.state).toBe('input-required');
      const request = asked.final.status.message?.metadata?.[META.approval] as ApprovalRequest;
      expect(request.agent).toBe('teller');

      // Node A dies with the thread waiting; node B takes the partition over.
      await nodeA.kill('SIGKILL');
      const nodeB = await startNode('node B');
      const answer = await timedOut;
      expect(answer.status.message?.metadata?.[META.agent]).toBe('teller');
      expect(answer.status.message?.parts[0]).toEqual({ kind: 'text', text: 'Nobody approved the refund of order 8, so I did not make it.' });
      // At the deadline the request named, not before it.
      expect(Date.parse(answer.status.timestamp!)).toBeGreaterThanOrEqual(request.expiresAt);
      const toolResult = (openai.requestsFor('teller-model').at(-1)!.body.messages as Array<{ role: string; content: string }>).at(-1);
      expect(toolResult).toEqual({
        role: 'tool',
        tool_call_id: 'call_w',
        content: JSON.stringify({ error: 'the approval of "refund" timed out: nobody approved it in time; it did not run' }),
      });
      // Node B did it: the thread's record names it, and waits on nothing any more.
      const kv = await new Kvm(clientT.connection).open('troupe_threads');
      const record = (await kv.get(`demo.${threadId}`))!.json<{ node: string; task: { metadata?: Record<string, unknown> } }>();
      expect(nodeIdOf(nodeB)).toBeDefined();
      expect(record.node).toBe(nodeIdOf(nodeB));
      expect(record.node).not.toBe(nodeIdOf(nodeA));
      expect(record.task.metadata?.[META.awaitingApproval]).toBeUndefined();
      await nodeB.kill('SIGTERM');
    } finally {
      follow.unsubscribe();
      await host.stop();
    }
  }, 120_000);
});
