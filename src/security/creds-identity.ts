/** Reading a `.creds` file: who its user is, in which tenant and role (the JWT's signature is checked). */
import { readFile } from 'node:fs/promises';
import { parseCreds } from '@nats-io/jwt';
import { TroupeError } from '../protocol/errors.js';
import { isValidId } from '../protocol/ids.js';
import { inboxPrefix, ROLES, type AnyRole } from './roles.js';
import { ROLE_TAG, TENANT_TAG } from './jwt-claims.js';

export interface CredsIdentity {
  /** The user's name: a client's principal P, an agent's id. */
  name: string;
  publicKey: string;
  /** The account (tenant) public key. */
  account: string;
  role?: AnyRole;
  tenant?: string;
  /** For clients, gateways and operators: the inbox prefix their connections must use. */
  inboxPrefix?: string;
}

/** What a `.creds` file says about its user (the JWT's signature is checked). */
export async function readCredsIdentity(file: string): Promise<CredsIdentity> {
  let parsed: Awaited<ReturnType<typeof parseCreds>>;
  try {
    parsed = await parseCreds(await readFile(file));
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    const e = new TroupeError(
      code === 'ENOENT' ? 'CREDENTIALS_NOT_FOUND' : 'CREDENTIALS_INVALID',
      `cannot use the credentials in ${file}: ${(err as Error).message}`,
    );
    e.cause = err;
    throw e;
  }
  const tags = parsed.uc.nats.tags ?? [];
  const role = tags.find((t) => t.startsWith(ROLE_TAG))?.slice(ROLE_TAG.length);
  const tenant = tags.find((t) => t.startsWith(TENANT_TAG))?.slice(TENANT_TAG.length);
  const knownRole = role === 'system' || (ROLES as readonly string[]).includes(role ?? '') ? (role as AnyRole) : undefined;
  const name = parsed.uc.name;
  return {
    name,
    publicKey: parsed.uc.sub,
    account: parsed.aid,
    ...(knownRole ? { role: knownRole } : {}),
    ...(tenant ? { tenant } : {}),
    ...((knownRole === 'client' || knownRole === 'gateway' || knownRole === 'operator') && isValidId('principal', name)
      ? { inboxPrefix: inboxPrefix(name) }
      : {}),
  };
}
