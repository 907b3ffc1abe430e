/**
 * The A2A gateway: `@a2a-js/sdk`'s server side over Troupe threads, on express.
 *
 *   GET  /.well-known/agent-card.json   the mesh's AgentCard (v1.0 with `A2A-Version: 1.0`, else v0.3)
 *   POST /                              JSON-RPC, A2A 1.0 (`A2A-Version: 1.0`) or 0.3 (no header)
 *   POST /a2a/troupe                    the same, in seed 003's form (`orchestratorPath`; orchestrator-api.ts)
 *   *    /rest/...                      HTTP+JSON (REST), A2A 1.0, and 0.3 under /rest/v1/...
 *   *    /troupe/tasks/{id}/checkpoints  a task's checkpoints for its owner (a Troupe extension, checkpoints.ts)
 *   *    /diagnostics/...               operator endpoints (or on their own port), see diagnostics.ts
 *
 * In front of the SDK, in this order: the request's shape (URL length, version header), the bearer
 * token (tenant and user), the rate limit of that token, then the body, read here with a byte cap (413)
 * and a nesting cap, so neither the SDK's parser nor anything after it sees an oversized or hostile body.
 */
import { createServer as createHttpServer, type Server } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import express, { type NextFunction, type Request, type Response } from 'express';
import { AgentCard } from '@a2a-js/sdk';
import { ContentTypeNotSupportedError, RequestMalformedError, toRestErrorBody } from '@a2a-js/sdk/errors';
import { DefaultRequestHandler, InMemoryPushNotificationStore } from '@a2a-js/sdk/server';
import { agentCardHandler, jsonRpcHandler, restHandler } from '@a2a-js/sdk/server/express';
import { mountCheckpoints } from './checkpoints.js';
import type { TroupeClient } from '../sdk/client.js';
import { silentLogger, type Logger } from '../observability/logger.js';
import { contextFromHeaders, runInContext, tracing } from '../observability/tracing.js';
import { DEFAULT_MAX_PAYLOAD, ERROR_CODES, LIMITS, TroupeError, exceedsDepth } from '../protocol/index.js';
import { GatewayCaller } from './caller.js';
import { AGENT_CARD_PATHS, REST_PATH, gatewayCard, type GatewayCardOptions } from './card.js';
import { diagnosticsRouter } from './diagnostics.js';
import { DEFAULT_ORCHESTRATOR_PATH, checkOrchestratorPath, seedInput, seedOutput } from './orchestrator-api.js';
import { MeshExecutor } from './executor.js';
import { TroupeRequestHandler } from './handler.js';
import { RetryingPushSender, type PushDeliveryOptions } from './push.js';
import { TokenBuckets, type RateLimitOptions } from './rate-limit.js';
import { MeshTaskStore } from './task-store.js';
import { BearerTokens, bearerToken, tokenDigest, type Caller, type TokenEntries } from './tokens.js';
import { JwtAuth, looksLikeJwt, type JwtAuthOptions, type JwtRefusal } from './jwt.js';
import { metrics } from '../observability/metrics.js';

export interface GatewayOptions {
  /** One client per tenant, keyed by the tenant it talks to. */
  clients: Record<string, TroupeClient>;
  /**
   * Bearer token -> `{ tenant, user }` (or just the tenant, the older form). Without it the gateway is
   * open and serves `defaultTenant` as the principal itself.
   */
  tokens?: TokenEntries;
  /**
   * Callers with a JWT from an identity provider (OpenID Connect): its signature checked against the
   * issuer's keys, the caller from its claims (src/gateway/jwt.ts). With `tokens`, a token in the file is
   * looked up first.
   */
  jwt?: JwtAuthOptions;
  defaultTenant?: string;
  port?: number;
  host?: string;
  /** Largest request body accepted; larger ones get 413. Default 1 MiB (NATS' default max_payload). */
  maxBodyBytes?: number;
  /**
   * How long a client may take to send a request's headers, and then its body: past either, 408 and the
   * connection closed (a slow or stalled client holds nothing longer). Default 10 s each.
   */
  readTimeoutMs?: number;
  card?: GatewayCardOptions;
  logger?: Logger;
  /** How long a turn may take before the gateway stops waiting for its final status. Default 60 s. */
  turnTimeoutMs?: number;
  /** Per-token rate limit (token bucket, 429 with Retry-After). Default: none. */
  rateLimit?: RateLimitOptions;
  /** HTTPS with this certificate and key (PEM). */
  tls?: { cert: string | Buffer; key: string | Buffer };
  /** Operator diagnostics; on `port` when given, else under /diagnostics on the gateway's port. */
  diagnostics?: { token: string; client: TroupeClient; port?: number; partitions?: number };
  /** Push notification delivery (retries, timeouts). */
  push?: PushDeliveryOptions;
  /**
   * The card for a request without `A2A-Version`: `0.3` (default; what A2A's version rules say, and what
   * v0.3 clients, which send no header, need) or `1.0` (a v1.0-only deployment, or the A2A TCK, which
   * fetches the card without the header).
   */
  cardVersionWithoutHeader?: '0.3' | '1.0';
  /**
   * Where JSON-RPC is also served in the seed orchestrator's form (`POST /a2a/<orchestrator-id>`: a blocking
   * send answered with a Message, role `assistant`, snake_case result keys). Default `/a2a/troupe`.
   */
  orchestratorPath?: string;
}

export interface Gateway {
  /** Base URL, e.g. `http://127.0.0.1:8080`; JSON-RPC is at `${url}/`, REST at `${url}/rest`. */
  url: string;
  port: number;
  card: AgentCard;
  /** The seed orchestrator's JSON-RPC endpoint, e.g. `http://127.0.0.1:8080/a2a/troupe`. */
  orchestratorUrl: string;
  /** Base URL of the diagnostics endpoints (`${url}/diagnostics` unless they have their own port). */
  diagnosticsUrl?: string;
  close(): Promise<void>;
}

const MAX_URL_LENGTH = 8 * 1024;
/** Nesting of a whole request body: the A2A envelope around a message with metadata at the metadata cap. */
const MAX_BODY_DEPTH = LIMITS.depth + 8;

export async function startGateway(opts: GatewayOptions): Promise<Gateway> {
  const defaultTenant = opts.defaultTenant ?? 'demo';
  const tokens = opts.tokens ? new BearerTokens(opts.tokens) : undefined;
  checkConfiguration(opts, tokens, defaultTenant);
  const jwt = opts.jwt ? await JwtAuth.create(opts.jwt) : undefined;
  const authenticated = Boolean(tokens || jwt);
  const log = (opts.logger ?? silentLogger()).child({ component: 'gateway' });
  const maxBodyBytes = opts.maxBodyBytes ?? DEFAULT_MAX_PAYLOAD;
  const turnTimeoutMs = opts.turnTimeoutMs ?? 60_000;
  const limiter = opts.rateLimit ? new TokenBuckets(opts.rateLimit) : undefined;
  const orchestratorPath = checkOrchestratorPath(opts.orchestratorPath ?? DEFAULT_ORCHESTRATOR_PATH);

  // The card names the URL the server ends up on, and the SDK's handler reads the card when it is made:
  // both are made once the port is known (requests before that get 503).
  let card: AgentCard | undefined;
  let handler: TroupeRequestHandler | undefined;
  const cardOf = async (): Promise<AgentCard> => card!;
  const store = new MeshTaskStore();
  const pushStore = new InMemoryPushNotificationStore();
  const executor = new MeshExecutor({ store, log, turnTimeoutMs });
  const requestHandler = new Proxy({} as TroupeRequestHandler, {
    get: (_t, key) => {
      const value: unknown = Reflect.get(handler!, key);
      return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(handler) : value;
    },
  });

  const app = express();
  app.disable('x-powered-by');
  app.set('query parser', 'simple');
  app.use(requestShape);
  app.use((_req: Request, res: Response, next: NextFunction) => {
    if (handler) return next();
    res.status(503).set('retry-after', '1').json({ error: 'the gateway is starting' });
  });
  if (opts.diagnostics && opts.diagnostics.port === undefined) app.use('/diagnostics', diagnosticsRouter(opts.diagnostics, limiter));
  // The card is made once, when the gateway starts listening: that is when it last changed (A2A 1.0 §8.6.1).
  let cardMadeAt = '';
  const lastModified = (_req: Request, res: Response, next: NextFunction) => {
    if (cardMadeAt) res.set('last-modified', cardMadeAt);
    next();
  };
  app.use(
    AGENT_CARD_PATHS as string[],
    lastModified,
    v1Card(cardOf, opts.cardVersionWithoutHeader === '1.0'),
    agentCardHandler({ agentCardProvider: cardOf, legacyCompat: { enabled: true }, cache: { maxAge: 60 } }),
  );
  const serves = (tenant: string) => Object.hasOwn(opts.clients, tenant);
  const open = (req: Request) => ({ caller: { tenant: defaultTenant }, digest: `ip:${req.socket.remoteAddress ?? ''}` });
  /** Who a request is for: anyone on an open gateway, a token of the file, a JWT of the issuer; or why nobody. */
  const identify = async (req: Request): Promise<{ caller: Caller; digest: string } | JwtRefusal | undefined> => {
    if (!authenticated) return open(req);
    const listed = tokens?.lookup(req.headers.authorization);
    if (listed || !jwt) return listed;
    const bearer = bearerToken(req.headers.authorization);
    if (!bearer || !looksLikeJwt(bearer)) return undefined;
    const checked = await jwt.verify(bearer, serves, defaultTenant);
    // One rate-limit bucket per user of the issuer, whichever of their tokens they send.
    return checked.ok ? { caller: checked.caller, digest: `jwt:${tokenDigest(checked.subject)}` } : checked;
  };
  app.use(async (req: Request, res: Response, next: NextFunction) => {
    const who = await identify(req);
    if (who && 'status' in who) {
      metrics.gatewayAuthRefused.inc({ reason: who.code });
      const headers: Record<string, string> =
        who.status === 401
          ? { 'www-authenticate': `Bearer error="invalid_token", error_description="${who.reason.replace(/["\\]/g, "'").replace(/[^\x20-\x7e]/g, '?')}"` }
          : who.status === 503
            ? { 'retry-after': '5' }
            : {};
      problem(req, res, who.status, -32600, who.reason, headers);
      return;
    }
    if (!who) {
      metrics.gatewayAuthRefused.inc({ reason: 'unknown_token' });
      problem(
        req,
        res,
        401,
        -32600,
        `missing or unknown bearer token: send \`Authorization: Bearer <token>\` with ${jwt ? `${jwt.description}${tokens ? ' or ' : ''}` : ''}${tokens ? 'a token the gateway was given' : ''}`,
        { 'www-authenticate': 'Bearer' },
      );
      return;
    }
    const wait = limiter?.take(who.digest) ?? 0;
    if (wait > 0) {
      problem(req, res, 429, -32600, `too many requests for this token: retry in ${wait} s`, { 'retry-after': String(wait) });
      return;
    }
    const abort = new AbortController();
    res.on('close', () => abort.abort());
    const { tenant, user } = who.caller;
    res.locals.caller = new GatewayCaller(tenant, user, opts.clients[tenant]!, abort.signal);
    next();
  });
  const readTimeoutMs = opts.readTimeoutMs ?? DEFAULT_READ_TIMEOUT_MS;
  app.use(readBody(maxBodyBytes, orchestratorPath, readTimeoutMs));
  // An A2A client that traces sends `traceparent`: the turn it asks for continues that trace.
  app.use((req: Request, _res: Response, next: NextFunction) => {
    const traceparent = req.headers.traceparent;
    if (!tracing.on || typeof traceparent !== 'string') return next();
    runInContext(contextFromHeaders({ traceparent }), next);
  });
  const userBuilder = async (req: Request) => req.res!.locals.caller as GatewayCaller;
  app.use(REST_PATH, restMediaType, restHandler({ requestHandler, userBuilder, legacyCompat: { enabled: true } }));
  // A Troupe extension: a task's checkpoints for its owner (checkpoints.ts).
  mountCheckpoints(app);
  app.all(['/', orchestratorPath], (req: Request, res: Response, next: NextFunction) => {
    if (req.method === 'POST') return next();
    res.status(405).set('allow', 'POST').json({ error: 'the JSON-RPC endpoint takes POST with a JSON-RPC 2.0 body' });
  });
  const rpcHandler = jsonRpcHandler({ requestHandler, userBuilder, legacyCompat: { enabled: true } });
  app.post('/', seedInput, rpcHandler);
  app.post(
    orchestratorPath,
    seedInput,
    (_req: Request, res: Response, next: NextFunction) => {
      (res.locals.caller as GatewayCaller).answersWithMessage = true;
      next();
    },
    seedOutput,
    (req: Request, res: Response, next: NextFunction) => {
      // The SDK's JSON-RPC router answers at its own root.
      req.url = '/';
      rpcHandler(req, res, next);
    },
  );
  app.use((req: Request, res: Response) => {
    res.status(404).json({
      error: `nothing at ${req.path.slice(0, 200)}: POST JSON-RPC to / (or ${orchestratorPath}), REST under ${REST_PATH}, the agent card at ${AGENT_CARD_PATHS[0]}`,
    });
  });
  app.use((err: unknown, req: Request, res: Response, _next: NextFunction) => {
    log.error({ err, path: req.path.slice(0, 200) }, 'request failed');
    if (res.headersSent) return void res.end();
    problem(req, res, 500, -32603, 'the gateway failed unexpectedly; see its logs');
  });

  const server = listen(app, opts.tls, readTimeoutMs);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port ?? 0, opts.host ?? '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  const { port } = server.address() as AddressInfo;
  const url = urlOf(opts.tls ? 'https' : 'http', opts.host ?? '127.0.0.1', port);
  card = gatewayCard(
    url,
    opts.card ?? {},
    authenticated
      ? {
          jwt: Boolean(jwt),
          description: [jwt?.description, tokens ? 'a token the gateway maps to a tenant and a user' : undefined].filter(Boolean).join(', or '),
        }
      : undefined,
  );
  cardMadeAt = new Date().toUTCString();
  const sdkHandler = new DefaultRequestHandler(
    card,
    store,
    executor,
    undefined,
    pushStore,
    new RetryingPushSender(pushStore, log, opts.push),
    undefined,
    undefined,
    // The bus is closed after every turn: resubscribe follows the thread on the mesh instead.
    { keepBusAliveStates: [] },
  );
  handler = new TroupeRequestHandler({ sdk: sdkHandler, store, followTimeoutMs: turnTimeoutMs });

  let diagnosticsServer: Server | undefined;
  let diagnosticsUrl = opts.diagnostics ? `${url}/diagnostics` : undefined;
  if (opts.diagnostics?.port !== undefined) {
    const diagnosticsApp = express();
    diagnosticsApp.disable('x-powered-by');
    diagnosticsApp.use(diagnosticsRouter(opts.diagnostics, limiter));
    diagnosticsServer = listen(diagnosticsApp, opts.tls, readTimeoutMs);
    await new Promise<void>((resolve, reject) => {
      diagnosticsServer!.once('error', reject);
      diagnosticsServer!.listen(opts.diagnostics!.port, opts.host ?? '127.0.0.1', () => resolve());
    });
    diagnosticsUrl = urlOf(opts.tls ? 'https' : 'http', opts.host ?? '127.0.0.1', (diagnosticsServer.address() as AddressInfo).port);
  }
  log.info({ url, tenants: Object.keys(opts.clients), auth: tokens ? 'bearer' : 'none', diagnostics: diagnosticsUrl }, 'gateway listening');

  const closeServer = (s: Server) =>
    new Promise<void>((resolve, reject) => {
      s.close((err) => (err ? reject(err) : resolve()));
      // Open SSE streams and idle keep-alive connections would hold close() open.
      s.closeAllConnections();
    });
  return {
    url,
    port,
    card,
    orchestratorUrl: `${url}${orchestratorPath}`,
    ...(diagnosticsUrl ? { diagnosticsUrl } : {}),
    close: async () => {
      await Promise.all([closeServer(server), ...(diagnosticsServer ? [closeServer(diagnosticsServer)] : [])]);
    },
  };
}

const DEFAULT_READ_TIMEOUT_MS = 10_000;

function listen(app: express.Express, tls: GatewayOptions['tls'], readTimeoutMs: number): Server {
  // Node checks the header and request timeouts every connectionsCheckingInterval (30 s by default): a
  // check a second keeps a stalled client's hold near the timeout itself.
  const options = { connectionsCheckingInterval: Math.min(1_000, readTimeoutMs), headersTimeout: readTimeoutMs, requestTimeout: 2 * readTimeoutMs + 1_000 };
  const server = tls ? createHttpsServer({ ...options, cert: tls.cert, key: tls.key }, app) : createHttpServer(options, app);
  // Hostile clients: bounded headers; the body's own time is bounded by readBody (a 408 saying so), and
  // this is the backstop for a request that never finishes arriving.
  server.maxHeadersCount = 100;
  return server;
}

function urlOf(scheme: string, host: string, port: number): string {
  return `${scheme}://${host.includes(':') ? `[${host}]` : host}:${port}`;
}

/** Refuses a configuration that would fail on the first request. */
function checkConfiguration(opts: GatewayOptions, tokens: BearerTokens | undefined, defaultTenant: string): void {
  for (const [tenant, client] of Object.entries(opts.clients)) {
    if (client.tenant !== tenant)
      throw new TroupeError('CONFIG_INVALID', `gateway: clients["${tenant}"] talks to tenant "${client.tenant}": key each client by its own tenant`);
  }
  if ((!tokens || (opts.jwt && !opts.jwt.tenantClaim)) && !opts.clients[defaultTenant])
    throw new TroupeError('CONFIG_INVALID', `gateway: no client for the default tenant "${defaultTenant}": pass clients.${defaultTenant} or set defaultTenant`);
  for (const tenant of tokens?.tenants() ?? []) {
    if (!opts.clients[tenant])
      throw new TroupeError(
        'CONFIG_INVALID',
        `gateway: a token maps to tenant "${tenant}" but there is no client for it: add clients.${tenant} or fix the token file`,
      );
  }
  if (opts.diagnostics) {
    if (opts.diagnostics.token.length < 16) throw new TroupeError('CONFIG_INVALID', 'gateway: the operator token must be at least 16 characters long');
    if (tokens?.has(opts.diagnostics.token))
      throw new TroupeError('CONFIG_INVALID', 'gateway: the operator token is also a user token: give operators a token of their own');
  }
}

/**
 * The request line and headers before anything reads them: a bounded URL, and the A2A-Version header in
 * the two forms the SDK matches (`1.0`, `0.3`), so `1.0.0` or `0.3.0` reach the same handlers.
 */
function requestShape(req: Request, res: Response, next: NextFunction): void {
  if ((req.originalUrl ?? '').length > MAX_URL_LENGTH) {
    res.status(414).json({ error: `the URL is over ${MAX_URL_LENGTH} characters` });
    return;
  }
  // An empty path segment (`//`, `/rest//tasks`) names nothing here; the router would fold it into `/`.
  if (req.path.includes('//')) {
    res.status(404).json({ error: 'nothing at a path with an empty segment: POST JSON-RPC to /, REST under /rest' });
    return;
  }
  const version = req.headers['a2a-version'];
  if (typeof version === 'string') {
    const match = /^\s*(\d{1,3})\.(\d{1,3})(?:\.\d{1,6})?\s*$/.exec(version);
    if (match) req.headers['a2a-version'] = `${Number(match[1])}.${Number(match[2])}`;
  }
  next();
}

/** The v1.0 card in its JSON form (oneofs such as security schemes the way A2A 1.0 writes them). */
function v1Card(cardOf: () => Promise<AgentCard>, v1WithoutHeader: boolean) {
  return async (req: Request, res: Response, next: NextFunction): Promise<void> => {
    const version = req.headers['a2a-version'];
    const wantsV1 = typeof version === 'string' ? /^1\./.test(version) : v1WithoutHeader;
    if (req.method !== 'GET' || !wantsV1) return next();
    const json = AgentCard.toJSON(await cardOf()) as Record<string, unknown>;
    // The JSON form drops empty lists, but a v1.0 card's `skills` is required: a mesh card without skills says [].
    if (!Array.isArray(json.skills)) json.skills = [];
    res.set('cache-control', 'public, max-age=60').append('vary', 'A2A-Version').json(json);
  };
}

/**
 * Reads the body with a byte cap and parses it, so the SDK's own parser finds it read. A body over the
 * cap is 413; bad JSON is a parse error and nesting over the cap an invalid request, each in the form of
 * the endpoint (JSON-RPC error object, REST error body).
 */
function readBody(maxBytes: number, orchestratorPath: string, timeoutMs: number) {
  return (req: Request, res: Response, next: NextFunction): void => {
    const declared = Number(req.headers['content-length'] ?? 0);
    const hasBody = declared > 0 || req.headers['transfer-encoding'] !== undefined;
    if (!hasBody) return next();
    // Only the A2A endpoints take bodies; anything else is a 404 whatever it sends.
    // (express matches routes without case and with a trailing slash: so does this)
    if (req.path !== '/' && req.path.replace(/\/$/, '').toLowerCase() !== orchestratorPath.toLowerCase() && !isRest(req)) {
      req.resume();
      return next();
    }
    // The media type first (as A2A orders it): JSON-RPC takes application/json, REST also application/a2a+json.
    const contentType = req.headers['content-type'];
    if (contentType !== undefined) {
      const media = contentType.split(';', 1)[0]!.trim().toLowerCase();
      const rest = isRest(req);
      if (media !== 'application/json' && !(rest && media === 'application/a2a+json')) {
        req.resume();
        const message = `Unsupported Content-Type "${contentType.slice(0, 100)}"; expected application/json${rest ? ' or application/a2a+json' : ''}`;
        if (rest) return void res.status(415).json(toRestErrorBody(new ContentTypeNotSupportedError(message), 415));
        return problem(req, res, 200, -32005, message);
      }
    }
    // Over the cap: the rest of the body is read and dropped (never buffered) and the 413 sent when it has
    // all arrived, so the client, still writing, reads the answer instead of a broken pipe. A body far over
    // the cap (DRAIN_CAP) is answered at once and its connection closed.
    let answered = false;
    const refuse = () => {
      if (answered) return;
      answered = true;
      tooLarge(req, res, maxBytes);
    };
    const chunks: Buffer[] = [];
    let size = 0;
    let done = false;
    let over = declared > maxBytes;
    if (over) {
      // Declared over the cap: no need to wait for the bytes to say no. The rest is read and dropped (up to
      // DRAIN_CAP, within the read timeout) so a client still writing reads the answer, not a broken pipe.
      refuse();
      if (declared > DRAIN_CAP) return void req.resume();
    }
    // The whole body within the read timeout, or 408 and the connection closed.
    const timer = setTimeout(() => {
      if (done) return;
      done = true;
      if (!answered) {
        answered = true;
        problem(req, res, 408, -32600, `the request body did not arrive within ${Math.round(timeoutMs / 1000)} s: send it at once`, { connection: 'close' });
      }
      res.once('finish', () => req.socket.destroy());
      if (res.writableFinished) req.socket.destroy();
    }, timeoutMs);
    timer.unref();
    req.once('close', () => clearTimeout(timer));
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (!over && size > maxBytes) {
        over = true;
        chunks.length = 0;
      }
      if (over) {
        if (size > DRAIN_CAP) refuse();
        return;
      }
      chunks.push(chunk);
    });
    req.on('error', () => {
      done = true;
    });
    req.on('end', () => {
      if (over) return refuse();
      if (done) return;
      done = true;
      const text = Buffer.concat(chunks).toString('utf8');
      let body: unknown;
      try {
        body = JSON.parse(text);
      } catch (err) {
        return problem(req, res, 400, -32700, `the body is not valid JSON (${(err as Error).message.slice(0, 200)}): send one JSON request object`);
      }
      if (exceedsDepth(body, MAX_BODY_DEPTH)) {
        return problem(req, res, 400, -32600, `the body nests deeper than ${MAX_BODY_DEPTH} levels`);
      }
      req.body = body;
      next();
    });
  };
}

/**
 * The media type of REST answers. A2A 1.0 §11.1 names `application/json` for the HTTP+JSON binding's
 * requests and responses (and §11.6 for its errors); the SDK's REST handler labels every answer with
 * `application/a2a+json`, the type §14.1 registers. A client that asks for that type in `Accept` (the
 * SDK's own client asks for `application/a2a+json, application/json`) gets it; any other client gets
 * `application/json`. Only the label changes (the body is the same JSON); SSE streams are left alone.
 */
function restMediaType(req: Request, res: Response, next: NextFunction): void {
  if (prefersA2aJson(req.headers.accept)) return next();
  const writeHead = res.writeHead;
  res.writeHead = function (this: Response, ...args: Parameters<Response['writeHead']>) {
    const type = res.getHeader('content-type');
    if (typeof type === 'string' && type.toLowerCase().startsWith(A2A_JSON)) res.setHeader('content-type', `application/json${type.slice(A2A_JSON.length)}`);
    return writeHead.apply(this, args);
  } as Response['writeHead'];
  next();
}

const A2A_JSON = 'application/a2a+json';

/** Whether `Accept` asks for application/a2a+json at least as much as for application/json. */
function prefersA2aJson(accept: string | undefined): boolean {
  if (!accept) return false;
  let a2a = 0;
  let json = 0;
  for (const range of accept.slice(0, 1024).split(',')) {
    const [media = '', ...params] = range.split(';').map((s) => s.trim().toLowerCase());
    const qParam = params.find((p) => p.startsWith('q='));
    const q = qParam ? Number(qParam.slice(2)) : 1;
    if (!Number.isFinite(q)) continue;
    if (media === A2A_JSON) a2a = Math.max(a2a, q);
    else if (media === 'application/json') json = Math.max(json, q);
  }
  return a2a > 0 && a2a >= json;
}

/** How much of a body over the cap is read and dropped before answering 413 (see readBody). */
const DRAIN_CAP = 16 * 1024 * 1024;

function isRest(req: Request): boolean {
  return req.path === REST_PATH || req.path.startsWith(`${REST_PATH}/`);
}

function tooLarge(req: Request, res: Response, limit: number): void {
  const message = `the request body is over ${limit} bytes: send a smaller message (large files by URI, not inline bytes)`;
  problem(
    req,
    res,
    413,
    ERROR_CODES.PAYLOAD_TOO_LARGE.jsonRpc,
    message,
    { connection: 'close' },
    { code: 'PAYLOAD_TOO_LARGE', hint: ERROR_CODES.PAYLOAD_TOO_LARGE.hint, limit },
  );
}

/**
 * An error before the SDK is involved, in the endpoint's own form: a JSON-RPC error object on the
 * JSON-RPC endpoint (HTTP 200 for a parse error, as JSON-RPC over HTTP does, else the status), a REST
 * error body elsewhere.
 */
function problem(
  req: Request,
  res: Response,
  status: number,
  rpcCode: number,
  message: string,
  headers: Record<string, string> = {},
  data?: Record<string, unknown>,
): void {
  if (res.headersSent) return void res.end();
  res.set(headers);
  if (isRest(req)) {
    const body = toRestErrorBody(new RequestMalformedError(message), status) as unknown as Record<string, unknown>;
    res.status(status).json(body);
    return;
  }
  const httpStatus = rpcCode === -32700 ? 200 : status;
  res.status(httpStatus).json({ jsonrpc: '2.0', id: null, error: { code: rpcCode, message, ...(data ? { data } : {}) } });
}
