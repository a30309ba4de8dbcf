/**
 * Runs of one key, one after another, in this process; each run is told whether another run of its key came before it
 * (and was still under way when it was asked for, or, with `remember`, ended within that memory). A run that fails
 * does not hold the next one. Without `remember`, nothing is kept for a key once its last run has ended.
 *
 * The router routes the copies of one event this way (two gateways' relays can publish an event twice, and the copies
 * sit side by side in a fetch: routed at once, neither would find the other's rows, and both would go out as new
 * records); the second is routed as a possible repeat, and so is one that comes after the first has ended (a gateway's
 * own publication slower than its peer's sweep). The outbox relay publishes an order's rows this way: a run that
 * follows another reads the rows afresh instead of trusting the row it was handed.
 */
export class Turns {
  private readonly running = new Map<string, Promise<unknown>>();
  /** Keys whose last run ended, with the time it ended (`remember`). */
  private readonly ended = new Map<string, number>();
  /**
   * The remembered keys in the order they were first kept, a ring of `entries`: the next place is the oldest key's,
   * forgotten when a new key takes it. (Deleting a Map's oldest entries and iterating it from the start instead costs
   * the deleted entries' holes on every step: 30 µs a run at 50,000 entries.)
   */
  private ring: (string | undefined)[] = [];
  private next = 0;

  constructor(
    /** Keys are remembered after their run for `ms`, `entries` at most (the oldest forgotten first). */
    private readonly remember?: { entries: number; ms: number },
    private readonly now: () => number = Date.now,
  ) {}

  /** Runs `run` once no other run of `key` is under way here; `afterAnother` says whether one was, or ended lately. */
  async run<T>(key: string, run: (afterAnother: boolean) => Promise<T>): Promise<T> {
    const before = this.running.get(key);
    const mine = before === undefined ? run(this.endedLately(key)) : before.then(noop, noop).then(() => run(true));
    this.running.set(key, mine);
    try {
      return await mine;
    } finally {
      if (this.running.get(key) === mine) {
        this.running.delete(key);
        if (this.remember) this.keep(key, this.remember.entries);
      }
    }
  }

  private endedLately(key: string): boolean {
    const at = this.ended.get(key);
    return at !== undefined && this.now() - at < this.remember!.ms;
  }

  private keep(key: string, entries: number): void {
    if (!this.ended.has(key)) {
      const oldest = this.ring[this.next];
      if (oldest !== undefined) this.ended.delete(oldest);
      this.ring[this.next] = key;
      this.next = (this.next + 1) % entries;
    }
    this.ended.set(key, this.now());
  }
}

const noop = () => undefined;
