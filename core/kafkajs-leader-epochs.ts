// A fix for kafkajs 2.2.4's view of partition leaders when a broker is cut off from the others while it runs: core/kafka.ts
// applies it once, before any client connects. Only core/ touches kafkajs' insides.
import { createRequire } from 'node:module';

/** One partition in a Metadata answer, as kafkajs decodes it (leaderEpoch from version 7, decoded here). */
export interface PartitionMetadata {
  partitionErrorCode: number;
  partitionId: number;
  leader: number;
  leaderEpoch?: number;
  replicas: number[];
  isr: number[];
  offlineReplicas?: number[];
}

/** A Metadata answer, as kafkajs keeps it (BrokerPool.metadata). */
export interface ClusterMetadata {
  brokers: { nodeId: number; host: string; port: number }[];
  topicMetadata: { topic: string; partitionMetadata: PartitionMetadata[] }[];
}

/**
 * `answer` with each partition's entry replaced by the one of `others` that has a newer leader epoch, as Java's client
 * does (KIP-320): a broker that no longer hears the controller (cut off from its peers, while clients still reach it)
 * keeps answering with the leaders it last knew. Only entries whose leader is in `brokers` are taken.
 */
export function newestLeaders(
  answer: ClusterMetadata,
  others: readonly ClusterMetadata[],
  brokers: ReadonlySet<number>,
): ClusterMetadata {
  const newest = new Map<string, PartitionMetadata>();
  for (const other of others) {
    for (const { topic, partitionMetadata } of other.topicMetadata) {
      for (const partition of partitionMetadata) {
        const key = `${topic}\u0000${partition.partitionId}`;
        if ((partition.leaderEpoch ?? -1) > (newest.get(key)?.leaderEpoch ?? -1)) newest.set(key, partition);
      }
    }
  }
  let changed = false;
  const topicMetadata = answer.topicMetadata.map((topic) => ({
    ...topic,
    partitionMetadata: topic.partitionMetadata.map((partition) => {
      const candidate = newest.get(`${topic.topic}\u0000${partition.partitionId}`);
      if (!candidate || (candidate.leaderEpoch ?? -1) <= (partition.leaderEpoch ?? -1)) return partition;
      if (candidate.partitionErrorCode !== 0 || !brokers.has(candidate.leader)) return partition;
      changed = true;
      return candidate;
    }),
  }));
  return changed ? { ...answer, topicMetadata } : answer;
}

interface BrokerInternals {
  isConnected(): boolean;
  metadata(topics: string[]): Promise<ClusterMetadata>;
}

interface BrokerPoolInternals {
  metadata: ClusterMetadata | null;
  metadataExpireAt: number | null;
  brokers: Record<string, BrokerInternals>;
  refreshMetadata(topics: string[]): Promise<void>;
  refreshMetadataIfNecessary(topics: string[]): Promise<void>;
}

/** Per broker pool, its refresh under way in the background (refreshWhenExpired). */
const refreshing = new WeakMap<object, Promise<void>>();

/**
 * Wraps BrokerPool.refreshMetadataIfNecessary, which a consumer awaits before each fetch: leaders that are merely older
 * than the client's metadataMaxAge are read again in the background, and the fetch goes on with those it has (as it
 * would have with kafkajs' five minutes). A topic not yet known, or no metadata yet, is still read before going on.
 */
export function refreshWhenExpired(ifNecessary: (this: BrokerPoolInternals, topics: string[]) => Promise<void>) {
  return function (this: BrokerPoolInternals, topics: string[]): Promise<void> {
    return whenExpired(this, topics, ifNecessary);
  };
}

function whenExpired(
  pool: BrokerPoolInternals,
  topics: string[],
  ifNecessary: (this: BrokerPoolInternals, topics: string[]) => Promise<void>,
): Promise<void> {
  const metadata = pool.metadata;
  const known =
    metadata !== null && topics.every((topic) => metadata.topicMetadata.some((entry) => entry.topic === topic));
  if (!known || pool.metadataExpireAt === null) return ifNecessary.call(pool, topics);
  if (Date.now() > pool.metadataExpireAt && !refreshing.has(pool)) {
    refreshing.set(
      pool,
      pool
        .refreshMetadata(topics)
        .catch(() => undefined)
        .finally(() => refreshing.delete(pool)),
    );
  }
  return Promise.resolve();
}

/**
 * Wraps BrokerPool.refreshMetadata: besides the one broker kafkajs asks (any connected one), every other connected
 * broker is asked too, and each partition takes the answer with the newest leader epoch. Nothing waits for the other
 * answers: those in before kafkajs' own are applied to it, the rest as they come (an epoch only grows, so no answer
 * takes a partition back to an older leader).
 */
export function refreshFromEveryBroker(refresh: (this: BrokerPoolInternals, topics: string[]) => Promise<void>) {
  return async function (this: BrokerPoolInternals, topics: string[]): Promise<void> {
    return everyBroker(this, topics, refresh);
  };
}

async function everyBroker(
  pool: BrokerPoolInternals,
  topics: string[],
  refresh: (this: BrokerPoolInternals, topics: string[]) => Promise<void>,
): Promise<void> {
  const connected = Object.values(pool.brokers).filter((broker) => broker.isConnected());
  // One broker (the local servers): its own answer is all there is.
  if (connected.length < 2) return refresh.call(pool, topics);
  const apply = (answers: (ClusterMetadata | undefined)[]) => {
    const known = answers.filter((answer): answer is ClusterMetadata => answer !== undefined);
    if (!pool.metadata || known.length === 0) return;
    const brokers = new Set(Object.keys(pool.brokers).map(Number));
    pool.metadata = newestLeaders(pool.metadata, known, brokers);
  };
  const early: (ClusterMetadata | undefined)[] = [];
  let refreshed = false;
  for (const broker of connected) {
    void broker
      .metadata(topics)
      .catch(() => undefined)
      .then((answer) => (refreshed ? apply([answer]) : early.push(answer)));
  }
  await refresh.call(pool, topics);
  refreshed = true;
  apply(early);
}

let patched = false;

/**
 * kafkajs 2.2.4 reads partition leaders from one broker at a time, with Metadata versions up to 6, which carry no leader
 * epoch, so it cannot tell a current answer from a stale one. A broker cut off from its peers while clients still
 * reach it (a network partition between racks) is fenced by the controller, which moves its partitions; it hears
 * nothing of that, still believes it leads them, and answers consumers' fetches without error and without the records
 * the new leaders take, and their metadata requests with the old leaders. A member fetching from it got nothing for as
 * long as the cut lasted (kafkajs refreshes its metadata every five minutes, or after an error, and may ask that very
 * broker). Metadata now uses version 7, whose leader epochs say which answer is newer, and each refresh asks every
 * connected broker (refreshFromEveryBroker); consumers refresh every few seconds (CONSUMER_METADATA_MAX_AGE_MS).
 * test/cluster/consumer-cut-leader.test.ts shows it on the local cluster.
 */
export function patchLeaderEpochs(): void {
  if (patched) return;
  patched = true;
  const require = createRequire(import.meta.url);
  const base = 'kafkajs/src/protocol/requests/metadata';
  const Metadata = require(`${base}/index.js`) as {
    versions: string[];
    protocol: (options: { version: number }) => unknown;
  };
  const requestV6 = require(`${base}/v6/request.js`) as (options: object) => object;
  const { parse } = require(`${base}/v0/response.js`) as { parse: (data: unknown) => Promise<unknown> };
  const Decoder = require('kafkajs/src/protocol/decoder.js') as new (data: Buffer) => KafkaDecoder;
  const v6 = Metadata.protocol;
  Metadata.versions.push('7');
  Metadata.protocol = ({ version }) =>
    Number(version) === 7
      ? (options: object) => ({
          request: { ...requestV6(options), apiVersion: 7 },
          response: { decode: decodeV7(Decoder), parse },
        })
      : v6({ version });
  const BrokerPool = require('kafkajs/src/cluster/brokerPool.js') as { prototype: BrokerPoolInternals };
  BrokerPool.prototype.refreshMetadata = refreshFromEveryBroker(BrokerPool.prototype.refreshMetadata);
  BrokerPool.prototype.refreshMetadataIfNecessary = refreshWhenExpired(BrokerPool.prototype.refreshMetadataIfNecessary);
}

interface KafkaDecoder {
  readInt16(): number;
  readInt32(): number;
  readString(): string;
  readBoolean(): boolean;
  readArray<T>(read: (decoder: KafkaDecoder) => T): T[];
}

/**
 * Metadata response version 7: version 6's, with each partition's leader_epoch after its leader. Throttling as from
 * version 6 (the broker answers before it throttles).
 */
export function decodeV7(Decoder: new (data: Buffer) => KafkaDecoder) {
  const ints = (decoder: KafkaDecoder) => decoder.readArray((d) => d.readInt32());
  return async (data: Buffer) => {
    const decoder = new Decoder(data);
    const throttleTime = decoder.readInt32();
    const brokers = decoder.readArray((d) => ({
      nodeId: d.readInt32(),
      host: d.readString(),
      port: d.readInt32(),
      rack: d.readString(),
    }));
    const clusterId = decoder.readString();
    const controllerId = decoder.readInt32();
    const topicMetadata = decoder.readArray((d) => ({
      topicErrorCode: d.readInt16(),
      topic: d.readString(),
      isInternal: d.readBoolean(),
      partitionMetadata: d.readArray((p) => ({
        partitionErrorCode: p.readInt16(),
        partitionId: p.readInt32(),
        leader: p.readInt32(),
        leaderEpoch: p.readInt32(),
        replicas: ints(p),
        isr: ints(p),
        offlineReplicas: ints(p),
      })),
    }));
    return { throttleTime: 0, clientSideThrottleTime: throttleTime, brokers, clusterId, controllerId, topicMetadata };
  };
}
