/**
 * Who may publish and subscribe to what: the one table of role permissions. The broker enforces it:
 * `creds.ts` writes each role's rules into the user's JWT, and nats-server refuses everything else. The
 * subject layout is the subjects of src/transport/subjects.ts (tenant t = one NATS account):
 *
 *   troupe.t.in.P.T          client P sends to its thread T (server maps it to troupe.t.in.P.T.<partition>)
 *   troupe.t.out.P.T         every event of thread T, whose owner is P
 *   troupe.t.req.P.<verb>    owner-checked requests of P (task, cancel)
 *   troupe.t.agent.A         requests for agent A; the one answer goes back on the request's reply subject
 *   troupe.t.chunks.A.>      chunks agent A streams during a call (the call names the subject in Troupe-Chunks)
 *   troupe.t.registry.A      announce/goodbye of agent A
 *   troupe.t.hello           a node asks agents to announce now
 *   troupe.t.ctl.<verb>      diagnostics and control
 *   troupe.t.nodes.>         between nodes only (whether a node published an answer: nodes.answered.<node>,
 *                            and the marker of each published answer: nodes.published.<thread>)
 *   troupe.t.inspect.>       inspection events (agents only under troupe.t.inspect.agent.A.>)
 *   _INBOX_P.>               the private reply inbox of client P (nats.js `inboxPrefix: _INBOX_P`)
 *
 * nats-server 2.9 checks a publish against the subject AFTER the account's subject mapping: a client's
 * publish to troupe.t.in.P.T is checked as troupe.t.in.P.T.<n>, so the client needs `in.P.*.*` as well
 * as `in.P.*` (newer servers check the subject as published; both forms keep the table right for both).
 * Allowing the 6-token form does not let a client pick its partition: the account also maps
 * `troupe.t.in.*.*.*` onto the right partition (creds.ts `partitionMappings`). test/permissions.roles.test.ts
 * checks every role against every subject class on a real server.
 */
import { idProblem, isGatewayPrincipal, type IdKind } from '../protocol/ids.js';
import { SUBJECT_PREFIX } from '../transport/subjects.js';

/** Roles a tenant's users have. `system` is the one user of the system account (claims updates). */
export const ROLES = ['node', 'agent', 'client', 'gateway', 'operator'] as const;
export type Role = (typeof ROLES)[number];
export type AnyRole = Role | 'system';

interface SubjectRules {
  allow: string[];
  deny: string[];
}

/**
 * Replies a user may send without a publish permission: to the reply subject of a message it received,
 * at most `max` messages, for `ttlMs` after it received the message. nats-server treats `max <= 0` and
 * `ttl <= 0` as unlimited, but a 0 in a JWT means "default" (1 message, 2 minutes), so both are explicit.
 */
export interface ResponseRules {
  max: number;
  ttlMs: number;
}

export interface RolePermissions {
  pub: SubjectRules;
  sub: SubjectRules;
  resp?: ResponseRules;
}

/**
 * What an agent may send back on one request's reply subject: its one answer. Streamed chunks go to
 * `chunks.A.>` instead (a publish permission, no per-request state). One reply matters: nats-server keeps
 * an entry per request an agent received until the entry has used its replies or its ttl has passed, and
 * walks every entry on each prune (every 4,096 requests or second). With room for many replies nothing is
 * freed before the ttl, so at thousands of calls a second the map holds millions of entries, the server's
 * memory grows with it and an agent's call rate falls to a fraction within seconds (bench/PROFILE.md).
 * With one reply an answered request's entry goes at the next
 * prune. The ttl bounds how long after a request a slow agent may still answer (keep it above the nodes'
 * agent timeout, 30 s by default); only unanswered requests live that long.
 */
const AGENT_RESPONSES: ResponseRules = { max: 1, ttlMs: 10 * 60_000 };

/** Which id rule (protocol/ids.ts) a role's user name follows: agents are agent ids, the rest principals. */
export function idKindOf(role: AnyRole): IdKind {
  return role === 'agent' ? 'agent' : 'principal';
}

function checkId(kind: IdKind, value: string): string {
  const problem = idProblem(kind, value);
  if (problem) throw new RangeError(problem);
  return value;
}

/** The reply inbox prefix of principal P: its connections use nats.js `inboxPrefix: inboxPrefix(P)`. */
export function inboxPrefix(principal: string): string {
  return `_INBOX_${checkId('principal', principal)}`;
}

interface Scope {
  /** `troupe.<tenant>` */
  t: string;
  id: string;
  responses: ResponseRules;
}

const only = (...allow: string[]): SubjectRules => ({ allow, deny: [] });

/** The table. Everything not allowed here is refused by the server. */
const TABLE: { readonly [R in AnyRole]: (s: Scope) => RolePermissions } = {
  // The data plane of its tenant: runs threads, routes, calls agents, answers requests and ctl.
  node: () => ({ pub: only('>'), sub: only('>') }),
  // Its own inbox and the node's hello; its own registry entry, chunks and inspection events; one reply
  // on the reply subject of each request it received.
  agent: ({ t, id, responses }) => ({
    pub: only(`${t}.registry.${id}`, `${t}.chunks.${id}.>`, `${t}.inspect.agent.${id}.>`),
    sub: only(`${t}.agent.${id}`, `${t}.hello`),
    resp: { ...responses },
  }),
  // Its own threads: send in (both forms, see the header), owner-checked requests, its threads' events
  // and the replies to its own requests. Never `_INBOX.>`, ctl or another principal's subjects.
  client: ({ t, id }) => ({
    pub: only(`${t}.in.${id}.*`, `${t}.in.${id}.*.*`, `${t}.req.${id}.*`),
    sub: only(`${t}.out.${id}.*`, `${inboxPrefix(id)}.>`),
  }),
  // A client that fronts many users (`troupe gateway`): the subjects of a client. What sets it apart is
  // its name, `gateway` or `gateway-<name>` (protocol/ids.ts `isGatewayPrincipal`), which only this role
  // gets: the node lets only those principals name a user in the Troupe-User header, and the broker lets
  // only this role's credentials publish under them.
  gateway: (s) => TABLE.client(s),
  // Diagnostics and control: ctl requests out (and `hello`, which agents answer with their status for
  // `troupe ps`), inspection events and the replies to its requests in.
  operator: ({ t, id }) => ({
    pub: only(`${t}.ctl.>`, `${t}.hello`),
    sub: only(`${t}.inspect.>`, `${inboxPrefix(id)}.>`),
  }),
  // The system account's user: pushes account JWTs ($SYS.REQ.CLAIMS.UPDATE) and reads server events.
  system: () => ({ pub: only('$SYS.REQ.>'), sub: only('_INBOX.>', '$SYS.>') }),
};

export interface RolePermissionOptions {
  /** Agents only: override AGENT_RESPONSES (e.g. a short ttl in a test). */
  responses?: ResponseRules;
}

/** The permissions of user `id` with `role` in `tenant`. Throws a RangeError for an invalid id or tenant (protocol/ids.ts). */
export function rolePermissions(role: AnyRole, tenant: string, id: string, opts: RolePermissionOptions = {}): RolePermissions {
  const t = `${SUBJECT_PREFIX}.${checkId('tenant', tenant)}`;
  const rules = TABLE[role];
  if (!rules) throw new RangeError(`unknown role "${String(role)}": use one of ${[...ROLES, 'system'].join(', ')}`);
  const responses = opts.responses ?? AGENT_RESPONSES;
  if (!Number.isSafeInteger(responses.max) || responses.max < 1 || !Number.isSafeInteger(responses.ttlMs) || responses.ttlMs < 1) {
    throw new RangeError('agent responses need max >= 1 and ttlMs >= 1 (0 would mean the server default of one reply)');
  }
  checkId(idKindOf(role), id);
  if ((role === 'gateway') !== isGatewayPrincipal(id) && role !== 'agent') {
    throw new RangeError(
      role === 'gateway' ? `a gateway is named "gateway" or "gateway-<name>", not "${id}"` : `the name "${id}" is kept for gateways (role gateway)`,
    );
  }
  return rules({ t, id, responses });
}
