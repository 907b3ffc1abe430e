/**
 * One error type for the whole mesh: a code from a fixed table and a human message that says what to do.
 * Errors cross the wire as `{ kind: "error", error: { code, message, details? } }`.
 */
import { z } from 'zod';

/**
 * Each code: its JSON-RPC code, what to do next, and how the mesh treats it.
 * - `refusal`: the message itself is refused and can never succeed (the sender gets a rejection, JetStream
 *   terminates it instead of redelivering, the gateway ends the task `rejected`, not `failed`).
 * - `terminal`: not the sender's fault, but retrying cannot help either (a stored record that fails validation
 *   stays broken until someone repairs it): terminated, reported as a failure.
 */
export const ERROR_CODES = {
  ROUTER_FAILURE: { jsonRpc: -32603, hint: 'the router could not decide; check the router policy and its logs' },
  AGENT_TIMEOUT: { jsonRpc: -32603, hint: 'the agent did not answer in time; check that it is running (`troupe ps`)' },
  AGENT_ERROR: { jsonRpc: -32603, hint: 'the agent failed while handling the message; see its logs' },
  WORKFLOW_ERROR: { jsonRpc: -32603, hint: 'a workflow step failed' },
  AGENT_NOT_FOUND: { jsonRpc: -32001, hint: 'no agent with that id is on the mesh; list them with `troupe ps`' },
  AGENT_UNREACHABLE: {
    jsonRpc: -32603,
    hint: "the remote A2A agent's endpoint does not answer: check its URL and that it is up; given an id (--id), the agent joins and is shown unavailable in `troupe ps` until its card can be read",
  },
  NO_ENTRY_AGENT: {
    jsonRpc: -32001,
    hint: 'no team names the agent a message goes to and the mesh has several (or none): start the node with --team <file>, or address an agent with `troupe send --to <agent>`',
  },
  INVALID_RECIPIENT: { jsonRpc: -32602, hint: 'the recipient must be "user", "sender" or the id of another live agent' },
  ROUTING_LOOP: { jsonRpc: -32603, hint: 'agents forwarded to each other past the hop limit; raise maxHops or fix the routing' },
  EXTENSION_PARSE_ERROR: { jsonRpc: -32602, refusal: true, hint: 'the client-routing metadata does not match its schema' },
  INVALID_MESSAGE: { jsonRpc: -32602, refusal: true, hint: 'send an A2A v0.3 message as JSON' },
  PAYLOAD_TOO_LARGE: { jsonRpc: -32602, refusal: true, hint: 'split the payload or raise the limit' },
  HANDOFF_NOT_ALLOWED: {
    jsonRpc: -32603,
    hint: "an agent's card does not allow this handoff (capabilities.handoff canInitiate / canAccept); pick another target or change the card",
  },
  DELEGATION_NOT_ALLOWED: {
    jsonRpc: -32603,
    hint: "the agent's card does not allow it to delegate (capabilities.orchestration.canDelegate), or it asked for more agents than its maxParallel or the team allows",
  },
  HANDOFF_CONFLICT: { jsonRpc: -32603, hint: 'the thread already has an active handoff; finish or cancel it first' },
  USER_FORBIDDEN: {
    jsonRpc: -32001,
    refusal: true,
    hint: 'only a gateway principal (`troupe creds add-gateway`) may name a user in the Troupe-User header; send without it to act as yourself',
  },
  TENANT_FORBIDDEN: { jsonRpc: -32001, refusal: true, hint: 'that thread belongs to another tenant' },
  THREAD_NOT_FOUND: { jsonRpc: -32001, refusal: true, hint: 'no thread with that id; list them with `troupe threads`' },
  THREAD_CLOSED: { jsonRpc: -32002, refusal: true, hint: 'the task has ended; start a new thread' },
  CHECKPOINT_NOT_FOUND: { jsonRpc: -32001, refusal: true, hint: 'no checkpoint with that number; list them with `troupe history <thread>`' },
  THREAD_BUSY: { jsonRpc: -32603, hint: 'a turn of the thread is in flight; cancel the thread or retry once it is answered' },
  STORE_CONFLICT: { jsonRpc: -32603, hint: 'the thread record changed under us; retry' },
  STORE_CORRUPT: { jsonRpc: -32603, terminal: true, hint: 'the stored thread record is invalid; inspect it with `troupe thread <id>`' },
  TRANSPORT_ERROR: { jsonRpc: -32603, hint: 'the message bus failed; check the NATS connection' },
  CREDENTIALS_NOT_FOUND: { jsonRpc: -32001, hint: 'list what exists with `troupe creds list`; create a store with `troupe creds init`' },
  CREDENTIALS_CONFLICT: { jsonRpc: -32602, hint: 'pick another name, or revoke the existing credentials first (`troupe creds revoke <name>`)' },
  CREDENTIALS_INVALID: {
    jsonRpc: -32603,
    hint: 'the credential store or file is damaged or not readable: check --dir and the file named, or start over with `troupe creds init --dir <new dir>`',
  },
  CLAIMS_UPDATE_FAILED: {
    jsonRpc: -32603,
    hint: 'the change is saved in the store and server.conf: start the server (`nats-server -c <dir>/server.conf`) or pass --nats, then run `troupe creds push`',
  },
  TLS_SETUP_FAILED: { jsonRpc: -32603, hint: 'certificates are made with the openssl command: install it (apt-get install openssl) and retry' },
  CONFIG_INVALID: { jsonRpc: -32602, hint: 'fix the problems listed (file:line:col field: message); `troupe validate <file>` checks a file' },
  MODEL_ERROR: { jsonRpc: -32603, hint: "the model provider failed; check the model name, the endpoint and the key in the agent's environment" },
  TOOL_ROUND_LIMIT: { jsonRpc: -32603, hint: "the model kept calling tools past the round limit; raise max_tool_rounds or tighten the agent's instructions" },
  OUTPUT_INVALID: {
    jsonRpc: -32603,
    hint: "the model's answer did not match the agent's output schema after the retries; loosen the schema, raise output.retries or tighten the instructions",
  },
  TOOL_START_FAILED: { jsonRpc: -32603, hint: "a tool's MCP server or vector index could not be set up; the message names the tool and what failed" },
  PARTITIONS_MISMATCH: {
    jsonRpc: -32603,
    hint: "start the node with the server's partition count (--partitions), or change the mapping with `troupe creds init --partitions` on a new store",
  },
  NATS_SERVER_UNSUPPORTED: {
    jsonRpc: -32603,
    hint: 'upgrade nats-server on every server of the cluster to the version the message names, or keep the stream or bucket at 1 replica',
  },
  UNSUPPORTED: { jsonRpc: -32603, hint: 'this feature is declared but not available in this version of Troupe' },
  DEPENDENCY_MISSING: { jsonRpc: -32603, hint: 'install the optional package the message names next to troupe (npm i <package>), then retry' },
} as const satisfies Record<string, { jsonRpc: number; hint: string; refusal?: true; terminal?: true }>;

export type ErrorCode = keyof typeof ERROR_CODES;
export const ErrorCodeSchema = z.enum(Object.keys(ERROR_CODES) as [ErrorCode, ...ErrorCode[]]);

export const ErrorBodySchema = z.object({
  code: ErrorCodeSchema,
  message: z.string(),
  details: z.record(z.string(), z.unknown()).optional(),
});
export type ErrorBody = z.infer<typeof ErrorBodySchema>;

export const ErrorReplySchema = z.object({ kind: z.literal('error'), error: ErrorBodySchema });
export type ErrorReply = z.infer<typeof ErrorReplySchema>;

export class TroupeError extends Error {
  override readonly name: string = 'TroupeError';
  constructor(
    readonly code: ErrorCode,
    message: string,
    readonly details?: Record<string, unknown>,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }

  /** What to do next, for humans. */
  get hint(): string {
    return ERROR_CODES[this.code].hint;
  }

  get jsonRpcCode(): number {
    return ERROR_CODES[this.code].jsonRpc;
  }

  toBody(): ErrorBody {
    return this.details ? { code: this.code, message: this.message, details: this.details } : { code: this.code, message: this.message };
  }

  toReply(): ErrorReply {
    return { kind: 'error', error: this.toBody() };
  }

  static fromBody(body: ErrorBody): TroupeError {
    return new TroupeError(body.code, body.message, body.details);
  }

  /** Wraps anything thrown into a TroupeError (keeping the original as `cause`), or returns one that already is. */
  static from(err: unknown, fallback: ErrorCode = 'WORKFLOW_ERROR'): TroupeError {
    if (err instanceof TroupeError) return err;
    const message = err instanceof Error ? err.message : String(err);
    return new TroupeError(fallback, message, undefined, { cause: err });
  }
}

/** The message itself is refused: it can never succeed, the sender is told, nothing retries it. */
export function isRefusal(code: ErrorCode): boolean {
  return 'refusal' in ERROR_CODES[code];
}

/** Retrying cannot help: a refusal, or a failure that stays until someone repairs something. */
export function isTerminal(code: ErrorCode): boolean {
  return 'refusal' in ERROR_CODES[code] || 'terminal' in ERROR_CODES[code];
}

export function isTroupeError(err: unknown): err is TroupeError {
  return err instanceof TroupeError;
}

/** Formats a zod error as one line a human can act on. */
export function describeZodError(error: z.ZodError): string {
  return error.issues
    .slice(0, 5)
    .map((issue) => `${issue.path.length ? issue.path.join('.') : '(root)'}: ${issue.message}`)
    .join('; ');
}
