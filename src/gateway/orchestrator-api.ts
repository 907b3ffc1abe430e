/**
 * The orchestrator API of seed 003 next to A2A: the same JSON-RPC endpoint, also served at the seed's path
 * (`POST /a2a/<orchestrator-id>`, `orchestratorPath`), in the seed's form where the seed's client reads it.
 *
 * On every JSON-RPC endpoint (input, before the SDK parses it):
 *   - `message.kind`, when given, must be `"message"` (-32602 otherwise);
 *   - `message.role: "assistant"` (the seed's follow-up role, A2A's `agent`) is taken as the caller's
 *     message, noted in `metadata["troupe/callerRole"]`: a client's message is always the user side of
 *     the thread, so the role it used is kept, not acted on;
 *   - `taskId: null` / `contextId: null` (what the seed's clients write for "none") are absent;
 *   - a ListTasks field given as `""` is absent, as an empty query value is over REST.
 *
 * On the orchestrator path only (output): a blocking `message/send` is answered with the agent's Message
 * (the seed's `result.kind = "message"`), `role: "assistant"`, and the result metadata carries the seed's
 * snake_case keys (`agents_used`, `execution_time_ms`, `task_state`) next to the camelCase ones. A2A clients
 * at `/` see only the A2A form (camelCase metadata, role `agent`, the Task).
 */
import type { NextFunction, Request, Response } from 'express';
import { META, RESULT_META, SEED_RESULT_META } from '../protocol/index.js';

/** Where the seed's JSON-RPC endpoint is served unless the gateway is told otherwise. */
export const DEFAULT_ORCHESTRATOR_PATH = '/a2a/troupe';

/** Paths the gateway serves itself, which the orchestrator path may not shadow. */
const RESERVED = ['/rest', '/diagnostics', '/.well-known'];
const SEND_METHODS = new Set(['message/send', 'message/stream', 'SendMessage', 'SendStreamingMessage']);

/** Checks an orchestrator path (`/a2a/lucia-orchestrator`): one to eight segments of letters, digits, `.`, `_`, `-`. */
export function checkOrchestratorPath(path: string): string {
  if (!/^(?:\/[A-Za-z0-9][A-Za-z0-9._-]{0,99}){1,8}$/.test(path)) {
    throw new Error(
      `gateway: orchestrator path "${path.slice(0, 100)}" is not a path like /a2a/lucia-orchestrator (segments of letters, digits, ".", "_", "-")`,
    );
  }
  if (RESERVED.some((r) => path === r || path.startsWith(`${r}/`)))
    throw new Error(`gateway: orchestrator path "${path}" is under ${RESERVED.join(', ')}, which the gateway serves itself`);
  return path;
}

/** What the input rules found wrong with a request, as a JSON-RPC -32602 message; undefined when none. */
function normaliseSeedInput(body: unknown): string | undefined {
  if (isObject(body) && body.method === 'ListTasks' && isObject(body.params)) {
    // A field given empty is absent, as REST reads `?status=&pageSize=` (the SDK's JSON-RPC side reads "" as
    // state -1 and page size 0 and refuses them): a partial request is answered the same on both bindings.
    for (const [key, value] of Object.entries(body.params)) if (value === '') delete body.params[key];
    return undefined;
  }
  if (!isObject(body) || typeof body.method !== 'string' || !SEND_METHODS.has(body.method)) return undefined;
  const params = body.params;
  if (!isObject(params) || !isObject(params.message)) return undefined;
  const message = params.message;
  if ('kind' in message && message.kind !== 'message') {
    return `message.kind must be "message" (got ${JSON.stringify(message.kind)?.slice(0, 40) ?? 'nothing'})`;
  }
  for (const key of ['taskId', 'contextId'] as const) if (message[key] === null) delete message[key];
  if (message.role === 'assistant') {
    message.role = 'user';
    const metadata = isObject(message.metadata) ? message.metadata : {};
    message.metadata = { ...metadata, [META.callerRole]: 'assistant' };
  }
  return undefined;
}

/** Express middleware over `normaliseSeedInput`: a refused message gets its JSON-RPC error here. */
export function seedInput(req: Request, res: Response, next: NextFunction): void {
  const problem = normaliseSeedInput(req.body);
  if (!problem) return next();
  const id = isObject(req.body) && (typeof req.body.id === 'string' || typeof req.body.id === 'number') ? req.body.id : null;
  res.status(200).json({ jsonrpc: '2.0', id, error: { code: -32602, message: `Invalid params: ${problem}` } });
}

/**
 * On the orchestrator path: the answer in the seed's form (role `assistant`, snake_case result keys). The
 * blocking send's Message answer is asked for by the caller (`GatewayCaller.answersWithMessage`).
 */
export function seedOutput(_req: Request, res: Response, next: NextFunction): void {
  const json = res.json.bind(res);
  res.json = (body: unknown) => json(toSeedForm(body));
  next();
}

/** A JSON-RPC response body in the seed's form (a copy; anything else as it is). */
function toSeedForm(body: unknown): unknown {
  if (!isObject(body) || !isObject(body.result)) return body;
  const result = { ...body.result };
  if (result.kind === 'message') {
    if (result.role === 'agent') result.role = 'assistant';
    result.metadata = withSeedKeys(result.metadata);
  } else if (result.kind === 'task') {
    result.metadata = withSeedKeys(result.metadata);
    if (isObject(result.status) && isObject(result.status.message)) {
      const message: Record<string, unknown> = { ...result.status.message, metadata: withSeedKeys(result.status.message.metadata) };
      if (message.role === 'agent') message.role = 'assistant';
      result.status = { ...result.status, message };
    }
  }
  return { ...body, result };
}

/** Metadata with the seed's snake_case result keys next to the camelCase ones it holds. */
function withSeedKeys(metadata: unknown): unknown {
  if (!isObject(metadata)) return metadata;
  const out: Record<string, unknown> = { ...metadata };
  for (const [camel, snake] of Object.entries(SEED_RESULT_META) as Array<[keyof typeof SEED_RESULT_META, string]>) {
    const value = metadata[RESULT_META[camel]];
    if (value !== undefined) out[snake] = value;
  }
  return out;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
