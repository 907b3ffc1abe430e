/**
 * A TCP proxy between NATS clients and a nats-server that can hold publishes: it reads each client's
 * stream frame by frame (the NATS text protocol: a control line, and for PUB and HPUB a payload of the size
 * the line gives). While a hold is on, every publish whose subject matches is kept back (as a write the
 * network or the server is slow to take) and everything else flows; `release()` sends what was kept, in
 * order. The server-to-client stream passes through untouched. A client killed during a hold never gets the
 * held publishes to the server, as in a crash before its write was taken. Every publish let through is
 * noted (`forwarded`), so a test can say what a client did and did not send.
 *
 *   const proxy = await startFrameProxy(nats.port);
 *   spawnTroupe(['up', '--nats', proxy.url, …]);
 *   const held = proxy.hold((subject) => subject.startsWith('$KV.troupe_threads.'));
 *   … await held: the first such write is kept back, and any after it …
 */
import { createServer, connect, type Socket } from 'node:net';

export interface FrameProxy {
  readonly port: number;
  /** `nats://127.0.0.1:<port>`. */
  readonly url: string;
  /** Subjects of the publishes let through to the server, in the order they went. */
  readonly forwarded: readonly string[];
  /** Client connections open through the proxy. */
  readonly connections: number;
  /**
   * Holds, from now until `release()`, every publish (PUB or HPUB) of any client whose subject matches.
   * Resolves with the subject of the first one held.
   */
  hold(match: (subject: string) => boolean): Promise<string>;
  /** Ends the hold: what was kept goes to the server, in order. */
  release(): void;
  /** Closes every connection (held publishes are dropped) and stops listening. */
  close(): Promise<void>;
}

const CRLF = Buffer.from('\r\n');

interface Hold {
  match: (subject: string) => boolean;
  first?: (subject: string) => void;
}

/** One client's stream towards the server: what it sent that is not a whole frame yet, and what is held. */
class ClientStream {
  private pending: Buffer = Buffer.alloc(0);
  readonly held: Buffer[] = [];

  constructor(
    private readonly upstream: Socket,
    private readonly hold: () => Hold | undefined,
    private readonly forwarded: string[],
  ) {}

  push(chunk: Buffer): void {
    this.pending = this.pending.length === 0 ? chunk : Buffer.concat([this.pending, chunk]);
    for (;;) {
      const lineEnd = this.pending.indexOf(CRLF);
      if (lineEnd < 0) return;
      const [op = '', ...args] = this.pending.subarray(0, lineEnd).toString('latin1').trim().split(/\s+/);
      const verb = op.toUpperCase();
      // PUB <subject> [reply] <size>; HPUB <subject> [reply] <header size> <total size>: a payload and CRLF follow.
      const isPublish = verb === 'PUB' || verb === 'HPUB';
      const frameEnd = isPublish ? lineEnd + 2 + Number(args.at(-1)) + 2 : lineEnd + 2;
      if (this.pending.length < frameEnd) return;
      const frame = this.pending.subarray(0, frameEnd);
      this.pending = this.pending.subarray(frameEnd);
      const subject = args[0] ?? '';
      const hold = isPublish ? this.hold() : undefined;
      if (hold?.match(subject)) {
        this.held.push(Buffer.from(frame));
        const first = hold.first;
        hold.first = undefined;
        first?.(subject);
        continue;
      }
      if (isPublish) this.forwarded.push(subject);
      this.upstream.write(frame);
    }
  }

  release(): void {
    for (const frame of this.held.splice(0)) this.upstream.write(frame);
  }
}

export async function startFrameProxy(serverPort: number): Promise<FrameProxy> {
  const sockets = new Set<Socket>();
  const streams = new Set<ClientStream>();
  const forwarded: string[] = [];
  let hold: Hold | undefined;

  const server = createServer((client) => {
    const upstream = connect(serverPort, '127.0.0.1');
    sockets.add(client);
    sockets.add(upstream);
    const stream = new ClientStream(upstream, () => hold, forwarded);
    streams.add(stream);
    client.on('data', (chunk: Buffer) => stream.push(chunk));
    upstream.pipe(client);
    // A client gone (killed): what was let through still reaches the server (end, not destroy), what is held never.
    client.on('close', () => {
      streams.delete(stream);
      sockets.delete(client);
      upstream.end();
    });
    upstream.on('close', () => {
      sockets.delete(upstream);
      client.destroy();
    });
    client.on('error', () => client.destroy());
    upstream.on('error', () => upstream.destroy());
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const address = server.address();
  if (!address || typeof address !== 'object') throw new Error('the frame proxy has no port');

  return {
    port: address.port,
    url: `nats://127.0.0.1:${address.port}`,
    forwarded,
    get connections() {
      return streams.size;
    },
    hold: (match) => new Promise<string>((resolve) => (hold = { match, first: resolve })),
    release: () => {
      hold = undefined;
      for (const s of streams) s.release();
    },
    close: async () => {
      hold = undefined;
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
