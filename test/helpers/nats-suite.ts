/**
 * The lifecycle most process suites share: one nats-server for the file (started before its tests), the
 * `troupe` processes its tests spawn, and the connections they open; all stopped after the file.
 *
 *   const suite = natsSuite();
 *   const t = await suite.connect('client');          // as the demo node user, reconnecting for ever
 *   const a = await suite.connect('agent', 'echo');   // as another user of the demo tenant
 *   await spawnTroupe([...], suite.nats.env, {}, suite.group);
 */
import { afterAll, beforeAll } from 'vitest';
import { NatsTransport } from '../../src/transport/nats.js';
import { startNatsServer, type NatsServerHandle } from './nats-server.js';
import { ProcessGroup } from './processes.js';

export interface NatsSuite {
  /** The file's server (set once `beforeAll` has run). */
  readonly nats: NatsServerHandle;
  readonly group: ProcessGroup;
  /** A connection as `user` of the demo tenant (default its node user) that reconnects for ever, closed after the file. */
  connect(name: string, user?: string): Promise<NatsTransport>;
}

export function natsSuite(): NatsSuite {
  let server: NatsServerHandle | undefined;
  const group = new ProcessGroup();
  const connections: NatsTransport[] = [];
  beforeAll(async () => {
    server = await startNatsServer();
  });
  afterAll(async () => {
    await group.stopAll();
    await Promise.all(connections.map((c) => c.close().catch(() => undefined)));
    await server?.stop();
  });
  return {
    get nats() {
      if (!server) throw new Error('natsSuite: the server starts in beforeAll; use it inside a hook or test');
      return server;
    },
    group,
    async connect(name, user = 'node') {
      const t = await NatsTransport.connect({ ...this.nats.as(user), name, maxReconnectAttempts: -1 });
      connections.push(t);
      return t;
    },
  };
}
