/**
 * Write times (USING TIMESTAMP, µs) of a delivery's row, ordered by the series' own progress and never by a host's
 * clock: the router, the API and every dispatcher derive them from the queue time and the attempt number, so a host
 * whose clock is behind cannot lose its update, a router routing an event again cannot roll a row back, and a finished
 * delivery (acknowledged, abandoned, superseded) stays finished whatever a late duplicate writes.
 *
 * Three bands, a year apart: the queued row at the queue time itself; states after an attempt a year later; final
 * states two years later. So a state written by an earlier version at its host's clock (during the lifetime, well
 * within a year of the queue time) never outranks a later one, and a duplicate of the event queued again up to a year
 * later (another queue time) can neither roll a row back to queued nor reopen a finished one. No other writer stamps
 * these rows, and a TTL counts from the local time of the write, not from its timestamp.
 */

const YEAR_US = 365 * 86_400_000 * 1000;

/** The row of a new series: queued, before any attempt. */
export function queuedWriteTime(queuedAt: number): number {
  return queuedAt * 1000;
}

/** The row after attempt `attempt`; `final` when the series ends with it. */
export function attemptWriteTime(queuedAt: number, attempt: number, final: boolean): number {
  return queuedAt * 1000 + (final ? 2 : 1) * YEAR_US + attempt * 2;
}

/** The row of a series deferred without an attempt (its circuit open) after `attemptsMade`: before the next one. */
export function deferWriteTime(queuedAt: number, attemptsMade: number): number {
  return queuedAt * 1000 + YEAR_US + attemptsMade * 2 + 1;
}

/** The row of a series ended without an attempt (abandoned while waiting, superseded) after `attemptsMade`. */
export function finishWriteTime(queuedAt: number, attemptsMade: number): number {
  return queuedAt * 1000 + 2 * YEAR_US + attemptsMade * 2 + 1;
}
