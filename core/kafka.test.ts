import { createRequire } from 'node:module';
import { pino } from 'pino';
import { kGetBootstrapConnection } from '@platformatic/kafka';
import { afterEach, describe, expect, it, vi } from 'vitest';
import {
  applyTopics,
  ConsumerRunner,
  KAFKA_RETRY,
  OffsetTracker,
  partitionOf,
  Publisher,
  createKafka,
  producerRetryDelay,
  askNextBrokerAfterTimeouts,
  type ConsumedRecord,
  type ConsumerOptions,
  type Kafka,
} from './kafka.ts';

/** `commit: null` expects no commit; `mayRestate` also tolerates a commit of that (first unfinished) offset. */
type Step = { begin?: string[]; finish?: string[]; commit: string | null; mayRestate?: string };

/** Applies the steps and checks that each `takeCommittable` yields the expected commit, or none. */
function play(initial: string[], steps: Step[]): void {
  const tracker = new OffsetTracker('webhook.deliveries', 3);
  for (const offset of initial) tracker.begin(offset);
  // Before anything finished, a commit may at most restate the first offset handed out: never more.
  for (const entry of tracker.takeCommittable()) expect(BigInt(entry.offset)).toBeLessThanOrEqual(BigInt(initial[0]!));
  for (const [index, step] of steps.entries()) {
    for (const offset of step.begin ?? []) tracker.begin(offset);
    for (const offset of step.finish ?? []) tracker.finish(offset);
    const commits = tracker.takeCommittable();
    const expected = step.commit === null ? [] : [{ topic: 'webhook.deliveries', partition: 3, offset: step.commit }];
    if (step.mayRestate !== undefined && commits.length > 0) {
      expect(commits, `step ${index}`).toEqual([
        { topic: 'webhook.deliveries', partition: 3, offset: step.mayRestate },
      ]);
    } else {
      expect(commits, `step ${index}`).toEqual(expected);
    }
  }
}

describe('OffsetTracker', () => {
  it.each<[string, string[], Step[]]>([
    [
      'in order',
      ['0', '1', '2'],
      [
        { finish: ['0'], commit: '1' },
        { finish: ['1'], commit: '2' },
        { finish: ['2'], commit: '3' },
        { commit: null },
      ],
    ],
    [
      'out of order: only the finished prefix is committed',
      ['10', '11', '12', '13', '14'],
      [
        { finish: ['12', '13'], commit: null },
        { finish: ['11'], commit: null },
        { finish: ['10'], commit: '14' },
        { commit: null },
        { finish: ['14'], commit: '15' },
      ],
    ],
    [
      'in reverse order',
      ['0', '1', '2', '3'],
      [
        { finish: ['3'], commit: null },
        { finish: ['2'], commit: null },
        { finish: ['1'], commit: null },
        { finish: ['0'], commit: '4' },
      ],
    ],
    [
      'a slow head record holds the commit back however many finish behind it',
      ['100', '101', '102', '103', '104', '105'],
      [
        { finish: ['101', '102', '103', '104', '105'], commit: null },
        { begin: ['106', '107'], finish: ['106', '107'], commit: null },
        { finish: ['100'], commit: '108' },
      ],
    ],
    [
      'gaps between offsets (compacted topic, transaction markers)',
      ['5', '8', '9', '15'],
      [
        { finish: ['8'], commit: null },
        { finish: ['5'], commit: '9' },
        { finish: ['15'], commit: null },
        { finish: ['9'], commit: '16' },
      ],
    ],
    [
      'records handed out while earlier ones finish',
      ['0'],
      [
        { finish: ['0'], commit: '1' },
        { begin: ['1', '2'], finish: ['2'], commit: null },
        { finish: ['1'], commit: '3' },
        // 3..6 do not exist (gap): 7 is the first unfinished record, nothing may go past it.
        { begin: ['7'], commit: null, mayRestate: '7' },
        { finish: ['7'], commit: '8' },
      ],
    ],
    [
      'offsets above 2^53 (no float rounding)',
      ['9007199254740993', '9007199254740994'],
      [
        { finish: ['9007199254740993'], commit: '9007199254740994' },
        { finish: ['9007199254740994'], commit: '9007199254740995' },
      ],
    ],
  ])('%s', (_name, initial, steps) => {
    play(initial, steps);
  });

  it('commits nothing when nothing was handed out', () => {
    const tracker = new OffsetTracker('t', 0);
    expect(tracker.takeCommittable()).toEqual([]);
    expect(tracker.takeCommittable()).toEqual([]);
  });

  it('emits each commit once per advance', () => {
    const tracker = new OffsetTracker('t', 1);
    tracker.begin('0');
    tracker.begin('1');
    tracker.takeCommittable();
    tracker.finish('0');
    expect(tracker.takeCommittable()).toEqual([{ topic: 't', partition: 1, offset: '1' }]);
    expect(tracker.takeCommittable()).toEqual([]);
    expect(tracker.takeCommittable()).toEqual([]);
    tracker.finish('1');
    expect(tracker.takeCommittable()).toEqual([{ topic: 't', partition: 1, offset: '2' }]);
    expect(tracker.takeCommittable()).toEqual([]);
  });

  it.each([1, 2, 3, 4, 5, 6, 7, 8])(
    'random finish order (seed %i): commits are monotonic and exactly the prefix',
    (seed) => {
      const random = mulberry32(seed);
      // Offsets with random gaps, finished in a random order.
      const offsets: bigint[] = [];
      let next = BigInt(Math.floor(random() * 1000));
      for (let i = 0; i < 200; i += 1) {
        offsets.push(next);
        next += 1n + (random() < 0.3 ? BigInt(Math.floor(random() * 5)) : 0n);
      }
      const tracker = new OffsetTracker('t', 0);
      for (const offset of offsets) tracker.begin(offset.toString());
      // Restating the first offset before anything finished is allowed, never required: it is the baseline.
      for (const entry of tracker.takeCommittable()) expect(BigInt(entry.offset)).toBe(offsets[0]);
      const order = [...offsets].sort(() => random() - 0.5);
      const finished = new Set<bigint>();
      let last = offsets[0]!;
      for (const offset of order) {
        tracker.finish(offset.toString());
        finished.add(offset);
        const firstOpen = offsets.find((o) => !finished.has(o));
        const expected = firstOpen ?? offsets[offsets.length - 1]! + 1n;
        const commits = tracker.takeCommittable();
        if (expected > last) {
          expect(commits).toEqual([{ topic: 't', partition: 0, offset: expected.toString() }]);
          last = expected;
        } else {
          expect(commits).toEqual([]);
        }
      }
      expect(last).toBe(offsets[offsets.length - 1]! + 1n);
    },
  );
});

/**
 * The part of a kafkajs consumer the runner uses, in memory: `feed` hands the runner a batch as kafkajs would (it
 * resolves once the runner's batch loop returns), `committed` is the last offset committed per partition.
 */
function fakeKafka(admin: { fetchTopicOffsets: () => Promise<unknown[]> } = { fetchTopicOffsets: async () => [] }) {
  type EachBatch = (payload: unknown) => Promise<void>;
  let eachBatch: EachBatch | undefined;
  const committed = new Map<number, bigint>();
  const listeners = new Map<string, (event: { payload: unknown }) => void>();
  const consumer = {
    events: { GROUP_JOIN: 'consumer.group_join', CRASH: 'consumer.crash', REBALANCING: 'consumer.rebalancing' },
    on: (event: string, listener: (event: { payload: unknown }) => void) => {
      listeners.set(event, listener);
    },
    connect: async () => undefined,
    subscribe: async () => undefined,
    run: async (config: { eachBatch: EachBatch }) => {
      eachBatch = config.eachBatch;
    },
    commitOffsets: async (offsets: { partition: number; offset: string }[]) => {
      for (const { partition, offset } of offsets) {
        // Commits only ever move forward.
        expect(BigInt(offset)).toBeGreaterThan(committed.get(partition) ?? -1n);
        committed.set(partition, BigInt(offset));
      }
    },
    pause: async () => undefined,
    disconnect: async () => undefined,
  };
  const fakeAdmin = { connect: async () => undefined, disconnect: async () => undefined, ...admin };
  return {
    kafka: { consumer: () => consumer, admin: () => fakeAdmin } as unknown as Kafka,
    committed,
    /** The group rebalancing (this member told to rejoin), then this member joining again with `partitions`. */
    rebalance: () => listeners.get('consumer.rebalancing')?.({ payload: {} }),
    join: (partitions: number[]) =>
      listeners.get('consumer.group_join')?.({
        payload: { memberId: 'm', memberAssignment: { deliveries: partitions } },
      }),
    /**
     * Hands records `first`, `first + 1`, … of `partition`, keyed by `keys`, to the runner; `resumed` is called when the
     * runner wakes a partition it paused (a record not yet due); `highWatermark` is the partition's end at the fetch.
     */
    feed: (
      partition: number,
      first: number,
      keys: string[],
      topic = 'deliveries',
      resumed = () => undefined,
      highWatermark = 0,
    ) =>
      eachBatch!({
        batch: {
          topic,
          partition,
          highWatermark: String(highWatermark),
          offsetLag: () => '0',
          messages: keys.map((key, index) => ({
            offset: String(first + index),
            key: Buffer.from(key),
            value: Buffer.from('x'),
            headers: {},
            timestamp: '0',
          })),
        },
        resolveOffset: () => undefined,
        heartbeat: async () => undefined,
        pause: () => resumed,
        isRunning: () => true,
        isStale: () => false,
      }),
  };
}

/**
 * A runner on a fake consumer whose handler holds every record until the test finishes it; records of the lanes
 * `waitsOutside` names release their slot first, as a handler waiting for a receiver's answer does.
 */
async function startRunner(options: Partial<ConsumerOptions>, waitsOutside: (key: string) => boolean = () => false) {
  const fake = fakeKafka();
  const held: { record: ConsumedRecord; finish: () => void }[] = [];
  const startedKeys: string[] = [];
  let started = 0;
  const runner = new ConsumerRunner(fake.kafka, {
    groupId: 'g',
    topics: ['deliveries'],
    maxInFlight: 100,
    logger: pino({ level: 'silent' }),
    handle: (record, slot) =>
      new Promise<void>((resolve) => {
        started += 1;
        startedKeys.push(record.key!.toString());
        if (waitsOutside(record.key!.toString())) slot.release();
        held.push({ record, finish: resolve });
      }),
    ...options,
  });
  await runner.start();
  const settle = () => new Promise((resolve) => setTimeout(resolve, 5));
  return {
    runner,
    fake,
    /** Records being handled now, by lane key. */
    active: (key: string) => held.filter((entry) => entry.record.key?.toString() === key).length,
    started: () => started,
    /** The lane keys of the records started, in order. */
    startedKeys,
    /** Finishes the oldest record being handled of lane `key` (any lane when omitted), then lets the runner react. */
    finish: async (key?: string) => {
      const index = held.findIndex((entry) => key === undefined || entry.record.key?.toString() === key);
      expect(index, `a record of ${key ?? 'any lane'} being handled`).toBeGreaterThanOrEqual(0);
      held.splice(index, 1)[0]!.finish();
      await settle();
    },
    settle,
    stop: async () => {
      const stopping = runner.stop();
      while (held.length > 0) held.shift()!.finish();
      await stopping;
    },
  };
}

describe('ConsumerRunner lanes with a dynamic limit', () => {
  const runners: { stop(): Promise<void> }[] = [];
  afterEach(async () => {
    for (const runner of runners.splice(0)) await runner.stop();
  });

  it('reads the limit whenever the lane may admit: lowered, nobody enters until enough left; raised, several enter', async () => {
    const limits = new Map([['a', 3]]);
    const reads: string[] = [];
    const t = await startRunner({
      lane: {
        of: (record) => record.key!.toString(),
        limit: (key) => {
          reads.push(key);
          return limits.get(key)!;
        },
      },
    });
    runners.push(t);
    await t.fake.feed(0, 0, Array<string>(10).fill('a'));
    await t.settle();
    expect(t.active('a')).toBe(3);
    expect(reads.every((key) => key === 'a')).toBe(true);

    limits.set('a', 1);
    await t.finish('a');
    expect(t.active('a')).toBe(2);
    await t.finish('a');
    expect(t.active('a')).toBe(1);
    await t.finish('a');
    expect(t.active('a')).toBe(1); // the third leaving let exactly one in
    expect(t.started()).toBe(4);

    limits.set('a', 4);
    await t.finish('a');
    expect(t.active('a')).toBe(4); // one leaving admits up to the raised limit at once
    expect(t.started()).toBe(8);
  });

  it('counts a limit below 1 (or not a number) as 1, so the lane still moves', async () => {
    let limit = 0;
    const t = await startRunner({ lane: { of: (record) => record.key!.toString(), limit: () => limit } });
    runners.push(t);
    await t.fake.feed(0, 0, ['a', 'a', 'a']);
    await t.settle();
    expect(t.active('a')).toBe(1);
    limit = Number.NaN;
    await t.finish('a');
    expect(t.active('a')).toBe(1);
    limit = -5;
    await t.finish('a');
    expect(t.active('a')).toBe(1);
    await t.finish('a');
    expect(t.started()).toBe(3);
  });

  it('keeps a static number limit as before', async () => {
    const t = await startRunner({ lane: { of: (record) => record.key!.toString(), limit: 2 } });
    runners.push(t);
    await t.fake.feed(0, 0, ['a', 'a', 'a', 'b']);
    await t.settle();
    expect([t.active('a'), t.active('b')]).toEqual([2, 1]);
    await t.finish('a');
    expect(t.active('a')).toBe(2);
  });

  it('a lane held at 1 waits without taking global slots: the other lanes use them all', async () => {
    const t = await startRunner({
      maxInFlight: 3,
      lane: { of: (record) => record.key!.toString(), limit: (key) => (key === 'slow' ? 1 : 10) },
    });
    runners.push(t);
    await t.fake.feed(0, 0, ['slow', 'slow', 'slow', 'slow', 'fast', 'fast', 'fast', 'fast', 'fast']);
    await t.settle();
    expect([t.active('slow'), t.active('fast')]).toEqual([1, 2]);
    // The fast lane's records take the freed slots one after the other while the slow one still holds its first.
    for (let finished = 1; finished <= 5; finished += 1) {
      await t.finish('fast');
      expect([t.active('slow'), t.active('fast')]).toEqual([1, Math.min(2, 5 - finished)]);
    }
    expect(t.active('slow')).toBe(1);
  });

  it('commits only the contiguous finished prefix while lanes admit out of offset order', async () => {
    // Offsets 0..5 alternate between lane a (limit 1: 0, then 2, then 4) and lane b (limit 3: 1, 3, 5 at once).
    const t = await startRunner({
      lane: { of: (record) => record.key!.toString(), limit: (key) => (key === 'a' ? 1 : 3) },
    });
    runners.push(t);
    await t.fake.feed(4, 0, ['a', 'b', 'a', 'b', 'a', 'b']);
    await t.settle();
    await t.finish('b');
    await t.finish('b');
    await t.finish('b');
    await t.runner.commit();
    // Offset 0 (lane a) is still being handled: nothing past it (restating it is allowed).
    expect(t.fake.committed.get(4) ?? 0n).toBe(0n);
    await t.finish('a'); // offset 0
    await t.runner.commit();
    expect(t.fake.committed.get(4)).toBe(2n); // 1 finished, 2 (lane a) is now being handled
    await t.finish('a'); // offset 2
    await t.finish('a'); // offset 4
    await t.runner.commit();
    expect(t.fake.committed.get(4)).toBe(6n);
  });

  it('a lane at its limit holds at most half the read-ahead buffer, then holds up only its partition', async () => {
    const t = await startRunner({
      maxInFlight: 10,
      maxBuffered: 8,
      lane: { of: (record) => record.key!.toString(), limit: (key) => (key === 'slow' ? 1 : 10) },
    });
    runners.push(t);
    let fedSlow = false;
    const slow = t.fake.feed(0, 0, Array<string>(6).fill('slow')).then(() => (fedSlow = true));
    await t.settle();
    expect(fedSlow).toBe(false); // the fifth record waits for room: the lane holds half the buffer (4)
    await t.fake.feed(1, 0, ['other', 'other']); // another partition is still read and handled
    await t.settle();
    expect(t.active('other')).toBe(2);
    await t.finish('slow');
    await t.finish('slow');
    await t.finish('slow');
    await slow;
    expect(fedSlow).toBe(true);
  });

  it('a record waiting outside (its slot released) holds only its lane: the slots go on to the others', async () => {
    const t = await startRunner(
      { maxInFlight: 2, lane: { of: (record) => record.key!.toString(), limit: 3 } },
      (key) => key === 'hanging',
    );
    runners.push(t);
    await t.fake.feed(0, 0, ['hanging', 'hanging', 'hanging', 'hanging', 'fast', 'fast', 'fast']);
    await t.settle();
    // The hanging lane's three are all started (its limit), none holding a slot; the fast lane takes both slots.
    expect([t.active('hanging'), t.active('fast')]).toEqual([3, 2]);
    await t.finish('fast');
    expect([t.active('hanging'), t.active('fast')]).toEqual([3, 2]); // the freed slot went to the third fast one
    expect(t.started()).toBe(6);
    expect(t.runner.activeCount).toBe(5); // records being handled, with a slot or not
  });

  it("shares the slots between groups in turn: a tenant's first record goes ahead of another's backlog", async () => {
    const t = await startRunner({
      maxInFlight: 2,
      maxInFlightPerGroup: 2,
      maxBuffered: 100,
      lane: {
        of: (record) => record.key!.toString(),
        limit: 100,
        group: async (record) => record.key!.toString().split(':')[0]!,
      },
    });
    runners.push(t);
    await t.fake.feed(
      0,
      0,
      Array.from({ length: 40 }, (_, index) => `big:sub${index % 4}`),
    );
    await t.fake.feed(1, 0, ['small:only']);
    await t.settle();
    expect(t.startedKeys).toEqual(['big:sub0', 'big:sub1']);
    await t.finish('big:sub0');
    // Next in turn: the other tenant, then the big one's subscriptions in turn.
    expect(t.startedKeys.slice(2)).toEqual(['small:only']);
    await t.finish('big:sub1');
    await t.finish('small:only');
    expect(t.startedKeys.slice(3)).toEqual(['big:sub2', 'big:sub3']);
  });

  it('holds a group to maxInFlightPerGroup while another group uses the other slots', async () => {
    const t = await startRunner({
      maxInFlight: 4,
      maxInFlightPerGroup: 2,
      lane: { of: (record) => record.key!.toString(), limit: 100, group: (record) => record.key!.toString()[0]! },
    });
    runners.push(t);
    await t.fake.feed(0, 0, ['a1', 'a2', 'a3', 'a4', 'a5']);
    await t.settle();
    expect(t.started()).toBe(2); // two slots stay free for the other tenants
    await t.fake.feed(1, 0, ['b1', 'b2', 'b3']);
    await t.settle();
    expect(t.startedKeys).toEqual(['a1', 'a2', 'b1', 'b2']);
    await t.finish('a1');
    expect(t.startedKeys.at(-1)).toBe('a3');
  });
});

/** A small deterministic PRNG so a failing seed can be replayed. */
function mulberry32(seed: number): () => number {
  let state = seed;
  return () => {
    state = (state + 0x6d2b79f5) | 0;
    let t = Math.imul(state ^ (state >>> 15), 1 | state);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
}

describe('ConsumerRunner lanes with a pace (rate limit)', () => {
  const runners: { stop(): Promise<void> }[] = [];
  afterEach(async () => {
    for (const runner of runners.splice(0)) await runner.stop();
  });

  it('a paced lane starts a record only when its pace allows, waiting in the lane (no slot) and woken by a timer', async () => {
    let tokens = 1;
    const asked: string[] = [];
    const prepared: string[] = [];
    const t = await startRunner({
      maxInFlight: 4,
      lane: {
        of: (record) => record.key!.toString(),
        limit: 10,
        pace: {
          prepare: async (key, record) => {
            prepared.push(`${key}@${record.offset}`);
          },
          wait: (key) => {
            asked.push(key);
            if (key !== 'slow') return 0;
            if (tokens > 0) {
              tokens -= 1;
              return 0;
            }
            return 30;
          },
        },
      },
    });
    runners.push(t);
    await t.fake.feed(0, 0, ['slow', 'slow', 'slow', 'fast', 'fast', 'fast']);
    await t.settle();
    expect(prepared).toEqual(['slow@0', 'slow@1', 'slow@2', 'fast@3', 'fast@4', 'fast@5']);
    // The slow lane's waiting records hold no slot: the three fast ones run beside the one slow record.
    expect([t.active('slow'), t.active('fast')]).toEqual([1, 3]);
    await t.finish('slow');
    expect(t.active('slow')).toBe(0); // finishing does not start the next: the pace has not allowed it
    tokens = 1;
    await new Promise((resolve) => setTimeout(resolve, 60));
    expect(t.active('slow')).toBe(1); // the timer asked again
    expect(asked).toContain('fast'); // every lane asks its pace; an unlimited one is let through at once
  });

  it('stop lets records waiting for their pace go unstarted (and uncommitted) at once', async () => {
    const t = await startRunner({
      lane: { of: (record) => record.key!.toString(), limit: 10, pace: { wait: () => 60_000 } },
    });
    await t.fake.feed(0, 0, ['slow', 'slow']);
    await t.settle();
    expect(t.started()).toBe(0);
    const started = Date.now();
    await t.stop();
    expect(Date.now() - started).toBeLessThan(1_000);
    expect(t.started()).toBe(0);
    expect(t.fake.committed.get(0) ?? 0n).toBe(0n); // nothing past the unstarted records
  });
});

describe('ConsumerRunner after joining', () => {
  function runnerSeeing(admin?: Parameters<typeof fakeKafka>[0]) {
    const fake = fakeKafka(admin);
    const seen: { offset: string; redelivered: boolean | undefined }[] = [];
    const runner = new ConsumerRunner(fake.kafka, {
      groupId: 'g',
      topics: ['deliveries'],
      maxInFlight: 10,
      logger: pino({ level: 'silent' }),
      handle: async (record) => {
        seen.push({ offset: record.offset, redelivered: record.redelivered });
      },
    });
    return { fake, seen, runner };
  }

  it('hands a new partition its records at once, whatever a lookup of the brokers takes', async () => {
    // A rolling restart of the dispatchers rebalances their group at each step; on the loaded cluster a read of the
    // partitions' ends took 1.2-1.7 s, and every record fetched after the join waited for it.
    const { fake, seen, runner } = runnerSeeing({ fetchTopicOffsets: () => new Promise<unknown[]>(() => undefined) });
    await runner.start();
    fake.join([0]);
    void fake.feed(0, 5, ['a', 'b'], 'deliveries', undefined, 9);
    await expect.poll(() => seen.length, { timeout: 1_000 }).toBe(2);
    await runner.stop();
  });

  it('flags what lay in a partition when it was assigned, from the end its first fetch saw, and nothing after', async () => {
    const { fake, seen, runner } = runnerSeeing();
    await runner.start();
    fake.join([0]);
    // The first fetch after the join saw the partition end at 9: a previous owner may have handled 5 to 8.
    await fake.feed(0, 5, ['a', 'b'], 'deliveries', undefined, 9);
    await fake.feed(0, 7, ['c', 'd', 'e', 'f'], 'deliveries', undefined, 12);
    await expect.poll(() => seen.length).toBe(6);
    expect(seen.map(({ redelivered }) => redelivered)).toEqual([true, true, true, true, false, false]);
    // A new generation: what this member had not committed may have gone to another member meanwhile.
    fake.rebalance();
    fake.join([0]);
    await fake.feed(0, 11, ['f', 'g'], 'deliveries', undefined, 13);
    await expect.poll(() => seen.length).toBe(8);
    expect(seen.slice(6).map(({ redelivered }) => redelivered)).toEqual([true, true]);
    await runner.stop();
  });

  it('flags only what lay in a partition at the join once the read of its end answers, not a burst fetched later', async () => {
    // The partition ended at 6 when the member joined and was idle; a burst came later, all in one fetch.
    const { fake, seen, runner } = runnerSeeing({ fetchTopicOffsets: async () => [{ partition: 0, high: '6' }] });
    await runner.start();
    fake.join([0]);
    await new Promise((resolve) => setTimeout(resolve, 5));
    await fake.feed(0, 5, ['a', 'b', 'c', 'd'], 'deliveries', undefined, 40);
    await expect.poll(() => seen.length).toBe(4);
    expect(seen.map(({ redelivered }) => redelivered)).toEqual([true, false, false, false]);
    await runner.stop();
  });
});

describe('ConsumerRunner across a rebalance', () => {
  it('starts no record fetched before the rebalance: it stays uncommitted, and the partition owner reads it again', async () => {
    const t = await startRunner({ lane: { of: (record) => record.key!.toString(), limit: 1 } });
    await t.fake.feed(0, 0, ['a', 'a', 'a']);
    await t.settle();
    expect(t.started()).toBe(1); // offset 0 in flight, 1 and 2 waiting in the lane

    // Another member joins: its share of the partitions may include this one, so what has not started here must not.
    t.fake.rebalance();
    await t.finish('a'); // the record in flight finishes (it was sent already)
    expect(t.started()).toBe(1); // 1 and 2 were let go unstarted
    await t.runner.commit();
    expect(t.fake.committed.get(0)).toBe(1n); // up to the finished record only: 1 and 2 are read again

    // Rejoined with the partition: kafkajs fetches again from the committed offset, and those start now.
    t.fake.join([0]);
    await t.fake.feed(0, 1, ['a', 'a']);
    await t.settle();
    expect(t.started()).toBe(2);
    await t.finish('a');
    expect(t.started()).toBe(3);
    await t.finish('a');
    await t.runner.commit();
    expect(t.fake.committed.get(0)).toBe(3n);
    await t.stop();
  });
});

describe('ConsumerRunner when a handler fails', () => {
  it('hands the record again flagged as redelivered: the failed try may have done part of its work', async () => {
    const fake = fakeKafka();
    const seen: (boolean | undefined)[] = [];
    const runner = new ConsumerRunner(fake.kafka, {
      groupId: 'g',
      topics: ['deliveries'],
      maxInFlight: 10,
      logger: pino({ level: 'silent' }),
      handle: async (record) => {
        seen.push(record.redelivered);
        // The first try published some of its records, then failed (the broker refused the rest).
        if (seen.length === 1) throw new Error('broker unavailable');
      },
    });
    await runner.start();
    await fake.feed(0, 0, ['a']);
    await expect.poll(() => seen.length, { timeout: 2_000 }).toBe(2);
    expect(seen).toEqual([false, true]);
    await runner.commit();
    expect(fake.committed.get(0)).toBe(1n);
    await runner.stop();
  });
});

describe('ConsumerRunner with records not yet due (retry tiers, the overflow)', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  // Each wake-up fetches the partition again from the record it stopped at, and kafkajs decodes every record the fetch
  // brings (up to DISPATCHER_FETCH_BYTES): woken at each record's due time, a delay topic receiving a hundred records a
  // second is fetched and decoded a hundred times a second. A slack lets the records due meanwhile come in one fetch.
  it('wakes a paused partition dueSlackMs after its first record is due, not at once', async () => {
    vi.useFakeTimers({ now: 0 });
    const t = await startRunner({ dueAt: (record) => Number(record.key!.toString()), dueSlackMs: 200 });
    let wakes = 0;
    await t.fake.feed(0, 0, ['1000', '1050', '1100'], 'deliveries', () => void (wakes += 1));
    expect(t.started()).toBe(0);
    await vi.advanceTimersByTimeAsync(1_100);
    expect(wakes).toBe(0);
    await vi.advanceTimersByTimeAsync(100);
    expect(wakes).toBe(1);
    // Without a slack, at its due time as before.
    const prompt = await startRunner({ dueAt: (record) => Number(record.key!.toString()) });
    let promptWakes = 0;
    await prompt.fake.feed(0, 0, ['2300'], 'deliveries', () => void (promptWakes += 1));
    await vi.advanceTimersByTimeAsync(1_099);
    expect(promptWakes).toBe(0);
    await vi.advanceTimersByTimeAsync(1);
    expect(promptWakes).toBe(1);
    vi.useRealTimers();
    await Promise.all([t.stop(), prompt.stop()]);
  });
});

describe('KAFKA_RETRY, as kafkajs applies it', () => {
  // kafkajs's own retrier (it has no typings for this module): the one its connections, consumers and admin use.
  type Retrier = (options: typeof KAFKA_RETRY) => (fn: () => Promise<never>) => Promise<never>;
  const createRetry = createRequire(import.meta.url)('kafkajs/src/retry/index.js') as Retrier;

  afterEach(() => {
    vi.useRealTimers();
  });

  it('tries a refused connection again within 5 s each time, for about 30 s, then gives up', async () => {
    vi.useFakeTimers();
    const start = Date.now();
    const tries: number[] = [];
    const outcome = createRetry(KAFKA_RETRY)(async () => {
      tries.push(Date.now() - start);
      throw new Error('connect ECONNREFUSED 127.0.0.1:9092');
    }).catch((error: unknown) => error);
    await vi.runAllTimersAsync();

    expect((await outcome) as Error).toMatchObject({ name: 'KafkaJSNumberOfRetriesExceeded' });
    expect(tries).toHaveLength(KAFKA_RETRY.retries + 1);
    const gaps = tries.slice(1).map((at, index) => at - tries[index]!);
    // kafkajs's default ceiling of 30 s left a consumer asleep for up to 25 s after a restarted broker was back.
    expect(Math.max(...gaps)).toBeLessThanOrEqual(5_000);
    expect(gaps[0]).toBeLessThan(300);
    expect(tries.at(-1)).toBeGreaterThan(25_000);
  });
});

describe('applyTopics', () => {
  /** An admin whose createTopics fails `failures` times with the broker's retriable UNKNOWN_TOPIC_OR_PARTITION. */
  function fakeKafka(failures: number, retriable = true, createsBeforeFailing = true) {
    const topics = new Set(['existing']);
    const calls: string[] = [];
    const admin = {
      connect: async () => {},
      disconnect: async () => {},
      listTopics: async () => [...topics],
      createTopics: async ({ topics: wanted }: { topics: { topic: string }[] }) => {
        calls.push(`create ${wanted.map((topic) => topic.topic).join(',')}`);
        // The broker creates them, then the wait for their leaders fails.
        if (createsBeforeFailing || failures === 0) for (const { topic } of wanted) topics.add(topic);
        if (failures > 0) {
          failures -= 1;
          throw Object.assign(new Error('This server does not host this topic-partition'), { retriable });
        }
        return true;
      },
      fetchTopicMetadata: async ({ topics: names }: { topics: string[] }) => ({
        topics: names.map((name) => ({ name, partitions: [{}, {}] })),
      }),
      createPartitions: async () => true,
      alterConfigs: async () => {
        calls.push('alterConfigs');
      },
    };
    return { kafka: { admin: () => admin } as unknown as Parameters<typeof applyTopics>[0], calls };
  }
  const wanted = [
    { name: 'existing', partitions: 2, config: { 'retention.ms': '1000' } },
    { name: 'fresh', partitions: 2, config: { 'retention.ms': '1000' } },
  ];

  it('tries a retriable error again from the start, and reports what it created', async () => {
    const { kafka, calls } = fakeKafka(1);
    const waits: number[] = [];
    const result = await applyTopics(kafka, wanted, async (ms) => {
      waits.push(ms);
    });
    expect(result).toEqual({ created: ['fresh'], unchanged: ['existing'] });
    // The second try finds the topic the first created, and configures both.
    expect(calls).toEqual(['create fresh', 'alterConfigs']);
    expect(waits).toEqual([250]);
  });

  it('gives up after six tries, and at once on an error that is not retriable', async () => {
    const waits: number[] = [];
    const always = fakeKafka(100, true, false);
    await expect(
      applyTopics(always.kafka, wanted, async (ms) => {
        waits.push(ms);
      }),
    ).rejects.toThrow(/does not host/);
    expect(always.calls).toEqual(Array(6).fill('create fresh'));
    expect(waits).toEqual([250, 500, 1_000, 2_000, 4_000]);
    const fatal = fakeKafka(1, false);
    await expect(applyTopics(fatal.kafka, wanted, async () => {})).rejects.toThrow(/does not host/);
    expect(fatal.calls).toEqual(['create fresh']);
  });
});

describe('ConsumerRunner lanes with an overflow (a full lane parks its backlog)', () => {
  const runners: { stop(): Promise<void> }[] = [];
  afterEach(async () => {
    for (const runner of runners.splice(0)) await runner.stop();
  });

  async function parkingRunner(failParks = 0) {
    const parked: { topic: string; offset: string; key: string }[] = [];
    let failures = failParks;
    const t = await startRunner({
      lane: {
        of: (record) => record.key!.toString(),
        limit: (key) => (key === 'slow' ? 2 : 10),
        overflow: {
          topic: 'overflow',
          bound: () => 3,
          delayMs: 60_000,
          park: async (record) => {
            if (failures > 0) {
              failures -= 1;
              throw new Error('broker unavailable');
            }
            parked.push({ topic: record.topic, offset: record.offset, key: record.key!.toString() });
          },
        },
      },
    });
    runners.push(t);
    return { ...t, parked };
  }

  it("parks a full lane's next records and commits their offsets; other lanes' records on the partition go on", async () => {
    const t = await parkingRunner();
    await t.fake.feed(0, 0, [...Array<string>(10).fill('slow'), 'fast', 'fast']);
    await t.settle();
    // 2 being handled, 3 waiting in the lane: the 5 after them are aside.
    expect(t.active('slow')).toBe(2);
    expect(t.parked.map((entry) => entry.offset)).toEqual(['5', '6', '7', '8', '9']);
    expect(t.active('fast')).toBe(2);
    // Once the lane's records are done, the whole partition commits: the parked ones count as finished.
    for (let i = 0; i < 5; i += 1) await t.finish('slow');
    await t.finish('fast');
    await t.finish('fast');
    await t.runner.commit();
    expect(t.fake.committed.get(0)).toBe(12n);
  });

  it('parks newer records of the lane behind those aside; a record back from the overflow topic enters when there is room', async () => {
    const t = await parkingRunner();
    await t.fake.feed(0, 0, Array<string>(6).fill('slow'));
    await t.settle();
    expect(t.parked).toHaveLength(1);
    for (let i = 0; i < 5; i += 1) await t.finish('slow');
    // The lane is empty, but a record of it is aside: the next one from the deliveries topic goes behind it.
    await t.fake.feed(0, 6, ['slow']);
    await t.settle();
    expect(t.parked.map((entry) => entry.offset)).toEqual(['5', '6']);
    expect(t.active('slow')).toBe(0);
    // Back from the overflow topic, the lane has room: handled, not parked again.
    await t.fake.feed(1, 0, ['slow', 'slow'], 'overflow');
    await t.settle();
    expect(t.active('slow')).toBe(2);
    expect(t.parked).toHaveLength(2);
    // Back again while the lane is full: parked again.
    await t.fake.feed(1, 2, ['slow', 'slow', 'slow', 'slow'], 'overflow');
    await t.settle();
    expect(t.parked.map((entry) => `${entry.topic}:${entry.offset}`)).toEqual([
      'deliveries:5',
      'deliveries:6',
      'overflow:5',
    ]);
  });

  it('tries a failed park again, and commits the offset only once it is aside', async () => {
    const t = await parkingRunner(1);
    await t.fake.feed(0, 0, Array<string>(6).fill('slow'));
    await t.settle();
    expect(t.parked).toHaveLength(0);
    for (let i = 0; i < 5; i += 1) await t.finish('slow');
    await t.runner.commit();
    // Offsets 0-4 are done; 5 is not aside yet (its park failed and waits 200 ms to try again).
    expect(t.fake.committed.get(0)).toBe(5n);
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(t.parked.map((entry) => entry.offset)).toEqual(['5']);
    await t.runner.commit();
    expect(t.fake.committed.get(0)).toBe(6n);
  });

  /** A runner whose one lane ('a', limit 2) parks beyond 3 waiting records only when slow (overflow.waitMs). */
  async function pacedRunner(waitMs: number, options: Partial<ConsumerOptions> = {}) {
    const parked: number[] = [];
    const t = await startRunner({
      ...options,
      lane: {
        of: (record) => record.key!.toString(),
        limit: 2,
        overflow: {
          topic: 'overflow',
          bound: () => 3,
          delayMs: 60_000,
          waitMs,
          park: async (record) => void parked.push(Number(record.offset)),
        },
        ...options.lane,
      },
    });
    runners.push(t);
    return { ...t, parked };
  }

  it('parks none of a backlog that waits only because the whole runner is busy: the lane is no slower than the rest', async () => {
    let handled = 0;
    // 38 records wait behind the lane's limit of 2, each pair taking a millisecond or more: longer than 10 ms to start
    // them all, but the lane's records take no longer than any (it is the only lane): the runner is the bottleneck.
    const t = await pacedRunner(10, {
      handle: async () => {
        await new Promise((resolve) => setTimeout(resolve, 1));
        handled += 1;
      },
    });
    await t.fake.feed(0, 0, Array<string>(40).fill('a'));
    await vi.waitFor(() => expect(handled).toBe(40));
    expect(t.parked).toEqual([]);
    await t.runner.commit();
    expect(t.fake.committed.get(0)).toBe(40n);
  });

  it("moves a lane's waiting records beyond the bound aside once it stops finishing any; later ones go behind them", async () => {
    const t = await pacedRunner(2_000);
    await t.fake.feed(0, 0, Array<string>(10).fill('a'));
    await t.settle();
    // Nothing is known of the lane's pace yet: its 8 waiting records stay in the buffer.
    expect(t.active('a')).toBe(2);
    expect(t.parked).toEqual([]);
    // Meanwhile another lane's records finish at once, one every 20 ms. Once the lane's two records have been held 500
    // ms while others finished (far more than the runner's mean), its 8 waiting would take over 2 s to start: the 5
    // newest go aside.
    let others = 0;
    const otherLane = setInterval(() => {
      const offset = others++;
      void t.fake
        .feed(1, offset, ['b'])
        .then(() => t.settle())
        .then(() => t.finish('b'));
    }, 20);
    try {
      await vi.waitFor(() => expect(t.parked).toEqual([5, 6, 7, 8, 9]), { timeout: 5_000 });
    } finally {
      clearInterval(otherLane);
    }
    await t.settle();
    await t.fake.feed(0, 10, ['a']);
    await t.settle();
    expect(t.parked).toEqual([5, 6, 7, 8, 9, 10]);
    // The lane's own records still run in order; once done, every offset commits.
    for (let i = 0; i < 5; i += 1) await t.finish('a');
    expect(t.startedKeys.filter((key) => key === 'a')).toHaveLength(5);
    await t.runner.commit();
    expect(t.fake.committed.get(0)).toBe(11n);
  });

  it('does not take a lane for stalled while no record finishes anywhere (the process held, not the endpoint)', async () => {
    const t = await pacedRunner(2_000);
    await t.fake.feed(1, 0, ['b']);
    await t.finish('b');
    await t.fake.feed(0, 0, Array<string>(10).fill('a'));
    // 1.2 s with two records held and 8 waiting, but nothing finished elsewhere either: no lane is slower than the rest.
    await new Promise((resolve) => setTimeout(resolve, 1_200));
    expect(t.parked).toEqual([]);
    expect(t.active('a')).toBe(2);
  });

  it("counts a lane's pace (a rate limit) in how long its records would wait: a paced lane's backlog goes aside", async () => {
    let next = 0;
    let handled = 0;
    const t = await pacedRunner(200, {
      handle: async () => void (handled += 1),
      lane: {
        of: (record) => record.key!.toString(),
        limit: 2,
        // One record every 50 ms; each is over at once, so only the pace tells how slowly the lane drains.
        pace: {
          wait: () => {
            const now = Date.now();
            if (now < next) return next - now;
            next = now + 50;
            return 0;
          },
        },
      },
    });
    await t.fake.feed(0, 0, Array<string>(20).fill('a'));
    await vi.waitFor(() => expect(handled + t.parked.length).toBe(20), { timeout: 5_000 });
    // The newest went aside, in order; the lane kept its oldest (at least the bound's 3 after the first).
    expect(t.parked.length).toBeGreaterThan(0);
    expect(handled).toBeGreaterThanOrEqual(4);
    expect(t.parked).toEqual(Array.from({ length: t.parked.length }, (_, index) => 20 - t.parked.length + index));
    await t.runner.commit();
    expect(t.fake.committed.get(0)).toBe(20n);
  });

  it('parks sooner when many lanes are backlogged: each keeps at most its share of half the buffer', async () => {
    const parked: string[] = [];
    const t = await startRunner({
      maxBuffered: 40,
      lane: {
        of: (record) => record.key!.toString(),
        limit: 1,
        overflow: {
          topic: 'overflow',
          bound: () => 100,
          delayMs: 60_000,
          park: async (record) => void parked.push(record.key!.toString()),
        },
      },
    });
    runners.push(t);
    // Ten records of each of five lanes, interleaved; each lane lets one in at a time. Under the bound alone (100), the
    // lanes' waiting records would fill the buffer (40) and reading would stop; at their share (half the buffer over
    // five lanes: 4 each) the rest go aside.
    const lanes = ['a', 'b', 'c', 'd', 'e'];
    await t.fake.feed(
      0,
      0,
      Array.from({ length: 50 }, (_, index) => lanes[index % 5]!),
    );
    await t.settle();
    expect(lanes.map((lane) => t.active(lane))).toEqual([1, 1, 1, 1, 1]);
    expect(lanes.map((lane) => parked.filter((key) => key === lane).length)).toEqual([5, 5, 5, 5, 5]);
  });
});

describe("the producer's retries (producerRetryDelay)", () => {
  /** What @platformatic/kafka hands a failed produce: a response error holding each partition's error. */
  const notLeader = Object.assign(
    new AggregateError([], 'Received response with error while executing API Produce(v9)'),
    {
      errors: [
        Object.assign(new Error('This server is not the leader for that topic-partition'), {
          apiId: 'NOT_LEADER_OR_FOLLOWER',
          canRetry: true,
          hasStaleMetadata: true,
        }),
      ],
    },
  );
  const refused = Object.assign(new Error('connect ECONNREFUSED 127.0.0.13:9092'), { code: 'PLT_KFK_NETWORK' });
  const quiet = pino({ level: 'silent' });

  it('forgets the leaders a broker said it no longer leads, and asks again 50 ms later, four times, then up to 1 s', () => {
    // A broker in controlled shutdown hands its partitions over and refuses their produce requests. The client
    // retries with the leaders it knows until its metadata is 5 s old (it refreshes them only after a network error):
    // in a broker roll the gateway's events waited 6 s for a fourth try (400, 800, 1,600 ms, then 3.2 s).
    const client = { clearMetadata: vi.fn() };
    const delays = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10].map((attempt) =>
      producerRetryDelay(quiet)(client, 'produce', attempt, 99, notLeader),
    );
    expect(client.clearMetadata).toHaveBeenCalledTimes(10);
    expect(delays).toEqual([50, 50, 50, 50, 100, 200, 400, 800, 1_000, 1_000]);
  });

  /** A refusal of partitions 0 and 1 of `deliveries` naming, as Kafka 3.7 does (KIP-951), their new leaders. */
  const refusalNaming = (leaders: { leaderId: number; leaderEpoch: number }[]) =>
    Object.assign(new Error('Received response with error while executing API Produce(v11)'), {
      errors: notLeader.errors,
      response: {
        responses: [
          {
            name: 'deliveries',
            partitionResponses: leaders.map((currentLeader, index) => ({ index, errorCode: 6, currentLeader })),
          },
        ],
        nodeEndpoints: [{ nodeId: 4, host: '127.0.0.14', port: 9092, rack: null }],
      },
    });
  /** A client whose metadata has broker 3 leading both partitions, at leader epoch 5. */
  const clientKnowing = () => ({
    clearMetadata: vi.fn(),
    currentMetadata: {
      brokers: new Map([1, 2, 3].map((id) => [id, { host: `127.0.0.1${id}`, port: 9092 }])),
      topics: new Map([
        [
          'deliveries',
          {
            partitions: [
              { leader: 3, leaderEpoch: 5 },
              { leader: 3, leaderEpoch: 5 },
            ],
          },
        ],
      ]),
    },
  });

  it('sends a refused request at once to the new leaders the refusal names, without asking for the leaders again', () => {
    // A broker that has not applied the move yet answers the metadata as before: the gateways' tries went back to the
    // stopping broker three times (0.5-0.9 s), each refusal naming the new leader.
    const client = clientKnowing();
    const delay = producerRetryDelay(quiet)(
      client,
      'produce',
      1,
      99,
      refusalNaming([
        { leaderId: 1, leaderEpoch: 6 },
        { leaderId: 4, leaderEpoch: 6 },
      ]),
    );
    expect(delay).toBe(0);
    expect(client.clearMetadata).not.toHaveBeenCalled();
    expect(client.currentMetadata.topics.get('deliveries')!.partitions).toEqual([
      { leader: 1, leaderEpoch: 6 },
      { leader: 4, leaderEpoch: 6 },
    ]);
    // A broker first met in the refusal is reached at the address it gives.
    expect(client.currentMetadata.brokers.get(4)).toEqual({ host: '127.0.0.14', port: 9092, rack: null });
  });

  it('asks for the leaders again when a refused partition names none, or none newer, or after two redirects', () => {
    for (const [attempt, leaders] of [
      [
        1,
        [
          { leaderId: 1, leaderEpoch: 6 },
          { leaderId: -1, leaderEpoch: -1 },
        ],
      ],
      [
        1,
        [
          { leaderId: 1, leaderEpoch: 6 },
          { leaderId: 2, leaderEpoch: 5 },
        ],
      ],
      [
        1,
        [
          { leaderId: 1, leaderEpoch: 6 },
          { leaderId: 7, leaderEpoch: 6 },
        ],
      ],
      [
        3,
        [
          { leaderId: 1, leaderEpoch: 6 },
          { leaderId: 2, leaderEpoch: 6 },
        ],
      ],
    ] as const) {
      const client = clientKnowing();
      const delay = producerRetryDelay(quiet)(client, 'produce', attempt, 99, refusalNaming([...leaders]));
      expect(delay).toBe(50);
      expect(client.clearMetadata).toHaveBeenCalledOnce();
      // Nothing half-moved.
      expect(client.currentMetadata.topics.get('deliveries')!.partitions.map((p) => p.leader)).toEqual([3, 3]);
    }
  });

  it('reads the leaders from the next broker after a request timed out (its leader may be cut off from its peers)', () => {
    // A broker cut off from its peers while it runs holds acks=all requests until they time out, and answers metadata
    // with itself as leader; the client read leaders from the first bootstrap broker that answers, which was that one
    // for as long as the cut lasted.
    const timedOut = Object.assign(
      new AggregateError([], 'Received response with error while executing API Produce(v11)'),
      { errors: [Object.assign(new Error('The request timed out.'), { apiCode: 7, apiId: 'REQUEST_TIMED_OUT' })] },
    );
    const asked: number[] = [];
    const producer = {
      clearMetadata: vi.fn(),
      [kGetBootstrapConnection]: (_callback: unknown, attempt = 0) => asked.push(attempt),
    };
    askNextBrokerAfterTimeouts(producer);
    const read = (attempt?: number) => producer[kGetBootstrapConnection](() => {}, attempt);
    read();
    expect(producerRetryDelay(quiet)(producer, 'produce', 1, 99, timedOut)).toBe(200);
    read();
    read(1); // the metadata read's own retry, one further
    producerRetryDelay(quiet)(producer, 'produce', 2, 99, timedOut);
    read();
    expect(producer.clearMetadata).toHaveBeenCalledTimes(2);
    expect(asked).toEqual([0, 1, 2, 2]);
    // Other failures leave the order alone.
    producerRetryDelay(quiet)(producer, 'produce', 3, 99, refused);
    read();
    expect(asked.at(-1)).toBe(2);
  });

  it('waits 200 ms doubling to 1 s after any other error, its leaders kept (the client refreshes them itself)', () => {
    // A killed leader's partitions move once the controller fences it; the client reads the leaders again before each
    // try. With up to 5 s between tries, the gateways' events waited 4.3 s more after the fence (11.1 s in all).
    const client = { clearMetadata: vi.fn() };
    const delays = [1, 2, 3, 4, 5, 30].map((attempt) =>
      producerRetryDelay(quiet)(client, 'produce', attempt, 99, refused),
    );
    expect(client.clearMetadata).not.toHaveBeenCalled();
    expect(delays).toEqual([200, 400, 800, 1_000, 1_000, 1_000]);
  });
});

describe('Publisher requests', () => {
  /** A producer that knows two topics and records every send: `replicated` of three replicas, `single` of one. */
  function fakeProducer(failPartition?: number, hangPartition?: number) {
    const sends: { topic: string; key: string; partition?: number }[][] = [];
    /** Answers the sends held on `hangPartition` (a leader that stopped answering), in order. */
    const held: (() => void)[] = [];
    const topic = (replicas: number) => ({
      partitionsCount: 6,
      partitions: Array.from({ length: 6 }, (_, leader) => ({
        leader,
        replicas: Array.from({ length: replicas }, (_, i) => i),
      })),
    });
    const producer = {
      metadata: async () => ({
        topics: new Map([
          ['replicated', topic(3)],
          ['single', topic(1)],
        ]),
      }),
      send: async ({ messages }: { messages: { topic: string; key: string; partition?: number }[] }) => {
        sends.push(messages.map(({ topic, key, partition }) => ({ topic, key, partition })));
        if (hangPartition !== undefined && messages.some((message) => message.partition === hangPartition)) {
          await new Promise<void>((resolve) => held.push(resolve));
        }
        if (failPartition !== undefined && messages.some((message) => message.partition === failPartition)) {
          throw new Error(`partition ${failPartition} refused`);
        }
      },
      close: async () => undefined,
    };
    // The constructor is private: Publisher.connect() builds the real producer.
    const publisher = new (Publisher as unknown as new (p: typeof producer) => Publisher)(producer);
    return { publisher, sends, held };
  }
  const keys = Array.from({ length: 24 }, (_, i) => `key-${i}`);

  it("sends a replicated topic's records one request per partition, each record with its key's partition", async () => {
    const { publisher, sends } = fakeProducer();
    await publisher.publish(keys.map((key) => ({ topic: 'replicated', key, value: null })));
    const partitions = new Set(keys.map((key) => partitionOf(key, 6)));
    expect(sends).toHaveLength(partitions.size);
    for (const send of sends) {
      expect(new Set(send.map((message) => message.partition)).size).toBe(1);
      for (const message of send) expect(message.partition).toBe(partitionOf(message.key, 6));
    }
    expect(
      sends
        .flat()
        .map((message) => message.key)
        .sort(),
    ).toEqual([...keys].sort());
  });

  it('sends the records of a topic of one replica in one request, partitioned by the client', async () => {
    const { publisher, sends } = fakeProducer();
    await publisher.publish(keys.map((key) => ({ topic: 'single', key, value: null })));
    expect(sends).toHaveLength(1);
    expect(sends[0]!.every((message) => message.partition === undefined)).toBe(true);
  });

  it('fails only the callers whose records were in the partition that failed', async () => {
    const failing = partitionOf('key-0', 6);
    const other = keys.find((key) => partitionOf(key, 6) !== failing)!;
    const { publisher } = fakeProducer(failing);
    const results = await Promise.allSettled([
      publisher.publish([{ topic: 'replicated', key: 'key-0', value: null }]),
      publisher.publish([{ topic: 'replicated', key: other, value: null }]),
    ]);
    expect(results.map((result) => result.status)).toEqual(['rejected', 'fulfilled']);
  });

  it("a partition whose leader stops answering holds only its own records: other partitions' callers go on", async () => {
    const stuck = partitionOf('key-0', 6);
    const others = keys.filter((key) => partitionOf(key, 6) !== stuck);
    const { publisher, sends, held } = fakeProducer(undefined, stuck);
    const settled: string[] = [];
    const first = publisher
      .publish([{ topic: 'replicated', key: 'key-0', value: null }])
      .then(() => settled.push('stuck'));
    await vi.waitFor(() => expect(held).toHaveLength(1));
    // Published while the stuck partition's request hangs: these must not wait for it.
    void publisher
      .publish(others.map((key) => ({ topic: 'replicated', key, value: null })))
      .then(() => settled.push('others'));
    await vi.waitFor(() => expect(settled).toEqual(['others']));
    const mixed = publisher
      .publish([
        { topic: 'replicated', key: 'key-0', value: null },
        { topic: 'replicated', key: others[0]!, value: null },
      ])
      .then(() => settled.push('mixed'));
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(settled).toEqual(['others']);
    // One request at a time per partition: the second record of the stuck partition waits for the first's answer.
    expect(sends.filter((send) => send.some((message) => message.partition === stuck))).toHaveLength(1);
    held.shift()!();
    await first;
    await vi.waitFor(() => expect(held).toHaveLength(1));
    held.shift()!();
    await mixed;
    expect(settled).toEqual(['others', 'stuck', 'mixed']);
    await publisher.close();
  });
});

describe('ConsumerRunner quiet topics (empty partitions left out of the fetches)', () => {
  /** A consumer that records pause/resume, and an admin whose committed offsets and partition ends the test sets. */
  function quietKafka() {
    const listeners = new Map<string, (event: { payload: unknown }) => void>();
    const paused = new Set<string>();
    const calls: string[] = [];
    const committed = new Map<string, string>();
    const ends = new Map<string, { high: string; low: string }>();
    let failing = false;
    /** As kafkajs: a consumer disconnected (or not yet running) throws on pause and resume. */
    let running = true;
    const notRunning = () => {
      if (!running) throw new Error('Consumer group was not initialized, consumer#run must be called first');
    };
    /** While set, a check waits in its first request. */
    let held: Promise<void> | undefined;
    let waiting = false;
    const consumer = {
      events: { GROUP_JOIN: 'consumer.group_join', CRASH: 'consumer.crash', REBALANCING: 'consumer.rebalancing' },
      on: (event: string, listener: (event: { payload: unknown }) => void) => listeners.set(event, listener),
      connect: async () => undefined,
      subscribe: async () => undefined,
      run: async () => undefined,
      commitOffsets: async () => undefined,
      pause: (topics: { topic: string; partitions?: number[] }[]) => {
        notRunning();
        for (const { topic, partitions = [] } of topics) {
          for (const partition of partitions) {
            paused.add(`${topic}/${partition}`);
            calls.push(`pause ${topic}/${partition}`);
          }
        }
      },
      resume: (topics: { topic: string; partitions: number[] }[]) => {
        notRunning();
        for (const { topic, partitions } of topics) {
          for (const partition of partitions) {
            paused.delete(`${topic}/${partition}`);
            calls.push(`resume ${topic}/${partition}`);
          }
        }
      },
      disconnect: async () => {
        running = false;
      },
    };
    const partitionsOf = (topic: string) =>
      [...ends.keys()].filter((key) => key.startsWith(`${topic}/`)).map((key) => Number(key.split('/')[1]));
    const admin = {
      connect: async () => undefined,
      disconnect: async () => undefined,
      fetchTopicOffsets: async (topic: string) => {
        if (failing) throw new Error('broker away');
        return partitionsOf(topic).map((partition) => ({ partition, ...ends.get(`${topic}/${partition}`)! }));
      },
      fetchOffsets: async ({ topics }: { topics: string[] }) => {
        if (held) {
          waiting = true;
          await held;
        }
        return topics.map((topic) => ({
          topic,
          partitions: partitionsOf(topic).map((partition) => ({
            partition,
            offset: committed.get(`${topic}/${partition}`) ?? '-1',
          })),
        }));
      },
    };
    return {
      kafka: { consumer: () => consumer, admin: () => admin } as unknown as Kafka,
      paused,
      calls,
      committed,
      ends,
      fail: (value: boolean) => (failing = value),
      /** Holds the next checks in their first request until the function returned is called. */
      hold: () => {
        let release!: () => void;
        held = new Promise((resolve) => (release = resolve));
        return () => {
          held = undefined;
          release();
        };
      },
      waiting: () => waiting,
      join: (memberAssignment: Record<string, number[]>) =>
        listeners.get('consumer.group_join')?.({ payload: { memberId: 'm', memberAssignment } }),
    };
  }

  const runners: ConsumerRunner[] = [];
  afterEach(async () => {
    for (const runner of runners.splice(0)) await runner.stop();
  });

  async function start(fake: ReturnType<typeof quietKafka>, fromBeginning = true, logger = pino({ level: 'silent' })) {
    const runner = new ConsumerRunner(fake.kafka, {
      groupId: 'g',
      topics: ['deliveries', 'retry-1m', 'retry-2m'],
      maxInFlight: 10,
      fromBeginning,
      quiet: { topics: ['retry-1m', 'retry-2m'], checkEveryMs: 5 },
      logger,
      handle: async () => undefined,
    });
    runners.push(runner);
    await runner.start();
    return runner;
  }

  it('pauses the assigned quiet partitions with nothing to read, and only those', async () => {
    const fake = quietKafka();
    for (const key of ['deliveries/0', 'retry-1m/0', 'retry-1m/1', 'retry-1m/2', 'retry-2m/0']) {
      fake.ends.set(key, { low: '0', high: '10' });
      fake.committed.set(key, '10');
    }
    fake.committed.set('retry-1m/1', '7'); // three records still to read (or in flight)
    const runner = await start(fake);
    fake.join({ deliveries: [0], 'retry-1m': [0, 1], 'retry-2m': [0] }); // retry-1m/2 is another member's
    await expect.poll(() => [...fake.paused].sort()).toEqual(['retry-1m/0', 'retry-2m/0']);
    expect(runner.quietPartitions).toBe(2);
    // The busy topic is never touched, whatever its offsets say.
    expect(fake.calls.some((call) => call.includes('deliveries'))).toBe(false);
  });

  it('resumes a paused partition once a record reaches it, and pauses it again once it is read', async () => {
    const fake = quietKafka();
    fake.ends.set('retry-1m/0', { low: '0', high: '4' });
    fake.committed.set('retry-1m/0', '4');
    await start(fake);
    fake.join({ 'retry-1m': [0] });
    await expect.poll(() => fake.paused.has('retry-1m/0')).toBe(true);
    fake.ends.set('retry-1m/0', { low: '0', high: '5' }); // a retry was scheduled onto it
    await expect.poll(() => fake.paused.has('retry-1m/0')).toBe(false);
    fake.committed.set('retry-1m/0', '5'); // handled and committed
    await expect.poll(() => fake.paused.has('retry-1m/0')).toBe(true);
    expect(fake.calls).toEqual(['pause retry-1m/0', 'resume retry-1m/0', 'pause retry-1m/0']);
  });

  it('resumes what it paused when the member joins again, then decides from the new assignment', async () => {
    const fake = quietKafka();
    for (const key of ['retry-1m/0', 'retry-1m/1']) {
      fake.ends.set(key, { low: '0', high: '3' });
      fake.committed.set(key, '3');
    }
    await start(fake);
    fake.join({ 'retry-1m': [0, 1] });
    await expect.poll(() => fake.paused.size).toBe(2);
    fake.join({ 'retry-1m': [1] }); // partition 0 went to another member: a pause must not follow it back here
    expect(fake.paused.size).toBe(0);
    await expect.poll(() => [...fake.paused]).toEqual(['retry-1m/1']);
  });

  it('fetches every quiet partition again while their offsets cannot be read, and says so once', async () => {
    const fake = quietKafka();
    fake.ends.set('retry-2m/0', { low: '0', high: '0' });
    fake.committed.set('retry-2m/0', '0');
    const warnings: string[] = [];
    const logger = pino({ level: 'warn' }, { write: (line: string) => void warnings.push(line) });
    await start(fake, true, logger);
    fake.join({ 'retry-2m': [0] });
    await expect.poll(() => fake.paused.size).toBe(1);
    fake.fail(true);
    await expect.poll(() => fake.paused.size).toBe(0);
    await new Promise((resolve) => setTimeout(resolve, 50)); // several failed checks
    expect(warnings.filter((line) => line.includes("quiet topics' offsets"))).toHaveLength(1);
    fake.fail(false);
    await expect.poll(() => fake.paused.size).toBe(1);
  });

  it('a check under way when the runner stops touches nothing of the stopped consumer and rejects nothing', async () => {
    // Seen in CI: the check's read failed because stop() had closed the admin client, and its fallback, resuming
    // what it had paused, threw from the disconnected consumer: an unhandled rejection, which ends a Node process.
    const fake = quietKafka();
    fake.ends.set('retry-1m/0', { low: '0', high: '3' });
    fake.committed.set('retry-1m/0', '3');
    const runner = await start(fake);
    fake.join({ 'retry-1m': [0] });
    await expect.poll(() => fake.paused.size).toBe(1);
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown) => void unhandled.push(reason);
    process.on('unhandledRejection', onUnhandled);
    try {
      const release = fake.hold();
      await expect.poll(() => fake.waiting()).toBe(true);
      fake.fail(true);
      runners.splice(runners.indexOf(runner), 1);
      await runner.stop();
      release();
      await new Promise((resolve) => setTimeout(resolve, 50));
      expect(unhandled).toEqual([]);
    } finally {
      process.off('unhandledRejection', onUnhandled);
    }
  });

  it('with no committed offset, counts a partition empty only when the group reads from its oldest record', async () => {
    const fake = quietKafka();
    fake.ends.set('retry-1m/0', { low: '0', high: '0' });
    fake.ends.set('retry-1m/1', { low: '2', high: '5' });
    await start(fake);
    fake.join({ 'retry-1m': [0, 1] });
    await expect.poll(() => [...fake.paused]).toEqual(['retry-1m/0']);

    const latest = quietKafka();
    latest.ends.set('retry-1m/0', { low: '0', high: '0' });
    await start(latest, false);
    latest.join({ 'retry-1m': [0] });
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(latest.paused.size).toBe(0);
  });

  it('stops checking once stopped', async () => {
    const fake = quietKafka();
    fake.ends.set('retry-1m/0', { low: '0', high: '1' });
    fake.committed.set('retry-1m/0', '0');
    const runner = await start(fake);
    fake.join({ 'retry-1m': [0] });
    await runner.stop();
    runners.splice(runners.indexOf(runner), 1);
    fake.committed.set('retry-1m/0', '1');
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(fake.calls.filter((call) => call.startsWith('pause retry'))).toEqual([]);
  });
});

describe("kafkajs' log (createKafka)", () => {
  /** A logger that records at which level each entry came. */
  const recording = () => {
    const entries: [string, string][] = [];
    const at = (level: string) => (_fields: unknown, message: string) => entries.push([level, message]);
    const logger = { error: at('error'), warn: at('warn'), info: at('info'), debug: at('debug') };
    return { entries, logger: logger as unknown as Parameters<typeof createKafka>[2] };
  };

  it('logs what brokers answer while partitions and groups move as warnings, other errors as errors', () => {
    const { entries, logger } = recording();
    const log = createKafka(['127.0.0.1:9092'], 'log-test', logger).logger();
    // What kafkajs logged at error level through a rolling restart of the brokers, each recovered from by itself.
    log.error('Response Fetch(key: 1, version: 10)', {
      error: 'This server is not the leader for that topic-partition',
    });
    log.error('Response Heartbeat(key: 12, version: 3)', {
      error: 'This is not the correct coordinator for this group',
    });
    log.error('Response OffsetCommit(key: 8, version: 5)', {
      error: "The coordinator is loading and hence can't process requests for this group",
    });
    log.error('Response Fetch(key: 1, version: 10)', {
      error: 'Not authorized to access topics: [Topic authorization failed]',
    });
    expect(entries).toEqual([
      ['warn', 'kafka: Response Fetch(key: 1, version: 10)'],
      ['warn', 'kafka: Response Heartbeat(key: 12, version: 3)'],
      ['warn', 'kafka: Response OffsetCommit(key: 8, version: 5)'],
      ['error', 'kafka: Response Fetch(key: 1, version: 10)'],
    ]);
  });
});
