/**
 * A Q&A team routed by the scoring policy (no LLM): a message that asks two things fans out to both
 * agents in parallel and the answers are aggregated; a vague one gets a clarifying question.
 */
import { defineAgent, reply } from '../../sdk/agent.js';
import { defineTeam } from '../../team/team.js';
import { ScoringPolicy } from '../../routing/scoring.js';

export const weather = defineAgent({
  card: {
    id: 'weather',
    name: 'Weather',
    description: 'Weather forecasts and current conditions for any city',
    skills: [
      {
        id: 'forecast',
        name: 'Weather forecast',
        description: 'Forecasts temperature, rain, wind and snow',
        tags: ['weather', 'forecast', 'temperature', 'rain', 'sunny', 'wind'],
        examples: ['What is the weather in Paris tomorrow?', 'Will it rain this weekend?'],
      },
    ],
  },
  handle: (_m, ctx) => reply(`Forecast: 21°C and sunny (asked: "${ctx.text}").`, { to: 'user' }),
});

export const travel = defineAgent({
  card: {
    id: 'travel',
    name: 'Travel',
    description: 'Books flights, trains and hotels',
    skills: [
      {
        id: 'booking',
        name: 'Travel booking',
        description: 'Books flights, trains and hotel rooms',
        tags: ['flight', 'book', 'booking', 'hotel', 'train', 'travel', 'ticket'],
        examples: ['Book me a flight to Rome', 'I need a hotel in Berlin for two nights'],
      },
    ],
  },
  handle: async (_m, ctx) => {
    await new Promise((r) => setTimeout(r, 50));
    return reply(`Booked: a seat on the 09:40 flight (asked: "${ctx.text}").`, { to: 'user' });
  },
});

export const billing = defineAgent({
  card: {
    id: 'billing',
    name: 'Billing',
    description: 'Invoices, refunds and payment questions',
    skills: [
      {
        id: 'invoices',
        name: 'Invoices and refunds',
        description: 'Explains invoices, issues refunds, updates payment methods',
        tags: ['invoice', 'refund', 'payment', 'charge', 'billing', 'subscription'],
        examples: ['Why was I charged twice?', 'I want a refund for my last invoice'],
      },
    ],
  },
  handle: () => {
    throw new Error('the billing system is down');
  },
});

export default defineTeam({
  name: 'qa',
  agents: [weather, travel, billing],
  policy: new ScoringPolicy(),
  config: { entryAgent: 'weather', usePolicy: true, agentTimeoutMs: 2_000, retries: 0, orchestration: { strategy: 'parallel', maxParallelAgents: 3 } },
});
