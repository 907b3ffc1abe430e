/**
 * Metrics and traces of a thread's turns: the turn running (the first accepted and not answered), the span
 * of each of its hops, and what a turn leaves in metrics and its span when it ends.
 */
import { metrics, outcomeLabel } from '../../observability/metrics.js';
import type { TurnUsage } from '../../protocol/conversation.js';
import { markError, startSpan, type Span } from '../../observability/tracing.js';
import type { LiveThread, TurnWatch } from './live.js';

/** The turn running: turns run one at a time in the order accepted. */
export function firstTurn(live: LiveThread): TurnWatch | undefined {
  for (const w of live.turns.values()) return w;
  return undefined;
}

/** The span of hop `hop` of the thread's running turn (made on its first call; earlier hops end then). */
export function hopSpan(watch: TurnWatch | undefined, threadId: string, hop: number, agentId: string): Span | undefined {
  if (!watch?.span) return undefined;
  watch.hops ??= new Map();
  let span = watch.hops.get(hop);
  if (!span) {
    for (const [n, earlier] of watch.hops) {
      if (n < hop) {
        earlier.end();
        watch.hops.delete(n);
      }
    }
    span = startSpan('troupe.hop', { parent: watch.span, attributes: { 'troupe.hop': hop, 'troupe.agent': agentId, 'troupe.thread': threadId } });
    watch.hops.set(hop, span);
  }
  return span;
}

/** A turn ended (answered, failed, or moved off this node): its metrics, and its spans end. */
export function endTurn(
  live: LiveThread,
  now: () => number,
  messageId: string | undefined,
  outcome: string,
  error?: { code: string; message: string },
  opts: { keepSpan?: boolean } = {},
): Span | undefined {
  const label = outcomeLabel(outcome);
  metrics.turns.inc({ outcome: label });
  // A turn this host did not start (resumed after a takeover) is counted, without its durations.
  const id = messageId ?? live.turns.keys().next().value;
  const watch = id === undefined ? undefined : live.turns.get(id);
  if (id === undefined || !watch) return undefined;
  live.turns.delete(id);
  const at = now();
  metrics.turnSeconds.observe({ outcome: label }, (at - watch.startedAt) / 1000);
  metrics.hopSeconds.observe((at - watch.stepAt) / 1000);
  if (!watch.span) return undefined;
  for (const span of watch.hops?.values() ?? []) span.end();
  watch.span.setAttribute('troupe.outcome', label);
  if (error) markError(watch.span, error);
  if (opts.keepSpan) return watch.span;
  watch.span.end();
  return undefined;
}

/**
 * What a turn's model calls cost, from its final message's usage: each agent's tokens in
 * `troupe_turn_tokens_total`, and on the turn's span the sums (`gen_ai.usage.*`) and each agent's share.
 */
export function observeTurnUsage(usage: TurnUsage, span: Span | undefined): void {
  for (const a of usage.agents ?? []) {
    if (a.inputTokens) metrics.turnTokens.inc({ agent: a.agent, kind: 'input' }, a.inputTokens);
    if (a.outputTokens) metrics.turnTokens.inc({ agent: a.agent, kind: 'output' }, a.outputTokens);
  }
  span?.setAttributes({
    'gen_ai.usage.input_tokens': usage.inputTokens,
    'gen_ai.usage.output_tokens': usage.outputTokens,
    'troupe.usage.agents': (usage.agents ?? []).map((a) => `${a.agent}:${a.inputTokens}/${a.outputTokens}`),
  });
}
