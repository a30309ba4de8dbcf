/**
 * Local Kafka, Cassandra and Apicurio Registry without Docker: the servers come from Maven Central (fetched once with
 * `mvn`) and run as detached JVMs bound to 127.0.0.1. Everything lives under `root` (the repo's `.local/`):
 *   dist/<name>/       downloads (a `.complete` marker makes later starts skip Maven entirely)
 *   conf/<name>/       generated config files (rewritten on each start, so port overrides take effect)
 *   data/<name>/       server data, kept across restarts
 *   logs/<name>.log    stdout/stderr of the server (the previous run's log is kept as <name>.log.1)
 *   run/<name>.pid     pid of a server we started; `stopServers` and `npm run servers -- stop` use it
 */
import { spawn } from 'node:child_process';
import { createHash, randomBytes, randomUUID } from 'node:crypto';
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import cassandra from 'cassandra-driver';
import kafkajs from 'kafkajs';

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
export type Progress = (line: string) => void;

export type ServerName = 'kafka' | 'cassandra' | 'apicurio';
export interface ServerStatus {
  name: ServerName;
  address: string;
  /** Pid from our pid file when that process is alive. */
  pid: number | undefined;
  healthy: boolean;
  detail: string;
}

const HOST = '127.0.0.1';
const LOCAL_DC = 'datacenter1';
const APICURIO_VERSION = '3.0.9';
const APICURIO_ARTIFACT = `io.apicurio:apicurio-registry-app:${APICURIO_VERSION}:tar.gz:all`;
const APICURIO_JAR = `apicurio-registry-app-${APICURIO_VERSION}-runner.jar`;
const MAVEN_DIR = fileURLToPath(new URL('./maven/', import.meta.url));
const POLL_MS = 500;
/** One health attempt may not take longer than this, so a hung attempt cannot eat the startup deadline. */
const ATTEMPT_MS = 30_000;
/** A port that answers but is not (yet) healthy gets this long before we call it somebody else's server. */
const FOREIGN_PORT_GRACE_MS = 15_000;
const STOP_TIMEOUT_MS = 30_000;
const LOG_TAIL_LINES = 30;

/**
 * Starts (or reuses) Kafka, Cassandra and Apicurio under `root` (the repo's `.local/`). A server whose variable
 * (KAFKA_BROKERS, CASSANDRA_CONTACT_POINTS, SCHEMA_REGISTRY_URL) is set is taken from the environment instead.
 */
export async function ensureServers(opts: { root: string; progress?: Progress }): Promise<StartedServers> {
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
// Server definitions

interface Paths {
  root: string;
  dist: string;
  conf: string;
  data: string;
  log: string;
  pid: string;
}

interface Launch {
  args: string[];
  cwd: string;
}

interface ServerDef {
  name: ServerName;
  envVar: 'KAFKA_BROKERS' | 'CASSANDRA_CONTACT_POINTS' | 'SCHEMA_REGISTRY_URL';
  portVar: string;
  port: number;
  address: string;
  startupMs: number;
  /** Fetches the server into paths.dist unless its marker says that already happened. */
  download(paths: Paths, tools: Tools): Promise<void>;
  /** Writes config files, does one-time initialisation and returns the command line. */
  prepare(paths: Paths, tools: Tools): Promise<Launch>;
  /** Resolves when the server answers a real request; rejects otherwise. */
  check(): Promise<void>;
}

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

function pathsFor(root: string, name: ServerName): Paths {
  return {
    root,
    dist: path.join(root, 'dist', name),
    conf: path.join(root, 'conf', name),
    data: path.join(root, 'data', name),
    log: path.join(root, 'logs', `${name}.log`),
    pid: path.join(root, 'run', `${name}.pid`),
  };
}

function registryUrl(port: number): string {
  return `http://${HOST}:${port}/apis/ccompat/v7`;
}

// --- Kafka -----------------------------------------------------------------------------------------------------

function kafkaDef(port: number): ServerDef {
  const pom = path.join(MAVEN_DIR, 'kafka.pom.xml');
  return {
    name: 'kafka',
    envVar: 'KAFKA_BROKERS',
    portVar: 'KAFKA_PORT',
    port,
    address: `${HOST}:${port}`,
    startupMs: 120_000,
    download: (paths, tools) =>
      downloadOnce('kafka', paths.dist, fileHash(pom), tools, () => tools.copyDependencies(pom, paths.dist)),
    prepare: async (paths, tools) => {
      const lib = path.join(paths.dist, 'lib', '*');
      const logDir = path.join(paths.data, 'logs');
      const props = path.join(paths.conf, 'server.properties');
      const log4j = path.join(paths.conf, 'log4j.properties');
      await fsp.mkdir(paths.conf, { recursive: true });
      await fsp.mkdir(logDir, { recursive: true });
      await fsp.writeFile(props, kafkaProperties(port, logDir));
      await fsp.writeFile(log4j, KAFKA_LOG4J);
      const log4jOpt = `-Dlog4j.configuration=${pathToFileURL(log4j).href}`;
      // Formatting starts a JVM (~2 s), so it runs only until the log dir has its meta.properties.
      if (!fs.existsSync(path.join(logDir, 'meta.properties'))) {
        const clusterId = await persistedClusterId(path.join(paths.data, 'cluster-id'));
        await tools.run(await tools.java(), [
          log4jOpt,
          '-cp',
          lib,
          'kafka.tools.StorageTool',
          'format',
          '-t',
          clusterId,
          '-c',
          props,
          '--ignore-formatted',
        ]);
      }
      const jvm = ['-Xms512m', '-Xmx512m', '-XX:+UseG1GC', '-XX:MaxGCPauseMillis=20'];
      const args = [
        ...jvm,
        '-Djava.awt.headless=true',
        '-Djava.net.preferIPv4Stack=true',
        log4jOpt,
        '-cp',
        lib,
        'kafka.Kafka',
        props,
      ];
      return { args, cwd: paths.data };
    },
    check: () => kafkaRoundTrip(port),
  };
}

function kafkaProperties(port: number, logDir: string): string {
  const controller = port + 1;
  return `${[
    '# Written by infra/servers.ts on every start; edits are lost.',
    'process.roles=broker,controller',
    'node.id=1',
    `controller.quorum.voters=1@${HOST}:${controller}`,
    `listeners=PLAINTEXT://${HOST}:${port},CONTROLLER://${HOST}:${controller}`,
    `advertised.listeners=PLAINTEXT://${HOST}:${port}`,
    'controller.listener.names=CONTROLLER',
    'inter.broker.listener.name=PLAINTEXT',
    'listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT',
    `log.dirs=${logDir}`,
    'num.partitions=1',
    'default.replication.factor=1',
    'min.insync.replicas=1',
    'offsets.topic.replication.factor=1',
    'transaction.state.log.replication.factor=1',
    'transaction.state.log.min.isr=1',
    // One broker: 50 offsets partitions only make the first consumer group wait for their creation.
    'offsets.topic.num.partitions=5',
    'group.initial.rebalance.delay.ms=0',
    'auto.create.topics.enable=false',
    'delete.topic.enable=true',
  ].join('\n')}\n`;
}

const KAFKA_LOG4J = `# Written by infra/servers.ts: everything goes to stdout, which is the log file.
log4j.rootLogger=INFO, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.state.change.logger=WARN
log4j.logger.kafka.request.logger=WARN
log4j.logger.org.apache.kafka.clients=WARN
`;

/** Kafka's cluster ids are 16 random bytes in URL-safe base64; made here to spare a JVM start (`random-uuid`). */
async function persistedClusterId(file: string): Promise<string> {
  const existing = (await readText(file))?.trim();
  if (existing) return existing;
  let id = randomBytes(16).toString('base64url');
  // Kafka's own generator also avoids a leading '-', which command-line parsers would take for an option.
  while (id.startsWith('-')) id = randomBytes(16).toString('base64url');
  await fsp.writeFile(file, `${id}\n`);
  return id;
}

/** Healthy means a topic can be created, written and read back, which is what the services need. */
async function kafkaRoundTrip(port: number): Promise<void> {
  await assertPortOpen(port);
  const { Kafka, logLevel, Partitioners } = kafkajs;
  const kafka = new Kafka({
    clientId: 'servers-health',
    brokers: [`${HOST}:${port}`],
    logLevel: logLevel.NOTHING,
    connectionTimeout: 2_000,
    requestTimeout: 10_000,
    retry: { retries: 3, initialRetryTime: 200 },
  });
  const name = `servers-health-${randomUUID()}`;
  const admin = kafka.admin();
  const producer = kafka.producer({ createPartitioner: Partitioners.DefaultPartitioner });
  const consumer = kafka.consumer({ groupId: name, sessionTimeout: 10_000, heartbeatInterval: 1_000 });
  let created = false;
  try {
    await admin.connect();
    await admin.createTopics({
      topics: [{ topic: name, numPartitions: 1, replicationFactor: 1 }],
      waitForLeaders: true,
    });
    created = true;
    await producer.connect();
    await producer.send({ topic: name, messages: [{ value: 'ping' }] });
    await consumer.connect();
    await consumer.subscribe({ topics: [name], fromBeginning: true });
    const received = new Promise<void>((resolve, reject) => {
      consumer.run({ eachMessage: async () => resolve() }).catch(reject);
    });
    await withTimeout(received, 20_000, 'produced a message but could not consume it');
  } finally {
    await consumer.disconnect().catch(() => {});
    await producer.disconnect().catch(() => {});
    if (created) {
      await admin.deleteTopics({ topics: [name] }).catch(() => {});
      await admin.deleteGroups([name]).catch(() => {});
    }
    await admin.disconnect().catch(() => {});
  }
}

// --- Cassandra -------------------------------------------------------------------------------------------------

/** Storage (gossip) and JMX ports; not overridable because nothing outside Cassandra itself talks to them. */
const CASSANDRA_STORAGE_PORT = 7000;
const CASSANDRA_JMX_PORT = 7199;

/** Module flags from Cassandra 5.0's conf/jvm17-server.options (it reflects into JDK internals). */
const CASSANDRA_JAVA17_FLAGS = [
  ...[
    'java.base/jdk.internal.misc',
    'java.management.rmi/com.sun.jmx.remote.internal.rmi',
    'java.management/com.sun.jmx.remote.security',
    'java.rmi/sun.rmi.registry',
    'java.rmi/sun.rmi.server',
    'java.sql/java.sql',
    'java.base/java.lang.ref',
    'jdk.unsupported/sun.misc',
  ].flatMap((m) => ['--add-exports', `${m}=ALL-UNNAMED`]),
  ...[
    'java.base/java.lang.module',
    'java.base/jdk.internal.loader',
    'java.base/jdk.internal.ref',
    'java.base/jdk.internal.reflect',
    'java.base/jdk.internal.math',
    'java.base/jdk.internal.module',
    'java.base/jdk.internal.util.jar',
    'java.base/sun.nio.ch',
    'java.base/java.io',
    'java.base/java.lang.reflect',
    'java.base/java.lang',
    'java.base/java.util',
    'java.base/java.nio',
    'jdk.management/com.sun.management.internal',
  ].flatMap((m) => ['--add-opens', `${m}=ALL-UNNAMED`]),
];

function cassandraDef(port: number): ServerDef {
  const pom = path.join(MAVEN_DIR, 'cassandra.pom.xml');
  return {
    name: 'cassandra',
    envVar: 'CASSANDRA_CONTACT_POINTS',
    portVar: 'CASSANDRA_PORT',
    port,
    address: `${HOST}:${port}`,
    startupMs: 180_000,
    download: (paths, tools) =>
      downloadOnce('cassandra', paths.dist, fileHash(pom), tools, () => tools.copyDependencies(pom, paths.dist)),
    prepare: async (paths) => {
      const lib = path.join(paths.dist, 'lib');
      const dirs = ['data', 'commitlog', 'saved_caches', 'hints', 'cdc_raw'].map((d) => path.join(paths.data, d));
      const logDir = path.join(paths.root, 'logs', 'cassandra');
      const triggers = path.join(paths.conf, 'triggers');
      for (const dir of [paths.conf, logDir, triggers, ...dirs]) await fsp.mkdir(dir, { recursive: true });
      const yaml = path.join(paths.conf, 'cassandra.yaml');
      const logback = path.join(paths.conf, 'logback.xml');
      await fsp.writeFile(yaml, cassandraYaml(port, paths.data));
      await fsp.writeFile(logback, CASSANDRA_LOGBACK);
      // jamm measures object sizes for memtable accounting; Cassandra's own scripts load it as an agent too.
      const jamm = (await fsp.readdir(lib)).find((f) => /^jamm-.*\.jar$/.test(f));
      const args = [
        '-Xms1g',
        '-Xmx1g',
        '-Xss256k',
        '-XX:+UseG1GC',
        '-XX:+ParallelRefProcEnabled',
        '-XX:MaxTenuringThreshold=1',
        '-XX:G1HeapRegionSize=16m',
        '-XX:MaxGCPauseMillis=300',
        '-XX:+PerfDisableSharedMem',
        // Half-failed allocations can corrupt data; Cassandra's startup checks ask for this.
        '-XX:+ExitOnOutOfMemoryError',
        // Cassandra 5.0 installs a SecurityManager (UDF sandbox); Java 18+ refuse that unless allowed.
        '-Djava.security.manager=allow',
        '-Djava.net.preferIPv4Stack=true',
        '-Dio.netty.tryReflectionSetAccessible=true',
        '-Dio.netty.allocator.useCacheForAllThreads=true',
        '-Dio.netty.allocator.maxOrder=11',
        ...CASSANDRA_JAVA17_FLAGS,
        ...(jamm ? [`-javaagent:${path.join(lib, jamm)}`] : []),
        `-Dcassandra.config=${pathToFileURL(yaml).href}`,
        `-Dcassandra.storagedir=${paths.data}`,
        `-Dcassandra.logdir=${logDir}`,
        `-Dlogback.configurationFile=${pathToFileURL(logback).href}`,
        '-Dcassandra-foreground=yes',
        '-Djdk.attach.allowAttachSelf=true',
        // A single seed node has nobody to gossip with; these waits only delay its start.
        '-Dcassandra.skip_wait_for_gossip_to_settle=0',
        '-Dcassandra.ring_delay_ms=0',
        '-Dcassandra.superuser_setup_delay_ms=0',
        // JMX (for nodetool) on the loopback interface only.
        `-Dcassandra.jmx.local.port=${CASSANDRA_JMX_PORT}`,
        `-Dcom.sun.management.jmxremote.rmi.port=${CASSANDRA_JMX_PORT}`, // else RMI takes a random port
        `-Dcassandra.triggers_dir=${triggers}`,
        '-cp',
        path.join(lib, '*'),
        'org.apache.cassandra.service.CassandraDaemon',
      ];
      return { args, cwd: paths.data };
    },
    check: async () => {
      await cassandraReleaseVersion(port);
    },
  };
}

function cassandraYaml(port: number, data: string): string {
  // JSON strings are valid YAML scalars, which keeps odd characters in paths harmless.
  const q = (s: string): string => JSON.stringify(s);
  return `# Written by infra/servers.ts on every start; edits are lost.
cluster_name: core-webhooks-local
num_tokens: 1
partitioner: org.apache.cassandra.dht.Murmur3Partitioner
endpoint_snitch: SimpleSnitch
seed_provider:
  - class_name: org.apache.cassandra.locator.SimpleSeedProvider
    parameters:
      - seeds: "${HOST}:${CASSANDRA_STORAGE_PORT}"
listen_address: ${HOST}
rpc_address: ${HOST}
storage_port: ${CASSANDRA_STORAGE_PORT}
start_native_transport: true
native_transport_port: ${port}
commitlog_sync: periodic
commitlog_sync_period: 10000ms
data_file_directories:
  - ${q(path.join(data, 'data'))}
commitlog_directory: ${q(path.join(data, 'commitlog'))}
saved_caches_directory: ${q(path.join(data, 'saved_caches'))}
hints_directory: ${q(path.join(data, 'hints'))}
cdc_raw_directory: ${q(path.join(data, 'cdc_raw'))}
authenticator: AllowAllAuthenticator
authorizer: AllowAllAuthorizer
role_manager: CassandraRoleManager
concurrent_compactors: 1
# Local data is disposable: no snapshot on every TRUNCATE/DROP (tests do many of those).
auto_snapshot: false
`;
}

const CASSANDRA_LOGBACK = `<!-- Written by infra/servers.ts: INFO to stdout, which is the log file. -->
<configuration scan="false">
  <appender name="STDOUT" class="ch.qos.logback.core.ConsoleAppender">
    <encoder><pattern>%-5level [%thread] %date{ISO8601} %logger{0}:%line - %msg%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="STDOUT" /></root>
</configuration>
`;

async function cassandraReleaseVersion(port: number): Promise<string> {
  await assertPortOpen(port);
  const client = new cassandra.Client({
    contactPoints: [`${HOST}:${port}`],
    localDataCenter: LOCAL_DC,
    socketOptions: { connectTimeout: 2_000, readTimeout: 5_000 },
  });
  try {
    await client.connect();
    const row = (await client.execute('SELECT release_version FROM system.local')).first();
    return String(row?.get('release_version'));
  } finally {
    await client.shutdown().catch(() => {});
  }
}

// --- Apicurio Registry -----------------------------------------------------------------------------------------

function apicurioDef(port: number): ServerDef {
  return {
    name: 'apicurio',
    envVar: 'SCHEMA_REGISTRY_URL',
    portVar: 'SCHEMA_REGISTRY_PORT',
    port,
    address: registryUrl(port),
    startupMs: 120_000,
    download: (paths, tools) =>
      downloadOnce('apicurio', paths.dist, APICURIO_ARTIFACT, tools, async () => {
        await tools.mvn(['dependency:copy', `-Dartifact=${APICURIO_ARTIFACT}`, `-DoutputDirectory=${paths.dist}`]);
        const archive = path.join(paths.dist, `apicurio-registry-app-${APICURIO_VERSION}-all.tar.gz`);
        await tools.run(tools.which('tar', 'tar (to unpack Apicurio)'), ['-xzf', archive, '-C', paths.dist]);
        await fsp.rm(archive); // Maven's cache keeps a copy.
      }),
    prepare: async (paths) => {
      await fsp.mkdir(paths.data, { recursive: true });
      const args = [
        '-Xmx256m',
        '-Djava.net.preferIPv4Stack=true',
        `-Dquarkus.http.port=${port}`,
        `-Dquarkus.http.host=${HOST}`,
        // 3.x defaults to an in-memory H2 database; a file keeps schema ids stable across restarts, which matters
        // because Kafka keeps the records that carry those ids.
        `-Dapicurio.datasource.url=jdbc:h2:file:${path.join(paths.data, 'registry')}`,
        // Deleting subjects is off by default in 3.x; tests and local clean-ups want it.
        '-Dapicurio.rest.deletion.group.enabled=true',
        '-Dapicurio.rest.deletion.artifact.enabled=true',
        '-Dapicurio.rest.deletion.artifact-version.enabled=true',
        '-jar',
        path.join(paths.dist, APICURIO_JAR),
      ];
      return { args, cwd: paths.dist };
    },
    check: async () => {
      await assertPortOpen(port);
      const res = await fetch(`${registryUrl(port)}/subjects`, { signal: AbortSignal.timeout(5_000) });
      if (!res.ok) throw new Error(`GET /subjects answered ${res.status}`);
      const body: unknown = await res.json();
      if (!Array.isArray(body)) throw new Error('GET /subjects did not return a JSON array');
    },
  };
}

// ---------------------------------------------------------------------------------------------------------------
// Starting, waiting, stopping

/** A server process: one we spawned (exit seen via its event) or one named by a pid file (polled). */
interface Proc {
  name: string;
  pid: number;
  pidFile: string;
  /** Undefined while the process runs; otherwise how it ended. */
  exitReason(): string | undefined;
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

async function spawnServer(name: string, java: string, launch: Launch, paths: Paths): Promise<Proc> {
  await fsp.mkdir(path.dirname(paths.log), { recursive: true });
  await fsp.mkdir(path.dirname(paths.pid), { recursive: true });
  // Keep the previous run's log, but let failures show the tail of this run only.
  await fsp.rename(paths.log, `${paths.log}.1`).catch(() => {});
  const fd = fs.openSync(paths.log, 'a');
  let exit: string | undefined;
  try {
    // detached: own process group, so a terminal's Ctrl-C does not reach it and stop() can signal the whole group.
    const child = spawn(java, launch.args, { cwd: launch.cwd, detached: true, stdio: ['ignore', fd, fd] });
    await new Promise<void>((resolve, reject) => {
      child.once('spawn', resolve);
      child.once('error', reject);
    });
    child.once('exit', (code, signal) => (exit = signal ? `killed by ${signal}` : `exit code ${code}`));
    child.unref(); // The server may outlive this Node process (`npm run servers -- start`).
    const pid = child.pid as number;
    await fsp.writeFile(paths.pid, `${pid}\n`);
    return { name, pid, pidFile: paths.pid, exitReason: () => exit };
  } finally {
    fs.closeSync(fd);
  }
}

function pidProc(name: string, pid: number, pidFile: string): Proc {
  return { name, pid, pidFile, exitReason: () => (isAlive(pid) ? undefined : 'exited') };
}

/** Polls `def.check` until it passes; fails fast with the log tail when the process dies. */
async function waitHealthy(def: ServerDef, paths: Paths, proc: Proc | undefined, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  for (;;) {
    const exit = proc?.exitReason();
    if (exit !== undefined) {
      throw new Error(`${def.name} stopped during startup (${exit}). ${await logTail(paths.log)}`);
    }
    try {
      await withTimeout(def.check(), Math.min(ATTEMPT_MS, Math.max(deadline - Date.now(), 1_000)), 'timed out');
      return;
    } catch (err) {
      lastError = err;
    }
    if (Date.now() >= deadline) {
      const tail = proc ? ` ${await logTail(paths.log)}` : '';
      throw new Error(`${def.name} not healthy after ${timeoutMs / 1000}s: ${errorMessage(lastError)}.${tail}`);
    }
    await sleep(POLL_MS);
  }
}

async function stopAll(procs: Proc[], progress: Progress): Promise<void> {
  await Promise.all(procs.splice(0).map((proc) => stopProc(proc, progress)));
}

/** SIGTERM lets each server shut down cleanly (Kafka and Cassandra flush); SIGKILL only after STOP_TIMEOUT_MS. */
async function stopProc(proc: Proc, progress: Progress): Promise<void> {
  const t0 = Date.now();
  if (proc.exitReason() === undefined) {
    progress(`${proc.name}: stopping (pid ${proc.pid})…`);
    signalGroup(proc.pid, 'SIGTERM');
    if (!(await waitForExit(proc, STOP_TIMEOUT_MS))) {
      progress(`${proc.name}: still running after ${STOP_TIMEOUT_MS / 1000}s, killing`);
      signalGroup(proc.pid, 'SIGKILL');
      await waitForExit(proc, 5_000);
    }
    progress(`${proc.name}: stopped in ${secondsSince(t0)}`);
  }
  await removePidFile(proc.pidFile, proc.pid);
}

function signalGroup(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pid, signal); // The server is its group's leader (spawned detached).
  } catch {
    try {
      process.kill(pid, signal);
    } catch {
      // Already gone.
    }
  }
}

async function waitForExit(proc: Proc, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (proc.exitReason() === undefined) {
    if (Date.now() >= deadline) return false;
    await sleep(100);
  }
  return true;
}

/** The pid in `pidFile` if that process is alive and is one of ours (its command line mentions `root`). */
async function livePid(pidFile: string, root: string): Promise<number | undefined> {
  const pid = Number.parseInt((await readText(pidFile)) ?? '', 10);
  if (!Number.isInteger(pid) || pid <= 0 || !isAlive(pid)) return undefined;
  // A stale pid file may name a recycled pid; on Linux the command line tells whether it is still our server.
  const cmdline = await readText(`/proc/${pid}/cmdline`);
  if (cmdline !== undefined && !cmdline.includes(root)) return undefined;
  return pid;
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
  // A zombie (exited, not yet reaped by its parent) still accepts signal 0. But a JVM's main thread can be a zombie
  // while its other threads still shut down (and hold ports), so only a zombie without other threads is gone.
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    const state = stat.charAt(stat.lastIndexOf(')') + 2);
    return state !== 'Z' || fs.readdirSync(`/proc/${pid}/task`).length > 1;
  } catch {
    return true; // No /proc (macOS): signal 0 is all we know.
  }
}

async function removePidFile(pidFile: string, pid?: number): Promise<void> {
  // Do not delete a pid file that meanwhile names another process (a concurrent start).
  if (pid !== undefined && (await readText(pidFile))?.trim() !== String(pid)) return;
  await fsp.rm(pidFile, { force: true });
}

async function logTail(file: string): Promise<string> {
  const text = (await readText(file)) ?? '';
  const lines = text.trimEnd().split('\n').slice(-LOG_TAIL_LINES);
  return `Last ${lines.length} lines of ${file}:\n${lines.join('\n')}`;
}

// ---------------------------------------------------------------------------------------------------------------
// Tools: java, mvn and downloads

/** Finds java and mvn lazily, so reusing running servers needs neither, and a finished download needs no mvn. */
class Tools {
  private javaPath: Promise<string> | undefined;

  constructor(readonly progress: Progress) {}

  java(): Promise<string> {
    this.javaPath ??= findJava(this.progress);
    return this.javaPath;
  }

  which(name: string, what: string): string {
    const found = which(name);
    if (!found) throw new Error(`${name} not found on PATH: install ${what}.`);
    return found;
  }

  /** Maven shares ~/.m2 between the parallel downloads; a clash there is rare and a retry fixes it. */
  async mvn(args: string[]): Promise<void> {
    const mvn = which('mvn') ?? which('mvn.cmd');
    if (!mvn) {
      throw new Error(
        'mvn not found on PATH: install Apache Maven 3.6+ (e.g. `apt-get install maven` or `brew install maven`); ' +
          'it fetches Kafka, Cassandra and Apicurio from Maven Central once. Or set KAFKA_BROKERS, ' +
          'CASSANDRA_CONTACT_POINTS and SCHEMA_REGISTRY_URL to use servers you run yourself.',
      );
    }
    const full = ['-B', '-q', ...args];
    try {
      await this.run(mvn, full);
    } catch {
      await this.run(mvn, full);
    }
  }

  copyDependencies(pom: string, dist: string): Promise<void> {
    const lib = path.join(dist, 'lib');
    return this.mvn(['-f', pom, 'dependency:copy-dependencies', '-DincludeScope=runtime', `-DoutputDirectory=${lib}`]);
  }

  run(cmd: string, args: string[]): Promise<string> {
    return runCommand(cmd, args);
  }
}

/** Runs `fetch` into an emptied `dir` unless its marker holds `key` (the pom's hash, so pom edits re-download). */
async function downloadOnce(name: string, dir: string, key: string, tools: Tools, fetch: () => Promise<void>) {
  const marker = path.join(dir, '.complete');
  if ((await readText(marker)) === key) return;
  const t0 = Date.now();
  tools.progress(`${name}: downloading from Maven Central into ${dir}…`);
  await fsp.rm(dir, { recursive: true, force: true });
  await fsp.mkdir(dir, { recursive: true });
  await fetch();
  await fsp.writeFile(marker, key);
  tools.progress(`${name}: downloaded in ${secondsSince(t0)}`);
}

async function findJava(progress: Progress): Promise<string> {
  const home = process.env.JAVA_HOME;
  const fromHome = home ? path.join(home, 'bin', process.platform === 'win32' ? 'java.exe' : 'java') : undefined;
  const java = fromHome && fs.existsSync(fromHome) ? fromHome : which('java');
  if (!java) {
    throw new Error(
      'java not found (JAVA_HOME unset or wrong, and no java on PATH): install a Java 17 runtime, e.g. ' +
        '`apt-get install openjdk-17-jre-headless` or `brew install openjdk@17`, or set JAVA_HOME.',
    );
  }
  const out = await runCommand(java, ['-version']);
  const match = /version "(\d+)(?:\.(\d+))?/.exec(out);
  const major = match ? (match[1] === '1' ? Number(match[2]) : Number(match[1])) : 0;
  if (major < 17) {
    throw new Error(`${java} is Java ${major || '(unknown version)'}; Apicurio 3 needs Java 17 (install OpenJDK 17).`);
  }
  if (major !== 17) progress(`servers: warning: Java ${major} at ${java}; Cassandra 5.0 is only tested on Java 17`);
  return java;
}

function which(name: string): string | undefined {
  for (const dir of (process.env.PATH ?? '').split(path.delimiter)) {
    if (!dir) continue;
    const candidate = path.join(dir, name);
    try {
      fs.accessSync(candidate, fs.constants.X_OK);
      if (fs.statSync(candidate).isFile()) return candidate;
    } catch {
      // Not here.
    }
  }
  return undefined;
}

/** Runs a short command; resolves with its combined output, rejects with the output's tail on failure. */
function runCommand(cmd: string, args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    const collect = (chunk: Buffer): void => {
      output = (output + chunk.toString()).slice(-20_000);
    };
    child.stdout.on('data', collect);
    child.stderr.on('data', collect);
    child.once('error', reject);
    child.once('close', (code) => {
      if (code === 0) resolve(output);
      else reject(new Error(`${path.basename(cmd)} ${args.join(' ')} failed (exit ${code}):\n${tail(output)}`));
    });
  });
}

// ---------------------------------------------------------------------------------------------------------------
// Small helpers

function portFromEnv(name: string, fallback: number): number {
  const raw = process.env[name];
  if (!raw) return fallback;
  const port = Number(raw);
  if (!Number.isInteger(port) || port <= 0 || port > 65535) throw new Error(`${name}=${raw} is not a port number`);
  return port;
}

function splitList(value: string | undefined): string[] | undefined {
  const items = (value ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  return items.length > 0 ? items : undefined;
}

function portAnswers(port: number, timeoutMs = 1_000): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ host: HOST, port });
    const done = (ok: boolean): void => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(timeoutMs, () => done(false));
    socket.once('connect', () => done(true));
    socket.once('error', () => done(false));
  });
}

async function assertPortOpen(port: number): Promise<void> {
  if (!(await portAnswers(port))) throw new Error(`nothing listens on ${HOST}:${port}`);
}

function withTimeout<T>(promise: Promise<T>, ms: number, message: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(message)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

function onceOnly(fn: () => Promise<void>): () => Promise<void> {
  let result: Promise<void> | undefined;
  return () => (result ??= fn());
}

function fileHash(file: string): string {
  return createHash('sha256').update(fs.readFileSync(file)).digest('hex');
}

async function readText(file: string): Promise<string | undefined> {
  try {
    return await fsp.readFile(file, 'utf8');
  } catch {
    return undefined;
  }
}

function tail(text: string, lines = LOG_TAIL_LINES): string {
  return text.trimEnd().split('\n').slice(-lines).join('\n');
}

function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

function secondsSince(t0: number): string {
  return `${((Date.now() - t0) / 1000).toFixed(1)}s`;
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
