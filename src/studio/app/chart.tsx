/**
 * A live statechart: the machine definition (the JSON `troupe graph` prints, carried by the actor's
 * `actor` record) laid out by elkjs (layered, nested states inside their parents), drawn as SVG, with the
 * actor's current states highlighted. The layout is computed once per machine; a new state only changes
 * which boxes are highlighted.
 */
import ELK, { type ElkExtendedEdge, type ElkNode } from 'elkjs/lib/elk.bundled.js';
import { useEffect, useRef, useState } from 'preact/hooks';

interface StateDef {
  type?: string;
  initial?: string;
  states?: Record<string, StateDef>;
  on?: Record<string, unknown>;
  always?: unknown;
  after?: Record<string, unknown>;
  invoke?: unknown;
}

interface Box {
  id: string;
  /** The state's path below the machine, e.g. `working.routing` (what state values name). */
  path: string;
  label: string;
  x: number;
  y: number;
  width: number;
  height: number;
  compound: boolean;
  final: boolean;
}

interface Line {
  id: string;
  points: Array<{ x: number; y: number }>;
  label?: { text: string; x: number; y: number };
}

export interface Layout {
  width: number;
  height: number;
  boxes: Box[];
  lines: Line[];
}

const elk = new ELK();
const layouts = new Map<string, Promise<Layout>>();

const CHAR = 6.6;
const textWidth = (s: string) => Math.ceil(s.length * CHAR) + 20;

function eventLabel(event: string): string {
  if (event.startsWith('xstate.done.actor.')) return `done ${event.slice(18)}`;
  if (event.startsWith('xstate.error.actor.')) return `error ${event.slice(19)}`;
  if (event.startsWith('troupe.')) return event.slice(7);
  return event;
}

function targetsOf(spec: unknown): Array<{ target: string; guard?: string }> {
  if (spec === undefined || spec === null) return [];
  if (typeof spec === 'string') return [{ target: spec }];
  if (Array.isArray(spec)) return spec.flatMap(targetsOf);
  if (typeof spec === 'object') {
    const o = spec as { target?: unknown; guard?: unknown };
    const guard =
      typeof o.guard === 'string'
        ? o.guard
        : typeof (o.guard as { type?: unknown } | undefined)?.type === 'string'
          ? String((o.guard as { type: string }).type)
          : undefined;
    const targets = Array.isArray(o.target) ? o.target : o.target === undefined ? [] : [o.target];
    return targets.filter((t): t is string => typeof t === 'string').map((target) => ({ target, ...(guard ? { guard } : {}) }));
  }
  return [];
}

/** Resolves an XState target string from the state at `source` (a path like `working.routing`). */
function resolveTarget(machineId: string, source: string, target: string, known: Set<string>): string | undefined {
  let path: string;
  if (target.startsWith('#')) {
    const rest = target.slice(1);
    path = rest === machineId ? '' : rest.startsWith(`${machineId}.`) ? rest.slice(machineId.length + 1) : rest;
  } else if (target.startsWith('.')) path = source ? `${source}${target}` : target.slice(1);
  else {
    const parent = source.includes('.') ? source.slice(0, source.lastIndexOf('.')) : '';
    path = parent ? `${parent}.${target}` : target;
  }
  return known.has(path) ? path : undefined;
}

/** The ELK graph of a definition: one node per state (children inside), one edge per transition. */
function toElk(machineId: string, def: StateDef): ElkNode {
  const known = new Set<string>();
  const collect = (d: StateDef, prefix: string) => {
    for (const [k, child] of Object.entries(d.states ?? {})) {
      const p = prefix ? `${prefix}.${k}` : k;
      known.add(p);
      collect(child, p);
    }
  };
  collect(def, '');
  /** One edge per pair of states: transitions between the same two states share it and its label. */
  const pairs = new Map<string, { source: string; target: string; labels: string[] }>();
  const addEdges = (d: StateDef, source: string) => {
    const add = (event: string, spec: unknown) => {
      for (const { target, guard } of targetsOf(spec)) {
        const to = resolveTarget(machineId, source, target, known);
        if (!to || to === source) continue;
        const text = event === 'always' && guard ? `[${guard}]` : `${eventLabel(event)}${guard ? ` [${guard}]` : ''}`;
        const key = `${source}>${to}`;
        const pair = pairs.get(key) ?? { source, target: to, labels: [] };
        if (!pair.labels.includes(text)) pair.labels.push(text);
        pairs.set(key, pair);
      }
    };
    for (const [event, spec] of Object.entries(d.on ?? {})) add(event, spec);
    if (d.always) add('always', d.always);
    for (const [delay, spec] of Object.entries(d.after ?? {})) add(`after ${delay}`, spec);
    const invokes = Array.isArray(d.invoke) ? d.invoke : d.invoke ? [d.invoke] : [];
    for (const inv of invokes as Array<{ id?: string; onDone?: unknown; onError?: unknown }>) {
      if (inv.onDone) add(`done ${inv.id ?? ''}`.trim(), inv.onDone);
      if (inv.onError) add(`error ${inv.id ?? ''}`.trim(), inv.onError);
    }
  };
  const node = (d: StateDef, key: string, path: string): ElkNode => {
    addEdges(d, path);
    const kids = Object.entries(d.states ?? {}).map(([k, c]) => node(c, k, path ? `${path}.${k}` : k));
    return {
      id: `s:${path}`,
      labels: [{ text: key }],
      ...(kids.length ? { children: kids, layoutOptions: { 'elk.padding': '[top=28,left=12,bottom=12,right=12]' } } : { width: textWidth(key), height: 32 }),
    };
  };
  const children = Object.entries(def.states ?? {}).map(([k, c]) => node(c, k, k));
  const edges: ElkExtendedEdge[] = [...pairs.values()].map((p, i) => {
    const text = p.labels.length > 2 ? `${p.labels[0]} +${p.labels.length - 1}` : p.labels.join(' / ');
    const label = text.length > 34 ? `${text.slice(0, 33)}…` : text;
    return { id: `e${i}`, sources: [`s:${p.source}`], targets: [`s:${p.target}`], labels: [{ text: label, width: textWidth(label) - 12, height: 14 }] };
  });
  return {
    id: 'root',
    layoutOptions: {
      'elk.algorithm': 'layered',
      'elk.direction': 'DOWN',
      'elk.hierarchyHandling': 'INCLUDE_CHILDREN',
      'elk.layered.spacing.nodeNodeBetweenLayers': '36',
      'elk.spacing.nodeNode': '24',
      'elk.edgeLabels.inline': 'false',
      'elk.padding': '[top=8,left=8,bottom=8,right=8]',
    },
    children,
    edges,
  };
}

function flatten(graph: ElkNode, def: StateDef): Layout {
  const boxes: Box[] = [];
  const abs = new Map<string, { x: number; y: number }>([['root', { x: 0, y: 0 }]]);
  const finals = new Set<string>();
  const markFinal = (d: StateDef, prefix: string) => {
    for (const [k, c] of Object.entries(d.states ?? {})) {
      const p = prefix ? `${prefix}.${k}` : k;
      if (c.type === 'final') finals.add(p);
      markFinal(c, p);
    }
  };
  markFinal(def, '');
  const walk = (nodes: ElkNode[] | undefined, ox: number, oy: number) => {
    for (const c of nodes ?? []) {
      const x = ox + (c.x ?? 0);
      const y = oy + (c.y ?? 0);
      abs.set(c.id, { x, y });
      const path = c.id.slice(2);
      boxes.push({
        id: c.id,
        path,
        label: c.labels?.[0]?.text ?? path,
        x,
        y,
        width: c.width ?? 0,
        height: c.height ?? 0,
        compound: Boolean(c.children?.length),
        final: finals.has(path),
      });
      walk(c.children, x, y);
    }
  };
  walk(graph.children, 0, 0);
  const lines: Line[] = [];
  const edgesOf = (n: ElkNode): ElkExtendedEdge[] => [...(n.edges ?? []), ...(n.children ?? []).flatMap(edgesOf)];
  for (const e of edgesOf(graph)) {
    const container = (e as ElkExtendedEdge & { container?: string }).container ?? 'root';
    const o = abs.get(container) ?? { x: 0, y: 0 };
    for (const s of e.sections ?? []) {
      const points = [s.startPoint, ...(s.bendPoints ?? []), s.endPoint].map((p) => ({ x: p.x + o.x, y: p.y + o.y }));
      const l = e.labels?.[0];
      lines.push({ id: `${e.id}:${s.id}`, points, ...(l?.text ? { label: { text: l.text, x: (l.x ?? 0) + o.x, y: (l.y ?? 0) + o.y + 10 } } : {}) });
    }
  }
  return { width: graph.width ?? 0, height: graph.height ?? 0, boxes, lines };
}

/** The layout of one machine, computed once. */
function layoutOf(machineId: string, definition: Record<string, unknown>): Promise<Layout> {
  const key = `${machineId}:${JSON.stringify(definition).length}`;
  let pending = layouts.get(key);
  if (!pending) {
    const def = definition as StateDef;
    pending = elk.layout(toElk(machineId, def)).then((g) => flatten(g, def));
    layouts.set(key, pending);
  }
  return pending;
}

/** Paths of the states a value says are active: `{ working: 'routing' }` -> working, working.routing. */
function activePaths(value: unknown, prefix = ''): Set<string> {
  const out = new Set<string>();
  const walk = (v: unknown, p: string) => {
    if (typeof v === 'string') out.add(p ? `${p}.${v}` : v);
    else if (v && typeof v === 'object') {
      for (const [k, inner] of Object.entries(v)) {
        const q = p ? `${p}.${k}` : k;
        out.add(q);
        walk(inner, q);
      }
    }
  };
  walk(value, prefix);
  return out;
}

export function Statechart(props: { actorId: string; machineId: string; definition: Record<string, unknown>; value: unknown; status: string }) {
  const [layout, setLayout] = useState<Layout | undefined>(undefined);
  const [error, setError] = useState<string | undefined>(undefined);
  const box = useRef<HTMLDivElement>(null);
  useEffect(() => {
    let live = true;
    layoutOf(props.machineId, props.definition).then(
      (l) => live && setLayout(l),
      (err: unknown) => live && setError(String(err)),
    );
    return () => {
      live = false;
    };
  }, [props.machineId, props.definition]);
  const active = activePaths(props.value);
  const leaf = new Set([...active].filter((p) => ![...active].some((q) => q.startsWith(`${p}.`))));
  const focus = [...leaf][0];
  // A chart larger than its box keeps the current state in view as it moves.
  useEffect(() => {
    const target = layout?.boxes.find((b) => b.path === focus);
    const el = box.current;
    if (!target || !el) return;
    el.scrollTo({
      left: Math.max(0, target.x + target.width / 2 - el.clientWidth / 2),
      top: Math.max(0, target.y + target.height / 2 - el.clientHeight / 2),
      behavior: 'smooth',
    });
  }, [layout, focus]);
  if (error)
    return (
      <div class="chart-error">
        cannot draw {props.machineId}: {error}
      </div>
    );
  if (!layout) return <div class="chart-loading">laying out {props.machineId}…</div>;
  return (
    <div class="chart-box" ref={box}>
      <svg
        class="chart"
        width={Math.ceil(layout.width)}
        height={Math.ceil(layout.height)}
        viewBox={`0 0 ${Math.max(1, layout.width)} ${Math.max(1, layout.height)}`}
        data-actor={props.actorId}
        role="img"
        aria-label={`${props.machineId} statechart`}
      >
        <defs>
          <marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse">
            <path d="M 0 0 L 10 5 L 0 10 z" class="arrowhead" />
          </marker>
        </defs>
        {layout.boxes.map((b) => (
          <g
            key={b.id}
            class={`state${b.compound ? ' compound' : ''}${active.has(b.path) ? ' active' : ''}${leaf.has(b.path) ? ' leaf' : ''}${b.final ? ' final' : ''}`}
            data-state={b.path}
            data-active={active.has(b.path) ? 'true' : 'false'}
          >
            <rect x={b.x} y={b.y} width={b.width} height={b.height} rx={b.compound ? 10 : 8} />
            {b.final && !b.compound ? <rect class="final-inner" x={b.x + 3} y={b.y + 3} width={b.width - 6} height={b.height - 6} rx={6} /> : null}
            <text
              x={b.compound ? b.x + 10 : b.x + b.width / 2}
              y={b.compound ? b.y + 18 : b.y + b.height / 2 + 4}
              text-anchor={b.compound ? 'start' : 'middle'}
            >
              {b.label}
            </text>
          </g>
        ))}
        {layout.lines.map((l) => (
          <g key={l.id} class="transition">
            <polyline points={l.points.map((p) => `${p.x},${p.y}`).join(' ')} marker-end="url(#arrow)" />
            {l.label ? (
              <text x={l.label.x} y={l.label.y} class="transition-label">
                {l.label.text}
              </text>
            ) : null}
          </g>
        ))}
      </svg>
    </div>
  );
}
