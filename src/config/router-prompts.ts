/**
 * The pieces of the router's prompt. `system` may say `{{catalog}}` (the header and the agents; appended
 * when it does not); `userTemplate` says `{{history}}` (earlier messages, or nothing) and `{{message}}`.
 */
export interface RouterPrompts {
  system: string;
  userTemplate: string;
  catalogHeader: string;
  /** Each agent's skills (name, description, tags) in the catalog. */
  includeCapabilities: boolean;
  /** The skills' example requests in the catalog. */
  includeExamples: boolean;
}

export const DEFAULT_ROUTER_PROMPTS: RouterPrompts = {
  system: [
    "You are the router of a team of AI agents. Pick the agent that should answer the user's latest message.",
    '',
    '{{catalog}}',
    '',
    'Answer with one JSON object and nothing else:',
    '{"agentId": "<id of the best agent>", "confidence": <0..1>, "reasoning": "<one sentence>", "additionalAgents": ["<id>", ...]}',
    '- agentId must be one of the ids above, exactly as written.',
    '- confidence: how sure you are that this agent (with the additional ones) is right. Below 0.7 means the',
    '  message is ambiguous or no agent fits, and the user will be asked to clarify.',
    '- additionalAgents: only when the message asks several agents for different things; otherwise omit it.',
  ].join('\n'),
  userTemplate: '{{history}}Latest user message:\n{{message}}',
  catalogHeader: 'Agents:',
  includeCapabilities: true,
  includeExamples: true,
};
