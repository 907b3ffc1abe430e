/**
 * The client-routing extension (interoperable with the `ranch` runtime; URI and shapes are fixed).
 * Router -> agent: `message.metadata[URI] = { agentCards, sender }`.
 * Agent -> router: `reply.metadata[URI] = { recipient, reason? }` (plus Troupe's optional `handoff`).
 */
import { z } from 'zod';
import { AgentCapabilitiesSchema, type AgentCapabilities, type AgentCard, type Message } from './a2a.js';
import { TroupeError, describeZodError } from './errors.js';

export const CLIENT_ROUTING_URI = 'https://ranch.woi.dev/extensions/client-routing/v1';

/** Reserved recipients. Anything else is an agent id. */
export const USER = 'user';
export const SENDER = 'sender';

/**
 * A peer as the client-routing request lists it (seed 001). `capabilities` is ranch's list of strings; an
 * A2A capabilities object (what Troupe sent before) is read as that list too.
 */
const SimplifiedAgentCardSchema = z.object({
  id: z.string(),
  name: z.string(),
  description: z.string(),
  capabilities: z.preprocess(
    (value) => (Array.isArray(value) ? value : capabilityNames(AgentCapabilitiesSchema.safeParse(value ?? {}).data ?? {})),
    z.array(z.string()),
  ),
  supportsClientRouting: z.boolean(),
});
export type SimplifiedAgentCard = z.infer<typeof SimplifiedAgentCardSchema>;

export const RoutingRequestSchema = z.object({
  agentCards: z.array(SimplifiedAgentCardSchema),
  sender: z.string(),
});
export type RoutingRequest = z.infer<typeof RoutingRequestSchema>;

const RoutingResponseSchema = z
  .object({
    recipient: z.string().min(1).optional(),
    // ranch (Rust, serde) writes `null` for a reason it does not give.
    reason: z
      .string()
      .nullish()
      .transform((r) => r ?? undefined),
  })
  .passthrough();
export type RoutingResponse = z.infer<typeof RoutingResponseSchema>;

export function supportsClientRouting(card: AgentCard): boolean {
  return (card.capabilities.extensions ?? []).some((ext) => ext.uri === CLIENT_ROUTING_URI);
}

export function simplifyCard(card: AgentCard): SimplifiedAgentCard {
  const supports = supportsClientRouting(card);
  const names = card.capabilities.names ?? card.skills.map((s) => s.id);
  return {
    id: card.id,
    name: card.name,
    description: card.description,
    // ranch's shape: what the agent can do, and the extension URI when it routes (ranch checks the list for it).
    capabilities: [...new Set([...names, ...(supports ? [CLIENT_ROUTING_URI] : [])])],
    supportsClientRouting: supports,
  };
}

/** An A2A capabilities object as ranch's list: its names and its extensions' URIs. */
function capabilityNames(capabilities: AgentCapabilities): string[] {
  return [...(capabilities.names ?? []), ...(capabilities.extensions ?? []).map((e) => e.uri)];
}

/** The message, declaring the client-routing extension (`extensions: [URI]`) when its metadata uses it. */
export function declaringRouting<M extends Message>(message: M): M {
  if (message.metadata?.[CLIENT_ROUTING_URI] === undefined || message.extensions?.includes(CLIENT_ROUTING_URI)) return message;
  return { ...message, extensions: [...(message.extensions ?? []), CLIENT_ROUTING_URI] };
}

/**
 * Reads the routing response an agent put in its reply. Returns undefined when the agent named no
 * recipient; throws EXTENSION_PARSE_ERROR when the metadata is there but malformed.
 */
export function readRoutingResponse(reply: Message): RoutingResponse | undefined {
  const raw = reply.metadata?.[CLIENT_ROUTING_URI];
  if (raw === undefined) return undefined;
  const parsed = RoutingResponseSchema.safeParse(raw);
  if (!parsed.success) {
    throw new TroupeError('EXTENSION_PARSE_ERROR', `reply ${reply.messageId} carries invalid client-routing metadata: ${describeZodError(parsed.error)}`);
  }
  return parsed.data;
}

/** Returns a copy of the message with the routing request for its receiver (other fields in the slot, e.g. a handoff request, stay). */
export function withRoutingRequest(message: Message, request: RoutingRequest): Message {
  const slot = message.metadata?.[CLIENT_ROUTING_URI];
  const rest = slot && typeof slot === 'object' && !Array.isArray(slot) ? slot : {};
  return {
    ...message,
    extensions: Array.from(new Set([...(message.extensions ?? []), CLIENT_ROUTING_URI])),
    metadata: { ...message.metadata, [CLIENT_ROUTING_URI]: { ...rest, ...request } },
  };
}

/** What a router policy decides for a message no agent addressed explicitly. */
export const RouterDecisionSchema = z.object({
  agentId: z.string().min(1),
  confidence: z.number().min(0).max(1),
  reasoning: z.string(),
  additionalAgents: z.array(z.string()).optional(),
});
export type RouterDecision = z.infer<typeof RouterDecisionSchema>;
