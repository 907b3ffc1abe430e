/**
 * An agent hop rate over time: the profile-hop setup (a fresh nats-server, the echo agent as its own user,
 * 64 requests in flight) measured in WINDOWS windows of 3 s. A rate that falls window after window means
 * state growing somewhere per request (bench/PROFILE.md: the reply permissions of an agent user).
 *
 *   node --conditions=source --import tsx bench/hop-windows.ts
 *   PROFILE_AGENT_USER=node node --conditions=source --import tsx bench/hop-windows.ts
 */
import { randomUUID } from 'node:crypto';
import { AgentHost } from '../src/actors/agent-host.js';
import { HEADERS, encodeJson, type Message } from '../src/protocol/index.js';
import { defineAgent, reply } from '../src/sdk/agent.js';
import { NatsTransport } from '../src/transport/nats.js';
import { subjects } from '../src/transport/subjects.js';
import { startNatsServer } from '../test/helpers/nats-server.js';
const server = await startNatsServer();
const agentT = await NatsTransport.connect({ ...server.as(process.env.PROFILE_AGENT_USER ?? 'echo'), name: 'hop-agent' });
const nodeT = await NatsTransport.connect({ ...server.as('node'), name: 'hop-node' });
const echo = defineAgent({ card: { id: 'echo', name: 'Echo', description: 'echoes' }, handle: (_m, ctx) => reply(ctx.text, { to: 'user' }) });
const host = await new AgentHost({ transport: agentT, agent: echo }).start();
const body = (threadId: string): Uint8Array => encodeJson({ kind: 'message', role: 'user', messageId: randomUUID(), contextId: threadId, taskId: threadId, parts: [{ kind: 'text', text: 'hello' }] } as Message);
let total = 0;
for (let win = 0; win < Number(process.env.WINDOWS ?? 5); win++) {
  let n = 0; const until = performance.now() + 3000; const t0 = performance.now();
  await Promise.all(Array.from({ length: 64 }, async (_, w) => {
    for (let i = 0; performance.now() < until; i++) {
      const threadId = `hop-${w}`;
      await nodeT.request(subjects.agentInbox('demo', 'echo'), body(threadId), { timeoutMs: 10_000, headers: { [HEADERS.threadId]: threadId, [HEADERS.tenant]: 'demo', [HEADERS.hop]: '0', [HEADERS.sender]: 'user', [HEADERS.callId]: `${threadId}/${win}-${i}` } });
      n++;
    }
  }));
  total += n;
  console.log(JSON.stringify({ window: win, perSecond: Math.round(n / ((performance.now() - t0) / 1000)), totalRequests: total }));
}
await host.stop(); await agentT.close(); await nodeT.close(); await server.stop();
