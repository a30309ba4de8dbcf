import cassandra from 'cassandra-driver';
import { describe, expect, it } from 'vitest';
import { answersWithRows, isIdempotentQuery, isUnreachable, withCallPolicies } from './cassandra.ts';

const { errors, types } = cassandra;
const codes = types.responseErrorCodes;
// The driver's base error is abstract in its typings, but thrown as such at run time (e.g. "Socket was closed").
const DriverError = errors.DriverError as unknown as new (message: string) => Error;

function socketClosed(): Error {
  const error = new DriverError('Socket was closed') as Error & { isSocketError?: boolean };
  error.isSocketError = true;
  return error;
}

describe('isUnreachable: which driver errors the API answers with 503 (retry later) rather than 500', () => {
  it.each<[string, unknown]>([
    ['no host available', new errors.NoHostAvailableError({})],
    ['a request timed out', new errors.OperationTimedOutError('The host did not reply before timeout 1500 ms')],
    ['the socket closed under a request', socketClosed()],
    ['every connection busy', new errors.BusyConnectionError('127.0.0.1:9042', 2048, 2)],
    ['replicas unavailable', new errors.ResponseError(codes.unavailableException, 'Cannot achieve consistency')],
    ['the node overloaded', new errors.ResponseError(codes.overloaded, 'overloaded')],
    ['a read timeout', new errors.ResponseError(codes.readTimeout, 'read timeout')],
    ['a write timeout', new errors.ResponseError(codes.writeTimeout, 'write timeout')],
  ])('%s: unreachable', (_name, error) => {
    expect(isUnreachable(error)).toBe(true);
  });

  it.each<[string, unknown]>([
    ['a syntax error', new errors.ResponseError(codes.syntaxError, 'line 1:0 no viable alternative')],
    ['an invalid query', new errors.ResponseError(codes.invalid, 'Undefined column name')],
    ['another driver error', new DriverError('something else')],
    ['a plain error', new Error('boom')],
    ['not an error', undefined],
  ])('%s: not unreachable', (_name, error) => {
    expect(isUnreachable(error)).toBe(false);
  });
});

describe('isIdempotentQuery: which statements the driver may send to a second coordinator or retry elsewhere', () => {
  it.each([
    'SELECT dto, body_id, version FROM purchase_orders WHERE tenant_id = ? AND id = ? LIMIT 1',
    'INSERT INTO outbox_pointers (bucket, tenant_id, order_id) VALUES (?, ?, ?)',
    'UPDATE purchase_orders SET published = true WHERE tenant_id = ? AND id = ? AND outbox_id = ?',
    'INSERT INTO attempts (tenant_id, id) VALUES (?, ?) USING TTL 2592000 AND TIMESTAMP ?',
    'DELETE FROM purchase_order_bodies WHERE tenant_id = ? AND order_id = ? AND body_id = ?',
    'SELECT notify_url FROM subscriptions WHERE tenant_id = ?',
  ])('idempotent: %s', (query) => {
    expect(isIdempotentQuery(query)).toBe(true);
  });

  it.each([
    'UPDATE purchase_orders SET status = ?, version = ? WHERE tenant_id = ? AND id = ? IF version = ?',
    'INSERT INTO reference_sequences (tenant_id, last_value) VALUES (?, ?) IF NOT EXISTS',
    'update leases set owner = ? where id = ? if exists',
    'UPDATE replay_job_outcomes SET delivered = delivered + 1 WHERE tenant_id = ? AND job_id = ?',
    'UPDATE jobs SET failed=failed-1 WHERE id = ?',
    'UPDATE orders SET tags = ? + tags WHERE id = ?',
  ])('not idempotent: %s', (query) => {
    expect(isIdempotentQuery(query)).toBe(false);
  });
});

describe('withCallPolicies: a request a coordinator refused without running it is sent again', () => {
  /** A client whose requests fail with `errors` in turn, then succeed; it counts them and keeps their options. */
  function client(failures: Error[]) {
    const sent: { query: string; options?: cassandra.QueryOptions }[] = [];
    const fake = {
      execute: async (query: string, _params?: unknown, options?: cassandra.QueryOptions) => {
        sent.push({ query, options });
        const failure = failures.shift();
        if (failure) throw failure;
        return { rows: [] };
      },
      batch: async (queries: { query: string }[], options?: cassandra.QueryOptions) => {
        sent.push({ query: queries.map((entry) => entry.query).join('; '), options });
        const failure = failures.shift();
        if (failure) throw failure;
        return { rows: [] };
      },
    };
    return { db: withCallPolicies(fake as unknown as cassandra.Client, 1_500), sent };
  }
  const shuttingDown = () => new errors.ResponseError(codes.overloaded, 'Server is shutting down');
  const cas = 'UPDATE purchase_orders SET status = ? WHERE id = ? IF status = ?';

  it('sends a conditional write refused by a node shutting down (Overloaded) again, which the driver does not', async () => {
    // A Cassandra node being drained answers Overloaded to every request before running it: in a rolling restart of
    // the cluster, a validation's compare-and-set failed so, and the API answered 503. The driver retries it on
    // another node only when the request is idempotent, which a compare-and-set is not.
    const { db, sent } = client([shuttingDown(), new errors.ResponseError(codes.isBootstrapping, 'bootstrapping')]);
    await db.execute(cas, ['validated', 'po-1', 'draft']);
    expect(sent).toHaveLength(3);
    expect(sent.every(({ options }) => options?.isIdempotent === false)).toBe(true);
    const { db: batches, sent: batchesSent } = client([shuttingDown()]);
    await batches.batch([{ query: cas, params: [] }]);
    expect(batchesSent).toHaveLength(2);
  });

  it('gives up after three refusals, and never sends again what may have run (a write timeout)', async () => {
    const refused = client([shuttingDown(), shuttingDown(), shuttingDown()]);
    await expect(refused.db.execute(cas, [])).rejects.toThrow('Server is shutting down');
    expect(refused.sent).toHaveLength(3);
    const timedOut = client([new errors.ResponseError(codes.writeTimeout, 'write timeout')]);
    await expect(timedOut.db.execute(cas, [])).rejects.toThrow('write timeout');
    expect(timedOut.sent).toHaveLength(1);
    // An idempotent request is the driver's to retry (its retry policy): not sent again here.
    const read = client([shuttingDown()]);
    await expect(read.db.execute('SELECT status FROM purchase_orders WHERE id = ?', [])).rejects.toThrow('shutting');
    expect(read.sent).toHaveLength(1);
  });
});

describe('withCallPolicies: an answer without rows is never read as "no row" or "applied"', () => {
  /** A client answering every request as the driver did once (a read during a cluster's warm-up): a result with no rows. */
  function rowless() {
    const answer = async () => ({ rows: undefined, first: () => null, wasApplied: () => true });
    return withCallPolicies({ execute: answer, batch: answer } as unknown as cassandra.Client, 1_500);
  }

  it('fails a read and a conditional write answered without rows, as a transient failure (503, tried again)', async () => {
    // A read answered so looked like an absent row (the router's "routed before?" read failed on it instead, once), and
    // the driver's wasApplied() takes a result without rows for an applied compare-and-set.
    const db = rowless();
    const read = db.execute('SELECT event_type FROM events WHERE tenant_id = ? AND event_id = ?', ['t', 'e']);
    await expect(read).rejects.toThrow(/without rows.*SELECT event_type FROM events/);
    await expect(read.catch((error: unknown) => isUnreachable(error))).resolves.toBe(true);
    await expect(db.execute('UPDATE cells SET n = ? WHERE k = ? IF n = ?', [1, 'k', 0])).rejects.toThrow(
      /without rows/,
    );
    const conditional = [{ query: 'INSERT INTO cells (k, n) VALUES (?, ?) IF NOT EXISTS', params: ['k', 0] }];
    await expect(db.batch(conditional)).rejects.toThrow(/without rows/);
  });

  it('takes a plain write answered without rows, as the driver answers every one', async () => {
    const db = rowless();
    await expect(db.execute('INSERT INTO cells (k, n) VALUES (?, ?)', ['k', 0])).resolves.toBeDefined();
    await expect(db.batch([{ query: 'DELETE FROM cells WHERE k = ?', params: ['k'] }])).resolves.toBeDefined();
  });
});

describe('answersWithRows: which answers must carry rows', () => {
  it.each([
    ['SELECT status FROM deliveries WHERE tenant_id = ? AND id IN ?', true],
    ['  select now() from system.local', true],
    ['UPDATE purchase_orders SET status = ? WHERE tenant_id = ? AND id = ? IF version = ?', true],
    ['INSERT INTO reference_sequences (tenant_id, last_value) VALUES (?, ?) IF NOT EXISTS', true],
    ['DELETE FROM leases WHERE id = ? IF owner = ?', true],
    ['INSERT INTO attempts (tenant_id, id) VALUES (?, ?)', false],
    ['UPDATE jobs SET failed = failed - 1 WHERE id = ?', false],
    ['CREATE TABLE IF NOT EXISTS core_warm_up.cells (k text PRIMARY KEY, n int)', false],
    ['DROP KEYSPACE IF EXISTS test_x', false],
  ])('%s: %s', (query, expected) => {
    expect(answersWithRows(query)).toBe(expected);
  });
});
