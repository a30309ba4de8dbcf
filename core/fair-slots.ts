/**
 * A consumer's slots, shared fairly between groups (tenants) and, within a group, between lanes (subscriptions).
 *
 * A slot freed goes to the next group in turn that has a record waiting and holds fewer than `perGroup` slots, and
 * within that group to the next lane in turn; within a lane, first come first served. This is deficit round robin with
 * a quantum of one record: every record costs the same, because a record holds its slot only for the dispatcher's own
 * work (the wait for a receiver's answer holds its lane, not a slot). So a tenant with thousands of records waiting
 * gets one slot per turn like a tenant with one, and never more than `perGroup` at once: its backlog delays another
 * tenant's first record by at most one turn of the groups waiting.
 *
 * A group's turn is its place in `ready`, a Map in insertion order: served, it goes to the back. Groups at their bound
 * wait in `full` until one of their slots comes back, so a freed slot finds its taker in O(1).
 */
export class FairSlots {
  private held = 0;
  private readonly groups = new Map<string, Group>();
  /** Groups with records waiting and room under perGroup, in turn order. */
  private readonly ready = new Map<string, Group>();
  /** Groups with records waiting and perGroup slots held. */
  private readonly full = new Set<string>();

  /**
   * @param capacity slots in all
   * @param perGroup slots one group may hold at once (at least 1)
   */
  constructor(
    private readonly capacity: number,
    private readonly perGroup: number = capacity,
  ) {}

  /** Slots held now. */
  get inUse(): number {
    return this.held;
  }

  /** Records waiting for a slot. */
  get waiting(): number {
    let count = 0;
    for (const group of this.groups.values()) count += group.waiting;
    return count;
  }

  /**
   * Resolves with the slot's release once a slot is this record's; the release may be called more than once (only the
   * first call counts).
   */
  take(groupKey: string, laneKey: string): Promise<() => void> {
    let group = this.groups.get(groupKey);
    if (!group) {
      group = { key: groupKey, held: 0, waiting: 0, lanes: new Map() };
      this.groups.set(groupKey, group);
    }
    // Straight in when nobody waits ahead in turn and the group has room; otherwise behind the others.
    if (this.ready.size === 0 && group.waiting === 0 && this.held < this.capacity && group.held < this.limit) {
      return Promise.resolve(this.grant(group));
    }
    return new Promise((resolve) => {
      const lane = group.lanes.get(laneKey);
      if (lane) lane.push(resolve);
      else group.lanes.set(laneKey, [resolve]);
      group.waiting += 1;
      if (group.waiting === 1) this.queue(group);
      this.dispatch();
    });
  }

  private get limit(): number {
    return Math.max(1, this.perGroup);
  }

  /** Puts a group with records waiting in line: at the back of the turns, or aside while it holds its bound. */
  private queue(group: Group): void {
    if (group.held < this.limit) this.ready.set(group.key, group);
    else this.full.add(group.key);
  }

  private grant(group: Group): () => void {
    this.held += 1;
    group.held += 1;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.held -= 1;
      group.held -= 1;
      if (this.full.delete(group.key)) this.ready.set(group.key, group);
      if (group.held === 0 && group.waiting === 0) this.groups.delete(group.key);
      this.dispatch();
    };
  }

  /** Hands free slots to the groups in turn, each its next lane's first record. */
  private dispatch(): void {
    while (this.held < this.capacity && this.ready.size > 0) {
      const group: Group = this.ready.values().next().value!;
      this.ready.delete(group.key);
      const [laneKey, lane] = group.lanes.entries().next().value!;
      const wake = lane.shift()!;
      // The lane goes to the back of its group's turns (or away, emptied).
      group.lanes.delete(laneKey);
      if (lane.length > 0) group.lanes.set(laneKey, lane);
      group.waiting -= 1;
      const release = this.grant(group);
      if (group.waiting > 0) this.queue(group);
      wake(release);
    }
  }
}

interface Group {
  key: string;
  held: number;
  waiting: number;
  /** Per lane, its records waiting, in turn order (a Map in insertion order: served, a lane goes to the back). */
  lanes: Map<string, ((release: () => void) => void)[]>;
}
