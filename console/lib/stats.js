// Counting deliveries per time bucket for the at-a-glance charts. Pure functions: no DOM, no requests.

export const HOUR_MS = 3_600_000;
export const DAY_MS = 24 * HOUR_MS;

/** Deliveries not (yet) delivered: still retrying after a failed attempt, or given up. */
export function isFailing(delivery) {
  return delivery.status === 'retrying' || delivery.status === 'abandoned';
}

/**
 * Counts `deliveries` (each with `queuedAt`) into `buckets` equal slices of the `windowMs` before `now`, oldest first.
 * `truncated`: the history was read only back to `oldestRead` (a cap was hit), so a window reaching further back is a
 * lower bound.
 */
export function bucketize(deliveries, { now, windowMs, buckets, oldestRead = null }) {
  const size = windowMs / buckets;
  const start = now - windowMs;
  const slots = Array.from({ length: buckets }, (_, index) => ({
    from: start + index * size,
    total: 0,
    failing: 0,
  }));
  let total = 0;
  let failing = 0;
  for (const delivery of deliveries) {
    const at = new Date(delivery.queuedAt).getTime();
    if (!(at > start && at <= now)) continue;
    const slot = slots[Math.min(buckets - 1, Math.floor((at - start) / size))];
    slot.total += 1;
    total += 1;
    if (isFailing(delivery)) {
      slot.failing += 1;
      failing += 1;
    }
  }
  return {
    slots,
    total,
    failing,
    failureRate: total === 0 ? null : failing / total,
    lowerBound: oldestRead !== null && oldestRead > start,
  };
}

/** "12", or "≥ 2,000" when the count is a lower bound. */
export function countText(count, lowerBound) {
  const text = count.toLocaleString('en');
  return lowerBound ? `\u2265 ${text}` : text;
}

/** "4.5 %", or "—" without deliveries. */
export function rateText(rate) {
  if (rate === null) return '\u2014';
  const percent = rate * 100;
  return `${percent < 10 && percent > 0 ? percent.toFixed(1) : Math.round(percent)} %`;
}
