// The publisher (core/kafka.ts) when a broker leading several partitions dies: every record it was given is
// acknowledged once the partitions have new leaders, even when those leaders are different brokers. Seen in a CI
// simulation of a2a5f0b: the router's publisher retried one request for three minutes after the broker leading two
// delivery partitions was killed, and no delivery went out. @platformatic/kafka groups a send's records by the leader
// they had when it was sent and, on a retry, sends the whole group to the new leader of its first record's partition;
// that broker refuses the others (NOT_LEADER_OR_FOLLOWER) as long as they have another leader.
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { Kafka, logLevel } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createKafka, partitionOf, Publisher } from '../../core/kafka.ts';
import { createLogger } from '../../core/log.ts';
import { repoRoot } from '../../infra/processes.ts';
import { ensureCluster, type StartedServers } from '../../infra/servers.ts';
import { killServer, restore, serverPid } from '../chaos/shared-servers.ts';
import { createLedTopic, partitionLeaders } from '../support/led-topic.ts';

const root = path.join(repoRoot, '.local');
const say = (line: string) => console.log(`[publisher-failover] ${line}`);
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('the publisher when the broker leading several partitions dies', () => {
  let servers: StartedServers;
  beforeAll(async () => {
    servers = await ensureCluster({ root, progress: say });
  }, 600_000);
  // Broker 2 is started again (about a minute here), then what this file started is stopped.
  afterAll(async () => {
    await restore('cluster/kafka-2');
    await servers?.stop();
  }, 600_000);

  it('acknowledges every record once the partitions have new leaders, also when they are different brokers', async () => {
    const admin = new Kafka({ brokers: servers.kafkaBrokers, logLevel: logLevel.NOTHING }).admin();
    await admin.connect();
    const topic = `publisher-failover.${randomBytes(4).toString('hex')}`;
    // Both partitions led by broker 2; when it dies, partition 0 goes to broker 1 and partition 1 to broker 3 (the
    // first replica in sync of each list).
    const before = await createLedTopic(admin, topic, [
      [2, 1, 3],
      [2, 3, 1],
    ]);
    const leaders = () => partitionLeaders(admin, topic);
    expect(before).toEqual([2, 2]);

    const keys = [0, 1].map((partition) => {
      for (let i = 0; ; i += 1) if (partitionOf(`key-${i}`, 2) === partition) return `key-${i}`;
    });
    const logger = createLogger('publisher-failover', 'warn');
    const publisher = await Publisher.connect(createKafka(servers.kafkaBrokers, 'publisher-failover', logger));
    const sent: string[] = [];
    const outcomes: Promise<'acked' | Error>[] = [];
    let acked = 0;
    let stop = false;
    const load = (async () => {
      for (let n = 0; !stop; n += 1) {
        const values = keys.map((key) => `${n}-${key}`);
        sent.push(...values);
        const outcome = publisher
          .publish(values.map((value, index) => ({ topic, key: keys[index]!, value: Buffer.from(value) })))
          .then(
            () => {
              acked += values.length;
              return 'acked' as const;
            },
            (error: unknown) => error as Error,
          );
        outcomes.push(outcome);
        await sleep(20);
      }
    })();

    await sleep(2_000);
    const pid = await serverPid(root, 'kafka', 'cluster/kafka-2');
    if (typeof pid === 'string') throw new Error(pid);
    say(`kill -9 cluster/kafka-2 (pid ${pid}) after ${sent.length} records sent, ${acked} acknowledged`);
    await killServer(root, 'cluster/kafka-2', pid, say, (progress) => ensureCluster({ root, progress }));
    await sleep(3_000);
    stop = true;
    await load;
    // Broker 2 stays down: the new leaders must take every record. New leaders are elected once the controller
    // fences the dead broker (broker.session.timeout.ms, 9 s); the bound leaves that three times over.
    const settled = await Promise.race([
      Promise.all(outcomes).then((all) => ({ all })),
      sleep(60_000).then(() => undefined),
    ]);
    const newLeaders = await leaders();
    say(`leaders now ${newLeaders.join(', ')}; ${acked} of ${sent.length} records acknowledged`);
    expect(new Set(newLeaders).size, 'the two partitions have different leaders now').toBe(2);
    expect(newLeaders).not.toContain(2);
    expect(
      settled,
      `${sent.length - acked} records still unacknowledged 60 s after the producing stopped`,
    ).toBeDefined();
    expect(settled!.all.filter((outcome) => outcome !== 'acked')).toEqual([]);
    await publisher.close();

    // Every record is in the topic.
    const consumer = new Kafka({ brokers: servers.kafkaBrokers, logLevel: logLevel.NOTHING }).consumer({
      groupId: `${topic}.check`,
    });
    await consumer.connect();
    await consumer.subscribe({ topic, fromBeginning: true });
    const read = new Map<string, number>();
    await consumer.run({
      eachMessage: async ({ message }) => {
        const value = message.value!.toString();
        read.set(value, (read.get(value) ?? 0) + 1);
      },
    });
    const deadline = Date.now() + 60_000;
    while (sent.some((value) => !read.has(value)) && Date.now() < deadline) await sleep(200);
    await consumer.disconnect();
    const missing = sent.filter((value) => !read.has(value));
    const duplicates = [...read.values()].filter((count) => count > 1).length;
    say(`${read.size} distinct records read of ${sent.length} sent; ${duplicates} duplicated`);
    expect(missing).toEqual([]);
    await admin.deleteTopics({ topics: [topic] }).catch(() => undefined);
    await admin.disconnect();
  });
});
