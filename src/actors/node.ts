/**
 * A Troupe node: the registry, the thread host (router and thread actors) and the control plane on one
 * transport. One process or twenty run the same code; nodes find each other only through subjects.
 */
import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import type { ThreadConfig } from '../machines/thread.js';
import type { RouterPolicy } from '../routing/scoring.js';
import {
  DEFAULT_MAX_PAYLOAD,
  InspectRequestSchema,
  MessageSchema,
  TroupeError,
  decode,
  encodeJson,
  type ActorInfo,
  type InspectReply,
  type PsReply,
  type ThreadAck,
} from '../protocol/index.js';
import type { ThreadStore } from '../store/types.js';
import { subjects } from '../transport/subjects.js';
import type { InboundMessage, Subscription, Transport } from '../transport/types.js';
import { z } from 'zod';
import type { NatsConnection } from '@nats-io/transport-node';
import { CLIENT_ERROR_CODES, JetStreamIngress, partitionOf, type IngressMessage } from '../transport/jetstream/ingress.js';
import { silentLogger } from '../observability/logger.js';
import { Registry } from './registry.js';
import { ThreadHost } from './thread-host.js';
import { redact } from '../observability/redact.js';
import { META } from '../protocol/metadata.js';

export interface NodeOptions {
  transport: Transport;
  tenant?: string;
  nodeId?: string;
  store?: ThreadStore;
  config?: Partial<ThreadConfig>;
  policy?: RouterPolicy;
  logger?: Logger;
  idleMs?: number;
  inspect?: boolean;
  maxPayload?: number;
  /**
   * Durable inbound messages: a JetStream stream partitioned by thread (nats.conf's mapping), one owner
   * per partition through leases. Without it, `.in` is a plain queue-group subscription (embedded mode).
   */
  durable?: { nc: NatsConnection; partitions?: number; leaseTtlMs?: number };
}

const ThreadCtlSchema = z.object({
  threadId: z.string().min(1),
  reason: z.string().optional(),
  /** `thread` only: false returns the record as stored (the gateway, a client finding its answer); default true for diagnostics. */
  redact: z.boolean().optional(),
});

export class TroupeNode {
  readonly nodeId: string;
  readonly tenant: string;
  readonly registry: Registry;
  readonly threads: ThreadHost;
  private readonly transport: Transport;
  private readonly log: Logger;
  private readonly maxPayload: number;
  private subs: Subscription[] = [];
  private readonly startedAt = Date.now();
  private ingress?: JetStreamIngress;
  private readonly partitions: number;

  constructor(private readonly opts: NodeOptions) {
    this.transport = opts.transport;
    this.tenant = opts.tenant ?? 'demo';
    this.nodeId = opts.nodeId ?? `node-${randomUUID().slice(0, 8)}`;
    this.log = (opts.logger ?? silentLogger()).child({ tenant: this.tenant, node: this.nodeId });
    this.maxPayload = opts.maxPayload ?? DEFAULT_MAX_PAYLOAD;
    this.partitions = opts.durable?.partitions ?? 8;
    this.registry = new Registry(this.transport, this.tenant, { logger: opts.logger ?? silentLogger() });
    this.threads = new ThreadHost({
      transport: this.transport,
      registry: this.registry,
      tenant: this.tenant,
      nodeId: this.nodeId,
      ...(opts.store ? { store: opts.store } : {}),
      ...(opts.config ? { config: opts.config } : {}),
      ...(opts.policy ? { policy: opts.policy } : {}),
      ...(opts.idleMs !== undefined ? { idleMs: opts.idleMs } : {}),
      ...(opts.inspect !== undefined ? { inspect: opts.inspect } : {}),
      logger: opts.logger ?? silentLogger(),
    });
  }

  async start(): Promise<this> {
    this.threads.start();
    await this.registry.start();
    const t = this.transport;
    const durable = this.opts.durable;
    if (durable) {
      this.ingress = new JetStreamIngress({
        nc: durable.nc,
        tenant: this.tenant,
        nodeId: this.nodeId,
        partitions: this.partitions,
        ...(durable.leaseTtlMs ? { leaseTtlMs: durable.leaseTtlMs } : {}),
        handler: (m) => this.onDurableIn(m),
        onPartitionAcquired: async (p) => {
          await this.threads.resumeThreads((id) => partitionOf(id, this.partitions) === p);
        },
        onPartitionReleased: (p) => this.threads.releaseThreads((id) => partitionOf(id, this.partitions) === p),
        ...(this.opts.logger ? { logger: this.opts.logger } : {}),
      });
      await this.ingress.start();
    } else {
      // One node in-process: a queue group delivers each message once.
      this.subs.push(t.subscribe(subjects.allThreadsIn(this.tenant), (m) => this.onThreadIn(m), { queue: 'troupe-threads' }));
    }
    this.subs.push(t.subscribe(subjects.ctl(this.tenant, 'ps'), (m) => this.onPs(m)));
    this.subs.push(t.subscribe(subjects.ctl(this.tenant, 'inspect'), (m) => this.onInspect(m)));
    // Only the owner of a thread acts on it, so these reach every node and the owner answers.
    this.subs.push(t.subscribe(subjects.ctl(this.tenant, 'cancel'), (m) => this.onThreadCtl(m, 'cancel'), durable ? {} : { queue: 'troupe-ctl' }));
    this.subs.push(t.subscribe(subjects.ctl(this.tenant, 'rehydrate'), (m) => this.onThreadCtl(m, 'rehydrate'), durable ? {} : { queue: 'troupe-ctl' }));
    this.subs.push(t.subscribe(subjects.ctl(this.tenant, 'threads'), (m) => this.onThreads(m), { queue: 'troupe-ctl' }));
    this.subs.push(t.subscribe(subjects.ctl(this.tenant, 'thread'), (m) => this.onThread(m), { queue: 'troupe-ctl' }));
    await t.flush();
    this.log.info({ transport: t.name }, 'node started');
    return this;
  }

  async stop(): Promise<void> {
    await this.ingress?.stop();
    await Promise.all(this.subs.map((s) => s.drain().catch(() => undefined)));
    this.subs = [];
    await this.threads.stop();
    await this.registry.stop();
    this.log.info('node stopped');
  }

  /** Every actor this node holds (for `troupe ps`). */
  ps(): PsReply {
    const { actors, passivated } = this.threads.list();
    const node: ActorInfo = {
      kind: 'node',
      id: this.nodeId,
      state: 'running',
      node: this.nodeId,
      status: 'live',
      detail: {
        liveThreads: this.threads.liveCount(),
        passivatedThreads: passivated,
        uptimeS: Math.round((Date.now() - this.startedAt) / 1000),
        ...(this.ingress ? { partitions: this.ingress.owned() } : {}),
      },
    };
    const registry: ActorInfo = {
      kind: 'registry',
      id: `${this.nodeId}/registry`,
      state: `${this.registry.agents().length} agents`,
      node: this.nodeId,
      status: 'live',
      detail: { agents: this.registry.agents().map((a) => `${a.id}×${this.registry.instanceCount(a.id)}`) },
    };
    return { node: this.nodeId, actors: [node, registry, ...actors], passivated };
  }

  /** Whether this node owns the thread now (always, without durable ingress). */
  ownsThread(threadId: string): boolean {
    return !this.ingress || this.ingress.owned().includes(partitionOf(threadId, this.partitions));
  }

  /**
   * A message from the durable stream: resolves once the thread state that includes it is committed
   * (then the ingress acks it). A message that can never be accepted is refused on the thread's output
   * and thrown as a client error, so it is not redelivered.
   */
  private async onDurableIn(msg: IngressMessage): Promise<void> {
    const { threadId } = msg;
    let messageId = msg.messageId;
    try {
      const message = decode(MessageSchema, msg.data, `message into thread ${threadId}`, this.maxPayload);
      messageId = message.messageId;
      await this.threads.deliver(threadId, message);
    } catch (err) {
      const error = TroupeError.from(err, 'INVALID_MESSAGE');
      if (CLIENT_ERROR_CODES.has(error.code)) this.publishRejection(threadId, messageId, error);
      this.log.warn({ thread: threadId, code: error.code, redelivered: msg.redelivered }, error.message);
      throw error;
    }
  }

  /** Tells the sender on the thread's output that its message was refused (final for that message). */
  private publishRejection(threadId: string, messageId: string | undefined, error: TroupeError): void {
    const safeThread = /^[A-Za-z0-9_-]+$/.test(threadId) ? threadId : 'unknown';
    this.transport.publish(
      subjects.threadOut(this.tenant, safeThread),
      encodeJson({
        kind: 'status-update',
        taskId: threadId,
        contextId: threadId,
        status: {
          state: 'rejected',
          message: {
            kind: 'message',
            role: 'agent',
            messageId: `${messageId ?? 'unknown'}:rejected`,
            parts: [{ kind: 'text', text: `${error.code}: ${error.message}` }],
            metadata: { [META.agent]: 'troupe', [META.error]: error.toBody(), ...(messageId ? { [META.inReplyTo]: messageId } : {}) },
          },
        },
        final: true,
        metadata: { [META.error]: error.toBody() },
      }),
    );
  }

  private async onThreadIn(msg: InboundMessage): Promise<void> {
    const threadId = subjects.threadIdOf(msg.subject) ?? '';
    const log = this.log.child({ thread: threadId });
    try {
      const message = decode(MessageSchema, msg.data, `message into thread ${threadId}`, this.maxPayload);
      const { duplicate } = await this.threads.deliver(threadId, message);
      const ack: ThreadAck = { kind: 'ack', threadId, messageId: message.messageId, ...(duplicate ? { duplicate } : {}) };
      msg.respond(encodeJson(ack));
    } catch (err) {
      const error = TroupeError.from(err, 'INVALID_MESSAGE');
      log.warn({ code: error.code }, error.message);
      // A plain publish has nobody to answer; say it on the thread's output so it is not lost.
      if (!msg.respond(encodeJson(error.toReply()))) this.publishRejection(threadId, undefined, error);
    }
  }

  private onPs(msg: InboundMessage): void {
    msg.respond(encodeJson(this.ps()));
  }

  private onInspect(msg: InboundMessage): void {
    try {
      const { actorId } = decode(InspectRequestSchema, msg.data, 'inspect request');
      if (actorId === this.nodeId || actorId === `${this.nodeId}/registry`) {
        const actor = this.ps().actors.find((a) => a.id === actorId);
        const reply: InspectReply = { found: true, node: this.nodeId, ...(actor ? { actor } : {}), value: actor?.state, context: actor?.detail, events: [] };
        msg.respond(encodeJson(reply));
        return;
      }
      const found = this.threads.inspect(actorId);
      // Only the node holding the actor answers; the CLI gathers answers from every node.
      if (found) {
        const reply: InspectReply = { found: true, node: this.nodeId, actor: found.actor, value: found.value, context: found.context, events: found.events };
        msg.respond(encodeJson(reply));
      }
    } catch (err) {
      msg.respond(encodeJson(TroupeError.from(err, 'INVALID_MESSAGE').toReply()));
    }
  }

  private async onThreadCtl(msg: InboundMessage, verb: 'cancel' | 'rehydrate'): Promise<void> {
    try {
      const { threadId, reason } = decode(ThreadCtlSchema, msg.data, `${verb} request`);
      if (!this.ownsThread(threadId)) return; // the owner answers
      const state = verb === 'cancel' ? await this.threads.cancel(threadId, reason) : await this.threads.rehydrate(threadId);
      msg.respond(encodeJson({ kind: 'ok', threadId, state, node: this.nodeId }));
    } catch (err) {
      msg.respond(encodeJson(TroupeError.from(err, 'WORKFLOW_ERROR').toReply()));
    }
  }

  private async onThreads(msg: InboundMessage): Promise<void> {
    try {
      const filter = msg.data.length ? decode(z.object({ state: z.string().optional() }), msg.data, 'threads request') : {};
      const live = new Set(this.threads.list().actors.filter((a) => a.kind === 'thread').map((a) => a.id));
      const rows = [];
      for await (const entry of this.threads.store.list(this.tenant)) {
        if (filter.state && entry.state !== filter.state) continue;
        rows.push({ ...entry, live: live.has(entry.threadId) });
      }
      msg.respond(encodeJson({ kind: 'threads', threads: rows }));
    } catch (err) {
      msg.respond(encodeJson(TroupeError.from(err, 'WORKFLOW_ERROR').toReply()));
    }
  }

  private async onThread(msg: InboundMessage): Promise<void> {
    try {
      const { threadId, redact: masked = true } = decode(ThreadCtlSchema, msg.data, 'thread request');
      const stored = await this.threads.store.get(this.tenant, threadId);
      if (!stored) throw new TroupeError('THREAD_NOT_FOUND', `no thread ${threadId} in tenant ${this.tenant}`);
      const record = { ...stored.record, snapshot: undefined, outbox: undefined };
      msg.respond(encodeJson({ kind: 'thread', revision: stored.revision, record: masked ? redact(record) : record }));
    } catch (err) {
      msg.respond(encodeJson(TroupeError.from(err, 'WORKFLOW_ERROR').toReply()));
    }
  }
}
