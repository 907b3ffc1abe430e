/** `troupe graph <machine>`: print a machine's definition as Stately-importable JSON or Mermaid. */
import type { Command } from 'commander';
import type { AnyStateMachine } from 'xstate';
import { agentCallMachine } from '../machines/agent-call.js';
import { agentMachine } from '../machines/agent.js';
import { machineJson, machineMermaid } from '../machines/graph.js';
import { handoffMachine } from '../machines/handoff.js';
import { orchestrationMachine } from '../machines/orchestration.js';
import { routerMachine } from '../machines/router.js';
import { threadMachine } from '../machines/thread.js';
import { printJson } from './output.js';

export const MACHINES: Record<string, AnyStateMachine> = {
  thread: threadMachine as AnyStateMachine,
  router: routerMachine as AnyStateMachine,
  'agent-call': agentCallMachine as AnyStateMachine,
  agent: agentMachine as AnyStateMachine,
  handoff: handoffMachine as AnyStateMachine,
  orchestration: orchestrationMachine as AnyStateMachine,
};

export function registerGraphCommand(program: Command): void {
  program
    .command('graph <machine>')
    .description(`print a machine's definition: ${Object.keys(MACHINES).join(', ')}`)
    .option('--format <format>', 'json (import into the Stately editor) or mermaid', 'json')
    .action((name: string, opts: { format: string }) => {
      const machine = MACHINES[name];
      if (!machine) throw new Error(`no machine "${name}": choose one of ${Object.keys(MACHINES).join(', ')}`);
      if (opts.format === 'mermaid') process.stdout.write(`${machineMermaid(machine)}\n`);
      else if (opts.format === 'json') printJson(machineJson(machine));
      else throw new Error(`unknown format "${opts.format}": use json or mermaid`);
    });
}
