import { types, type CassandraClient } from '../core/cassandra.ts';
import { newId } from '../core/ids.ts';
import { formatReference, serializePurchaseOrder, type Item, type PurchaseOrderDTO } from './purchase-order.ts';

const MINUTE = 60_000;

/** An integration event waiting in a purchase order's partition until the relay has published it. */
export interface OutboxRow {
  tenantId: string;
  orderId: string;
  outboxId: string;
  eventType: string;
  occurredAt: string;
  reference: string | null;
  payload: string;
}

/** Cassandra store of items, purchase orders, their outbox rows and reference sequences. */
export class PurchaseStore {
  constructor(private readonly db: CassandraClient) {}

  async createItem(tenantId: string, item: Item): Promise<void> {
    await this.db.execute(
      'INSERT INTO items (tenant_id, id, code, name, unit_price, created_at) VALUES (?, ?, ?, ?, ?, ?)',
      [tenantId, item.id, item.code, item.name, item.unitPrice, new Date(item.createdAt)],
    );
  }

  async listItems(tenantId: string): Promise<Item[]> {
    const result = await this.db.execute('SELECT * FROM items WHERE tenant_id = ?', [tenantId], { fetchSize: 5000 });
    return result.rows.map((row) => ({
      id: String(row.id),
      code: String(row.code),
      name: String(row.name),
      unitPrice: String(row.unit_price),
      createdAt: (row.created_at as Date).toISOString(),
    }));
  }

  /** The order's serialized DTO (the exact GET body) and its version for compare-and-set. */
  async getOrder(tenantId: string, id: string): Promise<{ body: string; version: number } | undefined> {
    const row = (
      await this.db.execute('SELECT dto, version FROM purchase_orders WHERE tenant_id = ? AND id = ? LIMIT 1', [
        tenantId,
        id,
      ])
    ).first();
    if (!row || row.dto === null) return undefined;
    return { body: String(row.dto), version: Number(row.version) };
  }

  async createOrder(tenantId: string, dto: PurchaseOrderDTO): Promise<string> {
    const body = serializePurchaseOrder(dto);
    await this.db.execute('INSERT INTO purchase_orders (tenant_id, id, status, dto, version) VALUES (?, ?, ?, ?, 1)', [
      tenantId,
      dto.id,
      dto.status,
      body,
    ]);
    return body;
  }

  /**
   * Stores a state change and its event atomically: one conditional batch on the order's partition (the new DTO in
   * static columns, the event as an outbox row). A pointer written first lets the relay find the partition; a pointer
   * whose batch never applied leads to nothing. Returns the new body, or undefined if the version moved (a race).
   */
  async transition(
    tenantId: string,
    dto: PurchaseOrderDTO,
    expectedVersion: number,
    eventType: string,
    occurredAt: string,
  ): Promise<string | undefined> {
    const body = serializePurchaseOrder(dto);
    await this.db.execute('INSERT INTO outbox_pointers (bucket, tenant_id, order_id) VALUES (?, ?, ?)', [
      Math.floor(Date.now() / MINUTE),
      tenantId,
      dto.id,
    ]);
    const result = await this.db.batch(
      [
        {
          query:
            'UPDATE purchase_orders SET status = ?, dto = ?, version = ? WHERE tenant_id = ? AND id = ? IF version = ?',
          params: [dto.status, body, expectedVersion + 1, tenantId, dto.id, expectedVersion],
        },
        {
          query: `INSERT INTO purchase_orders (tenant_id, id, outbox_id, event_type, occurred_at, reference, payload, published)
                  VALUES (?, ?, ?, ?, ?, ?, ?, false)`,
          params: [tenantId, dto.id, newId(), eventType, occurredAt, dto.reference, body],
        },
      ],
      { prepare: true, logged: true },
    );
    return result.wasApplied() ? body : undefined;
  }

  /** Next business reference of a tenant: compare-and-set on a counter, so two validations never share one. */
  async nextReference(tenantId: string): Promise<string> {
    for (;;) {
      const row = (
        await this.db.execute('SELECT last_value FROM reference_sequences WHERE tenant_id = ?', [tenantId], {
          consistency: types.consistencies.localSerial, // see the latest compare-and-set result
        })
      ).first();
      const last = row ? BigInt(String(row.last_value)) : undefined;
      const next = (last ?? 0n) + 1n;
      const result =
        last === undefined
          ? await this.db.execute(
              'INSERT INTO reference_sequences (tenant_id, last_value) VALUES (?, ?) IF NOT EXISTS',
              [tenantId, next.toString()],
            )
          : await this.db.execute(
              'UPDATE reference_sequences SET last_value = ? WHERE tenant_id = ? IF last_value = ?',
              [next.toString(), tenantId, last.toString()],
            );
      if (result.wasApplied()) return formatReference(next);
    }
  }

  /** Orders that may hold unpublished outbox rows, from one minute bucket of pointers. */
  async pointers(bucket: number): Promise<{ tenantId: string; orderId: string }[]> {
    const result = await this.db.execute('SELECT tenant_id, order_id FROM outbox_pointers WHERE bucket = ?', [bucket]);
    return result.rows.map((row) => ({ tenantId: String(row.tenant_id), orderId: String(row.order_id) }));
  }

  async unpublished(tenantId: string, orderId: string): Promise<OutboxRow[]> {
    const result = await this.db.execute(
      'SELECT outbox_id, event_type, occurred_at, reference, payload, published FROM purchase_orders WHERE tenant_id = ? AND id = ?',
      [tenantId, orderId],
    );
    return result.rows
      .filter((row) => row.outbox_id !== null && row.published === false)
      .map((row) => ({
        tenantId,
        orderId,
        outboxId: String(row.outbox_id),
        eventType: String(row.event_type),
        occurredAt: String(row.occurred_at),
        reference: (row.reference as string | null) ?? null,
        payload: String(row.payload),
      }))
      .sort((a, b) => a.occurredAt.localeCompare(b.occurredAt));
  }

  async markPublished(row: OutboxRow): Promise<void> {
    await this.db.execute(
      'UPDATE purchase_orders SET published = true WHERE tenant_id = ? AND id = ? AND outbox_id = ?',
      [row.tenantId, row.orderId, row.outboxId],
    );
  }

  async dropPointer(bucket: number, tenantId: string, orderId: string): Promise<void> {
    await this.db.execute('DELETE FROM outbox_pointers WHERE bucket = ? AND tenant_id = ? AND order_id = ?', [
      bucket,
      tenantId,
      orderId,
    ]);
  }

  async relayProgress(relay: string): Promise<number | undefined> {
    const row = (
      await this.db.execute('SELECT oldest_open_bucket FROM outbox_relay_progress WHERE relay = ?', [relay])
    ).first();
    return row ? Number(row.oldest_open_bucket) : undefined;
  }

  async saveRelayProgress(relay: string, bucket: number): Promise<void> {
    await this.db.execute('INSERT INTO outbox_relay_progress (relay, oldest_open_bucket) VALUES (?, ?)', [
      relay,
      bucket,
    ]);
  }
}

export { MINUTE };
