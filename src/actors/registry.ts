/**
 * The catalog of live agents, built from the cards agents announce on `troupe.<tenant>.registry.<id>`.
 * The broker lets only agent A publish on `registry.A`, so the agent id comes from the subject, never
 * from the payload: a card claiming another id is refused, and a goodbye can only remove the sender's
 * own instances. An agent is live while at least one of its instances has announced within its ttl
 * (capped at 60 s); one that stops heartbeating leaves the catalog on the next sweep. The number of
 * agents, instances and the size of a card are capped, so a flood of announcements costs bounded memory
 * and bounded work per event.
 */
import type { Logger } from 'pino';
import type { AgentDirectory } from '../routing/route.js';
import {
  LIMITS,
  RegistryEventSchema,
  TroupeError,
  decode,
  simplifyCard,
  supportsClientRouting,
  type AgentCard,
  type AgentStatus,
  type RegistryEvent,
  type SimplifiedAgentCard,
} from '../protocol/index.js';
import { agentOfRegistrySubject, subjects } from '../transport/subjects.js';
import type { InboundMessage, Subscription, Transport } from '../transport/types.js';
import { silentLogger } from '../observability/logger.js';

interface Instance {
  card: AgentCard;
  expiresAt: number;
  status?: AgentStatus;
}

export type RegistryListener = (agents: AgentCard[]) => void;

export interface RegistryOptions {
  logger?: Logger;
  sweepMs?: number;
  now?: () => number;
  maxAgents?: number;
  maxInstancesPerAgent?: number;
}

/** Longest description a peer card carries in agent requests. */
const PEER_DESCRIPTION_CHARS = 300;

export class Registry {
  private readonly instances = new Map<string, Map<string, Instance>>();
  private readonly listeners = new Set<RegistryListener>();
  private sub?: Subscription;
  private sweeper?: NodeJS.Timeout;
  private readonly log: Logger;
  private readonly sweepMs: number;
  private readonly now: () => number;
  private readonly maxAgents: number;
  private readonly maxInstances: number;
  /** Derived views, rebuilt only when the catalog changes (every turn reads them). */
  private cache?: { agents: AgentCard[]; directory: AgentDirectory; peers: SimplifiedAgentCard[] };
  private refused = 0;

  constructor(
    private readonly transport: Transport,
    readonly tenant: string,
    opts: RegistryOptions = {},
  ) {
    this.log = (opts.logger ?? silentLogger()).child({ tenant, actor: 'registry' });
    this.sweepMs = opts.sweepMs ?? 1_000;
    this.now = opts.now ?? Date.now;
    this.maxAgents = opts.maxAgents ?? LIMITS.agentsPerTenant;
    this.maxInstances = opts.maxInstancesPerAgent ?? LIMITS.instancesPerAgent;
  }

  async start(): Promise<this> {
    this.sub = this.transport.subscribe(subjects.registryAll(this.tenant), (msg) => this.onEvent(msg));
    await this.transport.flush();
    // Ask agents already on the mesh to announce now rather than at their next heartbeat.
    this.transport.publish(subjects.hello(this.tenant), new Uint8Array());
    this.sweeper = setInterval(() => this.sweep(), this.sweepMs);
    this.sweeper.unref();
    return this;
  }

  async stop(): Promise<void> {
    if (this.sweeper) clearInterval(this.sweeper);
    this.sub?.unsubscribe();
  }

  /** Announcements refused so far (wrong id, too large, over a cap, malformed). */
  get refusedCount(): number {
    return this.refused;
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
    return this.views().agents;
  }

  card(agentId: string): AgentCard | undefined {
    const first = this.instances.get(agentId)?.values().next().value as Instance | undefined;
    return first?.card;
  }

  instanceCount(agentId: string): number {
    return this.instances.get(agentId)?.size ?? 0;
  }

  /** Last reported status of each live instance of an agent. */
  statuses(agentId: string): Array<{ instanceId: string; status?: AgentStatus }> {
    return [...(this.instances.get(agentId) ?? new Map<string, Instance>())].map(([instanceId, i]) => ({
      instanceId,
      ...(i.status ? { status: i.status } : {}),
    }));
  }

  /** What the router knows of each live agent (a null-prototype object: ids are external strings). */
  directory(): AgentDirectory {
    return this.views().directory;
  }

  /** The simplified cards an agent may route to: every live agent but itself, capped in number and size. */
  peersOf(agentId: string): SimplifiedAgentCard[] {
    return this.views()
      .peers.filter((card) => card.id !== agentId)
      .slice(0, LIMITS.peersPerRequest);
  }

  private views(): NonNullable<Registry['cache']> {
    if (!this.cache) {
      const agents = [...this.instances.values()].flatMap((byInstance) => {
        const first = byInstance.values().next().value as Instance | undefined;
        return first ? [first.card] : [];
      });
      const directory: AgentDirectory = Object.create(null) as AgentDirectory;
      for (const card of agents) {
        const { handoff, orchestration } = card.capabilities;
        directory[card.id] = {
          supportsClientRouting: supportsClientRouting(card),
          ...(handoff ? { handoff } : {}),
          ...(orchestration ? { orchestration } : {}),
        };
      }
      const peers = agents.map((card) => {
        const simple = simplifyCard(card);
        return simple.description.length > PEER_DESCRIPTION_CHARS
          ? { ...simple, description: `${simple.description.slice(0, PEER_DESCRIPTION_CHARS)}…` }
          : simple;
      });
      this.cache = { agents, directory, peers };
    }
    return this.cache;
  }

  private onEvent(msg: InboundMessage): void {
    const agentId = agentOfRegistrySubject(msg.subject);
    try {
      if (!agentId) throw new TroupeError('INVALID_MESSAGE', `registry event on an unexpected subject`);
      this.apply(agentId, decode(RegistryEventSchema, msg.data, `registry event of ${agentId}`, LIMITS.cardBytes));
    } catch (err) {
      this.refused++;
      // Rate of these is bounded by the broker (only A publishes on registry.A); log at debug after the first few.
      this.log[this.refused <= 20 ? 'warn' : 'debug']({ agent: agentId, err: (err as Error).message }, 'refused a registry event');
    }
  }

  private apply(agentId: string, event: RegistryEvent): void {
    if (event.kind === 'announce') {
      if (event.card.id !== agentId) {
        throw new TroupeError('INVALID_MESSAGE', `agent ${agentId} announced a card for "${event.card.id}"; an agent may only announce itself`);
      }
      let byInstance = this.instances.get(agentId);
      const isNew = !byInstance;
      if (!byInstance) {
        if (this.instances.size >= this.maxAgents) throw new TroupeError('PAYLOAD_TOO_LARGE', `the registry holds ${this.maxAgents} agents, its limit`);
        byInstance = new Map();
        this.instances.set(agentId, byInstance);
      }
      if (!byInstance.has(event.instanceId) && byInstance.size >= this.maxInstances) {
        throw new TroupeError('PAYLOAD_TOO_LARGE', `agent ${agentId} has ${this.maxInstances} instances, the limit`);
      }
      const previous = byInstance.get(event.instanceId);
      byInstance.set(event.instanceId, { card: event.card, expiresAt: this.now() + event.ttlMs, ...(event.status ? { status: event.status } : {}) });
      if (isNew) {
        this.log.info({ agent: agentId }, 'agent joined');
        this.changed();
      } else if (
        previous &&
        byInstance.values().next().value === byInstance.get(event.instanceId) &&
        JSON.stringify(previous.card) !== JSON.stringify(event.card)
      ) {
        // The card the catalog shows changed (a redeploy with new skills).
        this.changed();
      }
      return;
    }
    const byInstance = this.instances.get(agentId);
    if (byInstance?.delete(event.instanceId) && byInstance.size === 0) {
      this.instances.delete(agentId);
      this.log.info({ agent: agentId }, 'agent left');
      this.changed();
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
    if (changed) this.changed();
  }

  private changed(): void {
    this.cache = undefined;
    const agents = this.agents();
    for (const listener of [...this.listeners]) listener(agents);
  }
}
