/**
 * `troupe eval` as a user runs it — the CLI in its own process — on the example agents
 * (examples/yaml-agents/tea-guide with its vectorstore, examples/yaml-agents/librarian with its MCP
 * server and a PDF attachment), against a local server speaking the OpenAI chat-completions and
 * embeddings APIs: the agent's model is scripted per case, the evaluation model ("judge") answers with
 * scores, or never answers. A passing run exits 0; a score under its threshold or a missing tool exits 1;
 * a judge that times out is a soft failure with fail_on_error false (exit 0) and a hard one with true.
 */
import { cpSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { attachFiles } from '../src/eval/files.js';
import { parseVerdict } from '../src/eval/judge.js';
import type { EvalReport } from '../src/eval/run.js';
import { OpenAIScriptedServer, type ScriptStep, type SeenRequest } from './helpers/model-servers.js';
import { startNatsServer } from './helpers/nats-server.js';
import { ProcessGroup, runTroupe } from './helpers/processes.js';

type Msg = { role: string; content: unknown; tool_call_id?: string };
const messages = (req: SeenRequest) => req.body.messages as Msg[];
const textOf = (content: unknown): string =>
  typeof content === 'string'
    ? content
    : (content as Array<{ type: string; text?: string }>).map((p) => (p.type === 'text' ? p.text : `[${p.type}]`)).join('\n');
const question = (req: SeenRequest) => textOf(messages(req).find((m) => m.role === 'user')!.content).split('\n')[0]!;

const work = mkdtempSync(join(tmpdir(), 'troupe-eval-'));
// The tea guide builds its index next to its agent.yaml: a copy keeps the checkout clean.
const TEA = join(work, 'tea-guide', 'agent.yaml');
cpSync(resolve('examples/yaml-agents/tea-guide'), join(work, 'tea-guide'), { recursive: true, filter: (src) => !src.includes('.troupe') });
const LIBRARIAN = 'examples/yaml-agents/librarian/agent.yaml';

/** What the agent's model answers per question, once it has searched (or at once, without tools). */
const GOOD_ANSWERS: Record<string, string> = {
  'How long should I steep green tea?': 'Steep green tea for one to two minutes at 70 to 80 degrees.',
  'Does rooibos have caffeine?': 'Rooibos is a herbal infusion and contains no caffeine.',
  'Where should I keep an opened tin of matcha?': 'Keep opened matcha in the fridge and use it within six weeks.',
  'Until when can a customer return unopened tea?': 'Unopened tea can be returned within thirty days of delivery for a full refund (policies/returns.md).',
  'What discount do cafés get on wholesale orders?': 'Cafés and restaurants get fifteen percent off orders of five kilograms or more (policies/wholesale.md).',
  'What is the total due on the attached invoice, and by when?': 'The total due is 96.90 EUR, payable within thirty days of 2026-11-01.',
  'Say hello to the team.': 'Hello team!',
};
const SEARCH_WORDS: Record<string, string> = {
  'Until when can a customer return unopened tea?': 'unopened',
  'What discount do cafés get on wholesale orders?': 'percent off',
};

// Each case runs the CLI in its own process (a few seconds each on a busy machine).
describe('troupe eval', { timeout: 180_000 }, () => {
  const model = new OpenAIScriptedServer();
  let answers: Record<string, string> = GOOD_ANSWERS;
  /** Questions the model answers without searching first. */
  let noSearch = new Set<string>();
  let judge: (req: SeenRequest) => ScriptStep = () => ({ text: '{"score": 5, "reason": "Every claim is supported."}' });
  const env = () => ({
    OPENAI_BASE_URL: model.baseURL,
    OPENAI_API_KEY: undefined,
    TEA_MODEL: 'agent',
    TEA_JUDGE_MODEL: 'judge',
    LIBRARIAN_MODEL: 'agent',
    LIBRARIAN_JUDGE_MODEL: 'judge',
  });

  beforeAll(() => model.start());
  beforeEach(() => {
    model.respondWith((req) => {
      if (req.model === 'judge') return judge(req);
      const asked = question(req);
      const tools = ((req.body.tools ?? []) as Array<{ function: { name: string } }>).map((t) => t.function.name);
      const searched = messages(req).some((m) => m.role === 'tool');
      if (!searched && tools.includes('kb_search') && !noSearch.has(asked)) return { toolCalls: [{ name: 'kb_search', arguments: { query: asked } }] };
      if (!searched && tools.includes('docs__search_files') && SEARCH_WORDS[asked])
        return { toolCalls: [{ name: 'docs__search_files', arguments: { query: SEARCH_WORDS[asked] } }] };
      return { text: answers[asked] ?? 'I do not know.' };
    });
  });
  afterEach(() => {
    model.reset();
    answers = GOOD_ANSWERS;
    noSearch = new Set();
    judge = () => ({ text: '{"score": 5, "reason": "Every claim is supported."}' });
  });
  afterAll(async () => {
    await model.stop();
    rmSync(work, { recursive: true, force: true });
  });

  async function evalJson(args: string[], expectCode: number): Promise<EvalReport> {
    const res = await runTroupe(['eval', ...args, '--json'], env(), { timeoutMs: 120_000 });
    expect(res.code, res.stderr).toBe(expectCode);
    return JSON.parse(res.stdout) as EvalReport;
  }

  it('passes the vectorstore example: tools called, lexical and judged metrics over their thresholds (exit 0)', async () => {
    const report = await evalJson([TEA], 0);
    expect(report.summary).toEqual({ cases: 3, passed: 3, failed: 0, softFailures: 0, ok: true });
    expect(report.metrics.map((m) => [m.metric, m.kind, m.threshold, m.max, m.model])).toEqual([
      ['groundedness', 'judged', 4, 5, 'judge'],
      ['relevance', 'judged', 4, 5, 'judge'],
      ['f1_score', 'lexical', 0.4, 1, undefined],
      ['rouge', 'lexical', 0.4, 1, undefined],
    ]);
    const [green, rooibos, matcha] = report.cases;
    expect(green).toMatchObject({
      name: 'green tea',
      status: 'passed',
      answer: GOOD_ANSWERS['How long should I steep green tea?'],
      calledTools: ['kb_search'],
      missingTools: [],
    });
    expect(green!.usage).toEqual({ inputTokens: 20, outputTokens: 10, modelCalls: 2 });
    expect(green!.metrics.map((m) => [m.metric, m.status, m.score])).toEqual([
      ['groundedness', 'passed', 5],
      ['relevance', 'passed', 5],
      ['f1_score', 'passed', 1],
      ['rouge', 'passed', 1],
    ]);
    // SQuAD F1: all 8 answer tokens are among the 10 of the truth — P = 1, R = 8/10, F1 = 8/9.
    expect(rooibos!.metrics.find((m) => m.metric === 'f1_score')!.score).toBeCloseTo(8 / 9, 12);
    // The case names its metrics: only those are scored.
    expect(matcha!.metrics.map((m) => m.metric)).toEqual(['groundedness', 'f1_score']);
    // The groundedness judge saw what the search returned.
    const grounded = model
      .requestsFor('judge')
      .find((r) => textOf(messages(r)[0]!.content).includes('How long should I steep green tea?') && textOf(messages(r)[0]!.content).includes('CONTEXT'))!;
    expect(textOf(messages(grounded)[0]!.content)).toContain('"source_reference":"knowledge/faq.json#data.records[0]"');
    expect(model.embeddingRequests.length).toBeGreaterThan(0);
  });

  it('prints a case × metric table, the answers and a summary for people', async () => {
    const res = await runTroupe(['eval', TEA, '--case', 'green tea'], env(), { timeoutMs: 120_000 });
    expect(res.code, res.stderr).toBe(0);
    const lines = res.stdout.split('\n').map((l) => l.trim());
    expect(lines[0]).toMatch(/^case\s+tools\s+groundedness\s+relevance\s+f1_score\s+rouge\s+result$/);
    expect(lines[1]).toMatch(/^green tea\s+✓ kb_search\s+5 ≥ 4 ✓\s+5 ≥ 4 ✓\s+1\.00 ≥ 0\.40 ✓\s+1\.00 ≥ 0\.40 ✓\s+passed$/);
    expect(res.stdout).toContain('  answer: Steep green tea for one to two minutes at 70 to 80 degrees.');
    expect(res.stdout).toContain('groundedness: Every claim is supported.');
    expect(lines.filter(Boolean).at(-1)).toBe('1 case: 1 passed, 0 failed');
    // The agent's model calls (a search, then the answer): 10 tokens in and 5 out each, as the server said.
    expect(res.stdout).toMatch(/^green tea \(\d+\.\d s, tokens 20 in, 10 out\)$/m);
  });

  it('fails a case whose score is under its threshold, and one that misses an expected tool (exit 1)', async () => {
    answers = { ...GOOD_ANSWERS, 'Does rooibos have caffeine?': 'Please ask our staff in the shop.' };
    judge = (req) =>
      textOf(messages(req)[0]!.content).includes('Please ask our staff')
        ? { text: '{"score": 2, "reason": "It does not answer."}' }
        : { text: '{"score": 5, "reason": "Fine."}' };
    noSearch = new Set(['How long should I steep green tea?']);
    const report = await evalJson([TEA], 1);
    expect(report.summary).toMatchObject({ cases: 3, passed: 1, failed: 2, ok: false });
    // Answered well, but without the search it was expected to make.
    expect(report.cases[0]).toMatchObject({ status: 'failed', calledTools: [], missingTools: ['kb_search'] });
    expect(report.cases[0]!.metrics.every((m) => m.status === 'passed')).toBe(true);
    const rooibos = report.cases[1]!;
    expect(rooibos.status).toBe('failed');
    expect(rooibos.metrics.map((m) => [m.metric, m.status, m.hard])).toEqual([
      ['groundedness', 'failed', true],
      ['relevance', 'failed', true],
      ['f1_score', 'failed', true],
      ['rouge', 'failed', true],
    ]);
    expect(rooibos.metrics[2]!.score).toBeLessThan(0.4);
  });

  it('runs the MCP example: the server is started, its tools count for expected_tools, a PDF goes in as its text', async () => {
    const report = await evalJson([LIBRARIAN], 0);
    expect(report.summary).toMatchObject({ cases: 3, passed: 3, ok: true });
    expect(report.cases.map((c) => [c.name, c.calledTools])).toEqual([
      ['returns window', ['docs']],
      ['wholesale discount', ['docs']],
      ['invoice total', []],
    ]);
    const invoiceTurn = model.requestsFor('agent').find((r) => question(r) === 'What is the total due on the attached invoice, and by when?')!;
    const content = textOf(messages(invoiceTurn).find((m) => m.role === 'user')!.content);
    expect(content).toContain('Attached invoice-2041.pdf: Invoice 2041 for Café Lumen');
    expect(content).toContain('[file invoice-2041.pdf (pdf)]\nLeaf & Kettle - Invoice 2041');
    expect(content).toContain('Total due: 96.90 EUR');
    const search = model.requestsFor('agent').find((r) => messages(r).some((m) => m.role === 'tool') && question(r).startsWith('Until when'))!;
    expect(messages(search).find((m) => m.role === 'tool')!.content).toBe(
      'policies/returns.md:3: Unopened tea can be returned within thirty days of delivery for a full refund.',
    );
  });

  it('a judge that times out is a soft failure with fail_on_error false (exit 0), a hard one with true (exit 1)', async () => {
    judge = () => ({ hang: true });
    const soft = await evalJson(['test/fixtures/eval/judge-timeout-soft.yaml'], 0);
    expect(soft.summary).toEqual({ cases: 1, passed: 1, failed: 0, softFailures: 1, ok: true });
    expect(soft.cases[0]!.metrics).toEqual([
      {
        metric: 'coherence',
        status: 'error',
        hard: false,
        threshold: 3,
        max: 5,
        note: 'the judge failed 2 times: timed out after 300 ms; timed out after 300 ms',
      },
      { metric: 'f1_score', status: 'passed', hard: false, threshold: 0.5, max: 1, score: 1 },
    ]);
    // retry_on_failure: 1 — two attempts.
    expect(model.requestsFor('judge')).toHaveLength(2);

    const hard = await evalJson(['test/fixtures/eval/judge-timeout-hard.yaml'], 1);
    expect(hard.summary).toEqual({ cases: 1, passed: 0, failed: 1, softFailures: 0, ok: false });
    expect(hard.cases[0]!.metrics[0]).toMatchObject({ metric: 'coherence', status: 'error', hard: true });

    const table = await runTroupe(['eval', 'test/fixtures/eval/judge-timeout-soft.yaml'], env(), { timeoutMs: 60_000 });
    expect(table.code).toBe(0);
    expect(table.stdout).toMatch(/greeting\s+–\s+error \(soft\)\s+1\.00 ≥ 0\.50 ✓\s+passed \(soft failures\)/);
    expect(table.stdout).toContain(
      'coherence: the judge failed 2 times: timed out after 300 ms; timed out after 300 ms (soft failure: fail_on_error is false)',
    );
    expect(table.stdout).toContain('1 case: 1 passed, 0 failed, 1 soft failure');
  });

  it('attaches files to the input (the model sees the image and the office files as text); a file that is not its type fails its case (exit 1)', async () => {
    const report = await evalJson(['test/fixtures/eval/files.yaml'], 1);
    expect(report.cases.map((c) => [c.name, c.status, c.error?.replace(/ \(not a zip archive.*$/, '')])).toEqual([
      ['attachments', 'passed', undefined],
      ['office', 'passed', undefined],
      [
        'spreadsheet',
        'failed',
        'test case "spreadsheet" files[0] (prices.csv): the excel file\'s text cannot be extracted: the workbook is not a valid file of its type',
      ],
    ]);
    const [turn, office] = model.requestsFor('agent');
    const parts = messages(turn!).find((m) => m.role === 'user')!.content as Array<{ type: string; text?: string; image_url?: { url: string } }>;
    expect(parts.map((p) => p.type)).toEqual(['text', 'text', 'text', 'text', 'image_url', 'text']);
    expect(parts[2]!.text).toBe('[file note.txt, text/plain]\nRemember: the tasting is on Friday.\n');
    expect(parts[3]!.text).toBe('[file prices.csv, text/csv]\nitem,price\nSencha,9.50\nTeapot,24.00\n');
    expect(parts[4]!.image_url!.url).toBe(`data:image/png;base64,${readFileSync('test/fixtures/eval/pixel.png').toString('base64')}`);
    // The office files reach the model as text, their tables as rows.
    expect(textOf(messages(office!).find((m) => m.role === 'user')!.content).split('\n')).toEqual([
      'What do the office files say?',
      'Attached prices.xlsx: The price list',
      '[file prices.xlsx (excel, sheet Prices, range A1:B3)]',
      '## Sheet Prices (A1:B3)',
      '| Tea | Price |',
      '| Sencha | 12.5 |',
      '| Rooibos | 9 |',
      '[file report.docx (word, pages 2)]',
      '## Page 2',
      'Second page: the outlook for next quarter is calm.',
      '- Order more sencha.',
      '- Keep rooibos as it is.',
      '[file deck.pptx (powerpoint, slides 2)]',
      '## Slide 2',
      'Sales by tea',
      '| Tea | Cups |',
      '| Sencha | 1200 |',
      '| Oolong | 800 |',
      'Notes: Say that oolong grew fastest.',
    ]);
  });

  it('names unnamed cases "case <n>" and scores metrics without a threshold at their defaults, and says so', async () => {
    judge = () => ({ text: '{"score": 3, "reason": "Clear enough."}' });
    const report = await evalJson(['test/fixtures/eval/defaults.yaml'], 1);
    expect(report.metrics.map((m) => [m.metric, m.threshold, m.defaultThreshold, m.max])).toEqual([
      ['f1_score', 0.5, true, 1],
      ['coherence', 3, true, 5],
    ]);
    expect(report.cases.map((c) => [c.name, c.status, c.metrics.map((m) => `${m.metric} ${m.score} ${m.status}`)])).toEqual([
      ['case 1', 'passed', ['f1_score 1 passed', 'coherence 3 passed']],
      ['case 2', 'failed', ['f1_score 0 failed', 'coherence 3 passed']],
    ]);
    const one = await runTroupe(['eval', 'test/fixtures/eval/defaults.yaml', '--case', 'case 1'], env(), { timeoutMs: 60_000 });
    expect(one.code, one.stderr).toBe(0);
    const lines = one.stdout.split('\n').map((l) => l.trim());
    expect(lines[1]).toMatch(/^case 1\s+–\s+1\.00 ≥ 0\.50 ✓\s+3 ≥ 3 ✓\s+passed$/);
    expect(lines).toContain('default thresholds (none in the file): f1_score 0.50 on 0–1, coherence 3 on 1–5');
  });

  it('with --nats, runs the agent on a running mesh: a node in another process routes the cases to it', async () => {
    const nats = await startNatsServer();
    const procs = new ProcessGroup();
    try {
      await procs.spawnTroupe(['up', '--nats', nats.url], nats.env, { name: 'node' });
      const res = await runTroupe(['eval', TEA, '--case', 'rooibos caffeine', '--nats', nats.url, '--json'], { ...nats.env, ...env() }, { timeoutMs: 120_000 });
      expect(res.code, res.stderr + res.stdout).toBe(0);
      const report = JSON.parse(res.stdout) as EvalReport;
      expect(report.mesh).toBe('nats');
      expect(report.cases.map((c) => [c.name, c.status, c.calledTools])).toEqual([['rooibos caffeine', 'passed', ['kb_search']]]);
    } finally {
      await procs.stopAll();
      await nats.stop();
    }
  });

  it('refuses an unknown --case and an invalid agent.yaml as bad usage (exit 2)', async () => {
    const unknown = await runTroupe(['eval', 'test/fixtures/eval/judge-timeout-soft.yaml', '--case', 'nope'], env());
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain('has no test case "nope" (cases: greeting)');
    const invalid = await runTroupe(['eval', 'test/fixtures/agent-yaml/invalid/tool-name-with-space.yaml'], env());
    expect(invalid.code).toBe(2);
    expect(invalid.stderr).toContain('error CONFIG_INVALID');
  });
});

describe('test-case files', () => {
  const dir = resolve('test/fixtures/eval');

  it('attaches text and csv as file parts, an image as image bytes, a pdf (its pages) as text', async () => {
    const { parts, context } = await attachFiles(
      'attachments',
      [
        { path: 'note.txt', type: 'text', description: 'A note' },
        { path: 'prices.csv', type: 'csv' },
        { path: 'pixel.png', type: 'image' },
        { path: '../../../examples/yaml-agents/librarian/files/invoice-2041.pdf', type: 'pdf', pages: [2] },
      ],
      dir,
    );
    expect(parts).toEqual([
      { kind: 'text', text: 'Attached note.txt: A note' },
      { kind: 'file', file: { name: 'note.txt', mimeType: 'text/plain', bytes: Buffer.from('Remember: the tasting is on Friday.\n').toString('base64') } },
      { kind: 'file', file: { name: 'prices.csv', mimeType: 'text/csv', bytes: readFileSync(join(dir, 'prices.csv')).toString('base64') } },
      { kind: 'file', file: { name: 'pixel.png', mimeType: 'image/png', bytes: readFileSync(join(dir, 'pixel.png')).toString('base64') } },
      {
        kind: 'text',
        text: '[file invoice-2041.pdf (pdf, pages 2)]\nTerms\nPayable within thirty days of the invoice date (2026-11-01).',
        metadata: { 'troupe/file': { name: 'invoice-2041.pdf', type: 'pdf', pages: [2] } },
      },
    ]);
    expect(context).toHaveLength(3);
  });

  it("parses a judge's verdict, and refuses one off the scale", () => {
    expect(parseVerdict('Sure! {"score": 4, "reason": "Mostly supported."}', 5)).toEqual({ score: 4, reason: 'Mostly supported.' });
    expect(parseVerdict('Score: 3', 5)).toEqual({ score: 3, reason: 'Score: 3' });
    expect(() => parseVerdict('{"score": 9}', 5)).toThrow("the judge's score 9 is not on the 1–5 scale");
    expect(() => parseVerdict('no idea', 5)).toThrow('the judge gave no score: "no idea"');
  });
});
