import type { DeliveryRecord } from '../core/deliveries/delivery-record.ts';
import { before } from '../core/deliveries/entity-order.ts';

type Ordered = DeliveryRecord & { orderSeq: number };

/** The first pending delivery of an entity, as the end of the one before it read it (its row). */
export interface Head {
  seq: number;
  deliveryId: string;
}

interface Turn {
  /** The delivery of the entity being sent in this process. */
  holder: Ordered;
  /** A later delivery of the entity that arrived meanwhile and waits here for the holder's end. */
  follower?: { record: Ordered; wake(go: boolean): void };
}

/**
 * Ordered delivery per entity within one dispatcher process: a delivery whose predecessor is being sent right here
 * waits for that one's end in memory, instead of reading the entity's rows, marking its own row waiting, reading
 * again and leaving a check record (entity-order-gate.ts). When the predecessor's end, having deleted its row, reads
 * this delivery's row first, nothing before it is pending: its own routing published it only once every earlier event
 * had its rows, and it had arrived here before that read. It is then sent without a look of its own. Any other end
 * (a retry, a deferral, a crash of the handler, another row first) sends it back to the gate's look.
 *
 * The follower keeps its record uncommitted and its place in its subscription's lane while it waits, for one round
 * trip at most: one follower per entity, later ones take the gate's way (so an entity holds two places of its lane at
 * most).
 */
export class LocalTurns {
  private readonly turns = new Map<string, Turn>();
  /**
   * Per entity, the place of the last delivery that ended here after holding its turn: everything before it had ended
   * when it was sent. A delivery whose router names that place as its entity's previous event's (`orderPrev`) has
   * nothing pending before it, and is sent without a look at the rows. Bounded, the oldest forgotten first.
   */
  private readonly ends = new Map<string, number>();

  constructor(private readonly maxEnds = MAX_ENDS) {}

  /** Whether the delivery of its entity's previous event ended here (so nothing before this one is pending). */
  cleared(record: Ordered): boolean {
    return typeof record.orderPrev === 'number' && this.ends.get(keyOf(record)) === record.orderPrev;
  }

  /** The delivery is being sent here: it holds its entity's turn in this process, unless another delivery does. */
  hold(record: Ordered): void {
    const key = keyOf(record);
    if (!this.turns.has(key)) this.turns.set(key, { holder: record });
  }

  /**
   * Undefined when nothing earlier of the entity is being sent here (or another follower already waits); otherwise
   * resolves once the holder's handling is over: true when its end found this delivery first (its turn has come, it
   * now holds it), false when it must look at the rows itself.
   */
  follow(record: Ordered): Promise<boolean> | undefined {
    const turn = this.turns.get(keyOf(record));
    if (!turn || turn.follower || turn.holder.deliveryId === record.deliveryId) return undefined;
    if (!before(rowOf(turn.holder), rowOf(record))) return undefined;
    return new Promise<boolean>((wake) => (turn.follower = { record, wake }));
  }

  /**
   * A delivery's handling is over. `end`, when it ended: the first pending delivery of its entity that its end read;
   * `successor`: the next one, waiting, that its end would send on at once (a chain). Answers whether the caller sends
   * the successor on: not when the follower waiting here is that delivery, which then goes itself.
   */
  pass(record: Ordered, end: { head?: Head } | undefined, successor?: Ordered): boolean {
    const key = keyOf(record);
    const turn = this.turns.get(key);
    if (turn?.holder !== record) return successor !== undefined;
    if (end) this.ended(key, record.orderSeq);
    const head = end?.head;
    const follower = turn.follower;
    const next = follower?.record;
    if (
      follower &&
      next &&
      (successor?.deliveryId === next.deliveryId ||
        (head?.deliveryId === next.deliveryId && head.seq === next.orderSeq))
    ) {
      turn.holder = next;
      turn.follower = undefined;
      follower.wake(true);
      return false;
    }
    if (successor) {
      turn.holder = successor;
      return true;
    }
    this.turns.delete(key);
    follower?.wake(false);
    return false;
  }

  private ended(key: string, seq: number): void {
    if (!this.ends.delete(key) && this.ends.size >= this.maxEnds) this.ends.delete(this.ends.keys().next().value!);
    this.ends.set(key, seq);
  }

  /** Entities with a delivery being sent here (a measure for tests: it drops to none once all is handled). */
  get size(): number {
    return this.turns.size;
  }
}

/** Entities whose last end is remembered (about 150 bytes each). */
const MAX_ENDS = 100_000;

const keyOf = (record: DeliveryRecord) => `${record.tenantId}\u0000${record.subscriptionId}\u0000${record.entityId}`;
const rowOf = (record: Ordered) => ({ seq: record.orderSeq, deliveryId: record.deliveryId });
