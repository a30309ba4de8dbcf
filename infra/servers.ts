/**
 * Local Kafka, Cassandra and Apicurio Registry without Docker: the servers come from Maven Central (fetched once with
 * `mvn`) and run as detached JVMs bound to 127.0.0.1. Everything lives under `root` (the repo's `.local/`):
 *   dist/<name>/       downloads (a `.complete` marker makes later starts skip Maven entirely)
 *   conf/<name>/       generated config files (rewritten on each start, so port overrides take effect)
 *   data/<name>/       server data, kept across restarts
 *   logs/<name>.log    stdout/stderr of the server (the previous run's log is kept as <name>.log.1)
 *   run/<name>.pid     pid of a server we started; `stopServers` and `npm run servers -- stop` use it
 */
import fsp from 'node:fs/promises';
import path from 'node:path';
import cassandra from 'cassandra-driver';
import { apicurioDef } from './servers/apicurio.ts';
import { cassandraDef } from './servers/cassandra.ts';
import {
  activeController,
  CLUSTER_SERVICE_ENV,
  clusterEndpoints,
  clusterNodeList,
  clusterNodes,
  type ClusterNode,
} from './servers/cluster.ts';
import { Tools } from './servers/download.ts';
import { kafkaDef, kafkaRoundTrip, persistedClusterId } from './servers/kafka.ts';
import { warmUp, warmUpMs } from './servers/warm-up.ts';
import {
  ATTEMPT_MS,
  type Proc,
  livePid,
  pidProc,
  portAnswers,
  removePidFile,
  spawnServer,
  stopAll,
  waitHealthy,
} from './servers/process.ts';
import {
  HOST,
  LOCAL_DC,
  type Progress,
  type ServerDef,
  type ServerName,
  pathsFor,
  registryUrl,
} from './servers/server-def.ts';
import { errorMessage, onceOnly, portFromEnv, secondsSince, splitList, withTimeout } from './servers/util.ts';

export type { Progress, ServerName } from './servers/server-def.ts';

export interface ServerEndpoints {
  kafkaBrokers: string[];
  cassandraContactPoints: string[];
  cassandraLocalDc: string;
  schemaRegistryUrl: string;
}
export interface StartedServers extends ServerEndpoints {
  /** Stops only the servers this call started (reused or external ones are left alone). */
  stop(): Promise<void>;
  /** The servers this call started (ids such as `kafka` or `cluster/kafka-2`); none when all were running already. */
  started: string[];
}
export interface ServerStatus {
  name: ServerName;
  /** The process: the kind's name, or a cluster node's `cluster/kafka-2`. */
  id: string;
  /** What it is in the cluster (`broker, controller (active)`, `seed`); empty for a single server. */
  role: string;
  address: string;
  /** Pid from our pid file when that process is alive. */
  pid: number | undefined;
  healthy: boolean;
  detail: string;
}

/** A port that answers but is not (yet) healthy gets this long before we call it somebody else's server. */
const FOREIGN_PORT_GRACE_MS = 15_000;

/**
 * Starts (or reuses) Kafka, Cassandra and Apicurio under `root` (the repo's `.local/`). A server whose variable
 * (KAFKA_BROKERS, CASSANDRA_CONTACT_POINTS, SCHEMA_REGISTRY_URL) is set is taken from the environment instead.
 */
export async function ensureServers(opts: {
  root: string;
  progress?: Progress;
  /** How long cold servers are loaded first (default: SERVERS_WARM_UP, else a minute; 0 skips it). */
  warmUpMs?: number;
}): Promise<StartedServers> {
  const progress = opts.progress ?? (() => {});
  const root = path.resolve(opts.root);
  const ports = configuredPorts();
  const env = process.env;
  const endpoints: ServerEndpoints = {
    kafkaBrokers: splitList(env.KAFKA_BROKERS) ?? [`${HOST}:${ports.kafka}`],
    cassandraContactPoints: splitList(env.CASSANDRA_CONTACT_POINTS) ?? [`${HOST}:${ports.cassandra}`],
    cassandraLocalDc: env.CASSANDRA_LOCAL_DC || LOCAL_DC,
    schemaRegistryUrl: env.SCHEMA_REGISTRY_URL || registryUrl(ports.apicurio),
  };
  const wanted = serverDefs(ports).filter((def) => !env[def.envVar]);
  for (const def of serverDefs(ports)) {
    if (env[def.envVar]) progress(`${def.name}: using ${env[def.envVar]} from ${def.envVar}`);
  }
  const started: Proc[] = [];
  const stop = onceOnly(() => stopAll(started, progress));
  const t0 = Date.now();
  const tools = new Tools(progress);
  const results = await Promise.allSettled(wanted.map((def) => ensureOne(def, root, tools, progress, started)));
  const failures = results.flatMap((r) => (r.status === 'rejected' ? [errorMessage(r.reason)] : []));
  if (failures.length > 0) {
    await stop();
    throw new Error(failures.join('\n\n'));
  }
  if (wanted.length > 0) progress(`servers: ready in ${secondsSince(t0)}`);
  const cold = coldKinds(started);
  // Speed only: servers that answered their health checks are usable without it.
  await warmUp(endpoints, cold, opts.warmUpMs ?? warmUpMs(env.SERVERS_WARM_UP), progress).catch((error: unknown) =>
    progress(`warm-up: failed, the servers start cold (${errorMessage(error)})`),
  );
  return { ...endpoints, stop, started: started.map((proc) => proc.name) };
}

/**
 * Starts (or reuses) the local cluster (infra/servers/cluster.ts): three Kafka nodes and the registry at once, the
 * Cassandra seed and then the two other nodes; then checks the whole: an acks=all round trip through a topic of three
 * replicas, and the three Cassandra nodes up as a client sees them; then the warm-up, if asked and a node was started.
 */
export async function ensureCluster(opts: {
  root: string;
  progress?: Progress;
  /**
   * How long cold nodes are loaded first (0, the default, skips it). A whole start asks for it; a fault's restart of
   * one node does not wait for it, as an operator's restart does not: that node comes back cold.
   */
  warmUpMs?: number;
}): Promise<StartedServers> {
  const progress = opts.progress ?? (() => {});
  const root = path.resolve(opts.root);
  const idFile = path.join(root, 'data', 'cluster', 'kafka-cluster-id');
  await fsp.mkdir(path.dirname(idFile), { recursive: true });
  const nodes = clusterNodes(await persistedClusterId(idFile));
  const endpoints = clusterEndpoints();
  const started: Proc[] = [];
  const stop = onceOnly(() => stopAll(started, progress));
  const t0 = Date.now();
  const tools = new Tools(progress);
  const one = (node: ClusterNode) => ensureOne(node.def, root, tools, progress, started);
  const [seed, ...others] = nodes.cassandra;
  // A node that found no peer to gossip with in its first round (the seed too busy to answer on a loaded machine:
  // "Unable to gossip with any peers", seen here once in about ten starts) exits; it is started again.
  const join = (node: ClusterNode) =>
    retryWhen(
      () => one(node),
      GOSSIP_FAILED,
      2,
      (error) => progress(`${node.def.id}: ${firstLine(error)}; starting it again`),
    );
  const results = await Promise.allSettled([
    ...nodes.kafka.map(one),
    one(nodes.registry),
    // Nodes join through the seed: it goes first. With their tokens set they join without streaming, so at once.
    one(seed!).then(() => Promise.all(others.map(join))),
  ]);
  const failures = results.flatMap((r) => (r.status === 'rejected' ? [errorMessage(r.reason)] : []));
  try {
    if (failures.length > 0) throw new Error(failures.join('\n\n'));
    // Just started, the brokers may not all know the new topic's leader yet: those answers are retried.
    await retryFor(ATTEMPT_MS, () => kafkaRoundTrip(endpoints.kafkaBrokers, nodes.kafka.length)).catch(
      (error: unknown) => {
        throw new Error(`kafka cluster: no acks=all round trip through 3 replicas: ${errorMessage(error)}`);
      },
    );
    await retryFor(ATTEMPT_MS, () => cassandraNodesUp(endpoints.cassandraContactPoints));
  } catch (error) {
    await stop();
    throw error;
  }
  progress(`cluster: ready in ${secondsSince(t0)}`);
  // Speed only, as for the single servers; the scratch pipeline replicated as the services' own topics and keyspace are.
  await warmUp(endpoints, coldKinds(started), opts.warmUpMs ?? 0, progress, CLUSTER_SERVICE_ENV).catch(
    (error: unknown) => progress(`warm-up: failed, the cluster starts cold (${errorMessage(error)})`),
  );
  return { ...endpoints, stop, started: started.map((proc) => proc.name) };
}

/**
 * The kinds of JVM among the processes this call started (named `kafka`, or `cluster/kafka-2` on the cluster): only
 * those are cold; one found running has carried load already (or is somebody else's).
 */
export function coldKinds(started: Proc[]): ('kafka' | 'cassandra')[] {
  return (['kafka', 'cassandra'] as const).filter((kind) =>
    started.some((proc) => proc.name === kind || proc.name.startsWith(`cluster/${kind}-`)),
  );
}

const GOSSIP_FAILED = /Unable to gossip with any peers/;
const firstLine = (error: unknown) => errorMessage(error).split('\n')[0]!;

/** Runs `attempt`, again (up to `retries` more times) while it fails with an error whose message matches `retryable`. */
export async function retryWhen<T>(
  attempt: () => Promise<T>,
  retryable: RegExp,
  retries: number,
  onRetry: (error: unknown) => void,
): Promise<T> {
  for (let left = retries; ; left -= 1) {
    try {
      return await attempt();
    } catch (error) {
      if (left <= 0 || !retryable.test(errorMessage(error))) throw error;
      onRetry(error);
    }
  }
}

/** Runs `attempt` until it resolves, a second apart; rejects with its last error once `ms` have passed. */
async function retryFor(ms: number, attempt: () => Promise<void>): Promise<void> {
  const deadline = Date.now() + ms;
  for (;;) {
    try {
      return await withTimeout(attempt(), Math.max(deadline - Date.now(), 1_000), 'timed out');
    } catch (error) {
      if (Date.now() >= deadline) throw error;
      await new Promise((resolve) => setTimeout(resolve, 1_000));
    }
  }
}

/** Resolves once a client of the cluster sees every one of `contactPoints` up. */
async function cassandraNodesUp(contactPoints: string[]): Promise<void> {
  const client = new cassandra.Client({
    contactPoints,
    localDataCenter: LOCAL_DC,
    socketOptions: { connectTimeout: 2_000, readTimeout: 5_000 },
  });
  try {
    await client.connect();
    const hosts = client.hosts.values();
    const up = hosts.filter((host) => host.isUp()).map((host) => host.address);
    if (up.length < contactPoints.length) {
      throw new Error(`cassandra cluster: ${up.length} of ${contactPoints.length} nodes up (${up.join(', ')})`);
    }
  } finally {
    await client.shutdown().catch(() => {});
  }
}

/**
 * Stops whatever the pid files under `root/run` name (servers started by any earlier `ensureServers`), and the
 * cluster's under `root/run/cluster` (`ensureCluster`); `only` stops one of the two.
 */
export async function stopServers(
  root: string,
  progress: Progress = () => {},
  only?: 'single' | 'cluster',
): Promise<void> {
  const runDir = path.join(path.resolve(root), 'run');
  const dirs =
    only === 'single'
      ? [runDir]
      : only === 'cluster'
        ? [path.join(runDir, 'cluster')]
        : [runDir, path.join(runDir, 'cluster')];
  const procs: Proc[] = [];
  for (const dir of dirs) {
    const names = await fsp.readdir(dir).catch(() => [] as string[]);
    for (const file of names.filter((n) => n.endsWith('.pid'))) {
      const pidFile = path.join(dir, file);
      const pid = await livePid(pidFile, path.resolve(root));
      if (pid === undefined) await removePidFile(pidFile);
      else procs.push(pidProc(path.relative(runDir, pidFile).replace(/\.pid$/, ''), pid, pidFile));
    }
  }
  if (procs.length === 0) progress('servers: none running');
  await stopAll(procs, progress);
}

/** What runs where, for `npm run servers -- status` (with `cluster`, the cluster's nodes). */
export async function serverStatus(root: string, cluster = false): Promise<ServerStatus[]> {
  const absRoot = path.resolve(root);
  const controller = cluster ? activeController(absRoot) : undefined;
  const nodes: ClusterNode[] = cluster
    ? clusterNodeList()
    : serverDefs(configuredPorts()).map((def) => ({ def, index: 1, role: '' }));
  return Promise.all(
    nodes.map(async ({ def, index, role }): Promise<ServerStatus> => {
      const pid = await livePid(pathsFor(absRoot, def.name, def.id).pid, absRoot);
      const shown = def.name === 'kafka' && cluster && controller === index ? `${role} (active controller)` : role;
      const base = { name: def.name, id: def.id, role: shown, address: def.address, pid };
      try {
        await withTimeout(def.check(), ATTEMPT_MS, 'health check timed out');
        return { ...base, healthy: true, detail: 'healthy' };
      } catch (err) {
        return { ...base, healthy: false, detail: errorMessage(err) };
      }
    }),
  );
}

// ---------------------------------------------------------------------------------------------------------------
// Which servers, and starting one

interface Ports {
  kafka: number;
  cassandra: number;
  apicurio: number;
}

function configuredPorts(): Ports {
  return {
    kafka: portFromEnv('KAFKA_PORT', 9092),
    cassandra: portFromEnv('CASSANDRA_PORT', 9042),
    apicurio: portFromEnv('SCHEMA_REGISTRY_PORT', 8081),
  };
}

function serverDefs(ports: Ports): ServerDef[] {
  return [kafkaDef(ports.kafka), cassandraDef(ports.cassandra), apicurioDef(ports.apicurio)];
}

async function ensureOne(def: ServerDef, root: string, tools: Tools, progress: Progress, started: Proc[]) {
  const paths = pathsFor(root, def.name, def.id);
  const t0 = Date.now();
  const pid = await livePid(paths.pid, root);
  if (pid !== undefined) {
    // Ours from an earlier run, possibly still booting (e.g. a `start` that was interrupted).
    await waitHealthy(def, paths, pidProc(def.name, pid, paths.pid), def.startupMs);
    progress(`${def.id}: reusing ${def.address} (pid ${pid}, checked in ${secondsSince(t0)})`);
    return;
  }
  if (await portAnswers(def.port, 1_000, def.host)) {
    try {
      await waitHealthy(def, paths, undefined, FOREIGN_PORT_GRACE_MS);
    } catch (err) {
      throw new Error(
        `${def.name}: port ${def.port} is taken by something that is not a healthy ${def.name} ` +
          `(${errorMessage(err)}). Stop it, or set ${def.portVar} (or ${def.envVar}) to use another.`,
        { cause: err },
      );
    }
    progress(`${def.id}: reusing ${def.address} (checked in ${secondsSince(t0)})`);
    return;
  }
  await def.download(paths, tools);
  progress(`${def.id}: starting…`);
  const t1 = Date.now();
  const launch = await def.prepare(paths, tools);
  const proc = await spawnServer(def.id, await tools.java(), launch, paths);
  started.push(proc);
  await waitHealthy(def, paths, proc, def.startupMs);
  progress(`${def.id}: ready in ${secondsSince(t1)} on ${def.address} (pid ${proc.pid})`);
}
