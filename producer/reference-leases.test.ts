import { afterEach, describe, expect, it, vi } from 'vitest';
import { withinBudget } from '../core/budget.ts';
import type { CassandraClient } from '../core/cassandra.ts';
import { DependencyUnavailableError } from '../core/errors.ts';
import { ReferenceLeases } from './reference-leases.ts';

/** A tenant counter whose every answer waits until the test lets it go (`answer`). */
function slowCounter() {
  let last: bigint | undefined;
  const pending: (() => void)[] = [];
  const execute = (query: string, params: unknown[]) =>
    new Promise((resolve) => {
      pending.push(() => {
        if (query.startsWith('SELECT')) {
          return resolve({ first: () => (last === undefined ? null : { last_value: last.toString() }) });
        }
        const next = BigInt(String(params[query.startsWith('INSERT') ? 1 : 0]));
        const expected = query.startsWith('INSERT') ? undefined : BigInt(String(params[2]));
        const applied = last === expected;
        if (applied) last = next;
        resolve({ wasApplied: () => applied, first: () => ({ last_value: last?.toString() }) });
      });
    });
  return {
    db: { execute } as unknown as CassandraClient,
    /** The counter's value: the last reference leased. */
    last: () => last,
    /** Lets every request sent so far have its answer. */
    answer: () => {
      for (const release of pending.splice(0)) release();
    },
  };
}

describe('reference leases', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('gives up waiting for a block when the request budget is spent, and hands the value to the next caller', async () => {
    vi.useFakeTimers();
    const counter = slowCounter();
    const leases = new ReferenceLeases(counter.db);
    const first = withinBudget(100, () => leases.next('acme'));
    const outcome = first.then(
      (value) => value,
      (error: unknown) => error,
    );
    await vi.advanceTimersByTimeAsync(100);
    // Answered 503 at the budget's end while the counter still has not answered.
    expect(await Promise.race([outcome, Promise.resolve('still waiting')])).toBeInstanceOf(DependencyUnavailableError);
    // The lease goes on outside the budget; once the counter answers, its first value is not lost to the caller that
    // gave up: the next caller gets it.
    for (let round = 0; round < 10; round += 1) {
      counter.answer();
      await vi.advanceTimersByTimeAsync(0);
    }
    expect(await leases.next('acme')).toBe(1n);
    expect(counter.last()).toBe(1n);
  });

  it('waits without a bound outside any budget, and a caller within its budget gets its value', async () => {
    const counter = slowCounter();
    const leases = new ReferenceLeases(counter.db);
    const background = leases.next('acme');
    const request = withinBudget(10_000, () => leases.next('acme'));
    for (let round = 0; round < 10; round += 1) {
      counter.answer();
      await new Promise((resolve) => setImmediate(resolve));
    }
    expect([await background, await request]).toEqual([1n, 2n]);
  });
});
