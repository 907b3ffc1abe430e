/**
 * The claims Troupe's JWTs carry: a tenant account's limits and its ingress subject mapping (the partition
 * of each thread, see creds.ts), a role's permissions in a user JWT, the tags that say what a creds file is
 * for, and the nkey helpers the store signs with.
 */
import type { Account, Permissions } from '@nats-io/jwt';
import { fromSeed, type KeyPair } from '@nats-io/nkeys';
import { idProblem } from '../protocol/ids.js';
import { SUBJECT_PREFIX } from '../transport/subjects.js';
import type { RolePermissions } from './roles.js';
import { MAX_PARTITIONS, type AccountRecord } from './store-layout.js';

/** Tags on user JWTs, so a creds file says what it is for (`readCredsIdentity`). */
export const ROLE_TAG = 'troupe-role:';
export const TENANT_TAG = 'troupe-tenant:';

export interface JetStreamAccountLimits {
  /** Bytes of memory-backed streams per tenant. Default 256 MiB. */
  memoryBytes: number;
  /** Bytes of file-backed streams per tenant. Default 4 GiB. */
  diskBytes: number;
}

export const DEFAULT_JETSTREAM_LIMITS: JetStreamAccountLimits = { memoryBytes: 256 * 1024 ** 2, diskBytes: 4 * 1024 ** 3 };

export function keyPair(seed: string): KeyPair {
  return fromSeed(new TextEncoder().encode(seed));
}

export function seedOf(kp: KeyPair): string {
  return new TextDecoder().decode(kp.getSeed());
}

export const nowSeconds = () => Math.floor(Date.now() / 1000);

/** The account JWT's subject mappings that partition a tenant's inbound thread messages (see header). */
function partitionMappings(tenant: string, partitions: number): Record<string, Array<{ subject: string; weight: number }>> {
  const problem = idProblem('tenant', tenant);
  if (problem) throw new RangeError(problem);
  if (!Number.isInteger(partitions) || partitions < 1 || partitions > MAX_PARTITIONS) throw new RangeError(`partitions must be 1..${MAX_PARTITIONS}`);
  const t = `${SUBJECT_PREFIX}.${tenant}`;
  // No spaces inside {{…}}: the JWT library refuses subjects with spaces. partition(N,2) hashes the
  // second wildcard only (the thread id), so P does not change a thread's partition.
  const destination = `${t}.in.{{wildcard(1)}}.{{wildcard(2)}}.{{partition(${partitions},2)}}`;
  return {
    [`${t}.in.*.*`]: [{ subject: destination, weight: 100 }],
    // A publish straight to a partition subject is put back where its thread belongs.
    [`${t}.in.*.*.*`]: [{ subject: destination, weight: 100 }],
  };
}

/** The `nats` part of an account JWT carries more than @nats-io/jwt's Account type names. */
export type AccountClaims = Partial<Account> & { mappings?: ReturnType<typeof partitionMappings> };

export const UNLIMITED_CORE = { subs: -1, data: -1, payload: -1, imports: -1, exports: -1, wildcards: true, conn: -1, leaf: -1 };

export function tenantAccountClaims(account: Omit<AccountRecord, 'jwt'>, limits: JetStreamAccountLimits): AccountClaims {
  return {
    description: `Troupe tenant ${account.tenant}`,
    limits: {
      // Every limit is explicit: an absent one decodes as 0, and 0 connections means none.
      ...UNLIMITED_CORE,
      mem_storage: limits.memoryBytes,
      disk_storage: limits.diskBytes,
      streams: -1,
      consumer: -1,
    },
    signing_keys: [account.signingKey.publicKey],
    // A user JWT without permissions of its own (not one of ours) gets nothing rather than everything.
    default_permissions: { pub: { allow: [], deny: ['>'] }, sub: { allow: [], deny: ['>'] } },
    revocations: { ...account.revocations },
    mappings: partitionMappings(account.tenant, account.partitions),
  };
}

/** RolePermissions → the JWT's permission claims (ttl in nanoseconds, as Go's time.Duration). */
export function toJwtPermissions(p: RolePermissions): Permissions {
  const out: Permissions = { pub: { allow: [...p.pub.allow], deny: [...p.pub.deny] }, sub: { allow: [...p.sub.allow], deny: [...p.sub.deny] } };
  if (p.resp) out.resp = { max: p.resp.max, ttl: p.resp.ttlMs * 1_000_000 };
  return out;
}
