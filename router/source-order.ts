/**
 * The events of each source partition being routed, in their order: a delivery of a subscription with ordering
 * 'entity' is published only once every earlier event of its partition has written its entity-order rows
 * (core/deliveries/entity-order.ts). Events are routed concurrently and their writes may land in any order; without
 * this, a later event's delivery could reach a dispatcher before an earlier event's row exists, and overtake it.
 */
export class SourceOrder {
  /** Per partition, by offset: the events whose rows are not written yet, in the order they entered. */
  private readonly partitions = new Map<string, Map<number, { written: Promise<void>; resolve: () => void }>>();

  /** An event starts being routed (records of a partition start in order). Entering again is a no-op. */
  enter(partition: string, offset: number): void {
    let pending = this.partitions.get(partition);
    if (!pending) {
      pending = new Map();
      this.partitions.set(partition, pending);
    }
    if (pending.has(offset)) return;
    let resolve!: () => void;
    const written = new Promise<void>((done) => (resolve = done));
    pending.set(offset, { written, resolve });
  }

  /** The event's rows are written (or it has none): the events after it stop waiting for it. */
  written(partition: string, offset: number): void {
    const pending = this.partitions.get(partition);
    const entry = pending?.get(offset);
    if (!pending || !entry) return;
    entry.resolve();
    pending.delete(offset);
    if (pending.size === 0) this.partitions.delete(partition);
  }

  /** Resolves once every event of the partition before `offset` that has entered has written its rows. */
  async earlier(partition: string, offset: number): Promise<void> {
    const pending = this.partitions.get(partition);
    if (!pending) return;
    const waits: Promise<void>[] = [];
    for (const [other, entry] of pending) if (other < offset) waits.push(entry.written);
    await Promise.all(waits);
  }

  /**
   * Forgets every event (a rebalance: the partitions' new owners route their events again, in order), and lets every
   * waiting one go.
   */
  clear(): void {
    for (const pending of this.partitions.values()) for (const entry of pending.values()) entry.resolve();
    this.partitions.clear();
  }

  /** Events not written yet, across partitions (for tests and metrics). */
  get size(): number {
    let size = 0;
    for (const pending of this.partitions.values()) size += pending.size;
    return size;
  }
}
