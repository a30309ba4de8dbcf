/**
 * A plain undici POST loop, run by the bench as its own process (as the dispatcher is) against the bench's receiver:
 * for each concurrency it keeps that many POSTs in flight for a short warm-up, then for `seconds`, and prints one JSON
 * line per concurrency: requests/s and p50/p99 latency of the requests that finished in the measured window.
 * Its agent is shaped like the dispatcher's (keep-alive, `connections` per origin, no pipelining) so the loop
 * measures the machine's loopback and the receiver, not a different client.
 */
import { Agent, request } from 'undici';

/** What the bench hands the loop (as JSON in argv[2]). */
export interface PostLoopSpec {
  url: string;
  bodyBase64: string;
  headers: Record<string, string>;
  concurrency: number[];
  seconds: number;
  warmupSeconds: number;
  connections: number;
}

/** One line of the loop's output. */
export interface PostLoopResult {
  concurrency: number;
  requests: number;
  errors: number;
  perSecond: number;
  p50Ms: number;
  p99Ms: number;
}

const spec = JSON.parse(process.argv[2] ?? '{}') as PostLoopSpec;
const body = Buffer.from(spec.bodyBase64, 'base64');
const agent = new Agent({ keepAliveTimeout: 30_000, connections: spec.connections, pipelining: 1 });
let sequence = 0;

for (const concurrency of spec.concurrency) {
  const measureFrom = performance.now() + spec.warmupSeconds * 1000;
  const endAt = measureFrom + spec.seconds * 1000;
  const durations: number[] = [];
  let errors = 0;
  const worker = async () => {
    while (performance.now() < endAt) {
      const started = performance.now();
      try {
        // A fresh delivery id each time, so the receiver does the work of a first receipt, as in the pipeline.
        const headers = { ...spec.headers, 'x-webhook-delivery-id': `loopback-${(sequence += 1)}` };
        const response = await request(spec.url, { method: 'POST', headers, body, dispatcher: agent });
        await response.body.dump();
      } catch {
        errors += 1;
      }
      const finished = performance.now();
      if (finished >= measureFrom && finished <= endAt) durations.push(finished - started);
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  durations.sort((a, b) => a - b);
  const at = (p: number) => durations[Math.min(durations.length - 1, Math.floor(durations.length * p))] ?? NaN;
  const result: PostLoopResult = {
    concurrency,
    requests: durations.length,
    errors,
    // Requests that finished in the window, whenever they started: the steady-state completion rate.
    perSecond: durations.length / spec.seconds,
    p50Ms: at(0.5),
    p99Ms: at(0.99),
  };
  console.log(JSON.stringify(result));
}
await agent.close();
