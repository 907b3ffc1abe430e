/**
 * `billing`, a TypeScript agent in the mixed team: the YAML `support` agent hands refund requests to it
 * with its `handoff` tool. Billing then talks to the customer directly (ctx.handoff holds support's
 * context summary) and gives control back with `handoffReturn` when the refund is settled.
 *
 *   troupe agent examples/yaml-agents/billing.ts --nats nats://127.0.0.1:4222
 */
import { defineAgent, reply } from 'troupe';

const ORDER = /\b[A-Z]-\d{4}\b/i;
const FINISHED = /\b(no|done|thanks|thank you|that's all)\b/i;

export default defineAgent({
  card: {
    id: 'billing',
    name: 'Billing',
    description: 'Refunds and invoices: takes the conversation over to settle money matters, then hands it back',
    skills: [
      { id: 'refunds', name: 'Refunds', description: 'Issues refunds for orders', tags: ['refund', 'money', 'invoice'], examples: ['I want my money back'] },
    ],
  },
  handle: (_message, ctx) => {
    if (!ctx.handoff) return reply(`Billing only works on a handed-over conversation; ask support. (${ctx.text})`, { to: 'sender' });
    const order = ORDER.exec(ctx.text)?.[0]?.toUpperCase() ?? ORDER.exec(ctx.handoff.contextSummary)?.[0]?.toUpperCase();
    if (FINISHED.test(ctx.text)) {
      return reply('Glad I could help. Passing you back to support.', {
        handoffReturn: { completionStatus: 'completed', resultSummary: order ? `refund for ${order} issued` : 'no refund was needed' },
      });
    }
    if (order) return reply(`Billing here: the refund for ${order} is issued and reaches your account within 5 working days. Anything else?`);
    return reply(`Billing here. Support told me: "${ctx.handoff.contextSummary}". Which order number should I refund?`);
  },
});
