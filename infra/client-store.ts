import type { CassandraClient } from '../core/cassandra.ts';
import { hashClientSecret, verifyClientSecret, type ClientDirectory } from './identity-provider.ts';

/** Clients of the dev identity provider, kept in Cassandra so every process of the local stack sees them. */
export class ClientStore implements ClientDirectory {
  constructor(private readonly db: CassandraClient) {}

  async create(clientId: string, clientSecret: string, tenantId: string): Promise<void> {
    await this.db.execute(
      'INSERT INTO dev_idp_clients (client_id, secret_hash, tenant_id, created_at) VALUES (?, ?, ?, ?)',
      [clientId, hashClientSecret(clientSecret), tenantId, new Date()],
    );
  }

  async verify(clientId: string, clientSecret: string): Promise<{ tenantId: string } | undefined> {
    const row = (
      await this.db.execute('SELECT secret_hash, tenant_id FROM dev_idp_clients WHERE client_id = ?', [clientId])
    ).first();
    if (!row || !verifyClientSecret(clientSecret, String(row.secret_hash))) return undefined;
    return { tenantId: String(row.tenant_id) };
  }
}
