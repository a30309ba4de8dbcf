import { createRequire } from 'node:module';
import { describe, expect, it } from 'vitest';
import { patchFetchLeader, UNREACHABLE_LEADER_PAUSE_MS } from './kafkajs-fetch-leader.ts';

const require = createRequire(import.meta.url);
// kafkajs' own consumer group (one per consumer) and its protocol error for a code.
const ConsumerGroup = require('kafkajs/src/consumer/consumerGroup.js') as new (options: Record<string, unknown>) => {
  joinAndSync(): Promise<void>;
  recoverFromFetch(error: Error): Promise<void>;
};
const { createErrorFromCode } = require('kafkajs/src/protocol/error.js') as {
  createErrorFromCode(code: number): Error & { type: string };
};
const NOT_LEADER_OR_FOLLOWER = 6;
const LEADER_NOT_AVAILABLE = 5;
const FENCED_LEADER_EPOCH = 74;
const UNKNOWN_LEADER_EPOCH = 75;
const UNKNOWN_TOPIC_OR_PARTITION = 3;

const silent = { namespace: () => silent, debug() {}, info() {}, warn() {}, error() {} };

/** A member whose cluster counts metadata refreshes, and which counts its own joins. */
function member() {
  const calls = { refreshes: 0, joins: 0 };
  const group = new ConsumerGroup({
    cluster: {
      refreshMetadata: async () => {
        calls.refreshes += 1;
      },
    },
    groupId: 'dispatchers',
    topics: ['deliveries'],
    logger: silent,
    instrumentationEmitter: { emit() {} },
  });
  group.joinAndSync = async () => {
    calls.joins += 1;
  };
  return { group, calls };
}

describe('kafkajs fetches refused because a partition leader moved (patched)', () => {
  it('refreshes the metadata and fetches from the new leader, without joining the group again', async () => {
    patchFetchLeader();
    // A broker's controlled shutdown hands its partitions over: fetches to it answer NOT_LEADER_OR_FOLLOWER, then
    // the new leader may not know its epoch yet. kafkajs rejoined the group on each (the group's leader rejoining
    // rebalances every member).
    for (const code of [NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH]) {
      const { group, calls } = member();
      await group.recoverFromFetch(createErrorFromCode(code));
      expect(calls).toEqual({ refreshes: 1, joins: 0 });
    }
  });

  it('still joins again when a topic or partition is unknown (the assignment may change)', async () => {
    patchFetchLeader();
    const { group, calls } = member();
    await group.recoverFromFetch(createErrorFromCode(UNKNOWN_TOPIC_OR_PARTITION));
    expect(calls).toEqual({ refreshes: 1, joins: 1 });
  });

  it('fetches with version 10 at most, which a follower answers NOT_LEADER_OR_FOLLOWER', () => {
    patchFetchLeader();
    // With version 11 a broker serves a consumer from a follower replica: a stopping broker, now a follower that no
    // longer replicates, answered the members' fetches with nothing new until it exited (test/cluster/).
    const Fetch = require('kafkajs/src/protocol/requests/fetch/index.js') as { versions: string[] };
    expect(Math.max(...Fetch.versions.map(Number))).toBe(10);
  });

  it('reads the leaders again and pauses, without crashing or joining again, when the leader cannot be reached', async () => {
    patchFetchLeader();
    // A broker killed: connecting to it is refused until the controller fences it and its partitions move. kafkajs
    // threw the error, stopped every broker's fetcher, retried, and crashed the consumer after ten tries.
    const { KafkaJSConnectionError } = require('kafkajs/src/errors.js') as {
      KafkaJSConnectionError: new (message: string, options: { broker: string; code: string }) => Error;
    };
    const { group, calls } = member();
    const started = Date.now();
    await group.recoverFromFetch(
      new KafkaJSConnectionError('Connection error: connect ECONNREFUSED 127.0.0.13:9092', {
        broker: '127.0.0.13:9092',
        code: 'ECONNREFUSED',
      }),
    );
    expect(calls).toEqual({ refreshes: 1, joins: 0 });
    expect(Date.now() - started).toBeGreaterThanOrEqual(UNREACHABLE_LEADER_PAUSE_MS - 5);
  });

  it('leaves other errors to kafkajs', async () => {
    patchFetchLeader();
    const { group, calls } = member();
    const refused = createErrorFromCode(29); // TOPIC_AUTHORIZATION_FAILED
    await expect(group.recoverFromFetch(refused)).rejects.toBe(refused);
    expect(calls).toEqual({ refreshes: 0, joins: 0 });
  });
});
