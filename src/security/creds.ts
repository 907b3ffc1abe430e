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
import { mkdir, readdir, rm } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { encodeAccount, encodeOperator, encodeUser, fmtCreds, type User } from '@nats-io/jwt';
import { createAccount, createOperator, createUser, type KeyPair } from '@nats-io/nkeys';
import { TroupeError } from '../protocol/errors.js';
import { DEFAULT_PARTITIONS } from '../transport/jetstream/leases.js';
import { GATEWAY_PRINCIPAL, idProblem, isGatewayPrincipal, isValidId } from '../protocol/ids.js';
import { idKindOf, rolePermissions, ROLES, type ResponseRules, type Role } from './roles.js';
import { renderIncludeConfig, renderServerConfig, type ServerConfigInput } from './server-config.js';
import { createCertificates } from './tls.js';
import { ClusterLayoutSchema, connectHost, type ClusterLayout, type ClusterServerFiles } from './cluster-layout.js';
import {
  DEFAULT_JETSTREAM_LIMITS,
  ROLE_TAG,
  TENANT_TAG,
  UNLIMITED_CORE,
  keyPair,
  nowSeconds,
  seedOf,
  tenantAccountClaims,
  toJwtPermissions,
  type JetStreamAccountLimits,
} from './jwt-claims.js';
import {
  AccountSchema,
  MAX_PARTITIONS,
  MAX_TENANTS,
  OperatorSchema,
  SettingsSchema,
  SystemSchema,
  UserSchema,
  exists,
  readJson,
  storePaths,
  writeFileAtomic,
  writeJson,
  type AccountRecord,
  type Settings,
  type UserInfo,
  type UserRecord,
} from './store-layout.js';

export { toJwtPermissions } from './jwt-claims.js';
export { type UserInfo } from './store-layout.js';
export type { ClusterLayout, ClusterServerFiles } from './cluster-layout.js';
export { pushAccountJwts } from './creds-push.js';
export { readCredsIdentity } from './creds-identity.js';

const DEFAULT_STORE_DIR = '.troupe';

/**
 * What any user's name must be: the widest of the id kinds users are named by (an agent's id, up to
 * 100 characters; principals are held to 64 when the user is made, by `idKindOf` its role).
 */
const USER_NAME = 'agent' as const;

/** The agents of the demo teams: `creds init` makes credentials for them in every tenant. */
const DEMO_AGENTS: readonly string[] = ['triage', 'researcher', 'writer', 'echo', 'pyecho'];
/** The client principal `troupe send` and other one-shot commands use. */
const DEFAULT_CLIENT = 'cli';
const DEFAULT_OPERATOR_USER = 'operator';
const DEFAULT_NODE_USER = 'node';
/** The principal `troupe gateway` serves its users on: the only kind that may name a user (roles.ts). */
const DEFAULT_GATEWAY_USER = GATEWAY_PRINCIPAL;
const MAX_PAYLOAD_BYTES = 1024 * 1024;
const SYSTEM_ACCOUNT = 'SYS';
const SYSTEM_USER = 'sys';

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
  /** Gateway principals to make in every tenant (`gateway`, `gateway-<name>`); default [DEFAULT_GATEWAY_USER]. */
  gateways?: readonly string[];
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
    const hosts =
      typeof opts.tls === 'object' && opts.tls.hosts?.length
        ? opts.tls.hosts
        : [...new Set(['localhost', '127.0.0.1', settings.host])].filter((h) => h !== '0.0.0.0');
    settings.tls = await createCertificates({ dir: join(dir, 'tls'), hosts });
  }
  SettingsSchema.parse(settings);

  const operatorKp = createOperator();
  const systemKp = createAccount();
  const operatorName = opts.operatorName ?? 'troupe';
  const operatorJwt = await encodeOperator(operatorName, operatorKp, { system_account: systemKp.getPublicKey() });
  await writeJson(paths.operator, { name: operatorName, publicKey: operatorKp.getPublicKey(), seed: seedOf(operatorKp), jwt: operatorJwt }, true);
  await writeFileAtomic(paths.operatorJwt, `${operatorJwt}\n`, 0o644);

  const systemJwt = await encodeAccount(
    SYSTEM_ACCOUNT,
    systemKp.getPublicKey(),
    { description: 'NATS system account', limits: { ...UNLIMITED_CORE } },
    { signer: operatorKp },
  );
  await writeJson(paths.systemAccount, { publicKey: systemKp.getPublicKey(), seed: seedOf(systemKp), jwt: systemJwt }, true);
  const sysUserKp = createUser();
  const sysUserJwt = await encodeUser(SYSTEM_USER, sysUserKp, systemKp, {
    ...toJwtPermissions(rolePermissions('system', 'system', SYSTEM_USER)),
    tags: [`${ROLE_TAG}system`],
  });
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
    for (const gateway of opts.gateways ?? [DEFAULT_GATEWAY_USER]) await store.addUser({ tenant, role: 'gateway', name: gateway });
    for (const agent of opts.agents ?? DEMO_AGENTS) await store.addUser({ tenant, role: 'agent', name: agent });
  }
  return store;
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
    const order: readonly string[] = ['node', 'operator', 'gateway', 'client', 'agent'];
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
    if (!(ROLES as readonly string[]).includes(role))
      throw new TroupeError('CREDENTIALS_INVALID', `unknown role "${String(role)}": use one of ${ROLES.join(', ')}`);
    const existing = await this.users(tenant);
    let name = opts.name;
    if (name === undefined) {
      if (role !== 'node' && role !== 'operator' && role !== 'gateway') throw new TroupeError('CREDENTIALS_INVALID', `a ${role} needs a name`);
      const taken = new Set(existing.map((u) => u.name.toLowerCase()));
      for (let n = 1; name === undefined; n++) {
        const candidate = n === 1 ? role : `${role}-${n}`;
        if (!taken.has(candidate)) name = candidate;
      }
    }
    const problem = idProblem(idKindOf(role), name);
    if (problem) throw new TroupeError('CREDENTIALS_INVALID', `invalid ${role} name: ${problem}`);
    // Case-insensitively: `Gateway-x` as a client would only confuse (the node's check is by exact token).
    if (role !== 'gateway' && isGatewayPrincipal(name.toLowerCase()))
      throw new TroupeError('CREDENTIALS_INVALID', `invalid ${role} name: "${name}" is kept for gateways (troupe creds add-gateway ${name})`);
    if (role === 'gateway' && !isGatewayPrincipal(name))
      throw new TroupeError('CREDENTIALS_INVALID', `invalid gateway name: a gateway is named "gateway" or "gateway-<name>", not "${name}"`);
    const clash = existing.find((u) => u.name.toLowerCase() === name.toLowerCase());
    if (clash && !clash.revoked) {
      throw new TroupeError('CREDENTIALS_CONFLICT', `tenant "${tenant}" already has ${clash.role} "${clash.name}" (${clash.credsFile})`, {
        name: clash.name,
        role: clash.role,
      });
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
