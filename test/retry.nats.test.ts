/**
 * What a real nats-server answers when a stream is missing, read by the setup steps' retry rules: a
 * create-or-bind step asks again on it (the cluster recovering), any other call does not.
 */
import { jetstreamManager } from '@nats-io/jetstream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { NatsTransport } from '../src/transport/nats.js';
import { isCreateOrBindTransient, isStreamNotFound, isTransientJetStreamError } from '../src/transport/jetstream/retry.js';
import { startNatsServer, type NatsServerHandle } from './helpers/nats-server.js';

describe('retry rules on a real server', () => {
  let nats: NatsServerHandle;
  let transport: NatsTransport;

  beforeAll(async () => {
    nats = await startNatsServer();
    transport = await NatsTransport.connect({ ...nats.asNode, name: 'retry-rules' });
  });

  afterAll(async () => {
    await transport?.close().catch(() => undefined);
    await nats?.stop();
  });

  it('"stream not found" is worth another attempt to a create-or-bind step only; a refusal to neither', async () => {
    const jsm = await jetstreamManager(transport.connection);
    const missing = await jsm.streams.info('TROUPE_IN').then(
      () => undefined,
      (err: unknown) => err,
    );
    expect(missing).toBeInstanceOf(Error);
    expect(isStreamNotFound(missing)).toBe(true);
    expect(isTransientJetStreamError(missing)).toBe(false);
    expect(isCreateOrBindTransient(missing)).toBe(true);
    // What a single server refuses (three replicas) it refuses again on the next attempt.
    const refused = await jsm.streams.add({ name: 'TROUPE_IN', subjects: ['troupe.demo.in.nope'], num_replicas: 3 }).then(
      () => undefined,
      (err: unknown) => err,
    );
    expect(refused).toBeInstanceOf(Error);
    expect((refused as Error).message).toMatch(/replicas/);
    expect(isCreateOrBindTransient(refused)).toBe(false);
  });
});
