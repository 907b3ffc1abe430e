/**
 * Structured answers (agent.yaml `output`, docs/conversation.md): the model is told the JSON Schema its
 * answer must match (and, where the provider supports it, asked for it with OpenAI's `response_format`
 * json_schema); the answer is parsed and checked, and one that does not match is asked for again with
 * what was wrong, `retries` times. The answer that matches goes to the user as text and as an A2A data part.
 */
import { z } from 'zod';
import { describeZodError } from '../protocol/errors.js';
import { DEFAULT_OUTPUT_RETRIES, jsonSchemaValidator, type OutputConfig } from '../config/conversation.js';
import type { ChatMessage, ResponseFormat } from '../model/types.js';

export interface OutputSpec {
  format: ResponseFormat;
  validator: z.ZodType;
  retries: number;
}

/** From agent.yaml's `output` (a JSON Schema), or from a zod schema given in code (sent as its JSON Schema). */
export function outputSpec(config: OutputConfig | { zod: z.ZodType; name?: string; retries?: number }): OutputSpec {
  if ('zod' in config) {
    const schema = z.toJSONSchema(config.zod, { target: 'draft-7', unrepresentable: 'any' }) as Record<string, unknown>;
    delete schema.$schema;
    return { format: { name: config.name ?? 'answer', schema }, validator: config.zod, retries: config.retries ?? DEFAULT_OUTPUT_RETRIES };
  }
  return { format: { name: config.name, schema: config.schema }, validator: jsonSchemaValidator(config.schema), retries: config.retries };
}

/** The system prompt's paragraph that asks for the structured answer. */
export function outputInstruction(spec: OutputSpec): string {
  return `Write your final answer as one JSON object, and nothing else, that matches this JSON Schema:\n${JSON.stringify(spec.format.schema)}`;
}

/** A model's answer without the Markdown fence it may wrap JSON in. */
function unfenced(text: string): string {
  const t = text.trim();
  const m = /^```[A-Za-z]*\s*\n([\s\S]*?)\n?```$/.exec(t);
  return m ? m[1]!.trim() : t;
}

export type CheckedAnswer = { ok: true; data: Record<string, unknown>; text: string } | { ok: false; error: string };

/** The answer as the object it must be, or what is wrong with it. */
export function checkAnswer(text: string, spec: OutputSpec): CheckedAnswer {
  const body = unfenced(text);
  let value: unknown;
  try {
    value = JSON.parse(body);
  } catch (err) {
    return { ok: false, error: `it is not JSON (${(err as Error).message})` };
  }
  const parsed = spec.validator.safeParse(value);
  if (!parsed.success) return { ok: false, error: describeZodError(parsed.error) };
  if (typeof parsed.data !== 'object' || parsed.data === null || Array.isArray(parsed.data)) return { ok: false, error: 'it is not a JSON object' };
  return { ok: true, data: parsed.data as Record<string, unknown>, text: body };
}

/** The messages that ask again after an answer that did not match. */
export function repairMessages(answer: string, error: string): ChatMessage[] {
  return [
    { role: 'assistant', content: answer },
    { role: 'user', content: `That answer does not match the required JSON Schema: ${error}. Answer again with only the corrected JSON object.` },
  ];
}
