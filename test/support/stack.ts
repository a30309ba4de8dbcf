// The whole pipeline for an e2e test file: its own topics (under a run prefix), the dev identity provider, the gateway,
// router and dispatcher as processes, an event publisher and HTTP receivers, all closed by close().
import { randomUUID } from 'node:crypto';
import { loadConfig } from '../../core/config.ts';
import { createLogger } from '../../core/log.ts';
import { deprovision, provision } from '../../infra/provision.ts';
import { eventPublisher } from './events.ts';
import {
  freePort,
  startIdentityProvider,
  startReceiver,
  startServices,
  testEnv,
  type ReceivedRequest,
} from './harness.ts';

export type Receiver = Awaited<ReturnType<typeof startReceiver>>;

/**
 * Starts the stack with `overrides` on the test environment (http receivers on 127.0.0.1 allowed); `label` names the
 * run's topic prefix, `names` the processes (several routers or dispatchers share their consumer group). The keyspace
 * is the test run's, dropped by the global teardown; the topics are dropped here.
 */
export async function startStack(
  label: string,
  overrides: Record<string, string> = {},
  names: ('gateway' | 'router' | 'dispatcher')[] = ['gateway', 'router', 'dispatcher'],
) {
  const run = randomUUID().slice(0, 8);
  const env: Record<string, string> = {
    ...testEnv(),
    KAFKA_TOPIC_PREFIX: `${testEnv().KAFKA_TOPIC_PREFIX}${label}${run}.`,
    WEBHOOK_ALLOW_HTTP: 'true',
    WEBHOOK_ALLOWED_CIDRS: '127.0.0.1/32',
    ...overrides,
  };
  await provision(loadConfig(env), createLogger('test', 'warn'));
  const idp = await startIdentityProvider(env);
  const receivers: Receiver[] = [];
  const closers: (() => Promise<unknown>)[] = [() => idp.close()];
  const close = async () => {
    for (const closer of closers.reverse()) await closer();
    await Promise.all(receivers.map((receiver) => receiver.close()));
    await deprovision(loadConfig(env), createLogger('test', 'warn'), { keyspace: false });
  };
  try {
    const base = `http://127.0.0.1:${await freePort()}`;
    Object.assign(env, { AUTH_URL: idp.url, GATEWAY_BASE_URL: base });
    const services = await startServices(env, names);
    closers.push(() => services.stop());
    const events = await eventPublisher(env);
    closers.push(() => events.close());
    return {
      run,
      env,
      idp,
      base,
      services,
      events,
      /** A receiver on 127.0.0.1 answering `respond` (204 by default), closed with the stack. */
      async receiver(respond?: (request: ReceivedRequest) => number | Promise<number>) {
        const started = await startReceiver(respond);
        receivers.push(started);
        return started;
      },
      /** A token of a new client of `tenantId`. */
      async tokenFor(tenantId: string) {
        return idp.token(await idp.client(tenantId));
      },
      close,
    };
  } catch (error) {
    await close();
    throw error;
  }
}

export type Stack = Awaited<ReturnType<typeof startStack>>;
