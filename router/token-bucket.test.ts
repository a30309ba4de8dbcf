import { describe, expect, it } from 'vitest';
import { TokenBucket, type Sleep } from './token-bucket.ts';

/** A fake clock whose sleeps move time at once. */
function clock() {
  let now = 0;
  const sleeps: number[] = [];
  const sleep: Sleep = async (ms, signal) => {
    signal.throwIfAborted();
    sleeps.push(ms);
    now += ms;
  };
  return { now: () => now, sleep, sleeps, advance: (ms: number) => (now += ms) };
}

describe('token bucket', () => {
  it('lets a burst of its capacity through at once, then paces to its rate', async () => {
    const time = clock();
    const bucket = new TokenBucket(5, 5, time.now, time.sleep);
    const signal = new AbortController().signal;
    await bucket.take(5, signal);
    expect(time.now()).toBe(0);
    for (let page = 0; page < 4; page += 1) await bucket.take(5, signal);
    // 20 more tokens at 5 per second: 4 s.
    expect(time.now()).toBe(4_000);
  });

  it('refills while idle, never above its capacity', async () => {
    const time = clock();
    const bucket = new TokenBucket(10, 10, time.now, time.sleep);
    const signal = new AbortController().signal;
    await bucket.take(10, signal);
    time.advance(60_000);
    await bucket.take(10, signal);
    expect(time.sleeps).toEqual([]);
    await bucket.take(10, signal);
    expect(time.sleeps.reduce((a, b) => a + b, 0)).toBe(1_000);
  });

  it('serves takers in call order, each pacing all of them (the process-wide cap)', async () => {
    const time = clock();
    const bucket = new TokenBucket(4, 4, time.now, time.sleep);
    const signal = new AbortController().signal;
    const order: string[] = [];
    await Promise.all(
      ['a', 'b', 'c'].map((name) => bucket.take(4, signal).then(() => order.push(`${name}@${time.now()}`))),
    );
    expect(order).toEqual(['a@0', 'b@1000', 'c@2000']);
  });

  it('takes at most its capacity, and stops waiting when aborted', async () => {
    const time = clock();
    const bucket = new TokenBucket(1, 2, time.now, time.sleep);
    const controller = new AbortController();
    await bucket.take(50, controller.signal); // the whole capacity, not a wait that can never end
    controller.abort();
    await expect(bucket.take(1, controller.signal)).rejects.toThrow();
    await bucket.take(1, new AbortController().signal); // a failed taker does not block the next
  });
});
