/**
 * A turn: the next queued user message starts one, each agent's answer is recorded (and a fan-out's
 * aggregate), and the turn ends with one final answer to the user — the last answer, or the error.
 */
import { assign, emit, enqueueActions, sendTo } from 'xstate';
import { messageText, type Message, type TaskState } from '../../protocol/a2a.js';
import { META } from '../../protocol/metadata.js';
import { USER } from '../../protocol/routing.js';
import type { AgentCallOutput } from '../agent-call.js';
import type { OrchestrationOutput } from '../orchestration.js';
import { agentReplyMessage, prune, systemMessage } from './messages.js';
import { isResume } from './handoff.js';
import { approvalWaitAfter, threadWithApproval } from './approval.js';
import { keepSummary, withoutSummary } from './memory.js';
import { readTurnUsage, threadUsage, type TurnUsage } from '../../protocol/conversation.js';
import type { SynthesisOutput, ThreadContext, ThreadStatusEmitted, Turn } from './types.js';

export const threadWithTurns = threadWithApproval.extend({
  guards: {
    hasPending: ({ context }) => context.pending.length > 0,
    /** The turn's answer completed the task (`taskEnd: answer`). */
    answeredTask: ({ context }) => context.answered === true,
    /** Several answers, for a team that synthesises them with its model. */
    synthesises: ({ context }, output: OrchestrationOutput) => context.config.orchestration.aggregation === 'synthesis' && output.answers.length >= 2,
    callSucceeded: (_, output: AgentCallOutput) => output.ok && output.reply.kind !== 'error',
    agentCompletedTask: (_, output: AgentCallOutput) => output.ok && output.reply.kind === 'task' && output.reply.status.state === 'completed',
    /** An agent's Task that gives up (failed, rejected, canceled), in a team whose agents may end a task so (`agentEndsFailed`). */
    agentEndsTaskFailed: ({ context }, output: AgentCallOutput) => context.config.agentEndsFailed === true && givesUp(output),
    /** An agent's Task that gives up, in a team whose agents may not end a task so: the turn's error. */
    agentFailedTurn: (_, output: AgentCallOutput) => givesUp(output),
  },
  actions: {
    setNow: assign({
      now: ({ context, event }) => ('now' in event && typeof event.now === 'number' ? event.now : context.now),
    }),
    setAgents: assign({
      agents: ({ context, event }) => (event.type === 'troupe.agents' ? event.agents : context.agents),
    }),
    queueUserMessage: assign({
      pending: ({ context, event }) => (event.type === 'troupe.user.message' ? [...context.pending, event.message] : context.pending),
    }),
    /** Takes the next queued user message and starts a turn with it. */
    startTurn: assign(({ context }) => {
      const [message, ...rest] = context.pending;
      if (!message) return {};
      const userMessage: Message = { ...message, contextId: context.contextId, taskId: context.threadId };
      return {
        pending: rest,
        history: prune([...context.history, userMessage], context.config.historyLimit),
        turns: context.turns + 1,
        lastError: undefined,
        turn: {
          userMessageId: userMessage.messageId,
          current: USER,
          from: USER,
          outgoing: userMessage,
          senderStack: [],
          hops: 0,
          route: [],
          startedAt: context.now,
          mode: context.handoff?.phase === 'active' && !isResume(userMessage) ? 'handoffActive' : 'normal',
        },
      };
    }),
    /** While a handoff is active the handoff actor counts the user's turns. */
    rearmAgentCall: sendTo('agentCall', { type: 'troupe.agentCall.restored' }),
    rearmOrchestration: sendTo('orchestration', ({ context }) => ({ type: 'troupe.orchestration.restored' as const, now: context.now })),
    /** A fan-out keeps time from the thread's clock (its executionTimeMs). */
    tickOrchestration: sendTo('orchestration', ({ context }) => ({ type: 'troupe.orchestration.tick' as const, now: context.now })),
    recordAgentAnswer: assign(({ context }, output: AgentCallOutput) => {
      const turn = context.turn;
      if (!output.ok) return {};
      // The thread's clock moves with the answer: the time it came, when the request said.
      const now = output.at ?? context.now;
      const reply = agentReplyMessage(output);
      if (!turn || !reply) return { now };
      // A question: an agent's Task waiting for input, or the clarification agent's answer.
      const asks = (output.reply.kind === 'task' && output.reply.status.state === 'input-required') || turn?.clarifying === true;
      const memory = keepSummary(context.memory, output.agentId, reply);
      const kept = withoutSummary(reply);
      const answer: Message = {
        ...kept,
        contextId: context.contextId,
        taskId: context.threadId,
        metadata: { ...kept.metadata, [META.agent]: output.agentId, ...(asks ? { [META.inputRequired]: true } : {}) },
      };
      return {
        now,
        ...(memory !== context.memory ? { memory } : {}),
        turn: { ...turn, lastAnswer: answer, lastFrom: output.agentId, ...withUsage(turn, [{ agent: output.agentId, usage: readTurnUsage(reply) }]) },
        history: prune([...context.history, answer], context.config.historyLimit),
      };
    }),
    /** A fan-out's aggregated answer becomes the turn's answer, with its metadata. */
    recordOrchestration: assign(({ context }, output: OrchestrationOutput) => {
      const turn = context.turn;
      if (!turn) return {};
      const answer: Message = {
        ...output.message,
        contextId: context.contextId,
        taskId: context.threadId,
        metadata: { ...output.message.metadata, [META.agent]: output.metadata.agentsUsed.join('+') || 'troupe', ...output.metadata },
      };
      const failures = output.metadata.failures;
      return {
        turn: {
          ...turn,
          lastAnswer: answer,
          lastFrom: turn.current,
          ...withUsage(
            turn,
            output.answers.map((a) => ({ agent: a.agentId, usage: a.usage })),
          ),
        },
        history: prune([...context.history, answer], context.config.historyLimit),
        lastError:
          output.metadata.taskState === 'failed'
            ? { code: 'WORKFLOW_ERROR' as const, message: `every agent failed: ${failures.map((f) => `${f.agentId} (${f.code})`).join(', ')}` }
            : undefined,
      };
    }),
    /** A fan-out with several answers, for a team that synthesises: what the model will read. */
    startSynthesis: assign(({ context }, output: OrchestrationOutput) => {
      const turn = context.turn;
      if (!turn) return {};
      const question = context.history.find((m) => m.messageId === turn.userMessageId) ?? turn.outgoing;
      return {
        turn: {
          ...turn,
          synthesis: { threadId: context.threadId, messageId: output.message.messageId, question: messageText(question), answers: output.answers },
        },
      };
    }),
    /** The model's answer replaces the attributed join (in the turn's answer and the history). */
    recordSynthesis: assign(({ context }, output: SynthesisOutput) => {
      const turn = context.turn;
      const joined = turn?.lastAnswer;
      if (!turn || !joined || !output.text.trim()) return {};
      const answer: Message = {
        ...joined,
        parts: [{ kind: 'text', text: output.text }, ...joined.parts.filter((p) => p.kind !== 'text')],
        metadata: { ...joined.metadata, [META.synthesis]: 'model' },
      };
      const { synthesis: _s, ...rest } = turn;
      return {
        turn: { ...rest, lastAnswer: answer },
        history: context.history.map((m) => (m.messageId === joined.messageId ? answer : m)),
      };
    }),
    /** The model failed: the attributed join stands, marked as such. */
    keepJoin: assign(({ context }) => {
      const turn = context.turn;
      const joined = turn?.lastAnswer;
      if (!turn || !joined) return {};
      const answer: Message = { ...joined, metadata: { ...joined.metadata, [META.synthesis]: 'join' } };
      const { synthesis: _s, ...rest } = turn;
      return { turn: { ...rest, lastAnswer: answer }, history: context.history.map((m) => (m.messageId === joined.messageId ? answer : m)) };
    }),
    /** Route steps for the extra agents of a fan-out (the primary was recorded by applyAgentRoute). */
    recordCallError: assign({
      lastError: (_, output: AgentCallOutput) => {
        if (!output.ok) return output.error;
        if (output.reply.kind === 'error') return output.reply.error;
        return undefined;
      },
      // An agent that answered with an error answered: the clock moves with it as with any answer.
      now: ({ context }, output: AgentCallOutput) => (output.ok ? (output.at ?? context.now) : context.now),
    }),
    /** An agent's Task that gave up without the right to end the task: its words are the answer, this the turn's error. */
    recordAgentGaveUp: assign({
      lastError: (_, output: AgentCallOutput) => {
        const state = output.ok && output.reply.kind === 'task' ? output.reply.status.state : 'failed';
        return {
          code: 'AGENT_ERROR' as const,
          message: `agent "${output.agentId}" answered with a task in state "${state}"; an agent ends a task only as "completed" (or, in a team with routing.agent_ends_failed, as failed), so the thread stays open`,
        };
      },
    }),
    answerUser: enqueueActions(({ context, enqueue }, params: { state: TaskState; reason?: string }) => {
      const turn = context.turn;
      const error = context.lastError;
      const completes = params.state === 'input-required' && answerCompletesTask(context);
      const state: TaskState = completes ? 'completed' : params.state;
      const routeMeta = {
        [META.route]: turn?.route ?? [],
        [META.hops]: turn?.hops ?? 0,
        ...(turn ? { [META.inReplyTo]: turn.userMessageId } : {}),
        ...(error ? { [META.error]: error } : {}),
      };
      let message: Message;
      if (turn?.lastAnswer) {
        // The turn's tokens: every answer's in it, not only the last one's.
        const usage = turn.usage?.length ? { [META.usage]: threadUsage(turn.usage) } : {};
        message = { ...turn.lastAnswer, metadata: { ...turn.lastAnswer.metadata, ...routeMeta, ...usage } };
      } else {
        const text = error ? `${error.code}: ${error.message}` : (params.reason ?? 'No agent answered.');
        message = systemMessage(context, `${turn?.userMessageId ?? 'thread'}:error`, text, routeMeta);
      }
      if (!turn?.lastAnswer) {
        enqueue.assign({ history: prune([...context.history, message], context.config.historyLimit) });
      }
      enqueue.emit({ type: 'troupe.thread.status', state, final: true, message, ...(error ? { error } : {}) });
      const approval = approvalWaitAfter(context.approval, turn?.lastAnswer, context.now);
      enqueue.assign({ turn: undefined, approval, ...(completes ? { answered: true } : {}) });
    }),
    announceWorking: emit({ type: 'troupe.thread.status', state: 'working', final: false }),
    /**
     * Every message the thread had taken and not answered (the turn's, and those queued behind it) gets its
     * own final answer, so nothing it accepted ends without one; with none open, one for the thread.
     */
    announceCanceled: enqueueActions(({ context, enqueue }) => {
      const open = [...(context.turn ? [context.turn.userMessageId] : []), ...context.pending.map((m) => m.messageId)];
      const canceled = (id: string, metadata: Record<string, unknown>): ThreadStatusEmitted => ({
        type: 'troupe.thread.status',
        state: 'canceled',
        final: true,
        message: systemMessage(context, `${id}:canceled`, 'The task was canceled.', metadata),
      });
      if (open.length === 0) enqueue.emit(canceled(context.threadId, {}));
      for (const id of new Set(open)) enqueue.emit(canceled(id, { [META.inReplyTo]: id }));
    }),
    clearTurn: assign({ turn: undefined }),
  },
});

/** An agent's answer is a Task that gives up: `failed`, `rejected` or `canceled`. */
function givesUp(output: AgentCallOutput): boolean {
  return output.ok && output.reply.kind === 'task' && AGENT_GIVE_UP_STATES.includes(output.reply.status.state);
}
const AGENT_GIVE_UP_STATES: readonly TaskState[] = ['failed', 'rejected', 'canceled'];

/** The turn's usage list with the answers' that say what they cost. */
function withUsage(turn: Turn, answers: Array<{ agent: string; usage: TurnUsage | undefined }>): Pick<Turn, 'usage'> {
  const said = answers.flatMap((a) => (a.usage ? [{ agent: a.agent, usage: a.usage }] : []));
  return said.length ? { usage: [...(turn.usage ?? []), ...said] } : {};
}

/**
 * `taskEnd: answer`: whether the turn ending now completes the task. Only an agent's answer does; a
 * question (META.inputRequired), an open handoff, an error and queued messages keep it open.
 */
function answerCompletesTask(context: ThreadContext): boolean {
  if (context.config.taskEnd !== 'answer') return false;
  const answer = context.turn?.lastAnswer;
  if (!answer || context.lastError || context.handoff || context.pending.length > 0) return false;
  return answer.metadata?.[META.inputRequired] !== true;
}
