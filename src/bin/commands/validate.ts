/**
 * `troupe validate <agent.yaml | team.yaml>`: every problem of the file at once, one per line as
 * `file:line:col field.path: message` (types, then mutual exclusivity, references, constraints), then
 * its warnings (`file:line:col field.path: warning: message`), which do not make it invalid. For a valid
 * agent.yaml it also says which defaults it applied where seed 002 leaves a field optional (an unnamed
 * test case, a metric without a threshold). The kind of file is read from it: a top-level `agents` list
 * is a team (its agent.yaml members are checked too, their problems listed with their own file). Exit 0
 * when valid, 2 when not; `--json` prints `{ file, kind, valid, problems, warnings }` (plus `defaults`
 * for an agent).
 */
import { readFileSync } from 'node:fs';
import type { Command } from 'commander';
import { appliedDefaults, validateAgentFile, type AppliedDefault } from '../../config/agent.js';
import { seedCapabilitiesOf } from '../../config/capabilities.js';
import { describeAgentCapabilities } from '../../protocol/capabilities.js';
import { formatProblem, type ConfigProblem } from '../../config/load.js';
import { configKindOf, validateTeamFile } from '../../config/team.js';
import { globals } from '../cli.js';
import { color, printJson } from '../output.js';

function kindOf(file: string): 'team' | 'agent' {
  try {
    return configKindOf(readFileSync(file, 'utf8'));
  } catch {
    return 'agent'; // the loader reports the missing file
  }
}

export async function validate(file: string, _opts: unknown, cmd: Command): Promise<void> {
  const g = globals(cmd);
  const kind = kindOf(file);
  let problems: ConfigProblem[];
  let warnings: ConfigProblem[];
  let defaults: AppliedDefault[] = [];
  let summary: string | undefined;
  let json: Record<string, unknown> = {};
  if (kind === 'team') {
    const res = validateTeamFile(file);
    problems = res.problems;
    warnings = res.warnings;
    if (res.loaded) {
      const { config } = res.loaded;
      const members = config.agents.map((m) => m.file ?? m.module ?? (m.a2a !== undefined ? `${m.id} (A2A)` : `${m.id} (joins)`));
      const router = config.router
        ? `LLM router ${config.router.model.provider} ${config.router.model.name}`
        : `entry agent ${config.entry ?? 'the first member'}`;
      // How its tasks end and who asks when the router is unsure (seed 000): what a user would otherwise learn by surprise.
      const ends = config.routing.task_end === 'answer' ? ', an answer completes its task' : '';
      const asks = config.routing.clarification_agent ? `, ${config.routing.clarification_agent} asks when the router is unsure` : '';
      summary = `team ${config.id}, ${members.length} member${members.length === 1 ? '' : 's'} (${members.join(', ')}), ${router}${ends}${asks}`;
      json = {
        team: {
          id: config.id,
          name: config.name,
          members,
          router: config.router ? { provider: config.router.model.provider, model: config.router.model.name } : null,
        },
      };
    }
  } else {
    const res = validateAgentFile(file);
    problems = res.problems;
    warnings = res.warnings;
    if (res.loaded) {
      const { config } = res.loaded;
      defaults = appliedDefaults(config);
      const tools = (config.tools ?? []).map((t) => `${t.name} (${t.type})`);
      // Seed 004's capabilities as the card will state them (defaults filled in), when the file declares any.
      const capabilities = seedCapabilitiesOf(config.capabilities);
      summary = `agent ${config.name}, ${config.model.provider} ${config.model.name}, ${tools.length ? `tools ${tools.join(', ')}` : 'no tools'}${capabilities ? `, capabilities: ${describeAgentCapabilities(capabilities)}` : ''}`;
      json = {
        agent: { name: config.name, tools: (config.tools ?? []).map((t) => ({ name: t.name, type: t.type })), ...(capabilities ? { capabilities } : {}) },
        defaults,
      };
    }
  }
  const plural = (n: number, word: string) => `${n} ${word}${n === 1 ? '' : 's'}`;
  if (g.json) {
    printJson({ file, kind, valid: problems.length === 0, problems, warnings, ...json });
  } else {
    for (const p of problems) process.stdout.write(`${formatProblem(p)}\n`);
    for (const w of warnings) process.stdout.write(color.yellow(`${w.file}:${w.line}:${w.column} ${w.path}: warning: ${w.message}`) + '\n');
    const warned = warnings.length ? `, ${plural(warnings.length, 'warning')}` : '';
    if (problems.length) process.stdout.write(color.red(`${plural(problems.length, 'problem')}${warned} in ${file}\n`));
    else if (summary) {
      process.stdout.write(`${color.green('valid')} ${file}: ${summary}${warned}\n`);
      for (const d of defaults) process.stdout.write(color.dim(`  default ${d.path}: ${d.message}`) + '\n');
    }
  }
  if (problems.length) process.exitCode = 2;
}
