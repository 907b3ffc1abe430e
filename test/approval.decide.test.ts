/**
 * How an LLM agent decides the calls of a paused round (src/llm/approval.ts): the person's decision, the
 * thread's own `timeout` at the deadline, and a person's decision that comes after the deadline.
 */
import { describe, expect, it } from 'vitest';
import { decideCalls } from '../src/llm/approval.js';
import type { ApprovalRequest } from '../src/protocol/approval.js';

const request: ApprovalRequest = {
  agent: 'cashier',
  answering: 'm1',
  expiresAt: 1_000,
  text: '',
  calls: [
    { callId: 'c1', tool: 'refund', arguments: '{"amount":5}', needsApproval: true },
    { callId: 'c2', tool: 'lookup', arguments: '{}', needsApproval: false },
  ],
  turn: [],
};

const outcome = (d: ReturnType<typeof decideCalls>) => d.map((x) => (x.run ? `${x.call.name} ran ${x.call.arguments}` : `${x.call.name}: ${x.why}`));

describe('deciding a paused round', () => {
  it('runs an approved call (with edited arguments) and the calls that needed no approval', () => {
    expect(outcome(decideCalls(request, { decision: 'approve', arguments: { amount: 2 } }, 500, ''))).toEqual(['refund ran {"amount":2}', 'lookup ran {}']);
  });

  it("refuses every waiting call as timed out on the thread's timeout, even when the agent's clock is behind", () => {
    expect(outcome(decideCalls(request, { decision: 'timeout' }, 500, ''))).toEqual([
      'refund: the approval of "refund" timed out: nobody approved it in time; it did not run',
      'lookup ran {}',
    ]);
  });

  it('refuses an approval that comes after the deadline', () => {
    expect(outcome(decideCalls(request, { decision: 'approve' }, 1_001, ''))[0]).toBe(
      'refund: the approval of "refund" timed out: nobody approved it in time; it did not run',
    );
  });
});
