import { queryPage, type CassandraClient } from '../cassandra.ts';
import { open, seal, type SecretKeys } from '../secret-box.ts';
import type { Filter } from './filter.ts';
import type { Subscription, SubscriptionSecrets } from './subscription.ts';

/** The columns a subscription's owner sets (create and PATCH), in the order of `ownerValues`. */
const OWNER_COLUMNS = [
  'url',
  'event_types',
  'authentication_mode',
  'signature_header_name',
  'api_key_header_name',
  'oauth2_token_url',
  'oauth2_client_id',
  'oauth2_audience',
  'oauth2_scope',
  'secrets',
  'secrets_key_id',
  'supersede_pending_deliveries',
  'description',
  'max_deliveries_per_second',
  'filter',
  'ordering',
];

/** A failure day counted: the counter now, whether the subscription is disabled, and whether this count disabled it. */
export interface FailureDayResult {
  failureDays: number;
  disabled: boolean;
  disabledNow: boolean;
}

/** Cassandra store of subscriptions; one partition per tenant. Secrets are sealed with AES-256-GCM. */
export class SubscriptionStore {
  constructor(
    private readonly db: CassandraClient,
    private readonly keys: SecretKeys,
  ) {}

  /** Every subscription of a tenant (one partition read). */
  async listByTenant(tenantId: string): Promise<Subscription[]> {
    const result = await this.db.execute('SELECT * FROM subscriptions WHERE tenant_id = ?', [tenantId], {
      fetchSize: 1000,
    });
    // Every page: a tenant may have more subscriptions than one page holds.
    const subscriptions: Subscription[] = [];
    for await (const row of result) subscriptions.push(this.fromRow(row));
    return subscriptions;
  }

  /** A page of a tenant's subscriptions, for GET /Subscriptions. */
  async pageByTenant(tenantId: string, limit: number, cursor: string | undefined) {
    const page = await queryPage(this.db, 'SELECT * FROM subscriptions WHERE tenant_id = ?', [tenantId], limit, cursor);
    return { items: page.rows.map((row) => this.fromRow(row)), nextCursor: page.nextCursor };
  }

  async get(tenantId: string, id: string): Promise<Subscription | undefined> {
    const result = await this.db.execute('SELECT * FROM subscriptions WHERE tenant_id = ? AND id = ?', [tenantId, id]);
    const row = result.first();
    return row ? this.fromRow(row) : undefined;
  }

  /** Creates a subscription. */
  async save(subscription: Subscription): Promise<void> {
    await this.db.execute(
      `INSERT INTO subscriptions (tenant_id, id, ${OWNER_COLUMNS.join(', ')}, status, failure_days,
        last_failure_window, created_at, updated_at) VALUES (?, ?, ${OWNER_COLUMNS.map(() => '?').join(', ')}, ?, ?, ?, ?, ?)`,
      [
        subscription.tenantId,
        subscription.id,
        ...this.ownerValues(subscription),
        subscription.status,
        subscription.failureDays,
        subscription.lastFailureWindow,
        subscription.createdAt,
        subscription.updatedAt,
      ],
    );
  }

  /**
   * Writes the owner's fields of an existing subscription and nothing else: status and failure days belong to the
   * status endpoint and the dispatcher, so a PATCH never rolls them back. False when the subscription is gone
   * (deleted meanwhile): a row is never brought back by an update.
   */
  async update(subscription: Subscription): Promise<boolean> {
    const result = await this.db.execute(
      `UPDATE subscriptions SET ${OWNER_COLUMNS.map((column) => `${column} = ?`).join(', ')}, updated_at = ?
       WHERE tenant_id = ? AND id = ? IF EXISTS`,
      [...this.ownerValues(subscription), subscription.updatedAt, subscription.tenantId, subscription.id],
    );
    return result.wasApplied();
  }

  /** Values of OWNER_COLUMNS, the secrets sealed to this row. */
  private ownerValues(subscription: Subscription): unknown[] {
    const { keyId, sealed } = seal(
      this.keys,
      JSON.stringify(subscription.secrets),
      `${subscription.tenantId}/${subscription.id}`,
    );
    return [
      subscription.url,
      subscription.eventTypes,
      subscription.authenticationMode,
      subscription.signatureHeaderName,
      subscription.apiKeyHeaderName,
      subscription.oauth2?.tokenUrl ?? null,
      subscription.oauth2?.clientId ?? null,
      subscription.oauth2?.audience ?? null,
      subscription.oauth2?.scope ?? null,
      sealed,
      keyId,
      subscription.supersedePendingDeliveries,
      subscription.description,
      subscription.maxDeliveriesPerSecond,
      subscription.filter === null ? null : JSON.stringify(subscription.filter),
      subscription.ordering,
    ];
  }

  async delete(tenantId: string, id: string): Promise<void> {
    await this.db.execute('DELETE FROM subscriptions WHERE tenant_id = ? AND id = ?', [tenantId, id]);
  }

  /**
   * Sets the status; enabling resets the failure-day counter (spec: re-enable resets it to zero). False when the
   * subscription is gone.
   */
  async setStatus(tenantId: string, id: string, status: 'enabled' | 'disabled', now: Date): Promise<boolean> {
    const result = await this.db.execute(
      status === 'enabled'
        ? 'UPDATE subscriptions SET status = ?, failure_days = 0, last_failure_window = null, updated_at = ? WHERE tenant_id = ? AND id = ? IF EXISTS'
        : 'UPDATE subscriptions SET status = ?, updated_at = ? WHERE tenant_id = ? AND id = ? IF EXISTS',
      [status, now, tenantId, id],
    );
    return result.wasApplied();
  }

  /** Any successful delivery resets the counter; skipped when it is already zero so the hot path stays a read. */
  async resetFailureDays(tenantId: string, id: string): Promise<void> {
    await this.db.execute(
      'UPDATE subscriptions SET failure_days = 0, last_failure_window = null WHERE tenant_id = ? AND id = ? IF EXISTS',
      [tenantId, id],
    );
  }

  /**
   * Counts the failure-day window `windowStart` once (compare-and-set, so concurrent abandonments in one window count
   * once) and disables the subscription when the counter reaches `disableAt`. Returns the new state; `disabledNow` is
   * true for the one call whose write disabled it.
   */
  async recordFailureDay(
    tenantId: string,
    id: string,
    windowStart: number,
    disableAt: number,
  ): Promise<FailureDayResult | undefined> {
    for (;;) {
      const current = await this.get(tenantId, id);
      if (!current) return undefined;
      if (current.lastFailureWindow !== null && current.lastFailureWindow >= windowStart) {
        return { failureDays: current.failureDays, disabled: current.status === 'disabled', disabledNow: false };
      }
      const failureDays = current.failureDays + 1;
      const status = failureDays >= disableAt ? 'disabled' : current.status;
      const result = await this.db.execute(
        `UPDATE subscriptions SET failure_days = ?, last_failure_window = ?, status = ?
         WHERE tenant_id = ? AND id = ? IF last_failure_window = ?`,
        [failureDays, windowStart, status, tenantId, id, current.lastFailureWindow],
      );
      if (result.wasApplied()) {
        const disabled = status === 'disabled';
        return { failureDays, disabled, disabledNow: disabled && current.status !== 'disabled' };
      }
    }
  }

  /**
   * Moves the subscription's health from `expected` (its failingSince as read: null while healthy) to `next`
   * (compare-and-set): false when it moved meanwhile, or the subscription is gone (the status condition: a deleted
   * row's columns read null too, and the write would bring a row of health columns only back).
   */
  async setHealth(
    tenantId: string,
    id: string,
    expected: Date | null,
    next: { failingSince: Date | null; announced: boolean; announcedAt: Date | null },
  ): Promise<boolean> {
    const result = await this.db.execute(
      `UPDATE subscriptions SET failing_since = ?, failing_announced = ?, failing_announced_at = ?
       WHERE tenant_id = ? AND id = ? IF status IN ('enabled', 'disabled') AND failing_since = ?`,
      [next.failingSince, next.announced, next.announcedAt, tenantId, id, expected],
    );
    return result.wasApplied();
  }

  private fromRow(row: Record<string, unknown>): Subscription {
    const tenantId = String(row.tenant_id);
    const id = String(row.id);
    const sealed = row.secrets as Buffer | null;
    let secrets: SubscriptionSecrets = {};
    let unreadableSecrets: string | undefined;
    try {
      if (sealed) {
        secrets = JSON.parse(
          open(this.keys, String(row.secrets_key_id), sealed, `${tenantId}/${id}`),
        ) as SubscriptionSecrets;
      }
    } catch (error) {
      // One damaged row (or a key dropped too early) must not make the tenant's whole list unreadable.
      unreadableSecrets = `key ${String(row.secrets_key_id)}: ${(error as Error).message}`;
    }
    const lastWindow = row.last_failure_window as { toNumber(): number } | null;
    return {
      tenantId,
      id,
      url: String(row.url),
      eventTypes: (row.event_types as string[] | null) ?? [],
      authenticationMode: row.authentication_mode as Subscription['authenticationMode'],
      signatureHeaderName: String(row.signature_header_name),
      apiKeyHeaderName: (row.api_key_header_name as string | null) ?? null,
      oauth2: row.oauth2_token_url
        ? {
            tokenUrl: String(row.oauth2_token_url),
            clientId: String(row.oauth2_client_id),
            audience: (row.oauth2_audience as string | null) ?? null,
            scope: (row.oauth2_scope as string | null) ?? null,
          }
        : null,
      secrets,
      ...(unreadableSecrets === undefined ? {} : { unreadableSecrets }),
      supersedePendingDeliveries: row.supersede_pending_deliveries === true,
      description: (row.description as string | null) ?? null,
      // Null (unlimited) for rows written before the column existed (migration 007).
      maxDeliveriesPerSecond: typeof row.max_deliveries_per_second === 'number' ? row.max_deliveries_per_second : null,
      // Null (every event of its types) for rows written before the column existed (migration 012).
      filter: typeof row.filter === 'string' ? (JSON.parse(row.filter) as Filter) : null,
      // 'none' for rows written before the column existed (migration 013).
      ordering: row.ordering === 'entity' ? 'entity' : 'none',
      status: row.status === 'disabled' ? 'disabled' : 'enabled',
      failureDays: Number(row.failure_days ?? 0),
      lastFailureWindow: lastWindow ? lastWindow.toNumber() : null,
      // Null (healthy) for rows written before the columns existed (migration 014).
      failingSince: (row.failing_since as Date | null) ?? null,
      failingAnnounced: row.failing_announced === true,
      failingAnnouncedAt: (row.failing_announced_at as Date | null) ?? null,
      createdAt: row.created_at as Date,
      updatedAt: row.updated_at as Date,
    };
  }
}
