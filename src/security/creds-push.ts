/**
 * Pushing account JWTs to running servers as the system user (`$SYS.REQ.CLAIMS.UPDATE`), e.g. after a
 * revocation: the servers apply them at once.
 */
import { z } from 'zod';
import { TroupeError } from '../protocol/errors.js';

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
        const e = new TroupeError(
          'CLAIMS_UPDATE_FAILED',
          'the server answered the account update with something unexpected; is it running in operator mode with a full resolver?',
        );
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
