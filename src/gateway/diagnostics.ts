/**
 * Diagnostics over HTTP for operators, behind an operator token that is not a user token:
 *
 *   GET  /health                     the gateway process answers
 *   GET  /ready                      NATS connected, partitions owned, store reachable, agents seen (503 if not)
 *   GET  /threads?state=&limit=      the tenant's threads (id, state, updated)
 *   GET  /threads/:id                one thread's record as the node shows operators: redacted, no snapshot
 *   DELETE /threads/:id              erase the thread: record, live actor, dead letters (409 while a turn is in flight)
 *   POST /threads/:id/rehydrate      drop the live actor and reload the thread from the store
 *   GET  /routes?limit=&cursor=      the routing log across threads, newest threads first, paginated
 *
 * Everything goes through an operator TroupeClient (operator NATS credentials: the ctl subjects), never
 * through the user-facing client; redaction happens on the node (ctl.thread) and again here.
 */
import { timingSafeEqual } from 'node:crypto';
import express, { type NextFunction, type Request, type Response, type Router } from 'express';
import { z } from 'zod';
import type { TroupeClient } from '../sdk/client.js';
import { meshStatus } from '../sdk/status.js';
import { redact, redactKeeping } from '../observability/redact.js';
import { META, TroupeError, idProblem } from '../protocol/index.js';
import { bearerToken, tokenDigest } from './tokens.js';
import type { TokenBuckets } from './rate-limit.js';

export interface DiagnosticsOptions {
  /** The operator token: `Authorization: Bearer <token>`. Must differ from every user token. */
  token: string;
  /** A client with operator rights on the tenant (ctl subjects). */
  client: TroupeClient;
  /** Ingress partitions the nodes should own between them (readiness). Default: whatever the nodes report. */
  partitions?: number;
  /** How long to gather ps answers. Default 500 ms. */
  psWindowMs?: number;
}

const CursorSchema = z.object({ u: z.string(), t: z.string() });

const MAX_SCAN = 10_000;
/** HTTP statuses of the mesh's answers that are not the gateway's failure (502). */
const DIAGNOSTICS_STATUS: Partial<Record<string, number>> = { THREAD_NOT_FOUND: 404, THREAD_BUSY: 409 };

/**
 * `limiter`: the gateway's rate limit, applied here as on the message endpoints (seed 003: the task routes
 * are "rate-limited to prevent misuse"): one bucket per token sent (or per address without one), taken
 * before the token is checked, so guessing the operator token is rate-limited too.
 */
export function diagnosticsRouter(opts: DiagnosticsOptions, limiter?: TokenBuckets): Router {
  const router = express.Router();
  const expected = Buffer.from(tokenDigest(opts.token), 'hex');
  const client = opts.client;

  router.use((req: Request, res: Response, next: NextFunction) => {
    const token = bearerToken(req.headers.authorization);
    const wait = limiter?.take(`diagnostics:${token ? tokenDigest(token) : `ip:${req.socket.remoteAddress ?? ''}`}`) ?? 0;
    if (wait > 0) {
      res
        .status(429)
        .set('retry-after', String(wait))
        .json({ error: `too many requests for this token: retry in ${wait} s` });
      return;
    }
    const given = token ? Buffer.from(tokenDigest(token), 'hex') : undefined;
    if (!given || !timingSafeEqual(given, expected)) {
      res
        .status(401)
        .set('www-authenticate', 'Bearer realm="troupe-diagnostics"')
        .json({ error: 'diagnostics need the operator token: Authorization: Bearer <operator token>' });
      return;
    }
    next();
  });

  router.get('/health', (_req, res) => {
    res.json({ status: 'ok' });
  });

  router.get('/ready', async (_req, res) => {
    const status = await meshStatus(client, { partitions: opts.partitions, windowMs: opts.psWindowMs });
    res.status(status.ready ? 200 : 503).json(status);
  });

  router.get('/threads', async (req, res) => {
    const limit = intParam(req.query.limit, 100, 1, MAX_SCAN);
    const state = typeof req.query.state === 'string' && /^[a-z-]{1,32}$/.test(req.query.state) ? req.query.state : undefined;
    const { threads, truncated } = await client.ctl('threads', { limit, ...(state ? { state } : {}) });
    res.json({ threads, truncated });
  });

  router.get('/threads/:id', async (req, res) => {
    const threadId = threadParam(req.params.id);
    const reply = await client.ctl('thread', { threadId });
    res.json({
      threadId,
      revision: reply.revision,
      ...(reply.expiresAtUtc ? { expiresAtUtc: reply.expiresAtUtc } : {}),
      record: redactKeeping(reply.record, threadId),
    });
  });

  router.delete('/threads/:id', async (req, res) => {
    const threadId = threadParam(req.params.id);
    res.json({ threadId, deleted: true, ...(await client.deleteThread(threadId)) });
  });

  router.post('/threads/:id/rehydrate', async (req, res) => {
    const threadId = threadParam(req.params.id);
    res.json({ threadId, state: await client.rehydrate(threadId) });
  });

  router.get('/routes', async (req, res) => {
    const limit = intParam(req.query.limit, 20, 1, 100);
    const after = cursorParam(req.query.cursor);
    const listed = await client.ctl('threads', { limit: MAX_SCAN });
    const ordered = listed.threads.sort((a, b) =>
      a.updatedAt === b.updatedAt ? a.threadId.localeCompare(b.threadId) : b.updatedAt.localeCompare(a.updatedAt),
    );
    const start = after ? ordered.findIndex((t) => t.updatedAt < after.u || (t.updatedAt === after.u && t.threadId > after.t)) : 0;
    const page = start < 0 ? [] : ordered.slice(start, start + limit);
    const threads = await Promise.all(
      page.map(async (t) => {
        try {
          const reply = await client.ctl('thread', { threadId: t.threadId });
          const routes = reply.record.task.metadata?.[META.routes];
          return { threadId: t.threadId, state: t.state, updatedAt: t.updatedAt, steps: redact(Array.isArray(routes) ? routes : []) };
        } catch (err) {
          return { threadId: t.threadId, state: t.state, updatedAt: t.updatedAt, steps: [], error: (err as Error).message };
        }
      }),
    );
    const last = page.at(-1);
    const more = start >= 0 && start + limit < ordered.length;
    res.json({
      threads,
      ...(more && last ? { nextCursor: Buffer.from(JSON.stringify({ u: last.updatedAt, t: last.threadId })).toString('base64url') } : {}),
      ...(listed.truncated ? { scanned: listed.threads.length, truncated: true } : {}),
    });
  });

  router.use((_req, res) => {
    res.status(404).json({ error: 'no such diagnostics endpoint: /health, /ready, /threads, /threads/:id (GET, DELETE), /threads/:id/rehydrate, /routes' });
  });

  router.use((err: unknown, _req: Request, res: Response, _next: NextFunction) => {
    const error = err instanceof DiagnosticsInputError ? err : TroupeError.from(err, 'TRANSPORT_ERROR');
    const status = err instanceof DiagnosticsInputError ? 400 : error instanceof TroupeError ? (DIAGNOSTICS_STATUS[error.code] ?? 502) : 502;
    res.status(status).json({ error: error.message, ...(error instanceof TroupeError ? { code: error.code, hint: error.hint } : {}) });
  });

  return router;
}

class DiagnosticsInputError extends Error {
  override readonly name = 'DiagnosticsInputError';
}

function threadParam(value: string | string[] | undefined): string {
  const problem = idProblem('thread', value);
  if (problem) throw new DiagnosticsInputError(problem);
  return value as string;
}

function intParam(value: unknown, fallback: number, min: number, max: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'string' || !/^\d{1,6}$/.test(value)) throw new DiagnosticsInputError(`expected a whole number from ${min} to ${max}`);
  return Math.min(max, Math.max(min, Number(value)));
}

function cursorParam(value: unknown): { u: string; t: string } | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'string' || value.length > 512) throw new DiagnosticsInputError('cursor: use the nextCursor of the previous page');
  try {
    return CursorSchema.parse(JSON.parse(Buffer.from(value, 'base64url').toString('utf8')));
  } catch {
    throw new DiagnosticsInputError('cursor: use the nextCursor of the previous page');
  }
}
