// The gateway in-process on the test run's keyspace and topics, called over real HTTP, with the helpers the webhook
// API integration tests share: a typed fetch, problem+json assertions and the shapes the API answers with.
import { randomBytes } from 'node:crypto';
import { expect } from 'vitest';
import { startGateway } from '../../api/gateway-service.ts';
import { loadConfig, requireSecrets, type Config } from '../../core/config.ts';
import { DeliveryStore } from '../../core/deliveries/delivery-store.ts';
import { createLogger } from '../../core/log.ts';
import { connectPlatform, type Platform } from '../../core/platform.ts';
import { SubscriptionStore } from '../../core/subscriptions/subscription-store.ts';
import { freePort, startIdentityProvider, testEnv, waitFor } from './harness.ts';

export const WEBHOOKS = '/CoreWebhook/REST/Webhooks';

/** A public address literal: accepted by the URL rules without any DNS lookup. */
export const PUBLIC_URL = 'https://93.184.216.34/hook';

export type Idp = Awaited<ReturnType<typeof startIdentityProvider>>;

/** A subscription as the API returns it. */
export interface SubscriptionView {
  id: string;
  url: string;
  eventTypes: string[];
  authenticationMode: string;
  signatureHeaderName: string;
  hmacSecret?: string;
  apiKey: { headerName: string } | null;
  oauth2: { tokenUrl: string; clientId: string; audience: string | null; scope: string | null } | null;
  supersedePendingDeliveries: boolean;
  ordering: 'none' | 'entity';
  description: string | null;
  maxDeliveriesPerSecond: number | null;
  filter: Record<string, unknown> | null;
  status: 'enabled' | 'disabled';
  failureDays: number;
  createdAt: string;
  updatedAt: string;
}

/** A delivery as the API returns it. */
export interface DeliveryView {
  id: string;
  eventId: string;
  eventType: string;
  subscriptionId: string;
  entityId: string;
  status: string;
  attemptCount: number;
  lastStatusCode: number | null;
  lastErrorMessage: string | null;
  nextRetryAt: string | null;
  queuedAt: string;
  occurredAt: string;
  replayOf: string | null;
  /** A test delivery (POST /Subscriptions/{id}/test); always in answers, optional for the tests' own rows. */
  test?: boolean;
  abandonReason: string | null;
  attempts?: {
    attempt: number;
    at: string;
    statusCode: number | null;
    errorMessage: string | null;
    durationMs: number;
  }[];
}

export interface Page<T> {
  items: T[];
  nextCursor: string | null;
}

export interface ProblemBody {
  type: string;
  title: string;
  status: number;
  detail: string;
  errors?: { path: string; message: string }[];
}

/** An HTTP answer: status, headers, raw text and the parsed JSON body (undefined when empty). */
export interface Answer<T> {
  status: number;
  headers: Headers;
  text: string;
  body: T;
  url: string;
}

/** Calls `base + path` with an optional bearer token and JSON body; never throws on an HTTP error status. */
export async function call<T = Record<string, unknown>>(
  base: string,
  method: string,
  path: string,
  options: { token?: string; body?: unknown; headers?: Record<string, string> } = {},
): Promise<Answer<T>> {
  const url = `${base}${path}`;
  const response = await fetch(url, {
    method,
    headers: {
      ...(options.token === undefined ? {} : { authorization: `Bearer ${options.token}` }),
      ...(options.body === undefined ? {} : { 'content-type': 'application/json' }),
      ...options.headers,
    },
    body: options.body === undefined ? undefined : JSON.stringify(options.body),
  });
  const text = await response.text();
  return {
    status: response.status,
    headers: response.headers,
    text,
    body: (text ? JSON.parse(text) : undefined) as T,
    url,
  };
}

/**
 * Asserts an RFC 9457 problem answer with `status`; with `path`, that `errors` has an entry for exactly that field
 * (a string) or a field matching it (a RegExp), whose message matches `message` when given.
 */
export function expectProblem(
  answer: Answer<unknown>,
  status: number,
  path?: string | RegExp,
  message?: RegExp,
): ProblemBody {
  expect(answer.status, answer.text).toBe(status);
  expect(answer.headers.get('content-type')).toMatch(/^application\/problem\+json/);
  const problem = answer.body as ProblemBody;
  expect(problem).toMatchObject({
    type: expect.any(String),
    title: expect.any(String),
    status,
    detail: expect.any(String),
  });
  if (path !== undefined) {
    expect(problem.errors, answer.text).toEqual(
      expect.arrayContaining([
        {
          path: typeof path === 'string' ? path : expect.stringMatching(path),
          message: message ? expect.stringMatching(message) : expect.any(String),
        },
      ]),
    );
    for (const entry of problem.errors ?? []) expect(Object.keys(entry).sort()).toEqual(['message', 'path']);
  }
  return problem;
}

/** A unique tenant id for one test file, so files sharing the run's keyspace never see each other's data. */
export function uniqueTenant(name: string): string {
  return `${name}-${randomBytes(4).toString('hex')}`;
}

/** The gateway (both APIs by default) started with startGateway on a free loopback port. */
export async function startTestGateway(
  env: Record<string, string>,
  apis: { webhook: boolean; purchase: boolean } = { webhook: true, purchase: true },
) {
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const config: Config = loadConfig({
    ...env,
    GATEWAY_HOST: '127.0.0.1',
    GATEWAY_PORT: String(port),
    GATEWAY_BASE_URL: base,
  });
  const logger = createLogger('gateway-test', 'error');
  const platform: Platform = await connectPlatform(config, logger, `gateway-test-${port}`, {
    requestTimeoutMs: config.gateway.dependencyTimeoutMs,
  });
  let stop: () => Promise<void>;
  try {
    stop = await startGateway(config, platform, logger, apis);
  } catch (error) {
    await platform.close();
    throw error;
  }
  return {
    base,
    config,
    platform,
    subscriptions: new SubscriptionStore(platform.db, requireSecrets(config)),
    deliveries: new DeliveryStore(platform.db, config.webhook.historyRetentionMs),
    async close() {
      await stop();
      await platform.close();
    },
  };
}

export type TestGateway = Awaited<ReturnType<typeof startTestGateway>>;

/** The dev identity provider and a gateway wired to it, with http receivers allowed unless `env` says otherwise. */
export async function startWebhookApi(env: Record<string, string> = {}) {
  const baseEnv = { ...testEnv() };
  const idp = await startIdentityProvider(baseEnv);
  let gateway: TestGateway;
  try {
    gateway = await startTestGateway({
      ...baseEnv,
      AUTH_URL: idp.url,
      WEBHOOK_ALLOW_HTTP: 'true',
      PURCHASE_OUTBOX_RELAY: 'false',
      ...env,
    });
  } catch (error) {
    await idp.close();
    throw error;
  }
  await waitForCatalogue(gateway.base, await idp.token(await idp.client(uniqueTenant('catalogue'), ['webhook'])));
  return {
    idp,
    gateway,
    base: gateway.base,
    /** A token of a new client registered on the webhook API (and the purchase API) for `tenantId`. */
    async tokenFor(tenantId: string, apis: ('webhook' | 'purchase')[] = ['webhook', 'purchase']) {
      return idp.token(await idp.client(tenantId, apis));
    },
    async close() {
      await gateway.close();
      await idp.close();
    },
  };
}

export type WebhookApi = Awaited<ReturnType<typeof startWebhookApi>>;

/** The catalogue reaches the webhook API through Kafka: wait until the purchase service's types are listed. */
export async function waitForCatalogue(base: string, token: string): Promise<void> {
  await waitFor(async () => {
    const answer = await call<Page<{ eventType: string; service: string }>>(base, 'GET', `${WEBHOOKS}/EventTypes`, {
      token,
    });
    return answer.status === 200 && answer.body.items.filter((item) => item.service === 'purchase').length >= 3;
  }, 'the purchase event types in the catalogue');
}

/** A minimal valid creation body. */
export function subscriptionBody(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return { url: PUBLIC_URL, eventTypes: ['purchaseOrder.*'], ...overrides };
}

export const ISO_MS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;
