/**
 * Operator CLI: `npm run admin -- <command>`, JSON on stdout (DESIGN.md §6).
 *   clients create --tenant <t> [--client-id <id>] [--client-secret <s>]
 *   integrators register --api webhook|purchase --client-id <id> --tenant <t> [--access read|read-write]
 *   integrators revoke --api webhook|purchase --client-id <id>
 *   integrators list
 *   migrate | topics apply | schemas register
 */
import { randomBytes } from 'node:crypto';
import { parseArgs } from 'node:util';
import { connectCassandra } from '../core/cassandra.ts';
import { loadConfig, type Config } from '../core/config.ts';
import {
  ACCESS_LEVELS,
  API_NAMES,
  IntegratorStore,
  type Access,
  type ApiName,
} from '../core/integrators/integrator-store.ts';
import { createLogger } from '../core/log.ts';
import { ClientStore } from './client-store.ts';
import { applyMigrations, applyTopicLayout, registerSchemas } from './provision.ts';

class UsageError extends Error {}

const USAGE = `usage: npm run admin -- <command>
  clients create --tenant <t> [--client-id <id>] [--client-secret <s>]
  integrators register --api webhook|purchase --client-id <id> --tenant <t> [--access read|read-write]
  integrators revoke --api webhook|purchase --client-id <id>
  integrators list
  migrate
  topics apply
  schemas register`;

async function withDb<T>(config: Config, work: (db: Awaited<ReturnType<typeof connectCassandra>>) => Promise<T>) {
  const db = await connectCassandra(config);
  try {
    return await work(db);
  } finally {
    await db.shutdown();
  }
}

function required(values: Record<string, string | undefined>, name: string): string {
  const value = values[name];
  if (!value) throw new UsageError(`--${name} is required`);
  return value;
}

function apiOf(values: Record<string, string | undefined>): ApiName {
  const api = required(values, 'api');
  if (!API_NAMES.includes(api as ApiName)) throw new UsageError(`--api must be one of ${API_NAMES.join(', ')}`);
  return api as ApiName;
}

/** `--access`: what the integrator may do on the API; read-write when not given. */
function accessOption(values: Record<string, string | undefined>): Access {
  const access = values.access ?? 'read-write';
  if (!ACCESS_LEVELS.includes(access as Access)) {
    throw new UsageError(`--access must be one of ${ACCESS_LEVELS.join(', ')}`);
  }
  return access as Access;
}

export async function runAdmin(argv: string[], config: Config): Promise<unknown> {
  const { positionals, values } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      tenant: { type: 'string' },
      'client-id': { type: 'string' },
      'client-secret': { type: 'string' },
      api: { type: 'string' },
      access: { type: 'string' },
    },
  });
  const command = positionals.join(' ');
  const logger = createLogger('admin', 'warn');
  switch (command) {
    case 'clients create': {
      const tenantId = required(values, 'tenant');
      const clientId = values['client-id'] ?? `client-${randomBytes(6).toString('hex')}`;
      const clientSecret = values['client-secret'] ?? randomBytes(24).toString('base64url');
      await withDb(config, (db) => new ClientStore(db).create(clientId, clientSecret, tenantId));
      return { client_id: clientId, client_secret: clientSecret, tenant_id: tenantId };
    }
    case 'integrators register': {
      const api = apiOf(values);
      const clientId = required(values, 'client-id');
      const tenantId = required(values, 'tenant');
      const access = accessOption(values);
      await withDb(config, (db) => new IntegratorStore(db).register(api, clientId, tenantId, access));
      return { api, client_id: clientId, tenant_id: tenantId, access, registered: true };
    }
    case 'integrators revoke': {
      const api = apiOf(values);
      const clientId = required(values, 'client-id');
      const revoked = await withDb(config, (db) => new IntegratorStore(db).revoke(api, clientId));
      return { api, client_id: clientId, revoked };
    }
    case 'integrators list':
      return {
        items: (await withDb(config, (db) => new IntegratorStore(db).list())).map((entry) => ({
          api: entry.api,
          client_id: entry.clientId,
          tenant_id: entry.tenantId,
          access: entry.access,
          registered_at: entry.registeredAt.toISOString(),
        })),
      };
    case 'migrate':
      return applyMigrations(config);
    case 'topics apply':
      return applyTopicLayout(config, logger);
    case 'schemas register':
      return { registered: await registerSchemas(config) };
    default:
      throw new UsageError(command ? `unknown command "${command}"` : 'a command is required');
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  try {
    const result = await runAdmin(process.argv.slice(2), loadConfig(process.env));
    process.stdout.write(`${JSON.stringify(result, null, 2)}\n`);
  } catch (error) {
    const usage = error instanceof UsageError;
    process.stderr.write(`${JSON.stringify({ error: (error as Error).message })}\n${usage ? `${USAGE}\n` : ''}`);
    process.exitCode = usage ? 2 : 1;
  }
}
