/**
 * The context sanitiser: what one agent passes to another (handoff summaries and recent messages, fan-out
 * inputs, routed messages) and what diagnostics show goes through a policy that masks e-mail addresses,
 * phone numbers, card numbers, IBANs, API keys and tokens, private keys and `password: …` secrets, with
 * per-agent allow rules (agent `billing` may see card numbers).
 *
 * How it stays linear (issue 7): no regular expressions. Each detector in `detectors.ts` is one forward
 * pass over the string with constant-bounded look-around, and the passes are a fixed set. Their span
 * lists come out sorted; a k-way merge and one sweep resolve overlaps (the higher-priority detector names
 * the span, and overlapping spans are masked as their union, so nothing leaks between them); the output
 * is built from slices in one more pass. JSON values are walked once, with caps on depth, node count and
 * total characters. Every pass counts the characters it looks at in `steps`, which the tests bound by a
 * small multiple of the input length on adversarial 1 MB inputs.
 *
 * The policy is a zod schema so a team's configuration (team.yaml) can embed it:
 *
 *   sanitiser:
 *     applyTo: [routed, handoff, fanOut]
 *     detectors: [email, phone, card, iban, apiKey, jwt, bearer, privateKey, secret, highEntropy]
 *     labels: { card: "[card number]" }
 *     allow:
 *       - { agent: billing, detectors: [card, iban] }
 */
import { z } from 'zod';
import { TroupeError, type Message, type Part } from '../protocol/index.js';
import { idSchema } from '../protocol/ids.js';
import { META } from '../protocol/metadata.js';
import { DETECTORS, DETECTOR_FUNCTIONS, isSecretName, type DetectorId, type Span, type Work } from './detectors.js';

export { DETECTORS, isSecretName, type DetectorId } from './detectors.js';

const DetectorIdSchema = z.enum(DETECTORS);

/** What each detector's matches are replaced with, unless the policy names another label. */
const DEFAULT_LABELS: Readonly<Record<DetectorId, string>> = {
  privateKey: '[private-key]',
  jwt: '[jwt]',
  apiKey: '[api-key]',
  bearer: '[token]',
  secret: '[secret]',
  card: '[card]',
  iban: '[iban]',
  email: '[email]',
  phone: '[phone]',
  highEntropy: '[secret]',
};

const SanitiserLimitsSchema = z
  .object({
    /** Containers nested deeper than this (the top-level value is at depth 1) are replaced by `[omitted]`. */
    maxDepth: z.number().int().min(1).max(1000).default(64),
    /** Values (strings, numbers, containers) visited at most. */
    maxNodes: z.number().int().min(1).max(10_000_000).default(200_000),
    /** Characters of string content scanned at most, over the whole value. */
    maxChars: z
      .number()
      .int()
      .min(1)
      .max(256 * 1024 * 1024)
      .default(16 * 1024 * 1024),
  })
  .strict();

const SanitiserAllowRuleSchema = z
  .object({
    /** The receiving agent this rule lets see what the detectors below would mask. */
    agent: idSchema('agent'),
    detectors: z.array(DetectorIdSchema).min(1),
  })
  .strict();

/**
 * The paths between participants a policy covers (the hosts decide which path a message takes):
 * `entry` what a user sends to the agent that first answers, `routed` one agent's reply forwarded to
 * another, `handoff` what a handoff target receives (summary, recent messages), `fanOut` the input of
 * each agent of a fan-out. Diagnostics always redact, with their own policy.
 */
const SANITISER_FLOWS = ['entry', 'routed', 'handoff', 'fanOut'] as const;
export type SanitiserFlow = (typeof SANITISER_FLOWS)[number];

export const SanitiserPolicySchema = z
  .object({
    /** The paths the policy applies to; by default everything one agent passes to another, not the user's own first message. */
    applyTo: z.array(z.enum(SANITISER_FLOWS)).default(['routed', 'handoff', 'fanOut']),
    /** The detectors that run; all of them by default. */
    detectors: z.array(DetectorIdSchema).default([...DETECTORS]),
    /** Replacement text per detector (default `[email]`, `[card]`, …). */
    labels: z.partialRecord(DetectorIdSchema, z.string().min(1).max(64)).default({}),
    /** More key names that hold secrets, as lower-case words (e.g. `pin`, `ssn`): `user_pin: 1234`, `{ "pin": … }`. */
    secretKeys: z
      .array(z.string().regex(/^[a-z0-9]{1,32}$/, 'secret key words are 1-32 lower-case letters or digits'))
      .max(100)
      .default([]),
    /** Per-agent exceptions: the agent receives what these detectors find, unmasked. */
    allow: z.array(SanitiserAllowRuleSchema).max(1000).default([]),
    limits: SanitiserLimitsSchema.default({ maxDepth: 64, maxNodes: 200_000, maxChars: 16 * 1024 * 1024 }),
  })
  .strict();

export type SanitiserPolicy = z.output<typeof SanitiserPolicySchema>;
/** What a configuration file may write (everything optional). */
export type SanitiserPolicyInput = z.input<typeof SanitiserPolicySchema>;

/** Every detector on, default labels, no exceptions. */
export const DEFAULT_SANITISER_POLICY: SanitiserPolicy = SanitiserPolicySchema.parse({});

/** What diagnostics use (inspect, thread records): everything masked, as `[redacted]`. */
export const DIAGNOSTICS_POLICY: SanitiserPolicy = SanitiserPolicySchema.parse({
  applyTo: [...SANITISER_FLOWS],
  labels: Object.fromEntries(DETECTORS.map((d) => [d, '[redacted]'])),
});

/** Whether the policy covers this path (see SANITISER_FLOWS). */
export function appliesTo(policy: SanitiserPolicy, flow: SanitiserFlow): boolean {
  return policy.applyTo.includes(flow);
}

/** Validates a policy from configuration; a bad one is an INVALID_MESSAGE error that lists the problems. */
export function parseSanitiserPolicy(input: unknown): SanitiserPolicy {
  const parsed = SanitiserPolicySchema.safeParse(input);
  if (parsed.success) return parsed.data;
  const problems = parsed.error.issues.map((i) => `${i.path.join('.') || '(policy)'}: ${i.message}`);
  throw new TroupeError('INVALID_MESSAGE', `invalid sanitiser policy: ${problems.join('; ')}`, { problems });
}

type DetectorCounts = Record<DetectorId, number>;

export interface SanitiseOptions {
  policy: SanitiserPolicy;
  /** The agent that will receive the value; its allow rules apply. None for diagnostics. */
  recipientAgentId?: string;
  /** Past a cap: replace the rest with `[omitted]` (default) or throw PAYLOAD_TOO_LARGE. */
  onLimit?: 'omit' | 'throw';
}

export interface SanitiseResult<T> {
  value: T;
  /** Matches masked, per detector (for logs and metrics). */
  counts: DetectorCounts;
  /** Matches left as they were because an allow rule lets the recipient see them. */
  allowed: DetectorCounts;
  /** Values replaced by `[omitted]` because a cap (depth, nodes, characters) was reached, or a cycle. */
  omitted: number;
  /** Characters and values the scanners examined: a machine-independent measure of the work done. */
  steps: number;
}

export const OMITTED = '[omitted]';

interface CompiledPolicy {
  detectors: DetectorId[];
  labels: Record<DetectorId, string>;
  secretWords: ReadonlySet<string>;
  allow: Map<string, ReadonlySet<DetectorId>>;
  limits: SanitiserPolicy['limits'];
  /**
   * Short strings in which this policy's detectors found nothing: keys, kinds, roles, names — most of a
   * message's strings, and the same in every message. What the detectors find depends on the text and
   * the policy alone (not on the recipient), so a string found clean once is clean for every call.
   */
  clean: Remembered<true>;
  /** Whether a key names a secret, by key. */
  secretNames: SecretNames;
}

/** Strings up to this long are remembered as clean; at most 2 × CLEAN_KEPT of them per policy. */
const CLEAN_MAX_CHARS = 64;
const CLEAN_KEPT = 1024;

/**
 * What a policy found about short strings, in two generations of at most CLEAN_KEPT: a string seen in the
 * older one moves to the newer; when the newer is full it becomes the older and the oldest is dropped.
 * Messages carry ids that are new each time (message, task and context ids), so one map that starts over
 * when full would forget the keys and names that recur in every message as often as the ids fill it; this
 * keeps every string used at least once per generation.
 */
class Remembered<V> {
  private recent = new Map<string, V>();
  private older = new Map<string, V>();

  get(text: string): V | undefined {
    const v = this.recent.get(text);
    if (v !== undefined) return v;
    const old = this.older.get(text);
    if (old !== undefined) this.set(text, old);
    return old;
  }

  set(text: string, v: V): void {
    if (this.recent.size >= CLEAN_KEPT) {
      this.older = this.recent;
      this.recent = new Map();
    }
    this.recent.set(text, v);
  }
}

/** Whether a key names a secret (`isSecretName` with the policy's words), remembered per key. */
class SecretNames {
  private readonly known = new Remembered<boolean>();
  constructor(private readonly words: ReadonlySet<string>) {}

  is(key: string): boolean {
    if (key.length > CLEAN_MAX_CHARS) return isSecretName(key, this.words);
    let secret = this.known.get(key);
    if (secret === undefined) {
      secret = isSecretName(key, this.words);
      this.known.set(key, secret);
    }
    return secret;
  }
}

const compiled = new WeakMap<SanitiserPolicy, CompiledPolicy>();

function compile(policy: SanitiserPolicy): CompiledPolicy {
  let c = compiled.get(policy);
  if (c) return c;
  const allow = new Map<string, Set<DetectorId>>();
  for (const rule of policy.allow) {
    const set = allow.get(rule.agent) ?? new Set<DetectorId>();
    for (const d of rule.detectors) set.add(d);
    allow.set(rule.agent, set);
  }
  const enabled = new Set(policy.detectors);
  const secretWords = new Set(policy.secretKeys);
  c = {
    // Kept in priority order whatever order the configuration lists them in.
    detectors: DETECTORS.filter((d) => enabled.has(d)),
    labels: { ...DEFAULT_LABELS, ...policy.labels },
    secretWords,
    allow,
    limits: policy.limits,
    clean: new Remembered(),
    secretNames: new SecretNames(secretWords),
  };
  compiled.set(policy, c);
  return c;
}

const NEEDS_DIGITS: ReadonlySet<DetectorId> = new Set(['card', 'iban', 'phone']);
const ZERO_COUNTS = Object.freeze(Object.fromEntries(DETECTORS.map((d) => [d, 0])) as DetectorCounts);
const zeroCounts = (): DetectorCounts => ({ ...ZERO_COUNTS });
const PRIORITY = new Map<DetectorId, number>(DETECTORS.map((d, i) => [d, i]));

/** The state of one sanitise call: policy, allow set of the recipient, counters and budgets. */
class Run {
  readonly counts = zeroCounts();
  readonly allowedCounts = zeroCounts();
  readonly work: Work = { steps: 0 };
  omitted = 0;
  private nodes = 0;
  private chars = 0;
  private readonly ancestors = new Set<object>();
  readonly allowed: ReadonlySet<DetectorId>;

  /**
   * `ownIds`: the ids of the message being sanitised (its task and context ids), which go to the recipient
   * as they are: the same string elsewhere in the message (a handoff request's threadId) hides nothing masked.
   */
  constructor(
    readonly policy: CompiledPolicy,
    recipientAgentId: string | undefined,
    private readonly onLimit: 'omit' | 'throw',
    private readonly ownIds?: ReadonlySet<string>,
  ) {
    this.allowed = (recipientAgentId !== undefined && policy.allow.get(recipientAgentId)) || new Set();
  }

  result<T>(value: T): SanitiseResult<T> {
    return { value, counts: this.counts, allowed: this.allowedCounts, omitted: this.omitted, steps: this.work.steps };
  }

  /** Masks what the detectors find in one string. */
  text(text: string): string {
    if (!this.budget(1, text.length, 0)) return OMITTED;
    if (this.ownIds?.has(text)) return text;
    const clean = text.length <= CLEAN_MAX_CHARS ? this.policy.clean : undefined;
    if (clean?.get(text)) return text;
    const resolved = this.resolve(text);
    if (resolved.length === 0 && clean) clean.set(text, true);
    return this.mask(text, resolved);
  }

  /** A JSON-like value: strings scanned, values under secret-looking keys masked whole. */
  value(value: unknown, depth: number): unknown {
    if (typeof value === 'string') return this.text(value);
    // A card or phone number stored as a number (`{ card: 4242424242424242 }`) is masked like one in text.
    if ((typeof value === 'number' && Number.isInteger(value) && Math.abs(value) >= 1e6) || typeof value === 'bigint') {
      const digits = String(value);
      const masked = this.text(digits);
      return masked === digits ? value : masked;
    }
    if (value === null || typeof value !== 'object') return this.budget(1, 0, 0) ? value : OMITTED;
    if (!this.budget(1, 0, depth + 1)) return OMITTED;
    if (this.ancestors.has(value)) {
      this.omitted++;
      return '[circular]';
    }
    const json = (value as { toJSON?: unknown }).toJSON;
    if (typeof json === 'function' && !Array.isArray(value)) return this.value((json as () => unknown).call(value), depth);
    this.ancestors.add(value);
    try {
      if (Array.isArray(value)) return this.array(value, (v) => this.value(v, depth + 1));
      return this.object(value as Record<string, unknown>, (v) => this.value(v, depth + 1));
    } finally {
      this.ancestors.delete(value);
    }
  }

  /**
   * An object's entries: a key that names a secret gets its whole value masked; other values go through
   * `inner`. Keys are scanned too (an object keyed by e-mail address), and kept distinct if two mask alike.
   * An object in which nothing changed comes back as it is (no copy).
   */
  object(value: Record<string, unknown>, inner: (v: unknown, key: string) => unknown): Record<string, unknown> {
    const entries = Object.entries(value);
    // The entries so far, once one has changed: until then they are the input's own.
    let out: Array<[string, unknown]> | undefined;
    // The names given so far, once a key has been masked: until then every name is its own (distinct) key.
    let seen: Set<string> | undefined;
    // The next suffix to try per masked name, so many keys masking alike cost linear work, not quadratic.
    let nextSuffix: Map<string, number> | undefined;
    const maskKeys = this.policy.detectors.includes('secret');
    for (let i = 0; i < entries.length; i++) {
      const [key, v] = entries[i]!;
      this.work.steps += key.length + 1;
      let name = this.text(key);
      if (name !== key && !seen) {
        seen = new Set((out ?? entries.slice(0, i)).map(([n]) => n));
        nextSuffix = new Map();
      }
      if (seen?.has(name)) {
        let n = nextSuffix!.get(name) ?? 2;
        while (seen.has(`${name} (${n})`)) {
          n++;
          this.work.steps++;
        }
        nextSuffix!.set(name, n + 1);
        name = `${name} (${n})`;
      }
      seen?.add(name);
      let next: unknown;
      if (maskKeys && this.policy.secretNames.is(key)) {
        if (this.allowed.has('secret')) {
          this.allowedCounts.secret++;
          next = inner(v, key);
        } else {
          this.counts.secret++;
          next = this.policy.labels.secret;
        }
      } else {
        next = inner(v, key);
      }
      if (!out && (name !== key || next !== v)) out = entries.slice(0, i);
      out?.push([name, next]);
    }
    // fromEntries defines own properties, so a key named __proto__ stays data.
    return out ? Object.fromEntries(out) : value;
  }

  /** An array's elements through `inner`; an array in which nothing changed comes back as it is. */
  array(value: unknown[], inner: (v: unknown) => unknown): unknown[] {
    let out: unknown[] | undefined;
    for (let i = 0; i < value.length; i++) {
      const v = value[i];
      const next = inner(v);
      if (!out && next !== v) out = value.slice(0, i);
      out?.push(next);
    }
    return out ?? value;
  }

  /** Charges one value of `chars` characters, a container at `depth` (0 for leaves); false (or a throw) when a cap is reached. */
  budget(nodes: number, chars: number, depth: number): boolean {
    this.nodes += nodes;
    this.chars += chars;
    this.work.steps += nodes;
    const { maxDepth, maxNodes, maxChars } = this.policy.limits;
    const over = depth > maxDepth ? 'depth' : this.nodes > maxNodes ? 'nodes' : this.chars > maxChars ? 'characters' : undefined;
    if (!over) return true;
    if (this.onLimit === 'throw') {
      throw new TroupeError('PAYLOAD_TOO_LARGE', `value too large to sanitise: more ${over} than the policy allows`, {
        limit: over,
        maxDepth,
        maxNodes,
        maxChars,
      });
    }
    this.omitted++;
    return false;
  }

  private findSpans(text: string): Span[] {
    const lists: Span[][] = [];
    // Cards, IBANs and phone numbers need a digit; one cheap pass spares three scans of most prose.
    let digits = false;
    for (let i = 0; i < text.length && !digits; i++) {
      const c = text.charCodeAt(i);
      digits = c >= 48 && c <= 57;
      this.work.steps++;
    }
    for (const d of this.policy.detectors) {
      if (!digits && NEEDS_DIGITS.has(d)) continue;
      const spans = DETECTOR_FUNCTIONS[d](text, this.work, { secretWords: this.policy.secretWords });
      if (spans.length) lists.push(spans);
    }
    return mergeByStart(lists, this.work);
  }

  /**
   * Sweeps the spans (sorted by start) into clusters of overlapping spans. A cluster is named by its
   * highest-priority member and masked whole; it stays visible only when the recipient may see that
   * detector and every other member lies inside the winner (a misreading of the same text).
   */
  resolve(text: string): ResolvedSpan[] {
    const spans = this.findSpans(text);
    const resolved: ResolvedSpan[] = [];
    let i = 0;
    while (i < spans.length) {
      const first = spans[i]!;
      let end = first.end;
      let winner = first;
      let j = i + 1;
      while (j < spans.length && spans[j]!.start < end) {
        const s = spans[j]!;
        if (s.end > end) end = s.end;
        if (PRIORITY.get(s.detector)! < PRIORITY.get(winner.detector)!) winner = s;
        j++;
      }
      this.work.steps += j - i;
      let masked: DetectorId | undefined = winner.detector;
      if (this.allowed.has(winner.detector)) {
        masked = undefined;
        for (let m = i; m < j; m++) {
          const s = spans[m]!;
          if (!this.allowed.has(s.detector) && (s.start < winner.start || s.end > winner.end)) {
            if (masked === undefined || PRIORITY.get(s.detector)! < PRIORITY.get(masked)!) masked = s.detector;
          }
        }
      }
      if (masked === undefined) {
        this.allowedCounts[winner.detector]++;
        resolved.push({ start: winner.start, end: winner.end, detector: winner.detector, allowed: true });
      } else {
        this.counts[masked]++;
        resolved.push({ start: first.start, end, detector: masked, allowed: false });
      }
      i = j;
    }
    return resolved;
  }

  private mask(text: string, resolved: ResolvedSpan[]): string {
    if (resolved.every((r) => r.allowed)) return text;
    const out: string[] = [];
    let pos = 0;
    for (const r of resolved) {
      if (r.allowed) continue;
      out.push(text.slice(pos, r.start), this.policy.labels[r.detector]);
      pos = r.end;
    }
    out.push(text.slice(pos));
    return out.join('');
  }
}

/** A stretch of text the sanitiser masks (or, `allowed`, would mask but the recipient may see). */
export interface ResolvedSpan {
  start: number;
  end: number;
  detector: DetectorId;
  allowed: boolean;
}

/** Merges span lists, each sorted by start, into one list sorted by start: k-way, linear for fixed k. */
function mergeByStart(lists: Span[][], work: Work): Span[] {
  if (lists.length <= 1) return lists[0] ?? [];
  const heads = lists.map(() => 0);
  const out: Span[] = [];
  for (;;) {
    let best = -1;
    for (let l = 0; l < lists.length; l++) {
      const s = lists[l]![heads[l]!];
      if (s && (best < 0 || s.start < lists[best]![heads[best]!]!.start)) best = l;
    }
    work.steps += lists.length;
    if (best < 0) return out;
    out.push(lists[best]![heads[best]!++]!);
  }
}

/**
 * Sanitises a string or a JSON-like value (objects, arrays, scalars) for `recipientAgentId` under
 * `policy`. Returns the sanitised value and what was masked, per detector. The input is not changed; an
 * object or array in which nothing was masked comes back as it is, not copied (treat the result as read-only).
 */
export function sanitise(value: string, options: SanitiseOptions): SanitiseResult<string>;
export function sanitise(value: unknown, options: SanitiseOptions): SanitiseResult<unknown>;
export function sanitise(value: unknown, options: SanitiseOptions): SanitiseResult<unknown> {
  const run = new Run(compile(options.policy), options.recipientAgentId, options.onLimit ?? 'omit');
  return run.result(run.value(value, 0));
}

/**
 * Where the sanitiser would mask in `text`, and under which detector (for highlighting, tests and the
 * corpus measurement). Spans are sorted and disjoint; `allowed` ones stay visible to the recipient.
 */
export function findSensitiveSpans(text: string, options: SanitiseOptions): SanitiseResult<ResolvedSpan[]> {
  const run = new Run(compile(options.policy), options.recipientAgentId, options.onLimit ?? 'omit');
  return run.result(run.budget(1, text.length, 0) ? run.resolve(text) : []);
}

/**
 * Sanitises an A2A message for the agent about to receive it, keeping its shape (so it still validates):
 * text parts, data parts, file names and URIs, and metadata (a handoff's `troupe/recentMessages` and the
 * conversation's `troupe/history` are messages again, the rest JSON). Ids, roles and file bytes are left as they are: sanitising a file's
 * contents would need a parser per file type. So is the message's task or context id wherever else it
 * appears in the message (a handoff request names its thread): the recipient gets it anyway.
 */
export function sanitiseMessage(message: Message, options: SanitiseOptions): SanitiseResult<Message> {
  const ids = [message.taskId, message.contextId].filter((id): id is string => id !== undefined && id !== '');
  const run = new Run(compile(options.policy), options.recipientAgentId, options.onLimit ?? 'omit', ids.length > 0 ? new Set(ids) : undefined);
  return run.result(messageOf(run, message, 0));
}

function messageOf(run: Run, message: Message, depth: number): Message {
  run.budget(1, 0, depth);
  const out: Message = { ...message, parts: message.parts.map((p) => partOf(run, p, depth + 1)) };
  if (message.metadata) {
    out.metadata = run.object(message.metadata, (v, key) =>
      (key === META.recentMessages || key === META.history) && Array.isArray(v)
        ? v.map((m: unknown) => (looksLikeMessage(m) ? messageOf(run, m, depth + 2) : run.value(m, depth + 2)))
        : run.value(v, depth + 1),
    );
  }
  return out;
}

function partOf(run: Run, part: Part, depth: number): Part {
  const metadata = part.metadata ? { metadata: run.object(part.metadata, (v) => run.value(v, depth + 1)) } : {};
  switch (part.kind) {
    case 'text':
      return { ...part, text: run.text(part.text), ...metadata };
    case 'data':
      return { ...part, data: run.object(part.data, (v) => run.value(v, depth + 1)), ...metadata };
    case 'file': {
      const file = { ...part.file };
      if (file.name !== undefined) file.name = run.text(file.name);
      if ('uri' in file && typeof file.uri === 'string') file.uri = run.text(file.uri);
      return { ...part, file, ...metadata };
    }
  }
}

/** Whether a value has the shape of an A2A message (the recent messages of a handoff). */
function looksLikeMessage(v: unknown): v is Message {
  return typeof v === 'object' && v !== null && (v as { kind?: unknown }).kind === 'message' && Array.isArray((v as { parts?: unknown }).parts);
}
