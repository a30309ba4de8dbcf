/**
 * The benches' receiver, on a thread of its own (test/bench/receiver-thread.ts starts it). In the bench's main thread it
 * shared an event loop and a heap with the event publisher (or the API clients) and the bench's bookkeeping: their work
 * and their garbage collections delayed the receipts' timestamps, which a subscriber's receiver, a process of its own,
 * does not see.
 * Here it only answers and stamps each request, and posts what it saw to the main thread, which does the rest.
 *
 * Answers 204 at once; 500 for a fraction `failRatio` of requests; 429 (Retry-After: 2) for the throttled subscriptions
 * until `throttleUntil`.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { monitorEventLoopDelay, performance } from 'node:perf_hooks';
import { parentPort, workerData } from 'node:worker_threads';

/** What the main thread sends: the throttled subscriptions and until when they refuse, or a question. */
export type ToReceiver =
  | { kind: 'throttle'; subscriptionIds: string[]; until: number; forMs: number }
  | { kind: 'measure'; on: boolean }
  | { kind: 'report' };

/** One request as the receiver answered it. */
export interface Receipt {
  kind: 'receipt';
  deliveryId: string;
  subscriptionId: string;
  /** Epoch ms (with a fraction) when the request's body had arrived. */
  at: number;
  /** The event's occurredAt from the body (epoch ms), when it had one. */
  occurredAt: number | undefined;
  /** The event's entityId from the body, when it had one. */
  entityId: string | undefined;
  answer: 204 | 429 | 500;
}

/** The receiver's figures, asked for once the run is over. */
export interface ReceiverReport {
  kind: 'report';
  /** The last delivery answered 204, for the loopback POST loop to replay. */
  sample: { headers: Record<string, string | string[] | undefined>; body: Buffer } | undefined;
  /** Most requests one throttled subscription had open at once after its first 2 s of throttling. */
  maxOpenThrottled: number;
  /** This thread's event-loop delay (ms) while measuring. */
  loopDelayP99Ms: number;
  loopDelayMaxMs: number;
}

const { failRatio } = workerData as { failRatio: number };
const port = parentPort!;
let throttled = new Set<string>();
let throttleUntil = 0;
let throttleForMs = 0;
let maxOpenThrottled = 0;
let sample: ReceiverReport['sample'];
const open = new Map<string, number>();
const loopDelay = monitorEventLoopDelay({ resolution: 10 });

const server = createServer((request, response) => {
  const chunks: Buffer[] = [];
  request.on('data', (chunk: Buffer) => chunks.push(chunk));
  const subscriptionId = String(request.headers['x-webhook-subscription-id']);
  const refusing = throttled.has(subscriptionId);
  open.set(subscriptionId, (open.get(subscriptionId) ?? 0) + 1);
  if (refusing && Date.now() < throttleUntil && Date.now() > throttleUntil - throttleForMs + 2_000) {
    maxOpenThrottled = Math.max(maxOpenThrottled, open.get(subscriptionId)!);
  }
  response.on('close', () => open.set(subscriptionId, open.get(subscriptionId)! - 1));
  request.on('end', () => {
    const at = performance.timeOrigin + performance.now();
    const deliveryId = String(request.headers['x-webhook-delivery-id']);
    const answer = refusing && at < throttleUntil ? 429 : failRatio > 0 && Math.random() < failRatio ? 500 : 204;
    let occurredAt: number | undefined;
    let entityId: string | undefined;
    if (answer === 204) {
      const body = Buffer.concat(chunks);
      sample = { headers: request.headers, body };
      const text = body.toString('utf8');
      const occurred = /"occurredAt":"([^"]+)"/.exec(text)?.[1];
      occurredAt = occurred === undefined ? undefined : Date.parse(occurred);
      entityId = /"entityId":"([^"]+)"/.exec(text)?.[1];
    }
    if (answer === 429) response.writeHead(429, { 'retry-after': '2' }).end();
    else response.writeHead(answer).end();
    port.postMessage({
      kind: 'receipt',
      deliveryId,
      subscriptionId,
      at,
      occurredAt,
      entityId,
      answer,
    } satisfies Receipt);
  });
});

port.on('message', (message: ToReceiver) => {
  if (message.kind === 'throttle') {
    throttled = new Set(message.subscriptionIds);
    throttleUntil = message.until;
    throttleForMs = message.forMs;
  } else if (message.kind === 'measure') {
    if (message.on) loopDelay.enable();
    else loopDelay.disable();
  } else {
    port.postMessage({
      kind: 'report',
      sample,
      maxOpenThrottled,
      loopDelayP99Ms: Math.max(0, loopDelay.percentile(99) - loopDelay.min) / 1e6,
      loopDelayMaxMs: Math.max(0, loopDelay.max - loopDelay.min) / 1e6,
    } satisfies ReceiverReport);
  }
});

server.listen(0, '127.0.0.1', () =>
  port.postMessage({ kind: 'listening', port: (server.address() as AddressInfo).port }),
);
