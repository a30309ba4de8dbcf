import { types, type CassandraClient } from '../core/cassandra.ts';
import { casOutcomeUnknown } from './cas.ts';
import { budgetLeft, onBudgetSpent, outsideBudget } from '../core/budget.ts';
import { DependencyUnavailableError } from '../core/errors.ts';

/** Largest block of references a process leases at once: at most this many are left unused by a crash. */
export const MAX_LEASE = 100;
/** A lease used up within this time makes the next one twice as large; a slower one resets it to what is waiting. */
const GROWTH_WINDOW_MS = 1_000;
/** A block whose values left would last less than this at its pace has the next one leased ahead (see the class). */
const LEAD_MS = 500;
/** A block leased ahead holds what the tenant's pace uses in this time (up to MAX_LEASE). */
const AHEAD_MS = 2_000;
/** Values of a block taken before its pace counts: a lone validation or two never lease ahead. */
const PACE_AFTER = 4;

/** The references of one tenant this process holds and has not handed out yet. */
interface Lease {
  /** Next value of the leased block, and its last one (the counter's value this process set). */
  next: bigint;
  end: bigint;
  /** Values handed out whose validation did not commit, handed out again first (lowest first). */
  returned: bigint[];
  /** Size of the current block, its first value, and when it was taken. */
  size: number;
  first: bigint;
  leasedAt: number;
  /** The block leased ahead, handed out once the current one is used up, and its lease while under way. */
  ahead?: { first: bigint; end: bigint };
  leasingAhead?: Promise<void>;
  waiting: { resolve(value: bigint): void; reject(error: unknown): void }[];
  leasing: boolean;
}

/**
 * A tenant's business reference sequence, leased by blocks: a compare-and-set on the tenant's counter takes a block of
 * consecutive values for this process, which then hands them out from memory. Values are unique across processes (each
 * block is taken by compare-and-set).
 *
 * Block size follows the tenant's pace: as many values as validations are waiting (one for a lone validation), or twice
 * the last block (up to MAX_LEASE) when that one was used up within GROWTH_WINDOW_MS. A quiet tenant leases what it
 * uses; a busy one pays a compare-and-set every MAX_LEASE validations instead of one per validation.
 *
 * Leasing ahead: once PACE_AFTER values of a block are taken, the block's pace (values taken since it was leased) says
 * when it runs out; when what is left would last less than LEAD_MS, the next block (what the pace uses in AHEAD_MS, up to
 * MAX_LEASE) is leased in the background, so a busy tenant's validations do not wait for the compare-and-set (before,
 * one in 8 to 32 of a tenant validating 25 times a second did, for tens of milliseconds on a loaded node).
 *
 * Contiguity: a value whose validation certainly did not commit (it lost a race) is given back and handed out next, and
 * `close` (graceful stop) gives the unused tail of each block back to the counter by compare-and-set, if no process has
 * leased after it. So the values in use have no gaps but these, none of which is ever handed out:
 * - after a crash (kill -9), the unused part of the process's blocks (at most MAX_LEASE per tenant, plus what its pace
 *   takes in LEAD_MS once a block is leased ahead, and only for a tenant busy enough to have grown its blocks), besides
 *   the values of the validations in flight (as before leases);
 * - after a graceful stop, a block's unused tail another process leased past, and given-back values not adjoining it;
 * - a value whose validation failed with an unknown outcome, or a block whose compare-and-set timed out (as before).
 */
export class ReferenceLeases {
  private readonly leases = new Map<string, Lease>();
  private closed = false;

  constructor(private readonly db: CassandraClient) {}

  /** The tenant's next value: from this process's block, or, when it is used up, from a new block. */
  next(tenantId: string): Promise<bigint> {
    const lease = this.leaseOf(tenantId);
    const value = take(lease);
    if (value !== undefined) {
      const perMs = this.runningOutAt(lease);
      if (perMs !== undefined) {
        lease.leasingAhead = outsideBudget(() => this.leaseAhead(tenantId, lease, perMs)).catch(() => undefined);
      }
      return Promise.resolve(value);
    }
    const inBudget = budgetLeft() !== undefined;
    return new Promise((resolve, reject) => {
      let cancel: (() => void) | undefined;
      const waiter = {
        resolve: (leased: bigint) => {
          cancel?.();
          resolve(leased);
        },
        reject: (error: unknown) => {
          cancel?.();
          reject(error);
        },
      };
      lease.waiting.push(waiter);
      // Served for every request waiting on the tenant, not only the one that found the block used up.
      if (!lease.leasing) void outsideBudget(() => this.serve(tenantId, lease));
      // The block is leased outside any request's budget, but a request waits for it no longer than what is left of
      // its own (cut when a dependency is found unavailable meanwhile). One that gives up is not handed a value: the
      // block keeps it for the next caller, leaving no gap.
      if (inBudget) {
        cancel = onBudgetSpent(() => {
          const index = lease.waiting.indexOf(waiter);
          if (index < 0) return;
          lease.waiting.splice(index, 1);
          reject(new DependencyUnavailableError('Cassandra'));
        });
      }
    });
  }

  /** Gives back a value whose validation certainly did not commit: the next validation of the tenant takes it. */
  giveBack(tenantId: string, value: bigint): void {
    const lease = this.leaseOf(tenantId);
    lease.returned.push(value);
    lease.returned.sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  }

  /**
   * Gives the unused tail of every block back to its counter (call once nothing asks for values any more: the HTTP
   * server is closed). Values asked for afterwards are leased one by one, exactly as many as asked for.
   */
  async close(): Promise<void> {
    this.closed = true;
    // A block being leased ahead is known only once its compare-and-set has answered: wait for it, to give it back.
    await Promise.all([...this.leases.values()].map((lease) => lease.leasingAhead));
    await Promise.all(
      [...this.leases].map(async ([tenantId, lease]) => {
        // The tail that can go back: the block's unused end (through the block leased ahead, when that one follows it
        // on the counter; else only the block ahead), extended down by given-back values adjoining it.
        let first = lease.next;
        let end = lease.end;
        if (lease.ahead) {
          if (lease.ahead.first !== lease.end + 1n) first = lease.ahead.first;
          end = lease.ahead.end;
          lease.ahead = undefined;
        }
        while (lease.returned.includes(first - 1n)) first -= 1n;
        if (first > end) return;
        lease.next = end + 1n;
        lease.end = end;
        lease.returned = lease.returned.filter((value) => value < first);
        try {
          // Applies only if no block was leased after this one. Never retried: after a timeout whose write applied,
          // another process may lease a block ending on the same value, which a retry would take back from it.
          await this.db.execute('UPDATE reference_sequences SET last_value = ? WHERE tenant_id = ? IF last_value = ?', [
            (first - 1n).toString(),
            tenantId,
            end.toString(),
          ]);
        } catch {
          // Outcome unknown or failed: the tail stays unused (a gap), which is safe.
        }
      }),
    );
  }

  private leaseOf(tenantId: string): Lease {
    let lease = this.leases.get(tenantId);
    if (!lease) {
      lease = { next: 1n, end: 0n, returned: [], size: 0, first: 1n, leasedAt: 0, waiting: [], leasing: false };
      this.leases.set(tenantId, lease);
    }
    return lease;
  }

  /** Serves the tenant's waiting callers, one compare-and-set per block for all who arrived meanwhile. */
  private async serve(tenantId: string, lease: Lease): Promise<void> {
    lease.leasing = true;
    try {
      for (;;) {
        while (lease.waiting.length > 0) {
          const value = take(lease);
          if (value === undefined) break;
          lease.waiting.shift()!.resolve(value);
        }
        if (lease.waiting.length === 0) return;
        // As many as are waiting, or, if the last block went within GROWTH_WINDOW_MS, twice that block.
        const now = Date.now();
        const grown = now - lease.leasedAt < GROWTH_WINDOW_MS ? Math.min(MAX_LEASE, lease.size * 2) : 0;
        const count = this.closed ? lease.waiting.length : Math.max(lease.waiting.length, grown);
        try {
          const first = await this.reserve(tenantId, count);
          start(lease, first, count, now);
        } catch (error) {
          for (const caller of lease.waiting.splice(0)) caller.reject(error);
        }
      }
    } finally {
      lease.leasing = false;
    }
  }

  /**
   * The block's pace (values per ms) when its values left would last less than LEAD_MS at it, with none leased ahead or
   * leasing; else undefined.
   */
  private runningOutAt(lease: Lease): number | undefined {
    if (this.closed || lease.leasing || lease.ahead) return undefined;
    const taken = Number(lease.next - lease.first);
    if (taken < PACE_AFTER) return undefined;
    const perMs = taken / Math.max(1, Date.now() - lease.leasedAt);
    return Number(lease.end - lease.next + 1n) < perMs * LEAD_MS ? perMs : undefined;
  }

  /** Leases the block after the current one, for AHEAD_MS at `perMs`; then serves callers that came to wait. */
  private async leaseAhead(tenantId: string, lease: Lease, perMs: number): Promise<void> {
    lease.leasing = true;
    const count = Math.max(PACE_AFTER, Math.min(MAX_LEASE, Math.ceil(perMs * AHEAD_MS)));
    try {
      const first = await this.reserve(tenantId, count);
      lease.ahead = { first, end: first + BigInt(count) - 1n };
    } catch {
      // Nothing lost: the next block is leased when the current one runs out, by the callers that then wait.
    } finally {
      lease.leasing = false;
      lease.leasingAhead = undefined;
    }
    if (lease.waiting.length > 0) await this.serve(tenantId, lease);
  }

  /** Takes `count` consecutive values of the tenant's counter by compare-and-set and returns the first. */
  private async reserve(tenantId: string, count: number): Promise<bigint> {
    let last: bigint | undefined | null = null; // null: to be read; undefined: no counter yet
    for (;;) {
      if (last === null) {
        const row = (
          await this.db.execute('SELECT last_value FROM reference_sequences WHERE tenant_id = ?', [tenantId], {
            consistency: types.consistencies.localSerial, // see the latest compare-and-set result
          })
        ).first();
        last = row ? BigInt(String(row.last_value)) : undefined;
      }
      const next = (last ?? 0n) + BigInt(count);
      try {
        const result =
          last === undefined
            ? await this.db.execute(
                'INSERT INTO reference_sequences (tenant_id, last_value) VALUES (?, ?) IF NOT EXISTS',
                [tenantId, next.toString()],
              )
            : await this.db.execute(
                'UPDATE reference_sequences SET last_value = ? WHERE tenant_id = ? IF last_value = ?',
                [next.toString(), tenantId, last.toString()],
              );
        if (result.wasApplied()) return (last ?? 0n) + 1n;
        // A lost compare-and-set answers with the current value: try again from it.
        const current: unknown = result.first()?.last_value;
        last = current === null || current === undefined ? null : BigInt(String(current));
      } catch (error) {
        // A compare-and-set can end with its outcome unknown (contention timing it out, a connection closing): reading
        // again and taking the next values is safe (at worst the values it may have taken are skipped; none is ever
        // handed out twice).
        if (!casOutcomeUnknown(error)) throw error;
        last = null;
      }
    }
  }
}

/** Makes `count` values from `first` the lease's current block, leased at `now`. */
function start(lease: Lease, first: bigint, count: number, now: number): void {
  lease.next = first;
  lease.first = first;
  lease.end = first + BigInt(count) - 1n;
  lease.size = count;
  lease.leasedAt = now;
}

/** The lease's lowest available value, taken (from the block leased ahead once the current one is used up). */
function take(lease: Lease): bigint | undefined {
  if (lease.returned.length > 0) return lease.returned.shift();
  if (lease.next > lease.end && lease.ahead) {
    const { first, end } = lease.ahead;
    lease.ahead = undefined;
    start(lease, first, Number(end - first + 1n), Date.now());
  }
  if (lease.next > lease.end) return undefined;
  const value = lease.next;
  lease.next += 1n;
  return value;
}
