/**
 * Run as `node --allow-natives-syntax --import tsx test/support/hidden-class-probe.ts` (core/hidden-classes.test.ts
 * does): builds the objects the router and the dispatcher make per event and per delivery, thousands of times as in a
 * hot loop, and prints as JSON how many times each changed its V8 hidden class (map) from one object to the next. An
 * object that gets a hidden class of its own each time makes every property read of it miss V8's inline caches.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import avro from 'avsc';
import type { ConsumedRecord } from '../../core/kafka.ts';
import { fromDeliveryMessage, type DeliveryRecord } from '../../core/deliveries/delivery-record.ts';
import { storedEvent, type StoredEvent } from '../../core/deliveries/delivery.ts';
import { envelopeFields } from '../../core/envelope.ts';
import { repoRoot } from '../../infra/processes.ts';

const ROUNDS = 5_000;

// Compiled at run time, where --allow-natives-syntax applies: the module itself stays plain TypeScript.
const sameMap = new Function('a', 'b', 'return %HaveSameMap(a, b)') as (a: object, b: object) => boolean;

/** How many times the hidden class changed over ROUNDS objects made by `make`. */
function mapChanges(make: (round: number) => object): number {
  let changes = 0;
  let previous = make(0);
  for (let round = 1; round < ROUNDS; round += 1) {
    const next = make(round);
    if (!sameMap(previous, next)) changes += 1;
    previous = next;
  }
  return changes;
}

const schema = (name: string) =>
  avro.Type.forSchema(JSON.parse(readFileSync(path.join(repoRoot, 'schemas', name), 'utf8')) as avro.Schema);
const deliveryType = schema('delivery.avsc');
const eventType = schema('integration-event.avsc');

// Values as the codecs decode them (instances of avsc's record classes), varied as real traffic varies.
const deliveries = [0, 1, 2, 3].map((variant) =>
  deliveryType.toBuffer({
    deliveryId: `del-${variant}`,
    tenantId: 'tenant-a',
    subscriptionId: 'sub-1',
    eventId: 'evt-1',
    eventType: 'purchaseOrder.validated',
    entityId: 'po-1',
    occurredAt: '2026-11-24T10:00:00.000Z',
    queuedAt: 1_000 + variant,
    attempt: 1 + variant,
    dueAt: variant * 1_000,
    envelope: Buffer.from('{}'),
    signature: variant % 2 === 0 ? 'c2lnbmF0dXJl' : null,
    replayOf: variant === 3 ? 'del-0' : null,
    test: variant === 2,
    replayJobId: null,
  }),
);
const events = [0, 1].map((variant) =>
  eventType.toBuffer({
    eventId: `evt-${variant}`,
    eventType: 'purchaseOrder.validated',
    occurredAt: '2026-11-24T10:00:00.000Z',
    tenantId: 'tenant-a',
    entityId: 'po-1',
    reference: variant === 0 ? 'PO-1' : null,
    resourceUrl: '/PurchaseOrders/po-1',
    payload: Buffer.from('{"id":"po-1"}'),
    testSubscriptionId: null,
  }),
);
const message = (round: number): ConsumedRecord => ({
  topic: 'deliveries',
  partition: 0,
  offset: String(round),
  key: Buffer.from('sub-1'),
  value: deliveries[round % 4]!,
  headers: round % 7 === 0 ? { 'due-at': '5000', 'hold-until': '9000' } : {},
  timestamp: 0,
  redelivered: round % 5 === 0,
});
const decodedEvent = (round: number) =>
  eventType.fromBuffer(events[round % 2]!) as Omit<StoredEvent, 'payload'> & {
    payload: Buffer;
  };

const counts = {
  fromDeliveryMessage: mapChanges((round) =>
    fromDeliveryMessage(message(round), deliveryType.fromBuffer(deliveries[round % 4]!) as DeliveryRecord),
  ),
  storedEvent: mapChanges((round) => {
    const event = decodedEvent(round);
    return storedEvent(event, event.payload);
  }),
  envelopeFields: mapChanges((round) => envelopeFields(storedEvent(decodedEvent(round), null), `sub-${round % 3}`)),
  // A pattern that changes the class (a field added to some objects only), measured the same way: the probe must see
  // what it is there to catch. (The spread-then-extend these builders replaced changed it every time in Node 20's V8,
  // and no longer does in Node 24's.)
  extendedSometimes: mapChanges((round) => {
    const event: Record<string, unknown> = { ...decodedEvent(round) };
    if (round % 2 === 0) event.subscriptionId = `sub-${round % 3}`;
    return event;
  }),
};
console.log(JSON.stringify({ rounds: ROUNDS, counts }));
