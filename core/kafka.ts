// The only module that imports a Kafka client: producers, consumers, offsets and heartbeats live here. Consumers and
// admin requests go through kafkajs; records are published through @platformatic/kafka, whose producer spends a third of
// the CPU per record of kafkajs' (measured in test/bench/kafka-clients.ts).
import {
  kGetBootstrapConnection,
  ProduceAcks,
  Producer as RecordProducer,
  stringSerializer,
} from '@platformatic/kafka';
import {
  AssignerProtocol,
  Kafka,
  logLevel,
  type Admin,
  type Consumer,
  type ConsumerConfig,
  type KafkaConfig,
  type IHeaders,
  type LogEntry,
} from 'kafkajs';
import { FairSlots } from './fair-slots.ts';
import { javaPartitioner, partitionOf } from './partitioner.ts';
import { patchOffsetCoordinator } from './kafkajs-offset-coordinator.ts';
import { patchHeartbeatCoordinator } from './kafkajs-heartbeat-coordinator.ts';
import { kafkajsErrorFromCode, patchFetchLeader } from './kafkajs-fetch-leader.ts';
import { patchRequestQueue } from './kafkajs-request-queue.ts';
import { patchLeaderEpochs } from './kafkajs-leader-epochs.ts';
import type { Logger } from './log.ts';
import type { ConsumerMetrics } from './metrics.ts';
import { backoffDelay, RecoveryBackoff } from './recovery-backoff.ts';

// Before any kafkajs client connects: its idle connections otherwise poll every millisecond, its offset commits keep
// going to a group coordinator that moved, its members rejoin their group (a rebalance) when the coordinator or a
// partition's leader moves, and it takes a cut-off broker's stale leaders for current ones.
patchRequestQueue();
patchOffsetCoordinator();
patchHeartbeatCoordinator();
patchFetchLeader();
patchLeaderEpochs();

/**
 * How often consumers read the partitions' leaders again (kafkajs' default: five minutes). A broker cut off from its
 * peers while it runs answers fetches for the partitions it led without error and without new records: nothing else
 * tells a member that they moved (core/kafkajs-leader-epochs.ts). Each read asks every connected broker, in the
 * background: no fetch waits for it.
 */
export const CONSUMER_METADATA_MAX_AGE_MS = 5_000;

/** A record read from Kafka, as handlers see it. */
export interface ConsumedRecord {
  topic: string;
  partition: number;
  offset: string;
  key: Buffer | null;
  value: Buffer | null;
  headers: Record<string, string>;
  timestamp: number;
  /**
   * The record was already in its partition when this member was given the partition: a previous owner may have
   * handled it (it died or left before committing), so a handler may check what was done before acting again. Also
   * set on a record handed again after its handler failed.
   */
  redelivered?: boolean;
}

/**
 * A record no retry can handle (it does not decode): the consumer logs it, counts it and moves past it, instead of
 * retrying it forever and never committing its partition again.
 */
export class PoisonRecordError extends Error {
  readonly code = 'POISON_RECORD';
}

/** A record to publish. */
export interface OutgoingRecord {
  topic: string;
  key: string;
  value: Buffer | null;
  headers?: Record<string, string>;
}

/** A kafkajs client that keeps the settings it was made with: the publisher opens its own connections with them. */
export class KafkaClient extends Kafka {
  constructor(
    readonly brokers: string[],
    readonly clientId: string,
    readonly log: Logger,
  ) {
    super(kafkajsConfig(brokers, clientId, log));
  }

  override consumer(config: ConsumerConfig): Consumer {
    return super.consumer({ metadataMaxAge: CONSUMER_METADATA_MAX_AGE_MS, ...config });
  }
}

export function createKafka(brokers: string[], clientId: string, logger: Logger): KafkaClient {
  return new KafkaClient(brokers, clientId, logger);
}

function kafkajsConfig(brokers: string[], clientId: string, logger: Logger): KafkaConfig {
  const levels: Record<number, 'error' | 'warn' | 'info' | 'debug'> = {
    [logLevel.ERROR]: 'error',
    [logLevel.WARN]: 'warn',
    [logLevel.INFO]: 'debug',
    [logLevel.DEBUG]: 'debug',
  };
  return {
    clientId,
    brokers,
    logLevel: logLevel.WARN,
    logCreator:
      () =>
      ({ level, label, log }: LogEntry) => {
        const { message, ...extra } = log;
        // A rebalance or a lost coordinator is routine for a consumer group: keep them out of error logs.
        const routine = level === logLevel.ERROR && ROUTINE_REFUSALS.has(String(extra.error));
        logger[routine ? 'warn' : (levels[level] ?? 'info')]({ kafka: label, ...extra }, `kafka: ${message}`);
      },
    retry: KAFKA_RETRY,
  };
}

/**
 * What brokers answer while partitions and groups move (a broker's restart, a rolling upgrade): kafkajs logs each such
 * answer at error level ("Response Fetch(key: 1, version: 10)", with the message below) and then recovers by itself
 * (core/kafkajs-*.ts). Logged as warnings: errors are for what needs an operator.
 */
const ROUTINE_REFUSALS: ReadonlySet<string> = new Set(
  [
    5, // LEADER_NOT_AVAILABLE
    6, // NOT_LEADER_OR_FOLLOWER
    14, // COORDINATOR_LOAD_IN_PROGRESS
    15, // COORDINATOR_NOT_AVAILABLE
    16, // NOT_COORDINATOR
    27, // REBALANCE_IN_PROGRESS
  ].map((code) => kafkajsErrorFromCode(code).message),
);

/**
 * How kafkajs retries a failed connection or request: 200 ms, then doubling (±20 %) up to 5 s between tries. kafkajs's
 * own ceiling is 30 s: after a broker restart of half a minute, consumers slept up to 25 s more before trying again
 * (`npm run chaos -- --only kafka` recovered 38.7 s after the fault). Ten tries span about 30 s; a consumer that runs
 * out of them restarts and tries again.
 */
export const KAFKA_RETRY = { initialRetryTime: 200, maxRetryTime: 5_000, factor: 0.2, multiplier: 2, retries: 10 };

/**
 * Bytes of records one produce request carries at most. The broker refuses a record batch above `message.max.bytes`
 * (1 MiB by default, per partition) and then fails every caller merged into it; staying under it whatever the callers
 * send keeps one large caller from failing the others. A single larger record still goes (alone) to a topic that
 * accepts it.
 */
export const MAX_REQUEST_BYTES = 900 * 1024;
/** Records one produce request carries at most. */
const MAX_REQUEST_RECORDS = 2_000;

/**
 * The producer's wait before trying a failed request again. A broker that says it no longer leads a partition (a
 * controlled shutdown hands its partitions over while it still answers) is not asked again: @platformatic/kafka
 * refreshes its leaders on a retry only after a network error, and otherwise keeps them until they are 5 s old, so in
 * a broker roll every try went back to the broker that refused it, 400, 800 and 1,600 ms apart, and the gateway's events
 * waited 6 s for a fourth. Since Kafka 3.7 (KIP-951) the refusal names the partition's new leader, as Java's client
 * uses it: when it names one for every refused partition, newer than the client knows, the leaders are taken from it
 * and the request is sent there at once (in a broker's clean stop the tries after a fresh metadata read were refused
 * three times over 0.3 s, each refusal naming the new leader, and records waited 0.5-0.9 s for their acknowledgement).
 * Otherwise, or when the named leader refuses too, the leaders are forgotten (the next try asks for them),
 * four tries 50 ms apart, then doubling to 1 s (Java's client: 100 ms doubling to 1 s). Any other failure (a broker
 * down, the cluster without a quorum) waits 200 ms doubling to 1 s: the client reads the leaders again before each try,
 * and a killed broker's partitions get new leaders once the controller fences it, a few seconds after the kill. Up to
 * 5 s between tries (as here before) left the gateways' events waiting 4.3 s past the fence, 11.1 s in all.
 */
export function producerRetryDelay(
  log: Pick<Logger, 'warn'>,
): (client: object, operation: string, attempt: number, retries: number, error: Error) => number {
  return (client, operation, attempt, _retries, error) => {
    const stale = hasStaleMetadata(error);
    // The client (a Producer): typed `object` by the library's callback.
    const producer = client as { clearMetadata(): void; currentMetadata?: LeaderMetadata };
    const redirected = stale && attempt <= MAX_REDIRECTS && followNewLeaders(producer.currentMetadata, error);
    if (stale && !redirected) producer.clearMetadata();
    const timedOut = !stale && hasTimedOut(error);
    if (timedOut) {
      // A leader that holds a request past its timeout may be cut off from its peers while it runs: fenced, its
      // partitions led by others, but it still names itself their leader. The client reads leaders from the first
      // broker it reaches in its list, which may be that one: the next read asks the next broker.
      producer.clearMetadata();
      metadataTurns.set(client, (metadataTurns.get(client) ?? 0) + 1);
    }
    const retryInMs = redirected
      ? 0
      : stale
        ? Math.min(50 * 2 ** Math.max(0, attempt - STALE_QUICK_TRIES), 1_000)
        : Math.min(100 * 2 ** attempt, 1_000);
    log.warn(
      { kafka: 'producer', operation, attempt, retryInMs, redirected, err: error },
      'kafka: producer request failed; retrying',
    );
    return retryInMs;
  };
}

/**
 * Per producer, how many brokers down its list its metadata reads start (askNextBrokerAfterTimeouts): one more after
 * each request that timed out.
 */
const metadataTurns = new WeakMap<object, number>();

/**
 * Makes `producer`'s reads of the cluster's metadata start at the broker its timed-out requests have turned to
 * (metadataTurns), instead of always at the first of its bootstrap brokers that answers. A broker cut off from its
 * peers while the clients still reach it answers with the leaders it last knew, itself among them, for as long as the
 * cut lasts; when it came first in KAFKA_BROKERS the publishers sent to it, and timed out, for the whole cut.
 */
export function askNextBrokerAfterTimeouts(producer: object): void {
  const target = producer as Record<symbol, (callback: unknown, attempt?: number) => void>;
  const original = target[kGetBootstrapConnection]!;
  target[kGetBootstrapConnection] = (callback, attempt = 0) =>
    original.call(producer, callback, attempt + (metadataTurns.get(producer) ?? 0));
}

/** Whether the error, or one it aggregates or wraps, is a request that timed out (the broker's or the client's). */
function hasTimedOut(error: unknown): boolean {
  return anyError(error, ({ apiCode, code }) => apiCode === 7 || code === 'PLT_KFK_TIMEOUT');
}

/**
 * Tries 50 ms apart after a broker said it no longer leads, before the wait doubles (to 1 s): the brokers take a few
 * hundred ms here to apply a leader's move, and the records wait for the first try after it.
 */
const STALE_QUICK_TRIES = 4;
/** Tries in a row sent straight to the leader a refusal names, before the leaders are asked for again. */
const MAX_REDIRECTS = 2;

/** The part of @platformatic/kafka's cluster metadata (`currentMetadata`) that says where a partition's leader is. */
interface LeaderMetadata {
  brokers: Map<number, { host: string; port: number; rack?: string | null }>;
  topics: Map<string, { partitions: ({ leader: number; leaderEpoch: number } | undefined)[] }>;
}

/** What a produce response says of a refused partition, and where the brokers it names are (KIP-951). */
interface ProduceRefusal {
  responses?: {
    name: string;
    partitionResponses?: {
      index: number;
      errorCode: number;
      currentLeader?: { leaderId: number; leaderEpoch: number };
    }[];
  }[];
  nodeEndpoints?: { nodeId: number; host: string; port: number; rack?: string | null }[];
}

/**
 * Moves each refused partition of `error`'s produce response to the leader the refusal names, in `metadata` (the
 * client's own, read by its next try). True only if every refused partition named a leader newer (by leader epoch)
 * than the one known, at an address known or given; otherwise nothing is changed.
 */
function followNewLeaders(metadata: LeaderMetadata | undefined, error: unknown): boolean {
  const response = produceResponseOf(error);
  if (metadata === undefined || response?.responses === undefined) return false;
  const moves: { partition: { leader: number; leaderEpoch: number }; leaderId: number; leaderEpoch: number }[] = [];
  const endpoints = new Map((response.nodeEndpoints ?? []).map((node) => [node.nodeId, node]));
  for (const { name, partitionResponses = [] } of response.responses) {
    for (const { index, errorCode, currentLeader } of partitionResponses) {
      if (errorCode === 0) continue;
      const partition = metadata.topics.get(name)?.partitions[index];
      if (partition === undefined || currentLeader === undefined || currentLeader.leaderId < 0) return false;
      if (currentLeader.leaderEpoch <= partition.leaderEpoch) return false;
      if (!metadata.brokers.has(currentLeader.leaderId) && !endpoints.has(currentLeader.leaderId)) return false;
      moves.push({ partition, ...currentLeader });
    }
  }
  if (moves.length === 0) return false;
  for (const { partition, leaderId, leaderEpoch } of moves) {
    const endpoint = endpoints.get(leaderId);
    if (!metadata.brokers.has(leaderId) && endpoint !== undefined) {
      metadata.brokers.set(leaderId, { host: endpoint.host, port: endpoint.port, rack: endpoint.rack ?? null });
    }
    partition.leader = leaderId;
    partition.leaderEpoch = leaderEpoch;
  }
  return true;
}

/** The produce response a failed request carries (on the error, or one it wraps), if any. */
function produceResponseOf(error: unknown, depth = 0): ProduceRefusal | undefined {
  if (typeof error !== 'object' || error === null || depth > 4) return undefined;
  const { response, cause } = error as { response?: unknown; cause?: unknown };
  if (typeof response === 'object' && response !== null && 'responses' in response) return response as ProduceRefusal;
  return produceResponseOf(cause, depth + 1);
}

/** Whether the error, or one it aggregates or wraps, says the client's leaders are out of date. */
function hasStaleMetadata(error: unknown): boolean {
  return anyError(error, ({ hasStaleMetadata: stale }) => stale === true);
}

/** Whether `test` holds for the error or for one it aggregates (`errors`) or wraps (`cause`), four levels deep. */
function anyError(error: unknown, test: (error: Record<string, unknown>) => boolean, depth = 0): boolean {
  if (typeof error !== 'object' || error === null || depth > 4) return false;
  const fields = error as Record<string, unknown>;
  if (test(fields)) return true;
  const { errors, cause } = fields;
  if (Array.isArray(errors) && errors.some((inner) => anyError(inner, test, depth + 1))) return true;
  return anyError(cause, test, depth + 1);
}

/** A caller of publish(): resolved once all its records are acknowledged, rejected if any request failed. */
interface PublishCall {
  remaining: number;
  error?: unknown;
  done: (error?: unknown) => void;
}

interface Queued {
  record: OutgoingRecord;
  call: PublishCall;
}

/** The records waiting for one partition's requests (or, for topics of one replica, for the shared requests). */
interface SendLane {
  /** The partition every record of the lane goes to; undefined: the client partitions (topics of one replica). */
  partition?: number;
  queue: Queued[];
  sending?: Promise<void>;
}

/**
 * Publishes records with an idempotent producer and acks=all, batching concurrent calls. The records of a replicated
 * topic go through a lane per partition, each with one request in flight at a time; those of topics of one replica
 * through one shared lane (one request for all their partitions: they never change leader, and a single send costs
 * less). Why per partition, and why the lanes do not wait for each other: drain's comment.
 */
export class Publisher {
  /** Records not yet given a lane (that needs the topics' metadata). */
  private pending: Queued[] = [];
  private routing: Promise<void> | undefined;
  private readonly lanes = new Map<string, SendLane>();

  private constructor(
    private readonly producer: RecordProducer<string, Buffer | null, string, string>,
    /** Told of a wait over SLOW_WAIT_MS for the topics' metadata or a produce request (which broker held it up). */
    private readonly log?: Pick<Logger, 'warn'>,
  ) {}

  static async connect(kafka: KafkaClient): Promise<Publisher> {
    // At most one request per partition is in flight (an idempotent producer's sequence numbers ask for it), and
    // everything queued meanwhile rides in the next. Idempotence needs unbounded retries: a send waits out a broker
    // outage rather than giving up on a record. Keys are partitioned as Java's (and kafkajs') default partitioner does:
    // partitionOf().
    const producer = new RecordProducer<string, Buffer | null, string, string>({
      clientId: kafka.clientId,
      bootstrapBrokers: kafka.brokers,
      idempotent: true,
      acks: ProduceAcks.ALL,
      autocreateTopics: false,
      partitioner: javaPartitioner,
      serializers: { key: stringSerializer, headerKey: stringSerializer, headerValue: stringSerializer },
      retries: Number.MAX_SAFE_INTEGER,
      retryDelay: producerRetryDelay(kafka.log),
    });
    askNextBrokerAfterTimeouts(producer);
    await producer.initIdempotentProducer({});
    return new Publisher(producer, kafka.log);
  }

  /** Resolves once Kafka has acknowledged every record (acks=all). */
  publish(records: OutgoingRecord[]): Promise<void> {
    if (records.length === 0) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const call: PublishCall = {
        remaining: records.length,
        done: (error) => (error ? reject(error) : resolve()),
      };
      for (const record of records) this.pending.push({ record, call });
      this.routing ??= this.route();
    });
  }

  async close(): Promise<void> {
    while (this.routing || [...this.lanes.values()].some((lane) => lane.sending)) {
      await this.routing;
      await Promise.all([...this.lanes.values()].map((lane) => lane.sending));
    }
    await this.producer.close();
  }

  /** Gives each pending record its lane, and starts the lanes that are idle. Waits only for metadata. */
  private async route(): Promise<void> {
    while (this.pending.length > 0) {
      const batch = this.pending.splice(0);
      let topics: Map<string, { partitions: number; replicated: boolean }>;
      const asked = Date.now();
      try {
        topics = await this.topicsOf([...new Set(batch.map(({ record }) => record.topic))]);
        this.slow(asked, "the topics' metadata", { records: batch.length });
      } catch (error) {
        for (const queued of batch) settle(queued.call, error);
        continue;
      }
      const touched = new Set<SendLane>();
      for (const queued of batch) {
        const topic = topics.get(queued.record.topic)!;
        const partition = topic.replicated ? partitionOf(queued.record.key, topic.partitions) : undefined;
        const name = partition === undefined ? '' : `${queued.record.topic}\0${partition}`;
        let lane = this.lanes.get(name);
        if (!lane) this.lanes.set(name, (lane = { partition, queue: [] }));
        lane.queue.push(queued);
        touched.add(lane);
      }
      // Once every record has its lane: an idle lane's first request takes all it was given.
      for (const lane of touched) lane.sending ??= this.drain(lane);
    }
    this.routing = undefined;
  }

  private async topicsOf(names: string[]): Promise<Map<string, { partitions: number; replicated: boolean }>> {
    const metadata = await this.producer.metadata({ topics: names });
    return new Map(
      names.map((name) => {
        const topic = metadata.topics.get(name)!;
        const replicated = topic.partitions.some((partition) => partition.replicas.length > 1);
        return [name, { partitions: topic.partitionsCount, replicated }];
      }),
    );
  }

  /**
   * Sends a lane's records, one request at a time, in arrival order up to the request's byte and count caps (at least
   * one record, however large). Why a request per partition: on a retry @platformatic/kafka sends the records it had
   * grouped by their partitions' leader to the new leader of the first record's partition. When a dead broker's
   * partitions get different new leaders, that broker refuses the others (NOT_LEADER_OR_FOLLOWER) at every try, for
   * as long as the leaders stay: the router's publisher retried one request for three minutes in a CI simulation
   * (test/cluster/publisher-failover.test.ts shows it). A send of one partition always goes to that partition's
   * leader. Why the lanes do not wait for each other: a leader cut off from its followers takes requests and answers
   * none until the controller has moved its partitions and the producer has learnt it (tens of seconds); while all
   * partitions shared one request at a time, that one partition held the records of every other (the chaos fault
   * `kafka-partition` stopped every delivery for the whole cut).
   */
  private async drain(lane: SendLane): Promise<void> {
    while (lane.queue.length > 0) {
      let bytes = 0;
      let count = 0;
      while (count < lane.queue.length && count < MAX_REQUEST_RECORDS) {
        const size = recordBytes(lane.queue[count]!.record);
        if (count > 0 && bytes + size > MAX_REQUEST_BYTES) break;
        bytes += size;
        count += 1;
      }
      const batch = lane.queue.splice(0, count);
      let failure: unknown;
      const sent = Date.now();
      try {
        await this.producer.send({
          messages: batch.map(({ record }) =>
            lane.partition === undefined ? record : { ...record, partition: lane.partition },
          ),
        });
      } catch (error) {
        failure = error;
      }
      this.slow(sent, 'a produce request', {
        topic: batch[0]!.record.topic,
        partition: lane.partition,
        failed: !!failure,
      });
      for (const { call } of batch) settle(call, failure);
    }
    lane.sending = undefined;
  }

  private slow(since: number, what: string, fields: object): void {
    const waitedMs = Date.now() - since;
    if (waitedMs > SLOW_WAIT_MS) this.log?.warn({ kafka: 'producer', waitedMs, ...fields }, `kafka: ${what} took long`);
  }
}

/** A publisher's wait worth a warning: a broker that does not answer (stopping, cut off) holds up what waits on it. */
const SLOW_WAIT_MS = 1_000;

/** Counts one of the call's records as answered (failed when `failure` is set); ends the call after its last. */
function settle(call: PublishCall, failure?: unknown): void {
  if (failure !== undefined) call.error ??= failure;
  if (--call.remaining === 0) call.done(call.error);
}

/** What a record weighs in a produce request (key, value, headers, and the per-record framing). */
function recordBytes(record: OutgoingRecord): number {
  let size = 64 + Buffer.byteLength(record.key) + (record.value?.length ?? 0);
  for (const [name, value] of Object.entries(record.headers ?? {})) size += name.length + Buffer.byteLength(value);
  return size;
}

/**
 * The partition the publisher puts a record keyed `key` in: the producer's partitioner (murmur2, as Java's), on the key
 * as its serializer encodes it (UTF-8), modulo the partition count as the producer takes it.
 */
export { partitionOf };

/** A consumer group as one member sees it after joining: itself and each member's partitions by topic. */
export interface GroupMembership {
  self: string;
  members: { memberId: string; assignment: Record<string, number[]> }[];
}

/** The members of a consumer group and their partitions by topic; undefined unless the group is stable. */
export async function stableGroupMembers(
  admin: Admin,
  groupId: string,
): Promise<GroupMembership['members'] | undefined> {
  const { groups } = await admin.describeGroups([groupId]);
  const group = groups[0];
  if (group?.state !== 'Stable') return undefined;
  return group.members.map((member) => ({
    memberId: member.memberId,
    assignment: AssignerProtocol.MemberAssignment.decode(member.memberAssignment)?.assignment ?? {},
  }));
}

/** What a handler wants done with a record it was handed. */
export interface ConsumerOptions {
  groupId: string;
  topics: string[];
  /**
   * Resolves once the record's outcome is durable; only then can its offset be committed. `slot.release()` gives the
   * record's slot back early: a handler calls it when it starts waiting on something outside the process (a
   * receiver's answer), so that a record waiting on a slow or hanging party holds its lane and nothing shared.
   */
  handle: (record: ConsumedRecord, slot: { release(): void }) => Promise<void>;
  /** Epoch ms before which the record must not be handled (retry tiers); the partition is paused until then. */
  dueAt?: (record: ConsumedRecord) => number | undefined;
  /**
   * How long after its first record is due a paused partition is woken (default 0). Each wake-up fetches the partition
   * again from that record, and kafkajs decodes all the fetch brings (up to fetchBytesPerPartition): woken at each
   * record's due time, a delay topic taking a hundred records a second is fetched and decoded a hundred times a
   * second, each time the whole of what waits in it. With a slack, the records due meanwhile come in one fetch.
   */
  dueSlackMs?: number;
  /**
   * Slots: records handled at once across all partitions (a record whose handler released its slot no longer counts).
   * A freed slot goes to the groups (lane.group, e.g. tenants) in turn, and within one to its lanes in turn (FairSlots).
   */
  maxInFlight: number;
  /** Slots one group may hold at once (default maxInFlight). */
  maxInFlightPerGroup?: number;
  /**
   * Records read ahead and waiting for their lane or a slot (default 10 × maxInFlight), and their bytes (default
   * 64 MiB): the bound on what a consumer holds in memory. One lane may take at most half of it.
   */
  maxBuffered?: number;
  maxBufferedBytes?: number;
  /**
   * Key of the concurrency lane a record belongs to (e.g. subscription id) and that lane's limit: a number, or a
   * function of the key read whenever the lane may admit a record (an adaptive limit). A limit counts as at least 1.
   */
  lane?: {
    of: (record: ConsumedRecord) => string;
    limit: number | ((key: string) => number);
    /** The group (e.g. tenant) the record's lane belongs to, for sharing slots; asked after `pace.prepare`. */
    group?: (record: ConsumedRecord) => string | Promise<string>;
    /**
     * A pace on lanes (a rate limit): `prepare` runs before a record enters its lane (it holds no slot meanwhile) and
     * may look up what `wait` needs; `wait(key)` is asked before the lane's head starts: 0 lets it start (and counts
     * it), a positive number is the ms after which the lane asks again. Records wait in their lane, not in a slot.
     */
    pace?: { prepare?: (key: string, record: ConsumedRecord) => Promise<void>; wait: (key: string) => number };
    /**
     * Where a slow lane's backlog goes instead of the shared read-ahead buffer: once `bound(key)` records of a lane
     * wait and the lane is slow, its next records are `park`ed (durably moved aside, to come back through `topic` once
     * due) and their offsets finish at once, so a slow lane holds neither the buffer nor its partition. Records of a
     * lane that has parked some in the last `delayMs` are parked too, behind them (its order as far as delays allow);
     * a record coming back from `topic` is parked again only if its lane is still full and slow.
     *
     * A lane is slow when its waiting records would take longer than `waitMs` to start, either at its pace (a rate
     * limit holding it: their count times the moving mean of the time between its admissions) or because its own
     * records take long: their count times the time its records hold a slot (a moving mean, or how long others have
     * finished records since its last one did: an endpoint that stopped answering) over its limit, where that time is
     * also at least SLOWER_THAN_THE_REST times the runner's mean over all its records. A burst that slows every lane
     * alike (the process itself the bottleneck) parks none: the backlog waits in the buffer, which then holds up
     * reading, and drains faster from there than through the overflow topic and back. A lane found slow later has its
     * waiting records beyond the bound moved aside too. Without `waitMs` (or 0) every lane is slow: parked at `bound`.
     */
    overflow?: {
      topic: string;
      bound: (key: string) => number;
      delayMs: number;
      waitMs?: number;
      park: (record: ConsumedRecord) => Promise<void>;
    };
  };
  /**
   * Told the group's membership after each join (read with describeGroups), and undefined as soon as a rebalance
   * starts or the member leaves: what share of a group-wide limit this member may use.
   */
  onMembership?: (membership: GroupMembership | undefined) => void;
  /** Start from the oldest offsets when the group has none committed. */
  fromBeginning?: boolean;
  /** Bytes of records one fetch brings of each partition at most (kafkajs' default: 1 MiB). */
  fetchBytesPerPartition?: number;
  /**
   * Topics whose partitions are left out of the fetches while they hold nothing to read (the retry tiers): every
   * `checkEveryMs` the runner compares each assigned partition's end with the group's committed offset, pauses those
   * where they meet and resumes those that have grown. A fetch then carries the busy partitions only (kafkajs' work per
   * fetch grows with the partitions it names, empty or not); a record reaching a quiet partition waits checkEveryMs at
   * most before it is read.
   */
  quiet?: { topics: readonly string[]; checkEveryMs: number };
  /** Called when this member joins its group (a new assignment), before it handles any record of that generation. */
  onJoin?: () => void;
  metrics?: ConsumerMetrics;
  /** Called when the consumer stopped for good (kafkajs will not restart it): the process should exit. */
  onFatal?: (error: Error) => void;
  logger: Logger;
}

/**
 * Runs a consumer group that hands records to `handle` concurrently and commits, per partition, only the contiguous
 * prefix of records whose outcome is durable. A record that is not yet due pauses its partition until it is.
 */
export class ConsumerRunner {
  private consumer: Consumer | undefined;
  /** Records accepted and not finished (waiting for a lane or a slot, or being handled), and their bytes. */
  private buffered = 0;
  private bufferedBytes = 0;
  /** Records being handled (holding a slot or not). */
  private inFlight = 0;
  private readonly slots: FairSlots;
  private readonly lanes = new Map<string, Lane>();
  private readonly trackers = new Map<string, OffsetTracker>();
  /**
   * Per partition, an end at or after the one it had when this member joined: offsets below it may have been handled
   * by a previous owner (redelivered). The end its first fetch after the join saw, lowered to the end read right after
   * the join (readEnds) once that read answers: nothing waits for the read, and a partition idle at the join does not
   * flag the whole burst its first fetch brings later.
   */
  private readonly boundaries = new Map<string, bigint>();
  private admin: Admin | undefined;
  /** Woken whenever a record finishes: readers waiting for buffer room. */
  private readonly roomWaiters: (() => void)[] = [];
  private readonly maxBuffered: number;
  private readonly maxBufferedBytes: number;
  private readonly resumeTimers = new Set<NodeJS.Timeout>();
  private readonly idle: (() => void)[] = [];
  private stopping = false;
  private commitTimer: NodeJS.Timeout | undefined;
  private assigned: number | undefined;
  /** Joins and rebalances seen: a membership read for an older one is dropped. */
  private joins = 0;
  /** Lanes with records waiting to enter (at their limit): the lanes the read-ahead buffer is shared between. */
  private waitingLanes = 0;
  /** Per lane, until when its new records are parked behind those it parked (lane.overflow). */
  private readonly parkedUntil = new Map<string, number>();
  /** Records whose handling failed wait here for their next try, all woken when one succeeds after an outage. */
  private readonly backoff = new RecoveryBackoff();
  /** This member's partitions of each topic, as its last join assigned them. */
  private assignment: Record<string, number[]> = {};
  /** Partitions of the quiet topics this runner paused because they were empty (`topic\u0000partition`). */
  private readonly quietPaused = new Set<string>();
  private quietTimer: NodeJS.Timeout | undefined;
  /** Moving mean of how long records held a slot, over every lane: what a lane's own time is compared with. */
  private meanHoldMs: number | undefined;
  /** When any record last finished: a lane has stalled only while others finish (not while the process is held). */
  private finishedAt = 0;
  /** Looks for lanes found slow with more waiting than their bound (lane.overflow.waitMs). */
  private slowLaneTimer: NodeJS.Timeout | undefined;
  private quietChecking = false;
  /** Whether the last quiet check failed: its warning is logged once per failing period, not every check. */
  private quietFailing = false;

  constructor(
    private readonly kafka: Kafka,
    private readonly options: ConsumerOptions,
  ) {
    this.maxBuffered = options.maxBuffered ?? options.maxInFlight * 10;
    this.maxBufferedBytes = options.maxBufferedBytes ?? 64 * 1024 * 1024;
    this.slots = new FairSlots(options.maxInFlight, options.maxInFlightPerGroup ?? options.maxInFlight);
  }

  get activeCount(): number {
    return this.inFlight;
  }

  /** Partitions assigned when this member last joined its group; undefined before joining or after a crash. */
  get assignedPartitions(): number | undefined {
    return this.assigned;
  }

  async start(): Promise<void> {
    const { groupId, topics, fromBeginning = false } = this.options;
    // A member that dies without leaving is noticed after the session timeout: keep it short so its partitions
    // (and their uncommitted records) move to a live member quickly. A rebalance (a member joining or leaving, as at
    // each step of a rolling restart) stops every member until the last one has learnt of it from a heartbeat: a short
    // interval keeps that wait short, and heartbeats go out in the background (kafkajs-heartbeat-coordinator.ts), so
    // no fetch waits for their answers.
    const consumer = this.kafka.consumer({
      groupId,
      allowAutoTopicCreation: false,
      maxWaitTimeInMs: 100,
      sessionTimeout: 10_000,
      heartbeatInterval: 250,
      ...(this.options.fetchBytesPerPartition !== undefined && {
        maxBytesPerPartition: this.options.fetchBytesPerPartition,
      }),
    });
    this.consumer = consumer;
    // A new generation starts from the committed offsets: forget what the previous one tracked.
    consumer.on(consumer.events.GROUP_JOIN, ({ payload }) => {
      this.options.logger.info(
        { groupId, joinMs: payload.duration, leader: payload.isLeader, assignment: payload.memberAssignment },
        'joined the consumer group',
      );
      this.joins += 1;
      this.options.onJoin?.();
      void this.describeMembership(this.joins, payload.memberId);
      this.trackers.clear();
      this.parkedUntil.clear();
      this.boundaries.clear();
      void this.readEnds(this.joins, Object.keys(payload.memberAssignment));
      this.assigned = Object.values(payload.memberAssignment).reduce((sum, parts) => sum + parts.length, 0);
      this.assignment = payload.memberAssignment;
      // A pause outlives a rebalance in kafkajs: the next check decides afresh, from the new assignment.
      this.resumeQuiet();
    });
    consumer.on(consumer.events.REBALANCING, () => {
      this.joins += 1;
      this.options.onMembership?.(undefined);
    });
    // kafkajs restarts a consumer after a retriable crash by itself; one it will not restart must not go unnoticed.
    consumer.on(consumer.events.CRASH, ({ payload }) => {
      this.options.logger.error({ err: payload.error, restart: payload.restart, groupId }, 'consumer crashed');
      this.assigned = undefined;
      if (!payload.restart) this.options.onFatal?.(payload.error);
    });
    this.admin = this.kafka.admin();
    await this.admin.connect();
    await consumer.connect();
    await consumer.subscribe({ topics, fromBeginning });
    await consumer.run({
      autoCommit: false,
      eachBatchAutoResolve: false,
      partitionsConsumedConcurrently: 4,
      eachBatch: async ({ batch, resolveOffset, heartbeat, pause, isRunning, isStale }) => {
        this.options.metrics?.lag(batch.topic, batch.partition, Number(batch.offsetLag()));
        // kafkajs hands a batch only after the join that fetched it, so its end is at or past the join's.
        const partitionKey = `${batch.topic}\u0000${batch.partition}`;
        let boundary = this.boundaries.get(partitionKey);
        if (boundary === undefined) {
          boundary = BigInt(batch.highWatermark);
          this.boundaries.set(partitionKey, boundary);
        }
        for (const message of batch.messages) {
          if (!isRunning() || isStale() || this.stopping) return;
          const record = toRecord(batch.topic, batch.partition, message);
          record.redelivered = BigInt(message.offset) < boundary;
          const due = this.options.dueAt?.(record);
          if (due !== undefined && due > Date.now()) {
            // Leave the record unresolved so the fetch resumes from it, and wake the partition dueSlackMs after it is due.
            const resume = pause();
            const timer = setTimeout(
              () => {
                this.resumeTimers.delete(timer);
                resume();
              },
              due - Date.now() + (this.options.dueSlackMs ?? 0),
            );
            this.resumeTimers.add(timer);
            return;
          }
          const laneKey = this.options.lane?.of(record);
          if (laneKey !== undefined && this.mustPark(record, laneKey)) {
            // Bounded like any record read ahead: a broker that does not take them holds up reading, not memory.
            await this.waitForRoom(record, undefined, heartbeat);
            const tracker = this.tracker(batch.topic, batch.partition);
            tracker.begin(message.offset);
            resolveOffset(message.offset);
            void this.park(record, laneKey, () => tracker.finish(message.offset));
            continue;
          }
          await this.waitForRoom(record, laneKey, heartbeat);
          const tracker = this.tracker(batch.topic, batch.partition);
          tracker.begin(message.offset);
          resolveOffset(message.offset);
          void this.run(record, laneKey, () => tracker.finish(message.offset), this.joins);
        }
        await heartbeat();
      },
    });
    this.commitTimer = setInterval(() => void this.commit(), 200);
    const waitMs = this.options.lane?.overflow?.waitMs ?? 0;
    if (waitMs > 0) {
      this.slowLaneTimer = setInterval(() => this.moveSlowBacklogs(), Math.min(250, Math.max(10, waitMs / 2)));
      this.slowLaneTimer.unref();
    }
    const quiet = this.options.quiet;
    if (quiet && quiet.topics.length > 0) {
      this.quietTimer = setInterval(() => void this.checkQuiet(quiet.topics), quiet.checkEveryMs);
      this.quietTimer.unref();
    }
  }

  /** Partitions left out of the fetches now because they are empty (options.quiet). */
  get quietPartitions(): number {
    return this.quietPaused.size;
  }

  /**
   * Pauses the quiet topics' assigned partitions whose end is the group's committed offset (nothing to read, nothing
   * in flight), resumes those paused here that have grown. A check that cannot read the offsets resumes them all.
   */
  private async checkQuiet(topics: readonly string[]): Promise<void> {
    const consumer = this.consumer;
    if (!consumer || !this.admin || this.stopping || this.quietChecking) return;
    this.quietChecking = true;
    const join = this.joins;
    try {
      const assigned = topics.filter((topic) => (this.assignment[topic]?.length ?? 0) > 0);
      if (assigned.length === 0) return;
      const committed = new Map<string, bigint>();
      for (const { topic, partitions } of await this.admin.fetchOffsets({
        groupId: this.options.groupId,
        topics: assigned,
      })) {
        for (const { partition, offset } of partitions) committed.set(`${topic}\u0000${partition}`, BigInt(offset));
      }
      const ends = await Promise.all(
        assigned.map(async (topic) => [topic, await this.admin!.fetchTopicOffsets(topic)] as const),
      );
      this.quietFailing = false;
      // A rebalance or a stop while reading: the figures may be of partitions this member no longer has.
      if (join !== this.joins || this.stopping) return;
      for (const [topic, offsets] of ends) {
        const mine = new Set(this.assignment[topic]);
        for (const { partition, high, low } of offsets) {
          if (!mine.has(partition)) continue;
          const key = `${topic}\u0000${partition}`;
          const at = committed.get(key) ?? -1n;
          // Nothing committed yet: the group reads from the oldest offset (fromBeginning) or is not known to be idle.
          const empty = at >= 0n ? at >= BigInt(high) : this.options.fromBeginning === true && low === high;
          if (empty && !this.quietPaused.has(key)) {
            this.quietPaused.add(key);
            consumer.pause([{ topic, partitions: [partition] }]);
          } else if (!empty && this.quietPaused.has(key)) {
            this.quietPaused.delete(key);
            consumer.resume([{ topic, partitions: [partition] }]);
          }
        }
      }
    } catch (error) {
      // Stopped meanwhile (its admin client closed under the read, its consumer disconnected): nothing to resume.
      if (this.stopping) return;
      if (!this.quietFailing) {
        this.options.logger.warn(
          { err: error },
          "could not read the quiet topics' offsets; their partitions are fetched",
        );
      }
      this.quietFailing = true;
      this.resumeQuiet();
    } finally {
      this.quietChecking = false;
    }
  }

  /**
   * Resumes every partition the quiet check paused. A consumer between runs (kafkajs restarting it after a crash) throws
   * on resume, and has nothing paused: its next run starts with no pause.
   */
  private resumeQuiet(): void {
    if (this.quietPaused.size === 0) return;
    const partitions = [...this.quietPaused].map((key) => key.split('\u0000') as [string, string]);
    this.quietPaused.clear();
    try {
      for (const [topic, partition] of partitions) this.consumer?.resume([{ topic, partitions: [Number(partition)] }]);
    } catch (error) {
      this.options.logger.debug({ err: error }, 'quiet partitions not resumed: the consumer is not running');
    }
  }

  /** Stops fetching, waits for in-flight records, commits what finished, and leaves the group. */
  async stop(): Promise<void> {
    this.stopping = true;
    this.joins += 1;
    this.options.onMembership?.(undefined);
    clearInterval(this.quietTimer);
    clearInterval(this.slowLaneTimer);
    for (const timer of this.resumeTimers) clearTimeout(timer);
    // Records waiting for their pace: let them through, they end at once unstarted (stopping) and stay uncommitted.
    for (const [key, lane] of this.lanes) {
      clearTimeout(lane.paceTimer);
      lane.paceTimer = undefined;
      this.admit(key, lane);
    }
    const started = Date.now();
    await this.consumer?.pause(this.options.topics.map((topic) => ({ topic })));
    if (this.buffered > 0) await new Promise<void>((resolve) => this.idle.push(resolve));
    const drainedMs = Date.now() - started;
    clearInterval(this.commitTimer);
    await this.commit();
    const committedMs = Date.now() - started;
    await this.consumer?.disconnect();
    // Until the group has rebalanced, this member's partitions are read by no one.
    this.options.logger.info(
      { groupId: this.options.groupId, drainedMs, committedMs, leftMs: Date.now() - started },
      'left the consumer group',
    );
    await this.admin?.disconnect();
  }

  /**
   * Reads the group's members and their partitions after join `join`, until the group is stable (every member has its
   * assignment) or a newer join or rebalance makes this one moot; then tells onMembership.
   */
  private async describeMembership(join: number, self: string): Promise<void> {
    if (!this.options.onMembership) return;
    for (let attempt = 0; join === this.joins && !this.stopping; attempt += 1) {
      try {
        const members = await stableGroupMembers(this.admin!, this.options.groupId);
        if (members && join === this.joins) {
          this.options.onMembership({ self, members });
          return;
        }
      } catch (error) {
        this.options.logger.warn({ err: error }, 'could not describe the consumer group after joining');
      }
      await new Promise((resolve) => setTimeout(resolve, Math.min(100 * 2 ** attempt, 2_000)));
    }
  }

  /**
   * Reads the ends of the assigned topics' partitions after join `join` and lowers their boundaries to them (see
   * boundaries). Read after the join, each is at or after the partition's end at the join.
   */
  private async readEnds(join: number, topics: string[]): Promise<void> {
    try {
      const ends = await Promise.all(
        topics.map(async (topic) => ({ topic, offsets: await this.admin!.fetchTopicOffsets(topic) })),
      );
      if (join !== this.joins) return;
      for (const { topic, offsets } of ends) {
        for (const { partition, high } of offsets) {
          const key = `${topic}\u0000${partition}`;
          const end = BigInt(high);
          const seen = this.boundaries.get(key);
          if (seen === undefined || end < seen) this.boundaries.set(key, end);
        }
      }
    } catch (error) {
      // A rebalance or a stop since (its admin client disconnected) makes the read moot.
      if (join === this.joins)
        this.options.logger.warn(
          { err: error },
          "could not read the partitions' ends after joining; first fetches stand in",
        );
    }
  }

  /** Commits the finished prefix of every partition; an error (rebalance) only delays it to the next call. */
  async commit(): Promise<void> {
    const offsets = [...this.trackers.values()].flatMap((tracker) => tracker.takeCommittable());
    if (offsets.length === 0 || !this.consumer) return;
    try {
      await this.consumer.commitOffsets(offsets);
    } catch (error) {
      this.options.logger.warn({ err: error }, 'offset commit failed; the records will be handled again');
    }
  }

  /**
   * Handles a record once its lane admits it and a slot is free; `finished` runs before the record leaves the buffer,
   * so stop() never commits ahead of it. The lane comes first: records of a lane at its limit wait without holding
   * one of the maxInFlight slots, so one slow subscription cannot starve the others. `generation` is the group
   * generation the record was fetched in: one that has ended by the time the record could start is not started.
   */
  private async run(
    record: ConsumedRecord,
    laneKey: string | undefined,
    finished: () => void,
    generation: number,
  ): Promise<void> {
    const prepare = this.options.lane?.pace?.prepare;
    if (prepare && laneKey !== undefined) {
      // Before the lane is looked up: a lane emptied meanwhile is deleted, and this record must join the live one.
      try {
        await prepare(laneKey, record);
      } catch (error) {
        this.options.logger.warn({ err: error, topic: record.topic, offset: record.offset }, 'lane pace lookup failed');
      }
    }
    // Asked only when there is a group to ask: without one, the record enters its lane in this same turn.
    const group = this.options.lane?.group ? await this.groupOf(record) : '';
    let lane: Lane | undefined;
    if (laneKey !== undefined) {
      lane = this.lanes.get(laneKey) ?? {
        active: 0,
        waiting: [],
        holding: 0,
        progressAt: 0,
        admittedAt: 0,
        waitingSince: 0,
      };
      this.lanes.set(laneKey, lane);
    }
    const size = record.value?.length ?? 0;
    let entered = lane === undefined;
    try {
      if (lane && laneKey !== undefined) {
        entered = await this.enterLane(laneKey, lane);
        if (!entered) {
          // Its lane was found slow while it waited (moveSlowBacklogs): aside, unless its generation has ended.
          if (this.stopping || generation !== this.joins) return;
          await this.putAside(record, laneKey);
          finished();
          return;
        }
      }
      const release = await this.slots.take(group, laneKey ?? '');
      this.inFlight += 1;
      this.options.metrics?.inFlight(this.inFlight);
      const startedAt = Date.now();
      if (lane && lane.holding++ === 0) lane.progressAt = startedAt;
      try {
        // Stopping, or the group rebalancing since the record was fetched: a record not started yet stays unfinished,
        // so it is not committed, and whoever owns its partition next reads it again, flagged as redelivered. Started
        // here too, it would be sent by two members at once (both reading its stored state as still queued).
        if (this.stopping || generation !== this.joins) return;
        await this.handleUntilDurable(record, { release });
        finished();
      } finally {
        release();
        this.inFlight -= 1;
        this.options.metrics?.inFlight(this.inFlight);
        if (lane) {
          const now = Date.now();
          const took = now - startedAt;
          lane.holding -= 1;
          lane.progressAt = now;
          lane.meanMs = lane.meanMs === undefined ? took : lane.meanMs * 0.9 + took * 0.1;
          this.meanHoldMs = this.meanHoldMs === undefined ? took : this.meanHoldMs * 0.95 + took * 0.05;
          this.finishedAt = now;
        }
      }
    } finally {
      if (lane && laneKey !== undefined && entered) this.leaveLane(laneKey, lane);
      this.buffered -= 1;
      this.bufferedBytes -= size;
      for (const wake of this.roomWaiters.splice(0)) wake();
      if (this.buffered === 0) for (const resolve of this.idle.splice(0)) resolve();
    }
  }

  /**
   * Whether the record goes aside (lane.overflow): its lane is full, or parked records of it are still aside. A lane is
   * full at overflow.bound records waiting, or sooner at its share of half the read-ahead buffer among the lanes with
   * records waiting: a hundred backlogged subscriptions would otherwise fill the buffer below their bound each, and
   * then nobody's records were read.
   */
  private mustPark(record: ConsumedRecord, laneKey: string): boolean {
    const overflow = this.options.lane?.overflow;
    if (!overflow || this.stopping) return false;
    const lane = this.lanes.get(laneKey);
    if (lane !== undefined && lane.waiting.length >= this.laneBound(laneKey) && this.isSlow(laneKey, lane)) return true;
    if (record.topic === overflow.topic) return false;
    const until = this.parkedUntil.get(laneKey);
    if (until === undefined) return false;
    if (until > Date.now()) return true;
    this.parkedUntil.delete(laneKey);
    return false;
  }

  /**
   * Waiting records a lane may hold before its next ones are parked, if it is slow: overflow.bound, or sooner its
   * share of half the read-ahead buffer among the lanes with records waiting (a hundred backlogged subscriptions would
   * otherwise fill the buffer below their bound each, and then nobody's records were read).
   */
  private laneBound(laneKey: string): number {
    const share = Math.floor(this.maxBuffered / 2 / Math.max(1, this.waitingLanes));
    return Math.max(1, Math.min(this.options.lane!.overflow!.bound(laneKey), share));
  }

  /** Whether the lane's waiting records would take longer than overflow.waitMs to start at its pace (see overflow). */
  private isSlow(laneKey: string, lane: Lane): boolean {
    const waitMs = this.options.lane?.overflow?.waitMs ?? 0;
    if (waitMs <= 0) return true;
    // Held by its pace: waiting for it now, at the pace measured between its admissions.
    if (lane.paceTimer !== undefined && lane.waiting.length * (lane.gapMs ?? 0) > waitMs) return true;
    // Nothing has finished anywhere yet: nothing to compare the lane with.
    if (this.meanHoldMs === undefined) return false;
    // Measured to the last record finished anywhere: a stalled event loop or a busy process stalls every lane alike.
    const stalledMs = lane.holding > 0 ? this.finishedAt - lane.progressAt : 0;
    const holdMs = Math.max(lane.meanMs ?? 0, stalledMs);
    if (holdMs < SLOWER_THAN_THE_REST * this.meanHoldMs) return false;
    return (lane.waiting.length * holdMs) / this.laneLimit(laneKey) > waitMs;
  }

  /** Parks the waiting records beyond their lane's bound of every lane found slow since they entered it. */
  private moveSlowBacklogs(): void {
    if (this.stopping) return;
    for (const [key, lane] of this.lanes) {
      if (lane.waiting.length <= 1) continue;
      const bound = this.laneBound(key);
      if (lane.waiting.length <= bound || !this.isSlow(key, lane)) continue;
      // The newest go: the lane's order is kept as far as the overflow's delay allows (parkedUntil puts later ones
      // behind them). The bound is at least 1, so the lane keeps a record waiting and waitingLanes is unchanged.
      for (const resolve of lane.waiting.splice(bound)) resolve(false);
    }
  }

  /**
   * Moves a record aside until it succeeds (a broker error only delays it), then lets its offset be committed. It
   * counts as buffered meanwhile (waitForRoom counted it in), so stop() waits for it; it holds no lane and no slot.
   */
  private async park(record: ConsumedRecord, laneKey: string, finished: () => void): Promise<void> {
    const size = record.value?.length ?? 0;
    try {
      await this.putAside(record, laneKey);
      finished();
    } finally {
      this.buffered -= 1;
      this.bufferedBytes -= size;
      for (const wake of this.roomWaiters.splice(0)) wake();
      if (this.buffered === 0) for (const resolve of this.idle.splice(0)) resolve();
    }
  }

  /** Parks a record on the overflow topic, trying again until it succeeds (a broker error only delays it). */
  private async putAside(record: ConsumedRecord, laneKey: string): Promise<void> {
    const overflow = this.options.lane!.overflow!;
    if (!this.parkedUntil.has(laneKey)) {
      const lane = this.lanes.get(laneKey);
      // Why the lane counts as slow, once per stretch of parking (each record of it is parked for delayMs after).
      this.options.logger.debug(
        {
          lane: laneKey,
          waiting: lane?.waiting.length,
          limit: this.laneLimit(laneKey),
          meanMs: lane?.meanMs,
          stalledMs: lane && lane.holding > 0 ? this.finishedAt - lane.progressAt : 0,
          gapMs: lane?.gapMs,
          paced: lane?.paceTimer !== undefined,
          runnerMeanMs: this.meanHoldMs,
        },
        "a slow lane's backlog parked",
      );
    }
    this.parkedUntil.set(laneKey, Date.now() + overflow.delayMs);
    for (let attempt = 0; ; attempt += 1) {
      try {
        await overflow.park(record);
        break;
      } catch (error) {
        const retryInMs = backoffDelay(attempt);
        this.options.logger.error(
          { err: error, topic: record.topic, partition: record.partition, offset: record.offset, retryInMs },
          'parking a record failed; retrying',
        );
        await new Promise((resolve) => setTimeout(resolve, retryInMs));
      }
    }
    this.options.metrics?.parked(record.topic);
  }

  /**
   * A handler error means the outcome is not durable yet (store or broker down): try again, never skip; except a
   * PoisonRecordError, which no retry can cure. A record tried again is flagged as redelivered.
   */
  private async handleUntilDurable(record: ConsumedRecord, slot: { release(): void }): Promise<void> {
    for (let attempt = 0; ; attempt += 1) {
      try {
        await this.options.handle(record, slot);
        this.backoff.succeeded();
        return;
      } catch (error) {
        if (error instanceof PoisonRecordError) {
          this.options.metrics?.poison(record.topic);
          this.options.logger.error(
            { err: error, topic: record.topic, partition: record.partition, offset: record.offset, outcome: 'poison' },
            'record can never be handled; skipped',
          );
          return;
        }
        // The failed try may have done part of its work (a router's publish that reached some partitions and not
        // others): the next one checks what was done before acting again, as for a record a previous owner handled.
        record.redelivered = true;
        this.options.logger.error(
          {
            err: error,
            topic: record.topic,
            partition: record.partition,
            offset: record.offset,
            retryInMs: backoffDelay(attempt),
          },
          'handler failed; retrying the record',
        );
        // Cut short once another record's handling succeeds after an outage (recovery-backoff.ts).
        await this.backoff.wait(attempt);
      }
    }
  }

  /**
   * Waits (heartbeating) until the buffer has room for the record, then counts it in. A lane holding half the buffer
   * holds up only the partition being read, not the others.
   */
  private async waitForRoom(record: ConsumedRecord, laneKey: string | undefined, heartbeat: () => Promise<void>) {
    const size = record.value?.length ?? 0;
    const laneShare = Math.max(1, Math.floor(this.maxBuffered / 2));
    const full = () => {
      if (this.buffered >= this.maxBuffered) return true;
      // A record larger than the byte budget still gets through alone.
      if (this.buffered > 0 && this.bufferedBytes + size > this.maxBufferedBytes) return true;
      const lane = laneKey === undefined ? undefined : this.lanes.get(laneKey);
      return lane !== undefined && lane.active + lane.waiting.length >= laneShare;
    };
    while (full()) {
      await Promise.race([
        new Promise<void>((resolve) => this.roomWaiters.push(resolve)),
        new Promise((resolve) => setTimeout(resolve, 1_000)),
      ]);
      await heartbeat();
    }
    this.buffered += 1;
    this.bufferedBytes += size;
  }

  /** The record's group for FairSlots ('' without lane.group, or when it cannot be told). */
  private async groupOf(record: ConsumedRecord): Promise<string> {
    const group = this.options.lane?.group;
    if (!group) return '';
    try {
      return await group(record);
    } catch (error) {
      this.options.logger.warn({ err: error, topic: record.topic, offset: record.offset }, 'lane group lookup failed');
      return '';
    }
  }

  /**
   * Queues the record in its lane and lets the lane's head in if the lane is under its limit. Resolves true once the
   * record entered, false if it was moved out of the lane's queue to be parked (moveSlowBacklogs).
   */
  private enterLane(key: string, lane: Lane): Promise<boolean> {
    const entered = new Promise<boolean>((resolve) => lane.waiting.push(resolve));
    if (lane.waiting.length === 1) {
      this.waitingLanes += 1;
      lane.waitingSince = Date.now();
    }
    this.admit(key, lane);
    return entered;
  }

  private leaveLane(key: string, lane: Lane): void {
    lane.active -= 1;
    this.admit(key, lane);
    if (lane.active === 0 && lane.waiting.length === 0) this.lanes.delete(key);
  }

  /**
   * Lets a lane's waiting records in, first come first served, while it is under its limit as read now: a lowered
   * limit admits nobody until enough have left, a raised one admits several at once. Since the limit is at least 1,
   * a lane with records waiting always has one active, whose leaving reads the limit again: no lane is forgotten. A
   * paced lane also needs its pace's leave for each record; when told to wait, a timer asks again (and until it fires,
   * nothing else does: a lane has at most one timer).
   */
  private admit(key: string, lane: Lane): void {
    const pace = this.options.lane?.pace;
    while (lane.waiting.length > 0 && lane.active < this.laneLimit(key)) {
      if (pace && !this.stopping) {
        if (lane.paceTimer) return;
        const waitMs = pace.wait(key);
        if (waitMs > 0) {
          lane.paceTimer = setTimeout(() => {
            lane.paceTimer = undefined;
            this.admit(key, lane);
          }, waitMs);
          return;
        }
      }
      lane.active += 1;
      const now = Date.now();
      const gap = now - Math.max(lane.admittedAt, lane.waitingSince);
      lane.gapMs = lane.gapMs === undefined ? gap : lane.gapMs * 0.8 + gap * 0.2;
      lane.admittedAt = now;
      lane.waiting.shift()!(true);
      if (lane.waiting.length === 0) this.waitingLanes -= 1;
    }
  }

  private laneLimit(key: string): number {
    const limit = this.options.lane?.limit ?? Infinity;
    const value = typeof limit === 'function' ? limit(key) : limit;
    return value >= 1 ? value : 1; // NaN, 0 and negative values count as 1
  }

  private tracker(topic: string, partition: number): OffsetTracker {
    const key = `${topic}\u0000${partition}`;
    let tracker = this.trackers.get(key);
    if (!tracker) {
      tracker = new OffsetTracker(topic, partition);
      this.trackers.set(key, tracker);
    }
    return tracker;
  }
}

/** The records of one concurrency lane being handled, and those waiting for their turn. */
/** How many times the runner's mean time a lane's records must hold their slot to count as slow (overflow.waitMs). */
const SLOWER_THAN_THE_REST = 8;

interface Lane {
  /** Records admitted (holding a slot, or waiting for one). */
  active: number;
  /** Records queued for admission: told true when they enter, false when moved out to be parked. */
  waiting: ((entered: boolean) => void)[];
  /** Records holding a slot, and since when the lane has held one without any finishing (or when one last finished). */
  holding: number;
  progressAt: number;
  /** Moving mean of how long its records held a slot; unknown until one has finished. */
  meanMs?: number;
  /** When a record last entered, when the lane last started having records waiting, and the moving mean of the time
   * a waiting record waited for the admission before its own (the lane's pace while backlogged). */
  admittedAt: number;
  waitingSince: number;
  gapMs?: number;
  /** Set while the lane waits for its pace (a rate limit) to let the next record start. */
  paceTimer?: NodeJS.Timeout;
}

/** Tracks the records of one partition in flight and yields the offset up to which all have finished. */
export class OffsetTracker {
  private readonly open: bigint[] = [];
  private readonly finished = new Set<bigint>();
  private highest = -1n;
  private committed = -1n;

  constructor(
    readonly topic: string,
    readonly partition: number,
  ) {}

  begin(offset: string): void {
    const value = BigInt(offset);
    this.open.push(value);
    if (value > this.highest) this.highest = value;
  }

  finish(offset: string): void {
    this.finished.add(BigInt(offset));
  }

  /** The commit (next offset to read) for the finished prefix, once per advance. */
  takeCommittable(): { topic: string; partition: number; offset: string }[] {
    while (this.open.length > 0 && this.finished.has(this.open[0]!)) this.finished.delete(this.open.shift()!);
    const next = this.open.length > 0 ? this.open[0]! : this.highest + 1n;
    if (this.highest < 0n || next <= this.committed) return [];
    this.committed = next;
    return [{ topic: this.topic, partition: this.partition, offset: next.toString() }];
  }
}

function toRecord(
  topic: string,
  partition: number,
  message: { offset: string; key: Buffer | null; value: Buffer | null; headers?: IHeaders; timestamp: string },
): ConsumedRecord {
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(message.headers ?? {})) {
    if (value !== undefined) headers[name] = Buffer.isBuffer(value) ? value.toString('utf8') : String(value);
  }
  return {
    topic,
    partition,
    offset: message.offset,
    key: message.key,
    value: message.value,
    headers,
    timestamp: Number(message.timestamp),
  };
}

type TopicToApply = { name: string; partitions: number; replicationFactor?: number; config?: Record<string, string> };

/**
 * Creates or widens topics; existing topics keep their data. A retriable broker error is tried again from the start
 * (applying is idempotent): kafkajs' createTopics, waiting for the new topics' leaders, throws the broker's
 * UNKNOWN_TOPIC_OR_PARTITION when a metadata read comes before the controller has propagated them, as it does when
 * several clients create topics at once.
 */
export async function applyTopics(
  kafka: Kafka,
  topics: TopicToApply[],
  sleep: (ms: number) => Promise<void> = (ms) => new Promise((resolve) => setTimeout(resolve, ms)),
): Promise<{ created: string[]; unchanged: string[] }> {
  const admin: Admin = kafka.admin();
  await admin.connect();
  try {
    const before = new Set(await admin.listTopics());
    for (let attempt = 1; ; attempt += 1) {
      try {
        await applyWith(admin, topics);
        break;
      } catch (error) {
        if (attempt >= 6 || (error as { retriable?: unknown }).retriable !== true) throw error;
        await sleep(250 * 2 ** (attempt - 1));
      }
    }
    return {
      created: topics.filter((topic) => !before.has(topic.name)).map((topic) => topic.name),
      unchanged: topics.filter((topic) => before.has(topic.name)).map((topic) => topic.name),
    };
  } finally {
    await admin.disconnect();
  }
}

async function applyWith(admin: Admin, topics: TopicToApply[]): Promise<void> {
  const existing = new Set(await admin.listTopics());
  const missing = topics.filter((topic) => !existing.has(topic.name));
  if (missing.length > 0) {
    await admin.createTopics({
      waitForLeaders: true,
      topics: missing.map((topic) => ({
        topic: topic.name,
        numPartitions: topic.partitions,
        // -1: the broker's default.replication.factor. An existing topic keeps its replicas (that is a reassignment).
        replicationFactor: topic.replicationFactor ?? -1,
        configEntries: Object.entries(topic.config ?? {}).map(([name, value]) => ({ name, value })),
      })),
    });
  }
  const present = topics.filter((topic) => existing.has(topic.name));
  if (present.length === 0) return;
  const metadata = await admin.fetchTopicMetadata({ topics: present.map((topic) => topic.name) });
  const grow = present.filter((topic) => {
    const found = metadata.topics.find((entry) => entry.name === topic.name);
    return found !== undefined && found.partitions.length < topic.partitions;
  });
  if (grow.length > 0) {
    await admin.createPartitions({ topicPartitions: grow.map((t) => ({ topic: t.name, count: t.partitions })) });
  }
  const configured = present.filter((topic) => topic.config && Object.keys(topic.config).length > 0);
  if (configured.length > 0) {
    await admin.alterConfigs({
      validateOnly: false,
      resources: configured.map((topic) => ({
        type: 2, // ConfigResourceTypes.TOPIC
        name: topic.name,
        configEntries: Object.entries(topic.config ?? {}).map(([name, value]) => ({ name, value })),
      })),
    });
  }
}

export type { KafkaClient as Kafka };

/** Follows a (compacted) topic from its beginning in a throwaway group, calling `onRecord` for every record. */
export async function tailTopic(
  kafka: Kafka,
  topic: string,
  groupId: string,
  onRecord: (record: ConsumedRecord) => Promise<void>,
  { fromBeginning = true, maxWaitMs = 200 }: { fromBeginning?: boolean; maxWaitMs?: number } = {},
): Promise<{ stop(): Promise<void> }> {
  const consumer = kafka.consumer({ groupId, maxWaitTimeInMs: maxWaitMs });
  await consumer.connect();
  await consumer.subscribe({ topics: [topic], fromBeginning });
  await consumer.run({
    autoCommit: false,
    eachMessage: async ({ topic: name, partition, message }) => onRecord(toRecord(name, partition, message)),
  });
  return { stop: () => consumer.disconnect() };
}
