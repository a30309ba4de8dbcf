import { createRequire } from 'node:module';
import { describe, expect, it } from 'vitest';
import {
  decodeV7,
  newestLeaders,
  patchLeaderEpochs,
  refreshFromEveryBroker,
  refreshWhenExpired,
  type ClusterMetadata,
  type PartitionMetadata,
} from './kafkajs-leader-epochs.ts';

const require = createRequire(import.meta.url);
const Encoder = require('kafkajs/src/protocol/encoder.js') as new () => KafkaEncoder;
const Decoder = require('kafkajs/src/protocol/decoder.js');
const { requests, lookup } = require('kafkajs/src/protocol/requests/index.js') as {
  requests: { Metadata: unknown };
  lookup: (
    versions: Record<number, { minVersion: number; maxVersion: number }>,
  ) => (
    apiKey: number,
    definition: unknown,
  ) => (options: object) => { request: { apiVersion: number }; response: { decode(data: Buffer): Promise<unknown> } };
};
interface KafkaEncoder {
  writeInt16(value: number): KafkaEncoder;
  writeInt32(value: number): KafkaEncoder;
  writeString(value: string | null): KafkaEncoder;
  writeBoolean(value: boolean): KafkaEncoder;
  writeArray(values: unknown[], type?: string): KafkaEncoder;
  buffer: Buffer;
}
const METADATA = 3;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Partition `id` of a topic, led by `leader` in `epoch`. */
const part = (id: number, leader: number, epoch: number): PartitionMetadata => ({
  partitionErrorCode: 0,
  partitionId: id,
  leader,
  leaderEpoch: epoch,
  replicas: [1, 2, 3],
  isr: [1, 2, 3],
  offlineReplicas: [],
});
/** An answer naming brokers 1-3 and the leaders of topic t's partitions. */
const answer = (...partitions: PartitionMetadata[]): ClusterMetadata => ({
  brokers: [1, 2, 3].map((nodeId) => ({ nodeId, host: `127.0.0.1${nodeId}`, port: 9092 })),
  topicMetadata: [{ topic: 't', partitionMetadata: partitions }],
});
const leaders = (metadata: ClusterMetadata | null) =>
  metadata?.topicMetadata[0]!.partitionMetadata.map(({ leader, leaderEpoch }) => `${leader}@${leaderEpoch}`);

describe('Metadata version 7 in kafkajs (patched)', () => {
  it('is asked of brokers that support it, and its answers carry each leader epoch', async () => {
    patchLeaderEpochs();
    const metadata = lookup({ [METADATA]: { minVersion: 0, maxVersion: 12 } })(METADATA, requests.Metadata)({
      topics: ['t'],
      allowAutoTopicCreation: false,
    });
    expect(metadata.request.apiVersion).toBe(7);
    // A broker of before version 7 is still asked with what it supports.
    const older = lookup({ [METADATA]: { minVersion: 0, maxVersion: 5 } })(METADATA, requests.Metadata)({
      topics: ['t'],
    });
    expect(older.request.apiVersion).toBe(5);

    const written = new Encoder()
      .writeInt32(0) // throttle
      .writeArray([new Encoder().writeInt32(2).writeString('127.0.0.12').writeInt32(9092).writeString('rack2')])
      .writeString('cluster')
      .writeInt32(1) // controller
      .writeArray([
        new Encoder()
          .writeInt16(0)
          .writeString('t')
          .writeBoolean(false)
          .writeArray([
            new Encoder()
              .writeInt16(0)
              .writeInt32(0) // partition
              .writeInt32(2) // leader
              .writeInt32(7) // leader epoch
              .writeArray([2, 1, 3], 'int32')
              .writeArray([2, 1], 'int32')
              .writeArray([3], 'int32'),
          ]),
      ]).buffer;
    expect(await metadata.response.decode(written)).toEqual(await decodeV7(Decoder)(written));
    expect(await decodeV7(Decoder)(written)).toMatchObject({
      brokers: [{ nodeId: 2, host: '127.0.0.12', port: 9092, rack: 'rack2' }],
      controllerId: 1,
      topicMetadata: [
        {
          topic: 't',
          partitionMetadata: [
            { partitionId: 0, leader: 2, leaderEpoch: 7, replicas: [2, 1, 3], isr: [2, 1], offlineReplicas: [3] },
          ],
        },
      ],
    });
  });
});

describe('newestLeaders', () => {
  it("takes each partition's leader from the answer with the newest epoch", () => {
    // Broker 3, cut off, still names itself; broker 1 knows that partition 0 moved to it and partition 1 to broker 2.
    const cut = answer(part(0, 3, 4), part(1, 3, 4), part(2, 1, 9));
    const current = answer(part(0, 1, 5), part(1, 2, 5), part(2, 1, 8));
    expect(leaders(newestLeaders(cut, [cut, current], new Set([1, 2, 3])))).toEqual(['1@5', '2@5', '1@9']);
  });

  it('keeps the answer as it is when no other is newer, or the newer leader is not a known broker', () => {
    const own = answer(part(0, 1, 5));
    expect(newestLeaders(own, [answer(part(0, 3, 4)), answer(part(0, 2, 5))], new Set([1, 2, 3]))).toBe(own);
    expect(newestLeaders(own, [answer(part(0, 4, 6))], new Set([1, 2, 3]))).toBe(own);
  });
});

describe('refreshFromEveryBroker', () => {
  /** A broker pool whose own refresh answers with `primary`; its other brokers answer as given. */
  function pool(primary: ClusterMetadata, others: { connected: boolean; answer: () => Promise<ClusterMetadata> }[]) {
    const asked: number[] = [];
    const state = {
      metadata: null as ClusterMetadata | null,
      metadataExpireAt: null,
      refreshMetadataIfNecessary: async () => {},
      brokers: Object.fromEntries(
        others.map((other, i) => [
          String(i + 1),
          {
            isConnected: () => other.connected,
            metadata: () => {
              asked.push(i + 1);
              return other.answer();
            },
          },
        ]),
      ),
      refreshMetadata: refreshFromEveryBroker(async function (this: { metadata: ClusterMetadata | null }) {
        await sleep(20);
        this.metadata = primary;
      }),
    };
    return { state, asked };
  }

  it('asks no other broker when there is only one', async () => {
    const { state, asked } = pool(answer(part(0, 1, 5)), [
      { connected: true, answer: async () => answer(part(0, 1, 5)) },
      { connected: false, answer: async () => answer(part(0, 2, 6)) },
    ]);
    await state.refreshMetadata(['t']);
    expect(asked).toEqual([]);
    expect(leaders(state.metadata)).toEqual(['1@5']);
  });

  it('asks every connected broker and takes the newest leaders, a late answer when it comes', async () => {
    const cut = answer(part(0, 3, 4), part(1, 3, 4));
    const { state, asked } = pool(cut, [
      { connected: true, answer: async () => answer(part(0, 1, 5), part(1, 3, 4)) },
      {
        connected: true,
        answer: async () => {
          await sleep(150);
          return answer(part(0, 1, 5), part(1, 2, 5));
        },
      },
      { connected: true, answer: () => Promise.reject(new Error('connection closed')) },
      { connected: false, answer: async () => answer(part(0, 2, 99), part(1, 2, 99)) },
    ]);
    await state.refreshMetadata(['t']);
    expect(asked).toEqual([1, 2, 3]);
    // Broker 1 answered before kafkajs' own refresh did: applied to it.
    expect(leaders(state.metadata)).toEqual(['1@5', '3@4']);
    await sleep(200);
    expect(leaders(state.metadata)).toEqual(['1@5', '2@5']);
  });

  it('does not take a partition back to an older leader when the stale answer comes last', async () => {
    const current = answer(part(0, 1, 5));
    const { state } = pool(current, [
      { connected: true, answer: async () => current },
      {
        connected: true,
        answer: async () => {
          await sleep(100);
          return answer(part(0, 3, 4));
        },
      },
    ]);
    await state.refreshMetadata(['t']);
    await sleep(150);
    expect(leaders(state.metadata)).toEqual(['1@5']);
  });
});

describe('refreshWhenExpired', () => {
  /** A broker pool whose refresh takes 50 ms; `ifNecessary` is kafkajs' own check, counted. */
  function pool(metadata: ClusterMetadata | null, expireAt: number | null) {
    const calls = { refreshes: 0, ifNecessary: 0 };
    const state = {
      metadata,
      metadataExpireAt: expireAt,
      brokers: {},
      refreshMetadata: async () => {
        calls.refreshes += 1;
        await sleep(50);
      },
      refreshMetadataIfNecessary: refreshWhenExpired(async function () {
        calls.ifNecessary += 1;
      }),
    };
    return { state, calls };
  }

  it('reads expired leaders again in the background, one read at a time, without holding the fetch', async () => {
    const { state, calls } = pool(answer(part(0, 1, 5)), Date.now() - 1);
    const started = Date.now();
    await state.refreshMetadataIfNecessary(['t']);
    await state.refreshMetadataIfNecessary(['t']);
    expect(Date.now() - started).toBeLessThan(40);
    expect(calls).toEqual({ refreshes: 1, ifNecessary: 0 });
    await sleep(80);
    await state.refreshMetadataIfNecessary(['t']);
    expect(calls).toEqual({ refreshes: 2, ifNecessary: 0 });
  });

  it('reads nothing while the leaders are fresh', async () => {
    const { state, calls } = pool(answer(part(0, 1, 5)), Date.now() + 60_000);
    await state.refreshMetadataIfNecessary(['t']);
    expect(calls).toEqual({ refreshes: 0, ifNecessary: 0 });
  });

  it('leaves to kafkajs a topic it does not know yet, or no metadata at all (those are waited for)', async () => {
    const { state, calls } = pool(answer(part(0, 1, 5)), Date.now() - 1);
    await state.refreshMetadataIfNecessary(['t', 'new']);
    const none = pool(null, null);
    await none.state.refreshMetadataIfNecessary(['t']);
    expect([calls.ifNecessary, none.calls.ifNecessary, calls.refreshes]).toEqual([1, 1, 0]);
  });
});
