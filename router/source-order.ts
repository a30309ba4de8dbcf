/**
 * The events of each source partition being routed, in their order: a delivery of a subscription with ordering
 * 'entity' is published only once every earlier event of its partition has written its entity-order rows
 * (core/deliveries/entity-order.ts). Events are routed concurrently and their writes may land in any order; without
 * this, a later event's delivery could reach a dispatcher before an earlier event's row exists, and overtake it.
 */
export class SourceOrder {
  /** Per partition, by offset: the events whose rows are not written yet, in the order they entered. */
  private readonly partitions = new Map<string, Map<number, { written: Promise<void>; resolve: () => void }>>();
  /**
   * Per partition and entity, the offsets of its latest events routed since this member got the partition, ascending
   * (at most ENTITY_OFFSETS: `floor` is the highest one let go), for `previous`. Bounded: the entities seen longest ago
   * are forgotten first (MAX_ENTITIES), and their next event's previous one is then unknown.
   */
  private readonly entities = new Map<string, { offsets: number[]; floor: number }>();

  constructor(private readonly maxEntities = MAX_ENTITIES) {}

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

  /** The event at `offset` (decoded, before its rows are written) is one of `entity` (tenant and entity id). */
  seen(partition: string, offset: number, entity: string): void {
    const key = `${partition}\u0000${entity}`;
    let known = this.entities.get(key);
    if (known)
      this.entities.delete(key); // re-inserted: the most recently seen last
    else {
      known = { offsets: [], floor: -1 };
      if (this.entities.size >= this.maxEntities) this.entities.delete(this.entities.keys().next().value!);
    }
    this.entities.set(key, known);
    const { offsets } = known;
    if (offsets.includes(offset)) return;
    let at = offsets.length;
    while (at > 0 && offsets[at - 1]! > offset) at -= 1;
    offsets.splice(at, 0, offset);
    if (offsets.length > ENTITY_OFFSETS) known.floor = Math.max(known.floor, offsets.shift()!);
  }

  /**
   * The offset of the entity's event just before `offset` in the partition, once every earlier event has written its
   * rows (after `earlier`: each was seen by then). Undefined when unknown: none since this member got the partition
   * (an earlier owner's may exist), or forgotten.
   */
  previous(partition: string, offset: number, entity: string): number | undefined {
    const known = this.entities.get(`${partition}\u0000${entity}`);
    if (!known) return undefined;
    let previous: number | undefined;
    for (const other of known.offsets) if (other < offset) previous = other;
    // One let go may lie between the one found and this event.
    return previous !== undefined && previous > known.floor ? previous : undefined;
  }

  /**
   * Forgets every event (a rebalance: the partitions' new owners route their events again, in order), and lets every
   * waiting one go.
   */
  clear(): void {
    for (const pending of this.partitions.values()) for (const entry of pending.values()) entry.resolve();
    this.partitions.clear();
    this.entities.clear();
  }

  /** Events not written yet, across partitions (for tests and metrics). */
  get size(): number {
    let size = 0;
    for (const pending of this.partitions.values()) size += pending.size;
    return size;
  }
}

/** Offsets kept per entity: enough for the events of one entity being routed at once. */
const ENTITY_OFFSETS = 8;
/** Entities remembered across partitions (about 200 bytes each). */
const MAX_ENTITIES = 100_000;
