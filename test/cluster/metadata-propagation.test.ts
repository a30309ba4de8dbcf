// How soon every broker of the cluster knows a change the controller has committed (a new topic here; a partition's
// new leader in a rolling restart is the same record path). A broker serves what its own copy of the metadata log says,
// and applies a record only once it knows the record is committed (the log's high watermark). Kafka 3.9's KRaft tells
// the other nodes a new high watermark in its answer to their next fetch of the log, which waits up to 500 ms for
// new records (KAFKA-14145, fixed in Kafka 4.1): in a brokers' rolling restart, the new leaders answered
// NOT_LEADER_OR_FOLLOWER for up to 0.9 s after the stopping broker had handed its partitions over, and every delivery
// waited. The active controller's no-op records (`metadata.max.idle.interval.ms`, infra/servers/kafka.ts) end that wait
// sooner: with Kafka's 500 ms the last broker knew each topic after a median of 368 ms (the slowest 508 ms), with 100 ms
// after 104 ms (133 ms).
import { randomBytes } from 'node:crypto';
import { Kafka, logLevel } from 'kafkajs';
import { describe, expect, it } from 'vitest';
import { CLUSTER_SIZE, kafkaHost } from '../../infra/servers/cluster.ts';
import { BrokerMetadata } from '../support/broker-metadata.ts';
import { useCluster } from '../support/cluster-file.ts';

const say = (line: string) => console.log(`[metadata-propagation] ${line}`);
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const TOPICS = 8;

describe('the cluster’s brokers after the controller commits a change', () => {
  const cluster = useCluster(say);

  it('all know it within a fraction of a second', async () => {
    const admin = new Kafka({ brokers: cluster().kafkaBrokers, logLevel: logLevel.NOTHING }).admin();
    await admin.connect();
    const brokers = await Promise.all(
      Array.from({ length: CLUSTER_SIZE }, (_, index) => BrokerMetadata.connect(kafkaHost(index + 1), 9092)),
    );
    const prefix = `propagation.${randomBytes(4).toString('hex')}`;
    const topics = Array.from({ length: TOPICS }, (_, index) => `${prefix}.${index}`);
    try {
      // Milliseconds from the controller's answer (the change committed) until the last broker names the topic's leader
      // (the active controller's own broker knows at once).
      const delays: number[] = [];
      for (const [index, topic] of topics.entries()) {
        const leader = (index % CLUSTER_SIZE) + 1;
        const replicas = Array.from(
          { length: CLUSTER_SIZE },
          (_, offset) => ((leader - 1 + offset) % CLUSTER_SIZE) + 1,
        );
        await admin.createTopics({
          topics: [{ topic, replicaAssignment: [{ partition: 0, replicas }] }],
          waitForLeaders: false,
        });
        const committed = Date.now();
        const known = await Promise.all(
          brokers.map(async (broker) => {
            while (Date.now() - committed < 10_000) {
              const answer = await broker.topic(topic);
              if (answer.error === 0 && answer.partitions[0]?.leader === leader) return Date.now() - committed;
              await sleep(2);
            }
            return Infinity;
          }),
        );
        say(`${topic} (leader ${leader}): known by brokers 1-3 after ${known.join(', ')} ms`);
        delays.push(Math.max(...known));
        // Apart from the next change, so that each one waits for a high watermark of its own.
        await sleep(300 + Math.random() * 500);
      }
      const sorted = [...delays].sort((a, b) => a - b);
      const median = sorted[Math.floor(sorted.length / 2)]!;
      say(`the last broker: median ${median} ms, slowest ${sorted.at(-1)} ms of ${sorted.length} changes`);
      expect(sorted.at(-1)).toBeLessThan(10_000);
      expect(median).toBeLessThanOrEqual(200);
    } finally {
      for (const broker of brokers) broker.close();
      await admin.deleteTopics({ topics }).catch(() => undefined);
      await admin.disconnect();
    }
  });
});
