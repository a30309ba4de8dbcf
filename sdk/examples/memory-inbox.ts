import type { PurchaseOrderEnvelope } from '../src/types.ts';

/** One event the receiver accepted, as it arrived. */
export interface ReceivedEvent {
  envelope: PurchaseOrderEnvelope;
  /** The body exactly as received (what the signature covers): keep it if you store events. */
  rawBody: Buffer;
  deliveryId: string | null;
  attempt: number | null;
  /** A test delivery (X-Webhook-Test: true): the catalogue's example payload, not a real order. */
  test: boolean;
  receivedAt: Date;
}

/**
 * Where the receiver keeps events until they are processed, keyed by eventId. `add` must be atomic: true only the
 * first time an eventId is added. In production this is a table with the eventId as unique key (an INSERT that does
 * nothing on conflict), written before answering 2xx, and a worker processes what it holds.
 */
export interface EventInbox {
  add(event: ReceivedEvent): boolean | Promise<boolean>;
}

/**
 * An in-memory inbox, for the example and tests only: it forgets everything on restart, and is per process (two
 * receivers behind a load balancer would each accept the same event). It remembers the last `capacity` event ids;
 * a replay can come at any time, so a real store keeps ids for as long as replays matter to you (days, not hours).
 */
export class MemoryInbox implements EventInbox {
  /** Insertion order is the age order: the first key is the oldest. */
  readonly events = new Map<string, ReceivedEvent>();

  constructor(private readonly capacity = 100_000) {}

  add(event: ReceivedEvent): boolean {
    if (this.events.has(event.envelope.eventId)) return false;
    this.events.set(event.envelope.eventId, event);
    if (this.events.size > this.capacity) this.events.delete(this.events.keys().next().value!);
    return true;
  }
}
