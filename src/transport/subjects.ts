/**
 * The one place subject names are built and read. Every token is an id checked by
 * `protocol/ids.ts`; a builder given a bad id throws a typed INVALID_MESSAGE (never a plain Error), and
 * ids are meant to be checked where they enter, so inside the mesh that never happens.
 *
 * Who may publish and subscribe to which of these is the broker's business (src/security/roles.ts):
 * a client principal P only ever touches `in.P.*`, `out.P.>`, `req.P.*` and its own `_INBOX_P.>`; an
 * agent A only its inbox, `registry.A`, `hello`, `chunks.A.>` and one reply to each request it received.
 */
import { checkId, idProblem, isValidId } from '../protocol/ids.js';

export const SUBJECT_PREFIX = 'troupe';

const t = (tenant: string) => `${SUBJECT_PREFIX}.${checkId('tenant', tenant)}`;

export const subjects = {
  /** A user message into thread T from principal P. The server maps it to `…in.P.T.<partition>`. */
  threadIn: (tenant: string, principal: string, threadId: string) => `${t(tenant)}.in.${checkId('principal', principal)}.${checkId('thread', threadId)}`,
  /** Every inbound partition subject (the TROUPE_IN stream's subject). */
  threadInStream: (tenant: string) => `${t(tenant)}.in.*.*.*`,
  /** The inbound messages of one partition (a consumer's filter). */
  threadInPartition: (tenant: string, partition: number) => `${t(tenant)}.in.*.*.${partition}`,
  /** Without durable ingress (embedded, `--no-durable`): what a node subscribes to. */
  threadInAll: (tenant: string) => `${t(tenant)}.in.*.*`,
  /** Every event of thread T, for its owner P (status updates, route steps, streamed chunks, the answer). */
  threadOut: (tenant: string, principal: string, threadId: string) => `${t(tenant)}.out.${checkId('principal', principal)}.${checkId('thread', threadId)}`,
  /** Owner-checked requests of principal P about its threads (`task`, `cancel`). */
  clientRequest: (tenant: string, principal: string, verb: string) => `${t(tenant)}.req.${checkId('principal', principal)}.${checkId('agent', verb)}`,
  clientRequestAll: (tenant: string, verb: string) => `${t(tenant)}.req.*.${checkId('agent', verb)}`,
  agentInbox: (tenant: string, agentId: string) => `${t(tenant)}.agent.${checkId('agent', agentId)}`,
  /**
   * Where agent A streams the chunks of one call: `caller` is the calling node's token, `call` the call's.
   * The broker lets only A publish below `chunks.A` (an agent answers each request once, on its reply
   * subject; chunks travel here so the server need not keep a reply permission open per request).
   */
  agentChunks: (tenant: string, agentId: string, caller: string, call: string) =>
    `${t(tenant)}.chunks.${checkId('agent', agentId)}.${checkId('thread', caller)}.${checkId('thread', call)}`,
  /** Everything agent A may stream to (its publish permission). */
  agentChunksOf: (tenant: string, agentId: string) => `${t(tenant)}.chunks.${checkId('agent', agentId)}.>`,
  /** The chunks of every call of one caller, whichever agent streams them (the caller's one subscription). */
  agentChunksFor: (tenant: string, caller: string) => `${t(tenant)}.chunks.*.${checkId('thread', caller)}.*`,
  /** Queue group shared by replicas of one agent. */
  agentQueue: (agentId: string) => `agent-${checkId('agent', agentId)}`,
  /** Agent A's announcements; the broker lets only A publish here, so the id comes from the subject. */
  registry: (tenant: string, agentId: string) => `${t(tenant)}.registry.${checkId('agent', agentId)}`,
  registryAll: (tenant: string) => `${t(tenant)}.registry.*`,
  /** A node starting up asks every agent to announce now. */
  hello: (tenant: string) => `${t(tenant)}.hello`,
  ctl: (tenant: string, verb: string) => `${t(tenant)}.ctl.${checkId('agent', verb)}`,
  /** A node answers here whether it published the answer to a thread's message; only node users may publish or subscribe below `nodes` (operators may publish `ctl.>`, so not there). */
  answeredBy: (tenant: string, nodeId: string) => `${t(tenant)}.nodes.answered.${checkId('thread', nodeId)}`,
  /** After a node published the final answer of thread T: which message it answered (kept by the stream TROUPE_ANSWERED; nodes only). */
  answerPublished: (tenant: string, threadId: string) => `${t(tenant)}.nodes.published.${checkId('thread', threadId)}`,
  answerPublishedAll: (tenant: string) => `${t(tenant)}.nodes.published.*`,
  /** The checkpoints of thread T (kept by the stream TROUPE_CHECKPOINTS; nodes only: others read them through ctl and req). */
  checkpoint: (tenant: string, threadId: string) => `${t(tenant)}.nodes.checkpoint.${checkId('thread', threadId)}`,
  checkpointAll: (tenant: string) => `${t(tenant)}.nodes.checkpoint.*`,
  /** Inspection records of thread T and every actor under it (protocol/inspection.ts). */
  inspectThread: (tenant: string, threadId: string) => `${t(tenant)}.inspect.thread.${checkId('thread', threadId)}`,
  /** Inspection records of one instance of agent A (the broker lets A publish only below `inspect.agent.A`). */
  inspectAgent: (tenant: string, agentId: string, instance: string) => `${t(tenant)}.inspect.agent.${checkId('agent', agentId)}.${checkId('thread', instance)}`,
  /** Every instance of agent A. */
  inspectAgentAll: (tenant: string, agentId: string) => `${t(tenant)}.inspect.agent.${checkId('agent', agentId)}.*`,
  /** Every agent's inspection records. */
  inspectAgents: (tenant: string) => `${t(tenant)}.inspect.agent.>`,
  /** The whole inspection stream of a tenant (operators). */
  inspectAll: (tenant: string) => `${t(tenant)}.inspect.>`,
  /** Dead-lettered inbound messages (stream TROUPE_DLQ), by thread. */
  deadLetter: (tenant: string, threadId: string) => `${t(tenant)}.dlq.${isValidId('thread', threadId) ? threadId : '_invalid'}`,
  deadLetterAll: (tenant: string) => `${t(tenant)}.dlq.>`,
} as const;

/** A connection's private reply inbox prefix: the broker lets principal P subscribe only below it. */
export function inboxPrefixOf(principal: string): string {
  return `_INBOX_${checkId('principal', principal)}`;
}

/** Reads `troupe.<tenant>.chunks.<A>.<caller>.<call>`; undefined when the subject has another shape. */
export function parseAgentChunks(subject: string): { tenant: string; agentId: string; caller: string; call: string } | undefined {
  const parts = subject.split('.');
  if (parts.length !== 6 || parts[0] !== SUBJECT_PREFIX || parts[2] !== 'chunks') return undefined;
  const [, tenant, , agentId, caller, call] = parts as [string, string, string, string, string, string];
  if (!isValidId('tenant', tenant) || !isValidId('agent', agentId) || !isValidId('thread', caller) || !isValidId('thread', call)) return undefined;
  return { tenant, agentId, caller, call };
}

export interface ParsedThreadIn {
  principal: string;
  threadId: string;
  /** Present on a partition subject (`…in.P.T.<n>`). */
  partition?: number;
}

/**
 * Reads `troupe.<tenant>.in.<P>.<T>[.<n>]`. Undefined when the subject does not have that shape or a
 * token is not a valid id: the caller answers with a typed error instead of building subjects from it.
 */
export function parseThreadIn(subject: string): ParsedThreadIn | { problem: string } {
  const parts = subject.split('.');
  if (parts.length !== 5 && parts.length !== 6) return { problem: `unexpected inbound subject shape` };
  if (parts[0] !== SUBJECT_PREFIX || parts[2] !== 'in') return { problem: `not an inbound thread subject` };
  const [, , , principal, threadId, partition] = parts;
  if (!isValidId('principal', principal)) return { problem: `invalid principal in the subject` };
  if (!isValidId('thread', threadId)) return { problem: idProblem('thread', threadId) ?? 'invalid thread id' };
  if (partition === undefined) return { principal, threadId };
  if (!/^\d{1,4}$/.test(partition)) return { problem: 'invalid partition token' };
  return { principal, threadId, partition: Number(partition) };
}

/** A NATS literal subject token: not empty, no wildcard, no dot, no whitespace or control character. */
function isLiteralToken(token: string): boolean {
  if (token.length === 0 || token === '*' || token === '>') return false;
  for (let i = 0; i < token.length; i++) {
    const c = token.charCodeAt(i);
    if (c <= 0x20 || c === 0x7f || c === 0x2e) return false;
  }
  return !/\s/u.test(token);
}

/**
 * Where to tell the sender of an inbound message that it was refused when its tokens break the id rule
 * (`in.<P>.a=b`, a 4,000-character thread id): `troupe.<tenant>.out.<P>.<T>` built from the subject's
 * own tokens, the subject a sender of thread T listens on, and one the broker lets P read (`out.P.>`).
 * Undefined when the subject has another shape or another tenant, or a token is not a literal one.
 */
export function rejectionOutOf(tenant: string, inbound: string): { subject: string; threadToken: string } | undefined {
  const parts = inbound.split('.');
  if (parts.length !== 5 && parts.length !== 6) return undefined;
  const [prefix, ten, kind, principal, threadId] = parts as [string, string, string, string, string];
  if (prefix !== SUBJECT_PREFIX || ten !== tenant || kind !== 'in') return undefined;
  if (!isLiteralToken(principal) || !isLiteralToken(threadId)) return undefined;
  return { subject: `${t(tenant)}.out.${principal}.${threadId}`, threadToken: threadId };
}

/** The principal of an `…req.<P>.<verb>` subject, or undefined. */
export function principalOfRequest(subject: string): string | undefined {
  const parts = subject.split('.');
  const p = parts[3];
  return parts.length === 5 && parts[2] === 'req' && isValidId('principal', p) ? p : undefined;
}

/** The agent id of a `…registry.<A>` subject, or undefined. */
export function agentOfRegistrySubject(subject: string): string | undefined {
  const parts = subject.split('.');
  const a = parts[3];
  return parts.length === 4 && parts[2] === 'registry' && isValidId('agent', a) ? a : undefined;
}
