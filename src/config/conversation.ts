/**
 * The parts of `agent.yaml` that shape an agent's conversation, beyond seed 002 (all optional):
 *
 *   memory:                # what the agent remembers of its thread (docs/conversation.md)
 *     max_messages: 20     # earlier messages given to the model as they were written
 *     max_tokens: 4000     # ... and at most this many tokens of them (estimated: 4 characters a token)
 *     summarize: true      # older turns folded into a summary by the agent's model (false: dropped)
 *   output:                # a structured answer
 *     schema: { type: object, properties: {...}, required: [...] }   # JSON Schema
 *     name: answer         # the schema's name for the provider (response_format json_schema)
 *     retries: 2           # an answer that does not match is asked for again, with the error, this often
 *
 * With no `memory` block the defaults below apply (memory is on); `max_messages: 0` turns it off.
 */
import { z } from 'zod';
import type { CheckContext, PathSegment } from './load.js';

export const DEFAULT_MEMORY = { max_messages: 20, max_tokens: 4_000, summarize: true } as const;
export const DEFAULT_OUTPUT_RETRIES = 2;
/** How long a tool call waits for a person's approval (agent.yaml `approval_timeout_ms`). */
export const DEFAULT_APPROVAL_TIMEOUT_MS = 10 * 60_000;
/** Characters per token, for a budget estimated without the model's tokenizer. */
export const CHARS_PER_TOKEN = 4;

export const MemoryConfigSchema = z.strictObject({
  max_messages: z.int().min(0).max(100).default(DEFAULT_MEMORY.max_messages),
  max_tokens: z.int().min(1).max(1_000_000).default(DEFAULT_MEMORY.max_tokens),
  summarize: z.boolean().default(DEFAULT_MEMORY.summarize),
});
export type MemoryConfig = z.infer<typeof MemoryConfigSchema>;

export const OutputConfigSchema = z.strictObject({
  /** A JSON Schema whose root is an object (checked by `checkOutput`). */
  schema: z.record(z.string(), z.unknown()),
  name: z
    .string()
    .regex(/^[A-Za-z0-9_-]{1,64}$/, '{value} may only contain letters, digits, _ and - (at most 64)')
    .default('answer'),
  retries: z.int().min(0).max(5).default(DEFAULT_OUTPUT_RETRIES),
});
export type OutputConfig = z.infer<typeof OutputConfigSchema>;

/** The memory an agent runs with: its own block, or the defaults. */
export function memoryOf(config: { memory?: MemoryConfig | undefined }): MemoryConfig {
  return config.memory ?? { ...DEFAULT_MEMORY };
}

/** The zod schema a JSON Schema becomes (zod's own converter); throws on a schema it cannot read. */
export function jsonSchemaValidator(schema: Record<string, unknown>): z.ZodType {
  return z.fromJSONSchema(schema as Parameters<typeof z.fromJSONSchema>[0]);
}

/** `output.schema` must be a JSON Schema for an object that the validator can read. */
export function checkOutput(ctx: CheckContext, output: unknown): void {
  if (typeof output !== 'object' || output === null || Array.isArray(output)) return;
  const schema = (output as Record<string, unknown>).schema;
  if (typeof schema !== 'object' || schema === null || Array.isArray(schema)) return;
  const path: PathSegment[] = ['output', 'schema'];
  if ((schema as Record<string, unknown>).type !== 'object') {
    ctx.report([...path], 'constraints', 'must describe an object (type: object): the answer is sent as an A2A data part, which holds an object');
    return;
  }
  try {
    jsonSchemaValidator(schema as Record<string, unknown>);
  } catch (err) {
    ctx.report([...path], 'constraints', `is not a JSON Schema Troupe can check answers against: ${(err as Error).message}`);
  }
}
