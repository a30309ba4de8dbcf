import type { Logger } from '../core/log.ts';
import { MINUTE, type OutboxRow, type PurchaseStore } from './purchase-store.ts';

/** Publishes one outbox row; resolves only once the broker acknowledged it (acks=all). */
export type PublishEvent = (row: OutboxRow) => Promise<void>;

/**
 * Publishes every committed outbox row at least once: reads pointer buckets from the oldest still open to now,
 * publishes, then marks rows published and drops pointers. A crash at any point leaves the row to the next pass.
 */
export class OutboxRelay {
  constructor(
    private readonly store: PurchaseStore,
    private readonly publish: PublishEvent,
    private readonly logger: Logger,
    private readonly options: { name: string; intervalMs: number; lookbackMinutes: number },
  ) {}

  async run(signal: AbortSignal): Promise<void> {
    while (!signal.aborted) {
      try {
        await this.pass();
      } catch (error) {
        this.logger.error({ err: error }, 'outbox relay pass failed; retrying');
      }
      await new Promise<void>((resolve) => {
        const done = () => {
          clearTimeout(timer);
          signal.removeEventListener('abort', done);
          resolve();
        };
        const timer = setTimeout(done, this.options.intervalMs);
        signal.addEventListener('abort', done, { once: true });
      });
    }
  }

  /** One sweep over the open buckets; returns how many events were published. */
  async pass(): Promise<number> {
    const current = Math.floor(Date.now() / MINUTE);
    const saved = await this.store.relayProgress(this.options.name);
    const oldest = Math.min(saved ?? current - this.options.lookbackMinutes, current);
    let published = 0;
    let oldestOpen = current;
    for (let bucket = oldest; bucket <= current; bucket += 1) {
      const pointers = await this.store.pointers(bucket);
      for (const { tenantId, orderId } of pointers) {
        const rows = await this.store.unpublished(tenantId, orderId);
        await Promise.all(rows.map((row) => this.publish(row)));
        await Promise.all(rows.map((row) => this.store.markPublished(row)));
        await this.store.dropPointer(bucket, tenantId, orderId);
        published += rows.length;
      }
      // A bucket stays open for two minutes: a writer may still be between its pointer and its batch.
      if (pointers.length > 0 || bucket >= current - 1) oldestOpen = Math.min(oldestOpen, bucket);
    }
    if (oldestOpen !== saved) await this.store.saveRelayProgress(this.options.name, oldestOpen);
    if (published > 0) this.logger.debug({ published }, 'outbox relay published events');
    return published;
  }
}
