/**
 * `troupe studio`'s HTTP server. It talks to the mesh only through public interfaces: the A2A gateway
 * (the chat: `/a2a` is passed through to the gateway's JSON-RPC endpoint, SSE included) and the operator's
 * side of the inspection stream (records in, `ctl.inspection` and `ctl.threads` out). The browser gets:
 *
 *   GET  /                 the app (assets bundled from npm packages at build time, no CDN: assets.ts)
 *   GET  /api/info         mode, tenant, whether chat is available, what the nodes inspect
 *   GET  /api/stream       server-sent events: one `record` per inspection record; first every known actor
 *   GET  /api/threads      the stored threads (live and passivated), from the nodes' store
 *   POST /api/inspection   switch inspection `{ on, threadId? }`
 *   POST /a2a              A2A JSON-RPC, forwarded to the gateway (message/send, message/stream, tasks/get, tasks/cancel)
 *
 * Handlers stay short and validate at the edge; the server binds to loopback unless told otherwise. A web
 * page elsewhere cannot drive it through the browser: requests must name this server in `Host` (no DNS
 * rebinding), a cross-origin `Origin` is refused, and POSTs must be `application/json` (so a cross-site
 * form or `no-cors` fetch, which cannot send that type without a preflight this server never grants, fails).
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { ThreadsReplySchema } from '../protocol/ctl.js';
import { InspectionControlSchema, type InspectionRecord, type InspectionStateReply } from '../protocol/inspection.js';
import type { Transport } from '../transport/types.js';
import { subjects } from '../transport/subjects.js';
import { encodeJson } from '../protocol/codec.js';
import { studioAssets, type StudioAssets } from './assets.js';
import { ActorTable, controlInspection, subscribeInspection } from './stream.js';

export interface StudioOptions {
  port?: number;
  host?: string;
  /** embedded: an in-process mesh; nats: a running mesh; replay: records pushed from a recording. */
  mode: 'embedded' | 'nats' | 'replay';
  tenant: string;
  /** The mesh as an operator (inspection and threads). Without it, records come only from `push`. */
  transport?: Transport;
  /** The A2A gateway's base URL; without it the chat is off. */
  gatewayUrl?: string;
  /** A bearer token (a user's) the chat sends to a gateway that asks for one (`--tokens`, `--jwt-issuer`). */
  gatewayToken?: string;
  /** Largest request body accepted. */
  maxBodyBytes?: number;
  /**
   * Switch inspection on once subscribed (default true with a transport): the nodes, and through them the
   * agents, announce every live actor, so the studio can draw them at once.
   */
  switchOn?: boolean;
}

export interface Studio {
  url: string;
  port: number;
  /** Adds a record as if it came from the mesh (replay). */
  push(record: InspectionRecord): void;
  /** The nodes' answers to switching inspection on at start (empty without a mesh, or when refused). */
  nodes: InspectionStateReply[];
  /** Why switching on failed (operator credentials missing), if it did. */
  problem?: string;
  close(): Promise<void>;
}

export async function startStudio(opts: StudioOptions): Promise<Studio> {
  const assets: StudioAssets = await studioAssets();
  const table = new ActorTable();
  const clients = new Set<ServerResponse>();
  const maxBody = opts.maxBodyBytes ?? 1024 * 1024;
  /** `host:port` names this server answers to (filled once it listens). */
  const allowedHosts = new Set<string>();

  const push = (record: InspectionRecord) => {
    // The browser gets records as kept: whole contexts (the stream carries changes).
    const kept = table.add(record);
    if (!kept) return;
    const frame = `event: record\ndata: ${JSON.stringify(kept)}\n\n`;
    for (const res of clients) res.write(frame);
  };
  const subs = opts.transport ? subscribeInspection(opts.transport, opts.tenant, [{ kind: 'all' }], push) : [];
  let nodes: InspectionStateReply[] = [];
  let problem: string | undefined;
  if (opts.transport && opts.switchOn !== false) {
    await opts.transport.flush();
    try {
      nodes = await controlInspection(opts.transport, opts.tenant, { on: true });
    } catch (err) {
      problem = (err as Error).message.split('\n')[0];
    }
  }

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const url = new URL(req.url ?? '/', 'http://studio');
    const path = url.pathname;
    const refusal = refuse(req, allowedHosts);
    if (refusal) return sendJson(res, 403, { error: refusal });
    if (req.method === 'GET' && (path === '/' || path === '/index.html')) return send(res, 200, 'text/html; charset=utf-8', assets.html);
    if (req.method === 'GET' && path === '/assets/app.js') return send(res, 200, 'text/javascript; charset=utf-8', assets.js);
    if (req.method === 'GET' && path === '/assets/app.css') return send(res, 200, 'text/css; charset=utf-8', assets.css);
    if (req.method === 'GET' && path === '/favicon.ico') return void res.writeHead(204).end();
    if (req.method === 'GET' && path === '/api/info') {
      const inspection = opts.transport ? await controlInspection(opts.transport, opts.tenant, {}, 300).catch(() => []) : [];
      return sendJson(res, 200, { mode: opts.mode, tenant: opts.tenant, chat: Boolean(opts.gatewayUrl), mesh: Boolean(opts.transport), inspection });
    }
    if (req.method === 'GET' && path === '/api/stream') return openStream(req, res);
    if (req.method === 'GET' && path === '/api/threads') {
      if (!opts.transport) return sendJson(res, 200, { threads: [] });
      try {
        const reply = await opts.transport.request(subjects.ctl(opts.tenant, 'threads'), encodeJson({ limit: 500 }), { timeoutMs: 3_000 });
        const parsed = ThreadsReplySchema.safeParse(JSON.parse(new TextDecoder().decode(reply.data)));
        return sendJson(res, 200, { threads: parsed.success ? parsed.data.threads : [] });
      } catch (err) {
        return sendJson(res, 200, { threads: [], problem: (err as Error).message.split('\n')[0] });
      }
    }
    if (req.method === 'POST' && path === '/api/inspection') {
      if (!opts.transport) return sendJson(res, 409, { error: 'no mesh: this studio replays a recording' });
      const body = await readBody(req, 4096);
      const parsed = body === undefined ? undefined : InspectionControlSchema.safeParse(safeJson(body));
      if (!parsed?.success) return sendJson(res, 400, { error: 'expected {"on": true|false, "threadId"?: "<id>"}' });
      return sendJson(res, 200, { nodes: await controlInspection(opts.transport, opts.tenant, parsed.data) });
    }
    if (req.method === 'POST' && path === '/a2a') return forwardA2A(req, res);
    return sendJson(res, 404, { error: `nothing at ${req.method} ${path}` });
  };

  const openStream = (req: IncomingMessage, res: ServerResponse) => {
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-store', connection: 'keep-alive' });
    res.write(`retry: 1000\n\n`);
    for (const record of table.replay()) res.write(`event: record\ndata: ${JSON.stringify(record)}\n\n`);
    res.write(`event: ready\ndata: {}\n\n`);
    clients.add(res);
    const ping = setInterval(() => res.write(`: ping\n\n`), 15_000);
    req.on('close', () => {
      clearInterval(ping);
      clients.delete(res);
    });
  };

  /** The chat's JSON-RPC goes to the gateway as it came; its answer (JSON or SSE) comes back as it goes. */
  const forwardA2A = async (req: IncomingMessage, res: ServerResponse) => {
    if (!opts.gatewayUrl) return sendJson(res, 409, { error: 'no A2A gateway: start the studio with --gateway <url> (troupe gateway) to chat' });
    const body = await readBody(req, maxBody);
    if (body === undefined) return sendJson(res, 413, { error: `request body over ${maxBody} bytes` });
    const abort = new AbortController();
    res.on('close', () => abort.abort());
    let upstream: Response;
    try {
      upstream = await fetch(new URL('/', opts.gatewayUrl), {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          accept: req.headers.accept ?? 'application/json',
          ...(opts.gatewayToken ? { authorization: `Bearer ${opts.gatewayToken}` } : {}),
        },
        body,
        signal: abort.signal,
      });
    } catch (err) {
      return sendJson(res, 502, { error: `the gateway at ${opts.gatewayUrl} did not answer: ${(err as Error).message}` });
    }
    res.writeHead(upstream.status, { 'content-type': upstream.headers.get('content-type') ?? 'application/json', 'cache-control': 'no-store' });
    if (!upstream.body) return void res.end();
    try {
      for await (const chunk of upstream.body as unknown as AsyncIterable<Uint8Array>) res.write(chunk);
    } catch {
      // the browser went away, or the gateway did
    }
    res.end();
  };

  const server: Server = createServer((req, res) => {
    handle(req, res).catch((err: unknown) => {
      if (!res.headersSent) sendJson(res, 500, { error: (err as Error).message });
      else res.end();
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port ?? 8090, opts.host ?? '127.0.0.1', () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  const host = opts.host ?? '127.0.0.1';
  for (const name of ['localhost', '127.0.0.1', '[::1]', host]) allowedHosts.add(`${name}:${port}`);
  return {
    url: `http://${host === '127.0.0.1' ? 'localhost' : host}:${port}`,
    port,
    push,
    nodes,
    ...(problem ? { problem } : {}),
    close: async () => {
      for (const s of subs) s.unsubscribe();
      for (const res of clients) res.end();
      clients.clear();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** Why a request may not come from where it comes from, or undefined when it may. */
function refuse(req: IncomingMessage, allowedHosts: Set<string>): string | undefined {
  const host = req.headers.host ?? '';
  if (!allowedHosts.has(host)) return `this studio answers only to ${[...allowedHosts].join(', ')}`;
  const origin = req.headers.origin;
  if (origin !== undefined && origin !== `http://${host}`) return 'cross-origin requests are refused';
  if (req.method === 'POST' && !(req.headers['content-type'] ?? '').startsWith('application/json')) return 'POST bodies must be application/json';
  return undefined;
}

function send(res: ServerResponse, status: number, type: string, body: string): void {
  res.writeHead(status, { 'content-type': type, 'cache-control': 'no-store', 'x-content-type-options': 'nosniff' }).end(body);
}

function sendJson(res: ServerResponse, status: number, body: unknown): void {
  send(res, status, 'application/json; charset=utf-8', JSON.stringify(body));
}

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/** The body as text, or undefined when it is larger than `max` bytes. */
async function readBody(req: IncomingMessage, max: number): Promise<string | undefined> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > max) return undefined;
    chunks.push(chunk);
  }
  return Buffer.concat(chunks).toString('utf8');
}
