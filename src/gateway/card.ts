/**
 * The AgentCard the gateway serves at `/.well-known/agent-card.json`: the whole mesh as one A2A agent.
 * Its skills are what the caller passes (e.g. the skills of a team's agents, `skillsOfAgents`); the mesh
 * itself is not asked, since a client-role NATS user may not read the registry.
 */
import type { AgentCardInput, AgentExtension, AgentSkill } from '../protocol/index.js';

export interface GatewayCardOptions {
  name?: string;
  description?: string;
  version?: string;
  /** Public URL of the JSON-RPC endpoint when it differs from where the gateway listens (a proxy). */
  url?: string;
  skills?: AgentSkill[];
  extensions?: AgentExtension[];
  provider?: { organization: string; url: string };
  documentationUrl?: string;
  iconUrl?: string;
  defaultInputModes?: string[];
  defaultOutputModes?: string[];
}

/** An A2A v0.3 AgentCard (the JSON-RPC transport; no push notifications). */
export interface GatewayCard {
  protocolVersion: '0.3.0';
  name: string;
  description: string;
  url: string;
  preferredTransport: 'JSONRPC';
  additionalInterfaces: Array<{ url: string; transport: 'JSONRPC' }>;
  version: string;
  capabilities: { streaming: true; pushNotifications: false; stateTransitionHistory: false; extensions?: AgentExtension[] };
  defaultInputModes: string[];
  defaultOutputModes: string[];
  skills: AgentSkill[];
  supportsAuthenticatedExtendedCard: false;
  securitySchemes?: Record<string, { type: 'http'; scheme: 'bearer'; description: string }>;
  security?: Array<Record<string, string[]>>;
  provider?: { organization: string; url: string };
  documentationUrl?: string;
  iconUrl?: string;
}

export function gatewayCard(listenUrl: string, opts: GatewayCardOptions, bearerAuth: boolean): GatewayCard {
  const url = opts.url ?? listenUrl;
  return {
    protocolVersion: '0.3.0',
    name: opts.name ?? 'Troupe',
    description: opts.description ?? 'A Troupe multi-agent mesh: each message is routed between agents until one answers the user.',
    url,
    preferredTransport: 'JSONRPC',
    additionalInterfaces: [{ url, transport: 'JSONRPC' }],
    version: opts.version ?? '0.1.0',
    capabilities: { streaming: true, pushNotifications: false, stateTransitionHistory: false, ...(opts.extensions ? { extensions: opts.extensions } : {}) },
    defaultInputModes: opts.defaultInputModes ?? ['text/plain'],
    defaultOutputModes: opts.defaultOutputModes ?? ['text/plain'],
    skills: opts.skills ?? [],
    supportsAuthenticatedExtendedCard: false,
    ...(bearerAuth
      ? { securitySchemes: { bearer: { type: 'http', scheme: 'bearer', description: 'a token the gateway maps to a tenant' } }, security: [{ bearer: [] }] }
      : {}),
    ...(opts.provider ? { provider: opts.provider } : {}),
    ...(opts.documentationUrl ? { documentationUrl: opts.documentationUrl } : {}),
    ...(opts.iconUrl ? { iconUrl: opts.iconUrl } : {}),
  };
}

/** The skills of a team's agents, ids prefixed with the agent id so two agents' skills cannot collide. */
export function skillsOfAgents(cards: AgentCardInput[]): AgentSkill[] {
  return cards.flatMap((card) => (card.skills ?? []).map((skill) => ({ ...skill, id: `${card.id}/${skill.id}`, tags: [...new Set([...skill.tags, card.id])] })));
}
