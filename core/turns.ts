/**
 * Runs of one key, one after another, in this process; each run is told whether another run of its key came before it
 * (and was still under way when it was asked for). A run that fails does not hold the next one. Nothing is kept for a
 * key once its last run has ended.
 *
 * The router routes the copies of one event this way (two gateways' relays can publish an event twice, and the copies
 * sit side by side in a fetch: routed at once, neither would find the other's rows, and both would go out as new
 * records); the second is routed as a possible repeat. The outbox relay publishes an order's rows this way: a run that
 * follows another reads the rows afresh instead of trusting the row it was handed.
 */
export class Turns {
  private readonly running = new Map<string, Promise<unknown>>();

  /** Runs `run` once no other run of `key` is under way here; `afterAnother` says whether one was. */
  async run<T>(key: string, run: (afterAnother: boolean) => Promise<T>): Promise<T> {
    const before = this.running.get(key);
    const mine = before === undefined ? run(false) : before.then(noop, noop).then(() => run(true));
    this.running.set(key, mine);
    try {
      return await mine;
    } finally {
      if (this.running.get(key) === mine) this.running.delete(key);
    }
  }
}

const noop = () => undefined;
