import type { CassandraClient } from './cassandra.ts';
import type { Logger } from './log.ts';
import type { OperationalEvent } from './operational-events.ts';

/**
 * What must be true for an operational event found pending by the sweep to be raised: the change it tells of was made
 * (the process that meant to raise it may have crashed before or after making it).
 */
export type OperationalCheck =
  /** The subscription exists, and was last changed at `since` or after (created, updated). */
  | { kind: 'subscription-exists'; tenantId: string; subscriptionId: string; since: number }
  | { kind: 'subscription-absent'; tenantId: string; subscriptionId: string }
  /** The subscription is failing since `failingSince` (failing), or no longer (recovered). */
  | { kind: 'subscription-failing'; tenantId: string; subscriptionId: string; failingSince: number; still: boolean }
  | { kind: 'subscription-disabled'; tenantId: string; subscriptionId: string }
  | { kind: 'delivery-abandoned'; tenantId: string; deliveryId: string };

/** An event written down as pending: raise it once its change is made, or cancel it when the change was not made. */
export interface Intent {
  /** Publishes it and forgets it; never throws (what fails is left to the sweep). */
  raise(): Promise<void>;
  /** Forgets it: its change was not made. */
  cancel(): Promise<void>;
}

/** A pending event row. */
export interface PendingEvent {
  shard: number;
  writtenAt: number;
  event: OperationalEvent;
  check: OperationalCheck;
}

/** Where pending events are written (operational_outbox, migration 014). */
export interface PendingEvents {
  put(pending: PendingEvent): Promise<void>;
  remove(pending: Pick<PendingEvent, 'shard' | 'writtenAt' | 'event'>): Promise<void>;
  /** A shard's pending events written before `before` (epoch ms), oldest first. */
  olderThan(shard: number, before: number, limit: number): Promise<PendingEvent[]>;
}

export interface OperationalOutboxDeps {
  pending: PendingEvents;
  /** Puts events on the events topic (keyed by tenant); resolves once Kafka acknowledged them. */
  publish(events: OperationalEvent[], mayBeDuplicate: boolean): Promise<void>;
  /** Whether a pending event's change was made. */
  verify(check: OperationalCheck): Promise<boolean>;
  logger: Logger;
  /** How long a raise waits for Kafka before leaving the event to the sweep. */
  publishTimeoutMs: number;
  /** How old a pending event is before the sweep takes it (its raiser is done with it by then, or gone). */
  settleMs: number;
  now?: () => number;
}

export const PENDING_SHARDS = 8;
const SWEEP_PAGE = 200;

/**
 * Raises operational events at least once across crashes: an event is written down as pending before its change is
 * made (a subscription stored, a delivery abandoned), published once the change is made, then forgotten. A crash at any
 * point leaves the row, and the sweep (every process that raises events runs one) raises it if its check finds the
 * change made, as a possible duplicate: the router routes an event id once. Without a crash, the only cost is a write
 * and a delete per event, and operational events are few.
 */
export class OperationalOutbox {
  private readonly now: () => number;

  constructor(private readonly deps: OperationalOutboxDeps) {
    this.now = deps.now ?? Date.now;
  }

  /** Writes the event down as pending; throws when it could not be (nothing then must change). */
  async intend(event: OperationalEvent, check: OperationalCheck): Promise<Intent> {
    const pending: PendingEvent = { shard: shardOf(event.eventId), writtenAt: this.now(), event, check };
    await this.deps.pending.put(pending);
    return {
      raise: () => this.raise(pending),
      cancel: () => this.forget(pending),
    };
  }

  /** Raises the events pending for longer than the settling time whose changes were made; drops the others. */
  async sweep(): Promise<number> {
    const before = this.now() - this.deps.settleMs;
    let raised = 0;
    for (let shard = 0; shard < PENDING_SHARDS; shard += 1) {
      for (;;) {
        const rows = await this.deps.pending.olderThan(shard, before, SWEEP_PAGE);
        for (const row of rows) {
          if (await this.deps.verify(row.check)) {
            await this.deps.publish([row.event], true);
            raised += 1;
            this.deps.logger.info(
              { eventId: row.event.eventId, eventType: row.event.eventType, tenantId: row.event.tenantId },
              'operational event raised by the sweep',
            );
          }
          await this.deps.pending.remove(row);
        }
        if (rows.length < SWEEP_PAGE) break;
      }
    }
    return raised;
  }

  /** Sweeps every `intervalMs` until `signal` aborts. */
  async run(signal: AbortSignal, intervalMs: number): Promise<void> {
    while (!signal.aborted) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, intervalMs);
        signal.addEventListener('abort', () => (clearTimeout(timer), resolve()), { once: true });
      });
      if (signal.aborted) return;
      try {
        await this.sweep();
      } catch (error) {
        this.deps.logger.warn({ err: error }, 'operational events sweep failed; next one retries');
      }
    }
  }

  private async raise(pending: PendingEvent): Promise<void> {
    const { event } = pending;
    let timer: NodeJS.Timeout | undefined;
    try {
      const late = new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error('Kafka did not acknowledge in time')), this.deps.publishTimeoutMs);
      });
      await Promise.race([this.deps.publish([event], false), late]);
    } catch (error) {
      this.deps.logger.warn(
        { err: error, eventId: event.eventId, eventType: event.eventType },
        'operational event not published; the sweep raises it',
      );
      return;
    } finally {
      clearTimeout(timer);
    }
    await this.forget(pending);
  }

  private async forget(pending: PendingEvent): Promise<void> {
    try {
      await this.deps.pending.remove(pending);
    } catch (error) {
      // Left to the sweep, which raises it again at worst (a duplicate the router sees as one).
      this.deps.logger.warn({ err: error, eventId: pending.event.eventId }, 'pending operational event not removed');
    }
  }
}

function shardOf(eventId: string): number {
  return parseInt(eventId.slice(0, 2), 16) % PENDING_SHARDS;
}

/** The Cassandra table of pending operational events. */
export class CassandraPendingEvents implements PendingEvents {
  constructor(private readonly db: CassandraClient) {}

  async put({ shard, writtenAt, event, check }: PendingEvent): Promise<void> {
    const stored = { ...event, payload: event.payload.toString('utf8') };
    await this.db.execute(
      'INSERT INTO operational_outbox (shard, written_at, event_id, event_json, check_json) VALUES (?, ?, ?, ?, ?)',
      [shard, new Date(writtenAt), event.eventId, JSON.stringify(stored), JSON.stringify(check)],
    );
  }

  async remove({ shard, writtenAt, event }: Pick<PendingEvent, 'shard' | 'writtenAt' | 'event'>): Promise<void> {
    await this.db.execute('DELETE FROM operational_outbox WHERE shard = ? AND written_at = ? AND event_id = ?', [
      shard,
      new Date(writtenAt),
      event.eventId,
    ]);
  }

  async olderThan(shard: number, before: number, limit: number): Promise<PendingEvent[]> {
    const result = await this.db.execute(
      'SELECT written_at, event_json, check_json FROM operational_outbox WHERE shard = ? AND written_at < ? LIMIT ?',
      [shard, new Date(before), limit],
    );
    return result.rows.map((row) => {
      const stored = JSON.parse(String(row.event_json)) as Omit<OperationalEvent, 'payload'> & { payload: string };
      return {
        shard,
        writtenAt: (row.written_at as Date).getTime(),
        event: { ...stored, payload: Buffer.from(stored.payload, 'utf8') },
        check: JSON.parse(String(row.check_json)) as OperationalCheck,
      };
    });
  }
}
