/**
 * Per-user NATS credentials, NATS's own way: decentralised JWT auth ("operator mode").
 *
 * An operator key signs one account JWT per tenant (plus the system account). Each tenant account lists a
 * signing key; that key signs user JWTs carrying the role's permissions from roles.ts. nats-server trusts
 * the operator and learns accounts from its `full` resolver, so a new user (an agent, a client, a node) is
 * just a `.creds` file: nothing on the server changes and nothing restarts. Revoking a user adds its public
 * key to the account JWT's `revocations`, and the system user pushes that JWT to the running servers
 * (`$SYS.REQ.CLAIMS.UPDATE`), which disconnect the user at once and refuse it from then on.
 *
 * Each tenant account also carries the ingress subject mapping: a client's publish to
 * `troupe.<t>.in.<P>.<T>` is stored as `troupe.<t>.in.<P>.<T>.<partition>`, partition = FNV-1a(T) mod N
 * (`partitionOf` in transport/jetstream/ingress.ts). A publish straight to a 6-token partition subject is
 * mapped the same way, so nobody can put a thread into another partition.
 *
 * The store (default `.troupe/`, git-ignored; keys and seeds are 0600, directories 0700):
 *
 *   server.conf                          generated nats-server config (server-config.ts)
 *   nats-include.conf                    its operator-mode part alone, for the repository's nats.conf to include
 *   cluster/<server>.conf, cluster/<server>/  a cluster's configs and stores (`writeClusterConfigs`, `troupe cluster up`)
 *   nats/jetstream/, nats/jwt/           the server's JetStream store (store_dir nats/) and account resolver
 *   tls/                                 CA and server certificate when made with --tls (tls.ts)
 *   creds/store.json                     settings: listen address, tenants, JetStream limits, TLS files
 *   creds/operator.json, operator.jwt    the operator key (its seed signs accounts) and JWT
 *   creds/system/account.json, sys.creds the system account and its user (pushes account updates)
 *   creds/tenants/<t>/account.json       the tenant account: key, signing key, partitions, revocations, JWT
 *   creds/tenants/<t>/users/<name>.json  a user: role, public key, when it was made
 *   creds/tenants/<t>/users/<name>.creds its credentials (user JWT + seed): give this file to the process
 *
 * Writes go through a temporary file and a rename, so a crash never leaves half a file. Two processes
 * changing the same store at once are not coordinated (the last write of an account wins).
 */
import { randomBytes } from 'node:crypto';
import { chmod, mkdir, readdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { encodeAccount, encodeOperator, encodeUser, fmtCreds, parseCreds, type Account, type Permissions, type User } from '@nats-io/jwt';
import { createAccount, createOperator, createUser, fromSeed, type KeyPair } from '@nats-io/nkeys';
import { z } from 'zod';
import { describeZodError, TroupeError } from '../protocol/errors.js';
import { DEFAULT_PARTITIONS } from '../transport/jetstream/leases.js';
import { SUBJECT_PREFIX } from '../transport/subjects.js';
import { idProblem, idSchema, isValidId } from '../protocol/ids.js';
import { idKindOf, inboxPrefix, rolePermissions, ROLES, type AnyRole, type ResponseRules, type Role, type RolePermissions } from './roles.js';
import { renderIncludeConfig, renderServerConfig, type ServerConfigInput } from './server-config.js';
import { createCertificates } from './tls.js';

export const DEFAULT_STORE_DIR = '.troupe';

/**
 * What any user's name must be: the widest of the id kinds users are named by (an agent's id, up to
 * 100 characters; principals are held to 64 when the user is made, by `idKindOf` its role).
 */
const USER_NAME = 'agent' as const;

/** The agents of the demo teams: `creds init` makes credentials for them in every tenant. */
export const DEMO_AGENTS: readonly string[] = ['triage', 'researcher', 'writer', 'echo', 'pyecho'];
/** The client principal `troupe send` and other one-shot commands use. */
export const DEFAULT_CLIENT = 'cli';
export const DEFAULT_OPERATOR_USER = 'operator';
export const DEFAULT_NODE_USER = 'node';
export const MAX_PAYLOAD_BYTES = 1024 * 1024;
export const MAX_PARTITIONS = 1024;
const MAX_TENANTS = 256;
const SYSTEM_ACCOUNT = 'SYS';
const SYSTEM_USER = 'sys';
/** Tags on user JWTs, so a creds file says what it is for (`readCredsIdentity`). */
const ROLE_TAG = 'troupe-role:';
const TENANT_TAG = 'troupe-tenant:';

export interface JetStreamAccountLimits {
  /** Bytes of memory-backed streams per tenant. Default 256 MiB. */
  memoryBytes: number;
  /** Bytes of file-backed streams per tenant. Default 4 GiB. */
  diskBytes: number;
}

export const DEFAULT_JETSTREAM_LIMITS: JetStreamAccountLimits = { memoryBytes: 256 * 1024 ** 2, diskBytes: 4 * 1024 ** 3 };

// ---------------------------------------------------------------------------------------------------
// What the store files hold. Everything read back is validated: a damaged file is a typed error.
// ---------------------------------------------------------------------------------------------------

const Seed = (prefix: string) => z.string().regex(new RegExp(`^S${prefix}[A-Z2-7]{56}$`), `must be an nkey seed starting S${prefix}`);
const PublicKey = (prefix: string) => z.string().regex(new RegExp(`^${prefix}[A-Z2-7]{55}$`), `must be an nkey public key starting ${prefix}`);
const Jwt = z.string().regex(/^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/, 'must be a JWT');

const SettingsSchema = z.object({
  version: z.literal(1),
  host: z.string().min(1).max(253),
  port: z.number().int().min(0).max(65_535),
  tenants: z.array(idSchema('tenant')).min(1).max(MAX_TENANTS),
  jetstream: z.object({ memoryBytes: z.number().int().min(1), diskBytes: z.number().int().min(1) }),
  tls: z.object({ caFile: z.string(), caKeyFile: z.string(), certFile: z.string(), keyFile: z.string() }).optional(),
});
type Settings = z.infer<typeof SettingsSchema>;

const OperatorSchema = z.object({ name: z.string().min(1).max(128), publicKey: PublicKey('O'), seed: Seed('O'), jwt: Jwt });
const SystemSchema = z.object({ publicKey: PublicKey('A'), seed: Seed('A'), jwt: Jwt });
const AccountSchema = z.object({
  tenant: idSchema('tenant'),
  publicKey: PublicKey('A'),
  seed: Seed('A'),
  signingKey: z.object({ publicKey: PublicKey('A'), seed: Seed('A') }),
  partitions: z.number().int().min(1).max(MAX_PARTITIONS),
  /** User public key → unix seconds: user JWTs issued at or before are refused. */
  revocations: z.record(PublicKey('U'), z.number().int().min(0)),
  jwt: Jwt,
});
type AccountRecord = z.infer<typeof AccountSchema>;
const UserSchema = z.object({
  // Agent ids and principals share one rule and cap (protocol/ids.ts).
  name: idSchema('principal'),
  role: z.enum(ROLES),
  tenant: idSchema('tenant'),
  publicKey: PublicKey('U'),
  createdAt: z.string(),
  responses: z.object({ max: z.number().int().min(1), ttlMs: z.number().int().min(1) }).optional(),
});
type UserRecord = z.infer<typeof UserSchema>;

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

// ---------------------------------------------------------------------------------------------------
// Files
// ---------------------------------------------------------------------------------------------------

async function writeFileAtomic(path: string, data: string | Uint8Array, mode: number): Promise<void> {
  const tmp = `${path}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`;
  await writeFile(tmp, data, { mode });
  // writeFile's mode applies only when it creates the file; chmod makes it so on every platform umask.
  await chmod(tmp, mode);
  await rename(tmp, path);
}

async function writeJson(path: string, value: unknown, secret: boolean): Promise<void> {
  await writeFileAtomic(path, `${JSON.stringify(value, null, 2)}\n`, secret ? 0o600 : 0o644);
}

async function readJson<T>(path: string, schema: z.ZodType<T>, what: string): Promise<T> {
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

async function exists(path: string): Promise<boolean> {
  try {
    await stat(path);
    return true;
  } catch {
    return false;
  }
}

function keyPair(seed: string): KeyPair {
  return fromSeed(new TextEncoder().encode(seed));
}

function seedOf(kp: KeyPair): string {
  return new TextDecoder().decode(kp.getSeed());
}

const nowSeconds = () => Math.floor(Date.now() / 1000);

// ---------------------------------------------------------------------------------------------------
// Claims
// ---------------------------------------------------------------------------------------------------

/** The account JWT's subject mappings that partition a tenant's inbound thread messages (see header). */
export function partitionMappings(tenant: string, partitions: number): Record<string, Array<{ subject: string; weight: number }>> {
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
type AccountClaims = Partial<Account> & { mappings?: ReturnType<typeof partitionMappings> };

const UNLIMITED_CORE = { subs: -1, data: -1, payload: -1, imports: -1, exports: -1, wildcards: true, conn: -1, leaf: -1 };

function tenantAccountClaims(account: Omit<AccountRecord, 'jwt'>, limits: JetStreamAccountLimits): AccountClaims {
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

// ---------------------------------------------------------------------------------------------------
// The store
// ---------------------------------------------------------------------------------------------------

export interface InitOptions {
  /** Store directory; default `.troupe`. */
  dir?: string;
  /** Default ['demo']. */
  tenants?: string[];
  /** Ingress partitions per tenant (must equal the nodes' --partitions). Default 8. */
  partitions?: number;
  /** Listen address written to server.conf. Default 127.0.0.1:4222. */
  host?: string;
  port?: number;
  /** Make a CA and a server certificate and require TLS. `hosts`: names in the certificate. */
  tls?: boolean | { hosts?: string[] };
  jetstream?: Partial<JetStreamAccountLimits>;
  /** Agents to make credentials for in every tenant; default DEMO_AGENTS. */
  agents?: readonly string[];
  /** Client principals to make in every tenant; default [DEFAULT_CLIENT]. */
  clients?: readonly string[];
  operatorName?: string;
}

export interface AddUserOptions {
  tenant: string;
  role: Role;
  /** Default for node/operator: the first free of `node`, `node-2`, … (`operator`, …). Required otherwise. */
  name?: string;
  /** Agents: replies per request and how long after it (roles.ts AGENT_RESPONSES by default). */
  responses?: ResponseRules;
}

/**
 * Creates a store: operator, system account and user, one account per tenant, users for a node, an
 * operator, the default client and the demo agents in each tenant, and server.conf.
 */
export async function initCredentialStore(opts: InitOptions = {}): Promise<CredentialStore> {
  const dir = resolve(opts.dir ?? DEFAULT_STORE_DIR);
  const tenants = opts.tenants?.length ? opts.tenants : ['demo'];
  const lower = new Set<string>();
  for (const t of tenants) {
    const problem = idProblem('tenant', t);
    if (problem) throw new TroupeError('CREDENTIALS_INVALID', `invalid tenant: ${problem}`);
    // Tenant directories must not collide on case-insensitive file systems.
    if (lower.has(t.toLowerCase())) throw new TroupeError('CREDENTIALS_CONFLICT', `tenant "${t}" is given twice`);
    lower.add(t.toLowerCase());
  }
  if (tenants.length > MAX_TENANTS) throw new TroupeError('CREDENTIALS_INVALID', `at most ${MAX_TENANTS} tenants`);
  const partitions = opts.partitions ?? DEFAULT_PARTITIONS;
  if (!Number.isInteger(partitions) || partitions < 1 || partitions > MAX_PARTITIONS) {
    throw new TroupeError('CREDENTIALS_INVALID', `partitions must be 1..${MAX_PARTITIONS}, not ${partitions}`);
  }
  const paths = storePaths(dir);
  if (await exists(paths.settings)) {
    throw new TroupeError('CREDENTIALS_CONFLICT', `a credential store already exists in ${dir}; add users with \`troupe creds add-*\`, or init another --dir`);
  }
  for (const d of [dir, paths.creds, paths.system, paths.tenants, paths.resolverDir, paths.jetstreamDir]) await mkdir(d, { recursive: true, mode: 0o700 });

  const settings: Settings = {
    version: 1,
    host: opts.host ?? '127.0.0.1',
    port: opts.port ?? 4222,
    tenants: [...tenants],
    jetstream: { ...DEFAULT_JETSTREAM_LIMITS, ...opts.jetstream },
  };
  if (opts.tls) {
    const hosts = typeof opts.tls === 'object' && opts.tls.hosts?.length ? opts.tls.hosts : [...new Set(['localhost', '127.0.0.1', settings.host])].filter((h) => h !== '0.0.0.0');
    settings.tls = await createCertificates({ dir: join(dir, 'tls'), hosts });
  }
  SettingsSchema.parse(settings);

  const operatorKp = createOperator();
  const systemKp = createAccount();
  const operatorName = opts.operatorName ?? 'troupe';
  const operatorJwt = await encodeOperator(operatorName, operatorKp, { system_account: systemKp.getPublicKey() });
  await writeJson(paths.operator, { name: operatorName, publicKey: operatorKp.getPublicKey(), seed: seedOf(operatorKp), jwt: operatorJwt }, true);
  await writeFileAtomic(paths.operatorJwt, `${operatorJwt}\n`, 0o644);

  const systemJwt = await encodeAccount(SYSTEM_ACCOUNT, systemKp.getPublicKey(), { description: 'NATS system account', limits: { ...UNLIMITED_CORE } }, { signer: operatorKp });
  await writeJson(paths.systemAccount, { publicKey: systemKp.getPublicKey(), seed: seedOf(systemKp), jwt: systemJwt }, true);
  const sysUserKp = createUser();
  const sysUserJwt = await encodeUser(SYSTEM_USER, sysUserKp, systemKp, { ...toJwtPermissions(rolePermissions('system', 'system', SYSTEM_USER)), tags: [`${ROLE_TAG}system`] });
  await writeFileAtomic(paths.systemCreds, fmtCreds(sysUserJwt, sysUserKp), 0o600);

  for (const tenant of tenants) {
    const accountKp = createAccount();
    const signingKp = createAccount();
    const record: Omit<AccountRecord, 'jwt'> = {
      tenant,
      publicKey: accountKp.getPublicKey(),
      seed: seedOf(accountKp),
      signingKey: { publicKey: signingKp.getPublicKey(), seed: seedOf(signingKp) },
      partitions,
      revocations: {},
    };
    const jwt = await encodeAccount(tenant, record.publicKey, tenantAccountClaims(record, settings.jetstream), { signer: operatorKp });
    await mkdir(join(paths.tenants, tenant, 'users'), { recursive: true, mode: 0o700 });
    await writeJson(paths.account(tenant), { ...record, jwt }, true);
  }
  await writeJson(paths.settings, settings, false);

  const store = await CredentialStore.open(dir);
  await store.writeServerConfig();
  for (const tenant of tenants) {
    await store.addUser({ tenant, role: 'node', name: DEFAULT_NODE_USER });
    await store.addUser({ tenant, role: 'operator', name: DEFAULT_OPERATOR_USER });
    for (const client of opts.clients ?? [DEFAULT_CLIENT]) await store.addUser({ tenant, role: 'client', name: client });
    for (const agent of opts.agents ?? DEMO_AGENTS) await store.addUser({ tenant, role: 'agent', name: agent });
  }
  return store;
}

function storePaths(dir: string) {
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

export class CredentialStore {
  private readonly paths: ReturnType<typeof storePaths>;

  private constructor(
    readonly dir: string,
    private readonly settings: Settings,
  ) {
    this.paths = storePaths(dir);
  }

  /** Opens an existing store; CREDENTIALS_NOT_FOUND when there is none. */
  static async open(dir: string = DEFAULT_STORE_DIR): Promise<CredentialStore> {
    const abs = resolve(dir);
    const settings = await readJson(storePaths(abs).settings, SettingsSchema, 'credential store').catch((err: unknown) => {
      if (err instanceof TroupeError && err.code === 'CREDENTIALS_NOT_FOUND') {
        throw new TroupeError('CREDENTIALS_NOT_FOUND', `no credential store in ${abs}: create one with \`troupe creds init --dir ${dir}\``);
      }
      throw err;
    });
    return new CredentialStore(abs, settings);
  }

  get tenants(): readonly string[] {
    return this.settings.tenants;
  }

  get serverConfigFile(): string {
    return this.paths.serverConf;
  }

  /** Credentials of the system user: only for pushing account updates. */
  get systemCredsFile(): string {
    return this.paths.systemCreds;
  }

  /** The CA clients trust when the server requires TLS. */
  get caFile(): string | undefined {
    return this.settings.tls?.caFile;
  }

  get tls(): Readonly<NonNullable<Settings['tls']>> | undefined {
    return this.settings.tls;
  }

  /** The URL of the server as server.conf configures it (`tls://` when TLS is required). */
  get url(): string {
    const host = this.settings.host === '0.0.0.0' ? '127.0.0.1' : this.settings.host;
    return `${this.settings.tls ? 'tls' : 'nats'}://${host}:${this.settings.port}`;
  }

  private checkTenant(tenant: string): void {
    if (!this.settings.tenants.includes(tenant)) {
      throw new TroupeError('CREDENTIALS_NOT_FOUND', `no tenant "${tenant}" in ${this.dir}; tenants: ${this.settings.tenants.join(', ')}`);
    }
  }

  private async account(tenant: string): Promise<AccountRecord> {
    this.checkTenant(tenant);
    return readJson(this.paths.account(tenant), AccountSchema, `account of tenant "${tenant}"`);
  }

  private async operatorKey(): Promise<KeyPair> {
    const op = await readJson(this.paths.operator, OperatorSchema, 'operator key');
    return keyPair(op.seed);
  }

  /** The current account JWT of a tenant (what `push` sends). */
  async accountJwt(tenant: string): Promise<string> {
    return (await this.account(tenant)).jwt;
  }

  /** Every account JWT, system account first: public key → JWT. */
  async accountJwts(): Promise<Map<string, string>> {
    const system = await readJson(this.paths.systemAccount, SystemSchema, 'system account');
    const out = new Map<string, string>([[system.publicKey, system.jwt]]);
    for (const tenant of this.settings.tenants) {
      const a = await this.account(tenant);
      out.set(a.publicKey, a.jwt);
    }
    return out;
  }

  credsFile(tenant: string, name: string): string {
    this.checkTenant(tenant);
    if (!isValidId(USER_NAME, name)) throw new TroupeError('CREDENTIALS_NOT_FOUND', `no user "${name}" can exist: ${idProblem(USER_NAME, name)}`);
    return join(this.paths.users(tenant), `${name}.creds`);
  }

  private async userRecords(tenant: string): Promise<UserRecord[]> {
    const dir = this.paths.users(tenant);
    const names = (await readdir(dir).catch(() => [] as string[])).filter((f) => f.endsWith('.json')).sort();
    const out: UserRecord[] = [];
    for (const file of names) {
      const name = file.slice(0, -'.json'.length);
      if (!isValidId(USER_NAME, name)) continue;
      out.push(await readJson(join(dir, file), UserSchema, `user "${name}" of tenant "${tenant}"`));
    }
    return out;
  }

  /** Every user of every tenant (or of one), with its revocation state. */
  async users(tenant?: string): Promise<UserInfo[]> {
    const order: readonly string[] = ['node', 'operator', 'client', 'agent'];
    const tenants = tenant === undefined ? this.settings.tenants : [tenant];
    const out: UserInfo[] = [];
    for (const t of tenants) {
      const users: UserInfo[] = [];
      const account = await this.account(t);
      for (const u of await this.userRecords(t)) {
        users.push({
          name: u.name,
          role: u.role,
          tenant: u.tenant,
          publicKey: u.publicKey,
          credsFile: join(this.paths.users(t), `${u.name}.creds`),
          createdAt: u.createdAt,
          revoked: Object.hasOwn(account.revocations, u.publicKey),
        });
      }
      out.push(...users.sort((a, b) => order.indexOf(a.role) - order.indexOf(b.role) || a.name.localeCompare(b.name)));
    }
    return out;
  }

  /** One user; CREDENTIALS_NOT_FOUND when there is none of that name in the tenant. */
  async user(tenant: string, name: string): Promise<UserInfo> {
    const found = (await this.users(tenant)).find((u) => u.name === name);
    if (!found) throw new TroupeError('CREDENTIALS_NOT_FOUND', `no user "${name}" in tenant "${tenant}"`);
    return found;
  }

  /**
   * Makes a user of `role` and writes its `.creds`. A name is unique in its tenant (case-insensitively, for
   * case-insensitive file systems) unless the earlier holder is revoked; then it gets fresh keys.
   */
  async addUser(opts: AddUserOptions): Promise<UserInfo> {
    const { tenant, role } = opts;
    const account = await this.account(tenant);
    if (!(ROLES as readonly string[]).includes(role)) throw new TroupeError('CREDENTIALS_INVALID', `unknown role "${String(role)}": use one of ${ROLES.join(', ')}`);
    const existing = await this.users(tenant);
    let name = opts.name;
    if (name === undefined) {
      if (role !== 'node' && role !== 'operator') throw new TroupeError('CREDENTIALS_INVALID', `a ${role} needs a name`);
      const taken = new Set(existing.map((u) => u.name.toLowerCase()));
      for (let n = 1; name === undefined; n++) {
        const candidate = n === 1 ? role : `${role}-${n}`;
        if (!taken.has(candidate)) name = candidate;
      }
    }
    const problem = idProblem(idKindOf(role), name);
    if (problem) throw new TroupeError('CREDENTIALS_INVALID', `invalid ${role} name: ${problem}`);
    const clash = existing.find((u) => u.name.toLowerCase() === name.toLowerCase());
    if (clash && !clash.revoked) {
      throw new TroupeError('CREDENTIALS_CONFLICT', `tenant "${tenant}" already has ${clash.role} "${clash.name}" (${clash.credsFile})`, { name: clash.name, role: clash.role });
    }
    if (clash && clash.name !== name) {
      await rm(join(this.paths.users(tenant), `${clash.name}.json`), { force: true });
      await rm(clash.credsFile, { force: true });
    }
    const permissions = rolePermissions(role, tenant, name, opts.responses ? { responses: opts.responses } : {});
    const userKp = createUser();
    const signer = keyPair(account.signingKey.seed);
    const claims: Partial<User> = { ...toJwtPermissions(permissions), tags: [`${ROLE_TAG}${role}`, `${TENANT_TAG}${tenant}`] };
    const jwt = await encodeUser(name, userKp, account.publicKey, claims, { signer });
    const record: UserRecord = {
      name,
      role,
      tenant,
      publicKey: userKp.getPublicKey(),
      createdAt: new Date().toISOString(),
      ...(opts.responses ? { responses: opts.responses } : {}),
    };
    const credsFile = join(this.paths.users(tenant), `${name}.creds`);
    await writeFileAtomic(credsFile, fmtCreds(jwt, userKp), 0o600);
    await writeJson(join(this.paths.users(tenant), `${name}.json`), record, false);
    return { ...record, credsFile, revoked: false };
  }

  /**
   * Revokes a user: its public key goes into the account JWT's revocations (re-signed by the operator),
   * and server.conf's preload is rewritten. Returns the new account JWT: push it to the running servers
   * (`pushAccountJwts`) to cut the user off now.
   */
  async revoke(tenant: string, name: string): Promise<{ user: UserInfo; accountJwt: string }> {
    const user = await this.user(tenant, name);
    const account = await this.account(tenant);
    const { jwt: _old, ...record } = account;
    record.revocations = { ...record.revocations, [user.publicKey]: nowSeconds() };
    const jwt = await encodeAccount(tenant, record.publicKey, tenantAccountClaims(record, this.settings.jetstream), { signer: await this.operatorKey() });
    await writeJson(this.paths.account(tenant), { ...record, jwt }, true);
    await this.writeServerConfig();
    return { user: { ...user, revoked: true }, accountJwt: jwt };
  }

  /** (Re)writes server.conf from the store, and the cluster's configs when there is a cluster (`writeClusterConfigs`). */
  async writeServerConfig(): Promise<string> {
    const input = await this.#serverConfigInput(this.settings.host, this.settings.port, this.paths.resolverDir, this.paths.jetstreamDir);
    await writeFileAtomic(this.paths.serverConf, renderServerConfig(input), 0o644);
    await writeFileAtomic(this.paths.includeConf, renderIncludeConfig(input), 0o644);
    const layout = await this.clusterLayout();
    if (layout) await this.writeClusterConfigs(layout);
    return this.paths.serverConf;
  }

  async #serverConfigInput(host: string, port: number, resolverDir: string, jetstreamDir: string): Promise<ServerConfigInput> {
    const system = await readJson(this.paths.systemAccount, SystemSchema, 'system account');
    const preload = await this.accountJwts();
    const n = this.settings.tenants.length;
    return {
      host,
      port,
      operatorJwtFile: this.paths.operatorJwt,
      systemAccount: system.publicKey,
      resolverDir,
      preload,
      jetstreamDir,
      // Each server reserves each account's limits out of its own: make room for every tenant.
      jetstreamMaxMemoryBytes: this.settings.jetstream.memoryBytes * n,
      jetstreamMaxFileBytes: this.settings.jetstream.diskBytes * n,
      maxPayloadBytes: MAX_PAYLOAD_BYTES,
      ...(this.settings.tls ? { tls: { certFile: this.settings.tls.certFile, keyFile: this.settings.tls.keyFile } } : {}),
    };
  }

  /** The cluster written by `writeClusterConfigs`, if any (`<dir>/cluster/cluster.json`). */
  async clusterLayout(): Promise<ClusterLayout | undefined> {
    if (!(await exists(this.paths.clusterLayout))) return undefined;
    return readJson(this.paths.clusterLayout, ClusterLayoutSchema, 'cluster layout');
  }

  /**
   * Writes one nats-server config per server of a cluster, `<dir>/cluster/<name>.conf`: the same operator,
   * accounts (with the partition mapping) and JetStream limits as server.conf, plus `server_name`, routes
   * to every server, and each server's own resolver and JetStream directories (`<dir>/cluster/<name>/`).
   * Revocations rewrite them too.
   */
  async writeClusterConfigs(layout: ClusterLayout): Promise<ClusterServerFiles[]> {
    const parsed = ClusterLayoutSchema.parse(layout);
    const names = new Set(parsed.servers.map((s) => s.name));
    if (names.size !== parsed.servers.length) throw new TroupeError('CREDENTIALS_INVALID', 'cluster server names must be unique');
    await mkdir(this.paths.clusterDir, { recursive: true, mode: 0o700 });
    const routes = parsed.servers.map((s) => `nats-route://${connectHost(parsed.host)}:${s.clusterPort}`);
    const out: ClusterServerFiles[] = [];
    for (const server of parsed.servers) {
      const base = join(this.paths.clusterDir, server.name);
      const resolverDir = join(base, 'jwt');
      await mkdir(resolverDir, { recursive: true, mode: 0o700 });
      const input = await this.#serverConfigInput(parsed.host, server.port, resolverDir, base);
      input.cluster = {
        serverName: server.name,
        clusterName: parsed.name,
        listen: `${parsed.host}:${server.clusterPort}`,
        routes,
        ...(parsed.pingIntervalS !== undefined ? { pingIntervalS: parsed.pingIntervalS } : {}),
        ...(parsed.pingMax !== undefined ? { pingMax: parsed.pingMax } : {}),
      };
      const configFile = join(this.paths.clusterDir, `${server.name}.conf`);
      await writeFileAtomic(configFile, renderServerConfig(input), 0o644);
      out.push({ ...server, configFile, storeDir: base, url: `${this.settings.tls ? 'tls' : 'nats'}://${connectHost(parsed.host)}:${server.port}` });
    }
    await writeJson(this.paths.clusterLayout, parsed, false);
    return out;
  }
}

/** Where a client connects for a listen address (0.0.0.0 listens everywhere, including loopback). */
function connectHost(host: string): string {
  return host === '0.0.0.0' ? '127.0.0.1' : host;
}

const ClusterLayoutSchema = z.object({
  name: z.string().regex(/^[A-Za-z0-9_-]{1,64}$/, 'a cluster name is 1-64 of A-Z, a-z, 0-9, _ and -'),
  host: z.string().min(1).max(253),
  servers: z
    .array(
      z.object({
        name: z.string().regex(/^[A-Za-z0-9_-]{1,64}$/, 'a server name is 1-64 of A-Z, a-z, 0-9, _ and -'),
        port: z.number().int().min(1).max(65_535),
        clusterPort: z.number().int().min(1).max(65_535),
      }),
    )
    .min(1)
    .max(32),
  pingIntervalS: z.number().int().min(1).max(3600).optional(),
  pingMax: z.number().int().min(1).max(100).optional(),
});
/** The servers of a cluster: names, client ports and route ports, on one host (a development cluster). */
export type ClusterLayout = z.infer<typeof ClusterLayoutSchema>;
export interface ClusterServerFiles {
  name: string;
  port: number;
  clusterPort: number;
  /** `<dir>/cluster/<name>.conf`: `nats-server -c` it. */
  configFile: string;
  /** Its JetStream and resolver directory. */
  storeDir: string;
  url: string;
}

// ---------------------------------------------------------------------------------------------------
// Pushing account JWTs to running servers
// ---------------------------------------------------------------------------------------------------

const ClaimsUpdateReplySchema = z.object({
  data: z.object({ code: z.number(), message: z.string().optional(), account: z.string().optional() }).optional(),
  error: z.object({ code: z.number(), description: z.string().optional(), account: z.string().optional() }).optional(),
});

export interface PushOptions {
  /** Server URL(s); a cluster spreads the update itself. */
  servers: string | string[];
  /** The system user's creds (`CredentialStore.systemCredsFile`). */
  systemCreds: string;
  /** CA to trust when the server requires TLS. */
  caFile?: string;
  timeoutMs?: number;
}

/**
 * Sends account JWTs to the servers' `full` resolver (`$SYS.REQ.CLAIMS.UPDATE`). The server stores each
 * one and applies it at once: a revoked user is disconnected. Throws CLAIMS_UPDATE_FAILED when the server
 * cannot be reached or refuses a JWT.
 */
export async function pushAccountJwts(jwts: Iterable<string>, opts: PushOptions): Promise<number> {
  const { NatsTransport } = await import('../transport/nats.js');
  const servers = Array.isArray(opts.servers) ? opts.servers : [opts.servers];
  let transport: Awaited<ReturnType<typeof NatsTransport.connect>>;
  try {
    transport = await NatsTransport.connect({
      servers,
      creds: opts.systemCreds,
      name: 'troupe-creds',
      maxReconnectAttempts: 0,
      ...(opts.caFile ? { tls: { caFile: opts.caFile } } : {}),
    });
  } catch (err) {
    const e = new TroupeError('CLAIMS_UPDATE_FAILED', `cannot reach ${servers.join(',')} as the system user: ${(err as Error).message}`);
    e.cause = err;
    throw e;
  }
  let pushed = 0;
  try {
    for (const jwt of jwts) {
      let reply;
      try {
        reply = await transport.request('$SYS.REQ.CLAIMS.UPDATE', new TextEncoder().encode(jwt), { timeoutMs: opts.timeoutMs ?? 5_000 });
      } catch (err) {
        const e = new TroupeError('CLAIMS_UPDATE_FAILED', `no answer to the account update from ${servers.join(',')}: ${(err as Error).message}`);
        e.cause = err;
        throw e;
      }
      let body: z.infer<typeof ClaimsUpdateReplySchema>;
      try {
        body = ClaimsUpdateReplySchema.parse(JSON.parse(new TextDecoder().decode(reply.data)));
      } catch (err) {
        const e = new TroupeError('CLAIMS_UPDATE_FAILED', 'the server answered the account update with something unexpected; is it running in operator mode with a full resolver?');
        e.cause = err;
        throw e;
      }
      if (body.error || body.data?.code !== 200) {
        throw new TroupeError('CLAIMS_UPDATE_FAILED', `the server refused the account update: ${body.error?.description ?? JSON.stringify(body)}`);
      }
      pushed++;
    }
  } finally {
    await transport.close().catch(() => undefined);
  }
  return pushed;
}

// ---------------------------------------------------------------------------------------------------
// Reading a creds file
// ---------------------------------------------------------------------------------------------------

export interface CredsIdentity {
  /** The user's name: a client's principal P, an agent's id. */
  name: string;
  publicKey: string;
  /** The account (tenant) public key. */
  account: string;
  role?: AnyRole;
  tenant?: string;
  /** For clients and operators: the inbox prefix their connections must use. */
  inboxPrefix?: string;
}

/** What a `.creds` file says about its user (the JWT's signature is checked). */
export async function readCredsIdentity(file: string): Promise<CredsIdentity> {
  let parsed: Awaited<ReturnType<typeof parseCreds>>;
  try {
    parsed = await parseCreds(await readFile(file));
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    const e = new TroupeError(code === 'ENOENT' ? 'CREDENTIALS_NOT_FOUND' : 'CREDENTIALS_INVALID', `cannot use the credentials in ${file}: ${(err as Error).message}`);
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
    ...((knownRole === 'client' || knownRole === 'operator') && isValidId('principal', name) ? { inboxPrefix: inboxPrefix(name) } : {}),
  };
}
