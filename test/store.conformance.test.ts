/**
 * One conformance suite for every ThreadStore: the memory store must behave like the KV store, which runs
 * here against a real nats-server.
 */
import { Kvm } from '@nats-io/kv';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { TroupeError, type Message, type TaskState } from '../src/protocol/index.js';
import {
  DEFAULT_THREAD_TTL_MS,
  KvThreadStore,
  MemoryThreadStore,
  mutate,
  threadKey,
  type ThreadListEntry,
  type ThreadListFilter,
  type ThreadRecord,
  type ThreadStore,
} from '../src/store/index.js';
import { startNatsServer, type NatsServerHandle } from './helpers/nats-server.js';

let nats: NatsServerHandle;
let nc: NatsConnection;
let bucketSeq = 0;

beforeAll(async () => {
  nats = await startNatsServer();
  nc = await connect({ ...nats.asNode });
});

afterAll(async () => {
  await nc?.close();
  await nats?.stop();
});

interface Harness {
  store: ThreadStore;
  /** Writes bytes under a key past all validation, as a broken writer would. */
  putRaw(tenant: string, threadId: string, raw: string): Promise<void>;
}

const backends: { name: string; open: () => Promise<Harness> }[] = [
  {
    name: 'memory',
    open: async () => {
      const store = new MemoryThreadStore();
      return { store, putRaw: async (t, id, raw) => void store.putRaw(t, id, raw) };
    },
  },
  {
    name: 'kv',
    open: async () => {
      // A fresh bucket per test keeps tests independent without a shared cleanup step.
      const bucket = `threads_${process.pid}_${++bucketSeq}`;
      const store = await KvThreadStore.open(nc, { bucket });
      const raw = await new Kvm(nc).open(bucket);
      return { store, putRaw: async (t, id, data) => void (await raw.put(`${t}.${id}`, data)) };
    },
  },
];

function message(id: string, text = id): Message {
  return { kind: 'message', role: 'user', parts: [{ kind: 'text', text }], messageId: id };
}

function record(tenant: string, threadId: string, state: TaskState = 'submitted', history: Message[] = []): ThreadRecord {
  return {
    version: 1,
    tenant,
    threadId,
    task: { kind: 'task', id: threadId, contextId: `ctx-${threadId}`, status: { state }, history },
    snapshot: { status: 'active', value: state, context: { hops: 0, nested: { list: [1, 2, 3] } } },
    updatedAt: new Date().toISOString(),
    node: 'node-1',
  };
}

async function expectError(promise: Promise<unknown>, code: TroupeError['code']): Promise<TroupeError> {
  const err = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err, `expected ${code}`).toBeInstanceOf(TroupeError);
  const te = err as TroupeError;
  expect(te.code, te.message).toBe(code);
  return te;
}

/** A plain-object view of a store, so a test can override one method. */
function wrap(store: ThreadStore): ThreadStore {
  return {
    get: (t, id) => store.get(t, id),
    create: (r) => store.create(r),
    update: (r, rev) => store.update(r, rev),
    delete: (t, id) => store.delete(t, id),
    list: (t, f) => store.list(t, f),
    close: () => store.close(),
  };
}

async function collect(store: ThreadStore, tenant: string, filter?: ThreadListFilter): Promise<ThreadListEntry[]> {
  const out: ThreadListEntry[] = [];
  for await (const entry of store.list(tenant, filter)) out.push(entry);
  return out.sort((a, b) => a.threadId.localeCompare(b.threadId));
}

describe.each(backends)('ThreadStore conformance: $name', ({ open }) => {
  let h: Harness;
  let store: ThreadStore;

  beforeEach(async () => {
    h = await open();
    store = h.store;
  });

  afterEach(async () => {
    await store.close();
  });

  it('creates a record and reads it back with its revision', async () => {
    const rec = record('demo', 't1');
    const revision = await store.create(rec);
    expect(revision).toBeGreaterThan(0);
    expect(await store.get('demo', 't1')).toEqual({ record: rec, revision });
    expect(await store.get('demo', 'missing')).toBeUndefined();
  });

  it('rejects a second create of the same key with STORE_CONFLICT and keeps the first', async () => {
    const first = record('demo', 't1', 'working');
    const revision = await store.create(first);
    const err = await expectError(store.create(record('demo', 't1', 'failed')), 'STORE_CONFLICT');
    expect(err.message).toContain('demo.t1');
    expect(await store.get('demo', 't1')).toEqual({ record: first, revision });
  });

  it('updates with compare-and-set: a stale revision is STORE_CONFLICT and changes nothing', async () => {
    const r1 = await store.create(record('demo', 't1', 'submitted'));
    const working = record('demo', 't1', 'working');
    const r2 = await store.update(working, r1);
    expect(r2).toBeGreaterThan(r1);

    await expectError(store.update(record('demo', 't1', 'failed'), r1), 'STORE_CONFLICT');
    expect(await store.get('demo', 't1')).toEqual({ record: working, revision: r2 });

    // Revisions that no record can be at, and a key that was never created.
    await expectError(store.update(record('demo', 't1', 'failed'), 0), 'STORE_CONFLICT');
    await expectError(store.update(record('demo', 't1', 'failed'), r2 + 1000), 'STORE_CONFLICT');
    await expectError(store.update(record('demo', 'never'), r2), 'STORE_CONFLICT');
    expect(await store.get('demo', 't1')).toEqual({ record: working, revision: r2 });
    expect(await store.get('demo', 'never')).toBeUndefined();
  });

  it('keeps stored state apart from the objects callers hold', async () => {
    const rec = record('demo', 't1');
    await store.create(rec);
    rec.task.status.state = 'failed';
    const got = await store.get('demo', 't1');
    expect(got?.record.task.status.state).toBe('submitted');
    got!.record.task.history!.push(message('sneaky'));
    (got!.record.snapshot as { context: { hops: number } }).context.hops = 99;
    const again = await store.get('demo', 't1');
    expect(again?.record.task.history).toEqual([]);
    expect(again?.record.snapshot).toEqual(record('demo', 't1').snapshot);
  });

  it('a history written turn after turn around the same message objects reads back exactly each time', async () => {
    // Each history message is encoded once in its life (store/codec.ts): every write must still hold
    // exactly the history it was given, whatever the text holds.
    const texts = ['plain', 'quotes " and \\ backslash', 'unicode ünï 😀 \u2028', '</script>{"history":[]}', ''];
    let history: Message[] = [];
    const rec = record('demo', 't-hist');
    let revision = await store.create(rec);
    for (let turn = 0; turn < 30; turn++) {
      history = [...history, message(`u${turn}`, texts[turn % texts.length]!), message(`a${turn}`, `answer ${turn}`)].slice(-50);
      const next = { ...rec, task: { ...rec.task, history, metadata: { turn } } };
      revision = await store.update(next, revision);
      const got = await store.get('demo', 't-hist');
      expect(got?.record).toEqual(JSON.parse(JSON.stringify(next)));
    }
  });

  it('mutate: 20 concurrent mutators each append to history and none is lost', async () => {
    await store.create(record('demo', 'hot'));
    let conflicts = 0;
    // Counts conflicts, so the test proves it exercised contention rather than running writers one by one.
    const counting: ThreadStore = {
      ...wrap(store),
      update: async (r, rev) => {
        try {
          return await store.update(r, rev);
        } catch (err) {
          if (err instanceof TroupeError && err.code === 'STORE_CONFLICT') conflicts++;
          throw err;
        }
      },
    };
    const ids = Array.from({ length: 20 }, (_, i) => `m${i}`);
    const results = await Promise.all(
      ids.map((id) =>
        mutate(counting, 'demo', 'hot', (current) => {
          if (!current) throw new Error('record vanished');
          current.task.history = [...(current.task.history ?? []), message(id)];
          current.updatedAt = new Date().toISOString();
          return current;
        }),
      ),
    );
    expect(conflicts).toBeGreaterThan(0);
    const final = await store.get('demo', 'hot');
    const landed = final?.record.task.history?.map((m) => m.messageId) ?? [];
    expect(landed).toHaveLength(20);
    expect([...landed].sort()).toEqual([...ids].sort());
    // Each mutator got a distinct revision, and the last one is what the store holds.
    const revisions = results.map((r) => r.revision);
    expect(new Set(revisions).size).toBe(20);
    expect(final?.revision).toBe(Math.max(...revisions));
  });

  it('mutate creates a missing record, also when two creators race', async () => {
    const append = (id: string) => (current: ThreadRecord | undefined) => {
      const base = current ?? record('demo', 'new');
      base.task.history = [...(base.task.history ?? []), message(id)];
      return base;
    };
    await Promise.all([mutate(store, 'demo', 'new', append('a')), mutate(store, 'demo', 'new', append('b'))]);
    const ids = (await store.get('demo', 'new'))?.record.task.history?.map((m) => m.messageId);
    expect(ids?.sort()).toEqual(['a', 'b']);
  });

  it('mutate gives up with STORE_CONFLICT after maxAttempts and never writes blindly', async () => {
    await store.create(record('demo', 'busy'));
    // Another writer always gets in between our read and our write.
    const meddling: ThreadStore = {
      ...wrap(store),
      update: async (r, rev) => {
        await store.update(record('demo', 'busy', 'working'), rev);
        return store.update(r, rev);
      },
    };
    let calls = 0;
    const err = await expectError(
      mutate(
        meddling,
        'demo',
        'busy',
        (current) => {
          calls++;
          return { ...current!, node: 'loser' };
        },
        { maxAttempts: 3 },
      ),
      'STORE_CONFLICT',
    );
    expect(err.message).toContain('3 attempts');
    expect(calls).toBe(3);
    const final = await store.get('demo', 'busy');
    expect(final?.record.node).toBe('node-1');
    expect(final?.record.task.status.state).toBe('working');
  });

  it('lists by tenant and by state, never another tenant', async () => {
    await store.create(record('a', 't1', 'working'));
    await store.create(record('a', 't2', 'completed'));
    const r3 = await store.create({
      ...record('a', 't3', 'working'),
      task: { ...record('a', 't3', 'working').task, metadata: { 'troupe/owner': 'client/alice' } },
    });
    await store.create(record('b', 't1', 'working'));
    await store.create(record('b', 'only-b', 'working'));
    // A tenant whose name extends another's must not leak into it.
    await store.create(record('a-x', 't9', 'working'));

    const all = await collect(store, 'a');
    expect(all.map((e) => e.threadId)).toEqual(['t1', 't2', 't3']);
    // With its owner and context, so a principal's own threads can be listed without reading whole records.
    expect(all[2]).toEqual({ threadId: 't3', state: 'working', updatedAt: expect.any(String), revision: r3, owner: 'client/alice', contextId: 'ctx-t3' });
    expect(all[0]).toEqual({ threadId: 't1', state: 'working', updatedAt: expect.any(String), revision: expect.any(Number), contextId: 'ctx-t1' });
    expect((await collect(store, 'a', { state: 'working' })).map((e) => e.threadId)).toEqual(['t1', 't3']);
    expect((await collect(store, 'a', { state: 'failed' })).map((e) => e.threadId)).toEqual([]);
    // By thread id, asked before the record is read (with the state filter on top).
    const asked: string[] = [];
    const some = (id: string) => (asked.push(id), id !== 't1');
    expect((await collect(store, 'a', { threadIds: some })).map((e) => e.threadId)).toEqual(['t2', 't3']);
    expect(asked.sort()).toEqual(['t1', 't2', 't3']);
    expect((await collect(store, 'a', { threadIds: some, state: 'working' })).map((e) => e.threadId)).toEqual(['t3']);
    expect((await collect(store, 'b')).map((e) => e.threadId)).toEqual(['only-b', 't1']);
    expect(await collect(store, 'nobody')).toEqual([]);
  });

  it('deletes: the record is gone, can be created again, and old revisions are stale', async () => {
    const r1 = await store.create(record('demo', 't1'));
    await store.create(record('demo', 't2'));
    await store.delete('demo', 't1');
    expect(await store.get('demo', 't1')).toBeUndefined();
    expect((await collect(store, 'demo')).map((e) => e.threadId)).toEqual(['t2']);
    await expectError(store.update(record('demo', 't1'), r1), 'STORE_CONFLICT');
    await store.delete('demo', 't1'); // deleting again is fine
    await store.delete('demo', 'never-existed');

    const r2 = await store.create(record('demo', 't1', 'working'));
    expect(r2).toBeGreaterThan(r1);
    expect((await store.get('demo', 't1'))?.record.task.status.state).toBe('working');
  });

  it('reports corrupt values as STORE_CORRUPT naming the key, and keeps the rest readable', async () => {
    await store.create(record('demo', 'good1', 'working'));
    await store.create(record('demo', 'good2', 'completed'));
    await h.putRaw('demo', 'badjson', '{"version":1,"tenant":');
    await h.putRaw('demo', 'badschema', JSON.stringify({ ...record('demo', 'badschema'), task: { kind: 'task', id: 3 } }));
    // Valid on its own, but filed under someone else's key.
    await h.putRaw('demo', 'misfiled', JSON.stringify(record('other', 'x')));

    const json = await expectError(store.get('demo', 'badjson'), 'STORE_CORRUPT');
    expect(json.message).toContain('"demo.badjson"');
    expect(json.message).toContain('not valid JSON');
    const schema = await expectError(store.get('demo', 'badschema'), 'STORE_CORRUPT');
    expect(schema.message).toContain('"demo.badschema"');
    expect(schema.message).toMatch(/task\.(id|contextId|status)/);
    const misfiled = await expectError(store.get('demo', 'misfiled'), 'STORE_CORRUPT');
    expect(misfiled.message).toContain('other.x');

    expect((await store.get('demo', 'good1'))?.record.task.status.state).toBe('working');
    const listed = await collect(store, 'demo');
    expect(listed.map((e) => [e.threadId, e.state, e.corrupt !== undefined])).toEqual([
      ['badjson', 'unknown', true],
      ['badschema', 'unknown', true],
      ['good1', 'working', false],
      ['good2', 'completed', false],
      ['misfiled', 'unknown', true],
    ]);
    expect(listed.find((e) => e.threadId === 'badjson')?.corrupt).toContain('demo.badjson');
    expect((await collect(store, 'demo', { state: 'working' })).map((e) => e.threadId)).toEqual(['good1']);
    expect((await collect(store, 'demo', { state: 'unknown' })).map((e) => e.threadId)).toEqual(['badjson', 'badschema', 'misfiled']);

    // mutate must not paper over a corrupt record.
    await expectError(
      mutate(store, 'demo', 'badjson', () => record('demo', 'badjson')),
      'STORE_CORRUPT',
    );

    // An operator can repair it with the revision the error carries.
    const revision = json.details?.revision;
    expect(typeof revision).toBe('number');
    await store.update(record('demo', 'badjson', 'canceled'), revision as number);
    expect((await store.get('demo', 'badjson'))?.record.task.status.state).toBe('canceled');
  });

  it('rejects keys outside the KV alphabet and records that fail the schema, writing nothing', async () => {
    for (const [tenant, threadId] of [
      ['a.b', 't1'],
      ['demo', 'has space'],
      ['demo', 'star*'],
      ['demo', 'gt>'],
      ['', 't1'],
      ['demo', ''],
      ['demo', '.lead'],
      ['demo', 'a..b'],
    ] as const) {
      const err = await expectError(store.create(record(tenant, threadId)), 'INVALID_MESSAGE');
      expect(err.message).toMatch(/invalid (tenant|thread id)/);
      await expectError(store.get(tenant, threadId), 'INVALID_MESSAGE');
    }
    // Dotted thread ids and the rest of the KV alphabet are fine.
    await store.create(record('demo', 'x.y/z=1_-'));
    expect((await store.get('demo', 'x.y/z=1_-'))?.record.threadId).toBe('x.y/z=1_-');

    const bad = { ...record('demo', 'bad'), updatedAt: 'yesterday' };
    await expectError(store.create(bad), 'INVALID_MESSAGE');
    expect(await store.get('demo', 'bad')).toBeUndefined();
  });

  it('rejects a record larger than the store accepts with PAYLOAD_TOO_LARGE', async () => {
    const huge = record('demo', 'huge', 'working', [message('big', 'x'.repeat(1024 * 1024 + 10))]);
    const err = await expectError(store.create(huge), 'PAYLOAD_TOO_LARGE');
    expect(err.message).toContain('demo.huge');
    expect(await store.get('demo', 'huge')).toBeUndefined();
  });

  it('fails every call after close', async () => {
    await store.create(record('demo', 't1'));
    await store.close();
    await expectError(store.get('demo', 't1'), 'TRANSPORT_ERROR');
    await expectError(store.create(record('demo', 't2')), 'TRANSPORT_ERROR');
  });
});

describe('KvThreadStore on nats-server', () => {
  it('creates the bucket with a 24 h max age by default and honours ttlMs', async () => {
    const bucket = `ttl_default_${process.pid}`;
    const store = await KvThreadStore.open(nc, { bucket });
    expect(store.ttlMs).toBe(DEFAULT_THREAD_TTL_MS);
    const status = await (await new Kvm(nc).open(bucket)).status();
    expect(status.ttl).toBe(DEFAULT_THREAD_TTL_MS);
    expect(status.history).toBe(1);
    expect(status.storage).toBe('file');

    const custom = await KvThreadStore.open(nc, { bucket: `ttl_custom_${process.pid}`, ttlMs: 60_000 });
    expect(custom.ttlMs).toBe(60_000);
    // Re-opening an existing bucket binds to it and reports the max age it really has.
    const rebound = await KvThreadStore.open(nc, { bucket, ttlMs: 5_000 });
    expect(rebound.ttlMs).toBe(DEFAULT_THREAD_TTL_MS);
  });

  it('a delete leaves no revision of the record readable, even in a bucket that keeps history', async () => {
    const bucket = `history_${process.pid}`;
    const store = await KvThreadStore.open(nc, { bucket, history: 5 });
    const rev = await store.create(record('demo', 'erased'));
    await store.update(record('demo', 'erased'), rev);
    const kv = await new Kvm(nc).open(bucket);
    const key = threadKey('demo', 'erased');
    const revisions = async () => {
      const seen: string[] = [];
      for await (const e of await kv.history({ key })) seen.push(e.operation);
      return seen;
    };
    expect(await revisions()).toEqual(['PUT', 'PUT']);
    await store.delete('demo', 'erased');
    expect(await revisions()).toEqual(['PURGE']);
    expect(await store.get('demo', 'erased')).toBeUndefined();
  });

  it('drops records once the bucket max age has passed', async () => {
    const store = await KvThreadStore.open(nc, { bucket: `ttl_short_${process.pid}`, ttlMs: 1_000 });
    await store.create(record('demo', 'brief'));
    expect(await store.get('demo', 'brief')).toBeDefined();
    await expect.poll(() => store.get('demo', 'brief'), { timeout: 5_000, interval: 200 }).toBeUndefined();
    expect(await collect(store, 'demo')).toEqual([]);
    // The key is free again.
    expect(await store.create(record('demo', 'brief'))).toBeGreaterThan(0);
  });

  it('keeps records across a nats-server restart', async () => {
    const bucket = `restart_${process.pid}`;
    const conn = await connect({ ...nats.asNode });
    const before = await KvThreadStore.open(conn, { bucket });
    const rec = record('demo', 'durable', 'input-required', [message('m1')]);
    const revision = await before.create(rec);
    await before.close();
    await conn.close();

    await nats.restart();
    // The suite connection reconnects on its own; wait for it so later tests are not disturbed.
    const after = await connect({ ...nats.asNode });
    try {
      const store = await KvThreadStore.open(after, { bucket });
      expect(await store.get('demo', 'durable')).toEqual({ record: rec, revision });
      // CAS continues from the persisted revision.
      const next = await store.update({ ...rec, node: 'node-2' }, revision);
      expect(next).toBeGreaterThan(revision);
    } finally {
      await after.close();
    }
    await expect
      .poll(
        () =>
          nc.flush().then(
            () => true,
            () => false,
          ),
        { timeout: 10_000 },
      )
      .toBe(true);
  });
});
