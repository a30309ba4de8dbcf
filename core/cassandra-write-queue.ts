// Coalescing of cassandra-driver 4.10's socket writes: core/cassandra.ts applies it once, before any client connects.
// Only core/ touches the driver's insides.
import { createRequire } from 'node:module';

interface WriteQueueInternals {
  isRunning: boolean;
  canWrite: boolean;
  process(): void;
}

let patched = false;

/**
 * The driver writes its queued requests to a connection's socket on the next tick after the first one is queued, so a
 * process issuing requests from many I/O callbacks of one event-loop turn (a gateway answering many validations) makes
 * one write system call per request: a CPU profile of the gateway put 5.9 s of its 38 s in them, about 60 µs each on a
 * loopback socket here. Here the queue is written once the turn's I/O callbacks have run (setImmediate): every request
 * queued in that turn goes out in one write, at most one turn later. The driver's own coalescing bound
 * (socketOptions.coalescingThreshold) and its wait for a drained socket are unchanged.
 */
export function patchWriteQueue(): void {
  if (patched) return;
  patched = true;
  const { WriteQueue } = createRequire(import.meta.url)('cassandra-driver/lib/writers.js') as {
    WriteQueue: { prototype: WriteQueueInternals & { run(): void } };
  };
  WriteQueue.prototype.run = function (this: WriteQueueInternals) {
    if (this.isRunning || !this.canWrite) return;
    this.isRunning = true;
    setImmediate(() => this.process());
  };
}
