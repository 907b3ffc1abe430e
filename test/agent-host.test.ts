/**
 * The agent host's actor and its counters (src/actors/agent-host.ts, src/machines/agent.ts): the host counts
 * every request; its actor always hears the events that move it between idle and busy, and every request's
 * events while someone watches (inspection on). `troupe ps` reads the host's counters, exact at any moment.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { AgentHost } from '../src/actors/agent-host.js';
import { AgentReplySchema, HEADERS, decode, encodeJson, type Message } from '../src/protocol/index.js';
import { defineAgent, reply } from '../src/sdk/agent.js';
import { MemoryBus, MemoryTransport } from '../src/transport/memory.js';
import { subjects } from '../src/transport/subjects.js';
import { waitFor } from './helpers/wait.js';

let host: AgentHost | undefined;
let pending: Array<() => void> = [];
afterEach(async () => {
  // A failed assertion leaves calls waiting: let them end so the host can stop.
  for (const open of pending.splice(0)) open();
  await host?.stop();
  host = undefined;
});

/** An agent whose every call waits until the test opens its gate; "fail" makes the call throw. */
async function gatedAgent() {
  const gates: Array<() => void> = [];
  pending = gates;
  const agent = defineAgent({
    card: { id: 'gated', name: 'Gated', description: 'answers when the test lets it' },
    handle: async (_m, ctx) => {
      await new Promise<void>((open) => gates.push(open));
      if (ctx.text === 'fail') throw new Error('told to fail');
      return reply(ctx.text, { to: 'user' });
    },
  });
  const bus = new MemoryBus();
  host = await new AgentHost({ transport: new MemoryTransport({ bus }), agent, tenant: 'demo' }).start();
  const events: string[] = [];
  host.actor.system.inspect((e) => {
    if (e.type === '@xstate.event' && e.event.type.startsWith('troupe.agent.')) events.push(e.event.type.slice('troupe.agent.'.length));
  });
  const caller = new MemoryTransport({ bus });
  let n = 0;
  const call = async (text: string) => {
    const id = `m-${++n}`;
    const message: Message = { kind: 'message', role: 'user', messageId: id, contextId: 't-1', taskId: 't-1', parts: [{ kind: 'text', text }] };
    const res = await caller.request(subjects.agentInbox('demo', 'gated'), encodeJson(message), {
      timeoutMs: 10_000,
      headers: { [HEADERS.threadId]: 't-1', [HEADERS.hop]: '0', [HEADERS.sender]: 'user', [HEADERS.callId]: `t-1/${id}` },
    });
    return decode(AgentReplySchema, res.data, 'reply');
  };
  return { host, gates, events, call };
}

const detail = (h: AgentHost) => {
  const { inFlight, handled, failed } = h.info('n').detail as { inFlight: number; handled: number; failed: number };
  return { inFlight, handled, failed };
};

describe('agent host: the actor hears every call while watched, and is brought up to date when read', () => {
  it('unwatched, the calls send the actor nothing; read (ps), it is brought up to date: busy while calls run, idle at rest, the counters exact', async () => {
    const { host: h, gates, events, call } = await gatedAgent();
    const replies = Promise.all([call('a'), call('b'), call('fail')]);
    await waitFor(() => gates.length === 3, 'three calls in the handler');
    // Three calls started, nobody watching and nobody has read the actor: not one event.
    expect(events).toEqual([]);
    expect(h.info('n').state).toBe('ready.busy');
    expect(events).toEqual(['counted']);
    expect(h.actor.getSnapshot().value).toEqual({ ready: 'busy' });
    expect(detail(h)).toEqual({ inFlight: 3, handled: 0, failed: 0 });
    // Read again with nothing changed: no second event.
    expect(events).toEqual(['counted']);

    gates.shift()!();
    await waitFor(() => detail(h).handled === 1, 'the first answer');
    expect(h.info('n').state).toBe('ready.busy');
    expect(h.actor.getSnapshot().context).toMatchObject({ inFlight: 2, handled: 1, failed: 0 });

    for (const open of gates.splice(0)) open();
    const answers = await replies;
    expect(answers.map((a) => a.kind)).toEqual(['message', 'message', 'error']);
    expect(events).toEqual(['counted', 'counted']);
    expect(detail(h)).toEqual({ inFlight: 0, handled: 2, failed: 1 });
    expect(events).toEqual(['counted', 'counted', 'counted']);
    const snap = h.actor.getSnapshot();
    expect(snap.value).toEqual({ ready: 'idle' });
    expect(snap.context).toMatchObject({ inFlight: 0, handled: 2, failed: 1 });
  });

  it('watched (inspection on), every call start and end is an event, carrying the counters', async () => {
    const { host: h, gates, events, call } = await gatedAgent();
    h.inspection.switch.set(true);
    const replies = Promise.all([call('a'), call('b')]);
    await waitFor(() => gates.length === 2, 'two calls in the handler');
    expect(h.actor.getSnapshot().context).toMatchObject({ inFlight: 2, lastMessageId: 'm-2' });
    gates.shift()!();
    await waitFor(() => events.length === 3, 'the first answer as an event');
    expect(h.actor.getSnapshot().value).toEqual({ ready: 'busy' });
    expect(h.actor.getSnapshot().context).toMatchObject({ inFlight: 1, handled: 1 });
    gates.shift()!();
    await replies;
    expect(events).toEqual(['received', 'received', 'answered', 'answered']);
    expect(h.actor.getSnapshot().value).toEqual({ ready: 'idle' });
    expect(h.actor.getSnapshot().context).toMatchObject({ inFlight: 0, handled: 2, failed: 0 });
  });
});

describe('agent host: the context a handler gets', () => {
  it('its stream, log and inspect work when taken out of it or read from a copy of it', async () => {
    const seen: Array<{ keys: string[]; kinds: string[]; callId: string | undefined }> = [];
    const agent = defineAgent({
      card: { id: 'ctxuser', name: 'Context user', description: 'streams through a copy of its context' },
      handle: (_m, ctx) => {
        const { stream, log, inspect } = ctx;
        const copy = { ...ctx };
        stream('one ');
        copy.stream('two ');
        log.debug('taken out');
        copy.log.debug('from a copy');
        seen.push({ keys: Object.keys(ctx).sort(), kinds: [typeof stream, typeof log.debug, typeof inspect, typeof copy.inspect], callId: ctx.callId });
        return reply(`${ctx.text}!`, { to: 'user' });
      },
    });
    const bus = new MemoryBus();
    host = await new AgentHost({ transport: new MemoryTransport({ bus }), agent, tenant: 'demo' }).start();
    const caller = new MemoryTransport({ bus });
    const chunkSubject = 'troupe.demo.chunks.ctxuser.node.c1';
    const chunks: string[] = [];
    caller.subscribe(chunkSubject, (m) => {
      const e = JSON.parse(new TextDecoder().decode(m.data)) as { artifact: { parts: Array<{ text: string }>; artifactId: string } };
      chunks.push(`${e.artifact.artifactId}=${e.artifact.parts[0]!.text}`);
    });
    const message: Message = { kind: 'message', role: 'user', messageId: 'm-1', contextId: 't-1', taskId: 't-1', parts: [{ kind: 'text', text: 'hi' }] };
    const res = await caller.request(subjects.agentInbox('demo', 'ctxuser'), encodeJson(message), {
      timeoutMs: 10_000,
      headers: { [HEADERS.threadId]: 't-1', [HEADERS.hop]: '0', [HEADERS.sender]: 'user', [HEADERS.callId]: 't-1/m-1', [HEADERS.chunks]: chunkSubject },
    });
    const answer = decode(AgentReplySchema, res.data, 'reply');
    expect(answer.kind === 'message' && answer.parts[0]).toMatchObject({ text: 'hi!' });
    await waitFor(() => chunks.length === 2, 'both chunks');
    expect(chunks).toEqual(['m-1:stream=one ', 'm-1:stream=two ']);
    expect(seen).toEqual([
      {
        keys: ['callId', 'contextId', 'hop', 'inspect', 'log', 'peers', 'sender', 'signal', 'stream', 'taskId', 'tenant', 'text', 'threadId'],
        kinds: ['function', 'function', 'function', 'function'],
        // The request's Troupe-Call-Id, as sent.
        callId: 't-1/m-1',
      },
    ]);
  });
});
