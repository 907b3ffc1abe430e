/**
 * Every command's `--help` shows examples, and every example is a command line the CLI accepts: each one is
 * taken from the help of the installed bin and parsed by it (TROUPE_CLI_PARSE_ONLY=1: arguments, options
 * and their values checked, nothing run), and must land on the command whose help shows it. The examples
 * that need no server, key or network also run for real: the credential store, validate, graph, and a
 * message to the in-process demo mesh.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { installedTroupe } from './helpers/installed.js';
import { REPO_ROOT } from './helpers/nats-server.js';

const exec = promisify(execFile);

/** Examples that run for real, where: the credential store in a new folder, the rest in the checkout. */
const RUN_IN_STORE = [
  'troupe creds init',
  'troupe creds add-agent hello',
  'troupe creds add-client web',
  'troupe creds add-node',
  'troupe creds add-operator oncall',
  'troupe creds list --json',
];
const RUN_IN_CHECKOUT = [
  'troupe validate examples/yaml-agents/support/agent.yaml',
  'troupe validate examples/teams/team.yaml --json',
  'troupe graph handoff --format mermaid',
  'troupe send "Write a short note about sea otters"',
];

/** Runs `fn` over the items, three at a time (each is a short CLI process), results in order. */
async function inTurn<T, R>(items: readonly T[], fn: (item: T) => Promise<R>): Promise<R[]> {
  const out = new Array<R>(items.length);
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next++;
      out[i] = await fn(items[i]!);
    }
  };
  await Promise.all([worker(), worker(), worker()]);
  return out;
}

interface Parsed {
  command: string;
  args: string[];
  options: string[];
}

describe('the help examples of every command', () => {
  let bin: string;
  const help = new Map<string, string>();
  let store: string;

  const env = (extra: Record<string, string> = {}) => {
    const out: NodeJS.ProcessEnv = { ...process.env, NO_COLOR: '1', ...extra };
    for (const key of Object.keys(out)) if (key.startsWith('TROUPE_') && !(key in extra)) delete out[key];
    return out;
  };
  /** Runs an example line through a shell with `troupe` the installed bin. */
  const shell = (line: string, cwd: string, extra: Record<string, string> = {}) =>
    exec('sh', ['-c', line.replace(/^troupe /, '"$TROUPE_BIN" ')], { cwd, env: env({ TROUPE_BIN: bin, ...extra }), timeout: 60_000 });

  beforeAll(async () => {
    const troupe = await installedTroupe();
    bin = join(troupe.dir, 'node_modules/.bin/troupe');
    store = mkdtempSync(join(tmpdir(), 'troupe-help-'));
    // Every command, leaves of `creds` and `cluster` included, from the top-level help down.
    const commandsOf = (text: string) => [...text.split('\nCommands:\n')[1]!.matchAll(/^ {2}(\S+)/gm)].map((m) => m[1]!).filter((c) => c !== 'help');
    const helpOf = async (path: string[]) => (await exec(bin, [...path, '--help'], { env: env() })).stdout;
    const texts = await inTurn(commandsOf(await helpOf([])), async (name) => [name, await helpOf([name])] as const);
    for (const [name, text] of texts) {
      if (!text.includes('\nCommands:\n')) help.set(name, text);
      else
        for (const [sub, subText] of await inTurn(commandsOf(text), async (sub) => [sub, await helpOf([name, sub])] as const))
          help.set(`${name} ${sub}`, subText);
    }
  }, 360_000);

  afterAll(() => rmSync(store, { recursive: true, force: true }));

  const examplesOf = (text: string) => [...text.matchAll(/^ {2}\$ (troupe .+)$/gm)].map((m) => m[1]!);

  it('shows examples for every command', () => {
    expect(help.size).toBeGreaterThan(25);
    const without = [...help].filter(([, text]) => examplesOf(text).length === 0).map(([name]) => name);
    expect(without).toEqual([]);
  });

  it('each example parses and lands on its own command', async () => {
    const examples = [...help].flatMap(([name, text]) => examplesOf(text).map((line) => ({ name, line })));
    const results = await inTurn(examples, async ({ name, line }) => {
      try {
        const { stdout } = await shell(line, store, { TROUPE_CLI_PARSE_ONLY: '1' });
        const parsed = JSON.parse(stdout.trim().split('\n').at(-1)!) as Parsed;
        return parsed.command === name ? undefined : `${line}: ran ${parsed.command}, its help is ${name}'s`;
      } catch (err) {
        return `${line}: ${(err as { stderr?: string }).stderr?.trim() || (err as Error).message}`;
      }
    });
    expect(results.filter((r) => r !== undefined)).toEqual([]);
  }, 240_000);

  it('the examples that need no server, key or network run', async () => {
    const all = [...help.values()].flatMap(examplesOf);
    for (const line of [...RUN_IN_STORE, ...RUN_IN_CHECKOUT]) expect(all, `${line} is no longer an example`).toContain(line);
    for (const line of RUN_IN_STORE) await shell(line, store);
    const listed = JSON.parse((await shell('troupe creds list --json', store)).stdout) as Array<{ name: string }>;
    expect(listed.map((u) => u.name)).toEqual(expect.arrayContaining(['hello', 'web', 'node-2', 'oncall']));
    for (const line of RUN_IN_CHECKOUT) await shell(line, REPO_ROOT);
    expect((await shell('troupe send "Write a short note about sea otters"', REPO_ROOT)).stdout).toMatch(/otter/i);
  }, 240_000);
});
