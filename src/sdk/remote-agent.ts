/**
 * A remote A2A agent as a mesh member: an AgentDefinition whose handler calls an agent that lives behind
 * someone else's A2A endpoint, with `@a2a-js/sdk`'s client (A2A 1.0, or 0.3 when that is all the remote
 * speaks). To the router and to the other agents it is an agent like any other:
 *
 * - its card is the remote card (skills, streaming, extensions) under a mesh id;
 * - it streams when the remote streams, relaying each chunk with `ctx.stream`;
 * - when the remote card declares the client-routing extension, the routing request goes to it and its
 *   reply's routing metadata (e.g. `recipient: "sender"`) comes back; otherwise it answers the user;
 * - a remote task waiting for input is continued with the thread's next message to it;
 * - a timeout is AGENT_TIMEOUT and every other failure AGENT_ERROR, like a local agent's;
 * - the token is sent as `Authorization: Bearer` and appears in no card, log line, error or record.
 *
 *   const weather = await remoteAgent({ card: 'https://weather.example/.well-known/agent-card.json', token });
 */
import {
  TaskState as SdkTaskState,
  type AgentCard as SdkAgentCard,
  type Message as SdkMessage,
  type SendMessageRequest,
  type Task as SdkTask,
} from '@a2a-js/sdk';
import { ClientFactory, ClientFactoryOptions, DefaultAgentCardResolver, JsonRpcTransportFactory, RestTransportFactory, type Client } from '@a2a-js/sdk/client';
import { CLIENT_ROUTING_URI, ID_LIMITS, META, TroupeError, checkId, type AgentCard, type AgentSkill, type Message } from '../protocol/index.js';
import { defineAgent, type AgentContext, type AgentDefinition } from './agent.js';
import { fromSdkPart, isTerminalSdkState, toSdkMessage } from './a2a-model.js';

export interface RemoteAgentOptions {
  /** The remote agent card's URL (`…/.well-known/agent-card.json`), or the agent's base URL. */
  card: string;
  /** Sent as `Authorization: Bearer <token>` on every request to the remote agent. */
  token?: string;
  /** Mesh id (default: the card's name, made into an id). */
  id?: string;
  /** Longest one call may take. Default 30 s (the node's own agent timeout still applies). */
  timeoutMs?: number;
  /** How often the remote card is read again, in ms (0: never). Default 60 s. */
  refreshMs?: number;
  /** For tests and proxies. */
  fetchImpl?: typeof fetch;
}

/** A team member that lives behind an A2A endpoint: `{ id, a2a: cardUrl, token? }` in a team's agents. */
export interface RemoteAgentRef {
  id: string;
  a2a: string;
  token?: string;
  timeoutMs?: number;
}

export function isRemoteAgentRef(value: unknown): value is RemoteAgentRef {
  return typeof value === 'object' && value !== null && typeof (value as RemoteAgentRef).a2a === 'string' && typeof (value as RemoteAgentRef).id === 'string';
}

/** Remote tasks waiting for input, per thread (bounded: the oldest are forgotten first). */
const MAX_OPEN_REMOTE_TASKS = 10_000;

/** The remote agent as last read: its A2A client, its card and what the mesh card says of it. */
interface Remote {
  client: Client;
  card: SdkAgentCard;
  routing: boolean;
  streaming: boolean;
  /** Where its calls go (the card's first interface), without credentials or query. */
  endpoint: string;
}

/** How often a remote card is read again by default. */
const DEFAULT_REMOTE_REFRESH_MS = 60_000;

/**
 * A remote A2A agent as a mesh member. Its card is read at once; given an `id`, an agent whose endpoint does
 * not answer yet joins all the same, `unavailable` in `troupe ps` (its calls fail with AGENT_UNREACHABLE)
 * until a later read succeeds. The card is read again every `refreshMs`, so a remote that changes its
 * skills, streaming or extensions is announced so at the next heartbeat, and one that goes down is shown
 * unavailable. Without an `id` the agent needs its card for a name: a card that cannot be read is
 * AGENT_UNREACHABLE.
 */
export async function remoteAgent(opts: RemoteAgentOptions): Promise<AgentDefinition> {
  const fetchImpl = withBearer(opts.fetchImpl ?? fetch, opts.token);
  const timeoutMs = opts.timeoutMs ?? 30_000;
  const refreshMs = opts.refreshMs ?? DEFAULT_REMOTE_REFRESH_MS;
  let remote: Remote | undefined;
  /** Why the last read of the card failed; undefined once one succeeds. */
  let down: string | undefined;
  try {
    remote = await resolve(opts.card, fetchImpl);
  } catch (err) {
    if (!opts.id) throw err;
    down = (err as Error).message;
  }
  const id = checkId('agent', opts.id ?? idOf(remote!.card.name));
  let card = remote ? meshCard(id, remote) : placeholderCard(id, opts.card);
  const openTasks = new Map<string, { taskId: string; contextId: string }>();

  let reading: Promise<void> | undefined;
  const refresh = (): Promise<void> =>
    (reading ??= resolve(opts.card, fetchImpl)
      .then(
        (next) => {
          remote = next;
          card = meshCard(id, next);
          down = undefined;
        },
        (err: unknown) => {
          down = (err as Error).message;
        },
      )
      .finally(() => {
        reading = undefined;
      }));
  const timer = refreshMs > 0 ? setInterval(() => void refresh(), refreshMs) : undefined;
  timer?.unref();

  const call = async (message: Message, ctx: AgentContext): Promise<Message> => {
    const at = remote;
    if (!at) throw new TroupeError('AGENT_UNREACHABLE', `remote agent "${id}" is unavailable: ${down ?? 'its card was not read yet'}`, { agent: id });
    const { client, routing, streaming } = at;
    const open = openTasks.get(ctx.threadId);
    const outgoing: SdkMessage = {
      ...toSdkMessage({ ...message, metadata: outgoingMetadata(message.metadata, routing) }),
      // The remote agent keeps its own tasks: the thread is its context, an open remote task is continued.
      contextId: open?.contextId ?? ctx.threadId,
      taskId: open?.taskId ?? '',
    };
    const request: SendMessageRequest = { tenant: '', message: outgoing, configuration: undefined, metadata: undefined };
    const signal = AbortSignal.any([ctx.signal, AbortSignal.timeout(timeoutMs)]);
    let result: SdkMessage | SdkTask | undefined;
    try {
      if (streaming) {
        let task: SdkTask | undefined;
        for await (const event of client.sendMessageStream(request, { signal })) {
          const payload = event.payload;
          if (!payload) continue;
          if (payload.$case === 'message') result = payload.value;
          else if (payload.$case === 'task') task = payload.value;
          else if (payload.$case === 'artifactUpdate') {
            for (const part of payload.value.artifact?.parts ?? []) if (part.content?.$case === 'text') ctx.stream(part.content.value);
          } else if (task) task = { ...task, status: payload.value.status };
          else
            task = {
              id: payload.value.taskId,
              contextId: payload.value.contextId,
              status: payload.value.status,
              history: [],
              artifacts: [],
              metadata: undefined,
            };
        }
        result ??= task;
      } else {
        result = await client.sendMessage(request, { signal });
      }
    } catch (err) {
      if (signal.aborted && !ctx.signal.aborted)
        throw new TroupeError('AGENT_TIMEOUT', `remote agent "${id}" did not answer within ${timeoutMs} ms`, { agent: id });
      throw new TroupeError('AGENT_ERROR', `remote agent "${id}" failed: ${describe(err)}`, { agent: id }, { cause: err });
    }
    if (!result) throw new TroupeError('AGENT_ERROR', `remote agent "${id}" answered with nothing`, { agent: id });
    return replyOf(result, id, routing, ctx.threadId, openTasks);
  };

  return {
    get card() {
      return card;
    },
    handle: async (message, ctx) => {
      const answer = await call(message, ctx);
      if (openTasks.size > MAX_OPEN_REMOTE_TASKS) openTasks.delete(openTasks.keys().next().value as string);
      return answer;
    },
    status: () => ({
      source: { source: 'a2a', endpoint: remote?.endpoint ?? safeUrl(opts.card) },
      ready: remote !== undefined && down === undefined,
      ...(down !== undefined ? { reason: `the remote card at ${safeUrl(opts.card)} could not be read: ${down}` } : {}),
    }),
    close: async () => {
      if (timer) clearInterval(timer);
      await reading;
    },
  };
}

/** Reads the remote card and makes a client for it. AGENT_UNREACHABLE when the card cannot be read. */
async function resolve(cardUrl: string, fetchImpl: typeof fetch): Promise<Remote> {
  const { client, card } = await connect(cardUrl, fetchImpl);
  const url = card.supportedInterfaces[0]?.url;
  return {
    client,
    card,
    routing: (card.capabilities?.extensions ?? []).some((e) => e.uri === CLIENT_ROUTING_URI),
    streaming: card.capabilities?.streaming === true,
    endpoint: url ? safeUrl(url) : safeUrl(cardUrl),
  };
}

/** The remote card under its mesh id. */
function meshCard(id: string, remote: Remote): AgentCard {
  const { card } = remote;
  return defineAgent({
    card: {
      id,
      name: card.name || id,
      description: card.description || `remote A2A agent ${id}`,
      version: card.version || '0.0.0',
      capabilities: {
        streaming: remote.streaming,
        extensions: (card.capabilities?.extensions ?? []).map((e) => ({
          uri: e.uri,
          ...(e.description ? { description: e.description } : {}),
          required: e.required,
        })),
      },
      defaultInputModes: card.defaultInputModes.length ? card.defaultInputModes : ['text/plain'],
      defaultOutputModes: card.defaultOutputModes.length ? card.defaultOutputModes : ['text/plain'],
      skills: card.skills.map((s): AgentSkill => ({
        id: s.id,
        name: s.name,
        description: s.description,
        tags: s.tags,
        ...(s.examples.length ? { examples: s.examples } : {}),
      })),
      routing: remote.routing,
      // The thread's history only for a remote agent whose own card asks for it (its extension is copied above).
      history: false,
    },
    handle: () => '',
  }).card;
}

/** The card of a remote agent whose own card was not read yet: its id, and where it will be read from. */
function placeholderCard(id: string, cardUrl: string): AgentCard {
  return defineAgent({
    card: { id, name: id, description: `remote A2A agent ${id} (card at ${safeUrl(cardUrl)} not read yet)`, routing: false, history: false },
    handle: () => '',
  }).card;
}

/** Turns the team's `{ id, a2a, token? }` members into agents (resolving each remote card once). */
export async function resolveRemoteAgents(refs: readonly RemoteAgentRef[], fetchImpl?: typeof fetch): Promise<AgentDefinition[]> {
  return Promise.all(
    refs.map((ref) =>
      remoteAgent({
        card: ref.a2a,
        id: ref.id,
        ...(ref.token ? { token: ref.token } : {}),
        ...(ref.timeoutMs ? { timeoutMs: ref.timeoutMs } : {}),
        ...(fetchImpl ? { fetchImpl } : {}),
      }),
    ),
  );
}

async function connect(cardUrl: string, fetchImpl: typeof fetch): Promise<{ client: Client; card: SdkAgentCard }> {
  const legacyCompat = { enabled: true };
  const factory = new ClientFactory(
    ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
      transports: [new JsonRpcTransportFactory({ fetchImpl, legacyCompat }), new RestTransportFactory({ fetchImpl, legacyCompat })],
      cardResolver: new DefaultAgentCardResolver({ fetchImpl, legacyCompat }),
    }),
  );
  let client: Client;
  try {
    // A card URL is used as it is; a base URL gets the well-known path.
    client = /\.json(\?.*)?$/.test(new URL(cardUrl).pathname) ? await factory.createFromUrl(cardUrl, '') : await factory.createFromUrl(cardUrl);
  } catch (err) {
    throw new TroupeError('AGENT_UNREACHABLE', `cannot read the remote agent card at ${safeUrl(cardUrl)}: ${describe(err)}`, undefined, { cause: err });
  }
  return { client, card: await client.getAgentCard() };
}

/** What goes to the remote agent: the routing request only to agents that declare the extension. */
function outgoingMetadata(metadata: Record<string, unknown> | undefined, routing: boolean): Record<string, unknown> | undefined {
  if (!metadata || routing || !(CLIENT_ROUTING_URI in metadata)) return metadata;
  const { [CLIENT_ROUTING_URI]: _dropped, ...rest } = metadata;
  return rest;
}

/** The remote result as this agent's reply: the message it wrote, or its task's answer. */
function replyOf(
  result: SdkMessage | SdkTask,
  id: string,
  routing: boolean,
  threadId: string,
  openTasks: Map<string, { taskId: string; contextId: string }>,
): Message {
  let answer: SdkMessage | undefined;
  if ('messageId' in result) {
    answer = result;
  } else {
    const state = result.status?.state;
    if (state === SdkTaskState.TASK_STATE_FAILED || state === SdkTaskState.TASK_STATE_REJECTED) {
      const said = result.status?.message ? textOf(result.status.message) : '';
      throw new TroupeError(
        'AGENT_ERROR',
        `remote agent "${id}" ${state === SdkTaskState.TASK_STATE_FAILED ? 'failed' : 'rejected'} the task${said ? `: ${said}` : ''}`,
        { agent: id },
      );
    }
    if (isTerminalSdkState(state)) openTasks.delete(threadId);
    else {
      openTasks.delete(threadId);
      openTasks.set(threadId, { taskId: result.id, contextId: result.contextId });
    }
    answer = result.status?.message ?? [...result.history].reverse().find((m) => m.role === 2);
    if (!answer && result.artifacts.length) {
      const parts = result.artifacts.flatMap((a) => a.parts);
      return { kind: 'message', role: 'agent', messageId: `${result.id}:${id}`, parts: parts.map(fromSdkPart), metadata: { [META.agent]: id } };
    }
  }
  if (!answer || answer.parts.length === 0) throw new TroupeError('AGENT_ERROR', `remote agent "${id}" answered without content`, { agent: id });
  const remoteMeta = (answer.metadata ?? {}) as Record<string, unknown>;
  const routingReply = routing ? remoteMeta[CLIENT_ROUTING_URI] : undefined;
  const metadata: Record<string, unknown> = { [META.agent]: id, ...(routingReply !== undefined ? { [CLIENT_ROUTING_URI]: routingReply } : {}) };
  return { kind: 'message', role: 'agent', messageId: answer.messageId || `${id}-reply`, parts: answer.parts.map(fromSdkPart), metadata };
}

function textOf(message: SdkMessage): string {
  return message.parts.flatMap((p) => (p.content?.$case === 'text' ? [p.content.value] : [])).join('');
}

function withBearer(fetchImpl: typeof fetch, token: string | undefined): typeof fetch {
  if (!token) return fetchImpl;
  return (input, init) => {
    const headers = new Headers(init?.headers);
    headers.set('authorization', `Bearer ${token}`);
    return fetchImpl(input, { ...init, headers });
  };
}

/** An id from a card name: lower case, runs of other characters as `-`, at most as long as an agent id may be. */
function idOf(name: string): string {
  const id = name
    .toLowerCase()
    .replace(/[^a-z0-9_-]+/g, '-')
    .replace(/^-+|-+$/g, '')
    .slice(0, ID_LIMITS.agent);
  return id || 'remote';
}

/** A URL without credentials or query, for messages. */
function safeUrl(url: string): string {
  try {
    const u = new URL(url);
    return `${u.protocol}//${u.host}${u.pathname}`;
  } catch {
    return '(an invalid URL)';
  }
}

/** An error's message, with nothing that could carry a header. */
function describe(err: unknown): string {
  const message = err instanceof Error ? err.message : String(err);
  return message.slice(0, 500);
}
