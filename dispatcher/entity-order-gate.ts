import type { DeliveryRecord } from '../core/deliveries/delivery-record.ts';
import type { SeriesState } from '../core/deliveries/delivery-store.ts';
import { before, orderKeyOf, type EntityKey, type OrderRow } from '../core/deliveries/entity-order.ts';

/** The entity-order rows as the gate reads and changes them (EntityOrderStore). */
export interface OrderLedger {
  /** Rows without their records when `withRecords` is false (their `record` then undefined). */
  first(key: EntityKey, limit: number, withRecords?: boolean): Promise<OrderRow[]>;
  /** One row's record (undefined when the row is gone). */
  record(key: EntityKey, row: { seq: number; deliveryId: string }): Promise<DeliveryRecord | undefined>;
  markWaiting(key: EntityKey, row: { seq: number; deliveryId: string }, waiting?: boolean): Promise<void>;
  remove(key: EntityKey, row: { seq: number; deliveryId: string; queuedAt: number }): Promise<void>;
}

export interface EntityOrderDeps {
  ledger: OrderLedger;
  state(tenantId: string, deliveryId: string): Promise<SeriesState | undefined>;
  /** Ends a pending delivery as superseded by `by` (its history), without an attempt. */
  supersede(row: OrderRow & { record: DeliveryRecord }, state: SeriesState, by: DeliveryRecord): Promise<void>;
  /** Publishes a waiting delivery's record again, marked as a possible duplicate: its turn has come. */
  release(record: DeliveryRecord): Promise<void>;
  now(): number;
  /** WEBHOOK_DELIVERY_LIFETIME: a row whose delivery is older than this (and a grace) is left over. */
  lifetimeMs: number;
}

/**
 * What the end of a delivery found: the first pending delivery of its entity (`head`), and that one's record when it
 * waits for its turn (`next`), to be sent on.
 */
export interface EndedTurn {
  head?: { seq: number; deliveryId: string };
  next?: DeliveryRecord;
}

/** What the gate says of a delivery of an ordered subscription. */
export type Admission = { go: true; unlisted?: true } | { go: false; blocker: string };

const FINAL: ReadonlySet<string> = new Set(['acknowledged', 'abandoned', 'superseded']);

/** Rows read at once: the first few are enough to find the one before a delivery, or to know there is none. */
const LOOKAHEAD = 4;
/**
 * A pending delivery is handled at the latest at its deadline plus the longest hop toward it; a row whose delivery is
 * past its deadline by more than this, and not ended, was left by a routing that never published it.
 */
const LEFTOVER_GRACE_MS = 3_600_000;
/**
 * A delivery superseded while it waits for a retry: only if that retry is due later than this from now, so that no
 * attempt of it can be under way (its record is not yet due) when the newer delivery is sent.
 */
const SUPERSEDE_MARGIN_MS = 30_000;

/**
 * Ordered delivery per entity, as the dispatcher applies it (core/deliveries/entity-order.ts for the whole design).
 * `admit` says whether a delivery may be sent now: yes when no earlier delivery of its entity is pending. On a thorough
 * look, rows whose delivery has ended or was never published are cleared on the way; with supersedePendingDeliveries,
 * an earlier delivery waiting for a retry is superseded rather than waited for. `ended` deletes an ended delivery's
 * row and answers the next one if it waits, for the handler to send on.
 */
export class EntityOrderGate {
  constructor(private readonly deps: EntityOrderDeps) {}

  /**
   * `thorough`: the earlier delivery's state is read, and its row cleared if it has ended or was left over; otherwise
   * (a record seen for the first time) a row is trusted, and one left over is cleared by the waiting delivery's check.
   */
  async admit(
    record: DeliveryRecord & { orderSeq: number },
    supersedes: boolean,
    thorough: boolean,
  ): Promise<Admission> {
    const key = orderKeyOf(record);
    const mine = { seq: record.orderSeq, deliveryId: record.deliveryId };
    let marked = false;
    for (;;) {
      // A first look needs only the places and the marks; a thorough one the records too (ages, supersede).
      const rows = await this.deps.ledger.first(key, LOOKAHEAD, thorough || supersedes);
      const blocker = rows.find((row) => row.deliveryId !== record.deliveryId && before(row, mine));
      if (!blocker) {
        // Its own row is among the first ones when nothing comes before it; without it, the delivery has ended (this
        // is a duplicate, a retry of a copy sent twice across a rebalance, say): the handler checks its state.
        const own = rows.find((row) => row.deliveryId === record.deliveryId);
        if (!own) return { go: true, unlisted: true };
        // Sent here, not by the end of the one before it: that end must not send it again.
        if (own.waiting || marked) await this.deps.ledger.markWaiting(key, mine, false);
        return { go: true };
      }
      if (!thorough && !supersedes) {
        if (marked) return { go: false, blocker: blocker.deliveryId };
        await this.deps.ledger.markWaiting(key, mine);
        marked = true;
        continue;
      }
      const state = await this.deps.state(record.tenantId, blocker.deliveryId);
      if (!state || FINAL.has(state.status) || this.leftOver(blocker)) {
        await this.deps.ledger.remove(key, { ...blocker, queuedAt: blocker.record?.queuedAt ?? 0 });
        continue;
      }
      if (supersedes && blocker.record && this.betweenAttempts(state)) {
        await this.deps.supersede({ ...blocker, record: blocker.record }, state, record);
        await this.deps.ledger.remove(key, { ...blocker, queuedAt: blocker.record.queuedAt });
        continue;
      }
      // Marked first, then looked at again: the delivery before it may have ended in between and found it not yet
      // waiting (so released nothing). Either it is gone now, or its end will see the mark and release this one.
      if (marked) return { go: false, blocker: blocker.deliveryId };
      await this.deps.ledger.markWaiting(key, mine);
      marked = true;
    }
  }

  /**
   * A delivery has ended (acknowledged, abandoned, superseded): its row goes, and the next delivery of its entity is
   * returned when it waits, for the caller to send on (or to `release`), with the first pending row in any case.
   * Deleted first, then read: a delivery that marks itself waiting and then reads (admit) either sees this row gone, or
   * is seen waiting here. The next is
   * returned whether or not this row was still there: a crash after the deletion and before the next was sent leaves
   * it waiting, and the ended delivery's record, handled again, ends it again.
   */
  async ended(record: DeliveryRecord & { orderSeq: number }): Promise<EndedTurn> {
    const key = orderKeyOf(record);
    const mine = { seq: record.orderSeq, deliveryId: record.deliveryId };
    await this.deps.ledger.remove(key, { ...mine, queuedAt: record.queuedAt });
    // Bare: most ends find the next not waiting (not yet dispatched), and a record is kilobytes.
    let [next] = await this.deps.ledger.first(key, 1, false);
    // A row of its own at another place (its event published twice, both routings queued it): it goes too.
    while (next?.deliveryId === record.deliveryId) {
      await this.deps.ledger.remove(key, { ...next, queuedAt: record.queuedAt });
      [next] = await this.deps.ledger.first(key, 1, false);
    }
    const head = next && { seq: next.seq, deliveryId: next.deliveryId };
    // Only a delivery after this one: one before it (this one ended while it waited) still waits for another.
    if (!next?.waiting || !before(mine, next)) return { head };
    return { head, next: await this.deps.ledger.record(key, next) };
  }

  /** Publishes a waiting delivery's record again (marked as a possible duplicate): its turn has come. */
  release(record: DeliveryRecord): Promise<void> {
    return this.deps.release(record);
  }

  private leftOver(row: OrderRow): boolean {
    return row.record !== undefined && this.deps.now() > row.record.queuedAt + this.deps.lifetimeMs + LEFTOVER_GRACE_MS;
  }

  /** Waiting for a retry due well after now: no attempt of it is under way, nor can one start before the newer. */
  private betweenAttempts(state: SeriesState): boolean {
    // Queued with a next retry: its first attempt deferred by an open circuit.
    return (
      (state.status === 'retrying' || state.status === 'queued') &&
      state.nextRetryAt !== null &&
      state.nextRetryAt !== undefined &&
      state.nextRetryAt.getTime() > this.deps.now() + SUPERSEDE_MARGIN_MS
    );
  }
}
