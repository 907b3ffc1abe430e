/**
 * A thread's recent-events log (what `troupe inspect` shows) kept while the thread is dormant: packed into
 * one string, read back into entries when it wakes or someone inspects it.
 *
 * A dormant thread is there to be small (its actor stopped, its record one JSON string), and the log as
 * objects is most of a kilobyte at its 25 entries: an object and a heap number a time. Packed, an entry is
 * its time as the milliseconds since the entry before (base 36) and its event type and child id as codes
 * into a table of names shared by every thread of the process: `delta:type[:child]`, `;` between entries,
 * about ten characters an entry. The names are the thread machine's event types and child ids, a few dozen;
 * the table keeps the first `NAMES_KEPT` and writes any later name out (`~` and the name URI-encoded).
 */
import type { RecentEventEntry } from './live.js';

const NAMES_KEPT = 4096;
const names: string[] = [];
const codes = new Map<string, number>();

function token(name: string): string {
  let code = codes.get(name);
  if (code === undefined && names.length < NAMES_KEPT) {
    code = names.length;
    names.push(name);
    codes.set(name, code);
  }
  return code === undefined ? `~${encodeURIComponent(name)}` : code.toString(36);
}

function nameOf(tok: string): string | undefined {
  if (!tok.startsWith('~')) return names[parseInt(tok, 36)];
  try {
    return decodeURIComponent(tok.slice(1));
  } catch {
    return undefined;
  }
}

/** The log as one string; undefined when it is empty. */
export function packEvents(entries: readonly RecentEventEntry[]): string | undefined {
  if (entries.length === 0) return undefined;
  const parts: string[] = [];
  let last = 0;
  for (const e of entries) {
    const at = Math.round(e.at);
    parts.push(`${(at - last).toString(36)}:${token(e.type)}${e.child === undefined ? '' : `:${token(e.child)}`}`);
    last = at;
  }
  // Joined, not appended: a string made by `+=` is a tree of its pieces, kept as long as the thread sleeps.
  return parts.join(';');
}

/** The entries `packEvents` packed, oldest first. */
export function unpackEvents(packed: string | undefined): RecentEventEntry[] {
  if (!packed) return [];
  const entries: RecentEventEntry[] = [];
  let at = 0;
  for (const entry of packed.split(';')) {
    const [delta, type, child] = entry.split(':');
    at += parseInt(delta ?? '', 36);
    const typeName = type === undefined ? undefined : nameOf(type);
    const childName = child === undefined ? undefined : nameOf(child);
    // Only this module writes the string; an entry it cannot read back is left out rather than shown wrong.
    if (!Number.isFinite(at) || typeName === undefined || (child !== undefined && childName === undefined)) continue;
    entries.push({ at, type: typeName, child: childName });
  }
  return entries;
}
