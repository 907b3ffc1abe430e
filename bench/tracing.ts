/**
 * What tracing costs (issue 14): the agent hop and the durable full turn with tracing off (no provider
 * registered: what every process runs without OTEL_EXPORTER_OTLP_ENDPOINT), on (the OpenTelemetry SDK
 * exporting every span over OTLP/HTTP to a local sink that decodes and counts them), and off again.
 * `offVsBaseline` compares the "off" rows with the main table's rows of the same scenarios (same run,
 * same build): how much of the difference is noise.
 */
import { createServer, type Server } from 'node:http';
import type { ConcurrentResult, Op, SequentialResult } from './measure.js';
import { formatRate, formatRatio, formatUs, renderTable } from './table.js';

export interface TracingRow {
  name: string;
  tracing: 'off' | 'on' | 'off again';
  sequential: SequentialResult;
  concurrent: ConcurrentResult;
  /** Spans the sink received during the row (on: exported; off: none expected). */
  spans: number;
}

export interface TracingResults {
  rows: TracingRow[];
  /** Throughput with tracing on / off, per scenario key. */
  onVsOff: Record<string, number>;
  /** Throughput of the first "off" row / the main table's row of the scenario, per scenario key. */
  offVsBaseline: Record<string, number>;
}

export interface TracingBenchInput {
  measure: (name: string, op: Op) => Promise<{ sequential: SequentialResult; concurrent: ConcurrentResult }>;
  scenarios: Array<{ key: string; name: string; op: Op; baselinePerSecond: number }>;
  /** Registers the SDK exporting to `endpoint`; returns what flushes and unregisters it. */
  start: (endpoint: string) => Promise<{ flush(): Promise<void>; shutdown(): Promise<void> }>;
}

/** An OTLP/HTTP sink: decodes every JSON export and counts its spans. */
async function startSink(): Promise<{ url: string; spans: () => number; close: () => Promise<void> }> {
  let spans = 0;
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      try {
        const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { resourceSpans?: Array<{ scopeSpans?: Array<{ spans?: unknown[] }> }> };
        for (const rs of body.resourceSpans ?? []) for (const ss of rs.scopeSpans ?? []) spans += ss.spans?.length ?? 0;
        res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
      } catch {
        res.writeHead(400).end();
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as { port: number }).port}`,
    spans: () => spans,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

export async function runTracingBench(input: TracingBenchInput): Promise<TracingResults> {
  const sink = await startSink();
  const rows: TracingRow[] = [];
  try {
    for (const phase of ['off', 'on', 'off again'] as const) {
      const handle = phase === 'on' ? await input.start(sink.url) : undefined;
      for (const s of input.scenarios) {
        const before = sink.spans();
        const r = await input.measure(`${s.name}, tracing ${phase}`, s.op);
        await handle?.flush();
        rows.push({ name: s.key, tracing: phase, sequential: r.sequential, concurrent: r.concurrent, spans: sink.spans() - before });
      }
      await handle?.shutdown();
    }
  } finally {
    await sink.close();
  }
  const onVsOff: Record<string, number> = {};
  const offVsBaseline: Record<string, number> = {};
  for (const s of input.scenarios) {
    const off = rows.find((r) => r.name === s.key && r.tracing === 'off')!;
    const on = rows.find((r) => r.name === s.key && r.tracing === 'on')!;
    onVsOff[s.key] = on.concurrent.perSecond / off.concurrent.perSecond;
    offVsBaseline[s.key] = off.concurrent.perSecond / s.baselinePerSecond;
  }
  return { rows, onVsOff, offVsBaseline };
}

export function renderTracingReport(r: TracingResults): string {
  const table = renderTable(
    ['scenario', 'tracing', 'p50', 'p99', 'throughput', 'spans exported'],
    r.rows.map((row) => [
      row.name,
      row.tracing,
      formatUs(row.sequential.p50Us),
      formatUs(row.sequential.p99Us),
      formatRate(row.concurrent.perSecond),
      String(row.spans),
    ]),
    ['left', 'left', 'right', 'right', 'right', 'right'],
  );
  const summary = Object.keys(r.onVsOff).map(
    (key) =>
      `  ${key}: tracing on (OTLP/HTTP to a local sink) runs at ${formatRatio(r.onVsOff[key]!)} of the throughput with it off; off runs at ${formatRatio(r.offVsBaseline[key]!)} of the main table's row`,
  );
  return ['Tracing cost (off: no provider; on: OpenTelemetry SDK exporting every span; off again)', table, ...summary].join('\n');
}
