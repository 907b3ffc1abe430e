/**
 * `troupe creds …`: per-user NATS credentials in operator mode (src/security/creds.ts). `init` makes the
 * store and server.conf; `add-*` write a `.creds` file for one more agent, client, node or operator
 * without touching the server; `revoke` cuts a user off on the running server; `push` re-sends every
 * account JWT (after the server was down during a revoke); `list` shows who exists.
 */
import { isAbsolute, relative } from 'node:path';
import type { Command } from 'commander';
import { TroupeError } from '../../protocol/errors.js';
import { CredentialStore, initCredentialStore, pushAccountJwts, type UserInfo } from '../../security/creds.js';
import type { Role } from '../../security/roles.js';
import { UsageError, globals } from '../cli.js';
import { color, printJson, table } from '../output.js';

export interface StoreOptions {
  dir: string;
}

export interface InitCommandOptions extends StoreOptions {
  tenants?: string;
  partitions: number;
  host: string;
  port: number;
  tls?: boolean;
  tlsHosts?: string;
  agents?: string;
}

function list(value: string | undefined): string[] | undefined {
  if (value === undefined) return undefined;
  return value
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
}

/** A path as short as it can be: relative to the working directory when it is inside it. */
function shortPath(path: string): string {
  const rel = relative(process.cwd(), path);
  return rel && !rel.startsWith('..') && !isAbsolute(rel) ? rel : path;
}

function usersTable(users: UserInfo[]): string {
  return table(
    ['name', 'role', 'tenant', 'public key', 'revoked', 'creds'],
    users.map((u) => [u.name, u.role, u.tenant, u.publicKey, u.revoked ? color.red('yes') : 'no', shortPath(u.credsFile)]),
  );
}

export async function init(opts: InitCommandOptions, cmd: Command): Promise<void> {
  const g = globals(cmd);
  const tenants = list(opts.tenants);
  if (tenants && tenants.length === 0) throw new UsageError('--tenants needs at least one tenant, e.g. --tenants demo,acme');
  const agents = list(opts.agents);
  const tlsHosts = list(opts.tlsHosts);
  if (tlsHosts && !opts.tls) throw new UsageError('--tls-hosts goes with --tls');
  const store = await initCredentialStore({
    dir: opts.dir,
    ...(tenants ? { tenants } : {}),
    partitions: opts.partitions,
    host: opts.host,
    port: opts.port,
    ...(opts.tls ? { tls: tlsHosts ? { hosts: tlsHosts } : true } : {}),
    ...(agents ? { agents } : {}),
  });
  const users = await store.users();
  if (g.json) {
    printJson({ dir: store.dir, serverConfig: store.serverConfigFile, url: store.url, caFile: store.caFile, tenants: store.tenants, users });
    return;
  }
  const node = users.find((u) => u.role === 'node');
  const tlsCa = store.caFile ? ` --tls-ca ${store.caFile}` : '';
  process.stdout.write(
    [
      `${color.green('✓')} credential store in ${store.dir} (keep it private: it holds the operator and account keys)`,
      '',
      usersTable(users),
      '',
      'Start the server, then a node:',
      `  nats-server -c ${store.serverConfigFile}`,
      `  troupe up --nats ${store.url} --creds ${node?.credsFile ?? '<node.creds>'}${tlsCa}`,
      'Add an agent (no server restart):  troupe creds add-agent <id>',
      'Cut one off:                       troupe creds revoke <name>',
      '',
    ].join('\n'),
  );
}

async function addUser(role: Role, name: string | undefined, opts: StoreOptions, cmd: Command): Promise<void> {
  const g = globals(cmd);
  const store = await CredentialStore.open(opts.dir);
  const user = await store.addUser({ tenant: g.tenant, role, ...(name !== undefined ? { name } : {}) });
  if (g.json) {
    printJson(user);
    return;
  }
  const tlsCa = store.caFile ? ` --tls-ca ${store.caFile}` : '';
  const run: Record<Role, string> = {
    agent: `troupe agent <module> --nats ${store.url} --creds ${user.credsFile}${tlsCa}`,
    client: `troupe send "hello" --nats ${store.url} --creds ${user.credsFile}${tlsCa}`,
    gateway: `troupe gateway --nats ${store.url} --creds ${user.credsFile}${tlsCa} --tokens tokens.json`,
    node: `troupe up --nats ${store.url} --creds ${user.credsFile}${tlsCa}`,
    operator: `troupe ps --nats ${store.url} --creds ${user.credsFile}${tlsCa}`,
  };
  process.stdout.write(`${color.green('✓')} ${role} ${color.bold(user.name)} in tenant ${user.tenant}: ${user.credsFile}\n  ${color.dim(run[role])}\n`);
}

export const addAgent = (id: string, opts: StoreOptions, cmd: Command) => addUser('agent', id, opts, cmd);
export const addClient = (principal: string, opts: StoreOptions, cmd: Command) => addUser('client', principal, opts, cmd);
export const addGateway = (name: string | undefined, opts: StoreOptions, cmd: Command) => addUser('gateway', name, opts, cmd);
export const addNode = (name: string | undefined, opts: StoreOptions, cmd: Command) => addUser('node', name, opts, cmd);
export const addOperator = (name: string | undefined, opts: StoreOptions, cmd: Command) => addUser('operator', name, opts, cmd);

export async function listUsers(opts: StoreOptions, cmd: Command): Promise<void> {
  const g = globals(cmd);
  const store = await CredentialStore.open(opts.dir);
  const users = await store.users();
  if (g.json) {
    printJson(users);
    return;
  }
  process.stdout.write(`${usersTable(users)}\n`);
}

function pushTarget(store: CredentialStore, g: ReturnType<typeof globals>): { servers: string[]; caFile?: string } {
  const servers = (g.nats ?? store.url)
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  const caFile = g.tlsCa ?? store.caFile;
  return { servers, ...(caFile ? { caFile } : {}) };
}

export async function revoke(name: string, opts: StoreOptions, cmd: Command): Promise<void> {
  const g = globals(cmd);
  const store = await CredentialStore.open(opts.dir);
  const { user, accountJwt } = await store.revoke(g.tenant, name);
  const target = pushTarget(store, g);
  try {
    await pushAccountJwts([accountJwt], { ...target, systemCreds: store.systemCredsFile });
  } catch (err) {
    if (err instanceof TroupeError) {
      throw new TroupeError(
        err.code,
        `${user.role} "${user.name}" is revoked in the store and server.conf, but not yet on the server: ${err.message}`,
        err.details,
      );
    }
    throw err;
  }
  if (g.json) {
    printJson({ ...user, pushedTo: target.servers });
    return;
  }
  process.stdout.write(
    `${color.green('✓')} revoked ${user.role} ${color.bold(user.name)} in tenant ${user.tenant}; ${target.servers.join(',')} disconnected it\n`,
  );
}

export async function push(opts: StoreOptions, cmd: Command): Promise<void> {
  const g = globals(cmd);
  const store = await CredentialStore.open(opts.dir);
  const target = pushTarget(store, g);
  const jwts = await store.accountJwts();
  const pushed = await pushAccountJwts(jwts.values(), { ...target, systemCreds: store.systemCredsFile });
  if (g.json) {
    printJson({ pushed, servers: target.servers });
    return;
  }
  process.stdout.write(`${color.green('✓')} pushed ${pushed} account JWTs to ${target.servers.join(',')}\n`);
}
