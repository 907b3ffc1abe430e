/**
 * What a thread says to its owner: every event goes to the `out` subject of the owner's principal, in the
 * trace of the turn it belongs to. A status the thread machine emits is logged and counted (the routing log
 * line, hop metrics); a final one waits in the outbox for the commit that includes it (committer.ts), so
 * whoever reads the store on receiving an answer sees the state that gave it.
 */
import type { Logger } from 'pino';
import type { ThreadStatusEmitted } from '../../machines/thread.js';
import type { TaskArtifactUpdateEvent, TaskStatusUpdateEvent } from '../../protocol/a2a.js';
import { encodeJson } from '../../protocol/codec.js';
import { META } from '../../protocol/metadata.js';
import { readTurnUsage } from '../../protocol/conversation.js';
import { metrics } from '../../observability/metrics.js';
import { injectTraceparent, traceIdOf, tracing, type Span } from '../../observability/tracing.js';
import { subjects } from '../../transport/subjects.js';
import type { Transport } from '../../transport/types.js';
import type { LiveThread } from './live.js';
import { endTurn, firstTurn, observeTurnUsage } from './turns.js';
import { turnOfFinal } from './checkpoints.js';

/** The principal of an owner `<principal>[/<user>]`: whose `out` subject the thread's events go to. */
function principalOf(owner: string): string {
  const slash = owner.indexOf('/');
  return slash < 0 ? owner : owner.slice(0, slash);
}

export interface StatusPublisherOptions {
  tenant: string;
  transport: Transport;
  log: Logger;
  now: () => number;
  /** A final status waits in the thread's outbox: write it (committer.ts). */
  schedule: (live: LiveThread) => void;
  /** With tracing on: the span of the turn a final answer ends, to end when that answer is published. */
  holdAnswerSpan: (event: TaskStatusUpdateEvent, span: Span) => void;
}

export class StatusPublisher {
  constructor(private readonly opts: StatusPublisherOptions) {}

  publishToOwner(live: LiveThread, event: TaskStatusUpdateEvent | TaskArtifactUpdateEvent, span?: Span): void {
    if (this.opts.transport.closed) return;
    const owner = live.actor.getSnapshot().context.owner;
    // The answer goes back in the trace of the turn it ends (or the one running).
    const traced = tracing.on ? (span ?? firstTurn(live)?.span) : undefined;
    try {
      const subject = subjects.threadOut(this.opts.tenant, principalOf(owner), live.threadId);
      if (traced) this.opts.transport.publish(subject, encodeJson(event), { headers: injectTraceparent({}, traced) });
      else this.opts.transport.publish(subject, encodeJson(event));
    } catch (err) {
      this.opts.log.warn({ err: (err as Error).message, thread: live.threadId }, 'could not publish a thread event');
    }
  }

  publishStatus(live: LiveThread, event: ThreadStatusEmitted): void {
    live.lastStatus = event;
    live.statusAt = { state: event.state, at: new Date(this.opts.now()).toISOString() };
    const ctx = live.actor.getSnapshot().context;
    const update: TaskStatusUpdateEvent = {
      kind: 'status-update',
      taskId: live.threadId,
      contextId: ctx.contextId,
      status: { state: event.state, ...(event.message ? { message: event.message } : {}), timestamp: live.statusAt.at },
      final: event.final,
      ...(event.route || event.error
        ? { metadata: { ...(event.route ? { [META.route]: event.route } : {}), ...(event.error ? { [META.error]: event.error } : {}) } }
        : {}),
    };
    const watch = firstTurn(live);
    const traceId = traceIdOf(watch?.span);
    if (event.route) {
      // Seed 003's structured routing log: the decision's confidence, the agents the turn has reached, its time so far.
      const agents = [...new Set([...(ctx.turn?.route ?? []).map((s) => s.to), event.route.to].filter((to) => to !== 'user'))];
      const step = {
        from: event.route.from,
        to: event.route.to,
        hop: event.route.hop,
        reason: event.route.reason,
        ...(event.route.confidence !== undefined ? { confidence: event.route.confidence } : {}),
      };
      this.opts.log.info(
        {
          thread: live.threadId,
          ...step,
          agentsUsed: agents,
          ...(watch ? { durationMs: Math.max(0, this.opts.now() - watch.startedAt) } : {}),
          ...(traceId ? { traceId } : {}),
        },
        'routed',
      );
      metrics.hops.inc();
      if (watch) {
        const now = this.opts.now();
        metrics.hopSeconds.observe((now - watch.stepAt) / 1000);
        watch.stepAt = now;
        watch.span?.addEvent('troupe.routed', {
          'troupe.from': event.route.from,
          'troupe.to': event.route.to,
          'troupe.hop': event.route.hop,
          ...(event.route.reason ? { 'troupe.reason': event.route.reason } : {}),
        });
      }
    }
    if (event.error) this.opts.log.warn({ thread: live.threadId, code: event.error.code, ...(traceId ? { traceId } : {}) }, event.error.message);
    if (event.final) {
      const inReplyTo = event.message?.metadata?.[META.inReplyTo];
      // What the turn did, for the checkpoint its commit takes (checkpoints.ts).
      const started = typeof inReplyTo === 'string' ? live.turns.get(inReplyTo)?.startedAt : undefined;
      live.lastTurn = turnOfFinal(event.message, event.error, started, this.opts.now());
      // The turn's span stays open until its answer goes out (after the commit that includes it).
      const span = endTurn(live, this.opts.now, typeof inReplyTo === 'string' ? inReplyTo : undefined, event.error ? 'error' : event.state, event.error, {
        keepSpan: true,
      });
      const usage = readTurnUsage(event.message);
      if (usage) observeTurnUsage(usage, span);
      if (span) this.opts.holdAnswerSpan(update, span);
    }
    if (!event.final) {
      this.publishToOwner(live, update);
      return;
    }
    // A final answer goes out after the state that includes it is committed: whoever reads the store on
    // receiving it sees that state. A crash in between: the unacknowledged message is redelivered to the
    // next owner, which finds it answered in the store and publishes the answer then.
    live.outbox.push(update);
    live.changed = true;
    this.opts.schedule(live);
  }
}
