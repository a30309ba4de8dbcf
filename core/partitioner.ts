/**
 * Kafka's default partitioner, as Java's client (and kafkajs) computes it: murmur2 of the key's bytes, made positive,
 * modulo the partition count. In 32-bit integer arithmetic: @platformatic/kafka's own murmur2 computes it on BigInts
 * that grow with every 4 bytes of the key, and allocated more per routed event than anything else in the router
 * (test/bench/partitioner.ts measures both).
 */

const SEED = 0x9747b28c;
const M = 0x5bd1e995;

/** Java's `Utils.murmur2(byte[])`: a signed 32-bit hash. */
export function murmur2(data: Uint8Array, length = data.length): number {
  let h = SEED ^ length;
  const whole = length & ~3;
  for (let i = 0; i < whole; i += 4) {
    let k = data[i]! | (data[i + 1]! << 8) | (data[i + 2]! << 16) | (data[i + 3]! << 24);
    k = Math.imul(k, M);
    k ^= k >>> 24;
    k = Math.imul(k, M);
    h = Math.imul(h, M) ^ k;
  }
  switch (length & 3) {
    case 3:
      h ^= data[whole + 2]! << 16;
    // falls through
    case 2:
      h ^= data[whole + 1]! << 8;
    // falls through
    case 1:
      h ^= data[whole]!;
      h = Math.imul(h, M);
  }
  h ^= h >>> 13;
  h = Math.imul(h, M);
  h ^= h >>> 15;
  return h | 0;
}

/** The partitioner handed to the producer: the key's positive murmur2 (the producer takes it modulo the count). */
export function javaPartitioner(_: unknown, key?: Buffer): number {
  return key === undefined ? 0 : murmur2(key) & 0x7fffffff;
}

/** Keys of up to this many UTF-16 units are encoded into one reused buffer (3 bytes of UTF-8 each at most). */
const scratch = Buffer.allocUnsafe(768);

/** The partition of `partitions` that a record keyed `key` (its UTF-8 bytes) goes to. */
export function partitionOf(key: string, partitions: number): number {
  const bytes = key.length * 3 <= scratch.length ? scratch : Buffer.from(key, 'utf8');
  const length = bytes === scratch ? scratch.write(key, 0, 'utf8') : bytes.length;
  return (murmur2(bytes, length) & 0x7fffffff) % partitions;
}
