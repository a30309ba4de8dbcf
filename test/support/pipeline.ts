// The whole pipeline behind the gateway for an end-to-end test file: topics of its own (the run's keyspace), an
// identity provider, the gateway, router and dispatcher, a registered client's token, and a caller of the gateway.
import { randomBytes, randomUUID } from 'node:crypto';
import { expect } from 'vitest';
import { loadConfig } from '../../core/config.ts';
import { createLogger } from '../../core/log.ts';
import { deprovision, provision } from '../../infra/provision.ts';
import { freePort, startIdentityProvider, startServices, testEnv } from './harness.ts';

export interface Answer {
  status: number;
  text: string;
}

/**
 * Starts it, receivers allowed on 127.0.0.1 over http and subscription changes followed within 200 ms. `label` names
 * the topics and the client; `settings` adds or overrides variables (shortened timings, say).
 */
export async function startPipeline(label: string, settings: Record<string, string> = {}) {
  const env: Record<string, string> = {
    ...testEnv(),
    KAFKA_TOPIC_PREFIX: `${testEnv().KAFKA_TOPIC_PREFIX}${label}${randomUUID().slice(0, 8)}.`,
    WEBHOOK_SUBSCRIPTION_CACHE_TTL: '200ms',
    WEBHOOK_ALLOW_HTTP: 'true',
    WEBHOOK_ALLOWED_CIDRS: '127.0.0.1/32',
    ...settings,
  };
  await provision(loadConfig(env), createLogger('test', 'warn'));
  const idp = await startIdentityProvider(env);
  const base = `http://127.0.0.1:${await freePort()}`;
  Object.assign(env, { AUTH_URL: idp.url, GATEWAY_BASE_URL: base });
  const stack = await startServices(env, ['gateway', 'router', 'dispatcher']);
  const tenantId = `${label}-${randomBytes(4).toString('hex')}`;
  const token = await idp.token(await idp.client(tenantId));

  /** A request to the gateway with the client's token (and `headers`): its status and body text. */
  const api = async (
    method: string,
    path: string,
    body?: unknown,
    headers: Record<string, string> = {},
  ): Promise<Answer> => {
    const response = await fetch(`${base}${path}`, {
      method,
      headers: {
        authorization: `Bearer ${token}`,
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
        ...headers,
      },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    return { status: response.status, text: await response.text() };
  };
  /** The answer's JSON, once its status is the one expected (the body shown otherwise). */
  const json = <T>(answer: Answer, status: number): T => {
    expect(answer.status, answer.text).toBe(status);
    return JSON.parse(answer.text) as T;
  };
  const stop = async () => {
    await stack.stop();
    await idp.close();
    // The keyspace is the run's and is dropped by the global teardown; these topics are this file's own.
    await deprovision(loadConfig(env), createLogger('test', 'warn'), { keyspace: false });
  };
  return { env, tenantId, api, json, stop };
}
