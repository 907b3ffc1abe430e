/**
 * Seed 004's agent capabilities, as a card extension: AgentCapabilities' `multi_turn` and `hitl_support`,
 * HandoffCapability (triggers, workflow states, exclusive control, longest session) and
 * OrchestrationCapability (whether the agent may be orchestrated, the strategies it takes, how many
 * delegations at once). A2A's capabilities object has no room for them, so they ride in
 * `capabilities.extensions[{ uri: AGENT_CAPABILITIES_URI, params }]`, in the seed's field names, with the
 * seed's defaults filled in. What Troupe itself enforces stays in the card's `handoff` / `orchestration`
 * objects (`canInitiate`, `canAccept`, `canDelegate`, `maxParallel`).
 */
import { z } from 'zod';
import type { AgentCard } from './a2a.js';

export const AGENT_CAPABILITIES_URI = 'https://troupe.dev/extensions/agent-capabilities/v1';

const Name = z.string().min(1).max(200);

export const HandoffCapabilitySchema = z.strictObject({
  supports_handoff: z.boolean().default(false),
  /** What makes the agent take a conversation over (free-form phrases or intents). */
  handoff_triggers: z.array(Name).max(50).default([]),
  /** The steps of the workflow the agent runs while it holds the conversation. */
  workflow_states: z.array(Name).max(50).default([]),
  requires_exclusive_control: z.boolean().default(true),
  max_session_duration_seconds: z
    .int()
    .min(1)
    .max(7 * 24 * 3600)
    .default(3600),
});

export const OrchestrationCapabilitySchema = z.strictObject({
  can_orchestrate: z.boolean().default(false),
  can_be_orchestrated: z.boolean().default(true),
  supported_delegation_strategies: z
    .array(z.enum(['parallel', 'sequential']))
    .max(2)
    .default(['parallel', 'sequential']),
  max_concurrent_delegations: z.int().min(1).max(100).default(5),
});

export const AgentCapabilityParamsSchema = z.strictObject({
  multi_turn: z.boolean().default(false),
  hitl_support: z.boolean().default(false),
  handoff: HandoffCapabilitySchema.default(HandoffCapabilitySchema.parse({})),
  orchestration: OrchestrationCapabilitySchema.default(OrchestrationCapabilitySchema.parse({})),
});
export type AgentCapabilityParams = z.infer<typeof AgentCapabilityParamsSchema>;

/**
 * The seed capabilities a card declares, parsed (defaults filled in); undefined when it declares none or
 * declares them malformed.
 */
export function agentCapabilityParams(card: Pick<AgentCard, 'capabilities'> | undefined): AgentCapabilityParams | undefined {
  const ext = card?.capabilities.extensions?.find((e) => e.uri === AGENT_CAPABILITIES_URI);
  if (!ext) return undefined;
  const parsed = AgentCapabilityParamsSchema.safeParse(ext.params ?? {});
  return parsed.success ? parsed.data : undefined;
}

/** One line for people: what the capabilities declare (`troupe validate`). */
export function describeAgentCapabilities(c: AgentCapabilityParams): string {
  const h = c.handoff;
  const o = c.orchestration;
  const flags = [c.multi_turn ? 'multi-turn' : 'single-turn', c.hitl_support ? 'human in the loop' : undefined].filter(Boolean).join(', ');
  const handoff = h.supports_handoff
    ? `handoff (${[
        h.handoff_triggers.length ? `triggers ${h.handoff_triggers.join(', ')}` : undefined,
        h.workflow_states.length ? `states ${h.workflow_states.join(' → ')}` : undefined,
        h.requires_exclusive_control ? 'exclusive' : 'shared',
        `at most ${h.max_session_duration_seconds} s`,
      ]
        .filter(Boolean)
        .join('; ')})`
    : 'no handoff';
  const orchestration = `${o.can_orchestrate ? 'orchestrates' : 'does not orchestrate'}, ${o.can_be_orchestrated ? `may be orchestrated (${o.supported_delegation_strategies.join(', ')}; ${o.max_concurrent_delegations} at once)` : 'may not be orchestrated'}`;
  return `${flags}; ${handoff}; ${orchestration}`;
}
