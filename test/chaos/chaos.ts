/**
 * `npm run chaos [-- --only <fault>] [--rate 40] [--seconds 20] [--kafka-down 15] [--cassandra-freeze 20] [--json F]`
 * `npm run chaos -- --production-shape [--only services-roll] …` (the cluster's shape of services on the single servers)
 * `npm run chaos -- --cluster [--only <fault>] [--broker-down 30] [--cassandra-freeze 60] …`
 * Faults against the real stack under steady load. On its own keyspace and topic prefix (provisioned here, removed
 * afterwards) it runs the gateway, the router and two dispatchers as supervised processes (infra/processes.ts
 * superviseService, as `npm start` does), two receivers with one Hmac subscription each, and validates purchase
 * orders through the gateway at a steady rate. Each fault gets its own phase: load for --seconds (longer when the fault
 * lasts longer), the fault in the middle, then the wait for every delivery. Faults:
 *   none        baseline
 *   dispatcher  kill -9 of one of the two dispatchers (its supervisor restarts it)
 *   router      kill -9 of the router (its supervisor restarts it)
 *   gateway     kill -9 of the gateway amid validations (its supervisor restarts it)
 *   kafka       kill -9 of the shared local broker, restarted --kafka-down s later by infra/servers.ts
 *   cassandra   SIGSTOP of the shared local Cassandra for --cassandra-freeze s, then SIGCONT
 *   registry    kill -9 of the shared local schema registry, restarted by infra/servers.ts
 *   services-roll  with --production-shape (three dispatchers, two routers, two gateways): as on the cluster, below
 * With --cluster, on the local cluster (infra/servers/cluster.ts: 3 brokers, 3 Cassandra nodes; topics of 3 replicas,
 * 2 in sync, keyspace of replication factor 3), with these faults:
 *   none               baseline
 *   kafka-leader       kill -9 of the broker leading most partitions of the deliveries topic, restarted --broker-down
 *                      s later
 *   kafka-controller   kill -9 of the active KRaft controller, restarted --broker-down s later
 *   cassandra-freeze   SIGSTOP of one Cassandra node for --cassandra-freeze s (a hung node), then SIGCONT
 *   cassandra-kill     kill -9 of one Cassandra node, restarted --cassandra-down s later
 *   kafka-roll         a rolling restart of the three brokers (SIGTERM, start, every partition fully in sync again)
 *   cassandra-roll     a rolling restart of the three Cassandra nodes (nodetool drain, SIGTERM, start, all up again)
 *   services-roll      a rolling restart of the services, one at a time (SIGTERM; needs the production shape)
 *   kafka-partition    the broker leading most partitions of the deliveries topic cut off from the two others for
 *                      --partition s while its process runs (network-cut.ts; the services still reach it), then healed
 *   cassandra-partition one Cassandra node cut off from the two others for --partition s, then healed
 *   cassandra-quorum   kill -9 of two of the three Cassandra nodes, restarted --cassandra-down s later
 *   kafka-quorum       kill -9 of two of the three brokers, restarted --broker-down s later
 * The servers are shared: whatever is killed or frozen is restored in a finally and on SIGINT/SIGTERM.
 * Prints one Markdown table row per fault: delivered/expected, duplicates, time to recover, API answers during it,
 * call → receipt and the longest stop of one subscription's deliveries.
 * --json F also writes the rows to F, --receipts F every receipt (event, entity, subscription, time), --answers F every
 * validation's answer (fault, order, time sent, milliseconds, outcome), --log-level the services' (warn), --tsx runs the
 * production shape's services through tsx instead of compiled (below), --services-warm-up S has the services carry
 * the load for S seconds before the first phase, unmeasured (30 with the production shape, else 0). Exits 1 when
 * a delivery was lost, a fault could not be run or the suite failed.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { connectCassandra } from '../../core/cassandra.ts';
import { loadConfig, requireSecrets } from '../../core/config.ts';
import { IntegratorStore } from '../../core/integrators/integrator-store.ts';
import { createLogger } from '../../core/log.ts';
import { SubscriptionStore } from '../../core/subscriptions/subscription-store.ts';
import { blankSubscription } from '../../core/subscriptions/subscription.ts';
import { ClientStore } from '../../infra/client-store.ts';
import { buildIdentityProvider, loadOrCreateSigningKey } from '../../infra/identity-provider.ts';
import { buildServices } from '../../infra/build.ts';
import { freePort, repoRoot, superviseService, waitForHttp, type ServiceRuntime } from '../../infra/processes.ts';
import { deprovision, provision } from '../../infra/provision.ts';
import kafkajs from 'kafkajs';
import { ensureCluster, ensureServers, stopServers, type ServerName } from '../../infra/servers.ts';
import {
  CLUSTER_SERVICE_ENV,
  CLUSTER_SIZE,
  activeController,
  cassandraHost,
  clusterNodeList,
  kafkaHost,
  nodetool,
} from '../../infra/servers/cluster.ts';
import { Tools } from '../../infra/servers/download.ts';
import { warmUpMs } from '../../infra/servers/warm-up.ts';
import { topicNames } from '../../core/topics.ts';
import type { Supervisor } from '../../infra/supervisor.ts';
import {
  GatewayPool,
  Receivers,
  phaseFigures,
  steadyLoad,
  type Answer,
  type PhaseFigures,
  type PhaseTimes,
} from './load.ts';
import { cannotCut, droppedPackets } from './network-cut.ts';
import {
  cutServer,
  freezeServer,
  installSignalHandlers,
  killServer,
  restore,
  restoreAll,
  serverPid,
  terminateServer,
} from './shared-servers.ts';

const SINGLE_FAULTS = [
  'none',
  'dispatcher',
  'router',
  'gateway',
  'kafka',
  'cassandra',
  'registry',
  'services-roll',
] as const;
const CLUSTER_FAULTS = [
  'none',
  'kafka-leader',
  'kafka-controller',
  'cassandra-freeze',
  'cassandra-kill',
  'kafka-roll',
  'cassandra-roll',
  'services-roll',
  'kafka-partition',
  'cassandra-partition',
  'cassandra-quorum',
  'kafka-quorum',
] as const;
type FaultName = (typeof SINGLE_FAULTS)[number] | (typeof CLUSTER_FAULTS)[number];

const { values } = parseArgs({
  options: {
    cluster: { type: 'boolean', default: false },
    lean: { type: 'boolean', default: false },
    'production-shape': { type: 'boolean', default: false },
    only: { type: 'string', multiple: true },
    rate: { type: 'string', default: '40' },
    seconds: { type: 'string', default: '20' },
    'kafka-down': { type: 'string', default: '15' },
    'broker-down': { type: 'string', default: '30' },
    'cassandra-freeze': { type: 'string' },
    'cassandra-down': { type: 'string', default: '30' },
    partition: { type: 'string', default: '30' },
    'registry-down': { type: 'string', default: '5' },
    json: { type: 'string' },
    'log-level': { type: 'string', default: 'warn' },
    receipts: { type: 'string' },
    answers: { type: 'string' },
    tsx: { type: 'boolean', default: false },
    'services-warm-up': { type: 'string' },
  },
});
const cluster = values.cluster;
/**
 * On the cluster, the services in the shape a platform team deploys them (CLUSTER_SERVICES) unless --lean: one gateway,
 * one router and two dispatchers, as without --cluster, for a fault that needs no more (npm test's cluster project:
 * seven services beside seven JVMs overload a 2-core machine). --production-shape runs that shape on the single
 * servers too: the services' roll without the cluster's JVMs, to tell what the services cost from what the machine does.
 */
const productionShape = (cluster && !values.lean) || values['production-shape'];
/**
 * The production shape runs the services' compiled JavaScript, as the image does (built here first, as `npm run bench`
 * does): a replacement in a roll then starts as it would in production, not by compiling its TypeScript on the loaded
 * machine. --tsx runs the TypeScript instead; the other shapes always do (npm test runs them, beside other tests).
 */
const serviceRuntime: ServiceRuntime = productionShape && !values.tsx ? 'compiled' : 'tsx';
if (serviceRuntime === 'compiled') buildServices((line) => console.log(line));
const FAULTS: readonly FaultName[] = cluster ? CLUSTER_FAULTS : SINGLE_FAULTS;
const only = (values.only ?? []).flatMap((value) => value.split(','));
for (const name of only) {
  if (!(FAULTS as readonly string[]).includes(name)) {
    console.error(`unknown fault "${name}"${cluster ? ' with --cluster' : ''}; one of: ${FAULTS.join(', ')}`);
    process.exit(2);
  }
}
const selected = FAULTS.filter((name) => only.length === 0 || only.includes(name));
const rate = Number(values.rate);
const loadMs = Number(values.seconds) * 1000;
const kafkaDownMs = Number(values['kafka-down']) * 1000;
const brokerDownMs = Number(values['broker-down']) * 1000;
const cassandraFreezeMs = Number(values['cassandra-freeze'] ?? (cluster ? '60' : '20')) * 1000;
const cassandraDownMs = Number(values['cassandra-down']) * 1000;
const registryDownMs = Number(values['registry-down']) * 1000;
const partitionMs = Number(values.partition) * 1000;
/** Load carried, not measured, before the first phase (the production shape: 30 s unless said). */
const servicesWarmUpMs = Number(values['services-warm-up'] ?? (productionShape ? '30' : '0')) * 1000;
/** The fault starts this long into the load, and the load goes on at least this long after it ended. */
const BEFORE_MS = Math.min(8_000, loadMs / 2);
const AFTER_MS = 10_000;
const DRAIN_MS = 60_000;
const RECOVERY_WAIT_MS = 60_000;

const SERVER_NAMES: ServerName[] = ['kafka', 'cassandra', 'apicurio'];
const SINGLE_SERVICES = [
  ['gateway', 'api/main.ts'],
  ['router', 'router/main.ts'],
  ['dispatcher-1', 'dispatcher/main.ts'],
  ['dispatcher-2', 'dispatcher/main.ts'],
] as const;
/** On the cluster, in the order services-roll restarts them. */
const CLUSTER_SERVICES = [
  ['dispatcher-1', 'dispatcher/main.ts'],
  ['dispatcher-2', 'dispatcher/main.ts'],
  ['dispatcher-3', 'dispatcher/main.ts'],
  ['router-1', 'router/main.ts'],
  ['router-2', 'router/main.ts'],
  ['gateway-1', 'api/main.ts'],
  ['gateway-2', 'api/main.ts'],
] as const;
/** Every server process the suite watches: the three servers, or the cluster's seven nodes. */
const SERVER_IDS: { name: ServerName; id: string }[] = cluster
  ? clusterNodeList().map(({ def }) => ({ name: def.name, id: def.id }))
  : SERVER_NAMES.map((name) => ({ name, id: name }));
const t0 = Date.now();
const clock = () => `${((Date.now() - t0) / 1000).toFixed(1).padStart(6)} s`;
const say = (line: string) => console.log(`[chaos ${clock()}] ${line}`);
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const seconds = (ms: number | undefined) => (ms === undefined ? '—' : `${(ms / 1000).toFixed(1)} s`);

const root = path.join(repoRoot, '.local');
// A cluster this run starts gets the warm-up the single servers get (SERVERS_WARM_UP): the faults are measured on
// JVMs that have compiled the services' paths, as a production cluster's have; a node a fault restarts comes back cold.
const servers = cluster
  ? await ensureCluster({ root, progress: say, warmUpMs: warmUpMs(process.env.SERVERS_WARM_UP) })
  : await ensureServers({ root, progress: say });
const run = randomUUID().slice(0, 8);
const gatewayPort = await freePort();
const env: Record<string, string> = {
  ...(cluster ? CLUSTER_SERVICE_ENV : {}),
  KAFKA_BROKERS: servers.kafkaBrokers.join(','),
  CASSANDRA_CONTACT_POINTS: servers.cassandraContactPoints.join(','),
  CASSANDRA_LOCAL_DC: servers.cassandraLocalDc,
  SCHEMA_REGISTRY_URL: servers.schemaRegistryUrl,
  CASSANDRA_KEYSPACE: `chaos_${run}`,
  KAFKA_TOPIC_PREFIX: `chaos.${run}.`,
  KAFKA_PARTITIONS: '6',
  SECRETS_KEY: Buffer.alloc(32, 7).toString('base64'),
  WEBHOOK_RETRY_DELAYS: '1s,2s,4s',
  WEBHOOK_ALLOW_HTTP: 'true',
  WEBHOOK_ALLOWED_CIDRS: '127.0.0.1/32',
  GATEWAY_BASE_URL: `http://127.0.0.1:${gatewayPort}`,
  LOG_LEVEL: values['log-level'],
};
const logger = createLogger('chaos', 'warn');
say(
  `run ${run}: keyspace ${env.CASSANDRA_KEYSPACE}, topic prefix ${env.KAFKA_TOPIC_PREFIX}, faults: ${selected.join(', ')}`,
);
await provision(loadConfig(env), logger);

const receivers = new Receivers();
/** Every phase's answers, for --answers. */
const allAnswers: ({ fault: string } & Answer)[] = [];
const supervisors = new Map<string, Supervisor>();
const restarts: string[] = [];
const readyUrls = new Map<string, string>();
/** The gateways' base URLs by name: one (`gateway`), or on the cluster two behind a load balancer (GatewayPool). */
const gatewayBases = new Map<string, string>();
const logs = path.join(repoRoot, '.local', 'logs', 'chaos');
let db: Awaited<ReturnType<typeof connectCassandra>> | undefined;
let idp: ReturnType<typeof buildIdentityProvider> | undefined;
let cleaning: Promise<void> | undefined;
// Called from the finally and from the signal handler: both wait for the same clean-up.
const cleanup = () => (cleaning ??= cleanUp());
const cleanUp = async () => {
  await Promise.all([...supervisors.values()].map((supervisor) => supervisor.stop()));
  await receivers.close().catch(() => {});
  await idp?.close().catch(() => {});
  await db?.shutdown().catch(() => {});
  await deprovision(loadConfig(env), logger).catch((error) => say(`deprovision failed: ${String(error)}`));
  // A node a fault restarted is not among the processes servers.stop() knows: a cluster this run started is stopped
  // whole, by its pid files, so that nothing of it outlives the run (all at once: a broker stopped after the two
  // others finds no controller quorum for its controlled shutdown and waits until it is killed). One found running stays.
  if (cluster && servers.started.length > 0) await stopServers(root, say, 'cluster');
  else await servers.stop();
};
installSignalHandlers(say, cleanup);

interface Row {
  fault: string;
  figures?: PhaseFigures;
  note: string;
}
const rows: Row[] = [];

try {
  // Identity provider in this process; one tenant, a client registered on the purchase API, two Hmac subscriptions.
  db = await connectCassandra(loadConfig(env));
  const clients = new ClientStore(db);
  const integrators = new IntegratorStore(db);
  const idpUrl = `http://127.0.0.1:${await freePort()}`;
  idp = buildIdentityProvider({
    issuer: `${idpUrl}/`,
    key: await loadOrCreateSigningKey(path.join(root, 'bench-idp-key.json')),
    clients,
    defaultAudience: 'core-api',
  });
  await idp.listen({ host: '127.0.0.1', port: Number(new URL(idpUrl).port) });
  env.AUTH_URL = idpUrl;
  const config = loadConfig(env);
  const tenantId = `chaos-${run}`;
  const clientId = `chaos-${run}`;
  const clientSecret = randomBytes(12).toString('hex');
  await clients.create(clientId, clientSecret, tenantId);
  await integrators.register('purchase', clientId, tenantId);
  const store = new SubscriptionStore(db, requireSecrets(config));
  const subscriptionIds: string[] = [];
  for (const url of await receivers.start(2)) {
    const subscription = blankSubscription(tenantId, randomUUID(), new Date());
    subscriptionIds.push(subscription.id);
    await store.save({
      ...subscription,
      url,
      eventTypes: ['purchaseOrder.*'],
      authenticationMode: 'Hmac',
      secrets: { hmacSecret: `chaos-secret-${randomBytes(8).toString('hex')}` },
    });
  }

  // The services, each supervised as `npm start` does: one that exits unasked is restarted after 1 s, 2 s, …
  const launch = async (name: string, entry: string) => {
    const gateway = entry === 'api/main.ts';
    const port = gateway && gatewayBases.size === 0 ? gatewayPort : await freePort();
    if (gateway) gatewayBases.set(name, `http://127.0.0.1:${port}`);
    readyUrls.set(name, `http://127.0.0.1:${port}/ready`);
    const logFile = path.join(logs, `${name}-${run}.log`);
    const ports = gateway ? { GATEWAY_PORT: String(port), METRICS_PORT: '0' } : { METRICS_PORT: String(port) };
    supervisors.set(
      name,
      superviseService(name, entry, { ...process.env, ...env, ...ports }, logFile, {
        runtime: serviceRuntime,
        report: (line) => {
          restarts.push(line);
          say(`supervisor: ${line}`);
        },
      }),
    );
  };
  // On the cluster, the production shape: two gateways behind a load balancer, two routers, three dispatchers.
  for (const [name, entry] of productionShape ? CLUSTER_SERVICES : SINGLE_SERVICES) await launch(name, entry);
  say(`services starting; logs in ${path.relative(repoRoot, logs)}/*-${run}.log`);

  const tokenResponse = await fetch(`${idpUrl}/oauth/token`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      client_id: clientId,
      client_secret: clientSecret,
      audience: 'core-api',
      grant_type: 'client_credentials',
    }),
  });
  const token = ((await tokenResponse.json()) as { access_token: string }).access_token;
  const gateways = new GatewayPool(gatewayBases);
  const call = (method: string, route: string, body?: unknown, timeoutMs = 10_000) =>
    gateways.send(async (base) => {
      const response = await fetch(`${base}${route}`, {
        method,
        headers: { authorization: `Bearer ${token}`, ...(body ? { 'content-type': 'application/json' } : {}) },
        body: body ? JSON.stringify(body) : undefined,
        signal: AbortSignal.timeout(timeoutMs),
      });
      const text = await response.text();
      return { status: response.status, text };
    });

  const allReady = async (timeoutMs: number) => {
    for (const [name, url] of readyUrls) await waitForHttp(url, name, timeoutMs);
  };
  await allReady(90_000);
  /** Creations the API answered 503 (it asks to retry shortly), retried: the suite's setup, not its figures. */
  let setupRetries = 0;
  /** POSTs `body` to create a resource and returns its id; a 503 is retried for up to a minute. */
  const create = async (what: string, route: string, body: unknown): Promise<string> => {
    const deadline = Date.now() + 60_000;
    for (;;) {
      const answer = await call('POST', route, body);
      if (answer.status === 201) return (JSON.parse(answer.text) as { id: string }).id;
      if (answer.status !== 503 || Date.now() > deadline) {
        throw new Error(`${what} creation answered ${answer.status}: ${answer.text}`);
      }
      setupRetries += 1;
      await sleep(500);
    }
  };
  const itemId = await create('item', '/CorePurchase/REST/Items', {
    code: 'C-1',
    name: 'Chaos bolt',
    unitPrice: '0.25',
  });
  let orderNumber = 0;
  const createDraft = async (): Promise<string> => {
    orderNumber += 1;
    return create('order', '/CorePurchase/REST/PurchaseOrders', {
      supplierName: 'Acme',
      currency: 'EUR',
      rows: [{ itemId, quantity: String(orderNumber), description: `chaos order ${orderNumber}` }],
    });
  };
  const createDrafts = async (count: number): Promise<string[]> => {
    const drafts: string[] = [];
    let started = 0;
    await Promise.all(
      Array.from({ length: Math.min(50, count) }, async () => {
        while (started < count) {
          started += 1;
          drafts.push(await createDraft());
        }
      }),
    );
    return drafts;
  };
  const validate = async (orderId: string) =>
    String((await call('POST', `/CorePurchase/REST/PurchaseOrders/${orderId}/validate`)).status);

  /** The stack is whole: every service ready and one validation delivered to both receivers. */
  const healthy = async () => {
    await allReady(120_000);
    const [probe] = await createDrafts(1);
    const deadline = Date.now() + 90_000;
    let status = '';
    // 409: an earlier try went through although its answer was lost.
    while (status !== '200' && status !== '409' && Date.now() < deadline) {
      status = await validate(probe!).catch(() => 'error');
      if (status !== '200' && status !== '409') await sleep(1_000);
    }
    while (!receivers.reachedAll(probe!, subscriptionIds)) {
      if (Date.now() > deadline) throw new Error('a probe validation was not delivered to both receivers within 90 s');
      await sleep(100);
    }
  };

  /**
   * Sends `signal` to supervised service `name` and resolves once its supervisor has started a new process and that
   * one is ready; `sent` runs right after the signal.
   */
  const signalAndAwaitReplacement = async (name: string, signal: NodeJS.Signals, sent: () => void) => {
    const supervisor = supervisors.get(name)!;
    const pid = supervisor.current?.pid;
    if (pid === undefined) throw new Error(`${name} has no running process to signal`);
    const restartsBefore = supervisor.restarts;
    process.kill(pid, signal);
    sent();
    say(`${signal} ${name} (pid ${pid})`);
    const deadline = Date.now() + 120_000;
    while (supervisor.restarts === restartsBefore || supervisor.current === undefined) {
      if (Date.now() > deadline)
        throw new Error(`${name} was not restarted by its supervisor within 120 s of ${signal}`);
      await sleep(50);
    }
    await waitForHttp(readyUrls.get(name)!, name, 120_000);
    return supervisor;
  };

  const killSupervised = async (name: string, mark: Marks): Promise<string> => {
    const supervisor = await signalAndAwaitReplacement(name, 'SIGKILL', () => mark.end());
    mark.back();
    return `restarted by its supervisor (superviseService, 1 s backoff) as pid ${supervisor.current?.pid}; ready again ${seconds(Date.now() - mark.faultEnd())} after the kill`;
  };

  /**
   * kill -9 of the servers `ids` (of kind `name`: the single server, or cluster nodes), restarted `downMs` later by the
   * launcher that started them (the others are reused).
   */
  const killAndRestart = async (name: ServerName, ids: string[], downMs: number, mark: Marks): Promise<string> => {
    const pids: number[] = [];
    for (const id of ids) {
      const pid = await serverPid(root, name, id);
      if (typeof pid === 'string') throw new Error(pid);
      pids.push(pid);
    }
    const relaunch = cluster ? (progress: (line: string) => void) => ensureCluster({ root, progress }) : undefined;
    say(`kill -9 ${ids.map((id, index) => `${id} (pid ${pids[index]})`).join(', ')}; restart in ${seconds(downMs)}`);
    try {
      for (const [index, id] of ids.entries()) await killServer(root, id, pids[index]!, say, relaunch);
      await sleep(downMs);
      mark.end();
    } finally {
      for (const id of ids) await restore(id);
    }
    mark.back();
    const now = await Promise.all(ids.map((id) => serverPid(root, name, id)));
    return `${ids.join(' and ')} down ${seconds(downMs)}, restarted (pid ${now.join(', ')}), ${cluster ? 'the cluster whole again' : 'healthy'} ${seconds(Date.now() - mark.faultEnd())} after the restart`;
  };
  /** Partitions of the run's topics whose replicas are not all in sync (0: the cluster may lose a broker again). */
  const underReplicated = async (): Promise<number> => {
    const admin = new kafkajs.Kafka({ brokers: servers.kafkaBrokers, logLevel: kafkajs.logLevel.NOTHING }).admin();
    await admin.connect();
    try {
      const topics = (await admin.listTopics()).filter((topic) => topic.startsWith(env.KAFKA_TOPIC_PREFIX!));
      const metadata = await admin.fetchTopicMetadata({ topics });
      return metadata.topics
        .flatMap((topic) => topic.partitions)
        .filter((partition) => partition.isr.length < partition.replicas.length).length;
    } finally {
      await admin.disconnect();
    }
  };
  /**
   * A rolling restart, one node at a time, as an operator upgrades: `before` (a drain), SIGTERM and the wait for a
   * clean exit, a start by the cluster's launcher, then `settled` until the node is whole again, before the next one.
   */
  const roll = async (
    name: ServerName,
    before: (index: number) => Promise<void>,
    settled: () => Promise<boolean>,
    mark: Marks,
  ): Promise<string> => {
    const steps: string[] = [];
    for (let index = 1; index <= CLUSTER_SIZE; index += 1) {
      const id = `cluster/${name}-${index}`;
      const pid = await serverPid(root, name, id);
      if (typeof pid === 'string') throw new Error(pid);
      const t = Date.now();
      await before(index);
      say(`SIGTERM ${id} (pid ${pid})`);
      const clean = await terminateServer(pid, 120_000);
      if (!clean) throw new Error(`${id} did not stop within 120 s of SIGTERM`);
      const stopped = Date.now();
      await ensureCluster({ root, progress: (line) => say(`  ${line}`) });
      const started = Date.now();
      const deadline = started + 180_000;
      while (!(await settled().catch(() => false))) {
        if (Date.now() > deadline) throw new Error(`${id} restarted, but the cluster did not settle within 180 s`);
        await sleep(1_000);
      }
      steps.push(
        `${id}: stopped in ${seconds(stopped - t)}, started in ${seconds(started - stopped)}, settled ${seconds(Date.now() - started)} later`,
      );
      say(steps.at(-1)!);
    }
    mark.end();
    mark.back();
    return steps.join('; ');
  };

  /** The broker that leads most partitions of the deliveries topic now. */
  const deliveriesLeader = async (): Promise<number> => {
    const admin = new kafkajs.Kafka({ brokers: servers.kafkaBrokers, logLevel: kafkajs.logLevel.NOTHING }).admin();
    await admin.connect();
    try {
      const topic = topicNames(loadConfig(env)).deliveries;
      const [metadata] = (await admin.fetchTopicMetadata({ topics: [topic] })).topics;
      const led = new Map<number, number>();
      for (const partition of metadata?.partitions ?? [])
        led.set(partition.leader, (led.get(partition.leader) ?? 0) + 1);
      const [leader, count] = [...led].sort((a, b) => b[1] - a[1])[0] ?? [];
      if (leader === undefined) throw new Error(`no leader found for ${topic}`);
      say(`broker ${leader} leads ${count} of ${metadata!.partitions.length} partitions of ${topic}`);
      return leader;
    } finally {
      await admin.disconnect();
    }
  };

  /**
   * Cuts node `index` of kind `name` off from the two others for --partition s while every process runs, heals the
   * cut, then waits until `whole` says the cluster is whole again.
   */
  const cutAndHeal = async (
    name: 'kafka' | 'cassandra',
    index: number,
    whole: () => Promise<boolean>,
    mark: Marks,
  ): Promise<string> => {
    const node = async (i: number) => {
      const id = `cluster/${name}-${i}`;
      const pid = await serverPid(root, name, id);
      if (typeof pid === 'string') throw new Error(pid);
      return { id, pid, host: name === 'kafka' ? kafkaHost(i) : cassandraHost(i) };
    };
    const victim = await node(index);
    const peers = await Promise.all(
      Array.from({ length: CLUSTER_SIZE }, (_, i) => i + 1)
        .filter((i) => i !== index)
        .map(node),
    );
    const role = name === 'kafka' && activeController(root) === index ? ', the active controller,' : '';
    say(
      `cut ${victim.id} (${victim.host}, pid ${victim.pid})${role} off from ${peers.map((peer) => peer.id).join(' and ')} ` +
        `for ${seconds(partitionMs)}; the services still reach it`,
    );
    let dropped: number | undefined;
    try {
      cutServer(path.join(root, 'run'), victim, peers);
      await sleep(partitionMs);
      dropped = droppedPackets();
    } finally {
      await restore(victim.id);
    }
    mark.end();
    say(`healed the cut of ${victim.id}: ${dropped ?? '?'} packets between it and its peers dropped`);
    const deadline = Date.now() + 180_000;
    while (!(await whole().catch(() => false))) {
      if (Date.now() > deadline)
        throw new Error(`the cut of ${victim.id} was healed, but the cluster was not whole within 180 s`);
      await sleep(1_000);
    }
    mark.back();
    return (
      `${victim.id}${role} cut off from ${peers.map((peer) => peer.id).join(' and ')} ${seconds(partitionMs)} ` +
      `(${dropped ?? '?'} packets dropped), whole again ${seconds(Date.now() - mark.faultEnd())} after the heal`
    );
  };
  /** Whether Cassandra node `index` sees all three nodes up and normal (nodetool status: UN). */
  const seesAllUp = async (tools: Tools, index: number) =>
    (await nodetool(root, tools, index, ['status'])).split('\n').filter((line) => line.startsWith('UN ')).length ===
    CLUSTER_SIZE;

  interface Marks {
    end(): void;
    back(): void;
    faultEnd(): number;
  }
  interface Fault {
    /** Why the fault cannot be done here, if it cannot. */
    cannot?: () => Promise<string | undefined>;
    /** How long the phase's load is expected to last (drafts are made for it beforehand). */
    plannedMs: number;
    run: (mark: Marks) => Promise<string>;
  }
  const killMs = BEFORE_MS + 10_000 + AFTER_MS;
  const notCluster = async () => (cluster ? undefined : 'needs --cluster');
  const faults: Record<FaultName, Fault> = {
    'kafka-leader': {
      plannedMs: BEFORE_MS + brokerDownMs + 20_000 + AFTER_MS,
      cannot: notCluster,
      run: async (mark) => killAndRestart('kafka', [`cluster/kafka-${await deliveriesLeader()}`], brokerDownMs, mark),
    },
    'kafka-controller': {
      plannedMs: BEFORE_MS + brokerDownMs + 20_000 + AFTER_MS,
      cannot: notCluster,
      run: async (mark) => {
        const controller = activeController(root);
        if (controller === undefined) throw new Error('no node has recorded an active controller');
        return killAndRestart('kafka', [`cluster/kafka-${controller}`], brokerDownMs, mark);
      },
    },
    'cassandra-freeze': {
      plannedMs: BEFORE_MS + cassandraFreezeMs + AFTER_MS,
      cannot: notCluster,
      run: async (mark) => {
        const id = 'cluster/cassandra-2';
        const pid = await serverPid(root, 'cassandra', id);
        if (typeof pid === 'string') throw new Error(pid);
        say(`SIGSTOP ${id} (pid ${pid}) for ${seconds(cassandraFreezeMs)}`);
        try {
          freezeServer(id, pid);
          await sleep(cassandraFreezeMs);
        } finally {
          await restore(id);
        }
        mark.end();
        mark.back();
        say(`SIGCONT ${id} (pid ${pid})`);
        return `${id} frozen ${seconds(cassandraFreezeMs)} (SIGSTOP), then SIGCONT`;
      },
    },
    'kafka-roll': {
      plannedMs: BEFORE_MS + 3 * 120_000 + AFTER_MS,
      cannot: notCluster,
      run: (mark) =>
        roll(
          'kafka',
          async () => {},
          async () => (await underReplicated()) === 0,
          mark,
        ),
    },
    'cassandra-roll': {
      plannedMs: BEFORE_MS + 3 * 120_000 + AFTER_MS,
      cannot: notCluster,
      run: (mark) => {
        const tools = new Tools(say);
        return roll(
          'cassandra',
          async (index) => {
            say(`nodetool drain cluster/cassandra-${index}`);
            await nodetool(root, tools, index, ['drain']);
          },
          // ensureCluster returns once a client sees the three nodes up; nothing more to wait for.
          async () => true,
          mark,
        );
      },
    },
    'services-roll': {
      plannedMs: BEFORE_MS + CLUSTER_SERVICES.length * 25_000 + AFTER_MS,
      cannot: async () => (productionShape ? undefined : 'needs --production-shape, or --cluster without --lean'),
      run: async (mark) => {
        // As a Deployment's rolling update: one process at a time told to stop (SIGTERM: it finishes what it holds and
        // leaves its consumer group), replaced (here by its supervisor), ready again before the next. A gateway is
        // first taken out of the load balancer, and stopped once its calls in flight are answered.
        const steps: string[] = [];
        for (const [name, entry] of CLUSTER_SERVICES) {
          const started = Date.now();
          if (entry === 'api/main.ts') await gateways.drain(name);
          await signalAndAwaitReplacement(name, 'SIGTERM', () => {});
          gateways.restore(name);
          steps.push(`${name} ${seconds(Date.now() - started)}`);
          say(`${name}: replaced and ready ${seconds(Date.now() - started)} after SIGTERM`);
        }
        mark.end();
        mark.back();
        return `rolled one at a time, SIGTERM to ready: ${steps.join(', ')}`;
      },
    },
    'kafka-partition': {
      plannedMs: BEFORE_MS + partitionMs + 60_000 + AFTER_MS,
      cannot: async () => (cluster ? cannotCut(path.join(root, 'run')) : 'needs --cluster'),
      run: async (mark) =>
        cutAndHeal('kafka', await deliveriesLeader(), async () => (await underReplicated()) === 0, mark),
    },
    'cassandra-partition': {
      plannedMs: BEFORE_MS + partitionMs + 60_000 + AFTER_MS,
      cannot: async () => (cluster ? cannotCut(path.join(root, 'run')) : 'needs --cluster'),
      run: (mark) => {
        const tools = new Tools(say);
        return cutAndHeal('cassandra', 2, () => seesAllUp(tools, 2), mark);
      },
    },
    'cassandra-quorum': {
      plannedMs: BEFORE_MS + cassandraDownMs + 60_000 + AFTER_MS,
      cannot: notCluster,
      run: (mark) => killAndRestart('cassandra', ['cluster/cassandra-2', 'cluster/cassandra-3'], cassandraDownMs, mark),
    },
    'kafka-quorum': {
      plannedMs: BEFORE_MS + brokerDownMs + 60_000 + AFTER_MS,
      cannot: notCluster,
      run: (mark) => killAndRestart('kafka', ['cluster/kafka-2', 'cluster/kafka-3'], brokerDownMs, mark),
    },
    'cassandra-kill': {
      plannedMs: BEFORE_MS + cassandraDownMs + 40_000 + AFTER_MS,
      cannot: notCluster,
      run: (mark) => killAndRestart('cassandra', ['cluster/cassandra-3'], cassandraDownMs, mark),
    },
    none: {
      plannedMs: loadMs,
      run: async (mark) => {
        mark.end();
        mark.back();
        return 'baseline: no fault; API column covers the whole load';
      },
    },
    dispatcher: { plannedMs: killMs, run: (mark) => killSupervised('dispatcher-1', mark) },
    router: { plannedMs: killMs, run: (mark) => killSupervised('router', mark) },
    gateway: { plannedMs: killMs, run: (mark) => killSupervised('gateway', mark) },
    kafka: {
      plannedMs: BEFORE_MS + kafkaDownMs + 20_000 + AFTER_MS,
      cannot: async () => cannotSignal('kafka'),
      run: (mark) => killAndRestart('kafka', ['kafka'], kafkaDownMs, mark),
    },
    cassandra: {
      plannedMs: BEFORE_MS + cassandraFreezeMs + AFTER_MS,
      cannot: async () => cannotSignal('cassandra'),
      run: async (mark) => {
        const pid = (await serverPid(root, 'cassandra')) as number;
        say(`SIGSTOP cassandra (pid ${pid}) for ${seconds(cassandraFreezeMs)}`);
        try {
          freezeServer('cassandra', pid);
          await sleep(cassandraFreezeMs);
        } finally {
          await restore('cassandra');
        }
        mark.end();
        mark.back();
        say(`SIGCONT cassandra (pid ${pid})`);
        return `frozen ${seconds(cassandraFreezeMs)} (SIGSTOP), then SIGCONT`;
      },
    },
    registry: {
      plannedMs: BEFORE_MS + registryDownMs + 20_000 + AFTER_MS,
      cannot: async () => cannotSignal('apicurio'),
      run: (mark) => killAndRestart('apicurio', ['apicurio'], registryDownMs, mark),
    },
  };
  /** Waits until each of `ids` has reached every subscription, or DRAIN_MS has passed; how many have. */
  const drain = async (ids: string[]) => {
    const deadline = Date.now() + DRAIN_MS;
    const delivered = () => ids.filter((id) => receivers.reachedAll(id, subscriptionIds)).length;
    while (delivered() < ids.length && Date.now() < deadline) await sleep(200);
    return delivered();
  };
  const warmUpServices = async (ms: number) => {
    try {
      await healthy();
      const drafts = await createDrafts(Math.ceil((rate * ms) / 1000));
      const load = steadyLoad({ rate, takeDraft: () => drafts.shift(), validate });
      await sleep(ms);
      const answers = await load.stop();
      const confirmed = answers.filter((answer) => answer.outcome === '200').map((answer) => answer.orderId);
      const delivered = await drain(confirmed);
      say(
        `services warm-up (--services-warm-up, not measured): ${answers.length} validations in ${seconds(ms)}, ` +
          `${confirmed.length} answered 200, ${delivered} of them delivered to both subscriptions`,
      );
    } catch (error) {
      say(`services warm-up failed, the faults start on cold services: ${String(error)}`);
    }
  };
  const cannotSignal = async (name: ServerName) => {
    const pid = await serverPid(root, name);
    return typeof pid === 'string' ? pid : undefined;
  };

  // Services just started run their paths interpreted at first, as the JVMs do after a start: the production shape
  // first carries the load for a while, unmeasured, so that a fault meets services that have run, as a platform
  // team's have before a roll; a replacement a fault starts comes up cold all the same.
  if (servicesWarmUpMs > 0) await warmUpServices(servicesWarmUpMs);
  for (const fault of selected) {
    const why = await faults[fault].cannot?.();
    if (why) {
      say(`${fault}: cannot be done: ${why}`);
      rows.push({ fault, note: `NOT RUN: ${why}` });
      continue;
    }
    try {
      await healthy();
    } catch (error) {
      rows.push({ fault, note: `NOT RUN: the stack was not healthy before the fault: ${String(error)}` });
      say(`${fault}: stack not healthy, skipped: ${String(error)}`);
      continue;
    }
    const planned = Math.max(loadMs, faults[fault].plannedMs) * 1.15;
    const drafts = await createDrafts(Math.ceil((rate * planned) / 1000));
    say(
      `${fault}: ${drafts.length} draft orders ready (${setupRetries} creations so far answered 503 and were retried);` +
        ` load ${rate} validations/s`,
    );
    const restartsBefore = restarts.length;
    const serversBefore = await serverPids();
    const load = steadyLoad({ rate, takeDraft: () => drafts.shift(), validate });
    // Should the phase outlast its drafts (a slow restart), more are made meanwhile; failures are retried.
    let refilling = true;
    const refill = (async () => {
      while (refilling) {
        if (drafts.length >= rate * 10) {
          await sleep(250);
          continue;
        }
        try {
          drafts.push(...(await createDrafts(rate)));
        } catch {
          await sleep(1_000);
        }
      }
    })();
    const times: PhaseTimes = {
      loadStart: load.startedAt,
      loadEnd: 0,
      faultStart: 0,
      faultEnd: 0,
      windowEnd: 0,
    };
    const mark: Marks = {
      end: () => (times.faultEnd = Date.now()),
      back: () => (times.windowEnd = Date.now()),
      faultEnd: () => times.faultEnd,
    };
    let note = '';
    let error: unknown;
    await sleep(BEFORE_MS);
    times.faultStart = Date.now();
    try {
      note = await faults[fault].run(mark);
    } catch (caught) {
      error = caught;
      note = `FAULT FAILED: ${String(caught)}`;
      say(`${fault}: ${note}`);
    }
    times.faultEnd ||= Date.now();
    times.windowEnd ||= Date.now();
    if (fault === 'none') times.faultStart = times.loadStart;
    // The load goes on until deliveries flow at the offered rate again (or RECOVERY_WAIT_MS has passed), so the
    // recovery time is measured under load rather than cut short by the phase's end.
    const stopAt = Math.max(times.loadStart + loadMs, times.windowEnd + AFTER_MS);
    const giveUpAt = times.windowEnd + RECOVERY_WAIT_MS;
    while (Date.now() < stopAt || (!receivers.flowing(times.faultEnd, rate * 2 * 0.8) && Date.now() < giveUpAt)) {
      await sleep(250);
    }
    const answers = await load.stop();
    refilling = false;
    await refill;
    times.loadEnd = Date.now();
    if (fault === 'none') times.windowEnd = times.loadEnd;
    const confirmed = answers.filter((answer) => answer.outcome === '200').map((answer) => answer.orderId);
    say(`${fault}: load stopped, ${answers.length} validations sent, ${confirmed.length} answered 200; draining`);
    await drain(confirmed);
    await sleep(2_000); // late duplicates
    const figures = phaseFigures(answers, receivers, subscriptionIds, times, rate);
    if (values.answers) allAnswers.push(...answers.map((answer) => ({ fault, ...answer })));
    const serversAfter = await serverPids();
    // The servers are shared: one restarted by someone else during the phase makes its figures doubtful.
    const target = fault === 'kafka' ? 'kafka' : fault === 'registry' ? 'apicurio' : '';
    // Cluster nodes the fault restarted (named at the start of its note, or every node of a rolled kind) changed
    // their pids as planned: their restarts are in the notes.
    const killedNodes: string[] = note.split(' down ')[0]!.match(/cluster\/[a-z]+-\d+/g) ?? [];
    const rolled = fault === 'kafka-roll' ? 'kafka' : fault === 'cassandra-roll' ? 'cassandra' : '';
    const foreign = SERVER_IDS.filter(
      ({ name, id }) =>
        id !== target && !killedNodes.includes(id) && name !== rolled && serversBefore[id] !== serversAfter[id],
    ).map(({ id }) => `${id} pid ${serversBefore[id]} → ${serversAfter[id]}`);
    const phaseRestarts = restarts.slice(restartsBefore);
    const unasked = phaseRestarts.filter((line) => !line.startsWith(supervisedVictim(fault)));
    const notes = [
      note,
      figures.clientErrors
        ? fault === 'gateway'
          ? `${figures.clientErrors} client errors (no HTTP answer) while the only gateway was down`
          : `${figures.clientErrors} client errors (no HTTP answer), not expected`
        : '',
      figures.noDraft ? `${figures.noDraft} ticks without a draft order to validate` : '',
      figures.unconfirmedDelivered ? `${figures.unconfirmedDelivered} deliveries of unconfirmed validations` : '',
      `last expected delivery ${seconds(figures.drainedMs)} after the fault's end`,
      unasked.length ? `other restarts: ${unasked.join('; ')}` : '',
      foreign.length ? `WARNING, a shared server was restarted outside this suite: ${foreign.join(', ')}` : '',
      error ? 'see the log above' : '',
    ].filter(Boolean);
    rows.push({ fault, figures, note: notes.join('; ') });
    say(`${fault}: ${tableRow(rows.at(-1)!)}`);
    say(`${fault}: deliveries per second from the fault's start: ${perSecond(answers, times.faultStart).join(' ')}`);
    if (figures.missing.length > 0) {
      say(
        `${fault}: ${figures.missing.length} validations answered 200 short of a delivery: ${figures.missing.join(', ')}`,
      );
    }
  }
} catch (error) {
  say(`suite failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
  process.exitCode = 1;
} finally {
  await restoreAll(say);
  await cleanup();
  if (values.receipts) writeFileSync(values.receipts, JSON.stringify(receivers.receipts));
  if (values.answers) writeFileSync(values.answers, JSON.stringify(allAnswers));
}

/** First receipts per second of the phase's orders, from `from` on. */
function perSecond(answers: { orderId: string }[], from: number): number[] {
  const counts: number[] = [];
  for (const { orderId } of answers) {
    const firsts = new Map<string, number>();
    for (const receipt of receivers.byEntity.get(orderId) ?? []) {
      firsts.set(receipt.subscriptionId, Math.min(firsts.get(receipt.subscriptionId) ?? Infinity, receipt.at));
    }
    for (const at of firsts.values()) {
      const second = Math.floor((at - from) / 1000);
      if (second < 0) continue;
      while (counts.length <= second) counts.push(0);
      counts[second]! += 1;
    }
  }
  return counts;
}

async function serverPids(): Promise<Record<string, string>> {
  const pids = await Promise.all(SERVER_IDS.map(async ({ name, id }) => String(await serverPid(root, name, id))));
  return Object.fromEntries(SERVER_IDS.map(({ id }, index) => [id, pids[index]!]));
}

function supervisedVictim(fault: FaultName): string {
  if (fault === 'services-roll') return '';
  return fault === 'dispatcher' ? 'dispatcher-1 ' : `${fault} `;
}

function tableRow(row: Row): string {
  const f = row.figures;
  if (!f) return `| ${row.fault} | — | — | — | — | — | ${row.note} |`;
  const recovery = f.recoveryMs === undefined ? 'not before the load ended' : seconds(f.recoveryMs);
  const stop = f.longestStopMs === undefined ? '' : `; longest stop ${(f.longestStopMs / 1000).toFixed(1)} s`;
  const latency = f.faultLatency ? `p50 ${f.faultLatency.p50} ms, p99 ${f.faultLatency.p99} ms${stop}` : '—';
  return `| ${row.fault} | ${f.delivered}/${f.expected} | ${f.duplicates} | ${recovery} | ${f.api} | ${latency} | ${row.note} |`;
}

const offered = rate * 2;
console.log(`
## Chaos suite (run ${run}, ${((Date.now() - t0) / 1000).toFixed(0)} s)

Load: ${rate} validations/s through the gateway, each delivered to 2 Hmac subscriptions (${offered} deliveries/s offered);
retries 1s,2s,4s; ${productionShape ? 'three dispatchers, two routers, two gateways behind a round-robin balancer' : 'two dispatchers, one router, one gateway'}, each supervised${serviceRuntime === 'compiled' ? ', compiled (as the image runs them)' : ''}${cluster ? '; on the local cluster (3 brokers, 3 Cassandra nodes, replication factor 3)' : ''}.
Recovery: from the fault's end until a 2 s window carries at least 80 % of the offered deliveries. API: validations
sent from the fault's start until the faulty component was healthy again, each answer with its median and slowest time;
call → receipt: from those answered 200 to each subscription's first receipt; the longest stop: the longest time one
subscription went without a delivery among them.

| fault | delivered/expected | duplicates | time to recover | API during the fault | call → receipt during the fault | notes |
|---|---|---|---|---|---|---|
${rows.map(tableRow).join('\n')}
`);
if (values.json) writeFileSync(values.json, JSON.stringify({ run, rate, rows }, null, 2));
// Nothing may be lost under any fault: a row short of its deliveries, or a fault that did not run, fails the suite.
const failed = rows.filter((row) => !row.figures || row.figures.delivered < row.figures.expected);
if (failed.length > 0) {
  console.log(`chaos suite failed: ${failed.map((row) => row.fault).join(', ')} (lost deliveries or not run)`);
  process.exitCode = 1;
}
process.exit(process.exitCode ?? 0);
