/**
 * The studio on an in-process mesh (what `troupe studio` runs without --nats): the team's node and agents
 * with inspection on, an A2A gateway on a free loopback port for the chat, and the studio server following
 * the mesh's bus as an operator would follow NATS.
 */
import { startEmbedded } from '../team/embedded.js';
import { skillsOfAgents, startGateway } from '../gateway/index.js';
import { silentLogger, type Logger } from '../observability/logger.js';
import type { TeamDefinition } from '../team/team.js';
import { MemoryTransport } from '../transport/memory.js';
import { startStudio, type Studio } from './server.js';

export interface EmbeddedStudio {
  studio: Studio;
  gatewayUrl: string;
  stop(): Promise<void>;
}

export async function startEmbeddedStudio(opts: {
  team: TeamDefinition;
  tenant?: string;
  port?: number;
  host?: string;
  logger?: Logger;
}): Promise<EmbeddedStudio> {
  const tenant = opts.tenant ?? 'demo';
  const logger = opts.logger ?? silentLogger();
  const mesh = await startEmbedded(opts.team, logger, tenant, { inspect: true });
  const stops: Array<() => Promise<void>> = [mesh.stop];
  const stop = async () => {
    for (const s of stops) await s().catch(() => undefined);
  };
  try {
    const gateway = await startGateway({
      clients: { [tenant]: mesh.client },
      defaultTenant: tenant,
      port: 0,
      host: '127.0.0.1',
      logger,
      card: { name: `Troupe studio (${opts.team.name})`, skills: skillsOfAgents(opts.team.agents.map((a) => a.card)) },
    });
    stops.unshift(() => gateway.close());
    const studio = await startStudio({
      mode: 'embedded',
      tenant,
      transport: new MemoryTransport({ bus: mesh.bus }),
      gatewayUrl: gateway.url,
      ...(opts.port !== undefined ? { port: opts.port } : {}),
      ...(opts.host ? { host: opts.host } : {}),
    });
    stops.unshift(() => studio.close());
    return { studio, gatewayUrl: gateway.url, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}
