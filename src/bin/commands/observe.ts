/**
 * Following the inspection stream: `watch` (transitions as text or JSON lines), `inspect --on/--off`
 * (switch it), `inspect --stately` (relay to the Stately Inspector), `inspect --record` (JSON lines to a
 * file) and `replay` (a recording into the relay or the studio).
 */
import type { Command } from 'commander';
import type { InspectionRecord, InspectionStateReply } from '../../protocol/inspection.js';
import type { Transport } from '../../transport/types.js';
import { controlInspection, parseTarget, stateLabel, subscribeInspection, type InspectionTarget } from '../../studio/stream.js';
import { connect, globals, onShutdown, UsageError, type GlobalOpts } from '../cli.js';
import { color, colorState, printJson } from '../output.js';

/** Self-transitions on these are bookkeeping (clock, catalog); `watch --all` shows them. */
const QUIET_EVENTS = new Set(['troupe.tick', 'troupe.agents', 'troupe.restored', 'troupe.orchestration.tick']);

/** One record as a line: `T/router  idle → deciding (troupe.route)`. */
export function formatRecord(r: InspectionRecord): string {
  const time = color.dim(r.at.slice(11, 23));
  if (r.kind === 'actor') return `${time} ${color.bold(r.actorId)}  ${color.dim(`${r.machineId} machine`)}, in ${colorState(stateLabel(r.value))}`;
  const to = stateLabel(r.value) || r.status;
  const from = r.from === undefined ? '?' : stateLabel(r.from);
  return `${time} ${color.bold(r.actorId)}  ${from} → ${colorState(to)} ${color.cyan(`(${r.event.type})`)}${r.status !== 'active' ? color.dim(` [${r.status}]`) : ''}`;
}

function isQuiet(r: InspectionRecord): boolean {
  return r.kind === 'snapshot' && QUIET_EVENTS.has(r.event.type) && JSON.stringify(r.from) === JSON.stringify(r.value);
}

function targetsOf(arg: string | undefined): InspectionTarget[] {
  try {
    return parseTarget(arg);
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
}

/** Says what is switched on where, and how to switch it on when nothing is. */
function explainState(states: InspectionStateReply[], threadId: string | undefined): string {
  if (!states.length) return 'no node answered on ctl.inspection: is a node running (`troupe up --nats …`)? Waiting anyway.';
  const on = states.filter((s) => s.all || (threadId !== undefined && s.threads.includes(threadId)));
  if (!on.length) {
    return (
      `nothing is publishing: inspection is off on ${states.length} node(s). Turn it on with ` +
      `\`troupe inspect --on${threadId ? ` --thread ${threadId}` : ''}\` (or \`troupe watch … --on\`), or start nodes with \`troupe up --inspect\`. Waiting.`
    );
  }
  return `inspection is on at ${on.map((s) => s.node).join(', ')}; waiting for events`;
}

async function askState(transport: Transport, g: GlobalOpts, control: { on?: boolean; threadId?: string }): Promise<InspectionStateReply[] | Error> {
  try {
    return await controlInspection(transport, g.tenant, control);
  } catch (err) {
    return err as Error;
  }
}

export interface WatchOptions {
  on?: boolean;
  all?: boolean;
  /** Stop after showing this many records. */
  count?: number;
  /** Stop after this many ms; with `count`, coming short of it is a failure (exit 1). */
  for?: number;
}

export async function watch(target: string, opts: WatchOptions, cmd: Command): Promise<void> {
  const g = globals(cmd);
  const targets = targetsOf(target);
  const threadTarget = targets.find((t): t is Extract<InspectionTarget, { kind: 'thread' }> => t.kind === 'thread');
  const threadId = threadTarget?.threadId;
  const transport = await connect(g, 'troupe-watch');
  // A bounded watch (a script's, a test's) ends on its own: after `count` records shown, or after `for` ms.
  let shown = 0;
  let finished = false;
  const finish = (code: number, why?: string) => {
    if (finished) return;
    finished = true;
    if (why) process.stderr.write(color.yellow(`${why}\n`));
    void transport
      .drain()
      .catch(() => undefined)
      .then(() => process.exit(code));
  };
  subscribeInspection(
    transport,
    g.tenant,
    targets,
    (r) => {
      if (finished) return;
      const show = g.json || opts.all || !isQuiet(r);
      if (!show) return;
      process.stdout.write(`${g.json ? JSON.stringify(r) : formatRecord(r)}\n`);
      if (opts.count !== undefined && ++shown >= opts.count) finish(0);
    },
    (problem) => process.stderr.write(color.yellow(`skipped a record: ${problem}\n`)),
  );
  await transport.flush();
  const note = (text: string) => process.stderr.write(color.dim(`${text}\n`));
  note(`watching ${target} on ${transport.name} (tenant ${g.tenant})`);
  if (opts.for !== undefined) {
    const ms = opts.for;
    setTimeout(() => (opts.count === undefined ? finish(0) : finish(1, `${shown} of ${opts.count} records came in ${ms} ms`)), ms);
  }
  const state = await askState(transport, g, opts.on ? { on: true, ...(threadId ? { threadId } : {}) } : {});
  if (state instanceof Error)
    note(`could not ask the nodes whether inspection is on (${state.message.split('\n')[0]}); these credentials may not send ctl. Waiting anyway.`);
  else note(explainState(state, threadId));
  onShutdown(() => transport.drain());
}

export interface InspectStreamOptions {
  on?: boolean;
  off?: boolean;
  thread?: string;
  stately?: boolean;
  port: number;
  host: string;
  record?: string;
}

/** `troupe inspect` with stream options (the plain `troupe inspect <actorId>` lives in inspection.ts). */
export async function inspectStream(actorId: string | undefined, opts: InspectStreamOptions, cmd: Command): Promise<void> {
  const g = globals(cmd);
  const streaming = Boolean(opts.stately || opts.record);
  if (opts.on && opts.off) throw new UsageError('--on and --off together: pick one');
  if (!streaming && !opts.on && !opts.off) {
    if (!actorId) throw new UsageError('name an actor (`troupe inspect <actorId>`), or use --on/--off, --stately or --record');
    const { inspect } = await import('./inspection.js');
    return inspect(actorId, {}, cmd);
  }
  if (actorId) throw new UsageError(`--on/--off/--stately/--record take --thread, not an actor id ("${actorId}")`);
  const threadId = opts.thread;
  if (threadId !== undefined) targetsOf(threadId);
  const transport = await connect(g, 'troupe-inspect');
  if (!streaming) {
    try {
      const states = await controlInspection(transport, g.tenant, { on: Boolean(opts.on), ...(threadId ? { threadId } : {}) });
      if (g.json) printJson({ on: Boolean(opts.on), threadId, nodes: states });
      else if (!states.length) {
        process.stdout.write('no node answered: is a node running (`troupe up --nats …`)?\n');
        process.exitCode = 1;
      } else {
        const what = threadId ? `thread ${threadId}` : 'the whole mesh (nodes now, agents through hello)';
        process.stdout.write(
          `inspection ${opts.on ? color.green('on') : 'off'} for ${what} on ${states.length} node(s): ${states.map((s) => s.node).join(', ')}\n`,
        );
      }
    } finally {
      await transport.drain().catch(() => undefined);
    }
    return;
  }
  const sinks: Array<(r: InspectionRecord) => void> = [];
  const closers: Array<() => Promise<void>> = [];
  if (opts.stately) {
    const { StatelyRelay } = await import('../../studio/stately.js');
    const relay = await StatelyRelay.start({ port: opts.port, host: opts.host });
    sinks.push((r) => relay.push(r));
    closers.push(() => relay.close());
    process.stderr.write(
      `${color.green('troupe')} Stately relay on ${color.bold(relay.url)} — open it in a browser. ` +
        `${color.dim('(The inspector page itself loads from stately.ai; the relay and your events stay on this machine.)')}\n`,
    );
    if (g.json) printJson({ url: relay.url, websocket: relay.url.replace(/^http/, 'ws') });
  }
  if (opts.record) {
    const { Recorder } = await import('../../studio/recording.js');
    const recorder = new Recorder(opts.record);
    sinks.push((r) => recorder.write(r));
    closers.push(async () => {
      await recorder.close();
      process.stderr.write(color.dim(`${recorder.written} records written to ${opts.record}\n`));
    });
    process.stderr.write(
      `${color.green('troupe')} recording ${threadId ? `thread ${threadId}` : 'the mesh'} to ${opts.record} (JSON lines). Ctrl-C to stop.\n`,
    );
  }
  subscribeInspection(transport, g.tenant, threadId ? [{ kind: 'thread', threadId }] : [{ kind: 'all' }], (r) => sinks.forEach((s) => s(r)));
  await transport.flush();
  // Switching on (again) makes every node announce its live actors: the relay learns their definitions now.
  const state = await askState(transport, g, { on: true, ...(threadId ? { threadId } : {}) });
  if (state instanceof Error)
    process.stderr.write(color.yellow(`could not switch inspection on (${state.message.split('\n')[0]}); relaying what is published\n`));
  else process.stderr.write(color.dim(`inspection on at ${state.length} node(s); it stays on after this exits (\`troupe inspect --off\` stops it)\n`));
  onShutdown(async () => {
    for (const close of closers) await close().catch(() => undefined);
    await transport.drain();
  });
}

export async function replay(file: string, opts: { studio?: boolean; port?: number; host: string; speed: number }, cmd: Command): Promise<void> {
  const g = globals(cmd);
  const { replayRecording } = await import('../../studio/recording.js');
  if (opts.studio) {
    const { startStudio } = await import('../../studio/server.js');
    const studio = await startStudio({ port: opts.port ?? 8090, host: opts.host, mode: 'replay', tenant: g.tenant });
    process.stderr.write(`${color.green('troupe')} studio (replay of ${file}) on ${color.bold(studio.url)}\n`);
    const n = await replayRecording(file, (r) => studio.push(r), { speed: opts.speed }).catch(async (err: unknown) => {
      await studio.close();
      throw err;
    });
    process.stderr.write(color.dim(`${n} records replayed; Ctrl-C to stop\n`));
    onShutdown(() => studio.close());
    return;
  }
  const { StatelyRelay } = await import('../../studio/stately.js');
  const relay = await StatelyRelay.start({ port: opts.port ?? 8089, host: opts.host });
  process.stderr.write(`${color.green('troupe')} Stately relay (replay of ${file}) on ${color.bold(relay.url)} — open it in a browser\n`);
  const n = await replayRecording(file, (r) => relay.push(r), { speed: opts.speed }).catch(async (err: unknown) => {
    await relay.close();
    throw err;
  });
  if (g.json) printJson({ url: relay.url, records: n });
  process.stderr.write(color.dim(`${n} records replayed (a browser that opens the page now gets every actor); Ctrl-C to stop\n`));
  onShutdown(() => relay.close());
}
