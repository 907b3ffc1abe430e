/** FNV-1a: the hash nats-server's `partition()` subject mapping puts a thread in a partition with. */
const enc = new TextEncoder();

/** FNV-1a 32-bit of a string's UTF-8 bytes (the hash nats-server's `partition()` mapping uses). */
export function fnv1a32(s: string): number {
  let h = 0x811c9dc5;
  for (const b of enc.encode(s)) {
    h ^= b;
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h >>> 0;
}
