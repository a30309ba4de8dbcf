import type { CassandraClient } from '../cassandra.ts';

export type ApiName = 'webhook' | 'purchase';
export const API_NAMES: readonly ApiName[] = ['webhook', 'purchase'];

/** Registration of clients as integrators, per API, each bound to one tenant. */
export class IntegratorStore {
  constructor(private readonly db: CassandraClient) {}

  async tenantOf(api: ApiName, clientId: string): Promise<string | undefined> {
    const row = (
      await this.db.execute('SELECT tenant_id FROM integrators WHERE api = ? AND client_id = ?', [api, clientId])
    ).first();
    return row ? String(row.tenant_id) : undefined;
  }

  async register(api: ApiName, clientId: string, tenantId: string): Promise<void> {
    await this.db.execute('INSERT INTO integrators (api, client_id, tenant_id, registered_at) VALUES (?, ?, ?, ?)', [
      api,
      clientId,
      tenantId,
      new Date(),
    ]);
  }

  async revoke(api: ApiName, clientId: string): Promise<boolean> {
    const existed = (await this.tenantOf(api, clientId)) !== undefined;
    await this.db.execute('DELETE FROM integrators WHERE api = ? AND client_id = ?', [api, clientId]);
    return existed;
  }

  async list(): Promise<{ api: ApiName; clientId: string; tenantId: string; registeredAt: Date }[]> {
    const lists = await Promise.all(
      API_NAMES.map((api) => this.db.execute('SELECT * FROM integrators WHERE api = ?', [api])),
    );
    return lists.flatMap((result) =>
      result.rows.map((row) => ({
        api: row.api as ApiName,
        clientId: String(row.client_id),
        tenantId: String(row.tenant_id),
        registeredAt: row.registered_at as Date,
      })),
    );
  }
}
