/**
 * The one rule for identifiers that reach a subject, a KV key, a header or a log: tenants, agents,
 * threads, principals. Each is a single NATS subject token of `[A-Za-z0-9_-]`, with a length cap that
 * keeps every derived subject (the longest is a KV key, `$KV.troupe_threads.<tenant>.<thread>`, or an
 * inbound partition subject) far below the server's 4 KiB control-line limit. Ids are checked once,
 * where they enter (NATS ingress, gateway, registry, agent replies, CLI); everything inside trusts them.
 *
 * Message ids are chosen by clients (A2A says "unique", nothing more), so they may hold any printable
 * character; they travel in headers and payloads, never in subjects, and are capped too.
 */
import { z } from 'zod';
import { TroupeError } from './errors.js';

export const ID_LIMITS = {
  tenant: 32,
  /** 100: an agent.yaml `name` (1–100 characters, seed 002) is the agent's id as written, never shortened. */
  agent: 100,
  thread: 128,
  principal: 64,
  user: 128,
  message: 256,
} as const;
export type IdKind = keyof typeof ID_LIMITS;

const TOKEN = /^[A-Za-z0-9_-]+$/;
/** Printable ASCII without spaces: safe in a header, a log line and a record key. */
const PRINTABLE = /^[\x21-\x7e]+$/;

const KIND_NAMES: Record<IdKind, string> = {
  tenant: 'tenant',
  agent: 'agent id',
  thread: 'thread id',
  principal: 'principal',
  user: 'user id',
  message: 'message id',
};

/** Why `value` is not a valid id of this kind, or undefined when it is. */
export function idProblem(kind: IdKind, value: unknown): string | undefined {
  const name = KIND_NAMES[kind];
  if (typeof value !== 'string' || value.length === 0) return `${name} is missing`;
  const max = ID_LIMITS[kind];
  if (value.length > max) return `${name} is ${value.length} characters long; the limit is ${max}`;
  const rule = kind === 'message' || kind === 'user' ? PRINTABLE : TOKEN;
  if (!rule.test(value)) {
    return kind === 'message' || kind === 'user'
      ? `${name} ${preview(value)} may only hold printable characters without spaces`
      : `${name} ${preview(value)} may only use A-Z, a-z, 0-9, _ and -`;
  }
  return undefined;
}

/**
 * The principals that front many users (the gateway role, `troupe creds add-gateway`): `gateway` and
 * `gateway-<name>`. Only they may name an end user in the `Troupe-User` header. The name is the proof: the
 * broker lets only the holder of that principal's credentials publish under `in.<P>` and `req.<P>`, and the
 * credential store gives these names to the gateway role alone.
 */
export const GATEWAY_PRINCIPAL = 'gateway';

/** Whether principal P is in the gateways' name space (case-sensitive, as the subject token is). */
export function isGatewayPrincipal(principal: string): boolean {
  return principal === GATEWAY_PRINCIPAL || principal.startsWith(`${GATEWAY_PRINCIPAL}-`);
}

export function isValidId(kind: IdKind, value: unknown): value is string {
  return idProblem(kind, value) === undefined;
}

/** Returns the id, or throws INVALID_MESSAGE saying what is wrong with it. */
export function checkId(kind: IdKind, value: unknown): string {
  const problem = idProblem(kind, value);
  if (problem) throw new TroupeError('INVALID_MESSAGE', problem, { field: kind });
  return value as string;
}

/** A zod schema for one id kind, for wire schemas. */
export function idSchema(kind: IdKind) {
  return z.string().superRefine((value, ctx) => {
    const problem = idProblem(kind, value);
    if (problem) ctx.addIssue({ code: 'custom', message: problem });
  });
}

/** A short, log-safe rendering of a value that failed validation. */
function preview(value: string): string {
  const shown = value.length > 40 ? `${value.slice(0, 40)}…` : value;
  return JSON.stringify(shown.replace(/[^\x20-\x7e]/g, '?'));
}
