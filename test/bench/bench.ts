/**
 * `npm run bench -- [--events N] [--tenants T] [--subs S] [--rate D] [--warmup W] [--fail 0.3] [--backlog 100000]
 *   [--throttle 0.2] [--ordered-share 0.5] [--entities 1000] [--tsx] [--tracing] [--retry-delays 1m,2m]`
 * Runs a router and a dispatcher as processes (compiled first with `npm run build`'s buildServices, as production runs
 * them; `--tsx` runs their TypeScript through tsx instead) on their own keyspace and topics against a fast local receiver, and
 * prints deliveries per second, event-to-receipt latency p50/p99 and the dispatcher's resident memory. Then it measures
 * the machine's loopback ceiling (a plain undici POST loop to the same receiver with a body of the run, at 1, 50 and
 * the dispatcher's in-flight limit) and prints the deliveries/s as a fraction of it, and the per-stage p50/p99 of the
 * webhook_stage_seconds histograms the router and dispatcher expose on /metrics, when they do.
 *   --rate D      publish at D deliveries per second (0: as fast as possible)
 *   --warmup W    first deliver W deliveries at the same pace, not counted in any figure: the router and dispatcher
 *                 are fresh processes whose first seconds (JIT, connections) are not their steady state. Default:
 *                 5 s worth of the rate (10,000 as fast as possible); 0 with --fail, --backlog or --throttle
 *   --fail F      fraction of answers that fail with 500 (those deliveries retry after 1 s)
 *   --backlog B   first park B deliveries in a retry tier due in an hour (memory must stay flat while they wait)
 *   --throttle F  a fraction F of the subscriptions answers 429 with Retry-After: 2 for the first --throttle-for
 *                 seconds (default 10) of the run, then 204; prints the fast and the throttled ones' figures apart
 *   --ordered-share F  a fraction F of the subscriptions (spread over the tenants) has ordering 'entity'; prints the
 *                 ordered and the unordered ones' latencies apart
 *   --entities N  events cycle over N entityIds (each always of the same tenant) instead of one entity each, so that
 *                 ordered subscriptions have earlier deliveries of the same entity to wait for
 *   --built       the services are already in dist/ (a caller built them); --no-ceiling skips the loopback ceiling
 *   --tracing     the router and dispatcher export traces (OTLP) to a local collector stand-in: the cost of tracing
 *   --receipts F  also writes each measured first receipt to F (JSON: [receipt epoch ms, latency ms, delivery id]), to lay
 *                 the slow ones against other logs' timestamps (the servers' GC logs, say)
 *   --retry-delays L  the retry tiers (WEBHOOK_RETRY_DELAYS; default 1s,2s, or 1s,1h with --backlog). Each tier is a
 *                 topic the dispatcher's consumer fetches, so production's nine (1m,2m,…,4h) cost it more per delivery
 * `--ordered` compares runs with and without ordered subscriptions (test/bench/ordered-bench.ts).
 */
import { blankSubscription } from '../../core/subscriptions/subscription.ts';
import { randomUUID } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { connectCassandra } from '../../core/cassandra.ts';
import { loadConfig, requireSecrets } from '../../core/config.ts';
import { createKafka, Publisher } from '../../core/kafka.ts';
import { createLogger } from '../../core/log.ts';
import { codecFor, createRegistry } from '../../core/registry.ts';
import { SubscriptionStore } from '../../core/subscriptions/subscription-store.ts';
import { topicNames } from '../../core/topics.ts';
import { buildServices } from '../../infra/build.ts';
import { nodeFlagsFor, repoRoot, spawnService, type ServiceRuntime } from '../../infra/processes.ts';
import { deprovision, provision } from '../../infra/provision.ts';
import { ensureServers } from '../../infra/servers.ts';
import { eventPublisher } from '../support/events.ts';
import { freePort } from '../../infra/processes.ts';
import { benchEnv, rssMb } from './bench-env.ts';
import { ceilingOf, formatCeiling, fractionOfCeiling, measureLoopbackCeiling } from './loopback-ceiling.ts';
import { formatRuntime, formatStage, scrapeStages } from './stage-histograms.ts';
import { CpuMeter, formatCpu, localServerPids } from './process-cpu.ts';
import { startReceiverThread } from './receiver-thread.ts';

// `--mix`: the isolation mix (test/bench/mix-bench.ts), a bench of its own with its own options.
if (process.argv.includes('--mix')) {
  await import('./mix-bench.ts');
  process.exit(process.exitCode ?? 0);
}
// `--filters`: the routing cost of subscription filters (test/bench/filter-bench.ts), in process, with its own options.
if (process.argv.includes('--filters')) {
  await import('./filter-bench.ts');
  process.exit(process.exitCode ?? 0);
}
// `--ordered`: runs of this bench with half the subscriptions ordered and with none (test/bench/ordered-bench.ts).
if (process.argv.includes('--ordered')) {
  await import('./ordered-bench.ts');
  process.exit(process.exitCode ?? 0);
}
// `--api`: from the purchase API call to the receiver (test/bench/api-bench.ts), with its own options.
if (process.argv.includes('--api')) {
  await import('./api-bench.ts');
  process.exit(process.exitCode ?? 0);
}

const { values } = parseArgs({
  options: {
    events: { type: 'string', default: '5000' },
    tenants: { type: 'string', default: '10' },
    subs: { type: 'string', default: '2' },
    rate: { type: 'string', default: '0' },
    warmup: { type: 'string' },
    fail: { type: 'string', default: '0' },
    backlog: { type: 'string', default: '0' },
    throttle: { type: 'string', default: '0' },
    'throttle-for': { type: 'string', default: '10' },
    'ordered-share': { type: 'string', default: '0' },
    entities: { type: 'string', default: '0' },
    built: { type: 'boolean', default: false },
    'no-ceiling': { type: 'boolean', default: false },
    tsx: { type: 'boolean', default: false },
    tracing: { type: 'boolean', default: false },
    'retry-delays': { type: 'string' },
    receipts: { type: 'string' },
  },
});
const events = Number(values.events);
const tenants = Number(values.tenants);
const subsPerTenant = Number(values.subs);
const rate = Number(values.rate);
const failRatio = Number(values.fail);
const backlog = Number(values.backlog);
const throttleRatio = Number(values.throttle);
const throttleForMs = Number(values['throttle-for']) * 1000;
const orderedShare = Number(values['ordered-share']);
const entities = Number(values.entities);
const warmupDeliveries =
  values.warmup !== undefined
    ? Number(values.warmup)
    : failRatio > 0 || backlog > 0 || throttleRatio > 0
      ? 0
      : rate > 0
        ? rate * 5
        : 10_000;
const warmupEvents = Math.ceil(warmupDeliveries / subsPerTenant);
const expected = events * subsPerTenant;

const percentile = (sorted: number[], p: number) =>
  sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))] ?? NaN;
/** The fast and throttled subscriptions' figures apart, and the dispatcher's throttling counters. */
async function throttleReport(): Promise<string[]> {
  const line = (name: string, entry: Group) => {
    const sorted = entry.latencies.slice().sort((a, b) => a - b);
    const seconds = (entry.lastAt - entry.firstAt) / 1000;
    return (
      `  ${name} (${entry.subscriptions} subscriptions): ${entry.received} deliveries, ` +
      `${(entry.received / seconds).toFixed(0)}/s over ${seconds.toFixed(1)} s; event-to-receipt latency ` +
      `p50 ${percentile(sorted, 0.5)} ms, p99 ${percentile(sorted, 0.99)} ms, max ${sorted.at(-1)} ms`
    );
  };
  const text = await (await fetch(`http://127.0.0.1:${metricsPorts.dispatcher}/metrics`)).text();
  const counter = (pattern: string) => counterSum(text, pattern);
  const reasons = ['429', '503', 'timeout', 'connection', 'latency']
    .map((reason) => [reason, counter(`webhook_throttled_attempts_total\\{[^}]*reason="${reason}"[^}]*\\}`)] as const)
    .filter(([, count]) => count > 0)
    .map(([reason, count]) => `${reason} ${count}`);
  const { throttled } = groups;
  return [
    `throttling: ${throttled.subscriptions} of ${subscriptionIds.length} subscriptions answered 429 (Retry-After: 2) ` +
      `for the first ${throttleForMs / 1000} s, then 204`,
    line('fast', groups.fast),
    line('throttled', throttled),
    `  throttled while refusing: ${throttled.refused} answers 429; at most ${throttled.maxOpen} request(s) open at once ` +
      `per subscription after the first 2 s (lane limit ${config.dispatcher.maxInFlightPerSubscription})`,
    `  dispatcher: throttled attempts ${reasons.join(', ') || 'none'}; Retry-After deferrals ` +
      `${counter('webhook_retry_after_deferrals_total(?:\\{[^}]*\\})?')}`,
  ];
}

const serviceRuntime: ServiceRuntime = values.tsx ? 'tsx' : 'compiled';
if (serviceRuntime === 'compiled' && !values.built) buildServices((line) => console.log(line));
const servers = await ensureServers({ root: path.join(repoRoot, '.local'), progress: (line) => console.log(line) });
const run = randomUUID().slice(0, 8);
// --tracing: the router and dispatcher export their spans (OTLP, protobuf) to a collector stand-in here that counts
// what it gets without decoding it (so that decoding costs this process nothing).
const collector = values.tracing ? await countingCollector() : undefined;
const env = benchEnv(servers, run, {
  // The parked backlog waits in a 1 h tier; otherwise failed answers retry every second or two.
  WEBHOOK_RETRY_DELAYS: values['retry-delays'] ?? (backlog > 0 ? '1s,1h' : '1s,2s'),
  ...(collector ? { OTEL_EXPORTER_OTLP_ENDPOINT: collector.endpoint } : {}),
});
const config = loadConfig(env);
const logger = createLogger('bench', 'warn');
await provision(config, logger);

/** Figures of one group of subscriptions (fast or throttled): first receipts and their latencies. */
interface Group {
  subscriptions: number;
  received: number;
  latencies: number[];
  firstAt: number;
  lastAt: number;
  /** 429 answers, and the most requests one subscription had open at once after its first 2 s of throttling. */
  refused: number;
  maxOpen: number;
}
const group = (): Group => ({
  subscriptions: 0,
  received: 0,
  latencies: [],
  firstAt: 0,
  lastAt: 0,
  refused: 0,
  maxOpen: 0,
});
const groups = { fast: group(), throttled: group() };
const throttledIds = new Set<string>();
const orderedIds = new Set<string>();
/** Latencies of the ordered and of the unordered subscriptions' first receipts, apart (with --ordered-share). */
const byOrdering = { ordered: [] as number[], unordered: [] as number[] };
// The receiver, on a thread of its own (test/bench/receiver-worker.ts): answers at once; a fraction fails when asked,
// the throttled subscriptions are refused for a while. It stamps each request; the bookkeeping is done here.
let received = 0;
let failed = 0;
const firstReceipt = new Set<string>();
const latencies: number[] = [];
/** [receipt epoch ms, latency ms, delivery id] of each first receipt measured, for --receipts. */
const timeline: [number, number, string][] = [];
let firstAt = 0;
let lastAt = 0;
const receiver = await startReceiverThread(failRatio);
const toReceiver = receiver.send;
receiver.onReceipt(({ deliveryId, subscriptionId, at: preciseAt, occurredAt, answer }) => {
  // Whole milliseconds, as the events' occurredAt.
  const at = Math.round(preciseAt);
  const mine = throttledIds.has(subscriptionId) ? groups.throttled : groups.fast;
  if (answer === 429) mine.refused += 1;
  if (answer === 500) failed += 1;
  if (answer !== 204 || firstReceipt.has(deliveryId)) return;
  firstReceipt.add(deliveryId);
  if (occurredAt !== undefined) {
    const latency = at - occurredAt;
    latencies.push(latency);
    if (values.receipts) timeline.push([at, latency, deliveryId]);
    mine.latencies.push(latency);
    byOrdering[orderedIds.has(subscriptionId) ? 'ordered' : 'unordered'].push(latency);
  }
  received += 1;
  firstAt ||= at;
  lastAt = at;
  mine.received += 1;
  mine.firstAt ||= at;
  mine.lastAt = at;
});
const { url } = receiver;

const db = await connectCassandra(config);
const store = new SubscriptionStore(db, requireSecrets(config));
const tenantIds = Array.from({ length: tenants }, (_, index) => `bench-tenant-${index}`);
const subscriptionIds: string[] = [];
for (const tenantId of tenantIds) {
  for (let index = 0; index < subsPerTenant; index += 1) {
    const subscription = blankSubscription(tenantId, randomUUID(), new Date());
    // Every 1/F-th subscription is ordered, so they spread over the tenants (as the throttled ones below).
    const nth = subscriptionIds.length;
    if (Math.floor((nth + 1) * orderedShare) > Math.floor(nth * orderedShare)) orderedIds.add(subscription.id);
    subscriptionIds.push(subscription.id);
    await store.save({
      ...subscription,
      ordering: orderedIds.has(subscription.id) ? 'entity' : 'none',
      url,
      eventTypes: ['purchaseOrder.*'],
      authenticationMode: 'Hmac',
      secrets: { hmacSecret: 'bench-secret-0123456789' },
    });
  }
}
await db.shutdown();
// Every 1/F-th subscription is throttled, so they spread over the tenants.
subscriptionIds.forEach((id, index) => {
  if (Math.floor((index + 1) * throttleRatio) > Math.floor(index * throttleRatio)) throttledIds.add(id);
});
groups.throttled.subscriptions = throttledIds.size;
groups.fast.subscriptions = subscriptionIds.length - throttledIds.size;

const logs = path.join(repoRoot, '.local', 'logs', 'bench');
// Each service serves /metrics on a port of its own, scraped for the stage histograms before it is stopped.
const metricsPorts = { router: await freePort(), dispatcher: await freePort() };
const router = spawnService(
  'router',
  'router/main.ts',
  { ...process.env, ...env, METRICS_PORT: String(metricsPorts.router) },
  path.join(logs, `router-${run}.log`),
  serviceRuntime,
);
const dispatcher = spawnService(
  'dispatcher',
  'dispatcher/main.ts',
  { ...process.env, ...env, METRICS_PORT: String(metricsPorts.dispatcher) },
  path.join(logs, `dispatcher-${run}.log`),
  serviceRuntime,
);
const memory: number[] = [];
/** Each service's /metrics text when the measured run began (after the warm-up). */
const warmScrapes = new Map<string, string | undefined>();
// Event-loop delay of the bench's main thread (the event publisher, the bookkeeping) during the measured run.
const loopDelay = monitorEventLoopDelay({ resolution: 10 });
const sampler = setInterval(() => memory.push(rssMb(dispatcher.child.pid!)), 500);
// CPU of every process of the run (the local servers when their pid files are ours) while the deliveries flow.
const cpu = new CpuMeter({
  ...(await localServerPids()),
  router: router.child.pid,
  dispatcher: dispatcher.child.pid,
  'bench (receiver, publisher)': process.pid,
});

try {
  if (backlog > 0) {
    // Park B deliveries in the 1 h retry tier: the dispatcher must pause those partitions, not hold the records.
    const kafka = createKafka(config.kafka.brokers, 'bench', logger);
    const publisher = await Publisher.connect(kafka);
    const tier = topicNames(config).retries[1]!.topic;
    const codec = await codecFor<Record<string, unknown>>(createRegistry(config.schemaRegistryUrl), 'delivery', tier);
    const dueAt = Date.now() + 3_600_000;
    const started = Date.now();
    for (let sent = 0; sent < backlog; sent += 2_000) {
      const records = await Promise.all(
        Array.from({ length: Math.min(2_000, backlog - sent) }, async (_, index) => {
          const subscriptionId = subscriptionIds[(sent + index) % subscriptionIds.length]!;
          return {
            topic: tier,
            key: subscriptionId,
            headers: { 'due-at': String(dueAt) },
            value: await codec.encode({
              deliveryId: randomUUID(),
              tenantId: tenantIds[0],
              subscriptionId,
              eventId: randomUUID(),
              eventType: 'purchaseOrder.validated',
              entityId: randomUUID(),
              occurredAt: new Date().toISOString(),
              queuedAt: Date.now(),
              attempt: 2,
              dueAt,
              envelope: Buffer.from('{}'),
              signature: null,
              replayOf: null,
            }),
          };
        }),
      );
      await publisher.publish(records);
    }
    await publisher.close();
    console.log(`parked ${backlog} pending retries in ${tier} in ${((Date.now() - started) / 1000).toFixed(1)} s`);
    await new Promise((resolve) => setTimeout(resolve, 5_000));
    console.log(`dispatcher RSS with the backlog parked: ${rssMb(dispatcher.child.pid!).toFixed(0)} MB`);
  }

  const publisher = await eventPublisher(env);
  // Paced runs publish in small batches (50 a second) so the load is smooth rather than bursts.
  const batch = rate > 0 ? Math.max(1, Math.round(rate / subsPerTenant / 50)) : 200;
  const publishEvents = async (count: number, started: number) => {
    for (let sent = 0; sent < count; sent += batch) {
      const size = Math.min(batch, count - sent);
      await publisher.publish(
        Array.from({ length: size }, (_, index) => ({
          // With --entities, the n-th event is of entity n mod N, which always falls on the same tenant.
          tenantId: tenantIds[(entities > 0 ? (sent + index) % entities : sent + index) % tenants]!,
          ...(entities > 0 ? { entityId: `bench-entity-${(sent + index) % entities}` } : {}),
          eventType: 'purchaseOrder.validated',
          payload: JSON.stringify({ id: randomUUID(), status: 'Validated', totalAmount: '123.45', rows: [] }),
        })),
      );
      if (rate > 0) {
        // Pace the events so deliveries arrive at `rate` per second.
        const due = started + ((sent + size) * subsPerTenant * 1000) / rate;
        await new Promise((resolve) => setTimeout(resolve, Math.max(0, due - Date.now())));
      }
    }
  };
  // Wait until both consumer groups have joined and one event has gone all the way; then the warm-up, if any.
  await publisher.publish([{ tenantId: tenantIds[0]!, eventType: 'purchaseOrder.validated' }]);
  while (received < subsPerTenant) await new Promise((resolve) => setTimeout(resolve, 100));
  if (warmupEvents > 0) {
    await publishEvents(warmupEvents, Date.now());
    const warmDeadline = Date.now() + 120_000;
    const warmExpected = subsPerTenant * (1 + warmupEvents);
    while (received < warmExpected && Date.now() < warmDeadline) {
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    if (received < warmExpected) throw new Error(`warm-up: ${received} of ${warmExpected} deliveries arrived in 2 min`);
  }
  // The services' histograms so far: only what they observe from here on counts.
  for (const [service, port] of Object.entries(metricsPorts)) {
    warmScrapes.set(service, (await scrapeStages(`http://127.0.0.1:${port}/metrics`)).text);
  }
  received = 0;
  firstAt = 0;
  latencies.length = 0;
  timeline.length = 0;
  byOrdering.ordered.length = 0;
  byOrdering.unordered.length = 0;
  for (const entry of Object.values(groups)) Object.assign(entry, { ...group(), subscriptions: entry.subscriptions });
  loopDelay.enable();
  toReceiver({ kind: 'measure', on: true });
  cpu.start();
  const started = Date.now();
  if (throttledIds.size > 0) {
    toReceiver({
      kind: 'throttle',
      subscriptionIds: [...throttledIds],
      until: started + throttleForMs,
      forMs: throttleForMs,
    });
  }
  await publishEvents(events, started);
  console.log(`published ${events} events in ${((Date.now() - started) / 1000).toFixed(1)} s`);
  await publisher.close();
  const deadline = Date.now() + 600_000;
  while (received < expected && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 200));
  // The pipeline's figures, taken before the loopback POST loop adds its own receipts to the receiver's counters.
  toReceiver({ kind: 'measure', on: false });
  const report = await receiver.report();
  groups.throttled.maxOpen = report.maxOpenThrottled;
  const sample = report.sample && { headers: report.sample.headers, body: Buffer.from(report.sample.body) };
  const delivered = received;
  const cpuLine = formatCpu(cpu.stop(), delivered);
  const failedAnswers = failed;
  const sorted = latencies.slice().sort((a, b) => a - b);
  if (values.receipts) writeFileSync(values.receipts, JSON.stringify(timeline));
  const seconds = (lastAt - firstAt) / 1000;
  const perSecond = delivered / seconds;
  clearInterval(sampler);
  const throttleLines = throttledIds.size > 0 ? await throttleReport() : [];

  loopDelay.disable();
  const stages: string[] = [];
  const runtimes: string[] = [];
  for (const [service, port] of Object.entries(metricsPorts)) {
    const { stages: entries, runtime } = await scrapeStages(
      `http://127.0.0.1:${port}/metrics`,
      warmScrapes.get(service),
    );
    stages.push(...entries.map((entry) => formatStage(service, entry)));
    if (runtime) runtimes.push(formatRuntime(service, runtime));
  }
  // With ordered subscriptions, how many of their deliveries had to wait for an earlier one (the cost of ordering).
  const waitLine =
    orderedIds.size > 0
      ? await (async () => {
          const text = await (await fetch(`http://127.0.0.1:${metricsPorts.dispatcher}/metrics`)).text();
          const waiting = counterSum(text, `webhook_deliveries_total\\{[^}]*outcome="waiting"[^}]*\\}`);
          return `ordering: ${waiting} deliveries waited for an earlier one of their entity (dispatcher outcomes, warm-up included)`;
        })()
      : undefined;
  // Records the dispatcher moved to the overflow topic (a lane's backlog found slow), warm-up included: each costs a
  // publication, a fetch and the overflow's delay, so a healthy run parks none.
  const parkedText = await (await fetch(`http://127.0.0.1:${metricsPorts.dispatcher}/metrics`)).text();
  const parkedCount = counterSum(parkedText, 'webhook_records_parked_total(?:\\{[^}]*\\})?');
  const parkedLine = `overflow: ${parkedCount} records parked by the dispatcher (warm-up included)`;
  // The receiver's delays show in the latency (it stamps the receipts); the publisher's in the events' times.
  runtimes.push(
    formatRuntime('bench: receiver', {
      loopDelayP99Ms: report.loopDelayP99Ms,
      loopDelayMaxMs: report.loopDelayMaxMs,
      gc: [],
    }),
    formatRuntime('bench: publisher', {
      loopDelayP99Ms: Math.max(0, loopDelay.percentile(99) - loopDelay.min) / 1e6,
      loopDelayMaxMs: Math.max(0, loopDelay.max - loopDelay.min) / 1e6,
      gc: [],
    }),
  );
  // The services are stopped before the POST loop so it has the machine to itself (the finally's stop is then a no-op).
  await Promise.all([router.stop(), dispatcher.stop()]);
  const loopbackSeconds = 3;
  const loopback =
    sample && !values['no-ceiling']
      ? await measureLoopbackCeiling({
          url,
          ...sample,
          concurrency: [1, 50, config.dispatcher.maxInFlight],
          seconds: loopbackSeconds,
          connections: config.dispatcher.connectionsPerOrigin,
        })
      : [];
  if (sample && loopback.length > 0) {
    console.log(
      `\nloopback ceiling: undici POST loop to the same receiver, ${sample.body.length}-byte body, ` +
        `${config.dispatcher.connectionsPerOrigin} connections as the dispatcher's agent, ${loopbackSeconds} s per level`,
    );
    for (const line of formatCeiling(loopback)) console.log(line);
  }
  console.log(`
mode: ${rate > 0 ? `paced at ${rate} deliveries/s` : 'as fast as possible'}${warmupEvents > 0 ? `, after a warm-up of ${(warmupEvents * subsPerTenant).toLocaleString('en-US')} deliveries (not counted)` : ''}${failRatio > 0 ? `, ${failRatio * 100}% of answers failing` : ''}${orderedIds.size > 0 ? `, ${orderedIds.size} of ${subscriptionIds.length} subscriptions ordered by entity` : ''}${entities > 0 ? `, events over ${entities} entities` : ''}${backlog > 0 ? `, ${backlog} pending retries parked` : ''}
node flags: router ${nodeFlagsFor('router/main.ts', process.env).join(' ') || 'none'}, dispatcher ${nodeFlagsFor('dispatcher/main.ts', process.env).join(' ') || 'none'}
events ${events} × ${subsPerTenant} subscriptions (${tenants} tenants) = ${expected} deliveries; received ${delivered}${failedAnswers ? `, ${failedAnswers} failed answers` : ''}
throughput: ${perSecond.toFixed(0)} deliveries/s over ${seconds.toFixed(1)} s${fractionOfCeiling(perSecond, ceilingOf(loopback))}
event-to-receipt latency: p50 ${percentile(sorted, 0.5)} ms, p99 ${percentile(sorted, 0.99)} ms, max ${sorted.at(-1)} ms
dispatcher RSS: max ${Math.max(...memory).toFixed(0)} MB, last ${memory.at(-1)?.toFixed(0)} MB`);
  const orderingLines =
    orderedIds.size > 0
      ? (['ordered', 'unordered'] as const).map((kind) => {
          const list = byOrdering[kind].slice().sort((a, b) => a - b);
          const count = kind === 'ordered' ? orderedIds.size : subscriptionIds.length - orderedIds.size;
          return (
            `${kind} subscriptions (${count}): event-to-receipt latency p50 ${percentile(list, 0.5)} ms, ` +
            `p99 ${percentile(list, 0.99)} ms, max ${list.at(-1)} ms`
          );
        })
      : [];
  if (waitLine) orderingLines.push(waitLine);
  if (collector) {
    orderingLines.push(
      `tracing: on (OTLP to a local collector): ${collector.requests} exports, ` +
        `${(collector.bytes / 1024 / 1024).toFixed(1)} MB of spans`,
    );
  }
  for (const line of [...orderingLines, ...throttleLines, parkedLine, cpuLine, ...stages, ...runtimes])
    console.log(line);
} finally {
  clearInterval(sampler);
  await Promise.all([router.stop(), dispatcher.stop()]);
  await receiver.stop();
  collector?.close();
  await deprovision(config, logger);
  await servers.stop();
}

/** An OTLP endpoint that answers every export with success and counts requests and bytes. */
async function countingCollector() {
  const counts = { requests: 0, bytes: 0 };
  const server = createServer((request, response) => {
    counts.requests += 1;
    request.on('data', (chunk: Buffer) => (counts.bytes += chunk.length));
    request.on('end', () => response.writeHead(200, { 'content-type': 'application/x-protobuf' }).end());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    endpoint: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    get requests() {
      return counts.requests;
    },
    get bytes() {
      return counts.bytes;
    },
    close: () => server.close(),
  };
}

/** The sum of every series of a /metrics text whose name and labels match `pattern` (a regular expression). */
function counterSum(text: string, pattern: string): number {
  return [...text.matchAll(new RegExp(`^${pattern} (\\S+)$`, 'gm'))].reduce((sum, match) => sum + Number(match[1]), 0);
}
