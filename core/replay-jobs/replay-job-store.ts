import { queryPage, types, type CassandraClient } from '../cassandra.ts';
import {
  filtersOf,
  filtersView,
  type ReplayJob,
  type ReplayJobStatus,
  type ReplayOutcomes,
  type ReplayProgress,
} from './replay-job.ts';

/** The one partition of active_replay_jobs (there are few running jobs at any time). */
const ACTIVE_BUCKET = 0;

/** A job as its lease holder addresses it: each of its writes holds only while the job's lease_version is this one. */
export interface LeaseRef {
  tenantId: string;
  jobId: string;
  version: number;
}

/** A job the runners should look at: written before the job row, deleted once the job has ended. */
export interface ActiveJob {
  tenantId: string;
  jobId: string;
  createdAt: number;
}

/**
 * The answer of a fenced write: undefined when it was made, else why not (the job is no longer running, or its lease
 * was taken over), in words for a log line.
 */
export type Fenced = string | undefined;

/**
 * Cassandra store of bulk replay jobs (migration 006). Jobs are created with IF NOT EXISTS and every later write is a
 * lightweight transaction: the cancel on `status = 'running'`, the runner's writes on that and on `lease_version`, so
 * the job's cells are all written through Paxos (no client timestamp can outrank a later transition), a cancel is never
 * lost to a concurrent progress write, and a runner whose lease was taken over can no longer move the job.
 */
export class ReplayJobStore {
  private readonly ttl: number;

  constructor(
    private readonly db: CassandraClient,
    retentionMs: number,
  ) {
    this.ttl = Math.max(1, Math.round(retentionMs / 1000));
  }

  /** Records a new running job. Its active row is written first, so a job row never exists that no runner will see. */
  async create(job: ReplayJob): Promise<void> {
    await this.db.execute(
      `INSERT INTO active_replay_jobs (bucket, tenant_id, job_id, created_at) VALUES (?, ?, ?, ?) USING TTL ${this.ttl}`,
      [ACTIVE_BUCKET, job.tenantId, job.id, new Date(job.createdAt)],
      { prepare: true },
    );
    await this.db.execute(
      `INSERT INTO replay_jobs (tenant_id, id, status, filters, created_at, updated_at, matched, queued, skipped,
         lease_expires_at, lease_version)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) IF NOT EXISTS USING TTL ${this.ttl}`,
      [
        job.tenantId,
        job.id,
        job.status,
        JSON.stringify(filtersView(job.filters)),
        new Date(job.createdAt),
        new Date(job.updatedAt),
        types.Long.fromNumber(job.progress.matched),
        types.Long.fromNumber(job.progress.queued),
        types.Long.fromNumber(job.progress.skipped),
        new Date(job.lease.expiresAt),
        job.lease.version,
      ],
      { prepare: true },
    );
  }

  /** One job of a tenant with its outcomes; `serial` reads it linearizably (what a runner decides on). */
  async get(tenantId: string, id: string, serial = false): Promise<ReplayJob | undefined> {
    const options = serial
      ? { prepare: true, consistency: types.consistencies.localSerial }
      : { prepare: true as const };
    const [rows, outcomes] = await Promise.all([
      this.db.execute('SELECT * FROM replay_jobs WHERE tenant_id = ? AND id = ?', [tenantId, id], options),
      this.outcomes(tenantId, [id]),
    ]);
    const row = rows.first();
    return row ? fromRow(row, outcomes.get(id)) : undefined;
  }

  /** A page of a tenant's jobs, newest first. */
  async page(tenantId: string, limit: number, cursor: string | undefined) {
    const page = await queryPage(this.db, 'SELECT * FROM replay_jobs WHERE tenant_id = ?', [tenantId], limit, cursor);
    const outcomes = await this.outcomes(
      tenantId,
      page.rows.map((row) => String(row.id)),
    );
    const items = page.rows
      .map((row) => fromRow(row, outcomes.get(String(row.id))))
      .filter((job): job is ReplayJob => job !== undefined);
    return { items, nextCursor: page.nextCursor };
  }

  /**
   * Cancels a running job. Answers whether this call cancelled it and the job's status now (that of a job that had
   * already ended), or undefined when there is no such job.
   */
  async cancel(
    tenantId: string,
    id: string,
    now: number,
  ): Promise<{ cancelled: boolean; status: ReplayJobStatus } | undefined> {
    const result = await this.db.execute(
      `UPDATE replay_jobs USING TTL ${this.ttl} SET status = 'cancelled', finished_at = ?, updated_at = ?
        WHERE tenant_id = ? AND id = ? IF status = 'running'`,
      [new Date(now), new Date(now), tenantId, id],
      { prepare: true },
    );
    if (result.wasApplied()) {
      await this.removeActive(tenantId, id);
      return { cancelled: true, status: 'cancelled' };
    }
    const status = result.first()?.status as ReplayJobStatus | null | undefined;
    return status ? { cancelled: false, status } : undefined;
  }

  /** Every job the runners should look at. */
  async active(): Promise<ActiveJob[]> {
    const result = await this.db.execute(
      'SELECT tenant_id, job_id, created_at FROM active_replay_jobs WHERE bucket = ?',
      [ACTIVE_BUCKET],
      { prepare: true, fetchSize: 1000 },
    );
    const jobs: ActiveJob[] = [];
    for await (const row of result) {
      jobs.push({
        tenantId: String(row.tenant_id),
        jobId: String(row.job_id),
        createdAt: (row.created_at as Date | null)?.getTime() ?? 0,
      });
    }
    return jobs;
  }

  async removeActive(tenantId: string, jobId: string): Promise<void> {
    await this.db.execute(
      'DELETE FROM active_replay_jobs WHERE bucket = ? AND tenant_id = ? AND job_id = ?',
      [ACTIVE_BUCKET, tenantId, jobId],
      { prepare: true },
    );
  }

  /**
   * Takes the lease of a running job as read in `job` (its lease free or expired: the caller checked): answers the new
   * lease, or undefined when another runner took it since that read, or the job is no longer running.
   */
  async takeLease(job: ReplayJob, owner: string, expiresAt: number): Promise<LeaseRef | undefined> {
    const version = job.lease.version + 1;
    const result = await this.db.execute(
      `UPDATE replay_jobs USING TTL ${this.ttl} SET lease_owner = ?, lease_expires_at = ?, lease_version = ?
        WHERE tenant_id = ? AND id = ? IF status = 'running' AND lease_version = ?`,
      [owner, new Date(expiresAt), version, job.tenantId, job.id, job.lease.version],
      { prepare: true },
    );
    return result.wasApplied() ? { tenantId: job.tenantId, jobId: job.id, version } : undefined;
  }

  /** Extends a held lease. */
  async renewLease(lease: LeaseRef, expiresAt: number): Promise<Fenced> {
    return this.fenced(lease, 'lease_expires_at = ?', [new Date(expiresAt)]);
  }

  /** Gives a held lease up (stopping): another runner may take the job at once. */
  async releaseLease(lease: LeaseRef): Promise<Fenced> {
    return this.fenced(lease, 'lease_owner = null, lease_expires_at = ?', [new Date(0)], false);
  }

  /** Marks the page at the cursor as being published, with the queue time its replays get. */
  async startPage(lease: LeaseRef, queuedAt: number, now: number): Promise<Fenced> {
    return this.fenced(lease, 'page_queued_at = ?, updated_at = ?', [new Date(queuedAt), new Date(now)]);
  }

  /** Moves the cursor past a page and records the counts; with `done`, completes the job. */
  async commitPage(
    lease: LeaseRef,
    page: { cursor: string | null; progress: ReplayProgress; done: boolean },
    now: number,
  ): Promise<Fenced> {
    const { matched, queued, skipped } = page.progress;
    const end = page.done ? ", status = 'completed', finished_at = ?, lease_owner = null" : '';
    const fenced = await this.fenced(
      lease,
      `cursor = ?, page_queued_at = null, matched = ?, queued = ?, skipped = ?, updated_at = ?${end}`,
      [
        page.cursor,
        types.Long.fromNumber(matched),
        types.Long.fromNumber(queued),
        types.Long.fromNumber(skipped),
        new Date(now),
        ...(page.done ? [new Date(now)] : []),
      ],
    );
    if (fenced === undefined && page.done) await this.removeActive(lease.tenantId, lease.jobId);
    return fenced;
  }

  /** Ends a job that cannot go on (its page fails however often it is tried). */
  async fail(lease: LeaseRef, error: string, now: number): Promise<Fenced> {
    const fenced = await this.fenced(
      lease,
      "status = 'failed', error = ?, finished_at = ?, updated_at = ?, lease_owner = null",
      [error.slice(0, 2_000), new Date(now), new Date(now)],
    );
    if (fenced === undefined) await this.removeActive(lease.tenantId, lease.jobId);
    return fenced;
  }

  /**
   * Counts the end of one of the job's replays. Not idempotent: an increment retried after a timeout that had applied
   * counts twice (see migration 006).
   */
  async countOutcome(tenantId: string, jobId: string, outcome: keyof ReplayOutcomes): Promise<void> {
    const column = outcome === 'delivered' ? 'delivered' : 'failed';
    await this.db.execute(
      `UPDATE replay_job_outcomes SET ${column} = ${column} + 1 WHERE tenant_id = ? AND job_id = ?`,
      [tenantId, jobId],
      { prepare: true },
    );
  }

  private async outcomes(tenantId: string, ids: string[]): Promise<Map<string, ReplayOutcomes>> {
    if (ids.length === 0) return new Map();
    const result = await this.db.execute(
      'SELECT job_id, delivered, failed FROM replay_job_outcomes WHERE tenant_id = ? AND job_id IN ?',
      [tenantId, ids],
      { prepare: true },
    );
    return new Map(
      result.rows.map((row) => [
        String(row.job_id),
        { delivered: Number(row.delivered ?? 0), failed: Number(row.failed ?? 0) },
      ]),
    );
  }

  /** A write that holds only while the job runs (`running`, else any status) under this lease. */
  private async fenced(lease: LeaseRef, set: string, values: unknown[], running = true): Promise<Fenced> {
    const condition = running ? "status = 'running' AND lease_version = ?" : 'lease_version = ?';
    const result = await this.db.execute(
      `UPDATE replay_jobs USING TTL ${this.ttl} SET ${set} WHERE tenant_id = ? AND id = ? IF ${condition}`,
      [...values, lease.tenantId, lease.jobId, lease.version],
      { prepare: true },
    );
    if (result.wasApplied()) return undefined;
    // A refused transaction answers the columns of its condition as they are: none when the row does not exist.
    const row = result.first();
    const status = (row?.status as string | null | undefined) ?? null;
    if (status === null && (row?.lease_version ?? null) === null) return 'the job is gone';
    if (running && status !== 'running') return `the job is ${status}`;
    return 'its lease was taken over';
  }
}

function fromRow(row: Record<string, unknown>, outcomes: ReplayOutcomes | undefined): ReplayJob | undefined {
  // A row whose creation cells have expired (TTL) while later writes have not is what remains of a gone job.
  if (row.created_at === null || row.status === null || row.filters === null) return undefined;
  const time = (value: unknown) => (value instanceof Date ? value.getTime() : null);
  return {
    tenantId: String(row.tenant_id),
    id: String(row.id),
    status: row.status as ReplayJobStatus,
    filters: filtersOf(JSON.parse(String(row.filters)) as Parameters<typeof filtersOf>[0]),
    createdAt: time(row.created_at) ?? 0,
    updatedAt: time(row.updated_at) ?? time(row.created_at) ?? 0,
    finishedAt: time(row.finished_at),
    progress: { matched: Number(row.matched ?? 0), queued: Number(row.queued ?? 0), skipped: Number(row.skipped ?? 0) },
    outcomes: outcomes ?? { delivered: 0, failed: 0 },
    cursor: (row.cursor as string | null) ?? null,
    pageQueuedAt: time(row.page_queued_at),
    error: (row.error as string | null) ?? null,
    lease: {
      owner: (row.lease_owner as string | null) ?? null,
      expiresAt: time(row.lease_expires_at) ?? 0,
      version: Number(row.lease_version ?? 0),
    },
  };
}
