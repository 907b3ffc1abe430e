/**
 * `troupe approve <thread>` / `troupe deny <thread>`: a person's decision on the tool calls an agent of the
 * thread waits on (docs/conversation.md#tool-approval). The waiting agent is read from the thread's last
 * answer; the decision goes to it as an ordinary user message with a `troupe/approval` data part, and the
 * agent's answer is printed.
 */
import { randomUUID } from 'node:crypto';
import type { Command } from 'commander';
import { META } from '../../protocol/metadata.js';
import { CLIENT_ROUTING_URI } from '../../protocol/routing.js';
import { readApprovalRequest, type ApprovalDecision } from '../../protocol/approval.js';
import type { Message } from '../../protocol/a2a.js';
import { TroupeClient, textOfMessage } from '../../sdk/client.js';
import { UsageError, connect, globals, principalOf } from '../cli.js';
import { color, printJson } from '../output.js';

export interface ApproveOptions {
  call?: string;
  args?: string;
  reason?: string;
  timeout: number;
}

export async function decideApproval(decision: ApprovalDecision['decision'], threadId: string, opts: ApproveOptions, cmd: Command): Promise<void> {
  const g = globals(cmd);
  if (!g.nats) throw new UsageError(`troupe ${decision} works on a running mesh: pass --nats <url>`);
  let args: Record<string, unknown> | undefined;
  if (opts.args !== undefined) {
    if (decision !== 'approve') throw new UsageError('--args goes with approve (the arguments the tool runs with)');
    try {
      const parsed: unknown = JSON.parse(opts.args);
      if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) throw new Error('not a JSON object');
      args = parsed as Record<string, unknown>;
    } catch (err) {
      throw new UsageError(`--args must be a JSON object: ${(err as Error).message}`);
    }
  }
  const transport = await connect(g, 'troupe-cli');
  try {
    const client = new TroupeClient(transport, { tenant: g.tenant, principal: await principalOf(g) });
    const task = await client.task(threadId);
    const last = [...(task.history ?? [])].reverse().find((m) => m.role === 'agent');
    const request = last ? readApprovalRequest(last) : undefined;
    if (!request) throw new UsageError(`thread ${threadId} waits for no approval: its last answer asks for none`);
    const body: ApprovalDecision = {
      decision,
      ...(opts.call ? { callId: opts.call } : {}),
      ...(args ? { arguments: args } : {}),
      ...(opts.reason ? { reason: opts.reason } : {}),
    };
    const message: Message = {
      kind: 'message',
      role: 'user',
      messageId: randomUUID(),
      parts: [{ kind: 'data', data: { [META.approval]: body } }],
      metadata: { [CLIENT_ROUTING_URI]: { recipient: request.agent } },
    };
    const result = await client.send(message, { threadId, timeoutMs: opts.timeout });
    if (result.error) process.exitCode = 1;
    if (g.json) {
      printJson({ threadId, agent: request.agent, decision: body, state: result.final.status.state, text: result.text, error: result.error });
      return;
    }
    process.stdout.write(`${color.dim(`${decision} → ${request.agent}`)}\n${color.bold(request.agent)}: ${textOfMessage(result.final.status.message)}\n`);
    if (result.error) process.stdout.write(`${color.red(`${result.error.code}: ${result.error.message}`)}\n`);
  } finally {
    await transport.drain();
  }
}
