/**
 * The A2A HTTP gateway (DESIGN §1, §6, §7): JSON-RPC 2.0 over HTTP and SSE onto Troupe threads.
 *
 *   GET  /.well-known/agent-card.json   the mesh's AgentCard (alias /.well-known/agent.json)
 *   POST /                              message/send, message/stream (SSE), tasks/get, tasks/cancel
 *
 * Handlers stay short: authenticate, read and parse the body at the edge, call `tasks.ts`, map the result
 * or error to JSON-RPC. With `tokens`, `Authorization: Bearer <token>` picks the tenant; without, every
 * request goes to `defaultTenant`.
 */
import { createHash } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { z } from 'zod';
import type { TroupeClient } from '../sdk/client.js';
import { silentLogger, type Logger } from '../observability/logger.js';
import { DEFAULT_MAX_PAYLOAD, ERROR_CODES, describeZodError } from '../protocol/index.js';
import { gatewayCard, type GatewayCard, type GatewayCardOptions } from './card.js';
import {
  MessageSendParamsSchema,
  RPC_CODES,
  RpcError,
  RpcRequestSchema,
  TaskIdParamsSchema,
  TaskQueryParamsSchema,
  parseParams,
  rpcErrorOf,
  rpcFailure,
  rpcResult,
  type RpcErrorObject,
  type RpcId,
  type RpcResponse,
} from './rpc.js';
import { cancelTask, getTask, sendMessage, streamMessage, type CallContext } from './tasks.js';

export interface GatewayOptions {
  /** One client per tenant, keyed by the tenant it talks to. */
  clients: Record<string, TroupeClient>;
  /** Bearer token -> tenant. Without it the gateway is open and serves `defaultTenant` only. */
  tokens?: Record<string, string>;
  defaultTenant?: string;
  port?: number;
  host?: string;
  /** Largest request body accepted; larger ones get 413. Default 1 MiB (NATS' default max_payload). */
  maxBodyBytes?: number;
  card?: GatewayCardOptions;
  logger?: Logger;
  /** How long message/send and message/stream wait for a turn's final status. Default 60 s. */
  turnTimeoutMs?: number;
}

export interface Gateway {
  /** Base URL, e.g. `http://127.0.0.1:8080`; the JSON-RPC endpoint is `${url}/`. */
  url: string;
  port: number;
  card: GatewayCard;
  close(): Promise<void>;
}

export const AGENT_CARD_PATHS: readonly string[] = ['/.well-known/agent-card.json', '/.well-known/agent.json'];

type Emit = (result: unknown) => void;

interface Method {
  params: z.ZodType;
  /** Returns the result, or `emit`s results as server-sent events (the first `emit` starts the stream). */
  run(ctx: CallContext, params: unknown, emit: Emit): Promise<unknown>;
}

function method<S extends z.ZodType>(params: S, run: (ctx: CallContext, params: z.infer<S>, emit: Emit) => Promise<unknown>): Method {
  return { params, run: run as Method['run'] };
}

const METHODS: Record<string, Method> = {
  'message/send': method(MessageSendParamsSchema, (ctx, p) => sendMessage(ctx, p)),
  'message/stream': method(MessageSendParamsSchema, (ctx, p, emit) => streamMessage(ctx, p, emit)),
  'tasks/get': method(TaskQueryParamsSchema, (ctx, p) => getTask(ctx, p)),
  'tasks/cancel': method(TaskIdParamsSchema, (ctx, p) => cancelTask(ctx, p)),
};

/** A2A v0.3 methods this gateway knows but does not offer. */
const UNSUPPORTED: Record<string, string> = {
  'tasks/resubscribe': 'poll tasks/get, or follow the next turn with message/stream',
  'tasks/pushNotificationConfig/set': 'push notifications are not supported; use message/stream or tasks/get',
  'tasks/pushNotificationConfig/get': 'push notifications are not supported; use message/stream or tasks/get',
  'tasks/pushNotificationConfig/list': 'push notifications are not supported; use message/stream or tasks/get',
  'tasks/pushNotificationConfig/delete': 'push notifications are not supported; use message/stream or tasks/get',
  'agent/getAuthenticatedExtendedCard': `read the public card at ${AGENT_CARD_PATHS[0]}`,
};

export async function startGateway(opts: GatewayOptions): Promise<Gateway> {
  const defaultTenant = opts.defaultTenant ?? 'demo';
  checkTenants(opts.clients, opts.tokens, defaultTenant);
  const log = (opts.logger ?? silentLogger()).child({ component: 'gateway' });
  const maxBodyBytes = opts.maxBodyBytes ?? DEFAULT_MAX_PAYLOAD;
  const turnTimeoutMs = opts.turnTimeoutMs ?? 60_000;
  const tenantOf = opts.tokens ? bearerTenants(opts.tokens) : () => defaultTenant;
  let card: GatewayCard | undefined;

  const contextFor = (tenant: string, thread?: string): CallContext => ({
    tenant,
    client: opts.clients[tenant]!,
    otherTenants: Object.entries(opts.clients).flatMap(([t, c]) => (t === tenant ? [] : [c])),
    log: log.child({ tenant, ...(thread ? { thread } : {}) }),
    turnTimeoutMs,
  });

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const path = new URL(req.url ?? '/', 'http://gateway').pathname;
    if (req.method === 'GET' && AGENT_CARD_PATHS.includes(path)) return sendJson(res, 200, card);
    if (path !== '/') return sendJson(res, 404, { error: `nothing at ${path}: POST JSON-RPC to / and GET the agent card at ${AGENT_CARD_PATHS[0]}` });
    if (req.method !== 'POST') return sendJson(res, 405, { error: 'the A2A endpoint takes POST with a JSON-RPC 2.0 body' }, { allow: 'POST' });
    const tenant = tenantOf(req.headers.authorization);
    if (!tenant) {
      const error = { code: RPC_CODES.INVALID_REQUEST, message: 'missing or unknown bearer token: send `Authorization: Bearer <token>` with a token the gateway was given' };
      return sendJson(res, 401, rpcFailure(null, error), { 'www-authenticate': 'Bearer' });
    }
    const body = await readBody(req, maxBodyBytes);
    if (body === 'too-large') {
      const error: RpcErrorObject = {
        code: ERROR_CODES.PAYLOAD_TOO_LARGE.jsonRpc,
        message: `the request body is over ${maxBodyBytes} bytes: send a smaller message (large files by URI, not inline bytes)`,
        data: { code: 'PAYLOAD_TOO_LARGE', hint: ERROR_CODES.PAYLOAD_TOO_LARGE.hint, limit: maxBodyBytes },
      };
      return sendJson(res, 413, rpcFailure(null, error), { connection: 'close' });
    }
    const request = parseRequest(body);
    if ('error' in request) return sendJson(res, 200, request);
    await dispatch(res, request.id, request.method, request.params, tenant);
  };

  const dispatch = async (res: ServerResponse, id: RpcId, name: string, rawParams: unknown, tenant: string): Promise<void> => {
    const started = Date.now();
    const entry = METHODS[name];
    let stream: SseStream | undefined;
    let thread: string | undefined;
    try {
      if (!entry) throw unknownMethod(name);
      const params = parseParams(entry.params, rawParams, name);
      thread = threadOf(params);
      const ctx = contextFor(tenant, thread);
      const emit: Emit = (result) => {
        thread ??= (result as { taskId?: string }).taskId;
        (stream ??= new SseStream(res)).send(rpcResult(id, result));
      };
      const result = await entry.run(ctx, params, emit);
      thread ??= (result as { id?: string } | undefined)?.id;
      log.child({ tenant, ...(thread ? { thread } : {}) }).info({ method: name, ms: Date.now() - started }, 'a2a request');
      if (stream) stream.end();
      else sendJson(res, 200, rpcResult(id, result));
    } catch (err) {
      const error = rpcErrorOf(err);
      const reqLog = log.child({ tenant, ...(thread ? { thread } : {}) });
      if (error.code === RPC_CODES.INTERNAL_ERROR) reqLog.error({ method: name, err }, 'a2a request failed');
      else reqLog.info({ method: name, ms: Date.now() - started, code: error.code, reason: error.data?.code }, error.message);
      // Once the stream started, the error is its last event.
      if (stream) stream.end(rpcFailure(id, error));
      else sendJson(res, 200, rpcFailure(id, error));
    }
  };

  const server = createServer((req, res) => {
    handle(req, res).catch((err: unknown) => {
      log.error({ err }, 'gateway request failed');
      if (!res.headersSent) sendJson(res, 500, rpcFailure(null, rpcErrorOf(err)));
      else res.destroy();
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port ?? 0, opts.host ?? '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  const { port } = server.address() as AddressInfo;
  const host = opts.host ?? '127.0.0.1';
  const url = `http://${host.includes(':') ? `[${host}]` : host}:${port}`;
  card = gatewayCard(`${url}/`, opts.card ?? {}, Boolean(opts.tokens));
  log.info({ url, tenants: Object.keys(opts.clients), auth: opts.tokens ? 'bearer' : 'none' }, 'gateway listening');
  return {
    url,
    port,
    card,
    close: () =>
      new Promise<void>((resolve, reject) => {
        server.close((err) => (err ? reject(err) : resolve()));
        // Open SSE streams and idle keep-alive connections would hold close() open.
        server.closeAllConnections();
      }),
  };
}

/** Refuses a configuration that would fail on the first request. */
function checkTenants(clients: Record<string, TroupeClient>, tokens: Record<string, string> | undefined, defaultTenant: string): void {
  for (const [tenant, client] of Object.entries(clients)) {
    if (client.tenant !== tenant) throw new Error(`gateway: clients["${tenant}"] talks to tenant "${client.tenant}": key each client by its own tenant`);
  }
  if (!tokens && !clients[defaultTenant]) throw new Error(`gateway: no client for the default tenant "${defaultTenant}": pass clients.${defaultTenant} or set defaultTenant`);
  for (const [token, tenant] of Object.entries(tokens ?? {})) {
    if (!token) throw new Error('gateway: an empty token would let anyone in: remove it from tokens');
    if (!clients[tenant]) throw new Error(`gateway: a token maps to tenant "${tenant}" but there is no client for it: add clients.${tenant} or fix the token file`);
  }
}

/** Tokens are looked up by their hash, so the map holds no token and lookup time says nothing about one. */
function bearerTenants(tokens: Record<string, string>): (authorization: string | undefined) => string | undefined {
  const digest = (token: string) => createHash('sha256').update(token).digest('hex');
  const byDigest = new Map(Object.entries(tokens).map(([token, tenant]) => [digest(token), tenant]));
  return (authorization) => {
    const match = /^Bearer\s+(\S+)\s*$/i.exec(authorization ?? '');
    return match?.[1] ? byDigest.get(digest(match[1])) : undefined;
  };
}

/** The body, or 'too-large' as soon as it passes the limit (the rest is not buffered). */
async function readBody(req: IncomingMessage, maxBytes: number): Promise<Buffer | 'too-large'> {
  if (Number(req.headers['content-length'] ?? 0) > maxBytes) {
    req.resume();
    return 'too-large';
  }
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > maxBytes) {
      req.resume();
      return 'too-large';
    }
    chunks.push(chunk);
  }
  return Buffer.concat(chunks);
}

function parseRequest(body: Buffer): { id: RpcId; method: string; params: unknown } | RpcResponse & { error: RpcErrorObject } {
  let json: unknown;
  try {
    json = JSON.parse(body.toString('utf8'));
  } catch (err) {
    return { jsonrpc: '2.0', id: null, error: { code: RPC_CODES.PARSE_ERROR, message: `the body is not valid JSON (${(err as Error).message}): send one JSON-RPC 2.0 request object` } };
  }
  if (Array.isArray(json)) {
    return { jsonrpc: '2.0', id: null, error: { code: RPC_CODES.INVALID_REQUEST, message: 'batch requests are not supported: send one JSON-RPC request per POST' } };
  }
  const parsed = RpcRequestSchema.safeParse(json);
  if (!parsed.success) {
    const rawId = (json as { id?: unknown } | null)?.id;
    const id = typeof rawId === 'string' || typeof rawId === 'number' ? rawId : null;
    const message = `not a JSON-RPC 2.0 request (${describeZodError(parsed.error)}): send {"jsonrpc":"2.0","id":1,"method":"message/send","params":{...}}`;
    return { jsonrpc: '2.0', id, error: { code: RPC_CODES.INVALID_REQUEST, message } };
  }
  return { id: parsed.data.id ?? null, method: parsed.data.method, params: parsed.data.params };
}

function unknownMethod(name: string): RpcError {
  const alternative = UNSUPPORTED[name];
  if (alternative) return new RpcError(RPC_CODES.UNSUPPORTED_OPERATION, `${name} is not supported by this gateway: ${alternative}`);
  return new RpcError(RPC_CODES.METHOD_NOT_FOUND, `method "${name}" not found: this gateway serves ${Object.keys(METHODS).join(', ')}`);
}

/** The thread a call is about, for the log line: a task id in the params or on the message. */
function threadOf(params: unknown): string | undefined {
  const p = params as { id?: string; message?: { taskId?: string } };
  return p.id ?? p.message?.taskId;
}

function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const payload = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload), ...headers });
  res.end(payload);
}

/**
 * Server-sent events, one JSON-RPC response per `data:` line; events after the client left are dropped.
 * A comment line every 15 s keeps proxies from closing a stream while agents think.
 */
class SseStream {
  private closed = false;
  private readonly keepAlive: NodeJS.Timeout;

  constructor(private readonly res: ServerResponse) {
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive', 'x-accel-buffering': 'no' });
    res.flushHeaders();
    this.keepAlive = setInterval(() => this.write(': keep-alive\n\n'), 15_000);
    this.keepAlive.unref();
    res.on('close', () => {
      this.closed = true;
      clearInterval(this.keepAlive);
    });
  }

  send(response: RpcResponse): void {
    this.write(`data: ${JSON.stringify(response)}\n\n`);
  }

  end(last?: RpcResponse): void {
    if (last) this.send(last);
    clearInterval(this.keepAlive);
    if (!this.closed) this.res.end();
  }

  private write(chunk: string): void {
    if (!this.closed) this.res.write(chunk);
  }
}
