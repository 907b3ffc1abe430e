/**
 * Linear time on hostile input (issue 7: the old redaction pattern blocked a node for 141 s on 100 KB).
 * Each shape is 1 MB of something that makes a backtracking matcher or a careless scanner go quadratic:
 * long word and digit runs, a million `@`, separators that almost make numbers, unterminated quotes and
 * keys, 100 KB words. For each, the test asserts the exact output (every unit masked or the text left
 * alone) and bounds the work by counting scanner steps, never by a clock: at most STEPS_PER_CHAR steps per
 * character, and a quarter of the input costs a quarter of the steps (give or take 10%), which a
 * quadratic scanner cannot do.
 */
import { describe, expect, it } from 'vitest';
import { DEFAULT_SANITISER_POLICY, sanitise, type DetectorId } from '../src/sanitiser/sanitiser.js';
import { redact } from '../src/observability/redact.js';

const MB = 1_000_000;
const STEPS_PER_CHAR = 64;

/** `unit` repeated to about `size` characters (a whole number of units). */
const repeat = (unit: string, size: number) => unit.repeat(Math.max(1, Math.floor(size / unit.length)));

interface Shape {
  name: string;
  unit: string;
  /** What one unit becomes; the unit itself when nothing may be masked. */
  masked?: string;
  /** The detector that masks each unit, counted once per unit. */
  detector?: DetectorId;
  /** The whole input is one match (an unterminated private key). */
  whole?: string;
}

const SHAPES: Shape[] = [
  { name: 'one long word', unit: 'a' },
  { name: 'one long digit run', unit: '1' },
  { name: 'a million @', unit: '@' },
  { name: 'a@a@a@…', unit: 'a@' },
  { name: 'dots between letters', unit: 'a.' },
  { name: 'digits and spaces', unit: '1 ' },
  { name: 'digits and dashes', unit: '4-' },
  { name: 'digits and dots', unit: '1.' },
  { name: 'digits and no-break spaces', unit: '1\u00a0' },
  { name: 'alternating separators', unit: '1-2 3.4(5) ' },
  { name: 'plus signs and digits', unit: '+1 ' },
  { name: 'parenthesised digits', unit: '(1) ' },
  { name: 'country codes that never make an IBAN', unit: 'DE89 ' },
  { name: 'a key prefix with a 1 MB body', unit: 'sk-', whole: undefined },
  { name: 'bearer without tokens', unit: 'Bearer ' },
  { name: 'schemes without hosts', unit: '://' },
  { name: 'userinfo without @', unit: 'a://b:c' },
  { name: 'a phone keyword before every digit', unit: 'call 1 ' },
  { name: 'one 1 MB base64 run', unit: 'aB3+' },
  { name: 'one 1 MB hex run', unit: 'f00d' },
  { name: '100 KB words', unit: 'x'.repeat(100_000) + ' ' },
  { name: 'a long local part before every @', unit: 'a'.repeat(70) + '@b.cc ' },
  { name: 'secret names with filler words and no colon', unit: 'password is now ' },
  { name: 'e-mail addresses', unit: 'ada.lovelace+x@ex-ample.com ', masked: '[email] ', detector: 'email' },
  { name: 'short e-mail addresses', unit: 'x@y.zz ', masked: '[email] ', detector: 'email' },
  { name: 'card numbers in one long digit-group sequence', unit: '4242 4242 4242 4242 ', masked: '[card] ', detector: 'card' },
  { name: 'phone numbers', unit: '+44 20 7946 0958 ', masked: '[phone] ', detector: 'phone' },
  { name: 'IBANs', unit: 'DE89 3704 0044 0532 0130 00 ', masked: '[iban] ', detector: 'iban' },
  { name: 'API keys', unit: 'sk-proj-Ab12Cd34Ef56Gh78Ij90Kl12Mn34 ', masked: '[api-key] ', detector: 'apiKey' },
  { name: 'JWTs', unit: 'eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl ', masked: '[jwt] ', detector: 'jwt' },
  { name: 'password: value pairs', unit: 'password: hunter2 ', masked: 'password: [secret] ', detector: 'secret' },
  { name: 'quoted values longer than the quote limit', unit: `token: "${'x'.repeat(2000)}" `, masked: 'token: "[secret]" ', detector: 'secret' },
  { name: 'an unterminated private key', unit: '-----BEGIN RSA PRIVATE KEY-----', whole: '[private-key]' },
];

function run(text: string) {
  return sanitise(text, { policy: DEFAULT_SANITISER_POLICY });
}

describe('sanitiser work is linear in the input', () => {
  it.each(SHAPES.map((s) => [s.name, s] as const))('%s (1 MB)', (_name, shape) => {
    const text = shape.unit === 'sk-' ? 'sk-' + 'A'.repeat(MB - 3) : repeat(shape.unit, MB);
    const units = text.length / shape.unit.length;
    const result = run(text);

    if (shape.whole) expect(result.value).toBe(shape.whole);
    else if (shape.masked) {
      expect(result.value).toBe(shape.masked.repeat(units));
      expect(result.counts[shape.detector!]).toBe(units);
    } else {
      expect(result.value).toBe(text);
      expect(Object.values(result.counts).every((n) => n === 0)).toBe(true);
    }

    expect(result.steps).toBeLessThanOrEqual(STEPS_PER_CHAR * text.length);
    // A quarter of the input, a quarter of the work: quadratic growth would make it a sixteenth.
    const quarter = shape.unit === 'sk-' ? 'sk-' + 'A'.repeat(MB / 4 - 3) : repeat(shape.unit, MB / 4);
    const ratio = result.steps / run(quarter).steps;
    expect(ratio * (quarter.length / text.length)).toBeGreaterThan(0.9);
    expect(ratio * (quarter.length / text.length)).toBeLessThan(1.1);
  });

  it('walks a 1 MB JSON value of many small strings in linear work', () => {
    const value = (n: number) => ({ history: Array.from({ length: n }, (_, i) => ({ text: `message ${i} from ada@example.com`, n: i })) });
    const big = sanitise(value(30_000), { policy: DEFAULT_SANITISER_POLICY });
    const small = sanitise(value(7_500), { policy: DEFAULT_SANITISER_POLICY });
    expect(big.counts.email).toBe(30_000);
    expect((big.value as { history: Array<{ text: string }> }).history[29_999]!.text).toBe('message 29999 from [email]');
    expect(big.steps / small.steps).toBeGreaterThan(3.6);
    expect(big.steps / small.steps).toBeLessThan(4.4);
  });

  it('keeps 40,000 keys that all mask to [email] distinct, in linear work', () => {
    const keyed = (n: number) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`user${i}@example.com`, i]));
    const big = sanitise(keyed(40_000), { policy: DEFAULT_SANITISER_POLICY });
    const small = sanitise(keyed(10_000), { policy: DEFAULT_SANITISER_POLICY });
    const out = big.value as Record<string, number>;
    expect(Object.keys(out)).toHaveLength(40_000);
    expect(out['[email] (40000)']).toBe(39_999);
    expect(big.steps / small.steps).toBeGreaterThan(3.6);
    expect(big.steps / small.steps).toBeLessThan(4.4);
  });
});

describe('redact on what broke the node in issue 7', () => {
  it('shows a thread holding 1 MB of word runs, unchanged', () => {
    const record = { task: { history: [{ kind: 'message', parts: [{ kind: 'text', text: 'a'.repeat(MB) }] }] } };
    expect(redact(record)).toEqual(record);
  });
});
