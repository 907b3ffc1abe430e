/**
 * Certificates for tests that need TLS (NATS over tls://, HTTPS for the gateway): a CA and a server
 * certificate for localhost/127.0.0.1 made by src/security/tls.ts in a temp dir, with the PEM texts
 * ready for `https.createServer({ key, cert })` and a client's `ca`.
 *
 *   const certs = await testCertificates();   // in beforeAll
 *   certs.cleanup();                           // in afterAll
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createCertificates, type CertificateFiles } from '../../src/security/tls.js';

export interface TestCertificates extends CertificateFiles {
  /** PEM of the CA certificate (trust this). */
  ca: string;
  /** PEM of the server certificate and its key. */
  cert: string;
  key: string;
  cleanup(): void;
}

export async function testCertificates(hosts: string[] = ['localhost', '127.0.0.1']): Promise<TestCertificates> {
  const dir = mkdtempSync(join(tmpdir(), 'troupe-certs-'));
  const files = await createCertificates({ dir, hosts });
  return {
    ...files,
    ca: readFileSync(files.caFile, 'utf8'),
    cert: readFileSync(files.certFile, 'utf8'),
    key: readFileSync(files.keyFile, 'utf8'),
    cleanup: () => rmSync(dir, { recursive: true, force: true }),
  };
}
