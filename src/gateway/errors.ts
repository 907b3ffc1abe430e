/**
 * Troupe's errors as the SDK's A2A errors. The JSON-RPC code of each Troupe code comes from the one table
 * (`ERROR_CODES[code].jsonRpc` in src/protocol/errors.ts); this picks the SDK error class for that code,
 * so the SDK's transports render it for each protocol version: v0.3 JSON-RPC keeps `data: { code, hint }`,
 * v1.0 JSON-RPC carries them in a `google.rpc.ErrorInfo`, REST maps the class to its HTTP status.
 */
import {
  A2AError,
  JsonRpcRequestMalformedError,
  JsonRpcTaskNotCancelableError,
  JsonRpcTaskNotFoundError,
  JsonRpcTransportError,
  JsonRpcUnsupportedOperationError,
} from '@a2a-js/sdk/errors';
import { ERROR_CODES, TroupeError, type ErrorCode } from '../protocol/index.js';

/** The message every caller gets for a task that does not exist or is not theirs: the same text for both. */
export function taskNotFoundMessage(taskId: string): string {
  return `Task not found: ${taskId}`;
}

/** A TroupeError (or anything thrown) as the A2A error the SDK's transports know how to send. */
export function toA2AError(err: unknown, about?: { taskId?: string }): A2AError {
  if (err instanceof A2AError) return err;
  const error = TroupeError.from(err, 'WORKFLOW_ERROR');
  const data = { code: error.code, hint: error.hint };
  const options = { message: messageOf(error, about?.taskId), data, metadata: { troupeCode: error.code, hint: error.hint }, cause: err };
  switch (ERROR_CODES[error.code].jsonRpc as number) {
    case -32001:
      return new JsonRpcTaskNotFoundError(options);
    case -32002:
      return new JsonRpcTaskNotCancelableError(options);
    case -32602:
      return new JsonRpcRequestMalformedError(options);
    case -32004:
      return new JsonRpcUnsupportedOperationError(options);
    default:
      return new JsonRpcTransportError({ jsonrpc: '2.0', id: null, error: { code: ERROR_CODES[error.code].jsonRpc, message: options.message, data } });
  }
}

/** An invalid request field: JSON-RPC -32602 / HTTP 400, naming what is wrong. */
export function invalidParams(message: string, code: ErrorCode = 'INVALID_MESSAGE'): A2AError {
  return toA2AError(new TroupeError(code, message));
}

function messageOf(error: TroupeError, taskId: string | undefined): string {
  // The node's text names the tenant; the caller gets the one message that says nothing about who owns what.
  if (error.code === 'THREAD_NOT_FOUND' || error.code === 'TENANT_FORBIDDEN') return taskNotFoundMessage(taskId ?? String(error.details?.['threadId'] ?? ''));
  if (error.code === 'THREAD_CLOSED') return `Task cannot be canceled or continued: ${error.message}`;
  return error.message;
}
