/**
 * An agent process's lifecycle as an actor: `starting -> ready.idle <-> ready.busy -> stopping -> stopped`.
 * The host runs the handler and counts the requests; this machine holds what `troupe ps` and `troupe
 * inspect` show.
 *
 * Every request event carries the host's counters as they stand after it (`inFlight`, `handled`,
 * `failed`), and the machine takes them as reported. The host sends request events only while someone
 * watches the agent or a call's thread (bench/PROFILE.md: two XState events per request were a third of an
 * agent hop's CPU under load, a tenth of its latency at one request at a time); otherwise
 * `troupe.agent.counted` brings the counters and the idle/busy state up to date whenever the actor is read
 * (`troupe ps`, an announce, a watcher attaching).
 */
import { assign, setup } from 'xstate';

export interface AgentCounters {
  /** Requests being handled now. */
  inFlight: number;
  /** Requests answered since the agent started. */
  handled: number;
  /** Requests that ended with an error reply. */
  failed: number;
}

export interface AgentActorContext extends AgentCounters {
  agentId: string;
  lastMessageId?: string;
  lastThreadId?: string;
}

export type AgentActorEvent =
  | { type: 'troupe.agent.joined' }
  | ({ type: 'troupe.agent.received'; messageId: string; threadId?: string } & AgentCounters)
  | ({ type: 'troupe.agent.answered'; messageId: string } & AgentCounters)
  | ({ type: 'troupe.agent.failed'; messageId: string } & AgentCounters)
  | ({ type: 'troupe.agent.counted' } & AgentCounters)
  | { type: 'troupe.agent.leave' }
  | { type: 'troupe.agent.left' };

export const agentMachine = setup({
  types: { context: {} as AgentActorContext, events: {} as AgentActorEvent, input: {} as { agentId: string } },
  guards: {
    /** The request this event reports was the last in flight (or a count says none is). */
    noneInFlight: ({ event }) => 'inFlight' in event && event.inFlight <= 0,
    someInFlight: ({ event }) => 'inFlight' in event && event.inFlight > 0,
  },
  actions: {
    count: assign(({ context, event }) => {
      if (!('inFlight' in event)) return {};
      const counters = { inFlight: Math.max(0, event.inFlight), handled: event.handled, failed: event.failed };
      return event.type === 'troupe.agent.received'
        ? { ...counters, lastMessageId: event.messageId, lastThreadId: event.threadId ?? context.lastThreadId }
        : counters;
    }),
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
        idle: {
          on: {
            'troupe.agent.received': { target: 'busy', actions: 'count' },
            'troupe.agent.counted': [{ guard: 'someInFlight', target: 'busy', actions: 'count' }, { actions: 'count' }],
          },
        },
        busy: {
          on: {
            'troupe.agent.received': { actions: 'count' },
            'troupe.agent.answered': [{ guard: 'noneInFlight', target: 'idle', actions: 'count' }, { actions: 'count' }],
            'troupe.agent.failed': [{ guard: 'noneInFlight', target: 'idle', actions: 'count' }, { actions: 'count' }],
            'troupe.agent.counted': [{ guard: 'noneInFlight', target: 'idle', actions: 'count' }, { actions: 'count' }],
          },
        },
      },
    },
    stopping: {
      on: {
        'troupe.agent.answered': { actions: 'count' },
        'troupe.agent.failed': { actions: 'count' },
        'troupe.agent.counted': { actions: 'count' },
        'troupe.agent.left': 'stopped',
      },
    },
    stopped: { type: 'final' },
  },
});
