import { compatibilityPartitioner, defaultPartitioner } from '@platformatic/kafka';
import { describe, expect, it } from 'vitest';
import { javaPartitioner, murmur2, partitionOf } from './partitioner.ts';

describe('murmur2 and the partitioner, as Java computes them', () => {
  it("gives Java's hashes for the vectors of Kafka's own UtilsTest", () => {
    const cases: [string, number][] = [
      ['21', -973932308],
      ['foobar', -790332482],
      ['a-little-bit-long-string', -985981536],
      ['a-little-bit-longer-string', -1486304829],
      ['lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8', -58897971],
      ['abc', 479470107],
    ];
    for (const [key, hash] of cases) expect(murmur2(Buffer.from(key)), key).toBe(hash);
  });

  it("agrees with @platformatic/kafka's murmur2 on random keys of every length up to 100 bytes, and on UTF-8", () => {
    let seed = 7;
    const random = () => (seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) / 2 ** 32;
    for (let length = 0; length <= 100; length += 1) {
      for (let round = 0; round < 20; round += 1) {
        const bytes = Buffer.from(Array.from({ length }, () => Math.floor(random() * 256)));
        // Its two partitioners: the hash as unsigned, and made positive (Java's).
        expect(murmur2(bytes) >>> 0, bytes.toString('hex')).toBe(defaultPartitioner({ topic: '' }, bytes));
        expect(javaPartitioner(undefined, bytes)).toBe(compatibilityPartitioner({ topic: '' }, bytes));
      }
    }
    for (const key of ['tenant-é', '注文-42', '😀 key', crypto.randomUUID()]) {
      expect(javaPartitioner(undefined, Buffer.from(key))).toBe(
        compatibilityPartitioner({ topic: '' }, Buffer.from(key)),
      );
    }
  });

  it('puts a key in the same partition whether encoded in the reused buffer or apart (long keys)', () => {
    for (const key of [
      'a',
      crypto.randomUUID(),
      'x'.repeat(256),
      'x'.repeat(257),
      'é'.repeat(300),
      '注'.repeat(1000),
    ]) {
      const expected = compatibilityPartitioner({ topic: '' }, Buffer.from(key, 'utf8')) % 12;
      expect(partitionOf(key, 12), key.slice(0, 10)).toBe(expected);
    }
  });

  it('sends a record without a key to partition 0', () => {
    expect(javaPartitioner(undefined, undefined)).toBe(0);
  });
});
