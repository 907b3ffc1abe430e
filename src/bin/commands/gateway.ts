/** `troupe gateway`: serve the mesh to A2A clients over HTTP(S), with operator diagnostics. */
import { readFileSync } from 'node:fs';
import type { Command } from 'commander';
import { startEmbedded } from '../../team/embedded.js';
import { loadTokens, skillsOfAgents, startGateway, type Caller, type GatewayOptions } from '../../gateway/index.js';
import { createLogger } from '../../observability/logger.js';
import { installProcessGuards } from '../../observability/guard.js';
import { natsCheck } from '../../observability/probes.js';
import { TroupeClient } from '../../sdk/client.js';
import { defineTeam, loadModule, type TeamDefinition } from '../../team/team.js';
import { connect, globals, onShutdown, startObservability, principalOf, UsageError } from '../cli.js';
import demoTeam from '../demo/team.js';
import { color, printJson } from '../output.js';

export interface GatewayCommandOptions {
  metricsPort?: number;
  metricsHost?: string;
  port: number;
  host: string;
  tokens?: string;
  jwtIssuer?: string;
  jwtAudience?: string;
  jwksUrl?: string;
  jwtTenantClaim?: string;
  jwtUserClaim?: string;
  publicUrl?: string;
  maxBody?: number;
  readTimeout?: number;
  turnTimeout?: number;
  rateLimit?: number;
  rateBurst?: number;
  tlsCert?: string;
  tlsKey?: string;
  operatorToken?: string;
  operatorTokenFile?: string;
  operatorCreds?: string;
  diagnosticsPort?: number;
  cardVersion?: '0.3' | '1.0';
  team?: string;
  orchestratorPath?: string;
}

/**
 * Users need gateway credentials: the node lets only a gateway principal name the user it acts for, so
 * with a client's (`cli.creds`) every user request would be refused. Said once, before serving.
 */
async function checkGatewayCreds(file: string): Promise<void> {
  const { readCredsIdentity } = await import('../../security/creds.js');
  const id = await readCredsIdentity(file);
  if (id.role !== undefined && id.role !== 'gateway')
    throw new UsageError(
      `${file} holds the credentials of ${id.role} "${id.name}": a gateway serving users needs a gateway's (troupe creds add-gateway; creds init makes users/gateway.creds)`,
    );
}

export async function gateway(opts: GatewayCommandOptions, cmd: Command): Promise<void> {
  const g = globals(cmd);
  const logger = createLogger({ name: 'troupe-gateway', ...(g.logLevel ? { level: g.logLevel } : {}) });
  installProcessGuards(logger);
  const observability = await startObservability(opts, 'troupe-gateway', logger);
  const tokens = opts.tokens ? readOrUsage(() => loadTokens(opts.tokens!)) : undefined;
  if (Boolean(opts.tlsCert) !== Boolean(opts.tlsKey)) throw new UsageError('HTTPS needs both --tls-cert and --tls-key');
  const tls = opts.tlsCert && opts.tlsKey ? readOrUsage(() => ({ cert: readFileSync(opts.tlsCert!), key: readFileSync(opts.tlsKey!) })) : undefined;
  const operatorToken = opts.operatorTokenFile ? readOrUsage(() => readFileSync(opts.operatorTokenFile!, 'utf8').trim()) : opts.operatorToken;
  if (opts.diagnosticsPort !== undefined && !operatorToken)
    throw new UsageError('--diagnostics-port needs an operator token: --operator-token-file <file> or TROUPE_OPERATOR_TOKEN');
  if (opts.rateBurst !== undefined && opts.rateLimit === undefined) throw new UsageError('--rate-burst needs --rate-limit');
  if (!opts.jwtIssuer && (opts.jwtAudience || opts.jwksUrl || opts.jwtTenantClaim))
    throw new UsageError('--jwt-audience, --jwks-url and --jwt-tenant-claim go with --jwt-issuer');
  if (opts.jwtIssuer && !opts.jwtAudience)
    throw new UsageError('--jwt-issuer needs --jwt-audience: without it a token the issuer made for another service would be let in');
  const jwt = opts.jwtIssuer
    ? {
        issuer: opts.jwtIssuer,
        // Comma-separated: a token carrying any one of them passes.
        audience: opts
          .jwtAudience!.split(',')
          .map((a) => a.trim())
          .filter(Boolean),
        ...(opts.jwksUrl ? { jwksUrl: opts.jwksUrl } : {}),
        ...(opts.jwtTenantClaim ? { tenantClaim: opts.jwtTenantClaim } : {}),
        ...(opts.jwtUserClaim ? { userClaim: opts.jwtUserClaim } : {}),
      }
    : undefined;

  if (opts.team && g.nats) throw new UsageError('--team runs an embedded mesh: with --nats the agents run on their own (troupe up --team, troupe agent)');
  const team = opts.team ? await loadTeam(opts.team) : demoTeam;
  const clients: Record<string, TroupeClient> = {};
  const stops: Array<() => Promise<void>> = [];
  // The gateway first, so no request reaches a mesh that is going away.
  const stopAll = async () => {
    for (const stop of stops) await stop();
  };
  try {
    let operatorClient: TroupeClient | undefined;
    if (g.nats) {
      // One tenant: the one the CLI's credentials belong to. Serving more takes one client per tenant (startGateway).
      if ((tokens || jwt) && g.creds) await checkGatewayCreds(g.creds);
      const transport = await connect(g, 'troupe-gateway', true, logger);
      observability.readiness.add('nats', natsCheck(transport));
      clients[g.tenant] = new TroupeClient(transport, { tenant: g.tenant, principal: await principalOf(g) });
      stops.push(() => transport.drain());
      if (operatorToken) {
        if (!opts.operatorCreds)
          throw new UsageError('diagnostics on a NATS mesh need operator credentials: --operator-creds <file> (troupe creds add-operator)');
        const operatorGlobals = { ...g, creds: opts.operatorCreds, user: undefined, password: undefined };
        const operatorTransport = await connect(operatorGlobals, 'troupe-gateway-diagnostics', true);
        observability.readiness.add('nats-diagnostics', natsCheck(operatorTransport));
        operatorClient = new TroupeClient(operatorTransport, { tenant: g.tenant, principal: await principalOf(operatorGlobals) });
        stops.push(() => operatorTransport.drain());
      }
    } else {
      // Embedded: one mesh per tenant the tokens name, so tenancy can be tried without NATS.
      for (const tenant of new Set([g.tenant, ...Object.values(tokens ?? {}).map((c: Caller) => c.tenant)])) {
        const mesh = await startEmbedded(team, logger, tenant);
        clients[tenant] = mesh.client;
        stops.push(mesh.stop);
      }
      // In-process there is no broker to ask for rights: the mesh's own client can read the ctl subjects.
      operatorClient = clients[g.tenant];
    }
    const options: GatewayOptions = {
      clients,
      defaultTenant: g.tenant,
      port: opts.port,
      host: opts.host,
      logger,
      ...(tokens ? { tokens } : {}),
      ...(jwt ? { jwt } : {}),
      ...(opts.maxBody ? { maxBodyBytes: opts.maxBody } : {}),
      ...(opts.readTimeout ? { readTimeoutMs: opts.readTimeout } : {}),
      ...(opts.turnTimeout ? { turnTimeoutMs: opts.turnTimeout } : {}),
      ...(opts.rateLimit !== undefined ? { rateLimit: { perSecond: opts.rateLimit, burst: opts.rateBurst ?? Math.max(1, Math.ceil(opts.rateLimit)) } } : {}),
      ...(tls ? { tls } : {}),
      ...(opts.cardVersion ? { cardVersionWithoutHeader: opts.cardVersion } : {}),
      ...(opts.orchestratorPath ? { orchestratorPath: opts.orchestratorPath } : {}),
      ...(operatorToken && operatorClient
        ? { diagnostics: { token: operatorToken, client: operatorClient, ...(opts.diagnosticsPort !== undefined ? { port: opts.diagnosticsPort } : {}) } }
        : {}),
      card: {
        ...(opts.publicUrl ? { url: opts.publicUrl } : {}),
        ...(g.nats ? {} : { name: team === demoTeam ? 'Troupe demo' : `Troupe ${team.name}`, skills: skillsOfAgents(team.agents.map((a) => a.card)) }),
      },
    };
    const server = await startGateway(options).catch((err: unknown) => {
      // A configuration the gateway refuses (a token for a tenant it cannot serve) is bad usage.
      throw err instanceof Error && err.message.startsWith('gateway:') ? new UsageError(err.message) : err;
    });
    stops.unshift(() => server.close());
    observability.readiness.started();
    if (g.json)
      printJson({ url: server.url, card: `${server.url}/.well-known/agent-card.json`, tenants: Object.keys(clients), diagnostics: server.diagnosticsUrl });
    process.stderr.write(
      `${color.green('troupe')} gateway listening on ${server.url} (${g.nats ?? 'embedded demo mesh'}; ${[tokens ? 'bearer tokens' : '', jwt ? `JWTs from ${jwt.issuer}` : ''].filter(Boolean).join(' and ') || `no auth, tenant ${g.tenant}`})\n` +
        `${color.dim(`agent card: ${server.url}/.well-known/agent-card.json`)}\n` +
        (server.diagnosticsUrl ? `${color.dim(`diagnostics: ${server.diagnosticsUrl} (operator token)`)}\n` : ''),
    );
  } catch (err) {
    await stopAll().catch(() => undefined);
    await observability.stop();
    throw err;
  }
  stops.push(observability.stop);
  onShutdown(stopAll, observability.readiness);
}

/** A team module for the embedded mesh (a module exporting one agent runs as a team of one). */
async function loadTeam(path: string): Promise<TeamDefinition> {
  const loaded = await loadModule(path);
  return loaded.team ?? defineTeam({ name: path, agents: loaded.agents });
}

/** A file the user named that cannot be read or is invalid: bad usage (exit 2), saying which and why. */
function readOrUsage<T>(read: () => T): T {
  try {
    return read();
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
}
