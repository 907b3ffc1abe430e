/**
 * Every `troupe/*` key Troupe puts in A2A metadata (messages, status events, the stored Task), in one
 * place, with what it carries. Agents in other languages read the same names (README, wire contract).
 */
import type { TaskStatusUpdateEvent } from './a2a.js';
import type { TroupeError } from './errors.js';

export const META = {
  /** Message: the agent that wrote it (`troupe` for messages of the runtime itself). */
  agent: 'troupe/agent',
  /** Status event: one route step; final message: the whole route of the turn (RouteStep[]). */
  route: 'troupe/route',
  /** Final message / status event: the typed error the turn ended with (ErrorBody). */
  error: 'troupe/error',
  /** Final message: agent-to-agent hops of the turn. */
  hops: 'troupe/hops',
  /** Final message: the user messageId it answers (several messages may be in flight on one thread). */
  inReplyTo: 'troupe/inReplyTo',
  /** Stored Task: the route log across turns (RouteStep[]). */
  routes: 'troupe/routes',
  /** Stored Task: turns so far. */
  turns: 'troupe/turns',
  /**
   * Stored Task: what a listing shows of the thread (seed 004's ThreadContext): `createdAt` (ISO), the agent
   * holding the conversation (`activeAgent`: a handoff's target, else the agent that answered last, else the
   * entry agent) and the messages the record holds (`totalMessages`). ThreadSummaryMeta.
   */
  thread: 'troupe/thread',
  /** Stored Task: older history was cut to keep the record within its size limit. */
  truncated: 'troupe/truncated',
  /**
   * Task or thread view in an answer: what was left out to keep the answer within the bus's max_payload
   * ({ messages?, artifacts?, cutParts?, reason: 'max_payload', budgetBytes }); ask for less (a smaller page,
   * a `historyLength`) to get the rest.
   */
  omitted: 'troupe/omitted',
  /** Task as the gateway serves it: older artifacts were left out to keep the answer within its size limit. */
  artifactsTruncated: 'troupe/artifactsTruncated',
  /** Text part: the file it was read from ({ name, type, pages?, sheets?... }), in eval test cases. */
  file: 'troupe/file',
  /** Stored Task: the thread and checkpoint this thread was forked from ({ threadId, checkpoint }, `troupe fork`). */
  forkedFrom: 'troupe/forkedFrom',
  /** Stored Task: who owns the thread (`<principal>` or `<principal>/<user>`). */
  owner: 'troupe/owner',
  /** Stored Task / message: the open handoff or what became of one ({ targetAgentId, sourceAgentId, phase } / { status, reason }). */
  handoff: 'troupe/handoff',
  /** Message to a handoff's source when control comes back ({ targetAgentId, status }). */
  handoffResume: 'troupe/handoffResume',
  /** Message to a handoff's target: the last messages of the thread (Message[]). */
  recentMessages: 'troupe/recentMessages',
  /** Message to an agent whose card asks for it: the thread's earlier messages, oldest first (Message[], conversation.ts). */
  history: 'troupe/history',
  /**
   * Message to an agent: the summary it wrote earlier of older turns; agent reply: a new one for the thread
   * to keep in its record ({ text, through, messages? }, conversation.ts).
   */
  memory: 'troupe/memory',
  /** Agent reply / final message: the tokens of the turn's model calls ({ inputTokens, outputTokens, calls }, conversation.ts). */
  usage: 'troupe/usage',
  /**
   * Agent reply: the tool calls waiting for a person's approval (ApprovalRequest, approval.ts); user
   * message (a data part's key, or metadata): the person's decision (ApprovalDecision).
   */
  approval: 'troupe/approval',
  /** Stored Task: the approval the thread waits on, refused at its deadline ({ agent, messageId, expiresAt }, approval.ts). */
  awaitingApproval: 'troupe/awaitingApproval',
  /** Message to a handoff's target: the source's summary. */
  contextSummary: 'troupe/contextSummary',
  /**
   * Agent reply: `true` when it asks the user something (the task stays `input-required` for the answer,
   * also in a team whose answers complete their task, `taskEnd: answer`). An agent's Task in
   * `input-required` gets it too.
   */
  inputRequired: 'troupe/inputRequired',
  /** Clarification message: why the router asked ({ reason, confidence }). */
  clarify: 'troupe/clarify',
  /** Agent reply: the agent asks the thread to delegate to other agents ({ agents, strategy?, input? }, DelegateDirective). */
  delegate: 'troupe/delegate',
  /** Message to a delegating agent: what its delegates answered (DelegationResults). */
  delegation: 'troupe/delegation',
  /** A fan-out's answer of a team that synthesises: `model` (written by the model) or `join` (the model failed). */
  synthesis: 'troupe/synthesis',
  /**
   * An agent's answer to the user: `message` asks the A2A gateway to answer a blocking SendMessage with
   * this Message instead of the Task (A2A's "message response", for an answer that needs no task). The
   * thread and its task exist all the same (the Message names its taskId); a streaming or non-blocking
   * send has already had the Task and gets the final status as usual.
   */
  response: 'troupe/response',
  /**
   * User message: the role its client sent when that was not `user` (seed 003's `assistant` on a
   * follow-up). A client's message is the user side of the thread whatever it says; the role is kept here.
   */
  callerRole: 'troupe/callerRole',
} as const;

/**
 * Keys of a turn's result metadata, next to the `troupe/*` keys: on every final answer the gateway sends
 * (`agentsUsed`, `executionTimeMs`, `taskState`), on a fan-out's answer to the user and on the results a
 * delegating agent gets back. camelCase like every other field of A2A's JSON (spec §5.5; the A2A TCK's
 * DM-SERIAL-001 reads metadata keys too), where the orchestrator design wrote `agents_used` etc.
 */
export const RESULT_META = {
  /** Agents that answered, in agent order (string[]). */
  agentsUsed: 'agentsUsed',
  /** From the fan-out's start to its last settled call (number, ms). */
  executionTimeMs: 'executionTimeMs',
  /** Per agent: how long its call took ({ [agentId]: ms }). */
  latencyMs: 'latencyMs',
  /** Per agent, in agent order: { agentId, success, content, latencyMs, executionTimeMs, error?, errorMessage? } (seed 003's AgentResponse). */
  results: 'results',
  /** `completed` or `failed`. */
  taskState: 'taskState',
} as const;
/**
 * The seed orchestrator's names of the same result keys (seed 003: `result.metadata.agents_used`, …), which
 * the gateway adds next to the camelCase ones on its orchestrator path (src/gateway/orchestrator-api.ts).
 */
export const SEED_RESULT_META = {
  agentsUsed: 'agents_used',
  executionTimeMs: 'execution_time_ms',
  taskState: 'task_state',
} as const satisfies Partial<Record<keyof typeof RESULT_META, string>>;
/** `troupe/thread` in a stored Task. */
export interface ThreadSummaryMeta {
  createdAt?: string;
  activeAgent?: string;
  totalMessages: number;
}

/** One step of a turn's route, kept in the task metadata and shown by `troupe send`. */
export interface RouteStep {
  from: string;
  to: string;
  hop: number;
  reason: string;
  at: number;
  confidence?: number;
  /** A routing decision that sent the message to no agent: the user was asked to clarify, or the router failed. */
  outcome?: 'clarify' | 'failure';
}

/**
 * The answer a history holds for user message `messageId`: the last agent message after it and before
 * the next user message (every hop's reply is kept; the turn's answer is the last), marked with
 * `troupe/inReplyTo` as the final event carried it. Undefined while it is unanswered: when it is the
 * last user message of a thread that is still `working`, its replies so far are not the answer yet.
 */
export function answerIn<M extends { role: string; messageId: string; metadata?: Record<string, unknown> }>(
  history: readonly M[],
  messageId: string,
  working: boolean,
): M | undefined {
  const at = history.findIndex((m) => m.role === 'user' && m.messageId === messageId);
  if (at < 0) return undefined;
  let answer: M | undefined;
  let i = at + 1;
  for (; i < history.length && history[i]!.role !== 'user'; i++) answer = history[i];
  if (working && i >= history.length) return undefined;
  return answer ? { ...answer, metadata: { ...answer.metadata, [META.inReplyTo]: messageId } } : undefined;
}

/**
 * The final event that refuses user message `messageId` with a typed error (state `rejected`, the error in
 * the event's and the message's metadata, `inReplyTo` naming the message when there is one), so a client
 * waiting for that message's answer gets this instead.
 */
export function rejectionEvent(opts: {
  taskId: string;
  contextId: string;
  messageId?: string | undefined;
  error: TroupeError;
  timestamp?: string;
}): TaskStatusUpdateEvent {
  const { taskId, contextId, messageId, error } = opts;
  return {
    kind: 'status-update',
    taskId,
    contextId,
    status: {
      state: 'rejected',
      message: {
        kind: 'message',
        role: 'agent',
        messageId: `${messageId ?? 'unknown'}:rejected`.slice(0, 256),
        contextId,
        taskId,
        parts: [{ kind: 'text', text: `${error.code}: ${error.message}` }],
        metadata: { [META.agent]: 'troupe', [META.error]: error.toBody(), ...(messageId !== undefined ? { [META.inReplyTo]: messageId } : {}) },
      },
      ...(opts.timestamp ? { timestamp: opts.timestamp } : {}),
    },
    final: true,
    metadata: { [META.error]: error.toBody() },
  };
}
