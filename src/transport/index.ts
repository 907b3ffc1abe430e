export * from './types.js';
export * from './subjects.js';
import { MemoryTransport } from './memory.js';
import { NatsTransport } from './nats.js';
import type { Transport } from './types.js';

/** NATS when a URL is given, else the in-memory transport (the embedded one-process mode). */
export async function connectTransport(opts: { natsUrl?: string; user?: string; pass?: string; name?: string }): Promise<Transport> {
  if (!opts.natsUrl) return new MemoryTransport();
  return NatsTransport.connect({
    servers: opts.natsUrl,
    ...(opts.user !== undefined ? { user: opts.user } : {}),
    ...(opts.pass !== undefined ? { pass: opts.pass } : {}),
    ...(opts.name !== undefined ? { name: opts.name } : {}),
  });
}
