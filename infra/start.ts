/**
 * `npm start`: the whole system on this machine — Kafka, Cassandra and the schema registry (downloaded from Maven
 * Central on first use, data under .local/), migrations, topics and schemas, the dev identity provider, the gateway
 * (both APIs), one router and one dispatcher. Prints a ready demo client; Ctrl-C stops everything.
 */
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { connectCassandra } from '../core/cassandra.ts';
import { loadConfig } from '../core/config.ts';
import { IntegratorStore } from '../core/integrators/integrator-store.ts';
import { createLogger } from '../core/log.ts';
import { ClientStore } from './client-store.ts';
import { repoRoot, spawnService, waitForHttp, type ServiceProcess } from './processes.ts';
import { provision } from './provision.ts';
import { ensureServers } from './servers.ts';

const local = path.join(repoRoot, '.local');
const started = Date.now();
const say = (line: string) => console.log(`[${((Date.now() - started) / 1000).toFixed(1).padStart(5)}s] ${line}`);

/** A value kept under .local/ so a second start reuses it. */
function persisted(file: string, make: () => string): string {
  const full = path.join(local, file);
  if (existsSync(full)) return readFileSync(full, 'utf8').trim();
  mkdirSync(local, { recursive: true });
  const value = make();
  writeFileSync(full, `${value}\n`, { mode: 0o600 });
  return value;
}

async function main(): Promise<void> {
  say('starting Kafka, Cassandra and the schema registry (the first start downloads about 300 MB)');
  const servers = await ensureServers({ root: local, progress: (line) => say(line) });
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    KAFKA_BROKERS: servers.kafkaBrokers.join(','),
    CASSANDRA_CONTACT_POINTS: servers.cassandraContactPoints.join(','),
    CASSANDRA_LOCAL_DC: servers.cassandraLocalDc,
    SCHEMA_REGISTRY_URL: servers.schemaRegistryUrl,
    SECRETS_KEY: process.env.SECRETS_KEY ?? persisted('secrets.key', () => randomBytes(32).toString('base64')),
    // The local stack delivers to receivers on this machine: allow http and loopback unless told otherwise.
    WEBHOOK_ALLOW_HTTP: process.env.WEBHOOK_ALLOW_HTTP ?? 'true',
    WEBHOOK_ALLOWED_CIDRS: process.env.WEBHOOK_ALLOWED_CIDRS ?? '127.0.0.1/32,::1/128',
    IDP_KEY_FILE: path.join(local, 'idp-signing-key.json'),
  };
  const config = loadConfig(env);
  const logger = createLogger('start', 'warn');

  say('applying migrations, topics and schemas');
  await provision(config, logger);

  const demo = {
    clientId: 'demo-client',
    tenantId: 'demo',
    secret: persisted('demo-client.secret', () => randomBytes(18).toString('base64url')),
  };
  const db = await connectCassandra(config);
  await new ClientStore(db).create(demo.clientId, demo.secret, demo.tenantId);
  const integrators = new IntegratorStore(db);
  await integrators.register('webhook', demo.clientId, demo.tenantId);
  await integrators.register('purchase', demo.clientId, demo.tenantId);
  await db.shutdown();

  const logs = path.join(local, 'logs');
  const services: ServiceProcess[] = [];
  const stopAll = async () => {
    say('stopping services');
    await Promise.all(services.reverse().map((service) => service.stop()));
    say('stopping servers started by this run');
    await servers.stop();
    say('stopped');
  };
  let stopping = false;
  const onSignal = () => {
    if (stopping) return;
    stopping = true;
    void stopAll().then(() => process.exit(0));
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);

  const metricsPorts: Record<string, string> = { router: '9101', dispatcher: '9102' };
  const launch = (name: string, entry: string) => {
    const serviceEnv = { ...env, METRICS_PORT: process.env.METRICS_PORT ?? metricsPorts[name] ?? '0' };
    const service = spawnService(name, entry, serviceEnv, path.join(logs, `${name}.log`));
    services.push(service);
    void service.exited.then((code) => {
      if (!stopping) say(`${name} exited (code ${code}); see ${path.join(logs, `${name}.log`)}`);
    });
    return service;
  };
  say('starting the identity provider, gateway, router and dispatcher');
  const idp = launch('identity-provider', 'infra/identity-provider-main.ts');
  const gateway = launch('gateway', 'api/main.ts');
  launch('router', 'router/main.ts');
  launch('dispatcher', 'dispatcher/main.ts');
  await waitForHttp(`${config.auth.url}/.well-known/jwks.json`, 'identity provider', 60_000, idp.exited);
  await waitForHttp(`${config.gateway.baseUrl}/ready`, 'gateway', 90_000, gateway.exited);

  const base = config.gateway.baseUrl;
  console.log(`
Core Webhooks is ready (${((Date.now() - started) / 1000).toFixed(1)} s).

  gateway (both APIs)   ${base}   OpenAPI: ${base}/CoreWebhook/openapi.json, ${base}/CorePurchase/openapi.json
  identity provider     ${config.auth.url}
  Kafka                 ${servers.kafkaBrokers.join(',')}
  Cassandra             ${servers.cassandraContactPoints.join(',')} (keyspace ${config.cassandra.keyspace})
  schema registry       ${servers.schemaRegistryUrl}
  metrics               http://127.0.0.1:9101/metrics (router), http://127.0.0.1:9102/metrics (dispatcher)
  logs                  ${logs}

Demo client (tenant "${demo.tenantId}", registered on both APIs):
  client_id=${demo.clientId}  client_secret=${demo.secret}

Get a token:
  TOKEN=$(curl -s ${config.auth.url}/oauth/token -H 'content-type: application/json' \\
    -d '{"client_id":"${demo.clientId}","client_secret":"${demo.secret}","audience":"${config.auth.audience}","grant_type":"client_credentials"}' \\
    | node -pe 'JSON.parse(require("fs").readFileSync(0)).access_token')

Then follow the walkthrough in README.md. Press Ctrl-C to stop everything.
`);
}

main().catch((error: unknown) => {
  console.error(`npm start failed: ${error instanceof Error ? error.message : String(error)}`);
  process.exit(1);
});
