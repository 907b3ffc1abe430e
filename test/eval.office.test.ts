/**
 * Excel, Word and PowerPoint files of test cases, read from files LibreOffice wrote
 * (test/fixtures/office, rebuilt by its make.sh): the text in reading order and every table kept as its
 * rows — sheets and ranges, pages between page breaks, slides in order with their speaker notes — and
 * clear errors for a file that is not what it says, a zip bomb, a page or sheet that is not there, and
 * an optional package that is not installed.
 */
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { zipSync } from 'fflate';
import { describe, expect, it } from 'vitest';
import { attachFiles, CaseInputError, officeText } from '../src/eval/files.js';
import { loadPackages, MAX_UNZIPPED_BYTES } from '../src/eval/office/shared.js';
import { importOptional } from '../src/llm/optional.js';
import { TroupeError } from '../src/protocol/errors.js';

const OFFICE = resolve('test/fixtures/office');
const bytes = (name: string) => readFileSync(resolve(OFFICE, name));

describe('excel', () => {
  it('reads every sheet as rows: numbers, ISO dates, formula results, a merged cell once', async () => {
    const doc = await officeText({ type: 'excel' }, bytes('prices.xlsx'));
    expect(doc.tables).toEqual([
      {
        where: 'sheet Prices',
        rows: [
          ['Tea', 'Price', 'Since', 'In stock'],
          ['Sencha', '12.5', '2024-03-01', 'yes'],
          ['Rooibos', '9', '2023-11-15', 'no'],
          ['Total', '21.5', '', ''],
        ],
      },
      {
        where: 'sheet Notes',
        rows: [
          ['Prices include VAT', ''],
          ['Updated', 'weekly'],
        ],
      },
    ]);
    expect(doc.text).toBe(
      [
        '## Sheet Prices',
        '| Tea | Price | Since | In stock |',
        '| Sencha | 12.5 | 2024-03-01 | yes |',
        '| Rooibos | 9 | 2023-11-15 | no |',
        '| Total | 21.5 |  |  |',
        '',
        '## Sheet Notes',
        '| Prices include VAT |  |',
        '| Updated | weekly |',
      ].join('\n'),
    );
  });

  it('reads the sheet and range named, and says which sheets there are when the name is wrong', async () => {
    const doc = await officeText({ type: 'excel', sheet: 'Prices', range: 'B2:C3' }, bytes('prices.xlsx'));
    expect(doc.tables).toEqual([
      {
        where: 'sheet Prices',
        rows: [
          ['12.5', '2024-03-01'],
          ['9', '2023-11-15'],
        ],
      },
    ]);
    expect(doc.text).toBe('## Sheet Prices (B2:C3)\n| 12.5 | 2024-03-01 |\n| 9 | 2023-11-15 |');
    await expect(officeText({ type: 'excel', sheet: 'Stock' }, bytes('prices.xlsx'))).rejects.toThrow(
      'the workbook has no sheet "Stock" (sheets: Prices, Notes)',
    );
    await expect(officeText({ type: 'excel', range: 'B2-C3' }, bytes('prices.xlsx'))).rejects.toThrow('range "B2-C3" is not a cell range such as A1:E100');
  });
});

describe('word', () => {
  it('reads headings, paragraphs, the table as rows and the list, in order', async () => {
    const doc = await officeText({ type: 'word' }, bytes('report.docx'));
    expect(doc.tables).toEqual([
      {
        where: 'page 1',
        rows: [
          ['Tea', 'Q1', 'Q2'],
          ['Sencha', '120', '144'],
          ['Rooibos | red', '80', '81'],
        ],
      },
    ]);
    expect(doc.text).toBe(
      [
        '# Quarterly tea report',
        'Sales of green tea rose by a fifth; rooibos held steady.',
        '| Tea | Q1 | Q2 |',
        '| Sencha | 120 | 144 |',
        '| Rooibos \\| red | 80 | 81 |',
        'Stock is counted on Fridays.',
        'Second page: the outlook for next quarter is calm.',
        '- Order more sencha.',
        '- Keep rooibos as it is.',
      ].join('\n'),
    );
  });

  it('picks pages between page breaks, and refuses a page the document does not have', async () => {
    const doc = await officeText({ type: 'word', pages: [2] }, bytes('report.docx'));
    expect(doc.text).toBe('## Page 2\nSecond page: the outlook for next quarter is calm.\n- Order more sencha.\n- Keep rooibos as it is.');
    expect(doc.tables).toEqual([]);
    await expect(officeText({ type: 'word', pages: [3] }, bytes('report.docx'))).rejects.toThrow(
      'the document has 2 pages (counted at its page breaks), not 3',
    );
  });
});

describe('powerpoint', () => {
  it('reads the slides in order: text boxes as lines, a table as rows, speaker notes', async () => {
    const doc = await officeText({ type: 'powerpoint' }, bytes('deck.pptx'));
    expect(doc.tables).toEqual([
      {
        where: 'slide 2',
        rows: [
          ['Tea', 'Cups'],
          ['Sencha', '1200'],
          ['Oolong', '800'],
        ],
      },
    ]);
    expect(doc.text).toBe(
      [
        '## Slide 1',
        'Leaf & Kettle in 2024',
        'Three new teas',
        'Shipping to Canada',
        '',
        '## Slide 2',
        'Sales by tea',
        '| Tea | Cups |',
        '| Sencha | 1200 |',
        '| Oolong | 800 |',
        'Notes: Say that oolong grew fastest.',
        '',
        '## Slide 3',
        'Questions?',
      ].join('\n'),
    );
  });

  it('picks slides by number, and refuses one the deck does not have', async () => {
    expect((await officeText({ type: 'powerpoint', pages: [3, 1] }, bytes('deck.pptx'))).text).toBe(
      '## Slide 3\nQuestions?\n\n## Slide 1\nLeaf & Kettle in 2024\nThree new teas\nShipping to Canada',
    );
    await expect(officeText({ type: 'powerpoint', pages: [4] }, bytes('deck.pptx'))).rejects.toThrow('the presentation has 3 slides, not 4');
  });
});

describe('office files that cannot be read', () => {
  it('a file that is not a zip, and a zip that would unpack past the cap, are refused before parsing', async () => {
    await expect(officeText({ type: 'excel' }, Buffer.from('item,price\nSencha,9.50\n'))).rejects.toThrow(
      /^the workbook is not a valid file of its type \(not a zip archive/,
    );
    // 65 MiB of zeros packs into a few dozen KiB: the declared size is what is checked, nothing inflates.
    const bomb = zipSync({ 'word/document.xml': new Uint8Array(MAX_UNZIPPED_BYTES + 1024 * 1024) }, { level: 1 });
    expect(bomb.length).toBeLessThan(1024 * 1024);
    await expect(officeText({ type: 'word' }, bomb)).rejects.toThrow(`the document is too big to read: it unpacks to more than ${MAX_UNZIPPED_BYTES} bytes`);
    await expect(officeText({ type: 'powerpoint' }, bomb)).rejects.toThrow('the presentation is too big to read');
  });

  it('a case whose file cannot be read fails with the case, the file and why', async () => {
    const err = await attachFiles('sheet', [{ path: 'test/fixtures/eval/prices.csv', type: 'excel' }], resolve('.')).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(CaseInputError);
    expect((err as Error).message).toMatch(
      /^test case "sheet" files\[0\] \(test\/fixtures\/eval\/prices\.csv\): the excel file's text cannot be extracted: the workbook is not a valid file/,
    );
  });

  it('a missing optional package is named with the npm command that installs it', async () => {
    const one = (await importOptional('troupe-no-such-package/sub', 'reading widgets').catch((e: unknown) => e)) as TroupeError;
    expect(one).toBeInstanceOf(TroupeError);
    expect(one.code).toBe('DEPENDENCY_MISSING');
    expect(one.message).toBe('reading widgets needs the optional package troupe-no-such-package, which is not installed: run npm i troupe-no-such-package');
    const several = (await loadPackages(['fflate', '@troupe-none/a', 'troupe-none-b'], 'reading widgets').catch((e: unknown) => e)) as TroupeError;
    expect(several.code).toBe('DEPENDENCY_MISSING');
    expect(several.message).toBe(
      'reading widgets needs the optional packages @troupe-none/a, troupe-none-b, which are not installed: run npm i @troupe-none/a troupe-none-b',
    );
    expect(several.details).toEqual({ packages: ['@troupe-none/a', 'troupe-none-b'] });
  });
});
