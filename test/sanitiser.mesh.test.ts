/**
 * The context sanitiser on the mesh: what one agent passes to another (a routed message, a handoff's
 * summary and recent messages, the calls of a fan-out) reaches the other agent masked, per the team's policy and its per-agent
 * allow rules, while the thread keeps the original and the user still sees the real conversation.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { startEmbedded } from '../src/team/embedded.js';
import { silentLogger } from '../src/observability/logger.js';
import { META } from '../src/protocol/metadata.js';
import type { Message } from '../src/protocol/a2a.js';
import { defineAgent, reply } from '../src/sdk/agent.js';
import type { TeamDefinition } from '../src/team/team.js';
import type { RouterPolicy } from '../src/routing/policy.js';

const SECRET_TEXT = 'Mail me at ada@example.com, card 4242 4242 4242 4242, password: hunter2hunter2';

/** A router policy that fans every message out to notes and billing. */
const fanOutPolicy: RouterPolicy = {
  name: 'fan-out',
  decide: async () => ({ agentId: 'notes', confidence: 0.95, reasoning: 'both should see it', additionalAgents: ['billing'] }),
};

function team(sanitiser?: TeamDefinition['sanitiser'], policy?: RouterPolicy) {
  const seen = new Map<string, Message[]>();
  const keep = (id: string, m: Message) => seen.set(id, [...(seen.get(id) ?? []), m]);
  const front = defineAgent({
    card: { id: 'front', name: 'Front', description: 'Takes requests' },
    handle: (message, ctx) => {
      keep('front', message);
      if (ctx.text.startsWith('handoff'))
        return reply('Passing you to billing', {
          handoff: { targetAgentId: 'billing', contextSummary: `User said: ${SECRET_TEXT}`, handoffReason: 'billing question' },
        });
      return reply(ctx.text, { to: ctx.text.startsWith('billing') ? 'billing' : 'notes' });
    },
  });
  const notes = defineAgent({
    card: { id: 'notes', name: 'Notes', description: 'Writes notes' },
    handle: (message, ctx) => {
      keep('notes', message);
      return reply(`noted: ${ctx.text}`, { to: 'user' });
    },
  });
  const billing = defineAgent({
    card: { id: 'billing', name: 'Billing', description: 'Billing questions' },
    handle: (message, ctx) => {
      keep('billing', message);
      if (ctx.handoff) return reply('done', { handoffReturn: { completionStatus: 'completed', resultSummary: 'answered' } });
      return reply(`billing saw: ${ctx.text}`, { to: 'user' });
    },
  });
  const def: TeamDefinition = {
    name: 'sanitise',
    agents: [front, notes, billing],
    config: { entryAgent: 'front' },
    ...(sanitiser !== undefined ? { sanitiser } : {}),
    ...(policy ? { policy } : {}),
  };
  return { def, seen };
}

const textOf = (m: Message | undefined) => (m?.parts ?? []).map((p) => (p.kind === 'text' ? p.text : '')).join('');

describe('context sanitiser between agents', () => {
  let stop: (() => Promise<void>) | undefined;
  afterEach(async () => {
    await stop?.();
    stop = undefined;
  });

  it('masks e-mail, card numbers and secrets in a routed message; the entry agent and the stored thread keep the original', async () => {
    const { def, seen } = team();
    const mesh = await startEmbedded(def, silentLogger());
    stop = mesh.stop;
    const res = await mesh.client.send(`note this: ${SECRET_TEXT}`);
    // The user's own message reaches the entry agent as written (the `entry` path is not sanitised by default).
    expect(textOf(seen.get('front')?.[0])).toContain('ada@example.com');
    const routed = textOf(seen.get('notes')?.[0]);
    expect(routed).not.toContain('ada@example.com');
    expect(routed).not.toContain('4242 4242 4242 4242');
    expect(routed).not.toContain('hunter2hunter2');
    expect(routed).toContain('[email]');
    expect(routed).toContain('[card]');
    // The stored thread is the real conversation.
    const task = await mesh.client.task(res.threadId);
    expect(textOf(task.history?.find((m) => m.role === 'user'))).toContain('ada@example.com');
  });

  it("masks a handoff target's context summary and recent messages", async () => {
    const { def, seen } = team();
    const mesh = await startEmbedded(def, silentLogger());
    stop = mesh.stop;
    const threadId = 't-handoff-sanitise';
    await mesh.client.send(`earlier: ${SECRET_TEXT}`, { threadId });
    await mesh.client.send('handoff please', { threadId });
    const request = seen.get('billing')?.[0];
    expect(request).toBeDefined();
    const wire = JSON.stringify(request);
    expect(wire).not.toContain('ada@example.com');
    expect(wire).not.toContain('4242 4242 4242 4242');
    expect(String(request?.metadata?.[META.contextSummary])).toContain('[email]');
    const recent = request?.metadata?.[META.recentMessages] as Message[];
    expect(recent.length).toBeGreaterThan(0);
    expect(recent.map(textOf).join(' ')).toContain('[card]');
  });

  it('an allow rule lets one agent see card numbers while e-mail stays masked; `false` turns the sanitiser off', async () => {
    const allowed = team({ allow: [{ agent: 'billing', detectors: ['card'] }] });
    const mesh = await startEmbedded(allowed.def, silentLogger());
    stop = mesh.stop;
    await mesh.client.send(`billing: ${SECRET_TEXT}`);
    const toBilling = textOf(allowed.seen.get('billing')?.[0]);
    expect(toBilling).toContain('4242 4242 4242 4242');
    expect(toBilling).not.toContain('ada@example.com');
    await mesh.stop();

    const off = team(false);
    const plain = await startEmbedded(off.def, silentLogger());
    stop = plain.stop;
    await plain.client.send(`note this: ${SECRET_TEXT}`);
    expect(textOf(off.seen.get('notes')?.[0])).toContain('ada@example.com');
  });

  it('masks what the calls of a fan-out carry (the fanOut path), and only when the policy applies to that path', async () => {
    const fanned = team(undefined, fanOutPolicy);
    const mesh = await startEmbedded(fanned.def, silentLogger());
    stop = mesh.stop;
    const res = await mesh.client.send(`both of you: ${SECRET_TEXT}`);
    expect(res.final.status.message?.metadata?.agentsUsed).toEqual(['notes', 'billing']);
    for (const agent of ['notes', 'billing']) {
      const seen = textOf(fanned.seen.get(agent)?.[0]);
      expect(seen).not.toContain('ada@example.com');
      expect(seen).toContain('[email]');
      expect(seen).toContain('[card]');
    }
    // The message came from the user: without the fan-out mark it would have been the `entry` path,
    // which the default policy leaves alone.
    expect(fanned.seen.get('front')).toBeUndefined();
    await mesh.stop();

    const routedOnly = team({ applyTo: ['routed'] }, fanOutPolicy);
    const other = await startEmbedded(routedOnly.def, silentLogger());
    stop = other.stop;
    await other.client.send(`both of you: ${SECRET_TEXT}`);
    expect(textOf(routedOnly.seen.get('notes')?.[0])).toContain('ada@example.com');
    expect(textOf(routedOnly.seen.get('billing')?.[0])).toContain('ada@example.com');
  });
});
