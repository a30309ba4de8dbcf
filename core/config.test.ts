import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig, requireSecrets, retryTopicName } from './config.ts';

const MINUTE = 60_000;
const HOUR = 60 * MINUTE;
const DAY = 24 * HOUR;

function thrownBy(fn: () => unknown): unknown {
  try {
    fn();
  } catch (error) {
    return error;
  }
  throw new Error('expected a throw');
}

describe('loadConfig defaults (DESIGN §4, §5, §9)', () => {
  const config = loadConfig({});

  it('webhook settings', () => {
    expect(config.webhook).toEqual({
      retryDelaysMs: [1, 2, 4, 8, 16, 32, 64, 128].map((m) => m * MINUTE).concat(4 * HOUR),
      deliveryLifetimeMs: DAY,
      attemptTimeoutMs: 30_000,
      failureDayMs: DAY,
      autoDisableAfterDays: 10,
      payloadLimitBytes: 204_800,
      allowHttp: false,
      allowedCidrs: [],
      subscriptionCacheTtlMs: 1_000,
      historyRetentionMs: 30 * DAY,
    });
  });

  it('identity settings derive from AUTH_URL', () => {
    expect(config.auth).toEqual({
      url: 'http://127.0.0.1:8088',
      issuer: 'http://127.0.0.1:8088/',
      audience: 'core-api',
      jwksUrl: 'http://127.0.0.1:8088/.well-known/jwks.json',
      tenantClaim: 'tenant_id',
    });
  });

  it('local stack addresses', () => {
    expect(config.gateway).toMatchObject({ baseUrl: 'http://127.0.0.1:8080', port: 8080 });
    expect(config.kafka.brokers).toEqual(['127.0.0.1:9092']);
    expect(config.cassandra).toMatchObject({ contactPoints: ['127.0.0.1:9042'], localDc: 'datacenter1' });
    expect(config.schemaRegistryUrl).toBe('http://127.0.0.1:8081/apis/ccompat/v7');
  });

  it('has no secrets key unless SECRETS_KEY is set, and requireSecrets names the variable', () => {
    expect(config.secrets).toBeUndefined();
    const error = thrownBy(() => requireSecrets(config));
    expect(error).toBeInstanceOf(ConfigError);
    expect((error as ConfigError).variable).toBe('SECRETS_KEY');
    expect((error as Error).message).toContain('SECRETS_KEY');
  });

  it('topic durability and dispatcher connection settings', () => {
    expect(config.kafka).toMatchObject({ replicationFactor: -1, minInsyncReplicas: 1 });
    expect(config.dispatcher.connectionsPerOrigin).toBe(512);
    expect(config.dispatcher.adaptiveConcurrency).toBe(true);
    expect(config.dispatcher.historyLingerMs).toBe(5);
    expect(config.dispatcher.heapGrowthPercent).toBe(100);
    expect(config.router.maxInFlight).toBe(200);
    expect(config.gateway.dependencyTimeoutMs).toBe(1_500);
    expect(loadConfig({ GATEWAY_DEPENDENCY_TIMEOUT: '2s' }).gateway.dependencyTimeoutMs).toBe(2_000);
    expect(config.gateway.requestBudgetMs).toBe(10_000);
    expect(loadConfig({ GATEWAY_REQUEST_BUDGET: '3s' }).gateway.requestBudgetMs).toBe(3_000);
    expect([config.gateway.degradedBudgetMs, config.gateway.degradedWindowMs]).toEqual([1_000, 10_000]);
    const degraded = loadConfig({ GATEWAY_DEGRADED_BUDGET: '2s', GATEWAY_DEGRADED_WINDOW: '1m' }).gateway;
    expect([degraded.degradedBudgetMs, degraded.degradedWindowMs]).toEqual([2_000, 60_000]);
    expect(loadConfig({ ROUTER_MAX_IN_FLIGHT: '250' }).router.maxInFlight).toBe(250);
    expect(config.purchase).toEqual({ outboxRelay: true, sweepGraceMs: 1_000 });
    expect(loadConfig({ PURCHASE_OUTBOX_SWEEP_GRACE_MS: '0' }).purchase.sweepGraceMs).toBe(0);
    expect(() => loadConfig({ PURCHASE_OUTBOX_SWEEP_GRACE_MS: '1s' })).toThrow(/PURCHASE_OUTBOX_SWEEP_GRACE_MS/);
  });

  it('bulk replay pacing and leases, with their bounds', () => {
    expect(config.replay).toEqual({ ratePerJob: 200, ratePerProcess: 500, maxJobs: 4, leaseMs: 30_000, pollMs: 2_000 });
    const tuned = loadConfig({
      REPLAY_RATE: '5',
      REPLAY_PROCESS_RATE: '50',
      REPLAY_MAX_JOBS: '2',
      REPLAY_LEASE: '3s',
      REPLAY_POLL_INTERVAL: '200ms',
    });
    expect(tuned.replay).toEqual({ ratePerJob: 5, ratePerProcess: 50, maxJobs: 2, leaseMs: 3_000, pollMs: 200 });
    for (const [variable, value] of [
      ['REPLAY_RATE', '0'],
      ['REPLAY_PROCESS_RATE', 'fast'],
      ['REPLAY_MAX_JOBS', '0'],
      ['REPLAY_LEASE', '500ms'],
      ['REPLAY_POLL_INTERVAL', '1ms'],
    ] as const) {
      const error = thrownBy(() => loadConfig({ [variable]: value }));
      expect(error).toBeInstanceOf(ConfigError);
      expect((error as ConfigError).variable).toBe(variable);
    }
  });

  it('treats empty and blank variables as unset', () => {
    const blank = loadConfig({ WEBHOOK_ATTEMPT_TIMEOUT: '', WEBHOOK_RETRY_DELAYS: '   ', KAFKA_PARTITIONS: ' ' });
    expect(blank.webhook.attemptTimeoutMs).toBe(30_000);
    expect(blank.webhook.retryDelaysMs).toEqual(config.webhook.retryDelaysMs);
    expect(blank.kafka.partitions).toBe(config.kafka.partitions);
  });
});

describe('loadConfig overrides', () => {
  it.each<[string, Record<string, string>, (c: ReturnType<typeof loadConfig>) => unknown, unknown]>([
    ['short test schedule', { WEBHOOK_RETRY_DELAYS: '1s,2s' }, (c) => c.webhook.retryDelaysMs, [1_000, 2_000]],
    ['spaces in a list', { WEBHOOK_RETRY_DELAYS: ' 500ms , 4h ' }, (c) => c.webhook.retryDelaysMs, [500, 4 * HOUR]],
    ['lifetime', { WEBHOOK_DELIVERY_LIFETIME: '20s' }, (c) => c.webhook.deliveryLifetimeMs, 20_000],
    ['timeout', { WEBHOOK_ATTEMPT_TIMEOUT: '500ms' }, (c) => c.webhook.attemptTimeoutMs, 500],
    ['failure day', { WEBHOOK_FAILURE_DAY: '1h' }, (c) => c.webhook.failureDayMs, HOUR],
    ['auto-disable', { WEBHOOK_AUTO_DISABLE_AFTER_DAYS: '3' }, (c) => c.webhook.autoDisableAfterDays, 3],
    ['payload limit', { WEBHOOK_PAYLOAD_LIMIT_BYTES: '0' }, (c) => c.webhook.payloadLimitBytes, 0],
    ['allow http', { WEBHOOK_ALLOW_HTTP: 'true' }, (c) => c.webhook.allowHttp, true],
    ['deny http', { WEBHOOK_ALLOW_HTTP: 'false' }, (c) => c.webhook.allowHttp, false],
    [
      'allowed CIDRs',
      { WEBHOOK_ALLOWED_CIDRS: '127.0.0.1/32, 10.0.0.0/8,::1/128' },
      (c) => c.webhook.allowedCidrs,
      ['127.0.0.1/32', '10.0.0.0/8', '::1/128'],
    ],
    ['cache ttl', { WEBHOOK_SUBSCRIPTION_CACHE_TTL: '250ms' }, (c) => c.webhook.subscriptionCacheTtlMs, 250],
    ['history', { WEBHOOK_HISTORY_RETENTION: '7d' }, (c) => c.webhook.historyRetentionMs, 7 * DAY],
    [
      'issuer and JWKS from another AUTH_URL (trailing slash)',
      { AUTH_URL: 'https://idp.example.com/' },
      (c) => [c.auth.url, c.auth.issuer, c.auth.jwksUrl],
      ['https://idp.example.com', 'https://idp.example.com/', 'https://idp.example.com/.well-known/jwks.json'],
    ],
    [
      'explicit issuer, audience, claim',
      { AUTH_ISSUER: 'https://issuer.example/', AUTH_AUDIENCE: 'aud', AUTH_TENANT_CLAIM: 'org' },
      (c) => [c.auth.issuer, c.auth.audience, c.auth.tenantClaim, c.auth.jwksUrl],
      ['https://issuer.example/', 'aud', 'org', 'https://issuer.example/.well-known/jwks.json'],
    ],
    [
      'topic prefix feeds source topics',
      { KAFKA_TOPIC_PREFIX: 't1-' },
      (c) => c.kafka.sourceTopics,
      ['t1-purchase.events'],
    ],
    [
      'gateway port from its URL',
      { GATEWAY_BASE_URL: 'http://127.0.0.1:9000/' },
      (c) => [c.gateway.baseUrl, c.gateway.port],
      ['http://127.0.0.1:9000', 9000],
    ],
    ['keyspace', { CASSANDRA_KEYSPACE: 'wh_test_1' }, (c) => c.cassandra.keyspace, 'wh_test_1'],
    ['log level', { LOG_LEVEL: 'debug' }, (c) => c.logLevel, 'debug'],
    ['topic replication', { KAFKA_REPLICATION_FACTOR: '3' }, (c) => c.kafka.replicationFactor, 3],
    [
      'replication and min in-sync replicas',
      { KAFKA_REPLICATION_FACTOR: '3', KAFKA_MIN_INSYNC_REPLICAS: '2' },
      (c) => [c.kafka.replicationFactor, c.kafka.minInsyncReplicas],
      [3, 2],
    ],
    // The broker default replication is unknown here: any min.insync.replicas is the operator's call.
    [
      'min in-sync replicas under the broker default replication',
      { KAFKA_MIN_INSYNC_REPLICAS: '2' },
      (c) => [c.kafka.replicationFactor, c.kafka.minInsyncReplicas],
      [-1, 2],
    ],
    ['connections per origin', { DISPATCHER_CONNECTIONS_PER_ORIGIN: '1' }, (c) => c.dispatcher.connectionsPerOrigin, 1],
    [
      'fixed per-subscription concurrency',
      { DISPATCHER_ADAPTIVE_CONCURRENCY: 'false' },
      (c) => c.dispatcher.adaptiveConcurrency,
      false,
    ],
    ['attempt history sent at once', { DISPATCHER_HISTORY_LINGER_MS: '0' }, (c) => c.dispatcher.historyLingerMs, 0],
    ["V8's own heap growth", { DISPATCHER_HEAP_GROWTH_PERCENT: '0' }, (c) => c.dispatcher.heapGrowthPercent, 0],
    ["the router's heap growth by default", {}, (c) => c.router.heapGrowthPercent, 300],
    ["the router on V8's own heap growth", { ROUTER_HEAP_GROWTH_PERCENT: '0' }, (c) => c.router.heapGrowthPercent, 0],
    [
      'circuit breaker by default',
      {},
      (c) => c.dispatcher.circuit,
      { failures: 5, openMs: 60_000, maxOpenMs: 3_600_000 },
    ],
    [
      'circuit breaker open periods follow the retry delays',
      { WEBHOOK_RETRY_DELAYS: '1s,2s' },
      (c) => c.dispatcher.circuit,
      { failures: 5, openMs: 1_000, maxOpenMs: 2_000 },
    ],
    [
      'lane backlog and overflow delay by default',
      {},
      (c) => [c.dispatcher.laneBacklog, c.dispatcher.overflowDelayMs, c.dispatcher.laneWaitMs],
      [100, 5_000, 5_000],
    ],
    [
      "a fetch's bytes per partition: kafkajs' 1 MiB by default, or configured",
      {},
      (c) => c.dispatcher.fetchBytesPerPartition,
      1_048_576,
    ],
    [
      'fetch bytes configured',
      { DISPATCHER_FETCH_BYTES: '131072' },
      (c) => c.dispatcher.fetchBytesPerPartition,
      131_072,
    ],
    ['quiet check by default', {}, (c) => c.dispatcher.quietCheckMs, 500],
    ['quiet check off', { DISPATCHER_QUIET_CHECK_MS: '0' }, (c) => c.dispatcher.quietCheckMs, 0],
    ['due slack by default', {}, (c) => c.dispatcher.dueSlackMs, 250],
    ['due slack off', { DISPATCHER_DUE_SLACK_MS: '0' }, (c) => c.dispatcher.dueSlackMs, 0],
    [
      'lane backlog and overflow delay configured',
      { DISPATCHER_LANE_BACKLOG: '20', DISPATCHER_OVERFLOW_DELAY: '2s', DISPATCHER_LANE_WAIT_MS: '500' },
      (c) => [c.dispatcher.laneBacklog, c.dispatcher.overflowDelayMs, c.dispatcher.laneWaitMs],
      [20, 2_000, 500],
    ],
    [
      'lane wait off: parked at the backlog bound whatever the pace',
      { DISPATCHER_LANE_WAIT_MS: '0' },
      (c) => c.dispatcher.laneWaitMs,
      0,
    ],
    [
      "a tenant's share of the dispatcher's slots: half by default, of the configured total, or configured",
      {},
      (c) => [c.dispatcher.maxInFlight, c.dispatcher.maxInFlightPerTenant],
      [500, 250],
    ],
    [
      "a tenant's share of 7 slots (rounded up)",
      { DISPATCHER_MAX_IN_FLIGHT: '7' },
      (c) => [c.dispatcher.maxInFlight, c.dispatcher.maxInFlightPerTenant],
      [7, 4],
    ],
    [
      "a tenant's share configured",
      { DISPATCHER_MAX_IN_FLIGHT_PER_TENANT: '100' },
      (c) => c.dispatcher.maxInFlightPerTenant,
      100,
    ],
    [
      'circuit breaker configured',
      { DISPATCHER_CIRCUIT_FAILURES: '0', DISPATCHER_CIRCUIT_OPEN: '5s', DISPATCHER_CIRCUIT_MAX_OPEN: '10m' },
      (c) => c.dispatcher.circuit,
      { failures: 0, openMs: 5_000, maxOpenMs: 600_000 },
    ],
  ])('%s', (_name, env, pick, expected) => {
    expect(pick(loadConfig(env))).toEqual(expected);
  });

  it('reads SECRETS_KEY (32 bytes, base64) and previous keys for rotation', () => {
    const current = randomBytes(32);
    const previous = randomBytes(32);
    const config = loadConfig({
      SECRETS_KEY: current.toString('base64'),
      SECRETS_KEY_ID: 'k2',
      SECRETS_PREVIOUS_KEYS: `k1:${previous.toString('base64')}`,
    });
    expect(config.secrets?.currentKeyId).toBe('k2');
    expect(config.secrets?.keys.get('k2')?.equals(current)).toBe(true);
    expect(config.secrets?.keys.get('k1')?.equals(previous)).toBe(true);
    expect(requireSecrets(config)).toBe(config.secrets);
  });
});

describe('loadConfig rejects bad values with a ConfigError naming the variable', () => {
  const key16 = randomBytes(16).toString('base64');
  const key33 = randomBytes(33).toString('base64');
  it.each([
    // durations
    ['WEBHOOK_RETRY_DELAYS', '1m,,2m'],
    ['WEBHOOK_RETRY_DELAYS', '1x'],
    ['WEBHOOK_RETRY_DELAYS', '1m;2m'],
    ['WEBHOOK_RETRY_DELAYS', '0s,1m'],
    ['WEBHOOK_RETRY_DELAYS', '-1m'],
    ['WEBHOOK_RETRY_DELAYS', '1m,1m,2m'], // one topic per step: a repeated delay has none of its own
    ['WEBHOOK_DELIVERY_LIFETIME', 'soon'],
    ['WEBHOOK_DELIVERY_LIFETIME', '24'],
    ['WEBHOOK_DELIVERY_LIFETIME', '0h'],
    ['WEBHOOK_ATTEMPT_TIMEOUT', '30 s'],
    ['WEBHOOK_ATTEMPT_TIMEOUT', '0.4ms'],
    ['WEBHOOK_FAILURE_DAY', 'day'],
    ['WEBHOOK_SUBSCRIPTION_CACHE_TTL', '1sec'],
    ['WEBHOOK_HISTORY_RETENTION', '30'],
    // integers
    ['WEBHOOK_AUTO_DISABLE_AFTER_DAYS', '0'],
    ['WEBHOOK_AUTO_DISABLE_AFTER_DAYS', 'ten'],
    ['WEBHOOK_AUTO_DISABLE_AFTER_DAYS', '1.5'],
    ['WEBHOOK_AUTO_DISABLE_AFTER_DAYS', '-1'],
    ['WEBHOOK_AUTO_DISABLE_AFTER_DAYS', '10001'],
    ['WEBHOOK_PAYLOAD_LIMIT_BYTES', '-1'],
    ['WEBHOOK_PAYLOAD_LIMIT_BYTES', '200KB'],
    ['WEBHOOK_PAYLOAD_LIMIT_BYTES', '100000001'],
    ['WEBHOOK_PAYLOAD_LIMIT_BYTES', '2e5'],
    ['KAFKA_PARTITIONS', '0'],
    ['KAFKA_PARTITIONS', '0x10'],
    ['CASSANDRA_REPLICATION_FACTOR', '10'],
    ['GATEWAY_PORT', '65536'],
    ['METRICS_PORT', 'http'],
    ['DISPATCHER_MAX_IN_FLIGHT', '0'],
    ['ROUTER_MAX_IN_FLIGHT', '0'],
    ['DISPATCHER_FETCH_BYTES', '512'],
    ['DISPATCHER_FETCH_BYTES', '128KB'],
    ['DISPATCHER_QUIET_CHECK_MS', '-1'],
    ['DISPATCHER_QUIET_CHECK_MS', '1s'],
    ['DISPATCHER_DUE_SLACK_MS', '-1'],
    ['GATEWAY_DEPENDENCY_TIMEOUT', 'soon'],
    ['GATEWAY_REQUEST_BUDGET', 'later'],
    ['ROUTER_MAX_IN_FLIGHT', 'lots'],
    ['DISPATCHER_MAX_IN_FLIGHT_PER_SUBSCRIPTION', '1.0e1'],
    ['DISPATCHER_CONNECTIONS_PER_ORIGIN', '0'],
    ['DISPATCHER_CONNECTIONS_PER_ORIGIN', '-1'],
    ['DISPATCHER_CONNECTIONS_PER_ORIGIN', 'many'],
    ['DISPATCHER_HEAP_GROWTH_PERCENT', '-5'],
    ['DISPATCHER_HEAP_GROWTH_PERCENT', '1001'],
    ['DISPATCHER_HEAP_GROWTH_PERCENT', 'lots'],
    ['ROUTER_HEAP_GROWTH_PERCENT', '-1'],
    ['ROUTER_HEAP_GROWTH_PERCENT', '1001'],
    ['KAFKA_REPLICATION_FACTOR', '0'],
    ['KAFKA_REPLICATION_FACTOR', '-2'],
    ['KAFKA_REPLICATION_FACTOR', 'all'],
    ['KAFKA_REPLICATION_FACTOR', '32768'],
    ['KAFKA_MIN_INSYNC_REPLICAS', '0'],
    ['KAFKA_MIN_INSYNC_REPLICAS', '-1'],
    ['KAFKA_MIN_INSYNC_REPLICAS', '1.5'],
    // booleans
    ['WEBHOOK_ALLOW_HTTP', 'yes'],
    ['WEBHOOK_ALLOW_HTTP', 'TRUE'],
    ['WEBHOOK_ALLOW_HTTP', '1'],
    ['WEBHOOK_ALLOW_HTTP', 'on'],
    ['DISPATCHER_ADAPTIVE_CONCURRENCY', 'yes'],
    // URLs
    ['AUTH_URL', 'not a url'],
    ['GATEWAY_BASE_URL', '//127.0.0.1:8080'],
    ['SCHEMA_REGISTRY_URL', 'registry.local/apis/ccompat/v7'],
    ['AUTH_JWKS_URL', '/.well-known/jwks.json'],
    // CIDRs
    ['WEBHOOK_ALLOWED_CIDRS', '127.0.0.1/33'],
    ['WEBHOOK_ALLOWED_CIDRS', '10.0.0.0/8,localhost'],
    // keyspace
    ['CASSANDRA_KEYSPACE', 'Core'],
    ['CASSANDRA_KEYSPACE', 'core-webhooks'],
    ['CASSANDRA_KEYSPACE', '1core'],
    ['CASSANDRA_KEYSPACE', 'core webhooks'],
    ['CASSANDRA_KEYSPACE', 'k'.repeat(49)],
    ['CASSANDRA_KEYSPACE', 'x; DROP KEYSPACE y'],
    // enum
    ['LOG_LEVEL', 'verbose'],
    // secrets
    ['SECRETS_KEY', key16],
    ['SECRETS_KEY', key33],
    ['SECRETS_KEY', '!!!!'],
    ['SECRETS_PREVIOUS_KEYS', 'k0'],
    ['SECRETS_PREVIOUS_KEYS', `k0:${key16}`],
  ])('%s=%j', (variable, value) => {
    const env: Record<string, string> = { [variable]: value };
    // Previous keys are only read next to a current key.
    if (variable === 'SECRETS_PREVIOUS_KEYS') env.SECRETS_KEY = randomBytes(32).toString('base64');
    const error = thrownBy(() => loadConfig(env));
    expect(error).toBeInstanceOf(ConfigError);
    expect(error).toMatchObject({ name: 'ConfigError', code: 'CONFIG_INVALID', variable });
    expect((error as Error).message.startsWith(`${variable}: `)).toBe(true);
  });

  it('rejects more in-sync replicas than replicas (acks=all could never succeed), naming KAFKA_MIN_INSYNC_REPLICAS', () => {
    const error = thrownBy(() => loadConfig({ KAFKA_REPLICATION_FACTOR: '1', KAFKA_MIN_INSYNC_REPLICAS: '2' }));
    expect(error).toMatchObject({ name: 'ConfigError', variable: 'KAFKA_MIN_INSYNC_REPLICAS' });
    expect((error as Error).message).toMatch(/^KAFKA_MIN_INSYNC_REPLICAS: .*KAFKA_REPLICATION_FACTOR/);
  });

  it('accepts the same variables with good values (the table above tests the value, not the variable)', () => {
    expect(() =>
      loadConfig({
        WEBHOOK_RETRY_DELAYS: '1m,2m',
        WEBHOOK_AUTO_DISABLE_AFTER_DAYS: '10',
        KAFKA_PARTITIONS: '16',
        KAFKA_REPLICATION_FACTOR: '-1',
        KAFKA_MIN_INSYNC_REPLICAS: '1',
        DISPATCHER_CONNECTIONS_PER_ORIGIN: '128',
        WEBHOOK_ALLOW_HTTP: 'true',
        AUTH_URL: 'https://idp.example',
        WEBHOOK_ALLOWED_CIDRS: '127.0.0.1/32',
        CASSANDRA_KEYSPACE: 'core_webhooks_2',
        SECRETS_KEY: randomBytes(32).toString('base64'),
      }),
    ).not.toThrow();
  });
});

describe('loadConfig result is frozen', () => {
  const config = loadConfig({});

  it.each([
    ['config', config],
    ['config.webhook', config.webhook],
    ['config.webhook.retryDelaysMs', config.webhook.retryDelaysMs],
    ['config.webhook.allowedCidrs', config.webhook.allowedCidrs],
    ['config.kafka', config.kafka],
    ['config.kafka.brokers', config.kafka.brokers],
    ['config.auth', config.auth],
    ['config.cassandra', config.cassandra],
    ['config.gateway', config.gateway],
    ['config.dispatcher', config.dispatcher],
  ])('%s', (_name, value) => {
    expect(Object.isFrozen(value)).toBe(true);
  });

  it('throws on writes (ES modules are strict)', () => {
    expect(() => {
      (config.webhook as { attemptTimeoutMs: number }).attemptTimeoutMs = 1;
    }).toThrow(TypeError);
    expect(() => config.webhook.retryDelaysMs.push(1)).toThrow(TypeError);
    expect(config.webhook.attemptTimeoutMs).toBe(30_000);
  });
});

describe('retryTopicName', () => {
  it.each([
    ['', MINUTE, 'webhook.deliveries.retry.1m'],
    ['', 2 * MINUTE, 'webhook.deliveries.retry.2m'],
    ['', 64 * MINUTE, 'webhook.deliveries.retry.64m'],
    ['', 128 * MINUTE, 'webhook.deliveries.retry.128m'],
    ['', 4 * HOUR, 'webhook.deliveries.retry.4h'],
    ['test-abc.', 1_000, 'test-abc.webhook.deliveries.retry.1s'],
    ['', 1_500, 'webhook.deliveries.retry.1500ms'],
    ['', DAY, 'webhook.deliveries.retry.1d'],
  ])('prefix %j, %i ms → %s', (prefix, delay, name) => {
    expect(retryTopicName(prefix, delay)).toBe(name);
  });

  it('gives every default delay its own topic', () => {
    const names = loadConfig({}).webhook.retryDelaysMs.map((delay) => retryTopicName('', delay));
    expect(new Set(names).size).toBe(9);
  });
});

describe('tracing configuration (OTEL_*)', () => {
  const tracingOf = (env: Record<string, string>) => loadConfig(env).tracing;

  it('is off by default, and the specification defaults otherwise', () => {
    expect(tracingOf({})).toEqual({
      enabled: false,
      endpoint: 'http://localhost:4318/v1/traces',
      headers: {},
      serviceName: null,
      resourceAttributes: {},
      sampler: 'parentbased_always_on',
      samplerRatio: 1,
      scheduleDelayMs: 5000,
      maxQueueSize: 2048,
      maxExportBatchSize: 512,
      timeoutMs: 10_000,
    });
  });

  it('is on with OTEL_TRACES_EXPORTER=otlp or an endpoint, and off with none or OTEL_SDK_DISABLED', () => {
    expect(tracingOf({ OTEL_TRACES_EXPORTER: 'otlp' }).enabled).toBe(true);
    expect(tracingOf({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318/' })).toMatchObject({
      enabled: true,
      endpoint: 'http://collector:4318/v1/traces',
    });
    expect(tracingOf({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://collector:4318/custom' })).toMatchObject({
      enabled: true,
      endpoint: 'http://collector:4318/custom',
    });
    expect(tracingOf({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_TRACES_EXPORTER: 'none' }).enabled).toBe(
      false,
    );
    expect(tracingOf({ OTEL_TRACES_EXPORTER: 'otlp', OTEL_SDK_DISABLED: 'true' }).enabled).toBe(false);
  });

  it('reads headers, resource attributes, the service name, the sampler and the batch settings', () => {
    expect(
      tracingOf({
        OTEL_EXPORTER_OTLP_HEADERS: 'x-api-key=abc,x-team=web%20hooks',
        OTEL_EXPORTER_OTLP_TRACES_HEADERS: 'x-api-key=def',
        OTEL_RESOURCE_ATTRIBUTES: 'deployment.environment=prod',
        OTEL_SERVICE_NAME: 'hooks',
        OTEL_TRACES_SAMPLER: 'parentbased_traceidratio',
        OTEL_TRACES_SAMPLER_ARG: '0.25',
        OTEL_BSP_SCHEDULE_DELAY: '200',
        OTEL_BSP_MAX_QUEUE_SIZE: '100',
        OTEL_BSP_MAX_EXPORT_BATCH_SIZE: '50',
        OTEL_EXPORTER_OTLP_TIMEOUT: '3000',
      }),
    ).toMatchObject({
      headers: { 'x-api-key': 'def', 'x-team': 'web hooks' },
      resourceAttributes: { 'deployment.environment': 'prod' },
      serviceName: 'hooks',
      sampler: 'parentbased_traceidratio',
      samplerRatio: 0.25,
      scheduleDelayMs: 200,
      maxQueueSize: 100,
      maxExportBatchSize: 50,
      timeoutMs: 3000,
    });
    expect(tracingOf({ OTEL_EXPORTER_OTLP_TIMEOUT: '3000', OTEL_EXPORTER_OTLP_TRACES_TIMEOUT: '500' }).timeoutMs).toBe(
      500,
    );
  });

  it.each([
    ['OTEL_EXPORTER_OTLP_PROTOCOL', 'grpc'],
    ['OTEL_EXPORTER_OTLP_TRACES_PROTOCOL', 'http/json'],
    ['OTEL_TRACES_EXPORTER', 'zipkin'],
    ['OTEL_TRACES_SAMPLER', 'sometimes'],
    ['OTEL_TRACES_SAMPLER_ARG', '1.5'],
    ['OTEL_EXPORTER_OTLP_HEADERS', 'novalue'],
    ['OTEL_BSP_MAX_EXPORT_BATCH_SIZE', '4096'],
    ['OTEL_EXPORTER_OTLP_TIMEOUT', '10s'],
    ['OTEL_EXPORTER_OTLP_TRACES_TIMEOUT', '0'],
  ])('refuses %s=%s, naming the variable', (name, value) => {
    expect(() => loadConfig({ [name]: value })).toThrow(new RegExp(`^${name}: `));
  });
});
