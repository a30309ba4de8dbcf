// The contract of bulk replay (POST /Deliveries/replay and /ReplayJobs) as JSON Schema, in the conventions of
// webhook-schemas.ts: named components, each operation with every status it answers, examples, and the links the
// document's stateful readers follow.
import {
  AUTH_ERRORS,
  BODY_ERRORS,
  cursorParameter,
  errorResponses,
  limitParameter,
  pageSchema,
  type ComponentOverrides,
  type ErrorStatus,
  type JsonSchema,
} from '../core/http/openapi.ts';
import { REPLAYABLE_STATUSES } from '../core/replay-jobs/replay-job.ts';

const ID_EXAMPLE = '019b5c3e-8f3a-7c41-9d2e-5b7a1c0e4f21';
const SUBSCRIPTION_EXAMPLE = '5f0c6a8e-3b1d-4c2a-9e7f-1a2b3c4d5e6f';
const TIME_EXAMPLE = '2026-03-02T09:17:03.112Z';

/** Dotted segments, each a name or `*` (one whole segment), as subscriptions' event types. */
const EVENT_TYPE_PATTERN = '^(?:[A-Za-z][A-Za-z0-9_-]*|\\*)(?:\\.(?:[A-Za-z][A-Za-z0-9_-]*|\\*))*$';

const filterProperties = {
  subscriptionId: {
    type: 'string',
    minLength: 1,
    maxLength: 64,
    description: "only this subscription's deliveries (a subscription of the caller tenant: 404 otherwise)",
  },
  eventTypes: {
    type: 'array',
    minItems: 1,
    maxItems: 100,
    items: { type: 'string', minLength: 1, maxLength: 200, pattern: EVENT_TYPE_PATTERN },
    description: 'only deliveries of these event types; `*` stands for one whole segment (purchaseOrder.*)',
  },
  status: {
    type: 'string',
    enum: REPLAYABLE_STATUSES,
    description: 'only deliveries with this status now (only ended deliveries can be replayed)',
  },
  from: { type: 'string', format: 'date-time', description: 'only deliveries queued at or after this time' },
  to: {
    type: 'string',
    format: 'date-time',
    description: 'only deliveries queued before this time; after `from` when both are given',
  },
} as const;

const requestExample = {
  subscriptionId: SUBSCRIPTION_EXAMPLE,
  status: 'abandoned',
  from: '2026-03-01T00:00:00.000Z',
  to: '2026-03-02T00:00:00.000Z',
};

/** What the validator checks; the document adds "at least one of" (see the overrides), which code answers. */
const replayJobRequest = {
  $id: 'ReplayJobRequest',
  type: 'object',
  description:
    'Which deliveries of the caller tenant to replay: every filter given must hold. At least one of ' +
    'subscriptionId, status, from or to is required (otherwise 400): a bulk replay never replays a whole history ' +
    'by accident.',
  additionalProperties: false,
  properties: filterProperties,
  examples: [requestExample],
} as const;

const replayJobFilters = {
  $id: 'ReplayJobFilters',
  type: 'object',
  description: 'The filters of the request; null where none was given.',
  additionalProperties: false,
  required: ['subscriptionId', 'eventTypes', 'status', 'from', 'to'],
  properties: {
    subscriptionId: { type: ['string', 'null'] },
    eventTypes: { type: ['array', 'null'], items: { type: 'string' } },
    status: { type: ['string', 'null'], enum: [...REPLAYABLE_STATUSES, null] },
    from: { type: ['string', 'null'], format: 'date-time' },
    to: { type: ['string', 'null'], format: 'date-time' },
  },
  examples: [{ ...requestExample, eventTypes: null }],
} as const;

const count = (description: string) => ({ type: 'integer', minimum: 0, description }) as const;

const replayJob = {
  $id: 'ReplayJob',
  type: 'object',
  description:
    'A bulk replay job and its progress. `completed` means every matching delivery has been queued again ' +
    '(matched = queued + skipped); delivered and failed go on counting the replays as they end.',
  additionalProperties: false,
  required: [
    'id',
    'status',
    'filters',
    'matched',
    'queued',
    'skipped',
    'delivered',
    'failed',
    'createdAt',
    'updatedAt',
    'finishedAt',
    'error',
  ],
  properties: {
    id: { type: 'string' },
    status: { type: 'string', enum: ['running', 'completed', 'cancelled', 'failed'] },
    filters: { $ref: 'ReplayJobFilters#' },
    matched: count('deliveries found matching the filters so far'),
    queued: count('replays queued (each a new delivery, replayOf the original)'),
    skipped: count('matching deliveries not replayable: still pending, event past retention, subscription deleted'),
    delivered: count('replays acknowledged by the receiver'),
    failed: count('replays that ended without success (abandoned)'),
    createdAt: { type: 'string', format: 'date-time' },
    updatedAt: { type: 'string', format: 'date-time' },
    finishedAt: { type: ['string', 'null'], format: 'date-time' },
    error: { type: ['string', 'null'], description: 'why the job failed' },
  },
  examples: [
    {
      id: ID_EXAMPLE,
      status: 'running',
      filters: { ...requestExample, eventTypes: null },
      matched: 400,
      queued: 398,
      skipped: 2,
      delivered: 371,
      failed: 0,
      createdAt: TIME_EXAMPLE,
      updatedAt: TIME_EXAMPLE,
      finishedAt: null,
      error: null,
    },
  ],
} as const;

/** The components of bulk replay, registered with fastify's addSchema (referenced as `Name#`). */
export const replayJobComponents: JsonSchema[] = [
  replayJobRequest,
  replayJobFilters,
  replayJob,
  pageSchema('ReplayJobPage', 'ReplayJob', "A page of the tenant's replay jobs, newest first.", replayJob.examples[0]),
];

const idParams = {
  type: 'object',
  required: ['id'],
  properties: { id: { type: 'string', minLength: 1, maxLength: 64, examples: [ID_EXAMPLE] } },
} as const;

const errors = (own: ErrorStatus[], details: Partial<Record<ErrorStatus, string>> = {}) =>
  errorResponses([...new Set<ErrorStatus>([...own, ...AUTH_ERRORS])].sort(), details);

const JOB_NOT_FOUND = { 404: 'No such replay job for the caller tenant.' };

/** Each bulk replay operation's route schema. */
export const replayJobOperations = {
  createReplayJob: {
    operationId: 'createReplayJob',
    summary: 'Replay the deliveries matching filters, as a job',
    description:
      'Each matching delivery that has ended is replayed as POST /Deliveries/{id}/replay would: a new delivery ' +
      '(new id, replayOf the original) of the same event with the same body and signature. The job replays what ' +
      'was queued before it was created, at most REPLAY_RATE deliveries per second, each delivery at most once.',
    tags: ['Deliveries'],
    body: { $ref: 'ReplayJobRequest#' },
    response: {
      202: {
        description: 'The job, running.',
        headers: { location: { type: 'string', description: 'the job, relative to the request URL' } },
        content: { 'application/json': { schema: { $ref: 'ReplayJob#' } } },
      },
      ...errors([...BODY_ERRORS, 404], {
        400:
          'Invalid request: a field breaks a documented rule, none of subscriptionId, status, from and to is given, ' +
          'or `to` is not after `from` (`errors` names each field).',
        404: 'No such subscription for the caller tenant.',
      }),
    },
  },
  listReplayJobs: {
    operationId: 'listReplayJobs',
    summary: 'List the replay jobs, newest first',
    tags: ['Deliveries'],
    querystring: {
      type: 'object',
      additionalProperties: false,
      properties: { limit: limitParameter, cursor: cursorParameter },
    },
    response: { 200: { description: 'A page of replay jobs.', $ref: 'ReplayJobPage#' }, ...errors([400]) },
  },
  getReplayJob: {
    operationId: 'getReplayJob',
    summary: 'Read a replay job and its progress',
    tags: ['Deliveries'],
    params: idParams,
    response: { 200: { description: 'The job.', $ref: 'ReplayJob#' }, ...errors([400, 404], JOB_NOT_FOUND) },
  },
  cancelReplayJob: {
    operationId: 'cancelReplayJob',
    summary: 'Cancel a running replay job',
    description: 'Stops the job within one page: replays already queued go on to their end.',
    tags: ['Deliveries'],
    params: idParams,
    response: {
      200: { description: 'The job, cancelled.', $ref: 'ReplayJob#' },
      ...errors([...BODY_ERRORS, 404, 409], {
        ...JOB_NOT_FOUND,
        409: 'The job has already ended (completed, cancelled or failed).',
      }),
    },
  },
} as const;

const byJobId = (expression: string) => ({
  getReplayJob: { operationId: 'getReplayJob', parameters: { id: expression } },
  cancelReplayJob: { operationId: 'cancelReplayJob', parameters: { id: expression } },
});

/** OpenAPI links by operation and status: where an answer's ids lead. */
export const replayJobLinks = {
  createReplayJob: { 202: byJobId('$response.body#/id') },
  listReplayJobs: { 200: byJobId('$response.body#/items/0/id') },
  getReplayJob: { 200: byJobId('$response.body#/id') },
} as const;

/** The rule the document states beyond the validator: at least one of the selecting filters (code answers 400). */
export const replayJobOverrides: ComponentOverrides = {
  ReplayJobRequest: (documented) => ({
    ...documented,
    anyOf: [{ required: ['subscriptionId'] }, { required: ['status'] }, { required: ['from'] }, { required: ['to'] }],
  }),
};
