// Helpers for integration and end-to-end tests: the dev identity provider in-process, real HTTP receivers on
// 127.0.0.1, the services as processes, and waitFor instead of sleeps.
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { inject } from 'vitest';
import { connectCassandra, type CassandraClient } from '../../core/cassandra.ts';
import { loadConfig } from '../../core/config.ts';
import { IntegratorStore, type ApiName } from '../../core/integrators/integrator-store.ts';
import { ClientStore } from '../../infra/client-store.ts';
import { buildIdentityProvider, loadOrCreateSigningKey } from '../../infra/identity-provider.ts';
import { freePort, repoRoot, spawnService, waitForHttp, type ServiceProcess } from '../../infra/processes.ts';

export { freePort };

export const testEnv = () => inject('testEnv');

/** Polls `probe` until it returns a value other than undefined/false. */
export async function waitFor<T>(
  probe: () => Promise<T | undefined | false> | T | undefined | false,
  what: string,
  timeoutMs = 30_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  while (Date.now() < deadline) {
    try {
      const value = await probe();
      if (value !== undefined && value !== false) return value;
    } catch (error) {
      lastError = error;
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${lastError ? `: ${String(lastError)}` : ''}`);
}

/** The dev identity provider on a random port, with helpers to make registered clients and tokens. */
export async function startIdentityProvider(env: Record<string, string>) {
  const config = loadConfig(env);
  const db: CassandraClient = await connectCassandra(config);
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const clients = new ClientStore(db);
  const integrators = new IntegratorStore(db);
  const app = buildIdentityProvider({
    issuer: `${url}/`,
    key: await loadOrCreateSigningKey(path.join(repoRoot, '.local', 'test-idp-key.json')),
    clients,
    defaultAudience: 'core-api',
  });
  await app.listen({ host: '127.0.0.1', port });
  return {
    url,
    integrators,
    /** A client of `tenantId`, registered as integrator on `apis`. */
    async client(tenantId: string, apis: ApiName[] = ['webhook', 'purchase']) {
      const clientId = `client-${randomBytes(4).toString('hex')}`;
      const clientSecret = randomBytes(12).toString('hex');
      await clients.create(clientId, clientSecret, tenantId);
      for (const api of apis) await integrators.register(api, clientId, tenantId);
      return { clientId, clientSecret };
    },
    async token(client: { clientId: string; clientSecret: string }, audience = 'core-api'): Promise<string> {
      const response = await fetch(`${url}/oauth/token`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          client_id: client.clientId,
          client_secret: client.clientSecret,
          audience,
          grant_type: 'client_credentials',
        }),
      });
      const body = (await response.json()) as { access_token: string };
      return body.access_token;
    },
    async close() {
      await app.close();
      await db.shutdown();
    },
  };
}

export interface ReceivedRequest {
  url: string;
  headers: IncomingHttpHeaders;
  body: Buffer;
  at: number;
}

/** A real HTTP receiver on 127.0.0.1 that records every request and answers with `respond` (default 204). */
export async function startReceiver(
  respond: (request: ReceivedRequest) => number | Promise<number> = () => 204,
): Promise<{ url: string; received: ReceivedRequest[]; close(): Promise<void>; server: Server }> {
  const received: ReceivedRequest[] = [];
  const server = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      const entry = { url: request.url ?? '', headers: request.headers, body: Buffer.concat(chunks), at: Date.now() };
      received.push(entry);
      void Promise.resolve(respond(entry)).then((status) => response.writeHead(status).end('ignored body'));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/hooks`,
    received,
    server,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

/** Starts service `name` from `entry` (api/main.ts, ...) with `env`, its output appended to `logFile`. */
export type ServiceLauncher = (
  name: string,
  entry: string,
  env: Record<string, string>,
  logFile: string,
) => ServiceProcess;

/** The gateway, router and dispatcher as separate processes on the test's keyspace and topics. */
export async function startServices(
  env: Record<string, string>,
  names: ('gateway' | 'router' | 'dispatcher')[],
  perService: Partial<Record<'gateway' | 'router' | 'dispatcher', Record<string, string>>> = {},
  /** Variables of one process by its position in `names` (e.g. two dispatchers with their own METRICS_PORT). */
  perInstance: Record<string, string>[] = [],
  /** How a service is run: a Node process by default; given only the variables the test sets (not this process's). */
  launch: ServiceLauncher = (name, entry, serviceEnv, logFile) =>
    spawnService(name, entry, { ...process.env, ...serviceEnv }, logFile),
) {
  const entries = { gateway: 'api/main.ts', router: 'router/main.ts', dispatcher: 'dispatcher/main.ts' };
  const logs = path.join(repoRoot, '.local', 'logs', 'tests');
  let stopping = false;
  const services: ServiceProcess[] = names.map((name, index) => {
    // A second process of a service (two dispatchers in one group) gets its own log file.
    const nth = names.slice(0, index).filter((other) => other === name).length;
    const logFile = path.join(logs, `${name}${nth > 0 ? `-${nth + 1}` : ''}-${env.CASSANDRA_KEYSPACE}.log`);
    const service = launch(name, entries[name], { ...env, ...perService[name], ...perInstance[index] }, logFile);
    // A service that dies unasked (at start: a port taken, a bad setting) otherwise shows only as timeouts later.
    void service.exited.then((code) => {
      if (stopping) return;
      const tail = readFileSync(logFile, 'utf8').split('\n').slice(-15).join('\n');
      console.error(`${name} (pid ${service.child.pid}) exited unasked, code ${code}; the end of ${logFile}:\n${tail}`);
    });
    return service;
  });
  if (names.includes('gateway')) {
    const gateway = services[names.indexOf('gateway')]!;
    await waitForHttp(`${env.GATEWAY_BASE_URL}/ready`, 'gateway', 60_000, gateway.exited);
  }
  return {
    services,
    stop: () => {
      stopping = true;
      return Promise.all(services.map((service) => service.stop()));
    },
  };
}
