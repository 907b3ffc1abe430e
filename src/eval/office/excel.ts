/**
 * `excel` files (.xlsx) with exceljs: every visible sheet (or the `sheet` named), each as a table of its
 * rows — all of the used area, or the cells of `range` (`A1:E100`). A cell is its value as text: numbers
 * as written, dates as ISO dates, formulas as their computed result, rich text and links as their text,
 * errors as `#DIV/0!`; the cells a merged cell covers are empty but for the first. Wholly empty rows
 * and trailing empty columns of the used area are left out; a range keeps its rectangle.
 */
import type { CellValue, Workbook } from 'exceljs';
import { checkZip, loadPackages, MAX_CELLS, tableText, type ExtractedDocument, type ExtractedTable } from './shared.js';
import { OPTIONAL_FEATURES } from '../../config/optional.js';

type ExcelJs = typeof import('exceljs');
type Fflate = typeof import('fflate');

/** Column letters to a 1-based number: `A` → 1, `AA` → 27. */
function columnNumber(letters: string): number {
  let n = 0;
  for (const ch of letters) n = n * 26 + (ch.charCodeAt(0) - 64);
  return n;
}

/** `A1:E100` (or one cell, `B2`) as 1-based bounds; `$` signs allowed. Undefined when it is not a range. */
function parseRange(range: string): { top: number; left: number; bottom: number; right: number } | undefined {
  const m = /^\$?([A-Za-z]{1,3})\$?(\d{1,7})(?::\$?([A-Za-z]{1,3})\$?(\d{1,7}))?$/.exec(range.trim());
  if (!m) return undefined;
  const [a, b] = [
    { col: columnNumber(m[1]!.toUpperCase()), row: Number(m[2]) },
    { col: columnNumber((m[3] ?? m[1]!).toUpperCase()), row: Number(m[4] ?? m[2]) },
  ];
  if (a.row < 1 || b.row < 1) return undefined;
  return { top: Math.min(a.row, b.row), bottom: Math.max(a.row, b.row), left: Math.min(a.col, b.col), right: Math.max(a.col, b.col) };
}

function dateText(d: Date): string {
  const iso = d.toISOString();
  return iso.endsWith('T00:00:00.000Z') ? iso.slice(0, 10) : iso.replace(/\.000Z$/, 'Z');
}

/** A cell's value as text (see the file header). */
function valueText(value: CellValue): string {
  if (value === null || value === undefined) return '';
  if (value instanceof Date) return dateText(value);
  if (typeof value !== 'object') return String(value);
  if ('richText' in value) return value.richText.map((r) => r.text).join('');
  if ('hyperlink' in value) return typeof value.text === 'string' ? value.text : valueText(value.text as CellValue);
  if ('error' in value) return value.error;
  if ('formula' in value || 'sharedFormula' in value) return value.result === undefined ? '' : valueText(value.result as CellValue);
  return JSON.stringify(value);
}

function sheetRows(ws: Workbook['worksheets'][number], range: ReturnType<typeof parseRange>): string[][] {
  const bounds = range ?? { top: 1, left: 1, bottom: ws.rowCount, right: ws.columnCount };
  const cells = (bounds.bottom - bounds.top + 1) * (bounds.right - bounds.left + 1);
  if (cells > MAX_CELLS) throw new Error(`sheet "${ws.name}" has ${cells} cells to read; at most ${MAX_CELLS}: name a range`);
  const rows: string[][] = [];
  for (let r = bounds.top; r <= bounds.bottom; r++) {
    const row: string[] = [];
    for (let c = bounds.left; c <= bounds.right; c++) {
      const cell = ws.getCell(r, c);
      row.push(cell.isMerged && cell.master !== cell ? '' : valueText(cell.value));
    }
    if (!range) {
      while (row.length && row.at(-1) === '') row.pop();
      if (row.length === 0) continue;
    }
    rows.push(row);
  }
  // Every row as wide as the widest, so columns line up.
  const width = Math.max(0, ...rows.map((r) => r.length));
  for (const row of rows) while (row.length < width) row.push('');
  return rows;
}

export async function excelText(bytes: Uint8Array, opts: { sheet?: string; range?: string } = {}): Promise<ExtractedDocument> {
  const [exceljs, fflate] = await loadPackages<[ExcelJs & { default?: ExcelJs }, Fflate]>(['exceljs', 'fflate'], OPTIONAL_FEATURES.excel.feature);
  checkZip(fflate, bytes, 'the workbook');
  const range = opts.range === undefined ? undefined : parseRange(opts.range);
  if (opts.range !== undefined && !range) throw new Error(`range ${JSON.stringify(opts.range)} is not a cell range such as A1:E100`);
  const Excel = exceljs.default ?? exceljs;
  const wb = new Excel.Workbook();
  try {
    await wb.xlsx.load(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength) as unknown as Parameters<Workbook['xlsx']['load']>[0]);
  } catch (err) {
    throw new Error(`the workbook cannot be read: ${(err as Error).message}`);
  }
  let sheets = wb.worksheets.filter((ws) => ws.state === 'visible' || ws.state === undefined);
  if (opts.sheet !== undefined) {
    const named = wb.worksheets.find((ws) => ws.name === opts.sheet);
    if (!named) throw new Error(`the workbook has no sheet ${JSON.stringify(opts.sheet)} (sheets: ${wb.worksheets.map((ws) => ws.name).join(', ')})`);
    sheets = [named];
  }
  const tables: ExtractedTable[] = [];
  const parts: string[] = [];
  for (const ws of sheets) {
    const rows = sheetRows(ws, range);
    tables.push({ where: `sheet ${ws.name}`, rows });
    parts.push(`## Sheet ${ws.name}${opts.range ? ` (${opts.range})` : ''}\n${rows.length ? tableText(rows) : '(empty)'}`);
  }
  return { text: parts.join('\n\n'), tables };
}
