/** The result of one HTTP attempt: a status code, or an error when no answer came. */
export interface AttemptResult {
  statusCode: number | null;
  errorMessage: string | null;
  durationMs: number;
  /** Why no answer came, when it says the endpoint is overloaded or down: no answer in time, or no connection. */
  failure?: 'timeout' | 'connection';
  /** What a 429 or 503 answer's Retry-After asked to wait, in ms from its arrival. */
  retryAfterMs?: number;
  /** When that answer arrived (epoch ms): a held retry waits until this plus retryAfterMs, the time it asked. */
  answeredAt?: number;
}

export type Fate =
  | { kind: 'acknowledged' }
  /**
   * `retryAfter`: the answer's Retry-After, not the schedule, chose the tier (a later one than the schedule's).
   * `holdUntil`: the Retry-After asks for more than the longest tier's delay; the record hops through tiers (no attempt)
   * until this time, then the attempt is made.
   */
  | { kind: 'retry'; tier: number; dueAt: number; retryAfter?: true; holdUntil?: number }
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
 *
 * A 429 or 503 with Retry-After is retried no earlier than it asks: when the schedule's tier comes sooner, the retry
 * goes to the shortest tier whose delay covers the wait (never a due time between tiers, which would hold up the
 * tier's later records behind it). A wait longer than every tier is held: the record hops through tiers toward the
 * time asked (holdHop) and is attempted then. A wait that ends at or past the deadline cannot be honoured within the
 * lifetime: the delivery hops to its deadline and is abandoned there, as any other.
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
  const scheduled = Math.min(attempt - 1, retryDelaysMs.length - 1);
  const wait = retryAfterWait(result);
  if (wait !== undefined && wait > retryAfterCap(retryDelaysMs)) {
    // Counted from the answer: an HTTP date names an instant, and time has passed since it was read.
    const holdUntil = (result.answeredAt ?? now) + wait;
    if (holdUntil >= deadline) return nextHop(now, deadline, retryDelaysMs);
    const hop = holdHop(now, holdUntil, retryDelaysMs);
    return { kind: 'retry', tier: hop.tier, dueAt: hop.dueAt, retryAfter: true, holdUntil };
  }
  let tier = scheduled;
  if (wait !== undefined && wait > retryDelaysMs[scheduled]!) {
    tier = retryDelaysMs.reduce(
      (best, delay, index) => (delay >= wait && delay < retryDelaysMs[best]! ? index : best),
      retryDelaysMs.indexOf(Math.max(...retryDelaysMs)),
    );
  }
  const dueAt = now + retryDelaysMs[tier]!;
  if (dueAt >= deadline) return nextHop(now, deadline, retryDelaysMs);
  return tier === scheduled ? { kind: 'retry', tier, dueAt } : { kind: 'retry', tier, dueAt, retryAfter: true };
}

/** Answers whose Retry-After is honoured (RFC 9110 §10.2.3 gives it to 503 and 3xx, RFC 6585 to 429). */
const RETRY_AFTER_STATUSES: ReadonlySet<number> = new Set([429, 503]);

/**
 * The longest wait one tier covers: the longest retry delay. Longer Retry-After waits are held (holdHop); the
 * concurrency limiter holds a subscription at one attempt at a time for at most this long.
 */
export function retryAfterCap(retryDelaysMs: readonly number[]): number {
  return Math.max(...retryDelaysMs);
}

/** The wait an attempt's Retry-After imposes; undefined when it has none or its status does not honour it. */
export function retryAfterWait(result: AttemptResult): number | undefined {
  if (result.retryAfterMs === undefined || result.statusCode === null) return undefined;
  if (!RETRY_AFTER_STATUSES.has(result.statusCode)) return undefined;
  return Math.max(0, result.retryAfterMs);
}

/**
 * Where a record held by a long Retry-After waits next: the tier with the longest delay that lands at or before
 * `holdUntil`, so the time left shrinks with every hop; once none fits, the shortest tier, which lands less than its
 * delay after it. The record is attempted at the first consumption at or after `holdUntil`, never before.
 */
export function holdHop(
  now: number,
  holdUntil: number,
  retryDelaysMs: readonly number[],
): { tier: number; dueAt: number } {
  const tiers = retryDelaysMs.map((delay, tier) => ({ delay, tier }));
  const fitting = tiers.filter(({ delay }) => now + delay <= holdUntil);
  const pick = (fitting.length > 0 ? fitting : tiers).reduce((a, b) =>
    fitting.length > 0 ? (b.delay > a.delay ? b : a) : b.delay < a.delay ? b : a,
  );
  return { tier: pick.tier, dueAt: now + pick.delay };
}

/**
 * What a Retry-After header value asks to wait, in ms from `now`: delta-seconds, or an HTTP-date (IMF-fixdate, or the
 * obsolete RFC 850 and asctime forms) of which a past one means 0. Anything else (absent, empty, negative, a fraction,
 * another date format) is undefined: the header is then ignored. Huge values stay finite; callers cap them.
 */
export function parseRetryAfter(value: string | readonly string[] | undefined, now: number): number | undefined {
  const text = (typeof value === 'string' ? value : value?.[0])?.trim();
  if (!text) return undefined;
  if (/^\d+$/.test(text)) return Math.min(Number(text) * 1000, Number.MAX_SAFE_INTEGER);
  const at = HTTP_DATES.some((form) => form.test(text))
    ? Date.parse(text)
    : ASCTIME.test(text)
      ? Date.parse(`${text} GMT`) // asctime carries no zone: HTTP dates are always UTC
      : Number.NaN;
  return Number.isNaN(at) ? undefined : Math.max(0, at - now);
}

const HTTP_DATES = [
  /^[A-Za-z]{3}, \d{2} [A-Za-z]{3} \d{4} \d{2}:\d{2}:\d{2} GMT$/, // IMF-fixdate: Sun, 06 Nov 1994 08:49:37 GMT
  /^[A-Za-z]{6,9}, \d{2}-[A-Za-z]{3}-\d{2} \d{2}:\d{2}:\d{2} GMT$/, // RFC 850: Sunday, 06-Nov-94 08:49:37 GMT
];
const ASCTIME = /^[A-Za-z]{3} [A-Za-z]{3} [ \d]\d \d{2}:\d{2}:\d{2} \d{4}$/; // Sun Nov  6 08:49:37 1994

/**
 * Where a delivery with no attempt left waits for its deadline: the tier with the longest delay that lands at or
 * before it, so the time left shrinks with every hop; once none fits, the shortest tier, which lands less than its delay
 * after the deadline, where the delivery is abandoned.
 */
export function nextHop(now: number, deadline: number, retryDelaysMs: readonly number[]): Fate {
  if (now >= deadline) return { kind: 'abandoned', reason: LIFETIME_EXCEEDED };
  return { kind: 'expire', ...holdHop(now, deadline, retryDelaysMs) };
}

/** Start of the failure-day window containing `now` (aligned to the epoch, so to UTC midnight for 24 h). */
export function failureWindow(now: number, failureDayMs: number): number {
  return Math.floor(now / failureDayMs) * failureDayMs;
}
