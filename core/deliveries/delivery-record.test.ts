import { describe, expect, it } from 'vitest';
import type { ConsumedRecord } from '../kafka.ts';
import {
  deliveryMessage,
  dueAtOf,
  fromDeliveryMessage,
  parkedMessage,
  withoutTransportFlags,
  type DeliveryRecord,
} from './delivery-record.ts';

const record: DeliveryRecord = {
  deliveryId: 'del-1',
  tenantId: 'tenant-a',
  subscriptionId: 'sub-1',
  eventId: 'evt-1',
  eventType: 'purchaseOrder.validated',
  entityId: 'po-1',
  occurredAt: '2026-11-23T10:00:00.000Z',
  queuedAt: 1_000,
  attempt: 2,
  dueAt: 61_000,
  envelope: Buffer.from('{}'),
  signature: null,
  replayOf: null,
};

/** What a consumer hands back for a published message. */
const consumed = (headers: Record<string, string>, redelivered = false): ConsumedRecord => ({
  topic: 't',
  partition: 0,
  offset: '5',
  key: Buffer.from('sub-1'),
  value: Buffer.from('x'),
  headers,
  timestamp: 0,
  redelivered,
});

describe('delivery messages on Kafka', () => {
  it('encode the record without its transport flags, which ride in headers with the due time', async () => {
    const encoded: DeliveryRecord[] = [];
    const message = await deliveryMessage(
      'retry.1m',
      { ...record, expiryHop: true, mayBeDuplicate: true },
      async (r) => {
        encoded.push(r);
        return Buffer.from('avro');
      },
    );
    expect(encoded).toEqual([record]);
    expect(message).toEqual({
      topic: 'retry.1m',
      key: 'sub-1',
      value: Buffer.from('avro'),
      headers: { 'due-at': '61000', 'expiry-hop': '1', 'may-be-duplicate': '1' },
    });
    expect(dueAtOf(consumed(message.headers!))).toBe(61_000);
    expect(fromDeliveryMessage(consumed(message.headers!), record)).toEqual({
      ...record,
      expiryHop: true,
      mayBeDuplicate: true,
      rescheduled: false,
    });
  });

  it("carries the routing span's traceparent in a header, through the series' next records", async () => {
    const traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
    const message = await deliveryMessage('deliveries', { ...record, traceparent }, async (r) => {
      expect(r).toEqual(record); // not in the Avro value
      return Buffer.from('avro');
    });
    expect(message.headers).toMatchObject({ traceparent });
    const consumedRecord = fromDeliveryMessage(consumed(message.headers!), record);
    expect(consumedRecord.traceparent).toBe(traceparent);
    expect(withoutTransportFlags(consumedRecord).traceparent).toBe(traceparent);
    expect(fromDeliveryMessage(consumed({}), record).traceparent).toBeUndefined();
  });

  it("takes the routing span's traceparent given apart (the router's way), before the record's own", async () => {
    const routing = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
    const encode = async () => Buffer.from('avro');
    expect((await deliveryMessage('deliveries', record, encode, routing)).headers).toMatchObject({
      traceparent: routing,
    });
    const own = '00-4bf92f3577b34da6a3ce929d0e0e4736-b7ad6b7169203331-01';
    expect(
      (await deliveryMessage('deliveries', { ...record, traceparent: own }, encode, routing)).headers!.traceparent,
    ).toBe(routing);
    expect((await deliveryMessage('deliveries', record, encode)).headers).not.toHaveProperty('traceparent');
  });

  it('a retry held by a long Retry-After carries its hold in a header, and keeps it when consumed', async () => {
    const held = { ...record, holdUntil: 21_661_000 };
    const message = await deliveryMessage('retry.4h', held, async (r) => {
      expect(r).toEqual(record);
      return Buffer.from('avro');
    });
    expect(message.headers).toEqual({ 'due-at': '61000', 'hold-until': '21661000' });
    expect(fromDeliveryMessage(consumed(message.headers!), record)).toEqual({
      ...held,
      expiryHop: false,
      mayBeDuplicate: false,
      rescheduled: false,
    });
  });

  it('carries when it was routed and the subscription version it was routed with in headers, through retries', async () => {
    const routed = { ...record, routedAt: 1_700_000_000_000, subscriptionVersion: 1_699_999_000_000 };
    const message = await deliveryMessage('retry.1m', routed, async (r) => {
      expect(r).toEqual(record); // not in the Avro value
      return Buffer.from('avro');
    });
    expect(message.headers).toEqual({
      'due-at': '61000',
      'routed-at': '1700000000000',
      'subscription-version': '1699999000000',
    });
    expect(fromDeliveryMessage(consumed(message.headers!), record)).toEqual({
      ...routed,
      expiryHop: false,
      mayBeDuplicate: false,
      rescheduled: false,
    });
  });

  it('a first attempt carries no header; redelivered after a rebalance it may be a duplicate', async () => {
    const message = await deliveryMessage('deliveries', { ...record, attempt: 1, dueAt: 0 }, async () =>
      Buffer.from('a'),
    );
    expect(message.headers).toEqual({});
    expect(dueAtOf(consumed({}))).toBeUndefined();
    expect(fromDeliveryMessage(consumed({}), record)).toMatchObject({ expiryHop: false, mayBeDuplicate: false });
    expect(fromDeliveryMessage(consumed({}, true), record)).toMatchObject({ mayBeDuplicate: true });
  });

  it('marks a retry scheduled again by a possible duplicate, until Kafka hands it again after a rebalance', async () => {
    const message = await deliveryMessage(
      'retry.1m',
      { ...record, mayBeDuplicate: true, rescheduled: true },
      async (r) => {
        expect(r).toEqual(record);
        return Buffer.from('avro');
      },
    );
    expect(message.headers).toMatchObject({ 'may-be-duplicate': '1', rescheduled: '1' });
    expect(fromDeliveryMessage(consumed(message.headers!), record)).toMatchObject({ rescheduled: true });
    // Handed again, it may be the record whose attempt was made (and whose retry a crash lost): no longer marked.
    expect(fromDeliveryMessage(consumed(message.headers!, true), record)).toMatchObject({ rescheduled: false });
    const parked = parkedMessage('overflow', consumed(message.headers!, true), 5_000);
    expect(parked.headers).not.toHaveProperty('rescheduled');
    expect(parkedMessage('overflow', consumed(message.headers!), 5_000).headers).toMatchObject({ rescheduled: '1' });
  });

  it('a parked message is the consumed one, same key, value and headers, due after the overflow delay', () => {
    const before = Date.now();
    const headers = { 'due-at': '61000', 'hold-until': '21661000' };
    const parked = parkedMessage('overflow', consumed(headers), 5_000);
    expect(parked).toMatchObject({ topic: 'overflow', key: 'sub-1', value: Buffer.from('x') });
    expect(parked.headers).toMatchObject({ 'hold-until': '21661000' });
    expect(Number(parked.headers!['due-at'])).toBeGreaterThanOrEqual(before + 5_000);
    expect(Number(parked.headers!['due-at'])).toBeLessThanOrEqual(Date.now() + 5_000);
    expect(parked.headers).not.toHaveProperty('may-be-duplicate');
    // Redelivered (a previous owner may have sent it): the parked copy checks the history before sending.
    expect(parkedMessage('overflow', consumed({}, true), 5_000).headers).toMatchObject({ 'may-be-duplicate': '1' });
  });
});
