import { isOperationalEventType, OPERATIONAL_SERVICE } from './operational-events.ts';
import type { AvroCodec } from './registry.ts';

/**
 * A producer's declaration of a subscribable event type, as it travels on the catalogue topic: the payload's JSON
 * Schema and an example payload as JSON text (absent from declarations made before they existed).
 */
export interface EventTypeEntry {
  eventType: string;
  service: string;
  description: string;
  payloadSchema?: string | null;
  example?: string | null;
}

/** A subscribable event type as the API shows it: the declaration with its schema and example parsed. */
export interface EventType {
  eventType: string;
  service: string;
  description: string;
  payloadSchema: Record<string, unknown> | null;
  example: unknown;
}

/** Where a catalogue record sits in its topic. */
export interface RecordPosition {
  partition: number;
  offset: string;
}

/** A partition's offsets when the follower started: `start` is the first record kept, `end` the next to be written. */
export interface PartitionOffsets {
  partition: number;
  start: string;
  end: string;
}

/**
 * The event-type catalogue, kept in memory from the compacted catalogue topic that producers publish to. It is
 * complete (caught up) once it has applied every record the topic held when the follower started: before that, a
 * valid event type may still be missing and must not be judged unknown.
 */
export class Catalogue {
  private readonly entries = new Map<string, EventType>();
  /** Per partition, the last offset still to apply; undefined until the end offsets are known. */
  private pending: Map<number, bigint> | undefined;
  private readonly waiters: (() => void)[] = [];

  constructor(private readonly codec: AvroCodec<EventTypeEntry>) {}

  /** Sets what must be applied before the catalogue is complete: every partition up to its end offset. */
  expect(offsets: PartitionOffsets[]): void {
    this.pending = new Map();
    for (const { partition, start, end } of offsets) {
      // An empty partition (end = start, both 0 when never written) has nothing to wait for.
      if (BigInt(end) > BigInt(start)) this.pending.set(partition, BigInt(end) - 1n);
    }
    this.settle();
  }

  /** Whether every record present at start has been applied. */
  get caughtUp(): boolean {
    return this.pending !== undefined && this.pending.size === 0;
  }

  /** Resolves true once caught up, or false after `timeoutMs`. */
  async whenCaughtUp(timeoutMs: number): Promise<boolean> {
    if (this.caughtUp) return true;
    let timer: NodeJS.Timeout | undefined;
    const caughtUp = new Promise<boolean>((resolve) => this.waiters.push(() => resolve(true)));
    const late = new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), timeoutMs)));
    try {
      return await Promise.race([caughtUp, late]);
    } finally {
      clearTimeout(timer);
    }
  }

  async apply(value: Buffer | null, key: Buffer | null, position?: RecordPosition): Promise<void> {
    if (value === null) {
      if (key) this.entries.delete(key.toString('utf8')); // a tombstone withdraws the type
    } else {
      const entry = await this.codec.decode(value);
      // `subscription.*` and `delivery.*` are the service's own (operational events): a producer cannot declare them.
      if (isOperationalEventType(entry.eventType) && entry.service !== OPERATIONAL_SERVICE) {
        if (position) this.reached(position);
        return;
      }
      this.entries.set(entry.eventType, {
        eventType: entry.eventType,
        service: entry.service,
        description: entry.description,
        payloadSchema: (parsedJson(entry.payloadSchema) as Record<string, unknown> | null) ?? null,
        example: parsedJson(entry.example) ?? null,
      });
    }
    if (position) this.reached(position);
  }

  private reached({ partition, offset }: RecordPosition): void {
    const pending = this.pending;
    const last = pending?.get(partition);
    if (pending && last !== undefined && BigInt(offset) >= last) {
      pending.delete(partition);
      this.settle();
    }
  }

  private settle(): void {
    if (this.caughtUp) for (const wake of this.waiters.splice(0)) wake();
  }

  list(): EventType[] {
    return [...this.entries.values()].sort((a, b) => a.eventType.localeCompare(b.eventType));
  }

  /** The declared event type of that exact name, if any. */
  get(eventType: string): EventType | undefined {
    return this.entries.get(eventType);
  }

  names(): string[] {
    return [...this.entries.keys()];
  }
}

/** JSON text parsed; undefined when absent or not JSON (a producer's mistake must not hide its event type). */
function parsedJson(text: string | null | undefined): unknown {
  if (text === null || text === undefined) return undefined;
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
}
