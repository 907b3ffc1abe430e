/**
 * The thread's typed setup: its types and the child actors it runs. Each concern adds its actions and
 * guards to it in turn (handoff.ts, then turn.ts, then routing.ts; turns and routes use the handoff's
 * helpers), and machine.ts builds the statechart from the result.
 */
import { fromPromise, setup } from 'xstate';
import { agentCallMachine } from '../agent-call.js';
import { handoffMachine } from '../handoff.js';
import { orchestrationMachine } from '../orchestration.js';
import { routerMachine } from '../router.js';
import type { SynthesisInput, SynthesisOutput, ThreadContext, ThreadEvent, ThreadInput, ThreadStatusEmitted } from './types.js';

export const threadBase = setup({
  types: {
    input: {} as ThreadInput,
    context: {} as ThreadContext,
    events: {} as ThreadEvent,
    emitted: {} as ThreadStatusEmitted,
  },
  actors: {
    agentCall: agentCallMachine,
    router: routerMachine,
    orchestration: orchestrationMachine,
    handoff: handoffMachine,
    /** Writes one answer from a fan-out's answers with the team's model; a host provides it (I/O). */
    synthesize: fromPromise<SynthesisOutput, SynthesisInput>(async () => {
      throw new Error('no synthesis model configured');
    }),
  },
});
