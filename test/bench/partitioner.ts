/**
 * `npx tsx test/bench/partitioner.ts [--calls 200000] [--rounds 3]`: ns per call and garbage collections per 100,000
 * calls of the publisher's partitioner on subscription ids (36-byte UUID keys), @platformatic/kafka's
 * compatibilityPartitioner (murmur2 on BigInts) against core/partitioner.ts (32-bit integers), alternated.
 */
import { randomUUID } from 'node:crypto';
import { PerformanceObserver } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { compatibilityPartitioner } from '@platformatic/kafka';
import { javaPartitioner } from '../../core/partitioner.ts';

const { values } = parseArgs({
  options: { calls: { type: 'string', default: '200000' }, rounds: { type: 'string', default: '3' } },
});
const calls = Number(values.calls);
const keys = Array.from({ length: 1_000 }, () => Buffer.from(randomUUID()));
const partitioners = {
  '@platformatic/kafka compatibilityPartitioner': (key: Buffer) => compatibilityPartitioner({ topic: '' }, key),
  'core/partitioner.ts javaPartitioner': (key: Buffer) => javaPartitioner(undefined, key),
};
let collections = 0;
new PerformanceObserver((list) => (collections += list.getEntries().length)).observe({ entryTypes: ['gc'] });
const tick = () => new Promise((resolve) => setTimeout(resolve, 20));

let sink = 0;
for (let round = 1; round <= Number(values.rounds); round += 1) {
  for (const [name, partition] of Object.entries(partitioners)) {
    for (let i = 0; i < 10_000; i += 1) sink ^= partition(keys[i % keys.length]!);
    await tick();
    collections = 0;
    const started = process.hrtime.bigint();
    for (let i = 0; i < calls; i += 1) sink ^= partition(keys[i % keys.length]!);
    const ns = Number(process.hrtime.bigint() - started) / calls;
    await tick();
    const perHundredThousand = (collections * 100_000) / calls;
    console.log(
      `round ${round}: ${name.padEnd(45)} ${ns.toFixed(0).padStart(6)} ns/call, ` +
        `${perHundredThousand.toFixed(1)} garbage collections per 100,000 calls`,
    );
  }
}
if (sink === 0.5) console.log(sink);
