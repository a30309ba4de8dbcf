/** The result of one HTTP attempt: a status code, or an error when no answer came. */
export interface AttemptResult {
  statusCode: number | null;
  errorMessage: string | null;
  durationMs: number;
}

export type Fate =
  { kind: 'acknowledged' } | { kind: 'retry'; tier: number; dueAt: number } | { kind: 'abandoned'; reason: string };

/**
 * The one function that decides what happens to a delivery after an attempt (spec "States and transitions"):
 * any 2xx acknowledges; anything else retries on the next tier (the last tier repeats) until the lifetime ends.
 * A retry due after the deadline is scheduled at the deadline, where it is abandoned without another attempt.
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
  if (now >= deadline) return { kind: 'abandoned', reason: 'delivery lifetime exceeded' };
  const tier = Math.min(attempt - 1, retryDelaysMs.length - 1);
  return { kind: 'retry', tier, dueAt: Math.min(now + retryDelaysMs[tier]!, deadline) };
}

/** Start of the failure-day window containing `now` (aligned to the epoch, so to UTC midnight for 24 h). */
export function failureWindow(now: number, failureDayMs: number): number {
  return Math.floor(now / failureDayMs) * failureDayMs;
}
