// Isolation (issue 27): healthy subscriptions stay fast while other endpoints of the same tenants are slow, failing or
// hanging. The mix, shortened to 20 s and half the tenants, with the production timings (30 s attempt timeout,
// first retry after a minute): the router and the dispatcher as processes, real Kafka and Cassandra, real receivers.
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../core/config.ts';
import { createLogger } from '../../core/log.ts';
import { deprovision, provision } from '../../infra/provision.ts';
import { startServices, testEnv } from '../support/harness.ts';
import { healthyOnly, setUpMix, type Mix, type MixShape } from '../support/mix.ts';

const SHAPE: MixShape = {
  tenants: 5,
  fast: 4,
  slow: 1,
  slowMs: 2_000,
  failing: 1,
  hangingEvery: 2,
  eventsPerSecond: 50,
  seconds: 20,
  sameOrigin: true,
};

describe('isolation: healthy subscriptions beside slow, failing and hanging endpoints', () => {
  let env: Record<string, string>;
  let stack: Awaited<ReturnType<typeof startServices>>;
  let mix: Mix;

  beforeAll(async () => {
    env = {
      ...testEnv(),
      KAFKA_TOPIC_PREFIX: `${testEnv().KAFKA_TOPIC_PREFIX}isolation${randomUUID().slice(0, 8)}.`,
      WEBHOOK_ALLOW_HTTP: 'true',
      WEBHOOK_ALLOWED_CIDRS: '127.0.0.1/32',
      // The test timings: what production does in minutes happens here in seconds.
      WEBHOOK_ATTEMPT_TIMEOUT: '5s',
      WEBHOOK_RETRY_DELAYS: '1s,2s,4s,8s,16s',
      // Every endpoint shares one origin (as a platform's subscribers do), and at a quarter of the volume a
      // quarter of the connections: the slow and hanging subscriptions alone could hold them all.
      DISPATCHER_CONNECTIONS_PER_ORIGIN: '32',
      ...(process.env.ISOLATION_BEFORE ? { DISPATCHER_CIRCUIT_FAILURES: '0' } : {}),
    };
    await provision(loadConfig(env), createLogger('test', 'warn'));
    mix = await setUpMix(env, process.env.ISOLATION_CONTROL ? healthyOnly(SHAPE) : SHAPE, 'isolation');
    stack = await startServices(env, ['router', 'dispatcher']);
  });

  afterAll(async () => {
    await stack?.stop();
    await mix?.close();
    if (env) await deprovision(loadConfig(env), createLogger('test', 'warn'), { keyspace: false });
  });

  it('delivers every healthy delivery once, none held behind the misbehaving endpoints', async () => {
    expect(await mix.warmUp(60_000)).toBe(true);
    await mix.publish();
    const allArrived = await mix.fastDelivered(30_000);
    const figures = mix.figures();
    console.log('isolation mix', JSON.stringify(figures));
    expect(allArrived, JSON.stringify(figures.fast)).toBe(true);
    expect(figures.fast.duplicates).toBe(0);
    // Behind the misbehaving endpoints (before issue 27), healthy deliveries waited for their attempts: fast p50 25 s
    // here, 1,290 of 4,000 still missing 30 s after the last event. The bound is the attempt timeout (5 s): a healthy
    // delivery that had queued behind one hanging attempt would take longer. Not a latency target (the benches measure
    // those: p99 220-1,500 ms in CI runs, 3.5 s once with the whole pipeline slow, p50 1.4 s, on a busy machine).
    expect(figures.fast.p99, JSON.stringify(figures.fast)).toBeLessThan(5_000);
    expect(figures.fast.max, JSON.stringify(figures.fast)).toBeLessThan(10_000);
    // The slow endpoints get deliveries all along (at 2 s an answer), not only after the fast ones.
    expect(figures.slow.received).toBeGreaterThan(0);
  });
});
