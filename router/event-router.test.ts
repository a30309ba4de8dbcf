import { createHmac } from 'node:crypto';
import { describe, expect, it, vi } from 'vitest';
import type { Delivery, DeliveryStatus, StoredEvent } from '../core/deliveries/delivery.ts';
import { queuedDelivery, type DeliveryRecord } from '../core/deliveries/delivery-record.ts';
import { buildEnvelope } from '../core/envelope.ts';
import { deliveryIdFor } from '../core/ids.ts';
import { blankSubscription, type Subscription } from '../core/subscriptions/subscription.ts';
import { routeEvent, routingTurns, UnwrittenRoutingError, type RouterDeps } from './event-router.ts';
import { Turns } from '../core/turns.ts';

const LIMIT = 204_800;
const RECEIVED_AT = Date.UTC(2025, 2, 3, 4, 5, 6, 789);

const event: StoredEvent & { payload: Buffer } = {
  tenantId: 'tenant-a',
  eventId: '6f1c2d3e-4b5a-4c6d-8e7f-0a1b2c3d4e5f',
  eventType: 'purchaseOrder.validated',
  occurredAt: '2025-03-03T04:05:06.000Z',
  entityId: 'po-7',
  reference: 'PO-000007',
  resourceUrl: '/CorePurchase/REST/PurchaseOrders/po-7',
  payload: Buffer.from('{ "id":"po-7", "totalAmount":"1.000000000000000000001", "s":"😀\\u00e9" }'),
};

function subscription(id: string, overrides: Partial<Subscription> = {}): Subscription {
  return {
    ...blankSubscription('tenant-a', id, new Date(0)),
    url: `https://receiver.example.com/${id}`,
    eventTypes: ['purchaseOrder.*'],
    ...overrides,
  };
}

type Call =
  | { kind: 'subscriptionsOf'; tenantId: string }
  | { kind: 'createDeliveries'; event: StoredEvent; deliveries: Delivery[]; writeTime: number }
  | { kind: 'markLatestForEntity'; delivery: Delivery; writeTime: number }
  | { kind: 'enqueueOrdered'; records: DeliveryRecord[]; writeTime: number }
  | { kind: 'publish'; records: DeliveryRecord[] };

/** In-memory dependencies that log every call in order. */
function fakes(
  subscriptions: Subscription[],
  options: { failStore?: boolean; routed?: Map<string, DeliveryStatus> } = {},
) {
  const calls: Call[] = [];
  const deps: RouterDeps = {
    subscriptionsOf: async (tenantId) => {
      calls.push({ kind: 'subscriptionsOf', tenantId });
      return subscriptions;
    },
    store: {
      routedBefore: async () => options.routed ?? new Map(),
      createDeliveries: async (storedEvent, deliveries, writeTime) => {
        calls.push({ kind: 'createDeliveries', event: storedEvent, deliveries, writeTime });
        if (options.failStore) throw new Error('cassandra unavailable');
      },
      markLatestForEntity: async (delivery, writeTime) => {
        // Yield first: a publish that did not wait for this write would overtake it in the log.
        await new Promise((resolve) => setImmediate(resolve));
        calls.push({ kind: 'markLatestForEntity', delivery, writeTime });
      },
      enqueueOrdered: async (records, writeTime) => {
        await new Promise((resolve) => setImmediate(resolve));
        calls.push({ kind: 'enqueueOrdered', records, writeTime });
      },
    },
    publish: async (records) => {
      calls.push({ kind: 'publish', records });
    },
    payloadLimitBytes: LIMIT,
  };
  return { deps, calls };
}

describe('routeEvent', () => {
  it('routes a test event to its one subscription, whatever its event types, marked as a test and superseding nothing', async () => {
    const subs = [
      subscription('tested', { eventTypes: ['invoice.*'], supersedePendingDeliveries: true }),
      subscription('sibling'),
      subscription('tested-elsewhere', { tenantId: 'tenant-b' }),
    ];
    const { deps, calls } = fakes(subs);
    const records = await routeEvent({ ...event, testSubscriptionId: 'tested' }, RECEIVED_AT, deps);
    expect(records.map((record) => [record.subscriptionId, record.test])).toEqual([['tested', true]]);
    const created = calls.find((call) => call.kind === 'createDeliveries');
    expect(created?.kind === 'createDeliveries' && created.deliveries.map((delivery) => delivery.test)).toEqual([true]);
    expect(calls.some((call) => call.kind === 'markLatestForEntity')).toBe(false);

    // A disabled subscription gets no test delivery either.
    const disabled = fakes([subscription('tested', { status: 'disabled' })]);
    expect(await routeEvent({ ...event, testSubscriptionId: 'tested' }, RECEIVED_AT, disabled.deps)).toEqual([]);
    // An ordinary event is not marked.
    const ordinary = fakes([subscription('sibling')]);
    expect((await routeEvent(event, RECEIVED_AT, ordinary.deps))[0]!.test).toBeUndefined();
  });

  it('creates deliveries only for enabled subscriptions of the event tenant whose patterns match', async () => {
    const subs = [
      subscription('match-wildcard'),
      subscription('disabled', { status: 'disabled' }),
      subscription('other-type', { eventTypes: ['invoice.*'] }),
      subscription('too-deep', { eventTypes: ['purchaseOrder.row.*'] }),
      subscription('exact', { eventTypes: ['invoice.sent', 'purchaseOrder.validated'] }),
      subscription('leading-wildcard', { eventTypes: ['*.validated'] }),
      subscription('other-tenant', { tenantId: 'tenant-b' }), // a faulty store must not leak it
      subscription('cancelled-only', { eventTypes: ['purchaseOrder.cancelled'] }),
    ];
    const { deps, calls } = fakes(subs);
    const records = await routeEvent(event, RECEIVED_AT, deps);
    expect(records.map((r) => r.subscriptionId)).toEqual(['match-wildcard', 'exact', 'leading-wildcard']);
    expect(calls[0]).toEqual({ kind: 'subscriptionsOf', tenantId: 'tenant-a' });
    const created = calls.find((c) => c.kind === 'createDeliveries');
    expect(created?.kind === 'createDeliveries' && created.deliveries.map((d) => d.subscriptionId)).toEqual([
      'match-wildcard',
      'exact',
      'leading-wildcard',
    ]);
  });

  it('never routes to another tenant, even when every subscription returned belongs to it', async () => {
    const { deps, calls } = fakes([
      subscription('b1', { tenantId: 'tenant-b' }),
      subscription('b2', { tenantId: 'tenant-b', eventTypes: ['*.*'] }),
    ]);
    expect(await routeEvent(event, RECEIVED_AT, deps)).toEqual([]);
    expect(calls.map((c) => c.kind)).toEqual(['subscriptionsOf']);
  });

  it('writes and publishes nothing when no subscription matches', async () => {
    const { deps, calls } = fakes([subscription('s', { eventTypes: ['purchaseOrder.cancelled'] })]);
    expect(await routeEvent(event, RECEIVED_AT, deps)).toEqual([]);
    expect(calls.map((c) => c.kind)).toEqual(['subscriptionsOf']);
  });

  it('fills each record: derived id, attempt 1, queued at the source record time, envelope for that subscription', async () => {
    const { deps } = fakes([
      subscription('s1', { updatedAt: new Date(1_000) }),
      subscription('s2', { updatedAt: new Date(2_000) }),
    ]);
    const before = Date.now();
    const records = await routeEvent(event, RECEIVED_AT, deps);
    for (const [index, id] of ['s1', 's2'].entries()) {
      const record = records[index]!;
      // When it was routed (after the subscriptions were read), and the version of the subscription it was routed with.
      expect(record.routedAt).toBeGreaterThanOrEqual(before);
      expect(record.routedAt).toBeLessThanOrEqual(Date.now());
      expect(record.subscriptionVersion).toBe((index + 1) * 1_000);
      expect(record).toEqual({
        routedAt: record.routedAt,
        subscriptionVersion: record.subscriptionVersion,
        deliveryId: deliveryIdFor(event.eventId, id),
        tenantId: 'tenant-a',
        subscriptionId: id,
        eventId: event.eventId,
        eventType: event.eventType,
        entityId: event.entityId,
        occurredAt: event.occurredAt,
        queuedAt: RECEIVED_AT,
        attempt: 1,
        dueAt: 0,
        envelope: buildEnvelope({ ...event, subscriptionId: id }, event.payload, LIMIT),
        signature: null,
        replayOf: null,
      });
      // The producer's bytes are inside, untouched.
      expect(record.envelope.includes(event.payload)).toBe(true);
      expect(JSON.parse(record.envelope.toString('utf8'))).toMatchObject({ subscriptionId: id, payloadOmitted: false });
    }
  });

  it('omits a payload above the configured limit', async () => {
    const { deps, calls } = fakes([subscription('s1')]);
    deps.payloadLimitBytes = event.payload.length - 1;
    const [record] = await routeEvent(event, RECEIVED_AT, deps);
    expect(JSON.parse(record!.envelope.toString('utf8'))).toMatchObject({ payload: null, payloadOmitted: true });
    // Never embedded, so not kept: the stored event has no payload, and a replay rebuilds the same envelope.
    const created = calls.find((call) => call.kind === 'createDeliveries');
    expect(created?.kind === 'createDeliveries' && created.event.payload).toBeNull();
    expect(
      buildEnvelope({ ...event, subscriptionId: 's1' }, null, deps.payloadLimitBytes).equals(record!.envelope),
    ).toBe(true);
  });

  it('signs Hmac subscriptions over the exact envelope bytes with each subscription secret', async () => {
    const { deps } = fakes([
      subscription('h1', { authenticationMode: 'Hmac', secrets: { hmacSecret: 'secret-one' } }),
      subscription('h2', { authenticationMode: 'Hmac', secrets: { hmacSecret: 'clé-deux-🔑' } }),
    ]);
    const records = await routeEvent(event, RECEIVED_AT, deps);
    for (const [record, secret] of [
      [records[0]!, 'secret-one'],
      [records[1]!, 'clé-deux-🔑'],
    ] as const) {
      const expected = createHmac('sha256', Buffer.from(secret, 'utf8')).update(record.envelope).digest('base64');
      expect(record.signature).toBe(expected);
    }
    expect(records[0]!.signature).not.toBe(records[1]!.signature);
  });

  it.each([
    ['None', {}],
    ['ApiKey', { apiKeyHeaderName: 'X-Api-Key', secrets: { apiKey: 'k' } }],
    [
      'OAuth2',
      {
        oauth2: { tokenUrl: 'https://idp.example/token', clientId: 'c', audience: null, scope: null },
        secrets: { oauth2ClientSecret: 's', hmacSecret: 'left-over' },
      },
    ],
  ] as const)('leaves the signature null in %s mode', async (mode, overrides) => {
    const { deps } = fakes([subscription('s', { authenticationMode: mode, ...overrides })]);
    const [record] = await routeEvent(event, RECEIVED_AT, deps);
    expect(record!.signature).toBeNull();
  });

  it('routes the same event twice to the same delivery ids, envelopes and signatures (crash replay)', async () => {
    const subs = [subscription('s1', { authenticationMode: 'Hmac', secrets: { hmacSecret: 'k' } }), subscription('s2')];
    const first = await routeEvent(event, RECEIVED_AT, fakes(subs).deps);
    const second = await routeEvent(event, RECEIVED_AT, fakes(subs).deps);
    // Identical but for when each was routed (transport metadata, not part of the series).
    const series = (records: DeliveryRecord[]) => records.map(({ routedAt: _routedAt, ...rest }) => rest);
    expect(series(second)).toEqual(series(first));
    const other = await routeEvent({ ...event, eventId: 'another-event' }, RECEIVED_AT, fakes(subs).deps);
    expect(other.map((r) => r.deliveryId)).not.toEqual(first.map((r) => r.deliveryId));
  });

  it('routed again: leaves a series a dispatcher took up alone, republishes a queued one as a possible duplicate', async () => {
    const ids = ['done', 'retrying', 'queued', 'new'].map((id) => deliveryIdFor(event.eventId, id));
    const routed = new Map<string, DeliveryStatus>([
      [ids[0]!, 'acknowledged'],
      [ids[1]!, 'retrying'],
      [ids[2]!, 'queued'],
    ]);
    const { deps, calls } = fakes(
      ['done', 'retrying', 'queued', 'new'].map((id) => subscription(id)),
      { routed },
    );
    const records = await routeEvent(event, RECEIVED_AT, deps, true);
    expect(records.map((record) => [record.subscriptionId, record.mayBeDuplicate ?? false])).toEqual([
      ['queued', true],
      ['new', false],
    ]);
    // Only the series never stored gets a row: a stored row is never written again.
    const created = calls.find((call) => call.kind === 'createDeliveries');
    expect(created?.kind === 'createDeliveries' && created.deliveries.map((d) => d.subscriptionId)).toEqual(['new']);
  });

  it('an event that cannot be a repeat is routed without reading what was routed before (the hot path)', async () => {
    const routed = new Map<string, DeliveryStatus>([[deliveryIdFor(event.eventId, 's1'), 'acknowledged']]);
    const { deps } = fakes([subscription('s1')], { routed });
    let reads = 0;
    deps.store.routedBefore = async () => {
      reads += 1;
      return routed;
    };
    expect(await routeEvent(event, RECEIVED_AT, deps)).toHaveLength(1);
    expect(reads).toBe(0);
  });

  it('routed again with every series taken up: writes and publishes nothing', async () => {
    const routed = new Map<string, DeliveryStatus>([[deliveryIdFor(event.eventId, 's1'), 'acknowledged']]);
    const { deps, calls } = fakes([subscription('s1')], { routed });
    expect(await routeEvent(event, RECEIVED_AT, deps, true)).toEqual([]);
    expect(calls.map((call) => call.kind)).toEqual(['subscriptionsOf']);
  });

  it('writes the deliveries (and latest-for-entity marks) before publishing', async () => {
    const { deps, calls } = fakes([
      subscription('plain'),
      subscription('collapse', { supersedePendingDeliveries: true }),
    ]);
    const records = await routeEvent(event, RECEIVED_AT, deps);
    expect(calls.map((c) => c.kind)).toEqual(['subscriptionsOf', 'createDeliveries', 'markLatestForEntity', 'publish']);
    const publish = calls.at(-1);
    expect(publish?.kind === 'publish' && publish.records).toEqual(records);
  });

  it('stores queued history rows matching the records, at the source record time', async () => {
    const { deps, calls } = fakes([subscription('s1', { authenticationMode: 'Hmac', secrets: { hmacSecret: 'k' } })]);
    const [record] = await routeEvent(event, RECEIVED_AT, deps);
    const created = calls.find((c) => c.kind === 'createDeliveries');
    if (created?.kind !== 'createDeliveries') throw new Error('no createDeliveries call');
    expect(created.event).toEqual(event);
    expect(created.writeTime).toBe(RECEIVED_AT);
    expect(created.deliveries).toEqual([queuedDelivery(record!)]);
    expect(created.deliveries[0]).toMatchObject({
      id: record!.deliveryId,
      status: 'queued',
      attemptCount: 0,
      queuedAt: new Date(RECEIVED_AT),
      signature: record!.signature,
      replayOf: null,
    });
  });

  it('publishes nothing when the store write fails for a delivery that supersedes (the event will be routed again)', async () => {
    const { deps, calls } = fakes([subscription('s1', { supersedePendingDeliveries: true })], { failStore: true });
    await expect(routeEvent(event, RECEIVED_AT, deps)).rejects.toThrow('cassandra unavailable');
    expect(calls.map((c) => c.kind)).not.toContain('publish');
  });

  it('publishes beside the history write when no delivery is ordered or supersedes, and ends once both are done', async () => {
    const { deps } = fakes([subscription('s1'), subscription('s2')]);
    const log: string[] = [];
    let release!: () => void;
    const stored = new Promise<void>((resolve) => (release = resolve));
    deps.store.createDeliveries = async () => {
      log.push('write started');
      await stored;
      log.push('write done');
    };
    deps.publish = async (records) => {
      log.push(`published ${records.length}`);
    };
    let written = false;
    deps.source = {
      offset: 7,
      redelivered: false,
      written: () => (written = true),
      earlier: async () => undefined,
      seen: () => undefined,
      previous: () => undefined,
    };
    let ended = false;
    const routing = routeEvent(event, RECEIVED_AT, deps).then((records) => ((ended = true), records));
    await vi.waitFor(() => expect(log).toEqual(['write started', 'published 2']));
    // Published, the rows not yet stored: the routing (and so the offset's commit) waits for them.
    await new Promise((resolve) => setImmediate(resolve));
    expect([ended, written]).toEqual([false, false]);
    release();
    expect(await routing).toHaveLength(2);
    expect(log).toEqual(['write started', 'published 2', 'write done']);
    expect(written).toBe(true);
  });

  it('a history write that fails after the publication is finished alone: nothing is published twice', async () => {
    const { deps, calls } = fakes([subscription('s1')], { failStore: true });
    let written = 0;
    deps.source = {
      offset: 7,
      redelivered: false,
      written: () => (written += 1),
      earlier: async () => undefined,
      seen: () => undefined,
      previous: () => undefined,
    };
    const failure = await routeEvent(event, RECEIVED_AT, deps).catch((error: unknown) => error);
    expect(failure).toBeInstanceOf(UnwrittenRoutingError);
    expect((failure as Error).message).toMatch(/cassandra unavailable/);
    expect(calls.filter((call) => call.kind === 'publish')).toHaveLength(1);
    expect(written).toBe(0);
    const unwritten = failure as UnwrittenRoutingError;
    // Still failing: it says so, and can be finished later.
    await expect(unwritten.finish()).rejects.toThrow('cassandra unavailable');
    deps.store.createDeliveries = async (storedEvent, deliveries, writeTime) => {
      calls.push({ kind: 'createDeliveries', event: storedEvent, deliveries, writeTime });
    };
    const records = await unwritten.finish();
    expect(records.map((record) => record.subscriptionId)).toEqual(['s1']);
    expect(calls.map((call) => call.kind)).toEqual([
      'subscriptionsOf',
      'createDeliveries',
      'publish',
      'createDeliveries',
      'createDeliveries',
    ]);
    expect(written).toBe(1);
  });

  it('routed again from the same source record, a series without a stored row goes out as a possible duplicate', async () => {
    // Its first routing may have published it and stopped before the row was written: the dispatcher looks first.
    const { deps } = fakes([subscription('s1')]);
    deps.source = {
      offset: 7,
      redelivered: true,
      written: () => undefined,
      earlier: async () => undefined,
      seen: () => undefined,
      previous: () => undefined,
    };
    const [again] = await routeEvent(event, RECEIVED_AT, deps, true);
    expect(again!.mayBeDuplicate).toBe(true);
    // A copy published again by the producer (not the same record) was never published from this record.
    const repeat = fakes([subscription('s1')]);
    const [copy] = await routeEvent(event, RECEIVED_AT, repeat.deps, true);
    expect(copy!.mayBeDuplicate).toBeUndefined();
  });

  it('marks the latest delivery per entity only for subscriptions that supersede', async () => {
    const { deps, calls } = fakes([
      subscription('s-plain'),
      subscription('s-collapse-1', { supersedePendingDeliveries: true }),
      subscription('s-collapse-2', { supersedePendingDeliveries: true, eventTypes: ['*.validated'] }),
    ]);
    await routeEvent(event, RECEIVED_AT, deps);
    const marks = calls.filter((c) => c.kind === 'markLatestForEntity');
    expect(marks).toHaveLength(2);
    const marked = marks.map((m) => (m.kind === 'markLatestForEntity' ? m : undefined)!);
    expect(marked.map((m) => m.delivery.id).sort()).toEqual(
      [deliveryIdFor(event.eventId, 's-collapse-1'), deliveryIdFor(event.eventId, 's-collapse-2')].sort(),
    );
    for (const mark of marked) {
      expect(mark.writeTime).toBe(RECEIVED_AT);
      expect(mark.delivery).toMatchObject({ entityId: 'po-7', tenantId: 'tenant-a', status: 'queued' });
      expect(mark.delivery.subscriptionId).toMatch(/^s-collapse-/);
    }
  });

  it('tells how long the history write and the publication took, apart', async () => {
    const { deps } = fakes([subscription('s1', { supersedePendingDeliveries: true }), subscription('s2')]);
    const wait = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
    const observed: [string, number][] = [];
    const store = deps.store;
    deps.store = {
      ...store,
      createDeliveries: async (...args) => {
        await wait(30);
        return store.createDeliveries(...args);
      },
    };
    const publish = deps.publish;
    deps.publish = async (records) => {
      await wait(60);
      return publish(records);
    };
    deps.observe = (part, ms) => observed.push([part, ms]);
    await routeEvent(event, RECEIVED_AT, deps);
    expect(observed.map(([part]) => part)).toEqual(['routing_write', 'routing_publish']);
    // Timers never fire early by more than a millisecond's rounding: each wait falls in its own part.
    expect(observed[0]![1]).toBeGreaterThanOrEqual(28);
    expect(observed[1]![1]).toBeGreaterThanOrEqual(58);
  });
});

describe('routeEvent with subscription filters', () => {
  // The payload's totalAmount is a decimal string, as the purchase service writes amounts.
  const order = {
    ...event,
    payload: Buffer.from('{"totalAmount":"12500.00","supplierName":"Acme","rows":[{"itemCode":"TONER-K"}]}'),
  };

  it('delivers only to the subscriptions whose filter the event satisfies, and reports each refusal', async () => {
    const subs = [
      subscription('big', { filter: { 'payload.totalAmount': { $gte: 10000 } } }),
      subscription('small', { filter: { 'payload.totalAmount': { $lt: '10000' } } }),
      subscription('toner', { filter: { 'payload.rows.itemCode': { $startsWith: 'TONER-' }, entityId: 'po-7' } }),
      subscription('cancelled-only', { filter: { eventType: 'purchaseOrder.cancelled' } }),
      subscription('unfiltered'),
    ];
    const { deps } = fakes(subs);
    const refused: string[] = [];
    deps.filtered = (refusedBy) => refused.push(refusedBy.id);
    const records = await routeEvent(order, RECEIVED_AT, deps);
    expect(records.map((record) => record.subscriptionId)).toEqual(['big', 'toner', 'unfiltered']);
    expect(refused).toEqual(['small', 'cancelled-only']);
  });

  it('parses the payload once per event, and not at all when no filter reads it', async () => {
    const parse = vi.spyOn(JSON, 'parse');
    try {
      const { deps } = fakes([
        subscription('a', { filter: { 'payload.supplierName': 'Acme' } }),
        subscription('b', { filter: { 'payload.totalAmount': { $exist: true } } }),
      ]);
      await routeEvent(order, RECEIVED_AT, deps);
      expect(parse).toHaveBeenCalledTimes(1);
      parse.mockClear();
      const envelopeOnly = fakes([subscription('c', { filter: { entityId: { $in: ['po-7', 'po-8'] } } })]);
      expect(await routeEvent(order, RECEIVED_AT, envelopeOnly.deps)).toHaveLength(1);
      expect(parse).not.toHaveBeenCalled();
    } finally {
      parse.mockRestore();
    }
  });

  it('a payload that is absent (over the size limit) or not JSON satisfies only clauses on absence', async () => {
    const subs = [
      subscription('needs-amount', { filter: { 'payload.totalAmount': { $gt: 0 } } }),
      subscription('needs-no-amount', { filter: { 'payload.totalAmount': { $exist: false } } }),
    ];
    for (const payload of [null, Buffer.from('not json')]) {
      const records = await routeEvent({ ...order, payload }, RECEIVED_AT, fakes(subs).deps);
      expect(records.map((record) => record.subscriptionId)).toEqual(['needs-no-amount']);
    }
  });

  it('a test event reaches its subscription whatever the filter says', async () => {
    const subs = [subscription('tested', { filter: { eventType: 'never.this' } })];
    const records = await routeEvent({ ...order, testSubscriptionId: 'tested' }, RECEIVED_AT, fakes(subs).deps);
    expect(records.map((record) => record.subscriptionId)).toEqual(['tested']);
  });

  describe('ordering "entity"', () => {
    /** A source position whose earlier events finish writing when the test says so. */
    function source(offset: number, previous?: number) {
      const log: string[] = [];
      let release!: () => void;
      const earlierWritten = new Promise<void>((resolve) => (release = resolve));
      return {
        log,
        release,
        source: {
          offset,
          redelivered: false,
          written: () => log.push('written'),
          earlier: async () => {
            log.push('earlier');
            await earlierWritten;
          },
          seen: () => log.push('seen'),
          previous: () => {
            log.push('previous');
            return previous;
          },
        },
      };
    }

    it("tells an ordered delivery its entity's previous event, asked once the earlier events have written", async () => {
      const { deps, calls } = fakes([subscription('ordered', { ordering: 'entity' }), subscription('plain')]);
      const position = source(41, 30);
      position.release();
      const records = await routeEvent(event, RECEIVED_AT, { ...deps, source: position.source });
      expect(records.map((record) => [record.subscriptionId, record.orderPrev])).toEqual([
        ['ordered', 30],
        ['plain', undefined],
      ]);
      expect(position.log).toEqual(['seen', 'written', 'earlier', 'previous']);
      const published = calls.find((c) => c.kind === 'publish');
      expect(published?.kind === 'publish' && published.records.map((record) => record.orderPrev)).toEqual([
        30,
        undefined,
      ]);
      // Unknown (the first of its entity since the partition came to this router): no orderPrev.
      const first = source(41);
      first.release();
      const [unknown] = await routeEvent(event, RECEIVED_AT, { ...deps, source: first.source });
      expect(unknown).not.toHaveProperty('orderPrev');
    });

    it("gives an ordered subscription's delivery its event's offset and writes its row before publishing", async () => {
      const { deps, calls } = fakes([subscription('ordered', { ordering: 'entity' }), subscription('plain')]);
      const position = source(41);
      position.release();
      const records = await routeEvent(event, RECEIVED_AT, { ...deps, source: position.source });
      expect(records.map((record) => [record.subscriptionId, record.orderSeq])).toEqual([
        ['ordered', 41],
        ['plain', undefined],
      ]);
      expect(calls.map((c) => c.kind)).toEqual(['subscriptionsOf', 'createDeliveries', 'enqueueOrdered', 'publish']);
      const enqueued = calls.find((c) => c.kind === 'enqueueOrdered');
      expect(enqueued?.kind === 'enqueueOrdered' && enqueued.records).toEqual([records[0]]);
      expect(enqueued?.kind === 'enqueueOrdered' && enqueued.writeTime).toBe(RECEIVED_AT);
      expect(position.log).toEqual(['seen', 'written', 'earlier', 'previous']);
    });

    it('publishes an ordered delivery only once the earlier events of its partition have written their rows', async () => {
      const { deps, calls } = fakes([subscription('ordered', { ordering: 'entity' })]);
      const position = source(7);
      const routing = routeEvent(event, RECEIVED_AT, { ...deps, source: position.source });
      await new Promise((resolve) => setTimeout(resolve, 20));
      // Its own rows are written and said so (later events need not wait for it), but it is not published yet.
      expect(position.log).toEqual(['seen', 'written', 'earlier']);
      expect(calls.map((c) => c.kind)).not.toContain('publish');
      position.release();
      await routing;
      expect(calls.at(-1)?.kind).toBe('publish');
    });

    it('does not wait for earlier events when it has no ordered delivery', async () => {
      const { deps, calls } = fakes([subscription('plain')]);
      const position = source(7); // never released
      await routeEvent(event, RECEIVED_AT, { ...deps, source: position.source });
      expect(position.log).toEqual(['written']);
      expect(calls.map((c) => c.kind)).toEqual(['subscriptionsOf', 'createDeliveries', 'publish']);
    });

    it('says its rows are written when no subscription matches', async () => {
      const { deps } = fakes([subscription('other', { eventTypes: ['invoice.*'] })]);
      const position = source(7);
      expect(await routeEvent(event, RECEIVED_AT, { ...deps, source: position.source })).toEqual([]);
      expect(position.log).toEqual(['written']);
    });

    it('orders neither test deliveries nor deliveries routed without a source position', async () => {
      const subs = [subscription('ordered', { ordering: 'entity' })];
      const test = fakes(subs);
      const position = source(3);
      position.release();
      const [tested] = await routeEvent({ ...event, testSubscriptionId: 'ordered' }, RECEIVED_AT, {
        ...test.deps,
        source: position.source,
      });
      expect(tested!.orderSeq).toBeUndefined();
      expect(test.calls.map((c) => c.kind)).not.toContain('enqueueOrdered');
      const bare = fakes(subs);
      const [record] = await routeEvent(event, RECEIVED_AT, bare.deps);
      expect(record!.orderSeq).toBeUndefined();
    });

    it('writes the row again for a queued series routed again from the same record, not from a repeat elsewhere', async () => {
      const routed = new Map<string, DeliveryStatus>([[deliveryIdFor(event.eventId, 'ordered'), 'queued']]);
      const { deps, calls } = fakes([subscription('ordered', { ordering: 'entity' })], { routed });
      const position = source(9);
      position.release();
      const redelivered = { ...position.source, redelivered: true };
      const [record] = await routeEvent(event, RECEIVED_AT, { ...deps, source: redelivered }, true);
      expect(record).toMatchObject({ orderSeq: 9, mayBeDuplicate: true });
      expect(calls.map((c) => c.kind)).toEqual(['subscriptionsOf', 'enqueueOrdered', 'publish']);
      // The producer published the event again (another offset): its first routing's row keeps its place.
      const repeat = fakes([subscription('ordered', { ordering: 'entity' })], { routed });
      await routeEvent(event, RECEIVED_AT, { ...repeat.deps, source: { ...position.source, offset: 30 } }, true);
      expect(repeat.calls.map((c) => c.kind)).toEqual(['subscriptionsOf', 'publish']);
    });
  });
});

describe('copies of one event routed at once (Turns)', () => {
  /** A store whose rows land a moment after the write is issued (as on Cassandra), read by routedBefore. */
  function slowRows() {
    const { deps, calls } = fakes([subscription('s1'), subscription('s2')]);
    const rows = new Map<string, DeliveryStatus>();
    deps.store.createDeliveries = async (_event, deliveries) => {
      await new Promise((resolve) => setTimeout(resolve, 5));
      for (const delivery of deliveries) rows.set(delivery.id, delivery.status);
    };
    deps.store.routedBefore = async (_tenantId, _eventId, ids) =>
      new Map(ids.filter((id) => rows.has(id)).map((id) => [id, rows.get(id)!]));
    return { deps, calls };
  }
  const marks = (records: DeliveryRecord[]) => records.map((record) => record.mayBeDuplicate === true);

  it('the copy that comes second waits for the first and goes out marked, the first unmarked', async () => {
    const { deps } = slowRows();
    const turns = new Turns();
    const key = `${event.tenantId}\u0000${event.eventId}`;
    // The relay's sweep copy first (marked), the commit's copy right after it, as the chaos suite saw them.
    const [sweep, commit] = await Promise.all([
      turns.run(key, () => routeEvent(event, RECEIVED_AT, deps, true)),
      turns.run(key, (afterAnother) => routeEvent(event, RECEIVED_AT, deps, afterAnother)),
    ]);
    expect(marks(sweep)).toEqual([false, false]);
    expect(marks(commit)).toEqual([true, true]);
  });

  it('a copy that comes after the first was routed goes out marked (its gateway published it after the sweep did)', async () => {
    const { deps } = slowRows();
    const turns = routingTurns();
    const key = `${event.tenantId}\u0000${event.eventId}`;
    const sweep = await turns.run(key, () => routeEvent(event, RECEIVED_AT, deps, true));
    const commit = await turns.run(key, (afterAnother) => routeEvent(event, RECEIVED_AT, deps, afterAnother));
    expect(marks(sweep)).toEqual([false, false]);
    // Nothing sent yet: published again marked, for the dispatcher to look at the history before it sends.
    expect(marks(commit)).toEqual([true, true]);
  });

  it('without the turns both copies find no rows and both go out unmarked (the defect it removes)', async () => {
    const { deps } = slowRows();
    const [sweep, commit] = await Promise.all([
      routeEvent(event, RECEIVED_AT, deps, true),
      routeEvent(event, RECEIVED_AT, deps, false),
    ]);
    expect([...marks(sweep), ...marks(commit)]).toEqual([false, false, false, false]);
  });

  it('other events do not wait, a failed routing does not hold the next copy, and nothing is kept afterwards', async () => {
    const turns = new Turns();
    const order: string[] = [];
    let fail!: (error: Error) => void;
    const first = turns.run('a', () => new Promise<void>((_resolve, reject) => (fail = reject)));
    const second = turns.run('a', async (afterAnother) => {
      order.push(`a again ${afterAnother}`);
    });
    await turns.run('b', async (afterAnother) => {
      order.push(`b ${afterAnother}`);
    });
    fail(new Error('cassandra unavailable'));
    await expect(first).rejects.toThrow('cassandra unavailable');
    await second;
    expect(order).toEqual(['b false', 'a again true']);
    await turns.run('a', async (afterAnother) => {
      order.push(`a later ${afterAnother}`);
    });
    expect(order.at(-1)).toBe('a later false');
  });
});
