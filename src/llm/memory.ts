/**
 * What a YAML agent's model sees of its thread's conversation (docs/conversation.md).
 *
 * The thread sends the earlier messages after the summary this agent last wrote (`ctx.history`,
 * `ctx.memory`). They go to the model as they were written — the user's as `user`, this agent's own
 * answers as `assistant`, another agent's as `user` text that names it (`[agent "billing" answered] …`) —
 * within the agent.yaml's budget (`memory.max_messages`, `memory.max_tokens`, estimated at 4 characters
 * a token). When they do not fit, the oldest are folded into the summary by the agent's model
 * (`summarize: true`) until the rest fit in half the budget, so that the next turns fit again without a
 * new summary each time; the new summary goes back to the thread in the reply (`troupe/memory`), which
 * keeps it in its record. With `summarize: false`, or when the model fails to summarise, the oldest are
 * left out instead.
 */
import { META } from '../protocol/metadata.js';
import type { Message } from '../protocol/a2a.js';
import { MAX_SUMMARY_CHARS, type MemorySummary } from '../protocol/conversation.js';
import { CHARS_PER_TOKEN, type MemoryConfig } from '../config/conversation.js';
import type { ChatMessage } from '../model/types.js';

/** A history message's text for the model: text parts, data parts as JSON, files named. */
function historyText(m: Message): string {
  return m.parts
    .map((p) => {
      if (p.kind === 'text') return p.text;
      if (p.kind === 'data') return JSON.stringify(p.data);
      const f = p.file;
      return `[file${f.name ? ` ${f.name}` : ''}${f.mimeType ? ` ${f.mimeType}` : ''}]`;
    })
    .join('\n');
}

/** Who wrote a history message: `user`, this agent (`self`), or another agent's id (`troupe` for the runtime). */
function authorOf(m: Message): string {
  const agent = m.metadata?.[META.agent];
  if (m.role === 'user') return typeof agent === 'string' && agent !== 'user' ? agent : 'user';
  return typeof agent === 'string' ? agent : 'agent';
}

/** One history message as a model message. */
export function toChatMessage(m: Message, self: string): ChatMessage {
  const author = authorOf(m);
  const text = historyText(m);
  if (author === self && m.role === 'agent') return { role: 'assistant', content: text };
  if (author === 'user') return { role: 'user', content: text };
  return { role: 'user', content: `[agent "${author}" ${m.role === 'agent' ? 'answered' : 'wrote'}] ${text}` };
}

/** The estimated tokens of a message (4 characters a token, at least 1). */
function estimateTokens(text: string): number {
  return Math.max(1, Math.ceil(text.length / CHARS_PER_TOKEN));
}

/** The newest messages of `history` that fit in `maxMessages` and `maxTokens`. */
function newestFitting(history: readonly Message[], maxMessages: number, maxTokens: number): number {
  let tokens = 0;
  let n = 0;
  for (let i = history.length - 1; i >= 0 && n < maxMessages; i--) {
    tokens += estimateTokens(historyText(history[i]!));
    if (tokens > maxTokens) break;
    n++;
  }
  return n;
}

/** What the model gets of the conversation this turn, and what, if anything, to fold into the summary first. */
export interface MemoryPlan {
  /** Earlier messages given as they were written, oldest first. */
  kept: Message[];
  /** Older messages to fold into the summary (summarize on and over budget). */
  fold: Message[];
  /** The summary so far (the thread's, for this agent). */
  summary?: MemorySummary;
  /** Messages left out without a summary (summarize off, over budget). */
  dropped: number;
}

export function planMemory(history: readonly Message[], summary: MemorySummary | undefined, memory: MemoryConfig): MemoryPlan {
  const { max_messages: maxMessages, max_tokens: maxTokens, summarize } = memory;
  if (maxMessages === 0) return { kept: [], fold: [], dropped: history.length };
  const all = newestFitting(history, maxMessages, maxTokens);
  const base = summarize && summary ? { summary } : {};
  if (all === history.length) return { kept: [...history], fold: [], ...base, dropped: 0 };
  if (!summarize) return { kept: history.slice(history.length - all), fold: [], dropped: history.length - all };
  const half = newestFitting(history, Math.max(1, Math.ceil(maxMessages / 2)), Math.max(1, Math.floor(maxTokens / 2)));
  return { kept: history.slice(history.length - half), fold: history.slice(0, history.length - half), ...base, dropped: 0 };
}

/** Characters of one message the summariser reads (a long one is cut in the middle). */
const FOLD_MESSAGE_CHARS = 4_000;

function clipMiddle(text: string, max: number): string {
  if (text.length <= max) return text;
  const half = Math.floor(max / 2);
  return `${text.slice(0, half)} … ${text.slice(-half)}`;
}

/** The model messages that ask for a new summary: the one so far and the messages to fold into it. */
export function summaryRequest(self: string, previous: MemorySummary | undefined, fold: readonly Message[]): ChatMessage[] {
  const lines = fold.map((m) => {
    const author = authorOf(m);
    const who = author === 'user' ? 'User' : author === self ? 'You' : `Agent "${author}"`;
    return `${who}: ${clipMiddle(historyText(m), FOLD_MESSAGE_CHARS)}`;
  });
  return [
    {
      role: 'system',
      content: [
        `You keep the memory of agent "${self}" in a long conversation.`,
        'Write one summary of the conversation so far: the summary you are given, followed by the newer messages.',
        'Keep every fact, name, number, preference, decision and open question the agent may need later; drop small talk.',
        `Write plain prose in the conversation's language, at most ${Math.floor(MAX_SUMMARY_CHARS / 8)} words, and nothing but the summary.`,
      ].join(' '),
    },
    { role: 'user', content: `${previous ? `Summary so far:\n${previous.text}\n\n` : ''}Newer messages:\n${lines.join('\n')}` },
  ];
}

/** The summary after folding `fold` into `previous`, with the model's text (cut to the limit). */
export function nextSummary(text: string, previous: MemorySummary | undefined, fold: readonly Message[]): MemorySummary {
  const clean = text.trim().slice(0, MAX_SUMMARY_CHARS);
  return { text: clean, through: fold.at(-1)!.messageId, messages: (previous?.messages ?? 0) + fold.length };
}

/** The system prompt's paragraph that carries the summary. */
export function summaryParagraph(summary: MemorySummary | undefined): string | undefined {
  return summary?.text ? `Earlier in this conversation (a summary of ${summary.messages ?? 'the'} older messages):\n${summary.text}` : undefined;
}
