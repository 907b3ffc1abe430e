/** The context sanitiser: detectors, labels, allow rules, JSON values, messages, caps and the policy schema. */
import { describe, expect, it } from 'vitest';
import { MessageSchema, TroupeError, type Message } from '../src/protocol/index.js';
import {
  DEFAULT_SANITISER_POLICY,
  DETECTORS,
  DIAGNOSTICS_POLICY,
  OMITTED,
  SanitiserPolicySchema,
  appliesTo,
  findSensitiveSpans,
  isSecretName,
  parseSanitiserPolicy,
  sanitise,
  sanitiseMessage,
  type SanitiserPolicyInput,
} from '../src/sanitiser/sanitiser.js';
import { ibanChecksumValid, luhn } from '../src/sanitiser/detectors.js';

const policy = DEFAULT_SANITISER_POLICY;
const clean = (text: string, recipientAgentId?: string, p = policy) => sanitise(text, { policy: p, recipientAgentId }).value;
const withPolicy = (input: SanitiserPolicyInput) => SanitiserPolicySchema.parse(input);

describe('detectors (default labels)', () => {
  it.each([
    ['e-mail', 'write to ada.lovelace+notes@example.co.uk today', 'write to [email] today'],
    ['North American phone', 'call (415) 555-0132 or 212-555-0147', 'call [phone] or [phone]'],
    ['international phone', 'mobile +44 7700 900123.', 'mobile [phone].'],
    ['national phone with trunk 0', 'office 020 7946 0958', 'office [phone]'],
    ['phone after a keyword', 'phone: 5551234567', 'phone: [phone]'],
    ['card with spaces', 'card 4242 4242 4242 4242 exp 12/26', 'card [card] exp 12/26'],
    ['card with dashes', 'amex 3782-822463-10005', 'amex [card]'],
    ['card followed by its expiry', 'pay 4111111111111111/12/26', 'pay [card]/12/26'],
    ['IBAN grouped', 'IBAN DE89 3704 0044 0532 0130 00.', 'IBAN [iban].'],
    ['IBAN compact', 'to GB82WEST12345698765432', 'to [iban]'],
    ['OpenAI key', 'key sk-proj-Ab12Cd34Ef56Gh78Ij90Kl12Mn34', 'key [api-key]'],
    ['Anthropic key', 'sk-ant-api03-Xy12Zz34Ab56Cd78Ef90Gh12Ij34Kl56Mn78Op90Qr12St34Uv56', '[api-key]'],
    ['AWS access key', 'AKIAIOSFODNN7EXAMPLE', '[api-key]'],
    [
      'GitHub token',
      'ghp_16C7e42F292c6912E7710c838347Ae178B4a and github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456',
      '[api-key] and [api-key]',
    ],
    ['Slack token', 'xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx', '[api-key]'],
    ['JWT', 'eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U', '[jwt]'],
    ['bearer token', 'Authorization: Bearer abcDEF123456ghiJKL789', 'Authorization: [token]'],
    ['basic credential', 'use Basic YWRtaW46aHVudGVyMg== please', 'use Basic [token] please'],
    ['password: value', 'password: hunter2', 'password: [secret]'],
    ['secret=value in a query', '?client_secret=abc123&grant_type=x', '?client_secret=[secret]&grant_type=x'],
    ['quoted JSON in text', '{"api_key": "internal-abc123"}', '{"api_key": "[secret]"}'],
    ['env line', 'DB_PASSWORD=s3cr3t!', 'DB_PASSWORD=[secret]'],
    ['password without a colon', 'the wifi password is sunflower77, enjoy', 'the wifi password is [secret], enjoy'],
    ['URL credentials', 'postgres://app:pa55w0rd@db.internal:5432/app', 'postgres://app:[secret]@db.internal:5432/app'],
    ['private key', 'k: -----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY----- ok', 'k: [private-key] ok'],
    ['high-entropy secret', 'the value is 8fJ2kL9mN3pQ5rS7tU1vW3xY5zA7bC9dE1fG3hI5', 'the value is [secret]'],
  ])('%s', (_name, input, expected) => {
    expect(clean(input)).toBe(expected);
  });

  it.each([
    ['card failing Luhn', 'order 4242 4242 4242 4241 shipped'],
    ['card-like id glued to a word', 'id ORD-4242424242424242'],
    ['IMEI (Luhn-valid, 15 digits, not an issuer length)', 'IMEI 490154203237518'],
    ['IBAN with a bad checksum', 'DE89 3704 0044 0532 0130 01'],
    ['dates and times', 'on 2024-01-15 at 09:30:00 and 15.01.2024'],
    ['IP address and versions', 'host 192.168.1.10 runs v1.2.3'],
    ['SSN-shaped and ZIP+4', '123-45-6789 and 12345-6789'],
    ['scoped package and version pins', '@types/node and react@18.2.0'],
    ['git remote', 'git@github.com:org/repo.git'],
    ['retina asset names', 'icon@2x.png'],
    ['words that start like keys', 'sk-learn-compatible-estimators and ghp_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'],
    ['bearer in prose', 'the bearer of bad news'],
    ['token counts', 'max_tokens=256, tokens: 1500'],
    ['prose after a secret name', 'Password: must be at least 12 characters'],
    ['placeholders', 'password: ******** and api_key: ${OPENAI_API_KEY}'],
    ['hashes and ids', 'commit 3f2a9c1e8b7d6a5f4e3d2c1b0a9f8e7d6c5b4a39 uuid 550e8400-e29b-41d4-a716-446655440000'],
    ['publishable keys', 'pk_live_OdiK4uHrx6HjhlIBVMUqbT8p'],
  ])('leaves %s alone', (_name, input) => {
    expect(clean(input)).toBe(input);
  });

  it('checks card numbers with Luhn and IBANs with mod 97', () => {
    expect(luhn('4242424242424242')).toBe(true);
    expect(luhn('4242424242424241')).toBe(false);
    expect(ibanChecksumValid('DE89370400440532013000')).toBe(true);
    expect(ibanChecksumValid('DE89370400440532013001')).toBe(false);
  });

  it('masks overlapping matches as one span named by the higher-priority detector', () => {
    // The JSON key names a secret and its value is a key: one mask, the more specific label.
    expect(clean('{"token": "ghp_16C7e42F292c6912E7710c838347Ae178B4a"}')).toBe('{"token": "[api-key]"}');
    const spans = findSensitiveSpans('OPENAI_API_KEY=sk-proj-Ab12Cd34Ef56Gh78Ij90Kl12Mn34 mail a@b.co', { policy }).value;
    expect(spans.map((s) => s.detector)).toEqual(['apiKey', 'email']);
    expect(spans[0]!.end).toBeLessThanOrEqual(spans[1]!.start);
  });

  it('returns counts per detector', () => {
    const result = sanitise('a@b.co, c@d.io, card 4242424242424242, password: x1', { policy });
    expect(result.counts).toMatchObject({ email: 2, card: 1, secret: 1, phone: 0 });
    expect(Object.keys(result.counts).sort()).toEqual([...DETECTORS].sort());
    expect(result.steps).toBeGreaterThan(0);
  });

  it('is idempotent: sanitised text sanitises to itself', () => {
    const once = clean('mail ada@example.com, password: hunter2, card 4242 4242 4242 4242, key sk-ABCDEFGHIJKLMNOP1');
    expect(clean(once)).toBe(once);
  });
});

describe('policy', () => {
  it('uses per-detector labels from the policy', () => {
    const p = withPolicy({ labels: { card: '[card number]', email: '<email>' } });
    expect(clean('ada@example.com paid with 4242424242424242', undefined, p)).toBe('<email> paid with [card number]');
  });

  it('runs only the listed detectors', () => {
    const p = withPolicy({ detectors: ['card'] });
    expect(clean('ada@example.com paid with 4242424242424242', undefined, p)).toBe('ada@example.com paid with [card]');
  });

  it('lets an allowed agent see what its rule allows, and no one else', () => {
    const p = withPolicy({ allow: [{ agent: 'billing', detectors: ['card', 'iban'] }] });
    const text = 'card 4242424242424242, iban DE89370400440532013000, mail ada@example.com';
    const billing = sanitise(text, { policy: p, recipientAgentId: 'billing' });
    expect(billing.value).toBe('card 4242424242424242, iban DE89370400440532013000, mail [email]');
    expect(billing.allowed).toMatchObject({ card: 1, iban: 1 });
    expect(billing.counts).toMatchObject({ card: 0, iban: 0, email: 1 });
    expect(clean(text, 'support', p)).toBe('card [card], iban [iban], mail [email]');
    expect(clean(text, undefined, p)).toBe('card [card], iban [iban], mail [email]');
  });

  it('masks an allowed match when a detector the agent may not see reaches past it', () => {
    // The card is allowed for billing, but the secret value around it (and beyond) is not.
    const p = withPolicy({ allow: [{ agent: 'billing', detectors: ['card'] }] });
    expect(clean('password=4242424242424242xyz', 'billing', p)).toBe('password=[secret]');
    expect(clean('card 4242424242424242', 'billing', p)).toBe('card 4242424242424242');
  });

  it('treats extra secret key words from the policy as secret names', () => {
    const p = withPolicy({ secretKeys: ['pin'] });
    expect(clean('user_pin: 4821', undefined, p)).toBe('user_pin: [secret]');
    expect(sanitise({ pin: 4821, pins: 3 }, { policy: p }).value).toEqual({ pin: '[secret]', pins: 3 });
    expect(clean('user_pin: 4821')).toBe('user_pin: 4821');
  });

  it('parses the shape a team.yaml would hold, with defaults', () => {
    const p = parseSanitiserPolicy({ labels: { card: '[card]' }, allow: [{ agent: 'billing', detectors: ['card'] }] });
    expect(p.detectors).toEqual([...DETECTORS]);
    expect(p.applyTo).toEqual(['routed', 'handoff', 'fanOut']);
    expect(appliesTo(p, 'handoff')).toBe(true);
    expect(appliesTo(p, 'entry')).toBe(false);
    expect(appliesTo(parseSanitiserPolicy({ applyTo: ['entry', 'handoff'] }), 'entry')).toBe(true);
    expect(p.limits).toEqual({ maxDepth: 64, maxNodes: 200_000, maxChars: 16 * 1024 * 1024 });
  });

  it.each([
    ['an unknown detector', { detectors: ['ssn'] }],
    ['an unknown path', { applyTo: ['broadcast'] }],
    ['an unknown field', { detector: ['card'] }],
    ['a bad agent id', { allow: [{ agent: 'billing.team', detectors: ['card'] }] }],
    ['an allow rule without detectors', { allow: [{ agent: 'billing', detectors: [] }] }],
    ['an empty label', { labels: { card: '' } }],
    ['a secret key word with punctuation', { secretKeys: ['pin code'] }],
  ])('rejects %s with a typed error naming the field', (_name, input) => {
    let error: unknown;
    try {
      parseSanitiserPolicy(input);
    } catch (err) {
      error = err;
    }
    expect(error).toBeInstanceOf(TroupeError);
    expect((error as TroupeError).code).toBe('INVALID_MESSAGE');
    expect((error as TroupeError).details?.problems).toEqual(expect.arrayContaining([expect.any(String)]));
  });
});

describe('secret names', () => {
  it.each([
    'password',
    'PASSWORD',
    'db_password',
    'apiKey',
    'API_KEY',
    'x-api-key',
    'APIKey',
    'accessToken',
    'refresh_token',
    'client_secret',
    'Authorization',
    'proxy-authorization',
    'AWS_SECRET_ACCESS_KEY',
    'private_key',
    'SECRET_KEY_BASE',
    'credentials',
    'passphrase',
    'auth',
    'cookie',
    'password_hash',
  ])('%s is secret', (name) => expect(isSecretName(name)).toBe(true));
  it.each([
    'tokens',
    'max_tokens',
    'input_tokens',
    'tokenCount',
    'tokenizer',
    'secretName',
    'passwordPolicy',
    'passengers',
    'bypass',
    'key',
    'monkey',
    'secretary',
    'passwordless',
    'author',
    'authored_by',
    'tokenType',
  ])('%s is not', (name) => expect(isSecretName(name)).toBe(false));
});

describe('JSON values', () => {
  it('masks values under secret keys whole, scans every string, keeps the rest', () => {
    const input = {
      password: 'hunter2',
      apiKey: { nested: 'anything' },
      usage: { input_tokens: 812, output_tokens: 96 },
      history: [{ text: 'mail ada@example.com' }, 'card 4242424242424242', 42, true, null],
    };
    const result = sanitise(input, { policy });
    expect(result.value).toEqual({
      password: '[secret]',
      apiKey: '[secret]',
      usage: { input_tokens: 812, output_tokens: 96 },
      history: [{ text: 'mail [email]' }, 'card [card]', 42, true, null],
    });
    expect(result.counts).toMatchObject({ secret: 2, email: 1, card: 1 });
    expect(input.password).toBe('hunter2');
  });

  it('masks card numbers stored as numbers', () => {
    expect(sanitise({ card: 4242424242424242, amount: 129, big: 4242424242424242n }, { policy }).value).toEqual({ card: '[card]', amount: 129, big: '[card]' });
  });

  it('scans keys and keeps two keys distinct when they mask alike', () => {
    const out = sanitise({ 'ada@example.com': 1, 'bob@example.com': 2 }, { policy }).value as Record<string, number>;
    expect(out).toEqual({ '[email]': 1, '[email] (2)': 2 });
  });

  it('keeps a key named __proto__ as data and does not touch Object.prototype', () => {
    const input = JSON.parse('{"__proto__": {"polluted": "yes ada@example.com"}}') as unknown;
    const out = sanitise(input, { policy }).value as Record<string, unknown>;
    expect(Object.getOwnPropertyDescriptor(out, '__proto__')?.value).toEqual({ polluted: 'yes [email]' });
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  });

  it('replaces what is nested deeper than maxDepth, without overflowing the stack', () => {
    let deep: unknown = 'ada@example.com';
    for (let i = 0; i < 100_000; i++) deep = { next: deep };
    const result = sanitise(deep, { policy });
    let node = result.value as { next?: unknown };
    let depth = 0;
    while (node && typeof node === 'object' && 'next' in node) {
      node = node.next as { next?: unknown };
      depth++;
    }
    expect(node).toBe(OMITTED);
    expect(depth).toBe(64);
    expect(result.omitted).toBe(1);
  });

  it('caps nodes and characters, or throws PAYLOAD_TOO_LARGE when asked to', () => {
    const p = withPolicy({ limits: { maxNodes: 10, maxChars: 20 } });
    const many = sanitise(
      Array.from({ length: 20 }, (_, i) => i),
      { policy: p },
    );
    expect((many.value as unknown[]).filter((v) => v === OMITTED)).toHaveLength(11);
    const long = sanitise(['short', 'x'.repeat(30)], { policy: p });
    expect(long.value).toEqual(['short', OMITTED]);
    expect(() => sanitise(['x'.repeat(30)], { policy: p, onLimit: 'throw' })).toThrowError(
      expect.objectContaining({ code: 'PAYLOAD_TOO_LARGE', details: expect.objectContaining({ limit: 'characters' }) }),
    );
  });

  it('shows a cycle as [circular] and still sanitises the rest', () => {
    const a: Record<string, unknown> = { mail: 'ada@example.com' };
    a.self = a;
    const result = sanitise(a, { policy });
    expect(result.value).toEqual({ mail: '[email]', self: '[circular]' });
  });

  it('serialises values with toJSON (dates) before scanning', () => {
    expect(sanitise({ at: new Date('2024-01-15T00:00:00Z') }, { policy }).value).toEqual({ at: '2024-01-15T00:00:00.000Z' });
  });
});

describe('messages', () => {
  const message: Message = {
    kind: 'message',
    role: 'user',
    messageId: 'm-ada@example.com',
    contextId: 'ctx-1',
    taskId: 't-1',
    parts: [
      { kind: 'text', text: 'my card is 4242 4242 4242 4242, mail ada@example.com' },
      { kind: 'data', data: { password: 'hunter2', phone: '+44 7700 900123', n: 3 } },
      { kind: 'file', file: { name: 'ada@example.com.pdf', bytes: 'YWRhQGV4YW1wbGUuY29t' } },
      { kind: 'file', file: { uri: 'https://u:pa55w0rd@files.example.com/x.pdf' } },
    ],
    metadata: {
      'troupe/contextSummary': 'Customer ada@example.com wants a refund to DE89 3704 0044 0532 0130 00',
      'troupe/recentMessages': [
        { kind: 'message', role: 'user', messageId: 'r1', parts: [{ kind: 'text', text: 'password: hunter2' }] },
        { kind: 'message', role: 'agent', messageId: 'r2', parts: [{ kind: 'file', file: { bytes: 'aGVsbG8=', name: 'a.txt' } }] },
      ],
    },
  };

  it('sanitises parts and metadata, keeps ids and file bytes, and still validates', () => {
    const result = sanitiseMessage(message, { policy, recipientAgentId: 'support' });
    const out = result.value;
    expect(MessageSchema.parse(out)).toEqual(out);
    expect(out.messageId).toBe(message.messageId);
    expect(out.parts[0]).toEqual({ kind: 'text', text: 'my card is [card], mail [email]' });
    expect(out.parts[1]).toEqual({ kind: 'data', data: { password: '[secret]', phone: '[phone]', n: 3 } });
    expect(out.parts[2]).toEqual({ kind: 'file', file: { name: '[email].pdf', bytes: 'YWRhQGV4YW1wbGUuY29t' } });
    expect(out.parts[3]).toEqual({ kind: 'file', file: { uri: 'https://u:[secret]@files.example.com/x.pdf' } });
    expect(out.metadata?.['troupe/contextSummary']).toBe('Customer [email] wants a refund to [iban]');
    const recent = out.metadata?.['troupe/recentMessages'] as Message[];
    expect(recent.map((m) => MessageSchema.parse(m))).toHaveLength(2);
    expect(recent[0]!.parts[0]).toEqual({ kind: 'text', text: 'password: [secret]' });
    expect(recent[1]!.parts[0]).toEqual({ kind: 'file', file: { bytes: 'aGVsbG8=', name: 'a.txt' } });
    expect(result.counts).toMatchObject({ card: 1, email: 3, secret: 3, phone: 1, iban: 1 });
    expect(message.parts[0]).toEqual({ kind: 'text', text: 'my card is 4242 4242 4242 4242, mail ada@example.com' });
  });

  it("sanitises the conversation's troupe/history as messages: text masked, ids and shape kept", () => {
    const withHistory: Message = {
      ...message,
      metadata: {
        'troupe/history': [{ kind: 'message', role: 'user', messageId: 'h-ada@example.com', parts: [{ kind: 'text', text: 'mail me at ada@example.com' }] }],
      },
    };
    const history = sanitiseMessage(withHistory, { policy, recipientAgentId: 'support' }).value.metadata?.['troupe/history'] as Message[];
    expect(history).toEqual([{ kind: 'message', role: 'user', messageId: 'h-ada@example.com', parts: [{ kind: 'text', text: 'mail me at [email]' }] }]);
  });

  it('applies the recipient agent’s allow rules', () => {
    const p = withPolicy({ allow: [{ agent: 'billing', detectors: ['card', 'iban'] }] });
    const out = sanitiseMessage(message, { policy: p, recipientAgentId: 'billing' }).value;
    expect(out.parts[0]).toEqual({ kind: 'text', text: 'my card is 4242 4242 4242 4242, mail [email]' });
    expect(out.metadata?.['troupe/contextSummary']).toBe('Customer [email] wants a refund to DE89 3704 0044 0532 0130 00');
  });
});

describe('diagnostics policy', () => {
  it('masks everything as [redacted] with no allow rules', () => {
    expect(DIAGNOSTICS_POLICY.allow).toEqual([]);
    expect(clean('ada@example.com 4242424242424242', 'billing', DIAGNOSTICS_POLICY)).toBe('[redacted] [redacted]');
  });
});

describe('short strings found clean are remembered per policy', () => {
  const message = (text: string): Message => ({
    kind: 'message',
    role: 'user',
    messageId: 'm-1',
    parts: [{ kind: 'text', text }],
    metadata: { 'troupe/agent': 'desk', note: 'nothing to see', nested: { kind: 'route', reason: 'handoff' } },
  });

  it('a second message of the same shape is scanned only where it differs, and comes out the same', () => {
    const fresh = withPolicy({});
    const first = sanitiseMessage(message('call ada@example.com'), { policy: fresh, recipientAgentId: 'writer' });
    const second = sanitiseMessage(message('call ada@example.com'), { policy: fresh, recipientAgentId: 'writer' });
    expect(second.value).toEqual(first.value);
    expect(second.counts.email).toBe(1);
    expect(second.steps).toBeLessThan(first.steps / 2);
  });

  it('a string with a match is never remembered as clean', () => {
    const fresh = withPolicy({});
    for (let i = 0; i < 3; i++) {
      const result = sanitise('ada@example.com', { policy: fresh });
      expect(result.value).toBe('[email]');
      expect(result.counts.email).toBe(1);
    }
  });

  it('what one policy found clean, another policy with more detectors still masks', () => {
    const noEmail = withPolicy({ detectors: DETECTORS.filter((d) => d !== 'email') });
    expect(clean('ada@example.com', undefined, noEmail)).toBe('ada@example.com');
    expect(clean('ada@example.com', undefined, noEmail)).toBe('ada@example.com');
    expect(clean('ada@example.com', undefined, withPolicy({}))).toBe('[email]');
  });

  it('an allow rule does not make a string clean for other recipients', () => {
    const p = withPolicy({ allow: [{ agent: 'billing', detectors: ['card'] }] });
    expect(clean('4242424242424242', 'billing', p)).toBe('4242424242424242');
    expect(clean('4242424242424242', 'writer', p)).toBe('[card]');
  });
});

describe('what the sanitiser keeps between calls, and what it does not copy', () => {
  const handoff = (id: string): Message => ({
    kind: 'message',
    role: 'user',
    messageId: `m-${id}`,
    parts: [{ kind: 'text', text: 'hello' }],
    metadata: { 'troupe/agent': 'desk', request: { threadId: `thread-${id}`, reason: 'handoff' }, token: 'abc' },
  });

  it('keys and names in every message stay remembered while new ids go by', () => {
    const fresh = withPolicy({});
    // Ids of one length, so every message takes the same steps when its keys are known.
    const steps = (i: number) => sanitiseMessage(handoff(String(i).padStart(5, '0')), { policy: fresh, recipientAgentId: 'writer' }).steps;
    steps(0);
    const warm = steps(1);
    // Thousands of messages with an id never seen before: a memory that starts over when full would
    // scan every key of the next message again; this one still knows them.
    const slower: number[] = [];
    for (let i = 2; i < 5_000; i++) if (steps(i) !== warm) slower.push(i);
    expect(slower).toEqual([]);
  });

  it('a key that names a secret is masked in every message, however often it is seen', () => {
    const fresh = withPolicy({});
    for (let i = 0; i < 3_000; i++) {
      const { value, counts } = sanitiseMessage(handoff(String(i)), { policy: fresh, recipientAgentId: 'writer' });
      expect((value.metadata as Record<string, unknown>).token).toBe('[secret]');
      expect(counts.secret).toBe(1);
    }
  });

  it('an object or array with nothing masked comes back as it is; one with a mask is a copy, the input unchanged', () => {
    const untouched = { a: { b: ['x', 1, { c: 'y' }] }, d: 'plain text' };
    expect(sanitise(untouched, { policy }).value).toBe(untouched);
    const input = { keep: { same: ['x'] }, list: ['ok', 'ada@example.com'], 'ada@example.com': 1, '[email]': 2 };
    const before = structuredClone(input);
    const out = sanitise(input, { policy }).value as Record<string, unknown>;
    expect(out).not.toBe(input);
    expect(out).toEqual({ keep: { same: ['x'] }, list: ['ok', '[email]'], '[email]': 1, '[email] (2)': 2 });
    expect(out.keep).toBe(input.keep);
    expect(input).toEqual(before);
  });

  it("the message's own task and context ids are not scanned where they appear again; anything else is", () => {
    const id = 'call 4242 4242 4242 4242';
    const message: Message = {
      kind: 'message',
      role: 'user',
      messageId: 'm-1',
      taskId: id,
      contextId: id,
      parts: [{ kind: 'text', text: id }],
      metadata: { request: { threadId: id }, other: `card ${id.slice(5)}` },
    };
    const { value, counts } = sanitiseMessage(message, { policy, recipientAgentId: 'writer' });
    expect(value.taskId).toBe(id);
    expect((value.parts[0] as { text: string }).text).toBe(id);
    expect(value.metadata).toEqual({ request: { threadId: id }, other: 'card [card]' });
    expect(counts.card).toBe(1);
  });

  it('numbers of any length are scanned alike, before and after a very long one', () => {
    const card = '4242 4242 4242 4242';
    expect(clean(`card ${card}`)).toBe('card [card]');
    // More digit groups than a reused scratch buffer holds: it grows, and the next call starts small again.
    expect(clean(Array.from({ length: 3_000 }, () => '12').join(' ')).length).toBeGreaterThan(0);
    expect(clean(`card ${card}, call +44 7700 900123`)).toBe('card [card], call [phone]');
  });
});
