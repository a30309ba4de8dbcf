// The container image, built from the Dockerfile (infra/image.ts: a Docker engine started here when none answers, the
// Node base made from Debian's packages) and run: the gateway, a router and a dispatcher from it, on the host's
// network against the local servers, carry one purchase-order event from validation to a signed delivery.
import { execFile } from 'node:child_process';
import { createHmac } from 'node:crypto';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildImage, containerLauncher, ensureBaseImage, ensureEngine, LOCAL_IMAGE } from '../../infra/image.ts';
import { call } from '../support/webhook-api.ts';
import { freePort, startIdentityProvider, startReceiver, startServices, testEnv, waitFor } from '../support/harness.ts';

const run = promisify(execFile);

describe('the container image', () => {
  let engine: Awaited<ReturnType<typeof ensureEngine>> | undefined;
  let idp: Awaited<ReturnType<typeof startIdentityProvider>> | undefined;
  let receiver: Awaited<ReturnType<typeof startReceiver>> | undefined;
  let services: Awaited<ReturnType<typeof startServices>> | undefined;
  let base = '';
  let token = '';
  const ready: Record<string, string> = {};

  beforeAll(async () => {
    const progress = (line: string) => console.log(`[image] ${line}`);
    engine = await ensureEngine(progress);
    await buildImage(LOCAL_IMAGE, await ensureBaseImage(progress), progress);

    const env = { ...testEnv() };
    idp = await startIdentityProvider(env);
    receiver = await startReceiver();
    base = `http://127.0.0.1:${await freePort()}`;
    Object.assign(env, {
      AUTH_URL: idp.url,
      GATEWAY_BASE_URL: base,
      WEBHOOK_ALLOW_HTTP: 'true',
      WEBHOOK_ALLOWED_CIDRS: '127.0.0.1/32',
    });
    const metrics = { router: String(await freePort()), dispatcher: String(await freePort()) };
    ready.gateway = `${base}/ready`;
    ready.router = `http://127.0.0.1:${metrics.router}/ready`;
    ready.dispatcher = `http://127.0.0.1:${metrics.dispatcher}/ready`;
    services = await startServices(
      env,
      ['gateway', 'router', 'dispatcher'],
      { router: { METRICS_PORT: metrics.router }, dispatcher: { METRICS_PORT: metrics.dispatcher } },
      [],
      containerLauncher(LOCAL_IMAGE),
    );
    token = await idp.token(await idp.client('tenant-image'));
  });

  afterAll(async () => {
    await services?.stop();
    await receiver?.close();
    await idp?.close();
    await engine?.stop();
  });

  const api = (method: string, path: string, body?: unknown) => call(base, method, path, { token, body });

  it('runs as user 1000 with the production dependencies only, the migrations, schemas and console beside the code', async () => {
    const probe = [
      'const fs = require("node:fs");',
      'const has = (m) => { try { require.resolve(m); return true; } catch { return false; } };',
      'console.log(JSON.stringify({ uid: process.getuid(), node: process.version, env: process.env.NODE_ENV,',
      '  fastify: has("fastify"), kafkajs: has("kafkajs"), vitest: has("vitest"), typescript: has("typescript"),',
      '  files: ["dist/core/migrations", "dist/schemas", "dist/console"].filter((f) => fs.readdirSync(f).length > 0) }));',
    ].join('\n');
    const { stdout } = await run('docker', ['run', '--rm', '--network', 'none', LOCAL_IMAGE, '-e', probe]);
    expect(JSON.parse(stdout)).toEqual({
      uid: 1000,
      node: process.version,
      env: 'production',
      fastify: true,
      kafkajs: true,
      vitest: false,
      typescript: false,
      files: ['dist/core/migrations', 'dist/schemas', 'dist/console'],
    });
  });

  it('answers /ready with 200 on the gateway, the router and the dispatcher', async () => {
    for (const [name, url] of Object.entries(ready)) {
      const status = await waitFor(
        async () => {
          const response = await fetch(url);
          return response.status === 200 ? response.status : undefined;
        },
        `${name} ready at ${url}`,
        60_000,
      );
      expect(status, name).toBe(200);
    }
  });

  it('delivers a validated purchase order to a subscriber, signed, and records it', async () => {
    const subscription = await waitFor(async () => {
      const created = await api('POST', '/CoreWebhook/REST/Webhooks/Subscriptions', {
        url: receiver!.url,
        eventTypes: ['purchaseOrder.validated'],
        authenticationMode: 'Hmac',
      });
      return created.status === 201 ? (JSON.parse(created.text) as { id: string; hmacSecret: string }) : undefined;
    }, 'the subscription to be accepted');
    const item = await api('POST', '/CorePurchase/REST/Items', { code: 'IMG-1', name: 'Crate', unitPrice: '2.50' });
    expect(item.status).toBe(201);
    const itemId = (JSON.parse(item.text) as { id: string }).id;
    const order = await api('POST', '/CorePurchase/REST/PurchaseOrders', {
      supplierName: 'Acme',
      currency: 'EUR',
      rows: [{ itemId, quantity: '4' }],
    });
    expect(order.status).toBe(201);
    const orderId = (JSON.parse(order.text) as { id: string }).id;
    // One router cache period, so the new subscription is visible to the router (DESIGN §10).
    await new Promise((resolve) => setTimeout(resolve, 1_100));
    const validated = await api('POST', `/CorePurchase/REST/PurchaseOrders/${orderId}/validate`);
    expect(validated.status).toBe(200);

    const delivery = await waitFor(() => receiver!.received[0], 'the receiver to be called', 60_000);
    expect(delivery.headers['x-webhook-event-type']).toBe('purchaseOrder.validated');
    expect(delivery.headers['x-webhook-subscription-id']).toBe(subscription.id);
    expect(delivery.headers['x-webhook-signature']).toBe(
      createHmac('sha256', subscription.hmacSecret).update(delivery.body).digest('base64'),
    );
    expect(JSON.parse(delivery.body.toString('utf8'))).toMatchObject({
      entityId: orderId,
      payload: JSON.parse(validated.text),
    });
    const deliveryId = String(delivery.headers['x-webhook-delivery-id']);
    const recorded = await waitFor(async () => {
      const answer = await api('GET', `/CoreWebhook/REST/Webhooks/Deliveries/${deliveryId}`);
      const body = answer.status === 200 ? (JSON.parse(answer.text) as { status: string }) : undefined;
      return body?.status === 'acknowledged' ? body : undefined;
    }, 'the delivery to be recorded as acknowledged');
    expect(recorded).toMatchObject({ attemptCount: 1, lastStatusCode: 204 });
  });
});
