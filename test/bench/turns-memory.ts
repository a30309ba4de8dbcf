// The router's turns with and without their memory of routed events (core/turns.ts): nanoseconds per run, 400,000
// runs of distinct keys, 100 at a time, three rounds. `npx tsx test/bench/turns-memory.ts`
import { randomUUID } from 'node:crypto';
import { Turns } from '../../core/turns.ts';

const RUNS = 400_000;
const keys = Array.from({ length: RUNS }, () => `tenant-${Math.floor(Math.random() * 10)}\u0000${randomUUID()}`);

async function nsPerRun(turns: Turns): Promise<number> {
  const started = process.hrtime.bigint();
  for (let start = 0; start < RUNS; start += 100) {
    await Promise.all(keys.slice(start, start + 100).map((key) => turns.run(key, async (again) => again)));
  }
  return Number(process.hrtime.bigint() - started) / RUNS;
}

for (let round = 1; round <= 3; round += 1) {
  const without = await nsPerRun(new Turns());
  const remembering = await nsPerRun(new Turns({ entries: 50_000, ms: 10 * 60_000 }));
  console.log(
    `round ${round}: without memory ${without.toFixed(0)} ns/run, remembering 50,000 ${remembering.toFixed(0)} ns/run`,
  );
}
