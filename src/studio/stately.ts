/**
 * The relay to the Stately Inspector: the mesh's inspection records, turned into the events of
 * `@statelyai/inspect` (its `StatelyInspectionEvent`: `@xstate.actor` with the machine definition, then
 * `@xstate.event` and `@xstate.snapshot`), served the way that package's own `createInspectorServer`
 * serves them: a page at `/` that frames the inspector UI and forwards every event it gets over a
 * WebSocket on the same port to the frame (`postMessage`, after the frame says `@statelyai.connected`).
 *
 * Differences from that server, on purpose: nothing but the page's iframe needs the internet (the relay
 * binds to loopback by default and never opens a browser), and a client that connects late is sent
 * every known actor with its definition and latest snapshot first, instead of the last 200 raw events,
 * so it can always draw what it is sent.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { WebSocketServer, WebSocket } from 'ws';
import type { InspectionRecord } from '../protocol/inspection.js';
import { ActorTable } from './stream.js';

/** The `@statelyai/inspect` release whose event format this relay speaks (its `_version` field). */
const STATELY_FORMAT_VERSION = '0.7.2';
/** Where the inspector UI lives (the page frames it; the relay itself never calls it). */
const STATELY_INSPECTOR_URL = 'https://stately.ai/inspect';

interface StatelyBase {
  sessionId: string;
  rootId: string | undefined;
  createdAt: string;
  id: string | null;
  _version: string;
}
interface StatelySnapshot {
  status: string;
  value: unknown;
  context?: unknown;
}
type StatelyEvent =
  | (StatelyBase & { type: '@xstate.actor'; name: string; definition: string | undefined; parentId: string | undefined; snapshot: StatelySnapshot })
  | (StatelyBase & { type: '@xstate.event'; event: { type: string; [k: string]: unknown }; sourceId: string | undefined })
  | (StatelyBase & { type: '@xstate.snapshot'; event: { type: string; [k: string]: unknown }; snapshot: StatelySnapshot });

/** One inspection record as Stately inspector events: an actor registration, or the event and the snapshot after it. */
function toStatelyEvents(record: InspectionRecord): StatelyEvent[] {
  const base = {
    sessionId: record.actorId,
    rootId: record.rootId,
    createdAt: String(Date.parse(record.at) || Date.now()),
    _version: STATELY_FORMAT_VERSION,
  };
  const snapshot: StatelySnapshot = { status: record.status, value: record.value, ...(record.context !== undefined ? { context: record.context } : {}) };
  if (record.kind === 'actor') {
    return [
      {
        ...base,
        id: null,
        type: '@xstate.actor',
        name: record.actorId,
        definition: JSON.stringify({ ...record.definition, id: record.machineId }),
        parentId: record.parentId,
        snapshot,
      },
    ];
  }
  return [
    { ...base, id: `${record.process}:${record.seq}:event`, type: '@xstate.event', event: record.event, sourceId: undefined },
    { ...base, id: `${record.process}:${record.seq}`, type: '@xstate.snapshot', event: record.event, snapshot },
  ];
}

/** The page at `/`: frames the inspector and forwards what the relay sends, as @statelyai/inspect's server page does. */
function bridgePage(inspectorUrl: string): string {
  return `<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>Troupe · Stately Inspector</title>
<style>*{margin:0;padding:0}html,body{height:100%}iframe{width:100%;height:100%;border:none}</style></head>
<body><iframe id="inspector" src="${inspectorUrl}"></iframe>
<script>
const frame = document.getElementById('inspector');
const buffer = [];
let connected = false;
window.addEventListener('message', (e) => {
  if (e.data && e.data.type === '@statelyai.connected') {
    connected = true;
    for (const ev of buffer.splice(0)) frame.contentWindow.postMessage(ev, '*');
  }
});
const ws = new WebSocket((location.protocol === 'https:' ? 'wss://' : 'ws://') + location.host);
ws.onmessage = (m) => {
  const ev = JSON.parse(m.data);
  if (connected) frame.contentWindow.postMessage(ev, '*');
  else buffer.push(ev);
};
</script></body></html>`;
}

export interface StatelyRelayOptions {
  port?: number;
  host?: string;
  /** The inspector UI the page frames. */
  inspectorUrl?: string;
}

export class StatelyRelay {
  readonly table = new ActorTable();
  private relayed = 0;

  private constructor(
    private readonly server: Server,
    private readonly wss: WebSocketServer,
    readonly url: string,
  ) {}

  static async start(opts: StatelyRelayOptions = {}): Promise<StatelyRelay> {
    const inspectorUrl = opts.inspectorUrl ?? STATELY_INSPECTOR_URL;
    const page = bridgePage(inspectorUrl);
    const server = createServer((req, res) => {
      if (req.method !== 'GET') {
        res.writeHead(405, { allow: 'GET' }).end();
        return;
      }
      res.writeHead(200, { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store' }).end(page);
    });
    // Events are small; a client sending anything big is not one of ours.
    const wss = new WebSocketServer({ server, maxPayload: 64 * 1024 });
    const host = opts.host ?? '127.0.0.1';
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(opts.port ?? 8089, host, () => resolve());
    });
    const { port } = server.address() as AddressInfo;
    const relay = new StatelyRelay(server, wss, `http://${host === '127.0.0.1' || host === '::1' ? 'localhost' : host}:${port}`);
    wss.on('connection', (ws) => relay.welcome(ws));
    return relay;
  }

  /** Records relayed so far. */
  get count(): number {
    return this.relayed;
  }

  get clients(): number {
    return this.wss.clients.size;
  }

  /** Sends one record to every connected inspector (and keeps it for the next ones). */
  push(record: InspectionRecord): void {
    // A snapshot of an actor never registered cannot be drawn: keep the order "definition first".
    const kept = this.table.add(record);
    if (!kept) return;
    this.relayed++;
    // The kept record has the whole context (the stream carries changes; the inspector wants snapshots).
    const frames = toStatelyEvents(kept).map((e) => JSON.stringify(e));
    for (const ws of this.wss.clients) {
      if (ws.readyState !== WebSocket.OPEN) continue;
      for (const f of frames) ws.send(f);
    }
  }

  async close(): Promise<void> {
    for (const ws of this.wss.clients) ws.terminate();
    await new Promise<void>((resolve) => this.wss.close(() => resolve()));
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  /** A new inspector gets every known actor, definition first, then its latest snapshot. */
  private welcome(ws: WebSocket): void {
    // Inspectors only listen here; whatever they send is ignored.
    ws.on('message', () => undefined);
    ws.on('error', () => ws.terminate());
    for (const record of this.table.replay()) for (const e of toStatelyEvents(record)) ws.send(JSON.stringify(e));
  }
}
