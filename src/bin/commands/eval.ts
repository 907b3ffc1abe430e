/**
 * `troupe eval <agent.yaml> [--case NAME] [--json]`: runs the file's test cases through the real agent
 * (on an in-process mesh, or with --nats on a running one) and prints a case × metric table — each score
 * against its threshold, pass or fail — the agent's answer to each case, and a summary. `--json` prints
 * the same report as data. Exit 0 when every case passed (soft failures allowed), 1 when one failed,
 * 2 for bad usage or an invalid agent.yaml.
 */
import type { Command } from 'commander';
import { loadAgentConfig } from '../../config/agent.js';
import type { CaseResult, EvalReport, MetricResult } from '../../eval/run.js';
import { createLogger } from '../../observability/logger.js';
import { connect, globals, principalOf } from '../cli.js';
import { color, printJson, table } from '../output.js';

const ANSWER_CHARS = 600;

function number(score: number, max: number): string {
  return max === 1 ? score.toFixed(2) : Number.isInteger(score) ? String(score) : score.toFixed(1);
}

export function metricCell(m: MetricResult | undefined): string {
  if (!m) return color.dim('–');
  const threshold = number(m.threshold, m.max);
  switch (m.status) {
    case 'passed':
      return color.green(`${number(m.score!, m.max)} ≥ ${threshold} ✓`);
    case 'failed':
      return color.red(`${number(m.score!, m.max)} < ${threshold} ✗`);
    case 'error':
      return m.hard ? color.red('error ✗') : color.yellow('error (soft)');
    case 'skipped':
      return color.dim('skipped');
  }
}

function toolsCell(c: CaseResult): string {
  if (c.expectedTools.length === 0) return color.dim(c.calledTools.length ? c.calledTools.join(', ') : '–');
  if (c.missingTools.length) return color.red(`✗ missing ${c.missingTools.join(', ')}`);
  return color.green(`✓ ${c.expectedTools.join(', ')}`);
}

function clip(text: string): string {
  const one = text.trim();
  return one.length > ANSWER_CHARS ? `${one.slice(0, ANSWER_CHARS)}…` : one;
}

/** The report for people: the table, the answers and notes per case, the summary. */
export function formatReport(report: EvalReport): string {
  const metricNames = report.metrics.filter((m) => m.enabled).map((m) => m.metric);
  const head = ['case', 'tools', ...metricNames, 'result'];
  const rows = report.cases.map((c) => [
    c.name,
    toolsCell(c),
    ...metricNames.map((name) => metricCell(c.metrics.find((m) => m.metric === name))),
    c.status === 'passed' ? color.green(c.softFailures ? 'passed (soft failures)' : 'passed') : color.red('FAILED'),
  ]);
  const lines = [table(head, rows), ''];
  // Seed 002 makes a threshold optional: say which ones were not in the file.
  const defaulted = report.metrics.filter((m) => m.enabled && m.defaultThreshold);
  if (defaulted.length) {
    const scale = (m: EvalReport['metrics'][number]) => (m.max === 1 ? '0–1' : `1–${m.max}`);
    lines.splice(
      1,
      0,
      color.dim(`default thresholds (none in the file): ${defaulted.map((m) => `${m.metric} ${number(m.threshold, m.max)} on ${scale(m)}`).join(', ')}`),
    );
  }
  for (const c of report.cases) {
    const tokens = c.usage ? `, tokens ${c.usage.inputTokens} in, ${c.usage.outputTokens} out` : '';
    lines.push(color.bold(`${c.name}`) + color.dim(` (${(c.durationMs / 1000).toFixed(1)} s${tokens})`));
    lines.push(`  input:  ${clip(c.input)}`);
    if (c.answer !== undefined) lines.push(`  answer: ${clip(c.answer).replace(/\n/g, '\n          ')}`);
    if (c.error) lines.push(color.red(`  error:  ${c.error}`));
    for (const m of c.metrics) {
      if (m.status === 'error')
        lines.push((m.hard ? color.red : color.yellow)(`  ${m.metric}: ${m.note}${m.hard ? '' : ' (soft failure: fail_on_error is false)'}`));
      else if (m.note && m.status !== 'skipped') lines.push(color.dim(`  ${m.metric}: ${m.note}`));
    }
    lines.push('');
  }
  const { cases, passed, failed, softFailures } = report.summary;
  const summary = `${cases} case${cases === 1 ? '' : 's'}: ${passed} passed, ${failed} failed${softFailures ? `, ${softFailures} soft failure${softFailures === 1 ? '' : 's'}` : ''}`;
  lines.push(failed ? color.red(summary) : color.green(summary));
  return `${lines.join('\n')}\n`;
}

export async function evaluate(file: string, opts: { case?: string; timeout: number }, cmd: Command): Promise<void> {
  const g = globals(cmd);
  const loaded = loadAgentConfig(file);
  const { runEvaluation } = await import('../../eval/run.js');
  const logger = createLogger({ name: 'troupe-eval', level: g.logLevel ?? 'warn' });
  const transport = g.nats ? await connect(g, `troupe-eval-${loaded.config.name}`) : undefined;
  const progress = !g.json && process.stderr.isTTY;
  try {
    if (!g.json && !(loaded.config.test_cases ?? []).length) process.stderr.write(color.yellow(`${file} has no test_cases: nothing to evaluate\n`));
    const report = await runEvaluation(loaded, {
      logger,
      caseTimeoutMs: opts.timeout,
      ...(opts.case !== undefined ? { caseName: opts.case } : {}),
      ...(transport ? { nats: { transport, tenant: g.tenant, principal: await principalOf(g) } } : {}),
      ...(progress ? { onCase: (c: CaseResult) => process.stderr.write(color.dim(`  ${c.name}: ${c.status}\n`)) } : {}),
    });
    if (g.json) printJson(report);
    else process.stdout.write(formatReport(report));
    if (!report.summary.ok) process.exitCode = 1;
  } finally {
    await transport?.drain().catch(() => undefined);
  }
}
