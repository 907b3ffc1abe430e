/**
 * A tool's declared parameters (`name: { type: str|int|float|bool|array|object, description }`) as the
 * JSON Schema the model sees, and as a zod schema that checks the arguments the model sends back.
 * Every declared parameter is required; extra arguments are dropped.
 */
import { z } from 'zod';
import type { ParameterConfig } from '../../config/agent.js';
import { describeZodError } from '../../protocol/errors.js';
import type { JsonSchemaObject } from '../../model/types.js';

const JSON_TYPES: Record<ParameterConfig['type'], Record<string, unknown>> = {
  str: { type: 'string' },
  int: { type: 'integer' },
  float: { type: 'number' },
  bool: { type: 'boolean' },
  array: { type: 'array', items: {} },
  object: { type: 'object' },
};

const ZOD_TYPES: Record<ParameterConfig['type'], () => z.ZodType> = {
  str: () => z.string(),
  int: () => z.int(),
  float: () => z.number(),
  bool: () => z.boolean(),
  array: () => z.array(z.unknown()),
  object: () => z.record(z.string(), z.unknown()),
};

export function parametersSchema(params: Record<string, ParameterConfig> | undefined): JsonSchemaObject {
  const entries = Object.entries(params ?? {});
  return {
    type: 'object',
    properties: Object.fromEntries(entries.map(([name, p]) => [name, { ...JSON_TYPES[p.type], description: p.description }])),
    required: entries.map(([name]) => name),
    ...(entries.length ? { additionalProperties: false } : {}),
  };
}

/** Parses the model's argument text; throws an Error whose message the model can act on. */
export function parseArguments(text: string, params: Record<string, ParameterConfig> | undefined): Record<string, unknown> {
  let value: unknown;
  try {
    value = JSON.parse(text.trim() === '' ? '{}' : text);
  } catch {
    throw new Error(`the arguments are not valid JSON: ${text.slice(0, 200)}`);
  }
  if (!value || typeof value !== 'object' || Array.isArray(value)) throw new Error('the arguments must be a JSON object');
  if (!params || Object.keys(params).length === 0) return value as Record<string, unknown>;
  const schema = z.object(Object.fromEntries(Object.entries(params).map(([name, p]) => [name, ZOD_TYPES[p.type]()])));
  const parsed = schema.safeParse(value);
  if (!parsed.success) throw new Error(`invalid arguments: ${describeZodError(parsed.error)}`);
  return parsed.data as Record<string, unknown>;
}
