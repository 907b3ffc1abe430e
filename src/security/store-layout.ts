/**
 * The credential store on disk (the layout is drawn in creds.ts): where each file lives, what each holds
 * (validated when read back: a damaged file is a typed error), and writes through a temporary file and a
 * rename, so a crash never leaves half a file.
 */
import { randomBytes } from 'node:crypto';
import { chmod, readFile, rename, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { z } from 'zod';
import { describeZodError, TroupeError } from '../protocol/errors.js';
import { idSchema } from '../protocol/ids.js';
import { ROLES, type Role } from './roles.js';

export const MAX_PARTITIONS = 1024;
export const MAX_TENANTS = 256;

const Seed = (prefix: string) => z.string().regex(new RegExp(`^S${prefix}[A-Z2-7]{56}$`), `must be an nkey seed starting S${prefix}`);
const PublicKey = (prefix: string) => z.string().regex(new RegExp(`^${prefix}[A-Z2-7]{55}$`), `must be an nkey public key starting ${prefix}`);
const Jwt = z.string().regex(/^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/, 'must be a JWT');

export const SettingsSchema = z.object({
  version: z.literal(1),
  host: z.string().min(1).max(253),
  port: z.number().int().min(0).max(65_535),
  tenants: z.array(idSchema('tenant')).min(1).max(MAX_TENANTS),
  jetstream: z.object({ memoryBytes: z.number().int().min(1), diskBytes: z.number().int().min(1) }),
  tls: z.object({ caFile: z.string(), caKeyFile: z.string(), certFile: z.string(), keyFile: z.string() }).optional(),
});
export type Settings = z.infer<typeof SettingsSchema>;

export const OperatorSchema = z.object({ name: z.string().min(1).max(128), publicKey: PublicKey('O'), seed: Seed('O'), jwt: Jwt });
export const SystemSchema = z.object({ publicKey: PublicKey('A'), seed: Seed('A'), jwt: Jwt });
export const AccountSchema = z.object({
  tenant: idSchema('tenant'),
  publicKey: PublicKey('A'),
  seed: Seed('A'),
  signingKey: z.object({ publicKey: PublicKey('A'), seed: Seed('A') }),
  partitions: z.number().int().min(1).max(MAX_PARTITIONS),
  /** User public key → unix seconds: user JWTs issued at or before are refused. */
  revocations: z.record(PublicKey('U'), z.number().int().min(0)),
  jwt: Jwt,
});
export type AccountRecord = z.infer<typeof AccountSchema>;
export const UserSchema = z.object({
  // Agent ids and principals share one rule and cap (protocol/ids.ts).
  name: idSchema('principal'),
  role: z.enum(ROLES),
  tenant: idSchema('tenant'),
  publicKey: PublicKey('U'),
  createdAt: z.string(),
  responses: z.object({ max: z.number().int().min(1), ttlMs: z.number().int().min(1) }).optional(),
});
export type UserRecord = z.infer<typeof UserSchema>;

/** A user as `troupe creds list` shows it. */
export interface UserInfo {
  name: string;
  role: Role;
  tenant: string;
  publicKey: string;
  /** The `.creds` file to give the process (`--creds`). */
  credsFile: string;
  createdAt: string;
  revoked: boolean;
}

export async function writeFileAtomic(path: string, data: string | Uint8Array, mode: number): Promise<void> {
  const tmp = `${path}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`;
  await writeFile(tmp, data, { mode });
  // writeFile's mode applies only when it creates the file; chmod makes it so on every platform umask.
  await chmod(tmp, mode);
  await rename(tmp, path);
}

export async function writeJson(path: string, value: unknown, secret: boolean): Promise<void> {
  await writeFileAtomic(path, `${JSON.stringify(value, null, 2)}\n`, secret ? 0o600 : 0o644);
}

export async function readJson<T>(path: string, schema: z.ZodType<T>, what: string): Promise<T> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    const e =
      code === 'ENOENT'
        ? new TroupeError('CREDENTIALS_NOT_FOUND', `no ${what} at ${path}`)
        : new TroupeError('CREDENTIALS_INVALID', `cannot read ${what} at ${path}: ${(err as Error).message}`);
    e.cause = err;
    throw e;
  }
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    const e = new TroupeError('CREDENTIALS_INVALID', `${what} at ${path} is not JSON: ${(err as Error).message}`);
    e.cause = err;
    throw e;
  }
  const parsed = schema.safeParse(raw);
  if (!parsed.success) throw new TroupeError('CREDENTIALS_INVALID', `${what} at ${path} is damaged: ${describeZodError(parsed.error)}`);
  return parsed.data;
}

export async function exists(path: string): Promise<boolean> {
  try {
    await stat(path);
    return true;
  } catch {
    return false;
  }
}

export function storePaths(dir: string) {
  const creds = join(dir, 'creds');
  const tenants = join(creds, 'tenants');
  return {
    dir,
    creds,
    tenants,
    settings: join(creds, 'store.json'),
    operator: join(creds, 'operator.json'),
    operatorJwt: join(creds, 'operator.jwt'),
    system: join(creds, 'system'),
    systemAccount: join(creds, 'system', 'account.json'),
    systemCreds: join(creds, 'system', 'sys.creds'),
    account: (tenant: string) => join(tenants, tenant, 'account.json'),
    users: (tenant: string) => join(tenants, tenant, 'users'),
    serverConf: join(dir, 'server.conf'),
    includeConf: join(dir, 'nats-include.conf'),
    clusterDir: join(dir, 'cluster'),
    clusterLayout: join(dir, 'cluster', 'cluster.json'),
    resolverDir: join(dir, 'nats', 'jwt'),
    // nats-server puts its files in <store_dir>/jetstream.
    jetstreamDir: join(dir, 'nats'),
  };
}
