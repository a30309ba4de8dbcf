// A topic of the local cluster whose partitions have the replicas (the first one leading) a test chooses, for the
// cluster tests that stop a broker and watch the leadership move (test/cluster/).
import type { Admin, Consumer } from 'kafkajs';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** The leader of each partition of `topic`, by partition. */
export async function partitionLeaders(admin: Admin, topic: string): Promise<number[]> {
  const [metadata] = (await admin.fetchTopicMetadata({ topics: [topic] })).topics;
  return metadata!.partitions.sort((a, b) => a.partitionId - b.partitionId).map((partition) => partition.leader);
}

/**
 * Creates `topic` with partition i on `replicas[i]`, and returns the leaders once a broker names them all (brokers learn
 * of a new topic one after another), or what was last read after ten seconds.
 */
export async function createLedTopic(admin: Admin, topic: string, replicas: number[][]): Promise<number[]> {
  await admin
    .createTopics({
      topics: [{ topic, replicaAssignment: replicas.map((list, partition) => ({ partition, replicas: list })) }],
    })
    .catch((error: Error) => {
      // kafkajs reads the new topic's metadata from a broker that may not know it yet; the topic exists all the same.
      if (!/does not host this topic-partition/.test(error.message)) throw error;
    });
  const expected = replicas.map((list) => list[0]).join();
  let leaders: number[] = [];
  for (let attempt = 0; attempt < 50 && leaders.join() !== expected; attempt += 1) {
    leaders = await partitionLeaders(admin, topic).catch(() => []);
    if (leaders.join() !== expected) await sleep(200);
  }
  return leaders;
}

/**
 * Subscribes a connected `consumer` to `topic`, created just now, and runs it without committing (as the services'
 * ConsumerRunner commits apart from the fetch loop; nothing here): each value mapped to when it was first consumed.
 */
export async function consumeLedTopic(consumer: Consumer, topic: string): Promise<Map<string, number>> {
  // A broker that does not know the new topic yet fails the subscription's metadata read.
  for (let attempt = 0; ; attempt += 1) {
    try {
      await consumer.subscribe({ topic, fromBeginning: true });
      break;
    } catch (error) {
      if (attempt >= 50 || !/does not host this topic-partition/.test((error as Error).message)) throw error;
      await sleep(200);
    }
  }
  const received = new Map<string, number>();
  await consumer.run({
    autoCommit: false,
    eachMessage: async ({ message }) => {
      const value = message.value!.toString();
      if (!received.has(value)) received.set(value, Date.now());
    },
  });
  return received;
}
