/**
 * The catalog of live agents, built from the cards agents announce on `troupe.<tenant>.registry`.
 * An agent is live while at least one of its instances has announced within its ttl; one that stops
 * heartbeating leaves the catalog on the next sweep.
 */
import type { Logger } from 'pino';
import type { AgentDirectory } from '../machines/route.js';
import { RegistryEventSchema, decode, simplifyCard, supportsClientRouting, type AgentCard, type SimplifiedAgentCard } from '../protocol/index.js';
import { subjects } from '../transport/subjects.js';
import type { Subscription, Transport } from '../transport/types.js';
import { silentLogger } from '../observability/logger.js';

interface Instance {
  card: AgentCard;
  expiresAt: number;
}

export type RegistryListener = (agents: AgentCard[]) => void;

export class Registry {
  private readonly instances = new Map<string, Map<string, Instance>>();
  private readonly listeners = new Set<RegistryListener>();
  private sub?: Subscription;
  private sweeper?: NodeJS.Timeout;
  private readonly log: Logger;

  constructor(
    private readonly transport: Transport,
    readonly tenant: string,
    opts: { logger?: Logger; sweepMs?: number; now?: () => number } = {},
  ) {
    this.log = (opts.logger ?? silentLogger()).child({ tenant, actor: 'registry' });
    this.sweepMs = opts.sweepMs ?? 1_000;
    this.now = opts.now ?? Date.now;
  }

  private readonly sweepMs: number;
  private readonly now: () => number;

  async start(): Promise<this> {
    this.sub = this.transport.subscribe(subjects.registry(this.tenant), (msg) => {
      try {
        this.apply(decode(RegistryEventSchema, msg.data, 'registry event'));
      } catch (err) {
        this.log.warn({ err: (err as Error).message }, 'ignored an invalid registry event');
      }
    });
    await this.transport.flush();
    // Ask agents already on the mesh to announce now rather than at their next heartbeat.
    this.transport.publish(subjects.ctl(this.tenant, 'announce'), new Uint8Array());
    this.sweeper = setInterval(() => this.sweep(), this.sweepMs);
    this.sweeper.unref();
    return this;
  }

  async stop(): Promise<void> {
    if (this.sweeper) clearInterval(this.sweeper);
    this.sub?.unsubscribe();
  }

  /** Resolves once every named agent is live (or rejects after the timeout). */
  async waitFor(agentIds: string[], timeoutMs = 5_000): Promise<void> {
    const ready = () => agentIds.every((id) => this.instances.has(id));
    if (ready()) return;
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.listeners.delete(check);
        const missing = agentIds.filter((id) => !this.instances.has(id));
        reject(new Error(`agents not on the mesh after ${timeoutMs} ms: ${missing.join(', ')}`));
      }, timeoutMs);
      const check = () => {
        if (!ready()) return;
        clearTimeout(timer);
        this.listeners.delete(check);
        resolve();
      };
      this.listeners.add(check);
    });
  }

  onChange(listener: RegistryListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  agents(): AgentCard[] {
    return [...this.instances.values()].flatMap((byInstance) => {
      const first = byInstance.values().next().value as Instance | undefined;
      return first ? [first.card] : [];
    });
  }

  card(agentId: string): AgentCard | undefined {
    const first = this.instances.get(agentId)?.values().next().value as Instance | undefined;
    return first?.card;
  }

  instanceCount(agentId: string): number {
    return this.instances.get(agentId)?.size ?? 0;
  }

  directory(): AgentDirectory {
    return Object.fromEntries(this.agents().map((card) => [card.id, { supportsClientRouting: supportsClientRouting(card) }]));
  }

  /** The cards an agent may route to: every live agent but itself. */
  peersOf(agentId: string): SimplifiedAgentCard[] {
    return this.agents()
      .filter((card) => card.id !== agentId)
      .map(simplifyCard);
  }

  private apply(event: ReturnType<typeof RegistryEventSchema.parse>): void {
    if (event.kind === 'announce') {
      let byInstance = this.instances.get(event.card.id);
      const isNew = !byInstance;
      if (!byInstance) {
        byInstance = new Map();
        this.instances.set(event.card.id, byInstance);
      }
      byInstance.set(event.instanceId, { card: event.card, expiresAt: this.now() + event.ttlMs });
      if (isNew) {
        this.log.info({ agent: event.card.id }, 'agent joined');
        this.emit();
      }
      return;
    }
    const byInstance = this.instances.get(event.agentId);
    if (byInstance?.delete(event.instanceId) && byInstance.size === 0) {
      this.instances.delete(event.agentId);
      this.log.info({ agent: event.agentId }, 'agent left');
      this.emit();
    }
  }

  private sweep(): void {
    const now = this.now();
    let changed = false;
    for (const [agentId, byInstance] of this.instances) {
      for (const [instanceId, inst] of byInstance) if (inst.expiresAt <= now) byInstance.delete(instanceId);
      if (byInstance.size === 0) {
        this.instances.delete(agentId);
        this.log.warn({ agent: agentId }, 'agent stopped heartbeating; removed from the catalog');
        changed = true;
      }
    }
    if (changed) this.emit();
  }

  private emit(): void {
    const agents = this.agents();
    for (const listener of [...this.listeners]) listener(agents);
  }
}
