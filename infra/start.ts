/**
 * `npm start`: the whole system on this machine — Kafka, Cassandra and the schema registry (downloaded from Maven
 * Central on first use, data under .local/), migrations, topics and schemas, the dev identity provider, the gateway
 * (both APIs), one router and one dispatcher (`--dispatchers N` or START_DISPATCHERS=N for more). Every service
 * process is supervised: restarted with backoff when it exits unasked (infra/supervisor.ts). Prints a ready demo client;
 * Ctrl-C stops everything. `--cluster` runs it on the local three-broker, three-node cluster (infra/servers/cluster.ts)
 * with replication factor 3, two replicas in sync for acks=all, and LOCAL_QUORUM.
 */
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { connectCassandra } from '../core/cassandra.ts';
import { loadConfig } from '../core/config.ts';
import { IntegratorStore } from '../core/integrators/integrator-store.ts';
import { createLogger } from '../core/log.ts';
import { ClientStore } from './client-store.ts';
import { repoRoot, superviseService, waitForHttp } from './processes.ts';
import { provision } from './provision.ts';
import { CLUSTER_SERVICE_ENV } from './servers/cluster.ts';
import { endpointsEnv } from './servers/util.ts';
import { warmUpMs } from './servers/warm-up.ts';
import { ensureCluster, ensureServers } from './servers.ts';
import type { Supervisor } from './supervisor.ts';

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

/** How many dispatchers to run: `--dispatchers N` (or `--dispatchers=N`), else START_DISPATCHERS, else 1. */
function dispatcherCount(args: string[], env: NodeJS.ProcessEnv): number {
  const index = args.findIndex((arg) => arg === '--dispatchers' || arg.startsWith('--dispatchers='));
  const text = index < 0 ? env.START_DISPATCHERS : (args[index]!.split('=')[1] ?? args[index + 1]);
  const count = Number(text ?? '1');
  if (!Number.isInteger(count) || count < 1 || count > 32) {
    throw new Error(`--dispatchers / START_DISPATCHERS must be a whole number from 1 to 32, not "${text}"`);
  }
  return count;
}

const supervisors: Supervisor[] = [];

async function main(): Promise<void> {
  const dispatchers = dispatcherCount(process.argv.slice(2), process.env);
  // The router's metrics, health and readiness on METRICS_PORT (9101 unless set), dispatcher k on the k-th port after
  // it, the gateway's on the port after the last dispatcher; METRICS_PORT=0 turns them all off.
  const firstMetricsPort = Number(process.env.METRICS_PORT ?? '9101');
  if (!Number.isInteger(firstMetricsPort) || firstMetricsPort < 0 || firstMetricsPort + dispatchers + 1 > 65535) {
    throw new Error(`METRICS_PORT must be a port number (0 for off), not "${process.env.METRICS_PORT}"`);
  }
  const cluster = process.argv.slice(2).includes('--cluster');
  say(
    `starting ${cluster ? 'the cluster: 3 Kafka brokers, 3 Cassandra nodes' : 'Kafka, Cassandra'} and the schema registry` +
      ' (the first start downloads about 300 MB)',
  );
  const progress = (line: string) => say(line);
  const servers = cluster
    ? await ensureCluster({ root: local, progress, warmUpMs: warmUpMs(process.env.SERVERS_WARM_UP) })
    : await ensureServers({ root: local, progress });
  const env: NodeJS.ProcessEnv = {
    // The cluster's replication, unless the environment sets its own.
    ...(cluster ? CLUSTER_SERVICE_ENV : {}),
    ...process.env,
    ...endpointsEnv(servers),
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
  const stopAll = async () => {
    say('stopping services');
    await Promise.all([...supervisors].reverse().map((supervisor) => supervisor.stop()));
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

  const metricsPort = (offset: number) => (firstMetricsPort === 0 ? 0 : firstMetricsPort + offset);
  const launch = (name: string, entry: string, port = 0) => {
    const logFile = path.join(logs, `${name}.log`);
    supervisors.push(
      superviseService(name, entry, { ...env, METRICS_PORT: String(port) }, logFile, {
        report: (line) => say(`${line}; log: ${logFile}`),
      }),
    );
  };
  const dispatcherNames = Array.from({ length: dispatchers }, (_, k) =>
    dispatchers === 1 ? 'dispatcher' : `dispatcher-${k + 1}`,
  );
  const probes = [
    { name: 'router', port: metricsPort(0) },
    ...dispatcherNames.map((name, k) => ({ name, port: metricsPort(k + 1) })),
  ];
  say(`starting the identity provider, gateway, router and ${dispatchers} dispatcher${dispatchers === 1 ? '' : 's'}`);
  launch('identity-provider', 'infra/identity-provider-main.ts');
  launch('gateway', 'api/main.ts', metricsPort(dispatchers + 1));
  for (const probe of probes) launch(probe.name, `${probe.name.replace(/-\d+$/, '')}/main.ts`, probe.port);
  // Supervised processes that fail at start are restarted, so these waits only give up at their time limit.
  await waitForHttp(`${config.auth.url}/health`, 'identity provider', 60_000);
  await waitForHttp(`${config.gateway.baseUrl}/ready`, 'gateway', 90_000);
  for (const probe of probes) {
    if (probe.port !== 0) await waitForHttp(`http://127.0.0.1:${probe.port}/ready`, probe.name, 90_000);
  }
  const endpoints = (probe: { name: string; port: number }) =>
    probe.port === 0
      ? `${probe.name.padEnd(21)} metrics, /health and /ready off (METRICS_PORT=0)`
      : `${probe.name.padEnd(21)} http://127.0.0.1:${probe.port}/metrics, /health, /ready`;

  const base = config.gateway.baseUrl;
  console.log(`
Core Webhooks is ready (${((Date.now() - started) / 1000).toFixed(1)} s).

  gateway (both APIs)   ${base}   /health, /ready, OpenAPI: ${base}/CoreWebhook/openapi.json, ${base}/CorePurchase/openapi.json
  operator console      ${base}/console/   (sign in with the demo client below)
  identity provider     ${config.auth.url}   /health
  Kafka                 ${servers.kafkaBrokers.join(',')}
  Cassandra             ${servers.cassandraContactPoints.join(',')} (keyspace ${config.cassandra.keyspace})
  schema registry       ${servers.schemaRegistryUrl}
${[...probes, { name: 'gateway', port: metricsPort(dispatchers + 1) }].map((probe) => `  ${endpoints(probe)}`).join('\n')}
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

main().catch(async (error: unknown) => {
  console.error(`npm start failed: ${error instanceof Error ? error.message : String(error)}`);
  await Promise.all(supervisors.map((supervisor) => supervisor.stop()));
  process.exit(1);
});
