/** Waits `ms`, or rejects as soon as `signal` aborts. */
export type Sleep = (ms: number, signal: AbortSignal) => Promise<void>;

/**
 * Paces work to `perSecond` on average with bursts of at most `capacity`: take(n) resolves once n tokens are there
 * (n above the capacity takes the whole capacity). Takers are served one after the other, in call order, so several
 * jobs sharing one bucket (the process-wide cap) all move.
 */
export class TokenBucket {
  private tokens: number;
  private last: number;
  private queue: Promise<void> = Promise.resolve();

  constructor(
    private readonly perSecond: number,
    private readonly capacity: number,
    private readonly now: () => number,
    private readonly sleep: Sleep,
  ) {
    this.tokens = capacity;
    this.last = now();
  }

  take(count: number, signal: AbortSignal): Promise<void> {
    const turn = this.queue.then(() => this.wait(Math.min(count, this.capacity), signal));
    this.queue = turn.catch(() => undefined);
    return turn;
  }

  private async wait(count: number, signal: AbortSignal): Promise<void> {
    for (;;) {
      signal.throwIfAborted();
      const now = this.now();
      this.tokens = Math.min(this.capacity, this.tokens + ((now - this.last) * this.perSecond) / 1000);
      this.last = now;
      if (this.tokens >= count) {
        this.tokens -= count;
        return;
      }
      await this.sleep(Math.ceil(((count - this.tokens) * 1000) / this.perSecond), signal);
    }
  }
}
