/**
 * A real MCP server over streamable HTTP for tests: the SDK's StreamableHTTPServerTransport behind a Node
 * HTTP server, one session (and one McpServer) per client, an optional bearer token. It can be stopped
 * and started again on the same port, as a server that went away and came back.
 */
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';

export class McpHttpServer {
  private server?: Server;
  private readonly sessions = new Map<string, StreamableHTTPServerTransport>();
  /** Authorization headers of the requests seen. */
  readonly authorizations: Array<string | undefined> = [];
  port = 0;

  constructor(
    private readonly make: () => McpServer,
    private readonly token?: string,
  ) {}

  get url(): string {
    return `http://127.0.0.1:${this.port}/mcp`;
  }

  async start(port = this.port): Promise<this> {
    this.server = createServer((req, res) => {
      void this.handle(req, res).catch((err: unknown) => {
        if (!res.headersSent) res.writeHead(500).end(String(err));
      });
    });
    await new Promise<void>((resolve) => this.server!.listen(port, '127.0.0.1', resolve));
    this.port = (this.server.address() as AddressInfo).port;
    return this;
  }

  /** Stops listening and forgets every session (as a server that crashed). */
  async stop(): Promise<void> {
    const server = this.server;
    this.server = undefined;
    for (const t of this.sessions.values()) await t.close().catch(() => undefined);
    this.sessions.clear();
    if (!server) return;
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }

  private async handle(req: IncomingMessage, res: import('node:http').ServerResponse): Promise<void> {
    this.authorizations.push(req.headers.authorization);
    if (this.token && req.headers.authorization !== `Bearer ${this.token}`) {
      res.writeHead(401, { 'content-type': 'application/json' }).end(JSON.stringify({ error: 'unauthorized' }));
      return;
    }
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const text = Buffer.concat(chunks).toString('utf8');
    const body: unknown = text ? JSON.parse(text) : undefined;
    const sessionId = req.headers['mcp-session-id'];
    let transport = typeof sessionId === 'string' ? this.sessions.get(sessionId) : undefined;
    if (!transport) {
      if (typeof sessionId === 'string') {
        res
          .writeHead(404, { 'content-type': 'application/json' })
          .end(JSON.stringify({ jsonrpc: '2.0', error: { code: -32001, message: 'Session not found' }, id: null }));
        return;
      }
      const created = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        onsessioninitialized: (id) => void this.sessions.set(id, created),
      });
      await this.make().connect(created);
      transport = created;
    }
    await transport.handleRequest(req, res, body);
  }
}
