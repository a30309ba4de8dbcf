import type { CassandraClient } from '../cassandra.ts';
import type { WriteBatcher, WriteStatement } from '../write-batcher.ts';
import { withoutTransportFlags, type DeliveryRecord } from './delivery-record.ts';

/**
 * Ordered delivery per entity (ordering 'entity'). The pending deliveries of one entity to one subscription are rows of
 * one partition of entity_order (migration 013), clustered by their event's place in its source partition:
 *
 * - the router writes a delivery's row before it publishes the delivery, and publishes an event's ordered deliveries
 *   only once every earlier event of its partition has its rows (router/source-order.ts), so a delivery's predecessors
 *   are always in the table before any dispatcher can see it;
 * - a dispatcher sends a delivery only while no earlier row is in its partition (dispatcher/entity-order-gate.ts);
 *   otherwise it marks the row waiting and leaves it;
 * - the delivery that ends (acknowledged, abandoned, superseded) deletes its row, then reads the next, and when that
 *   one waits the same handler sends it on from the row's copy of its record (delivery-handler.ts).
 */
export interface EntityKey {
  tenantId: string;
  subscriptionId: string;
  entityId: string;
}

/** One pending delivery of an entity: its place, and the record as routed (to send it on once its turn comes). */
export interface OrderRow {
  seq: number;
  deliveryId: string;
  waiting: boolean;
  record: DeliveryRecord | undefined;
}

export const orderKeyOf = (record: DeliveryRecord): EntityKey => ({
  tenantId: record.tenantId,
  subscriptionId: record.subscriptionId,
  entityId: record.entityId,
});

/** Whether a record takes part in its entity's order: routed for an ordered subscription, neither replay nor test. */
export function isOrdered(record: DeliveryRecord): record is DeliveryRecord & { orderSeq: number } {
  return typeof record.orderSeq === 'number' && record.replayOf === null && record.test !== true;
}

/** `a` comes before `b` in their entity's order. */
export function before(a: { seq: number; deliveryId: string }, b: { seq: number; deliveryId: string }): boolean {
  return a.seq < b.seq || (a.seq === b.seq && a.deliveryId < b.deliveryId);
}

/** The record as the row keeps it: JSON, the envelope in base64, without the transport flags. */
export function recordText(record: DeliveryRecord): string {
  const { envelope, ...rest } = withoutTransportFlags(record);
  return JSON.stringify({ ...rest, envelope: envelope.toString('base64') });
}

export function recordFromText(text: string): DeliveryRecord {
  const parsed = JSON.parse(text) as Omit<DeliveryRecord, 'envelope'> & { envelope: string };
  return { ...parsed, envelope: Buffer.from(parsed.envelope, 'base64') };
}

/** Reads of an entity's first rows that may find marks of ended deliveries to delete (EntityOrderStore.first). */
const MAX_REVIVED_PASSES = 3;

/** A row as read (its record parsed only when used). */
function orderRowOf(row: Record<string, unknown>): OrderRow {
  const text = typeof row.record === 'string' ? row.record : undefined;
  let record: DeliveryRecord | undefined;
  return {
    seq: Number(row.seq),
    deliveryId: String(row.delivery_id),
    waiting: row.waiting === true,
    get record() {
      if (record === undefined && text !== undefined) record = recordFromText(text);
      return record;
    },
  };
}

/** Cassandra store of the entities' orders (entity_order). */
export class EntityOrderStore {
  /** `writes`: the marks and deletions ride in batched requests with other handlers' (write-batcher.ts). */
  constructor(
    private readonly db: CassandraClient,
    private readonly writes?: Pick<WriteBatcher, 'write'>,
  ) {}

  private async write(statement: WriteStatement): Promise<void> {
    if (this.writes) await this.writes.write([statement]);
    else await this.db.execute(statement.query, statement.params);
  }

  /**
   * The row of a delivery about to be published, stamped with the routing's write time (its source record's): routing
   * the event again rewrites the same cells, and never revives a row a dispatcher deleted since (a later timestamp).
   */
  static enqueue(record: DeliveryRecord & { orderSeq: number }, writeTime: number): WriteStatement {
    return {
      query: `INSERT INTO entity_order (tenant_id, subscription_id, entity_id, seq, delivery_id, record)
        VALUES (?, ?, ?, ?, ?, ?) USING TIMESTAMP ?`,
      params: [
        record.tenantId,
        record.subscriptionId,
        record.entityId,
        record.orderSeq,
        record.deliveryId,
        recordText(record),
        writeTime * 1000,
      ],
    };
  }

  /**
   * The first `limit` pending deliveries of the entity, in order; with their records only when `withRecords` (a record
   * is kilobytes: most looks need only the places and the marks), and each parsed only when read.
   *
   * A row without its record is no pending delivery: the router writes every row with its record, so such a row is a
   * waiting mark (an UPDATE, which writes its one cell whether or not the row is there) stamped after its delivery's
   * row was deleted, by a copy of the delivery handled in another process across a rebalance, or by one in the same
   * millisecond as the deletion (stamped in ms). Listed, the delivery after it would wait for one that has ended, and
   * no end would release it. Such a row is deleted past its mark, and the rows read again.
   */
  async first(key: EntityKey, limit: number, withRecords = true): Promise<OrderRow[]> {
    for (let pass = 1; ; pass += 1) {
      const result = await this.db.execute(
        `SELECT seq, delivery_id, waiting, writetime(record) AS routed, writetime(waiting) AS marked${withRecords ? ', record' : ''}
          FROM entity_order WHERE tenant_id = ? AND subscription_id = ? AND entity_id = ? LIMIT ${limit}`,
        [key.tenantId, key.subscriptionId, key.entityId],
      );
      const revived = result.rows.filter((row) => row.routed === null);
      if (revived.length === 0) return result.rows.map(orderRowOf);
      if (pass === MAX_REVIVED_PASSES) return result.rows.filter((row) => row.routed !== null).map(orderRowOf);
      await Promise.all(
        revived.map((row) =>
          this.deleteRow(
            key,
            { seq: Number(row.seq), deliveryId: String(row.delivery_id) },
            Math.max(Date.now() * 1000, Number(String(row.marked ?? 0)) + 1),
          ),
        ),
      );
    }
  }

  /** One delivery's record as its row keeps it (undefined when the row is gone). */
  async record(key: EntityKey, row: { seq: number; deliveryId: string }): Promise<DeliveryRecord | undefined> {
    const result = await this.db.execute(
      `SELECT record FROM entity_order
        WHERE tenant_id = ? AND subscription_id = ? AND entity_id = ? AND seq = ? AND delivery_id = ?`,
      [key.tenantId, key.subscriptionId, key.entityId, row.seq, row.deliveryId],
    );
    const text = result.rows[0]?.record;
    return typeof text === 'string' ? recordFromText(text) : undefined;
  }

  /** Marks a delivery as waiting for the ones before it (or no longer: it is being sent otherwise). */
  async markWaiting(key: EntityKey, row: { seq: number; deliveryId: string }, waiting = true): Promise<void> {
    await this.write({
      query: `UPDATE entity_order SET waiting = ?
        WHERE tenant_id = ? AND subscription_id = ? AND entity_id = ? AND seq = ? AND delivery_id = ?`,
      params: [waiting, key.tenantId, key.subscriptionId, key.entityId, row.seq, row.deliveryId],
    });
  }

  /**
   * Deletes a delivery's row. Stamped after the routing's write (its queue time) even if this clock is behind the
   * router's source: a row stamped ahead of the clock would otherwise outlive its deletion.
   */
  async remove(key: EntityKey, row: { seq: number; deliveryId: string; queuedAt: number }): Promise<void> {
    await this.deleteRow(key, row, Math.max(Date.now(), row.queuedAt + 1) * 1000);
  }

  /** Deletes one row with the write time `micros`. */
  private deleteRow(key: EntityKey, row: { seq: number; deliveryId: string }, micros: number): Promise<void> {
    return this.write({
      query: `DELETE FROM entity_order USING TIMESTAMP ?
        WHERE tenant_id = ? AND subscription_id = ? AND entity_id = ? AND seq = ? AND delivery_id = ?`,
      params: [micros, key.tenantId, key.subscriptionId, key.entityId, row.seq, row.deliveryId],
    });
  }
}
