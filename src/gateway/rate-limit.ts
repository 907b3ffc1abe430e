/**
 * Rate limiting per token: a token bucket for each caller (the token's digest, or the client address on
 * an open gateway). A bucket holds up to `burst` requests and refills at `perSecond`; a request that finds
 * it empty is refused with 429 and `Retry-After` (whole seconds until one request's worth is back).
 * Buckets are refilled lazily from the clock on each request, and the number kept is bounded: the least
 * recently used go first (a forgotten bucket starts full, which only ever errs towards letting one in).
 */
export interface RateLimitOptions {
  /** Sustained requests per second per token. */
  perSecond: number;
  /** Requests a token may make at once after being idle. */
  burst: number;
  /** Buckets kept. Default 100,000. */
  maxBuckets?: number;
}

interface Bucket {
  tokens: number;
  at: number;
}

export class TokenBuckets {
  private readonly buckets = new Map<string, Bucket>();
  private readonly maxBuckets: number;

  constructor(
    private readonly opts: RateLimitOptions,
    private readonly now: () => number = Date.now,
  ) {
    if (!(opts.perSecond > 0) || !(opts.burst >= 1)) throw new Error('rate limit: perSecond must be > 0 and burst >= 1');
    this.maxBuckets = opts.maxBuckets ?? 100_000;
  }

  /** Takes one request from `key`'s bucket: 0 when allowed, else the seconds to wait (at least 1). */
  take(key: string): number {
    const now = this.now();
    const bucket = this.buckets.get(key) ?? { tokens: this.opts.burst, at: now };
    bucket.tokens = Math.min(this.opts.burst, bucket.tokens + ((now - bucket.at) / 1000) * this.opts.perSecond);
    bucket.at = now;
    this.buckets.delete(key);
    this.buckets.set(key, bucket);
    if (this.buckets.size > this.maxBuckets) this.buckets.delete(this.buckets.keys().next().value as string);
    if (bucket.tokens >= 1) {
      bucket.tokens -= 1;
      return 0;
    }
    return Math.max(1, Math.ceil((1 - bucket.tokens) / this.opts.perSecond));
  }
}
