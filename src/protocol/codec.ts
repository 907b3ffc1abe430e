/** Encoding and validated decoding of wire payloads. Every boundary goes through `decode`. */
import type { z } from 'zod';
import { TroupeError, describeZodError } from './errors.js';
import { LIMITS, checkDepth } from './limits.js';

/** Default largest payload the mesh accepts (NATS' own default max_payload is 1 MiB). */
export const DEFAULT_MAX_PAYLOAD = LIMITS.payloadBytes;

const encoder = new TextEncoder();
const decoder = new TextDecoder();

export function encodeJson(value: unknown): Uint8Array {
  return encoder.encode(JSON.stringify(value));
}

export function decodeText(data: Uint8Array): string {
  return decoder.decode(data);
}

/**
 * Parses JSON and validates it against a schema. Malformed JSON and schema violations become
 * INVALID_MESSAGE, oversized payloads PAYLOAD_TOO_LARGE; nothing is thrown untyped.
 */
export function decode<S extends z.ZodType>(schema: S, data: Uint8Array, what: string, maxBytes = DEFAULT_MAX_PAYLOAD): z.infer<S> {
  if (data.byteLength > maxBytes) {
    throw new TroupeError('PAYLOAD_TOO_LARGE', `${what} is ${data.byteLength} bytes; the limit is ${maxBytes}`, {
      size: data.byteLength,
      limit: maxBytes,
    });
  }
  let json: unknown;
  try {
    json = JSON.parse(decoder.decode(data));
  } catch (err) {
    throw new TroupeError('INVALID_MESSAGE', `${what} is not valid JSON: ${(err as Error).message}`);
  }
  // JSON.parse copes with any nesting; what comes after (zod, JSON.stringify, structuredClone) recurses.
  checkDepth(json, what);
  return parseWith(schema, json, what);
}

function parseWith<S extends z.ZodType>(schema: S, value: unknown, what: string): z.infer<S> {
  const parsed = schema.safeParse(value);
  if (!parsed.success) {
    throw new TroupeError('INVALID_MESSAGE', `${what} does not match the schema: ${describeZodError(parsed.error)}`);
  }
  return parsed.data;
}
