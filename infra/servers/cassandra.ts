/**
 * Cassandra 5.0 from the jars infra/maven/cassandra.pom.xml names: a single node, or one of the local cluster's three
 * (infra/servers/cluster.ts), each on its own loopback address.
 */
import fsp from 'node:fs/promises';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import cassandra from 'cassandra-driver';
import { MAVEN_DIR, downloadOnce } from './download.ts';
import { assertPortOpen } from './process.ts';
import { HOST, LOCAL_DC, type ServerDef } from './server-def.ts';
import { fileHash } from './util.ts';

/** Storage (gossip) and JMX ports; not overridable because nothing outside Cassandra itself talks to them. */
const CASSANDRA_STORAGE_PORT = 7000;
const CASSANDRA_JMX_PORT = 7199;

/** Module flags from Cassandra 5.0's conf/jvm17-server.options (it reflects into JDK internals). */
export const CASSANDRA_JAVA17_FLAGS = [
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

/**
 * Timer slack of Cassandra's threads (the kernel's default is 50 µs). Its request threads (the shared "SEP" pool) that
 * run out of work keep polling for more by sleeping 10 µs at a time, until about 10 ms pass without any: at a moderate
 * load that is tens of thousands of wake-ups a second, and a request that arrives meanwhile waits for the next one.
 * With the default, at 500 deliveries/s on this 2-core machine, those threads used about a third of a core; with 250
 * µs of slack, Cassandra's CPU per delivery was 473-577 µs against 839-922 µs. A CPU profile at 250 validations/s still
 * put 32 % of Cassandra's CPU in that polling with 250 µs; 500 µs halves the wake-ups again. Measured back to back
 * (`npm run bench -- --api`, README "Session 47"): at 250 validations/s the validate call's p99 was 57 ms against
 * 117-178 ms with 250 µs; on an idle node a compare-and-set takes about as long (p50 2.2 against 1.9-2.2 ms). 1 ms
 * and 2 ms saved as much CPU under load but slowed that idle compare-and-set (3.0 and 4.9 ms).
 */
export const CASSANDRA_TIMER_SLACK_NS = 500_000;

/** One Cassandra node: where it listens and how it joins its ring. */
export interface CassandraNode {
  host: string;
  /** Addresses of the seed nodes (whose storage port is the same as every node's). */
  seeds: string[];
  /** Its JMX port on 127.0.0.1 (nodetool's), one per node since JMX listens on the loopback address. */
  jmxPort: number;
  /** Its rack in `LOCAL_DC` (GossipingPropertyFileSnitch); a single node uses SimpleSnitch's rack1. */
  rack?: string;
  /** Its one token: set for the cluster's nodes, so they join without bootstrapping (streaming) from each other. */
  initialToken?: string;
  /** JVM heap (`-Xmx`), e.g. `1g`. */
  heap: string;
}

export function singleCassandraNode(): CassandraNode {
  return { host: HOST, seeds: [HOST], jmxPort: CASSANDRA_JMX_PORT, heap: '1g' };
}

export function cassandraDef(port: number, node: CassandraNode = singleCassandraNode(), id = 'cassandra'): ServerDef {
  const pom = path.join(MAVEN_DIR, 'cassandra.pom.xml');
  return {
    name: 'cassandra',
    id,
    host: node.host,
    envVar: 'CASSANDRA_CONTACT_POINTS',
    portVar: 'CASSANDRA_PORT',
    port,
    address: `${node.host}:${port}`,
    startupMs: 180_000,
    download: (paths, tools) =>
      downloadOnce('cassandra', paths.dist, fileHash(pom), tools, () => tools.copyDependencies(pom, paths.dist)),
    prepare: async (paths) => {
      const lib = path.join(paths.dist, 'lib');
      const dirs = ['data', 'commitlog', 'saved_caches', 'hints', 'cdc_raw'].map((d) => path.join(paths.data, d));
      const logDir = path.join(path.dirname(paths.log), path.basename(paths.log, '.log'));
      const triggers = path.join(paths.conf, 'triggers');
      for (const dir of [paths.conf, logDir, triggers, ...dirs]) await fsp.mkdir(dir, { recursive: true });
      const yaml = path.join(paths.conf, 'cassandra.yaml');
      const logback = path.join(paths.conf, 'logback.xml');
      const rackdc = path.join(paths.conf, 'cassandra-rackdc.properties');
      await fsp.writeFile(yaml, cassandraYaml(port, paths.data, node));
      await fsp.writeFile(logback, CASSANDRA_LOGBACK);
      if (node.rack) await fsp.writeFile(rackdc, `dc=${LOCAL_DC}\nrack=${node.rack}\n`);
      // jamm measures object sizes for memtable accounting; Cassandra's own scripts load it as an agent too.
      const jamm = (await fsp.readdir(lib)).find((f) => /^jamm-.*\.jar$/.test(f));
      const args = [
        `-Xms${node.heap}`,
        `-Xmx${node.heap}`,
        '-Xss256k',
        '-XX:+UseG1GC',
        '-XX:+ParallelRefProcEnabled',
        '-XX:MaxTenuringThreshold=1',
        '-XX:G1HeapRegionSize=16m',
        '-XX:MaxGCPauseMillis=300',
        '-XX:+PerfDisableSharedMem',
        // Every collection and its pause, for reading latency tails against (GCInspector logs only those over 200 ms).
        `-Xlog:gc:file=${path.join(logDir, 'gc.log')}:time,uptime:filecount=3,filesize=10m`,
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
        // A single seed node has nobody to gossip with, and the cluster's nodes join with their tokens set, without
        // streaming: these waits only delay a start.
        '-Dcassandra.skip_wait_for_gossip_to_settle=0',
        '-Dcassandra.ring_delay_ms=0',
        '-Dcassandra.superuser_setup_delay_ms=0',
        ...(node.rack ? [`-Dcassandra-rackdc.properties=${pathToFileURL(rackdc).href}`] : []),
        // JMX (for nodetool) on the loopback interface only.
        `-Dcassandra.jmx.local.port=${node.jmxPort}`,
        `-Dcom.sun.management.jmxremote.rmi.port=${node.jmxPort}`, // else RMI takes a random port
        `-Dcassandra.triggers_dir=${triggers}`,
        '-cp',
        path.join(lib, '*'),
        'org.apache.cassandra.service.CassandraDaemon',
      ];
      return { args, cwd: paths.data, timerSlackNs: CASSANDRA_TIMER_SLACK_NS };
    },
    check: async () => {
      await cassandraReleaseVersion(node.host, port);
    },
  };
}

export function cassandraYaml(port: number, data: string, node: CassandraNode): string {
  // JSON strings are valid YAML scalars, which keeps odd characters in paths harmless.
  const q = (s: string): string => JSON.stringify(s);
  return `# Written by infra/servers.ts on every start; edits are lost.
cluster_name: core-webhooks-local
num_tokens: 1
${node.initialToken ? `initial_token: ${node.initialToken}\nauto_bootstrap: false\n` : ''}partitioner: org.apache.cassandra.dht.Murmur3Partitioner
endpoint_snitch: ${node.rack ? 'GossipingPropertyFileSnitch' : 'SimpleSnitch'}
seed_provider:
  - class_name: org.apache.cassandra.locator.SimpleSeedProvider
    parameters:
      - seeds: "${node.seeds.map((seed) => `${seed}:${CASSANDRA_STORAGE_PORT}`).join(',')}"
listen_address: ${node.host}
rpc_address: ${node.host}
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
# The services group their writes into unlogged batches of up to 160 rows of several partitions (core/write-batcher.ts,
# at most 48 KB by its estimate, which counts more than Cassandra does): no warning for those, the refusal well above.
batch_size_warn_threshold: 64KiB
batch_size_fail_threshold: 640KiB
unlogged_batch_across_partitions_warn_threshold: 1000
# Local data is disposable: no snapshot on every TRUNCATE/DROP (tests do many of those).
auto_snapshot: false
# Trie memtables holding their data off the heap (Cassandra 5's recommended memtable): back to back against the skip-list
# default on the heap, the fast bench delivered 3,719-3,844/s against 3,250-3,370/s, Cassandra's CPU fell from 202-216 to
# 148-153 µs per delivery and its GC pauses from 0.9-1.1 s to 0.3 s a run (young pauses of up to 160 ms to under 80).
memtable:
  configurations:
    skiplist:
      class_name: SkipListMemtable
    trie:
      class_name: TrieMemtable
    default:
      inherits: trie
memtable_allocation_type: offheap_objects
# Thread pools sized for this 2-core machine, as Cassandra's own guidance sizes concurrent_writes (8 per core) rather
# than its defaults for a large server (32, 32, 32, 128). Alternated with the defaults over restarts (2 blocks of 3 runs
# each after a warm-up), the fast bench gave 4,709-5,667/s (mean 5,212) against 4,474-5,499/s (mean 5,028).
concurrent_writes: 16
concurrent_reads: 16
concurrent_counter_writes: 16
native_transport_max_threads: 16
# Paxos v2 (Cassandra 4.1+): a compare-and-set (every validation's, test/bench/lwt-cost.ts) in two round trips between
# replicas instead of four. One node, 250 conditional batches a second: p50 1.6-1.8 ms, p99 2.2-3.9 ms against 2.0-2.2 and
# 2.7-4.2 ms with v1; Cassandra's CPU per batch 900-930 µs against 990-1,240 µs (not separable from the spread).
paxos_variant: v2
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

async function cassandraReleaseVersion(host: string, port: number): Promise<string> {
  await assertPortOpen(port, host);
  const client = new cassandra.Client({
    contactPoints: [`${host}:${port}`],
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
