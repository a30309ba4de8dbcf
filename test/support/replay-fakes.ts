// In-memory stand-ins for the replay runner's unit tests: the history (index tables and delivery rows) and the job
// ledger with the store's fencing rules (every write but take holds only for the job's current lease version).
import type { Delivery } from '../../core/deliveries/delivery.ts';
import { HOUR } from '../../core/deliveries/delivery-store.ts';
import type { ReplayJob, ReplayProgress } from '../../core/replay-jobs/replay-job.ts';
import type { ActiveJob, Fenced, LeaseRef } from '../../core/replay-jobs/replay-job-store.ts';
import type { ReplayJobLedger } from '../../router/replay-runner.ts';
import type { ScanReader } from '../../router/replay-scan.ts';

/** The history of one or more tenants, read through the same index shapes as the Cassandra store. */
export class FakeHistory implements ScanReader {
  readonly rows = new Map<string, Delivery>();
  /** Index queries made, for tests of the scan's reads. */
  readonly queries: { table: string; hour: number; limit: number }[] = [];

  add(...deliveries: Delivery[]): void {
    for (const delivery of deliveries) this.rows.set(`${delivery.tenantId}\u0000${delivery.id}`, delivery);
  }

  async indexPage(
    index: { table: 'tenant' | 'subscription' | 'eventType'; tenantId: string; key?: string },
    hour: number,
    before: { queuedAt: Date; id: string } | undefined,
    limit: number,
  ) {
    this.queries.push({ table: index.table, hour, limit });
    return [...this.rows.values()]
      .filter(
        (delivery) =>
          delivery.tenantId === index.tenantId &&
          Math.floor(delivery.queuedAt.getTime() / HOUR) === hour &&
          (index.table !== 'subscription' || delivery.subscriptionId === index.key) &&
          (index.table !== 'eventType' || delivery.eventType === index.key) &&
          (before === undefined || compare(delivery, before) < 0),
      )
      .sort((a, b) => -compare(a, { queuedAt: b.queuedAt, id: b.id }))
      .slice(0, limit)
      .map((delivery) => ({ queuedAt: delivery.queuedAt, id: delivery.id }));
  }

  async getMany(tenantId: string, ids: string[]) {
    return ids.map((id) => this.rows.get(`${tenantId}\u0000${id}`));
  }
}

/** (queuedAt, id) order, the index tables' clustering order reversed. */
function compare(delivery: { queuedAt: Date; id: string }, other: { queuedAt: Date; id: string }): number {
  const byTime = delivery.queuedAt.getTime() - other.queuedAt.getTime();
  if (byTime !== 0) return byTime;
  return delivery.id < other.id ? -1 : delivery.id > other.id ? 1 : 0;
}

/** The job ledger in memory, fenced like ReplayJobStore; `calls` records every write in order. */
export class FakeLedger implements ReplayJobLedger {
  readonly jobs = new Map<string, ReplayJob>();
  readonly activeRows = new Map<string, ActiveJob>();
  readonly calls: string[] = [];
  /** Makes the next write of this kind throw once (a store hiccup). */
  failNext: string | undefined;

  create(job: ReplayJob): void {
    this.jobs.set(job.id, structuredClone(job));
    this.activeRows.set(job.id, { tenantId: job.tenantId, jobId: job.id, createdAt: job.createdAt });
  }

  job(id: string): ReplayJob {
    return this.jobs.get(id)!;
  }

  cancel(id: string): void {
    const job = this.job(id);
    if (job.status === 'running') job.status = 'cancelled';
  }

  async active() {
    return [...this.activeRows.values()];
  }

  async get(_tenantId: string, id: string) {
    const job = this.jobs.get(id);
    return job ? structuredClone(job) : undefined;
  }

  async removeActive(_tenantId: string, jobId: string) {
    this.activeRows.delete(jobId);
  }

  async takeLease(job: ReplayJob, owner: string, expiresAt: number): Promise<LeaseRef | undefined> {
    const stored = this.job(job.id);
    if (stored.status !== 'running' || stored.lease.version !== job.lease.version) {
      this.calls.push(`take refused ${owner}`);
      return undefined;
    }
    this.calls.push(`take ${owner}`);
    stored.lease = { owner, expiresAt, version: job.lease.version + 1 };
    return { tenantId: job.tenantId, jobId: job.id, version: stored.lease.version };
  }

  async renewLease(lease: LeaseRef, expiresAt: number) {
    return this.fenced('renew', lease, (job) => (job.lease.expiresAt = expiresAt));
  }

  async releaseLease(lease: LeaseRef) {
    return this.fenced(
      'release',
      lease,
      (job) => {
        job.lease.owner = null;
        job.lease.expiresAt = 0;
      },
      false,
    );
  }

  async startPage(lease: LeaseRef, queuedAt: number) {
    return this.fenced('start', lease, (job) => (job.pageQueuedAt = queuedAt));
  }

  async commitPage(lease: LeaseRef, page: { cursor: string | null; progress: ReplayProgress; done: boolean }) {
    const fenced = this.fenced('commit', lease, (job) => {
      Object.assign(job, { cursor: page.cursor, pageQueuedAt: null, progress: { ...page.progress } });
      if (page.done) job.status = 'completed';
    });
    if (fenced === undefined && page.done) this.activeRows.delete(lease.jobId);
    return fenced;
  }

  async fail(lease: LeaseRef, error: string) {
    return this.fenced('fail', lease, (job) => {
      job.status = 'failed';
      job.error = error;
    });
  }

  private fenced(what: string, lease: LeaseRef, write: (job: ReplayJob) => void, running = true): Fenced {
    this.calls.push(what);
    if (this.failNext === what) {
      this.failNext = undefined;
      throw new Error(`${what} failed`);
    }
    const job = this.jobs.get(lease.jobId);
    if (!job) return 'the job is gone';
    if (running && job.status !== 'running') return `the job is ${job.status}`;
    if (job.lease.version !== lease.version) return 'its lease was taken over';
    write(job);
    return undefined;
  }
}

/** A running job of `tenantId` created at `createdAt`, with `filters`. */
export function runningJob(id: string, tenantId: string, createdAt: number, filters: ReplayJob['filters']): ReplayJob {
  return {
    tenantId,
    id,
    status: 'running',
    filters,
    createdAt,
    updatedAt: createdAt,
    finishedAt: null,
    progress: { matched: 0, queued: 0, skipped: 0 },
    outcomes: { delivered: 0, failed: 0 },
    cursor: null,
    pageQueuedAt: null,
    error: null,
    lease: { owner: null, expiresAt: 0, version: 0 },
  };
}
