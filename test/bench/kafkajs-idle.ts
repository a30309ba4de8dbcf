/**
 * `npx tsx test/bench/kafkajs-idle.ts [--rounds 2] [--seconds 10]`
 * What an idle kafkajs consumer (in a group, on a topic of 6 partitions, no records) and admin client cost in CPU, with
 * kafkajs as published and with core/kafkajs-request-queue.ts' fix, each in a fresh process, alternating. Published
 * kafkajs wakes every millisecond per connection (kafkajs issues #1704, #1751).
 */
import { spawn } from 'node:child_process';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { Kafka, logLevel } from 'kafkajs';
import { loadConfig } from '../../core/config.ts';
import { patchRequestQueue } from '../../core/kafkajs-request-queue.ts';
import { repoRoot } from '../../infra/processes.ts';
import { ensureServers } from '../../infra/servers.ts';

const { values } = parseArgs({
  options: {
    rounds: { type: 'string', default: '2' },
    seconds: { type: 'string', default: '10' },
    child: { type: 'string' },
  },
});

async function idleChild(variant: string): Promise<void> {
  if (variant === 'patched') patchRequestQueue();
  const kafka = new Kafka({
    brokers: loadConfig(process.env).kafka.brokers,
    clientId: 'idle',
    logLevel: logLevel.NOTHING,
  });
  const admin = kafka.admin();
  await admin.connect();
  const topic = `bench-idle-${process.pid}`;
  await admin.createTopics({ topics: [{ topic, numPartitions: 6 }], waitForLeaders: true });
  const consumer = kafka.consumer({ groupId: topic, maxWaitTimeInMs: 100 });
  await consumer.connect();
  await consumer.subscribe({ topics: [topic] });
  await consumer.run({ eachMessage: async () => {} });
  await new Promise((resolve) => setTimeout(resolve, 3_000)); // joined and fetching
  const before = process.cpuUsage();
  const started = performance.now();
  await new Promise((resolve) => setTimeout(resolve, Number(values.seconds) * 1_000));
  const used = process.cpuUsage(before);
  const share = (used.user + used.system) / 1e6 / ((performance.now() - started) / 1000);
  console.log(`${variant.padEnd(9)} idle consumer and admin: ${(share * 100).toFixed(1)} % of one core`);
  await consumer.disconnect();
  await admin.deleteTopics({ topics: [topic] });
  await admin.disconnect();
}

if (values.child) {
  await idleChild(values.child);
} else {
  const servers = await ensureServers({ root: path.join(repoRoot, '.local') });
  process.env.KAFKA_BROKERS = servers.kafkaBrokers.join(',');
  for (let round = 0; round < Number(values.rounds); round += 1) {
    for (const variant of ['published', 'patched']) {
      await new Promise<void>((resolve, reject) => {
        const child = spawn(process.execPath, [...process.execArgv, import.meta.filename, '--child', variant], {
          stdio: ['ignore', 'inherit', 'inherit'],
          env: process.env,
        });
        child.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`${variant} exited ${code}`))));
      });
    }
  }
}
