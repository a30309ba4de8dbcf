import { describe, expect, it } from 'vitest';
import { OperationalLimit } from './operational-limit.ts';

const MINUTE = 60_000;

/** A limit of 10 at once and one a minute, on a clock the test moves. */
function limit() {
  const clock = { now: Date.UTC(2026, 0, 6, 10, 0, 0) };
  return { clock, limit: new OperationalLimit(10, MINUTE, () => clock.now) };
}

/** Takes `n` tokens of one bucket, returning how many were raised. */
function takeMany(target: OperationalLimit, n: number, subscriptionId = 'sub-1', eventType = 'delivery.abandoned') {
  let raised = 0;
  for (let i = 0; i < n; i += 1) if (target.take(subscriptionId, eventType).raise) raised += 1;
  return raised;
}

describe('OperationalLimit', () => {
  it('raises 10 at once with nothing kept quiet, then keeps the 11th and 12th quiet', () => {
    const { limit: target } = limit();
    for (let i = 0; i < 10; i += 1)
      expect(target.take('sub-1', 'delivery.abandoned')).toEqual({ raise: true, suppressed: 0 });
    expect(target.take('sub-1', 'delivery.abandoned')).toEqual({ raise: false });
    expect(target.take('sub-1', 'delivery.abandoned')).toEqual({ raise: false });
  });

  it('raises one more a minute later, saying how many it kept quiet, then counts afresh', () => {
    const { clock, limit: target } = limit();
    expect(takeMany(target, 12)).toBe(10);
    // Half a token after half a minute: kept quiet too (the third), and the refill goes on from there.
    clock.now += MINUTE / 2;
    expect(target.take('sub-1', 'delivery.abandoned')).toEqual({ raise: false });
    clock.now += MINUTE / 2;
    expect(target.take('sub-1', 'delivery.abandoned')).toEqual({ raise: true, suppressed: 3 });
    expect(target.take('sub-1', 'delivery.abandoned')).toEqual({ raise: false });
    clock.now += MINUTE;
    expect(target.take('sub-1', 'delivery.abandoned')).toEqual({ raise: true, suppressed: 1 });
    clock.now += MINUTE;
    expect(target.take('sub-1', 'delivery.abandoned')).toEqual({ raise: true, suppressed: 0 });
  });

  it('raises the 13th a minute after the 11th and 12th were kept quiet, with suppressed: 2, then resets to 0', () => {
    const { clock, limit: target } = limit();
    expect(takeMany(target, 12)).toBe(10);
    clock.now += MINUTE;
    expect(target.take('sub-1', 'delivery.abandoned')).toEqual({ raise: true, suppressed: 2 });
    clock.now += MINUTE;
    expect(target.take('sub-1', 'delivery.abandoned')).toEqual({ raise: true, suppressed: 0 });
  });

  it('refills one token a minute up to the burst, not past it', () => {
    const { clock, limit: target } = limit();
    expect(takeMany(target, 10)).toBe(10);
    clock.now += 3 * MINUTE;
    expect(takeMany(target, 5)).toBe(3);
    // A day later the bucket holds 10 again, not 1,440.
    clock.now += 24 * 60 * MINUTE;
    expect(takeMany(target, 12)).toBe(10);
  });

  it('keeps a bucket per subscription', () => {
    const { limit: target } = limit();
    expect(takeMany(target, 11, 'sub-1')).toBe(10);
    expect(target.take('sub-2', 'delivery.abandoned')).toEqual({ raise: true, suppressed: 0 });
    expect(takeMany(target, 10, 'sub-2')).toBe(9);
    expect(target.take('sub-1', 'delivery.abandoned')).toEqual({ raise: false });
  });

  it('keeps a bucket per event type', () => {
    const { clock, limit: target } = limit();
    expect(takeMany(target, 11, 'sub-1', 'delivery.abandoned')).toBe(10);
    expect(target.take('sub-1', 'subscription.updated')).toEqual({ raise: true, suppressed: 0 });
    expect(takeMany(target, 10, 'sub-1', 'subscription.updated')).toBe(9);
    // Each type's count kept quiet is its own.
    clock.now += MINUTE;
    expect(target.take('sub-1', 'delivery.abandoned')).toEqual({ raise: true, suppressed: 1 });
    expect(target.take('sub-1', 'subscription.updated')).toEqual({ raise: true, suppressed: 1 });
  });

  it('does not confuse a subscription and a type whose names run into each other', () => {
    const { limit: target } = limit();
    expect(takeMany(target, 11, 'b', 'a.')).toBe(10);
    expect(target.take('.b', 'a')).toEqual({ raise: true, suppressed: 0 });
  });

  it('defaults to 10 at once and one a minute', () => {
    let now = 0;
    const target = new OperationalLimit(undefined, undefined, () => now);
    expect(takeMany(target, 11)).toBe(10);
    now += MINUTE;
    expect(target.take('sub-1', 'delivery.abandoned')).toEqual({ raise: true, suppressed: 1 });
  });
});
