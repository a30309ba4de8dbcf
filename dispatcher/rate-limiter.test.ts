import { describe, expect, it } from 'vitest';
import { partitionOf } from '../core/kafka.ts';
import { HELD_RETRY_MS, RateLimiter, shareOf, TokenBucket, type GroupView } from './rate-limiter.ts';

/** A partitioner for the tests: the key's number, modulo the partition count. */
const byNumber = (key: string, partitions: number) => Number(key) % partitions;

/** Starts allowed by `wait` while the fake clock runs from 0 to `untilMs`, asking again when told to. */
function startsOver(limiter: RateLimiter, key: string, clock: { now: number }, untilMs: number): number[] {
  const starts: number[] = [];
  while (clock.now <= untilMs) {
    const waitMs = limiter.wait(key);
    if (waitMs === 0) starts.push(clock.now);
    else clock.now += waitMs;
  }
  return starts;
}

/** The most starts in any window [t, t + 1000). */
const busiestSecond = (starts: number[]) =>
  Math.max(...starts.map((at) => starts.filter((other) => other >= at && other < at + 1000).length));

describe('TokenBucket', () => {
  it('holds one token: one start at once, then one per 1/rate', () => {
    const bucket = new TokenBucket(5, 0);
    expect(bucket.take(0)).toBe(0);
    expect(bucket.take(0)).toBe(200);
    expect(bucket.take(150)).toBe(50);
    expect(bucket.take(200)).toBe(0);
    // Idle for long: still only one token (the burst is one).
    expect(bucket.take(10_000)).toBe(0);
    expect(bucket.take(10_000)).toBe(200);
  });

  it('changes its rate from now on, and is full (forgettable) once a whole token is back', () => {
    const bucket = new TokenBucket(1, 0);
    expect(bucket.take(0)).toBe(0);
    bucket.setRate(10, 500); // half a token gathered at 1/s
    expect(bucket.take(500)).toBe(50);
    expect(bucket.full(549)).toBe(false);
    expect(bucket.full(550)).toBe(true);
  });
});

describe('shareOf', () => {
  const view = (assignments: Record<string, Record<string, number[]>>, self = 'm1'): GroupView => ({
    self,
    members: Object.entries(assignments).map(([memberId, assignment]) => ({ memberId, assignment })),
  });

  it('is 1 when this member owns every partition the key maps to, whatever the group size', () => {
    const group = view({ m1: { d: [0], r: [0] }, m2: { d: [1], r: [1] }, m3: { d: [2], r: [2] } });
    expect(shareOf('3', group, byNumber)).toBe(1); // partition 0 of both topics
  });

  it('splits the limit among the members owning one of its partitions (the deliveries topic or a retry tier)', () => {
    const group = view({ m1: { d: [0, 1], r: [1] }, m2: { d: [2], r: [0, 2] }, m3: { d: [3], r: [3] } });
    expect(shareOf('0', group, byNumber)).toBe(1 / 2); // d-0 on m1, r-0 on m2
    expect(shareOf('1', group, byNumber)).toBe(1); // d-1 and r-1 on m1
    expect(shareOf('2', group, byNumber)).toBe(1 / 2); // both on m2, and m1 counts itself
    expect(shareOf('3', group, byNumber)).toBe(1 / 2);
  });

  it('takes each topic partition count from the assignment', () => {
    const group = view({ m1: { d: [0, 1, 2, 3], r: [0] }, m2: { r: [1] } });
    expect(shareOf('5', group, byNumber)).toBe(1 / 2); // d: 5 % 4 = 1 (m1); r: 5 % 2 = 1 (m2)
    expect(shareOf('4', group, byNumber)).toBe(1); // d-0, r-0: m1
  });

  it('maps keys as the producer does (murmur2): the same key, the same partition', () => {
    const partitions = new Set(Array.from({ length: 200 }, (_, i) => partitionOf(`subscription-${i}`, 8)));
    expect([...partitions].every((p) => p >= 0 && p < 8)).toBe(true);
    expect(partitions.size).toBe(8);
    expect(partitionOf('subscription-1', 8)).toBe(partitionOf('subscription-1', 8));
  });
});

describe('RateLimiter', () => {
  const soleOwner: GroupView = { self: 'm1', members: [{ memberId: 'm1', assignment: { d: [0] } }] };
  const twoOwners: GroupView = {
    self: 'm1',
    members: [
      { memberId: 'm1', assignment: { d: [0] } },
      { memberId: 'm2', assignment: { r: [0] } },
    ],
  };

  it('lets an unlimited subscription through at once, with no bucket and no wait counted', () => {
    const waits: string[] = [];
    const limiter = new RateLimiter(
      byNumber,
      (cause) => waits.push(cause),
      () => 0,
    );
    for (let i = 0; i < 1000; i += 1) expect(limiter.wait('0')).toBe(0);
    limiter.setLimit('0', null);
    expect(limiter.wait('0')).toBe(0);
    expect(waits).toEqual([]);
  });

  it('holds a limited subscription until the group is known, then paces it at its limit (burst of one)', () => {
    const clock = { now: 0 };
    const waits: string[] = [];
    const limiter = new RateLimiter(
      byNumber,
      (cause) => waits.push(cause),
      () => clock.now,
    );
    limiter.setLimit('0', 5);
    expect(limiter.wait('0')).toBe(HELD_RETRY_MS);
    expect(waits).toEqual(['held']);
    limiter.setView(soleOwner);
    const starts = startsOver(limiter, '0', clock, 10_000);
    expect(starts.length).toBe(51); // 0, 200, …, 10,000
    expect(busiestSecond(starts)).toBe(5);
    expect(waits.filter((cause) => cause === 'token').length).toBe(51); // the last one runs past the end
  });

  it('uses its share: two owners each pace at half the limit, so their sum stays at it', () => {
    const clock = { now: 0 };
    const limiter = new RateLimiter(byNumber, undefined, () => clock.now);
    limiter.setView(twoOwners);
    limiter.setLimit('0', 5);
    const starts = startsOver(limiter, '0', clock, 10_000);
    expect(starts.length).toBe(26); // 2.5/s: 0, 400, …, 10,000
    expect(busiestSecond(starts)).toBeLessThanOrEqual(3);
  });

  it('applies a changed limit, a rebalance (held, then the new share) and a cleared limit', () => {
    const clock = { now: 0 };
    const limiter = new RateLimiter(byNumber, undefined, () => clock.now);
    limiter.setView(soleOwner);
    limiter.setLimit('0', 1);
    expect(limiter.wait('0')).toBe(0);
    expect(limiter.wait('0')).toBe(1000);
    limiter.setLimit('0', 10);
    expect(limiter.wait('0')).toBe(100);
    limiter.setView(undefined);
    expect(limiter.wait('0')).toBe(HELD_RETRY_MS);
    limiter.setView(twoOwners);
    clock.now = 100;
    expect(limiter.wait('0')).toBe(0);
    expect(limiter.wait('0')).toBe(200); // 5/s now
    limiter.setLimit('0', null);
    expect(limiter.wait('0')).toBe(0);
  });

  it('forgets limits not seen for its idle time (a limit is learned again with the next record)', () => {
    const clock = { now: 0 };
    const limiter = new RateLimiter(byNumber, undefined, () => clock.now, 1_000);
    limiter.setView(soleOwner);
    limiter.setLimit('0', 1);
    expect(limiter.wait('0')).toBe(0);
    clock.now = 120_000;
    limiter.wait('1'); // unlimited: does not sweep
    limiter.setLimit('2', 1);
    limiter.wait('2'); // sweeps
    expect(limiter.wait('0')).toBe(0);
    expect(limiter.wait('0')).toBe(0); // forgotten: unlimited until its next record says otherwise
  });
});
