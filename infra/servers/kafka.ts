/** Kafka in KRaft mode (one node that is broker and controller), from the jars infra/maven/kafka.pom.xml names. */
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

export function kafkaDef(port: number): ServerDef {
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
  // As every other client here: unpatched, each connection wakes every millisecond (TimeoutNegativeWarning on Node 24).
  patchRequestQueue();
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
