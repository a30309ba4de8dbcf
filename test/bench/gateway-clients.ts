// What the benches that call the gateway share: the dev identity provider with registered clients and their tokens, a
// keep-alive HTTP client, and latency summaries.
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { Pool } from 'undici';
import type { CassandraClient } from '../../core/cassandra.ts';
import { IntegratorStore, type ApiName } from '../../core/integrators/integrator-store.ts';
import { ClientStore } from '../../infra/client-store.ts';
import { buildIdentityProvider, loadOrCreateSigningKey } from '../../infra/identity-provider.ts';
import { freePort, repoRoot } from '../../infra/processes.ts';

export const percentile = (sorted: number[], p: number) =>
  sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))] ?? NaN;

/** "p50 4 ms, p99 31 ms, max 40 ms", with `digits` decimals, and the count when `counted`. */
export function latencySummary(figures: number[], digits = 0, counted = false): string {
  const sorted = [...figures].sort((a, b) => a - b);
  const at = (value: number) => value.toFixed(digits);
  return (
    `p50 ${at(percentile(sorted, 0.5))} ms, p99 ${at(percentile(sorted, 0.99))} ms, max ${at(sorted.at(-1) ?? NaN)} ms` +
    (counted ? ` (${sorted.length})` : '')
  );
}

/** The dev identity provider in this process on a free port, whose clients are made here (`tokenFor`). */
export async function benchIdentityProvider(db: CassandraClient) {
  const url = `http://127.0.0.1:${await freePort()}`;
  const clients = new ClientStore(db);
  const integrators = new IntegratorStore(db);
  const idp = buildIdentityProvider({
    issuer: `${url}/`,
    key: await loadOrCreateSigningKey(path.join(repoRoot, '.local', 'bench-idp-key.json')),
    clients,
    defaultAudience: 'core-api',
  });
  await idp.listen({ host: '127.0.0.1', port: Number(new URL(url).port) });
  return {
    url,
    /** A token of a new client `clientId` of `tenantId`, registered as integrator on `apis`. */
    async tokenFor(clientId: string, tenantId: string, apis: ApiName[]): Promise<string> {
      const clientSecret = randomBytes(12).toString('hex');
      await clients.create(clientId, clientSecret, tenantId);
      for (const api of apis) await integrators.register(api, clientId, tenantId);
      const response = await fetch(`${url}/oauth/token`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          client_id: clientId,
          client_secret: clientSecret,
          audience: 'core-api',
          grant_type: 'client_credentials',
        }),
      });
      return ((await response.json()) as { access_token: string }).access_token;
    },
    close: () => idp.close(),
  };
}

/**
 * Bench HTTP clients of the gateway: keep-alive connections, one per request in flight, through undici's request API.
 * They are load, not the system measured, and share the machine with it: global fetch cost a bench about 0.6 ms of CPU
 * per validation, as much as the gateway itself.
 */
export class GatewayClients {
  private readonly pools: Pool[] = [];

  constructor(
    private readonly base: string,
    private readonly connections: number,
  ) {}

  /** A caller with `token`: answers the status and the body's text. */
  as(token: string) {
    const connections = new Pool(this.base, { connections: this.connections, pipelining: 1 });
    this.pools.push(connections);
    const authorization = `Bearer ${token}`;
    return async (method: 'POST' | 'PATCH', route: string, body?: unknown) => {
      const answer = await connections.request({
        method,
        path: route,
        headers: body === undefined ? { authorization } : { authorization, 'content-type': 'application/json' },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      const text = await answer.body.text();
      return { status: answer.statusCode, text, json: <T>() => JSON.parse(text) as T };
    };
  }

  async close(): Promise<void> {
    await Promise.all(this.pools.map((pool) => pool.close()));
  }
}
