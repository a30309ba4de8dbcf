// A fix for kafkajs 2.2.4's request queue (kafkajs issues #1704 and #1751, unreleased upstream): core/kafka.ts applies
// it once, before any client connects. Only core/ touches kafkajs' insides.
import { createRequire } from 'node:module';

interface RequestQueueInternals {
  throttledUntil: number;
  throttleCheckTimeoutId: NodeJS.Timeout | null;
  pending: unknown[];
  checkPendingRequests(): void;
}

/** The interval kafkajs waits before checking a queue that has requests pending and no throttle (its own value). */
const CHECK_PENDING_REQUESTS_INTERVAL = 10;
let patched = false;

/**
 * kafkajs checks its queue after every response and then schedules the next check at `throttledUntil - now` ms, which
 * is negative (throttledUntil is -1) when the broker never throttled: Node runs such a timer after 1 ms, its check
 * schedules the next, and every connection of every consumer and admin client wakes the process a thousand times a
 * second for as long as it is open (and Node 24 warns TimeoutNegativeWarning). Here the next check is scheduled only
 * when there is something to check: requests pending (at the throttle's end, or in 10 ms as kafkajs does), else none;
 * a request pushed later schedules its own check, as before.
 */
export function patchRequestQueue(): void {
  if (patched) return;
  patched = true;
  const RequestQueue = createRequire(import.meta.url)('kafkajs/src/network/requestQueue/index.js') as {
    prototype: RequestQueueInternals & { scheduleCheckPendingRequests(): void };
  };
  RequestQueue.prototype.scheduleCheckPendingRequests = function (this: RequestQueueInternals) {
    if (this.throttleCheckTimeoutId || this.pending.length === 0) return;
    const untilUnthrottled = this.throttledUntil - Date.now();
    this.throttleCheckTimeoutId = setTimeout(
      () => {
        this.throttleCheckTimeoutId = null;
        this.checkPendingRequests();
      },
      untilUnthrottled > 0 ? untilUnthrottled : CHECK_PENDING_REQUESTS_INTERVAL,
    );
  };
}
