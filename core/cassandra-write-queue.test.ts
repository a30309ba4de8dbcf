import { createRequire } from 'node:module';
import { EventEmitter } from 'node:events';
import { describe, expect, it } from 'vitest';
import { patchWriteQueue } from './cassandra-write-queue.ts';

// The driver's own write queue, as each connection makes one, on a socket that records its writes.
const { WriteQueue } = createRequire(import.meta.url)('cassandra-driver/lib/writers.js') as {
  WriteQueue: new (
    socket: unknown,
    encoder: unknown,
    options: { socketOptions: { coalescingThreshold: number } },
  ) => { push(operation: unknown, callback: (error?: Error) => void): void };
};

function socket() {
  const writes: Buffer[] = [];
  const emitter = Object.assign(new EventEmitter(), {
    writes,
    write(data: Buffer, done: (error?: Error) => void) {
      writes.push(data);
      process.nextTick(done);
      return true;
    },
  });
  return emitter;
}
const request = (bytes: string) => ({
  canBeWritten: () => true,
  request: { write: () => Buffer.from(bytes) },
  streamId: 0,
});
const settled = () => new Promise((resolve) => setTimeout(resolve, 20));

describe('cassandra-driver write queue (patched)', () => {
  it('writes the requests queued in one event-loop turn, from separate callbacks, in one socket write', async () => {
    patchWriteQueue();
    const net = socket();
    const queue = new WriteQueue(net, {}, { socketOptions: { coalescingThreshold: 65_536 } });
    const written: string[] = [];
    // Three requests issued from three timer callbacks of the same turn (as three answers read together issue them):
    // unpatched, the queue was written on the tick after each callback, so each request took its own write.
    for (const name of ['a', 'b', 'c']) setTimeout(() => queue.push(request(name), () => written.push(name)), 0);
    await settled();
    expect(net.writes.map(String)).toEqual(['abc']);
    expect(written).toEqual(['a', 'b', 'c']);
  });

  it('still writes a request queued alone, and the next ones after it', async () => {
    patchWriteQueue();
    const net = socket();
    const queue = new WriteQueue(net, {}, { socketOptions: { coalescingThreshold: 65_536 } });
    queue.push(request('x'), () => {});
    await settled();
    queue.push(request('y'), () => {});
    await settled();
    expect(net.writes.map(String)).toEqual(['x', 'y']);
  });
});
