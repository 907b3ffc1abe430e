/**
 * Time travel from the CLI: `troupe history <thread>` lists a thread's checkpoints (operators: any thread,
 * redacted as `troupe thread` shows it), `--diff a..b` what changed between two; `troupe fork <thread> --at
 * <n>` makes a new thread of yours from one (the owner's request), optionally continuing with a message, or
 * with `--replay` sending the message that came next then to today's agents and showing both answers.
 */
import type { Command } from 'commander';
import { messageText, type Message } from '../../protocol/a2a.js';
import type { CheckpointView } from '../../protocol/checkpoint.js';
import { META, type RouteStep } from '../../protocol/metadata.js';
import { diffCheckpoints, formatDiff } from '../../sdk/history.js';
import { userMessage, type TroupeClient } from '../../sdk/client.js';
import { UsageError, globals, withClient } from '../cli.js';
import { color, colorState, printJson, table } from '../output.js';

/** `a..b`: two checkpoint numbers, the first before the second. */
export function parseRange(text: string): { from: number; to: number } {
  const m = /^(\d{1,9})\.\.(\d{1,9})$/.exec(text.trim());
  const from = m ? Number(m[1]) : NaN;
  const to = m ? Number(m[2]) : NaN;
  if (!m || from < 1 || to < 1 || from === to) throw new UsageError(`--diff takes two checkpoint numbers as a..b (e.g. 2..3), not "${text}"`);
  return { from, to };
}

export async function history(threadId: string, opts: { diff?: string }, cmd: Command): Promise<void> {
  const g = globals(cmd);
  const range = opts.diff !== undefined ? parseRange(opts.diff) : undefined;
  await withClient(g, async (client) => {
    if (range) {
      const [a, b] = await Promise.all([client.ctl('checkpoint', { threadId, n: range.from }), client.ctl('checkpoint', { threadId, n: range.to })]);
      const diff = diffCheckpoints(a.checkpoint, b.checkpoint);
      if (g.json) printJson(diff);
      else process.stdout.write(`${formatDiff(diff).map(colorLine).join('\n')}\n`);
      return;
    }
    const reply = await client.ctl('history', { threadId });
    if (g.json) {
      printJson(reply);
      return;
    }
    if (reply.keep === 0) {
      process.stdout.write(`thread ${threadId} keeps no checkpoints: they are off on this mesh (checkpoints: 0 in team.yaml)\n`);
      return;
    }
    if (reply.checkpoints.length === 0) {
      process.stdout.write(`thread ${threadId} has no checkpoint yet (one is taken when a turn is committed)\n`);
      return;
    }
    process.stdout.write(
      `${table(
        ['#', 'at', 'turns', 'state', 'route', 'answer'],
        reply.checkpoints.map((c) => [
          c.n,
          c.at.replace('T', ' ').replace(/\.\d+Z$/, 'Z'),
          c.turns,
          colorState(c.state),
          c.route.join(' → '),
          c.error ? color.red(`${c.error} ${c.answer}`) : c.answer,
        ]),
      )}\n`,
    );
    process.stdout.write(color.dim(`keeps the last ${reply.keep}; diff two with --diff a..b, fork one with troupe fork ${threadId} --at <#>\n`));
  });
}

function colorLine(line: string): string {
  if (line.startsWith('+')) return color.green(line);
  if (line.startsWith('-')) return color.red(line);
  if (line.startsWith('!')) return color.red(line);
  if (line.startsWith('~')) return color.yellow(line);
  return line;
}

export interface ForkOptions {
  at: number;
  message?: string;
  replay?: boolean;
  user?: string;
  into?: string;
  timeout: number;
}

export async function fork(threadId: string, opts: ForkOptions, cmd: Command): Promise<void> {
  const g = globals(cmd);
  if (opts.message !== undefined && opts.replay) throw new UsageError('--message and --replay each send the next message: pass one of them');
  const user = opts.user !== undefined ? { user: opts.user } : {};
  await withClient(g, async (client) => {
    // The message that came next, and what it was answered then (read before forking: a fork needs it).
    const next = opts.replay ? await nextTurn(client, threadId, opts.at, user) : undefined;
    const forked = await client.checkpoints('fork', { threadId, n: opts.at, ...(opts.into ? { newThreadId: opts.into } : {}) }, user);
    const message = next ? replayMessage(next.message) : opts.message !== undefined ? userMessage(opts.message) : undefined;
    if (!message) {
      if (g.json) printJson(forked);
      else process.stdout.write(`forked ${threadId} at checkpoint ${opts.at} into ${forked.threadId} (${colorState(forked.state)})\n`);
      return;
    }
    const result = await client.send(message, { threadId: forked.threadId, timeoutMs: opts.timeout, ...user });
    if (result.error) process.exitCode = 1;
    const replayed = {
      text: result.text,
      route: result.route.map((s) => s.to),
      state: result.final.status.state,
      ...(result.error ? { error: result.error } : {}),
    };
    if (g.json) {
      printJson({ ...forked, message: messageText(message), answer: replayed, ...(next ? { original: next.answer } : {}) });
      return;
    }
    process.stdout.write(`forked ${threadId} at checkpoint ${opts.at} into ${forked.threadId}\n`);
    if (!next) {
      process.stdout.write(`${color.bold(result.route.at(-1)?.to ?? 'agent')}: ${result.text}\n`);
      process.stdout.write(color.dim(`route: ${replayed.route.join(' → ')}  ·  state: ${replayed.state}  ·  thread: ${forked.threadId}\n`));
      return;
    }
    process.stdout.write(`${color.bold('message')}: ${messageText(message)}\n\n`);
    process.stdout.write(
      sideBySide(
        { title: `then (checkpoint ${next.n})`, text: next.answer.text, foot: next.answer.route.join(' → ') },
        { title: 'now (replayed)', text: result.text, foot: replayed.route.join(' → ') },
        process.stdout.columns || Number(process.env.COLUMNS) || 100,
      ),
    );
  });
}

/** The message that followed checkpoint `n`, and its answer, from checkpoint n + 1 (the owner's view). */
async function nextTurn(
  client: TroupeClient,
  threadId: string,
  n: number,
  user: { user?: string },
): Promise<{ n: number; message: Message; answer: { text: string; route: string[] } }> {
  let view: CheckpointView;
  try {
    view = (await client.checkpoints('checkpoint', { threadId, n: n + 1 }, user)).checkpoint;
  } catch (err) {
    if ((err as { code?: string }).code === 'CHECKPOINT_NOT_FOUND')
      throw new UsageError(`--replay sends the message that came after checkpoint ${n}, and thread ${threadId} has no checkpoint ${n + 1}`);
    throw err;
  }
  const message = view.history.find((m) => m.messageId === view.turn.messageId) as Message | undefined;
  if (!message) throw new UsageError(`checkpoint ${n + 1} of thread ${threadId} no longer holds the message it took (its history was pruned)`);
  const answer = view.history.find((m) => m.messageId === view.turn.answerId) as Message | undefined;
  return { n: n + 1, message, answer: { text: messageText(answer), route: view.turn.hops.filter((h: RouteStep) => h.to !== 'user').map((h) => h.to) } };
}

/** The original message again under a new id, as the user sent it (its parts and its metadata). */
function replayMessage(original: Message): Message {
  const fresh = userMessage('');
  const { [META.inReplyTo]: _r, ...metadata } = original.metadata ?? {};
  return { ...fresh, parts: original.parts, ...(Object.keys(metadata).length ? { metadata } : {}) };
}

/** Two answers in two columns, each wrapped to its width. */
export function sideBySide(left: { title: string; text: string; foot: string }, right: { title: string; text: string; foot: string }, columns: number): string {
  const width = Math.max(20, Math.floor((columns - 3) / 2));
  const wrap = (text: string) =>
    text.split('\n').flatMap((line) => {
      const out: string[] = [];
      let rest = line;
      while (rest.length > width) {
        const cut = rest.lastIndexOf(' ', width);
        const at = cut > width / 2 ? cut : width;
        out.push(rest.slice(0, at));
        rest = rest.slice(at).trimStart();
      }
      out.push(rest);
      return out;
    });
  const l = [left.title, '-'.repeat(Math.min(width, left.title.length)), ...wrap(left.text), '', ...wrap(left.foot)];
  const r = [right.title, '-'.repeat(Math.min(width, right.title.length)), ...wrap(right.text), '', ...wrap(right.foot)];
  const rows = Math.max(l.length, r.length);
  const lines: string[] = [];
  for (let i = 0; i < rows; i++) lines.push(`${(l[i] ?? '').padEnd(width)} │ ${r[i] ?? ''}`.trimEnd());
  return `${lines.join('\n')}\n`;
}
