import { describe, expect, it } from 'vitest';
import { budgetLeft, withinBudget } from './budget.ts';
import { WriteBatcher, type WriteBatcherOptions, type WriteStatement } from './write-batcher.ts';

const row = (name: string, size = 1): WriteStatement => ({ query: `INSERT ${name}`, params: ['x'.repeat(size)] });

/** A fake Cassandra: records each request's statements; answers when released, or refuses a poisoned statement. */
function fakeCassandra() {
  const requests: string[][] = [];
  const waiting: (() => void)[] = [];
  let hold = false;
  return {
    requests,
    holdAnswers: () => (hold = true),
    releaseAll: () => {
      hold = false;
      for (const release of waiting.splice(0)) release();
    },
    send: async (statements: WriteStatement[]) => {
      requests.push(statements.map((statement) => statement.query));
      if (hold) await new Promise<void>((resolve) => waiting.push(resolve));
      if (statements.some((statement) => statement.query.includes('poison'))) throw new Error('refused');
    },
  };
}

const settle = () => new Promise((resolve) => setImmediate(resolve));

describe('write batcher', () => {
  it('sends a lone write at once, its statements in one request, and resolves when it is applied', async () => {
    const cassandra = fakeCassandra();
    const batcher = new WriteBatcher(cassandra.send, { maxStatements: 64, maxBytes: 24_000, maxInFlight: 4 });
    await batcher.write([row('a1'), row('a2')]);
    expect(cassandra.requests).toEqual([['INSERT a1', 'INSERT a2']]);
  });

  it("sends a request outside the budget of the API request whose write started it (it carries others' too)", async () => {
    const budgets: (number | undefined)[] = [];
    const batcher = new WriteBatcher(
      async () => {
        budgets.push(budgetLeft());
      },
      { maxStatements: 64, maxBytes: 24_000, maxInFlight: 4 },
    );
    await withinBudget(0, () => Promise.all([batcher.write([row('a')]), batcher.write([row('b')])]));
    expect(budgets).toEqual([undefined]);
  });

  it('writes made in one turn of the event loop share one request', async () => {
    const cassandra = fakeCassandra();
    const batcher = new WriteBatcher(cassandra.send, { maxStatements: 64, maxBytes: 24_000, maxInFlight: 4 });
    await Promise.all([batcher.write([row('a')]), batcher.write([row('b1'), row('b2')]), batcher.write([row('c')])]);
    expect(cassandra.requests).toEqual([['INSERT a', 'INSERT b1', 'INSERT b2', 'INSERT c']]);
  });

  it('writes made while every request slot is busy wait, then go together in the next request', async () => {
    const cassandra = fakeCassandra();
    const batcher = new WriteBatcher(cassandra.send, { maxStatements: 64, maxBytes: 24_000, maxInFlight: 1 });
    cassandra.holdAnswers();
    let firstDone = false;
    const first = batcher.write([row('first')]).then(() => (firstDone = true));
    await settle();
    const later = [1, 2, 3].map(async (index) => {
      await settle(); // each in a turn of its own
      return batcher.write([row(`later${index}`)]);
    });
    await settle();
    await settle();
    await settle();
    expect(cassandra.requests).toEqual([['INSERT first']]);
    expect(firstDone).toBe(false); // not before Cassandra answered
    cassandra.releaseAll();
    await first;
    await settle();
    cassandra.releaseAll();
    await Promise.all(later);
    expect(cassandra.requests).toEqual([['INSERT first'], ['INSERT later1', 'INSERT later2', 'INSERT later3']]);
  });

  it('never puts more statements or bytes in one request than allowed, and never splits a write', async () => {
    const cassandra = fakeCassandra();
    const batcher = new WriteBatcher(cassandra.send, { maxStatements: 5, maxBytes: 1_000, maxInFlight: 4 });
    await Promise.all([
      batcher.write([row('a1'), row('a2'), row('a3')]),
      batcher.write([row('b1'), row('b2'), row('b3')]), // 6 statements with a's: next request
      batcher.write([row('c1'), row('c2')]),
      batcher.write([row('big', 5_000)]), // over the byte limit on its own: alone
      batcher.write([row('d')]),
    ]);
    expect(cassandra.requests).toEqual([
      ['INSERT a1', 'INSERT a2', 'INSERT a3'],
      ['INSERT b1', 'INSERT b2', 'INSERT b3', 'INSERT c1', 'INSERT c2'],
      ['INSERT big'],
      ['INSERT d'],
    ]);
  });

  it('with no byte budget, sends each write in a request of its own', async () => {
    const cassandra = fakeCassandra();
    const batcher = new WriteBatcher(cassandra.send, { maxStatements: 64, maxBytes: 0, maxInFlight: 4 });
    await Promise.all([batcher.write([row('a1'), row('a2')]), batcher.write([row('b')])]);
    expect(cassandra.requests).toEqual([['INSERT a1', 'INSERT a2'], ['INSERT b']]);
  });

  it('a refused batch is sent again write by write: only the bad write fails, to its own caller', async () => {
    const cassandra = fakeCassandra();
    const batcher = new WriteBatcher(cassandra.send, { maxStatements: 64, maxBytes: 24_000, maxInFlight: 4 });
    const outcomes = await Promise.allSettled([
      batcher.write([row('good1')]),
      batcher.write([row('poison')]),
      batcher.write([row('good2a'), row('good2b')]),
    ]);
    expect(outcomes.map((outcome) => outcome.status)).toEqual(['fulfilled', 'rejected', 'fulfilled']);
    expect((outcomes[1] as PromiseRejectedResult).reason).toEqual(new Error('refused'));
    expect(cassandra.requests).toEqual([
      ['INSERT good1', 'INSERT poison', 'INSERT good2a', 'INSERT good2b'],
      ['INSERT good1'],
      ['INSERT poison'],
      ['INSERT good2a', 'INSERT good2b'],
    ]);
  });

  it('a lone write that fails is not sent again: its caller gets the error and decides', async () => {
    const cassandra = fakeCassandra();
    const batcher = new WriteBatcher(cassandra.send);
    await expect(batcher.write([row('poison')])).rejects.toThrow('refused');
    expect(cassandra.requests).toEqual([['INSERT poison']]);
    // The batcher goes on working after a failure.
    await batcher.write([row('after')]);
    expect(cassandra.requests.at(-1)).toEqual(['INSERT after']);
  });

  it('an empty write resolves without a request', async () => {
    const cassandra = fakeCassandra();
    await new WriteBatcher(cassandra.send).write([]);
    expect(cassandra.requests).toEqual([]);
  });

  describe('lingering', () => {
    const wait = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
    /** A fake Cassandra and a lingering batcher in front of it (64 statements, 4 requests in flight unless told). */
    const lingering = (options: Partial<WriteBatcherOptions> & { lingerMs: number }) => {
      const cassandra = fakeCassandra();
      const batcher = new WriteBatcher(cassandra.send, {
        maxStatements: 64,
        maxBytes: 24_000,
        maxInFlight: 4,
        ...options,
      });
      return { cassandra, batcher };
    };

    it('when idle, a write waits lingerMs for company: writes of separate turns share one request', async () => {
      const { cassandra, batcher } = lingering({ lingerMs: 40 });
      const first = batcher.write([row('a')]);
      await settle();
      await settle();
      expect(cassandra.requests).toEqual([]); // still lingering after the turn that made it
      const second = batcher.write([row('b')]);
      await Promise.all([first, second]);
      expect(cassandra.requests).toEqual([['INSERT a', 'INSERT b']]);
    });

    it("a request's worth of statements cuts the linger short", async () => {
      const { cassandra, batcher } = lingering({ maxStatements: 3, lingerMs: 60_000 });
      const first = batcher.write([row('a')]);
      await settle();
      const full = batcher.write([row('b1'), row('b2')]);
      await Promise.all([first, full]); // would time the test out if it waited the minute
      expect(cassandra.requests).toEqual([['INSERT a', 'INSERT b1', 'INSERT b2']]);
    });

    it('while a request is in flight, the next one leaves as soon as a slot frees, without lingering again', async () => {
      const { cassandra, batcher } = lingering({ maxInFlight: 1, lingerMs: 30 });
      cassandra.holdAnswers();
      const first = batcher.write([row('first')]);
      await wait(50); // lingered, then sent; held by Cassandra
      expect(cassandra.requests).toEqual([['INSERT first']]);
      const second = batcher.write([row('second')]);
      cassandra.releaseAll();
      await first;
      await settle();
      await settle();
      // The second went out in the turn after the slot freed, not 30 ms later.
      expect(cassandra.requests).toEqual([['INSERT first'], ['INSERT second']]);
      cassandra.releaseAll();
      await second;
    });
  });
});
