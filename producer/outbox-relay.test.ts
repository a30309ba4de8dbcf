// The outbox relay's sweep against an in-memory store whose Cassandra requests can fail: one failed request costs the
// order (or bucket) it was for, never the rest of the pass.
import { describe, expect, it } from 'vitest';
import { budgetLeft, withinBudget } from '../core/budget.ts';
import { createLogger } from '../core/log.ts';
import type { PurchaseMetrics, PurchaseStage } from '../core/metrics.ts';
import { OutboxRelay } from './outbox-relay.ts';
import { MINUTE, type ListedPointer, type OutboxRow, type PurchaseStore } from './purchase-store.ts';

const NOW = 1_000 * MINUTE + 30_000;
const CURRENT = Math.floor(NOW / MINUTE);

function row(orderId: string, occurredAt = '2026-11-26T00:00:00.000Z'): OutboxRow {
  return {
    tenantId: 't',
    orderId,
    outboxId: `${orderId}-1`,
    eventType: 'purchaseOrder.validated',
    occurredAt,
    reference: null,
    payload: '{}',
  };
}

/** Pointers by bucket, rows by order; `failing` names what throws like a timed-out request (an order id, or `list:<bucket>`). */
function memoryStore(pointers: Map<number, string[]>, failing: Set<string>, occurredAt?: string) {
  const rows = new Map([...pointers.values()].flat().map((orderId) => [orderId, [row(orderId, occurredAt)]]));
  let progress: number | undefined = CURRENT - 2;
  const timeout = (what: string) =>
    new Error(`The host 127.0.0.21:9042 did not reply before timeout 1500 ms (${what})`);
  const store = {
    relayProgress: async () => progress,
    saveRelayProgress: async (_name: string, bucket: number) => {
      progress = bucket;
    },
    pointers: async (bucket: number) => {
      if (failing.has(`list:${bucket}`)) throw timeout(`list ${bucket}`);
      return (pointers.get(bucket) ?? []).map((orderId) => ({ tenantId: 't', orderId, writer: { id: 'w', shard: 0 } }));
    },
    unpublished: async (_tenantId: string, orderId: string) => {
      if (failing.has(orderId)) throw timeout(orderId);
      return rows.get(orderId) ?? [];
    },
    markPublished: async (published: OutboxRow) => {
      rows.set(published.orderId, []);
    },
    dropPointer: async (bucket: number, { orderId }: ListedPointer) => {
      pointers.set(
        bucket,
        (pointers.get(bucket) ?? []).filter((id) => id !== orderId),
      );
    },
  };
  return { store: store as unknown as PurchaseStore, progress: () => progress, rows };
}

/** Counts the store's reads of orders from now on. */
function countReads(store: PurchaseStore): () => number {
  let reads = 0;
  const read = store.unpublished.bind(store);
  store.unpublished = async (tenantId: string, orderId: string) => {
    reads += 1;
    return read(tenantId, orderId);
  };
  return () => reads;
}

function relay(
  store: PurchaseStore,
  published: string[],
  publish?: () => Promise<void>,
  options: {
    now?: () => number;
    peerGraceMs?: number;
    listEveryMs?: number;
    settleMs?: number;
    window?: number;
    metrics?: PurchaseMetrics;
  } = {},
) {
  return new OutboxRelay(
    store,
    publish ?? (async (published_: OutboxRow) => void published.push(published_.orderId)),
    createLogger('test', 'silent'),
    {
      name: 'test',
      intervalMs: 100,
      lookbackMinutes: 5,
      settleMs: 1_000,
      concurrency: 4,
      window: 100,
      windowBytes: 1 << 20,
      now: () => NOW,
      ...options,
    },
  );
}

describe('OutboxRelay sweep', () => {
  it('publishes the orders of later buckets in a pass where an order of an earlier bucket could not be read', async () => {
    const pointers = new Map([
      [CURRENT - 2, ['a', 'b']],
      [CURRENT - 1, ['c']],
      [CURRENT, ['d']],
    ]);
    const { store, progress } = memoryStore(pointers, new Set(['a']));
    const published: string[] = [];
    const pass = relay(store, published).pass();
    await expect(pass).resolves.toBe(3);
    expect(published.sort()).toEqual(['b', 'c', 'd']);
    // The bucket of the order not read stays the oldest open one: the next pass starts there and reads it again.
    expect(progress()).toBe(CURRENT - 2);
    expect(pointers.get(CURRENT - 2)).toEqual(['a']);
  });

  it('goes on past a bucket whose pointers could not be listed, and keeps that bucket open', async () => {
    const pointers = new Map([
      [CURRENT - 2, ['a']],
      [CURRENT - 1, ['b']],
      [CURRENT, ['c']],
    ]);
    const failing = new Set([`list:${CURRENT - 2}`]);
    const { store, progress } = memoryStore(pointers, failing);
    const published: string[] = [];
    const sweeper = relay(store, published);
    await expect(sweeper.pass()).resolves.toBe(2);
    expect(published.sort()).toEqual(['b', 'c']);
    expect(progress()).toBe(CURRENT - 2);
    failing.clear();
    await sweeper.pass();
    expect(published.sort()).toEqual(['a', 'b', 'c']);
  });
});

describe('OutboxRelay sweep beside other gateways', () => {
  it("reads a newly listed order once its writer's relay has had the grace, and publishes what it left unpublished", async () => {
    const pointers = new Map([[CURRENT, ['fresh', 'lost']]]);
    // Both committed 200 ms before the sweep lists them, by another gateway whose relay is publishing them.
    const { store, rows } = memoryStore(pointers, new Set(), new Date(NOW - 200).toISOString());
    const reads = countReads(store);
    const published: string[] = [];
    let now = NOW;
    const sweeper = relay(store, published, undefined, { now: () => now, peerGraceMs: 1_000, settleMs: 60_000 });
    await expect(sweeper.pass()).resolves.toBe(0);
    // The other gateway published 'fresh' meanwhile; 'lost' it never did (it crashed after its commit).
    rows.set('fresh', []);
    now = NOW + 500;
    await expect(sweeper.pass()).resolves.toBe(0);
    expect(reads()).toBe(0); // neither read yet: the grace runs from the listing
    now = NOW + 1_000;
    await expect(sweeper.pass()).resolves.toBe(1);
    expect(published).toEqual(['lost']);
    expect(reads()).toBe(2); // one read each, and no second one for a row found young and held
    // The pointers stay until their settling read, as without the grace.
    expect(pointers.get(CURRENT)).toEqual(['fresh', 'lost']);
  });

  it('holds a row committed after its pointer was listed (its writer between pointer and batch) for its own grace', async () => {
    const pointers = new Map([[CURRENT, ['late']]]);
    const { store } = memoryStore(pointers, new Set(), new Date(NOW + 600).toISOString());
    const published: string[] = [];
    let now = NOW;
    const sweeper = relay(store, published, undefined, { now: () => now, peerGraceMs: 1_000, settleMs: 60_000 });
    await expect(sweeper.pass()).resolves.toBe(0);
    now = NOW + 1_000; // read: committed 400 ms ago, left to its writer until 1,600
    await expect(sweeper.pass()).resolves.toBe(0);
    now = NOW + 1_600;
    await expect(sweeper.pass()).resolves.toBe(1);
    expect(published).toEqual(['late']);
  });

  it('without a grace (gateways that run no relay) publishes what it reads at once', async () => {
    const pointers = new Map([[CURRENT, ['fresh']]]);
    const { store } = memoryStore(pointers, new Set(), new Date(NOW - 200).toISOString());
    const published: string[] = [];
    await expect(relay(store, published).pass()).resolves.toBe(1);
    expect(published).toEqual(['fresh']);
  });
});

describe('OutboxRelay listing the pointers at most every listEveryMs', () => {
  /** The memory store, counting its listings. */
  function counted(pointers: Map<number, string[]>, failing = new Set<string>(), occurredAt?: string) {
    const memory = memoryStore(pointers, failing, occurredAt);
    const listings = { count: 0 };
    const list = memory.store.pointers.bind(memory.store);
    memory.store.pointers = async (bucket: number) => {
      listings.count += 1;
      return list(bucket);
    };
    return { ...memory, listings };
  }

  it('lists once per listEveryMs; the sweeps between publish a held row and settle pointers without listing', async () => {
    const pointers = new Map([[CURRENT, ['lost']]]);
    // Committed 200 ms before the first sweep by a gateway that crashed before publishing it.
    const { store, listings } = counted(pointers, new Set(), new Date(NOW - 200).toISOString());
    const published: string[] = [];
    let now = NOW;
    const sweeper = relay(store, published, undefined, {
      now: () => now,
      peerGraceMs: 1_000,
      listEveryMs: 5_000,
      settleMs: 2_000,
    });
    await expect(sweeper.pass()).resolves.toBe(0);
    // The progress of buckets CURRENT - 2 to CURRENT: three listings, once.
    expect(listings.count).toBe(3);
    for (now = NOW + 100; now < NOW + 1_000; now += 100) await sweeper.pass();
    expect(published).toEqual([]);
    now = NOW + 1_000; // listed for the grace: published by a sweep that lists nothing
    await expect(sweeper.pass()).resolves.toBe(1);
    expect(published).toEqual(['lost']);
    expect(pointers.get(CURRENT)).toEqual(['lost']);
    now = NOW + 2_000; // settled (settleMs after it was first listed): its pointer goes
    await sweeper.pass();
    expect(pointers.get(CURRENT)).toEqual([]);
    expect(listings.count).toBe(3);
    now = NOW + 5_000;
    await sweeper.pass();
    // From the oldest bucket still open (CURRENT - 1; CURRENT - 2 was found empty): two more.
    expect(listings.count).toBe(5);
  });

  it('finds a pointer written between two listings at the next one', async () => {
    const pointers = new Map<number, string[]>([[CURRENT, []]]);
    const { store, rows } = counted(pointers, new Set(), new Date(NOW - 5_000).toISOString());
    const published: string[] = [];
    let now = NOW;
    const sweeper = relay(store, published, undefined, { now: () => now, peerGraceMs: 1_000, listEveryMs: 1_000 });
    await sweeper.pass();
    pointers.set(CURRENT, ['late']);
    rows.set('late', [row('late', new Date(NOW - 5_000).toISOString())]);
    now = NOW + 500;
    await expect(sweeper.pass()).resolves.toBe(0);
    now = NOW + 1_000; // listed now, read once listed for the grace
    await expect(sweeper.pass()).resolves.toBe(0);
    now = NOW + 2_000;
    await expect(sweeper.pass()).resolves.toBe(1);
    expect(published).toEqual(['late']);
  });

  it('lists again on the next sweep after a listing failed', async () => {
    const pointers = new Map([[CURRENT, ['a']]]);
    const failing = new Set([`list:${CURRENT}`]);
    const { store, listings } = counted(pointers, failing, new Date(NOW - 5_000).toISOString());
    const published: string[] = [];
    let now = NOW;
    const sweeper = relay(store, published, undefined, { now: () => now, peerGraceMs: 1_000, listEveryMs: 60_000 });
    await expect(sweeper.pass()).resolves.toBe(0);
    failing.clear();
    now = NOW + 100;
    await expect(sweeper.pass()).resolves.toBe(0);
    now = NOW + 1_100;
    await expect(sweeper.pass()).resolves.toBe(1);
    expect(published).toEqual(['a']);
    expect(listings.count).toBe(3 + 2);
  });
});

describe('OutboxRelay nudge', () => {
  it('publishes outside the budget of the API request that committed the row, which does not wait for it', async () => {
    const { store } = memoryStore(new Map([[CURRENT, ['o1']]]), new Set());
    const budgets: (number | undefined)[] = [];
    const outbox = relay(store, [], async () => {
      budgets.push(budgetLeft());
    });
    // The request's budget is spent by the time the publication runs: inside it, the publication would be refused.
    withinBudget(0, () => outbox.nudge(row('o1')));
    await outbox.idle();
    expect(budgets).toEqual([undefined]);
  });
});

/** Metrics that keep what is recorded: each stage's observations, and the events published by path. */
function recordingMetrics() {
  const stages = new Map<PurchaseStage, number[]>();
  const published = { nudge: 0, sweep: 0 };
  const metrics: PurchaseMetrics = {
    stage: (stage, ms) => stages.set(stage, [...(stages.get(stage) ?? []), ms]),
    published: (path, count) => void (published[path] += count),
  };
  return { metrics, stages, published };
}

describe('OutboxRelay metrics', () => {
  it("times a nudged event from its commit: the wait for the relay, the publication until Kafka's acknowledgement, both", async () => {
    const { store } = memoryStore(new Map([[CURRENT, ['o1']]]), new Set());
    const { metrics, stages, published } = recordingMetrics();
    let acknowledge!: () => void;
    const outbox = relay(store, [], () => new Promise<void>((resolve) => (acknowledge = resolve)), { metrics });
    outbox.nudge(row('o1'));
    await new Promise((resolve) => setTimeout(resolve, 30));
    acknowledge();
    await outbox.idle();
    expect([...stages.keys()].sort()).toEqual(['commit_to_publish', 'commit_to_topic', 'outbox_publish']);
    const [publish] = stages.get('outbox_publish')!;
    const [toTopic] = stages.get('commit_to_topic')!;
    const [toPublish] = stages.get('commit_to_publish')!;
    // The broker held the acknowledgement 30 ms: the publication and the whole way to the topic took that at least.
    expect(publish).toBeGreaterThanOrEqual(25);
    expect(toTopic).toBeGreaterThanOrEqual(publish!);
    expect(toTopic! - toPublish! - publish!).toBeCloseTo(0, 5);
    expect(published).toEqual({ nudge: 1, sweep: 0 });
  });

  it('times a nudge that waited for room in the window from its commit, not from when it got room', async () => {
    const { store } = memoryStore(new Map([[CURRENT, ['o1', 'o2']]]), new Set());
    const { metrics, stages, published } = recordingMetrics();
    const acknowledgements: (() => void)[] = [];
    const outbox = relay(store, [], () => new Promise<void>((resolve) => acknowledgements.push(resolve)), {
      metrics,
      window: 1,
    });
    outbox.nudge(row('o1'));
    outbox.nudge(row('o2')); // the window is full: o2 waits as an id, and its row is read when o1 is acknowledged
    await new Promise((resolve) => setTimeout(resolve, 30));
    acknowledgements.shift()!();
    while (acknowledgements.length === 0) await new Promise((resolve) => setTimeout(resolve, 1));
    acknowledgements.shift()!();
    await outbox.idle();
    const waits = stages.get('commit_to_publish')!;
    expect(waits).toHaveLength(2);
    expect(waits[1]).toBeGreaterThanOrEqual(25);
    expect(published).toEqual({ nudge: 2, sweep: 0 });
  });

  it('times an event the sweep published from the time its row records, and counts it apart', async () => {
    const occurredAt = new Date(Date.now() - 5_000).toISOString();
    const { store } = memoryStore(new Map([[CURRENT, ['a', 'b']]]), new Set(), occurredAt);
    const { metrics, stages, published } = recordingMetrics();
    await expect(relay(store, [], undefined, { metrics }).pass()).resolves.toBe(2);
    expect([...stages.keys()]).toEqual(['sweep_to_topic']);
    for (const ms of stages.get('sweep_to_topic')!) expect(ms).toBeGreaterThanOrEqual(5_000);
    expect(stages.get('sweep_to_topic')).toHaveLength(2);
    expect(published).toEqual({ nudge: 0, sweep: 2 });
  });
});
