/**
 * A long-lived process's NATS connection tells its log when it is lost and regained, and the server's
 * asynchronous errors go there too (NatsConnectOptions.log): `troupe up`, `troupe agent`, the gateway
 * and the studio pass theirs. Real nats-server, restarted on its port.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { NatsTransport } from '../src/transport/nats.js';
import { startNatsServer, type NatsServerHandle } from './helpers/nats-server.js';
import { capturingLogger } from './helpers/log-lines.js';
import { waitFor } from './helpers/wait.js';

describe('NATS connection log', () => {
  let server: NatsServerHandle;
  const open: NatsTransport[] = [];

  beforeAll(async () => {
    server = await startNatsServer();
  });
  afterAll(async () => {
    await Promise.all(open.map((t) => t.close().catch(() => undefined)));
    await server?.stop();
  });

  it('says when the connection is lost and when it is back, and keeps serving', async () => {
    const { lines, log } = capturingLogger();
    const t = await NatsTransport.connect({ ...server.asNode, name: 'conn-log-node', maxReconnectAttempts: -1, log });
    open.push(t);
    t.subscribe('conn-log.echo', (m) => void m.respond(m.data));
    expect(new TextDecoder().decode((await t.request('conn-log.echo', new TextEncoder().encode('one'), { timeoutMs: 2_000 })).data)).toBe('one');
    expect(lines).toEqual([]);

    await server.restart();
    await waitFor(() => lines.some((l) => l.msg === 'reconnected to NATS'), 'the reconnect line', 20_000);
    const told = lines.filter((l) => l.connection === 'conn-log-node').map((l) => [l.level, l.msg, l.server]);
    const where = `127.0.0.1:${server.port}`;
    expect(told).toEqual([
      [40, 'lost the connection to NATS; reconnecting', where],
      [40, 'reconnected to NATS', where],
    ]);
    // The subscription came back with the connection.
    let answer = '';
    for (let i = 0; i < 20 && answer !== 'two'; i++) {
      answer = await t.request('conn-log.echo', new TextEncoder().encode('two'), { timeoutMs: 500 }).then(
        (m) => new TextDecoder().decode(m.data),
        () => '',
      );
    }
    expect(answer).toBe('two');
  });

  it("logs the server's refusal of a publish as an error line naming the subject", async () => {
    const { lines, log } = capturingLogger();
    const t = await NatsTransport.connect({ ...server.as('client'), name: 'conn-log-client', log });
    open.push(t);
    // A client may publish only to its own inbound subjects: the broker refuses this one, asynchronously.
    t.publish('troupe.demo.agents.echo.inbox', new Uint8Array());
    await t.flush();
    await waitFor(() => lines.some((l) => l.level === 50), 'the refusal', 5_000);
    const refusal = lines.find((l) => l.level === 50)!;
    expect(refusal.msg).toBe('NATS transport error');
    expect(refusal.subject).toBe('troupe.demo.agents.echo.inbox');
  });
});
