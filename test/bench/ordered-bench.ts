/**
 * `npm run bench -- --ordered [--events 5000] [--entities 1000] [--rate 500] [--tenants 10] [--subs 2] [--rounds 1]
 *   [--warmup W] [--tsx]`
 * The cost of entity ordering: the end-to-end bench (bench.ts, each run a process of its own on its own keyspace and
 * topics) with half the subscriptions ordered by entity against the same with none ordered, as fast as possible
 * (deliveries/s) and paced at --rate deliveries/s (event-to-receipt p50/p99). The events cycle over --entities
 * entityIds (--events / --entities each), so an ordered subscription has earlier deliveries of the same entity to wait
 * for. Prints both runs' figures and the ratios against the targets (throughput within 10 % of unordered, p99 at the
 * rate within 2×); it measures, it does not assert. --rounds R alternates the two R times and takes the medians.
 */
import { spawn } from 'node:child_process';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { buildServices } from '../../infra/build.ts';
import { repoRoot } from '../../infra/processes.ts';

const { values } = parseArgs({
  options: {
    ordered: { type: 'boolean', default: true },
    events: { type: 'string', default: '5000' },
    entities: { type: 'string', default: '1000' },
    rate: { type: 'string', default: '500' },
    tenants: { type: 'string', default: '10' },
    subs: { type: 'string', default: '2' },
    rounds: { type: 'string', default: '1' },
    warmup: { type: 'string' },
    tsx: { type: 'boolean', default: false },
  },
});
const rounds = Number(values.rounds);

/** The figures one bench.ts run prints that this comparison reads. */
interface Figures {
  perSecond: number;
  p50: number;
  p99: number;
  /** The ordered subscriptions' own p99, in a run with some. */
  orderedP99?: number;
}

/** Runs bench.ts with `args` in a process of its own, its output shown as it comes, and reads its figures. */
async function benchRun(label: string, args: string[]): Promise<Figures> {
  console.log(`\n=== ${label}: npm run bench -- ${args.join(' ')}`);
  const child = spawn(process.execPath, ['--import', 'tsx', path.join(repoRoot, 'test/bench/bench.ts'), ...args], {
    cwd: repoRoot,
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => {
    output += chunk.toString('utf8');
    process.stdout.write(chunk);
  });
  const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
  const throughput = /^throughput: (\d+) deliveries\/s/m.exec(output);
  const latency = /^event-to-receipt latency: p50 (\d+) ms, p99 (\d+) ms/m.exec(output);
  if (code !== 0 || !throughput || !latency) throw new Error(`${label}: the bench exited ${code} without its figures`);
  const ordered = /^ordered subscriptions \(\d+\): event-to-receipt latency p50 \d+ ms, p99 (\d+) ms/m.exec(output);
  return {
    perSecond: Number(throughput[1]),
    p50: Number(latency[1]),
    p99: Number(latency[2]),
    ...(ordered ? { orderedP99: Number(ordered[1]) } : {}),
  };
}

const common = [
  ...['--events', values.events, '--entities', values.entities, '--tenants', values.tenants, '--subs', values.subs],
  ...(values.warmup !== undefined ? ['--warmup', values.warmup] : []),
  ...(values.tsx ? ['--tsx'] : ['--built']),
  '--no-ceiling',
];
if (!values.tsx) buildServices((line) => console.log(line));
const shapes = { unordered: ['--ordered-share', '0'], ordered: ['--ordered-share', '0.5'] };
const modes = { throughput: ['--rate', '0'], paced: ['--rate', values.rate] };
const results = new Map<string, Figures[]>();
for (let round = 0; round < rounds; round += 1) {
  for (const [mode, modeArgs] of Object.entries(modes)) {
    // Alternated, so that a drift of the machine weighs on both alike.
    const order = round % 2 === 0 ? (['unordered', 'ordered'] as const) : (['ordered', 'unordered'] as const);
    for (const shape of order) {
      const key = `${mode}/${shape}`;
      const figures = await benchRun(`${key}, round ${round + 1} of ${rounds}`, [
        ...common,
        ...modeArgs,
        ...shapes[shape],
      ]);
      results.set(key, [...(results.get(key) ?? []), figures]);
    }
  }
}

const median = (list: number[]) => list.slice().sort((a, b) => a - b)[Math.floor(list.length / 2)]!;
const figure = (key: string, pick: (figures: Figures) => number | undefined) =>
  median(results.get(key)!.map((figures) => pick(figures) ?? NaN));
const verdict = (ok: boolean) => (ok ? 'meets the target' : 'MISSES the target');
const perSecond = {
  unordered: figure('throughput/unordered', (f) => f.perSecond),
  ordered: figure('throughput/ordered', (f) => f.perSecond),
};
const paced = (shape: 'unordered' | 'ordered') => ({
  p50: figure(`paced/${shape}`, (f) => f.p50),
  p99: figure(`paced/${shape}`, (f) => f.p99),
});
const [unordered, ordered] = [paced('unordered'), paced('ordered')];
const orderedOnlyP99 = figure('paced/ordered', (f) => f.orderedP99);
const throughputRatio = perSecond.ordered / perSecond.unordered;
const p99Ratio = ordered.p99 / unordered.p99;
console.log(
  [
    '',
    `entity ordering: ${values.events} events over ${values.entities} entities, ${values.tenants} tenants × ` +
      `${values.subs} subscriptions; "ordered": half of them with ordering 'entity'` +
      (rounds > 1 ? `; medians of ${rounds} rounds` : ''),
    `  throughput: unordered ${perSecond.unordered} deliveries/s, ordered ${perSecond.ordered} deliveries/s`,
    `  at ${values.rate} deliveries/s: unordered p50 ${unordered.p50} ms p99 ${unordered.p99} ms; ordered p50 ` +
      `${ordered.p50} ms p99 ${ordered.p99} ms (its ordered subscriptions alone: p99 ${orderedOnlyP99} ms)`,
    `  ordered/unordered throughput ratio ${throughputRatio.toFixed(2)} (target ≥ 0.90): ` +
      verdict(throughputRatio >= 0.9),
    `  p99 ratio at ${values.rate}/s ${p99Ratio.toFixed(2)} (target ≤ 2): ${verdict(p99Ratio <= 2)}; the ordered ` +
      `subscriptions' own p99 against unordered: ${(orderedOnlyP99 / unordered.p99).toFixed(2)}`,
  ].join('\n'),
);
