import type { AvroCodec } from './registry.ts';

/** A subscribable event type and the service producing it. */
export interface EventTypeEntry {
  eventType: string;
  service: string;
  description: string;
}

/** The event-type catalogue, kept in memory from the compacted catalogue topic that producers publish to. */
export class Catalogue {
  private readonly entries = new Map<string, EventTypeEntry>();

  constructor(private readonly codec: AvroCodec<EventTypeEntry>) {}

  async apply(value: Buffer | null, key: Buffer | null): Promise<void> {
    if (value === null) {
      if (key) this.entries.delete(key.toString('utf8')); // a tombstone withdraws the type
      return;
    }
    const entry = await this.codec.decode(value);
    this.entries.set(entry.eventType, {
      eventType: entry.eventType,
      service: entry.service,
      description: entry.description,
    });
  }

  list(): EventTypeEntry[] {
    return [...this.entries.values()].sort((a, b) => a.eventType.localeCompare(b.eventType));
  }

  names(): string[] {
    return [...this.entries.keys()];
  }
}
