import { statementSender, types, type CassandraClient } from '../cassandra.ts';
import {
  DEFAULT_WRITE_BATCHING,
  WriteBatcher,
  type WriteBatcherOptions,
  type WriteStatement,
} from '../write-batcher.ts';
import type { Attempt, Delivery, DeliveryStatus, StoredEvent } from './delivery.ts';
import type { DeliveryRecord } from './delivery-record.ts';
import { EntityOrderStore } from './entity-order.ts';
import { attemptWriteTime, deferWriteTime, finishWriteTime, queuedWriteTime } from './write-time.ts';

const HOUR = 3_600_000;

/** A delivery series as its writers address it: the queue time orders every write of its row (write-time.ts). */
export interface SeriesRef {
  tenantId: string;
  deliveryId: string;
  queuedAt: number;
}

/** The fields of a series that a replay's first write carries too, so its row is whole whichever write lands first. */
export type SeriesIdentity = Pick<
  Delivery,
  'eventId' | 'eventType' | 'subscriptionId' | 'entityId' | 'occurredAt' | 'replayOf' | 'signature' | 'test'
>;

/** The state of a series, as a dispatcher checks it before sending a record that may be a duplicate. */
export interface SeriesState {
  status: DeliveryStatus;
  attemptCount: number;
  /** When its next attempt is due (retrying, or deferred), if it has one. */
  nextRetryAt?: Date | null;
}

/**
 * A null bound to a prepared statement writes a tombstone; an absent value (undefined, with the driver's
 * useUndefinedAsUnset) writes nothing. Rows and cells that are new are written without their empty columns.
 */
function unset<T>(value: T | null): T | undefined {
  return value ?? undefined;
}

/** The columns of a delivery as the API shows it (fromRow): its row without the attempts, read apart (attempts()). */
const DELIVERY_COLUMNS = `tenant_id, id, event_id, event_type, subscription_id, entity_id, status, attempt_count, last_status_code,
  last_error_message, abandon_reason, next_retry_at, queued_at, occurred_at, replay_of, signature, test`;

const FINAL: ReadonlySet<DeliveryStatus> = new Set(['acknowledged', 'abandoned', 'superseded']);

/** Cassandra store of events, deliveries, attempts and the history index tables. */
export class DeliveryStore {
  private readonly ttlSeconds: number;
  /** The hot path's writes (routing, attempts, ends) ride together in batched requests (write-batcher.ts). */
  private readonly writes: WriteBatcher;

  constructor(
    private readonly db: CassandraClient,
    retentionMs: number,
    batching: WriteBatcherOptions = DEFAULT_WRITE_BATCHING,
  ) {
    this.ttlSeconds = Math.max(1, Math.round(retentionMs / 1000));
    this.writes = new WriteBatcher(statementSender(db), batching);
  }

  /** The entity-order rows of ordered deliveries about to be published (entity-order.ts), stamped like their routing. */
  async enqueueOrdered(records: (DeliveryRecord & { orderSeq: number })[], writeTime: number): Promise<void> {
    await this.writes.write(records.map((record) => EntityOrderStore.enqueue(record, writeTime)));
  }

  /**
   * Records an event and its new deliveries. `writeTime` (epoch ms) is derived from the source record so that routing
   * the same event again rewrites identical cells; each delivery row is stamped from its own queue time (write-time.ts),
   * below every later state, so it never rolls back a status update.
   */
  async createDeliveries(event: StoredEvent, deliveries: Delivery[], writeTime: number): Promise<void> {
    const ttl = this.ttlSeconds;
    // The event's deliveries ride in its row (migration 009): the by-event listing reads them from there. They are
    // added to the map, never written as a whole: an INSERT of a map deletes the cells older than it, and the event
    // published again later (a new source record, a later write time) would drop what its first routing listed.
    // An UPDATE writes no row marker; every column but the key is set here, and a row is read by its cells.
    const eventRow: WriteStatement = {
      query: `UPDATE events USING TTL ${ttl} AND TIMESTAMP ? SET event_type = ?, occurred_at = ?, entity_id = ?,
         reference = ?, resource_url = ?, payload = ?, deliveries = deliveries + ?
         WHERE tenant_id = ? AND event_id = ?`,
      params: [
        writeTime * 1000,
        event.eventType,
        event.occurredAt,
        event.entityId,
        unset(event.reference),
        event.resourceUrl,
        unset(event.payload),
        Object.fromEntries(deliveries.map((delivery) => [delivery.id, delivery.queuedAt])),
        event.tenantId,
        event.eventId,
      ],
    };
    // The event row apart: its payload can be large, and a batch of several partitions has a size limit.
    await Promise.all([
      this.writes.write([eventRow]),
      ...deliveries.map((delivery) => this.writes.write(this.deliveryRows(delivery))),
    ]);
  }

  /**
   * Writes a new delivery series of an event already stored (a replay): its row, its listing row and its cell in the
   * event's row.
   */
  async insertDelivery(delivery: Delivery) {
    await this.writes.write([
      ...this.deliveryRows(delivery),
      {
        query: `UPDATE events USING TTL ${this.ttlSeconds} AND TIMESTAMP ? SET deliveries[?] = ?
          WHERE tenant_id = ? AND event_id = ?`,
        params: [
          queuedWriteTime(delivery.queuedAt.getTime()),
          delivery.id,
          delivery.queuedAt,
          delivery.tenantId,
          delivery.eventId,
        ],
      },
    ]);
  }

  /** A delivery's row and its listing row, each stamped at the queue time (write-time.ts). */
  private deliveryRows(delivery: Delivery): WriteStatement[] {
    const ttl = this.ttlSeconds;
    const { tenantId, id, queuedAt } = delivery;
    const hour = Math.floor(queuedAt.getTime() / HOUR);
    const stamp = queuedWriteTime(queuedAt.getTime());
    return [
      {
        query: `INSERT INTO deliveries (tenant_id, id, event_id, event_type, subscription_id, entity_id, status, attempt_count,
          last_status_code, last_error_message, next_retry_at, queued_at, occurred_at, replay_of, signature, test)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) USING TTL ${ttl} AND TIMESTAMP ?`,
        params: [
          tenantId,
          id,
          delivery.eventId,
          delivery.eventType,
          delivery.subscriptionId,
          delivery.entityId,
          delivery.status,
          delivery.attemptCount,
          unset(delivery.lastStatusCode),
          unset(delivery.lastErrorMessage),
          unset(delivery.nextRetryAt),
          queuedAt,
          delivery.occurredAt,
          unset(delivery.replayOf),
          unset(delivery.signature),
          unset(delivery.test ? true : null),
          stamp,
        ],
      },
      {
        // The tenant's listing row names the subscription and the event type, which SAI indexes filter (migration 010).
        query: `INSERT INTO deliveries_by_tenant (tenant_id, hour, queued_at, delivery_id, subscription_id, event_type)
         VALUES (?, ?, ?, ?, ?, ?) USING TTL ${ttl} AND TIMESTAMP ?`,
        params: [tenantId, hour, queuedAt, id, delivery.subscriptionId, delivery.eventType, stamp],
      },
    ];
  }

  /**
   * Records one attempt and the delivery's resulting state: both rows have the key (tenant, delivery), one request.
   * `identity` (replays) also writes the series' fixed fields, so the row is whole even if this lands before the API's.
   */
  async recordAttempt(
    series: SeriesRef,
    attempt: Attempt,
    next: { status: DeliveryStatus; nextRetryAt: Date | null; abandonReason?: string | null; noted?: boolean },
    identity?: SeriesIdentity,
  ): Promise<void> {
    const ttl = this.ttlSeconds;
    const { tenantId, deliveryId } = series;
    // After the first attempt, a null must clear what an earlier attempt wrote; before it, nothing was written, unless
    // a note was (`noted`: an ordered delivery's wait).
    const clear = <T>(value: T | null) => (attempt.attempt === 1 && !next.noted ? unset(value) : value);
    const fixed = identity
      ? {
          columns: `, event_id = ?, event_type = ?, subscription_id = ?, entity_id = ?, occurred_at = ?, replay_of = ?,
                  signature = ?, queued_at = ?, test = ?`,
          values: [
            identity.eventId,
            identity.eventType,
            identity.subscriptionId,
            identity.entityId,
            identity.occurredAt,
            identity.replayOf,
            identity.signature,
            new Date(series.queuedAt),
            unset(identity.test ? true : null),
          ],
        }
      : { columns: '', values: [] };
    const stamp = attemptWriteTime(series.queuedAt, attempt.attempt, FINAL.has(next.status));
    const record = new types.Tuple(attempt.at, attempt.statusCode, attempt.errorMessage, attempt.durationMs);
    // The attempt is a cell of the row it updates (migration 008): one row per attempt, in one partition.
    await this.writes.write([
      {
        query: `UPDATE deliveries USING TTL ${ttl} AND TIMESTAMP ? SET attempts[?] = ?, status = ?, attempt_count = ?,
                last_status_code = ?, last_error_message = ?, next_retry_at = ?, abandon_reason = ?${fixed.columns}
                WHERE tenant_id = ? AND id = ?`,
        params: [
          stamp,
          attempt.attempt,
          record,
          next.status,
          attempt.attempt,
          clear(attempt.statusCode),
          clear(attempt.errorMessage),
          clear(next.nextRetryAt),
          unset(next.abandonReason ?? null),
          ...fixed.values,
          tenantId,
          deliveryId,
        ],
      },
    ]);
  }

  /**
   * Defers a series without an attempt after `attemptsMade` (its subscription's circuit is open): the next retry time
   * and why nothing was sent; the status, the attempts and the last status code stay. Written between attempt
   * `attemptsMade` and the next, so neither's row is rolled back by it.
   */
  async defer(series: SeriesRef, attemptsMade: number, nextRetryAt: Date | null, reason: string): Promise<void> {
    await this.writes.write([
      {
        query: `UPDATE deliveries USING TTL ${this.ttlSeconds} AND TIMESTAMP ? SET next_retry_at = ?,
          last_error_message = ? WHERE tenant_id = ? AND id = ?`,
        params: [
          deferWriteTime(series.queuedAt, attemptsMade),
          nextRetryAt,
          reason,
          series.tenantId,
          series.deliveryId,
        ],
      },
    ]);
  }

  /**
   * Ends a series without an attempt (abandoned at the deadline, superseded, subscription disabled) after
   * `attemptsMade` attempts. The last attempt's status code and error stay; the reason has its own column.
   */
  async finish(series: SeriesRef, status: DeliveryStatus, abandonReason: string, attemptsMade: number) {
    await this.writes.write([
      {
        query: `UPDATE deliveries USING TTL ${this.ttlSeconds} AND TIMESTAMP ? SET status = ?, next_retry_at = null,
          abandon_reason = ? WHERE tenant_id = ? AND id = ?`,
        params: [
          finishWriteTime(series.queuedAt, attemptsMade),
          status,
          abandonReason,
          series.tenantId,
          series.deliveryId,
        ],
      },
    ]);
  }

  /**
   * The status of each of an event's deliveries already stored, when the event was routed before: one read of the
   * event's row, and one of the deliveries only for an event seen again.
   */
  async routedBefore(tenantId: string, eventId: string, deliveryIds: string[]): Promise<Map<string, DeliveryStatus>> {
    const seen = await this.db.execute('SELECT event_type FROM events WHERE tenant_id = ? AND event_id = ?', [
      tenantId,
      eventId,
    ]);
    if (seen.first()?.event_type == null || deliveryIds.length === 0) return new Map();
    const rows = await this.db.execute('SELECT id, status, queued_at FROM deliveries WHERE tenant_id = ? AND id IN ?', [
      tenantId,
      deliveryIds,
    ]);
    // A row a dispatcher wrote without the router's (published beside it, the router gone before writing it) is not
    // routed yet: it gets its row, and goes out again as a possible duplicate, which the dispatcher then skips.
    return new Map(
      rows.rows
        .filter((row) => row.status !== null && row.queued_at !== null)
        .map((row) => [String(row.id), row.status as DeliveryStatus]),
    );
  }

  /** The status and attempt count of a series, or undefined when it has no row. */
  async state(tenantId: string, deliveryId: string): Promise<SeriesState | undefined> {
    const row = (
      await this.db.execute(
        'SELECT status, attempt_count, next_retry_at FROM deliveries WHERE tenant_id = ? AND id = ?',
        [tenantId, deliveryId],
      )
    ).first();
    if (!row || row.status === null) return undefined;
    return {
      status: row.status as DeliveryStatus,
      attemptCount: Number(row.attempt_count ?? 0),
      nextRetryAt: (row.next_retry_at as Date | null) ?? null,
    };
  }

  /** Several deliveries of a tenant in one request (IN on the last partition key column), in the order of `ids`. */
  async getMany(tenantId: string, ids: string[]): Promise<(Delivery | undefined)[]> {
    if (ids.length === 0) return [];
    const result = await this.db.execute(`SELECT ${DELIVERY_COLUMNS} FROM deliveries WHERE tenant_id = ? AND id IN ?`, [
      tenantId,
      ids,
    ]);
    const byId = new Map(result.rows.map((row) => [String(row.id), fromRow(row)]));
    return ids.map((id) => byId.get(id));
  }

  async get(tenantId: string, id: string): Promise<Delivery | undefined> {
    const row = (
      await this.db.execute(`SELECT ${DELIVERY_COLUMNS} FROM deliveries WHERE tenant_id = ? AND id = ?`, [tenantId, id])
    ).first();
    return row ? fromRow(row) : undefined;
  }

  /**
   * A delivery's attempts in order: the cells of its row (migration 008), and the rows an earlier version wrote to
   * delivery_attempts, which stay until the history's retention expires them. A cell wins over a row of the same number.
   */
  async attempts(tenantId: string, deliveryId: string): Promise<Attempt[]> {
    const [cells, rows] = await Promise.all([
      this.db.execute('SELECT attempts FROM deliveries WHERE tenant_id = ? AND id = ?', [tenantId, deliveryId]),
      this.db.execute('SELECT * FROM delivery_attempts WHERE tenant_id = ? AND delivery_id = ?', [
        tenantId,
        deliveryId,
      ]),
    ]);
    const byNumber = new Map<number, Attempt>();
    for (const row of rows.rows) {
      byNumber.set(Number(row.attempt), {
        attempt: Number(row.attempt),
        at: row.at as Date,
        statusCode: (row.status_code as number | null) ?? null,
        errorMessage: (row.error_message as string | null) ?? null,
        durationMs: Number(row.duration_ms ?? 0),
      });
    }
    const map = (cells.first()?.attempts ?? null) as Record<string, InstanceType<typeof types.Tuple>> | null;
    for (const [number, tuple] of Object.entries(map ?? {})) {
      byNumber.set(Number(number), {
        attempt: Number(number),
        at: tuple.get(0) as Date,
        statusCode: (tuple.get(1) as number | null) ?? null,
        errorMessage: (tuple.get(2) as string | null) ?? null,
        durationMs: Number(tuple.get(3) ?? 0),
      });
    }
    return [...byNumber.values()].sort((a, b) => a.attempt - b.attempt);
  }

  async getEvent(tenantId: string, eventId: string): Promise<StoredEvent | undefined> {
    const row = (
      await this.db.execute('SELECT * FROM events WHERE tenant_id = ? AND event_id = ?', [tenantId, eventId])
    ).first();
    // A replay's cell in `deliveries` can outlive the event's own cells (a later TTL): without them there is no event.
    if (!row || row.event_type === null) return undefined;
    return {
      tenantId,
      eventId,
      eventType: String(row.event_type),
      occurredAt: String(row.occurred_at),
      entityId: String(row.entity_id),
      reference: (row.reference as string | null) ?? null,
      resourceUrl: String(row.resource_url),
      payload: (row.payload as Buffer | null) ?? null,
    };
  }

  /** Marks this delivery as the latest for its entity on a superseding subscription. */
  async markLatestForEntity(delivery: Delivery, writeTime: number): Promise<void> {
    await this.db.execute(
      `INSERT INTO latest_entity_deliveries (tenant_id, subscription_id, entity_id, delivery_id, occurred_at)
       VALUES (?, ?, ?, ?, ?) USING TTL ${this.ttlSeconds}`,
      [delivery.tenantId, delivery.subscriptionId, delivery.entityId, delivery.id, delivery.occurredAt],
      { prepare: true, timestamp: writeTime * 1000 },
    );
  }

  async latestForEntity(tenantId: string, subscriptionId: string, entityId: string) {
    const row = (
      await this.db.execute(
        'SELECT delivery_id, occurred_at FROM latest_entity_deliveries WHERE tenant_id = ? AND subscription_id = ? AND entity_id = ?',
        [tenantId, subscriptionId, entityId],
      )
    ).first();
    return row ? { deliveryId: String(row.delivery_id), occurredAt: String(row.occurred_at) } : undefined;
  }

  /**
   * Newest-first ids from one hour partition of the tenant's listing, strictly older than `before` when given, filtered
   * by subscription or event type through their SAI indexes (migration 010). Deliveries queued before that version are
   * listed in deliveries_by_subscription and deliveries_by_event_type, read beside it until they expire.
   */
  async indexPage(
    index: { table: 'tenant' | 'subscription' | 'eventType'; tenantId: string; key?: string },
    hour: number,
    before: ListingEntry | undefined,
    limit: number,
  ): Promise<ListingEntry[]> {
    const filter = { tenant: undefined, subscription: 'subscription_id', eventType: 'event_type' }[index.table];
    const page = async (table: string, keyColumn: string | undefined, keyInPartition: boolean) => {
      const params: unknown[] = [index.tenantId];
      let where = 'tenant_id = ?';
      if (keyColumn && keyInPartition) {
        where += ` AND ${keyColumn} = ?`;
        params.push(index.key);
      }
      where += ' AND hour = ?';
      params.push(hour);
      if (before) {
        where += ' AND (queued_at, delivery_id) < (?, ?)';
        params.push(before.queuedAt, before.id);
      }
      if (keyColumn && !keyInPartition) {
        where += ` AND ${keyColumn} = ?`;
        params.push(index.key);
      }
      const result = await this.db.execute(
        `SELECT queued_at, delivery_id FROM ${table} WHERE ${where} LIMIT ${limit}`,
        params,
      );
      return result.rows.map((row) => ({ queuedAt: row.queued_at as Date, id: String(row.delivery_id) }));
    };
    if (filter === undefined) return page('deliveries_by_tenant', undefined, false);
    const earlier = index.table === 'subscription' ? 'deliveries_by_subscription' : 'deliveries_by_event_type';
    const [listed, before010] = await Promise.all([
      page('deliveries_by_tenant', filter, false),
      page(earlier, filter, true),
    ]);
    return newestFirst([...before010, ...listed], undefined, limit);
  }

  /**
   * Newest-first ids of one event's deliveries, strictly older than `before` when given, `limit` at most: the cells of
   * the event's row (migration 009), and what earlier versions listed in deliveries_by_event until it expires.
   */
  async eventIndex(
    tenantId: string,
    eventId: string,
    before: ListingEntry | undefined,
    limit: number,
  ): Promise<ListingEntry[]> {
    const params: unknown[] = [tenantId, eventId];
    let where = 'tenant_id = ? AND event_id = ?';
    if (before) {
      where += ' AND (queued_at, delivery_id) < (?, ?)';
      params.push(before.queuedAt, before.id);
    }
    const [cells, rows] = await Promise.all([
      this.db.execute('SELECT deliveries FROM events WHERE tenant_id = ? AND event_id = ?', [tenantId, eventId]),
      this.db.execute(`SELECT queued_at, delivery_id FROM deliveries_by_event WHERE ${where} LIMIT ${limit}`, params),
    ]);
    const map = (cells.first()?.deliveries ?? null) as Record<string, Date> | null;
    return newestFirst(
      [
        ...rows.rows.map((row) => ({ queuedAt: row.queued_at as Date, id: String(row.delivery_id) })),
        ...Object.entries(map ?? {}).map(([id, queuedAt]) => ({ queuedAt, id })),
      ],
      before,
      limit,
    );
  }
}

/** A delivery as a listing orders it. */
export type ListingEntry = { queuedAt: Date; id: string };

/** Listing order: newest queue time first, then delivery id descending (the index tables' clustering order). */
const newer = (a: ListingEntry, b: ListingEntry) =>
  b.queuedAt.getTime() - a.queuedAt.getTime() || (a.id < b.id ? 1 : a.id > b.id ? -1 : 0);

/** Entries of two sources merged: each id once, in listing order, strictly after `before`, `limit` at most. */
function newestFirst(entries: ListingEntry[], before: ListingEntry | undefined, limit: number): ListingEntry[] {
  const byId = new Map(entries.map((entry) => [entry.id, entry]));
  return [...byId.values()]
    .filter((entry) => before === undefined || newer(before, entry) < 0)
    .sort(newer)
    .slice(0, limit);
}

function fromRow(row: Record<string, unknown>): Delivery {
  return {
    tenantId: String(row.tenant_id),
    id: String(row.id),
    eventId: String(row.event_id),
    eventType: String(row.event_type),
    subscriptionId: String(row.subscription_id),
    entityId: String(row.entity_id),
    status: row.status as DeliveryStatus,
    attemptCount: Number(row.attempt_count ?? 0),
    lastStatusCode: (row.last_status_code as number | null) ?? null,
    lastErrorMessage: (row.last_error_message as string | null) ?? null,
    abandonReason: (row.abandon_reason as string | null) ?? null,
    nextRetryAt: (row.next_retry_at as Date | null) ?? null,
    queuedAt: row.queued_at as Date,
    occurredAt: String(row.occurred_at),
    replayOf: (row.replay_of as string | null) ?? null,
    signature: (row.signature as string | null) ?? null,
    ...(row.test === true ? { test: true } : {}),
  };
}

export { HOUR };
