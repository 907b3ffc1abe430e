/**
 * Callers who come with a JWT from an identity provider (OpenID Connect, OAuth 2.0 access tokens): the
 * gateway checks the token's signature against the issuer's published keys (its JWKS, fetched and cached
 * by `jose`, fetched again when a token names a key it has not seen: key rotation needs no restart), its
 * issuer, audience, expiry and not-before, and takes the caller from its claims:
 *
 *   user    `sub` (or `userClaim`): the end user, whose threads are theirs alone
 *   tenant  `tenantClaim` when set (a tenant the gateway serves), else the gateway's default tenant
 *
 * A claim is not trusted for being signed: each is checked against the id rules (src/protocol/ids.ts)
 * before it names anything. A token that fails says why (`WWW-Authenticate: Bearer error="invalid_token"`,
 * RFC 6750); keys that cannot be fetched are the gateway's trouble, not the caller's (503, retry).
 */
import { createRemoteJWKSet, errors, jwtVerify, type JWTPayload } from 'jose';
import { idProblem, TroupeError } from '../protocol/index.js';
import type { Caller } from './tokens.js';

export interface JwtAuthOptions {
  /** The `iss` every token must carry (an OpenID Connect issuer URL). */
  issuer: string;
  /** The `aud` a token must carry (one of them). */
  audience: string | string[];
  /** The issuer's JWKS. Default: `jwks_uri` of `<issuer>/.well-known/openid-configuration`. */
  jwksUrl?: string;
  /** The claim naming the tenant (it must be one the gateway serves). Default: none, the default tenant. */
  tenantClaim?: string;
  /** The claim naming the user. Default `sub`. */
  userClaim?: string;
  /** Signature algorithms accepted. Default: RS256, PS256, ES256, EdDSA. */
  algorithms?: string[];
  /** Leeway for `exp` and `nbf`, in seconds. Default 30. */
  clockToleranceS?: number;
  /** How long a fetch of the keys (or of the discovery document) may take. Default 5 s. */
  fetchTimeoutMs?: number;
  /**
   * After fetching the keys, how long a token naming a key not among them is refused without fetching
   * again (tokens with made-up key ids cannot make the gateway hammer the issuer). Default 30 s.
   */
  keysCooldownMs?: number;
}

/** The caller a token stands for, or why it stands for nobody. */
export type JwtOutcome = { ok: true; caller: Caller; subject: string } | JwtRefusal;

/** A token refused: the HTTP status, why (for the caller), and a bounded code (for the metric). */
export interface JwtRefusal {
  ok: false;
  status: 401 | 403 | 503;
  reason: string;
  code: RefusalCode;
}

/** Why a token was refused, as a bounded label (the metric `troupe_gateway_auth_refused_total`). */
type RefusalCode = 'expired' | 'claim' | 'signature' | 'algorithm' | 'malformed' | 'user' | 'tenant' | 'keys_unavailable';

const DEFAULT_ALGORITHMS = ['RS256', 'PS256', 'ES256', 'EdDSA'];
/**
 * Three base64url segments, the last one possibly empty (an unsigned token, refused by name): a JWT in
 * compact form. A static token of that shape is looked up first anyway.
 */
const COMPACT_JWS = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*$/;

export function looksLikeJwt(token: string): boolean {
  return COMPACT_JWS.test(token);
}

export class JwtAuth {
  readonly #opts: JwtAuthOptions;
  readonly #keys: ReturnType<typeof createRemoteJWKSet>;
  readonly #algorithms: string[];

  private constructor(opts: JwtAuthOptions, jwksUrl: URL) {
    this.#opts = opts;
    this.#algorithms = opts.algorithms ?? DEFAULT_ALGORITHMS;
    this.#keys = createRemoteJWKSet(jwksUrl, { timeoutDuration: opts.fetchTimeoutMs ?? 5_000, cooldownDuration: opts.keysCooldownMs ?? 30_000 });
  }

  /** Checks the options and finds the JWKS (discovery, when no `jwksUrl`); throws saying what is wrong. */
  static async create(opts: JwtAuthOptions): Promise<JwtAuth> {
    const issuer = parseUrl(opts.issuer, 'the JWT issuer');
    if ((Array.isArray(opts.audience) ? opts.audience : [opts.audience]).every((a) => !a))
      throw new TroupeError('CONFIG_INVALID', 'gateway: a JWT issuer needs an audience (--jwt-audience): tokens for other services would be let in');
    if (opts.jwksUrl) return new JwtAuth(opts, parseUrl(opts.jwksUrl, 'the JWKS URL'));
    const discovery = new URL(`${issuer.href.replace(/\/+$/, '')}/.well-known/openid-configuration`);
    let doc: unknown;
    try {
      const res = await fetch(discovery, { signal: AbortSignal.timeout(opts.fetchTimeoutMs ?? 5_000) });
      if (res.status !== 200) throw new Error(`HTTP ${res.status}`);
      doc = await res.json();
    } catch (err) {
      throw new Error(`gateway: cannot read the issuer's OpenID configuration at ${discovery.href} (${(err as Error).message}): give its keys with --jwks-url`);
    }
    const { issuer: named, jwks_uri: jwksUri } = (doc ?? {}) as { issuer?: unknown; jwks_uri?: unknown };
    // OpenID Connect Discovery §4.3: the document's issuer is the one asked for, or its keys are not its keys.
    if (named !== opts.issuer)
      throw new TroupeError(
        'CONFIG_INVALID',
        `gateway: the OpenID configuration at ${discovery.href} is for issuer ${JSON.stringify(named)}, not ${opts.issuer}: give --jwt-issuer exactly as the issuer names itself (its tokens' iss)`,
      );
    if (typeof jwksUri !== 'string')
      throw new TroupeError('CONFIG_INVALID', `gateway: the OpenID configuration at ${discovery.href} names no jwks_uri: give the keys with --jwks-url`);
    return new JwtAuth(opts, parseUrl(jwksUri, `jwks_uri of ${discovery.href}`));
  }

  /** What the card says of these tokens. */
  get description(): string {
    return `a JWT from ${this.#opts.issuer} for ${[this.#opts.audience].flat().join(', ')}`;
  }

  async verify(token: string, serves: (tenant: string) => boolean, defaultTenant: string): Promise<JwtOutcome> {
    let claims: JWTPayload;
    try {
      ({ payload: claims } = await jwtVerify(token, this.#keys, {
        issuer: this.#opts.issuer,
        audience: this.#opts.audience,
        algorithms: this.#algorithms,
        clockTolerance: this.#opts.clockToleranceS ?? 30,
        requiredClaims: ['exp'],
      }));
    } catch (err) {
      return keysUnavailable(err)
        ? {
            ok: false,
            status: 503,
            code: 'keys_unavailable',
            reason: `cannot fetch the issuer's keys to check the token (${(err as Error).message}); retry shortly`,
          }
        : { ok: false, status: 401, ...whyRefused(err) };
    }
    const userClaim = this.#opts.userClaim ?? 'sub';
    const user = claims[userClaim];
    const userProblem = idProblem('user', user);
    if (userProblem) return { ok: false, status: 401, code: 'user', reason: `the token's "${userClaim}" claim cannot name a user: ${userProblem}` };
    let tenant = defaultTenant;
    if (this.#opts.tenantClaim) {
      const claimed = claims[this.#opts.tenantClaim];
      const tenantProblem = idProblem('tenant', claimed);
      if (tenantProblem)
        return { ok: false, status: 401, code: 'tenant', reason: `the token's "${this.#opts.tenantClaim}" claim cannot name a tenant: ${tenantProblem}` };
      tenant = claimed as string;
    }
    if (!serves(tenant)) return { ok: false, status: 403, code: 'tenant', reason: `this gateway does not serve tenant "${tenant}"` };
    return { ok: true, caller: { tenant, user: user as string }, subject: `${String(claims.iss)} ${String(user)}` };
  }
}

function parseUrl(value: string, what: string): URL {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new TroupeError('CONFIG_INVALID', `gateway: ${what} "${value}" is not a URL`);
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:')
    throw new TroupeError('CONFIG_INVALID', `gateway: ${what} must be an http(s) URL, not ${url.protocol}`);
  return url;
}

/** The keys could not be had (the issuer down or slow): nothing the caller did. */
function keysUnavailable(err: unknown): boolean {
  if (err instanceof errors.JWKSTimeout) return true;
  // fetch's own failure (connection refused, DNS), and jose's "Expected 200 OK from the JSON Web Key Set…".
  if (err instanceof TypeError && /fetch failed/i.test(err.message)) return true;
  return err instanceof errors.JOSEError && err.code === 'ERR_JOSE_GENERIC' && /JSON Web Key Set/.test(err.message);
}

/** Why a token was refused, for its caller: what failed, never the token. */
function whyRefused(err: unknown): { code: RefusalCode; reason: string } {
  if (err instanceof errors.JWTExpired) return { code: 'expired', reason: 'the token has expired' };
  if (err instanceof errors.JWTClaimValidationFailed) return { code: 'claim', reason: `the token's "${err.claim}" claim is not accepted (${err.reason})` };
  if (err instanceof errors.JOSEAlgNotAllowed) return { code: 'algorithm', reason: 'the token is signed with an algorithm this gateway does not accept' };
  if (err instanceof errors.JWKSNoMatchingKey || err instanceof errors.JWSSignatureVerificationFailed)
    return { code: 'signature', reason: "the token's signature is not from the issuer's keys" };
  if (err instanceof errors.JWTInvalid || err instanceof errors.JWSInvalid) return { code: 'malformed', reason: 'the token is not a valid JWT' };
  return { code: 'malformed', reason: `the token was refused (${err instanceof errors.JOSEError ? err.code : 'unreadable'})` };
}
