/**
 * `capabilities` of an agent.yaml: what the thread enforces and seed 004's capabilities the card states.
 */
import { z } from 'zod';
import { AgentCapabilityParamsSchema, HandoffCapabilitySchema, OrchestrationCapabilitySchema, type AgentCapabilityParams } from '../protocol/capabilities.js';

/**
 * What the agent's card declares it may do in a team. `can_initiate`, `can_accept`, `can_delegate` and
 * `max_parallel` are enforced by the thread (absent: allowed); the rest are seed 004's capabilities, which
 * the card states for peers and clients (protocol/capabilities.ts, `seedCapabilitiesOf`).
 */
export const CapabilitiesSchema = z.strictObject({
  multi_turn: z.boolean().optional(),
  hitl_support: z.boolean().optional(),
  handoff: z
    .strictObject({
      can_initiate: z.boolean().optional(),
      can_accept: z.boolean().optional(),
      supports_handoff: z.boolean().optional(),
      handoff_triggers: HandoffCapabilitySchema.shape.handoff_triggers.unwrap().optional(),
      workflow_states: HandoffCapabilitySchema.shape.workflow_states.unwrap().optional(),
      requires_exclusive_control: z.boolean().optional(),
      max_session_duration_seconds: HandoffCapabilitySchema.shape.max_session_duration_seconds.unwrap().optional(),
    })
    .optional(),
  orchestration: z
    .strictObject({
      can_delegate: z.boolean().optional(),
      max_parallel: z.int().min(1).max(100).optional(),
      can_orchestrate: z.boolean().optional(),
      can_be_orchestrated: z.boolean().optional(),
      supported_delegation_strategies: OrchestrationCapabilitySchema.shape.supported_delegation_strategies.unwrap().optional(),
      max_concurrent_delegations: OrchestrationCapabilitySchema.shape.max_concurrent_delegations.unwrap().optional(),
    })
    .optional(),
});
type CapabilitiesConfig = z.infer<typeof CapabilitiesSchema>;

/** Keys of `capabilities` that are seed 004's (declared on the card, not enforced by the thread). */
const SEED_CAPABILITY_KEYS = {
  top: ['multi_turn', 'hitl_support'],
  handoff: ['supports_handoff', 'handoff_triggers', 'workflow_states', 'requires_exclusive_control', 'max_session_duration_seconds'],
  orchestration: ['can_orchestrate', 'can_be_orchestrated', 'supported_delegation_strategies', 'max_concurrent_delegations'],
} as const;

/**
 * Seed 004's capabilities of an agent.yaml, with the seed's defaults, or undefined when it declares none of
 * them. Where the file leaves one out that Troupe decides, the card says what Troupe does: an agent takes
 * handoffs unless `can_accept: false`, may delegate unless `can_delegate: false`, to `max_parallel` at once.
 */
export function seedCapabilitiesOf(capabilities: CapabilitiesConfig | undefined): AgentCapabilityParams | undefined {
  const c = capabilities;
  if (!c) return undefined;
  const declared =
    SEED_CAPABILITY_KEYS.top.some((k) => c[k] !== undefined) ||
    SEED_CAPABILITY_KEYS.handoff.some((k) => c.handoff?.[k] !== undefined) ||
    SEED_CAPABILITY_KEYS.orchestration.some((k) => c.orchestration?.[k] !== undefined);
  if (!declared) return undefined;
  const h = c.handoff ?? {};
  const o = c.orchestration ?? {};
  return AgentCapabilityParamsSchema.parse({
    multi_turn: c.multi_turn,
    hitl_support: c.hitl_support,
    handoff: {
      supports_handoff: h.supports_handoff ?? h.can_accept !== false,
      handoff_triggers: h.handoff_triggers,
      workflow_states: h.workflow_states,
      requires_exclusive_control: h.requires_exclusive_control,
      max_session_duration_seconds: h.max_session_duration_seconds,
    },
    orchestration: {
      can_orchestrate: o.can_orchestrate ?? o.can_delegate !== false,
      can_be_orchestrated: o.can_be_orchestrated,
      supported_delegation_strategies: o.supported_delegation_strategies,
      max_concurrent_delegations: o.max_concurrent_delegations ?? o.max_parallel,
    },
  });
}
