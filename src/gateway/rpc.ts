/**
 * JSON-RPC 2.0 for the A2A gateway: the request envelope, the params of each A2A v0.3 method (zod, so a
 * handler gets typed values or the caller gets -32602 naming the problem), and the mapping of errors to
 * JSON-RPC error objects. Troupe's own codes map through `ERROR_CODES[code].jsonRpc`; the codes below are
 * JSON-RPC's and A2A's, for failures that happen before the mesh is involved.
 */
import { z } from 'zod';
import { ERROR_CODES, MessageSchema, TroupeError, describeZodError, type ErrorCode } from '../protocol/index.js';

export const RPC_CODES = {
  PARSE_ERROR: -32700,
  INVALID_REQUEST: -32600,
  METHOD_NOT_FOUND: -32601,
  INVALID_PARAMS: -32602,
  INTERNAL_ERROR: -32603,
  /** A2A: PushNotificationNotSupportedError. */
  PUSH_NOT_SUPPORTED: -32003,
  /** A2A: UnsupportedOperationError. */
  UNSUPPORTED_OPERATION: -32004,
} as const;

export type RpcId = string | number | null;

export interface RpcErrorObject {
  code: number;
  message: string;
  data?: Record<string, unknown>;
}

export type RpcResponse = { jsonrpc: '2.0'; id: RpcId; result: unknown } | { jsonrpc: '2.0'; id: RpcId; error: RpcErrorObject };

/** A failure with a JSON-RPC code of its own (not one of the mesh's TroupeErrors). */
export class RpcError extends Error {
  override readonly name = 'RpcError';
  constructor(
    readonly code: number,
    message: string,
    readonly data?: Record<string, unknown>,
  ) {
    super(message);
  }
}

export const RpcRequestSchema = z.object({
  jsonrpc: z.literal('2.0', { error: 'jsonrpc must be "2.0"' }),
  method: z.string().min(1),
  id: z.union([z.string(), z.number(), z.null()]).optional(),
  params: z.unknown().optional(),
});
export type RpcRequest = z.infer<typeof RpcRequestSchema>;

/** Task ids are thread ids, which become NATS subject tokens (transport/subjects.ts). */
export const TaskIdSchema = z
  .string()
  .regex(/^[A-Za-z0-9_-]{1,128}$/, 'a task id is 1-128 characters of A-Z, a-z, 0-9, _ and -: use the id this gateway returned');

const Metadata = z.record(z.string(), z.unknown());

export const MessageSendParamsSchema = z.object({
  message: MessageSchema.extend({
    role: z.literal('user', { error: 'a client sends messages with role "user"' }),
    taskId: TaskIdSchema.optional(),
  }),
  configuration: z
    .object({
      acceptedOutputModes: z.array(z.string()).optional(),
      historyLength: z.number().int().min(0).optional(),
      blocking: z.boolean().optional(),
      pushNotificationConfig: z.unknown().optional(),
    })
    .optional(),
  metadata: Metadata.optional(),
});
export type MessageSendParams = z.infer<typeof MessageSendParamsSchema>;

export const TaskQueryParamsSchema = z.object({ id: TaskIdSchema, historyLength: z.number().int().min(0).optional(), metadata: Metadata.optional() });
export type TaskQueryParams = z.infer<typeof TaskQueryParamsSchema>;

export const TaskIdParamsSchema = z.object({ id: TaskIdSchema, metadata: Metadata.optional() });
export type TaskIdParams = z.infer<typeof TaskIdParamsSchema>;

export function parseParams<S extends z.ZodType>(schema: S, params: unknown, method: string): z.infer<S> {
  const parsed = schema.safeParse(params ?? {});
  if (!parsed.success) {
    throw new RpcError(RPC_CODES.INVALID_PARAMS, `invalid params for ${method}: ${describeZodError(parsed.error)}`, {
      code: 'INVALID_MESSAGE' satisfies ErrorCode,
      hint: `send ${method} params as the A2A v0.3 schema describes them`,
    });
  }
  return parsed.data;
}

/** Any error as a JSON-RPC error object; the message says what happened, `data.hint` what to do next. */
export function rpcErrorOf(err: unknown): RpcErrorObject {
  if (err instanceof RpcError) return { code: err.code, message: err.message, ...(err.data ? { data: err.data } : {}) };
  if (err instanceof TroupeError) {
    return {
      code: ERROR_CODES[err.code].jsonRpc,
      message: err.message,
      data: { code: err.code, hint: err.hint, ...(err.details ? { details: err.details } : {}) },
    };
  }
  const message = err instanceof Error ? err.message : String(err);
  return { code: RPC_CODES.INTERNAL_ERROR, message: `internal error: ${message}`, data: { hint: "the gateway failed unexpectedly; see the gateway's logs" } };
}

export const rpcResult = (id: RpcId, result: unknown): RpcResponse => ({ jsonrpc: '2.0', id, result });
export const rpcFailure = (id: RpcId, error: RpcErrorObject): RpcResponse => ({ jsonrpc: '2.0', id, error });
