import { DEFAULT_WRITE_BATCHING, type WriteBatcherOptions } from './write-batcher.ts';
import { formatDuration, parseDuration } from './duration.ts';
import { parseCidrs } from './ssrf.ts';

/** Thrown when a configuration variable is missing or malformed; the message names the variable. */
export class ConfigError extends Error {
  readonly code = 'CONFIG_INVALID';
  constructor(
    readonly variable: string,
    problem: string,
  ) {
    super(`${variable}: ${problem}`);
    this.name = 'ConfigError';
  }
}

/** The whole configuration of every service, read once from the environment and frozen. */
export interface Config {
  readonly kafka: {
    readonly brokers: string[];
    readonly clientId: string;
    readonly topicPrefix: string;
    readonly partitions: number;
    /** Replicas of every topic we create; -1 leaves it to the broker's `default.replication.factor`. */
    readonly replicationFactor: number;
    /** `min.insync.replicas` of every topic we create: the replicas an acks=all write must reach. */
    readonly minInsyncReplicas: number;
    /** Topics the router consumes: the producers' integration-event topics. */
    readonly sourceTopics: string[];
  };
  readonly cassandra: {
    readonly contactPoints: string[];
    readonly localDc: string;
    readonly keyspace: string;
    readonly replicationFactor: number;
    /** Writes of the delivery history grouped into one unlogged batch, at most (core/write-batcher.ts). */
    readonly writeBatch: WriteBatcherOptions;
  };
  readonly schemaRegistryUrl: string;
  readonly gateway: {
    readonly baseUrl: string;
    readonly host: string;
    readonly port: number;
    /** How long an API request waits for one Cassandra or Kafka call before it answers 503 with Retry-After. */
    readonly dependencyTimeoutMs: number;
    /** How long an API request waits for its Cassandra and Kafka calls in all (budget.ts) before it answers 503. */
    readonly requestBudgetMs: number;
    /** The same while a dependency has failed within `degradedWindowMs` (GATEWAY_DEGRADED_BUDGET, _WINDOW). */
    readonly degradedBudgetMs: number;
    readonly degradedWindowMs: number;
  };
  readonly auth: {
    readonly url: string;
    readonly issuer: string;
    readonly audience: string;
    readonly jwksUrl: string;
    readonly tenantClaim: string;
  };
  /** AES-256-GCM keys for subscription secrets at rest; `current` encrypts, all decrypt. */
  readonly secrets: { readonly currentKeyId: string; readonly keys: ReadonlyMap<string, Buffer> } | undefined;
  readonly webhook: {
    readonly retryDelaysMs: number[];
    readonly deliveryLifetimeMs: number;
    readonly attemptTimeoutMs: number;
    readonly failureDayMs: number;
    readonly autoDisableAfterDays: number;
    readonly payloadLimitBytes: number;
    readonly allowHttp: boolean;
    readonly allowedCidrs: string[];
    readonly subscriptionCacheTtlMs: number;
    readonly historyRetentionMs: number;
  };
  /**
   * Whether this process publishes the purchase outbox (a separate relay process may do it instead), and how long its
   * sweep leaves a row just committed to the relay of the gateway that committed it (OutboxRelayOptions.peerGraceMs).
   */
  readonly purchase: { readonly outboxRelay: boolean; readonly sweepGraceMs: number };
  readonly router: {
    /** Events the router routes at once: with a store write taking tens of ms under load, this caps its throughput. */
    readonly maxInFlight: number;
    /**
     * How far V8 lets the router's old generation grow past what survived its last full collection before the next
     * one, in percent (ROUTER_HEAP_GROWTH_PERCENT; V8's --heap-growing-percent, set by core/heap-growth.ts); 0 leaves
     * V8's own factor. The router runs with 32 MB semi-spaces (infra/processes.ts), and V8 starts marking the old
     * generation as soon as what is left below its limit is less than the young generation's capacity: with its own
     * factor the limit after a full collection (about 2.2 times the 30-32 MB the router keeps) left less than that, so
     * the router ran a full collection (a 4-10 ms pause, marking steps of up to 12 ms) every 2 s whatever it allocated,
     * 14-26 in a 40-80 s run at 500 deliveries/s. With 300 (a factor of 4) it runs one when about 48 MB of promoted
     * garbage has gathered, every 20 s or more. Its price is memory: RSS 246-256 MB at 500 and 1,000/s against 183-248
     * MB, 358-360 against 345-347 MB as fast as possible (the chart's limit is 512 MiB); README "Benchmarks".
     */
    readonly heapGrowthPercent: number;
  };
  readonly dispatcher: {
    /**
     * The dispatcher's slots (DISPATCHER_MAX_IN_FLIGHT): deliveries it works on at once. A delivery holds one for the
     * dispatcher's own work, not while it waits for the receiver's answer. Tenants take free slots in turn, and one
     * tenant holds at most DISPATCHER_MAX_IN_FLIGHT_PER_TENANT (by default half of them).
     */
    readonly maxInFlight: number;
    readonly maxInFlightPerTenant: number;
    readonly maxInFlightPerSubscription: number;
    /** Connections the dispatcher keeps open to one receiver origin at most. */
    readonly connectionsPerOrigin: number;
    /**
     * Whether each subscription's concurrency adapts to its endpoint's answers and latency (between 1 and
     * maxInFlightPerSubscription) and Retry-After holds it at 1; when false, maxInFlightPerSubscription is fixed.
     */
    readonly adaptiveConcurrency: boolean;
    /**
     * How long an attempt's history write made while none is in flight waits for others to share its Cassandra
     * request (DISPATCHER_HISTORY_LINGER_MS): nobody waits on these writes to be answered, and fewer requests cost
     * Cassandra less CPU at moderate load. 0 sends them at the end of the turn that made them.
     */
    readonly historyLingerMs: number;
    /**
     * How far V8 lets the dispatcher's old generation grow past what survived its last full collection before the
     * next one, in percent (DISPATCHER_HEAP_GROWTH_PERCENT; V8's --heap-growing-percent). Under a burst V8 otherwise
     * grows it up to fourfold, and the dispatcher's RSS with it. Not a cap: the heap still grows as far as live data
     * needs. 0 leaves V8's own factor.
     */
    readonly heapGrowthPercent: number;
    /**
     * Each subscription's circuit breaker (dispatcher/circuit-breaker.ts): consecutive failed attempts that open it
     * (DISPATCHER_CIRCUIT_FAILURES, 0: off), how long it first stays open (DISPATCHER_CIRCUIT_OPEN, by default the
     * first retry delay), and the longest it stays open after failed probes (DISPATCHER_CIRCUIT_MAX_OPEN, by default
     * an hour, or the longest retry delay if shorter).
     */
    readonly circuit: { readonly failures: number; readonly openMs: number; readonly maxOpenMs: number };
    /**
     * Records of one subscription waiting for its lane at most (DISPATCHER_LANE_BACKLOG): the next ones are parked on
     * the overflow topic for DISPATCHER_OVERFLOW_DELAY, out of the shared read-ahead buffer and their partition's way.
     */
    readonly laneBacklog: number;
    readonly overflowDelayMs: number;
    /**
     * How long a subscription's waiting records may take to start at its pace before its backlog counts as slow
     * (DISPATCHER_LANE_WAIT_MS): only a slow lane's records beyond DISPATCHER_LANE_BACKLOG are parked; one keeping pace
     * keeps its backlog in the buffer (a burst). 0 parks at the backlog bound whatever the pace.
     */
    readonly laneWaitMs: number;
    /**
     * Bytes of records one fetch brings of each partition at most (DISPATCHER_FETCH_BYTES): kafkajs decodes a whole
     * fetch response in one go, so this bounds how long the event loop is held by one.
     */
    readonly fetchBytesPerPartition: number;
    /**
     * How often the retry tiers' and the overflow's partitions are checked for records (DISPATCHER_QUIET_CHECK_MS):
     * while empty they are left out of the consumer's fetches (ConsumerOptions.quiet); 0 fetches them always.
     */
    readonly quietCheckMs: number;
    /**
     * How long after a retry tier's or the overflow's next record is due its partition is fetched again
     * (DISPATCHER_DUE_SLACK_MS; ConsumerOptions.dueSlackMs): the records due meanwhile come in one fetch, where
     * fetching at each record's due time decoded the partition's whole waiting backlog once per record.
     */
    readonly dueSlackMs: number;
  };
  /** Bulk replay jobs, run by the routers (router/replay-runner.ts). */
  readonly replay: {
    /** Replays one job queues per second at most (REPLAY_RATE). */
    readonly ratePerJob: number;
    /** Replays one router queues per second at most, all its jobs together (REPLAY_PROCESS_RATE). */
    readonly ratePerProcess: number;
    /** Jobs one router runs at once (REPLAY_MAX_JOBS); others wait for a slot here or in another router. */
    readonly maxJobs: number;
    /** How long a router holds a job it stopped renewing (crashed) before another may take it (REPLAY_LEASE). */
    readonly leaseMs: number;
    /** How often a router looks for jobs to run (REPLAY_POLL_INTERVAL). */
    readonly pollMs: number;
  };
  readonly metricsPort: number;
  readonly logLevel: 'debug' | 'info' | 'warn' | 'error';
  /** OpenTelemetry traces, from the standard OTEL_* variables (core/tracing.ts); off by default. */
  readonly tracing: TracingConfig;
}

export type TraceSampler = (typeof TRACE_SAMPLERS)[number];
const TRACE_SAMPLERS = [
  'always_on',
  'always_off',
  'traceidratio',
  'parentbased_always_on',
  'parentbased_always_off',
  'parentbased_traceidratio',
] as const;

export interface TracingConfig {
  /** OTEL_TRACES_EXPORTER=otlp, or an OTLP endpoint given without it; OTEL_SDK_DISABLED=true turns it off. */
  readonly enabled: boolean;
  /** Where spans are posted (OTLP over HTTP, protobuf): the traces endpoint, or the endpoint's /v1/traces. */
  readonly endpoint: string;
  readonly headers: Readonly<Record<string, string>>;
  /** OTEL_SERVICE_NAME; each service's own name (gateway, router, dispatcher) when unset. */
  readonly serviceName: string | null;
  readonly resourceAttributes: Readonly<Record<string, string>>;
  readonly sampler: TraceSampler;
  readonly samplerRatio: number;
  /** The batch span processor: delay between exports, spans held at most (more are dropped), spans per export. */
  readonly scheduleDelayMs: number;
  readonly maxQueueSize: number;
  readonly maxExportBatchSize: number;
  /** OTEL_EXPORTER_OTLP_TRACES_TIMEOUT, else OTEL_EXPORTER_OTLP_TIMEOUT: how long one export may wait for its answer. */
  readonly timeoutMs: number;
}

type Env = Record<string, string | undefined>;

/** Reads and validates every variable; throws ConfigError naming the first bad one. */
export function loadConfig(env: Env = process.env): Config {
  const read = reader(env);
  const authUrl = read.url('AUTH_URL', 'http://127.0.0.1:8088');
  const issuer = read.string('AUTH_ISSUER', `${authUrl.replace(/\/$/, '')}/`);
  const gatewayBaseUrl = read.url('GATEWAY_BASE_URL', 'http://127.0.0.1:8080');
  const gatewayUrl = new URL(gatewayBaseUrl);
  const topicPrefix = read.string('KAFKA_TOPIC_PREFIX', '');
  const replication = readReplication(read);
  const retryDelaysMs = read.durations('WEBHOOK_RETRY_DELAYS', '1m,2m,4m,8m,16m,32m,64m,128m,4h');
  const dispatcherSlots = read.integer('DISPATCHER_MAX_IN_FLIGHT', 500, 1, 100_000);
  const config: Config = {
    kafka: {
      brokers: read.list('KAFKA_BROKERS', ['127.0.0.1:9092']),
      clientId: read.string('KAFKA_CLIENT_ID', 'core-webhooks'),
      topicPrefix,
      partitions: read.integer('KAFKA_PARTITIONS', 6, 1, 1000),
      ...replication,
      sourceTopics: read.list('ROUTER_SOURCE_TOPICS', [`${topicPrefix}purchase.events`]),
    },
    cassandra: {
      contactPoints: read.list('CASSANDRA_CONTACT_POINTS', ['127.0.0.1:9042']),
      localDc: read.string('CASSANDRA_LOCAL_DC', 'datacenter1'),
      keyspace: read.identifier('CASSANDRA_KEYSPACE', 'core_webhooks'),
      replicationFactor: read.integer('CASSANDRA_REPLICATION_FACTOR', 1, 1, 9),
      writeBatch: {
        ...DEFAULT_WRITE_BATCHING,
        // Keep at or under the cluster's batch_size_warn_threshold (default 5 KiB: 4000), or each batch logs a warning.
        maxBytes: read.integer('CASSANDRA_WRITE_BATCH_BYTES', DEFAULT_WRITE_BATCHING.maxBytes, 0, 1_000_000),
      },
    },
    schemaRegistryUrl: read.url('SCHEMA_REGISTRY_URL', 'http://127.0.0.1:8081/apis/ccompat/v7'),
    gateway: {
      baseUrl: gatewayBaseUrl.replace(/\/$/, ''),
      host: read.string('GATEWAY_HOST', '127.0.0.1'),
      port: read.integer('GATEWAY_PORT', Number(gatewayUrl.port || 80), 0, 65535),
      dependencyTimeoutMs: read.duration('GATEWAY_DEPENDENCY_TIMEOUT', '1500ms'),
      requestBudgetMs: read.duration('GATEWAY_REQUEST_BUDGET', '10s'),
      degradedBudgetMs: read.duration('GATEWAY_DEGRADED_BUDGET', '1s'),
      degradedWindowMs: read.duration('GATEWAY_DEGRADED_WINDOW', '10s'),
    },
    auth: {
      url: authUrl.replace(/\/$/, ''),
      issuer,
      audience: read.string('AUTH_AUDIENCE', 'core-api'),
      jwksUrl: read.url('AUTH_JWKS_URL', `${issuer.replace(/\/$/, '')}/.well-known/jwks.json`),
      tenantClaim: read.string('AUTH_TENANT_CLAIM', 'tenant_id'),
    },
    secrets: readSecrets(env),
    webhook: {
      retryDelaysMs,
      deliveryLifetimeMs: read.duration('WEBHOOK_DELIVERY_LIFETIME', '24h'),
      attemptTimeoutMs: read.duration('WEBHOOK_ATTEMPT_TIMEOUT', '30s'),
      failureDayMs: read.duration('WEBHOOK_FAILURE_DAY', '24h'),
      autoDisableAfterDays: read.integer('WEBHOOK_AUTO_DISABLE_AFTER_DAYS', 10, 1, 10_000),
      payloadLimitBytes: read.integer('WEBHOOK_PAYLOAD_LIMIT_BYTES', 204_800, 0, 100_000_000),
      allowHttp: read.boolean('WEBHOOK_ALLOW_HTTP', false),
      allowedCidrs: read.cidrs('WEBHOOK_ALLOWED_CIDRS'),
      subscriptionCacheTtlMs: read.duration('WEBHOOK_SUBSCRIPTION_CACHE_TTL', '1s'),
      historyRetentionMs: read.duration('WEBHOOK_HISTORY_RETENTION', '30d'),
    },
    purchase: {
      outboxRelay: read.boolean('PURCHASE_OUTBOX_RELAY', true),
      sweepGraceMs: read.integer('PURCHASE_OUTBOX_SWEEP_GRACE_MS', 1_000, 0, 3_600_000),
    },
    router: {
      maxInFlight: read.integer('ROUTER_MAX_IN_FLIGHT', 200, 1, 100_000),
      heapGrowthPercent: read.integer('ROUTER_HEAP_GROWTH_PERCENT', 300, 0, 1_000),
    },
    dispatcher: {
      maxInFlight: dispatcherSlots,
      maxInFlightPerTenant: read.integer(
        'DISPATCHER_MAX_IN_FLIGHT_PER_TENANT',
        Math.max(1, Math.ceil(dispatcherSlots / 2)),
        1,
        100_000,
      ),
      maxInFlightPerSubscription: read.integer('DISPATCHER_MAX_IN_FLIGHT_PER_SUBSCRIPTION', 20, 1, 10_000),
      connectionsPerOrigin: read.integer('DISPATCHER_CONNECTIONS_PER_ORIGIN', 512, 1, 100_000),
      adaptiveConcurrency: read.boolean('DISPATCHER_ADAPTIVE_CONCURRENCY', true),
      historyLingerMs: read.integer('DISPATCHER_HISTORY_LINGER_MS', 5, 0, 1_000),
      heapGrowthPercent: read.integer('DISPATCHER_HEAP_GROWTH_PERCENT', 100, 0, 1_000),
      laneBacklog: read.integer('DISPATCHER_LANE_BACKLOG', 100, 1, 1_000_000),
      overflowDelayMs: read.duration('DISPATCHER_OVERFLOW_DELAY', '5s'),
      laneWaitMs: read.integer('DISPATCHER_LANE_WAIT_MS', 5_000, 0, 3_600_000),
      fetchBytesPerPartition: read.integer('DISPATCHER_FETCH_BYTES', 1_048_576, 1_024, 100_000_000),
      quietCheckMs: read.integer('DISPATCHER_QUIET_CHECK_MS', 500, 0, 60_000),
      dueSlackMs: read.integer('DISPATCHER_DUE_SLACK_MS', 250, 0, 60_000),
      circuit: {
        failures: read.integer('DISPATCHER_CIRCUIT_FAILURES', 5, 0, 10_000),
        // By default as long as the first retry delay, and at most an hour or the longest delay.
        openMs: read.duration('DISPATCHER_CIRCUIT_OPEN', `${retryDelaysMs[0]}ms`),
        maxOpenMs: read.duration('DISPATCHER_CIRCUIT_MAX_OPEN', `${Math.min(3_600_000, Math.max(...retryDelaysMs))}ms`),
      },
    },
    replay: readReplay(read),
    metricsPort: read.integer('METRICS_PORT', 0, 0, 65535),
    logLevel: read.oneOf('LOG_LEVEL', ['debug', 'info', 'warn', 'error'] as const, 'info'),
    tracing: readTracing(read),
  };
  return deepFreeze(config);
}

/**
 * The OpenTelemetry SDK variables this service honours (the specification's names and defaults, except that tracing
 * is off unless asked for). Only OTLP over HTTP with protobuf is spoken: another protocol is refused by name.
 */
function readTracing(read: ReturnType<typeof reader>): TracingConfig {
  const exporter = read.oneOf('OTEL_TRACES_EXPORTER', ['otlp', 'none', ''] as const, '');
  const tracesEndpoint = read.string('OTEL_EXPORTER_OTLP_TRACES_ENDPOINT', '');
  const endpoint = read.string('OTEL_EXPORTER_OTLP_ENDPOINT', '');
  for (const name of ['OTEL_EXPORTER_OTLP_TRACES_PROTOCOL', 'OTEL_EXPORTER_OTLP_PROTOCOL']) {
    read.oneOf(name, ['http/protobuf'] as const, 'http/protobuf');
  }
  const enabled =
    !read.boolean('OTEL_SDK_DISABLED', false) &&
    (exporter === 'otlp' || (exporter === '' && (tracesEndpoint !== '' || endpoint !== '')));
  const url =
    tracesEndpoint || (endpoint ? `${endpoint.replace(/\/$/, '')}/v1/traces` : 'http://localhost:4318/v1/traces');
  if (!URL.canParse(url)) throw new ConfigError('OTEL_EXPORTER_OTLP_ENDPOINT', `"${url}" is not an absolute URL`);
  const pairs = (name: string) => {
    const entries: Record<string, string> = {};
    for (const item of read.list(name, [])) {
      const at = item.indexOf('=');
      if (at <= 0) throw new ConfigError(name, `"${item}" is not key=value`);
      entries[decodeURIComponent(item.slice(0, at).trim())] = decodeURIComponent(item.slice(at + 1).trim());
    }
    return entries;
  };
  const headers = { ...pairs('OTEL_EXPORTER_OTLP_HEADERS'), ...pairs('OTEL_EXPORTER_OTLP_TRACES_HEADERS') };
  const ratio = read.string('OTEL_TRACES_SAMPLER_ARG', '1');
  const samplerRatio = Number(ratio);
  if (!/^(0|1|0?\.\d+|1\.0*)$/.test(ratio) || samplerRatio < 0 || samplerRatio > 1) {
    throw new ConfigError('OTEL_TRACES_SAMPLER_ARG', `"${ratio}" is not a ratio between 0 and 1`);
  }
  const maxQueueSize = read.integer('OTEL_BSP_MAX_QUEUE_SIZE', 2048, 1, 1_000_000);
  return {
    enabled,
    endpoint: url,
    headers,
    serviceName: read.string('OTEL_SERVICE_NAME', '') || null,
    resourceAttributes: pairs('OTEL_RESOURCE_ATTRIBUTES'),
    sampler: read.oneOf('OTEL_TRACES_SAMPLER', TRACE_SAMPLERS, 'parentbased_always_on'),
    samplerRatio,
    scheduleDelayMs: read.integer('OTEL_BSP_SCHEDULE_DELAY', 5000, 1, 3_600_000),
    maxQueueSize,
    maxExportBatchSize: read.integer('OTEL_BSP_MAX_EXPORT_BATCH_SIZE', 512, 1, maxQueueSize),
    timeoutMs: read.integer(
      'OTEL_EXPORTER_OTLP_TRACES_TIMEOUT',
      read.integer('OTEL_EXPORTER_OTLP_TIMEOUT', 10_000, 1, 600_000),
      1,
      600_000,
    ),
  };
}

/** The secrets keys, or a ConfigError naming SECRETS_KEY for the services that need them. */
export function requireSecrets(config: Config): NonNullable<Config['secrets']> {
  if (!config.secrets)
    throw new ConfigError('SECRETS_KEY', 'required (32 bytes, base64) to encrypt subscription secrets');
  return config.secrets;
}

/** Name of the retry topic for a delay, e.g. `webhook.deliveries.retry.1m`. */
export function retryTopicName(prefix: string, delayMs: number): string {
  return `${prefix}webhook.deliveries.retry.${formatDuration(delayMs)}`;
}

/**
 * Topic replication. The default -1 takes the broker's `default.replication.factor`: 1 on the single local broker
 * (a fixed 3 could not be created there) and the cluster's own choice in production, where a fixed 1 would silently
 * give up redundancy. min.insync.replicas above an explicit replication factor would refuse every acks=all write.
 */
function readReplication(read: ReturnType<typeof reader>) {
  const replicationFactor = read.integer('KAFKA_REPLICATION_FACTOR', -1, -1, 32_767);
  if (replicationFactor === 0) {
    throw new ConfigError('KAFKA_REPLICATION_FACTOR', '"0" must be -1 (the broker default) or at least 1');
  }
  const minInsyncReplicas = read.integer('KAFKA_MIN_INSYNC_REPLICAS', 1, 1, 32_767);
  if (replicationFactor !== -1 && minInsyncReplicas > replicationFactor) {
    throw new ConfigError(
      'KAFKA_MIN_INSYNC_REPLICAS',
      `${minInsyncReplicas} exceeds KAFKA_REPLICATION_FACTOR ${replicationFactor}: acks=all writes would always fail`,
    );
  }
  return { replicationFactor, minInsyncReplicas };
}

/** Bulk replay pacing and leases. A lease must outlive a few polls and renewals (a third of it) to be worth taking. */
function readReplay(read: ReturnType<typeof reader>): Config['replay'] {
  const leaseMs = read.duration('REPLAY_LEASE', '30s');
  if (leaseMs < 1_000) throw new ConfigError('REPLAY_LEASE', 'must be at least 1s');
  const pollMs = read.duration('REPLAY_POLL_INTERVAL', '2s');
  if (pollMs < 10) throw new ConfigError('REPLAY_POLL_INTERVAL', 'must be at least 10ms');
  return {
    ratePerJob: read.integer('REPLAY_RATE', 200, 1, 100_000),
    ratePerProcess: read.integer('REPLAY_PROCESS_RATE', 500, 1, 1_000_000),
    maxJobs: read.integer('REPLAY_MAX_JOBS', 4, 1, 1_000),
    leaseMs,
    pollMs,
  };
}

function readSecrets(env: Env): Config['secrets'] {
  const current = env.SECRETS_KEY;
  if (current === undefined || current === '') return undefined;
  const currentKeyId = env.SECRETS_KEY_ID || 'k1';
  const keys = new Map<string, Buffer>([[currentKeyId, decodeKey('SECRETS_KEY', current)]]);
  // Older keys stay readable during rotation: SECRETS_PREVIOUS_KEYS=k0:<base64>,…
  for (const entry of (env.SECRETS_PREVIOUS_KEYS ?? '').split(',').filter(Boolean)) {
    const [id, key] = entry.split(':');
    if (!id || !key) throw new ConfigError('SECRETS_PREVIOUS_KEYS', `expected id:base64key, got "${entry}"`);
    keys.set(id, decodeKey('SECRETS_PREVIOUS_KEYS', key));
  }
  return { currentKeyId, keys };
}

function decodeKey(variable: string, text: string): Buffer {
  const key = Buffer.from(text, 'base64');
  if (key.length !== 32)
    throw new ConfigError(variable, `must be 32 bytes encoded in base64 (got ${key.length} bytes)`);
  return key;
}

function reader(env: Env) {
  const raw = (name: string): string | undefined => {
    const value = env[name];
    return value === undefined || value.trim() === '' ? undefined : value.trim();
  };
  const duration = (name: string, fallback: string): number => {
    const text = raw(name) ?? fallback;
    const ms = parseDuration(text);
    if (ms === undefined) throw new ConfigError(name, `"${text}" is not a duration such as 500ms, 30s, 4h or 30d`);
    return ms;
  };
  const list = (name: string, fallback: string[]) => {
    const value = raw(name);
    return value === undefined
      ? fallback
      : value
          .split(',')
          .map((item) => item.trim())
          .filter(Boolean);
  };
  return {
    string: (name: string, fallback: string) => raw(name) ?? fallback,
    identifier: (name: string, fallback: string) => {
      const value = raw(name) ?? fallback;
      if (!/^[a-z][a-z0-9_]{0,47}$/.test(value))
        throw new ConfigError(name, `"${value}" is not a lower-case identifier`);
      return value;
    },
    url: (name: string, fallback: string) => {
      const value = raw(name) ?? fallback;
      if (!URL.canParse(value)) throw new ConfigError(name, `"${value}" is not an absolute URL`);
      return value;
    },
    list,
    integer: (name: string, fallback: number, min: number, max: number) => {
      const text = raw(name);
      if (text === undefined) return fallback;
      // Plain decimal digits only: Number() would also take `0x10`, `1e3` or `0b1`.
      const value = /^-?\d+$/.test(text) ? Number(text) : NaN;
      if (!Number.isInteger(value) || value < min || value > max) {
        throw new ConfigError(name, `"${text}" is not an integer between ${min} and ${max}`);
      }
      return value;
    },
    boolean: (name: string, fallback: boolean) => {
      const text = raw(name);
      if (text === undefined) return fallback;
      if (text !== 'true' && text !== 'false') throw new ConfigError(name, `"${text}" must be true or false`);
      return text === 'true';
    },
    oneOf: <T extends string>(name: string, values: readonly T[], fallback: T): T => {
      const text = raw(name) ?? fallback;
      if (!values.includes(text as T)) throw new ConfigError(name, `"${text}" must be one of ${values.join(', ')}`);
      return text as T;
    },
    duration,
    durations: (name: string, fallback: string) => {
      const text = raw(name) ?? fallback;
      const items = text.split(',').map((item) => item.trim());
      const delays = items.map((item) => {
        const ms = parseDuration(item);
        if (ms === undefined) throw new ConfigError(name, `"${item}" is not a duration such as 1m or 4h`);
        return ms;
      });
      // One retry topic per distinct delay and tiers are indexes into this list: a repeated delay would make a
      // tier index point past the topics (or at the wrong one).
      if (new Set(delays).size !== delays.length) throw new ConfigError(name, `"${text}" repeats a delay`);
      return delays;
    },
    /** A CIDR list, checked here so a bad entry stops start-up naming the variable. */
    cidrs: (name: string) => {
      const entries = list(name, []);
      try {
        parseCidrs(entries);
      } catch (error) {
        throw new ConfigError(name, (error as Error).message);
      }
      return entries;
    },
  };
}

function deepFreeze<T>(value: T): T {
  if (value && typeof value === 'object' && !(value instanceof Map) && !Buffer.isBuffer(value)) {
    for (const child of Object.values(value)) deepFreeze(child);
    Object.freeze(value);
  }
  return value;
}
