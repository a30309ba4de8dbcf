import { describe, expect, it } from 'vitest';
import type { ConcurrencyMetrics, LimitsSnapshot, ThrottleReason } from '../core/metrics.ts';
import { ConcurrencyLimiter, type LimiterSettings } from './concurrency-limiter.ts';
import type { AttemptResult } from './outcome.ts';

const ok = (durationMs = 10): AttemptResult => ({ statusCode: 200, errorMessage: null, durationMs });
const answer = (statusCode: number, retryAfterMs?: number): AttemptResult => ({
  statusCode,
  errorMessage: `HTTP ${statusCode}`,
  durationMs: 5,
  ...(retryAfterMs === undefined ? {} : { retryAfterMs }),
});
const noAnswer = (failure?: 'timeout' | 'connection'): AttemptResult => ({
  statusCode: null,
  errorMessage: 'no answer',
  durationMs: 30_000,
  ...(failure ? { failure } : {}),
});

/** A limiter on a fake clock, with its metrics recorded. */
function setup(settings: Partial<LimiterSettings> = {}) {
  let clock = 1_000_000;
  const throttled: ThrottleReason[] = [];
  let read: (() => LimitsSnapshot) | undefined;
  const metrics: ConcurrencyMetrics = {
    throttled: (reason) => throttled.push(reason),
    readLimits: (reader) => {
      read = reader;
    },
  };
  const limiter = new ConcurrencyLimiter({ ceiling: 20, retryAfterCapMs: 60_000, ...settings }, metrics, () => clock);
  return {
    limiter,
    throttled,
    scrape: () => read!(),
    advance: (ms: number) => {
      clock += ms;
    },
    /** Begins `count` attempts to `id` at once and answers them all with `result`, in order. */
    round: (id: string, count: number, result: AttemptResult) => {
      const answers = Array.from({ length: count }, () => limiter.begin(id, 'tenant-a'));
      for (const done of answers) done(result);
    },
  };
}

describe('ConcurrencyLimiter', () => {
  it('starts every subscription at the ceiling (the static lane limit) and tracks none before an attempt', () => {
    const t = setup();
    expect(t.limiter.limit('sub-1')).toBe(20);
    expect(t.limiter.size).toBe(0);
    t.round('sub-1', 3, ok());
    expect(t.limiter.limit('sub-1')).toBe(20);
    expect(t.limiter.size).toBe(1);
  });

  it.each<[string, AttemptResult, ThrottleReason]>([
    ['a 429', answer(429), '429'],
    ['a 503', answer(503), '503'],
    ['no answer in time', noAnswer('timeout'), 'timeout'],
    ['a refused or dropped connection', noAnswer('connection'), 'connection'],
  ])('%s halves the limit, once per window of attempts', (_name, result, reason) => {
    const t = setup();
    // Twenty attempts under way when the endpoint starts refusing: twenty refusals, one decrease.
    t.round('sub-1', 20, result);
    expect(t.limiter.limit('sub-1')).toBe(10);
    expect(t.throttled).toEqual(Array<ThrottleReason>(20).fill(reason));
    // Attempts begun after the decrease answer for the new limit: the next refusal halves it again.
    t.round('sub-1', 10, result);
    expect(t.limiter.limit('sub-1')).toBe(5);
    t.round('sub-1', 1, result);
    t.round('sub-1', 1, result);
    t.round('sub-1', 1, result);
    expect(t.limiter.limit('sub-1')).toBe(1); // 5 → 2.5 → 1.25 → floor
    t.round('sub-1', 1, result);
    expect(t.limiter.limit('sub-1')).toBe(1); // never below the floor
  });

  it('an answer to an attempt begun before a decrease does not decrease again, even if it arrives after', () => {
    const t = setup();
    const early = t.limiter.begin('sub-1', 'tenant-a');
    t.round('sub-1', 1, answer(503));
    expect(t.limiter.limit('sub-1')).toBe(10);
    early(answer(503));
    expect(t.limiter.limit('sub-1')).toBe(10);
  });

  it.each<[string, AttemptResult]>([
    ['a 500', answer(500)],
    ['a 404', answer(404)],
    ['a 401', answer(401)],
    ['a redirect', answer(302)],
    ['a blocked address or a DNS failure (no answer, nothing about load)', noAnswer()],
    ['a 500 with Retry-After (only 429 and 503 carry it)', answer(500, 30_000)],
  ])('%s neither cuts nor grows the limit', (_name, result) => {
    const t = setup();
    t.round('sub-1', 20, answer(429));
    t.round('sub-1', 20, result);
    expect(t.limiter.limit('sub-1')).toBe(10);
    expect(t.throttled.filter((reason) => reason !== '429')).toEqual([]);
  });

  it('grows by about one per window of successes back up to the ceiling, and never past it', () => {
    const t = setup();
    for (let i = 0; i < 5; i += 1) t.round('sub-1', 1, noAnswer('timeout'));
    expect(t.limiter.limit('sub-1')).toBe(1);
    const seen = [1];
    for (let round = 0; round < 30; round += 1) {
      t.round('sub-1', t.limiter.limit('sub-1'), ok());
      seen.push(t.limiter.limit('sub-1'));
    }
    // At most one more attempt at a time per round (a window of answers), and at least one every two rounds.
    for (let i = 1; i < seen.length; i += 1) expect([0, 1]).toContain(seen[i]! - seen[i - 1]!);
    for (let i = 2; i < seen.length; i += 1)
      expect(seen[i]! - seen[i - 2]!).toBeGreaterThanOrEqual(seen[i]! < 20 ? 1 : 0);
    expect(seen.slice(0, 3)).toEqual([1, 2, 2]);
    expect(seen.at(-1)).toBe(20);
  });

  describe('Retry-After', () => {
    it('pins the limit at the floor until the time it names, then grows from the floor', () => {
      const t = setup();
      t.round('sub-1', 3, answer(429, 1_000));
      expect(t.limiter.limit('sub-1')).toBe(1);
      // Successes inside the window do not grow it: the endpoint asked for a pause.
      t.advance(500);
      t.round('sub-1', 1, ok());
      expect(t.limiter.limit('sub-1')).toBe(1);
      t.advance(499);
      expect(t.limiter.limit('sub-1')).toBe(1);
      t.advance(1);
      expect(t.limiter.limit('sub-1')).toBe(1); // the window is over; the limit restarts at the floor
      t.round('sub-1', 1, ok());
      expect(t.limiter.limit('sub-1')).toBe(2);
      expect(t.scrape().held).toBe(0);
    });

    it('a later answer extends the window, an earlier one never shortens it', () => {
      const t = setup();
      t.round('sub-1', 1, answer(503, 10_000));
      t.advance(1_000);
      t.round('sub-1', 1, answer(503, 1_000));
      t.advance(5_000);
      expect(t.limiter.limit('sub-1')).toBe(1);
      t.round('sub-1', 1, ok());
      expect(t.limiter.limit('sub-1')).toBe(1);
      expect(t.scrape().held).toBe(1);
      t.advance(4_000);
      t.round('sub-1', 1, ok());
      expect(t.limiter.limit('sub-1')).toBe(2);
    });

    it('caps an absurd window at the longest retry delay', () => {
      const t = setup({ retryAfterCapMs: 2_000 });
      t.round('sub-1', 1, answer(429, 86_400_000));
      t.advance(1_999);
      t.round('sub-1', 1, ok());
      expect(t.limiter.limit('sub-1')).toBe(1);
      t.advance(1);
      t.round('sub-1', 1, ok());
      expect(t.limiter.limit('sub-1')).toBe(2);
    });

    it('Retry-After: 0 drops to the floor with no window', () => {
      const t = setup();
      t.round('sub-1', 1, answer(429, 0));
      expect(t.limiter.limit('sub-1')).toBe(1);
      t.round('sub-1', 1, ok());
      expect(t.limiter.limit('sub-1')).toBe(2);
    });
  });

  describe('latency', () => {
    it('backs off when the recent latency rises well above the baseline, once per window', () => {
      const t = setup();
      t.round('sub-1', 20, ok(20));
      expect(t.limiter.limit('sub-1')).toBe(20);
      // The endpoint slows from 20 ms to 2 s: after a few answers the recent average crosses twice the baseline.
      const limits: number[] = [];
      for (let round = 0; round < 6; round += 1) {
        t.round('sub-1', t.limiter.limit('sub-1'), ok(2_000));
        limits.push(t.limiter.limit('sub-1'));
      }
      expect(limits[0]).toBeLessThan(20);
      for (let i = 1; i < limits.length; i += 1) expect(limits[i]).toBeLessThanOrEqual(limits[i - 1]!);
      expect(limits.at(-1)).toBeLessThanOrEqual(8);
      expect(t.throttled).toContain('latency');
    });

    it('ignores jitter: a fast endpoint going from 2 ms to 150 ms is not overloaded', () => {
      const t = setup();
      t.round('sub-1', 20, ok(2));
      for (let round = 0; round < 10; round += 1) t.round('sub-1', 20, ok(150));
      expect(t.limiter.limit('sub-1')).toBe(20);
      expect(t.throttled).toEqual([]);
    });

    it('a steadily slow endpoint is its own baseline: 5 s answers are not a rise', () => {
      const t = setup();
      for (let round = 0; round < 10; round += 1) t.round('sub-1', 20, ok(5_000));
      expect(t.limiter.limit('sub-1')).toBe(20);
    });
  });

  it('keeps a limit near an endpoint that refuses beyond its capacity (sawtooth between half and the capacity)', () => {
    const t = setup({ ceiling: 50 });
    const capacity = 12;
    const limits: number[] = [];
    for (let round = 0; round < 200; round += 1) {
      const n = t.limiter.limit('sub-1');
      limits.push(n);
      const answers = Array.from({ length: n }, () => t.limiter.begin('sub-1', 'tenant-a'));
      answers.forEach((done, index) => done(index < capacity ? ok() : answer(429)));
    }
    const settled = limits.slice(20);
    expect(Math.max(...settled)).toBeLessThanOrEqual(capacity + 1);
    expect(Math.min(...settled)).toBeGreaterThanOrEqual(capacity / 2 - 1);
  });

  it('keeps subscriptions apart: one throttled, the others untouched', () => {
    const t = setup();
    t.round('slow', 20, answer(429, 5_000));
    t.round('fast', 20, ok());
    expect([t.limiter.limit('slow'), t.limiter.limit('fast'), t.limiter.limit('other')]).toEqual([1, 20, 20]);
  });

  describe('bounded state', () => {
    it('forgets a subscription idle for idleMs, unless an attempt is under way or a window is open', () => {
      const t = setup({ idleMs: 60_000, retryAfterCapMs: 600_000 });
      t.round('idle', 1, answer(429));
      const pending = t.limiter.begin('busy', 'tenant-a');
      t.round('held', 1, answer(429, 120_000));
      t.advance(61_000);
      t.round('recent', 1, ok());
      expect(t.limiter.size).toBe(3); // idle forgotten; busy in flight; held in its window
      expect(t.limiter.limit('idle')).toBe(20); // forgotten: back at the ceiling
      pending(ok());
      t.advance(60_000);
      t.round('recent', 1, ok());
      expect(t.limiter.size).toBe(1);
    });

    it('never tracks more than maxTracked: the least recently begun with nothing in flight makes room', () => {
      const t = setup({ maxTracked: 3 });
      const pending = t.limiter.begin('a', 'tenant-a');
      t.round('b', 1, answer(429));
      t.round('c', 1, answer(429));
      t.round('d', 1, answer(429));
      expect(t.limiter.size).toBe(3);
      expect(t.limiter.limit('b')).toBe(20); // b went; a is in flight
      expect([t.limiter.limit('c'), t.limiter.limit('d')]).toEqual([10, 10]);
      pending(undefined);
      t.round('e', 1, ok());
      expect(t.limiter.size).toBe(3);
    });
  });

  it('shows the limits to the metrics with a bounded set of names: at most 10, lowest first, below the ceiling', () => {
    const t = setup();
    for (let i = 0; i < 30; i += 1) t.round(`sub-${i}`, 1, answer(503));
    t.round('sub-5', 1, answer(503));
    t.round('sub-7', 1, answer(429, 30_000));
    t.round('healthy', 1, ok());
    const snapshot = t.scrape();
    expect(snapshot.limits).toHaveLength(31);
    expect(snapshot.held).toBe(1);
    expect(snapshot.mostThrottled).toHaveLength(10);
    expect(snapshot.mostThrottled[0]).toEqual({ subscriptionId: 'sub-7', tenantId: 'tenant-a', limit: 1 });
    expect(snapshot.mostThrottled[1]).toEqual({ subscriptionId: 'sub-5', tenantId: 'tenant-a', limit: 5 });
    expect(snapshot.mostThrottled.map((entry) => entry.subscriptionId)).not.toContain('healthy');
  });
});
