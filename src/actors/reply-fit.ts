/**
 * Answers that fit on the bus. A reply larger than the server's max_payload cannot be published at all, so
 * data the system accepted (a thread at its size limit, a page of large tasks, a record that redaction
 * made longer) must be cut to fit, never answered with an error. What is cut is the oldest history first
 * (the newest messages are what a reader wants), then text beyond what fits; the cut is always marked
 * (`META.omitted`) so a reader knows the answer is partial and how to get the rest (a smaller page, a
 * `historyLength`).
 */
import { META, encodeJson, type Task } from '../protocol/index.js';

/** What a reply leaves for the envelope, headers and the reply's own fields beside its payload. */
const REPLY_HEADROOM_BYTES = 16 * 1024;

/** The largest reply body for a server with this max_payload. */
export function replyBudget(maxPayload: number): number {
  return Math.max(4 * 1024, maxPayload - REPLY_HEADROOM_BYTES);
}

export const byteLength = (value: unknown): number => encodeJson(value).length;

/** What an answer left out to fit (`META.omitted`). */
interface Omitted {
  /** Oldest history messages left out. */
  messages?: number;
  /** Text parts cut short (of the messages that remain). */
  cutParts?: number;
  /** Oldest artifacts left out. */
  artifacts?: number;
  /** Why: always the bus's size limit. */
  reason: 'max_payload';
  /** The limit the answer was fitted to. */
  budgetBytes: number;
}

interface WithHistory {
  history?: Array<{ parts: Array<{ kind: string; text?: string }> }>;
  artifacts?: unknown[];
  metadata?: Record<string, unknown>;
}

/**
 * `task` (a Task, or a stored record's task view) within `budget` bytes as JSON: unchanged when it fits;
 * else without its oldest history messages, then without its oldest artifacts, then with the remaining
 * text parts cut short, marked with `META.omitted`.
 */
export function fitTask<T extends WithHistory>(task: T, budget: number): T {
  if (byteLength(task) <= budget) return task;
  const omitted: Omitted = { reason: 'max_payload', budgetBytes: budget };
  const marked = (t: T): T => ({ ...t, metadata: { ...t.metadata, [META.omitted]: omitted } });
  let history = [...(task.history ?? [])];
  let artifacts = [...(task.artifacts ?? [])];
  const candidate = () => marked({ ...task, ...(task.history ? { history } : {}), ...(task.artifacts ? { artifacts } : {}) });
  // Sizes are summed per message rather than the whole re-encoded at each step: linear in the task.
  let size = byteLength(candidate());
  const sizes = history.map((m) => byteLength(m) + 1);
  let dropped = 0;
  while (size > budget && dropped < history.length) size -= sizes[dropped++]!;
  if (dropped > 0) {
    history = history.slice(dropped);
    omitted.messages = dropped;
  }
  let artifactsDropped = 0;
  if (size > budget) {
    const artifactSizes = artifacts.map((a) => byteLength(a) + 1);
    while (size > budget && artifactsDropped < artifacts.length) size -= artifactSizes[artifactsDropped++]!;
    if (artifactsDropped > 0) {
      artifacts = artifacts.slice(artifactsDropped);
      omitted.artifacts = artifactsDropped;
    }
  }
  let fitted = candidate();
  const over = byteLength(fitted) - budget;
  if (over > 0) fitted = cutTexts(fitted, over, omitted, marked);
  return fitted;
}

/** Cuts the longest text parts of the history's messages and of the status message by `over` bytes (and a margin). */
function cutTexts<T extends WithHistory>(task: T, over: number, omitted: Omitted, marked: (t: T) => T): T {
  let toCut = over + 256;
  let cutParts = 0;
  const cut = <P extends { kind: string; text?: string }>(parts: P[]): P[] =>
    parts.map((p) => {
      if (toCut <= 0 || p.kind !== 'text' || typeof p.text !== 'string' || p.text.length === 0) return p;
      const bytes = Buffer.byteLength(p.text);
      const keep = Math.max(0, bytes - toCut);
      toCut -= bytes - keep;
      cutParts++;
      // Cut by characters (never inside a code point), conservatively: a character is at least one byte.
      return {
        ...p,
        text: `${Buffer.from(p.text)
          .subarray(0, keep)
          .toString('utf8')
          .replace(/\uFFFD$/, '')}…`,
      };
    });
  const status = (task as { status?: { message?: { parts: Array<{ kind: string; text?: string }> } } }).status;
  const history = task.history?.map((m) => ({ ...m, parts: cut(m.parts) }));
  const statusMessage = status?.message ? { ...status.message, parts: cut(status.message.parts) } : undefined;
  omitted.cutParts = cutParts;
  return marked({
    ...task,
    ...(history ? { history } : {}),
    ...(status ? { status: { ...status, ...(statusMessage ? { message: statusMessage } : {}) } } : {}),
  });
}

/** A page of tasks within `budget`: as many as fit, in order, the first always (fitted alone if it must be). */
export function fitPage(tasks: Task[], budget: number): Task[] {
  const out: Task[] = [];
  let used = 0;
  for (const task of tasks) {
    const bytes = byteLength(task) + 1;
    if (used + bytes <= budget) {
      out.push(task);
      used += bytes;
      continue;
    }
    if (out.length === 0) out.push(fitTask(task, budget));
    break;
  }
  return out;
}
