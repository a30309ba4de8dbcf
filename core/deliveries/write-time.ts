/**
 * Write times (USING TIMESTAMP, µs) of a delivery's row, ordered by the series' own progress and never by a host's
 * clock: the router, the API and every dispatcher derive them from the queue time and the attempt number, so a host
 * whose clock is behind cannot lose its update, a router routing an event again cannot roll a row back, and a finished
 * delivery (acknowledged, abandoned, superseded) stays finished whatever a late duplicate writes.
 */

/** Above twice any number of attempts a lifetime can hold (one per second for ~15 years). */
const FINAL_BAND = 1_000_000_000;

/** The row of a new series: queued, before any attempt. */
export function queuedWriteTime(queuedAt: number): number {
  return queuedAt * 1000;
}

/** The row after attempt `attempt`; `final` when the series ends with it. */
export function attemptWriteTime(queuedAt: number, attempt: number, final: boolean): number {
  return queuedAt * 1000 + (final ? FINAL_BAND : 0) + attempt * 2;
}

/** The row of a series ended without an attempt (abandoned while waiting, superseded) after `attemptsMade`. */
export function finishWriteTime(queuedAt: number, attemptsMade: number): number {
  return queuedAt * 1000 + FINAL_BAND + attemptsMade * 2 + 1;
}
