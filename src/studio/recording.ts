/**
 * Recordings of the inspection stream: one validated record per line (JSON lines), so a conversation
 * seen in production can be replayed later into the Stately relay or the studio. Reading is strict and
 * bounded: a line that is not a record, or longer than the cap, is an error naming the line.
 */
import { createReadStream, createWriteStream, type WriteStream } from 'node:fs';
import { createInterface } from 'node:readline';
import { TroupeError } from '../protocol/errors.js';
import { InspectionRecordSchema, type InspectionRecord } from '../protocol/inspection.js';
import { describeZodError } from '../protocol/index.js';

/** Longest line a recording may hold (a record is at most 256 KiB when published). */
const MAX_LINE_CHARS = 1024 * 1024;

export class Recorder {
  private readonly out: WriteStream;
  written = 0;

  constructor(file: string) {
    this.out = createWriteStream(file, { flags: 'a' });
  }

  write(record: InspectionRecord): void {
    this.out.write(`${JSON.stringify(record)}\n`);
    this.written++;
  }

  async close(): Promise<void> {
    await new Promise<void>((resolve, reject) => this.out.end((err?: Error | null) => (err ? reject(err) : resolve())));
  }
}

/** The records of a recording, in order. Throws INVALID_MESSAGE naming the first bad line. */
async function* readRecording(file: string): AsyncGenerator<InspectionRecord> {
  const lines = createInterface({ input: createReadStream(file, { encoding: 'utf8' }), crlfDelay: Infinity });
  let n = 0;
  for await (const line of lines) {
    n++;
    if (!line.trim()) continue;
    if (line.length > MAX_LINE_CHARS)
      throw new TroupeError('INVALID_MESSAGE', `${file}:${n}: line of ${line.length} characters; the limit is ${MAX_LINE_CHARS}`);
    let json: unknown;
    try {
      json = JSON.parse(line);
    } catch (err) {
      throw new TroupeError('INVALID_MESSAGE', `${file}:${n}: not JSON (${(err as Error).message})`);
    }
    const parsed = InspectionRecordSchema.safeParse(json);
    if (!parsed.success) throw new TroupeError('INVALID_MESSAGE', `${file}:${n}: not an inspection record: ${describeZodError(parsed.error)}`);
    yield parsed.data;
  }
}

/**
 * Feeds a recording to `sink`. `speed` 0 sends everything at once; otherwise the gaps between records'
 * times are kept, divided by `speed` and capped at `maxGapMs`.
 */
export async function replayRecording(
  file: string,
  sink: (record: InspectionRecord) => void,
  opts: { speed?: number; maxGapMs?: number } = {},
): Promise<number> {
  const speed = opts.speed ?? 0;
  const maxGap = opts.maxGapMs ?? 2_000;
  let previous: number | undefined;
  let n = 0;
  for await (const record of readRecording(file)) {
    const at = Date.parse(record.at);
    if (speed > 0 && previous !== undefined && Number.isFinite(at)) {
      const gap = Math.min(maxGap, Math.max(0, (at - previous) / speed));
      if (gap > 0) await new Promise((r) => setTimeout(r, gap));
    }
    if (Number.isFinite(at)) previous = at;
    sink(record);
    n++;
  }
  return n;
}
