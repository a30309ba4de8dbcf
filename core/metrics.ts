// Prometheus metrics: the only module that imports prom-client. Services get small recording interfaces.
import { createServer, type Server, type ServerResponse } from 'node:http';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

/** The stages of an event's way to a subscriber, each timed on its own (webhook_stage_seconds{stage}). */
export type Stage = PurchaseStage | DeliveryStage;

/**
 * The purchase service's stages (the gateway): a transition request's read of the order, its reference (validations
 * only), its conditional write; then, for an event its relay published as it committed, the wait for the relay
 * (commit_to_publish), the publication until Kafka acknowledged it (outbox_publish) and the two together
 * (commit_to_topic); for an event the sweep published instead, its commit to Kafka's acknowledgement (sweep_to_topic).
 */
export type PurchaseStage =
  | 'transition_read'
  | 'transition_reference'
  | 'transition_commit'
  | 'commit_to_publish'
  | 'outbox_publish'
  | 'commit_to_topic'
  | 'sweep_to_topic';

/** The router's and the dispatcher's stages. */
export type DeliveryStage =
  | 'event_to_routed'
  | 'routing'
  | 'routing_write'
  | 'routing_publish'
  | 'queue_to_dispatch'
  | 'attempt'
  | 'event_to_answer';

/** What the dispatcher records per attempt outcome. */
export interface DeliveryMetrics {
  outcome(outcome: string, durationMs: number | undefined): void;
  /** Time spent in one stage, in milliseconds. */
  stage(stage: Stage, ms: number): void;
  /** A retry whose due time an answer's Retry-After moved past the retry schedule's. */
  retryAfterDeferral(): void;
  /** A subscription disabled by its consecutive failure days. */
  autoDisabled(): void;
  /** A delivery abandoned unsent because no configured key opens its subscription's secrets. */
  unreadableSecret(): void;
}

/** A subscription's circuit breaker: its transitions, and how many circuits are not closed now. */
export interface CircuitMetrics {
  transition(to: 'open' | 'half-open' | 'closed'): void;
  /** A delivery not attempted because its subscription's circuit is open, deferred to a retry tier. */
  deferred(): void;
  readOpen(read: () => number): void;
}

/** Why an attempt's answer made its subscription back off. */
export type ThrottleReason = '429' | '503' | 'timeout' | 'connection' | 'latency';

/** The dispatcher's per-subscription concurrency limits at one moment, as a scrape reads them. */
export interface LimitsSnapshot {
  /** The current limit of every subscription the dispatcher tracks. */
  limits: number[];
  /** Subscriptions inside a Retry-After window now. */
  held: number;
  /** At most MOST_THROTTLED subscriptions below their ceiling, the lowest limits first. */
  mostThrottled: { subscriptionId: string; tenantId: string; limit: number }[];
}

/** What the dispatcher's adaptive concurrency records. */
export interface ConcurrencyMetrics {
  /** An attempt whose answer says its endpoint is overloaded. */
  throttled(reason: ThrottleReason): void;
  /** Where each scrape reads the current limits from. */
  readLimits(read: () => LimitsSnapshot): void;
}

/** Subscriptions named in webhook_subscription_concurrency_limit at most: its label set stays bounded. */
export const MOST_THROTTLED = 10;
/** Bucket bounds of webhook_concurrency_limit_subscriptions. */
const LIMIT_BUCKETS = [1, 2, 5, 10, 20, 50, 100];

/**
 * Why a rate-limited subscription's next attempt had to wait: no token yet, or held while the group's membership is
 * being read after a rebalance.
 */
export type RateLimitWait = 'token' | 'held';

/** What a consumer records about its partitions and work in progress. */
export interface ConsumerMetrics {
  lag(topic: string, partition: number, lag: number): void;
  inFlight(count: number): void;
  /** A record that can never be handled (undecodable) was skipped. */
  poison(topic: string): void;
  /** A record of a full lane was moved aside (to the overflow topic), read from `topic`. */
  parked(topic: string): void;
}

/** Where a bulk replay job's deliveries are: matched, queued or skipped (router), delivered or failed (dispatcher). */
export type ReplayStage = 'matched' | 'queued' | 'skipped' | 'delivered' | 'failed';

/** What bulk replay records: its deliveries by stage, and the jobs this process runs. */
export interface ReplayMetrics {
  progress(stage: ReplayStage, count: number): void;
  running(jobs: number): void;
}

/** Bucket bounds of webhook_stage_seconds and gateway_request_duration_seconds, in seconds. */
const LATENCY_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300];

/** webhook_stage_seconds in `registry`, and how a service records into it (milliseconds, a negative one taken as 0). */
function stageRecorder(registry: Registry): (stage: Stage, ms: number) => void {
  const stages = new Histogram({
    name: 'webhook_stage_seconds',
    help:
      'Time an event spends in each stage. Gateway: transition_read, transition_reference, transition_commit (a ' +
      "transition request's read, reference and conditional write), commit_to_publish (commit until its relay " +
      'publishes), outbox_publish (until Kafka acknowledged), commit_to_topic (both), sweep_to_topic (commit to ' +
      'acknowledgement of an event the sweep published). Router: event_to_routed (on the event topic until the router ' +
      'takes it), routing (stored and published as deliveries; of it, routing_write: the history rows in Cassandra, ' +
      'routing_publish: the delivery records acknowledged by Kafka). Dispatcher: queue_to_dispatch (on the deliveries ' +
      'topic, or past its retry due time, until a dispatcher takes it), attempt (the POST), event_to_answer (event ' +
      'published to first answer, attempt 1)',
    labelNames: ['stage'],
    buckets: LATENCY_BUCKETS,
    registers: [registry],
  });
  return (name, ms) => stages.observe({ stage: name }, Math.max(0, ms) / 1000);
}

/** What the purchase service records: its stages, and the events its outbox published, by how. */
export interface PurchaseMetrics {
  stage(stage: PurchaseStage, ms: number): void;
  /** Events acknowledged by Kafka: published as they committed (nudge) or found by the sweep (sweep). */
  published(path: 'nudge' | 'sweep', count: number): void;
}

/** The gateway's metrics: every API request's duration, and the purchase service's. */
export function createGatewayMetrics() {
  const registry = new Registry();
  registry.setDefaultLabels({ service: 'gateway' });
  collectDefaultMetrics({ register: registry });
  const stage = stageRecorder(registry);
  const requests = new Histogram({
    name: 'gateway_request_duration_seconds',
    help: 'API requests from arrival to the answer sent, by method, route template (unmatched: no route) and status',
    labelNames: ['method', 'route', 'status'],
    buckets: LATENCY_BUCKETS,
    registers: [registry],
  });
  const published = new Counter({
    name: 'purchase_events_published_total',
    help:
      'Purchase events acknowledged by Kafka: published by the relay as they committed (nudge), or by the sweep ' +
      '(sweep: the relay of the process that committed them did not, or its gateway runs no relay)',
    labelNames: ['path'],
    registers: [registry],
  });
  return {
    registry,
    request: (method: string, route: string, status: number, ms: number) =>
      requests.observe({ method, route, status: String(status) }, Math.max(0, ms) / 1000),
    purchase: {
      stage,
      published: (path, count) => published.inc({ path }, count),
    } satisfies PurchaseMetrics,
  };
}

export function createMetrics(service: string) {
  const registry = new Registry();
  registry.setDefaultLabels({ service });
  collectDefaultMetrics({ register: registry });
  const outcomes = new Counter({
    name: 'webhook_deliveries_total',
    help: 'Delivery outcomes (acknowledged, retrying, abandoned, superseded, duplicate skipped)',
    labelNames: ['outcome'],
    registers: [registry],
  });
  const latency = new Histogram({
    name: 'webhook_attempt_duration_seconds',
    help: 'Duration of HTTP attempts to subscriber endpoints',
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
    registers: [registry],
  });
  const stage = stageRecorder(registry);
  const inFlight = new Gauge({
    name: 'webhook_records_in_flight',
    help: 'Records handed to handlers and not yet finished',
    registers: [registry],
  });
  const lag = new Gauge({
    name: 'webhook_consumer_lag',
    help: 'Records between the last fetched offset and the partition high watermark',
    labelNames: ['topic', 'partition'],
    registers: [registry],
  });
  const poison = new Counter({
    name: 'webhook_poison_records_total',
    help: 'Records that could never be handled (undecodable) and were skipped, by topic',
    labelNames: ['topic'],
    registers: [registry],
  });
  const throttled = new Counter({
    name: 'webhook_throttled_attempts_total',
    help: 'Attempts whose answer made their subscription back off, by reason (429, 503, timeout, connection, latency)',
    labelNames: ['reason'],
    registers: [registry],
  });
  const autoDisabled = new Counter({
    name: 'webhook_subscriptions_auto_disabled_total',
    help: 'Subscriptions disabled because they reached WEBHOOK_AUTO_DISABLE_AFTER_DAYS consecutive failure days',
    registers: [registry],
  });
  const unreadableSecrets = new Counter({
    name: 'webhook_unreadable_secret_abandons_total',
    help: 'Deliveries abandoned unsent because no key of SECRETS_KEY / SECRETS_PREVIOUS_KEYS opens their secrets',
    registers: [registry],
  });
  const circuitTransitions = new Counter({
    name: 'webhook_circuit_transitions_total',
    help: "Subscriptions' circuit breaker transitions, by the state entered (open, half-open, closed)",
    labelNames: ['to'],
    registers: [registry],
  });
  const circuitDeferrals = new Counter({
    name: 'webhook_circuit_deferrals_total',
    help: 'Deliveries not attempted because their subscription circuit was open, deferred to a retry tier',
    registers: [registry],
  });
  let readOpenCircuits = () => 0;
  new Gauge({
    name: 'webhook_circuits_open',
    help: 'Subscriptions whose circuit is open or half-open in this dispatcher',
    registers: [registry],
    collect() {
      this.set(readOpenCircuits());
    },
  });
  const parked = new Counter({
    name: 'webhook_records_parked_total',
    help: "Records moved aside to the overflow topic because their subscription's lane was full, by the topic read from",
    labelNames: ['topic'],
    registers: [registry],
  });
  const deferrals = new Counter({
    name: 'webhook_retry_after_deferrals_total',
    help: "Retries scheduled later than the retry schedule's next step because the answer's Retry-After asked for it",
    registers: [registry],
  });
  const rateLimitedWaits = new Counter({
    name: 'webhook_rate_limited_waits_total',
    help:
      "Times a rate-limited subscription's next attempt had to wait in its lane: for a token (token), or while the " +
      "group's membership was read after a rebalance (held)",
    labelNames: ['cause'],
    registers: [registry],
  });
  let readLimits: (() => LimitsSnapshot) | undefined;
  new Gauge({
    name: 'webhook_concurrency_limit_subscriptions',
    help:
      'Subscriptions the dispatcher tracks whose concurrency limit is at most le (cumulative buckets, as a ' +
      'histogram\'s; le="+Inf" counts them all); subscriptions it does not track are at the ceiling',
    labelNames: ['le'],
    registers: [registry],
    collect() {
      if (!readLimits) return;
      const { limits } = readLimits();
      for (const bound of LIMIT_BUCKETS) this.set({ le: String(bound) }, limits.filter((l) => l <= bound).length);
      this.set({ le: '+Inf' }, limits.length);
    },
  });
  new Gauge({
    name: 'webhook_subscription_concurrency_limit',
    help: `Concurrency limit of the (at most ${MOST_THROTTLED}) most throttled subscriptions below their ceiling`,
    labelNames: ['subscription_id', 'tenant_id'],
    registers: [registry],
    collect() {
      this.reset();
      for (const entry of readLimits?.().mostThrottled.slice(0, MOST_THROTTLED) ?? []) {
        this.set({ subscription_id: entry.subscriptionId, tenant_id: entry.tenantId }, entry.limit);
      }
    },
  });
  new Gauge({
    name: 'webhook_subscriptions_retry_after_held',
    help: 'Subscriptions inside a Retry-After window now (held at a concurrency of 1)',
    registers: [registry],
    collect() {
      if (readLimits) this.set(readLimits().held);
    },
  });
  const routed = new Counter({
    name: 'webhook_events_routed_total',
    help: 'Events routed, and the deliveries they produced',
    labelNames: ['kind'],
    registers: [registry],
  });
  const filtered = new Counter({
    name: 'webhook_events_filtered_total',
    help: "Events of a subscription's types that its filter refused (no delivery made), per subscription",
    labelNames: ['tenant_id', 'subscription_id'],
    registers: [registry],
  });
  const replayDeliveries = new Counter({
    name: 'webhook_replay_deliveries_total',
    help:
      'Deliveries of bulk replay jobs by stage: matched by a job, queued as replays, skipped (not replayable), and ' +
      'the replays that ended delivered or failed',
    labelNames: ['stage'],
    registers: [registry],
  });
  const replayJobs = new Gauge({
    name: 'webhook_replay_jobs_running',
    help: 'Bulk replay jobs this process is running now',
    registers: [registry],
  });
  return {
    registry,
    replay: {
      progress: (stage, count) => replayDeliveries.inc({ stage }, count),
      running: (jobs) => replayJobs.set(jobs),
    } satisfies ReplayMetrics,
    delivery: {
      outcome: (outcome, durationMs) => {
        outcomes.inc({ outcome });
        if (durationMs !== undefined) latency.observe(durationMs / 1000);
      },
      stage,
      retryAfterDeferral: () => deferrals.inc(),
      autoDisabled: () => autoDisabled.inc(),
      unreadableSecret: () => unreadableSecrets.inc(),
    } satisfies DeliveryMetrics,
    circuit: {
      transition: (to) => circuitTransitions.inc({ to }),
      deferred: () => circuitDeferrals.inc(),
      readOpen: (read) => {
        readOpenCircuits = read;
      },
    } satisfies CircuitMetrics,
    concurrency: {
      throttled: (reason) => throttled.inc({ reason }),
      readLimits: (read) => {
        readLimits = read;
      },
    } satisfies ConcurrencyMetrics,
    rateLimitedWait: (cause: RateLimitWait) => rateLimitedWaits.inc({ cause }),
    stage,
    consumer: {
      lag: (topic, partition, value) => lag.set({ topic, partition: String(partition) }, value),
      inFlight: (count) => inFlight.set(count),
      poison: (topic) => poison.inc({ topic }),
      parked: (topic) => parked.inc({ topic }),
    } satisfies ConsumerMetrics,
    routed: (deliveries: number) => {
      routed.inc({ kind: 'event' });
      routed.inc({ kind: 'delivery' }, deliveries);
    },
    filtered: (tenantId: string, subscriptionId: string) =>
      filtered.inc({ tenant_id: tenantId, subscription_id: subscriptionId }),
  };
}

/** One condition of readiness: resolves to undefined when met, else to what is missing (throwing: not met). */
export type ReadinessCheck = () => Promise<string | undefined> | string | undefined;

/** A condition that has not answered within this is not met (a probe must not hang). */
const READINESS_TIMEOUT_MS = 2_000;

/**
 * What GET /ready checks, by name. Every condition is named when the service starts and is "not started yet" until the
 * service says how to check it, so /ready answers from the first moment the port listens.
 */
export class Readiness {
  private readonly checks = new Map<string, ReadinessCheck>();

  constructor(names: string[]) {
    for (const name of names) this.checks.set(name, () => 'not started yet');
  }

  /** How `name` is checked from now on. */
  set(name: string, check: ReadinessCheck): void {
    this.checks.set(name, check);
  }

  /** `name (reason)` of each condition not met, in the order named. */
  async missing(): Promise<string[]> {
    const results = await Promise.all(
      [...this.checks].map(async ([name, check]) => {
        let timer: NodeJS.Timeout | undefined;
        const late = new Promise<string>((resolve) => {
          timer = setTimeout(() => resolve('no answer'), READINESS_TIMEOUT_MS);
        });
        try {
          const reason = await Promise.race([Promise.resolve(check()), late]);
          return reason === undefined ? undefined : `${name} (${reason})`;
        } catch (error) {
          return `${name} (${error instanceof Error ? error.message : String(error)})`;
        } finally {
          clearTimeout(timer);
        }
      }),
    );
    return results.filter((entry) => entry !== undefined);
  }
}

/** A consumer group member is ready once it has joined its group with partitions (`assigned`: undefined before). */
export const consumerJoined =
  (assigned: () => number | undefined): ReadinessCheck =>
  () => {
    const partitions = assigned();
    if (partitions === undefined) return 'not joined its group yet';
    return partitions === 0 ? 'joined its group, no partitions assigned' : undefined;
  };

/**
 * Serves on `host`:`port` (0 = not served, and then neither is health): GET /metrics, GET /health (200 while the
 * process runs) and GET /ready (200 once every readiness condition is met, else 503 problem+json naming what is not).
 */
export async function serveMetrics(
  registry: Registry,
  host: string,
  port: number,
  readiness?: Readiness,
): Promise<Server | undefined> {
  if (port === 0) return undefined;
  const json = (response: ServerResponse, status: number, type: string, body: unknown) =>
    void response.writeHead(status, { 'content-type': type }).end(JSON.stringify(body));
  const server = createServer((request, response) => {
    const route = request.url;
    if (route === '/health') return json(response, 200, 'application/json', { status: 'ok' });
    if (route === '/ready') {
      return void (readiness?.missing() ?? Promise.resolve([]))
        .then((missing) => {
          if (missing.length === 0) return json(response, 200, 'application/json', { status: 'ready' });
          response.setHeader('retry-after', '1');
          json(response, 503, 'application/problem+json', {
            type: 'about:blank',
            title: 'Not ready',
            status: 503,
            detail: `waiting for ${missing.join('; ')}`,
          });
        })
        .catch(() => response.writeHead(500).end());
    }
    if (route !== '/metrics') return void response.writeHead(404).end();
    registry
      .metrics()
      .then((text) => response.writeHead(200, { 'content-type': registry.contentType }).end(text))
      .catch(() => response.writeHead(500).end());
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', (error) =>
      reject(new Error(`cannot serve metrics on ${host}:${port} (METRICS_PORT): ${error.message}`, { cause: error })),
    );
    server.listen(port, host, resolve);
  });
  return server;
}
