// Per-stage latency quantiles from a service's /metrics (Prometheus text): the webhook_stage_seconds histogram, one
// series per `stage` label. Absent metric, absent stage or an unreachable endpoint simply yield nothing.

/** The stages in the order an event passes them; others found in the text follow, by name. */
export const stageOrder = [
  'transition_read',
  'transition_reference',
  'transition_commit',
  'commit_to_publish',
  'outbox_publish',
  'commit_to_topic',
  'sweep_to_topic',
  'event_to_routed',
  'routing',
  'routing_write',
  'routing_publish',
  'queue_to_dispatch',
  'attempt',
  'event_to_answer',
];

/** p50/p99 of one stage as seen by one service, in milliseconds. */
export interface StageQuantiles {
  stage: string;
  count: number;
  p50Ms: number;
  p99Ms: number;
}

/** The cumulative buckets of `metric` per stage (other labels summed): stage → upper bound → count. */
function stageBuckets(text: string, metric: string): Map<string, Map<number, number>> {
  const bucketLine = new RegExp(`^${metric}_bucket\\{([^}]*)\\}\\s+(\\S+)`);
  const byStage = new Map<string, Map<number, number>>();
  for (const line of text.split('\n')) {
    const match = bucketLine.exec(line);
    if (!match) continue;
    const labels = new Map([...match[1]!.matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)].map((m) => [m[1]!, m[2]!]));
    const stage = labels.get('stage');
    const le = labels.get('le');
    if (stage === undefined || le === undefined) continue;
    const bound = le === '+Inf' ? Infinity : Number(le);
    const buckets = byStage.get(stage) ?? new Map<number, number>();
    byStage.set(stage, buckets);
    buckets.set(bound, (buckets.get(bound) ?? 0) + Number(match[2]));
  }
  return byStage;
}

/**
 * Interpolates p50/p99 per stage in the cumulative buckets of `metric`. With `since` (an earlier scrape of the same
 * process), only the observations made after it count: its buckets are subtracted.
 */
export function stageQuantiles(text: string, metric = 'webhook_stage_seconds', since?: string): StageQuantiles[] {
  const byStage = stageBuckets(text, metric);
  const earlier = since === undefined ? new Map<string, Map<number, number>>() : stageBuckets(since, metric);
  const rank = (name: string) => (stageOrder.includes(name) ? stageOrder.indexOf(name) : stageOrder.length);
  return [...byStage]
    .map(([stage, buckets]) => {
      const before = earlier.get(stage);
      const sorted = [...buckets]
        .map(([bound, count]): [number, number] => [bound, count - (before?.get(bound) ?? 0)])
        .sort(([a], [b]) => a - b);
      const count = sorted.at(-1)?.[1] ?? 0;
      return { stage, count, p50Ms: quantile(sorted, 0.5) * 1000, p99Ms: quantile(sorted, 0.99) * 1000 };
    })
    .filter((entry) => entry.count > 0)
    .sort((a, b) => rank(a.stage) - rank(b.stage) || a.stage.localeCompare(b.stage));
}

/**
 * Prometheus' histogram_quantile: find the bucket holding the rank and interpolate linearly inside it (from 0 for the
 * first bucket); a rank in the +Inf bucket answers the highest finite bound.
 */
function quantile(cumulative: [bound: number, count: number][], q: number): number {
  const total = cumulative.at(-1)?.[1] ?? 0;
  const target = q * total;
  let lowerBound = 0;
  let lowerCount = 0;
  for (const [bound, count] of cumulative) {
    if (count >= target) {
      if (bound === Infinity) return lowerBound;
      if (count === lowerCount) return bound;
      return lowerBound + ((bound - lowerBound) * (target - lowerCount)) / (count - lowerCount);
    }
    lowerBound = bound;
    lowerCount = count;
  }
  return lowerBound;
}

/**
 * Where a Node process lost time besides its work: event-loop delay (since the last scrape) and GC pauses by kind.
 * The delays are how late the sampling timer fired: Node's histogram records each whole interval between ticks, so its
 * smallest value (the sampling period, 10 ms, when a tick was on time) is taken off.
 */
export interface RuntimeFigures {
  loopDelayP99Ms: number;
  loopDelayMaxMs: number;
  gc: { kind: string; count: number; totalMs: number }[];
}

/**
 * prom-client's default metrics: nodejs_eventloop_lag_{p99,max}_seconds and nodejs_gc_duration_seconds by kind; with
 * `since` (an earlier scrape), only the collections after it.
 */
export function runtimeFigures(text: string, since?: string): RuntimeFigures | undefined {
  const gauge = (name: string) => {
    const match = new RegExp(`^${name}(?:\\{[^}]*\\})?\\s+(\\S+)`, 'm').exec(text);
    return match ? Number(match[1]) * 1000 : undefined;
  };
  const p99 = gauge('nodejs_eventloop_lag_p99_seconds');
  const max = gauge('nodejs_eventloop_lag_max_seconds');
  if (p99 === undefined || max === undefined) return undefined;
  const tick = gauge('nodejs_eventloop_lag_min_seconds') ?? 0;
  const gc = new Map<string, { kind: string; count: number; totalMs: number }>();
  const add = (source: string, sign: number) => {
    for (const match of source.matchAll(
      /^nodejs_gc_duration_seconds_(sum|count)\{[^}]*kind="(\w+)"[^}]*\}\s+(\S+)/gm,
    )) {
      const entry = gc.get(match[2]!) ?? { kind: match[2]!, count: 0, totalMs: 0 };
      if (match[1] === 'sum') entry.totalMs += sign * Number(match[3]) * 1000;
      else entry.count += sign * Number(match[3]);
      gc.set(entry.kind, entry);
    }
  };
  add(text, 1);
  if (since !== undefined) add(since, -1);
  return {
    loopDelayP99Ms: Math.max(0, p99 - tick),
    loopDelayMaxMs: Math.max(0, max - tick),
    gc: [...gc.values()].filter((entry) => entry.count > 0),
  };
}

/** What one scrape of a service's /metrics yields: its stages and its runtime figures, and the text they came from. */
export interface Scrape {
  stages: StageQuantiles[];
  runtime?: RuntimeFigures;
  text?: string;
}

/**
 * GET `url` and read the stages and runtime figures from it, counting only what happened after the scrape `since`
 * (its text) when given; nothing when the endpoint does not answer.
 */
export async function scrapeStages(url: string, since?: string): Promise<Scrape> {
  try {
    const response = await fetch(url, { signal: AbortSignal.timeout(5_000) });
    if (!response.ok) return { stages: [] };
    const text = await response.text();
    return {
      stages: stageQuantiles(text, undefined, since),
      runtime: runtimeFigures(text, since),
      text,
    };
  } catch {
    return { stages: [] };
  }
}

const ms = (value: number) => `${value < 10 ? value.toFixed(2) : value.toFixed(1)} ms`;

/** "stage routing (router): p50 4.20 ms, p99 31.0 ms over 20,001 observations" */
export function formatStage(service: string, entry: StageQuantiles): string {
  return (
    `stage ${entry.stage} (${service}): p50 ${ms(entry.p50Ms)}, p99 ${ms(entry.p99Ms)} ` +
    `over ${entry.count.toLocaleString('en-US')} observations`
  );
}

/** "runtime (dispatcher): event-loop delay p99 2.00 ms, max 300 ms; GC major 3× 95.0 ms, minor 812× 410 ms" */
export function formatRuntime(service: string, runtime: RuntimeFigures): string {
  const gc = runtime.gc.map((entry) => `${entry.kind} ${entry.count}× ${ms(entry.totalMs)}`).join(', ');
  return (
    `runtime (${service}): event-loop delay p99 ${ms(runtime.loopDelayP99Ms)}, max ${ms(runtime.loopDelayMaxMs)}` +
    (gc ? `; GC ${gc}` : '')
  );
}
