/**
 * A2A clients for the gateway suites, all real: `@a2a-js/sdk` 1.x's ClientFactory (A2A 1.0, JSON-RPC or
 * REST), and the last 0.3 release of the same SDK (installed as `a2a-sdk-v03`) as the v0.3 client an
 * existing A2A app would use. Plus raw JSON-RPC over fetch for what no SDK client would send.
 */
import { randomUUID } from 'node:crypto';
import { Role, type Message as SdkMessage, type Part as SdkPart, type SendMessageRequest } from '@a2a-js/sdk';
import { ClientFactory, ClientFactoryOptions, DefaultAgentCardResolver, JsonRpcTransportFactory, RestTransportFactory, type Client } from '@a2a-js/sdk/client';
import { ClientFactory as V03ClientFactory, type Client as V03Client } from 'a2a-sdk-v03/client';
import type { Message as V03Message } from 'a2a-sdk-v03';

/** fetch with `Authorization: Bearer <token>` on every request. */
export function bearerFetch(token: string): typeof fetch {
  return (input, init) => {
    const headers = new Headers(init?.headers);
    headers.set('authorization', `Bearer ${token}`);
    return fetch(input, { ...init, headers });
  };
}

/** The SDK's default ClientFactory (no options at all), or with a bearer token, or preferring REST. */
export async function v1Client(url: string, opts: { token?: string; rest?: boolean } = {}): Promise<Client> {
  if (!opts.token && !opts.rest) return new ClientFactory().createFromUrl(url);
  const fetchImpl = opts.token ? bearerFetch(opts.token) : fetch;
  const factory = new ClientFactory(
    ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
      transports: [new JsonRpcTransportFactory({ fetchImpl }), new RestTransportFactory({ fetchImpl })],
      cardResolver: new DefaultAgentCardResolver({ fetchImpl }),
      ...(opts.rest ? { preferredTransports: ['HTTP+JSON'] } : {}),
    }),
  );
  return factory.createFromUrl(url);
}

/** A v0.3 client: the 0.3 release of the SDK, JSON-RPC (or REST), as an existing A2A app has it. */
export async function v03Client(url: string, opts: { token?: string; rest?: boolean } = {}): Promise<V03Client> {
  const {
    ClientFactoryOptions: V03Options,
    JsonRpcTransportFactory: V03JsonRpc,
    RestTransportFactory: V03Rest,
    DefaultAgentCardResolver: V03Resolver,
  } = await import('a2a-sdk-v03/client');
  const fetchImpl = opts.token ? bearerFetch(opts.token) : fetch;
  const factory = new V03ClientFactory(
    V03Options.createFrom(V03Options.default, {
      transports: [new V03JsonRpc({ fetchImpl }), new V03Rest({ fetchImpl })],
      cardResolver: new V03Resolver({ fetchImpl }),
      ...(opts.rest ? { preferredTransports: ['HTTP+JSON'] } : {}),
    }),
  );
  return factory.createFromUrl(url);
}

function textPart(text: string): SdkPart {
  return { content: { $case: 'text', value: text }, metadata: undefined, filename: '', mediaType: 'text/plain' };
}

/** A v1.0 user message. */
export function userText(text: string, opts: { taskId?: string; contextId?: string; messageId?: string; metadata?: Record<string, unknown> } = {}): SdkMessage {
  return {
    messageId: opts.messageId ?? randomUUID(),
    contextId: opts.contextId ?? '',
    taskId: opts.taskId ?? '',
    role: Role.ROLE_USER,
    parts: [textPart(text)],
    metadata: opts.metadata,
    extensions: [],
    referenceTaskIds: [],
  };
}

/** A v0.3 user message. */
export function v03Text(text: string, opts: { taskId?: string; contextId?: string; messageId?: string } = {}): V03Message {
  return {
    kind: 'message',
    role: 'user',
    messageId: opts.messageId ?? randomUUID(),
    parts: [{ kind: 'text', text }],
    ...(opts.taskId ? { taskId: opts.taskId } : {}),
    ...(opts.contextId ? { contextId: opts.contextId } : {}),
  };
}

export const send = (message: SdkMessage, configuration?: { historyLength?: number; returnImmediately?: boolean }): SendMessageRequest => ({
  tenant: '',
  message,
  configuration: configuration
    ? {
        acceptedOutputModes: [],
        taskPushNotificationConfig: undefined,
        returnImmediately: configuration.returnImmediately ?? false,
        ...(configuration.historyLength !== undefined ? { historyLength: configuration.historyLength } : {}),
      }
    : undefined,
  metadata: undefined,
});

export function textOf(parts: readonly SdkPart[] | undefined): string {
  return (parts ?? []).flatMap((p) => (p.content?.$case === 'text' ? [p.content.value] : [])).join('');
}

export interface RpcReply {
  status: number;
  headers: Headers;
  body: { jsonrpc?: string; id?: unknown; result?: unknown; error?: { code: number; message: string; data?: unknown } };
}

/** One raw JSON-RPC call (A2A 1.0 with `version: '1.0'`, else v0.3). */
export async function rpc(url: string, method: string, params: unknown, opts: { token?: string; version?: string; id?: unknown } = {}): Promise<RpcReply> {
  const res = await fetch(`${url}/`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      ...(opts.token ? { authorization: `Bearer ${opts.token}` } : {}),
      ...(opts.version ? { 'a2a-version': opts.version } : {}),
    },
    body: JSON.stringify({ jsonrpc: '2.0', id: opts.id ?? 1, method, params }),
  });
  const text = await res.text();
  return { status: res.status, headers: res.headers, body: JSON.parse(text) as RpcReply['body'] };
}

/** Collects an async iterable into an array. */
export async function collect<T>(iterable: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const item of iterable) out.push(item);
  return out;
}
