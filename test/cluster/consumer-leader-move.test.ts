// A consumer group's member when the broker leading its partitions is stopped cleanly (a rolling restart's step): the
// broker hands its partitions over before it exits, and fetches to it meanwhile answer NOT_LEADER_OR_FOLLOWER. kafkajs
// took that answer for a reason to join the group again (core/kafkajs-fetch-leader.ts); a rejoin of the group's leader
// rebalances every member, and any rejoin starts a new generation (records in flight handled again).
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { Kafka, logLevel } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createKafka, Publisher } from '../../core/kafka.ts';
import { createLogger } from '../../core/log.ts';
import { repoRoot } from '../../infra/processes.ts';
import { ensureCluster, type StartedServers } from '../../infra/servers.ts';
import { kafkaHost } from '../../infra/servers/cluster.ts';
import { consumeLedTopic, createLedTopic, partitionLeaders } from '../support/led-topic.ts';
import { serverPid, terminateServer } from '../chaos/shared-servers.ts';

const root = path.join(repoRoot, '.local');
const say = (line: string) => console.log(`[consumer-leader-move] ${line}`);
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('a consumer group member when the broker leading its partitions stops cleanly', () => {
  let servers: StartedServers;
  beforeAll(async () => {
    servers = await ensureCluster({ root, progress: say });
  }, 600_000);
  // Broker 3 is started again if the test stopped it, then what this file started is stopped (broker 3's new process
  // too, when this file started the one it replaces).
  afterAll(async () => {
    const relaunched = await ensureCluster({ root, progress: say });
    if (servers?.started.includes('cluster/kafka-3')) await relaunched.stop();
    await servers?.stop();
  }, 600_000);

  it('fetches from the new leaders in the same generation, without joining the group again', async () => {
    const admin = new Kafka({ brokers: servers.kafkaBrokers, logLevel: logLevel.NOTHING }).admin();
    await admin.connect();
    const topic = `leader-move.${randomBytes(4).toString('hex')}`;
    // Both partitions led by broker 3: when it stops, partition 0 goes to broker 1 and partition 1 to broker 2.
    const before = await createLedTopic(admin, topic, [
      [3, 1, 2],
      [3, 2, 1],
    ]);
    const leaders = () => partitionLeaders(admin, topic);
    expect(before).toEqual([3, 3]);

    const logger = createLogger('consumer-leader-move', 'warn');
    // createKafka applies core/kafka.ts' kafkajs fixes, as every service's consumers have them.
    const kafka = createKafka(servers.kafkaBrokers, 'consumer-leader-move', logger);
    const consumer = kafka.consumer({
      groupId: `${topic}.group`,
      maxWaitTimeInMs: 100,
      sessionTimeout: 10_000,
      heartbeatInterval: 1_000,
    });
    let joins = 0;
    consumer.on(consumer.events.GROUP_JOIN, () => {
      joins += 1;
    });
    // When each fetch the member sent to broker 3 was created.
    const fetchesToStopping: number[] = [];
    consumer.on(consumer.events.REQUEST, ({ payload }) => {
      if (payload.apiName === 'Fetch' && payload.broker === `${kafkaHost(3)}:9092`)
        fetchesToStopping.push(payload.createdAt);
    });
    await consumer.connect();
    const received = await consumeLedTopic(consumer, topic);

    const publisher = await Publisher.connect(createKafka(servers.kafkaBrokers, 'consumer-leader-move', logger));
    const sent: string[] = [];
    const ackedAt = new Map<string, number>();
    const sentAt = new Map<string, number>();
    let stop = false;
    const load = (async () => {
      for (let n = 0; !stop; n += 1) {
        const values = [`${n}-a`, `${n}-b`];
        sent.push(...values);
        for (const value of values) sentAt.set(value, Date.now());
        await publisher.publish(values.map((value) => ({ topic, key: value, value: Buffer.from(value) })));
        for (const value of values) ackedAt.set(value, Date.now());
        await sleep(20);
      }
    })();
    const caughtUp = async (ms: number) => {
      const deadline = Date.now() + ms;
      while (sent.some((value) => !received.has(value)) && Date.now() < deadline) await sleep(50);
      return sent.filter((value) => !received.has(value)).length;
    };

    try {
      await sleep(3_000);
      expect(await caughtUp(30_000), 'records not consumed before the stop').toBe(0);
      expect(joins).toBe(1);
      const pid = await serverPid(root, 'kafka', 'cluster/kafka-3');
      if (typeof pid === 'string') throw new Error(pid);
      say(`SIGTERM cluster/kafka-3 (pid ${pid}) after ${sent.length} records sent, ${received.size} consumed`);
      const termAt = Date.now();
      const exited = terminateServer(pid, 120_000);
      // When the controller has handed broker 3's partitions over (it exits some seconds later, having flushed).
      let movedAt: number | undefined;
      while (movedAt === undefined) {
        if ((await leaders().catch(() => [3])).every((leader) => leader !== 3)) movedAt = Date.now();
        else await sleep(50);
      }
      expect(await exited, 'kafka-3 stopped within 120 s').toBe(true);
      const exitedAt = Date.now();
      await sleep(3_000);
      stop = true;
      await load;
      say(`leaders moved ${movedAt - termAt} ms after SIGTERM, kafka-3 exited ${exitedAt - termAt} ms after it`);
      expect(await caughtUp(30_000), 'records not consumed 30 s after the producing stopped').toBe(0);
      // kafkajs fetched with a version that lets a follower answer a consumer, so it kept asking the stopping broker,
      // now a follower, until it exited; the member's first fetch after the move should tell it to ask the new leaders.
      const fetchesAfterMove = fetchesToStopping.filter((createdAt) => createdAt > movedAt);
      const lastFetch = Math.max(movedAt, ...fetchesAfterMove);
      const after = sent.filter((value) => sentAt.get(value)! >= termAt);
      const longest = (of: (value: string) => number) => Math.max(...after.map(of));
      say(
        `since the SIGTERM: longest send → ack ${longest((v) => ackedAt.get(v)! - sentAt.get(v)!)} ms, ack → consume ${longest((v) => received.get(v)! - ackedAt.get(v)!)} ms; ${fetchesAfterMove.length} fetches sent to kafka-3 after the move, the last ${lastFetch - movedAt} ms after it`,
      );
      // Measured against the broker's own remaining life (seconds: it flushes and closes), not a fixed bound.
      expect(lastFetch - movedAt, 'the last fetch to the stopping broker, ms after the move').toBeLessThan(
        (exitedAt - movedAt) / 2,
      );
      expect(joins, 'joins of the group (kafkajs rejoined on NOT_LEADER_OR_FOLLOWER)').toBe(1);
    } finally {
      stop = true;
      await load.catch(() => undefined);
      await consumer.disconnect();
      await publisher.close();
      await admin.deleteTopics({ topics: [topic] }).catch(() => undefined);
      await admin.disconnect();
    }
  });
});
