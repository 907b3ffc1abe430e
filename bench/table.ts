/** Plain-text formatting for the benchmark report. */

export type Align = 'left' | 'right';

/** Renders rows as aligned columns with a rule under the header. */
export function renderTable(header: string[], rows: string[][], align: Align[]): string {
  const widths = header.map((h, c) => Math.max(h.length, ...rows.map((r) => (r[c] ?? '').length)));
  const line = (cells: string[]) =>
    cells
      .map((cell, c) => (align[c] === 'right' ? cell.padStart(widths[c]!) : cell.padEnd(widths[c]!)))
      .join('  ')
      .trimEnd();
  return [line(header), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.map(line)].join('\n');
}

/** 87 µs, 1.24 ms, 2.1 s. */
export function formatUs(us: number): string {
  if (!Number.isFinite(us)) return '-';
  if (us < 1_000) return `${us.toFixed(0)} µs`;
  if (us < 1_000_000) return `${(us / 1_000).toFixed(2)} ms`;
  return `${(us / 1_000_000).toFixed(2)} s`;
}

export function formatRate(perSecond: number): string {
  return Number.isFinite(perSecond) ? Math.round(perSecond).toLocaleString('en-US') : '-';
}

export function formatRatio(ratio: number): string {
  if (!Number.isFinite(ratio)) return '-';
  // Two significant digits below 0.1 so a small throughput share does not round to 0.00×.
  const digits = ratio < 0.1 ? ratio.toPrecision(2) : ratio < 10 ? ratio.toFixed(2) : ratio.toFixed(1);
  return `${digits}×`;
}
