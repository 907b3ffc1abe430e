/**
 * A thread's configuration, as team.yaml sets it and the thread machine reads it, with its defaults.
 */
export type OrchestrationStrategy = 'parallel' | 'sequential' | 'first_success';

export interface ThreadConfig {
  /**
   * The agent a user message nobody addressed goes to (without a policy). Empty (a node without a team):
   * the only live agent; with several, `triage` when one is live (the demo's convention), else the user
   * gets NO_ENTRY_AGENT naming --team and --to.
   */
  entryAgent: string;
  maxHops: number;
  historyLimit: number;
  agentTimeoutMs: number;
  retries: number;
  retryDelayMs: number;
  usePolicy: boolean;
  threshold: number;
  maxAttempts: number;
  fallbackAgent?: string;
  /** The route reason when the fallback agent answers (`{{attempts}}`, `{{error}}`, `{{agent}}`). */
  fallbackReasonTemplate?: string;
  /**
   * The agent that asks the user when the router is unsure (seed 000's ClarificationAgentId): it gets the
   * user's message with `troupe/clarify` ({ reason, confidence, candidate }) and its answer is the question
   * (the task stays input-required). Absent, or not live: the thread asks with `clarifyText`.
   */
  clarificationAgent?: string;
  /** What the user is asked when the router is unsure; may say `{{candidate}}`, `{{confidence}}`, `{{reasoning}}`. */
  clarifyText: string;
  /** Earlier messages of the thread the router policy sees besides the new one (default 10). */
  routerHistoryMessages?: number;
  /**
   * How a turn that answers the user ends the task. `open` (default): `input-required`, the thread is the
   * conversation and the next message continues the same task. `answer`: as the agent said — an answer
   * completes the task (`submitted → working → completed`, seed 000); a question (a reply marked
   * `troupe/inputRequired`, or an agent's Task in `input-required`), an active handoff, the router's
   * clarification, an error or more queued messages keep it `input-required`. The next message of the
   * context then starts a new task of the same context.
   */
  taskEnd?: 'open' | 'answer';
  /**
   * Checkpoints each thread keeps (time travel: `troupe history`, `troupe fork`), one per committed turn,
   * the oldest going first; 0 turns them off. Default 50. Read by the node, not the thread machine.
   */
  checkpoints?: number;
  /**
   * Whether an agent's Task in `failed`, `rejected` or `canceled` ends the task (`failed`). Default: no —
   * it is the turn's answer with AGENT_ERROR and the task stays open; a failing agent cannot close the
   * user's conversation for good. `true` for a team whose agents decide that (an A2A conformance agent).
   */
  agentEndsFailed?: boolean;
  /** Longest a handoff may hold the thread before control returns to its source. */
  handoffMaxDurationMs: number;
  /**
   * What the team lets its agents do, beyond what their cards say (both must allow it). Each list names the
   * agents allowed; absent, every agent is. A denied action ends the turn with HANDOFF_NOT_ALLOWED or
   * DELEGATION_NOT_ALLOWED, logged and shown to the user.
   */
  permissions?: {
    /** Agents that may start a handoff. */
    handoffInitiate?: string[];
    /** Agents that may be handed a conversation. */
    handoffAccept?: string[];
    /** Agents that may delegate to others. */
    delegate?: string[];
  };
  /** How a decision naming several agents fans out. */
  orchestration: {
    /**
     * Whether a router decision's additional agents are called too (seed 003's EnableMultiAgentCoordination).
     * `false`: only the primary agent takes the message. Default true.
     */
    multiAgent?: boolean;
    strategy: OrchestrationStrategy;
    maxParallelAgents: number;
    fallbackMessage?: string;
    partialFailureTemplate?: string;
    /**
     * How several answers become one: `join` (default) attributes each (`**agent**: text`); `synthesis`
     * has the team's model write one answer from them (streamed), the join when the model fails.
     */
    aggregation?: 'join' | 'synthesis';
  };
}

export const DEFAULT_ROUTER_HISTORY_MESSAGES = 10;

export const DEFAULT_THREAD_CONFIG: ThreadConfig = {
  entryAgent: '',
  maxHops: 10,
  historyLimit: 50,
  agentTimeoutMs: 30_000,
  retries: 2,
  retryDelayMs: 1_000,
  usePolicy: false,
  threshold: 0.7,
  maxAttempts: 3,
  clarifyText: "I'm not sure which of our agents should take this. Could you say a bit more about what you need?",
  orchestration: { strategy: 'parallel', maxParallelAgents: 3 },
  handoffMaxDurationMs: 10 * 60_000,
};
