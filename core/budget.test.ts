import fastify from 'fastify';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { budgetLeft, callTimeout, installRequestBudget, RequestBudget, settleWithin, withinBudget } from './budget.ts';
import { DependencyUnavailableError } from './errors.ts';

describe('request budget', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('is absent outside any budget, so background work keeps its own bounds', () => {
    expect(budgetLeft()).toBeUndefined();
    expect(callTimeout('Cassandra', 1_500)).toBe(1_500);
  });

  it('shrinks as time passes, across awaits, and cuts each call to what is left', async () => {
    vi.useFakeTimers({ now: 0 });
    await withinBudget(1_000, async () => {
      expect(budgetLeft()).toBe(1_000);
      expect(callTimeout('Cassandra', 1_500)).toBe(1_000);
      await vi.advanceTimersByTimeAsync(700);
      expect(budgetLeft()).toBe(300);
      expect(callTimeout('Cassandra', 1_500)).toBe(300);
      expect(callTimeout('Cassandra', 100)).toBe(100);
    });
  });

  it('throws DependencyUnavailableError naming the dependency once spent, without waiting', async () => {
    vi.useFakeTimers({ now: 0 });
    await withinBudget(50, async () => {
      await vi.advanceTimersByTimeAsync(60);
      expect(budgetLeft()).toBe(0);
      expect(() => callTimeout('Kafka', 1_500)).toThrow(DependencyUnavailableError);
      expect(() => callTimeout('Kafka', 1_500)).toThrow(/Kafka/);
    });
  });

  it('lets an enclosing budget that ends sooner rule a nested one', () => {
    vi.useFakeTimers({ now: 0 });
    withinBudget(200, () => {
      withinBudget(5_000, () => expect(budgetLeft()).toBe(200));
      withinBudget(50, () => expect(budgetLeft()).toBe(50));
    });
  });

  it('settles a call that outlasts its time with DependencyUnavailableError, and one in time with its result', async () => {
    vi.useFakeTimers({ now: 0 });
    let finishLate!: (value: string) => void;
    const late = settleWithin(new Promise<string>((resolve) => (finishLate = resolve)), 100, 'Cassandra');
    const outcome = late.then(
      (value) => value,
      (error: unknown) => error,
    );
    await vi.advanceTimersByTimeAsync(100);
    finishLate('too late');
    expect(await outcome).toBeInstanceOf(DependencyUnavailableError);
    await expect(settleWithin(Promise.resolve('in time'), 100, 'Cassandra')).resolves.toBe('in time');
    await expect(settleWithin(Promise.reject(new Error('refused')), 100, 'Cassandra')).rejects.toThrow('refused');
  });

  it('reaches the handlers of a fastify app, those with a parsed body too, counted from the arrival', async () => {
    const app = fastify();
    installRequestBudget(app, new RequestBudget(5_000, 1_000, 10_000), () => false);
    app.post('/with-body', async (request) => {
      await sleep(1);
      return { left: budgetLeft(), echoed: request.body };
    });
    app.get('/plain', async () => ({ left: budgetLeft() }));
    const base = await app.listen({ host: '127.0.0.1', port: 0 });
    try {
      const posted = (await (
        await fetch(`${base}/with-body`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ a: 1 }),
        })
      ).json()) as { left?: number; echoed: unknown };
      const got = (await (await fetch(`${base}/plain`)).json()) as { left?: number };
      for (const { left } of [posted, got]) {
        expect(left).toBeGreaterThan(0);
        expect(left).toBeLessThanOrEqual(5_000);
      }
      expect(posted.echoed).toEqual({ a: 1 });
    } finally {
      await app.close();
    }
  });

  it('answers calls made after the budget of a slow request is spent with DependencyUnavailableError', async () => {
    const app = fastify();
    installRequestBudget(app, new RequestBudget(20, 20, 10_000), () => false);
    app.get('/slow', async () => {
      await sleep(40);
      try {
        callTimeout('Cassandra', 1_500);
        return { refused: false };
      } catch (error) {
        return { refused: error instanceof DependencyUnavailableError };
      }
    });
    const answer = await app.inject({ method: 'GET', url: '/slow' });
    await app.close();
    expect(answer.json()).toEqual({ refused: true });
  });

  it('gives the degraded budget for its window after a dependency failure, then the normal one again', () => {
    let now = 1_000_000;
    const budget = new RequestBudget(10_000, 1_500, 10_000, () => now);
    expect([budget.degraded, budget.ms]).toEqual([false, 10_000]);
    budget.failed();
    expect([budget.degraded, budget.ms]).toEqual([true, 1_500]);
    now += 9_999;
    expect(budget.ms).toBe(1_500);
    // Another failure within the window starts it again.
    budget.failed();
    now += 9_999;
    expect(budget.ms).toBe(1_500);
    now += 1;
    expect([budget.degraded, budget.ms]).toEqual([false, 10_000]);
    // A degraded budget longer than the normal one never lengthens it.
    const short = new RequestBudget(1_000, 1_500, 10_000, () => now);
    short.failed();
    expect(short.ms).toBe(1_000);
  });

  it("degrades a fastify app's budget when a request fails for a dependency, and only its normal budget's running out or an unreachable dependency prolong it", async () => {
    let now = 1_000_000;
    const budget = new RequestBudget(200, 50, 60_000, () => now);
    const app = fastify();
    installRequestBudget(app, budget, (error) => error.message === 'no host');
    app.get('/left', async () => ({ left: budgetLeft() }));
    app.get('/bug', async () => {
      throw new Error('a bug, not a dependency');
    });
    app.get('/unreachable', async () => {
      throw new Error('no host');
    });
    // Past either budget, then a call: the spent budget answers DependencyUnavailableError.
    app.get('/slow', async () => {
      await sleep(250);
      callTimeout('Cassandra', 1_500);
      return {};
    });
    const get = (url: string) => app.inject({ method: 'GET', url });
    try {
      expect((await get('/left')).json<{ left: number }>().left).toBeGreaterThan(50);
      expect((await get('/bug')).statusCode).toBe(500);
      expect(budget.degraded).toBe(false);
      // The normal budget ran out: degraded.
      await get('/slow');
      expect(budget.degraded).toBe(true);
      expect((await get('/left')).json<{ left: number }>().left).toBeLessThanOrEqual(50);
      now += 60_000;
      expect(budget.degraded).toBe(false);
      // The dependency unreachable: degraded, and prolonged by another such failure.
      await get('/unreachable');
      now += 59_000;
      await get('/unreachable');
      now += 59_000;
      expect(budget.degraded).toBe(true);
      // The degraded budget running out does not prolong it.
      await get('/slow');
      now += 1_000;
      expect(budget.degraded).toBe(false);
    } finally {
      await app.close();
    }
  });
  it('cuts the budget of a request already under way when the window starts, to what is left of the degraded one', async () => {
    const budget = new RequestBudget(10_000, 1_000, 60_000);
    const app = fastify();
    installRequestBudget(app, budget, (error) => error.message === 'no host');
    let proceed!: () => void;
    const gate = new Promise<void>((resolve) => (proceed = resolve));
    app.get('/under-way', async () => {
      // The request arrived before its handler started: its deadline is at most this + the degraded budget.
      const started = Date.now();
      await gate;
      // `since` first: read after `left`, a pause between the two (GC, a busy CI machine) counted against the budget
      // twice, and the test failed by that pause (left 950 against at most 937).
      const since = Date.now() - started;
      return { since, left: budgetLeft() };
    });
    app.get('/unreachable', async () => {
      throw new Error('no host');
    });
    try {
      const underWay = app.inject({ method: 'GET', url: '/under-way' });
      await sleep(50);
      expect((await app.inject({ method: 'GET', url: '/unreachable' })).statusCode).toBe(500);
      expect(budget.degraded).toBe(true);
      proceed();
      const { left, since } = (await underWay).json<{ left: number; since: number }>();
      expect(left).toBeGreaterThan(0);
      expect(left).toBeLessThanOrEqual(1_000 - since);
    } finally {
      await app.close();
    }
  });

  it('settles a call in flight when the window opens once its request has spent the degraded budget, not at its own bound', async () => {
    vi.useFakeTimers({ now: 0 });
    const budget = new RequestBudget(10_000, 300, 60_000);
    const never = new Promise<never>(() => undefined);
    // Two calls of a request that arrived at 0 with the normal budget: one bounded by 5 s of its own, one by 200 ms.
    const settledAt = (ownBoundMs: number) =>
      withinBudget(
        10_000,
        () => settleWithin(never, callTimeout('Cassandra', ownBoundMs), 'Cassandra'),
        budget.limitFrom(0),
      ).then(
        () => 'answered',
        (error: unknown) => (error instanceof DependencyUnavailableError ? Date.now() : error),
      );
    const long = settledAt(5_000);
    const short = settledAt(200);
    await vi.advanceTimersByTimeAsync(150);
    // Another request, arrived at 100, finds Cassandra unavailable: the window opens.
    withinBudget(10_000, () => budget.failed(), budget.limitFrom(100));
    await vi.advanceTimersByTimeAsync(6_000);
    // 300 ms from its own request's arrival (not the other's: 400), and the shorter bound kept.
    expect(await long).toBe(300);
    expect(await short).toBe(200);
  });
});
