import { describe, expect, it } from 'vitest';
import {
  decideFate,
  failureWindow,
  holdHop,
  nextHop,
  parseRetryAfter,
  retryAfterWait,
  type AttemptResult,
} from './outcome.ts';

const MINUTE = 60_000;
const HOUR = 60 * MINUTE;
const DAY = 24 * HOUR;
// DESIGN §9 default schedule: 1m 2m 4m 8m 16m 32m 64m 128m, then 4h repeated.
const DELAYS = [1, 2, 4, 8, 16, 32, 64, 128].map((m) => m * MINUTE).concat(4 * HOUR);

const queuedAt = Date.UTC(2025, 0, 10, 12, 0, 0);
const deadline = queuedAt + DAY;

function result(statusCode: number | null): AttemptResult {
  return { statusCode, errorMessage: statusCode === null ? 'no answer within 30000 ms' : null, durationMs: 12 };
}

describe('decideFate', () => {
  it.each([200, 201, 202, 204, 226, 299])('acknowledges HTTP %i', (status) => {
    for (const attempt of [1, 2, 9, 40]) {
      expect(decideFate(result(status), attempt, queuedAt + 5 * MINUTE, deadline, DELAYS)).toEqual({
        kind: 'acknowledged',
      });
    }
  });

  it('acknowledges a 2xx even when the answer arrives at or after the deadline (the subscriber got it)', () => {
    expect(decideFate(result(200), 5, deadline, deadline, DELAYS)).toEqual({ kind: 'acknowledged' });
    expect(decideFate(result(204), 5, deadline + 1, deadline, DELAYS)).toEqual({ kind: 'acknowledged' });
  });

  it.each([
    null,
    100,
    101,
    103,
    199,
    300,
    301,
    302,
    304,
    307,
    308,
    399,
    400,
    401,
    403,
    404,
    408,
    429,
    499,
    500,
    502,
    503,
    504,
    599,
  ])('retries on %s', (status) => {
    const now = queuedAt + 10_000;
    expect(decideFate(result(status), 1, now, deadline, DELAYS)).toEqual({
      kind: 'retry',
      tier: 0,
      dueAt: now + MINUTE,
    });
  });

  it.each([
    // [attempt that just failed, expected tier, its delay]
    [1, 0, 1 * MINUTE],
    [2, 1, 2 * MINUTE],
    [3, 2, 4 * MINUTE],
    [4, 3, 8 * MINUTE],
    [5, 4, 16 * MINUTE],
    [6, 5, 32 * MINUTE],
    [7, 6, 64 * MINUTE],
    [8, 7, 128 * MINUTE],
    [9, 8, 4 * HOUR],
    [10, 8, 4 * HOUR], // the last tier repeats
    [11, 8, 4 * HOUR],
    [50, 8, 4 * HOUR],
  ])('attempt %i fails → tier %i, due after %i ms', (attempt, tier, delay) => {
    const now = queuedAt + 1_000;
    expect(decideFate(result(500), attempt, now, deadline, DELAYS)).toEqual({
      kind: 'retry',
      tier,
      dueAt: now + delay,
    });
  });

  it.each([
    // [schedule, attempt, tier]
    [[1_000, 2_000], 1, 0],
    [[1_000, 2_000], 2, 1],
    [[1_000, 2_000], 7, 1],
    [[5_000], 1, 0],
    [[5_000], 3, 0],
  ])('with schedule %j, attempt %i uses tier %i = min(attempt-1, tiers-1)', (delays, attempt, tier) => {
    const now = queuedAt;
    expect(decideFate(result(503), attempt, now, deadline, delays)).toEqual({
      kind: 'retry',
      tier,
      dueAt: now + delays[tier]!,
    });
  });

  // Retry-tier head-of-line: a tier holds records in arrival order and pauses on its head, so every record in it must
  // be due exactly its delay after it was written; a due time clipped to the deadline sat behind later-due records.
  it.each([
    ['30 s before the deadline, tier of 1 m', deadline - 30_000, 1],
    ['1 ms before the deadline', deadline - 1, 1],
    ['3 h before the deadline, tier of 4 h', deadline - 3 * HOUR, 9],
    ['exactly one delay before the deadline', deadline - MINUTE, 1],
  ])('never clips a due time: %s → no more attempts, an expiry hop due one tier delay later', (_name, now, attempt) => {
    const fate = decideFate(result(500), attempt, now, deadline, DELAYS);
    expect(fate.kind).toBe('expire');
    if (fate.kind !== 'expire') return;
    expect(fate.dueAt).toBe(now + DELAYS[fate.tier]!);
  });

  it('hops toward the deadline through the longest tier that fits, and abandons within the shortest delay of it', () => {
    for (const start of [deadline - 3 * HOUR - 17_000, deadline - 59 * MINUTE, deadline - 61_000, deadline - 1]) {
      let now = start;
      let hops = 0;
      let fate = decideFate(result(500), 9, now, deadline, DELAYS);
      while (fate.kind === 'expire') {
        expect(fate.dueAt - now).toBe(DELAYS[fate.tier]);
        // The longest delay that still lands at or before the deadline, or the shortest when none does.
        const fits = DELAYS.filter((delay) => now + delay <= deadline);
        expect(DELAYS[fate.tier]).toBe(fits.length > 0 ? Math.max(...fits) : Math.min(...DELAYS));
        now = fate.dueAt;
        fate = nextHop(now, deadline, DELAYS);
        hops += 1;
      }
      expect(fate).toEqual({ kind: 'abandoned', reason: 'delivery lifetime exceeded' });
      expect(now).toBeGreaterThanOrEqual(deadline);
      expect(now - deadline).toBeLessThan(MINUTE);
      expect(hops).toBeLessThan(12);
    }
  });

  it.each([
    ['exactly at the deadline', deadline],
    ['1 ms after the deadline', deadline + 1],
    ['a day after the deadline', deadline + DAY],
  ])('abandons a failed attempt %s, whatever the attempt count', (_name, now) => {
    for (const attempt of [1, 3, 30]) {
      for (const status of [null, 302, 404, 500]) {
        expect(decideFate(result(status), attempt, now, deadline, DELAYS)).toEqual({
          kind: 'abandoned',
          reason: 'delivery lifetime exceeded',
        });
      }
    }
  });
});

describe('parseRetryAfter', () => {
  const now = Date.UTC(2025, 0, 10, 12, 0, 0);

  it.each<[string | string[] | undefined, number | undefined]>([
    ['1', 1_000],
    ['0', 0],
    ['120', 120_000],
    [' 7 ', 7_000],
    ['007', 7_000],
    [['3', '9'], 3_000], // a repeated header: the first
    // An HTTP-date: the wait from now, in each of the three forms RFC 9110 accepts; one in the past is no wait.
    ['Fri, 10 Jan 2025 12:00:30 GMT', 30_000],
    ['Friday, 10-Jan-25 12:01:00 GMT', 60_000],
    ['Fri Jan 10 12:00:05 2025', 5_000],
    ['Fri Jan  3 12:00:05 2025', 0],
    ['Thu, 09 Jan 2025 12:00:00 GMT', 0],
    // Ignored: absent, empty, negative, fractions, units, other date formats (Date.parse would take "2" as 2001).
    [undefined, undefined],
    ['', undefined],
    [[], undefined],
    ['-1', undefined],
    ['1.5', undefined],
    ['2', 2_000],
    ['10s', undefined],
    ['2025-01-10T12:00:30Z', undefined],
    ['Fri, 10 Jan 2025 12:00:30', undefined],
    ['soon', undefined],
  ])('%j → %s ms', (value, expected) => {
    expect(parseRetryAfter(value, now)).toBe(expected);
  });

  it('keeps an absurd delta finite (callers cap it)', () => {
    const wait = parseRetryAfter('9'.repeat(400), now);
    expect(Number.isFinite(wait)).toBe(true);
    expect(wait).toBeGreaterThan(100 * 365 * DAY);
  });
});

describe('decideFate with Retry-After (429 and 503)', () => {
  const now = queuedAt + 10_000;
  const asking = (statusCode: number, retryAfterMs: number): AttemptResult => ({
    statusCode,
    errorMessage: `HTTP ${statusCode}`,
    durationMs: 3,
    retryAfterMs,
  });

  it.each([
    // [status, attempt, Retry-After, expected tier]: the schedule's tier when it is not sooner than Retry-After,
    // else the shortest tier whose delay covers it (due exactly that delay later, so its tier stays in due order).
    [429, 1, 1_000, 0], // 1 m already waits longer
    [429, 1, MINUTE, 0], // exactly the tier's delay
    [429, 1, MINUTE + 1, 1], // a minute and a millisecond: the 2 m tier, not a due time between tiers
    [503, 1, 3 * MINUTE, 2], // 4 m
    [429, 3, 5 * MINUTE, 3], // the schedule says 4 m: 8 m covers 5 m
    [429, 2, 100 * MINUTE, 7], // 128 m
    [503, 9, 2 * HOUR, 8], // the 4 h tier was due anyway
    [429, 1, 3 * HOUR, 8], // 4 h
  ])('HTTP %i after attempt %i, Retry-After %i ms → tier %i', (status, attempt, retryAfterMs, tier) => {
    const fate = decideFate(asking(status, retryAfterMs), attempt, now, deadline, DELAYS);
    const scheduled = Math.min(attempt - 1, DELAYS.length - 1);
    expect(fate).toEqual({
      kind: 'retry',
      tier,
      dueAt: now + DELAYS[tier]!,
      ...(tier === scheduled ? {} : { retryAfter: true }),
    });
    if (fate.kind === 'retry') expect(fate.dueAt - now).toBeGreaterThanOrEqual(retryAfterMs);
  });

  it('a held retry is held until the time asked, counted from the answer and not from when the fate is decided', () => {
    // The answer came 7 ms before the decision (the sender parsed its HTTP date then): hold until that date exactly.
    const answeredAt = now - 7;
    const fate = decideFate({ ...asking(503, 6 * HOUR), answeredAt }, 1, now, deadline, DELAYS);
    expect(fate).toMatchObject({ kind: 'retry', holdUntil: answeredAt + 6 * HOUR });
  });

  it('holds a Retry-After longer than every tier: the retry comes no earlier than it asks, within the lifetime', () => {
    // 6 h from an attempt 10 s into the series: the 4 h tier first, then hops without an attempt until 6 h.
    const fate = decideFate(asking(429, 6 * HOUR), 1, now, deadline, DELAYS);
    expect(fate).toEqual({
      kind: 'retry',
      tier: 8,
      dueAt: now + 4 * HOUR,
      retryAfter: true,
      holdUntil: now + 6 * HOUR,
    });
    let at = now + 4 * HOUR;
    const hops: number[] = [];
    while (at < now + 6 * HOUR) {
      const hop = holdHop(at, now + 6 * HOUR, DELAYS);
      hops.push(hop.tier);
      at = hop.dueAt;
    }
    expect(hops).toEqual([6, 5, 4, 3]); // the 2 h left: 64 m, 32 m, 16 m, 8 m, landing at 6 h exactly
    expect(at).toBe(now + 6 * HOUR);
    // A hold that no tier divides ends less than the shortest delay after the time asked, never before it.
    const odd = holdHop(now, now + 90_000, DELAYS);
    expect(odd).toEqual({ tier: 0, dueAt: now + MINUTE });
    expect(holdHop(odd.dueAt, now + 90_000, DELAYS)).toEqual({ tier: 0, dueAt: now + 2 * MINUTE });
  });

  it('a Retry-After of a day or a century cannot be honoured within the lifetime: the delivery hops to its deadline', () => {
    for (const retryAfterMs of [DAY, 100 * 365 * DAY, Number.MAX_SAFE_INTEGER]) {
      expect(decideFate(asking(429, retryAfterMs), 1, now, deadline, DELAYS)).toEqual(nextHop(now, deadline, DELAYS));
      expect(retryAfterWait(asking(429, retryAfterMs))).toBe(retryAfterMs);
    }
  });

  it('ignores Retry-After on other answers (a 500 or a 302 waits as scheduled)', () => {
    for (const status of [500, 502, 302, 404]) {
      expect(decideFate(asking(status, HOUR), 1, now, deadline, DELAYS)).toEqual({
        kind: 'retry',
        tier: 0,
        dueAt: now + MINUTE,
      });
      expect(retryAfterWait(asking(status, HOUR))).toBeUndefined();
    }
  });

  it('a Retry-After landing at or past the deadline: no attempt, the delivery hops to its deadline as any other', () => {
    const late = deadline - 2 * HOUR;
    const fate = decideFate(asking(429, 3 * HOUR), 2, late, deadline, DELAYS);
    expect(fate).toEqual(nextHop(late, deadline, DELAYS));
    expect(fate.kind).toBe('expire');
    // And the hops still end in abandonment at the deadline.
    let now2 = late;
    let hop = fate;
    while (hop.kind === 'expire') {
      now2 = hop.dueAt;
      hop = nextHop(now2, deadline, DELAYS);
    }
    expect(hop).toEqual({ kind: 'abandoned', reason: 'delivery lifetime exceeded' });
    expect(now2 - deadline).toBeLessThan(MINUTE);
  });

  it('on a short schedule (tests: 500ms,1s,2s) a Retry-After of 1 s skips the 500 ms tier', () => {
    const short = [500, 1_000, 2_000];
    expect(decideFate(asking(429, 1_000), 1, now, deadline, short)).toEqual({
      kind: 'retry',
      tier: 1,
      dueAt: now + 1_000,
      retryAfter: true,
    });
    expect(decideFate(asking(429, 1_000), 2, now, deadline, short)).toEqual({
      kind: 'retry',
      tier: 1,
      dueAt: now + 1_000,
    });
    expect(decideFate(asking(429, 0), 1, now, deadline, short)).toEqual({ kind: 'retry', tier: 0, dueAt: now + 500 });
  });

  it('an unsorted schedule still takes the shortest tier that covers the wait', () => {
    const unsorted = [4_000, 1_000, 8_000, 2_000];
    expect(decideFate(asking(503, 1_500), 2, now, deadline, unsorted)).toMatchObject({ tier: 3, dueAt: now + 2_000 });
    expect(decideFate(asking(503, 5_000), 2, now, deadline, unsorted)).toMatchObject({ tier: 2, dueAt: now + 8_000 });
  });
});

describe('failureWindow', () => {
  it.each([
    ['midnight itself', Date.UTC(2025, 0, 2, 0, 0, 0, 0), Date.UTC(2025, 0, 2)],
    ['1 ms after midnight', Date.UTC(2025, 0, 2, 0, 0, 0, 1), Date.UTC(2025, 0, 2)],
    ['noon', Date.UTC(2025, 0, 2, 12, 0, 0), Date.UTC(2025, 0, 2)],
    ['last ms of the day', Date.UTC(2025, 0, 2, 23, 59, 59, 999), Date.UTC(2025, 0, 2)],
    ['last ms of the previous day', Date.UTC(2025, 0, 1, 23, 59, 59, 999), Date.UTC(2025, 0, 1)],
    ['leap day', Date.UTC(2024, 1, 29, 18, 30), Date.UTC(2024, 1, 29)],
    ['new year', Date.UTC(2025, 11, 31, 23, 0), Date.UTC(2025, 11, 31)],
  ])('24 h windows are UTC days: %s', (_name, now, expected) => {
    const window = failureWindow(now, DAY);
    expect(window).toBe(expected);
    expect(new Date(window).toISOString()).toMatch(/T00:00:00\.000Z$/);
  });

  it('puts two abandonments of one UTC day in one window and those of consecutive days in two', () => {
    const morning = failureWindow(Date.UTC(2025, 4, 5, 0, 0, 1), DAY);
    const evening = failureWindow(Date.UTC(2025, 4, 5, 23, 59, 59), DAY);
    const nextDay = failureWindow(Date.UTC(2025, 4, 6, 0, 0, 0), DAY);
    expect(morning).toBe(evening);
    expect(nextDay - morning).toBe(DAY);
  });

  it.each([
    [HOUR, Date.UTC(2025, 0, 2, 13, 45, 10), Date.UTC(2025, 0, 2, 13)],
    [20_000, 1_000_039_999, 1_000_020_000],
    [20_000, 1_000_040_000, 1_000_040_000],
  ])('shorter windows (%i ms) align to multiples of their length', (size, now, expected) => {
    expect(failureWindow(now, size)).toBe(expected);
  });
});
