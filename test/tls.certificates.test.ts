/**
 * src/security/tls.ts makes a CA and a server certificate that a real TLS client accepts for the names
 * in it and rejects for any other name, and refuses a host name that could inject openssl config.
 */
import { request, createServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createCertificates } from '../src/security/tls.js';
import { testCertificates, type TestCertificates } from './helpers/tls.js';

function get(port: number, ca: string, servername: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, ca, servername, path: '/', headers: { host: servername } }, (res) => {
      let body = '';
      res.on('data', (d: Buffer) => (body += d.toString()));
      res.on('end', () => resolve(body));
    });
    req.on('error', reject);
    req.end();
  });
}

describe('TLS certificates (openssl)', () => {
  let certs: TestCertificates;
  let server: ReturnType<typeof createServer>;
  let port: number;

  beforeAll(async () => {
    certs = await testCertificates(['localhost', '127.0.0.1']);
    server = createServer({ key: certs.key, cert: certs.cert }, (_req, res) => res.end('over https'));
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    port = (server.address() as AddressInfo).port;
  });

  afterAll(async () => {
    await new Promise<void>((r) => server.close(() => r()));
    certs.cleanup();
  });

  it('serves HTTPS that a client trusting the CA accepts for localhost', async () => {
    expect(await get(port, certs.ca, 'localhost')).toBe('over https');
  });

  it('is refused for a name not in the certificate, and without the CA', async () => {
    await expect(get(port, certs.ca, 'example.org')).rejects.toThrow(/altnames|not in the cert/i);
    const other = await testCertificates();
    try {
      await expect(get(port, other.ca, 'localhost')).rejects.toThrow(/certificate/i);
    } finally {
      other.cleanup();
    }
  });

  it('refuses a host that is neither a DNS name nor an IP address', async () => {
    await expect(createCertificates({ dir: `${certs.caFile}.x`, hosts: ['bad\nname'] })).rejects.toMatchObject({ code: 'TLS_SETUP_FAILED' });
    await expect(createCertificates({ dir: `${certs.caFile}.x`, hosts: ['a,DNS:evil'] })).rejects.toMatchObject({ code: 'TLS_SETUP_FAILED' });
  });
});
