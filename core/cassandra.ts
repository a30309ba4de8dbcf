// The only module that creates cassandra-driver clients; stores receive a client and prepare their statements.
import { readdir, readFile } from 'node:fs/promises';
import cassandra from 'cassandra-driver';
import { budgetLeft, callTimeout, settleWithin } from './budget.ts';
import type { Config } from './config.ts';
import { InvalidInputError } from './errors.ts';
import type { SendStatements } from './write-batcher.ts';

export type CassandraClient = cassandra.Client;
export const { types } = cassandra;

/**
 * Sends write statements in one request (write-batcher.ts): one alone, several as an unlogged batch. Each statement
 * carries its own write time (USING TIMESTAMP), so the request carries none: `timestamp: null` keeps the driver from
 * stamping the batch, which Cassandra would refuse beside the statements' own.
 */
export function statementSender(db: CassandraClient): SendStatements {
  // Our stamped writes set cells or add to a map, never to a counter or a list: idempotent. Said here, so the
  // dispatcher's history writes skip withCallPolicies' per-call judgement (and its copy of the options).
  const noTimestamp = { prepare: true, timestamp: null as unknown as number, isIdempotent: true };
  const unloggedBatch = { ...noTimestamp, logged: false };
  return async (statements) => {
    if (statements.length === 1) await db.execute(statements[0]!.query, statements[0]!.params, noTimestamp);
    else await db.batch(statements, unloggedBatch);
  };
}

/**
 * A client bound to the configured keyspace (which must exist: run migrations first); `keyspace: null` connects
 * without one (to create it). `requestTimeoutMs` bounds each request (the API's is short, to answer 503 rather than
 * hang), and a request made within a budget (budget.ts: an API call's) waits at most what is left of it. A lost node
 * is tried again every second or so (at most 5 s apart), so the client recovers without a restart.
 * `connectionsPerNode` sizes the pool of each node.
 */
export async function connectCassandra(
  config: Config,
  keyspace: string | null = config.cassandra.keyspace,
  requestTimeoutMs = 20_000,
  connectionsPerNode = 1,
) {
  const client = new cassandra.Client({
    contactPoints: config.cassandra.contactPoints,
    localDataCenter: config.cassandra.localDc,
    keyspace: keyspace ?? undefined,
    queryOptions: { consistency: cassandra.types.consistencies.localQuorum, prepare: true },
    socketOptions: { readTimeout: requestTimeoutMs, connectTimeout: Math.min(10_000, requestTimeoutMs) },
    policies: {
      reconnection: new cassandra.policies.reconnection.ExponentialReconnectionPolicy(500, 5_000, false),
      // A node that hangs (frozen, or cut off from its peers and waiting for them) holds every request it coordinates
      // until it times out: an idempotent one is sent to a second coordinator after SPECULATE_AFTER_MS.
      speculativeExecution: new cassandra.policies.speculativeExecution.ConstantSpeculativeExecutionPolicy(
        SPECULATE_AFTER_MS,
        1,
      ),
    },
    // One connection per node by default (the driver's default since protocol v3; a connection carries thousands of
    // requests at once): requests made in one event-loop turn then leave in one socket write. With two, a validation's
    // read of the order and its outbox pointer went out on different connections, two writes where one does. The
    // router and the dispatcher keep two: at 1,000 deliveries/s their writes' tail was longer on one (README, Benchmarks).
    pooling: { coreConnectionsPerHost: { [cassandra.types.distance.local]: connectionsPerNode } },
  });
  await client.connect();
  return withCallPolicies(client, requestTimeoutMs);
}

/** How long a coordinator may take on an idempotent request before a second one is asked too. */
const SPECULATE_AFTER_MS = 500;

/**
 * Whether running `query` twice does what running it once does, so that the driver may ask a second coordinator
 * (speculative execution) or retry it elsewhere after a timeout: reads, and writes that set values (with the client's
 * write time, the same for every execution). Not a conditional write (IF …: a lightweight transaction), a counter's
 * increment or a list's append (`x = x + …`; adding to a set or a map would be idempotent, but the text alone does not
 * tell them apart, so it is judged not).
 */
export function isIdempotentQuery(query: string): boolean {
  return !/\bIF\b/i.test(query) && !/\b(\w+)\s*=\s*\1\s*[+-]|=\s*\?\s*\+/i.test(query);
}

/**
 * Marks each promise-style `execute` and `batch` idempotent or not (isIdempotentQuery) unless the caller said, and
 * bounds each one made within a budget (an API request's: budget.ts) by what is left of it. The driver's
 * `readTimeout` counts from the moment the request is written; the race also bounds getting a connection first (a
 * pool opening to a node that is coming back), which it does not. Outside a budget (the services' background work) a
 * call is bounded by `requestTimeoutMs` alone.
 */
export function withCallPolicies(client: CassandraClient, requestTimeoutMs: number): CassandraClient {
  const execute = client.execute.bind(client);
  const batch = client.batch.bind(client);
  // Our statements are a few hundred constant texts at most: each is judged once.
  const judged = new Map<string, { idempotent: boolean; rows: boolean }>();
  const judge = (query: string) => {
    let verdict = judged.get(query);
    if (verdict === undefined) {
      verdict = { idempotent: isIdempotentQuery(query), rows: answersWithRows(query) };
      if (judged.size < 10_000) judged.set(query, verdict);
    }
    return verdict;
  };
  const idempotent = (options: cassandra.QueryOptions | undefined, queries: string[]) =>
    options?.isIdempotent !== undefined
      ? options
      : { ...options, isIdempotent: queries.every((query) => judge(query).idempotent) };
  const withRows = (queries: string[]) => (result: cassandra.types.ResultSet) => {
    if (result.rows === undefined && queries.some((query) => judge(query).rows)) throw new RowlessAnswerError(queries);
    return result;
  };
  const bounded = <T>(
    options: cassandra.QueryOptions | undefined,
    send: (options?: cassandra.QueryOptions) => Promise<T>,
  ) => {
    if (budgetLeft() === undefined) return send(options);
    try {
      const wait = callTimeout('Cassandra', options?.readTimeout ?? requestTimeoutMs);
      return settleWithin(send({ ...options, readTimeout: wait }), wait, 'Cassandra');
    } catch (error) {
      return Promise.reject(error as Error);
    }
  };
  client.execute = ((query: string, params?: cassandra.ArrayOrObject, options?: cassandra.QueryOptions, ...rest) => {
    if (rest.length > 0 || typeof params === 'function' || typeof options === 'function') {
      return (execute as (...args: unknown[]) => unknown)(query, params, options, ...rest);
    }
    const judged = idempotent(options, [query]);
    return bounded(judged, (budgeted) => untilRun(judged, () => execute(query, params, budgeted))).then(
      withRows([query]),
    );
  }) as CassandraClient['execute'];
  client.batch = ((queries: Parameters<CassandraClient['batch']>[0], options?: cassandra.QueryOptions, ...rest) => {
    if (rest.length > 0 || typeof options === 'function') {
      return (batch as (...args: unknown[]) => unknown)(queries, options, ...rest);
    }
    const texts = queries.map((entry) => (typeof entry === 'string' ? entry : entry.query));
    const judged = idempotent(options, texts);
    return bounded(judged, (budgeted) => untilRun(judged, () => batch(queries, budgeted))).then(withRows(texts));
  }) as CassandraClient['batch'];
  return client;
}

/**
 * Whether every answer to `query` carries rows: a read's, and a conditional write's (its `[applied]` row). Other writes
 * and schema changes (`CREATE TABLE IF NOT EXISTS` too) are answered without.
 */
export function answersWithRows(query: string): boolean {
  return /^\s*SELECT\b/i.test(query) || (/^\s*(INSERT|UPDATE|DELETE)\b/i.test(query) && /\bIF\b/i.test(query));
}

/**
 * A read or a conditional write the driver answered without rows. Seen once, on a three-node cluster during its
 * warm-up: the router's read of an event's row got a result without `rows` (its cause not found). Read as it came, a
 * read's answer looks like an absent row, and the driver's `wasApplied()` takes it for an applied compare-and-set; so it
 * fails, as a transient failure (isUnreachable: the API answers 503, the services handle the record again).
 */
export class RowlessAnswerError extends Error {
  constructor(queries: string[]) {
    super(`Cassandra answered without rows: ${queries.join('; ')}`);
    this.name = 'RowlessAnswerError';
  }
}

/**
 * Sends a request that is not idempotent again when its coordinator refused it without running it: Overloaded (a node
 * being drained answers so, "Server is shutting down", to every request) or Is_bootstrapping. The driver retries these
 * on another node only for idempotent requests (its retry policy sees the rest never), so in a rolling restart of the
 * Cassandra nodes a validation's compare-and-set failed this way and the API answered 503. Three tries, 50 and 100 ms
 * apart (the driver learns meanwhile that the node is going down); within an API request's budget, as any call.
 */
function untilRun<T>(options: cassandra.QueryOptions, send: () => Promise<T>): Promise<T> {
  // Idempotent requests are the driver's to retry: sent as they are, with no frame added on the hot path.
  return options.isIdempotent === false ? sendAgainWhenRefused(send) : send();
}

async function sendAgainWhenRefused<T>(send: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt += 1) {
    try {
      return await send();
    } catch (error) {
      if (attempt >= 3 || !refusedUnrun(error)) throw error;
      await new Promise((resolve) => setTimeout(resolve, 50 * attempt));
    }
  }
}

/** The coordinator refused the request before running any of it. */
function refusedUnrun(error: unknown): boolean {
  const codes = cassandra.types.responseErrorCodes;
  return (
    error instanceof cassandra.errors.ResponseError &&
    (error.code === codes.overloaded || error.code === codes.isBootstrapping)
  );
}

/**
 * The bound on one schema change (CREATE, ALTER, DROP). Cassandra 5 applies them one at a time, and a DROP KEYSPACE
 * flushes and unloads every table in turn: 2.6 s for our 22 tables on an idle local node, and past the 20 s query
 * bound at the end of a CI run (stop 36's teardown: `DROP KEYSPACE IF EXISTS test_image_…` timed out client-side,
 * while the node went on to drop it). A client that gives up early leaves the schema changing anyway.
 */
export const SCHEMA_CHANGE_TIMEOUT_MS = 120_000;

/** A client without a keyspace, for schema changes (migrations, dropping a keyspace). */
export function connectSchemaAdmin(config: Config) {
  return connectCassandra(config, null, SCHEMA_CHANGE_TIMEOUT_MS);
}

/** Applies the versioned CQL files in core/migrations once each, recording them; safe to run concurrently. */
export async function migrate(config: Config): Promise<{ applied: string[]; alreadyApplied: string[] }> {
  const admin = await connectSchemaAdmin(config);
  const { keyspace, replicationFactor } = config.cassandra;
  try {
    await admin.execute(
      `CREATE KEYSPACE IF NOT EXISTS ${keyspace} WITH replication = ` +
        `{'class': 'NetworkTopologyStrategy', '${config.cassandra.localDc}': ${replicationFactor}}`,
    );
    await admin.execute(
      `CREATE TABLE IF NOT EXISTS ${keyspace}.schema_migrations (version text PRIMARY KEY, applied_at timestamp)`,
    );
    const done = new Set(
      (await admin.execute(`SELECT version FROM ${keyspace}.schema_migrations`)).rows.map((row) => String(row.version)),
    );
    const directory = new URL('./migrations/', import.meta.url);
    const files = (await readdir(directory)).filter((name) => name.endsWith('.cql')).sort();
    const applied: string[] = [];
    for (const file of files.filter((name) => !done.has(name))) {
      const text = await readFile(new URL(file, directory), 'utf8');
      for (const statement of splitStatements(text)) {
        const qualified = statement.replace(
          /\b(CREATE TABLE IF NOT EXISTS|ALTER TABLE|CREATE INDEX IF NOT EXISTS \w+ ON) (\w+)/,
          `$1 ${keyspace}.$2`,
        );
        try {
          await admin.execute(qualified);
        } catch (error) {
          // A migration interrupted after some statements is run again: a column it already added is fine.
          if (!/already exists|conflicts with an existing column/i.test((error as Error).message)) throw error;
        }
      }
      await admin.execute(`INSERT INTO ${keyspace}.schema_migrations (version, applied_at) VALUES (?, ?)`, [
        file,
        new Date(),
      ]);
      applied.push(file);
    }
    return { applied, alreadyApplied: files.filter((name) => done.has(name)) };
  } finally {
    await admin.shutdown();
  }
}

function splitStatements(text: string): string[] {
  return text
    .split('\n')
    .filter((line) => !line.trim().startsWith('--'))
    .join('\n')
    .split(/;\s*(?:\n|$)/)
    .map((statement) => statement.trim())
    .filter(Boolean);
}

/**
 * One page of a single-partition query, for the list endpoints' `limit` and `cursor`: the cursor is the driver's
 * paging state, opaque to clients. A cursor that is not one answers 400 naming `cursor`.
 */
export async function queryPage(
  db: CassandraClient,
  query: string,
  params: unknown[],
  limit: number,
  cursor: string | undefined,
): Promise<{ rows: cassandra.types.Row[]; nextCursor: string | null }> {
  let pageState: string | undefined;
  if (cursor !== undefined) {
    if (!/^[A-Za-z0-9_-]{1,2000}$/.test(cursor)) throw badCursor();
    pageState = Buffer.from(cursor, 'base64url').toString('hex');
  }
  try {
    const result = await db.execute(query, params, { prepare: true, fetchSize: limit, pageState });
    return {
      rows: result.rows,
      nextCursor: result.pageState ? Buffer.from(result.pageState, 'hex').toString('base64url') : null,
    };
  } catch (error) {
    if (cursor !== undefined && /paging state|pageState|Invalid value for the paging state/i.test(String(error))) {
      throw badCursor();
    }
    throw error;
  }
}

function badCursor() {
  return new InvalidInputError([{ path: 'cursor', message: 'is not a cursor returned by this endpoint' }]);
}

/**
 * Whether a driver error means Cassandra cannot be reached or cannot answer now (no host, a timeout, unavailable or
 * overloaded replicas), as opposed to a bad request: callers answer 503 and the request can be retried.
 */
export function isUnreachable(error: unknown): boolean {
  const err = (error ?? {}) as { name?: string; code?: number; isSocketError?: boolean };
  if (err.name === 'NoHostAvailableError' || err.name === 'OperationTimedOutError') return true;
  // A connection closed under a request (the node went away mid-flight), or every connection busy.
  if (err.isSocketError === true || err.name === 'BusyConnectionError') return true;
  if (error instanceof RowlessAnswerError) return true;
  const { responseErrorCodes: codes } = cassandra.types;
  return (
    err.name === 'ResponseError' &&
    [
      codes.unavailableException,
      codes.overloaded,
      codes.isBootstrapping,
      codes.readTimeout,
      codes.writeTimeout,
    ].includes(err.code ?? -1)
  );
}
