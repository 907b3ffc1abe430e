/**
 * The demo team: deterministic agents, no LLM, so the routing is the thing to watch.
 * - triage reads the request and passes it on; it asks researcher quick questions, which come back
 *   to it (`sender`), and it can be talked into a loop with writer, which the hop limit stops.
 * - researcher gathers "facts" and passes them to writer.
 * - writer streams a short answer to the user.
 */
import { defineAgent, reply } from '../../sdk/agent.js';
import { defineTeam } from '../../team/team.js';

const INTENT = 'demo/intent';

export const triage = defineAgent({
  card: {
    id: 'triage',
    name: 'Triage',
    description: 'Reads every request first and decides who should work on it',
    skills: [{ id: 'triage', name: 'Triage', description: 'Sorts requests', tags: ['triage', 'routing'], examples: ['Write me a note about otters'] }],
  },
  handle: (message, ctx) => {
    if (ctx.sender === 'researcher') return reply(`Checked with researcher: ${ctx.text}`, { to: 'user', reason: 'quick check answered' });
    if (ctx.sender === 'writer') return reply(`triage: writer, once more please (${ctx.hop})`, { to: 'writer', reason: 'loop demo' });
    const text = ctx.text.toLowerCase();
    if (text.includes('loop'))
      return reply(`triage: writer, please polish "${ctx.text}"`, { to: 'writer', reason: 'loop demo', metadata: { [INTENT]: 'loop' } });
    if (text.trim().endsWith('?')) return reply(ctx.text, { to: 'researcher', reason: 'a quick question for research', metadata: { [INTENT]: 'check' } });
    void message;
    return reply(ctx.text, { to: 'researcher', reason: 'needs research before writing', metadata: { [INTENT]: 'write' } });
  },
});

export const researcher = defineAgent({
  card: {
    id: 'researcher',
    name: 'Researcher',
    description: 'Finds facts about a topic',
    skills: [{ id: 'research', name: 'Research', description: 'Collects facts', tags: ['research', 'facts'], examples: ['What do otters eat?'] }],
  },
  handle: (message) => {
    const topic = message.parts.flatMap((p) => (p.kind === 'text' ? [p.text] : [])).join(' ');
    const fact = `Facts on "${topic}": 3 sources agree it is worth writing about.`;
    if (message.metadata?.[INTENT] === 'check') return reply(fact, { to: 'sender', reason: 'answering the quick check' });
    return reply(fact, { to: 'writer', reason: 'facts ready for writing' });
  },
});

export const writer = defineAgent({
  card: {
    id: 'writer',
    name: 'Writer',
    description: 'Writes the final answer for the user, streaming it',
    capabilities: { streaming: true },
    skills: [{ id: 'write', name: 'Writing', description: 'Writes prose', tags: ['writing'], examples: ['Write a paragraph'] }],
  },
  async *handle(message, ctx) {
    if (message.metadata?.[INTENT] === 'loop' || ctx.sender === 'triage') {
      return reply(`writer: back to you, triage (${ctx.hop})`, { to: 'triage', reason: 'loop demo' });
    }
    for (const word of ['Here ', 'is ', 'your ', 'piece. ']) yield word;
    return reply(`Here is your piece. ${ctx.text}`, { to: 'user', reason: 'finished writing' });
  },
});

export default defineTeam({
  name: 'demo',
  agents: [triage, researcher, writer],
  config: { entryAgent: 'triage', maxHops: 6, agentTimeoutMs: 5_000, retries: 1, retryDelayMs: 200 },
});
