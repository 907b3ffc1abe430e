/**
 * A Troupe extension of the gateway (not part of A2A): a task's checkpoints for its owner, the caller the
 * gateway authenticated (a user's tasks only; anyone else's look like none).
 *
 *   GET  /troupe/tasks/{id}/checkpoints           the checkpoints it keeps, oldest first (HistoryReply)
 *   GET  /troupe/tasks/{id}/checkpoints/{n}       one whole (CheckpointReply)
 *   GET  /troupe/tasks/{id}/checkpoints/{a}..{b}  what changed from a to b (CheckpointDiff)
 *   POST /troupe/tasks/{id}/checkpoints/{n}/fork  a new task (a new context) from it (ForkReply)
 *
 * Each calls the owner-checked `req` verb of the mesh for the caller and maps a Troupe error to its HTTP
 * status through the one error table (-32001 not found: 404, -32602 bad request: 400, else 502).
 */
import type { NextFunction, Request, Response, Router } from 'express';
import { ERROR_CODES, TroupeError, isValidId } from '../protocol/index.js';
import { diffCheckpoints } from '../sdk/history.js';
import type { GatewayCaller } from './caller.js';
import { taskNotFoundMessage } from './errors.js';

const CHECKPOINTS_PATH = '/troupe/tasks/:id/checkpoints';

export function mountCheckpoints(app: Pick<Router, 'get' | 'post'>): void {
  app.get(CHECKPOINTS_PATH, (req, res, next) =>
    answer(req, res, next, async (caller, id) => caller.client.checkpoints('history', { threadId: id }, caller.as)),
  );
  app.get(`${CHECKPOINTS_PATH}/:which`, (req, res, next) =>
    answer(req, res, next, async (caller, id) => {
      const which = String(req.params.which);
      const range = /^(\d{1,9})\.\.(\d{1,9})$/.exec(which);
      if (range) {
        const [a, b] = await Promise.all(
          [range[1], range[2]].map(async (n) => (await caller.client.checkpoints('checkpoint', { threadId: id, n: Number(n) }, caller.as)).checkpoint),
        );
        return diffCheckpoints(a!, b!);
      }
      return caller.client.checkpoints('checkpoint', { threadId: id, n: checkpointNumber(which) }, caller.as);
    }),
  );
  app.post(`${CHECKPOINTS_PATH}/:n/fork`, (req, res, next) =>
    answer(req, res, next, async (caller, id) => caller.client.checkpoints('fork', { threadId: id, n: checkpointNumber(String(req.params.n)) }, caller.as)),
  );
}

function checkpointNumber(text: string): number {
  if (!/^\d{1,9}$/.test(text) || Number(text) < 1)
    throw new TroupeError('INVALID_MESSAGE', `"${text.slice(0, 40)}" is not a checkpoint number (1, 2, …) nor a range a..b`);
  return Number(text);
}

async function answer(req: Request, res: Response, next: NextFunction, fn: (caller: GatewayCaller, id: string) => Promise<unknown>): Promise<void> {
  const id = String(req.params.id);
  const shown = id.slice(0, 200);
  try {
    if (!isValidId('thread', id)) throw new TroupeError('THREAD_NOT_FOUND', taskNotFoundMessage(shown));
    res.json(await fn(res.locals.caller as GatewayCaller, id));
  } catch (err) {
    if (!(err instanceof TroupeError)) return next(err);
    const rpc = ERROR_CODES[err.code].jsonRpc as number;
    const status = rpc === -32001 ? 404 : rpc === -32602 ? 400 : 502;
    // "not yours" and "does not exist" say the same.
    const message = err.code === 'THREAD_NOT_FOUND' ? taskNotFoundMessage(shown) : err.message;
    res.status(status).json({ error: { code: err.code, message, hint: err.hint } });
  }
}
