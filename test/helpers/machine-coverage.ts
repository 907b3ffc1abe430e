/**
 * Coverage of machines, read from XState's inspection stream: which states were entered and which
 * transitions fired (eventless `always` ones included), per machine id, compared against every state
 * and transition the machine defines. It works for a machine alone (model-based paths replayed on
 * actors) and for a machine with real children (every child machine is recorded under its own id).
 *
 * Everything here uses XState's public API except one field: the transitions a microstep took are only
 * on the inspection event's `_transitions` (declared in `InspectedMicrostepEvent`, but underscored).
 * There is no other way to see an eventless transition fire, so it is read here and nowhere else.
 */
import {
  createActor,
  type AnyActorLogic,
  type AnyMachineSnapshot,
  type AnyStateMachine,
  type AnyStateNode,
  type AnyTransitionDefinition,
  type EventObject,
  type InspectionEvent,
  type StateValue,
} from 'xstate';
import type { StatePath } from 'xstate/graph';

function transitionKey(t: AnyTransitionDefinition): string {
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

/** The ids of the state nodes a state value stands for, the machine's root included. */
export function activeStateIds(machine: AnyStateMachine, value: StateValue): string[] {
  const ids: string[] = [machine.root.id];
  const visit = (node: AnyStateNode, v: StateValue) => {
    if (typeof v === 'string') {
      const child = node.states[v] as AnyStateNode | undefined;
      if (child) ids.push(child.id);
      return;
    }
    for (const [key, sub] of Object.entries(v)) {
      const child = node.states[key] as AnyStateNode | undefined;
      if (!child) continue;
      ids.push(child.id);
      if (sub !== undefined) visit(child, sub as StateValue);
    }
  };
  visit(machine.root, value);
  return ids;
}

export interface Coverage {
  states: Set<string>;
  transitions: Set<string>;
}

function isMachineSnapshot(snapshot: unknown): snapshot is AnyMachineSnapshot {
  return typeof snapshot === 'object' && snapshot !== null && 'machine' in snapshot && 'value' in snapshot;
}

/**
 * Records coverage per machine id from an inspection stream: pass `recorder.inspect` as the `inspect`
 * option of `createActor`; the root and every child machine it runs are recorded.
 */
export class CoverageRecorder {
  private readonly byMachine = new Map<string, Coverage>();

  readonly inspect = (ev: InspectionEvent): void => {
    if (ev.type === '@xstate.microstep') {
      // The one private field (see the file header).
      for (const t of ev._transitions) {
        const cov = this.of(t.source.machine.id);
        cov.transitions.add(transitionKey(t));
        // A transition's source was active and its targets were entered, even transient states that an
        // eventless transition leaves at once (no snapshot shows them).
        cov.states.add(t.source.id);
        for (const target of t.target ?? []) cov.states.add(target.id);
      }
    }
    if ((ev.type === '@xstate.snapshot' || ev.type === '@xstate.microstep') && isMachineSnapshot(ev.snapshot)) {
      const { machine, value } = ev.snapshot;
      const cov = this.of(machine.id);
      for (const id of activeStateIds(machine, value)) cov.states.add(id);
    }
  };

  /** What was recorded for one machine (by its id: `thread`, `router`, `agentCall`, …). */
  of(machineId: string): Coverage {
    let cov = this.byMachine.get(machineId);
    if (!cov) {
      cov = { states: new Set(), transitions: new Set() };
      this.byMachine.set(machineId, cov);
    }
    return cov;
  }

  /** States and transitions of `machine` never reached, as sorted lists (empty when fully covered). */
  missingOf(machine: AnyStateMachine): { states: string[]; transitions: string[] } {
    const cov = this.of(machine.id);
    return { states: missing(definedStates(machine), cov.states), transitions: missing(definedTransitions(machine), cov.transitions) };
  }
}

/** Replays each path's events on a fresh actor and records the states entered and transitions taken. */
export function replayPaths<TEvent extends EventObject>(
  machine: AnyStateMachine,
  paths: Array<StatePath<AnyMachineSnapshot, TEvent>>,
  input: unknown,
): Coverage {
  const recorder = new CoverageRecorder();
  for (const path of paths) {
    const actor = createActor(machine as AnyActorLogic, { input, inspect: recorder.inspect });
    actor.start();
    for (const step of path.steps) actor.send(step.event as EventObject);
    actor.stop();
  }
  return recorder.of(machine.id);
}

export function missing(defined: Set<string>, covered: Set<string>): string[] {
  return [...defined].filter((k) => !covered.has(k)).sort();
}
