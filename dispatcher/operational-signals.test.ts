import { describe, expect, it, vi } from 'vitest';
import type { Attempt } from '../core/deliveries/delivery.ts';
import type { DeliveryRecord } from '../core/deliveries/delivery-record.ts';
import type { Logger } from '../core/log.ts';
import { OperationalLimit } from '../core/operational-limit.ts';
import type { OperationalEvent } from '../core/operational-events.ts';
import type { Intent, OperationalCheck } from '../core/operational-outbox.ts';
import { blankSubscription, type Subscription } from '../core/subscriptions/subscription.ts';
import { OperationalSignals } from './operational-signals.ts';
import type { AttemptResult } from './outcome.ts';

const MINUTE = 60_000;
const HOUR = 60 * MINUTE;
const T0 = Date.UTC(2026, 0, 6, 10, 0, 0);
const QUEUED_AT = T0 - 5 * MINUTE;

function subscription(overrides: Partial<Subscription> = {}): Subscription {
  return {
    ...blankSubscription('tenant-a', 'sub-1', new Date(0)),
    url: 'https://receiver.example.com/hooks',
    eventTypes: ['purchaseOrder.*', 'subscription.*'],
    authenticationMode: 'Hmac',
    secrets: { hmacSecret: 'secret' },
    ...overrides,
  };
}

function deliveryRecord(overrides: Partial<DeliveryRecord> = {}): DeliveryRecord {
  return {
    deliveryId: 'del-1',
    tenantId: 'tenant-a',
    subscriptionId: 'sub-1',
    eventId: 'evt-1',
    eventType: 'purchaseOrder.validated',
    entityId: 'po-1',
    occurredAt: '2026-01-06T09:54:59.000Z',
    queuedAt: QUEUED_AT,
    attempt: 3,
    dueAt: 0,
    envelope: Buffer.from('{"eventId":"evt-1"}'),
    signature: 'c2lnbmF0dXJl',
    replayOf: null,
    ...overrides,
  };
}

const ok: AttemptResult = { statusCode: 200, errorMessage: null, durationMs: 15 };
const failed = (statusCode: number | null): AttemptResult => ({
  statusCode,
  errorMessage: statusCode === null ? 'no answer within 30000 ms' : `HTTP ${statusCode}`,
  durationMs: 20,
});

interface Intended {
  event: OperationalEvent;
  check: OperationalCheck;
  raised: boolean;
  cancelled: boolean;
}

const payloadOf = (event: OperationalEvent) => JSON.parse(event.payload.toString('utf8')) as Record<string, unknown>;

/**
 * The signals over fakes: the subscription as stored (mutable), its health moved by compare-and-set on failingSince
 * (`loseRaceOnce` makes the next move lose, after `meanwhile` changed the stored row), an outbox that records intents.
 */
function harness(stored: Partial<Subscription> = {}, options: { quietMs?: number; last?: Attempt } = {}) {
  const clock = { now: T0 };
  const store: { sub: Subscription | undefined } = { sub: subscription(stored) };
  const intents: Intended[] = [];
  const intend = vi.fn(async (event: OperationalEvent, check: OperationalCheck): Promise<Intent> => {
    const intended: Intended = { event, check, raised: false, cancelled: false };
    intents.push(intended);
    return {
      raise: async () => void (intended.raised = true),
      cancel: async () => void (intended.cancelled = true),
    };
  });
  const read = vi.fn(async (tenantId: string, id: string) =>
    store.sub && store.sub.tenantId === tenantId && store.sub.id === id ? { ...store.sub } : undefined,
  );
  const race: { lose: boolean; meanwhile: ((sub: Subscription) => void) | undefined } = {
    lose: false,
    meanwhile: undefined,
  };
  const setHealth = vi.fn(
    async (
      tenantId: string,
      id: string,
      expected: Date | null,
      next: { failingSince: Date | null; announced: boolean; announcedAt: Date | null },
    ) => {
      const current = store.sub;
      if (!current || current.tenantId !== tenantId || current.id !== id) return false;
      if (race.lose) {
        race.lose = false;
        race.meanwhile?.(current);
        return false;
      }
      if ((current.failingSince?.getTime() ?? null) !== (expected?.getTime() ?? null)) return false;
      store.sub = {
        ...current,
        failingSince: next.failingSince,
        failingAnnounced: next.announced,
        failingAnnouncedAt: next.announcedAt,
      };
      return true;
    },
  );
  const lastAttempt = vi.fn(async (_tenantId: string, _deliveryId: string) => options.last);
  const limit = new OperationalLimit(10, MINUTE, () => clock.now);
  const logger = { info: vi.fn(), warn: vi.fn(), error: vi.fn(), debug: vi.fn() };
  const signals = new OperationalSignals({
    intend,
    read,
    setHealth,
    lastAttempt,
    limit,
    logger: logger as unknown as Logger,
    quietMs: options.quietMs ?? HOUR,
    now: () => clock.now,
  });
  const loseRaceOnce = (meanwhile?: (sub: Subscription) => void) => {
    race.lose = true;
    race.meanwhile = meanwhile;
  };
  /** An attempt of `record` against the subscription as stored now (a cache that is up to date). */
  const attempt = (result: AttemptResult, okay: boolean, record = deliveryRecord()) =>
    signals.attempted(record, store.sub!, result, okay);
  return { clock, store, intents, intend, read, setHealth, lastAttempt, logger, signals, loseRaceOnce, attempt };
}

describe('OperationalSignals.attempted', () => {
  it('moves a healthy subscription failing on a failed attempt and raises subscription.failing once', async () => {
    const t = harness();
    const cached = t.store.sub!;
    await t.signals.attempted(deliveryRecord(), cached, failed(503), false);

    expect(t.store.sub).toMatchObject({
      failingSince: new Date(T0),
      failingAnnounced: true,
      failingAnnouncedAt: new Date(T0),
    });
    expect(t.intents).toHaveLength(1);
    const [intended] = t.intents;
    expect(intended).toMatchObject({ raised: true, cancelled: false });
    expect(intended!.event).toMatchObject({
      eventType: 'subscription.failing',
      occurredAt: new Date(T0).toISOString(),
    });
    expect(intended!.check).toEqual({
      kind: 'subscription-failing',
      tenantId: 'tenant-a',
      subscriptionId: 'sub-1',
      failingSince: T0,
      still: true,
    });
    expect(payloadOf(intended!.event)).toMatchObject({
      failingSince: new Date(T0).toISOString(),
      failure: {
        deliveryId: 'del-1',
        eventId: 'evt-1',
        eventType: 'purchaseOrder.validated',
        attempt: 3,
        statusCode: 503,
        error: 'HTTP 503',
      },
    });
    // Written down before the health moved, raised after.
    expect(t.intend.mock.invocationCallOrder[0]).toBeLessThan(t.setHealth.mock.invocationCallOrder[0]!);
    expect(t.setHealth).toHaveBeenCalledWith('tenant-a', 'sub-1', null, {
      failingSince: new Date(T0),
      announced: true,
      announcedAt: new Date(T0),
    });
    expect(t.read).toHaveBeenCalledTimes(1);

    // More failed attempts read nothing: the process knows it failing, even with the same cached (healthy) copy.
    t.clock.now += 1_000;
    await t.signals.attempted(deliveryRecord({ deliveryId: 'del-2' }), cached, failed(500), false);
    await t.attempt(failed(null), false);
    expect(t.read).toHaveBeenCalledTimes(1);
    expect(t.setHealth).toHaveBeenCalledTimes(1);
    expect(t.intents).toHaveLength(1);
  });

  it('reports a failure without an answer with a null status and the error', async () => {
    const t = harness();
    await t.attempt(failed(null), false);
    expect(payloadOf(t.intents[0]!.event)).toMatchObject({
      failure: { statusCode: null, error: 'no answer within 30000 ms' },
    });
  });

  it('reads nothing on a success of a healthy subscription', async () => {
    const t = harness();
    await t.attempt(ok, true);
    await t.attempt(ok, true);
    expect(t.read).not.toHaveBeenCalled();
    expect(t.setHealth).not.toHaveBeenCalled();
    expect(t.intend).not.toHaveBeenCalled();
  });

  it('reads nothing on a failed attempt of a subscription the cache shows failing', async () => {
    const t = harness({
      failingSince: new Date(T0 - HOUR),
      failingAnnounced: true,
      failingAnnouncedAt: new Date(T0 - HOUR),
    });
    await t.attempt(failed(500), false);
    expect(t.read).not.toHaveBeenCalled();
    expect(t.intend).not.toHaveBeenCalled();
  });

  it('raises subscription.recovered with failingSince on a success after failing', async () => {
    const t = harness();
    await t.attempt(failed(503), false);
    t.clock.now = T0 + 5 * MINUTE;
    await t.attempt(ok, true, deliveryRecord({ deliveryId: 'del-9' }));

    expect(t.store.sub).toMatchObject({ failingSince: null, failingAnnounced: false });
    expect(t.intents).toHaveLength(2);
    const recovered = t.intents[1]!;
    expect(recovered).toMatchObject({ raised: true, cancelled: false });
    expect(recovered.event).toMatchObject({
      eventType: 'subscription.recovered',
      occurredAt: new Date(T0 + 5 * MINUTE).toISOString(),
    });
    expect(payloadOf(recovered.event)).toMatchObject({
      failingSince: new Date(T0).toISOString(),
      recoveredAt: new Date(T0 + 5 * MINUTE).toISOString(),
      deliveryId: 'del-9',
    });
    expect(recovered.check).toEqual({
      kind: 'subscription-failing',
      tenantId: 'tenant-a',
      subscriptionId: 'sub-1',
      failingSince: T0,
      still: false,
    });
    expect(t.setHealth).toHaveBeenLastCalledWith('tenant-a', 'sub-1', new Date(T0), {
      failingSince: null,
      announced: false,
      announcedAt: new Date(T0),
    });
    // Healthy again: a success reads nothing more.
    const reads = t.read.mock.calls.length;
    await t.attempt(ok, true);
    expect(t.read).toHaveBeenCalledTimes(reads);
  });

  it('recovers a subscription another dispatcher announced failing', async () => {
    const since = new Date(T0 - 2 * HOUR);
    const t = harness({ failingSince: since, failingAnnounced: true, failingAnnouncedAt: since });
    await t.attempt(ok, true);
    expect(t.intents.map((intended) => intended.event.eventType)).toEqual(['subscription.recovered']);
    expect(payloadOf(t.intents[0]!.event)).toMatchObject({ failingSince: since.toISOString() });
    expect(t.store.sub!.failingSince).toBeNull();
  });

  it('moves the state quietly for a failing within quietMs of the last announced one, and its recovery raises nothing', async () => {
    const t = harness();
    await t.attempt(failed(503), false); // announced at T0
    t.clock.now = T0 + 2 * MINUTE;
    await t.attempt(ok, true); // recovered, announced
    expect(t.intents).toHaveLength(2);

    t.clock.now = T0 + 10 * MINUTE;
    await t.attempt(failed(500), false);
    expect(t.store.sub).toMatchObject({
      failingSince: new Date(T0 + 10 * MINUTE),
      failingAnnounced: false,
      failingAnnouncedAt: new Date(T0),
    });
    expect(t.intents).toHaveLength(2);

    t.clock.now = T0 + 12 * MINUTE;
    await t.attempt(ok, true);
    expect(t.store.sub).toMatchObject({ failingSince: null, failingAnnounced: false });
    expect(t.intents).toHaveLength(2);
    expect(t.setHealth).toHaveBeenCalledTimes(4);

    // quietMs after the last announced one, a failing is announced again.
    t.clock.now = T0 + HOUR;
    await t.attempt(failed(502), false);
    expect(t.intents).toHaveLength(3);
    expect(t.intents[2]).toMatchObject({ raised: true, event: { eventType: 'subscription.failing' } });
    expect(t.store.sub).toMatchObject({ failingAnnounced: true, failingAnnouncedAt: new Date(T0 + HOUR) });
  });

  it('announces a failing kept quiet once quietMs has passed since the last announcement, if it still fails', async () => {
    const t = harness();
    await t.attempt(failed(503), false); // announced at T0
    t.clock.now = T0 + MINUTE;
    await t.attempt(ok, true);
    t.clock.now = T0 + 2 * MINUTE;
    await t.attempt(failed(500), false); // quiet: within the hour
    t.clock.now = T0 + 30 * MINUTE;
    await t.attempt(failed(500), false); // still within the hour: nothing
    expect(t.intents.map((intended) => intended.event.eventType)).toEqual([
      'subscription.failing',
      'subscription.recovered',
    ]);

    t.clock.now = T0 + HOUR + MINUTE;
    await t.attempt(failed(504), false, deliveryRecord({ deliveryId: 'del-9', attempt: 2 }));
    expect(t.intents).toHaveLength(3);
    const late = t.intents[2]!;
    expect(late).toMatchObject({ raised: true, check: { failingSince: T0 + 2 * MINUTE, still: true } });
    // Failing since it went failing quietly; the failure reported is the attempt that announced it.
    expect(payloadOf(late.event)).toMatchObject({
      failingSince: new Date(T0 + 2 * MINUTE).toISOString(),
      failure: { deliveryId: 'del-9', attempt: 2, statusCode: 504 },
    });
    expect(t.store.sub).toMatchObject({
      failingSince: new Date(T0 + 2 * MINUTE),
      failingAnnounced: true,
      failingAnnouncedAt: new Date(T0 + HOUR + MINUTE),
    });
    // Its recovery is announced, and a further failed attempt announces nothing more.
    await t.attempt(failed(500), false);
    expect(t.intents).toHaveLength(3);
    t.clock.now = T0 + 2 * HOUR;
    await t.attempt(ok, true);
    expect(t.intents.map((intended) => intended.event.eventType).at(-1)).toBe('subscription.recovered');
  });

  it('cancels the intent and tries again when it loses the compare-and-set race', async () => {
    const t = harness();
    t.loseRaceOnce(); // the row moved meanwhile and back (or the write lost for another reason)
    await t.attempt(failed(503), false);
    expect(t.read).toHaveBeenCalledTimes(2);
    expect(t.setHealth).toHaveBeenCalledTimes(2);
    expect(t.intents.map(({ raised, cancelled }) => ({ raised, cancelled }))).toEqual([
      { raised: false, cancelled: true },
      { raised: true, cancelled: false },
    ]);
    expect(t.store.sub!.failingSince).toEqual(new Date(T0));
  });

  it('leaves the announcement to the dispatcher that won the race', async () => {
    const t = harness();
    const theirs = new Date(T0 - 1_000);
    t.loseRaceOnce((sub) => {
      t.store.sub = { ...sub, failingSince: theirs, failingAnnounced: true, failingAnnouncedAt: theirs };
    });
    await t.attempt(failed(503), false);
    expect(t.read).toHaveBeenCalledTimes(2);
    expect(t.intents).toHaveLength(1);
    expect(t.intents[0]).toMatchObject({ raised: false, cancelled: true });
    expect(t.store.sub!.failingSince).toEqual(theirs);
    // Known failing now: the next failed attempt reads nothing.
    await t.signals.attempted(deliveryRecord(), subscription(), failed(503), false);
    expect(t.read).toHaveBeenCalledTimes(2);
  });

  it('cancels a recovered intent that lost the race, and raises none when another dispatcher recovered it', async () => {
    const since = new Date(T0 - HOUR);
    const t = harness({ failingSince: since, failingAnnounced: true, failingAnnouncedAt: since });
    t.loseRaceOnce((sub) => {
      t.store.sub = { ...sub, failingSince: null, failingAnnounced: false };
    });
    await t.attempt(ok, true);
    expect(t.intents).toHaveLength(1);
    expect(t.intents[0]).toMatchObject({
      raised: false,
      cancelled: true,
      event: { eventType: 'subscription.recovered' },
    });
    expect(t.read).toHaveBeenCalledTimes(2);
  });

  it('raises nothing and reads nothing for a test delivery or an operational event', async () => {
    const t = harness();
    await t.attempt(failed(503), false, deliveryRecord({ test: true }));
    await t.attempt(failed(503), false, deliveryRecord({ eventType: 'subscription.failing' }));
    await t.attempt(failed(503), false, deliveryRecord({ eventType: 'delivery.abandoned' }));
    const failing = subscription({ failingSince: new Date(T0 - HOUR), failingAnnounced: true });
    await t.signals.attempted(deliveryRecord({ test: true }), failing, ok, true);
    await t.signals.attempted(deliveryRecord({ eventType: 'subscription.recovered' }), failing, ok, true);
    expect(t.read).not.toHaveBeenCalled();
    expect(t.setHealth).not.toHaveBeenCalled();
    expect(t.intend).not.toHaveBeenCalled();
    expect(t.store.sub!.failingSince).toBeNull();
  });

  it('does nothing for a subscription deleted meanwhile', async () => {
    const t = harness();
    const cached = t.store.sub!;
    t.store.sub = undefined;
    await t.signals.attempted(deliveryRecord(), cached, failed(503), false);
    expect(t.read).toHaveBeenCalledTimes(1);
    expect(t.setHealth).not.toHaveBeenCalled();
    expect(t.intend).not.toHaveBeenCalled();
  });

  it('logs and swallows a failure to write the intent, leaving the health for the next attempt to move', async () => {
    const t = harness();
    t.intend.mockRejectedValueOnce(new Error('Cassandra unavailable'));
    await expect(t.attempt(failed(503), false)).resolves.toBeUndefined();
    expect(t.logger.warn).toHaveBeenCalledWith(
      expect.objectContaining({ subscriptionId: 'sub-1', err: expect.any(Error) }),
      expect.any(String),
    );
    expect(t.store.sub!.failingSince).toBeNull();
    await t.attempt(failed(503), false);
    expect(t.store.sub!.failingSince).toEqual(new Date(T0));
    expect(t.intents.filter((intended) => intended.raised)).toHaveLength(1);
  });

  it('moves a subscription once for concurrent failed attempts', async () => {
    const t = harness();
    await Promise.all([
      t.attempt(failed(503), false),
      t.attempt(failed(503), false, deliveryRecord({ deliveryId: 'del-2' })),
    ]);
    expect(t.read).toHaveBeenCalledTimes(1);
    expect(t.intents).toHaveLength(1);
  });
});

describe('OperationalSignals.abandoning', () => {
  const last: Attempt = {
    attempt: 10,
    at: new Date(T0 - MINUTE),
    statusCode: 500,
    errorMessage: 'HTTP 500',
    durationMs: 112.6,
  };

  it('writes down a delivery.abandoned with the last attempt given, and leaves raising it to the caller', async () => {
    const t = harness();
    const intent = await t.signals.abandoning(deliveryRecord({ attempt: 11 }), 'retries exhausted', last);
    expect(intent).toBeDefined();
    expect(t.lastAttempt).not.toHaveBeenCalled();
    expect(t.intents).toHaveLength(1);
    const [intended] = t.intents;
    expect(intended).toMatchObject({ raised: false, cancelled: false });
    expect(intended!.check).toEqual({ kind: 'delivery-abandoned', tenantId: 'tenant-a', deliveryId: 'del-1' });
    expect(intended!.event).toMatchObject({
      eventType: 'delivery.abandoned',
      tenantId: 'tenant-a',
      entityId: 'del-1',
      occurredAt: new Date(T0).toISOString(),
    });
    expect(payloadOf(intended!.event)).toEqual({
      deliveryId: 'del-1',
      subscriptionId: 'sub-1',
      eventId: 'evt-1',
      eventType: 'purchaseOrder.validated',
      entityId: 'po-1',
      attempts: 10,
      reason: 'retries exhausted',
      abandonedAt: new Date(T0).toISOString(),
      lastAttempt: { at: new Date(T0 - MINUTE).toISOString(), statusCode: 500, error: 'HTTP 500', durationMs: 113 },
      suppressed: 0,
    });
    await intent!.raise();
    expect(intended!.raised).toBe(true);
  });

  it('reads the last attempt when none is given', async () => {
    const t = harness({}, { last: { ...last, attempt: 4, statusCode: null, errorMessage: 'connection refused' } });
    await t.signals.abandoning(deliveryRecord({ attempt: 5 }), 'lifetime ran out', undefined);
    expect(t.lastAttempt).toHaveBeenCalledWith('tenant-a', 'del-1');
    expect(payloadOf(t.intents[0]!.event)).toMatchObject({
      attempts: 4,
      reason: 'lifetime ran out',
      lastAttempt: { statusCode: null, error: 'connection refused' },
    });
  });

  it('says lastAttempt null and counts the attempts from the record when no attempt was made', async () => {
    const t = harness();
    await t.signals.abandoning(deliveryRecord({ attempt: 1 }), 'lifetime ran out', undefined);
    expect(t.lastAttempt).toHaveBeenCalledTimes(1);
    expect(payloadOf(t.intents[0]!.event)).toMatchObject({ attempts: 0, lastAttempt: null });
  });

  it.each(['subscription deleted', 'subscription disabled'])(
    'returns undefined for an abandonment the change already announced (%s)',
    async (reason) => {
      const t = harness();
      expect(await t.signals.abandoning(deliveryRecord(), reason, last)).toBeUndefined();
      expect(t.intend).not.toHaveBeenCalled();
      expect(t.lastAttempt).not.toHaveBeenCalled();
    },
  );

  it('returns undefined for a test delivery and an operational event delivery', async () => {
    const t = harness();
    expect(await t.signals.abandoning(deliveryRecord({ test: true }), 'retries exhausted', last)).toBeUndefined();
    expect(
      await t.signals.abandoning(deliveryRecord({ eventType: 'delivery.abandoned' }), 'retries exhausted', last),
    ).toBeUndefined();
    expect(t.intend).not.toHaveBeenCalled();
  });

  it('returns undefined past the rate limit (the 11th at once), and the next one says how many it kept quiet', async () => {
    const t = harness();
    for (let i = 0; i < 10; i += 1)
      expect(
        await t.signals.abandoning(deliveryRecord({ deliveryId: `del-${i}` }), 'retries exhausted', last),
      ).toBeDefined();
    expect(
      await t.signals.abandoning(deliveryRecord({ deliveryId: 'del-10' }), 'retries exhausted', last),
    ).toBeUndefined();
    expect(t.intend).toHaveBeenCalledTimes(10);
    // Another subscription has its own bucket.
    expect(
      await t.signals.abandoning(
        deliveryRecord({ deliveryId: 'x', subscriptionId: 'sub-2' }),
        'retries exhausted',
        last,
      ),
    ).toBeDefined();
    t.clock.now += MINUTE;
    await t.signals.abandoning(deliveryRecord({ deliveryId: 'del-11' }), 'retries exhausted', last);
    expect(payloadOf(t.intents.at(-1)!.event)).toMatchObject({ deliveryId: 'del-11', suppressed: 1 });
  });

  it('does not spend the rate limit on abandonments it does not announce', async () => {
    const t = harness();
    for (let i = 0; i < 20; i += 1) {
      await t.signals.abandoning(deliveryRecord({ test: true }), 'retries exhausted', last);
      await t.signals.abandoning(deliveryRecord(), 'subscription deleted', last);
    }
    expect(await t.signals.abandoning(deliveryRecord(), 'retries exhausted', last)).toBeDefined();
    expect(payloadOf(t.intents[0]!.event)).toMatchObject({ suppressed: 0 });
  });
});

describe('OperationalSignals.countFailureDay', () => {
  const WINDOW = T0 - 2 * HOUR;
  const DISABLE_AT = 10;

  /** A count that records how many intents were written when it ran. */
  function counting(t: ReturnType<typeof harness>, result: { failureDays: number; disabledNow: boolean } | undefined) {
    const seen: number[] = [];
    const count = vi.fn(async () => {
      seen.push(t.intents.length);
      return result;
    });
    return { count, seen };
  }

  it('writes no intent while the cached counter is more than two short of the limit', async () => {
    const t = harness({ failureDays: 7 });
    const { count } = counting(t, { failureDays: 8, disabledNow: false });
    expect(await t.signals.countFailureDay(t.store.sub!, WINDOW, DISABLE_AT, count)).toEqual({
      failureDays: 8,
      disabledNow: false,
    });
    expect(count).toHaveBeenCalledTimes(1);
    expect(t.intend).not.toHaveBeenCalled();
  });

  it('writes the intent before counting when two short, and cancels it when the count does not disable', async () => {
    const t = harness({ failureDays: 8 });
    const { count, seen } = counting(t, { failureDays: 9, disabledNow: false });
    await t.signals.countFailureDay(t.store.sub!, WINDOW, DISABLE_AT, count);
    expect(seen).toEqual([1]);
    expect(t.intents).toHaveLength(1);
    expect(t.intents[0]).toMatchObject({ raised: false, cancelled: true });
  });

  it('raises subscription.disabled when the count disables the subscription', async () => {
    const t = harness({ failureDays: 9, lastFailureWindow: WINDOW - 24 * HOUR });
    const { count, seen } = counting(t, { failureDays: 10, disabledNow: true });
    expect(await t.signals.countFailureDay(t.store.sub!, WINDOW, DISABLE_AT, count)).toEqual({
      failureDays: 10,
      disabledNow: true,
    });
    expect(seen).toEqual([1]);
    expect(t.intents).toHaveLength(1);
    const [intended] = t.intents;
    expect(intended).toMatchObject({ raised: true, cancelled: false });
    expect(intended!.check).toEqual({ kind: 'subscription-disabled', tenantId: 'tenant-a', subscriptionId: 'sub-1' });
    expect(intended!.event).toMatchObject({
      eventType: 'subscription.disabled',
      occurredAt: new Date(T0).toISOString(),
    });
    expect(payloadOf(intended!.event)).toMatchObject({
      subscription: { id: 'sub-1', status: 'disabled' },
      failureDays: 10,
      disabledAt: new Date(T0).toISOString(),
    });
  });

  it('cancels the intent when the count answers nothing', async () => {
    const t = harness({ failureDays: 9 });
    const { count } = counting(t, undefined);
    expect(await t.signals.countFailureDay(t.store.sub!, WINDOW, DISABLE_AT, count)).toBeUndefined();
    expect(t.intents).toHaveLength(1);
    expect(t.intents[0]).toMatchObject({ raised: false, cancelled: true });
  });

  it.each([
    ['this window', WINDOW],
    ['a later window', WINDOW + 24 * HOUR],
  ])('writes no intent when %s is counted already', async (_name, lastFailureWindow) => {
    const t = harness({ failureDays: 9, lastFailureWindow });
    const { count } = counting(t, { failureDays: 9, disabledNow: false });
    await t.signals.countFailureDay(t.store.sub!, WINDOW, DISABLE_AT, count);
    expect(count).toHaveBeenCalledTimes(1);
    expect(t.intend).not.toHaveBeenCalled();
  });

  it('raises after the fact when the count disables without an intent (the cache was far behind)', async () => {
    const t = harness({ failureDays: 3 });
    const { count, seen } = counting(t, { failureDays: 10, disabledNow: true });
    await t.signals.countFailureDay(t.store.sub!, WINDOW, DISABLE_AT, count);
    expect(seen).toEqual([0]);
    expect(t.intents).toHaveLength(1);
    expect(t.intents[0]).toMatchObject({ raised: true, cancelled: false });
    expect(t.intents[0]!.check).toEqual({
      kind: 'subscription-disabled',
      tenantId: 'tenant-a',
      subscriptionId: 'sub-1',
    });
    expect(payloadOf(t.intents[0]!.event)).toMatchObject({ failureDays: 10, subscription: { status: 'disabled' } });
  });

  it('gives the intent and the after-the-fact event the same id for a window', async () => {
    const before = harness({ failureDays: 9 });
    await before.signals.countFailureDay(before.store.sub!, WINDOW, DISABLE_AT, async () => ({
      failureDays: 10,
      disabledNow: true,
    }));
    const after = harness({ failureDays: 1 });
    await after.signals.countFailureDay(after.store.sub!, WINDOW, DISABLE_AT, async () => ({
      failureDays: 10,
      disabledNow: true,
    }));
    expect(after.intents[0]!.event.eventId).toBe(before.intents[0]!.event.eventId);
  });

  it('leaves the intent pending (to the sweep) and throws when the count fails', async () => {
    const t = harness({ failureDays: 9 });
    await expect(
      t.signals.countFailureDay(t.store.sub!, WINDOW, DISABLE_AT, async () => {
        throw new Error('Cassandra unavailable');
      }),
    ).rejects.toThrow('Cassandra unavailable');
    expect(t.intents).toHaveLength(1);
    expect(t.intents[0]).toMatchObject({ raised: false, cancelled: false });
  });
});
