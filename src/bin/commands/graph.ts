/** `troupe graph <machine>`: print a machine's definition as Stately-importable JSON or Mermaid. */
import type { AnyStateMachine } from 'xstate';
import { agentCallMachine } from '../../machines/agent-call.js';
import { agentMachine } from '../../machines/agent.js';
import { machineJson, machineMermaid } from '../../machines/graph.js';
import { handoffMachine } from '../../machines/handoff.js';
import { llmAgentMachine, toolCallMachine } from '../../machines/llm-agent.js';
import { orchestrationMachine } from '../../machines/orchestration.js';
import { routerMachine } from '../../machines/router.js';
import { threadMachine } from '../../machines/thread.js';
import { UsageError } from '../cli.js';
import { printJson } from '../output.js';

export const MACHINES: Record<string, AnyStateMachine> = {
  thread: threadMachine as AnyStateMachine,
  router: routerMachine as AnyStateMachine,
  'agent-call': agentCallMachine as AnyStateMachine,
  agent: agentMachine as AnyStateMachine,
  handoff: handoffMachine as AnyStateMachine,
  orchestration: orchestrationMachine as AnyStateMachine,
  'llm-agent': llmAgentMachine as AnyStateMachine,
  'llm-tool-call': toolCallMachine as AnyStateMachine,
};

export function graph(name: string, opts: { format: 'json' | 'mermaid' }): void {
  const machine = MACHINES[name];
  if (!machine) throw new UsageError(`no machine "${name}": choose one of ${Object.keys(MACHINES).join(', ')}`);
  if (opts.format === 'mermaid') process.stdout.write(`${machineMermaid(machine)}\n`);
  else printJson(machineJson(machine));
}
