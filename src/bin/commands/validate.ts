/**
 * `troupe validate <agent.yaml | team.yaml>`: every problem of the file at once, one per line as
 * `file:line:col field.path: message` (types, then mutual exclusivity, references, constraints). The kind
 * of file is read from it: a top-level `agents` list is a team (its agent.yaml members are checked too,
 * their problems listed with their own file). Exit 0 when valid, 2 when not; `--json` prints
 * `{ file, kind, valid, problems }`.
 */
import { readFileSync } from 'node:fs';
import type { Command } from 'commander';
import { validateAgentFile } from '../../config/agent.js';
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
  let summary: string | undefined;
  let json: Record<string, unknown> = {};
  if (kind === 'team') {
    const res = validateTeamFile(file);
    problems = res.problems;
    if (res.loaded) {
      const { config } = res.loaded;
      const members = config.agents.map((m) => m.file ?? m.module ?? (m.a2a !== undefined ? `${m.id} (A2A)` : `${m.id} (joins)`));
      const router = config.router ? `LLM router ${config.router.model.provider} ${config.router.model.name}` : `entry agent ${config.entry ?? 'the first member'}`;
      summary = `team ${config.id}, ${members.length} member${members.length === 1 ? '' : 's'} (${members.join(', ')}), ${router}`;
      json = { team: { id: config.id, name: config.name, members, router: config.router ? { provider: config.router.model.provider, model: config.router.model.name } : null } };
    }
  } else {
    const res = validateAgentFile(file);
    problems = res.problems;
    if (res.loaded) {
      const { config } = res.loaded;
      const tools = (config.tools ?? []).map((t) => `${t.name} (${t.type})`);
      summary = `agent ${config.name}, ${config.model.provider} ${config.model.name}, ${tools.length ? `tools ${tools.join(', ')}` : 'no tools'}`;
      json = { agent: { name: config.name, tools: (config.tools ?? []).map((t) => ({ name: t.name, type: t.type })) } };
    }
  }
  if (g.json) {
    printJson({ file, kind, valid: problems.length === 0, problems, ...json });
  } else if (problems.length) {
    for (const p of problems) process.stdout.write(`${formatProblem(p)}\n`);
    process.stdout.write(color.red(`${problems.length} problem${problems.length === 1 ? '' : 's'} in ${file}\n`));
  } else if (summary) {
    process.stdout.write(`${color.green('valid')} ${file}: ${summary}\n`);
  }
  if (problems.length) process.exitCode = 2;
}
