import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { backoffDelay, RecoveryBackoff } from './recovery-backoff.ts';

describe('RecoveryBackoff', () => {
  beforeEach(() => vi.useFakeTimers({ now: 100_000 }));
  afterEach(() => vi.useRealTimers());

  /** Starts a wait and tells, as it goes, whether it is over. */
  const waiting = (backoff: RecoveryBackoff, failures: number) => {
    const state = { over: false };
    void backoff.wait(failures).then(() => (state.over = true));
    return state;
  };

  it('waits 200 ms after a first failure, doubling to 10 s at most', () => {
    expect([0, 1, 2, 5, 6, 20].map(backoffDelay)).toEqual([200, 400, 800, 6_400, 10_000, 10_000]);
  });

  it('wakes every waiter when work succeeds after a drought: the dependency is back', async () => {
    const backoff = new RecoveryBackoff();
    const [long, longer] = [waiting(backoff, 10), waiting(backoff, 30)];
    await vi.advanceTimersByTimeAsync(3_000);
    expect([long.over, longer.over]).toEqual([false, false]);
    backoff.succeeded();
    await vi.advanceTimersByTimeAsync(0);
    expect([long.over, longer.over]).toEqual([true, true]);
    expect(backoff.waiting).toBe(0);
  });

  it('wakes none while successes come less than a second apart (a dependency failing some requests only)', async () => {
    const backoff = new RecoveryBackoff();
    backoff.succeeded();
    const wait = waiting(backoff, 10);
    for (let step = 0; step < 9; step += 1) {
      await vi.advanceTimersByTimeAsync(900);
      backoff.succeeded();
    }
    expect(wait.over).toBe(false);
    await vi.advanceTimersByTimeAsync(1_900);
    expect(wait.over).toBe(true);
  });

  it('ends a wait at its own time when nothing succeeds', async () => {
    const backoff = new RecoveryBackoff();
    const wait = waiting(backoff, 3);
    await vi.advanceTimersByTimeAsync(1_599);
    expect(wait.over).toBe(false);
    await vi.advanceTimersByTimeAsync(1);
    expect(wait.over).toBe(true);
    expect(backoff.waiting).toBe(0);
  });
});
