import type { CassandraClient } from '../cassandra.ts';

/** Idempotency-Key records of subscription creation, kept 24 h (table default TTL). */
export class IdempotencyStore {
  constructor(private readonly db: CassandraClient) {}

  async find(tenantId: string, key: string) {
    const row = (
      await this.db.execute(
        'SELECT request_hash, subscription_id FROM subscription_idempotency_keys WHERE tenant_id = ? AND idempotency_key = ?',
        [tenantId, key],
      )
    ).first();
    return row ? { requestHash: String(row.request_hash), subscriptionId: String(row.subscription_id) } : undefined;
  }

  async save(tenantId: string, key: string, requestHash: string, subscriptionId: string): Promise<void> {
    await this.db.execute(
      'INSERT INTO subscription_idempotency_keys (tenant_id, idempotency_key, request_hash, subscription_id) VALUES (?, ?, ?, ?)',
      [tenantId, key, requestHash, subscriptionId],
    );
  }
}
