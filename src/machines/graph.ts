/**
 * Machine definitions as data: the JSON the Stately editor imports, and a Mermaid state diagram.
 * Pure: reads the machine's state nodes, runs nothing.
 */
import type { AnyStateMachine, AnyStateNode } from 'xstate';

function children(node: AnyStateNode): AnyStateNode[] {
  return Object.values(node.states) as AnyStateNode[];
}

/** The machine config as JSON (what `machine.toJSON()` gives; actions and guards appear by name). */
export function machineJson(machine: AnyStateMachine): unknown {
  return JSON.parse(JSON.stringify(machine.toJSON()));
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
