import { describe, expect, it } from 'vitest';
import { Catalogue, type EventTypeEntry } from './catalogue.ts';
import type { AvroCodec } from './registry.ts';

/** A codec whose records are the entries' JSON (the registry's Avro is the integration tests' business). */
const jsonCodec = {
  encode: async (entry: EventTypeEntry) => Buffer.from(JSON.stringify(entry)),
  decode: async (buffer: Buffer) => JSON.parse(buffer.toString('utf8')) as EventTypeEntry,
} as unknown as AvroCodec<EventTypeEntry>;

const record = (eventType: string, service: string) =>
  Buffer.from(JSON.stringify({ eventType, service, description: 'd', payloadSchema: null, example: null }));

describe('Catalogue', () => {
  it("keeps subscription.* and delivery.* to the service's own declarations: a producer cannot declare them", async () => {
    const catalogue = new Catalogue(jsonCodec);
    catalogue.expect([{ partition: 0, start: '0', end: '4' }]);
    await catalogue.apply(record('purchaseOrder.validated', 'purchase'), null, { partition: 0, offset: '0' });
    await catalogue.apply(record('subscription.failing', 'purchase'), null, { partition: 0, offset: '1' });
    await catalogue.apply(record('subscription.failing', 'webhooks'), null, { partition: 0, offset: '2' });
    expect(catalogue.caughtUp).toBe(false);
    await catalogue.apply(record('delivery.shipped', 'logistics'), null, { partition: 0, offset: '3' });
    expect(catalogue.list().map((type) => `${type.service} ${type.eventType}`)).toEqual([
      'purchase purchaseOrder.validated',
      'webhooks subscription.failing',
    ]);
    // A refused record (the last) still counts toward catching up.
    expect(catalogue.caughtUp).toBe(true);
  });
});
