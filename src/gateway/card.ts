/**
 * The AgentCard of the gateway: the whole mesh as one A2A agent, in the SDK's v1.0 model. It declares
 * JSON-RPC at `<base>/` and HTTP+JSON at `<base>/rest`, each in A2A 1.0 and (mirrored) 0.3, so the SDK
 * serves a v1.0 card to clients that ask with `A2A-Version: 1.0` and a v0.3 card to the others. Its
 * skills are what the caller passes (e.g. the skills of a team's agents, `skillsOfAgents`); the mesh is
 * not asked, since a client-role NATS user may not read the registry.
 */
import type { AgentCard, AgentSkill as SdkSkill } from '@a2a-js/sdk';
import { duplicateInterfacesForLegacy } from '@a2a-js/sdk/compat/v0_3';
import { CLIENT_ROUTING_URI, type AgentCardInput, type AgentExtension, type AgentSkill } from '../protocol/index.js';

/**
 * The client-routing extension (seed 001) as the gateway takes part in it: a client may address an agent
 * of the mesh with `metadata[URI] = { recipient: "<agent id>" }`, and the agents' answers carry their
 * routing metadata and `extensions: [URI]`. Optional: a client that ignores it is routed by the mesh.
 */
const CLIENT_ROUTING_EXTENSION: AgentExtension = {
  uri: CLIENT_ROUTING_URI,
  description: "Client agent routing (ranch): address an agent with message.metadata[uri].recipient; answers carry the agent's routing decision",
  required: false,
};

export interface GatewayCardOptions {
  name?: string;
  description?: string;
  version?: string;
  /** Public base URL when it differs from where the gateway listens (a proxy). */
  url?: string;
  skills?: AgentSkill[];
  extensions?: AgentExtension[];
  provider?: { organization: string; url: string };
  documentationUrl?: string;
  iconUrl?: string;
  defaultInputModes?: string[];
  defaultOutputModes?: string[];
}

export const AGENT_CARD_PATHS: readonly string[] = ['/.well-known/agent-card.json', '/.well-known/agent.json'];
/** Where HTTP+JSON (REST) is served, below the base URL. JSON-RPC is at the base URL itself. */
export const REST_PATH = '/rest';

/** How callers authenticate, for the card: bearer tokens, JWTs among them when `jwt`. */
export interface CardAuth {
  jwt: boolean;
  description: string;
}

export function gatewayCard(listenUrl: string, opts: GatewayCardOptions, auth: CardAuth | undefined): AgentCard {
  const base = (opts.url ?? listenUrl).replace(/\/+$/, '');
  return {
    name: opts.name ?? 'Troupe',
    description: opts.description ?? 'A Troupe multi-agent mesh: each message is routed between agents until one answers the user.',
    supportedInterfaces: duplicateInterfacesForLegacy(
      [
        { url: `${base}/`, protocolBinding: 'JSONRPC', tenant: '', protocolVersion: '1.0' },
        { url: `${base}${REST_PATH}`, protocolBinding: 'HTTP+JSON', tenant: '', protocolVersion: '1.0' },
      ],
      ['JSONRPC', 'HTTP+JSON'],
    ),
    provider: opts.provider,
    version: opts.version ?? '0.1.0',
    ...(opts.documentationUrl ? { documentationUrl: opts.documentationUrl } : {}),
    ...(opts.iconUrl ? { iconUrl: opts.iconUrl } : {}),
    capabilities: {
      streaming: true,
      pushNotifications: true,
      extendedAgentCard: false,
      extensions: [CLIENT_ROUTING_EXTENSION, ...(opts.extensions ?? []).filter((e) => e.uri !== CLIENT_ROUTING_URI)].map((e) => ({
        uri: e.uri,
        description: e.description ?? '',
        required: e.required ?? false,
        params: e.params,
      })),
    },
    securitySchemes: auth
      ? {
          bearer: {
            scheme: { $case: 'httpAuthSecurityScheme', value: { description: auth.description, scheme: 'bearer', bearerFormat: auth.jwt ? 'JWT' : '' } },
          },
        }
      : {},
    securityRequirements: auth ? [{ schemes: { bearer: { list: [] } } }] : [],
    defaultInputModes: opts.defaultInputModes ?? ['text/plain'],
    defaultOutputModes: opts.defaultOutputModes ?? ['text/plain'],
    skills: (opts.skills ?? []).map(toSdkSkill),
    signatures: [],
  };
}

function toSdkSkill(skill: AgentSkill): SdkSkill {
  return {
    id: skill.id,
    name: skill.name,
    description: skill.description,
    tags: skill.tags,
    examples: skill.examples ?? [],
    inputModes: skill.inputModes ?? [],
    outputModes: skill.outputModes ?? [],
    securityRequirements: [],
  };
}

/** The skills of a team's agents, ids prefixed with the agent id so two agents' skills cannot collide. */
export function skillsOfAgents(cards: AgentCardInput[]): AgentSkill[] {
  return cards.flatMap((card) =>
    (card.skills ?? []).map((skill) => ({ ...skill, id: `${card.id}/${skill.id}`, tags: [...new Set([...skill.tags, card.id])] })),
  );
}
