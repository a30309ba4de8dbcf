import { afterEach, describe, expect, it, vi } from 'vitest';
import { RequestBudget, withinBudget } from '../core/budget.ts';
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

/** A tenant counter that answers every request `delayMs` after it (on the timers the test may fake). */
function timedCounter(delayMs: number) {
  let last: bigint | undefined;
  let compareAndSets = 0;
  let sent = 0;
  const execute = (query: string, params: unknown[]) =>
    new Promise((resolve) => {
      sent += 1;
      setTimeout(() => {
        if (query.startsWith('SELECT')) {
          return resolve({ first: () => (last === undefined ? null : { last_value: last.toString() }) });
        }
        compareAndSets += 1;
        const next = BigInt(String(params[query.startsWith('INSERT') ? 1 : 0]));
        const expected = query.startsWith('INSERT') ? undefined : BigInt(String(params[2]));
        const applied = last === expected;
        if (applied) last = next;
        resolve({ wasApplied: () => applied, first: () => ({ last_value: last?.toString() }) });
      }, delayMs);
    });
  return {
    db: { execute } as unknown as CassandraClient,
    last: () => last,
    compareAndSets: () => compareAndSets,
    /** Requests sent so far, answered or not. */
    sent: () => sent,
  };
}

/**
 * Asks for `count` values every `gapMs` (fake timers), each request given no time of its own: the indexes of the
 * requests that had to wait for the counter, and the values in the order handed out.
 */
async function paced(leases: ReferenceLeases, count: number, gapMs: number) {
  const waited: number[] = [];
  const values: bigint[] = [];
  const requests: Promise<void>[] = [];
  for (let index = 0; index < count; index += 1) {
    let settled = false;
    requests.push(
      leases.next('acme').then((value) => {
        settled = true;
        values.push(value);
      }),
    );
    await vi.advanceTimersByTimeAsync(0);
    if (!settled) waited.push(index);
    await vi.advanceTimersByTimeAsync(gapMs);
  }
  await vi.advanceTimersByTimeAsync(1_000);
  await Promise.all(requests);
  return { waited, values };
}

const consecutive = (count: number) => Array.from({ length: count }, (_, index) => BigInt(index + 1));

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

  it('gives up waiting when a dependency is found unavailable meanwhile and its request has spent the degraded budget', async () => {
    vi.useFakeTimers({ now: 0 });
    const counter = slowCounter();
    const leases = new ReferenceLeases(counter.db);
    const budget = new RequestBudget(10_000, 300, 60_000);
    const waiting = withinBudget(10_000, () => leases.next('acme'), budget.limitFrom(0)).then(
      () => 'leased',
      (error: unknown) => (error instanceof DependencyUnavailableError ? Date.now() : error),
    );
    await vi.advanceTimersByTimeAsync(100);
    budget.failed(); // another request found Cassandra unavailable: the window opens
    await vi.advanceTimersByTimeAsync(1_000);
    // At the degraded budget's end counted from its arrival (300 ms), not its normal one (10 s).
    expect(await waiting).toBe(300);
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

  it("leases a busy tenant's next block before its current one runs out: once its pace is known, no validation waits", async () => {
    vi.useFakeTimers();
    const counter = timedCounter(20);
    const leases = new ReferenceLeases(counter.db);
    // 25 validations a second for 8 s (a tenant of the API bench at 250/s), each compare-and-set taking 20 ms.
    const { waited, values } = await paced(leases, 200, 40);
    expect(values).toEqual(consecutive(200));
    // The first blocks, while its pace grows, are waited for; none after the first second.
    expect(waited.filter((index) => index >= 25)).toEqual([]);
    // Still by blocks: far fewer compare-and-sets than references.
    expect(counter.compareAndSets()).toBeLessThanOrEqual(12);
  });

  it('leases a quiet tenant exactly what it uses, never ahead', async () => {
    vi.useFakeTimers();
    const counter = timedCounter(5);
    const leases = new ReferenceLeases(counter.db);
    const { values } = await paced(leases, 5, 2_000);
    expect(values).toEqual(consecutive(5));
    expect(counter.last()).toBe(5n);
  });

  it('gives back on close the block leased ahead with the unused tail before it', async () => {
    vi.useFakeTimers();
    const counter = timedCounter(5);
    const leases = new ReferenceLeases(counter.db);
    const { values } = await paced(leases, 60, 20);
    expect(values).toEqual(consecutive(60));
    expect(counter.last()).toBeGreaterThan(60n); // a block beyond the values taken is held
    const closing = leases.close();
    await vi.advanceTimersByTimeAsync(100);
    await closing;
    expect(counter.last()).toBe(60n);
  });

  it('waits on close for a block being leased ahead, and gives it back too', async () => {
    vi.useFakeTimers();
    const counter = timedCounter(50);
    const leases = new ReferenceLeases(counter.db);
    let sentBefore = counter.sent();
    let taken = 0;
    // Validations at 50 a second until a request goes out while no one waits: a block being leased ahead.
    for (let index = 0; index < 200 && (index <= 10 || counter.sent() === sentBefore); index += 1) {
      let answered = false;
      void leases.next('acme').then(() => (answered = true));
      await vi.advanceTimersByTimeAsync(20);
      while (!answered) await vi.advanceTimersByTimeAsync(10);
      taken += 1;
      if (index === 10) sentBefore = counter.sent();
    }
    expect(counter.sent()).toBeGreaterThan(sentBefore);
    const compareAndSets = counter.compareAndSets();
    const closing = leases.close();
    await vi.advanceTimersByTimeAsync(500);
    await closing;
    // The block leased ahead landed during the close (its compare-and-set), and went back with the rest (the close's).
    expect(counter.compareAndSets()).toBe(compareAndSets + 2);
    expect(counter.last()).toBe(BigInt(taken));
  });
});
