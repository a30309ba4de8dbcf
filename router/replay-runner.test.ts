import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import type { Delivery, StoredEvent } from '../core/deliveries/delivery.ts';
import type { DeliveryRecord } from '../core/deliveries/delivery-record.ts';
import { buildEnvelope, signBody } from '../core/envelope.ts';
import { replayIdFor, type ReplayFilters } from '../core/replay-jobs/replay-job.ts';
import { FakeHistory, FakeLedger, runningJob } from '../test/support/replay-fakes.ts';
import { ReplayRunner, type ReplayRunnerDeps } from './replay-runner.ts';

const T0 = Date.UTC(2026, 2, 2, 12, 0);
const TENANT = 'tenant-a';

/** Virtual time: sleeps are timers fired in order by `until`, after letting every pending promise settle. */
class FakeTime {
  now = T0;
  private timers: { at: number; seq: number; fire: () => void }[] = [];
  private seq = 0;

  sleep = (ms: number, signal: AbortSignal) =>
    new Promise<void>((resolve, reject) => {
      if (signal.aborted) return reject(signal.reason as Error);
      const onAbort = () => {
        this.timers = this.timers.filter((entry) => entry !== timer);
        reject(signal.reason as Error);
      };
      const timer = {
        at: this.now + ms,
        seq: (this.seq += 1),
        fire: () => {
          signal.removeEventListener('abort', onAbort);
          resolve();
        },
      };
      this.timers.push(timer);
      signal.addEventListener('abort', onAbort, { once: true });
    });

  /** Runs timers in time order until `done()` holds (checked whenever everything pending has settled). */
  async until(done: () => boolean, limitMs = 600_000): Promise<void> {
    for (;;) {
      await settle();
      if (done()) return;
      this.timers.sort((a, b) => a.at - b.at || a.seq - b.seq);
      const next = this.timers.shift();
      if (!next || next.at > T0 + limitMs) throw new Error(`nothing left to run at +${this.now - T0} ms`);
      this.now = Math.max(this.now, next.at);
      next.fire();
    }
  }
}

async function settle(): Promise<void> {
  for (let round = 0; round < 20; round += 1) await new Promise((resolve) => setImmediate(resolve));
}

const SECRET = 'c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LXNlY3I=';

/** A world of deliveries with their events and subscriptions, and the runners' fakes around it. */
function world() {
  const time = new FakeTime();
  const history = new FakeHistory();
  const ledger = new FakeLedger();
  const events = new Map<string, StoredEvent>();
  const subscriptions = new Set(['sub-1', 'sub-2']);
  const published: DeliveryRecord[][] = [];
  const stored: Delivery[] = [];
  let serial = 0;

  /** An ended delivery of `subscriptionId` queued `ageMs` before T0, its event stored, signed like the router does. */
  const original = (fields: Partial<Delivery> & { ageMs: number; keepEvent?: boolean }): Delivery => {
    serial += 1;
    const { ageMs, keepEvent = true, ...rest } = fields;
    const eventId = `evt-${serial}`;
    const subscriptionId = rest.subscriptionId ?? 'sub-1';
    const event: StoredEvent = {
      tenantId: TENANT,
      eventId,
      eventType: 'purchaseOrder.validated',
      occurredAt: new Date(T0 - ageMs - 10).toISOString(),
      entityId: `po-${serial}`,
      reference: `PO-${serial}`,
      resourceUrl: `/CorePurchase/REST/PurchaseOrders/po-${serial}`,
      payload: Buffer.from(`{"id":"po-${serial}",  "note":"caf\\u00e9"}`),
    };
    if (keepEvent) events.set(eventId, event);
    const envelope = buildEnvelope({ ...event, subscriptionId }, event.payload, 204_800);
    const delivery: Delivery = {
      tenantId: TENANT,
      id: `del-${String(serial).padStart(4, '0')}`,
      eventId,
      eventType: event.eventType,
      subscriptionId,
      entityId: event.entityId,
      status: 'abandoned',
      attemptCount: 4,
      lastStatusCode: 500,
      lastErrorMessage: 'HTTP 500',
      nextRetryAt: null,
      queuedAt: new Date(T0 - ageMs),
      occurredAt: event.occurredAt,
      replayOf: null,
      signature: signBody(SECRET, envelope),
      ...rest,
    };
    history.add(delivery);
    return delivery;
  };

  const publishAll = async (batch: DeliveryRecord[]) => {
    published.push(batch);
  };
  const storeRow = async (delivery: Delivery) => {
    stored.push(delivery);
    history.add(delivery);
  };
  const runner = (
    owner: string,
    settings: Partial<ReplayRunnerDeps['settings']> = {},
    { publish = publishAll, store = storeRow }: Partial<Pick<ReplayRunnerDeps, 'publish' | 'store'>> = {},
  ) =>
    new ReplayRunner({
      jobs: ledger,
      history,
      sources: {
        getEvent: async (_tenantId, eventId) => events.get(eventId),
        subscriptionExists: async (_tenantId, id) => subscriptions.has(id),
      },
      publish,
      store,
      owner,
      settings: {
        ratePerJob: 5,
        ratePerProcess: 1_000,
        maxJobs: 4,
        leaseMs: 3_000,
        pollMs: 500,
        historyRetentionMs: 30 * 86_400_000,
        ...settings,
      },
      logger: pino({ level: 'silent' }),
      now: () => time.now,
      sleep: time.sleep,
    });

  const job = (id: string, filters: ReplayFilters) => {
    ledger.create(runningJob(id, TENANT, T0, filters));
    return id;
  };

  return { time, history, ledger, events, subscriptions, published, stored, original, runner, job };
}

const records = (published: DeliveryRecord[][]) => published.flat();

describe('replay runner', () => {
  it('replays every matching ended delivery once, exactly as a single replay would, paced, then completes', async () => {
    const w = world();
    const originals = Array.from({ length: 12 }, (_, index) => w.original({ ageMs: 60_000 + index * 1_000 }));
    const pending = w.original({ ageMs: 5_000, status: 'retrying' });
    const expired = w.original({ ageMs: 6_000, keepEvent: false });
    const acknowledged = w.original({ ageMs: 7_000, status: 'acknowledged' });
    w.original({ ageMs: 8_000, subscriptionId: 'sub-2' }); // another subscription: not matched
    const jobId = w.job('job-1', { subscriptionId: 'sub-1' });

    const stop = new AbortController();
    const running = w.runner('router-a').run(stop.signal);
    await w.time.until(() => w.ledger.job(jobId).status !== 'running');
    const elapsed = w.time.now - T0;
    stop.abort();
    await w.time.until(() => true);
    await running;

    const job = w.ledger.job(jobId);
    expect(job.status).toBe('completed');
    expect(job.progress).toEqual({ matched: 15, queued: 13, skipped: 2 });
    const sent = records(w.published);
    const replayed = [...originals, acknowledged];
    expect(sent.map((record) => record.replayOf).sort()).toEqual(replayed.map((d) => d.id).sort());
    expect(sent.map((record) => record.replayOf)).not.toContain(pending.id);
    expect(sent.map((record) => record.replayOf)).not.toContain(expired.id);
    for (const record of sent) {
      const source = replayed.find((d) => d.id === record.replayOf)!;
      const event = w.events.get(source.eventId)!;
      expect(record).toMatchObject({
        deliveryId: replayIdFor(jobId, source.id),
        tenantId: TENANT,
        subscriptionId: 'sub-1',
        eventId: source.eventId,
        attempt: 1,
        dueAt: 0,
        signature: source.signature,
        replayJobId: jobId,
        mayBeDuplicate: true,
      });
      expect(record.deliveryId).not.toBe(source.id);
      expect(record.envelope.equals(buildEnvelope({ ...event, subscriptionId: 'sub-1' }, event.payload, 204_800))).toBe(
        true,
      );
      expect(record.queuedAt).toBeGreaterThanOrEqual(T0);
    }
    // Published first, stored second: one queued history row per replay.
    expect(w.stored.map((row) => row.id).sort()).toEqual(sent.map((record) => record.deliveryId).sort());
    expect(w.stored.every((row) => row.status === 'queued' && row.replayOf !== null)).toBe(true);
    // Paced: pages of at most REPLAY_RATE (5), 13 replays at 5/s after a first burst of 5 take at least 1.6 s.
    for (const page of w.published) expect(page.length).toBeLessThanOrEqual(5);
    expect(elapsed).toBeGreaterThanOrEqual(1_600);
    expect(w.ledger.activeRows.has(jobId)).toBe(false);
  });

  it("never matches a replay the job made itself, nor deliveries queued after the job's creation", async () => {
    const w = world();
    const first = w.original({ ageMs: 10_000 });
    // The job's own replay of `first`, queued before the job's creation time by a router whose clock is behind.
    w.original({ ageMs: 2_000, id: replayIdFor('job-1', first.id), replayOf: first.id });
    w.original({ ageMs: -5_000 }); // queued after the job was created
    const jobId = w.job('job-1', { status: 'abandoned' });
    const stop = new AbortController();
    const running = w.runner('router-a').run(stop.signal);
    await w.time.until(() => w.ledger.job(jobId).status === 'completed');
    stop.abort();
    await w.time.until(() => true);
    await running;
    expect(records(w.published).map((record) => record.replayOf)).toEqual([first.id]);
    expect(w.ledger.job(jobId).progress).toEqual({ matched: 1, queued: 1, skipped: 0 });
  });

  it.each([
    ['after storing its rows', 'store', 'the same'],
    ['before any of its rows was stored', 'publish', 'a fresh'],
  ] as const)(
    'resumes a page its runner died in %s with the same replays (%s queue time), counting them once',
    async (_when, crashIn, queueTime) => {
      const w = world();
      for (let index = 0; index < 12; index += 1) w.original({ ageMs: 60_000 + index * 1_000 });
      const jobId = w.job('job-1', { subscriptionId: 'sub-1' });

      // Router A dies in its second page (the step never returns, it renews nothing any more).
      let hang: (() => void) | undefined;
      const crashA = new AbortController();
      const die = async () => {
        crashA.abort();
        await new Promise<void>((resolve) => (hang = resolve));
      };
      const a = w.runner(
        'router-a',
        {},
        {
          publish: async (batch) => {
            w.published.push(batch);
            if (crashIn === 'publish' && w.published.length === 2) await die();
          },
          store: async (row) => {
            w.stored.push(row);
            w.history.add(row);
            if (crashIn === 'store' && w.stored.length === 10) await die();
          },
        },
      );
      void a.run(crashA.signal);
      await w.time.until(() => hang !== undefined);
      const interrupted = w.published[1]!;
      expect(w.ledger.job(jobId).pageQueuedAt).toBe(interrupted[0]!.queuedAt);
      expect(w.ledger.job(jobId).progress.queued).toBe(5);

      // Router B takes the job once A's lease has expired, and resumes the interrupted page.
      const stopB = new AbortController();
      const b = w.runner('router-b').run(stopB.signal);
      await w.time.until(() => w.ledger.job(jobId).status === 'completed');
      const resumed = w.published[2]!;
      expect(resumed.map((record) => record.deliveryId)).toEqual(interrupted.map((record) => record.deliveryId));
      expect(resumed.every((record) => record.mayBeDuplicate)).toBe(true);
      const resumedAt = resumed.map((record) => record.queuedAt);
      if (queueTime === 'the same') expect(resumedAt).toEqual(interrupted.map((record) => record.queuedAt));
      else for (const at of resumedAt) expect(at).toBeGreaterThanOrEqual(T0 + 3_000);
      expect(w.time.now - T0).toBeGreaterThanOrEqual(3_000); // not before A's lease expired

      // A wakes up late: its writes are refused (the lease moved on), so nothing is counted twice.
      hang!();
      await w.time.until(() => true);
      const job = w.ledger.job(jobId);
      expect(job.progress).toEqual({ matched: 12, queued: 12, skipped: 0 });
      const ids = records(w.published).map((record) => record.deliveryId);
      expect(new Set(ids).size).toBe(12);
      expect(ids.length).toBe(12 + interrupted.length);
      // History rows by series and queue time: a resumed page rewrites the rows it finds with their own queue time.
      // Only a runner that stalled rather than died, writing the rows of its page after losing its lease, adds
      // entries under the page's first queue time (the same series, sent once, listed twice).
      const rows = new Set(w.stored.map((row) => `${row.id}@${row.queuedAt.getTime()}`));
      expect(rows.size).toBe(queueTime === 'the same' ? 12 : 12 + interrupted.length);
      stopB.abort();
      await w.time.until(() => true);
      await b;
    },
  );

  it('stops within one page when the job is cancelled', async () => {
    const w = world();
    for (let index = 0; index < 30; index += 1) w.original({ ageMs: 60_000 + index * 1_000 });
    const jobId = w.job('job-1', { status: 'abandoned' });
    const stop = new AbortController();
    const runner = w.runner('router-a');
    const running = runner.run(stop.signal);
    await w.time.until(() => w.ledger.job(jobId).progress.queued >= 10);
    w.ledger.cancel(jobId);
    const atCancel = records(w.published).length;
    await w.time.until(() => w.time.now > T0 + 30_000, 60_000).catch(() => undefined);
    expect(records(w.published).length).toBeLessThanOrEqual(atCancel + 5);
    expect(w.ledger.job(jobId).status).toBe('cancelled');
    expect(w.ledger.job(jobId).progress.queued).toBeLessThan(30);
    stop.abort();
    await w.time.until(() => true);
    await running;
  });

  it('never runs one job in two runners at once', async () => {
    const w = world();
    for (let index = 0; index < 20; index += 1) w.original({ ageMs: 60_000 + index * 1_000 });
    const jobId = w.job('job-1', { subscriptionId: 'sub-1' });
    const stop = new AbortController();
    const a = w.runner('router-a').run(stop.signal);
    const b = w.runner('router-b').run(stop.signal);
    await w.time.until(() => w.ledger.job(jobId).status === 'completed');
    const ids = records(w.published).map((record) => record.deliveryId);
    expect(ids.length).toBe(20);
    expect(new Set(ids).size).toBe(20);
    // Both may try at once: the compare-and-set lets one take it.
    expect(w.ledger.calls.filter((call) => /^take router/.test(call))).toHaveLength(1);
    stop.abort();
    await w.time.until(() => true);
    await Promise.all([a, b]);
  });

  it('gives its lease up when stopped, so another runner resumes at once', async () => {
    const w = world();
    for (let index = 0; index < 20; index += 1) w.original({ ageMs: 60_000 + index * 1_000 });
    const jobId = w.job('job-1', { subscriptionId: 'sub-1' });
    const stopA = new AbortController();
    const a = w.runner('router-a', { leaseMs: 600_000 }).run(stopA.signal);
    await w.time.until(() => w.ledger.job(jobId).progress.queued >= 5);
    stopA.abort();
    await w.time.until(() => true);
    await a;
    expect(w.ledger.job(jobId).lease.owner).toBeNull();
    const stopB = new AbortController();
    const startedB = w.time.now;
    const b = w.runner('router-b', { leaseMs: 600_000 }).run(stopB.signal);
    await w.time.until(() => w.ledger.job(jobId).status === 'completed');
    expect(w.time.now - startedB).toBeLessThan(10_000);
    expect(new Set(records(w.published).map((record) => record.deliveryId)).size).toBe(20);
    stopB.abort();
    await w.time.until(() => true);
    await b;
  });

  it('fails a job whose page keeps failing, with the error', async () => {
    const w = world();
    w.original({ ageMs: 60_000 });
    const jobId = w.job('job-1', { subscriptionId: 'sub-1' });
    w.history.getMany = async () => {
      throw new Error('row unreadable');
    };
    const stop = new AbortController();
    const running = w.runner('router-a').run(stop.signal);
    await w.time.until(() => w.ledger.job(jobId).status !== 'running');
    expect(w.ledger.job(jobId)).toMatchObject({ status: 'failed', error: 'row unreadable' });
    expect(w.ledger.activeRows.has(jobId)).toBe(true); // the fake keeps it; the store removes it (integration test)
    stop.abort();
    await w.time.until(() => true);
    await running;
  });

  it('paces all its jobs together to REPLAY_PROCESS_RATE', async () => {
    const w = world();
    for (let index = 0; index < 20; index += 1) {
      w.original({ ageMs: 60_000 + index * 1_000, subscriptionId: index % 2 === 0 ? 'sub-1' : 'sub-2' });
    }
    const jobs = [w.job('job-1', { subscriptionId: 'sub-1' }), w.job('job-2', { subscriptionId: 'sub-2' })];
    const stop = new AbortController();
    const running = w.runner('router-a', { ratePerJob: 5, ratePerProcess: 5 }).run(stop.signal);
    await w.time.until(() => jobs.every((id) => w.ledger.job(id).status === 'completed'));
    // 20 replays at 5/s in all (a first burst of 5): at least 3 s, where each job alone would take 1 s.
    expect(w.time.now - T0).toBeGreaterThanOrEqual(3_000);
    stop.abort();
    await w.time.until(() => true);
    await running;
  });
});
