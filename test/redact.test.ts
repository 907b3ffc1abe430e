import { describe, expect, it } from 'vitest';
import { redact } from '../src/observability/redact.js';

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
