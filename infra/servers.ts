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
import { apicurioDef } from './servers/apicurio.ts';
import { cassandraDef } from './servers/cassandra.ts';
import { Tools } from './servers/download.ts';
import { kafkaDef } from './servers/kafka.ts';
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
}
export interface ServerStatus {
  name: ServerName;
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
  // Only JVMs this call started are cold; one found running has carried load already (or is somebody else's).
  const cold = (['kafka', 'cassandra'] as const).filter((name) => started.some((proc) => proc.name === name));
  // Speed only: servers that answered their health checks are usable without it.
  await warmUp(endpoints, cold, opts.warmUpMs ?? warmUpMs(env.SERVERS_WARM_UP), progress).catch((error: unknown) =>
    progress(`warm-up: failed, the servers start cold (${errorMessage(error)})`),
  );
  return { ...endpoints, stop };
}

/** Stops whatever the pid files under `root/run` name (servers started by any earlier `ensureServers`). */
export async function stopServers(root: string, progress: Progress = () => {}): Promise<void> {
  const runDir = path.join(path.resolve(root), 'run');
  const names = await fsp.readdir(runDir).catch(() => [] as string[]);
  const procs: Proc[] = [];
  for (const file of names.filter((n) => n.endsWith('.pid'))) {
    const pidFile = path.join(runDir, file);
    const pid = await livePid(pidFile, path.resolve(root));
    if (pid === undefined) await removePidFile(pidFile);
    else procs.push(pidProc(file.replace(/\.pid$/, ''), pid, pidFile));
  }
  if (procs.length === 0) progress('servers: none running');
  await stopAll(procs, progress);
}

/** What runs where, for `npm run servers -- status`. */
export async function serverStatus(root: string): Promise<ServerStatus[]> {
  const absRoot = path.resolve(root);
  return Promise.all(
    serverDefs(configuredPorts()).map(async (def): Promise<ServerStatus> => {
      const pid = await livePid(pathsFor(absRoot, def.name).pid, absRoot);
      try {
        await withTimeout(def.check(), ATTEMPT_MS, 'health check timed out');
        return { name: def.name, address: def.address, pid, healthy: true, detail: 'healthy' };
      } catch (err) {
        return { name: def.name, address: def.address, pid, healthy: false, detail: errorMessage(err) };
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
  const paths = pathsFor(root, def.name);
  const t0 = Date.now();
  const pid = await livePid(paths.pid, root);
  if (pid !== undefined) {
    // Ours from an earlier run, possibly still booting (e.g. a `start` that was interrupted).
    await waitHealthy(def, paths, pidProc(def.name, pid, paths.pid), def.startupMs);
    progress(`${def.name}: reusing ${def.address} (pid ${pid}, checked in ${secondsSince(t0)})`);
    return;
  }
  if (await portAnswers(def.port)) {
    try {
      await waitHealthy(def, paths, undefined, FOREIGN_PORT_GRACE_MS);
    } catch (err) {
      throw new Error(
        `${def.name}: port ${def.port} is taken by something that is not a healthy ${def.name} ` +
          `(${errorMessage(err)}). Stop it, or set ${def.portVar} (or ${def.envVar}) to use another.`,
        { cause: err },
      );
    }
    progress(`${def.name}: reusing ${def.address} (checked in ${secondsSince(t0)})`);
    return;
  }
  await def.download(paths, tools);
  progress(`${def.name}: starting…`);
  const t1 = Date.now();
  const launch = await def.prepare(paths, tools);
  const proc = await spawnServer(def.name, await tools.java(), launch, paths);
  started.push(proc);
  await waitHealthy(def, paths, proc, def.startupMs);
  progress(`${def.name}: ready in ${secondsSince(t1)} on ${def.address} (pid ${proc.pid})`);
}
