/**
 * An agent process's lifecycle as an actor: `starting -> ready.idle <-> ready.busy -> stopping -> stopped`.
 * The host runs the handler; this machine holds what `troupe ps` and `troupe inspect` show.
 */
import { assign, setup } from 'xstate';

export interface AgentActorContext {
  agentId: string;
  inFlight: number;
  handled: number;
  failed: number;
  lastMessageId?: string;
  lastThreadId?: string;
}

export type AgentActorEvent =
  | { type: 'troupe.agent.joined' }
  | { type: 'troupe.agent.received'; messageId: string; threadId?: string }
  | { type: 'troupe.agent.answered'; messageId: string }
  | { type: 'troupe.agent.failed'; messageId: string }
  | { type: 'troupe.agent.leave' }
  | { type: 'troupe.agent.left' };

export const agentMachine = setup({
  types: { context: {} as AgentActorContext, events: {} as AgentActorEvent, input: {} as { agentId: string } },
  guards: {
    lastInFlight: ({ context }) => context.inFlight <= 1,
  },
  actions: {
    receive: assign({
      inFlight: ({ context }) => context.inFlight + 1,
      lastMessageId: ({ context, event }) => (event.type === 'troupe.agent.received' ? event.messageId : context.lastMessageId),
      lastThreadId: ({ context, event }) => (event.type === 'troupe.agent.received' ? event.threadId : context.lastThreadId),
    }),
    answer: assign({ inFlight: ({ context }) => Math.max(0, context.inFlight - 1), handled: ({ context }) => context.handled + 1 }),
    fail: assign({ inFlight: ({ context }) => Math.max(0, context.inFlight - 1), failed: ({ context }) => context.failed + 1 }),
  },
}).createMachine({
  id: 'agent',
  context: ({ input }) => ({ agentId: input.agentId, inFlight: 0, handled: 0, failed: 0 }),
  initial: 'starting',
  states: {
    starting: { on: { 'troupe.agent.joined': 'ready' } },
    ready: {
      initial: 'idle',
      on: { 'troupe.agent.leave': 'stopping' },
      states: {
        idle: { on: { 'troupe.agent.received': { target: 'busy', actions: 'receive' } } },
        busy: {
          on: {
            'troupe.agent.received': { actions: 'receive' },
            'troupe.agent.answered': [
              { guard: 'lastInFlight', target: 'idle', actions: 'answer' },
              { actions: 'answer' },
            ],
            'troupe.agent.failed': [
              { guard: 'lastInFlight', target: 'idle', actions: 'fail' },
              { actions: 'fail' },
            ],
          },
        },
      },
    },
    stopping: {
      on: {
        'troupe.agent.answered': { actions: 'answer' },
        'troupe.agent.failed': { actions: 'fail' },
        'troupe.agent.left': 'stopped',
      },
    },
    stopped: { type: 'final' },
  },
});
