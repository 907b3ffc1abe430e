/** The gateway's token file: `{ "<bearer token>": "<tenant>" }`, read once at start. */
import { readFileSync } from 'node:fs';
import { z } from 'zod';
import { describeZodError } from '../protocol/index.js';

const TokenFileSchema = z.record(
  z.string().min(1, 'a token may not be empty'),
  z.string().regex(/^[A-Za-z0-9_-]+$/, 'a tenant is one subject token: A-Z, a-z, 0-9, _ and -'),
);

export function loadTokens(path: string): Record<string, string> {
  let json: unknown;
  try {
    json = JSON.parse(readFileSync(path, 'utf8'));
  } catch (err) {
    throw new Error(`cannot read the token file ${path} (${(err as Error).message}): it must be JSON like {"<token>": "demo"}`);
  }
  const parsed = TokenFileSchema.safeParse(json);
  if (!parsed.success) throw new Error(`the token file ${path} is invalid: ${describeZodError(parsed.error)}; expected {"<token>": "<tenant>"}`);
  if (Object.keys(parsed.data).length === 0) throw new Error(`the token file ${path} has no tokens: nobody could call the gateway`);
  return parsed.data;
}
