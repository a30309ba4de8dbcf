import { describe, expect, it } from 'vitest';
import { decideFate, failureWindow, nextHop, type AttemptResult } from './outcome.ts';

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
