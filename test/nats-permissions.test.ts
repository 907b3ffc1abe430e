/**
 * The security model of nats.conf, checked against a real nats-server: tenants are NATS accounts that
 * cannot see each other, and each role's users only reach their own subjects.
 */
import { PermissionViolationError, RequestError } from '@nats-io/transport-node';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { HandlerErrorContext } from '../src/transport/memory.js';
import { NatsTransport, type NatsSubscription } from '../src/transport/nats.js';
import { TransportError, type InboundMessage } from '../src/transport/types.js';
import { startNatsServer, type NatsServerHandle } from './helpers/nats-server.js';
import { bytes, sleep, text, waitFor } from './helpers/wait.js';



interface Reported {
  err: unknown;
  ctx: HandlerErrorContext;
}

function permissionErrors(reported: Reported[], operation: 'publish' | 'subscription'): PermissionViolationError[] {
  return reported
    .map((r) => r.err)
    .filter((e): e is PermissionViolationError => e instanceof PermissionViolationError && e.operation === operation);
}

describe('nats.conf permissions', () => {
  let server: NatsServerHandle;
  const open: NatsTransport[] = [];

  beforeAll(async () => {
    server = await startNatsServer();
  });
  afterAll(() => server?.stop());
  afterEach(async () => {
    await Promise.all(open.splice(0).map((t) => t.close()));
  });

  const connectAs = async (user: string, pass: string, reported?: Reported[]) => {
    const t = await NatsTransport.connect({
      ...server.asNode,
      user,
      pass,
      name: `perm-test-${user}`,
      inboxPrefix: `_INBOX_${user}`,
      onError: (err, ctx) => reported?.push({ err, ctx }),
    });
    open.push(t);
    return t;
  };

  it('refuses a wrong password at connect time with CONNECT', async () => {
    const err = await NatsTransport.connect({ ...server.asNode, user: 'triage', pass: 'not-the-password' }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(TransportError);
    expect((err as TransportError).code).toBe('CONNECT');
    expect((err as TransportError).message).toContain('refused user "triage"');
    expect((err as TransportError).message).not.toContain('not-the-password');
  });

  it('keeps tenants apart: a demo message never reaches an acme subscriber on the same subject', async () => {
    const { creds } = server;
    const demoPub = await connectAs(creds.node.user, creds.node.pass);
    const demoSub = await connectAs(creds.node.user, creds.node.pass);
    const acme = await connectAs(creds.acme.user, creds.acme.pass);
    const subject = 'troupe.demo.thread.t1.out';
    const demoGot: string[] = [];
    const acmeGot: string[] = [];
    demoSub.subscribe(subject, (m) => void demoGot.push(text(m)));
    acme.subscribe(subject, (m) => void acmeGot.push(text(m)));
    await Promise.all([demoSub.flush(), acme.flush()]);

    demoPub.publish(subject, bytes('demo secret'));
    await waitFor(() => demoGot.length === 1, 'the demo subscriber');
    // The server routed the message before answering this PING, so a leak would be here by now.
    await acme.flush();
    expect(acmeGot).toEqual([]);

    // And the other way round, which also proves the acme subscription is live.
    acme.publish(subject, bytes('acme own'));
    await waitFor(() => acmeGot.length === 1, 'the acme subscriber');
    await demoSub.flush();
    expect(acmeGot).toEqual(['acme own']);
    expect(demoGot).toEqual(['demo secret']);
  });

  it('lets an agent read and answer on its own inbox but not subscribe to another agent', async () => {
    const { creds } = server;
    const node = await connectAs(creds.node.user, creds.node.pass);
    const reported: Reported[] = [];
    const triage = await connectAs('triage', creds.agentPassword, reported);

    const own: InboundMessage[] = [];
    const stolen: string[] = [];
    triage.subscribe('troupe.demo.agent.triage', (m) => {
      own.push(m);
      if (m.reply) m.respond(bytes(`triage read: ${text(m)}`));
    });
    const forbidden = triage.subscribe('troupe.demo.agent.writer', (m) => void stolen.push(text(m))) as NatsSubscription;

    // The v3 client ends the refused subscription: its `closed` resolves (not rejects) with the error.
    const endedWith = await Promise.race([forbidden.closed, sleep(2_000).then(() => 'still open' as const)]);
    expect(endedWith).toBeInstanceOf(PermissionViolationError);
    const violation = endedWith as PermissionViolationError;
    expect(violation.operation).toBe('subscription');
    expect(violation.subject).toBe('troupe.demo.agent.writer');
    expect(permissionErrors(reported, 'subscription').map((e) => e.subject)).toEqual(['troupe.demo.agent.writer']);

    // Published in this order by one connection: once the triage message arrived, the writer one would have.
    node.publish('troupe.demo.agent.writer', bytes('for writer'));
    node.publish('troupe.demo.agent.triage', bytes('for triage'));
    await waitFor(() => own.length === 1, 'the triage inbox message');
    expect(text(own[0]!)).toBe('for triage');
    expect(stolen).toEqual([]);

    // allow_responses: the agent may answer a request without publish rights on the reply inbox.
    const reply = await node.request('troupe.demo.agent.triage', bytes('question'), { timeoutMs: 2_000 });
    expect(text(reply)).toBe('triage read: question');

    // A permission violation is not fatal to the connection.
    expect(triage.closed).toBe(false);
  });

  it('lets the client user publish into a thread but not into an agent inbox', async () => {
    const { creds } = server;
    const node = await connectAs(creds.node.user, creds.node.pass);
    const reported: Reported[] = [];
    const client = await connectAs(creds.client.user, creds.client.pass, reported);
    const threadIn: string[] = [];
    const agentInbox: string[] = [];
    // nats.conf partitions thread input: the server maps `...in.client.t1` to `...in.client.t1.<partition>`.
    node.subscribe('troupe.demo.in.client.t1.*', (m) => void threadIn.push(text(m)));
    node.subscribe('troupe.demo.agent.triage', (m) => {
      agentInbox.push(text(m));
      m.respond(bytes('should never be asked'));
    });
    await node.flush();

    client.publish('troupe.demo.agent.triage', bytes('sneaky'));
    client.publish('troupe.demo.in.client.t1', bytes('hello'));
    await waitFor(() => threadIn.length === 1, 'the thread message');
    await node.flush();
    expect(threadIn).toEqual(['hello']);
    expect(agentInbox).toEqual([]);

    // The refused publish is silent for the publisher except on the connection's status stream, which
    // the transport forwards to onError.
    await waitFor(() => permissionErrors(reported, 'publish').length === 1, 'the publish violation');
    expect(permissionErrors(reported, 'publish')[0]?.subject).toBe('troupe.demo.agent.triage');

    // A refused request fails with the permission error (the server's answer), not with a TIMEOUT.
    const err = await node.connection.flush().then(() =>
      client.request('troupe.demo.agent.triage', bytes('sneaky request'), { timeoutMs: 30_000 }).then(
        () => undefined,
        (e: unknown) => e,
      ),
    );
    expect(err).toBeInstanceOf(RequestError);
    expect(err).not.toBeInstanceOf(TransportError);
    expect((err as RequestError).cause).toBeInstanceOf(PermissionViolationError);
    expect(agentInbox).toEqual([]);
    expect(client.closed).toBe(false);
  });
});
