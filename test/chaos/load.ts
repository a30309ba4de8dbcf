// The chaos suite's load and bookkeeping: HTTP receivers that record every delivery, an open-loop generator of purchase
// validations at a steady rate, and the figures of one phase (delivered/expected, duplicates, recovery, API answers).
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface Receipt {
  eventId: string;
  entityId: string;
  subscriptionId: string;
  at: number;
}

/** Receivers on 127.0.0.1 that answer 204 at once and keep every request's ids. */
export class Receivers {
  readonly receipts: Receipt[] = [];
  private readonly servers: Server[] = [];
  /** Receipts per entity (the purchase order id), for a phase's bookkeeping. */
  readonly byEntity = new Map<string, Receipt[]>();

  async start(count: number): Promise<string[]> {
    const urls: string[] = [];
    for (let index = 0; index < count; index += 1) {
      const server = createServer((request, response) => {
        const chunks: Buffer[] = [];
        request.on('data', (chunk: Buffer) => chunks.push(chunk));
        request.on('end', () => {
          const at = Date.now();
          try {
            const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as {
              entityId: string;
              subscriptionId: string;
            };
            const receipt = {
              eventId: String(request.headers['x-webhook-event-id']),
              entityId: body.entityId,
              subscriptionId: String(request.headers['x-webhook-subscription-id'] ?? body.subscriptionId),
              at,
            };
            this.receipts.push(receipt);
            const list = this.byEntity.get(receipt.entityId) ?? [];
            list.push(receipt);
            this.byEntity.set(receipt.entityId, list);
          } catch {
            // not a webhook envelope: ignored
          }
          response.writeHead(204).end();
        });
      });
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      this.servers.push(server);
      urls.push(`http://127.0.0.1:${(server.address() as AddressInfo).port}/hooks`);
    }
    return urls;
  }

  /** Whether the last 2 s, all after `since`, brought at least `perSecond` deliveries a second. */
  flowing(since: number, perSecond: number): boolean {
    const from = Date.now() - 2_000;
    if (from < since) return false;
    let count = 0;
    for (let index = this.receipts.length - 1; index >= 0 && this.receipts[index]!.at >= from; index -= 1) count += 1;
    return count >= perSecond * 2;
  }

  /** Whether `entityId` reached every one of `subscriptionIds`. */
  reachedAll(entityId: string, subscriptionIds: string[]): boolean {
    const got = new Set((this.byEntity.get(entityId) ?? []).map((receipt) => receipt.subscriptionId));
    return subscriptionIds.every((id) => got.has(id));
  }

  async close(): Promise<void> {
    for (const server of this.servers) {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    }
  }
}

/** One validation request: its order, when it was sent, how long until its outcome, and the outcome. */
export interface Answer {
  orderId: string;
  sentAt: number;
  ms: number;
  /** The HTTP status ('200', '503', …) or the client error's code ('ECONNREFUSED', 'timeout', 'no-draft', …). */
  outcome: string;
}

/** What a request ended with when no HTTP answer came. */
export function clientError(error: unknown): string {
  if (error instanceof Error && (error.name === 'TimeoutError' || error.name === 'AbortError')) return 'timeout';
  const cause = (error as { cause?: { code?: string } } | undefined)?.cause;
  return cause?.code ?? 'fetch-error';
}

export const isHttpStatus = (outcome: string): boolean => /^\d{3}$/.test(outcome);

/**
 * Sends `validate(orderId)` at `rate` per second (open loop: a slow answer does not delay the next request) until
 * `stop()` is called; `done` resolves with every answer once the last request has ended.
 */
export function steadyLoad(opts: {
  rate: number;
  takeDraft: () => string | undefined;
  validate: (orderId: string) => Promise<string>;
}) {
  const answers: Answer[] = [];
  const inFlight = new Set<Promise<void>>();
  let stopped = false;
  const startedAt = Date.now();
  const interval = 1000 / opts.rate;
  const loop = (async () => {
    for (let tick = 0; !stopped; tick += 1) {
      const due = startedAt + tick * interval;
      const wait = due - Date.now();
      if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
      if (stopped) break;
      const orderId = opts.takeDraft();
      const sentAt = Date.now();
      if (orderId === undefined) {
        answers.push({ orderId: '', sentAt, ms: 0, outcome: 'no-draft' });
        continue;
      }
      const request = opts
        .validate(orderId)
        .catch(clientError)
        .then((outcome) => void answers.push({ orderId, sentAt, ms: Date.now() - sentAt, outcome }));
      inFlight.add(request);
      void request.finally(() => inFlight.delete(request));
    }
  })();
  return {
    startedAt,
    answers,
    stop: async (): Promise<Answer[]> => {
      stopped = true;
      await loop;
      await Promise.all([...inFlight]);
      return answers;
    },
  };
}

export interface PhaseTimes {
  loadStart: number;
  loadEnd: number;
  faultStart: number;
  /** When the fault ended (the kill itself for a kill -9, the restart or SIGCONT otherwise). */
  faultEnd: number;
  /** End of the window whose API answers are reported (the faulty component healthy again). */
  windowEnd: number;
}

export interface PhaseFigures {
  confirmed: number;
  expected: number;
  delivered: number;
  duplicates: number;
  /** Deliveries of orders whose validation got no 200 (a timeout or lost answer that had in fact committed). */
  unconfirmedDelivered: number;
  /** The validations answered 200 short of a delivery, as `orderId (sent at ISO time)`, to look up in the logs. */
  missing: string[];
  clientErrors: number;
  /** Ticks of the load that found no draft order to validate (the suite's own shortfall, not the API's). */
  noDraft: number;
  /** ms from the fault's end until a 2 s window carried ≥ 80 % of the offered delivery rate; undefined: never. */
  recoveryMs: number | undefined;
  /** ms from the fault's end until the last expected delivery arrived. */
  drainedMs: number | undefined;
  /**
   * API answers during the fault window with the median and slowest of each, e.g. "200×310 (p50 0.1 s, ≤ 2.1 s)
   * 503×42 (p50 0.2 s, ≤ 1.2 s)".
   */
  api: string;
  apiMaxMs: number;
  /**
   * Validation call → first receipt at each subscription, for validations answered 200 that were sent during the fault
   * window: p50 and p99 in ms (undefined without any).
   */
  faultLatency: { p50: number; p99: number } | undefined;
  /**
   * The longest time one subscription went without a delivery, between the first receipts of the validations sent in
   * the fault window and answered 200 (ms; undefined with fewer than two): how long the fault stopped deliveries, as
   * long as the load kept the API's answers coming.
   */
  longestStopMs: number | undefined;
}

export function phaseFigures(
  answers: Answer[],
  receivers: Receivers,
  subscriptionIds: string[],
  times: PhaseTimes,
  rate: number,
): PhaseFigures {
  const confirmed = answers.filter((answer) => answer.outcome === '200');
  let delivered = 0;
  let duplicates = 0;
  let unconfirmedDelivered = 0;
  const firstReceipts: number[] = [];
  const faultLatencies: number[] = [];
  /** Per subscription, the first receipts of the validations sent in the fault window and answered 200. */
  const faultReceipts = new Map<string, number[]>();
  let lastExpected: number | undefined;
  const missing: string[] = [];
  const confirmedIds = new Set(confirmed.map((answer) => answer.orderId));
  for (const answer of answers) {
    if (!answer.orderId) continue;
    const receipts = receivers.byEntity.get(answer.orderId) ?? [];
    const perKey = new Map<string, number>();
    for (const receipt of receipts) {
      const key = `${receipt.eventId}|${receipt.subscriptionId}`;
      perKey.set(key, (perKey.get(key) ?? 0) + 1);
    }
    for (const count of perKey.values()) duplicates += count - 1;
    for (const subscriptionId of subscriptionIds) {
      const first = receipts.filter((receipt) => receipt.subscriptionId === subscriptionId).map((r) => r.at);
      if (first.length === 0) {
        const entry = `${answer.orderId} (sent at ${new Date(answer.sentAt).toISOString()})`;
        if (confirmedIds.has(answer.orderId) && !missing.includes(entry)) missing.push(entry);
        continue;
      }
      const at = Math.min(...first);
      firstReceipts.push(at);
      if (confirmedIds.has(answer.orderId)) {
        delivered += 1;
        lastExpected = Math.max(lastExpected ?? 0, at);
        if (answer.sentAt >= times.faultStart && answer.sentAt <= times.windowEnd) {
          faultLatencies.push(at - answer.sentAt);
          faultReceipts.set(subscriptionId, [...(faultReceipts.get(subscriptionId) ?? []), at]);
        }
      } else unconfirmedDelivered += 1;
    }
  }
  firstReceipts.sort((a, b) => a - b);
  // Deliveries come in small bursts (the outbox relay publishes in batches), so the rate is judged over 2 s.
  const windowMs = 2_000;
  const threshold = (0.8 * rate * subscriptionIds.length * windowMs) / 1000;
  let recoveryMs: number | undefined;
  for (let t = times.faultEnd; t + windowMs <= times.loadEnd + 1000; t += 100) {
    let count = 0;
    for (const at of firstReceipts) if (at >= t && at < t + windowMs) count += 1;
    if (count >= threshold) {
      recoveryMs = t - times.faultEnd;
      break;
    }
  }
  const during = answers.filter(
    (answer) => answer.sentAt >= times.faultStart && answer.sentAt <= times.windowEnd && answer.outcome !== 'no-draft',
  );
  const byOutcome = new Map<string, number[]>();
  for (const answer of during) {
    const durations = byOutcome.get(answer.outcome) ?? [];
    durations.push(answer.ms);
    byOutcome.set(answer.outcome, durations);
  }
  // Each outcome with its median and slowest answer: a 503 must come fast (no hang), whatever the 200s took, and the
  // median tells a few slow answers from all of them slow.
  const api = [...byOutcome.entries()]
    .sort(([a], [b]) => Number(isHttpStatus(b)) - Number(isHttpStatus(a)) || a.localeCompare(b))
    .map(([outcome, durations]) => {
      const secondsOf = (ms: number) => (ms / 1000).toFixed(1);
      return `${outcome}×${durations.length} (p50 ${secondsOf(quantile(durations, 0.5))} s, ≤ ${secondsOf(Math.max(...durations))} s)`;
    })
    .join(' ');
  return {
    confirmed: confirmed.length,
    expected: confirmed.length * subscriptionIds.length,
    delivered,
    duplicates,
    unconfirmedDelivered,
    missing,
    clientErrors: answers.filter((answer) => !isHttpStatus(answer.outcome) && answer.outcome !== 'no-draft').length,
    noDraft: answers.filter((answer) => answer.outcome === 'no-draft').length,
    recoveryMs,
    drainedMs: lastExpected === undefined ? undefined : Math.max(0, lastExpected - times.faultEnd),
    api: api || 'no requests',
    apiMaxMs: Math.max(0, ...during.map((answer) => answer.ms)),
    faultLatency:
      faultLatencies.length === 0
        ? undefined
        : { p50: quantile(faultLatencies, 0.5), p99: quantile(faultLatencies, 0.99) },
    longestStopMs: longestGap([...faultReceipts.values()]),
  };
}

/** The longest time between two consecutive receipts of any one list; undefined when no list has two. */
function longestGap(lists: number[][]): number | undefined {
  let longest: number | undefined;
  for (const list of lists) {
    const sorted = [...list].sort((a, b) => a - b);
    for (let index = 1; index < sorted.length; index += 1)
      longest = Math.max(longest ?? 0, sorted[index]! - sorted[index - 1]!);
  }
  return longest;
}

/** The `q` quantile of `values` (nearest rank). */
function quantile(values: number[], q: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))]!;
}

/**
 * The gateways behind a load balancer, as a Kubernetes Service puts them: each call goes to the next gateway in
 * service, round robin. One taken out of service (`drain`, as a pod's endpoint is removed when it is told to stop) gets
 * no new call, and `drain` resolves once its calls in flight have been answered; `restore` puts it back.
 */
export class GatewayPool {
  private readonly inService: string[];
  private readonly inFlight = new Map<string, number>();
  private next = 0;

  constructor(private readonly bases: ReadonlyMap<string, string>) {
    this.inService = [...bases.keys()];
  }

  /** Runs `send` against the base URL of the next gateway in service. */
  async send<T>(send: (base: string) => Promise<T>): Promise<T> {
    const name = this.inService[this.next++ % this.inService.length]!;
    this.inFlight.set(name, (this.inFlight.get(name) ?? 0) + 1);
    try {
      return await send(this.bases.get(name)!);
    } finally {
      this.inFlight.set(name, this.inFlight.get(name)! - 1);
    }
  }

  async drain(name: string): Promise<void> {
    if (this.inService.length < 2)
      throw new Error(`${name} is the only gateway in service: there is nothing to drain to`);
    this.inService.splice(this.inService.indexOf(name), 1);
    while ((this.inFlight.get(name) ?? 0) > 0) await new Promise((resolve) => setTimeout(resolve, 20));
  }

  /** Puts gateway `name` back in service (a name that is not one of the pool's gateways is ignored). */
  restore(name: string): void {
    if (this.bases.has(name) && !this.inService.includes(name)) this.inService.push(name);
  }
}
