/** `troupe gateway`: serve the mesh to A2A clients over HTTP. */
import type { Command } from 'commander';
import { startEmbedded } from '../../actors/embedded.js';
import { loadTokens, skillsOfAgents, startGateway } from '../../gateway/index.js';
import { createLogger } from '../../observability/logger.js';
import { installProcessGuards } from '../../observability/guard.js';
import { TroupeClient } from '../../sdk/client.js';
import { connect, globals, onShutdown, principalOf } from '../cli.js';
import demoTeam from '../demo/team.js';
import { color, printJson } from '../output.js';

export async function gateway(opts: { port: number; host: string; tokens?: string; publicUrl?: string }, cmd: Command): Promise<void> {
  const g = globals(cmd);
  const logger = createLogger({ name: 'troupe-gateway', ...(g.logLevel ? { level: g.logLevel } : {}) });
  installProcessGuards(logger);
  const tokens = opts.tokens ? loadTokens(opts.tokens) : undefined;
  const clients: Record<string, TroupeClient> = {};
  const stops: Array<() => Promise<void>> = [];
  // The gateway first, so no request reaches a mesh that is going away.
  const stopAll = async () => {
    for (const stop of stops) await stop();
  };
  try {
    if (g.nats) {
      // One tenant: the one the CLI's credentials belong to. Serving more takes one client per tenant (startGateway).
      const transport = await connect(g, 'troupe-gateway', true);
      clients[g.tenant] = new TroupeClient(transport, { tenant: g.tenant, principal: await principalOf(g) });
      stops.push(() => transport.drain());
    } else {
      // Embedded: one demo mesh per tenant the tokens name, so tenancy can be tried without NATS.
      for (const tenant of new Set([g.tenant, ...Object.values(tokens ?? {})])) {
        const mesh = await startEmbedded(demoTeam, logger, tenant);
        clients[tenant] = mesh.client;
        stops.push(mesh.stop);
      }
    }
    const server = await startGateway({
      clients,
      defaultTenant: g.tenant,
      port: opts.port,
      host: opts.host,
      logger,
      ...(tokens ? { tokens } : {}),
      card: {
        ...(opts.publicUrl ? { url: opts.publicUrl } : {}),
        ...(g.nats ? {} : { name: 'Troupe demo', skills: skillsOfAgents(demoTeam.agents.map((a) => a.card)) }),
      },
    });
    stops.unshift(() => server.close());
    if (g.json) printJson({ url: server.url, card: `${server.url}/.well-known/agent-card.json`, tenants: Object.keys(clients) });
    process.stderr.write(
      `${color.green('troupe')} gateway listening on ${server.url} (${g.nats ?? 'embedded demo mesh'}; ${tokens ? 'bearer tokens' : `no auth, tenant ${g.tenant}`})\n` +
        `${color.dim(`agent card: ${server.url}/.well-known/agent-card.json`)}\n`,
    );
  } catch (err) {
    await stopAll().catch(() => undefined);
    throw err;
  }
  onShutdown(stopAll);
}
