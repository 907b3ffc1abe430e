/**
 * NATS header blocks (`NATS/1.0\r\nKey: value\r\n…\r\n\r\n`) read and written straight from and to
 * Troupe's plain header records, on the paths every agent call and thread message takes.
 *
 * The client's own `MsgHdrs` is built for a caller that edits headers: every `append` checks the key,
 * lists the keys so far to find a match and tests the value with a regex, and reading a message parses
 * its block into that structure, which Troupe then copied into a record. Troupe only ever sends a record
 * and reads one. Measured on an agent hop's request, eight headers (bench/PROFILE.md): the
 * client's way cost 26 µs of CPU to read and 6 µs to send, where a whole raw request-reply cost 260 µs.
 *
 * Both directions keep the client's rules: a key is printable ASCII without `:` (a bad one is refused
 * when sending, as the client refuses it, and an empty one too, which the client writes), a value has no CR or LF and is trimmed, a repeated header reads
 * as its first value. Reading, a line the client would refuse (by throwing from inside the message handler)
 * is skipped. `test/nats-headers.test.ts` checks both against the client's own encoder and parser.
 */
import { errors, headers as createHeaders, type Msg, type MsgHdrs } from '@nats-io/transport-node';
import type { JsMsg } from '@nats-io/jetstream';
import type { Headers } from './types.js';

const STATUS_LINE = 'NATS/1.0';
const textDecoder = new TextDecoder();

/** A header name as the client allows one (`canonicalMIMEHeaderKey`): printable ASCII (33..126) without the colon. */
const HEADER_NAME = /^[!-9;-~]+$/;
/** A CR or LF left inside a line (lines end at CRLF): a value the client refuses. */
const BARE_BREAK = /[\r\n]/;

/**
 * The header block of a record, as the client would write it (`MsgHdrsImpl.encode`); undefined for an
 * empty record (a plain PUB then, which is cheaper than an HPUB). Throws the client's InvalidArgumentError
 * for a key or value it would refuse.
 */
export function encodeHeaderBlock(h: Headers): Uint8Array | undefined {
  let block = STATUS_LINE;
  let empty = true;
  for (const k of Object.keys(h)) {
    if (!HEADER_NAME.test(k)) throw errors.InvalidArgumentError.format('header', `'${k.slice(0, 64)}' is not a valid header name`);
    const v = h[k] ?? '';
    if (v.includes('\r') || v.includes('\n')) throw errors.InvalidArgumentError.format('header', 'values cannot contain \\r or \\n');
    block += `\r\n${k}: ${v.trim()}`;
    empty = false;
  }
  // Buffer's UTF-8 encoder is cheaper than TextEncoder's for a few hundred bytes (a slice of its pool).
  return empty ? undefined : Buffer.from(`${block}\r\n\r\n`, 'utf8');
}

/**
 * What `publish` gives the client for a record's headers: its block encoded once, here. The client's
 * publish reads a header object through `encode()` alone; the other `MsgHdrs` members answer from the
 * record, and changing it is refused (nothing of Troupe's edits headers it has handed over).
 */
class WireHeaders implements MsgHdrs {
  readonly hasError = false;
  readonly status = '';
  readonly code = 0;
  readonly description = '';

  constructor(
    private readonly record: Headers,
    private readonly block: Uint8Array,
  ) {}

  encode(): Uint8Array {
    return this.block;
  }

  get(k: string): string {
    return this.record[k] ?? '';
  }

  last(k: string): string {
    return this.get(k);
  }

  has(k: string): boolean {
    return Object.hasOwn(this.record, k);
  }

  keys(): string[] {
    return Object.keys(this.record);
  }

  values(k: string): string[] {
    return this.has(k) ? [this.get(k)] : [];
  }

  set(): void {
    throw new TypeError('these headers are encoded already: make new ones');
  }

  append(): void {
    this.set();
  }

  delete(): void {
    this.set();
  }

  *[Symbol.iterator](): Iterator<[string, string[]]> {
    for (const k of Object.keys(this.record)) yield [k, [this.get(k)]];
  }
}

/** The client's header object for a record, encoded once (see `WireHeaders`); undefined when empty. */
export function wireHeaders(h: Headers | undefined): MsgHdrs | undefined {
  if (!h) return undefined;
  const block = encodeHeaderBlock(h);
  return block ? new WireHeaders(h, block) : undefined;
}

/** The client's own header object for a record (for client calls that may edit it, e.g. `requestMany`). */
export function clientHeaders(h: Headers | undefined): MsgHdrs | undefined {
  if (!h) return undefined;
  const keys = Object.keys(h);
  if (keys.length === 0) return undefined;
  const out = createHeaders();
  // `append`, not `set`: the keys of a record are distinct, and `set` first looks for the key to delete.
  for (const k of keys) out.append(k, h[k] ?? '');
  return out;
}

/** A header block's lines as a record: the first value of each key, trimmed; bad lines skipped. */
export function parseHeaderBlock(block: Uint8Array): Headers {
  const text = textDecoder.decode(block);
  const out: Headers = {};
  // The first line is the status (`NATS/1.0`, or `NATS/1.0 503` and a description): not a header.
  let at = text.indexOf('\r\n');
  if (at < 0) return out;
  at += 2;
  while (at < text.length) {
    let end = text.indexOf('\r\n', at);
    if (end < 0) end = text.length;
    const colon = text.indexOf(':', at);
    if (colon > at && colon < end) {
      const k = text.slice(at, colon);
      const v = text.slice(colon + 1, end);
      if (out[k] === undefined && k !== '__proto__' && HEADER_NAME.test(k) && !BARE_BREAK.test(v)) out[k] = v.trim();
    }
    at = end + 2;
  }
  return out;
}

/** The parts of the client's message (nats.js v3 `MsgImpl`) that hold the bytes as they came. */
interface ClientMsgBytes {
  _rdata?: unknown;
  _msg?: { hdr?: unknown };
}

/**
 * A message's header block as the client received it (`MsgImpl`'s `_rdata`, its first `hdr` bytes; empty
 * when it has none); undefined when the message is not shaped so (another client version).
 */
function headerBytesOf(msg: unknown): Uint8Array | undefined {
  if (typeof msg !== 'object' || msg === null) return undefined;
  const raw = msg as ClientMsgBytes;
  const hdr = raw._msg?.hdr;
  if (typeof hdr !== 'number' || !(raw._rdata instanceof Uint8Array)) return undefined;
  return hdr > 0 ? raw._rdata.subarray(0, hdr) : new Uint8Array(0);
}

/**
 * A received message's headers as a record, from the bytes the client keeps; through the client's parser
 * when a message is not shaped so (`test/nats-headers.test.ts` says when the fast way is not taken), and
 * then a block the client cannot parse reads as no headers rather than throwing in a handler.
 */
export function headersOf(msg: Msg): Headers {
  const block = headerBytesOf(msg);
  if (block) return block.length > 0 ? parseHeaderBlock(block) : {};
  return fromClientHeaders(() => msg.headers);
}

/**
 * A JetStream message's headers as a record: the message it wraps (nats.js v3 `JsMsgImpl.msg`) read as
 * `headersOf` reads one; through the client's parser when there is none.
 */
export function jsHeadersOf(m: JsMsg): Headers {
  const inner = (m as unknown as { msg?: unknown }).msg;
  return headerBytesOf(inner) ? headersOf(inner as Msg) : fromClientHeaders(() => m.headers);
}

/**
 * A reply's status code (`NATS/1.0 503` is 503), 0 when it has no header block or no code. Never throws:
 * a responder may send a block the client cannot parse, and its request must still settle.
 */
export function statusOf(msg: Msg): number {
  const block = headerBytesOf(msg);
  if (!block) {
    try {
      return msg.headers?.code ?? 0;
    } catch {
      return 0;
    }
  }
  const line = textDecoder.decode(block.subarray(0, Math.min(block.length, 64))).split('\r\n', 1)[0] ?? '';
  const code = /^NATS\/1\.0 (\d{3})(?!\d)/.exec(line);
  return code ? Number(code[1]) : 0;
}

/** Whether `headersOf` reads this message's bytes itself (the tests hold it to that). */
export function readsBytesOf(msg: Msg): boolean {
  return headerBytesOf(msg) !== undefined;
}

function fromClientHeaders(read: () => MsgHdrs | undefined): Headers {
  const out: Headers = {};
  let h: MsgHdrs | undefined;
  try {
    h = read();
  } catch {
    return out;
  }
  if (!h) return out;
  for (const [k, values] of h) if (values.length > 0 && k !== '__proto__') out[k] = values[0]!;
  return out;
}
