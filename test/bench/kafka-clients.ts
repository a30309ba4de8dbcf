/**
 * `npx tsx test/bench/kafka-clients.ts [--records 200000] [--rounds 3]`
 * The two Kafka clients side by side on the local broker, each in a fresh process, alternating, on a fresh topic of 6
 * partitions per run: what one record costs to publish (as core/kafka.ts' Publisher does: idempotent, acks=all,
 * concurrent callers merged into one request in flight at a time) and to consume (a group reading the topic from its
 * start), in records/s and in CPU µs per record of the client and of the broker. The records are shaped as delivery
 * records: a 36-character key, 500 bytes of value and a header. This is the measurement behind core/kafka.ts' choice of
 * client, so it is the one file besides core/kafka.ts that imports both clients directly.
 */
import { spawn } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { Consumer as PlatformaticConsumer, stringDeserializer } from '@platformatic/kafka';
import { Kafka, logLevel, Partitioners } from 'kafkajs';
import { loadConfig } from '../../core/config.ts';
import { applyTopics, createKafka, Publisher, type OutgoingRecord } from '../../core/kafka.ts';
import { createLogger } from '../../core/log.ts';
import { repoRoot } from '../../infra/processes.ts';
import { ensureServers, serverStatus } from '../../infra/servers.ts';
import { CpuMeter } from './process-cpu.ts';

const CLIENTS = ['kafkajs', 'platformatic'] as const;
type Client = (typeof CLIENTS)[number];
/** Callers publishing at once, and the records each hands the publisher per call (a routed event's deliveries). */
const CALLERS = 64;
const PER_CALL = 10;

const { values } = parseArgs({
  options: {
    records: { type: 'string', default: '200000' },
    rounds: { type: 'string', default: '3' },
    child: { type: 'string' },
    topic: { type: 'string' },
    'broker-pid': { type: 'string' },
  },
});
const records = Number(values.records);
const logger = createLogger('kafka-clients', 'warn');

interface Figures {
  client: Client;
  phase: 'produce' | 'consume';
  perSecond: number;
  clientUs: number;
  brokerUs: number;
}

/** Runs `work` over `records` records, measuring this process's and the broker's CPU. */
async function measure(client: Client, phase: Figures['phase'], brokerPid: number, work: () => Promise<void>) {
  const meter = new CpuMeter({ client: process.pid, broker: brokerPid });
  meter.start();
  const started = performance.now();
  await work();
  const seconds = (performance.now() - started) / 1000;
  const cpu = new Map(meter.stop().map((share) => [share.name, share.seconds]));
  const perRecord = (name: string) => Math.round(((cpu.get(name) ?? NaN) / records) * 1e7) / 10;
  const figures: Figures = {
    client,
    phase,
    perSecond: Math.round(records / seconds),
    clientUs: perRecord('client'),
    brokerUs: perRecord('broker'),
  };
  console.log(JSON.stringify(figures));
}

/** kafkajs as core/kafka.ts used it until the switch: concurrent callers merged, one sendBatch in flight. */
async function kafkajsPublish(brokers: string[], topic: string): Promise<(batch: OutgoingRecord[]) => Promise<void>> {
  const producer = new Kafka({ clientId: 'kafka-clients', brokers, logLevel: logLevel.ERROR }).producer({
    idempotent: true,
    maxInFlightRequests: 1,
    createPartitioner: Partitioners.DefaultPartitioner,
  });
  await producer.connect();
  const pending: { record: OutgoingRecord; done: () => void }[] = [];
  let sending: Promise<void> | undefined;
  const drain = async () => {
    while (pending.length > 0) {
      const batch = pending.splice(0, 2_000);
      await producer.sendBatch({ acks: -1, topicMessages: [{ topic, messages: batch.map(({ record }) => record) }] });
      for (const { done } of batch) done();
    }
    sending = undefined;
  };
  return (batch) =>
    Promise.all(
      batch.map(
        (record) =>
          new Promise<void>((done) => {
            pending.push({ record, done });
            sending ??= drain();
          }),
      ),
    ).then(() => undefined);
}

async function child(client: Client, phase: Figures['phase'], topic: string, brokerPid: number) {
  const brokers = loadConfig(process.env).kafka.brokers;
  if (phase === 'produce') {
    const all = Array.from({ length: records }, () => ({
      topic,
      key: randomUUID(),
      value: randomBytes(500),
      headers: { 'due-at': String(Date.now()) },
    }));
    let close: () => Promise<void> = async () => undefined;
    let publish: (batch: OutgoingRecord[]) => Promise<void>;
    if (client === 'kafkajs') {
      publish = await kafkajsPublish(brokers, topic);
    } else {
      const publisher = await Publisher.connect(createKafka(brokers, 'kafka-clients', logger));
      publish = (batch) => publisher.publish(batch);
      close = () => publisher.close();
    }
    let next = 0;
    const caller = async () => {
      while (next < all.length) {
        const from = next;
        next += PER_CALL;
        await publish(all.slice(from, from + PER_CALL));
      }
    };
    await measure(client, phase, brokerPid, () => Promise.all(Array.from({ length: CALLERS }, caller)).then(() => {}));
    await close();
    return;
  }
  const groupId = `kafka-clients-${randomUUID()}`;
  if (client === 'kafkajs') {
    const consumer = new Kafka({ clientId: 'kafka-clients', brokers, logLevel: logLevel.ERROR }).consumer({ groupId });
    await consumer.connect();
    await consumer.subscribe({ topics: [topic], fromBeginning: true });
    await measure(client, phase, brokerPid, async () => {
      let count = 0;
      await new Promise<void>((resolve) => {
        void consumer.run({
          eachBatch: async ({ batch }) => {
            for (const message of batch.messages) if (message.headers?.['due-at'] !== undefined) count += 1;
            if (count >= records) resolve();
          },
        });
      });
    });
    await consumer.disconnect();
    return;
  }
  const consumer = new PlatformaticConsumer({
    groupId,
    clientId: 'kafka-clients',
    bootstrapBrokers: brokers,
    deserializers: { headerKey: stringDeserializer },
  });
  await measure(client, phase, brokerPid, async () => {
    const stream = await consumer.consume({ topics: [topic], mode: 'earliest', autocommit: true });
    let count = 0;
    await new Promise<void>((resolve, reject) => {
      stream.on('error', reject);
      stream.on('data', (message: { headers: Map<string, Buffer> }) => {
        if (message.headers.get('due-at') !== undefined) count += 1;
        if (count >= records) resolve();
      });
    });
    await stream.close();
  });
  await consumer.close();
}

/** Runs one child process and returns the figures it printed. */
function runChild(client: Client, phase: Figures['phase'], topic: string, brokerPid: number): Promise<Figures> {
  const args = ['--import', 'tsx', path.join(repoRoot, 'test/bench/kafka-clients.ts')];
  args.push('--records', String(records), '--child', `${client}:${phase}`, '--topic', topic);
  args.push('--broker-pid', String(brokerPid));
  return new Promise((resolve, reject) => {
    const process_ = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'inherit'], env: process.env });
    let output = '';
    process_.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    process_.on('exit', (code) => {
      const line = output.split('\n').find((text) => text.startsWith('{'));
      if (code !== 0 || !line) return reject(new Error(`${client} ${phase} exited ${code}: ${output}`));
      resolve(JSON.parse(line) as Figures);
    });
  });
}

async function main() {
  const servers = await ensureServers({ root: path.join(repoRoot, '.local') });
  process.env.KAFKA_BROKERS = servers.kafkaBrokers.join(',');
  const brokerPid = (await serverStatus(path.join(repoRoot, '.local'))).find((server) => server.name === 'kafka')?.pid;
  if (brokerPid === undefined) throw new Error('the local broker is not running from .local: no pid to measure');
  const kafka = createKafka(loadConfig(process.env).kafka.brokers, 'kafka-clients-admin', logger);
  const results: Figures[] = [];
  const topics: string[] = [];
  for (let round = 1; round <= Number(values.rounds); round += 1) {
    for (const client of CLIENTS) {
      const topic = `kafka-clients-${client}-${randomUUID().slice(0, 8)}`;
      topics.push(topic);
      await applyTopics(kafka, [{ name: topic, partitions: 6 }]);
      for (const phase of ['produce', 'consume'] as const) {
        const figures = await runChild(client, phase, topic, brokerPid);
        results.push(figures);
        console.log(
          `round ${round} ${client.padEnd(12)} ${phase.padEnd(7)} ${String(figures.perSecond).padStart(7)} records/s, ` +
            `client ${figures.clientUs} µs/record, broker ${figures.brokerUs} µs/record`,
        );
      }
    }
  }
  const admin = kafka.admin();
  await admin.connect();
  await admin.deleteTopics({ topics });
  await admin.disconnect();
  console.log(`\n${records} records per run, ${CALLERS} callers of ${PER_CALL} records each; medians:`);
  for (const phase of ['produce', 'consume'] as const) {
    for (const client of CLIENTS) {
      const runs = results.filter((figures) => figures.client === client && figures.phase === phase);
      const median = (pick: (figures: Figures) => number) => runs.map(pick).sort((a, b) => a - b)[runs.length >> 1];
      console.log(
        `${phase.padEnd(7)} ${client.padEnd(12)} ${median((f) => f.perSecond)} records/s, ` +
          `client ${median((f) => f.clientUs)} µs/record, broker ${median((f) => f.brokerUs)} µs/record`,
      );
    }
  }
}

if (values.child) {
  const [client, phase] = values.child.split(':') as [Client, Figures['phase']];
  await child(client, phase, values.topic!, Number(values['broker-pid']));
  process.exit(0);
} else {
  await main();
}
