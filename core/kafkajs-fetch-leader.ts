// A fix for kafkajs 2.2.4's fetches after a partition's leader moved: core/kafka.ts applies it once, before any
// consumer joins. Only core/ touches kafkajs' insides.
import { createRequire } from 'node:module';

interface ConsumerGroupInternals {
  cluster: { refreshMetadata(): Promise<void> };
  recoverFromFetch(error: Error): Promise<void>;
}

/**
 * What a broker answers a fetch for a partition it no longer leads, or whose leader it does not know yet: the partition
 * is still the member's, only its leader moved. (UNKNOWN_TOPIC_OR_PARTITION is left to kafkajs: a deleted topic or
 * partition may change the assignment.)
 */
const LEADER_MOVED: ReadonlySet<string> = new Set([
  'NOT_LEADER_FOR_PARTITION',
  'LEADER_NOT_AVAILABLE',
  'FENCED_LEADER_EPOCH',
  'UNKNOWN_LEADER_EPOCH',
]);
let patched = false;

/**
 * How long a member's fetcher for a broker it cannot connect to waits before it tries again, having read the leaders
 * again. kafkajs threw the connection error out of the fetch, which stopped every broker's fetcher and tried them all
 * again 0.2 s, 0.4 s … 5 s later (nothing fetched from the healthy brokers meanwhile), and after ten such tries
 * crashed the consumer, which restarted 5 s later and joined its group again: a rebalance of every member. A killed
 * broker's partitions move only once the controller fences it (its session timeout), so this is what a kill cost.
 */
export const UNREACHABLE_LEADER_PAUSE_MS = 500;

/** kafkajs' own error for a Kafka protocol error code (its message is what kafkajs logs). */
export function kafkajsErrorFromCode(code: number): Error & { type: string } {
  const { createErrorFromCode } = createRequire(import.meta.url)('kafkajs/src/protocol/error.js') as {
    createErrorFromCode(code: number): Error & { type: string };
  };
  return createErrorFromCode(code);
}

/**
 * Two kafkajs 2.2.4 ways of fetching from a broker that no longer leads the partitions. A broker's controlled shutdown
 * (each step of a rolling restart) hands its partitions over within a few hundred ms and exits 2-5 s later:
 * - kafkajs fetches with version 11, with which a broker serves a consumer from a follower replica (for rack-aware
 *   reading). The stopping broker, now a follower, kept answering the members' fetches until it closed, without the
 *   records the new leaders took meanwhile, and kafkajs asked no one else: records waited 1.7-3.7 s between their
 *   acknowledgement and their consumption (test/cluster/consumer-leader-move.test.ts; 3-16 ms with this fix). Fetches
 *   here use version 10, which a broker that does not lead the partition refuses (NOT_LEADER_OR_FOLLOWER). Nothing here
 *   reads from followers (no rack is configured).
 * - kafkajs answers a fetch refused so by refreshing its metadata and joining the group again. When the group's
 *   leader joins again, the coordinator rebalances every member; any member that joins again starts a new generation
 *   here (ConsumerRunner: records in flight are not committed, the partitions' ends are read again before any record
 *   is handled). Java's consumer only refreshes its metadata and fetches from the new leader; so does this.
 */
export function patchFetchLeader(): void {
  if (patched) return;
  patched = true;
  const require = createRequire(import.meta.url);
  const Fetch = require('kafkajs/src/protocol/requests/fetch/index.js') as { versions: string[] };
  // kafkajs picks the highest version it implements that the broker supports, from this list, at each fetch.
  const followerFetch = Fetch.versions.indexOf('11');
  if (followerFetch >= 0) Fetch.versions.splice(followerFetch, 1);
  const ConsumerGroup = require('kafkajs/src/consumer/consumerGroup.js') as {
    prototype: ConsumerGroupInternals;
  };
  const recoverFromFetch = ConsumerGroup.prototype.recoverFromFetch;
  ConsumerGroup.prototype.recoverFromFetch = async function (this: ConsumerGroupInternals, error: Error) {
    if (error.name === 'KafkaJSConnectionError') {
      // The broker cannot be reached (killed, its host gone): its partitions get new leaders once the controller
      // fences it. Until then each try of this broker's fetcher reads the leaders again, a pause apart.
      await this.cluster.refreshMetadata().catch(() => undefined);
      await new Promise((resolve) => setTimeout(resolve, UNREACHABLE_LEADER_PAUSE_MS));
      return;
    }
    if (!LEADER_MOVED.has((error as { type?: string }).type ?? '')) return recoverFromFetch.call(this, error);
    await this.cluster.refreshMetadata();
  };
}
