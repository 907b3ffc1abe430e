/**
 * Troupe Studio, the browser side: agents, threads, a thread (chat with streamed answers and cancel, the
 * route of each turn, the live statecharts of the thread and its children) and an inspector for any
 * actor. Everything comes from the studio server: the inspection stream (SSE) and A2A (the gateway).
 */
import './studio.css';
import { render } from 'preact';
import { useEffect, useRef, useState } from 'preact/hooks';
import { approvalMessage, cancelTask, getTask, streamMessage, userMessage, A2AError } from './a2a.js';
import { Statechart } from './chart.js';
import { connectStream, refreshThreads, stateLabel, stateOf, store, useStore, type ActorView } from './store.js';
import { META, type A2AMessage, type RouteStep, type StreamEvent } from './types.js';

interface Turn {
  id: string;
  user: string;
  to?: string;
  streamed: string;
  /** Chunks streamed before the answer (artifact-update events). */
  chunks: number;
  answer?: string;
  answeredBy?: string;
  state: string;
  route: RouteStep[];
  error?: string;
  /** The tool calls the answering agent waits on a person for (its answer's `troupe/approval` data part). */
  approval?: PendingApproval;
  /** What the person decided on them here. */
  decided?: 'approve' | 'deny';
}

interface PendingApproval {
  agent: string;
  expiresAt?: number;
  calls: Array<{ callId: string; tool: string; arguments: string }>;
}

/** Task states that end a turn (the thread waits for the user, or the task is over). */
const TURN_ENDS = new Set(['input-required', 'auth-required', 'completed', 'canceled', 'failed', 'rejected']);

/** Chats by thread id; the new conversation is under ''. */
const chats = new Map<string, Turn[]>();

function textOf(m: A2AMessage | undefined): string {
  return (m?.parts ?? []).flatMap((p) => (p.kind === 'text' && p.text ? [p.text] : [])).join('\n');
}

/** The pending tool calls an agent's answer asks a person to approve (protocol/approval.ts), if any. */
function approvalOf(m: A2AMessage | undefined): PendingApproval | undefined {
  for (const p of m?.parts ?? []) {
    const raw = p.kind === 'data' ? (p.data?.[META.approval] as Partial<PendingApproval> | undefined) : undefined;
    if (!raw || typeof raw.agent !== 'string' || !Array.isArray(raw.calls)) continue;
    const calls = raw.calls.filter((c) => typeof c?.tool === 'string' && typeof c.arguments === 'string');
    return { agent: raw.agent, ...(typeof raw.expiresAt === 'number' ? { expiresAt: raw.expiresAt } : {}), calls };
  }
  return undefined;
}

function ago(ms: number, now: number): string {
  if (!ms) return '—';
  const s = Math.max(0, Math.round((now - ms) / 1000));
  if (s < 60) return `${s}s ago`;
  if (s < 3600) return `${Math.round(s / 60)}m ago`;
  return `${Math.round(s / 3600)}h ago`;
}

function stateClass(state: string): string {
  if (state.startsWith('working') || state.includes('busy')) return 'busy';
  if (state.startsWith('input-required') || state.includes('idle')) return 'waiting';
  if (state === 'completed') return 'done';
  if (state === 'failed' || state === 'rejected') return 'failed';
  return 'other';
}

function useClock(ms = 1000): number {
  const [now, setNow] = useState(Date.now());
  useEffect(() => {
    const t = setInterval(() => setNow(Date.now()), ms);
    return () => clearInterval(t);
  }, [ms]);
  return now;
}

function Agents(props: { now: number }) {
  const s = useStore();
  const agents = s.agents();
  return (
    <section class="panel agents" aria-label="agents">
      <h2>
        Agents <span class="count">{agents.length}</span>
      </h2>
      {agents.length === 0 ? (
        <p class="empty">
          No agent has published yet. Inspection must be on: <code>troupe inspect --on</code>.
        </p>
      ) : null}
      {agents.map((a) => {
        const busy = a.instances.filter((i) => i.state.includes('busy')).length;
        const seen = Math.max(...a.instances.map((i) => i.seenAt));
        return (
          <article class="agent-card" key={a.agentId} data-agent={a.agentId}>
            <header>
              <strong>{a.card?.name ?? a.agentId}</strong>
              <span class={`badge ${busy ? 'busy' : 'waiting'}`}>{busy ? `busy ${busy}/${a.instances.length}` : 'idle'}</span>
            </header>
            <div class="agent-id">{a.agentId}</div>
            {a.card?.description ? <p class="desc">{a.card.description}</p> : null}
            <div class="meta">
              <span title="instances sharing the inbox queue group">
                {a.instances.length} replica{a.instances.length === 1 ? '' : 's'}
              </span>
              <span>last seen {ago(seen, props.now)}</span>
            </div>
            {a.card?.skills?.length ? (
              <div class="tags">
                {a.card.skills
                  .flatMap((sk) => sk.tags ?? [sk.name ?? ''])
                  .filter(Boolean)
                  .slice(0, 6)
                  .map((t) => (
                    <span class="tag" key={t}>
                      {t}
                    </span>
                  ))}
              </div>
            ) : null}
          </article>
        );
      })}
    </section>
  );
}

function Threads(props: { selected: string; onOpen: (id: string) => void; now: number }) {
  const s = useStore();
  const threads = s.threads();
  return (
    <section class="panel threads" aria-label="threads">
      <h2>
        Threads <span class="count">{threads.length}</span>
        <button class="link" onClick={() => props.onOpen('')}>
          + new
        </button>
      </h2>
      {threads.length === 0 ? <p class="empty">No threads yet: start one.</p> : null}
      <ul>
        {threads.map((t) => (
          <li key={t.threadId} class={t.threadId === props.selected ? 'selected' : ''} data-thread={t.threadId}>
            <button onClick={() => props.onOpen(t.threadId)}>
              <span class="thread-id">{t.threadId.length > 18 ? `…${t.threadId.slice(-12)}` : t.threadId}</span>
              <span class={`badge ${stateClass(t.state)}`}>{t.state}</span>
              <span class="meta">
                {t.live ? 'live' : 'passivated'} · {ago(t.at, props.now)}
              </span>
            </button>
          </li>
        ))}
      </ul>
    </section>
  );
}

function Route(props: { route: RouteStep[] }) {
  if (!props.route.length) return null;
  return (
    <ol class="route" aria-label="route">
      {props.route.map((step, i) => {
        const kind = step.reason.startsWith('handoff') ? 'handoff' : step.reason.startsWith('fan-out') ? 'fan-out' : 'hop';
        return (
          <li key={i} class={`route-step ${kind}`} data-kind={kind}>
            <span class="hop">{step.hop}</span>
            <span class="path">
              {step.from} → <strong>{step.to}</strong>
            </span>
            {kind !== 'hop' ? <span class={`badge ${kind}`}>{kind}</span> : null}
            {step.confidence !== undefined ? (
              <span class="confidence" title="router confidence">
                {Math.round(step.confidence * 100)}%
              </span>
            ) : null}
            <span class="reason">{step.reason}</span>
          </li>
        );
      })}
    </ol>
  );
}

function Chat(props: { threadId: string; onThread: (id: string) => void; agents: string[]; chat: boolean }) {
  useStore();
  // Chats live outside components (a turn outlives the chat view that started it): redraw through the store.
  const force = (_: (n: number) => number) => store.changed();
  const [text, setText] = useState('');
  const [to, setTo] = useState('');
  const [busy, setBusy] = useState(false);
  const abort = useRef<AbortController | undefined>(undefined);
  const end = useRef<HTMLDivElement>(null);
  const key = props.threadId;
  const turns = chats.get(key) ?? [];

  useEffect(() => {
    if (!key || chats.has(key) || !props.chat) return;
    // An existing thread: its history from the gateway (tasks/get), turn by turn.
    getTask(key)
      .then((task) => {
        const loaded: Turn[] = [];
        for (const m of task.history ?? []) {
          if (m.role === 'user') loaded.push({ id: m.messageId, user: textOf(m), streamed: '', chunks: 0, state: 'input-required', route: [] });
          else {
            const t = loaded.at(-1);
            if (!t) continue;
            t.answer = textOf(m);
            t.answeredBy = String(m.metadata?.[META.agent] ?? 'agent');
            t.approval = approvalOf(m);
            const route = m.metadata?.[META.route];
            if (Array.isArray(route)) t.route = route as RouteStep[];
          }
        }
        const last = loaded.at(-1);
        if (last) last.state = task.status.state;
        chats.set(key, loaded);
        force((n) => n + 1);
      })
      .catch(() => undefined);
  }, [key, props.chat]);

  useEffect(() => end.current?.scrollIntoView({ block: 'end' }), [turns.length, turns.at(-1)?.streamed, turns.at(-1)?.answer]);

  const send = (e: Event) => {
    e.preventDefault();
    const body = text.trim();
    if (!body || busy) return;
    setText('');
    void run(userMessage(body, { ...(key ? { taskId: key } : {}), ...(to ? { to } : {}) }), body, to);
  };

  /** Approve / Deny on a turn whose agent waits: the decision goes to that agent as the next turn. */
  const decide = (t: Turn, decision: 'approve' | 'deny') => {
    if (!t.approval || !key || busy) return;
    t.decided = decision;
    const tools = t.approval.calls.map((c) => c.tool).join(', ');
    void run(approvalMessage(decision, t.approval.agent, key), `${decision} ${tools}`, t.approval.agent);
  };

  const run = async (message: A2AMessage, shown: string, recipient: string) => {
    setBusy(true);
    let threadKey = key;
    const turn: Turn = {
      id: crypto.randomUUID(),
      user: shown,
      ...(recipient ? { to: recipient } : {}),
      streamed: '',
      chunks: 0,
      state: 'submitted',
      route: [],
    };
    chats.set(threadKey, [...(chats.get(threadKey) ?? []), turn]);
    force((n) => n + 1);
    abort.current = new AbortController();
    const onEvent = (ev: StreamEvent) => {
      const taskId = ev.kind === 'task' ? ev.id : ev.taskId;
      if (!threadKey && taskId) {
        // The gateway named the new thread (task id = thread id): the chat moves under its id.
        threadKey = taskId;
        chats.set(threadKey, chats.get('') ?? [turn]);
        chats.delete('');
        props.onThread(threadKey);
      }
      if (ev.kind === 'artifact-update') {
        turn.streamed += ev.artifact.parts.map((p) => p.text ?? '').join('');
        turn.chunks++;
      } else if (ev.kind === 'status-update') {
        turn.state = ev.status.state;
        const step = ev.metadata?.[META.route];
        if (step && !Array.isArray(step)) turn.route = [...turn.route, step as RouteStep];
        // A turn ends in a state that waits for the user or ends the task; A2A 0.3 servers differ on `final`.
        if (ev.final || TURN_ENDS.has(ev.status.state)) {
          turn.answer = textOf(ev.status.message);
          turn.answeredBy = String(ev.status.message?.metadata?.[META.agent] ?? 'agent');
          turn.approval = approvalOf(ev.status.message);
          const route = ev.status.message?.metadata?.[META.route];
          if (Array.isArray(route)) turn.route = route as RouteStep[];
          const error = ev.metadata?.[META.error] as { code?: string; message?: string } | undefined;
          if (error) turn.error = `${error.code ?? 'ERROR'}: ${error.message ?? ''}`;
        }
      }
      force((n) => n + 1);
    };
    try {
      await streamMessage(message, onEvent, abort.current.signal);
    } catch (err) {
      if (!(err instanceof DOMException && err.name === 'AbortError')) turn.error = err instanceof A2AError ? err.message : String(err);
    } finally {
      setBusy(false);
      force((n) => n + 1);
      void refreshThreads();
    }
  };

  const cancel = async () => {
    if (!key) return;
    try {
      const task = await cancelTask(key);
      const last = (chats.get(key) ?? []).at(-1);
      if (last) last.state = task.status.state;
    } catch (err) {
      const last = (chats.get(key) ?? []).at(-1);
      if (last) last.error = err instanceof Error ? err.message : String(err);
    }
    force((n) => n + 1);
    void refreshThreads();
  };

  return (
    <section class="panel chat" aria-label="chat">
      <h2>
        {key ? (
          <>
            Thread <code>{key}</code>
          </>
        ) : (
          'New conversation'
        )}
        {key ? (
          <button class="danger" onClick={cancel} title="tasks/cancel">
            cancel
          </button>
        ) : null}
      </h2>
      {!props.chat ? (
        <p class="empty">
          Chat needs an A2A gateway: start the studio with <code>--gateway &lt;url&gt;</code>.
        </p>
      ) : null}
      <div class="messages">
        {turns.map((t) => (
          <div class="turn" key={t.id}>
            <div class="msg user">
              <span class="who">you{t.to ? ` → ${t.to}` : ''}</span>
              {t.user}
            </div>
            <Route route={t.route} />
            {t.answer === undefined && t.streamed ? (
              <div class="msg agent streaming" data-testid="streaming">
                {t.streamed}
              </div>
            ) : null}
            {t.answer !== undefined ? (
              <div class="msg agent" data-testid="answer" data-chunks={t.chunks}>
                <span class="who">
                  {t.answeredBy}
                  {t.chunks ? (
                    <span class="streamed">
                      {' '}
                      · streamed in {t.chunks} chunk{t.chunks === 1 ? '' : 's'}
                    </span>
                  ) : null}
                </span>
                {t.answer}
              </div>
            ) : null}
            {t.approval && t.approval.calls.length ? (
              <div class="approval" data-testid="approval" data-agent={t.approval.agent}>
                <span class="who">
                  {t.approval.agent} waits for your approval
                  {t.approval.expiresAt ? ` until ${new Date(t.approval.expiresAt).toLocaleTimeString()}` : ''}
                </span>
                <ul>
                  {t.approval.calls.map((c) => (
                    <li key={c.callId} data-tool={c.tool}>
                      <code class="tool">{c.tool}</code> <code class="args">{c.arguments}</code>
                    </li>
                  ))}
                </ul>
                {t.decided ? (
                  <span class="decided" data-testid="decided">
                    {t.decided === 'approve' ? 'approved' : 'denied'}
                  </span>
                ) : t === turns.at(-1) ? (
                  <div class="actions">
                    <button type="button" data-decision="approve" disabled={busy} onClick={() => decide(t, 'approve')}>
                      Approve
                    </button>
                    <button type="button" class="danger" data-decision="deny" disabled={busy} onClick={() => decide(t, 'deny')}>
                      Deny
                    </button>
                  </div>
                ) : null}
              </div>
            ) : null}
            {t.error ? <div class="msg error">{t.error}</div> : null}
            <div class="turn-state">
              <span class={`badge ${stateClass(t.state)}`} data-testid="turn-state">
                {t.state}
              </span>
            </div>
          </div>
        ))}
        <div ref={end} />
      </div>
      <form class="composer" onSubmit={send}>
        <select
          value={to}
          onChange={(e) => setTo((e.target as HTMLSelectElement).value)}
          aria-label="recipient"
          title="address an agent directly (client routing), or let the router pick"
        >
          <option value="">router</option>
          {props.agents.map((a) => (
            <option key={a} value={a}>
              {a}
            </option>
          ))}
        </select>
        <input
          value={text}
          onInput={(e) => setText((e.target as HTMLInputElement).value)}
          placeholder="Message the mesh…"
          aria-label="message"
          disabled={!props.chat}
        />
        <button type="submit" disabled={busy || !props.chat}>
          {busy ? '…' : 'Send'}
        </button>
      </form>
    </section>
  );
}

function Charts(props: { threadId: string; selected: string; onSelect: (id: string) => void }) {
  const s = useStore();
  const actors = props.threadId ? s.actorsOf(props.threadId) : [];
  if (!props.threadId)
    return (
      <section class="panel charts">
        <h2>Statecharts</h2>
        <p class="empty">Open or start a thread to see its actors.</p>
      </section>
    );
  return (
    <section class="panel charts" aria-label="statecharts">
      <h2>
        Statecharts <span class="count">{actors.length}</span>
      </h2>
      {actors.length === 0 ? <p class="empty">Nothing published for this thread yet (is inspection on?).</p> : null}
      {actors.map((v) => (
        <figure
          key={v.actor.actorId}
          class={`actor${props.selected === v.actor.actorId ? ' selected' : ''}${(v.last?.status ?? v.actor.status) !== 'active' ? ' ended' : ''}`}
          data-actor-id={v.actor.actorId}
        >
          <figcaption onClick={() => props.onSelect(v.actor.actorId)}>
            <strong>{v.actor.actorId}</strong> <span class="machine">{v.actor.machineId}</span>
            <span class={`badge ${stateClass(stateOf(v))}`} data-testid="actor-state">
              {stateOf(v)}
            </span>
            <span class="process">{v.actor.process}</span>
          </figcaption>
          <Statechart
            actorId={v.actor.actorId}
            machineId={v.actor.machineId}
            definition={v.actor.definition}
            value={v.last ? v.last.value : v.actor.value}
            status={v.last?.status ?? v.actor.status}
          />
        </figure>
      ))}
    </section>
  );
}

function Inspect(props: { actorId: string; onClose: () => void }) {
  const s = useStore();
  const v: ActorView | undefined = s.actors.get(props.actorId);
  if (!v) return null;
  const context = v.last?.context ?? v.actor.context;
  return (
    <aside class="panel inspect" aria-label="inspect">
      <h2>
        Inspect <code>{props.actorId}</code>
        <button class="link" onClick={props.onClose}>
          close
        </button>
      </h2>
      <dl>
        <dt>state</dt>
        <dd>{stateOf(v)}</dd>
        <dt>machine</dt>
        <dd>{v.actor.machineId}</dd>
        <dt>parent</dt>
        <dd>{v.actor.parentId ?? '—'}</dd>
        <dt>process</dt>
        <dd>{v.actor.process}</dd>
      </dl>
      <h3>Recent events</h3>
      <table class="events">
        <tbody>
          {[...v.recent].reverse().map((r) => (
            <tr key={`${r.process}:${r.seq}`}>
              <td class="at">{r.at.slice(11, 23)}</td>
              <td>{r.event.type}</td>
              <td>
                {stateLabel(r.from)} → {stateLabel(r.value)}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
      <h3>
        Context <span class="hint">(redacted)</span>
      </h3>
      <pre class="context">{JSON.stringify(context, null, 2)}</pre>
    </aside>
  );
}

interface Info {
  mode: string;
  tenant: string;
  chat: boolean;
  mesh: boolean;
  inspection: Array<{ node: string; all: boolean; threads: string[] }>;
}

function App() {
  const s = useStore();
  const now = useClock();
  const [info, setInfo] = useState<Info | undefined>(undefined);
  const [threadId, setThreadId] = useState(() => new URLSearchParams(location.search).get('thread') ?? '');
  const [selected, setSelected] = useState('');
  useEffect(() => {
    connectStream();
    void refreshThreads();
    void fetch('/api/info')
      .then((r) => r.json())
      .then(setInfo);
    const t = setInterval(() => void refreshThreads(), 5_000);
    return () => clearInterval(t);
  }, []);
  const open = (id: string) => {
    setThreadId(id);
    setSelected('');
    history.replaceState(null, '', id ? `?thread=${encodeURIComponent(id)}` : location.pathname);
  };
  const inspecting = info?.inspection.some((n) => n.all);
  const toggle = async () => {
    await fetch('/api/inspection', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ on: !inspecting }) });
    setInfo((await (await fetch('/api/info')).json()) as Info);
  };
  return (
    <div class="studio">
      <header class="top">
        <h1>
          Troupe <span>Studio</span>
        </h1>
        <span class="pill">{info?.mode ?? '…'}</span>
        <span class="pill">tenant {info?.tenant ?? '…'}</span>
        <span class={`pill ${s.connected ? 'ok' : 'off'}`}>{s.connected ? 'stream connected' : 'stream offline'}</span>
        {info?.mesh ? (
          <button class={`pill toggle ${inspecting ? 'ok' : 'off'}`} onClick={toggle} title="ctl.inspection on every node (agents through hello)">
            inspection {inspecting ? 'on' : info.inspection.length ? 'off' : '(no node)'}
          </button>
        ) : null}
      </header>
      <nav class="side">
        <Agents now={now} />
        <Threads selected={threadId} onOpen={open} now={now} />
      </nav>
      <main class="main">
        <Chat threadId={threadId} onThread={open} agents={s.agents().map((a) => a.agentId)} chat={Boolean(info?.chat)} />
        <Charts threadId={threadId} selected={selected} onSelect={setSelected} />
        {selected ? <Inspect actorId={selected} onClose={() => setSelected('')} /> : null}
      </main>
    </div>
  );
}

render(<App />, document.getElementById('root')!);
