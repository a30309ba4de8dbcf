/**
 * `npm run bench -- --mix [--tenants 10] [--fast 4] [--slow 1] [--slow-ms 2000] [--failing 1] [--hanging-every 3]
 *   [--rate 100] [--seconds 60] [--timeout 30s] [--retry-delays 1m,2m,…] [--own-origins] [--no-control]
 *   [--warm-seconds 10] [--timeline] [--tsx]`
 * The isolation mix of issue 27: per tenant, fast subscriptions beside a slow one (answers after --slow-ms), a failing
 * one (500) and, on every --hanging-every-th tenant, one whose endpoint never answers; --rate events per second (round
 * robin over the tenants) for --seconds, Hmac-signed, the production timings unless told otherwise. Every endpoint is
 * on one origin (one receiver, the kind in the path), as a platform's subscribers share it; --own-origins gives each
 * kind its own. Runs a router and a
 * dispatcher as processes on a keyspace and topics of their own; warms the fresh processes with --warm-seconds of the
 * shape's fast subscriptions alone, on tenants of their own (0 skips it: the processes' own JIT warm-up then falls in
 * the first second of the run), and the run's subscriptions with one event per tenant (neither counted), then prints
 * per endpoint kind: deliveries expected and received, duplicates, p50/p99/max event → first receipt; the dispatcher's
 * RSS; its circuit transitions and deferrals. Then the same run with only the fast subscriptions (the
 * control), unless --no-control. --timeline adds, per second of events: the fast p99, the dispatcher's event-loop lag
 * and each process's CPU.
 */
import { randomUUID } from 'node:crypto';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { loadConfig } from '../../core/config.ts';
import { createLogger } from '../../core/log.ts';
import { buildServices } from '../../infra/build.ts';
import { repoRoot, spawnService, type ServiceRuntime } from '../../infra/processes.ts';
import { deprovision, provision } from '../../infra/provision.ts';
import { ensureServers } from '../../infra/servers.ts';
import { freePort } from '../../infra/processes.ts';
import { benchEnv, rssMb } from './bench-env.ts';
import { CpuMeter, localServerPids, type CpuShare } from './process-cpu.ts';
import { healthyOnly, ISSUE_MIX, KINDS, setUpMix, type MixShape } from '../support/mix.ts';

const { values } = parseArgs({
  options: {
    mix: { type: 'boolean', default: true },
    tenants: { type: 'string', default: String(ISSUE_MIX.tenants) },
    fast: { type: 'string', default: String(ISSUE_MIX.fast) },
    slow: { type: 'string', default: String(ISSUE_MIX.slow) },
    'slow-ms': { type: 'string', default: String(ISSUE_MIX.slowMs) },
    failing: { type: 'string', default: String(ISSUE_MIX.failing) },
    'hanging-every': { type: 'string', default: String(ISSUE_MIX.hangingEvery) },
    rate: { type: 'string', default: String(ISSUE_MIX.eventsPerSecond) },
    seconds: { type: 'string', default: String(ISSUE_MIX.seconds) },
    timeout: { type: 'string', default: '30s' },
    'retry-delays': { type: 'string', default: '1m,2m,4m,8m,16m,32m,64m,128m,4h' },
    'no-control': { type: 'boolean', default: false },
    'warm-seconds': { type: 'string', default: '10' },
    'own-origins': { type: 'boolean', default: false },
    tsx: { type: 'boolean', default: false },
    timeline: { type: 'boolean', default: false },
  },
});
const shape: MixShape = {
  tenants: Number(values.tenants),
  fast: Number(values.fast),
  slow: Number(values.slow),
  slowMs: Number(values['slow-ms']),
  failing: Number(values.failing),
  hangingEvery: Number(values['hanging-every']),
  eventsPerSecond: Number(values.rate),
  seconds: Number(values.seconds),
  sameOrigin: !values['own-origins'],
};

/** The sum of a counter's samples on a /metrics page, by one label's value. */
const counters = (page: string, name: string, label?: string) => {
  const out: Record<string, number> = {};
  for (const line of page.split('\n')) {
    if (!line.startsWith(name)) continue;
    const key = label ? (line.match(new RegExp(`${label}="([^"]*)"`))?.[1] ?? '') : 'total';
    out[key] = (out[key] ?? 0) + Number(line.split(' ').at(-1));
  }
  return out;
};

/** A gauge's value on a /metrics page (its first sample); NaN if absent. */
const gaugeOf = (page: string, name: string) => Number(page.match(new RegExp(`^${name}\\S* (\\S+)`, 'm'))?.[1]);

/** Per label value of a histogram on a /metrics page: the upper bound of the bucket holding its 99th percentile. */
const quantiles = (page: string, name: string, label: string) => {
  const buckets = new Map<string, [number, number][]>();
  for (const line of page.split('\n')) {
    if (!line.startsWith(`${name}_bucket`)) continue;
    const key = line.match(new RegExp(`${label}="([^"]*)"`))?.[1] ?? '';
    const le = line.match(/le="([^"]*)"/)?.[1] ?? '+Inf';
    buckets.set(key, [...(buckets.get(key) ?? []), [Number(le), Number(line.split(' ').at(-1))]]);
  }
  const out: Record<string, string> = {};
  for (const [key, counts] of buckets) {
    const total = counts.at(-1)?.[1] ?? 0;
    const bound = counts.find(([, count]) => count >= total * 0.99)?.[0];
    out[key] = bound === undefined || !Number.isFinite(bound) ? '>max' : `≤${bound * 1000} ms`;
  }
  return out;
};

const runtime: ServiceRuntime = values.tsx ? 'tsx' : 'compiled';
if (runtime === 'compiled') buildServices((line) => console.log(line));
const servers = await ensureServers({ root: path.join(repoRoot, '.local'), progress: (line) => console.log(line) });

async function runMix(label: string, runShape: MixShape): Promise<void> {
  const run = randomUUID().slice(0, 8);
  const env = benchEnv(servers, run, {
    WEBHOOK_ATTEMPT_TIMEOUT: values.timeout,
    WEBHOOK_RETRY_DELAYS: values['retry-delays'],
  });
  const config = loadConfig({ ...process.env, ...env });
  const logger = createLogger('bench', 'warn');
  await provision(config, logger);
  const mix = await setUpMix(env, runShape, 'bench-mix');
  const logs = path.join(repoRoot, '.local', 'logs', 'bench');
  const metricsPort = await freePort();
  const router = spawnService(
    'router',
    'router/main.ts',
    { ...process.env, ...env },
    path.join(logs, `router-${run}.log`),
    runtime,
  );
  const dispatcher = spawnService(
    'dispatcher',
    'dispatcher/main.ts',
    { ...process.env, ...env, METRICS_PORT: String(metricsPort) },
    path.join(logs, `dispatcher-${run}.log`),
    runtime,
  );
  const memory: number[] = [];
  const sampler = setInterval(() => memory.push(rssMb(dispatcher.child.pid ?? 0)), 1_000);
  const timeline = values.timeline
    ? await sampleTimeline(metricsPort, dispatcher.child.pid, router.child.pid)
    : undefined;
  try {
    await warmProcesses(label, env, runShape);
    if (!(await mix.warmUp(120_000))) throw new Error('the warm-up deliveries did not arrive within 2 minutes');
    const started = Date.now();
    await mix.publish();
    const published = Date.now();
    const all = await mix.fastDelivered(60_000);
    timeline?.stop();
    const figures = mix.figures();
    const page = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
    const transitions = counters(page, 'webhook_circuit_transitions_total', 'to');
    const deferrals = counters(page, 'webhook_circuit_deferrals_total').total ?? 0;
    const parked = counters(page, 'webhook_records_parked_total').total ?? 0;
    const total = runShape.eventsPerSecond * runShape.seconds;
    console.log(
      `\n${label}: ${runShape.tenants} tenants × (${runShape.fast} fast, ${runShape.slow} slow at ${runShape.slowMs} ms, ` +
        `${runShape.failing} failing${runShape.hangingEvery ? `, 1 hanging every ${runShape.hangingEvery}` : ''}); ` +
        `${runShape.sameOrigin ? 'one origin' : 'an origin per kind'}; ${total} events in ${((published - started) / 1000).toFixed(1)} s; timeout ${values.timeout}, retries ${values['retry-delays']}`,
    );
    for (const kind of KINDS) {
      const f = figures[kind];
      if (f.subscriptions === 0) continue;
      console.log(
        `  ${kind.padEnd(8)} ${String(f.subscriptions).padStart(3)} subscriptions: received ${f.received} of ${f.expected}` +
          `${f.duplicates ? `, ${f.duplicates} requests again (retries; duplicates if it answered 2xx)` : ''}; event → receipt p50 ${f.p50} ms, p99 ${f.p99} ms, max ${f.max} ms`,
      );
    }
    console.log(`  fast deliveries all arrived within 60 s of the last event: ${all ? 'yes' : 'NO'}`);
    console.log(`  fast p99 per 10 s of events: ${mix.p99ByWindow('fast', 10_000).join(', ')} ms`);
    if (timeline) printTimeline(timeline.seconds, mix.p99ByWindow('fast', 1_000), started);
    const stages = quantiles(page, 'webhook_stage_seconds', 'stage');
    const gauge = (name: string) => gaugeOf(page, name);
    // With --timeline the scrapes each second reset prom-client's lag max: the run's is the largest of theirs since
    // its first event (not the warm-up's).
    const lag = timeline
      ? Math.max(
          ...timeline.seconds
            .filter((second) => second.at > started)
            .map((second) => second.lagMs / 1000)
            .filter(Number.isFinite),
        )
      : gauge('nodejs_eventloop_lag_max_seconds');
    const mb = (name: string) => (gauge(name) / 2 ** 20).toFixed(0);
    console.log(
      `  dispatcher stages p99 (all kinds): ${Object.entries(stages)
        .map(([stage, q]) => `${stage} ${q}`)
        .join(
          ', ',
        )}; event-loop lag max ${(lag * 1000).toFixed(0)} ms; at the end heap ${mb('nodejs_heap_size_used_bytes')} ` +
        `of ${mb('nodejs_heap_size_total_bytes')} MB, external ${mb('nodejs_external_memory_bytes')} MB`,
    );
    console.log(
      `  dispatcher RSS: max ${Math.max(...memory.filter(Number.isFinite)).toFixed(0)} MB, last ${memory.at(-1)?.toFixed(0)} MB; ` +
        `circuit transitions: ${
          Object.entries(transitions)
            .map(([to, n]) => `${to} ${n}`)
            .join(', ') || 'none'
        }; deferrals ${deferrals}; records parked ${parked}`,
    );
  } finally {
    timeline?.stop();
    clearInterval(sampler);
    await Promise.all([router.stop(), dispatcher.stop()]);
    await mix.close();
    await deprovision(config, logger);
  }
}

/**
 * A router and a dispatcher just started run their code unoptimised until V8 has compiled it: alone, at 100 events a
 * second, their first second of load costs about twice the CPU of the next and puts a p99 of 200-500 ms on it. Both
 * runs (the mix and its control) are measured after the same warm-up, so that they compare isolation, not JIT; the
 * warm-up's own first seconds are printed (a fresh dispatcher's cost, as after a deploy).
 */
async function warmProcesses(label: string, env: Record<string, string>, runShape: MixShape): Promise<void> {
  const seconds = Number(values['warm-seconds']);
  if (!(seconds > 0)) return;
  const warm = await setUpMix(env, { ...healthyOnly(runShape), seconds }, 'bench-warm');
  try {
    if (!(await warm.warmUp(120_000))) throw new Error('the warm-up deliveries did not arrive within 2 minutes');
    await warm.publish();
    if (!(await warm.fastDelivered(60_000))) throw new Error('the warm-up deliveries did not all arrive within 60 s');
    console.log(
      `${label}: the fresh processes, warmed with ${seconds} s of fast subscriptions alone: p99 per second ${warm.p99ByWindow('fast', 1_000).join(', ')} ms`,
    );
  } finally {
    await warm.close();
  }
}

interface Second {
  at: number;
  lagMs: number;
  /** The dispatcher's resident set and V8 heap in use, MB. */
  rssMb: number;
  heapMb: number;
  cpu: CpuShare[];
}

/** Every second until stopped: the dispatcher's event-loop lag max over the second and each process's CPU. */
async function sampleTimeline(metricsPort: number, dispatcherPid?: number, routerPid?: number) {
  const pids = { ...(await localServerPids()), dispatcher: dispatcherPid, router: routerPid, bench: process.pid };
  const seconds: Second[] = [];
  let meter = new CpuMeter(pids);
  meter.start();
  const timer = setInterval(() => {
    const cpu = meter.stop();
    meter = new CpuMeter(pids);
    meter.start();
    const at = Date.now();
    // prom-client's lag max covers the time since its last collection: one scrape a second gives each second's.
    fetch(`http://127.0.0.1:${metricsPort}/metrics`)
      .then((response) => response.text())
      .then((page) => {
        const gauge = (name: string) => gaugeOf(page, name);
        seconds.push({
          at,
          lagMs: gauge('nodejs_eventloop_lag_max_seconds') * 1000,
          rssMb: gauge('process_resident_memory_bytes') / 2 ** 20,
          heapMb: gauge('nodejs_heap_size_used_bytes') / 2 ** 20,
          cpu,
        });
      })
      .catch(() => seconds.push({ at, lagMs: NaN, rssMb: NaN, heapMb: NaN, cpu }));
  }, 1_000);
  return { seconds, stop: () => clearInterval(timer) };
}

function printTimeline(seconds: Second[], fastP99: number[], started: number): void {
  console.log('  per second of events: fast p99 | dispatcher event-loop lag max, RSS, heap used | CPU % of one core');
  for (const [index, p99] of fastP99.entries()) {
    const second = seconds.find((entry) => entry.at >= started + (index + 1) * 1_000);
    const cpu = second?.cpu.map((share) => `${share.name} ${share.percentOfCore.toFixed(0)}`).join(' ') ?? '';
    console.log(
      `  ${String(index).padStart(3)} s  ${String(p99).padStart(5)} ms | ${second?.lagMs.toFixed(0) ?? '?'} ms, ${second?.rssMb.toFixed(0) ?? '?'} MB, ${second?.heapMb.toFixed(0) ?? '?'} MB | ${cpu}`,
    );
  }
}

try {
  await runMix('mix', shape);
  if (!values['no-control']) await runMix('control (fast subscriptions only)', healthyOnly(shape));
} finally {
  await servers.stop();
}
