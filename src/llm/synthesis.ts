/**
 * Natural-language joining: a fan-out's answers written up as one by a model (the team's
 * `orchestration.synthesis` model, else its router's). The text streams as it comes; when the model
 * fails the thread keeps the attributed join (`**agent**: text`), so a synthesis never loses an answer.
 */
import type { SynthesisInput } from '../machines/thread.js';
import type { ModelProvider } from '../model/types.js';

/** Writes one answer from several; `onDelta` gets the text as it streams. */
export type Synthesizer = (input: SynthesisInput, onDelta: (text: string) => void, signal: AbortSignal) => Promise<string>;

export const DEFAULT_SYNTHESIS_PROMPT =
  "Several specialist agents answered the user's message. Write one answer to the user that combines what they said: " +
  'keep every fact, resolve overlaps, do not invent anything, and do not mention the agents unless it helps the user.';

const MAX_ANSWER_CHARS = 8000;

export function modelSynthesizer(provider: ModelProvider, prompt: string = DEFAULT_SYNTHESIS_PROMPT): Synthesizer {
  return async (input, onDelta, signal) => {
    const answers = input.answers
      .map((a) => `### ${a.agentId}\n${a.text.length > MAX_ANSWER_CHARS ? `${a.text.slice(0, MAX_ANSWER_CHARS)}…` : a.text}`)
      .join('\n\n');
    const completion = await provider.complete({
      messages: [
        { role: 'system', content: prompt },
        { role: 'user', content: `The user's message:\n${input.question}\n\nThe agents' answers:\n\n${answers}` },
      ],
      signal,
      onDelta,
    });
    if (!completion.text.trim()) throw new Error('the model wrote nothing');
    return completion.text;
  };
}
