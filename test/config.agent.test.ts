/**
 * agent.yaml validation: every invalid fixture (test/fixtures/agent-yaml/invalid, the expected problems
 * in its `# expect:` lines) gives exactly its problems, with file, line, column and field path, in phase
 * order; the valid fixtures and the examples load; `troupe validate` prints them and exits 2.
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative } from 'node:path';
import { describe, expect, it } from 'vitest';
import { appliedDefaults, definedNames, loadAgentConfig, metricThreshold, testCaseName, validateAgentFile } from '../src/config/agent.js';
import { parseTemplate, renderTemplate } from '../src/config/template.js';
import { ConfigError, formatProblem, type ConfigProblem } from '../src/config/load.js';
import { REPO_ROOT } from './helpers/nats-server.js';
import { cliTestTimeout, runTroupe } from './helpers/processes.js';

const INVALID = join(REPO_ROOT, 'test/fixtures/agent-yaml/invalid');
const VALID = join(REPO_ROOT, 'test/fixtures/agent-yaml/valid');
const ENV = { FIXTURE_MODEL: 'gpt-4o-mini', FIXTURE_TOKEN: 'tok-123456', FIXTURE_SECRET_URL: 'supersecret-value-not-a-url' };

const invalidFiles = readdirSync(INVALID)
  .filter((f) => f.endsWith('.yaml'))
  .sort();

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
    // A problem inside another file (a prompt template's) names that file, relative to the agent.yaml.
    const where = (p: ConfigProblem) => (p.file === join(INVALID, f) ? '' : `${relative(INVALID, p.file)}:`);
    expect(problems.map((p) => `${where(p)}${p.line}:${p.column} ${p.path}: ${p.message}`)).toEqual(expectations(f));
    // The full line names the file as it was given.
    const named = validateAgentFile(file, ENV).problems.map(formatProblem);
    const first = expectations(f)[0]!;
    expect(named[0]).toBe(/^\d/.test(first) ? `${file}:${first}` : join(dirname(file), first));
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
    expect(config.model).toEqual({
      provider: 'openai',
      name: 'gpt-4o-mini',
      temperature: 0.2,
      max_tokens: 800,
      top_p: 0.9,
      base_url: 'http://127.0.0.1:11434/v1',
    });
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
    expect(loadAgentConfig(join(VALID, 'full.yaml'), { ...ENV, FIXTURE_BASE_URL: 'https://models.example.com/v1' }).config.model.base_url).toBe(
      'https://models.example.com/v1',
    );
    const remote = config.tools?.[4];
    expect(remote?.type === 'mcp' && remote.config?.headers).toEqual({ Authorization: 'Bearer tok-123456' });
    expect(config.evaluations?.metrics.map((m) => [m.metric, m.enabled, m.fail_on_error])).toEqual([
      ['relevance', true, false],
      ['groundedness', true, true],
      ['bleu', false, false],
    ]);
    expect(config.memory).toEqual({ max_messages: 12, max_tokens: 3000, summarize: false });
    expect(config.output).toMatchObject({ name: 'order_status', retries: 1, schema: { type: 'object', required: ['order', 'status'] } });
    // A file with a memory block has no memory default to report.
    expect(appliedDefaults(config).map((d) => d.path)).not.toContain('memory');
  });

  it('takes what seed 002 allows: a 100-character name, unnamed test cases and metrics without a threshold, with their defaults', () => {
    const { problems, warnings, loaded } = validateAgentFile(join(VALID, 'seed-defaults.yaml'), ENV);
    expect(problems.map(formatProblem)).toEqual([]);
    const config = loaded!.config;
    expect(config.name).toHaveLength(100);
    expect(config.test_cases!.map((tc, i) => testCaseName(tc, i))).toEqual(['case 1', 'japan', 'case 3']);
    // Judged: the middle of the scale, rounded up (3 of 1–5, 6 of 1–10); lexical: 0.5; a threshold given stays.
    expect(config.evaluations!.metrics.map((m) => [m.metric, metricThreshold(m)])).toEqual([
      ['relevance', 3],
      ['groundedness', 6],
      ['f1_score', 0.5],
      ['rouge', 0.3],
    ]);
    expect(appliedDefaults(config)).toEqual([
      {
        path: 'memory',
        message: "the model gets the thread's newest 20 earlier messages, at most 4000 tokens of them; older turns are summarised by the agent's model",
      },
      { path: 'evaluations.metrics[0].threshold', message: 'relevance passes at 3 (no threshold: the middle of its 1–5 scale, rounded up)' },
      { path: 'evaluations.metrics[1].threshold', message: 'groundedness passes at 6 (no threshold: the middle of its 1–10 scale, rounded up)' },
      { path: 'evaluations.metrics[2].threshold', message: 'f1_score passes at 0.5 (no threshold: half of its 0–1 scale)' },
      { path: 'test_cases[0].name', message: 'the case is called "case 1" (no name: its place in the list)' },
      { path: 'test_cases[2].name', message: 'the case is called "case 3" (no name: its place in the list)' },
    ]);
    // A declared parameter its template never uses: a warning at the parameter, the file stays valid.
    expect(warnings.map((w) => `${w.line}:${w.column} ${w.path}: ${w.message}`)).toEqual([
      '22:7 tools[1].parameters.audience: the template never uses {audience}: the model is asked for it and it goes nowhere',
    ]);
  });

  it('warns about an unused parameter of a template file at the parameter, and points at a placeholder inside the file', () => {
    const dir = mkdtempSync(join(tmpdir(), 'troupe-template-'));
    try {
      writeFileSync(join(dir, 'ask.txt'), 'Context: {"k": 1}\nTell {{ who }} about {topic}\nand \\{literal} stays.\n');
      const yaml = (params: string) =>
        `name: asker\nmodel: {provider: openai, name: m}\ninstructions: {inline: Ask.}\ntools:\n  - name: ask\n    description: Asks\n    type: prompt\n    file: ask.txt\n    parameters:\n${params}`;
      writeFileSync(
        join(dir, 'agent.yaml'),
        yaml('      who: {type: str, description: W}\n      topic: {type: str, description: T}\n      tone: {type: str, description: How}\n'),
      );
      const ok = validateAgentFile(join(dir, 'agent.yaml'), ENV);
      expect(ok.problems).toEqual([]);
      expect(ok.warnings.map((w) => `${relative(dir, w.file)}:${w.line}:${w.column} ${w.path}`)).toEqual(['agent.yaml:12:7 tools[0].parameters.tone']);
      writeFileSync(join(dir, 'agent.yaml'), yaml('      who: {type: str, description: W}\n'));
      const bad = validateAgentFile(join(dir, 'agent.yaml'), ENV);
      expect(bad.problems.map((p) => `${relative(dir, p.file)}:${p.line}:${p.column} ${p.path}: ${p.message}`)).toEqual([
        'ask.txt:2:22 tools[0].file: the template uses {topic}, which is not one of its parameters (who); write \\{ for a literal brace',
      ]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  const examples = exampleAgents();
  it('examples/ has agent.yaml files', () => expect(examples.length).toBeGreaterThan(0));
  it.each(examples.map((f) => [relative(REPO_ROOT, f), f]))('%s loads', (_name, file) => {
    const { problems } = validateAgentFile(file, { ...process.env });
    expect(problems.map(formatProblem)).toEqual([]);
  });
});

describe('prompt templates', () => {
  it("fill the seed's {param} and Mustache's {{ param }}, leave JSON braces as text and honour \\{ \\} escapes", () => {
    const args = { country: 'Peru', order: { id: 1 } };
    expect(renderTemplate('What is the capital of {country}?', args)).toBe('What is the capital of Peru?');
    expect(renderTemplate('Capital of {{country}} / {{ country }}', args)).toBe('Capital of Peru / Peru');
    expect(renderTemplate('Reply as {"capital": "…", "country": "{country}"} for {order}', args)).toBe(
      'Reply as {"capital": "…", "country": "Peru"} for {"id":1}',
    );
    expect(renderTemplate('Write \\{country} and \\{\\{country}} as text, {{{country}}} braced, C:\\path kept', args)).toBe(
      'Write {country} and {{country}} as text, {Peru} braced, C:\\path kept',
    );
    expect(renderTemplate('{ country } {1} {} {country!r} {{missing}}', args)).toBe('{ country } {1} {} {country!r} {{missing}}');
    expect(parseTemplate('a {x} b {{ y }}').flatMap((s) => (s.kind === 'placeholder' ? [`${s.name}@${s.offset}:${s.raw}`] : []))).toEqual([
      'x@2:{x}',
      'y@8:{{ y }}',
    ]);
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
    const names = definedNames(
      'import os\nfrom x import y as z, w\ndef quote(a):\n    def inner(): pass\nasync def fetch(): pass\nTAX: float = 0.2\nclass K: pass\n',
      '.py',
    );
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
      warnings: [],
    });
  });

  it(
    'prints warnings and the defaults it applied for a valid file, and exits 0',
    async () => {
      const file = 'test/fixtures/agent-yaml/valid/seed-defaults.yaml';
      const res = await runTroupe(['validate', file], {});
      expect(res.code).toBe(0);
      expect(res.stdout.trim().split('\n')).toEqual([
        `${file}:22:7 tools[1].parameters.audience: warning: the template never uses {audience}: the model is asked for it and it goes nowhere`,
        `valid ${file}: agent Geography-assistant-for-the-whole-world-with-a-name-exactly-one-hundred-characters-long-abcdefghijkl, openai gpt-4o-mini, tools capital (prompt), compare (prompt), 1 warning`,
        "  default memory: the model gets the thread's newest 20 earlier messages, at most 4000 tokens of them; older turns are summarised by the agent's model",
        '  default evaluations.metrics[0].threshold: relevance passes at 3 (no threshold: the middle of its 1–5 scale, rounded up)',
        '  default evaluations.metrics[1].threshold: groundedness passes at 6 (no threshold: the middle of its 1–10 scale, rounded up)',
        '  default evaluations.metrics[2].threshold: f1_score passes at 0.5 (no threshold: half of its 0–1 scale)',
        '  default test_cases[0].name: the case is called "case 1" (no name: its place in the list)',
        '  default test_cases[2].name: the case is called "case 3" (no name: its place in the list)',
      ]);
      const json = JSON.parse((await runTroupe(['validate', file, '--json'], {})).stdout) as { valid: boolean; warnings: unknown[]; defaults: unknown[] };
      expect(json.valid).toBe(true);
      expect(json.warnings).toEqual([expect.objectContaining({ line: 22, column: 7, path: 'tools[1].parameters.audience', phase: 'references' })]);
      expect(json.defaults).toHaveLength(6);
    },
    cliTestTimeout(2),
  );

  it('says a valid file is valid and exits 0', async () => {
    const res = await runTroupe(['validate', 'test/fixtures/agent-yaml/valid/full.yaml', '--json'], ENV);
    expect(res.code).toBe(0);
    const out = JSON.parse(res.stdout) as { valid: boolean; agent: { name: string } };
    expect(out.valid).toBe(true);
    expect(out.agent.name).toBe('Full-agent-1');
  });
});
