/**
 * Troupe's own reading and writing of NATS header blocks (src/transport/nats-headers.ts) against the
 * client's: the same bytes out, the same record in, the same refusals, and over a real nats-server the
 * fast way actually taken (a client update that reshapes its messages fails here, not silently slower).
 */
import { createRequire } from 'node:module';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Msg, MsgHdrs } from '@nats-io/transport-node';
import { NatsTransport } from '../src/transport/nats.js';
import { jetstream, jetstreamManager, StorageType } from '@nats-io/jetstream';
import {
  clientHeaders as clientHeadersOf,
  encodeHeaderBlock,
  headersOf,
  jsHeadersOf,
  parseHeaderBlock,
  readsBytesOf,
  wireHeaders,
} from '../src/transport/nats-headers.js';
import type { Headers } from '../src/transport/types.js';
import { startNatsServer, type NatsServerHandle } from './helpers/nats-server.js';
import { bytes, waitFor } from './helpers/wait.js';

// The client's own header implementation, to compare with (nats.js exports it for its other packages).
const require = createRequire(import.meta.url);
const { MsgHdrsImpl, headers: clientHeaders } = require('@nats-io/nats-core/internal') as {
  MsgHdrsImpl: { decode(block: Uint8Array): MsgHdrs };
  headers(): MsgHdrs & { encode(): Uint8Array };
};

const text = (b: Uint8Array | undefined) => (b ? new TextDecoder().decode(b) : undefined);

function clientBlock(h: Headers): Uint8Array | undefined {
  const keys = Object.keys(h);
  if (keys.length === 0) return undefined;
  const out = clientHeaders();
  for (const k of keys) out.append(k, h[k]!);
  return out.encode();
}

/** The client's parse, as Troupe's old code made it a record: the first value of each key. */
function clientRecord(block: Uint8Array): Headers {
  const out: Headers = {};
  for (const [k, values] of MsgHdrsImpl.decode(block)) if (values.length > 0) out[k] = values[0]!;
  return out;
}

const records: Headers[] = [
  {},
  { 'Troupe-Thread': 't-1' },
  {
    'Troupe-Thread': 'bench-hop-12',
    'Troupe-Tenant': 'demo',
    'Troupe-Hop': '0',
    'Troupe-Sender': 'user',
    'Troupe-Call-Id': 'bench-hop-12/0b8d1c7e-6a8e-4b7b-a0c9-4c2f6f0b1e2a',
    'Troupe-Task': 'bench-hop-12',
    'Troupe-Context': 'bench-hop-12',
    'Troupe-Chunks': 'troupe.demo.chunks.echo.node.0b8d1c7e',
    traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
  },
  { 'X-Spaces': '  padded value  ', 'X-Empty': '', 'X-Colon': 'a: b: c', 'X-Unicode': 'Zoë — 東京 🚀' },
  { 'lower-case': 'kept as sent', 'MiXeD-CaSe': 'too', '!#$%&*+.^_`|~': 'odd but legal' },
];

describe('NATS header blocks', () => {
  it('writes the bytes the client writes, for every record', () => {
    for (const h of records) expect(text(encodeHeaderBlock(h))).toBe(text(clientBlock(h)));
  });

  it('reads every block the client reads to the same record', () => {
    for (const h of records) {
      const block = clientBlock(h);
      if (block) expect(parseHeaderBlock(block)).toEqual(clientRecord(block));
    }
    const odd = [
      'NATS/1.0 503\r\n\r\n',
      'NATS/1.0 408 Request Timeout\r\nNats-Pending-Messages: 1\r\n\r\n',
      'NATS/1.0\r\nA: first\r\nA: second\r\nB:no-space\r\n\r\n',
      'NATS/1.0\r\nno colon here\r\nC: 3\r\n\r\n',
      'NATS/1.0\r\nD: 4',
      'NATS/1.0',
    ];
    for (const s of odd) expect(parseHeaderBlock(bytes(s)), s).toEqual(clientRecord(bytes(s)));
  });

  it('refuses what the client refuses, and skips a line it would throw on when reading', () => {
    for (const bad of <Headers[]>[{ 'Bad Key': 'v' }, { 'Bad:Key': 'v' }, { Bäd: 'v' }, { Good: 'line\r\nInjected: yes' }, { Good: 'a\nb' }]) {
      expect(() => clientBlock(bad), JSON.stringify(bad)).toThrow();
      expect(() => encodeHeaderBlock(bad), JSON.stringify(bad)).toThrow(/header/);
    }
    // Stricter than the client: it writes an empty name (a line `: v`); Troupe refuses it, and skips such a line.
    expect(text(clientBlock({ '': 'v' }))).toBe('NATS/1.0\r\n: v\r\n\r\n');
    expect(() => encodeHeaderBlock({ '': 'v' })).toThrow(/header/);
    expect(parseHeaderBlock(bytes('NATS/1.0\r\n: v\r\nA: 1\r\n\r\n'))).toEqual({ A: '1' });
    const block = bytes('NATS/1.0\r\nBad Key: v\r\nGood: yes\r\n\r\n');
    expect(() => clientRecord(block)).toThrow();
    expect(parseHeaderBlock(block)).toEqual({ Good: 'yes' });
    const bare = bytes('NATS/1.0\r\nA: one\nB: two\r\nC: 3\r\n\r\n');
    expect(() => clientRecord(bare)).toThrow();
    expect(parseHeaderBlock(bare)).toEqual({ C: '3' });
    // A key that would set a record's prototype is never read as a header.
    expect(Object.getPrototypeOf(parseHeaderBlock(bytes('NATS/1.0\r\n__proto__: x\r\n\r\n')))).toBe(Object.prototype);
  });

  it('round-trips random records of printable text', () => {
    let seed = 7;
    const rand = (n: number) => (seed = (seed * 1103515245 + 12345) % 2 ** 31) % n;
    const printable = (min: number, max: number, avoid = '') => {
      let s = '';
      for (let i = 0, n = min + rand(max - min + 1); i < n; i++) {
        const c = String.fromCharCode(33 + rand(94));
        s += avoid.includes(c) ? 'x' : c;
      }
      return s;
    };
    for (let i = 0; i < 300; i++) {
      const h: Headers = {};
      for (let k = 0, n = 1 + rand(10); k < n; k++) h[printable(1, 20, ':')] = printable(0, 60);
      const block = encodeHeaderBlock(h)!;
      expect(text(block)).toBe(text(clientBlock(h)));
      expect(parseHeaderBlock(block)).toEqual(clientRecord(block));
    }
  });

  it('hands the client headers it reads as the record says, and refuses edits', () => {
    const h = wireHeaders({ A: '1', B: '2' })!;
    expect([h.get('A'), h.get('C'), h.has('B'), h.keys(), h.values('B'), [...h]]).toEqual([
      '1',
      '',
      true,
      ['A', 'B'],
      ['2'],
      [
        ['A', ['1']],
        ['B', ['2']],
      ],
    ]);
    expect(() => h.set('A', '3')).toThrow(/encoded already/);
    expect(wireHeaders({})).toBeUndefined();
  });

  describe('over a real nats-server', () => {
    let server: NatsServerHandle;
    let t: NatsTransport;
    beforeAll(async () => {
      server = await startNatsServer();
      t = await NatsTransport.connect({ ...server.asNode, name: 'headers-test' });
    });
    afterAll(async () => {
      await t?.close();
      await server?.stop();
    });

    it('reads the bytes of a received message itself, to the record that was sent', async () => {
      const seen: Msg[] = [];
      const sub = t.connection.subscribe('troupe.demo.headers.test', {
        callback: (_e, m) => {
          seen.push(m);
        },
      });
      const sent = records[2]!;
      t.publish('troupe.demo.headers.test', bytes('one'), { headers: sent });
      t.publish('troupe.demo.headers.test', bytes('two'), { headers: records[3]! });
      t.publish('troupe.demo.headers.test', bytes('three'));
      await waitFor(() => seen.length === 3, 'the three messages');
      sub.unsubscribe();
      expect(seen.map(readsBytesOf)).toEqual([true, true, true]);
      expect(headersOf(seen[0]!)).toEqual(sent);
      expect(headersOf(seen[0]!)).toEqual(clientRecord(clientBlock(sent)!));
      expect(headersOf(seen[1]!)).toEqual({ 'X-Spaces': 'padded value', 'X-Empty': '', 'X-Colon': 'a: b: c', 'X-Unicode': 'Zoë — 東京 🚀' });
      expect(headersOf(seen[2]!)).toEqual({});
      // The payload is what was sent, after the header block.
      expect(seen.map((m) => new TextDecoder().decode(m.data))).toEqual(['one', 'two', 'three']);
    });

    it('reads a JetStream message through the message it wraps, to the same record', async () => {
      const jsm = await jetstreamManager(t.connection);
      await jsm.streams.add({ name: 'HEADERS_TEST', subjects: ['troupe.demo.headers.js'], storage: StorageType.Memory });
      try {
        const sent = { ...records[2]!, 'Nats-Msg-Id': 'headers-js-1' };
        await jetstream(t.connection).publish('troupe.demo.headers.js', bytes('stored'), { headers: clientHeadersOf(sent) });
        const m = await (await jetstream(t.connection).consumers.get('HEADERS_TEST')).next({ expires: 5_000 });
        expect(m).not.toBeNull();
        expect(readsBytesOf((m as unknown as { msg: Msg }).msg)).toBe(true);
        expect(jsHeadersOf(m!)).toEqual(sent);
        expect(new TextDecoder().decode(m!.data)).toBe('stored');
      } finally {
        await jsm.streams.delete('HEADERS_TEST');
      }
    });

    it('a reply or a message whose header block the client cannot read is still taken: the request settles, the handler runs', async () => {
      // Written raw, as an agent in another language could: the client's publish takes a header object's encode().
      const raw = (block: string) => ({ encode: () => bytes(block) }) as unknown as MsgHdrs;
      const odd = t.subscribe('troupe.demo.headers.odd', (m) => {
        t.connection.publish(m.reply!, new Uint8Array(0), { headers: raw('NATS/1.0\r\nBad Key: x\r\n\r\n') });
      });
      const reply = await t.request('troupe.demo.headers.odd', bytes('x'), { timeoutMs: 5_000 });
      expect([reply.data.length, reply.headers]).toEqual([0, {}]);
      const seen: Array<Record<string, string>> = [];
      const taker = t.subscribe('troupe.demo.headers.taker', (m) => {
        seen.push(m.headers);
      });
      t.connection.publish('troupe.demo.headers.taker', bytes('y'), { headers: raw('NATS/1.0\r\nTroupe-Hop: 2\r\nBad Key: x\r\nTroupe-User: a\nb\r\n\r\n') });
      await waitFor(() => seen.length === 1, 'the message');
      expect(seen).toEqual([{ 'Troupe-Hop': '2' }]);
      odd.unsubscribe();
      taker.unsubscribe();
    });

    it('refuses to send a header the client would refuse, and the connection keeps working', async () => {
      expect(() => t.publish('troupe.demo.headers.test', bytes('x'), { headers: { 'Troupe-Thread': 'a\r\nTroupe-Tenant: other' } })).toThrow(/header/);
      await expect(t.request('troupe.demo.headers.nobody', bytes('x'), { timeoutMs: 2_000, headers: { 'Bad Key': '1' } })).rejects.toThrow(/header/);
      const echo = t.subscribe('troupe.demo.headers.echo', (m) => {
        m.respond(bytes(m.headers['Troupe-Hop'] ?? 'none'));
      });
      const reply = await t.request('troupe.demo.headers.echo', bytes('x'), { timeoutMs: 5_000, headers: { 'Troupe-Hop': '4' } });
      expect(new TextDecoder().decode(reply.data)).toBe('4');
      echo.unsubscribe();
    });
  });
});
