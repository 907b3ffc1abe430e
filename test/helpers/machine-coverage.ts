/**
 * Model-based coverage for pure machines: xstate/graph enumerates paths over a set of events, the paths
 * are replayed on real actors, and the inspection stream tells exactly which transitions fired
 * (including eventless `always` ones). Compared against every state and transition the machine defines.
 */
import {
  createActor,
  type AnyActorLogic,
  type AnyMachineSnapshot,
  type AnyStateMachine,
  type AnyStateNode,
  type AnyTransitionDefinition,
  type EventObject,
} from 'xstate';
import type { StatePath } from 'xstate/graph';

export function transitionKey(t: AnyTransitionDefinition): string {
  const targets = t.target?.map((n: AnyStateNode) => n.id).join(',') ?? '(self)';
  const guard = t.guard ? ` [${typeof t.guard === 'string' ? t.guard : ((t.guard as { type?: string }).type ?? 'inline')}]` : '';
  return `${t.source.id} --${t.eventType || 'always'}--> ${targets}${guard}`;
}

function walk(node: AnyStateNode, visit: (n: AnyStateNode) => void): void {
  visit(node);
  for (const child of Object.values(node.states) as AnyStateNode[]) walk(child, visit);
}

export function definedStates(machine: AnyStateMachine): Set<string> {
  const ids = new Set<string>();
  walk(machine.root, (n) => ids.add(n.id));
  return ids;
}

export function definedTransitions(machine: AnyStateMachine): Set<string> {
  const keys = new Set<string>();
  walk(machine.root, (n) => {
    for (const list of n.transitions.values()) for (const t of list) keys.add(transitionKey(t));
    for (const t of n.always ?? []) keys.add(transitionKey(t));
  });
  return keys;
}

function isRoot(ref: unknown): boolean {
  return (ref as { _parent?: unknown })._parent === undefined;
}

export interface Coverage {
  states: Set<string>;
  transitions: Set<string>;
}

/** Replays each path's events on a fresh actor and records the states entered and transitions taken. */
export function replayPaths<TEvent extends EventObject>(
  machine: AnyStateMachine,
  paths: Array<StatePath<AnyMachineSnapshot, TEvent>>,
  input: unknown,
): Coverage {
  const coverage: Coverage = { states: new Set(), transitions: new Set() };
  for (const path of paths) {
    const actor = createActor(machine as AnyActorLogic, {
      input,
      inspect: (ev) => {
        if (ev.type === '@xstate.microstep' && isRoot(ev.actorRef)) {
          for (const t of (ev as unknown as { _transitions: AnyTransitionDefinition[] })._transitions) {
            coverage.transitions.add(transitionKey(t));
            // A transition's source was active, even a transient initial state no snapshot shows.
            coverage.states.add(t.source.id);
          }
        }
        // Microsteps include transient states that an eventless transition leaves at once.
        if ((ev.type === '@xstate.snapshot' || ev.type === '@xstate.microstep') && isRoot(ev.actorRef)) {
          const snap = ev.snapshot as unknown as { _nodes?: AnyStateNode[] };
          for (const n of snap._nodes ?? []) coverage.states.add(n.id);
        }
      },
    });
    actor.start();
    for (const step of path.steps) actor.send(step.event as EventObject);
    actor.stop();
  }
  return coverage;
}

export function missing(defined: Set<string>, covered: Set<string>): string[] {
  return [...defined].filter((k) => !covered.has(k)).sort();
}
