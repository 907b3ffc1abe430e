/**
 * A process that stalls (a long GC pause, a machine too busy to run it): requests it sent are taken by
 * the server, but their answers are read only after their timeouts fired. Used to show that a write which
 * timed out but was stored is recognised as the writer's own.
 */

/**
 * Blocks the process for `ms`, after a few microtask turns. The NATS client sends a request and arms its
 * timeout in microtasks, so what was asked just before has gone out; no I/O is read until the block ends,
 * so no answer can come in before its timeout fires.
 */
export async function stallAfterSending(ms: number): Promise<void> {
  for (let i = 0; i < 100; i++) await Promise.resolve();
  const until = Date.now() + ms;
  while (Date.now() < until);
}

/** `target` with some of its methods replaced; every other method is bound to `target` (its private fields work). */
export function overriding<T extends object>(target: T, overrides: Partial<T>): T {
  return new Proxy(target, {
    get(t, prop) {
      if (Object.hasOwn(overrides, prop)) return overrides[prop as keyof T];
      const value = Reflect.get(t, prop, t) as unknown;
      return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(t) : value;
    },
  });
}
