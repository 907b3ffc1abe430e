/**
 * `troupe validate <agent.yaml>`: every problem of the file at once, one per line as
 * `file:line:col field.path: message` (types, then mutual exclusivity, references, constraints).
 * Exit 0 when valid, 2 when not; `--json` prints `{ file, valid, problems }`.
 */
import type { Command } from 'commander';
import { validateAgentFile } from '../../config/agent.js';
import { formatProblem } from '../../config/load.js';
import { globals } from '../cli.js';
import { color, printJson } from '../output.js';

export async function validate(file: string, _opts: unknown, cmd: Command): Promise<void> {
  const g = globals(cmd);
  const { problems, loaded } = validateAgentFile(file);
  if (g.json) {
    printJson({
      file,
      valid: problems.length === 0,
      problems,
      ...(loaded ? { agent: { name: loaded.config.name, tools: (loaded.config.tools ?? []).map((t) => ({ name: t.name, type: t.type })) } } : {}),
    });
  } else if (problems.length) {
    for (const p of problems) process.stdout.write(`${formatProblem(p)}\n`);
    process.stdout.write(color.red(`${problems.length} problem${problems.length === 1 ? '' : 's'} in ${file}\n`));
  } else if (loaded) {
    const { config } = loaded;
    const tools = (config.tools ?? []).map((t) => `${t.name} (${t.type})`);
    process.stdout.write(`${color.green('valid')} ${file}: agent ${config.name}, ${config.model.provider} ${config.model.name}, ${tools.length ? `tools ${tools.join(', ')}` : 'no tools'}\n`);
  }
  if (problems.length) process.exitCode = 2;
}
