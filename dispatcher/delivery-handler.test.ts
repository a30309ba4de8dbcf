import { pino } from 'pino';
import { describe, expect, it, vi } from 'vitest';
import type { Attempt, DeliveryStatus } from '../core/deliveries/delivery.ts';
import type { DeliveryRecord } from '../core/deliveries/delivery-record.ts';
import type { SeriesIdentity, SeriesRef, SeriesState } from '../core/deliveries/delivery-store.ts';
import { blankSubscription, type Subscription } from '../core/subscriptions/subscription.ts';
import { SubscriptionCache } from '../core/subscriptions/subscription-cache.ts';
import { createAuthHeaders, type TokenFetcher } from './auth-headers.ts';
import { CircuitBreaker } from './circuit-breaker.ts';
import { createDeliveryHandler, type AuthHeaders, type CircuitControl, type EntityOrder } from './delivery-handler.ts';
import type { OutboundRequest } from './http-sender.ts';
import type { AttemptResult } from './outcome.ts';
import { Webhook } from 'standardwebhooks';
import { generateStandardSecret } from '../core/standard-webhooks.ts';
import { failureWindow } from './outcome.ts';
import { InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace';
import { loadConfig } from '../core/config.ts';
import { startTracing } from '../core/tracing.ts';

const MINUTE = 60_000;
const HOUR = 60 * MINUTE;
const DAY = 24 * HOUR;
const DELAYS = [1, 2, 4, 8, 16, 32, 64, 128].map((m) => m * MINUTE).concat(4 * HOUR);
const QUEUED_AT = Date.UTC(2025, 3, 4, 10, 0, 0);
const ENVELOPE = Buffer.from('{"eventId":"evt-1","payload":{ "a" : 1.000000000000000000001 },"payloadOmitted":false}');

function subscription(overrides: Partial<Subscription> = {}): Subscription {
  return {
    ...blankSubscription('tenant-a', 'sub-1', new Date(0)),
    url: 'https://receiver.example.com/hooks',
    eventTypes: ['purchaseOrder.*'],
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
    occurredAt: '2025-04-04T09:59:59.000Z',
    queuedAt: QUEUED_AT,
    attempt: 1,
    dueAt: 0,
    envelope: ENVELOPE,
    signature: 'c2lnbmF0dXJl',
    replayOf: null,
    ...overrides,
  };
}

const SERIES: SeriesRef = { tenantId: 'tenant-a', deliveryId: 'del-1', queuedAt: QUEUED_AT };

const ok = (statusCode: number): AttemptResult => ({ statusCode, errorMessage: null, durationMs: 15 });
const failed = (statusCode: number | null): AttemptResult => ({
  statusCode,
  errorMessage: statusCode === null ? 'no answer within 30000 ms' : `HTTP ${statusCode}`,
  durationMs: 20,
});

interface Setup {
  subscription?: Subscription | undefined;
  results?: AttemptResult[];
  latest?: { deliveryId: string } | undefined;
  now?: number;
  /** Milliseconds the fake clock moves during each send. */
  sendTakesMs?: number;
  /** Awaited before each send is answered (a receiver the test holds), with the request's delivery id. */
  answering?: (deliveryId: string | undefined) => Promise<void>;
  authHeaders?: AuthHeaders;
  scheduleRetry?: (tier: number, record: DeliveryRecord) => Promise<void>;
  /** The stored state answered for a record that may be a duplicate. */
  state?: SeriesState | undefined;
  /** How many attempt writes fail (store down) before one succeeds. */
  failWrites?: number;
  /** What counting a failure day answers (the store's verdict). */
  failureDay?: { failureDays: number; disabledNow: boolean };
  circuit?: CircuitControl;
  order?: EntityOrder;
  paceChained?: (subscriptionId: string) => Promise<void>;
  /** Operational events: a fake that logs what the handler asks of it, in order with the rest. */
  operational?: boolean;
  /** Answers subscriptions.get instead of `subscription` (a real SubscriptionCache, say). */
  lookup?: (tenantId: string, id: string, readSince?: number) => Promise<Subscription | undefined>;
}

/** A handler wired to fakes that record every call, in order, into `log`. */
function setup(options: Setup = {}) {
  const log: string[] = [];
  let failWrites = options.failWrites ?? 0;
  let clock = options.now ?? QUEUED_AT + 5 * MINUTE;
  const results = [...(options.results ?? [ok(200)])];
  const sent: OutboundRequest[] = [];
  const sub = 'subscription' in options ? options.subscription : subscription();

  const send = vi.fn(async (request: OutboundRequest) => {
    log.push('send');
    sent.push(request);
    clock += options.sendTakesMs ?? 0;
    await options.answering?.(request.headers['x-webhook-delivery-id']);
    return results.shift() ?? results.at(-1) ?? ok(200);
  });
  const attempts = {
    recordAttempt: vi.fn(
      async (
        _series: SeriesRef,
        _attempt: Attempt,
        _next: { status: DeliveryStatus; nextRetryAt: Date | null; abandonReason?: string | null; noted?: boolean },
        _identity?: SeriesIdentity,
      ) => {
        log.push('recordAttempt');
        if (failWrites > 0) {
          failWrites -= 1;
          throw new Error('cassandra unavailable');
        }
      },
    ),
    finish: vi.fn(async (_series: SeriesRef, _status: DeliveryStatus, _reason: string, _attemptsMade: number) => {
      log.push('finish');
    }),
    defer: vi.fn(async (_series: SeriesRef, _attemptsMade: number, _nextRetryAt: Date | null, _reason: string) => {
      log.push('defer');
    }),
    state: vi.fn(async (_tenantId: string, _deliveryId: string) => {
      log.push('state');
      return options.state;
    }),
    latestForEntity: vi.fn(async (_tenantId: string, _subscriptionId: string, _entityId: string) => {
      log.push('latestForEntity');
      return options.latest;
    }),
  };
  const subscriptions = {
    get: vi.fn(options.lookup ?? (async (_tenantId: string, _id: string, _readSince?: number) => sub)),
    resetFailureDays: vi.fn(async (_tenantId: string, _id: string) => {
      log.push('resetFailureDays');
    }),
    recordFailureDay: vi.fn(async (_tenantId: string, _id: string, _windowStart: number, _disableAt: number) => {
      log.push('recordFailureDay');
      return options.failureDay;
    }),
  };
  const scheduleRetry = vi.fn(
    options.scheduleRetry ??
      (async (_tier: number, _record: DeliveryRecord) => {
        log.push('scheduleRetry');
      }),
  );
  const authHeaders = vi.fn(
    options.authHeaders ?? createAuthHeaders(async () => ({ accessToken: 'unused', expiresInSeconds: 3600 })),
  );
  const replayOutcomes = {
    ended: vi.fn(async (_tenantId: string, _jobId: string, outcome: 'delivered' | 'failed') => {
      log.push(`replay ${outcome}`);
    }),
  };
  // The concurrency control sees each POST begin and end: `log` gets them only around a send, in `control`.
  const control: string[] = [];
  const concurrency = {
    begin: vi.fn((subscriptionId: string, tenantId: string) => {
      control.push(`begin ${tenantId}/${subscriptionId}`, `sends so far ${sent.length}`);
      return (result: AttemptResult | undefined) =>
        control.push(`answered ${result?.statusCode ?? 'nothing'}`, `sends so far ${sent.length}`);
    }),
  };
  const metrics = {
    outcome: vi.fn(),
    stage: vi.fn(),
    retryAfterDeferral: vi.fn(),
    autoDisabled: vi.fn(),
    unreadableSecret: vi.fn(),
  };
  const operational = {
    attempted: vi.fn(async (_record: DeliveryRecord, _sub: Subscription, _result: AttemptResult, ok: boolean) => {
      log.push(`attempted ${ok ? 'ok' : 'failed'}`);
    }),
    abandoning: vi.fn(async (_record: DeliveryRecord, reason: string, last: Attempt | undefined) => {
      log.push(`intend abandoned (${reason}, last attempt ${last?.attempt ?? 'unknown'})`);
      return {
        raise: async () => void log.push('raise abandoned'),
        cancel: async () => void log.push('cancel abandoned'),
      };
    }),
    countFailureDay: async <T>(_sub: Subscription, _window: number, _at: number, count: () => Promise<T>) => {
      log.push('countFailureDay');
      return count();
    },
  };
  const handle = createDeliveryHandler({
    subscriptions,
    attempts,
    ...(options.operational ? { operational } : {}),
    scheduleRetry,
    send,
    authHeaders,
    replayOutcomes,
    concurrency,
    metrics,
    circuit: options.circuit,
    ...(options.order ? { order: options.order } : {}),
    ...(options.paceChained ? { paceChained: options.paceChained } : {}),
    logger: pino({ level: 'silent' }),
    settings: { retryDelaysMs: DELAYS, deliveryLifetimeMs: DAY, failureDayMs: DAY, autoDisableAfterDays: 10 },
    now: () => clock,
    backoff: { wait: async () => undefined, succeeded: () => undefined },
  });
  return {
    handle,
    send,
    sent,
    attempts,
    subscriptions,
    scheduleRetry,
    authHeaders,
    replayOutcomes,
    concurrency,
    control,
    metrics,
    log,
    now: () => clock,
    /** Moves the fake clock (a record consumed later). */
    setNow: (at: number) => {
      clock = at;
    },
  };
}

/** Header names are case-insensitive on the wire: compare them lower-cased. */
function lower(headers: Record<string, string>): Record<string, string> {
  return Object.fromEntries(Object.entries(headers).map(([name, value]) => [name.toLowerCase(), value]));
}

describe('delivery handler: the request', () => {
  it('POSTs the stored envelope bytes to the subscription url with the spec headers', async () => {
    const t = setup();
    await t.handle(deliveryRecord());
    expect(t.send).toHaveBeenCalledTimes(1);
    const request = t.sent[0]!;
    expect(request.url).toBe('https://receiver.example.com/hooks');
    expect(Buffer.from(request.body).equals(ENVELOPE)).toBe(true);
    const headers = lower(request.headers);
    expect(headers).toMatchObject({
      'content-type': 'application/json',
      'x-webhook-event-id': 'evt-1',
      'x-webhook-delivery-id': 'del-1',
      'x-webhook-event-type': 'purchaseOrder.validated',
      'x-webhook-subscription-id': 'sub-1',
      'x-webhook-attempt': '1',
      'x-webhook-signature': 'c2lnbmF0dXJl',
    });
    // Nothing else but a user agent.
    expect(Object.keys(headers).sort()).toEqual(
      [
        'content-type',
        'user-agent',
        'x-webhook-attempt',
        'x-webhook-delivery-id',
        'x-webhook-event-id',
        'x-webhook-event-type',
        'x-webhook-signature',
        'x-webhook-subscription-id',
      ].sort(),
    );
  });

  it.each([1, 2, 9, 14])('sends X-Webhook-Attempt %i for attempt %i', async (attempt) => {
    const t = setup();
    await t.handle(deliveryRecord({ attempt }));
    expect(lower(t.sent[0]!.headers)['x-webhook-attempt']).toBe(String(attempt));
  });

  it("gives the dispatcher's slot back before it waits for the receiver, and only when an attempt goes out", async () => {
    const t = setup();
    const slot = { release: vi.fn(() => t.log.push('release')) };
    await t.handle(deliveryRecord(), slot);
    expect(t.log.slice(0, 2)).toEqual(['release', 'send']);
    expect(slot.release).toHaveBeenCalledTimes(1);

    const deleted = setup({ subscription: undefined });
    const kept = { release: vi.fn() };
    await deleted.handle(deliveryRecord(), kept);
    expect(deleted.send).not.toHaveBeenCalled();
    expect(kept.release).not.toHaveBeenCalled(); // the runner releases it when the record is done
  });

  it('puts the signature under the header name chosen on the subscription, and only there', async () => {
    const t = setup({ subscription: subscription({ signatureHeaderName: 'X-Acme-Signature' }) });
    await t.handle(deliveryRecord());
    const headers = lower(t.sent[0]!.headers);
    expect(headers['x-acme-signature']).toBe('c2lnbmF0dXJl');
    expect(headers).not.toHaveProperty('x-webhook-signature');
  });

  it('sends no signature header when the record has no signature (None mode)', async () => {
    const t = setup({ subscription: subscription({ authenticationMode: 'None', secrets: {} }) });
    await t.handle(deliveryRecord({ signature: null }));
    const headers = lower(t.sent[0]!.headers);
    expect(Object.keys(headers).filter((name) => name.includes('signature'))).toEqual([]);
    expect(headers).not.toHaveProperty('authorization');
  });

  it('sends the ApiKey header of an ApiKey subscription', async () => {
    const t = setup({
      subscription: subscription({
        authenticationMode: 'ApiKey',
        apiKeyHeaderName: 'X-Api-Key',
        secrets: { apiKey: 'key-123' },
      }),
    });
    await t.handle(deliveryRecord({ signature: null }));
    const headers = lower(t.sent[0]!.headers);
    expect(headers['x-api-key']).toBe('key-123');
    expect(headers).not.toHaveProperty('x-webhook-signature');
    expect(t.authHeaders).toHaveBeenCalledWith(expect.objectContaining({ id: 'sub-1' }), false);
  });

  it('sends the OAuth2 bearer token of an OAuth2 subscription', async () => {
    const t = setup({
      subscription: oauthSubscription(),
      authHeaders: createAuthHeaders(async () => ({ accessToken: 'tok-1', expiresInSeconds: 3600 })),
    });
    await t.handle(deliveryRecord({ signature: null }));
    expect(lower(t.sent[0]!.headers).authorization).toBe('Bearer tok-1');
  });
});

function oauthSubscription(): Subscription {
  return subscription({
    authenticationMode: 'OAuth2',
    oauth2: { tokenUrl: 'https://idp.example/oauth/token', clientId: 'client', audience: 'aud', scope: null },
    secrets: { oauth2ClientSecret: 'client-secret' },
  });
}

describe('delivery handler: test deliveries', () => {
  it('sends X-Webhook-Test: true, and only on a test delivery', async () => {
    const t = setup({ results: [ok(204), ok(204)] });
    await t.handle(deliveryRecord({ test: true }));
    await t.handle(deliveryRecord({ deliveryId: 'del-2' }));
    expect(lower(t.sent[0]!.headers)['x-webhook-test']).toBe('true');
    expect(lower(t.sent[1]!.headers)).not.toHaveProperty('x-webhook-test');
  });

  it('leaves the subscription failure days alone: a failing test counts no day, a passing one resets none', async () => {
    const failing = setup({ results: [failed(null)], now: QUEUED_AT + DAY - 10_000, sendTakesMs: 30_000 });
    await failing.handle(deliveryRecord({ attempt: 12, test: true }));
    expect(failing.attempts.recordAttempt).toHaveBeenCalledWith(
      SERIES,
      expect.objectContaining({ attempt: 12 }),
      expect.objectContaining({ status: 'abandoned' }),
    );
    expect(failing.subscriptions.recordFailureDay).not.toHaveBeenCalled();

    const passing = setup({ results: [ok(200)], subscription: subscription({ failureDays: 4 }) });
    await passing.handle(deliveryRecord({ test: true }));
    expect(passing.subscriptions.resetFailureDays).not.toHaveBeenCalled();
  });
});

describe('delivery handler: acknowledged', () => {
  it.each([
    [200, 0],
    [204, 0],
    [299, 0],
    [200, 3],
    [201, 9],
  ])('HTTP %i with %i failure days: records an acknowledged attempt', async (status, failureDays) => {
    const t = setup({ results: [ok(status)], subscription: subscription({ failureDays }) });
    const at = t.now();
    await t.handle(deliveryRecord());
    expect(t.attempts.recordAttempt).toHaveBeenCalledTimes(1);
    expect(t.attempts.recordAttempt).toHaveBeenCalledWith(
      SERIES,
      { attempt: 1, at: new Date(at), statusCode: status, errorMessage: null, durationMs: 15 },
      { status: 'acknowledged', nextRetryAt: null },
    );
    expect(t.scheduleRetry).not.toHaveBeenCalled();
    expect(t.attempts.finish).not.toHaveBeenCalled();
    expect(t.subscriptions.recordFailureDay).not.toHaveBeenCalled();
    // The reset costs a write: only when there is something to reset.
    if (failureDays > 0) expect(t.subscriptions.resetFailureDays).toHaveBeenCalledWith('tenant-a', 'sub-1');
    else expect(t.subscriptions.resetFailureDays).not.toHaveBeenCalled();
  });
});

describe('delivery handler: retrying', () => {
  it.each([
    [500, 1, 0],
    [503, 2, 1],
    [null, 3, 2],
    [302, 1, 0],
    [404, 8, 7],
    [429, 9, 8],
    [101, 12, 8],
  ])('HTTP %s on attempt %i: retrying, scheduled on tier %i with attempt+1', async (status, attempt, tier) => {
    const t = setup({ results: [failed(status)] });
    const now = t.now();
    await t.handle(deliveryRecord({ attempt }));
    const dueAt = now + DELAYS[tier]!;
    expect(t.attempts.recordAttempt).toHaveBeenCalledWith(
      SERIES,
      expect.objectContaining({ attempt, statusCode: status, errorMessage: failed(status).errorMessage }),
      { status: 'retrying', nextRetryAt: new Date(dueAt) },
    );
    expect(t.scheduleRetry).toHaveBeenCalledTimes(1);
    expect(t.scheduleRetry).toHaveBeenCalledWith(tier, deliveryRecord({ attempt: attempt + 1, dueAt }));
    expect(t.attempts.finish).not.toHaveBeenCalled();
    expect(t.subscriptions.resetFailureDays).not.toHaveBeenCalled();
    // The attempt is written before the retry record is published; a retry reads its series' state first (a copy
    // scheduled again may have made the attempt).
    expect(t.log).toEqual([...(attempt > 1 ? ['state'] : []), 'send', 'recordAttempt', 'scheduleRetry']);
  });

  it('keeps the envelope and signature of the series in the retry record', async () => {
    const t = setup({ results: [failed(500)] });
    await t.handle(deliveryRecord());
    const [, record] = t.scheduleRetry.mock.calls[0]!;
    expect(record.envelope.equals(ENVELOPE)).toBe(true);
    expect(record.signature).toBe('c2lnbmF0dXJl');
    expect(record.deliveryId).toBe('del-1');
    expect(record.queuedAt).toBe(QUEUED_AT);
  });

  it('the retry delay is measured from the end of the attempt', async () => {
    const now = QUEUED_AT + HOUR;
    const t = setup({ results: [failed(null)], now, sendTakesMs: 30_000 });
    await t.handle(deliveryRecord({ attempt: 1 }));
    expect(t.scheduleRetry).toHaveBeenCalledWith(0, deliveryRecord({ attempt: 2, dueAt: now + 30_000 + MINUTE }));
    expect(t.attempts.recordAttempt.mock.calls[0]![1].at).toEqual(new Date(now));
  });

  it('when no retry fits before the deadline: no next retry, an expiry hop due a whole tier delay later', async () => {
    const t = setup({ results: [failed(null)], now: QUEUED_AT + DAY - 80_000, sendTakesMs: 30_000 });
    await t.handle(deliveryRecord({ attempt: 1 }));
    const end = QUEUED_AT + DAY - 50_000;
    expect(t.attempts.recordAttempt.mock.calls[0]![2]).toEqual({ status: 'retrying', nextRetryAt: null });
    expect(t.scheduleRetry).toHaveBeenCalledWith(0, {
      ...deliveryRecord({ attempt: 2, dueAt: end + MINUTE }),
      expiryHop: true,
    });
  });

  it('an expiry hop before the deadline makes no attempt and hops on through the longest tier that fits', async () => {
    const now = QUEUED_AT + DAY - 3 * MINUTE;
    const t = setup({ now });
    await t.handle({ ...deliveryRecord({ attempt: 9 }), expiryHop: true });
    expect(t.send).not.toHaveBeenCalled();
    expect(t.attempts.recordAttempt).not.toHaveBeenCalled();
    expect(t.scheduleRetry).toHaveBeenCalledWith(1, {
      ...deliveryRecord({ attempt: 9, dueAt: now + 2 * MINUTE }),
      expiryHop: true,
    });
  });

  it("an expiry hop at the deadline abandons the delivery, keeping the last attempt's error", async () => {
    const now = QUEUED_AT + DAY + 20_000;
    const t = setup({ now });
    await t.handle({ ...deliveryRecord({ attempt: 9 }), expiryHop: true });
    expect(t.send).not.toHaveBeenCalled();
    expect(t.attempts.finish).toHaveBeenCalledWith(SERIES, 'abandoned', 'delivery lifetime exceeded', 8);
    expect(t.subscriptions.recordFailureDay).toHaveBeenCalledWith('tenant-a', 'sub-1', failureWindow(now, DAY), 10);
  });

  it('counts the subscription auto-disabled only when its failure day disabled it', async () => {
    const now = QUEUED_AT + DAY + 20_000;
    const disabling = setup({ now, failureDay: { failureDays: 10, disabledNow: true } });
    await disabling.handle({ ...deliveryRecord({ attempt: 9 }), expiryHop: true });
    expect(disabling.metrics.autoDisabled).toHaveBeenCalledTimes(1);

    const counting = setup({ now, failureDay: { failureDays: 3, disabledNow: false } });
    await counting.handle({ ...deliveryRecord({ attempt: 9 }), expiryHop: true });
    expect(counting.subscriptions.recordFailureDay).toHaveBeenCalledTimes(1);
    expect(counting.metrics.autoDisabled).not.toHaveBeenCalled();
  });

  it('does not resolve before the retry record is acknowledged, and fails when it cannot be published', async () => {
    let release: () => void = () => undefined;
    const t = setup({
      results: [failed(500)],
      scheduleRetry: () => new Promise<void>((resolve) => (release = resolve)),
    });
    let done = false;
    const handled = t.handle(deliveryRecord()).then(() => (done = true));
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(done).toBe(false);
    release();
    await handled;
    expect(done).toBe(true);
  });

  // A failed store write repeats the POST: the whole handler used to be run again after an error, so during a store or
  // broker hiccup the receiver got the same attempt again and again, even after answering 2xx.
  it('a failed store write repeats only the write: the receiver gets the attempt once', async () => {
    const t = setup({ results: [ok(204)], failWrites: 3 });
    await t.handle(deliveryRecord());
    expect(t.send).toHaveBeenCalledTimes(1);
    expect(t.attempts.recordAttempt).toHaveBeenCalledTimes(4);
    expect(t.log).toEqual(['send', 'recordAttempt', 'recordAttempt', 'recordAttempt', 'recordAttempt']);
  });

  it('a retry record the broker refuses for a while is published again, not earned by another POST', async () => {
    let refusals = 2;
    const t = setup({
      results: [failed(500)],
      scheduleRetry: async () => {
        if (refusals-- > 0) throw new Error('broker down');
      },
    });
    await t.handle(deliveryRecord());
    expect(t.send).toHaveBeenCalledTimes(1);
    expect(t.attempts.recordAttempt).toHaveBeenCalledTimes(1);
    expect(t.scheduleRetry).toHaveBeenCalledTimes(3);
  });
});

describe('delivery handler: abandoned', () => {
  it.each([
    ['exactly at the deadline', QUEUED_AT + DAY],
    ['an hour after the deadline', QUEUED_AT + DAY + HOUR],
  ])('%s: abandoned without sending, failure day recorded', async (_name, now) => {
    const t = setup({ now });
    await t.handle(deliveryRecord({ attempt: 7 }));
    expect(t.send).not.toHaveBeenCalled();
    expect(t.attempts.recordAttempt).not.toHaveBeenCalled();
    expect(t.attempts.finish).toHaveBeenCalledWith(SERIES, 'abandoned', 'delivery lifetime exceeded', 6);
    expect(t.subscriptions.recordFailureDay).toHaveBeenCalledWith('tenant-a', 'sub-1', failureWindow(now, DAY), 10);
    expect(t.scheduleRetry).not.toHaveBeenCalled();
  });

  it('abandons a failed attempt that ends past the deadline, recording the attempt and the failure day', async () => {
    const t = setup({ results: [failed(null)], now: QUEUED_AT + DAY - 10_000, sendTakesMs: 30_000 });
    await t.handle(deliveryRecord({ attempt: 12 }));
    expect(t.attempts.recordAttempt).toHaveBeenCalledWith(
      SERIES,
      expect.objectContaining({ attempt: 12, statusCode: null, errorMessage: 'no answer within 30000 ms' }),
      // The attempt's own error stays the last error; why the delivery ended has its own field.
      { status: 'abandoned', nextRetryAt: null, abandonReason: 'delivery lifetime exceeded' },
    );
    expect(t.attempts.finish).not.toHaveBeenCalled();
    expect(t.subscriptions.recordFailureDay).toHaveBeenCalledWith(
      'tenant-a',
      'sub-1',
      failureWindow(QUEUED_AT + DAY + 20_000, DAY),
      10,
    );
    expect(t.scheduleRetry).not.toHaveBeenCalled();
  });

  it('abandons the pending deliveries of a disabled subscription with "subscription disabled", without sending', async () => {
    const t = setup({ subscription: subscription({ status: 'disabled', failureDays: 10 }) });
    await t.handle(deliveryRecord({ attempt: 3 }));
    expect(t.send).not.toHaveBeenCalled();
    expect(t.attempts.finish).toHaveBeenCalledWith(SERIES, 'abandoned', 'subscription disabled', 2);
    expect(t.attempts.recordAttempt).not.toHaveBeenCalled();
    expect(t.scheduleRetry).not.toHaveBeenCalled();
    // Already disabled: abandoning its leftovers must not count further failure days.
    expect(t.subscriptions.recordFailureDay).not.toHaveBeenCalled();
  });

  it('abandons the deliveries of a deleted subscription without sending', async () => {
    const t = setup({ subscription: undefined });
    await t.handle(deliveryRecord());
    expect(t.subscriptions.get).toHaveBeenCalledWith('tenant-a', 'sub-1');
    expect(t.send).not.toHaveBeenCalled();
    expect(t.attempts.finish).toHaveBeenCalledWith(SERIES, 'abandoned', 'subscription deleted', 0);
    expect(t.subscriptions.recordFailureDay).not.toHaveBeenCalled();
    expect(t.scheduleRetry).not.toHaveBeenCalled();
    // Read again as of after the delivery was queued before it was abandoned: a miss alone is not a deletion.
    expect(t.subscriptions.get).toHaveBeenLastCalledWith('tenant-a', 'sub-1', QUEUED_AT);
  });

  describe('with the cache read before the delivery was queued', () => {
    /** A real cache (a minute's TTL) over a store whose subscriptions the test changes. */
    const cached = () => {
      const store = { list: [] as Subscription[], loads: 0 };
      const cache = new SubscriptionCache(async () => {
        store.loads += 1;
        return store.list;
      }, 60_000);
      return { store, cache, lookup: cache.get.bind(cache) };
    };

    it('delivers to a subscription created after that read, where the cache alone took it for deleted', async () => {
      const { store, cache, lookup } = cached();
      expect(await cache.get('tenant-a', 'sub-1')).toBeUndefined(); // read while the subscription did not exist
      store.list = [subscription()];
      const t = setup({ lookup });
      await t.handle(deliveryRecord({ queuedAt: Date.now() + 1 }));
      expect(t.send).toHaveBeenCalledTimes(1);
      expect(t.attempts.finish).not.toHaveBeenCalled();
      expect(store.loads).toBe(2);
      // The fresh read is cached: the next delivery, queued before it, reads nothing.
      await t.handle(deliveryRecord({ deliveryId: 'del-2', queuedAt: Date.now() - 1_000 }));
      expect([t.send.mock.calls.length, store.loads]).toEqual([2, 2]);
    });

    it('delivers to a subscription enabled again after that read', async () => {
      const { store, cache, lookup } = cached();
      store.list = [subscription({ status: 'disabled' })];
      expect((await cache.get('tenant-a', 'sub-1'))?.status).toBe('disabled');
      store.list = [subscription()];
      const t = setup({ lookup });
      await t.handle(deliveryRecord({ queuedAt: Date.now() + 1 }));
      expect(t.send).toHaveBeenCalledTimes(1);
    });

    it('sends to the URL of the version the delivery was routed with, not an older cached one', async () => {
      const { store, cache, lookup } = cached();
      store.list = [subscription({ url: 'https://old.example.com/hooks', updatedAt: new Date(1_000) })];
      await cache.get('tenant-a', 'sub-1');
      store.list = [subscription({ url: 'https://new.example.com/hooks', updatedAt: new Date(2_000) })];
      const t = setup({ lookup });
      await t.handle(deliveryRecord({ routedAt: Date.now() + 1, subscriptionVersion: 2_000 }));
      expect(t.sent.map((request) => request.url)).toEqual(['https://new.example.com/hooks']);
      // A delivery routed with the older version (before the change) is not a reason to read again.
      await t.handle(deliveryRecord({ deliveryId: 'del-2', routedAt: Date.now() + 1, subscriptionVersion: 1_000 }));
      expect(t.sent.map((request) => request.url)).toEqual([
        'https://new.example.com/hooks',
        'https://new.example.com/hooks',
      ]);
      expect(store.loads).toBe(2);
    });

    it('abandons as deleted what the fresh read does not find either, and reads once for it', async () => {
      const { store, cache, lookup } = cached();
      await cache.get('tenant-a', 'sub-1');
      const t = setup({ lookup });
      await t.handle(deliveryRecord({ queuedAt: Date.now() + 1 }));
      expect(t.attempts.finish).toHaveBeenCalledWith(
        expect.objectContaining({ deliveryId: 'del-1' }),
        'abandoned',
        'subscription deleted',
        0,
      );
      expect(store.loads).toBe(2);
    });
  });
});

describe('delivery handler: supersede', () => {
  const collapsing = () => subscription({ supersedePendingDeliveries: true });

  it('ends a delivery whose entity has a newer delivery as superseded, without sending', async () => {
    const t = setup({ subscription: collapsing(), latest: { deliveryId: 'del-newer' } });
    await t.handle(deliveryRecord({ attempt: 2 }));
    expect(t.attempts.latestForEntity).toHaveBeenCalledWith('tenant-a', 'sub-1', 'po-1');
    expect(t.send).not.toHaveBeenCalled();
    expect(t.attempts.finish).toHaveBeenCalledWith(SERIES, 'superseded', expect.stringContaining('del-newer'), 1);
    expect(t.attempts.recordAttempt).not.toHaveBeenCalled();
    expect(t.scheduleRetry).not.toHaveBeenCalled();
    expect(t.subscriptions.recordFailureDay).not.toHaveBeenCalled();
  });

  it.each([
    ['it is the latest itself', { deliveryId: 'del-1' }],
    ['no latest is known', undefined],
  ])('sends when %s', async (_name, latest) => {
    const t = setup({ subscription: collapsing(), latest });
    await t.handle(deliveryRecord());
    expect(t.send).toHaveBeenCalledTimes(1);
    expect(t.attempts.finish).not.toHaveBeenCalled();
  });

  it('never supersedes a replay, even when a newer delivery exists', async () => {
    const t = setup({ subscription: collapsing(), latest: { deliveryId: 'del-newer' } });
    await t.handle(deliveryRecord({ deliveryId: 'del-replay', replayOf: 'del-1' }));
    expect(t.send).toHaveBeenCalledTimes(1);
    expect(t.attempts.finish).not.toHaveBeenCalled();
    expect(t.attempts.recordAttempt).toHaveBeenCalledWith(
      { ...SERIES, deliveryId: 'del-replay' },
      expect.anything(),
      { status: 'acknowledged', nextRetryAt: null },
      // A replay's first write carries the series' fixed fields: its row is whole whichever write lands first.
      expect.objectContaining({ eventId: 'evt-1', replayOf: 'del-1', signature: 'c2lnbmF0dXJl' }),
    );
  });

  it('does not look up the latest delivery when the subscription does not supersede', async () => {
    const t = setup({ latest: { deliveryId: 'del-newer' } });
    await t.handle(deliveryRecord());
    expect(t.attempts.latestForEntity).not.toHaveBeenCalled();
    expect(t.send).toHaveBeenCalledTimes(1);
  });
});

describe('delivery handler: operational events', () => {
  it('writes a delivery.abandoned down before the abandoned attempt is written, and raises it once it is', async () => {
    const t = setup({ operational: true, results: [failed(500)], now: QUEUED_AT + DAY - 10_000, sendTakesMs: 20_000 });
    await t.handle(deliveryRecord({ attempt: 12 }));
    expect(t.log).toEqual([
      'state', // a retry reads its series' state first
      'send',
      'intend abandoned (delivery lifetime exceeded, last attempt 12)',
      'recordAttempt',
      'raise abandoned',
      'attempted failed',
      'countFailureDay',
      'recordFailureDay',
    ]);
  });

  it('does so for an abandonment without an attempt too (the signals read its last attempt)', async () => {
    const t = setup({ operational: true, now: QUEUED_AT + DAY });
    await t.handle(deliveryRecord({ attempt: 7 }));
    expect(t.log).toEqual([
      'state',
      'intend abandoned (delivery lifetime exceeded, last attempt unknown)',
      'finish',
      'raise abandoned',
      'countFailureDay',
      'recordFailureDay',
    ]);
  });

  it("tells the signals each attempt's outcome once it is written: before a retry is scheduled", async () => {
    const acknowledged = setup({ operational: true });
    await acknowledged.handle(deliveryRecord());
    expect(acknowledged.log).toEqual(['send', 'recordAttempt', 'attempted ok']);
    const retrying = setup({ operational: true, results: [failed(503)] });
    await retrying.handle(deliveryRecord());
    expect(retrying.log).toEqual(['send', 'recordAttempt', 'attempted failed', 'scheduleRetry']);
  });

  it('asks nothing of them for a skipped duplicate', async () => {
    const duplicate = setup({ operational: true, state: { status: 'abandoned', attemptCount: 3 } });
    await duplicate.handle(deliveryRecord({ attempt: 2, mayBeDuplicate: true }));
    expect(duplicate.log).toEqual(['state']);
  });
});

describe('delivery handler: traces', () => {
  const routing = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';

  it('sends no traceparent while tracing is off', async () => {
    const t = setup();
    await t.handle(deliveryRecord({ traceparent: routing }));
    expect(t.sent[0]!.headers).not.toHaveProperty('traceparent');
  });

  it("makes each attempt a child span of the routing, its status answered, and sends that span's traceparent", async () => {
    const exporter = new InMemorySpanExporter();
    const traces = await startTracing(
      loadConfig({ OTEL_BSP_SCHEDULE_DELAY: '1' }).tracing,
      'dispatcher',
      pino({ level: 'silent' }),
      new SimpleSpanProcessor({ exporter }),
    );
    try {
      const t = setup({ results: [failed(503), ok(204)] });
      await t.handle(deliveryRecord({ traceparent: routing }));
      await t.handle(deliveryRecord({ traceparent: routing, attempt: 2 }));
      await vi.waitFor(() => expect(exporter.getFinishedSpans()).toHaveLength(2));
      const spans = exporter.getFinishedSpans();
      expect(
        spans.map((span) => [
          span.name,
          span.parentSpanContext?.spanId,
          span.attributes['webhook.attempt'],
          span.attributes['http.response.status_code'],
          span.status.code,
        ]),
      ).toEqual([
        ['POST purchaseOrder.validated', '00f067aa0ba902b7', 1, 503, 2],
        ['POST purchaseOrder.validated', '00f067aa0ba902b7', 2, 204, 0],
      ]);
      expect(t.sent.map((request) => request.headers.traceparent)).toEqual(
        spans.map((span) => `00-4bf92f3577b34da6a3ce929d0e0e4736-${span.spanContext().spanId}-01`),
      );
    } finally {
      await traces.stop();
    }
  });
});

describe('delivery handler: OAuth2', () => {
  function tokens(...values: (string | Error)[]) {
    const fetchToken = vi.fn<TokenFetcher>(async () => {
      const next = values.shift();
      if (next instanceof Error) throw next;
      return { accessToken: next ?? 'tok-last', expiresInSeconds: 3600 };
    });
    return { fetchToken, authHeaders: createAuthHeaders(fetchToken) };
  }

  it('on 401 fetches a new token and tries once more within the same attempt', async () => {
    const { fetchToken, authHeaders } = tokens('tok-old', 'tok-new');
    const t = setup({ subscription: oauthSubscription(), authHeaders, results: [failed(401), ok(200)] });
    await t.handle(deliveryRecord({ signature: null }));
    expect(t.send).toHaveBeenCalledTimes(2);
    expect(t.sent.map((r) => lower(r.headers).authorization)).toEqual(['Bearer tok-old', 'Bearer tok-new']);
    expect(t.sent.map((r) => lower(r.headers)['x-webhook-attempt'])).toEqual(['1', '1']);
    expect(t.authHeaders.mock.calls.map(([, refresh]) => refresh)).toEqual([false, true]);
    expect(fetchToken).toHaveBeenCalledTimes(2);
    expect(t.attempts.recordAttempt).toHaveBeenCalledTimes(1);
    expect(t.attempts.recordAttempt).toHaveBeenCalledWith(
      SERIES,
      expect.objectContaining({ attempt: 1, statusCode: 200 }),
      { status: 'acknowledged', nextRetryAt: null },
    );
  });

  it('refreshes only once: a second 401 is a failed attempt', async () => {
    const { authHeaders } = tokens('tok-1', 'tok-2', 'tok-3');
    const t = setup({ subscription: oauthSubscription(), authHeaders, results: [failed(401), failed(401), ok(200)] });
    await t.handle(deliveryRecord({ signature: null }));
    expect(t.send).toHaveBeenCalledTimes(2);
    expect(t.attempts.recordAttempt).toHaveBeenCalledWith(
      SERIES,
      expect.objectContaining({ statusCode: 401 }),
      expect.objectContaining({ status: 'retrying' }),
    );
    expect(t.scheduleRetry).toHaveBeenCalledTimes(1);
  });

  it.each([
    ['ApiKey', subscription({ authenticationMode: 'ApiKey', apiKeyHeaderName: 'X-Api-Key', secrets: { apiKey: 'k' } })],
    ['Hmac', subscription()],
  ])('does not retry a 401 within the attempt in %s mode', async (_mode, sub) => {
    const t = setup({ subscription: sub, results: [failed(401), ok(200)] });
    await t.handle(deliveryRecord());
    expect(t.send).toHaveBeenCalledTimes(1);
    expect(t.scheduleRetry).toHaveBeenCalledTimes(1);
  });

  it('turns a failing token request into a failed attempt, not an exception', async () => {
    const { authHeaders } = tokens(new Error('token endpoint answered 500'));
    const t = setup({ subscription: oauthSubscription(), authHeaders });
    await expect(t.handle(deliveryRecord({ signature: null }))).resolves.toBeUndefined();
    expect(t.send).not.toHaveBeenCalled();
    const [, attempt, next] = t.attempts.recordAttempt.mock.calls[0]!;
    expect(attempt).toMatchObject({ attempt: 1, statusCode: null });
    expect(attempt.errorMessage).toContain('authentication failed');
    expect(attempt.errorMessage).toContain('token endpoint answered 500');
    expect(next).toEqual({ status: 'retrying', nextRetryAt: new Date(t.now() + MINUTE) });
    expect(t.scheduleRetry).toHaveBeenCalledWith(0, expect.objectContaining({ attempt: 2 }));
  });

  it('turns a failing refresh after a 401 into a failed attempt too', async () => {
    const { authHeaders } = tokens('tok-old', new Error('idp down'));
    const t = setup({ subscription: oauthSubscription(), authHeaders, results: [failed(401), ok(200)] });
    await t.handle(deliveryRecord({ signature: null }));
    expect(t.send).toHaveBeenCalledTimes(1);
    const [, attempt, next] = t.attempts.recordAttempt.mock.calls[0]!;
    expect(attempt.statusCode).toBeNull();
    expect(attempt.errorMessage).toContain('idp down');
    expect(next.status).toBe('retrying');
  });
});

describe('delivery handler: duplicates and poison', () => {
  it.each<[string, SeriesState | undefined, boolean]>([
    ['acknowledged', { status: 'acknowledged', attemptCount: 1 }, false],
    ['abandoned', { status: 'abandoned', attemptCount: 3 }, false],
    ['retrying (a dispatcher has it)', { status: 'retrying', attemptCount: 1 }, false],
    ['queued, never attempted', { status: 'queued', attemptCount: 0 }, true],
    [
      'retrying with this attempt not made yet (a retry record redelivered)',
      { status: 'retrying', attemptCount: 0 },
      true,
    ],
    ['not stored yet', undefined, true],
  ])('a possible duplicate whose series is %s is sent: %s', async (_name, state, sent) => {
    const t = setup({ state });
    await t.handle({ ...deliveryRecord(), mayBeDuplicate: true });
    expect(t.attempts.state).toHaveBeenCalledWith('tenant-a', 'del-1');
    expect(t.send).toHaveBeenCalledTimes(sent ? 1 : 0);
    if (!sent) expect(t.attempts.recordAttempt).not.toHaveBeenCalled();
  });

  it('schedules the next attempt again for a possible duplicate whose attempt was recorded as retrying: a crash may have come before its retry was scheduled', async () => {
    const nextRetryAt = new Date(QUEUED_AT + 6 * MINUTE);
    const t = setup({ state: { status: 'retrying', attemptCount: 1, nextRetryAt } });
    await t.handle({ ...deliveryRecord(), mayBeDuplicate: true });
    expect(t.send).not.toHaveBeenCalled();
    expect(t.scheduleRetry).toHaveBeenCalledTimes(1);
    const [tier, again] = t.scheduleRetry.mock.calls[0]!;
    // Held until a little after the recorded time, and checked then: if the first retry record was there after all,
    // it has made the attempt by then, and this copy finds it made.
    expect(again).toMatchObject({ attempt: 2, mayBeDuplicate: true, rescheduled: true });
    expect(again.holdUntil).toBeGreaterThan(nextRetryAt.getTime());
    expect(again.dueAt).toBe(t.now() + DELAYS[tier]!);

    // Recorded as waiting for its deadline (an expiry hop): the hop is scheduled again.
    const expiring = setup({ state: { status: 'retrying', attemptCount: 1, nextRetryAt: null } });
    await expiring.handle({ ...deliveryRecord(), mayBeDuplicate: true });
    expect(expiring.scheduleRetry.mock.calls[0]![1]).toMatchObject({ attempt: 2, expiryHop: true });

    // The retry's own attempt made since: nothing is scheduled.
    const later = setup({ state: { status: 'retrying', attemptCount: 2, nextRetryAt } });
    await later.handle({ ...deliveryRecord(), mayBeDuplicate: true });
    expect(later.scheduleRetry).not.toHaveBeenCalled();

    // The copy itself, finding the attempt it holds made by the first retry (which failed too), makes no copy of its
    // own: copies would otherwise breed for as long as the delivery retries.
    const copy = setup({ state: { status: 'retrying', attemptCount: 2, nextRetryAt } });
    await copy.handle({ ...deliveryRecord({ attempt: 2 }), mayBeDuplicate: true, rescheduled: true });
    expect(copy.scheduleRetry).not.toHaveBeenCalled();
    expect(copy.send).not.toHaveBeenCalled();
  });

  it('skips a retry whose attempt a copy scheduled again has made, without scheduling another copy', async () => {
    const t = setup({ state: { status: 'retrying', attemptCount: 2, nextRetryAt: new Date(QUEUED_AT + HOUR) } });
    await t.handle(deliveryRecord({ attempt: 2 }));
    expect(t.send).not.toHaveBeenCalled();
    expect(t.scheduleRetry).not.toHaveBeenCalled();
    expect(t.metrics.outcome).toHaveBeenCalledWith('duplicate', undefined);
    // Its attempt not made yet: sent.
    const due = setup({ state: { status: 'retrying', attemptCount: 1, nextRetryAt: new Date(QUEUED_AT) } });
    await due.handle(deliveryRecord({ attempt: 2 }));
    expect(due.send).toHaveBeenCalledTimes(1);
  });

  it('a possible duplicate arriving while its original is being sent here is skipped, not sent twice', async () => {
    let answer: (result: AttemptResult) => void = () => undefined;
    const t = setup({ state: { status: 'queued', attemptCount: 0 } });
    t.send.mockImplementationOnce(() => new Promise<AttemptResult>((resolve) => (answer = resolve)));
    const original = t.handle(deliveryRecord());
    await new Promise((resolve) => setTimeout(resolve, 5));
    await t.handle({ ...deliveryRecord(), mayBeDuplicate: true });
    answer(ok(204));
    await original;
    expect(t.send).toHaveBeenCalledTimes(1);
    expect(t.attempts.recordAttempt).toHaveBeenCalledTimes(1);
  });

  it.each([
    ['unmarked, after an unmarked original', false],
    ['unmarked, after a marked original (the repeat routed first)', true],
  ])(
    'a second record of a series arriving while the first is being sent here, %s, is skipped, not sent twice',
    async (_name, firstMarked) => {
      // Two routings of one event at once (two gateways' relays published it) may both go out unmarked: neither found
      // the other's rows. A record of a series already in flight here is a duplicate whatever its mark says.
      let answer: (result: AttemptResult) => void = () => undefined;
      const t = setup({ state: undefined });
      t.send.mockImplementationOnce(() => new Promise<AttemptResult>((resolve) => (answer = resolve)));
      const original = t.handle({ ...deliveryRecord(), ...(firstMarked ? { mayBeDuplicate: true } : {}) });
      await new Promise((resolve) => setTimeout(resolve, 5));
      await t.handle(deliveryRecord());
      answer(ok(204));
      await original;
      expect(t.send).toHaveBeenCalledTimes(1);
      expect(t.attempts.recordAttempt).toHaveBeenCalledTimes(1);
    },
  );

  it('reads no state for a record that cannot be a duplicate', async () => {
    const t = setup();
    await t.handle(deliveryRecord());
    expect(t.attempts.state).not.toHaveBeenCalled();
  });

  it('abandons, without sending, a delivery whose subscription secrets no key opens (it would stall forever)', async () => {
    const t = setup({ subscription: subscription({ secrets: {}, unreadableSecrets: 'key k9: unknown key id' }) });
    await t.handle(deliveryRecord());
    expect(t.send).not.toHaveBeenCalled();
    expect(t.attempts.finish).toHaveBeenCalledWith(
      SERIES,
      'abandoned',
      'subscription secrets unreadable: key k9: unknown key id',
      0,
    );
    // Counted for the operator, and not held against the subscriber: no failure day toward auto-disable.
    expect(t.metrics.unreadableSecret).toHaveBeenCalledTimes(1);
    expect(t.metrics.outcome).toHaveBeenCalledWith('abandoned', undefined);
    expect(t.subscriptions.recordFailureDay).not.toHaveBeenCalled();
  });
});

describe('delivery handler: bulk replay job progress', () => {
  const replay = (overrides: Partial<DeliveryRecord> = {}) =>
    deliveryRecord({ replayOf: 'del-0', replayJobId: 'job-1', ...overrides });

  it('counts a replay of a job delivered once its acknowledgement is written', async () => {
    const t = setup({ results: [ok(204)] });
    await t.handle(replay());
    expect(t.replayOutcomes.ended).toHaveBeenCalledExactlyOnceWith('tenant-a', 'job-1', 'delivered');
    expect(t.log).toEqual(['send', 'recordAttempt', 'replay delivered']);
  });

  it('counts it failed when it is abandoned, after an attempt or without one', async () => {
    const atDeadline = setup({ results: [failed(500)], now: QUEUED_AT + DAY });
    await atDeadline.handle(replay({ attempt: 9 }));
    expect(atDeadline.replayOutcomes.ended).toHaveBeenCalledExactlyOnceWith('tenant-a', 'job-1', 'failed');
    const deleted = setup({ subscription: undefined });
    await deleted.handle(replay());
    expect(deleted.log).toEqual(['finish', 'replay failed']);
  });

  it('counts nothing for a retry, a skipped duplicate, or a delivery of no job', async () => {
    const retrying = setup({ results: [failed(503)] });
    await retrying.handle(replay());
    const duplicate = setup({ state: { status: 'acknowledged', attemptCount: 1 } });
    await duplicate.handle(replay({ mayBeDuplicate: true }));
    const single = setup({ results: [ok(204)] });
    await single.handle(deliveryRecord({ replayOf: 'del-0', replayJobId: null }));
    for (const t of [retrying, duplicate, single]) expect(t.replayOutcomes.ended).not.toHaveBeenCalled();
    // The job rides along with the retry, to be counted when the series ends.
    expect(retrying.scheduleRetry.mock.calls[0]![1]).toMatchObject({ replayJobId: 'job-1', attempt: 2 });
  });
});

describe('delivery handler: adaptive concurrency and Retry-After', () => {
  const throttled = (statusCode: number, retryAfterMs?: number): AttemptResult => ({
    ...failed(statusCode),
    ...(retryAfterMs === undefined ? {} : { retryAfterMs }),
  });

  it('tells the concurrency control when the POST begins and what it answered, and nothing else', async () => {
    const t = setup({ results: [ok(204)] });
    await t.handle(deliveryRecord());
    expect(t.control).toEqual(['begin tenant-a/sub-1', 'sends so far 0', 'answered 204', 'sends so far 1']);
  });

  it('an OAuth2 refresh is a second POST: two begins, two answers', async () => {
    const authHeaders = createAuthHeaders(async () => ({ accessToken: 'tok', expiresInSeconds: 3600 }));
    const t = setup({ subscription: oauthSubscription(), authHeaders, results: [failed(401), ok(200)] });
    await t.handle(deliveryRecord({ signature: null }));
    expect(t.control.filter((entry) => !entry.startsWith('sends'))).toEqual([
      'begin tenant-a/sub-1',
      'answered 401',
      'begin tenant-a/sub-1',
      'answered 200',
    ]);
  });

  it('no POST, no begin: abandoned, superseded or duplicate records leave the control alone', async () => {
    const deleted = setup({ subscription: undefined });
    await deleted.handle(deliveryRecord());
    const duplicate = setup({ state: { status: 'acknowledged', attemptCount: 1 } });
    await duplicate.handle(deliveryRecord({ mayBeDuplicate: true }));
    const superseded = setup({
      subscription: subscription({ supersedePendingDeliveries: true }),
      latest: { deliveryId: 'del-2' },
    });
    await superseded.handle(deliveryRecord());
    for (const t of [deleted, duplicate, superseded]) expect(t.concurrency.begin).not.toHaveBeenCalled();
  });

  it('a failed token request is no POST: the control is not told', async () => {
    const authHeaders = createAuthHeaders(async () => {
      throw new Error('token endpoint down');
    });
    const t = setup({ subscription: oauthSubscription(), authHeaders });
    await t.handle(deliveryRecord({ signature: null }));
    expect(t.concurrency.begin).not.toHaveBeenCalled();
    expect(t.send).not.toHaveBeenCalled();
  });

  it('a 429 with Retry-After past the next step is retried no earlier: the tier covering it, counted as deferral', async () => {
    const t = setup({ results: [throttled(429, 3 * MINUTE)] });
    await t.handle(deliveryRecord());
    const now = t.now();
    expect(t.scheduleRetry).toHaveBeenCalledWith(2, expect.objectContaining({ attempt: 2, dueAt: now + 4 * MINUTE }));
    expect(t.attempts.recordAttempt).toHaveBeenCalledWith(
      SERIES,
      { attempt: 1, at: new Date(now), statusCode: 429, errorMessage: 'HTTP 429', durationMs: 20 },
      { status: 'retrying', nextRetryAt: new Date(now + 4 * MINUTE) },
    );
    expect(t.metrics.retryAfterDeferral).toHaveBeenCalledTimes(1);
  });

  it('a Retry-After within the next step changes nothing and is no deferral', async () => {
    const t = setup({ results: [throttled(503, 30_000)] });
    await t.handle(deliveryRecord());
    expect(t.scheduleRetry).toHaveBeenCalledWith(0, expect.objectContaining({ dueAt: t.now() + MINUTE }));
    expect(t.metrics.retryAfterDeferral).not.toHaveBeenCalled();
  });

  it('a Retry-After longer than every tier holds the retry until then: hops without an attempt, then the POST', async () => {
    const t = setup({ results: [throttled(429, 6 * HOUR), throttled(503)] });
    await t.handle(deliveryRecord());
    const at = t.now();
    const holdUntil = at + 6 * HOUR;
    expect(t.scheduleRetry).toHaveBeenLastCalledWith(
      8,
      expect.objectContaining({ attempt: 2, dueAt: at + 4 * HOUR, holdUntil }),
    );
    // The history says when the next attempt really comes.
    expect(t.attempts.recordAttempt).toHaveBeenCalledWith(SERIES, expect.objectContaining({ statusCode: 429 }), {
      status: 'retrying',
      nextRetryAt: new Date(holdUntil),
    });
    expect(t.metrics.retryAfterDeferral).toHaveBeenCalledTimes(1);
    const parked = t.scheduleRetry.mock.lastCall![1];

    // Consumed from the 4 h tier, 2 h before its hold ends: no POST, on to the 64 m tier with the same attempt.
    t.setNow(at + 4 * HOUR);
    await t.handle(parked);
    expect(t.send).toHaveBeenCalledTimes(1);
    expect(t.scheduleRetry).toHaveBeenLastCalledWith(6, { ...parked, dueAt: at + 4 * HOUR + 64 * MINUTE });

    // At the hold's end the attempt is made; its own retry follows the schedule, no longer held.
    t.setNow(holdUntil);
    await t.handle({ ...parked, dueAt: holdUntil });
    expect(t.send).toHaveBeenCalledTimes(2);
    const next = t.scheduleRetry.mock.lastCall![1];
    expect(next).toMatchObject({ attempt: 3, dueAt: holdUntil + 2 * MINUTE });
    expect(next.holdUntil).toBeUndefined();
  });

  it('a Retry-After past the deadline: no more attempts, the delivery hops to its deadline', async () => {
    const now = QUEUED_AT + DAY - 2 * HOUR;
    // The schedule's 1 m would fit; the 4 h tier Retry-After asks for does not: the longest that fits is 64 m.
    const t = setup({ now, results: [throttled(429, 3 * HOUR)] });
    await t.handle(deliveryRecord());
    expect(t.scheduleRetry).toHaveBeenCalledWith(
      6,
      expect.objectContaining({ attempt: 2, expiryHop: true, dueAt: now + 64 * MINUTE }),
    );
    expect(t.attempts.recordAttempt).toHaveBeenCalledWith(SERIES, expect.objectContaining({ statusCode: 429 }), {
      status: 'retrying',
      nextRetryAt: null,
    });
    expect(t.metrics.retryAfterDeferral).not.toHaveBeenCalled();
  });
});

describe('delivery handler: circuit breaker', () => {
  const timeout: AttemptResult = { ...failed(null), failure: 'timeout' };
  const breaker = (failures = 2) => {
    let clock = QUEUED_AT + 5 * MINUTE;
    const circuit = new CircuitBreaker(
      { failures, openMs: 30_000, maxOpenMs: 10 * MINUTE, probeTimeoutMs: 60_000 },
      () => {},
      () => clock,
    );
    return { circuit, advance: (ms: number) => (clock += ms), now: () => clock };
  };

  it('an open circuit defers the delivery to a retry tier without a POST: held until the probe, history says why', async () => {
    const { circuit, now } = breaker();
    const t = setup({ circuit, results: [timeout, timeout], now: now() });
    await t.handle(deliveryRecord({ deliveryId: 'del-a' }));
    await t.handle(deliveryRecord({ deliveryId: 'del-b' }));
    expect(circuit.state('sub-1')).toBe('open');
    t.log.length = 0;
    t.scheduleRetry.mockClear();
    await t.handle(deliveryRecord({ deliveryId: 'del-c', attempt: 3 }));
    expect(t.log).toEqual(['state', 'defer', 'scheduleRetry']);
    expect(t.send).toHaveBeenCalledTimes(2);
    // After 2 attempts made: the history keeps them and says why the next is not made, and when it will be.
    const [series, attemptsMade, nextRetryAt, reason] = t.attempts.defer.mock.calls[0]!;
    expect(series).toMatchObject({ deliveryId: 'del-c' });
    expect(attemptsMade).toBe(2);
    expect(reason).toMatch(/^circuit open after repeated failures \(last: no answer in time\); not attempted/);
    // The open period (30 s) is shorter than the shortest tier (1 min): the record waits there, and its attempt
    // number stays the one it had (no attempt was made).
    const [tier, next] = t.scheduleRetry.mock.calls[0]!;
    expect(tier).toBe(0);
    expect(next).toMatchObject({ attempt: 3, dueAt: now() + MINUTE, holdUntil: now() + 30_000 });
    expect(nextRetryAt).toEqual(new Date(now() + MINUTE));
    // No failure day, no attempt row, no abandon.
    expect(t.attempts.recordAttempt).toHaveBeenCalledTimes(2);
    expect(t.subscriptions.recordFailureDay).not.toHaveBeenCalled();
    expect(t.metrics.outcome).toHaveBeenLastCalledWith('deferred', undefined);
  });

  it('past the probe time, the next delivery is the probe: its success closes the circuit', async () => {
    const { circuit, advance } = breaker();
    const t = setup({ circuit, results: [timeout, timeout, ok(204), ok(204)] });
    await t.handle(deliveryRecord({ deliveryId: 'del-a' }));
    await t.handle(deliveryRecord({ deliveryId: 'del-b' }));
    const clock = advance(30_000);
    t.setNow(clock);
    await t.handle(deliveryRecord({ deliveryId: 'del-c' }));
    expect(t.send).toHaveBeenCalledTimes(3);
    expect(circuit.state('sub-1')).toBe('closed');
    await t.handle(deliveryRecord({ deliveryId: 'del-d' }));
    expect(t.send).toHaveBeenCalledTimes(4);
  });

  it('a hold that would end past the deadline hops toward the deadline instead', async () => {
    const { circuit, now } = breaker();
    const t = setup({ circuit, results: [timeout, timeout], now: now() });
    await t.handle(deliveryRecord({ deliveryId: 'del-a' }));
    await t.handle(deliveryRecord({ deliveryId: 'del-b' }));
    t.scheduleRetry.mockClear();
    // Queued almost a day ago: 10 s of lifetime left, less than the circuit's 30 s.
    const old = QUEUED_AT + 5 * MINUTE - DAY + 10_000;
    await t.handle(deliveryRecord({ deliveryId: 'del-c', queuedAt: old }));
    const [, next] = t.scheduleRetry.mock.calls[0]!;
    expect(next).toMatchObject({ expiryHop: true });
    expect(next).not.toHaveProperty('holdUntil');
    // No retry will be made: the history shows none, and says the delivery ends at its deadline.
    const [, , nextRetryAt, reason] = t.attempts.defer.mock.calls[0]!;
    expect(nextRetryAt).toBeNull();
    expect(reason).toMatch(
      new RegExp(`; the delivery's lifetime ends first: abandoned at ${new Date(old + DAY).toISOString()}$`),
    );
  });

  it('abandoned, superseded or duplicate records never reach the circuit', async () => {
    const circuit = { enter: vi.fn(() => ({ send: true as const, probe: false })), done: vi.fn() };
    const t = setup({ circuit, subscription: undefined });
    await t.handle(deliveryRecord());
    expect(circuit.enter).not.toHaveBeenCalled();
  });
});

describe('ordering "entity"', () => {
  /** An order whose admission the test sets, logging each call into the handler's log. */
  /** `nexts`: the waiting record an end finds next; `heads`: the first row it finds (bare) otherwise. */
  function order(
    admission: { go: true; unlisted?: true } | { go: false; blocker: string },
    nexts: Record<string, DeliveryRecord> = {},
    heads: Record<string, { seq: number; deliveryId: string }> = {},
  ) {
    const calls: string[] = [];
    const fake: EntityOrder & { calls: string[] } = {
      calls,
      admit: vi.fn(async (record: DeliveryRecord, supersedes: boolean) => {
        calls.push(`admit ${record.deliveryId} ${supersedes}`);
        return admission;
      }),
      ended: vi.fn(async (record: DeliveryRecord) => {
        calls.push(`ended ${record.deliveryId}`);
        const next = nexts[record.deliveryId];
        delete nexts[record.deliveryId];
        const head = next ? { seq: next.orderSeq!, deliveryId: next.deliveryId } : heads[record.deliveryId];
        return { head, next };
      }),
      release: vi.fn(async (record: DeliveryRecord) => {
        calls.push(`release ${record.deliveryId}`);
      }),
    };
    return fake;
  }
  const ordered = (overrides: Partial<DeliveryRecord> = {}) => deliveryRecord({ orderSeq: 17, ...overrides });

  it('sends an admitted delivery, clears the wait note with its first attempt, and ends its turn once acknowledged', async () => {
    const gate = order({ go: true });
    const t = setup({ order: gate });
    await t.handle(ordered());
    expect(t.log).toEqual(['send', 'recordAttempt']);
    expect(gate.calls).toEqual(['admit del-1 false', 'ended del-1']);
    expect(t.attempts.recordAttempt.mock.calls[0]![2]).toMatchObject({ status: 'acknowledged', noted: true });
  });

  it('leaves a delivery that must wait unsent, its record hopping to a check that notes the wait in the history', async () => {
    const gate = order({ go: false, blocker: 'del-0' });
    const now = QUEUED_AT + 10 * MINUTE;
    const t = setup({ order: gate, now });
    await t.handle(ordered());
    expect(t.send).not.toHaveBeenCalled();
    expect(t.log).toEqual(['scheduleRetry']);
    // Waited 10 minutes so far: it checks again in 10, through the longest tier that fits, as a possible duplicate.
    const [tier, check] = t.scheduleRetry.mock.calls[0]!;
    expect(DELAYS[tier]).toBe(8 * MINUTE);
    expect(check).toMatchObject({ attempt: 1, holdUntil: now + 10 * MINUTE, mayBeDuplicate: true, orderSeq: 17 });
    expect(t.metrics.outcome).toHaveBeenCalledWith('waiting', undefined);
    expect(gate.calls).toEqual(['admit del-1 false']);

    // The check comes back and finds it still waiting: now the history says for which delivery.
    const later = setup({ order: order({ go: false, blocker: 'del-0' }), now: now + 10 * MINUTE });
    await later.handle(ordered({ holdUntil: now + 10 * MINUTE }));
    expect(later.log).toEqual(['defer', 'scheduleRetry']);
    expect(later.attempts.defer).toHaveBeenCalledWith(
      SERIES,
      0,
      null,
      'waiting for delivery del-0, of an earlier event of entity po-1 (ordering: entity)',
    );
  });

  it('checks a short wait after 5 minutes', async () => {
    const t = setup({ order: order({ go: false, blocker: 'del-0' }), now: QUEUED_AT + 1000 });
    await t.handle(ordered());
    expect(t.scheduleRetry.mock.calls[0]![1].holdUntil).toBe(QUEUED_AT + 1000 + 5 * MINUTE);
  });

  it('checks a long wait hourly at most, and never past the deadline', async () => {
    const late = setup({ order: order({ go: false, blocker: 'del-0' }), now: QUEUED_AT + 10 * HOUR });
    await late.handle(ordered());
    expect(late.scheduleRetry.mock.calls[0]![1].holdUntil).toBe(QUEUED_AT + 11 * HOUR);
    const last = setup({ order: order({ go: false, blocker: 'del-0' }), now: QUEUED_AT + DAY - 5 * MINUTE });
    await last.handle(ordered());
    expect(last.scheduleRetry.mock.calls[0]![1].holdUntil).toBe(QUEUED_AT + DAY);
  });

  it('ends its turn however it ends: abandoned after its last attempt, superseded, subscription gone', async () => {
    const abandoned = order({ go: true });
    const t1 = setup({ order: abandoned, results: [failed(null)], now: QUEUED_AT + DAY - 10_000, sendTakesMs: 30_000 });
    await t1.handle(ordered({ attempt: 12 }));
    expect(t1.attempts.recordAttempt.mock.calls[0]![2]).toMatchObject({ status: 'abandoned' });
    expect(abandoned.calls).toEqual(['admit del-1 false', 'ended del-1']);

    const superseded = order({ go: true });
    const t2 = setup({
      order: superseded,
      subscription: subscription({ supersedePendingDeliveries: true }),
      latest: { deliveryId: 'del-9' },
    });
    await t2.handle(ordered());
    expect(t2.send).not.toHaveBeenCalled();
    expect(superseded.calls).toEqual(['ended del-1']);

    const deleted = order({ go: true });
    const t3 = setup({ order: deleted, subscription: undefined });
    await t3.handle(ordered());
    expect(deleted.calls).toEqual(['ended del-1']);
  });

  it('keeps its turn while it retries', async () => {
    const gate = order({ go: true });
    const t = setup({ order: gate, results: [failed(503)] });
    await t.handle(ordered());
    expect(t.log).toEqual(['send', 'recordAttempt', 'scheduleRetry']);
    expect(gate.calls).toEqual(['admit del-1 false']);
    expect(t.scheduleRetry.mock.calls[0]![1]).toMatchObject({ attempt: 2, orderSeq: 17 });
  });

  it('ends the turn again for a duplicate of an ended delivery (its end may not have released the next)', async () => {
    const gate = order({ go: true });
    const t = setup({ order: gate, state: { status: 'acknowledged', attemptCount: 1 } });
    await t.handle(ordered({ mayBeDuplicate: true }));
    expect(t.send).not.toHaveBeenCalled();
    expect(gate.calls).toEqual(['ended del-1']);
    // One that was attempted and not ended keeps its turn.
    const retrying = order({ go: true });
    const t2 = setup({ order: retrying, state: { status: 'retrying', attemptCount: 1 } });
    await t2.handle(ordered({ mayBeDuplicate: true }));
    expect(retrying.calls).toEqual([]);
  });

  it('passes supersedePendingDeliveries to the gate, and leaves replays, tests and unordered records out', async () => {
    const gate = order({ go: true });
    const t = setup({ order: gate, subscription: subscription({ supersedePendingDeliveries: true }) });
    await t.handle(ordered());
    expect(gate.calls).toEqual(['admit del-1 true', 'ended del-1']);
    for (const record of [
      ordered({ replayOf: 'del-0' }),
      ordered({ test: true }),
      deliveryRecord(),
      deliveryRecord({ orderSeq: null }),
    ]) {
      const outside = order({ go: false, blocker: 'never' });
      const u = setup({ order: outside });
      await u.handle(record);
      expect(u.send).toHaveBeenCalledTimes(1);
      expect(outside.calls).toEqual([]);
      expect(u.attempts.recordAttempt.mock.calls[0]![2].noted).toBeUndefined();
    }
  });

  it('sends a delivery without a row only if its state says this attempt was not made (a copy sent twice)', async () => {
    // Acknowledged through the other copy: this copy's retry must not reach the receiver after later deliveries.
    const ended = setup({
      order: order({ go: true, unlisted: true }),
      state: { status: 'acknowledged', attemptCount: 1 },
    });
    await ended.handle(ordered({ attempt: 2 }));
    expect(ended.send).not.toHaveBeenCalled();
    const retried = setup({
      order: order({ go: true, unlisted: true }),
      state: { status: 'retrying', attemptCount: 2 },
    });
    await retried.handle(ordered({ attempt: 2 }));
    expect(retried.send).not.toHaveBeenCalled();
    const due = setup({ order: order({ go: true, unlisted: true }), state: { status: 'retrying', attemptCount: 1 } });
    await due.handle(ordered({ attempt: 2 }));
    expect(due.send).toHaveBeenCalledTimes(1);
  });

  it('lets the release of a turn wait for a copy of the same delivery being handled (hopping toward its check), then sends it', async () => {
    let hopped!: () => void;
    const hopping = new Promise<void>((resolve) => (hopped = resolve));
    const gate = order({ go: true });
    const t = setup({
      order: gate,
      state: { status: 'queued', attemptCount: 0 },
      scheduleRetry: async () => hopping,
    });
    const check = t.handle(ordered({ mayBeDuplicate: true, holdUntil: t.now() + 30 * MINUTE }));
    await new Promise((resolve) => setImmediate(resolve));
    const release = t.handle(ordered({ mayBeDuplicate: true }));
    await new Promise((resolve) => setImmediate(resolve));
    expect(t.send).not.toHaveBeenCalled();
    hopped();
    await Promise.all([check, release]);
    expect(t.send).toHaveBeenCalledTimes(1);
    expect(t.metrics.outcome).not.toHaveBeenCalledWith('duplicate', undefined);
  });

  it('sends on the next deliveries of the entity whose turn came, in the same call, rate-paced, without a second look', async () => {
    const nexts: Record<string, DeliveryRecord> = {
      'del-1': ordered({ deliveryId: 'del-2', orderSeq: 18 }),
      'del-2': ordered({ deliveryId: 'del-3', orderSeq: 19 }),
    };
    const gate = order({ go: true }, nexts);
    const paced: string[] = [];
    const t = setup({
      order: gate,
      paceChained: async (subscriptionId) => {
        paced.push(subscriptionId);
      },
    });
    await t.handle(ordered());
    expect(t.sent.map((request) => request.headers['x-webhook-delivery-id'])).toEqual(['del-1', 'del-2', 'del-3']);
    // Its predecessor's end saw it next: neither the gate nor its state is read again.
    expect(gate.calls).toEqual(['admit del-1 false', 'ended del-1', 'ended del-2', 'ended del-3']);
    expect(t.attempts.state).not.toHaveBeenCalled();
    expect(paced).toEqual(['sub-1', 'sub-1']);
  });

  it('checks the next delivery found on the end of a duplicate (a copy of it may have been sent meanwhile)', async () => {
    const nexts: Record<string, DeliveryRecord> = { 'del-1': ordered({ deliveryId: 'del-2', orderSeq: 18 }) };
    const gate = order({ go: true }, nexts);
    const t = setup({ order: gate, state: { status: 'acknowledged', attemptCount: 1 } });
    await t.handle(ordered({ mayBeDuplicate: true }));
    // del-1 is a duplicate (ended); del-2 goes through the state check, which finds it done too.
    expect(t.attempts.state.mock.calls.map(([, id]) => id)).toEqual(['del-1', 'del-2']);
    expect(t.send).not.toHaveBeenCalled();
  });

  it('publishes the next instead once it has sent on as many as it may', async () => {
    const nexts: Record<string, DeliveryRecord> = {};
    for (let index = 1; index <= 20; index += 1)
      nexts[`del-${index}`] = ordered({ deliveryId: `del-${index + 1}`, orderSeq: 17 + index });
    const gate = order({ go: true }, nexts);
    const t = setup({ order: gate, state: { status: 'queued', attemptCount: 0 } });
    await t.handle(ordered());
    expect(t.send).toHaveBeenCalledTimes(17);
    expect(gate.calls.at(-1)).toBe('release del-18');
  });

  /** A receiver the test answers: each delivery's answer waits until the test lets it go. */
  function heldReceiver() {
    const held = new Map<string, () => void>();
    const arrived = new Map<string, Promise<void>>();
    const arrivals = new Map<string, () => void>();
    const arrival = (id: string) => {
      if (!arrived.has(id)) arrived.set(id, new Promise<void>((resolve) => arrivals.set(id, resolve)));
      return arrived.get(id)!;
    };
    return {
      answering: (id: string | undefined) => {
        void arrival(id!);
        arrivals.get(id!)!();
        return new Promise<void>((resolve) => held.set(id!, resolve));
      },
      /** Resolves once the delivery's request reached the receiver. */
      arrival,
      answer: (id: string) => held.get(id)!(),
    };
  }

  it('lets a delivery whose predecessor is being sent here wait for its end, and go without a look when it came next', async () => {
    const receiver = heldReceiver();
    const heads = { 'del-1': { seq: 18, deliveryId: 'del-2' } };
    const gate = order({ go: true }, {}, heads);
    const t = setup({ order: gate, answering: receiver.answering });
    const first = t.handle(ordered());
    await receiver.arrival('del-1');
    const second = t.handle(ordered({ deliveryId: 'del-2', orderSeq: 18 }));
    await new Promise((resolve) => setImmediate(resolve));
    expect(t.sent).toHaveLength(1); // del-2 waits for del-1's answer, without reading the rows
    receiver.answer('del-1');
    await first;
    await receiver.arrival('del-2');
    receiver.answer('del-2');
    await second;
    expect(gate.calls).toEqual(['admit del-1 false', 'ended del-1', 'ended del-2']);
    expect(t.sent.map((request) => request.headers['x-webhook-delivery-id'])).toEqual(['del-1', 'del-2']);
    expect(t.metrics.outcome).not.toHaveBeenCalledWith('waiting', undefined);
  });

  it('sends the waiting delivery to the gate when its predecessor is retried, or its end found another first', async () => {
    for (const [result, heads] of [
      [failed(500), {}],
      [ok(200), { 'del-1': { seq: 17.5, deliveryId: 'del-1.5' } }],
    ] as const) {
      const receiver = heldReceiver();
      const gate = order({ go: true }, {}, { ...heads });
      const t = setup({ order: gate, answering: receiver.answering, results: [result, ok(200)] });
      const first = t.handle(ordered());
      await receiver.arrival('del-1');
      const second = t.handle(ordered({ deliveryId: 'del-2', orderSeq: 18 }));
      receiver.answer('del-1');
      await first;
      await receiver.arrival('del-2'); // the fake gate admits it
      receiver.answer('del-2');
      await second;
      expect(gate.calls.filter((call) => call.startsWith('admit'))).toEqual(['admit del-1 false', 'admit del-2 false']);
    }
  });

  it("sends without a look a delivery whose entity's previous event had its delivery end here, and only such a one", async () => {
    const gate = order({ go: true });
    const t = setup({ order: gate });
    await t.handle(ordered());
    await t.handle(ordered({ deliveryId: 'del-2', orderSeq: 18, orderPrev: 17 }));
    await t.handle(ordered({ deliveryId: 'del-3', orderSeq: 19, orderPrev: 18 }));
    // Its router names another previous event (one whose delivery did not end here): the gate looks.
    await t.handle(ordered({ deliveryId: 'del-5', orderSeq: 21, orderPrev: 20 }));
    // A possible duplicate always looks.
    await t.handle(ordered({ deliveryId: 'del-6', orderSeq: 22, orderPrev: 21, mayBeDuplicate: true }));
    expect(gate.calls.filter((call) => call.startsWith('admit'))).toEqual([
      'admit del-1 false',
      'admit del-5 false',
      'admit del-6 false',
    ]);
    expect(t.sent).toHaveLength(5);
  });

  it('lets only a first record wait here: a check or a possible duplicate looks at the rows itself', async () => {
    const receiver = heldReceiver();
    const gate = order({ go: true });
    const t = setup({ order: gate, answering: receiver.answering, state: { status: 'queued', attemptCount: 0 } });
    const first = t.handle(ordered());
    await receiver.arrival('del-1');
    const copy = t.handle(ordered({ deliveryId: 'del-2', orderSeq: 18, mayBeDuplicate: true }));
    await receiver.arrival('del-2');
    expect(gate.calls).toEqual(['admit del-1 false', 'admit del-2 false']);
    receiver.answer('del-1');
    receiver.answer('del-2');
    await Promise.all([first, copy]);
  });

  it("sends a waiting delivery's check on toward its time without reading anything", async () => {
    const gate = order({ go: true });
    const now = QUEUED_AT + 10 * MINUTE;
    const t = setup({ order: gate, now, state: { status: 'queued', attemptCount: 0 } });
    await t.handle(ordered({ mayBeDuplicate: true, holdUntil: now + 3 * MINUTE }));
    expect(t.log).toEqual(['scheduleRetry']);
    expect(t.scheduleRetry.mock.calls[0]![1]).toMatchObject({ holdUntil: now + 3 * MINUTE, mayBeDuplicate: true });
    expect(DELAYS[t.scheduleRetry.mock.calls[0]![0]]).toBe(2 * MINUTE);
    expect(gate.calls).toEqual([]);
  });
});

describe('authenticationMode StandardWebhooks', () => {
  const now = Date.now();
  const record = () => deliveryRecord({ queuedAt: now - MINUTE, signature: null });

  it('signs each attempt when it is sent: the official library verifies it, with the spec headers beside', async () => {
    const secret = generateStandardSecret();
    const t = setup({
      now,
      subscription: subscription({ authenticationMode: 'StandardWebhooks', secrets: { hmacSecret: secret } }),
    });
    await t.handle(record());
    const { headers, body } = t.sent[0]!;
    expect(headers).toMatchObject({
      'webhook-id': 'evt-1',
      'webhook-timestamp': String(Math.floor(now / 1000)),
      'x-webhook-event-id': 'evt-1',
      'x-webhook-delivery-id': 'del-1',
    });
    expect(headers['webhook-signature']).toMatch(/^v1,[A-Za-z0-9+/]+=*$/);
    expect(headers).not.toHaveProperty('x-webhook-signature');
    expect(new Webhook(secret).verify(body, headers)).toEqual(JSON.parse(ENVELOPE.toString()));
  });

  it("signs with the previous secret too within a rotation's window, and with the new one alone after it", async () => {
    const [current, previous] = [generateStandardSecret(), generateStandardSecret()];
    const secrets = { hmacSecret: current, previousHmacSecret: previous, previousHmacSecretUntil: now + HOUR };
    for (const [at, signatures] of [
      [now, 2],
      [now + 2 * HOUR, 1],
    ] as const) {
      const t = setup({ now: at, subscription: subscription({ authenticationMode: 'StandardWebhooks', secrets }) });
      await t.handle(deliveryRecord({ queuedAt: at - MINUTE, signature: null }));
      const { headers } = t.sent[0]!;
      expect(headers['webhook-signature']!.split(' ')).toHaveLength(signatures);
      if (at === now) expect(() => new Webhook(previous).verify(t.sent[0]!.body, headers)).not.toThrow();
    }
  });
});
