import { deliveryIdFor } from '../ids.ts';

export type ReplayJobStatus = 'running' | 'completed' | 'cancelled' | 'failed';

/** Statuses a bulk replay may select on: only ended deliveries can be replayed. */
export const REPLAYABLE_STATUSES = ['acknowledged', 'abandoned', 'superseded'] as const;
export type ReplayableStatus = (typeof REPLAYABLE_STATUSES)[number];

/** Which deliveries of the tenant a job replays; every filter given must hold. Times are epoch ms on queuedAt. */
export interface ReplayFilters {
  subscriptionId?: string;
  /** Event types or patterns (`*` is one whole segment); any of them. */
  eventTypes?: string[];
  status?: ReplayableStatus;
  /** Queued at or after (inclusive). */
  from?: number;
  /** Queued before (exclusive). */
  to?: number;
}

/** Counts a job's runner keeps: deliveries matching the filters, replays queued, and matches that were not replayable. */
export interface ReplayProgress {
  matched: number;
  queued: number;
  skipped: number;
}

/** Final outcomes of a job's replays, counted by the dispatcher. */
export interface ReplayOutcomes {
  delivered: number;
  failed: number;
}

/** Who runs a job now: the holder of a lease is the only writer of its progress. */
export interface ReplayLease {
  owner: string | null;
  expiresAt: number;
  /** Incremented by every take-over: the fence of every write a runner makes. */
  version: number;
}

/** A bulk replay job (POST /Deliveries/replay) with its progress. */
export interface ReplayJob {
  tenantId: string;
  id: string;
  status: ReplayJobStatus;
  filters: ReplayFilters;
  createdAt: number;
  updatedAt: number;
  finishedAt: number | null;
  progress: ReplayProgress;
  outcomes: ReplayOutcomes;
  /** Where the scan of the history continues (opaque to all but the scan); null before the first page. */
  cursor: string | null;
  /** Set while a page is being published: the queue time its replays get, again if the page is resumed. */
  pageQueuedAt: number | null;
  /** Why the job failed. */
  error: string | null;
  lease: ReplayLease;
}

/**
 * The delivery id of the replay of `originalId` by job `jobId`: the same every time, so a page published again after
 * a crash names the same series (and the dispatcher, checking the stored state, does not send it twice), and a
 * delivery the job made is recognised as its own and never replayed again by it.
 */
export function replayIdFor(jobId: string, originalId: string): string {
  return deliveryIdFor(originalId, `replay-job:${jobId}`);
}

/** The filters as the API shows them (and the store keeps them): times as ISO-8601 strings. */
export function filtersView(filters: ReplayFilters) {
  return {
    subscriptionId: filters.subscriptionId ?? null,
    eventTypes: filters.eventTypes ?? null,
    status: filters.status ?? null,
    from: filters.from === undefined ? null : new Date(filters.from).toISOString(),
    to: filters.to === undefined ? null : new Date(filters.to).toISOString(),
  };
}

/** The filters from their view (the store's JSON). */
export function filtersOf(view: ReturnType<typeof filtersView>): ReplayFilters {
  const filters: ReplayFilters = {};
  if (view.subscriptionId !== null) filters.subscriptionId = view.subscriptionId;
  if (view.eventTypes !== null) filters.eventTypes = view.eventTypes;
  if (view.status !== null) filters.status = view.status;
  if (view.from !== null) filters.from = Date.parse(view.from);
  if (view.to !== null) filters.to = Date.parse(view.to);
  return filters;
}
