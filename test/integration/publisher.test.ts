// The Kafka publisher merges concurrent callers into one request: on a real broker, the merged request must stay
// within the broker's limits whatever the callers send.
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../core/config.ts';
import {
  applyTopics,
  createKafka,
  partitionOf,
  Publisher,
  tailTopic,
  type ConsumedRecord,
  type Kafka,
} from '../../core/kafka.ts';
import { createLogger } from '../../core/log.ts';
import { testEnv } from '../support/harness.ts';

describe('Publisher', () => {
  let kafka: Kafka;
  let publisher: Publisher;
  const topic = `${testEnv().KAFKA_TOPIC_PREFIX}publisher-${randomUUID().slice(0, 8)}`;

  beforeAll(async () => {
    kafka = createKafka(loadConfig(testEnv()).kafka.brokers, 'publisher-test', createLogger('test', 'warn'));
    // The broker's default record-batch limit (message.max.bytes, 1 MiB): nothing raised for this topic.
    await applyTopics(kafka, [{ name: topic, partitions: 1 }]);
    publisher = await Publisher.connect(kafka);
  });

  afterAll(async () => {
    await publisher?.close();
    const admin = kafka.admin();
    await admin.connect();
    await admin.deleteTopics({ topics: [topic] }).catch(() => undefined);
    await admin.disconnect();
  });

  it('oversized merged produce: 20 concurrent callers of 200 KB records (4 MB in all) are all acknowledged', async () => {
    const value = Buffer.alloc(200 * 1024, 'x');
    const results = await Promise.allSettled(
      Array.from({ length: 20 }, (_, index) =>
        publisher.publish([
          { topic, key: 'one-subscription', value: Buffer.concat([Buffer.from(`${index}:`), value]) },
        ]),
      ),
    );
    expect(results.filter((result) => result.status === 'rejected')).toEqual([]);
  });

  it('one caller with more bytes than one request may carry is split across requests, and resolves once', async () => {
    const records = Array.from({ length: 12 }, (_, index) => ({
      topic,
      key: `sub-${index % 3}`,
      value: Buffer.alloc(300 * 1024, String(index % 10)),
    }));
    await expect(publisher.publish(records)).resolves.toBeUndefined();
  });
});

describe('Publisher, records as consumers read them', () => {
  it("puts each key in the partition Java's default partitioner gives it, with its headers and a null value kept", async () => {
    const kafka = createKafka(loadConfig(testEnv()).kafka.brokers, 'publisher-test', createLogger('test', 'warn'));
    const topic = `${testEnv().KAFKA_TOPIC_PREFIX}publisher-keys-${randomUUID().slice(0, 8)}`;
    await applyTopics(kafka, [{ name: topic, partitions: 12 }]);
    const publisher = await Publisher.connect(kafka);
    const keys = Array.from({ length: 300 }, () => randomUUID());
    const seen = new Map<string, ConsumedRecord>();
    let allSeen!: () => void;
    const all = new Promise<void>((resolve) => (allSeen = resolve));
    const tail = await tailTopic(kafka, topic, `publisher-test-${randomUUID()}`, async (record) => {
      seen.set(record.key!.toString('utf8'), record);
      if (seen.size === keys.length) allSeen();
    });
    try {
      await publisher.publish(
        keys.map((key, index) => ({
          topic,
          key,
          value: index % 10 === 0 ? null : Buffer.from(`value ${index}`),
          headers: { 'x-index': String(index), 'x-note': 'ünïcode' },
        })),
      );
      await all;
    } finally {
      await tail.stop();
      await publisher.close();
    }
    keys.forEach((key, index) => {
      const record = seen.get(key)!;
      expect(record.partition, key).toBe(partitionOf(key, 12));
      expect(record.headers).toEqual({ 'x-index': String(index), 'x-note': 'ünïcode' });
      expect(record.value).toEqual(index % 10 === 0 ? null : Buffer.from(`value ${index}`));
    });
    // The keys spread: a partitioner that ignored the key would put them all in one partition.
    expect(new Set(keys.map((key) => seen.get(key)!.partition)).size).toBe(12);
  });
});
