import { describe, expect, it } from 'vitest';
import { redact } from '../src/observability/redact.js';
import { DIAGNOSTICS_POLICY, sanitise } from '../src/sanitiser/sanitiser.js';

describe('redact (what inspect and thread show)', () => {
  it('masks secret-looking keys and values, keeps the rest', () => {
    const out = redact({
      password: 'hunter2',
      apiKey: 'abc',
      nested: { authorization: 'Bearer x', note: 'mail me at ada@example.com, card 4111111111111111, key sk-ABCDEFGHIJKLMNOP' },
      history: [{ text: 'plain words stay' }],
      count: 3,
    });
    expect(out).toEqual({
      password: '[redacted]',
      apiKey: '[redacted]',
      nested: { authorization: '[redacted]', note: 'mail me at [redacted], card [redacted], key [redacted]' },
      history: [{ text: 'plain words stay' }],
      count: 3,
    });
  });
});

describe('redact on the sanitiser (diagnostics policy)', () => {
  it('masks what the old pattern let through: IBANs, phones, JWTs, bearer tokens, private keys, secrets in text', () => {
    const note = [
      'iban DE89 3704 0044 0532 0130 00',
      'call +44 20 7946 0958',
      'jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U',
      'Authorization: Bearer abcDEF123456ghiJKL789',
      'aws AKIAIOSFODNN7EXAMPLE',
      'password: hunter2',
      '-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----',
    ].join('\n');
    expect(redact({ note })).toEqual({
      note: ['iban [redacted]', 'call [redacted]', 'jwt [redacted]', 'Authorization: [redacted]', 'aws [redacted]', 'password: [redacted]', '[redacted]'].join(
        '\n',
      ),
    });
  });

  it('no longer masks what is not secret: long numbers failing Luhn, timestamps, keys that only contain "pass" or "token"', () => {
    const value = {
      passengers: 3,
      maxTokens: 256,
      usage: { input_tokens: 812 },
      note: 'order 4242424242424241 at 1700000000000',
      at: 1700000000000,
    };
    expect(redact(value)).toEqual(value);
  });

  it('shows a 100 KB word run (141 s with the old pattern, issue 7) unchanged, in work linear in its length', () => {
    const text = 'a'.repeat(100_000);
    expect(redact({ text })).toEqual({ text });
    const small = sanitise('a'.repeat(25_000), { policy: DIAGNOSTICS_POLICY }).steps;
    const large = sanitise(text, { policy: DIAGNOSTICS_POLICY }).steps;
    expect(large / small).toBeCloseTo(4, 1);
  });
});
