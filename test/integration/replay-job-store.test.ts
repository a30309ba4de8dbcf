// Contract of the replay job ledger (what a replay runner relies on), run against the Cassandra store and the unit
// tests' fake: a lease is taken by compare-and-set, every later write holds only under the current lease of a running
// job, and ending a job takes it off the active list. Then what only the store does: pages, tenants, outcome counters.
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectCassandra, type CassandraClient } from '../../core/cassandra.ts';
import { loadConfig } from '../../core/config.ts';
import { newTimeOrderedId } from '../../core/ids.ts';
import type { ReplayJob } from '../../core/replay-jobs/replay-job.ts';
import { ReplayJobStore } from '../../core/replay-jobs/replay-job-store.ts';
import type { ReplayJobLedger } from '../../router/replay-runner.ts';
import { FakeLedger, runningJob } from '../support/replay-fakes.ts';
import { testEnv } from '../support/harness.ts';

interface Subject {
  ledger: ReplayJobLedger;
  create(job: ReplayJob): Promise<void>;
  cancel(job: ReplayJob): Promise<void>;
}

let db: CassandraClient;
let store: ReplayJobStore;

beforeAll(async () => {
  const config = loadConfig(testEnv());
  db = await connectCassandra(config);
  store = new ReplayJobStore(db, config.webhook.historyRetentionMs);
});
afterAll(() => db?.shutdown());

const subjects: [string, () => Subject][] = [
  [
    'ReplayJobStore',
    () => ({
      ledger: store,
      create: (job) => store.create(job),
      cancel: async (job) => void (await store.cancel(job.tenantId, job.id, Date.now())),
    }),
  ],
  [
    'FakeLedger',
    () => {
      const fake = new FakeLedger();
      return {
        ledger: fake,
        create: async (job) => fake.create(job),
        cancel: async (job) => fake.cancel(job.id),
      };
    },
  ],
];

const newJob = (filters: ReplayJob['filters'] = { status: 'abandoned' }) =>
  runningJob(newTimeOrderedId(), `tenant-${randomUUID().slice(0, 8)}`, Date.now(), filters);

describe.each(subjects)('replay job ledger contract: %s', (_name, make) => {
  it('lists a new job as active and reads it back as created', async () => {
    const subject = make();
    const job = newJob({ subscriptionId: 'sub-1', eventTypes: ['purchaseOrder.*'], from: 1_000, to: 2_000 });
    await subject.create(job);
    expect(await subject.ledger.get(job.tenantId, job.id, true)).toMatchObject({
      id: job.id,
      status: 'running',
      filters: job.filters,
      createdAt: job.createdAt,
      progress: { matched: 0, queued: 0, skipped: 0 },
      cursor: null,
      pageQueuedAt: null,
      lease: { owner: null, version: 0 },
    });
    expect(await subject.ledger.active()).toContainEqual({
      tenantId: job.tenantId,
      jobId: job.id,
      createdAt: job.createdAt,
    });
  });

  it('gives a lease to one taker: a take from a stale read is refused', async () => {
    const subject = make();
    const job = newJob();
    await subject.create(job);
    const lease = await subject.ledger.takeLease(job, 'router-a', Date.now() + 30_000);
    expect(lease).toEqual({ tenantId: job.tenantId, jobId: job.id, version: 1 });
    expect(await subject.ledger.takeLease(job, 'router-b', Date.now() + 30_000)).toBeUndefined();
    const read = await subject.ledger.get(job.tenantId, job.id, true);
    expect(read?.lease).toMatchObject({ owner: 'router-a', version: 1 });
  });

  it('moves a job only under its current lease: pages, cursor and counts; a taken-over lease writes nothing', async () => {
    const subject = make();
    const job = newJob();
    await subject.create(job);
    const a = (await subject.ledger.takeLease(job, 'router-a', Date.now() + 30_000))!;
    expect(await subject.ledger.renewLease(a, Date.now() + 60_000)).toBeUndefined();
    const queuedAt = Date.now();
    expect(await subject.ledger.startPage(a, queuedAt, Date.now())).toBeUndefined();
    expect((await subject.ledger.get(job.tenantId, job.id, true))?.pageQueuedAt).toBe(queuedAt);
    const progress = { matched: 7, queued: 5, skipped: 2 };
    expect(await subject.ledger.commitPage(a, { cursor: 'c1', progress, done: false }, Date.now())).toBeUndefined();
    const committed = (await subject.ledger.get(job.tenantId, job.id, true))!;
    expect(committed).toMatchObject({ cursor: 'c1', pageQueuedAt: null, progress, status: 'running' });

    // Router B takes the job over (A's lease expired, say): from then on A's writes are refused.
    const b = (await subject.ledger.takeLease(committed, 'router-b', Date.now() + 30_000))!;
    expect(b.version).toBe(2);
    expect(await subject.ledger.renewLease(a, Date.now() + 60_000)).toMatch(/taken over/);
    expect(await subject.ledger.startPage(a, Date.now(), Date.now())).toMatch(/taken over/);
    const stale = { cursor: 'c-stale', progress: { matched: 99, queued: 99, skipped: 0 }, done: true };
    expect(await subject.ledger.commitPage(a, stale, Date.now())).toMatch(/taken over/);
    expect(await subject.ledger.releaseLease(a)).toMatch(/taken over/);
    expect(await subject.ledger.get(job.tenantId, job.id, true)).toMatchObject({ cursor: 'c1', progress });

    const done = { cursor: null, progress: { matched: 9, queued: 7, skipped: 2 }, done: true };
    expect(await subject.ledger.commitPage(b, done, Date.now())).toBeUndefined();
    expect(await subject.ledger.get(job.tenantId, job.id, true)).toMatchObject({
      status: 'completed',
      progress: done.progress,
      cursor: null,
    });
    expect((await subject.ledger.active()).map((entry) => entry.jobId)).not.toContain(job.id);
    // A completed job takes no lease and no writes.
    expect(await subject.ledger.takeLease({ ...job, lease: { ...job.lease, version: 2 } }, 'x', 0)).toBeUndefined();
    expect(await subject.ledger.renewLease(b, Date.now())).toMatch(/completed/);
  });

  it('refuses every write of the lease holder once the job is cancelled', async () => {
    const subject = make();
    const job = newJob();
    await subject.create(job);
    const lease = (await subject.ledger.takeLease(job, 'router-a', Date.now() + 30_000))!;
    await subject.cancel(job);
    expect(await subject.ledger.renewLease(lease, Date.now())).toMatch(/cancelled/);
    expect(await subject.ledger.startPage(lease, Date.now(), Date.now())).toMatch(/cancelled/);
    const page = { cursor: 'c', progress: { matched: 1, queued: 1, skipped: 0 }, done: true };
    expect(await subject.ledger.commitPage(lease, page, Date.now())).toMatch(/cancelled/);
    expect(await subject.ledger.get(job.tenantId, job.id, true)).toMatchObject({
      status: 'cancelled',
      progress: { matched: 0, queued: 0, skipped: 0 },
    });
  });

  it('records why a job failed', async () => {
    const subject = make();
    const job = newJob();
    await subject.create(job);
    const lease = (await subject.ledger.takeLease(job, 'router-a', Date.now() + 30_000))!;
    expect(await subject.ledger.fail(lease, 'row unreadable', Date.now())).toBeUndefined();
    expect(await subject.ledger.get(job.tenantId, job.id, true)).toMatchObject({
      status: 'failed',
      error: 'row unreadable',
    });
  });
});

describe('ReplayJobStore', () => {
  it('cancels a running job once, answering the status of one already ended, and nothing for an unknown one', async () => {
    const job = newJob();
    await store.create(job);
    expect(await store.cancel(job.tenantId, job.id, Date.now())).toEqual({ cancelled: true, status: 'cancelled' });
    expect((await store.active()).map((entry) => entry.jobId)).not.toContain(job.id);
    expect(await store.cancel(job.tenantId, job.id, Date.now())).toEqual({ cancelled: false, status: 'cancelled' });
    expect(await store.cancel(job.tenantId, newTimeOrderedId(), Date.now())).toBeUndefined();
    expect(await store.cancel('another-tenant', job.id, Date.now())).toBeUndefined();
    expect((await store.get(job.tenantId, job.id))?.finishedAt).toEqual(expect.any(Number));
  });

  it("pages a tenant's jobs newest first, never another tenant's, with their outcome counts", async () => {
    const tenantId = `tenant-${randomUUID().slice(0, 8)}`;
    const jobs = [0, 1, 2, 3, 4].map((age) => runningJob(newTimeOrderedId(Date.now() - age * 1_000), tenantId, 0, {}));
    for (const job of jobs) await store.create(job);
    await store.create(newJob());
    await store.countOutcome(tenantId, jobs[1]!.id, 'delivered');
    await store.countOutcome(tenantId, jobs[1]!.id, 'delivered');
    await store.countOutcome(tenantId, jobs[1]!.id, 'failed');
    const seen: ReplayJob[] = [];
    let cursor: string | undefined;
    do {
      const page = await store.page(tenantId, 2, cursor);
      expect(page.items.length).toBeLessThanOrEqual(2);
      seen.push(...page.items);
      cursor = page.nextCursor ?? undefined;
    } while (cursor !== undefined);
    expect(seen.map((job) => job.id)).toEqual(jobs.map((job) => job.id));
    expect(seen[1]!.outcomes).toEqual({ delivered: 2, failed: 1 });
    expect(seen[0]!.outcomes).toEqual({ delivered: 0, failed: 0 });
    expect(await store.get('another-tenant', jobs[0]!.id)).toBeUndefined();
    expect((await store.get(tenantId, jobs[1]!.id))?.outcomes).toEqual({ delivered: 2, failed: 1 });
  });
});
