/** The first wait after a failure; each failure after it doubles the wait, up to MAX_WAIT_MS. */
const FIRST_WAIT_MS = 200;
const MAX_WAIT_MS = 10_000;
/** Successes closer together than this are one stretch of health: only the first after a longer gap wakes waiters. */
const DROUGHT_MS = 1_000;

/** How long work that failed `failures` times waits before its next try: 200 ms doubling, at most 10 s. */
export function backoffDelay(failures: number): number {
  return Math.min(FIRST_WAIT_MS * 2 ** failures, MAX_WAIT_MS);
}

/**
 * Backoff for work that is tried again until its dependency takes it (a Cassandra quorum, a broker away): a try every
 * 10 s at most once it has failed for a while, so an outage of minutes costs each piece of waiting work one request
 * per 10 s, not a storm. Alone, that leaves every piece waiting out up to 10 s more once the dependency is back: the
 * pipeline's recovery after an outage took that much longer. So the first success after a drought (no success for a
 * second, while work waited) wakes every waiter at once; successes closer together (a dependency failing only some
 * requests) wake none, and each waiter keeps its own doubling.
 */
export class RecoveryBackoff {
  private lastSuccessAt = Number.NEGATIVE_INFINITY;
  private readonly waiters = new Set<() => void>();

  constructor(private readonly now: () => number = Date.now) {}

  /** Waits `backoffDelay(failures)`, or less when work succeeds again after a drought meanwhile. */
  wait(failures: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const wake = () => {
        clearTimeout(timer);
        this.waiters.delete(wake);
        resolve();
      };
      const timer = setTimeout(wake, backoffDelay(failures));
      this.waiters.add(wake);
    });
  }

  /** Some work has just succeeded: after a drought, the dependency is back, and every waiter tries again now. */
  succeeded(): void {
    const at = this.now();
    const drought = at - this.lastSuccessAt >= DROUGHT_MS;
    this.lastSuccessAt = at;
    if (drought && this.waiters.size > 0) for (const wake of [...this.waiters]) wake();
  }

  /** Work waiting now (a measure for tests). */
  get waiting(): number {
    return this.waiters.size;
  }
}
