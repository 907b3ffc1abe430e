/**
 * Who is calling: the gateway's token file maps a bearer token to a tenant and a user,
 *
 *   { "<token>": { "tenant": "demo", "user": "alice" } }
 *
 * and still reads the first form, `{ "<token>": "demo" }` (tenant only: such a token acts as the gateway's
 * principal itself, so every old-form token of a tenant shares its tasks). Tokens are kept by their
 * SHA-256 digest: the map holds no token, and the digest names a token in logs and rate limits.
 */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { z } from 'zod';
import { describeZodError, idSchema, TroupeError } from '../protocol/index.js';

/** The identity a token stands for. */
export interface Caller {
  tenant: string;
  /** The end user; threads then belong to `<principal>/<user>`. Absent: the principal's own threads. */
  user?: string;
}

const CallerSchema = z.strictObject({ tenant: idSchema('tenant'), user: idSchema('user').optional() });
const TokenFileSchema = z.record(z.string().min(1, 'a token may not be empty'), z.union([idSchema('tenant'), CallerSchema]));

export type TokenEntries = Record<string, string | Caller>;

/** Reads and checks a token file; throws saying what is wrong (the CLI turns it into exit code 2). */
export function loadTokens(path: string): Record<string, Caller> {
  let json: unknown;
  try {
    json = JSON.parse(readFileSync(path, 'utf8'));
  } catch (err) {
    throw new TroupeError(
      'CONFIG_INVALID',
      `cannot read the token file ${path} (${(err as Error).message}): it must be JSON like {"<token>": {"tenant": "demo", "user": "alice"}}`,
      { file: path },
      { cause: err },
    );
  }
  const parsed = TokenFileSchema.safeParse(json);
  if (!parsed.success)
    throw new TroupeError(
      'CONFIG_INVALID',
      `the token file ${path} is invalid: ${describeZodError(parsed.error)}; expected {"<token>": {"tenant": "<tenant>", "user": "<user>"}}`,
      { file: path },
    );
  const entries = Object.entries(parsed.data);
  if (entries.length === 0) throw new TroupeError('CONFIG_INVALID', `the token file ${path} has no tokens: nobody could call the gateway`, { file: path });
  return Object.fromEntries(entries.map(([token, value]) => [token, typeof value === 'string' ? { tenant: value } : value]));
}

/** A short, stable name for a token that reveals nothing about it. */
export function tokenDigest(token: string): string {
  return createHash('sha256').update(token).digest('hex');
}

/**
 * The longest Authorization header read: an identity provider's JWT with many claims (groups, roles) runs
 * to a few KiB; past this it is refused as unknown, unread.
 */
const MAX_AUTHORIZATION = 8 * 1024;

/** `Bearer <token>` out of an Authorization header (one token, no spaces in it), else undefined. */
export function bearerToken(authorization: string | undefined): string | undefined {
  if (!authorization || authorization.length > MAX_AUTHORIZATION) return undefined;
  const match = /^Bearer[ \t]+([!-~]+)[ \t]*$/i.exec(authorization);
  return match?.[1];
}

export class BearerTokens {
  private readonly byDigest = new Map<string, Caller>();

  constructor(entries: TokenEntries) {
    for (const [token, value] of Object.entries(entries)) {
      if (!token) throw new TroupeError('CONFIG_INVALID', 'gateway: an empty token would let anyone in: remove it from tokens');
      this.byDigest.set(tokenDigest(token), typeof value === 'string' ? { tenant: value } : value);
    }
  }

  get size(): number {
    return this.byDigest.size;
  }

  /** The caller and the token's digest for an Authorization header, or undefined for a missing or unknown token. */
  lookup(authorization: string | undefined): { caller: Caller; digest: string } | undefined {
    const token = bearerToken(authorization);
    if (!token) return undefined;
    const digest = tokenDigest(token);
    const caller = this.byDigest.get(digest);
    return caller ? { caller, digest } : undefined;
  }

  has(token: string): boolean {
    return this.byDigest.has(tokenDigest(token));
  }

  tenants(): Set<string> {
    return new Set([...this.byDigest.values()].map((c) => c.tenant));
  }
}
