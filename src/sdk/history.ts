/**
 * What changed between two checkpoints of a thread (`troupe history --diff a..b`, the gateway, the studio):
 * the task state and the machine's state value, the messages added and pruned, and each context field
 * whose value differs. Pure: it reads two checkpoint views.
 */
import { META } from '../protocol/metadata.js';
import type { CheckpointDiff, CheckpointView } from '../protocol/checkpoint.js';

type HistoryMessage = CheckpointView['history'][number];

function shown(m: HistoryMessage): CheckpointDiff['added'][number] {
  const agent = m.metadata?.[META.agent];
  return {
    ...(m.messageId !== undefined ? { messageId: m.messageId } : {}),
    role: m.role,
    from: m.role === 'user' ? 'user' : typeof agent === 'string' ? agent : 'agent',
    text: m.parts.map((p) => (typeof p.text === 'string' ? p.text : `[${p.kind}]`)).join('\n'),
  };
}

/** Messages are told apart by id; one without an id by its place. */
function idsOf(history: readonly HistoryMessage[]): string[] {
  return history.map((m, i) => m.messageId ?? `#${i}`);
}

const same = (a: unknown, b: unknown) => JSON.stringify(a) === JSON.stringify(b);

export function diffCheckpoints(a: CheckpointView, b: CheckpointView): CheckpointDiff {
  const aIds = idsOf(a.history);
  const bIds = idsOf(b.history);
  const before = new Set(aIds);
  const after = new Set(bIds);
  const fields = [...new Set([...Object.keys(a.context), ...Object.keys(b.context)])].sort();
  return {
    from: a.n,
    to: b.n,
    ...(a.state !== b.state ? { state: { from: a.state, to: b.state } } : {}),
    ...(!same(a.value, b.value) ? { value: { from: a.value, to: b.value } } : {}),
    added: b.history.filter((_, i) => !before.has(bIds[i]!)).map(shown),
    removed: a.history.filter((_, i) => !after.has(aIds[i]!)).map(shown),
    context: fields.filter((f) => !same(a.context[f], b.context[f])).map((field) => ({ field, from: a.context[field], to: b.context[field] })),
    turn: b.turn,
  };
}

/** A diff as lines a person reads: `+` messages added, `-` pruned, `~` state and context fields changed. */
export function formatDiff(diff: CheckpointDiff, opts: { maxValueChars?: number } = {}): string[] {
  const max = opts.maxValueChars ?? 160;
  const short = (v: unknown) => {
    const text = v === undefined ? '(none)' : typeof v === 'string' ? v : JSON.stringify(v);
    return text.length > max ? `${text.slice(0, max - 1)}…` : text;
  };
  const lines = [`checkpoint ${diff.from} → ${diff.to}`];
  if (diff.state) lines.push(`~ state: ${diff.state.from} → ${diff.state.to}`);
  if (diff.value) lines.push(`~ machine: ${short(diff.value.from)} → ${short(diff.value.to)}`);
  for (const hop of diff.turn.hops) lines.push(`  hop ${hop.hop}: ${hop.from} → ${hop.to}${hop.reason ? ` (${hop.reason})` : ''}`);
  if (diff.turn.error) lines.push(`! error: ${diff.turn.error.code}: ${diff.turn.error.message}`);
  for (const m of diff.removed) lines.push(`- ${m.from}: ${short(m.text)}`);
  for (const m of diff.added) lines.push(`+ ${m.from}: ${short(m.text)}`);
  for (const c of diff.context) lines.push(`~ context.${c.field}: ${short(c.from)} → ${short(c.to)}`);
  if (lines.length === 1) lines.push('  (no change)');
  return lines;
}
