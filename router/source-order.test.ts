import { describe, expect, it } from 'vitest';
import { SourceOrder } from './source-order.ts';

/** Whether a promise has settled after the pending callbacks ran. */
async function settled(promise: Promise<void>): Promise<boolean> {
  let done = false;
  void promise.then(() => (done = true));
  await new Promise((resolve) => setImmediate(resolve));
  return done;
}

describe('SourceOrder', () => {
  it('holds an event until every earlier event of its partition has written, whatever order they write in', async () => {
    const order = new SourceOrder();
    for (const offset of [10, 11, 12]) order.enter('events/0', offset);
    const third = order.earlier('events/0', 12);
    order.written('events/0', 11);
    expect(await settled(third)).toBe(false);
    order.written('events/0', 10);
    expect(await settled(third)).toBe(true);
    // The first waits for nothing; a later event does not hold an earlier one.
    expect(await settled(order.earlier('events/0', 10))).toBe(true);
  });

  it('keeps partitions apart', async () => {
    const order = new SourceOrder();
    order.enter('events/0', 5);
    order.enter('events/1', 6);
    expect(await settled(order.earlier('events/1', 6))).toBe(true);
    expect(await settled(order.earlier('events/0', 6))).toBe(false);
  });

  it('keeps a failed try entered: the event is tried again and the later ones go on waiting for it', async () => {
    const order = new SourceOrder();
    order.enter('events/0', 1);
    order.enter('events/0', 2);
    const second = order.earlier('events/0', 2);
    order.enter('events/0', 1); // the retry of offset 1
    expect(await settled(second)).toBe(false);
    order.written('events/0', 1);
    expect(await settled(second)).toBe(true);
    order.written('events/0', 2);
    expect(order.size).toBe(0);
  });

  it('lets every waiting event go when cleared (a rebalance)', async () => {
    const order = new SourceOrder();
    order.enter('events/0', 1);
    order.enter('events/0', 2);
    const second = order.earlier('events/0', 2);
    order.clear();
    expect(await settled(second)).toBe(true);
    expect(order.size).toBe(0);
  });

  it("tells an event's previous one of its entity in its partition, whatever order they were seen in", () => {
    const order = new SourceOrder();
    order.seen('p0', 30, 't/po-1');
    order.seen('p0', 10, 't/po-1');
    order.seen('p0', 20, 't/po-2');
    order.seen('p1', 25, 't/po-1');
    expect(order.previous('p0', 30, 't/po-1')).toBe(10);
    expect(order.previous('p0', 10, 't/po-1')).toBeUndefined(); // the first seen since the partition came here
    expect(order.previous('p0', 40, 't/po-1')).toBe(30);
    expect(order.previous('p0', 30, 't/po-2')).toBe(20);
    expect(order.previous('p1', 30, 't/po-1')).toBe(25); // partitions apart
    order.clear();
    expect(order.previous('p0', 40, 't/po-1')).toBeUndefined();
  });

  it('says nothing of a previous event it let go of, nor of entities it forgot', () => {
    const order = new SourceOrder(2);
    for (let offset = 1; offset <= 12; offset += 1) order.seen('p0', offset * 10, 't/po-1');
    expect(order.previous('p0', 125, 't/po-1')).toBe(120);
    expect(order.previous('p0', 55, 't/po-1')).toBe(50);
    expect(order.previous('p0', 45, 't/po-1')).toBeUndefined(); // 40 was let go: only the latest 8 are kept
    order.seen('p0', 5, 't/po-2');
    order.seen('p0', 6, 't/po-3'); // the third entity: po-1, seen longest ago, is forgotten
    expect(order.previous('p0', 125, 't/po-1')).toBeUndefined();
    expect(order.previous('p0', 7, 't/po-3')).toBe(6);
  });
});
