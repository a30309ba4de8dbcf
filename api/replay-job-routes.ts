import type { FastifyPluginAsync } from 'fastify';
import { ConflictError, InvalidInputError, NotFoundError } from '../core/errors.ts';
import type { PageQuery } from '../core/http/paging.ts';
import { newTimeOrderedId } from '../core/ids.ts';
import {
  filtersView,
  type ReplayableStatus,
  type ReplayFilters,
  type ReplayJob,
} from '../core/replay-jobs/replay-job.ts';
import type { ReplayJobStore } from '../core/replay-jobs/replay-job-store.ts';
import { replayJobComponents, replayJobLinks, replayJobOperations } from './replay-job-schemas.ts';
import { timeRange } from './time-range.ts';

export interface ReplayJobRoutesOptions {
  jobs: Pick<ReplayJobStore, 'create' | 'get' | 'page' | 'cancel'>;
  /** Whether a subscription of the tenant exists (a job's subscriptionId must name one). */
  subscriptionExists(tenantId: string, id: string): Promise<boolean>;
}

/** The body of POST /Deliveries/replay, as validated by its schema. */
interface ReplayJobRequest {
  subscriptionId?: string;
  eventTypes?: string[];
  status?: ReplayableStatus;
  from?: string;
  to?: string;
}

/**
 * Bulk replay under /CoreWebhook/REST/Webhooks (register inside the webhook API's auth context): POST
 * /Deliveries/replay creates a job that the routers' replay runners carry out (router/replay-runner.ts); /ReplayJobs
 * shows, lists and cancels the tenant's jobs. A job id of another tenant answers 404.
 */
export const replayJobRoutes: FastifyPluginAsync<ReplayJobRoutesOptions> = async (app, options) => {
  const { jobs } = options;
  for (const schema of replayJobComponents) app.addSchema(schema);

  const load = async (tenantId: string, id: string) => {
    const job = await jobs.get(tenantId, id);
    if (!job) throw new NotFoundError('replay job', id);
    return job;
  };

  app.post<{ Body: ReplayJobRequest }>(
    '/Deliveries/replay',
    { schema: replayJobOperations.createReplayJob, links: replayJobLinks.createReplayJob },
    async (request, reply) => {
      const { tenantId } = request.principal;
      const filters = replayFilters(request.body);
      if (
        filters.subscriptionId !== undefined &&
        !(await options.subscriptionExists(tenantId, filters.subscriptionId))
      ) {
        throw new NotFoundError('subscription', filters.subscriptionId);
      }
      const now = Date.now();
      const job: ReplayJob = {
        tenantId,
        id: newTimeOrderedId(now),
        status: 'running',
        filters,
        createdAt: now,
        updatedAt: now,
        finishedAt: null,
        progress: { matched: 0, queued: 0, skipped: 0 },
        outcomes: { delivered: 0, failed: 0 },
        cursor: null,
        pageQueuedAt: null,
        error: null,
        lease: { owner: null, expiresAt: 0, version: 0 },
      };
      await jobs.create(job);
      request.log.info({ tenantId, jobId: job.id, filters: filtersView(filters) }, 'replay job created');
      // Relative to …/Deliveries/replay, so it resolves to …/ReplayJobs/{id}.
      return reply.code(202).header('location', `../ReplayJobs/${job.id}`).send(replayJobView(job));
    },
  );

  app.get<{ Querystring: PageQuery }>(
    '/ReplayJobs',
    { schema: replayJobOperations.listReplayJobs, links: replayJobLinks.listReplayJobs },
    async (request) => {
      const page = await jobs.page(request.principal.tenantId, request.query.limit, request.query.cursor);
      return { items: page.items.map(replayJobView), nextCursor: page.nextCursor };
    },
  );

  app.get<{ Params: { id: string } }>(
    '/ReplayJobs/:id',
    { schema: replayJobOperations.getReplayJob, links: replayJobLinks.getReplayJob },
    async (request) => replayJobView(await load(request.principal.tenantId, request.params.id)),
  );

  app.post<{ Params: { id: string } }>(
    '/ReplayJobs/:id/cancel',
    { schema: replayJobOperations.cancelReplayJob },
    async (request) => {
      const { tenantId } = request.principal;
      const { id } = request.params;
      const answer = await jobs.cancel(tenantId, id, Date.now());
      if (!answer) throw new NotFoundError('replay job', id);
      if (!answer.cancelled) throw new ConflictError(`replay job ${id} has already ended: it is ${answer.status}`);
      request.log.info({ tenantId, jobId: id }, 'replay job cancelled');
      return replayJobView(await load(tenantId, id));
    },
  );
};

/** The filters of a request; refuses (400, naming the fields) what the schema cannot say. */
function replayFilters(body: ReplayJobRequest): ReplayFilters {
  if (
    body.subscriptionId === undefined &&
    body.status === undefined &&
    body.from === undefined &&
    body.to === undefined
  ) {
    throw new InvalidInputError([
      {
        path: '',
        message:
          'at least one of subscriptionId, status, from or to is required, so that a bulk replay never replays a ' +
          'whole history by accident',
      },
    ]);
  }
  const filters: ReplayFilters = {};
  if (body.subscriptionId !== undefined) filters.subscriptionId = body.subscriptionId;
  if (body.eventTypes !== undefined) filters.eventTypes = [...new Set(body.eventTypes)];
  if (body.status !== undefined) filters.status = body.status;
  return { ...filters, ...timeRange(body.from, body.to) };
}

/** A job as the API answers it (component ReplayJob). */
export function replayJobView(job: ReplayJob) {
  return {
    id: job.id,
    status: job.status,
    filters: filtersView(job.filters),
    matched: job.progress.matched,
    queued: job.progress.queued,
    skipped: job.progress.skipped,
    delivered: job.outcomes.delivered,
    failed: job.outcomes.failed,
    createdAt: new Date(job.createdAt).toISOString(),
    updatedAt: new Date(job.updatedAt).toISOString(),
    finishedAt: job.finishedAt === null ? null : new Date(job.finishedAt).toISOString(),
    error: job.error,
  };
}
