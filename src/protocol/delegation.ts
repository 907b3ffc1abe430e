/**
 * Delegation wire schemas. An agent asks the thread to fan its work out to other agents and to give it
 * the answers back (it then answers the user itself): its reply carries `metadata["troupe/delegate"]`
 * (DelegateDirective); the thread runs the orchestration machine and calls the agent again with a
 * message whose `metadata["troupe/delegation"]` holds what each delegate answered (DelegationResults).
 */
import { z } from 'zod';
import { AgentIdSchema, type Message } from './a2a.js';
import { TroupeError, describeZodError, ErrorCodeSchema } from './errors.js';
import { LIMITS } from './limits.js';
import { META } from './metadata.js';

export const DELEGATION_STRATEGIES = ['parallel', 'sequential', 'first_success'] as const;

const DelegateDirectiveSchema = z
  .strictObject({
    agents: z.array(AgentIdSchema).min(1).max(LIMITS.delegateAgents),
    /** Default: the team's orchestration strategy. */
    strategy: z.enum(DELEGATION_STRATEGIES).optional(),
    /** What the delegates get; default: the text of the delegating reply. */
    input: z.string().min(1).max(LIMITS.delegateInputChars).optional(),
  })
  .refine((d) => new Set(d.agents).size === d.agents.length, { message: 'agents must be distinct', path: ['agents'] });
export type DelegateDirective = z.infer<typeof DelegateDirectiveSchema>;

const DelegateResultSchema = z.object({
  agentId: AgentIdSchema,
  success: z.boolean(),
  latencyMs: z.number().nonnegative(),
  /** The delegate's answer (text parts), when it answered. */
  text: z.string().optional(),
  error: z.object({ code: ErrorCodeSchema, message: z.string() }).optional(),
});
export type DelegateResult = z.infer<typeof DelegateResultSchema>;

const DelegationResultsSchema = z.object({
  /** Who delegated, and to whom, in order. */
  delegator: AgentIdSchema,
  strategy: z.enum(DELEGATION_STRATEGIES),
  /** What the delegates were asked. */
  input: z.string().optional(),
  results: z.array(DelegateResultSchema),
  agentsUsed: z.array(AgentIdSchema),
  executionTimeMs: z.number().nonnegative(),
  latencyMs: z.record(z.string(), z.number().nonnegative()),
});
export type DelegationResults = z.infer<typeof DelegationResultsSchema>;

/** The delegation an agent's reply asks for, if any. Throws EXTENSION_PARSE_ERROR when it is malformed. */
export function readDelegateDirective(message: Message): DelegateDirective | undefined {
  const raw = message.metadata?.[META.delegate];
  if (raw === undefined) return undefined;
  const parsed = DelegateDirectiveSchema.safeParse(raw);
  if (!parsed.success) throw new TroupeError('EXTENSION_PARSE_ERROR', `invalid ${META.delegate}: ${describeZodError(parsed.error)}`);
  return parsed.data;
}

/** What a delegating agent's delegates answered, when the message brings it back. */
export function readDelegationResults(message: Message): DelegationResults | undefined {
  const slot = message.metadata?.[META.delegation];
  // Most messages carry none: no parse (and no failure object) for an absent slot.
  if (slot === undefined) return undefined;
  const parsed = DelegationResultsSchema.safeParse(slot);
  return parsed.success ? parsed.data : undefined;
}
