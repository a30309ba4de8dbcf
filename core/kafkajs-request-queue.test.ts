import { createRequire } from 'node:module';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { patchRequestQueue } from './kafkajs-request-queue.ts';

// kafkajs' own request queue, as every connection of a consumer or an admin client makes one.
const RequestQueue = createRequire(import.meta.url)('kafkajs/src/network/requestQueue/index.js') as new (
  options: Record<string, unknown>,
) => {
  fulfillRequest(response: { correlationId: number; payload: Buffer | null; size: number }): void;
  checkPendingRequests(): void;
  pending: unknown[];
  throttledUntil: number;
};
const logger = { debug() {}, info() {}, warn() {}, error() {} };
const queue = () =>
  new RequestQueue({
    instrumentationEmitter: null,
    maxInFlightRequests: null,
    requestTimeout: 30_000,
    enforceRequestTimeout: false,
    clientId: 'test',
    broker: '127.0.0.1:9092',
    logger: { namespace: () => logger, ...logger },
    isConnected: () => true,
  });

afterEach(() => vi.useRealTimers());

describe('kafkajs request queue (patched)', () => {
  it('schedules no check while nothing is pending: an idle connection sleeps instead of waking every millisecond', () => {
    patchRequestQueue();
    vi.useFakeTimers();
    const idle = queue();
    const checks = vi.spyOn(idle, 'checkPendingRequests');
    // A response arrives and nothing waits behind it: kafkajs 2.2.4 then set a timer of (-1 - now) ms, which Node runs
    // after 1 ms (with a TimeoutNegativeWarning since Node 24), whose check set another, for as long as it lived.
    idle.fulfillRequest({ correlationId: 1, payload: null, size: 0 });
    vi.advanceTimersByTime(1_000);
    expect(checks.mock.calls.length).toBe(1);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('still checks a throttled queue with requests waiting once the throttle ends', () => {
    patchRequestQueue();
    vi.useFakeTimers();
    const throttled = queue();
    const checks = vi.spyOn(throttled, 'checkPendingRequests');
    throttled.throttledUntil = Date.now() + 500;
    throttled.pending.push({ send() {}, expectResponse: true, correlationId: 2 });
    throttled.fulfillRequest({ correlationId: 1, payload: null, size: 0 });
    expect(vi.getTimerCount()).toBe(1);
    vi.advanceTimersByTime(500);
    expect(checks.mock.calls.length).toBeGreaterThanOrEqual(2);
  });
});
