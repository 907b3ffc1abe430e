/**
 * A thread machine with its real children — router, agentCall, orchestration (whose calls are agentCall
 * children too) and handoff — where only the I/O is scripted: each agent request and each router-policy
 * call waits until the test settles it, and time is a manual clock the test advances timer by timer.
 * Nothing hand-makes a child's done event: children finish because their I/O did.
 */
import { createActor, fromPromise, type Actor } from 'xstate';
import type { Message } from '../../src/protocol/a2a.js';
import { META } from '../../src/protocol/metadata.js';
import type { RouterDecision } from '../../src/protocol/routing.js';
import type { AgentReply } from '../../src/protocol/wire.js';
import { agentCallMachine, type AgentRequestInput, type AgentRequestOutput } from '../../src/machines/agent-call.js';
import { orchestrationMachine } from '../../src/machines/orchestration.js';
import type { AgentDirectory } from '../../src/routing/route.js';
import { routerMachine, type PolicyInput } from '../../src/machines/router.js';
import { threadMachine, type ThreadConfig, type ThreadStatusEmitted } from '../../src/machines/thread.js';
import type { SynthesisInput, SynthesisOutput } from '../../src/machines/thread.js';
import type { CoverageRecorder } from './machine-coverage.js';

export const T0 = 1_700_000_000_000;

/** XState's timers on a clock the test moves: `fireNext()` runs the earliest timer, at its time. */
export class ManualClock {
  now = 0;
  private nextId = 0;
  private readonly timers = new Map<number, { at: number; fn: () => void }>();

  setTimeout(fn: () => void, timeout: number): number {
    const id = ++this.nextId;
    this.timers.set(id, { at: this.now + timeout, fn });
    return id;
  }

  clearTimeout(id: number): void {
    this.timers.delete(id);
  }

  get pending(): number {
    return this.timers.size;
  }

  /** Runs the earliest timer (the first set, among equals); false when none is set. */
  fireNext(): boolean {
    let next: [number, { at: number; fn: () => void }] | undefined;
    for (const entry of this.timers) if (!next || entry[1].at < next[1].at) next = entry;
    if (!next) return false;
    this.timers.delete(next[0]);
    this.now = Math.max(this.now, next[1].at);
    next[1].fn();
    return true;
  }
}

export interface OpenRequest {
  kind: 'request';
  input: AgentRequestInput;
  signal: AbortSignal;
  resolve: (reply: AgentReply) => void;
  reject: (err: unknown) => void;
  settled: boolean;
}
export interface OpenPolicyCall {
  kind: 'policy';
  input: PolicyInput;
  resolve: (decision: RouterDecision) => void;
  reject: (err: unknown) => void;
  settled: boolean;
}

export interface OpenSynthesis {
  kind: 'synthesis';
  input: SynthesisInput;
  resolve: (output: SynthesisOutput) => void;
  reject: (err: unknown) => void;
  settled: boolean;
}

export interface RigOptions {
  config?: Partial<ThreadConfig>;
  agents?: AgentDirectory;
  owner?: string;
  recorder?: CoverageRecorder;
  /** Start from a persisted snapshot (as a host restores a thread) instead of a new thread. */
  snapshot?: unknown;
  /** Replace a child machine (a fault put into a real one, the only way a child machine errors). */
  router?: typeof routerMachine;
  orchestration?: typeof orchestrationMachine;
}

export const TEAM: AgentDirectory = {
  triage: { supportsClientRouting: true },
  researcher: { supportsClientRouting: true },
  writer: { supportsClientRouting: true },
};

export class ThreadRig {
  readonly clock = new ManualClock();
  readonly io: Array<OpenRequest | OpenPolicyCall | OpenSynthesis> = [];
  readonly statuses: ThreadStatusEmitted[] = [];
  /** The user messages sent, in order. */
  readonly sent: Message[] = [];
  readonly actor: Actor<typeof threadMachine>;

  constructor(opts: RigOptions = {}) {
    const request = fromPromise<AgentRequestOutput, AgentRequestInput>(
      ({ input, signal }) =>
        new Promise<AgentReply>((resolve, reject) => {
          this.io.push({ kind: 'request', input, signal, resolve, reject, settled: false });
        }),
    );
    const policy = fromPromise<RouterDecision, PolicyInput>(
      ({ input }) =>
        new Promise<RouterDecision>((resolve, reject) => {
          this.io.push({ kind: 'policy', input, resolve, reject, settled: false });
        }),
    );
    const synthesize = fromPromise<SynthesisOutput, SynthesisInput>(
      ({ input }) =>
        new Promise<SynthesisOutput>((resolve, reject) => {
          this.io.push({ kind: 'synthesis', input, resolve, reject, settled: false });
        }),
    );
    // The same agent call for the thread and the fan-out, as a host provides it.
    const agentCall = agentCallMachine.provide({ actors: { request } });
    const machine = threadMachine.provide({
      actors: {
        agentCall,
        router: (opts.router ?? routerMachine).provide({ actors: { policy } }),
        orchestration: (opts.orchestration ?? orchestrationMachine).provide({ actors: { agentCall } }),
        synthesize,
      },
    });
    this.actor = createActor(machine, {
      input: {
        threadId: 't1',
        tenant: 'demo',
        owner: opts.owner ?? 'local',
        now: T0,
        agents: opts.agents ?? TEAM,
        config: { retries: 0, agentTimeoutMs: 1_000, ...opts.config },
      },
      clock: this.clock,
      ...(opts.snapshot ? { snapshot: opts.snapshot as never } : {}),
      ...(opts.recorder ? { inspect: opts.recorder.inspect } : {}),
    });
    this.actor.on('troupe.thread.status', (e) => this.statuses.push(e));
    this.actor.start();
  }

  now(): number {
    return T0 + this.clock.now;
  }

  get snapshot() {
    return this.actor.getSnapshot();
  }

  /** Lets every promise settle and every event it causes be processed. */
  async settle(): Promise<void> {
    for (let i = 0; i < 3; i++) await new Promise<void>((r) => setImmediate(r));
  }

  say(text: string, metadata?: Record<string, unknown>): Message {
    const message: Message = {
      kind: 'message',
      role: 'user',
      messageId: `u${this.sent.length + 1}`,
      parts: [{ kind: 'text', text }],
      ...(metadata ? { metadata } : {}),
    };
    this.sent.push(message);
    this.actor.send({ type: 'troupe.user.message', message, now: this.now() });
    return message;
  }

  /** Requests in flight, oldest first (settled and stopped ones left out). */
  openRequests(): OpenRequest[] {
    return this.io.filter((x): x is OpenRequest => x.kind === 'request' && !x.settled && !x.signal.aborted);
  }

  openPolicyCalls(): OpenPolicyCall[] {
    return this.io.filter((x): x is OpenPolicyCall => x.kind === 'policy' && !x.settled);
  }

  /** Answers the oldest request in flight. */
  answer(reply: AgentReply | ((request: OpenRequest) => AgentReply)): OpenRequest {
    const request = this.openRequests()[0];
    if (!request) throw new Error('no request in flight');
    request.settled = true;
    request.resolve(typeof reply === 'function' ? reply(request) : reply);
    return request;
  }

  /** Fails the oldest request in flight the way the transport does. */
  fail(err: unknown): OpenRequest {
    const request = this.openRequests()[0];
    if (!request) throw new Error('no request in flight');
    request.settled = true;
    request.reject(err);
    return request;
  }

  openSyntheses(): OpenSynthesis[] {
    return this.io.filter((x): x is OpenSynthesis => x.kind === 'synthesis' && !x.settled);
  }

  /** Settles the oldest synthesis in flight: the model's text, or its failure. */
  synthesise(outcome: string | Error): void {
    const call = this.openSyntheses()[0];
    if (!call) throw new Error('no synthesis in flight');
    call.settled = true;
    if (outcome instanceof Error) call.reject(outcome);
    else call.resolve({ text: outcome });
  }

  decide(outcome: RouterDecision | Error): void {
    const call = this.openPolicyCalls()[0];
    if (!call) throw new Error('no policy call in flight');
    call.settled = true;
    if (outcome instanceof Error) call.reject(outcome);
    else call.resolve(outcome);
  }

  finals(): ThreadStatusEmitted[] {
    return this.statuses.filter((s) => s.final);
  }

  /** The final answers' texts, with who wrote them. */
  finalTexts(): string[] {
    return this.finals().map(
      (s) => `${String(s.message?.metadata?.[META.agent])}: ${(s.message?.parts ?? []).map((p) => (p.kind === 'text' ? p.text : '')).join('')}`,
    );
  }

  stop(): void {
    this.actor.stop();
  }
}

/** A reply from an agent, with client-routing metadata when given. */
export function agentReply(text: string, slot?: Record<string, unknown>, id = `r-${text.replace(/\W+/g, '-')}`): Message {
  return {
    kind: 'message',
    role: 'agent',
    messageId: id,
    parts: [{ kind: 'text', text }],
    ...(slot ? { metadata: { 'https://ranch.woi.dev/extensions/client-routing/v1': slot } } : {}),
  };
}
