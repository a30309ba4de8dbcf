/**
 * Kafka in KRaft mode, from the jars infra/maven/kafka.pom.xml names: one node that is broker and controller, or one
 * of the local cluster's three (infra/servers/cluster.ts), each broker and controller too.
 */
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import path from 'node:path';
import { randomBytes, randomUUID } from 'node:crypto';
import { pathToFileURL } from 'node:url';
import kafkajs from 'kafkajs';
import { patchRequestQueue } from '../../core/kafkajs-request-queue.ts';
import { MAVEN_DIR, downloadOnce } from './download.ts';
import { assertPortOpen } from './process.ts';
import { HOST, type ServerDef } from './server-def.ts';
import { fileHash, readText, withTimeout } from './util.ts';

/** One node of a KRaft cluster: broker and controller (its controller listens on the port after the broker's). */
export interface KafkaNode {
  nodeId: number;
  host: string;
  /** Every controller of the cluster, as `controller.quorum.voters` wants them: `1@host:port,…`. */
  voters: string;
  /** `broker.rack`, so replicas of a partition go to different racks. */
  rack?: string;
  /** Replication factor of the internal topics and of topics created without one. */
  replicas: number;
  /** `min.insync.replicas`, which acks=all writes need in sync. */
  minInsync: number;
  /** JVM heap (`-Xmx`), e.g. `512m`. */
  heap: string;
  /** The cluster's id, which every node's storage is formatted with; a single node keeps its own beside its data. */
  clusterId?: string;
}

/** The single local broker: node 1 on 127.0.0.1, its own only controller. */
export function singleKafkaNode(port: number): KafkaNode {
  return { nodeId: 1, host: HOST, voters: `1@${HOST}:${port + 1}`, replicas: 1, minInsync: 1, heap: '512m' };
}

export function kafkaDef(port: number, node: KafkaNode = singleKafkaNode(port), id = 'kafka'): ServerDef {
  const pom = path.join(MAVEN_DIR, 'kafka.pom.xml');
  const single = node.replicas === 1;
  return {
    name: 'kafka',
    id,
    host: node.host,
    envVar: 'KAFKA_BROKERS',
    portVar: 'KAFKA_PORT',
    port,
    address: `${node.host}:${port}`,
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
      await fsp.writeFile(props, kafkaProperties(port, logDir, node));
      await fsp.writeFile(log4j, KAFKA_LOG4J);
      const log4jOpt = `-Dlog4j.configuration=${pathToFileURL(log4j).href}`;
      // Formatting starts a JVM (~2 s), so it runs only until the log dir has its meta.properties.
      if (!fs.existsSync(path.join(logDir, 'meta.properties'))) {
        const clusterId = node.clusterId ?? (await persistedClusterId(path.join(paths.data, 'cluster-id')));
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
      // Every collection and its pause beside the server's log, for reading latency tails against.
      const gcLog = path.join(path.dirname(paths.log), `${path.basename(paths.log, '.log')}-gc.log`);
      const jvm = [
        `-Xms${node.heap}`,
        `-Xmx${node.heap}`,
        '-XX:+UseG1GC',
        '-XX:MaxGCPauseMillis=20',
        `-Xlog:gc:file=${gcLog}:time,uptime:filecount=3,filesize=10m`,
      ];
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
    // A cluster node is healthy once the cluster lists it (the cluster's own round trip waits for all three).
    check: () => (single ? kafkaRoundTrip([`${node.host}:${port}`], 1) : kafkaNodeListed(node.host, port, node.nodeId)),
  };
}

/**
 * How soon a node snapshots its metadata log once it has new records. Kafka's hour counts from the node's start, and
 * local nodes restart sooner: none ever snapshotted, and each start replayed the whole log since the cluster's creation.
 */
export const METADATA_SNAPSHOT_INTERVAL_MS = 60_000;

export function kafkaProperties(port: number, logDir: string, node: KafkaNode): string {
  const controller = port + 1;
  return `${[
    '# Written by infra/servers.ts on every start; edits are lost.',
    'process.roles=broker,controller',
    `node.id=${node.nodeId}`,
    `controller.quorum.voters=${node.voters}`,
    `listeners=PLAINTEXT://${node.host}:${port},CONTROLLER://${node.host}:${controller}`,
    `advertised.listeners=PLAINTEXT://${node.host}:${port}`,
    'controller.listener.names=CONTROLLER',
    'inter.broker.listener.name=PLAINTEXT',
    'listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT',
    ...(node.rack ? [`broker.rack=${node.rack}`] : []),
    `log.dirs=${logDir}`,
    'num.partitions=1',
    `default.replication.factor=${node.replicas}`,
    `min.insync.replicas=${node.minInsync}`,
    `offsets.topic.replication.factor=${node.replicas}`,
    `transaction.state.log.replication.factor=${node.replicas}`,
    `transaction.state.log.min.isr=${node.minInsync}`,
    // A replica that fell out of sync never becomes leader: losing acknowledged records is worse than waiting.
    'unclean.leader.election.enable=false',
    // A follower whose fetch failed (its leader moved or stopped) waits this long before fetching again, and an acks=all
    // record on the new leader waits for it: Kafka's 1 s default held produce requests 1.0 s at a broker's clean stop.
    ...(node.replicas > 1 ? ['replica.fetch.backoff.ms=100'] : []),
    // A broker that stops heartbeating (killed, or cut off from the controllers while it runs) is fenced, and its
    // partitions get new leaders, only after the session timeout; until then nothing can acknowledge the records sent
    // to its partitions. Kafka's 9 s (heartbeats every 2 s) was the deliveries' stop at a broker's kill or cut.
    ...(node.replicas > 1 ? ['broker.heartbeat.interval.ms=500', 'broker.session.timeout.ms=3000'] : []),
    // A broker applies a metadata change (a partition's new leader, a new topic) once it learns that the change is
    // committed, and Kafka 3.9's KRaft tells it so only in the answer to its next fetch of the metadata log, which waits
    // up to 500 ms for new records (KAFKA-14145, fixed in 4.1): at a broker's clean stop the new leaders answered
    // NOT_LEADER_OR_FOLLOWER for up to 0.9 s after the old one had handed them its partitions. The active controller's
    // no-op record every 100 ms (500 by default) ends that wait sooner: the last broker knew a new topic after a median
    // of 104 ms instead of 368 (test/cluster/metadata-propagation.test.ts), for about 1 % of a core per broker when idle
    // here (every 50 ms: 63 ms, for 3 %).
    ...(node.replicas > 1 ? ['metadata.max.idle.interval.ms=100'] : []),
    `metadata.log.max.snapshot.interval.ms=${METADATA_SNAPSHOT_INTERVAL_MS}`,
    // Few consumer groups here: 50 offsets partitions only make the first group wait for their creation.
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
export async function persistedClusterId(file: string): Promise<string> {
  const existing = (await readText(file))?.trim();
  if (existing) return existing;
  let id = randomBytes(16).toString('base64url');
  // Kafka's own generator also avoids a leading '-', which command-line parsers would take for an option.
  while (id.startsWith('-')) id = randomBytes(16).toString('base64url');
  await fsp.writeFile(file, `${id}\n`);
  return id;
}

function healthClient(brokers: string[]) {
  const { Kafka, logLevel } = kafkajs;
  // As every other client here: unpatched, each connection wakes every millisecond (TimeoutNegativeWarning on Node 24).
  patchRequestQueue();
  return new Kafka({
    clientId: 'servers-health',
    brokers,
    logLevel: logLevel.NOTHING,
    connectionTimeout: 2_000,
    requestTimeout: 10_000,
    retry: { retries: 3, initialRetryTime: 200 },
  });
}

/** A cluster node is up once it answers and the cluster's metadata lists it (a fenced broker is left out). */
async function kafkaNodeListed(host: string, port: number, nodeId: number): Promise<void> {
  await assertPortOpen(port, host);
  const admin = healthClient([`${host}:${port}`]).admin();
  try {
    await admin.connect();
    const { brokers } = await admin.describeCluster();
    if (!brokers.some((broker) => broker.nodeId === nodeId)) {
      throw new Error(`the cluster lists brokers ${brokers.map((b) => b.nodeId).join(', ') || 'none'}, not ${nodeId}`);
    }
  } finally {
    await admin.disconnect().catch(() => {});
  }
}

/**
 * Healthy means a topic (of `replicas` replicas) can be created, written with acks=all and read back, which is what
 * the services need.
 */
export async function kafkaRoundTrip(brokers: string[], replicas: number): Promise<void> {
  const [host, port] = brokers[0]!.split(':');
  await assertPortOpen(Number(port), host);
  const { Partitioners } = kafkajs;
  const kafka = healthClient(brokers);
  const name = `servers-health-${randomUUID()}`;
  const admin = kafka.admin();
  const producer = kafka.producer({ createPartitioner: Partitioners.DefaultPartitioner });
  const consumer = kafka.consumer({ groupId: name, sessionTimeout: 10_000, heartbeatInterval: 1_000 });
  let connected = false;
  try {
    await admin.connect();
    connected = true;
    // A creation that timed out waiting for its leader may still have created the topic: it is deleted either way.
    await admin.createTopics({
      topics: [{ topic: name, numPartitions: 1, replicationFactor: replicas }],
      waitForLeaders: true,
    });
    await producer.connect();
    await producer.send({ topic: name, acks: -1, messages: [{ value: 'ping' }] });
    await consumer.connect();
    await consumer.subscribe({ topics: [name], fromBeginning: true });
    const received = new Promise<void>((resolve, reject) => {
      consumer.run({ eachMessage: async () => resolve() }).catch(reject);
    });
    await withTimeout(received, 20_000, 'produced a message but could not consume it');
  } finally {
    await consumer.disconnect().catch(() => {});
    await producer.disconnect().catch(() => {});
    if (connected) {
      await admin.deleteTopics({ topics: [name] }).catch(() => {});
      await admin.deleteGroups([name]).catch(() => {});
    }
    await admin.disconnect().catch(() => {});
  }
}
