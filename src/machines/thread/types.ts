/**
 * The thread machine's types: its configuration (with defaults), input, context, events and the status
 * events it emits for the host to publish.
 */
import type { Message, TaskState } from '../../protocol/a2a.js';
import type { ErrorBody } from '../../protocol/errors.js';
import type { HandoffRequest } from '../../protocol/handoff.js';
import type { RouteStep } from '../../protocol/metadata.js';
import type { MemorySummary, TurnUsage } from '../../protocol/conversation.js';
import type { ApprovalWait } from '../../protocol/approval.js';
import type { AgentDirectory } from '../../routing/route.js';
import type { HandoffOutput } from '../handoff.js';
import type { OrchestrationStrategy } from '../orchestration.js';
import type { ThreadConfig } from '../../config/thread.js';

export type { RouteStep };
export { DEFAULT_ROUTER_HISTORY_MESSAGES, DEFAULT_THREAD_CONFIG, type ThreadConfig } from '../../config/thread.js';

export interface ThreadInput {
  threadId: string;
  tenant: string;
  /** Who may use the thread: `<principal>` or `<principal>/<user>` (set once, by the first message). */
  owner: string;
  contextId?: string;
  config?: Partial<ThreadConfig>;
  agents?: AgentDirectory;
  now: number;
  /** The conversation this thread continues: the history of an ended task of the same owner and context. */
  history?: Message[];
}

export interface Turn {
  userMessageId: string;
  /** The agent holding the message now. */
  current: string;
  /** Who handed `current` its message (`user` or an agent id). */
  from: string;
  /** The message being sent to `current`. */
  outgoing: Message;
  /** Who sent the message to each agent in the chain, `user` at the bottom. */
  senderStack: string[];
  hops: number;
  route: RouteStep[];
  lastAnswer?: Message;
  lastFrom?: string;
  startedAt: number;
  /** `handoffStart`: the message asks a target to take over; `handoffActive`: the user talks to the target. */
  mode: 'normal' | 'handoffStart' | 'handoffActive';
  /** An agent's delegation in flight: the orchestration child `orchestration` calls its delegates. */
  delegation?: TurnDelegation;
  /** The clarification agent holds the message: its answer is a question to the user. */
  clarifying?: boolean;
  /** A fan-out's answers being synthesised into one (the child `synthesize`). */
  synthesis?: SynthesisInput;
  /** The tokens each answer of the turn says it cost, in order (its final message carries their sum). */
  usage?: Array<{ agent: string; usage: TurnUsage }>;
}

/** What the synthesis of several answers reads: the user's question and each agent's answer. */
export interface SynthesisInput {
  threadId: string;
  /** Id of the message the synthesis becomes (the streamed chunks carry it). */
  messageId: string;
  question: string;
  answers: Array<{ agentId: string; text: string }>;
}

export interface SynthesisOutput {
  text: string;
}

export interface TurnDelegation {
  delegator: string;
  agents: string[];
  strategy: OrchestrationStrategy;
  /** What the delegates get. */
  input: Message;
  /** The hop the delegates are called at (the results come back to the delegator one hop later). */
  hop: number;
}

/** The thread's view of its one open handoff; the handoff actor itself is the child `handoff`. */
interface ThreadHandoff {
  request: HandoffRequest;
  /** `ending`: the thread told it something that ends it and waits for its output (never stored: it ends at once). */
  phase: 'pending' | 'active' | 'ending';
}

export interface ThreadContext {
  threadId: string;
  tenant: string;
  owner: string;
  contextId: string;
  config: ThreadConfig;
  agents: AgentDirectory;
  history: Message[];
  /** User messages that arrived while a turn was running; handled in order afterwards. */
  pending: Message[];
  turn?: Turn;
  /** The last routing decisions across turns (bounded). */
  routeLog: RouteStep[];
  lastError?: ErrorBody;
  now: number;
  /** When the thread began (epoch ms, from its input); absent in snapshots of threads that began without it. */
  createdAt?: number;
  turns: number;
  handoff?: ThreadHandoff;
  /** The last turn's answer completed the task (`taskEnd: answer`): `input-required` passes on to `completed`. */
  answered?: boolean;
  /** The summary each agent wrote of the older turns it was given (memory.ts), by agent id. */
  memory?: Record<string, MemorySummary>;
  /** The tool approval an agent waits on, and its deadline (approval.ts). */
  approval?: ApprovalWait;
}

export type ThreadEvent =
  | { type: 'troupe.user.message'; message: Message; now?: number }
  | { type: 'troupe.agents'; agents: AgentDirectory }
  | { type: 'troupe.cancel'; reason?: string; now?: number }
  | { type: 'troupe.tick'; now: number }
  /** Sent by the host right after restoring a snapshot: timers were not persisted, re-arm them. */
  | { type: 'troupe.restored'; now: number }
  /** The handoff child ended on its own (deadline) or after the thread ended it. */
  | { type: 'xstate.done.actor.handoff'; output: HandoffOutput }
  /** The deadline of the approval asked in message `messageId` passed (a delayed event the thread raises, approval.ts). */
  | { type: 'troupe.approval.timeout'; messageId: string };

export interface ThreadStatusEmitted {
  type: 'troupe.thread.status';
  state: TaskState;
  final: boolean;
  message?: Message;
  route?: RouteStep;
  error?: ErrorBody;
}
