/**
 * The CLI a user installs loads the modules a user writes: the packed tarball installed offline into its
 * own folder, and `npx troupe …` run from an empty project folder — with a package.json saying
 * `"type": "module"` and with none — on agents in .ts, .mts, .cts, .js and .mjs that import `troupe` by
 * name, a team module, and `troupe eval` of an agent.yaml whose function tool is TypeScript. The agents
 * join a real nats-server in operator mode and answer `npx troupe send --to`. Nothing here runs the
 * sources through tsx: the bin is the built one.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { installedTroupe, type InstalledProcess, type InstalledTroupe } from './helpers/installed.js';
import { OpenAIScriptedServer } from './helpers/model-servers.js';
import { startNatsServer, type NatsServerHandle } from './helpers/nats-server.js';
import { READY, READY_TIMEOUT_MS } from './helpers/processes.js';

const EXTENSIONS = ['ts', 'mts', 'cts', 'js', 'mjs'] as const;

/** The README's agent, as a user writes it: TypeScript types only where the extension allows them. */
function agentSource(id: string, ext: string): string {
  const typed = ext.endsWith('ts');
  return `import { defineAgent, reply } from 'troupe';

const greeting${typed ? ': string' : ''} = 'hello';

export default defineAgent({
  card: { id: '${id}', name: 'Hello', description: 'Says hello', skills: [] },
  handle: (message, ctx) => reply(\`\${greeting} from ${id}, you said: \${ctx.text}\`, { to: 'sender', reason: 'greeting' }),
});
`;
}

describe('the installed CLI loads what users write', () => {
  let troupe: InstalledTroupe;
  let nats: NatsServerHandle;
  const procs: InstalledProcess[] = [];

  beforeAll(async () => {
    [troupe, nats] = await Promise.all([installedTroupe(), startNatsServer()]);
  }, 360_000);

  afterAll(async () => {
    // Every group gone (npx, its shell and the troupe process) before the server they talk to stops.
    await Promise.all(procs.map((p) => p.stop()));
    await nats?.stop();
  }, 30_000);

  async function start(args: string[], cwd: string, ready: RegExp): Promise<InstalledProcess> {
    const proc = troupe.spawn('npx', ['troupe', ...args], cwd, { TROUPE_NATS_URL: nats.url });
    procs.push(proc);
    await proc.waitFor(ready, { timeoutMs: READY_TIMEOUT_MS });
    return proc;
  }

  async function send(to: string, text: string, cwd: string, extra: string[] = []): Promise<string> {
    const proc = troupe.spawn('npx', ['troupe', 'send', text, '--to', to, '--creds', nats.credsFile('cli'), ...extra], cwd, { TROUPE_NATS_URL: nats.url });
    const exit = await proc.exited;
    expect(exit.code, proc.describe()).toBe(0);
    return proc.stdout;
  }

  it('runs the README agent and every module type, with and without a package.json, and they answer troupe send --to', async () => {
    const node = troupe.userFolder();
    await start(['up', '--creds', nats.credsFile('node')], node, READY.up);

    const agents: Array<{ id: string; dir: string }> = [];
    for (const packageJson of [true, false]) {
      const dir = troupe.userFolder({ packageJson });
      for (const ext of EXTENSIONS) {
        const id = `hello-${ext}-${packageJson ? 'esm' : 'plain'}`;
        await nats.addUser({ tenant: 'demo', role: 'agent', name: id });
        writeFileSync(join(dir, `${id}.${ext}`), agentSource(id, ext));
        agents.push({ id, dir });
      }
    }
    await Promise.all(agents.map(({ id, dir }) => start(['agent', `${id}.${id.split('-')[1]}`, '--creds', nats.credsFile(id)], dir, READY.agent)));
    const answers = await Promise.all(agents.map(({ id, dir }) => send(id, 'hi', dir)));
    answers.forEach((answer, i) => expect(answer).toContain(`hello from ${agents[i]!.id}, you said: hi`));

    // `troupe send --cancel --thread <id>` needs no text (how a user leaves a handoff).
    const { threadId } = JSON.parse(await send(agents[0]!.id, 'hi again', node, ['--json'])) as { threadId: string };
    const cancelled = troupe.spawn('npx', ['troupe', 'send', '--cancel', '--thread', threadId, '--creds', nats.credsFile('cli')], node, {
      TROUPE_NATS_URL: nats.url,
    });
    expect((await cancelled.exited).code, cancelled.describe()).toBe(0);
    expect(cancelled.stdout).toMatch(new RegExp(`^thread ${threadId}: \\S+`));
  }, 240_000);

  it('starts a team module that imports its agents from sibling TypeScript files (no package.json)', async () => {
    const dir = troupe.userFolder();
    writeFileSync(join(dir, 'greeter.ts'), agentSource('greeter', 'ts'));
    writeFileSync(
      join(dir, 'team.ts'),
      `import { defineTeam } from 'troupe';\nimport greeter from './greeter.js';\n\nexport default defineTeam({ name: 'greeters', agents: [greeter] });\n`,
    );
    // Without --nats the node runs the team on an in-process mesh: it says which agents it started.
    const up = troupe.spawn('npx', ['troupe', 'up', '--team', 'team.ts'], dir);
    procs.push(up);
    await up.waitFor(/embedded mesh up \(in-memory\) with greeter\b/, { timeoutMs: READY_TIMEOUT_MS });
    await up.stop();
  }, 120_000);

  it('troupe eval runs an agent.yaml whose function tool is TypeScript in a folder without a package.json', async () => {
    const openai = await new OpenAIScriptedServer().start();
    try {
      const dir = troupe.userFolder();
      writeFileSync(
        join(dir, 'words.ts'),
        `export function countWords(args: { text: string }): string {\n  return \`counted:\${args.text.split(/\\s+/).length}\`;\n}\n`,
      );
      writeFileSync(
        join(dir, 'agent.yaml'),
        [
          'name: counter',
          `model: {provider: openai, name: m, base_url: "${openai.baseURL}"}`,
          'instructions: {inline: Count words with the tool.}',
          'tools:',
          '  - {name: count_words, description: Counts words, type: function, file: words.ts, function: countWords, parameters: {text: {type: str, description: The text}}}',
          'test_cases:',
          '  - {input: How many words in "a b c"?, expected_tools: [count_words]}',
          '',
        ].join('\n'),
      );
      openai.script({ toolCalls: [{ name: 'count_words', arguments: { text: 'a b c' } }] }, { text: 'Three words.' });
      const evaluated = troupe.spawn('npx', ['troupe', 'eval', 'agent.yaml', '--json'], dir, { OPENAI_API_KEY: 'sk-test' });
      const exit = await evaluated.exited;
      expect(exit.code, evaluated.describe()).toBe(0);
      const report = JSON.parse(evaluated.stdout) as { cases: Array<{ status: string; calledTools: string[]; answer: string }> };
      expect(report.cases[0]).toMatchObject({ status: 'passed', calledTools: ['count_words'], answer: 'Three words.' });
      // The tool's own result went back to the model: the TypeScript function ran.
      expect(JSON.stringify(openai.requests[1]!.body.messages)).toContain('counted:3');
    } finally {
      await openai.stop();
    }
  }, 120_000);
});
