/**
 * Certificates for TLS between Troupe and NATS (and for HTTPS in tests): a private CA and a server
 * certificate signed by it, made with the `openssl` command line tool (present wherever TLS is; Node's
 * crypto can make keys but not X.509 certificates). P-256 keys; the CA is valid 10 years, the server
 * certificate 825 days (the longest clients accept), for the host names and IP addresses given.
 *
 * Clients trust the CA file (`--tls-ca <dir>/tls/ca.pem`, nats.js `tls: { caFile }`); the server gets the
 * certificate and key (`tls {}` in server.conf). Keys are written with mode 0600.
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmod, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { isIP } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { TroupeError } from '../protocol/errors.js';

const run = promisify(execFile);
const OPENSSL = process.env.TROUPE_OPENSSL_BIN ?? 'openssl';
const HOST = /^[A-Za-z0-9*](?:[A-Za-z0-9.-]{0,252})$/;

export interface CertificateFiles {
  /** The CA certificate clients trust. */
  caFile: string;
  /** The CA's private key (keep it: it signs further server certificates). */
  caKeyFile: string;
  /** The server certificate (PEM). */
  certFile: string;
  /** The server certificate's private key (PEM). */
  keyFile: string;
}

export interface CertificateOptions {
  /** Directory to write ca.pem, ca-key.pem, server.pem and server-key.pem into (created, mode 0700). */
  dir: string;
  /** DNS names and IP addresses the server certificate is valid for. Default localhost and 127.0.0.1. */
  hosts?: string[];
  /** Common name of the CA; default "Troupe local CA". */
  caName?: string;
}

async function openssl(args: string[]): Promise<void> {
  try {
    await run(OPENSSL, args, { timeout: 30_000 });
  } catch (err) {
    const e = err as NodeJS.ErrnoException & { stderr?: string };
    const reason = e.code === 'ENOENT' ? `the "${OPENSSL}" command was not found` : (e.stderr?.trim().split('\n').slice(-2).join(' ') ?? e.message);
    const error = new TroupeError('TLS_SETUP_FAILED', `openssl ${args[0]} failed: ${reason}`);
    error.cause = err;
    throw error;
  }
}

function subjectAltNames(hosts: string[]): string {
  return hosts.map((h) => (isIP(h) ? `IP:${h}` : `DNS:${h}`)).join(',');
}

/** Creates a CA and a server certificate signed by it. */
export async function createCertificates(opts: CertificateOptions): Promise<CertificateFiles> {
  const hosts = opts.hosts?.length ? opts.hosts : ['localhost', '127.0.0.1'];
  for (const h of hosts) {
    if (!isIP(h) && !HOST.test(h)) throw new TroupeError('TLS_SETUP_FAILED', `"${h}" is not a host name or IP address`);
  }
  const caName = (opts.caName ?? 'Troupe local CA').replace(/[^A-Za-z0-9 ._-]/g, '');
  await mkdir(opts.dir, { recursive: true, mode: 0o700 });
  const files: CertificateFiles = {
    caFile: join(opts.dir, 'ca.pem'),
    caKeyFile: join(opts.dir, 'ca-key.pem'),
    certFile: join(opts.dir, 'server.pem'),
    keyFile: join(opts.dir, 'server-key.pem'),
  };
  // One config file with both certificates' extensions, so nothing depends on the system's openssl.cnf.
  const work = await mkdtemp(join(tmpdir(), 'troupe-tls-'));
  try {
    const config = join(work, 'openssl.cnf');
    const serverName = hosts.find((h) => !isIP(h)) ?? hosts[0]!;
    await writeFile(
      config,
      [
        '[req]',
        'distinguished_name = dn',
        'prompt = no',
        '[dn]',
        `CN = ${caName}`,
        '[ca_ext]',
        'basicConstraints = critical,CA:TRUE,pathlen:0',
        'keyUsage = critical,keyCertSign,cRLSign',
        'subjectKeyIdentifier = hash',
        '[server_ext]',
        'basicConstraints = critical,CA:FALSE',
        'keyUsage = critical,digitalSignature,keyEncipherment',
        'extendedKeyUsage = serverAuth,clientAuth',
        `subjectAltName = ${subjectAltNames(hosts)}`,
        'subjectKeyIdentifier = hash',
        'authorityKeyIdentifier = keyid',
        '',
      ].join('\n'),
    );
    const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
    await openssl(['req', '-x509', '-config', config, '-extensions', 'ca_ext', ...ec, '-keyout', files.caKeyFile, '-out', files.caFile, '-days', '3650']);
    // The server's key and signing request (its own name), then the CA signs it with server_ext.
    const serverConfig = join(work, 'server.cnf');
    await writeFile(serverConfig, `[req]\ndistinguished_name = dn\nprompt = no\n[dn]\nCN = ${serverName}\n`);
    const csr = join(work, 'server.csr');
    await openssl(['req', '-new', '-config', serverConfig, ...ec, '-keyout', files.keyFile, '-out', csr]);
    await openssl([
      'x509',
      '-req',
      '-in',
      csr,
      '-CA',
      files.caFile,
      '-CAkey',
      files.caKeyFile,
      '-set_serial',
      `0x${randomBytes(16).toString('hex')}`,
      '-days',
      '825',
      '-extfile',
      config,
      '-extensions',
      'server_ext',
      '-out',
      files.certFile,
    ]);
    await Promise.all([chmod(files.caKeyFile, 0o600), chmod(files.keyFile, 0o600)]);
    return files;
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}
