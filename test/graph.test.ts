/** Every machine exports completely: JSON config importable into the Stately editor, and a Mermaid diagram. */
import { execFileSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { createMachine, type AnyStateMachine } from 'xstate';
import { MACHINES } from '../src/bin/commands/graph.js';
import { machineJson, machineMermaid } from '../src/machines/graph.js';
import { definedStates, definedTransitions } from './helpers/machine-coverage.js';
import { cliTestTimeout } from './helpers/processes.js';

function inlineFunctions(config: unknown, path = ''): string[] {
  if (typeof config === 'function') return [path];
  if (!config || typeof config !== 'object') return [];
  return Object.entries(config).flatMap(([k, v]) => {
    // Computed values are allowed where XState takes them: context, input, output, params.
    if (['context', 'input', 'output', 'params'].includes(k)) return [];
    return inlineFunctions(v, `${path}.${k}`);
  });
}

describe.each(Object.entries(MACHINES))('machine %s', (name, machine) => {
  it('names every action, guard, actor and delay in setup() (no inline functions in the config)', () => {
    expect(inlineFunctions(machine.config)).toEqual([]);
  });

  it('its JSON config rebuilds the same states and transitions', () => {
    const json = machineJson(machine) as Parameters<typeof createMachine>[0];
    expect(JSON.stringify(json)).not.toContain('function');
    const rebuilt = createMachine(json) as AnyStateMachine;
    expect([...definedStates(rebuilt)].sort()).toEqual([...definedStates(machine)].sort());
    expect(definedTransitions(rebuilt).size).toBe(definedTransitions(machine).size);
  });

  it('renders a Mermaid state diagram with every state', () => {
    const mermaid = machineMermaid(machine);
    expect(mermaid.startsWith('stateDiagram-v2')).toBe(true);
    for (const id of definedStates(machine)) if (id !== machine.id) expect(mermaid).toContain(id.replace(/[^A-Za-z0-9_]/g, '_'));
  });
});

describe('troupe graph', () => {
  it(
    'prints JSON and Mermaid from the CLI',
    () => {
      const run = (args: string[]) =>
        execFileSync(process.execPath, ['--conditions=source', '--import', 'tsx', 'src/bin/troupe.ts', ...args], { encoding: 'utf8' });
      expect(JSON.parse(run(['graph', 'thread'])).id).toBe('thread');
      expect(run(['graph', 'handoff', '--format', 'mermaid'])).toContain('handoff_active');
    },
    cliTestTimeout(2),
  );
});
