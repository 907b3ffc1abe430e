/**
 * `troupe studio`: the local web UI. Without --nats it runs an in-process mesh (the demo agents and the
 * handoff specialists, inspection on) with an A2A gateway on a free loopback port for the chat; with
 * --nats it follows a running mesh as an operator (inspection stream, ctl) and chats through the gateway
 * named by --gateway.
 */
import type { Command } from 'commander';
import { startEmbedded } from '../../actors/embedded.js';
import { skillsOfAgents, startGateway } from '../../gateway/index.js';
import { createLogger } from '../../observability/logger.js';
import { startStudio } from '../../studio/server.js';
import { MemoryTransport } from '../../transport/memory.js';
import { connect, globals, onShutdown } from '../cli.js';
import { studioTeam } from '../demo/studio-team.js';
import { color, printJson } from '../output.js';

export async function studio(opts: { port: number; host: string; gateway?: string }, cmd: Command): Promise<void> {
  const g = globals(cmd);
  const logger = createLogger({ name: 'troupe-studio', ...(g.logLevel ? { level: g.logLevel } : { level: 'warn' }) });
  const stops: Array<() => Promise<void>> = [];
  const stopAll = async () => {
    for (const stop of stops) await stop().catch(() => undefined);
  };
  try {
    let transport;
    let gatewayUrl = opts.gateway;
    if (g.nats) {
      transport = await connect(g, 'troupe-studio', true);
      const t = transport;
      stops.push(() => t.drain());
    } else {
      const mesh = await startEmbedded(studioTeam, logger, g.tenant, { inspect: true });
      stops.push(mesh.stop);
      transport = new MemoryTransport({ bus: mesh.bus });
      const gateway = await startGateway({
        clients: { [g.tenant]: mesh.client },
        defaultTenant: g.tenant,
        port: 0,
        host: '127.0.0.1',
        logger,
        card: { name: 'Troupe studio demo', skills: skillsOfAgents(studioTeam.agents.map((a) => a.card)) },
      });
      stops.unshift(() => gateway.close());
      gatewayUrl = gateway.url;
    }
    const server = await startStudio({ port: opts.port, host: opts.host, mode: g.nats ? 'nats' : 'embedded', tenant: g.tenant, transport, ...(gatewayUrl ? { gatewayUrl } : {}) });
    stops.unshift(() => server.close());
    if (server.problem) process.stderr.write(color.yellow(`could not switch inspection on (${server.problem}): the studio needs operator credentials (--creds)\n`));
    else if (g.nats) process.stderr.write(color.dim(`inspection on at ${server.nodes.length} node(s); it stays on after the studio exits (\`troupe inspect --off\`)\n`));
    if (g.json) printJson({ url: server.url, gateway: gatewayUrl ?? null, mode: g.nats ? 'nats' : 'embedded' });
    process.stderr.write(
      `${color.green('troupe')} studio on ${color.bold(server.url)} (${g.nats ? `mesh ${g.nats}` : 'in-process demo mesh'}${gatewayUrl ? `; chat through ${gatewayUrl}` : '; no chat: pass --gateway <url>'})\n`,
    );
  } catch (err) {
    await stopAll();
    throw err;
  }
  onShutdown(stopAll);
}
