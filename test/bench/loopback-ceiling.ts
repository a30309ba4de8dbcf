// The machine's loopback ceiling for the bench: how many POSTs a plain undici loop gets through to the same receiver,
// so the pipeline's deliveries/s can be read as a fraction of what this machine allows at all.
import { spawn } from 'node:child_process';
import type { IncomingHttpHeaders } from 'node:http';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { PostLoopResult, PostLoopSpec } from './post-loop.ts';

const postLoop = path.join(path.dirname(fileURLToPath(import.meta.url)), 'post-loop.ts');

/** What to send: a delivery as the receiver got it (body and headers), and how hard. */
export interface CeilingOptions {
  url: string;
  body: Buffer;
  headers: IncomingHttpHeaders;
  concurrency: number[];
  seconds: number;
  connections: number;
}

// Headers that belong to the connection or the body's framing: undici sets its own.
const hopByHop = new Set(['host', 'connection', 'content-length', 'transfer-encoding', 'keep-alive']);

/** Runs post-loop.ts as its own process (a separate core, as the dispatcher has) and returns one result per level. */
export async function measureLoopbackCeiling(options: CeilingOptions): Promise<PostLoopResult[]> {
  const { url, body, headers, concurrency, seconds, connections } = options;
  const spec: PostLoopSpec = {
    url,
    bodyBase64: body.toString('base64'),
    headers: Object.fromEntries(
      Object.entries(headers).filter(
        (entry): entry is [string, string] => typeof entry[1] === 'string' && !hopByHop.has(entry[0]),
      ),
    ),
    concurrency,
    seconds,
    warmupSeconds: 0.5,
    connections,
  };
  const child = spawn(process.execPath, ['--import', 'tsx', postLoop, JSON.stringify(spec)], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let output = '';
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
  const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
  if (code !== 0) throw new Error(`the loopback POST loop exited with ${code}`);
  return output
    .split('\n')
    .filter((line) => line.startsWith('{'))
    .map((line) => JSON.parse(line) as PostLoopResult);
}

const count = (value: number) => Math.round(value).toLocaleString('en-US');
const ms = (value: number) => `${value < 10 ? value.toFixed(2) : value.toFixed(1)} ms`;

/** One line per level, e.g. "  50 in flight: 14,200 POST/s, p50 3.10 ms, p99 7.90 ms". */
export function formatCeiling(results: PostLoopResult[]): string[] {
  return results.map(
    (result) =>
      `  ${String(result.concurrency).padStart(3)} in flight: ${count(result.perSecond)} POST/s, ` +
      `p50 ${ms(result.p50Ms)}, p99 ${ms(result.p99Ms)}${result.errors ? `, ${result.errors} errors` : ''}`,
  );
}

/** The best level of the sweep: the ceiling the pipeline is compared with. */
export function ceilingOf(results: PostLoopResult[]): PostLoopResult | undefined {
  return results.reduce<PostLoopResult | undefined>(
    (best, result) => (best && best.perSecond >= result.perSecond ? best : result),
    undefined,
  );
}

/** " = 14 % of the loopback ceiling (15,000 POST/s at 50 in flight)", or nothing without a ceiling. */
export function fractionOfCeiling(deliveriesPerSecond: number, ceiling: PostLoopResult | undefined): string {
  if (!ceiling || !(ceiling.perSecond > 0) || !Number.isFinite(deliveriesPerSecond)) return '';
  const percent = (deliveriesPerSecond / ceiling.perSecond) * 100;
  return (
    ` = ${percent < 10 ? percent.toFixed(1) : percent.toFixed(0)} % of the loopback ceiling ` +
    `(${count(ceiling.perSecond)} POST/s at ${ceiling.concurrency} in flight)`
  );
}
