import type { CassandraClient } from '../cassandra.ts';

export type ApiName = 'webhook' | 'purchase';
export const API_NAMES: readonly ApiName[] = ['webhook', 'purchase'];

/** What a registered client may do on its API: only read (GET, HEAD), or every operation. */
export type Access = 'read' | 'read-write';
export const ACCESS_LEVELS: readonly Access[] = ['read', 'read-write'];

/** A client's registration on one API: the tenant it is bound to and what it may do there. */
export interface Registration {
  tenantId: string;
  access: Access;
}

/** Registration of clients as integrators, per API, each bound to one tenant with an access level. */
export class IntegratorStore {
  constructor(private readonly db: CassandraClient) {}

  async registrationOf(api: ApiName, clientId: string): Promise<Registration | undefined> {
    const row = (
      await this.db.execute('SELECT tenant_id, access FROM integrators WHERE api = ? AND client_id = ?', [
        api,
        clientId,
      ])
    ).first();
    return row ? { tenantId: String(row.tenant_id), access: accessOf(row.access) } : undefined;
  }

  async register(api: ApiName, clientId: string, tenantId: string, access: Access = 'read-write'): Promise<void> {
    await this.db.execute(
      'INSERT INTO integrators (api, client_id, tenant_id, access, registered_at) VALUES (?, ?, ?, ?, ?)',
      [api, clientId, tenantId, access, new Date()],
    );
  }

  async revoke(api: ApiName, clientId: string): Promise<boolean> {
    const existed = (await this.registrationOf(api, clientId)) !== undefined;
    await this.db.execute('DELETE FROM integrators WHERE api = ? AND client_id = ?', [api, clientId]);
    return existed;
  }

  async list(): Promise<(Registration & { api: ApiName; clientId: string; registeredAt: Date })[]> {
    const lists = await Promise.all(
      API_NAMES.map((api) => this.db.execute('SELECT * FROM integrators WHERE api = ?', [api])),
    );
    return lists.flatMap((result) =>
      result.rows.map((row) => ({
        api: row.api as ApiName,
        clientId: String(row.client_id),
        tenantId: String(row.tenant_id),
        access: accessOf(row.access),
        registeredAt: row.registered_at as Date,
      })),
    );
  }
}

/**
 * A registration made before access levels existed (null) keeps the full access it had; a value this code did not
 * write grants the least.
 */
function accessOf(stored: unknown): Access {
  return stored === null || stored === undefined || stored === 'read-write' ? 'read-write' : 'read';
}
