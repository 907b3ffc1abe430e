/** A development cluster's layout: its servers' names, client ports and route ports on one host. */
import { z } from 'zod';

/** Where a client connects for a listen address (0.0.0.0 listens everywhere, including loopback). */
export function connectHost(host: string): string {
  return host === '0.0.0.0' ? '127.0.0.1' : host;
}

export const ClusterLayoutSchema = z.object({
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
