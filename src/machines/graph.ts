/**
 * Machine definitions as data: the JSON the Stately editor imports, and a Mermaid state diagram.
 * Pure: reads the machine's state nodes, runs nothing.
 */
import type { AnyStateMachine, AnyStateNode } from 'xstate';

function children(node: AnyStateNode): AnyStateNode[] {
  return Object.values(node.states) as AnyStateNode[];
}

/**
 * The machine config as plain JSON, as the Stately editor imports it: actions, guards, actors and delays
 * by name (they are all named in `setup()`), functions that compute context, inputs or params left out.
 * `createMachine(machineJson(m))` rebuilds the same statechart.
 */
export function machineJson(machine: AnyStateMachine): unknown {
  return toPlain(machine.config);
}

function toPlain(value: unknown): unknown {
  if (typeof value === 'function') return undefined;
  if (Array.isArray(value)) return value.map(toPlain).filter((v) => v !== undefined);
  if (value && typeof value === 'object') {
    const obj = value as Record<string, unknown>;
    // `{ type: 'name', params: fn }` -> 'name': the parameters are computed at run time.
    if (typeof obj.type === 'string' && typeof obj.params === 'function' && Object.keys(obj).length === 2) return obj.type;
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(obj)) {
      const plain = toPlain(v);
      if (plain !== undefined) out[k] = plain;
    }
    return out;
  }
  return value;
}

function mermaidId(node: AnyStateNode): string {
  return node.id.replace(/[^A-Za-z0-9_]/g, '_');
}

function label(eventType: string, guard?: unknown): string {
  let ev = eventType || 'always';
  if (ev.startsWith('xstate.after.')) ev = `after ${ev.split('.')[2]}`;
  else if (ev.startsWith('xstate.done.actor.')) ev = `done ${ev.slice('xstate.done.actor.'.length)}`;
  else if (ev.startsWith('xstate.error.actor.')) ev = `error ${ev.slice('xstate.error.actor.'.length)}`;
  const g = guard ? (typeof guard === 'string' ? guard : ((guard as { type?: string }).type ?? '')) : '';
  return g ? `${ev} [${g}]` : ev;
}

/** A Mermaid `stateDiagram-v2` of every state and transition. */
export function machineMermaid(machine: AnyStateMachine): string {
  const lines = ['stateDiagram-v2'];
  const render = (node: AnyStateNode, indent: string) => {
    const kids = children(node);
    if (node.initial && kids.length) {
      const initial = (node.initial as unknown as { target: AnyStateNode[] }).target[0];
      if (initial) lines.push(`${indent}[*] --> ${mermaidId(initial)}`);
    }
    for (const child of kids) {
      lines.push(`${indent}state "${child.key}" as ${mermaidId(child)}`);
      if (children(child).length) {
        lines.push(`${indent}state ${mermaidId(child)} {`);
        render(child, `${indent}  `);
        lines.push(`${indent}}`);
      }
      if (child.type === 'final') lines.push(`${indent}${mermaidId(child)} --> [*]`);
    }
  };
  render(machine.root, '  ');
  const edges = (node: AnyStateNode) => {
    for (const list of node.transitions.values()) {
      for (const t of list) for (const target of t.target ?? []) lines.push(`  ${mermaidId(node)} --> ${mermaidId(target)}: ${label(t.eventType, t.guard)}`);
    }
    for (const t of node.always ?? []) for (const target of t.target ?? []) lines.push(`  ${mermaidId(node)} --> ${mermaidId(target)}: ${label('', t.guard)}`);
    children(node).forEach(edges);
  };
  children(machine.root).forEach(edges);
  for (const list of machine.root.transitions.values()) {
    for (const t of list) for (const target of t.target ?? []) lines.push(`  [*] --> ${mermaidId(target)}: ${label(t.eventType, t.guard)}`);
  }
  return lines.join('\n');
}
