import { setTimeout as delay } from 'node:timers/promises';
import type { Delivery, StoredEvent } from '../core/deliveries/delivery.ts';
import type { DeliveryRecord } from '../core/deliveries/delivery-record.ts';
import { queueReplays, replayable, replayRecord, type ReplaySources } from '../core/deliveries/replay.ts';
import type { Logger } from '../core/log.ts';
import type { ReplayMetrics } from '../core/metrics.ts';
import { backoffDelay } from '../core/recovery-backoff.ts';
import { replayIdFor, type ReplayJob, type ReplayProgress } from '../core/replay-jobs/replay-job.ts';
import type { ActiveJob, Fenced, LeaseRef } from '../core/replay-jobs/replay-job-store.ts';
import { scanPage, type ScanReader } from './replay-scan.ts';
import { TokenBucket, type Sleep } from './token-bucket.ts';

/** The replay jobs as a runner reads and moves them (ReplayJobStore); every write but take is fenced on the lease. */
export interface ReplayJobLedger {
  active(): Promise<ActiveJob[]>;
  get(tenantId: string, id: string, serial?: boolean): Promise<ReplayJob | undefined>;
  removeActive(tenantId: string, jobId: string): Promise<void>;
  takeLease(job: ReplayJob, owner: string, expiresAt: number): Promise<LeaseRef | undefined>;
  renewLease(lease: LeaseRef, expiresAt: number): Promise<Fenced>;
  releaseLease(lease: LeaseRef): Promise<Fenced>;
  startPage(lease: LeaseRef, queuedAt: number, now: number): Promise<Fenced>;
  commitPage(
    lease: LeaseRef,
    page: { cursor: string | null; progress: ReplayProgress; done: boolean },
    now: number,
  ): Promise<Fenced>;
  fail(lease: LeaseRef, error: string, now: number): Promise<Fenced>;
}

export interface ReplayRunnerDeps {
  jobs: ReplayJobLedger;
  history: ScanReader;
  sources: ReplaySources;
  /** Puts replays on the deliveries topic (marked as possible duplicates); resolves once Kafka acknowledged them. */
  publish(records: DeliveryRecord[]): Promise<void>;
  /** Writes a replay's history row. */
  store(delivery: Delivery): Promise<void>;
  /** This process, as lease owner. */
  owner: string;
  settings: {
    ratePerJob: number;
    ratePerProcess: number;
    maxJobs: number;
    leaseMs: number;
    pollMs: number;
    historyRetentionMs: number;
  };
  logger: Logger;
  metrics?: ReplayMetrics;
  now?: () => number;
  sleep?: Sleep;
}

/** Replays a page holds at most: also the burst of the pacing, so a page is one paced step. */
const MAX_PAGE = 100;
/** Index rows and hour partitions one page reads at most (progress is persisted between pages). */
const SCAN_ROWS = 1_000;
const SCAN_HOURS = 72;
/** A page failing this often in a row (whatever the cause) fails its job rather than being tried forever. */
const MAX_PAGE_FAILURES = 10;
/** An active row whose job row has not appeared by then belongs to a creation that failed half-way. */
const ORPHAN_AFTER_MS = 60_000;

/**
 * Runs bulk replay jobs (a worker of the router process): polls the active jobs, takes a free or expired job's lease
 * by compare-and-set (so two routers never run one job at once), renews it while working, and replays the job page by
 * page from its persisted cursor, paced to REPLAY_RATE per job and REPLAY_PROCESS_RATE per process.
 *
 * One page: read the next matching deliveries, mark the page started (with the queue time its replays get), publish
 * the replays and write their rows, then move the cursor and counts. A runner that dies within a page leaves the page
 * marked: whoever resumes it builds the same replays (ids derived from job and original; the same queue time once
 * any of them is in the history, so the same history rows) and every replay record is published as a possible
 * duplicate, so the dispatcher, checking the stored state, does not send a series twice. Replays the job made itself (their ids say so) are never matched again.
 */
export class ReplayRunner {
  private readonly now: () => number;
  private readonly sleep: Sleep;
  private readonly pageSize: number;
  private readonly processBucket: TokenBucket;
  private readonly running = new Map<string, Promise<void>>();

  constructor(private readonly deps: ReplayRunnerDeps) {
    this.now = deps.now ?? Date.now;
    this.sleep = deps.sleep ?? ((ms, signal) => delay(ms, undefined, { signal }));
    const { ratePerJob, ratePerProcess } = deps.settings;
    this.pageSize = Math.max(1, Math.min(MAX_PAGE, ratePerJob, ratePerProcess));
    this.processBucket = new TokenBucket(ratePerProcess, this.pageSize, this.now, this.sleep);
  }

  /** Polls for jobs until `signal` aborts, then stops every job at its next step and gives their leases up. */
  async run(signal: AbortSignal): Promise<void> {
    while (!signal.aborted) {
      try {
        await this.poll(signal);
      } catch (error) {
        this.deps.logger.error({ err: error }, 'replay jobs: poll failed; trying again');
      }
      await this.sleep(this.deps.settings.pollMs, signal).catch(() => undefined);
    }
    await Promise.all(this.running.values());
  }

  /** One look at the active jobs: takes those free or expired, up to REPLAY_MAX_JOBS running here. */
  async poll(signal: AbortSignal): Promise<void> {
    const { jobs, settings, logger } = this.deps;
    for (const entry of await jobs.active()) {
      if (signal.aborted || this.running.size >= settings.maxJobs) break;
      const key = `${entry.tenantId}\u0000${entry.jobId}`;
      if (this.running.has(key)) continue;
      const job = await jobs.get(entry.tenantId, entry.jobId, true);
      if (!job) {
        if (this.now() - entry.createdAt > ORPHAN_AFTER_MS) await jobs.removeActive(entry.tenantId, entry.jobId);
        continue;
      }
      if (job.status !== 'running') {
        await jobs.removeActive(job.tenantId, job.id);
        continue;
      }
      if (job.lease.owner !== null && job.lease.expiresAt > this.now()) continue;
      const lease = await jobs.takeLease(job, this.deps.owner, this.now() + settings.leaseMs);
      if (!lease) continue;
      logger.info(
        { jobId: job.id, tenantId: job.tenantId, leaseVersion: lease.version, resumed: job.cursor !== null },
        'replay job taken',
      );
      const work = this.runJob({ ...job, lease: { ...job.lease, version: lease.version } }, lease, signal)
        .catch((error: unknown) => logger.error({ err: error, jobId: job.id }, 'replay job stopped by an error'))
        .finally(() => {
          this.running.delete(key);
          this.deps.metrics?.running(this.running.size);
        });
      this.running.set(key, work);
      this.deps.metrics?.running(this.running.size);
    }
  }

  /** Runs one job under `lease` until it ends, is cancelled, loses its lease, or the runner stops. */
  private async runJob(job: ReplayJob, lease: LeaseRef, signal: AbortSignal): Promise<void> {
    const { jobs, logger } = this.deps;
    const stop = new AbortController();
    const abort = () => stop.abort();
    signal.addEventListener('abort', abort, { once: true });
    const renewing = this.keepLease(job, lease, stop);
    const bucket = new TokenBucket(this.deps.settings.ratePerJob, this.pageSize, this.now, this.sleep);
    const state = { cursor: job.cursor, pageQueuedAt: job.pageQueuedAt, progress: { ...job.progress } };
    let failures = 0;
    try {
      while (!stop.signal.aborted) {
        try {
          const next = await this.page(job, lease, state, bucket, stop.signal);
          failures = 0;
          if (next !== 'more') {
            if (next !== 'done')
              logger.info({ jobId: job.id, tenantId: job.tenantId, reason: next }, 'replay job left');
            return;
          }
        } catch (error) {
          if (stop.signal.aborted) return;
          failures += 1;
          logger.error({ err: error, jobId: job.id, tenantId: job.tenantId, failures }, 'replay page failed');
          if (failures >= MAX_PAGE_FAILURES) {
            const reason = await jobs.fail(lease, (error as Error).message ?? String(error), this.now());
            logger.error({ jobId: job.id, tenantId: job.tenantId, reason }, 'replay job failed');
            return;
          }
          await this.sleep(backoffDelay(failures), stop.signal).catch(() => undefined);
        }
      }
    } finally {
      stop.abort();
      signal.removeEventListener('abort', abort);
      await renewing;
      // Stopping (not ending): give the lease up so another router resumes the job now, not once it expires.
      if (signal.aborted) await jobs.releaseLease(lease).catch(() => undefined);
    }
  }

  /**
   * One page: answers 'more', 'done' (the job completed), or why the job is no longer this runner's (cancelled,
   * lease taken over). Throws when a read or write failed: the page is then tried again from the same cursor.
   */
  private async page(
    job: ReplayJob,
    lease: LeaseRef,
    state: { cursor: string | null; pageQueuedAt: number | null; progress: ReplayProgress },
    bucket: TokenBucket,
    signal: AbortSignal,
  ): Promise<string> {
    const { jobs, logger, metrics } = this.deps;
    const own = (delivery: Delivery) =>
      delivery.replayOf !== null && delivery.id === replayIdFor(job.id, delivery.replayOf);
    const page = await scanPage(
      this.deps.history,
      job.tenantId,
      job.filters,
      this.bounds(job),
      state.cursor,
      { matches: this.pageSize, rows: SCAN_ROWS, hours: SCAN_HOURS },
      (delivery) => !own(delivery),
    );
    const sources = cached(this.deps.sources);
    const decisions = await Promise.all(page.matches.map((delivery) => replayable(delivery, sources)));
    const ready = page.matches.flatMap((original, at) => {
      const decision = decisions[at]!;
      return 'event' in decision ? [{ original, event: decision.event }] : [];
    });
    const resumed = state.pageQueuedAt !== null;
    if (ready.length > 0) {
      await bucket.take(ready.length, signal);
      await this.processBucket.take(ready.length, signal);
      const queuedAt = (await this.resumedQueueTime(job, state.pageQueuedAt, ready)) ?? this.now();
      const refused = await jobs.startPage(lease, queuedAt, this.now());
      if (refused !== undefined) return refused;
      state.pageQueuedAt = queuedAt;
      const records = ready.map(({ original, event }) => ({
        ...replayRecord(original, event, {
          deliveryId: replayIdFor(job.id, original.id),
          queuedAt,
          replayJobId: job.id,
        }),
        mayBeDuplicate: true,
      }));
      await queueReplays(records, this.deps.publish, this.deps.store);
    }
    const progress = {
      matched: state.progress.matched + page.matches.length,
      queued: state.progress.queued + ready.length,
      skipped: state.progress.skipped + page.matches.length - ready.length,
    };
    const done = page.cursor === null;
    const refused = await jobs.commitPage(lease, { cursor: page.cursor, progress, done }, this.now());
    if (refused !== undefined) return refused;
    Object.assign(state, { cursor: page.cursor, pageQueuedAt: null, progress });
    metrics?.progress('matched', page.matches.length);
    metrics?.progress('queued', ready.length);
    metrics?.progress('skipped', page.matches.length - ready.length);
    logger.info(
      {
        jobId: job.id,
        tenantId: job.tenantId,
        matched: page.matches.length,
        queued: ready.length,
        skipped: page.matches.length - ready.length,
        resumed,
        done,
        progress,
      },
      'replay page queued',
    );
    return done ? 'done' : 'more';
  }

  /**
   * The queue time a page started before (its runner died in it) keeps: once any of its replays has a history row,
   * the same queue time gives the same rows again (a new one would list them twice). None stored means none was
   * attempted yet either (a dispatcher writes the row with its first attempt): the page then gets a fresh queue time,
   * so replays that never left are not aged by the crash; one that did leave is still the same series (same id), and
   * the copy marked as a possible duplicate is skipped by the dispatcher.
   */
  private async resumedQueueTime(
    job: ReplayJob,
    pageQueuedAt: number | null,
    ready: { original: Delivery }[],
  ): Promise<number | undefined> {
    if (pageQueuedAt === null) return undefined;
    const ids = ready.map(({ original }) => replayIdFor(job.id, original.id));
    const stored = await this.deps.history.getMany(job.tenantId, ids);
    return stored.some((row) => row !== undefined) ? pageQueuedAt : undefined;
  }

  /**
   * Queue times the job reads: within the filters' range, no older than the history retention at the job's creation,
   * and before the creation (so replays it makes, queued later, are not in its range either).
   */
  private bounds(job: ReplayJob): { lower: number; upper: number } {
    const { from, to } = job.filters;
    return {
      lower: Math.max(from ?? -Infinity, job.createdAt - this.deps.settings.historyRetentionMs),
      upper: Math.min(to ?? Infinity, job.createdAt),
    };
  }

  /**
   * Renews the lease every third of its length until `stop` aborts; aborts it when the lease is lost (cancelled, taken
   * over) or could not be renewed for a whole lease length (another router may hold it by now).
   */
  private async keepLease(job: ReplayJob, lease: LeaseRef, stop: AbortController): Promise<void> {
    const { leaseMs } = this.deps.settings;
    let renewed = this.now();
    while (!stop.signal.aborted) {
      await this.sleep(Math.max(1, Math.floor(leaseMs / 3)), stop.signal).catch(() => undefined);
      if (stop.signal.aborted) return;
      try {
        const lost = await this.deps.jobs.renewLease(lease, this.now() + leaseMs);
        if (lost !== undefined) {
          this.deps.logger.info({ jobId: job.id, tenantId: job.tenantId, reason: lost }, 'replay job lease ended');
          stop.abort();
          return;
        }
        renewed = this.now();
      } catch (error) {
        this.deps.logger.warn({ err: error, jobId: job.id }, 'replay job lease renewal failed');
        if (this.now() - renewed >= leaseMs) stop.abort();
      }
    }
  }
}

/** The sources, each event and subscription read once per page (a page often replays many deliveries of both). */
function cached(sources: ReplaySources): ReplaySources {
  const events = new Map<string, Promise<StoredEvent | undefined>>();
  const subscriptions = new Map<string, Promise<boolean>>();
  const once = <T>(map: Map<string, Promise<T>>, key: string, read: () => Promise<T>) => {
    let value = map.get(key);
    if (!value) {
      value = read();
      map.set(key, value);
    }
    return value;
  };
  return {
    getEvent: (tenantId, eventId) => once(events, eventId, () => sources.getEvent(tenantId, eventId)),
    subscriptionExists: (tenantId, id) => once(subscriptions, id, () => sources.subscriptionExists(tenantId, id)),
  };
}
