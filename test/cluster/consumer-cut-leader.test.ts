// A consumer group's member when the broker leading its partitions is cut off from the other brokers while its process
// runs (issue 30's network partition). The controller fences the cut broker and moves its partitions; the cut broker,
// which hears nothing of that, still believes it leads them and answers the member's fetches without error and without
// the records the new leaders take. kafkajs asked it again and again for as long as the cut lasted, and refreshed its
// metadata (from any one broker, the cut one included) only every five minutes (core/kafkajs-leader-epochs.ts).
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { Kafka, logLevel, type Admin } from 'kafkajs';
import { describe, expect, it } from 'vitest';
import { createKafka, Publisher } from '../../core/kafka.ts';
import { createLogger } from '../../core/log.ts';
import { kafkaHost } from '../../infra/servers/cluster.ts';
import { clusterRoot as root, useCluster } from '../support/cluster-file.ts';
import { consumeLedTopic, createLedTopic } from '../support/led-topic.ts';
import { serverPid } from '../chaos/shared-servers.ts';
import { cannotCut, cutOff, type CutNode } from '../chaos/network-cut.ts';

const say = (line: string) => console.log(`[consumer-cut-leader] ${line}`);
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const CUT_MS = 30_000;

/** The partition of __consumer_offsets that holds `groupId`'s offsets, as Kafka's group coordinator picks it. */
function offsetsPartition(groupId: string, partitions: number): number {
  let hash = 0;
  for (let i = 0; i < groupId.length; i += 1) hash = (Math.imul(hash, 31) + groupId.charCodeAt(i)) | 0;
  return (hash & 0x7fffffff) % partitions;
}

/** The broker coordinating `groupId`: the leader of its offsets partition. */
async function coordinatorOf(admin: Admin, groupId: string): Promise<number> {
  // A coordinator lookup makes the broker create the offsets topic, if no group has yet.
  await admin.describeGroups([groupId]);
  const [offsets] = (await admin.fetchTopicMetadata({ topics: ['__consumer_offsets'] })).topics;
  const partition = offsetsPartition(groupId, offsets!.partitions.length);
  return offsets!.partitions.find((p) => p.partitionId === partition)!.leader;
}

describe('a consumer group member when the broker leading its partitions is cut off from the other brokers', () => {
  const cluster = useCluster(say);

  it('fetches from the new leaders while the cut lasts', async () => {
    const servers = cluster();
    const cannot = cannotCut(path.join(root, 'run'));
    if (cannot) throw new Error(cannot);
    const admin = new Kafka({ brokers: servers.kafkaBrokers, logLevel: logLevel.NOTHING }).admin();
    await admin.connect();
    const topic = `cut-leader.${randomBytes(4).toString('hex')}`;
    // The group's coordinator stays on the healthy side: this test is about the partitions' leader.
    const groupId = `${topic}.group`;
    const coordinator = await coordinatorOf(admin, groupId);
    const cut = [3, 2, 1].find((broker) => broker !== coordinator)!;
    const others = [1, 2, 3].filter((broker) => broker !== cut) as [number, number];
    const before = await createLedTopic(admin, topic, [
      [cut, others[0], others[1]],
      [cut, others[1], others[0]],
    ]);
    expect(before).toEqual([cut, cut]);

    const logger = createLogger('consumer-cut-leader', 'warn');
    const kafka = createKafka(servers.kafkaBrokers, 'consumer-cut-leader', logger);
    const consumer = kafka.consumer({
      groupId,
      maxWaitTimeInMs: 100,
      sessionTimeout: 10_000,
      heartbeatInterval: 1_000,
    });
    await consumer.connect();
    const received = await consumeLedTopic(consumer, topic);

    const publisher = await Publisher.connect(createKafka(servers.kafkaBrokers, 'consumer-cut-leader', logger));
    const sent: string[] = [];
    const ackedAt = new Map<string, number>();
    let stop = false;
    const load = (async () => {
      for (let n = 0; !stop; n += 1) {
        const values = [`${n}-a`, `${n}-b`];
        sent.push(...values);
        // A send to the cut broker fails after its request timeout, and the publisher tries the new leader.
        await publisher
          .publish(values.map((value) => ({ topic, key: value, value: Buffer.from(value) })))
          .then(() => values.forEach((value) => ackedAt.set(value, Date.now())))
          .catch(() => undefined);
        await sleep(50);
      }
    })();
    const notConsumed = (acked: (at: number) => boolean) =>
      [...ackedAt].filter(([value, at]) => acked(at) && !received.has(value)).map(([value]) => value);

    const node = async (index: number): Promise<CutNode> => {
      const pid = await serverPid(root, 'kafka', `cluster/kafka-${index}`);
      if (typeof pid === 'string') throw new Error(pid);
      return { id: `cluster/kafka-${index}`, pid, host: kafkaHost(index) };
    };
    let heal: (() => void) | undefined;
    try {
      await sleep(3_000);
      const deadline = Date.now() + 30_000;
      while (notConsumed(() => true).length > 0 && Date.now() < deadline) await sleep(50);
      expect(
        notConsumed(() => true),
        'records not consumed before the cut',
      ).toEqual([]);
      const cutAt = Date.now();
      heal = cutOff(path.join(root, 'run'), await node(cut), [await node(others[0]), await node(others[1])], 'test');
      say(
        `cut cluster/kafka-${cut} off from the other brokers after ${sent.length} records sent (the group's coordinator: kafka-${coordinator})`,
      );
      await sleep(CUT_MS);
      const healAt = Date.now();
      // Records the new leaders acknowledged while the cut lasted, in time for a member that looks for them.
      const lateEnough = (at: number) => at > cutAt && at < healAt - 8_000;
      const acknowledged = [...ackedAt.values()].filter(lateEnough).length;
      const missed = notConsumed(lateEnough);
      const duringCut = [...ackedAt].filter(([, at]) => at > cutAt && at < healAt);
      const firstAck = Math.min(...duringCut.map(([, at]) => at));
      const waits = duringCut.filter(([value]) => received.has(value)).map(([value, at]) => received.get(value)! - at);
      say(
        `${acknowledged} records acknowledged during the cut until 8 s before its end (the first ${firstAck - cutAt} ms ` +
          `after the cut); ${missed.length} of them not consumed before the end; the longest acknowledgement → ` +
          `consumption during the cut ${waits.length > 0 ? Math.max(...waits) : '-'} ms`,
      );
      expect(acknowledged, 'records acknowledged by the new leaders during the cut').toBeGreaterThan(0);
      expect(missed.length, 'records acknowledged during the cut, not consumed before it ended').toBe(0);
    } finally {
      heal?.();
      stop = true;
      // The next file finds the cluster whole: the healed broker back in sync on this topic's partitions.
      const whole = Date.now() + 120_000;
      const inSync = async () =>
        (await admin.fetchTopicMetadata({ topics: [topic] })).topics[0]!.partitions.every((p) => p.isr.length === 3);
      while (heal && Date.now() < whole && !(await inSync().catch(() => false))) await sleep(500);
      await load.catch(() => undefined);
      await consumer.disconnect();
      await publisher.close();
      await admin.deleteTopics({ topics: [topic] }).catch(() => undefined);
      await admin.disconnect();
    }
  });
});
