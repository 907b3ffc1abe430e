/**
 * Probing what a NATS user may do, against a real server. An observer connection that may see
 * everything in the account (a node user subscribed to `>`) tells an allowed publish; the server's
 * permission violation tells a denied one. Whichever comes first decides, so no probe waits on a timer.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { encodeUser, fmtCreds } from '@nats-io/jwt';
import { createUser, fromSeed } from '@nats-io/nkeys';
import { PermissionViolationError, type NatsConnection, type Subscription } from '@nats-io/transport-node';
import { toJwtPermissions } from '../../src/security/creds.js';
import type { RolePermissions } from '../../src/security/roles.js';
import { waitUntil } from './wait.js';

export type Outcome = 'allowed' | 'denied';

let counter = 0;
const marker = () => `probe-${process.pid}-${++counter}`;
const dec = new TextDecoder();

/** Sees every message of its account; remembers which marker arrived on which subject. */
export class Observer {
  private readonly seen = new Map<string, string>();
  private readonly sub: Subscription;

  constructor(readonly nc: NatsConnection) {
    this.sub = nc.subscribe('>', {
      callback: (err, m) => {
        if (!err) this.seen.set(dec.decode(m.data), m.subject);
      },
    });
  }

  /** The subject a marker arrived on, if it did. */
  subjectOf(mark: string): string | undefined {
    return this.seen.get(mark);
  }

  async ready(): Promise<void> {
    await this.nc.flush();
  }

  close(): void {
    this.sub.unsubscribe();
  }
}

/** Counts the publish permission violations the server reports to one connection. */
export class ViolationLog {
  readonly publish: PermissionViolationError[] = [];

  constructor(nc: NatsConnection) {
    void (async () => {
      for await (const s of nc.status()) {
        if (s.type === 'error' && s.error instanceof PermissionViolationError && s.error.operation === 'publish') this.publish.push(s.error);
      }
    })();
  }
}

export class Prober {
  readonly violations: ViolationLog;

  constructor(
    readonly nc: NatsConnection,
    private readonly observer: Observer,
  ) {
    this.violations = new ViolationLog(nc);
  }

  /** Publishes a marker to `subject`: allowed when the observer gets it, denied when the server says so. */
  async publish(subject: string): Promise<Outcome> {
    const before = this.violations.publish.length;
    const mark = marker();
    this.nc.publish(subject, mark);
    await this.nc.flush();
    const outcome = await waitUntil<Outcome>(
      () => (this.observer.subjectOf(mark) ? 'allowed' : this.violations.publish.length > before ? 'denied' : undefined),
      `the outcome of publishing to ${subject}`,
      5_000,
      2,
    );
    if (outcome === 'denied') {
      await this.observer.nc.flush();
      if (this.observer.subjectOf(mark)) throw new Error(`publish to ${subject} was reported denied but delivered`);
    }
    return outcome;
  }

  /**
   * Subscribes to `subject` and has `publisher` send a marker to `literal` (a subject it matches):
   * allowed when it arrives, denied when the server refuses the subscription.
   */
  async subscribe(subject: string, literal: string, publisher: NatsConnection): Promise<Outcome> {
    const mark = marker();
    let received = false;
    let refused = false;
    const sub = this.nc.subscribe(subject, {
      callback: (err, m) => {
        if (!err && dec.decode(m.data) === mark) received = true;
      },
    });
    void sub.closed.then((err) => (refused = err instanceof PermissionViolationError));
    await this.nc.flush();
    publisher.publish(literal, mark);
    await publisher.flush();
    const outcome = await waitUntil<Outcome>(
      () => (received ? 'allowed' : refused ? 'denied' : undefined),
      `the outcome of subscribing to ${subject}`,
      5_000,
      2,
    );
    if (!sub.isClosed()) sub.unsubscribe();
    return outcome;
  }
}

/**
 * Writes a `.creds` file for a user with exactly `permissions` (or none), signed by the tenant account's
 * signing key from the store: for tests that need a user no role makes (a widened one, a bare one).
 */
export function mintCreds(storeDir: string, tenant: string, name: string, permissions: RolePermissions | undefined, file: string): Promise<string> {
  const account = JSON.parse(readFileSync(join(storeDir, 'creds', 'tenants', tenant, 'account.json'), 'utf8')) as {
    publicKey: string;
    signingKey: { seed: string };
  };
  const signer = fromSeed(new TextEncoder().encode(account.signingKey.seed));
  const user = createUser();
  return encodeUser(name, user, account.publicKey, permissions ? toJwtPermissions(permissions) : {}, { signer }).then((jwt) => {
    writeFileSync(file, fmtCreds(jwt, user), { mode: 0o600 });
    return file;
  });
}
