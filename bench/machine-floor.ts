/**
 * The floors under the embedded turn, measured in the bench's own process (no NATS, no store, no host):
 *
 *   - the thread machine alone: Troupe's thread machine with its real children (the agent call, its
 *     request), the agent's request answered at once with an echo reply. What a turn costs in XState and in
 *     the machine's own guards and actions, before the host, the transport, the store, the codecs and the
 *     agent host add theirs.
 *   - XState's floor for a turn of that shape: a root actor that, on a message, starts a child machine
 *     which invokes a promise, takes the child's output into its context and goes back to rest. No guard,
 *     no routing, no history rules: what "a thread is an XState actor and an agent call is its child"
 *     costs on its own.
 *
 * Each row gives one actor per worker (a long-lived thread), one turn in flight per actor, as the embedded
 * row does. Both rows bound the embedded turn from below: the embedded turn does all the machine does and
 * more, so embedded turns per second cannot exceed the machine's, and a turn of the design's shape cannot
 * exceed XState's floor.
 */
import { createActor, fromPromise, setup, assign, type AnyActorRef } from 'xstate';
import { agentCallMachine, type AgentRequestInput, type AgentRequestOutput } from '../src/machines/agent-call.js';
import { orchestrationMachine } from '../src/machines/orchestration.js';
import { routerMachine } from '../src/machines/router.js';
import { DEFAULT_THREAD_CONFIG, threadMachine, type ThreadStatusEmitted } from '../src/machines/thread.js';
import { CLIENT_ROUTING_URI, messageText, type Message } from '../src/protocol/index.js';
import type { Op } from './measure.js';

export interface MachineRig {
  op: Op;
  stop(): void;
}

/** The thread machine alone, with its real children; the agent answers at once, routing the answer to the user. */
export function startThreadMachineRig(text: string, agentId = 'echo'): MachineRig {
  const request = fromPromise<AgentRequestOutput, AgentRequestInput>(async ({ input }) => ({
    kind: 'message',
    role: 'agent',
    messageId: `r-${input.message.messageId}`,
    parts: [{ kind: 'text', text: messageText(input.message) }],
    metadata: { [CLIENT_ROUTING_URI]: { recipient: 'user' } },
  }));
  const agentCall = agentCallMachine.provide({ actors: { request } });
  const machine = threadMachine.provide({
    actors: { agentCall, router: routerMachine, orchestration: orchestrationMachine.provide({ actors: { agentCall } }) },
  });
  type Entry = { actor: AnyActorRef; waiting?: ((e: ThreadStatusEmitted) => void) | undefined };
  const actors = new Map<number, Entry>();
  let seq = 0;
  const actorOf = (w: number): Entry => {
    const existing = actors.get(w);
    if (existing) return existing;
    const entry: Entry = {
      actor: createActor(machine, {
        id: `floor-${w}`,
        input: {
          threadId: `floor-${w}`,
          tenant: 'bench',
          owner: 'local',
          config: { ...DEFAULT_THREAD_CONFIG, entryAgent: agentId },
          agents: { [agentId]: { supportsClientRouting: true } },
          now: Date.now(),
        },
      }),
    };
    entry.actor.on('troupe.thread.status', (e: ThreadStatusEmitted) => {
      if (e.final) entry.waiting?.(e);
    });
    entry.actor.start();
    actors.set(w, entry);
    return entry;
  };
  return {
    op: (w) => {
      const entry = actorOf(w);
      return new Promise<void>((resolve, reject) => {
        entry.waiting = (e) => {
          entry.waiting = undefined;
          if (e.error) reject(new Error(`${e.error.code}: ${e.error.message}`));
          else if (!e.message || messageText(e.message) !== text) reject(new Error(`the machine answered "${e.message ? messageText(e.message) : ''}"`));
          else resolve();
        };
        const message: Message = { kind: 'message', role: 'user', messageId: `m${++seq}`, parts: [{ kind: 'text', text }] };
        entry.actor.send({ type: 'troupe.user.message', message, now: Date.now() });
      });
    },
    stop: () => {
      for (const { actor } of actors.values()) actor.stop();
      actors.clear();
    },
  };
}

/** Actors of the thread's shape, one per worker: a turn starts a child machine which invokes `request`. */
export interface XstateTurns<I, O> {
  /** One turn of worker `w`'s actor on `input`: what its child's request returned. */
  run(w: number, input: I): Promise<O>;
  stop(): void;
}

/**
 * XState alone, a turn of the thread's shape: a root actor per worker that, on a message, starts a child
 * machine which invokes `request`, takes the child's output into its context (the last 50 kept) and goes
 * back to rest. Its actors answer one turn at a time each.
 */
export function xstateTurns<I, O>(request: (input: I) => Promise<O>): XstateTurns<I, O> {
  type CallContext = { input: unknown; answer?: unknown };
  // Typed as unknown inside: XState's types do not follow a generic output through `onDone`.
  const call = setup({
    types: { input: {} as { input: unknown }, context: {} as CallContext, output: {} as unknown },
    actors: { request: fromPromise<unknown, unknown>(({ input }) => request(input as I)) },
  }).createMachine({
    context: ({ input }) => ({ input: input.input }),
    initial: 'calling',
    states: {
      calling: {
        invoke: {
          src: 'request',
          input: ({ context }: { context: CallContext }) => context.input,
          onDone: { target: 'done', actions: assign({ answer: ({ event }) => event.output }) },
        },
      },
      done: { type: 'final' },
    },
    output: ({ context }: { context: CallContext }) => context.answer,
  });
  type Events = { type: 'message'; input: unknown };
  type Turn = AnyActorRef & { answer?: (o: O) => void; fail?: (err: unknown) => void };
  const turn = setup({
    types: { context: {} as { answers: unknown[] }, events: {} as Events },
    actors: { call },
  }).createMachine({
    context: { answers: [] },
    initial: 'idle',
    states: {
      idle: { on: { message: 'calling' } },
      calling: {
        invoke: {
          src: 'call',
          input: ({ event }) => ({ input: (event as Events).input }),
          onDone: {
            target: 'idle',
            actions: [
              assign({ answers: ({ context, event }) => [...context.answers, event.output].slice(-50) }),
              ({ event, self }) => (self as Turn).answer?.(event.output as O),
            ],
          },
          onError: { target: 'idle', actions: ({ event, self }) => (self as Turn).fail?.(event.error) },
        },
      },
    },
  });
  const actors = new Map<number, Turn>();
  return {
    run: (w, input) => {
      let actor = actors.get(w);
      if (!actor) {
        actor = createActor(turn).start() as Turn;
        actors.set(w, actor);
      }
      const a = actor;
      return new Promise<O>((resolve, reject) => {
        a.answer = resolve;
        a.fail = reject;
        a.send({ type: 'message', input });
      });
    },
    stop: () => {
      for (const actor of actors.values()) actor.stop();
      actors.clear();
    },
  };
}

/** XState's floor for a turn of the thread's shape: a child machine per turn that invokes a promise. */
export function startXstateTurnFloor(text: string): MachineRig {
  const turns = xstateTurns<string, string>(async (input) => input);
  return {
    op: async (w) => {
      const answer = await turns.run(w, text);
      if (answer !== text) throw new Error(`answered "${answer}"`);
    },
    stop: turns.stop,
  };
}
