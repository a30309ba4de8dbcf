// Prometheus metrics: the only module that imports prom-client. Services get small recording interfaces.
import { createServer, type Server } from 'node:http';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

/** The stages of an event's way to a subscriber, each timed on its own (webhook_stage_seconds{stage}). */
export type Stage = 'event_to_routed' | 'routing' | 'queue_to_dispatch' | 'attempt' | 'event_to_answer';

/** What the dispatcher records per attempt outcome. */
export interface DeliveryMetrics {
  outcome(outcome: string, durationMs: number | undefined): void;
  /** Time spent in one stage, in milliseconds. */
  stage(stage: Stage, ms: number): void;
}

/** What a consumer records about its partitions and work in progress. */
export interface ConsumerMetrics {
  lag(topic: string, partition: number, lag: number): void;
  inFlight(count: number): void;
  /** A record that can never be handled (undecodable) was skipped. */
  poison(topic: string): void;
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
  const stages = new Histogram({
    name: 'webhook_stage_seconds',
    help:
      'Time an event spends in each stage: event_to_routed (on the event topic until the router takes it), routing ' +
      '(stored and published as deliveries), queue_to_dispatch (on the deliveries topic, or past its retry due time, ' +
      'until a dispatcher takes it), attempt (the POST), event_to_answer (event published to first answer, attempt 1)',
    labelNames: ['stage'],
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300],
    registers: [registry],
  });
  const stage = (name: Stage, ms: number) => stages.observe({ stage: name }, Math.max(0, ms) / 1000);
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
  const routed = new Counter({
    name: 'webhook_events_routed_total',
    help: 'Events routed, and the deliveries they produced',
    labelNames: ['kind'],
    registers: [registry],
  });
  return {
    registry,
    delivery: {
      outcome: (outcome, durationMs) => {
        outcomes.inc({ outcome });
        if (durationMs !== undefined) latency.observe(durationMs / 1000);
      },
      stage,
    } satisfies DeliveryMetrics,
    stage,
    consumer: {
      lag: (topic, partition, value) => lag.set({ topic, partition: String(partition) }, value),
      inFlight: (count) => inFlight.set(count),
      poison: (topic) => poison.inc({ topic }),
    } satisfies ConsumerMetrics,
    routed: (deliveries: number) => {
      routed.inc({ kind: 'event' });
      routed.inc({ kind: 'delivery' }, deliveries);
    },
  };
}

/** Serves GET /metrics on 127.0.0.1:`port` (0 = not served). */
export async function serveMetrics(registry: Registry, host: string, port: number): Promise<Server | undefined> {
  if (port === 0) return undefined;
  const server = createServer((request, response) => {
    if (request.url !== '/metrics') return void response.writeHead(404).end();
    registry
      .metrics()
      .then((text) => response.writeHead(200, { 'content-type': registry.contentType }).end(text))
      .catch(() => response.writeHead(500).end());
  });
  await new Promise<void>((resolve) => server.listen(port, host, resolve));
  return server;
}
