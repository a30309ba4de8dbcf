import type { CassandraClient } from '../cassandra.ts';

/** An Idempotency-Key already held by an earlier request: the hash of its body and the subscription it creates. */
export interface IdempotencyClaim {
  requestHash: string;
  subscriptionId: string;
}

/** Idempotency-Key records of subscription creation, kept 24 h (table default TTL). */
export class IdempotencyStore {
  constructor(private readonly db: CassandraClient) {}

  /**
   * Claims `key` for a request that will create `subscriptionId` (compare-and-set, so of concurrent requests with one
   * key exactly one proceeds). Returns undefined when claimed, else the earlier request's claim.
   */
  async claim(
    tenantId: string,
    key: string,
    requestHash: string,
    subscriptionId: string,
  ): Promise<IdempotencyClaim | undefined> {
    const result = await this.db.execute(
      `INSERT INTO subscription_idempotency_keys (tenant_id, idempotency_key, request_hash, subscription_id)
       VALUES (?, ?, ?, ?) IF NOT EXISTS`,
      [tenantId, key, requestHash, subscriptionId],
    );
    if (result.wasApplied()) return undefined;
    const row = result.first();
    return { requestHash: String(row.request_hash), subscriptionId: String(row.subscription_id) };
  }

  /** Gives a claim up when its request failed, so a retry with the same key can succeed. */
  async release(tenantId: string, key: string, subscriptionId: string): Promise<void> {
    await this.db.execute(
      'DELETE FROM subscription_idempotency_keys WHERE tenant_id = ? AND idempotency_key = ? IF subscription_id = ?',
      [tenantId, key, subscriptionId],
    );
  }
}
