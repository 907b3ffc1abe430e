/**
 * Health probes of a long-running process (a node, an agent process, a gateway), served beside its metrics
 * (`--metrics-port`): what an orchestrator asks before it sends work or moves on in a rolling deploy.
 *
 *   GET /healthz   200 while the process answers (liveness: a process whose event loop is stuck does not)
 *   GET /readyz    200 when every check passes, else 503; both with each check and why it fails
 *
 * A process is ready once it has started (its setup done: streams, buckets, registration) and while each
 * check its command registers passes: the NATS connection is up; a durable node is not fenced off
 * partitions by a leases bucket that stopped answering. From a shutdown signal on it is not ready
 * ("stopping"), so a rolling deploy sees it go before it drains.
 *
 * A check is a function of what the process already knows (no request to NATS, no I/O): a probe is cheap
 * and answers at once, however often it is asked and whatever NATS does meanwhile.
 */

/** One check's answer: `detail` says why it fails (or what it saw). */
export interface CheckResult {
  ok: boolean;
  detail?: string;
}

export type Check = () => CheckResult;

export interface ReadinessReport {
  ready: boolean;
  checks: Record<string, CheckResult>;
}

/** The readiness of one process: a `started` check of its own, and the checks its command adds. */
export class Readiness {
  readonly #checks = new Map<string, Check>();
  #phase: 'starting' | 'started' | 'stopping' = 'starting';

  constructor() {
    this.#checks.set('started', () =>
      this.#phase === 'started' ? { ok: true } : { ok: false, detail: this.#phase === 'starting' ? 'starting: setting up' : 'stopping: draining' },
    );
  }

  /** Adds (or replaces) a check under `name`. */
  add(name: string, check: Check): this {
    this.#checks.set(name, check);
    return this;
  }

  /** Setup is done. */
  started(): void {
    if (this.#phase === 'starting') this.#phase = 'started';
  }

  /** A shutdown began: not ready from now on. */
  stopping(): void {
    this.#phase = 'stopping';
  }

  report(): ReadinessReport {
    const checks: Record<string, CheckResult> = {};
    let ready = true;
    for (const [name, check] of this.#checks) {
      let result: CheckResult;
      try {
        result = check();
      } catch (err) {
        result = { ok: false, detail: `the check failed: ${(err as Error).message}` };
      }
      checks[name] = result;
      ready &&= result.ok;
    }
    return { ready, checks };
  }
}

/** The NATS connection of a process: up unless closed, or lost and not back yet. */
export function natsCheck(transport: { readonly name: string; readonly closed: boolean; readonly connected?: boolean }): Check {
  return () => {
    if (transport.closed) return { ok: false, detail: `the connection to ${transport.name} is closed` };
    if (transport.connected === false) return { ok: false, detail: `lost the connection to ${transport.name}; reconnecting` };
    return { ok: true, detail: transport.name };
  };
}
