/**
 * agent.yaml validation: every invalid fixture (test/fixtures/agent-yaml/invalid, the expected problems
 * in its `# expect:` lines) gives exactly its problems, with file, line, column and field path, in phase
 * order; the valid fixtures and the examples load; `troupe validate` prints them and exits 2.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, expect, it } from 'vitest';
import { definedNames, loadAgentConfig, validateAgentFile } from '../src/config/agent.js';
import { ConfigError, formatProblem } from '../src/config/load.js';
import { REPO_ROOT } from './helpers/nats-server.js';
import { runTroupe } from './helpers/processes.js';

const INVALID = join(REPO_ROOT, 'test/fixtures/agent-yaml/invalid');
const VALID = join(REPO_ROOT, 'test/fixtures/agent-yaml/valid');
const ENV = { FIXTURE_MODEL: 'gpt-4o-mini', FIXTURE_TOKEN: 'tok-123456', FIXTURE_SECRET_URL: 'supersecret-value-not-a-url' };

const invalidFiles = readdirSync(INVALID).filter((f) => f.endsWith('.yaml')).sort();

function expectations(file: string): string[] {
  return readFileSync(join(INVALID, file), 'utf8')
    .split('\n')
    .flatMap((line) => (line.startsWith('# expect: ') ? [line.slice('# expect: '.length)] : []));
}

/** Every agent.yaml under examples/. */
function exampleAgents(dir = join(REPO_ROOT, 'examples')): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? exampleAgents(join(dir, e.name)) : e.name === 'agent.yaml' ? [join(dir, e.name)] : [],
  );
}

describe('invalid agent.yaml files', () => {
  it('are at least 40, each with its expected problems', () => {
    expect(invalidFiles.length).toBeGreaterThanOrEqual(40);
    for (const f of invalidFiles) expect(expectations(f), f).not.toEqual([]);
  });

  it.each(invalidFiles)('%s', (f) => {
    const file = relative(REPO_ROOT, join(INVALID, f));
    const { problems, loaded } = validateAgentFile(join(INVALID, f), ENV);
    expect(loaded).toBeUndefined();
    expect(problems.map((p) => `${p.line}:${p.column} ${p.path}: ${p.message}`)).toEqual(expectations(f));
    // The full line names the file as it was given.
    const named = validateAgentFile(file, ENV).problems.map(formatProblem);
    expect(named[0]).toBe(`${file}:${expectations(f)[0]}`);
  });

  it('quote the ${VAR} text of a value from the environment, never the value', () => {
    const { problems } = validateAgentFile(join(INVALID, 'env-value-quoted-not-revealed.yaml'), ENV);
    expect(JSON.stringify(problems)).not.toContain(ENV.FIXTURE_SECRET_URL);
  });

  it('reports phases in order: types, exclusivity, references, constraints', () => {
    const { problems } = validateAgentFile(join(INVALID, 'every-phase-at-once.yaml'), ENV);
    expect(problems.map((p) => p.phase)).toEqual(['types', 'exclusivity', 'references', 'references', 'constraints']);
  });

  it('loadAgentConfig throws CONFIG_INVALID with every problem', () => {
    let error: unknown;
    try {
      loadAgentConfig(join(INVALID, 'every-phase-at-once.yaml'), ENV);
    } catch (err) {
      error = err;
    }
    expect(error).toBeInstanceOf(ConfigError);
    const e = error as ConfigError;
    expect(e.code).toBe('CONFIG_INVALID');
    expect(e.problems).toHaveLength(5);
    expect(e.message.split('\n')).toHaveLength(6);
  });
});

describe('valid agent.yaml files', () => {
  it('the fixture with every field loads, with ${VAR} resolved and defaults applied', () => {
    const { config, dir } = loadAgentConfig(join(VALID, 'full.yaml'), ENV);
    expect(dir).toBe(VALID);
    expect(config.model).toEqual({ provider: 'openai', name: 'gpt-4o-mini', temperature: 0.2, max_tokens: 800, top_p: 0.9, base_url: 'http://127.0.0.1:11434/v1' });
    expect(config.tools?.map((t) => `${t.name}:${t.type}`)).toEqual([
      'lookup_order:function',
      'shipping_quote:function',
      'summarise:prompt',
      'files:mcp',
      'remote:mcp',
      'faq:vectorstore',
      'notes:vectorstore',
    ]);
    // `${NAME:-default}`: the default when unset, the variable when set.
    expect(loadAgentConfig(join(VALID, 'full.yaml'), { ...ENV, FIXTURE_BASE_URL: 'https://models.example.com/v1' }).config.model.base_url).toBe('https://models.example.com/v1');
    const remote = config.tools?.[4];
    expect(remote?.type === 'mcp' && remote.config?.headers).toEqual({ Authorization: 'Bearer tok-123456' });
    expect(config.evaluations?.metrics.map((m) => [m.metric, m.enabled, m.fail_on_error])).toEqual([
      ['relevance', true, false],
      ['groundedness', true, true],
      ['bleu', false, false],
    ]);
  });

  const examples = exampleAgents();
  it('examples/ has agent.yaml files', () => expect(examples.length).toBeGreaterThan(0));
  it.each(examples.map((f) => [relative(REPO_ROOT, f), f]))('%s loads', (_name, file) => {
    const { problems } = validateAgentFile(file, { ...process.env });
    expect(problems.map(formatProblem)).toEqual([]);
  });
});

describe('definedNames', () => {
  it('finds exported JS/TS functions, constants, classes and export lists', () => {
    const names = definedNames(
      'export function a() {}\nexport async function b() {}\nexport const c = 1;\nexport class D {}\nconst e = 1, f = 2;\nexport { e, f as g };\nfunction hidden() {}',
      '.ts',
    );
    expect([...names!].sort()).toEqual(['D', 'a', 'b', 'c', 'e', 'g']);
    expect(definedNames("export * from './x.js'", '.js')).toBeUndefined();
  });

  it('finds top-level Python definitions, assignments and imports', () => {
    const names = definedNames('import os\nfrom x import y as z, w\ndef quote(a):\n    def inner(): pass\nasync def fetch(): pass\nTAX: float = 0.2\nclass K: pass\n', '.py');
    expect([...names!].sort()).toEqual(['K', 'TAX', 'fetch', 'os', 'quote', 'w', 'z']);
  });
});

describe('troupe validate', () => {
  it('prints every problem as file:line:col path: message and exits 2', async () => {
    const file = 'test/fixtures/agent-yaml/invalid/every-phase-at-once.yaml';
    const res = await runTroupe(['validate', file], {});
    expect(res.code).toBe(2);
    const lines = res.stdout.trim().split('\n');
    expect(lines.slice(0, -1)).toEqual(expectations('every-phase-at-once.yaml').map((e) => `${file}:${e}`));
    expect(lines.at(-1)).toBe(`5 problems in ${file}`);
  });

  it('--json gives the problems with their fields', async () => {
    const file = 'test/fixtures/agent-yaml/invalid/tool-name-with-space.yaml';
    const res = await runTroupe(['validate', file, '--json'], {});
    expect(res.code).toBe(2);
    expect(JSON.parse(res.stdout)).toEqual({
      file,
      kind: 'agent',
      valid: false,
      problems: [{ file, line: 8, column: 11, path: 'tools[0].name', message: '"web search" may only contain letters, digits and _', phase: 'constraints' }],
    });
  });

  it('says a valid file is valid and exits 0', async () => {
    const res = await runTroupe(['validate', 'test/fixtures/agent-yaml/valid/full.yaml', '--json'], ENV);
    expect(res.code).toBe(0);
    const out = JSON.parse(res.stdout) as { valid: boolean; agent: { name: string } };
    expect(out.valid).toBe(true);
    expect(out.agent.name).toBe('Full-agent-1');
  });
});
