/**
 * What inspection costs (issue 11): the agent hop and the durable full turn measured with inspection off,
 * on (every actor of the node and of the agent publishing, with an operator subscribed to the whole
 * stream, as `troupe watch`, the Stately relay or the studio would be), and off again — the "off" rows are
 * the price of having the hook at all, to compare with the main table's rows of the same scenarios.
 */
import type { ConcurrentResult, Op, SequentialResult } from './measure.js';
import { formatRate, formatRatio, formatUs, renderTable } from './table.js';

export interface InspectionRow {
  name: string;
  inspection: 'off' | 'on' | 'off again';
  sequential: SequentialResult;
  concurrent: ConcurrentResult;
  /** Inspection records received by the operator's subscription during the row. */
  records: number;
}

export interface InspectionResults {
  rows: InspectionRow[];
  /** Throughput with inspection on / off, per scenario. */
  onVsOff: Record<string, number>;
}

export interface InspectionBenchInput {
  /** Runs one scenario the way run.ts runs every other (warm-up, sequential, concurrent). */
  measure: (name: string, op: Op) => Promise<{ sequential: SequentialResult; concurrent: ConcurrentResult }>;
  scenarios: Array<{ name: string; op: Op }>;
  /** Switches inspection on the whole mesh (ctl.inspection; the node relays it to agents by hello). */
  setInspection: (on: boolean) => Promise<void>;
  /** Records the operator's subscription has received so far. */
  records: () => number;
}

export async function runInspectionBench(input: InspectionBenchInput): Promise<InspectionResults> {
  const rows: InspectionRow[] = [];
  for (const phase of ['off', 'on', 'off again'] as const) {
    await input.setInspection(phase === 'on');
    for (const s of input.scenarios) {
      const before = input.records();
      const r = await input.measure(`${s.name}, inspection ${phase}`, s.op);
      rows.push({ name: s.name, inspection: phase, sequential: r.sequential, concurrent: r.concurrent, records: input.records() - before });
    }
  }
  await input.setInspection(false);
  const onVsOff: Record<string, number> = {};
  for (const s of input.scenarios) {
    const off = rows.find((r) => r.name === s.name && r.inspection === 'off')!;
    const on = rows.find((r) => r.name === s.name && r.inspection === 'on')!;
    onVsOff[s.name] = on.concurrent.perSecond / off.concurrent.perSecond;
  }
  return { rows, onVsOff };
}

export function renderInspectionReport(r: InspectionResults): string {
  const table = renderTable(
    ['scenario', 'inspection', 'p50', 'p99', 'throughput', 'records'],
    r.rows.map((row) => [
      row.name,
      row.inspection,
      formatUs(row.sequential.p50Us),
      formatUs(row.sequential.p99Us),
      formatRate(row.concurrent.perSecond),
      String(row.records),
    ]),
    ['left', 'left', 'right', 'right', 'right', 'right'],
  );
  const summary = Object.entries(r.onVsOff).map(([name, ratio]) => `  ${name}: inspection on runs at ${formatRatio(ratio)} of the throughput with it off`);
  return ['Inspection cost (off, on with an operator following the whole stream, off again)', table, ...summary].join('\n');
}
