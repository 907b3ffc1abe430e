/** `troupe up`: a node (router + threads); without --nats, an in-process mesh with a team. */
import type { Command } from 'commander';
import { AgentHost } from '../../actors/agent-host.js';
import { startEmbedded } from '../../team/embedded.js';
import { TroupeNode } from '../../actors/node.js';
import { createLogger } from '../../observability/logger.js';
import { installProcessGuards } from '../../observability/guard.js';
import { natsCheck } from '../../observability/probes.js';
import { loadModule, nodeOptionsOf, type TeamDefinition } from '../../team/team.js';
import { KvThreadStore } from '../../store/kv.js';
import { MemoryCheckpointStore } from '../../store/checkpoints.js';
import { CHECKPOINT_STREAM, DEFAULT_CHECKPOINT_MAX_BYTES, StreamCheckpointStore } from '../../store/checkpoint-stream.js';
import { TroupeError } from '../../protocol/errors.js';
import { DEFAULT_CHECKPOINTS_KEPT } from '../../protocol/checkpoint.js';
import { connect, globals, onShutdown, startObservability } from '../cli.js';
import demoTeam from '../demo/team.js';
import { color } from '../output.js';

export interface UpOptions {
  metricsPort?: number;
  metricsHost?: string;
  team?: string;
  agents: boolean;
  inspect?: boolean;
  idle?: number;
  dormant: number;
  durable: boolean;
  partitions: number;
  leaseTtl: number;
  threadTtl: number;
  /** How long each JetStream setup step waits for a cluster that does not answer yet. */
  setupTimeout: number;
  /** Replicas of TROUPE_IN, TROUPE_DLQ, the thread and lease buckets; undefined: 1 when created, else as they are. */
  replicas?: number;
}

export async function up(opts: UpOptions, cmd: Command): Promise<void> {
  const g = globals(cmd);
  const logger = createLogger({ name: 'troupe', ...(g.logLevel ? { level: g.logLevel } : {}) });
  installProcessGuards(logger);
  const observability = await startObservability(opts, 'troupe-node', logger);
  const { readiness } = observability;
  const loaded = opts.team ? await loadModule(opts.team) : undefined;
  const team: TeamDefinition | undefined = loaded?.team ?? (loaded ? { name: opts.team ?? 'team', agents: loaded.agents } : undefined);
  if (!g.nats) {
    const mesh = await startEmbedded(team ?? demoTeam, logger, g.tenant);
    process.stderr.write(
      `${color.green('troupe')} embedded mesh up (in-memory) with ${(team ?? demoTeam).agents.map((a) => a.card.id).join(', ')}. Ctrl-C to stop.\n` +
        `${color.dim('This mesh lives in this process only. To talk to it from other processes run nats-server and pass --nats.')}\n`,
    );
    readiness.started();
    onShutdown(async () => {
      await mesh.stop();
      await observability.stop();
    }, readiness);
    return;
  }
  const transport = await connect(g, 'troupe-node', true, logger);
  readiness.add('nats', natsCheck(transport));
  const replicas = opts.replicas !== undefined ? { replicas: opts.replicas } : {};
  let store: KvThreadStore | undefined;
  let node: TroupeNode;
  try {
    store = await KvThreadStore.open(transport.jetstreamConnection, { ttlMs: opts.threadTtl, ...replicas, logger, setupDeadlineMs: opts.setupTimeout });
    if (store.ttlMs !== opts.threadTtl) logger.warn({ bucketTtlMs: store.ttlMs }, 'the thread bucket exists with another max age; it keeps its own');
    // Checkpoints live as long as their threads (the bucket's max age), as many per thread as the team says.
    const keep = nodeOptionsOf(team).config?.checkpoints ?? DEFAULT_CHECKPOINTS_KEPT;
    const checkpoints =
      keep > 0
        ? await StreamCheckpointStore.open(transport.jetstreamConnection, {
            tenant: g.tenant,
            keep,
            ttlMs: store.ttlMs,
            ...replicas,
            logger,
            setupDeadlineMs: opts.setupTimeout,
          }).catch((err: unknown) => {
            // JetStream not answering stops the node as for its other streams; a refusal (the account's
            // storage used up) leaves it running without checkpoints, and says so.
            if (err instanceof TroupeError && err.code === 'TRANSPORT_ERROR') throw err;
            logger.warn(
              { err: (err as Error).message, stream: CHECKPOINT_STREAM, maxBytes: DEFAULT_CHECKPOINT_MAX_BYTES },
              'could not create the checkpoint stream: running without checkpoints (raise the account JetStream storage, or set checkpoints: 0)',
            );
            return new MemoryCheckpointStore({ keep: 0 });
          })
        : new MemoryCheckpointStore({ keep: 0 });
    node = await new TroupeNode({
      transport,
      tenant: g.tenant,
      logger,
      store,
      checkpoints,
      ...nodeOptionsOf(team),
      ...(opts.inspect ? { inspect: true } : {}),
      ...(opts.idle ? { idleMs: opts.idle } : {}),
      dormantMs: opts.dormant,
      ...(opts.durable
        ? {
            durable: {
              nc: transport.jetstreamConnection,
              partitions: opts.partitions,
              leaseTtlMs: opts.leaseTtl,
              setupDeadlineMs: opts.setupTimeout,
              ...replicas,
            },
          }
        : {}),
    }).start();
  } catch (err) {
    // Nothing started: let go of the connection so the process exits with the error (code 1).
    await store?.close().catch(() => undefined);
    await transport.close().catch(() => undefined);
    throw err;
  }
  const threadStore = store;
  const hosts =
    opts.agents && team
      ? await Promise.all(
          team.agents.map((agent) => new AgentHost({ transport, agent, tenant: g.tenant, logger, ...(opts.inspect ? { inspect: true } : {}) }).start()),
        )
      : [];
  readiness.add('partitions', () => node.partitionsCheck()).started();
  process.stderr.write(
    `${color.green('troupe')} node ${node.nodeId} up on ${transport.name} (tenant ${g.tenant}${opts.durable ? `, ${opts.partitions} partitions` : ''}${opts.replicas ? `, ${opts.replicas} replicas` : ''})\n`,
  );
  onShutdown(async () => {
    await Promise.all(hosts.map((h) => h.stop()));
    await node.stop();
    await threadStore.close();
    await transport.drain();
    await observability.stop();
  }, readiness);
}
