// The Kafka publisher merges concurrent callers into one request: on a real broker, the merged request must stay
// within the broker's limits whatever the callers send.
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../core/config.ts';
import { applyTopics, createKafka, Publisher, type Kafka } from '../../core/kafka.ts';
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
