import { describe, expect, it } from 'vitest';
import type { DeliveryRecord } from '../core/deliveries/delivery-record.ts';
import type { SeriesState } from '../core/deliveries/delivery-store.ts';
import { before, type EntityKey, type OrderRow } from '../core/deliveries/entity-order.ts';
import { EntityOrderGate, type OrderLedger } from './entity-order-gate.ts';
import { orderedRecord } from '../test/support/ordered-record.ts';

const MINUTE = 60_000;
const DAY = 24 * 60 * MINUTE;
const NOW = Date.UTC(2026, 10, 27, 12, 0, 0);

const record = (deliveryId: string, seq: number, overrides: Partial<Omit<DeliveryRecord, 'orderSeq'>> = {}) =>
  orderedRecord(deliveryId, seq, { queuedAt: NOW - MINUTE, ...overrides });

/** An in-memory entity_order partition and delivery states; `onFirst` runs before each read (a race, say). */
function world(options: { onFirst?: (reads: number) => void } = {}) {
  const rows: OrderRow[] = [];
  const states = new Map<string, SeriesState>();
  const log: string[] = [];
  /** Each read of the rows: with their records or bare. */
  const looks: string[] = [];
  let reads = 0;
  const ledger: OrderLedger = {
    first: async (_key: EntityKey, limit: number, withRecords = true) => {
      options.onFirst?.(reads++);
      looks.push(withRecords ? 'with records' : 'bare');
      return [...rows].sort((a, b) => (before(a, b) ? -1 : 1)).slice(0, limit);
    },
    record: async (_key, row) => {
      looks.push(`record of ${row.deliveryId}`);
      return rows.find((r) => r.deliveryId === row.deliveryId && r.seq === row.seq)?.record;
    },
    markWaiting: async (_key, row, waiting = true) => {
      log.push(`${waiting ? 'markWaiting' : 'unmark'} ${row.deliveryId}`);
      const found = rows.find((r) => r.deliveryId === row.deliveryId);
      if (found) found.waiting = waiting;
    },
    remove: async (_key, row) => {
      log.push(`remove ${row.deliveryId}`);
      const index = rows.findIndex((r) => r.deliveryId === row.deliveryId && r.seq === row.seq);
      if (index >= 0) rows.splice(index, 1);
    },
  };
  const gate = new EntityOrderGate({
    ledger,
    state: async (_tenantId, deliveryId) => states.get(deliveryId),
    supersede: async (row, state, by) => {
      log.push(`supersede ${row.deliveryId} after ${state.attemptCount} by ${by.deliveryId}`);
    },
    release: async (released) => {
      log.push(`release ${released.deliveryId}`);
    },
    now: () => NOW,
    lifetimeMs: DAY,
  });
  const add = (delivery: ReturnType<typeof record>, state: SeriesState = { status: 'queued', attemptCount: 0 }) => {
    rows.push({ seq: delivery.orderSeq, deliveryId: delivery.deliveryId, waiting: false, record: delivery });
    states.set(delivery.deliveryId, state);
    return delivery;
  };
  return { rows, states, log, looks, gate, add };
}

describe('EntityOrderGate.admit', () => {
  it('admits the first pending delivery of its entity, and one whose only companions come after it', async () => {
    const w = world();
    const first = w.add(record('d1', 10));
    w.add(record('d2', 11));
    expect(await w.gate.admit(first, false, true)).toEqual({ go: true });
    expect(w.log).toEqual([]);
  });

  it('says when a delivery has no row any more (it ended: this is a copy of it), whatever comes after it', async () => {
    const w = world();
    const gone = record('d1', 10);
    w.add(record('d2', 11));
    expect(await w.gate.admit(gone, false, true)).toEqual({ go: true, unlisted: true });
    expect(await world().gate.admit(gone, false, true)).toEqual({ go: true, unlisted: true });
  });

  it('holds a delivery while an earlier one is pending (in flight or retrying), marking it waiting', async () => {
    for (const state of [
      { status: 'queued', attemptCount: 0 },
      { status: 'retrying', attemptCount: 2, nextRetryAt: new Date(NOW + 10 * MINUTE) },
    ] satisfies SeriesState[]) {
      const w = world();
      w.add(record('d1', 10), state);
      const second = w.add(record('d2', 11));
      expect(await w.gate.admit(second, false, true)).toEqual({ go: false, blocker: 'd1' });
      expect(w.log).toEqual(['markWaiting d2']);
      expect(w.rows.find((row) => row.deliveryId === 'd2')?.waiting).toBe(true);
    }
  });

  it('orders deliveries of one event offset by delivery id (a tie is broken the same way everywhere)', async () => {
    const w = world();
    w.add(record('a', 10));
    const b = w.add(record('b', 10));
    expect(await w.gate.admit(b, false, true)).toEqual({ go: false, blocker: 'a' });
  });

  it('admits a delivery whose predecessor ended between its first look and its mark (its end saw no mark)', async () => {
    const w = world({
      onFirst: (reads) => {
        if (reads === 1) w.rows.splice(0, 1); // d1 ended and its row went before d2 was marked
      },
    });
    w.add(record('d1', 10));
    const second = w.add(record('d2', 11));
    expect(await w.gate.admit(second, false, true)).toEqual({ go: true });
    // Sent by this look, not by the end of d1: the mark goes, so that no end sends it again.
    expect(w.log).toEqual(['markWaiting d2', 'unmark d2']);
  });

  it('clears rows left over: an ended delivery, one with no history, one long past its deadline', async () => {
    const w = world();
    w.add(record('ended', 1), { status: 'acknowledged', attemptCount: 1 });
    w.rows.push({ seq: 2, deliveryId: 'no-history', waiting: false, record: record('no-history', 2) });
    w.add(record('stale', 3, { queuedAt: NOW - DAY - 2 * 60 * MINUTE }));
    const mine = w.add(record('mine', 4));
    expect(await w.gate.admit(mine, false, true)).toEqual({ go: true });
    expect(w.log).toEqual(['remove ended', 'remove no-history', 'remove stale']);
  });

  it("trusts the rows for a record seen the first time: an ended predecessor's row is cleared only by a thorough look", async () => {
    const w = world();
    w.add(record('ended', 1), { status: 'acknowledged', attemptCount: 1 });
    const mine = w.add(record('mine', 2));
    expect(await w.gate.admit(mine, false, false)).toEqual({ go: false, blocker: 'ended' });
    expect(w.log).toEqual(['markWaiting mine']);
    expect(w.looks).toEqual(['bare', 'bare']); // a record is kilobytes: a first look reads none
    // Its check comes back (thorough): the row goes, and it is no longer marked waiting (sent here, not on release).
    expect(await w.gate.admit(mine, false, true)).toEqual({ go: true });
    expect(w.log).toEqual(['markWaiting mine', 'remove ended', 'unmark mine']);
  });

  it('with supersedePendingDeliveries, supersedes an earlier delivery waiting for a retry well ahead, not one about to be tried', async () => {
    const w = world();
    w.add(record('d1', 10), { status: 'retrying', attemptCount: 3, nextRetryAt: new Date(NOW + 8 * MINUTE) });
    const newer = w.add(record('d2', 11));
    expect(await w.gate.admit(newer, true, true)).toEqual({ go: true });
    expect(w.log).toEqual(['supersede d1 after 3 by d2', 'remove d1']);

    for (const state of [
      { status: 'retrying', attemptCount: 3, nextRetryAt: new Date(NOW + 10_000) },
      { status: 'queued', attemptCount: 0 },
    ] satisfies SeriesState[]) {
      const soon = world();
      soon.add(record('d1', 10), state);
      const next = soon.add(record('d2', 11));
      expect(await soon.gate.admit(next, true, false)).toEqual({ go: false, blocker: 'd1' });
    }
    // Without the setting, a retrying predecessor is waited for.
    const plain = world();
    plain.add(record('d1', 10), { status: 'retrying', attemptCount: 3, nextRetryAt: new Date(NOW + 8 * MINUTE) });
    expect(await plain.gate.admit(plain.add(record('d2', 11)), false, true)).toEqual({ go: false, blocker: 'd1' });
  });
});

describe('EntityOrderGate.ended', () => {
  it("deletes the ended delivery's row and answers the next one when it waits", async () => {
    const w = world();
    const first = w.add(record('d1', 10));
    const second = w.add(record('d2', 11));
    w.rows[1]!.waiting = true;
    expect((await w.gate.ended(first)).next).toEqual(second);
    expect(w.log).toEqual(['remove d1']);
    expect(w.rows.map((row) => row.deliveryId)).toEqual(['d2']);
  });

  it('reads the next row bare, and its record only when it waits (a record is kilobytes, most ends find none waiting)', async () => {
    const w = world();
    const first = w.add(record('d1', 10));
    w.add(record('d2', 11));
    expect(await w.gate.ended(first)).toEqual({ head: { seq: 11, deliveryId: 'd2' } });
    expect(w.looks).toEqual(['bare']);

    const waiting = world();
    const one = waiting.add(record('d1', 10));
    const two = waiting.add(record('d2', 11));
    waiting.rows[1]!.waiting = true;
    expect(await waiting.gate.ended(one)).toEqual({ head: { seq: 11, deliveryId: 'd2' }, next: two });
    expect(waiting.looks).toEqual(['bare', 'record of d2']);
  });

  it('deletes its row before it reads the next: a successor marking itself meanwhile sees it gone, or is seen', async () => {
    const seen: string[][] = [];
    const w = world({ onFirst: () => seen.push(w.rows.map((row) => row.deliveryId)) });
    const first = w.add(record('d1', 10));
    w.add(record('d2', 11));
    await w.gate.ended(first);
    expect(seen).toEqual([['d2']]);
  });

  it('deletes a second row of its own (its event published twice, both routings queued it)', async () => {
    const w = world();
    const mine = w.add(record('d1', 10));
    w.rows.push({ seq: 30, deliveryId: 'd1', waiting: false, record: { ...mine, orderSeq: 30 } });
    w.add(record('d2', 40));
    w.rows[2]!.waiting = true;
    expect((await w.gate.ended(mine)).next?.deliveryId).toBe('d2');
    expect(w.rows.map((row) => row.deliveryId)).toEqual(['d2']);
  });

  it('answers nothing when the next has not been seen by a dispatcher yet, or when the ended one was not first', async () => {
    const w = world();
    const first = w.add(record('d1', 10));
    w.add(record('d2', 11));
    expect(await w.gate.ended(first)).toEqual({ head: { seq: 11, deliveryId: 'd2' } });
    expect(w.log).toEqual(['remove d1']);

    const behind = world();
    behind.add(record('d1', 10));
    const second = behind.add(record('d2', 11));
    behind.add(record('d3', 12));
    behind.rows[2]!.waiting = true;
    expect(await behind.gate.ended(second)).toEqual({ head: { seq: 10, deliveryId: 'd1' } }); // abandoned while it waited: d3 still waits for d1
    expect(behind.log).toEqual(['remove d2']);
  });

  it('answers the next again when repeated after a crash (its row was gone, the next not yet sent)', async () => {
    const w = world();
    const first = w.add(record('d1', 10));
    const second = w.add(record('d2', 11));
    w.rows[1]!.waiting = true;
    expect((await w.gate.ended(first)).next).toEqual(second);
    expect((await w.gate.ended(first)).next).toEqual(second);
    expect(w.log).toEqual(['remove d1', 'remove d1']);
  });

  it('publishes a released record through its dependency', async () => {
    const w = world();
    await w.gate.release(record('d2', 11));
    expect(w.log).toEqual(['release d2']);
  });
});
