import { describe, expect, it } from 'vitest';
import { orderedRecord } from '../test/support/ordered-record.ts';
import { LocalTurns } from './local-turns.ts';

const record = (deliveryId: string, seq: number, entityId = 'po-1') => orderedRecord(deliveryId, seq, { entityId });

/** What a follow() promise has settled to so far: 'waiting' while it has not. */
function watch(promise: Promise<boolean> | undefined) {
  const seen = { value: promise === undefined ? 'none' : 'waiting' };
  void promise?.then((go) => (seen.value = go ? 'go' : 'look'));
  return seen;
}
const settle = () => new Promise((resolve) => setImmediate(resolve));
/** An end that read `delivery` first. */
const headOf = (delivery: ReturnType<typeof record>) => ({
  head: { seq: delivery.orderSeq, deliveryId: delivery.deliveryId },
});

describe('LocalTurns', () => {
  it('lets a later delivery of an entity being sent here wait for its end, then go when that end read it first', async () => {
    const turns = new LocalTurns();
    const [d1, d2] = [record('d1', 10), record('d2', 11)];
    turns.hold(d1);
    const d2Turn = watch(turns.follow(d2));
    await settle();
    expect(d2Turn.value).toBe('waiting');
    expect(turns.pass(d1, headOf(d2))).toBe(false);
    await settle();
    expect(d2Turn.value).toBe('go');
    // d2 holds the turn now: a d3 follows it, and the entity is forgotten once d2 ends with nothing after it.
    const d3Turn = watch(turns.follow(record('d3', 12)));
    turns.pass(d2, undefined);
    await settle();
    expect(d3Turn.value).toBe('look');
    expect(turns.size).toBe(0);
  });

  it('sends the follower back to the gate when the holder did not end, or its end found another delivery first', async () => {
    const turns = new LocalTurns();
    const [d1, d2] = [record('d1', 10), record('d2', 11)];
    turns.hold(d1);
    const retried = watch(turns.follow(d2));
    turns.pass(d1, undefined); // d1 is to be retried: it keeps its row, and d2 must wait for it durably
    await settle();
    expect(retried.value).toBe('look');

    turns.hold(d1);
    const behindAnother = watch(turns.follow(d2));
    turns.pass(d1, { head: { seq: 10.5, deliveryId: 'd1.5' } }); // an earlier event's delivery not dispatched yet
    await settle();
    expect(behindAnother.value).toBe('look');
    // Same id at another place (a second row of it) is not its row either.
    turns.hold(d1);
    const elsewhere = watch(turns.follow(d2));
    turns.pass(d1, { head: { seq: 99, deliveryId: 'd2' } });
    await settle();
    expect(elsewhere.value).toBe('look');
    expect(turns.size).toBe(0);
  });

  it('has a delivery follow only a holder before it, of its own entity, and one follower per entity', () => {
    const turns = new LocalTurns();
    const d2 = record('d2', 11);
    turns.hold(d2);
    expect(turns.follow(record('d1', 10))).toBeUndefined(); // earlier than the holder (a retry of it): the gate's way
    expect(turns.follow(record('d2', 11))).toBeUndefined(); // a copy of the holder
    expect(turns.follow(record('other', 12, 'po-2'))).toBeUndefined(); // another entity: nothing to wait for
    expect(turns.follow(record('d3', 12))).toBeDefined();
    expect(turns.follow(record('d4', 13))).toBeUndefined(); // one follower at most
  });

  it('passes the turn to the successor a chain sends on, the follower still waiting for it', async () => {
    const turns = new LocalTurns();
    const [d1, d2, d3] = [record('d1', 10), record('d2', 11), record('d3', 12)];
    turns.hold(d1);
    const d3Turn = watch(turns.follow(d3));
    expect(turns.pass(d1, headOf(d2), d2)).toBe(true);
    turns.hold(d2); // no-op: it holds the turn already
    await settle();
    expect(d3Turn.value).toBe('waiting');
    expect(turns.pass(d2, headOf(d3))).toBe(false);
    await settle();
    expect(d3Turn.value).toBe('go');
  });

  it('wakes the follower instead of chaining when the successor is the follower itself (its row marked by a copy)', async () => {
    const turns = new LocalTurns();
    const [d1, d2] = [record('d1', 10), record('d2', 11)];
    turns.hold(d1);
    const d2Turn = watch(turns.follow(d2));
    expect(turns.pass(d1, headOf(d2), { ...d2, mayBeDuplicate: true })).toBe(false);
    await settle();
    expect(d2Turn.value).toBe('go');
  });

  it('leaves a chain as it was for a delivery that never held the turn here', () => {
    const turns = new LocalTurns();
    const [d1, d2] = [record('d1', 10), record('d2', 11)];
    expect(turns.pass(d1, headOf(d2), d2)).toBe(true);
    expect(turns.pass(d1, undefined)).toBe(false);
    expect(turns.size).toBe(0);
  });

  it("clears a delivery whose entity's previous event had its delivery end here after holding its turn", () => {
    const turns = new LocalTurns(2);
    const d1 = record('d1', 10);
    const after = (seq: number, orderPrev: number, entityId = 'po-1') => ({
      ...record(`d${seq}`, seq, entityId),
      orderPrev,
    });
    expect(turns.cleared(after(11, 10))).toBe(false); // nothing ended here yet
    turns.hold(d1);
    turns.pass(d1, undefined); // to be retried: not ended
    expect(turns.cleared(after(11, 10))).toBe(false);
    turns.hold(d1);
    turns.pass(d1, {}); // acknowledged, nothing after it
    expect(turns.cleared(after(11, 10))).toBe(true);
    expect(turns.cleared(after(12, 9))).toBe(false); // its router names another previous event
    expect(turns.cleared(record('d13', 13))).toBe(false); // its router knew none
    // A delivery that ended without holding the turn here (abandoned while it waited, say) clears nothing.
    const waited = record('d20', 20, 'po-2');
    turns.pass(waited, {});
    expect(turns.cleared(after(21, 20, 'po-2'))).toBe(false);
    // Bounded: the entity whose end is oldest is forgotten.
    for (const entityId of ['po-3', 'po-4']) {
      const other = record(`x-${entityId}`, 5, entityId);
      turns.hold(other);
      turns.pass(other, {});
    }
    expect(turns.cleared(after(11, 10))).toBe(false);
    expect(turns.cleared(after(6, 5, 'po-4'))).toBe(true);
  });
});
