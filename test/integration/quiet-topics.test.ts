// The dispatcher's retry tiers are empty most of the time: ConsumerRunner leaves their partitions out of its fetches
// while they are (ConsumerOptions.quiet). On a real broker: they are paused once read to their end, a record reaching
// one is still read (the partition resumed), and the busy topic is read throughout.
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../core/config.ts';
import { applyTopics, ConsumerRunner, createKafka, Publisher, type Kafka } from '../../core/kafka.ts';
import { createLogger } from '../../core/log.ts';
import { testEnv } from '../support/harness.ts';

describe('ConsumerRunner quiet topics on a real broker', () => {
  const prefix = `${testEnv().KAFKA_TOPIC_PREFIX}quiet-${randomUUID().slice(0, 8)}.`;
  const busy = `${prefix}deliveries`;
  const tiers = [`${prefix}retry-1s`, `${prefix}retry-2s`];
  const logger = createLogger('test', 'warn');
  let kafka: Kafka;
  let publisher: Publisher;
  let runner: ConsumerRunner;
  const handled: string[] = [];

  beforeAll(async () => {
    kafka = createKafka(loadConfig(testEnv()).kafka.brokers, 'quiet-test', logger);
    await applyTopics(
      kafka,
      [busy, ...tiers].map((name) => ({ name, partitions: 3 })),
    );
    publisher = await Publisher.connect(kafka);
    runner = new ConsumerRunner(kafka, {
      groupId: `${prefix}group`,
      topics: [busy, ...tiers],
      maxInFlight: 10,
      fromBeginning: true,
      quiet: { topics: tiers, checkEveryMs: 100 },
      logger,
      handle: async (record) => void handled.push(`${record.topic.slice(prefix.length)}:${record.value!.toString()}`),
    });
    await runner.start();
  });

  afterAll(async () => {
    await runner?.stop();
    await publisher?.close();
    const admin = kafka.admin();
    await admin.connect();
    await admin.deleteTopics({ topics: [busy, ...tiers] }).catch(() => undefined);
    await admin.disconnect();
  });

  it('pauses the empty tiers, reads a record that reaches one, and pauses it again once that is committed', async () => {
    // Joined, and each of the tiers' six empty partitions left out of the fetches.
    await expect.poll(() => runner.quietPartitions, { timeout: 30_000 }).toBe(6);

    await publisher.publish([{ topic: busy, key: 'a', value: Buffer.from('first') }]);
    await expect.poll(() => handled, { timeout: 10_000 }).toContain('deliveries:first');

    // A retry scheduled onto a paused tier partition: read within a check or two, never lost.
    await publisher.publish([{ topic: tiers[1]!, key: 'b', value: Buffer.from('retried') }]);
    await expect.poll(() => handled, { timeout: 10_000 }).toContain('retry-2s:retried');
    // Committed (every 200 ms), then found empty again.
    await expect.poll(() => runner.quietPartitions, { timeout: 10_000 }).toBe(6);

    // The busy topic was never paused: a record published now is read as before.
    await publisher.publish([{ topic: busy, key: 'c', value: Buffer.from('second') }]);
    await expect.poll(() => handled, { timeout: 10_000 }).toContain('deliveries:second');
    expect(handled.filter((entry) => entry === 'retry-2s:retried')).toHaveLength(1);
  });
});
