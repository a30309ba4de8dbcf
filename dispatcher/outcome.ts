/** The result of one HTTP attempt: a status code, or an error when no answer came. */
export interface AttemptResult {
  statusCode: number | null;
  errorMessage: string | null;
  durationMs: number;
}

export type Fate =
  | { kind: 'acknowledged' }
  | { kind: 'retry'; tier: number; dueAt: number }
  /** No attempt fits before the deadline: the record hops through a tier toward it, to be abandoned there. */
  | { kind: 'expire'; tier: number; dueAt: number }
  | { kind: 'abandoned'; reason: string };

export const LIFETIME_EXCEEDED = 'delivery lifetime exceeded';

/**
 * The one function that decides what happens to a delivery after an attempt (spec "States and transitions"):
 * any 2xx acknowledges; anything else retries on the next tier (the last tier repeats) until the lifetime ends.
 * A tier keeps its records in arrival order and pauses on its head, so a record is always due exactly its tier's delay
 * after it is written, never clipped to the deadline (a clipped record sat behind later-due ones, up to 4 h late).
 * A retry that would come at or after the deadline is not made: the record hops toward the deadline instead.
 */
export function decideFate(
  result: AttemptResult,
  attempt: number,
  now: number,
  deadline: number,
  retryDelaysMs: readonly number[],
): Fate {
  if (result.statusCode !== null && result.statusCode >= 200 && result.statusCode < 300)
    return { kind: 'acknowledged' };
  if (now >= deadline) return { kind: 'abandoned', reason: LIFETIME_EXCEEDED };
  const tier = Math.min(attempt - 1, retryDelaysMs.length - 1);
  const dueAt = now + retryDelaysMs[tier]!;
  if (dueAt < deadline) return { kind: 'retry', tier, dueAt };
  return nextHop(now, deadline, retryDelaysMs);
}

/**
 * Where a delivery with no attempt left waits for its deadline: the tier with the longest delay that lands at or
 * before it, so the time left shrinks with every hop; once none fits, the shortest tier, which lands less than its delay
 * after the deadline, where the delivery is abandoned.
 */
export function nextHop(now: number, deadline: number, retryDelaysMs: readonly number[]): Fate {
  if (now >= deadline) return { kind: 'abandoned', reason: LIFETIME_EXCEEDED };
  const tiers = retryDelaysMs.map((delay, tier) => ({ delay, tier }));
  const fitting = tiers.filter(({ delay }) => now + delay <= deadline);
  const pick = (fitting.length > 0 ? fitting : tiers).reduce((a, b) =>
    fitting.length > 0 ? (b.delay > a.delay ? b : a) : b.delay < a.delay ? b : a,
  );
  return { kind: 'expire', tier: pick.tier, dueAt: now + pick.delay };
}

/** Start of the failure-day window containing `now` (aligned to the epoch, so to UTC midnight for 24 h). */
export function failureWindow(now: number, failureDayMs: number): number {
  return Math.floor(now / failureDayMs) * failureDayMs;
}
