// The operator console in a real browser (Debian's headless Chromium driven by playwright-core) against the real
// system: gateway, router, dispatcher, identity provider and a real receiver on 127.0.0.1. Screenshots go to
// .local/screenshots/.
import { execFileSync } from 'node:child_process';
import { createHmac, randomUUID } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { chromium, type BrowserContext, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectCassandra } from '../../core/cassandra.ts';
import { loadConfig } from '../../core/config.ts';
import { DeliveryStore } from '../../core/deliveries/delivery-store.ts';
import { newId } from '../../core/ids.ts';
import { createLogger } from '../../core/log.ts';
import { repoRoot } from '../../infra/processes.ts';
import { deprovision, provision } from '../../infra/provision.ts';
import {
  freePort,
  startIdentityProvider,
  startReceiver,
  startServices,
  testEnv,
  waitFor,
  type ReceivedRequest,
} from '../support/harness.ts';

const CHROMIUM = '/usr/bin/chromium';
const SHOTS = path.join(repoRoot, '.local', 'screenshots');
const WEBHOOKS = '/CoreWebhook/REST/Webhooks';
/**
 * How long a check of the page polls: the console refreshes every 3 s, so a change may take the pipeline's work plus
 * one refresh period (vitest's default, 1 s, is shorter than one period).
 */
const UI = { timeout: 10_000, interval: 100 };

/** Debian's Chromium; installed here when missing (as root), since playwright-core never downloads a browser. */
function ensureChromium(): void {
  if (existsSync(CHROMIUM)) return;
  if (process.getuid?.() !== 0) {
    throw new Error(`${CHROMIUM} is missing: install Debian's package as root (apt-get install -y chromium)`);
  }
  console.log(`${CHROMIUM} is missing: installing Debian's chromium package (apt-get install -y chromium)`);
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  execFileSync('apt-get', ['update', '-qq'], { stdio: 'inherit', env });
  execFileSync('apt-get', ['install', '-y', '-qq', 'chromium'], { stdio: 'inherit', env });
  if (!existsSync(CHROMIUM)) throw new Error(`apt-get install chromium did not provide ${CHROMIUM}`);
}

interface Delivery {
  id: string;
  eventId: string;
  status: string;
  queuedAt: string;
  subscriptionId: string;
  attempts?: { statusCode: number | null }[];
}

describe('operator console in a browser', () => {
  let env: Record<string, string>;
  let idp: Awaited<ReturnType<typeof startIdentityProvider>>;
  let stack: Awaited<ReturnType<typeof startServices>>;
  let receiver: Awaited<ReturnType<typeof startReceiver>>;
  let base: string;
  let client: { clientId: string; clientSecret: string };
  let token: string;
  let outsiderUrl: string;
  let profile: string;
  let context: BrowserContext;
  let page: Page;
  let failing = false;
  const pageErrors: string[] = [];
  /** The page's last requests, as a check that fails on the page's progress reports them. */
  const network: string[] = [];
  let started = Date.now();
  // Shared by the steps, in order.
  let subscriptionId = '';
  let secret = '';
  let tenantId = '';

  beforeAll(async () => {
    ensureChromium();
    const run = randomUUID().slice(0, 8);
    env = {
      ...testEnv(),
      KAFKA_TOPIC_PREFIX: `${testEnv().KAFKA_TOPIC_PREFIX}console${run}.`,
      WEBHOOK_RETRY_DELAYS: '1s,2s',
      WEBHOOK_ALLOW_HTTP: 'true',
      WEBHOOK_ALLOWED_CIDRS: '127.0.0.1/32',
    };
    await provision(loadConfig(env), createLogger('test', 'warn'));
    idp = await startIdentityProvider(env);
    receiver = await startReceiver(() => (failing ? 500 : 204));
    base = `http://127.0.0.1:${await freePort()}`;
    Object.assign(env, { AUTH_URL: idp.url, GATEWAY_BASE_URL: base });
    stack = await startServices(env, ['gateway', 'router', 'dispatcher']);
    tenantId = `tenant-console-${run}`;
    client = await idp.client(tenantId);
    token = await idp.token(client);
    // Another tenant's subscription, which the console must never show.
    const outsider = await idp.token(await idp.client(`tenant-console-outsider-${run}`));
    outsiderUrl = `http://127.0.0.1:1/outsider-${run}`;
    await waitFor(
      async () =>
        (
          await call(
            'POST',
            `${WEBHOOKS}/Subscriptions`,
            { url: outsiderUrl, eventTypes: ['purchaseOrder.*'] },
            outsider,
          )
        ).status === 201,
      'the catalogue to accept subscriptions',
    );

    mkdirSync(SHOTS, { recursive: true });
    profile = mkdtempSync(path.join(tmpdir(), 'console-chromium-'));
    // launchPersistentContext gives Chromium this fresh --user-data-dir (playwright refuses the flag among args).
    context = await chromium.launchPersistentContext(profile, {
      executablePath: CHROMIUM,
      headless: true,
      args: [
        '--headless',
        '--no-sandbox',
        '--disable-gpu',
        '--disable-quic',
        '--no-first-run',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
      ],
      viewport: { width: 1280, height: 900 },
    });
    await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: base });
    page = context.pages()[0] ?? (await context.newPage());
    page.on('pageerror', (error) => pageErrors.push(`pageerror: ${error.message}`));
    started = Date.now();
    const log = (line: string) => {
      network.push(`${((Date.now() - started) / 1000).toFixed(3)} s ${line}`);
      if (network.length > 40) network.shift();
    };
    const where = (url: string) => url.replace(base, '').slice(0, 160);
    page.on('request', (request) => log(`→ ${request.method()} ${where(request.url())}`));
    page.on('requestfinished', (request) =>
      log(`← ${request.method()} ${where(request.url())} (${request.timing().responseEnd.toFixed(0)} ms)`),
    );
    page.on('requestfailed', (request) =>
      log(`✗ ${request.method()} ${where(request.url())}: ${request.failure()?.errorText ?? 'failed'}`),
    );
    page.on('console', (message) => {
      // An API answer of 4xx is logged by Chromium as a failed resource: expected where the test provokes one.
      if (message.type() === 'error' && !/Failed to load resource/.test(message.text())) {
        pageErrors.push(`console: ${message.text()}`);
      }
    });
  });

  afterAll(async () => {
    await context?.close();
    if (profile) rmSync(profile, { recursive: true, force: true });
    await stack?.stop();
    await receiver?.close();
    await idp?.close();
    if (env) await deprovision(loadConfig(env), createLogger('test', 'warn'), { keyspace: false });
  });

  async function call(method: string, url: string, body?: unknown, bearer = token) {
    const response = await fetch(`${base}${url}`, {
      method,
      headers: {
        authorization: `Bearer ${bearer}`,
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await response.text();
    return { status: response.status, headers: response.headers, json: <T>() => JSON.parse(text) as T, text };
  }
  const shot = (name: string) => page.screenshot({ path: path.join(SHOTS, `console-${name}.png`), fullPage: true });
  /** Inputs, selects and text areas with no label, by their markup (none expected). */
  const unlabelled = () =>
    page.evaluate(() =>
      [...document.querySelectorAll('input, select, textarea')]
        .filter((element) => (element as HTMLInputElement).type !== 'hidden')
        .filter(
          (element) =>
            ((element as HTMLInputElement).labels?.length ?? 0) === 0 &&
            !element.getAttribute('aria-label') &&
            !element.getAttribute('aria-labelledby'),
        )
        .map((element) => element.outerHTML),
    );
  const focused = () =>
    page.evaluate(() => ({
      tag: document.activeElement?.tagName,
      text: (document.activeElement as HTMLElement | null)?.innerText?.trim() ?? '',
    }));
  const row = (id: string) => page.locator(`tr[data-id="${id}"]`);
  /** A check of the page's progress that, failing, says what the page last requested and received. */
  const withNetwork = async (check: Promise<unknown>, trace: string[] = []) => {
    try {
      await check;
    } catch (error) {
      const now = await page
        .evaluate(() => {
          const more = [...document.querySelectorAll('button')].find((button) => button.textContent === 'Load more');
          return JSON.stringify({
            more: more && { hidden: more.hidden, disabled: more.disabled, connected: more.isConnected },
            summary: document.querySelector('.summary')?.textContent,
            problems: [...document.querySelectorAll('.problem')].map((problem) => problem.textContent),
          });
        })
        .catch((failure: Error) => `page.evaluate failed: ${failure.message}`);
      throw new Error(
        `${(error as Error).message}\nthe page now: ${now}\nthe checks made:\n${trace.join('\n')}` +
          `\nthe page's last requests:\n${network.join('\n')}`,
        { cause: error },
      );
    }
  };
  /** A check's evaluations, with when each began and how long it took, for withNetwork's report. */
  const traced =
    <T>(trace: string[], check: () => Promise<T>) =>
    async () => {
      const began = Date.now();
      const value = await check();
      trace.push(`${((began - started) / 1000).toFixed(3)} s: ${JSON.stringify(value)} in ${Date.now() - began} ms`);
      if (trace.length > 30) trace.shift();
      return value;
    };
  const validateOrder = async () => {
    const item = await call('POST', '/CorePurchase/REST/Items', {
      code: `BOLT-${randomUUID().slice(0, 6)}`,
      name: 'Bolt M8',
      unitPrice: '0.35',
    });
    expect(item.status, item.text).toBe(201);
    const order = await call('POST', '/CorePurchase/REST/PurchaseOrders', {
      supplierName: 'Acme',
      currency: 'EUR',
      rows: [{ itemId: item.json<{ id: string }>().id, quantity: '100' }],
    });
    expect(order.status, order.text).toBe(201);
    const orderId = order.json<{ id: string }>().id;
    const validated = await call('POST', `/CorePurchase/REST/PurchaseOrders/${orderId}/validate`);
    expect(validated.status, validated.text).toBe(200);
    return orderId;
  };
  const receivedFor = (entityId: string) =>
    waitFor(
      () =>
        receiver.received.find(
          (request) => (JSON.parse(request.body.toString('utf8')) as { entityId: string }).entityId === entityId,
        ),
      `the delivery of order ${entityId} at the receiver`,
    );

  it('is served by the gateway with a self-only CSP, outside the OpenAPI document', async () => {
    const index = await fetch(`${base}/console/`);
    expect(index.status).toBe(200);
    expect(index.headers.get('content-type')).toBe('text/html; charset=utf-8');
    expect(index.headers.get('content-security-policy')).toMatch(/default-src 'none'.*connect-src 'self'/);
    const script = await fetch(`${base}/console/app.js`);
    expect(script.headers.get('content-type')).toBe('text/javascript; charset=utf-8');
    expect((await fetch(`${base}/console/../package.json`)).status).toBe(404);
    expect((await fetch(`${base}/console/%2e%2e/package.json`)).status).toBe(404);
    const openapi = (await (await fetch(`${base}/CoreWebhook/openapi.json`)).json()) as { paths: object };
    expect(Object.keys(openapi.paths).some((entry) => entry.includes('console'))).toBe(false);
  });

  it('signs in with the client id and secret, showing a refusal as the problem says, keeping nothing stored', async () => {
    await page.goto(`${base}/console`);
    await expect.poll(() => page.title(), UI).toBe('Sign in · Core Webhooks console');
    expect(await unlabelled()).toEqual([]);
    // Signed out: no navigation and no "Sign out".
    expect(await page.getByRole('button', { name: 'Sign out' }).isVisible()).toBe(false);
    expect(await page.getByRole('navigation', { name: 'Console' }).isVisible()).toBe(false);
    await shot('sign-in');
    await page.getByLabel('Client ID').fill(client.clientId);
    await page.getByLabel('Client secret').fill('not-the-secret');
    await page.getByRole('button', { name: 'Sign in' }).click();
    const refusal = page.getByRole('alert');
    await expect.poll(() => refusal.innerText(), UI).toMatch(/Sign-in refused \(401\)\s+Unauthorized: wrong client_id/);
    expect(await page.getByLabel('Client secret').inputValue()).toBe('');

    await page.getByLabel('Client secret').fill(client.clientSecret);
    await page.getByLabel('Client secret').press('Enter');
    await page.getByRole('heading', { level: 1, name: 'Subscriptions' }).waitFor();
    expect(await focused()).toEqual({ tag: 'H1', text: 'Subscriptions' });
    expect(await page.locator('#who-text').innerText()).toContain(client.clientId);
    // The token is in memory only: no storage, no cookie, not in the page.
    const stored = await page.evaluate(() => ({
      local: localStorage.length,
      session: sessionStorage.length,
      cookie: document.cookie,
      jwtInPage: document.documentElement.outerHTML.includes('eyJ'),
      secretInPage: [...document.querySelectorAll('input')].some((input) => input.value !== ''),
    }));
    expect(stored).toEqual({ local: 0, session: 0, cookie: '', jwtInPage: false, secretInPage: false });
    expect(await context.cookies()).toEqual([]);
    // Only this tenant's subscriptions: the other tenant's is not listed.
    expect(await page.locator('main').innerText()).not.toContain(outsiderUrl);
  });

  it('creates an Hmac subscription (field errors shown on the form) and shows its secret once', async () => {
    await page.getByRole('link', { name: 'New subscription' }).click();
    await page.getByRole('heading', { level: 1, name: 'New subscription' }).waitFor();
    expect(await unlabelled()).toEqual([]);
    // Every authentication mode has its settings, each labelled.
    for (const mode of ['ApiKey', 'OAuth2', 'None', 'StandardWebhooks', 'Hmac']) {
      await page.getByLabel(mode, { exact: true }).check();
      expect(await unlabelled()).toEqual([]);
    }
    // Standard Webhooks takes a secret but names its headers itself.
    await page.getByLabel('StandardWebhooks', { exact: true }).check();
    await expect.poll(() => page.getByLabel('Signature header name').isVisible(), UI).toBe(false);
    expect(await page.getByLabel('Secret (optional)').isVisible()).toBe(true);
    await page.getByLabel('OAuth2', { exact: true }).check();
    await expect.poll(() => page.getByLabel('Token URL').isVisible(), UI).toBe(true);
    await page.getByLabel('Hmac', { exact: true }).check();
    await expect.poll(() => page.getByLabel('Token URL').isVisible(), UI).toBe(false);

    // The service's operational events are offered in a group of their own.
    const operationalGroup = page.getByRole('group', { name: 'Operational events' });
    expect(
      await operationalGroup
        .getByRole('checkbox')
        .evaluateAll((boxes) => boxes.map((box) => (box as HTMLInputElement).value)),
    ).toEqual([
      'delivery.*',
      'subscription.*',
      'delivery.abandoned',
      'subscription.created',
      'subscription.deleted',
      'subscription.disabled',
      'subscription.failing',
      'subscription.recovered',
      'subscription.updated',
    ]);

    // A private address the operator does not allow: the API's field error lands on the URL input.
    await page.getByLabel('Endpoint URL').fill('http://10.1.2.3/hooks');
    await page.getByLabel('purchaseOrder.*', { exact: true }).check();
    await page.getByRole('button', { name: 'Create subscription' }).click();
    const problem = page.getByRole('alert');
    await expect.poll(() => problem.innerText(), UI).toMatch(/Invalid request \(400\)[\s\S]*url: /);
    expect(await page.getByLabel('Endpoint URL').getAttribute('aria-invalid')).toBe('true');
    expect(await page.locator('#f-url-error').innerText()).not.toBe('');
    await shot('form-error');

    await page.getByLabel('Endpoint URL').fill(receiver.url);
    await page.getByLabel('Description (optional)').fill('Console e2e receiver');
    await page.getByRole('button', { name: 'Create subscription' }).click();
    await page.getByRole('heading', { level: 1, name: 'Subscription created' }).waitFor();
    secret = await page.getByLabel('Secret', { exact: true }).inputValue();
    expect(Buffer.from(secret, 'base64')).toHaveLength(32);
    await page.getByRole('button', { name: 'Copy secret' }).click();
    await expect.poll(() => page.evaluate(() => navigator.clipboard.readText()), UI).toBe(secret);
    await shot('secret-once');
    await page.getByRole('button', { name: 'I have saved the secret' }).click();
    await page.getByRole('heading', { level: 1, name: 'Subscriptions' }).waitFor();
    expect(await page.content()).not.toContain(secret);

    const created = page.locator('tr[data-id]', { hasText: 'Console e2e receiver' });
    subscriptionId = (await created.getAttribute('data-id')) ?? '';
    expect(await created.locator('td[data-label="Status"]').innerText()).toBe('enabled');
    expect(await created.locator('td[data-label="Failure days"]').innerText()).toBe('0');
    const stored = await call('GET', `${WEBHOOKS}/Subscriptions/${subscriptionId}`);
    expect(stored.json()).toMatchObject({
      url: receiver.url,
      authenticationMode: 'Hmac',
      eventTypes: ['purchaseOrder.*'],
      ordering: 'none',
    });
  });

  it('sends a test event from the list (keyboard only) and sees its delivery in the deliveries list', async () => {
    // Keyboard only: Tab to the row's "Send test event", Enter opens the dialog with focus inside.
    const sendTest = row(subscriptionId).getByRole('button', { name: /^Send test event/ });
    await page.getByRole('heading', { level: 1, name: 'Subscriptions' }).focus();
    for (
      let tabs = 0;
      tabs < 30 && !(await sendTest.evaluate((element) => element === document.activeElement));
      tabs++
    ) {
      await page.keyboard.press('Tab');
    }
    expect(await sendTest.evaluate((element) => element === document.activeElement)).toBe(true);
    await page.keyboard.press('Enter');
    const dialog = page.getByRole('dialog', { name: 'Send a test event' });
    await dialog.waitFor();
    expect(await focused()).toMatchObject({ tag: 'SELECT' });
    expect(await unlabelled()).toEqual([]);
    await page.keyboard.press('Escape');
    await dialog.waitFor({ state: 'detached' });
    expect(await sendTest.evaluate((element) => element === document.activeElement)).toBe(true);

    await page.keyboard.press('Enter');
    await dialog.getByLabel('Event type').selectOption('purchaseOrder.cancelled');
    await dialog.getByRole('button', { name: 'Send test event' }).click();
    await dialog.waitFor({ state: 'detached' });
    const notice = page.locator('.notice.success');
    await expect.poll(() => notice.innerText(), UI).toMatch(/Test event purchaseOrder\.cancelled sent/);
    const request = await waitFor(
      () => receiver.received.find((entry) => entry.headers['x-webhook-test'] === 'true'),
      'the test delivery at the receiver',
    );
    expect(request.headers['x-webhook-signature']).toBe(
      createHmac('sha256', secret).update(request.body).digest('base64'),
    );

    await page.getByRole('navigation', { name: 'Console' }).getByRole('link', { name: 'Deliveries' }).click();
    await page.getByRole('heading', { level: 1, name: 'Deliveries' }).waitFor();
    const testRow = row(String(request.headers['x-webhook-delivery-id']));
    await testRow.waitFor();
    // The cell: the type as a link (with the delivery id for screen readers), then the "test" mark.
    expect(await testRow.locator('td[data-label="Event type"]').innerText()).toMatch(
      /^purchaseOrder\.cancelled\b[\s\S]*\btest$/,
    );
    await expect.poll(() => testRow.locator('td[data-label="Status"]').innerText(), UI).toBe('acknowledged');
    expect(await unlabelled()).toEqual([]);
  });

  it("shows a validated purchase order's delivery arriving live, with its attempts and reconstructed headers", async () => {
    const orderId = await validateOrder();
    const request = await receivedFor(orderId);
    const deliveryId = String(request.headers['x-webhook-delivery-id']);
    // No reload: live refresh brings it into the list that is on screen.
    const arrived = row(deliveryId);
    await arrived.waitFor();
    await expect.poll(() => arrived.locator('td[data-label="Status"]').innerText(), UI).toBe('acknowledged');
    expect(await arrived.locator('td[data-label="Last answer"]').innerText()).toBe('204');
    await shot('deliveries');

    await arrived.getByRole('link').click();
    await page.getByRole('heading', { level: 1, name: /Delivery of purchaseOrder\.validated/ }).waitFor();
    expect(await focused()).toMatchObject({ tag: 'H1' });
    const attempts = page.locator('ol.timeline li[data-attempt]');
    expect(await attempts.count()).toBe(1);
    expect(await attempts.first().innerText()).toMatch(/Attempt 1[\s\S]*Status code\s*:?\s*204/);
    const headers = page.getByRole('table', { name: 'Request headers, reconstructed' });
    expect(await page.getByRole('heading', { name: 'Headers sent (reconstructed)' }).count()).toBe(1);
    const header = (name: string) => headers.locator('tr', { hasText: name }).locator('td').innerText();
    expect(await header('X-Webhook-Event-Id')).toBe(request.headers['x-webhook-event-id']);
    expect(await header('X-Webhook-Delivery-Id')).toBe(deliveryId);
    expect(await header('X-Webhook-Subscription-Id')).toBe(subscriptionId);
    expect(await header('X-Webhook-Signature')).toMatch(/hidden/);
    expect(await page.locator('dl.facts').innerText()).toContain(orderId);
    // The body sent, as the receiver got it (indented for reading).
    const shownBody = await page.getByRole('region', { name: 'Body sent' }).locator('pre').innerText();
    expect(JSON.parse(shownBody)).toEqual(JSON.parse(request.body.toString('utf8')));
    await shot('delivery');
  });

  it('shows a failing receiver retried on the timeline, refuses a replay while retrying, then replays', async () => {
    failing = true;
    const orderId = await validateOrder();
    const first = await receivedFor(orderId);
    const deliveryId = String(first.headers['x-webhook-delivery-id']);
    await page.getByRole('navigation', { name: 'Console' }).getByRole('link', { name: 'Deliveries' }).click();
    await row(deliveryId).waitFor();
    await expect.poll(() => row(deliveryId).locator('td[data-label="Status"]').innerText(), UI).toBe('retrying');
    await row(deliveryId).getByRole('link').click();
    await page.locator('ol.timeline li[data-attempt="1"]').waitFor();
    expect(await page.locator('ol.timeline li[data-attempt="1"]').innerText()).toMatch(/500/);
    // The retry after 1 s shows up on the timeline by itself, with the next retry announced after it.
    await page.locator('ol.timeline li[data-attempt="2"]').waitFor();
    // Read in one go: the page may refresh between two reads.
    const pending = await page.evaluate(() => ({
      attempts: document.querySelectorAll('ol.timeline li[data-attempt]').length,
      next: document.querySelector<HTMLElement>('ol.timeline li[data-next-retry]')?.innerText ?? '',
    }));
    expect(pending.next).toMatch(new RegExp(`^Next retry[\\s\\S]*Attempt ${pending.attempts + 1}, due `));
    await shot('retrying');

    await page.getByRole('button', { name: 'Replay' }).click();
    await expect.poll(() => page.getByRole('alert').innerText(), UI).toMatch(/Conflict \(409\)\s+.*still retrying/);

    failing = false;
    await page.getByRole('heading', { level: 1, name: /acknowledged/ }).waitFor();
    const statuses = await page.locator('ol.timeline li[data-attempt]').allInnerTexts();
    expect(statuses.length).toBeGreaterThanOrEqual(3);
    expect(statuses.at(-1)).toMatch(/204/);
    expect(statuses.slice(0, -1).every((text) => /500/.test(text))).toBe(true);

    await page.getByRole('button', { name: 'Replay' }).click();
    await page.locator('dl.facts', { hasText: 'Replay of' }).waitFor();
    const replayId = decodeURIComponent(new URL(page.url()).hash.replace('#/deliveries/', ''));
    expect(replayId).not.toBe(deliveryId);
    expect(await page.getByRole('link', { name: deliveryId }).count()).toBe(1);
    await page.getByRole('heading', { level: 1, name: /acknowledged/ }).waitFor();
    const replayed = await waitFor(
      () => receiver.received.find((entry) => entry.headers['x-webhook-delivery-id'] === replayId),
      'the replay at the receiver',
    );
    expect(replayed.headers['x-webhook-event-id']).toBe(first.headers['x-webhook-event-id']);
  });

  it('disables and re-enables the subscription; a retrying delivery is then abandoned', async () => {
    failing = true;
    const orderId = await validateOrder();
    const request: ReceivedRequest = await receivedFor(orderId);
    const deliveryId = String(request.headers['x-webhook-delivery-id']);
    await page.getByRole('navigation', { name: 'Console' }).getByRole('link', { name: 'Subscriptions' }).click();
    const toggle = row(subscriptionId).locator('[data-action="status"]');
    await toggle.click();
    await expect.poll(() => row(subscriptionId).locator('td[data-label="Status"]').innerText(), UI).toBe('disabled');
    // Focus stays on the control, now "Enable".
    expect((await focused()).text).toMatch(/^Enable/);
    expect((await call('GET', `${WEBHOOKS}/Subscriptions/${subscriptionId}`)).json()).toMatchObject({
      status: 'disabled',
    });
    await waitFor(async () => {
      const delivery = (await call('GET', `${WEBHOOKS}/Deliveries/${deliveryId}`)).json<Delivery>();
      return delivery.status === 'abandoned';
    }, 'the pending delivery abandoned after the disable');
    failing = false;
    await toggle.click();
    await expect.poll(() => row(subscriptionId).locator('td[data-label="Status"]').innerText(), UI).toBe('enabled');
    expect((await call('GET', `${WEBHOOKS}/Subscriptions/${subscriptionId}`)).json()).toMatchObject({
      status: 'enabled',
      failureDays: expect.any(Number),
    });
  });

  it('edits, rotates the secret (shown once) and deletes with a confirmation', async () => {
    await row(subscriptionId).getByRole('link', { name: /^Edit/ }).click();
    await page.getByRole('heading', { level: 1, name: 'Edit subscription' }).waitFor();
    expect(await page.getByLabel('Endpoint URL').inputValue()).toBe(receiver.url);
    await page.getByLabel('Description (optional)').fill('Console e2e receiver, edited');
    await page.getByRole('button', { name: 'Save changes' }).click();
    await page.getByRole('heading', { level: 1, name: 'Subscriptions' }).waitFor();
    expect(await row(subscriptionId).innerText()).toContain('Console e2e receiver, edited');

    // A filter with a misspelt payload path: the API's error names its place, and the editor selects that key.
    await row(subscriptionId).getByRole('link', { name: /^Edit/ }).click();
    await page.getByRole('heading', { level: 1, name: 'Edit subscription' }).waitFor();
    const editor = page.getByLabel('Filter (optional)');
    expect(await editor.inputValue()).toBe('');
    const misspelt = '{\n  "eventType": "purchaseOrder.validated",\n  "payload.totalAmont": { "$gte": "100" }\n}';
    await editor.fill(misspelt);
    await page.getByRole('button', { name: 'Save changes' }).click();
    await expect
      .poll(() => page.getByRole('alert').innerText(), UI)
      .toMatch(/filter\/payload\.totalAmont: payload\.totalAmont is in the payload schema of none/);
    expect(await editor.getAttribute('aria-invalid')).toBe('true');
    expect(await page.locator('#f-filter-error').innerText()).toMatch(/none of the subscribed event types/);
    const selected = await editor.evaluate((area: HTMLTextAreaElement) =>
      area.value.slice(area.selectionStart, area.selectionEnd),
    );
    expect(selected).toBe('"payload.totalAmont"');
    // Text that is not JSON is caught before the request.
    await editor.fill('{ "eventType": }');
    await page.getByRole('button', { name: 'Save changes' }).click();
    await expect.poll(() => page.getByRole('alert').innerText(), UI).toMatch(/filter: is not JSON: /);
    const filter = { eventType: 'purchaseOrder.validated', 'payload.totalAmount': { $gte: '100' } };
    await editor.fill(JSON.stringify(filter, null, 2));
    await page.getByRole('button', { name: 'Save changes' }).click();
    await page.getByRole('heading', { level: 1, name: 'Subscriptions' }).waitFor();
    expect((await call('GET', `${WEBHOOKS}/Subscriptions/${subscriptionId}`)).json()).toMatchObject({ filter });
    // Emptied, the filter is removed (the tests below expect every event delivered).
    await row(subscriptionId).getByRole('link', { name: /^Edit/ }).click();
    expect(JSON.parse(await page.getByLabel('Filter (optional)').inputValue())).toEqual(filter);
    await page.getByLabel('Filter (optional)').fill('');
    await page.getByRole('button', { name: 'Save changes' }).click();
    await page.getByRole('heading', { level: 1, name: 'Subscriptions' }).waitFor();
    expect((await call('GET', `${WEBHOOKS}/Subscriptions/${subscriptionId}`)).json()).toMatchObject({ filter: null });

    // The ordering switch, described by its hint: ticked sends ordering 'entity', unticked 'none' (back to the
    // default, so the tests below see no ordering).
    await row(subscriptionId).getByRole('link', { name: /^Edit/ }).click();
    const ordering = page.getByLabel("Deliver each entity's events in order");
    expect(await ordering.isChecked()).toBe(false);
    expect(await ordering.getAttribute('aria-describedby')).toBe('f-ordering-hint');
    expect(await page.locator('#f-ordering-hint').innerText()).toMatch(/one at a time, in the order/);
    await ordering.check();
    await page.getByRole('button', { name: 'Save changes' }).click();
    await page.getByRole('heading', { level: 1, name: 'Subscriptions' }).waitFor();
    expect((await call('GET', `${WEBHOOKS}/Subscriptions/${subscriptionId}`)).json()).toMatchObject({
      ordering: 'entity',
    });
    await row(subscriptionId).getByRole('link', { name: /^Edit/ }).click();
    expect(await page.getByLabel("Deliver each entity's events in order").isChecked()).toBe(true);
    await page.getByLabel("Deliver each entity's events in order").uncheck();
    await page.getByRole('button', { name: 'Save changes' }).click();
    await page.getByRole('heading', { level: 1, name: 'Subscriptions' }).waitFor();
    expect((await call('GET', `${WEBHOOKS}/Subscriptions/${subscriptionId}`)).json()).toMatchObject({
      ordering: 'none',
    });

    await row(subscriptionId)
      .getByRole('button', { name: /^Rotate secret/ })
      .click();
    const rotate = page.getByRole('dialog', { name: 'Rotate the Hmac secret?' });
    await rotate.getByRole('button', { name: 'Rotate secret' }).click();
    const rotated = await rotate.getByLabel('Secret', { exact: true }).inputValue();
    expect(Buffer.from(rotated, 'base64')).toHaveLength(32);
    expect(rotated).not.toBe(secret);
    expect(await unlabelled()).toEqual([]);
    await rotate.getByRole('button', { name: 'Done' }).click();
    await rotate.waitFor({ state: 'detached' });
    expect(await page.content()).not.toContain(rotated);
    secret = rotated;

    const doomed = await call('POST', `${WEBHOOKS}/Subscriptions`, {
      url: `${receiver.url}/doomed`,
      eventTypes: ['purchaseOrder.sent'],
      authenticationMode: 'None',
    });
    const doomedId = doomed.json<{ id: string }>().id;
    await page.getByRole('navigation', { name: 'Console' }).getByRole('link', { name: 'Deliveries' }).click();
    await page.getByRole('navigation', { name: 'Console' }).getByRole('link', { name: 'Subscriptions' }).click();
    await row(doomedId)
      .getByRole('button', { name: /^Delete/ })
      .click();
    const confirm = page.getByRole('dialog', { name: 'Delete this subscription?' });
    await confirm.waitFor();
    // A destructive dialog starts on Cancel.
    expect(await focused()).toEqual({ tag: 'BUTTON', text: 'Cancel' });
    await confirm.getByRole('button', { name: 'Delete subscription' }).click();
    await row(doomedId).waitFor({ state: 'detached' });
    expect((await call('GET', `${WEBHOOKS}/Subscriptions/${doomedId}`)).status).toBe(404);
    await shot('subscriptions');
  });

  it('shows the event-type catalogue with pretty-printed schema and example', async () => {
    await page.getByRole('navigation', { name: 'Console' }).getByRole('link', { name: 'Event types' }).click();
    const card = page.locator('article', { has: page.getByRole('heading', { name: 'purchaseOrder.validated' }) });
    await card.waitFor();
    const catalogue = (await call('GET', `${WEBHOOKS}/EventTypes/purchaseOrder.validated`)).json<{
      description: string;
      example: unknown;
    }>();
    expect(await card.innerText()).toContain(catalogue.description);
    expect(await card.getByRole('region', { name: /^Example payload/ }).innerText()).toBe(
      JSON.stringify(catalogue.example, null, 2),
    );
    await card.getByText('Payload schema (JSON Schema)').click();
    expect(await card.getByRole('region', { name: /^Payload schema/ }).innerText()).toMatch(/\n {2}"type": "object"/);
    // The service's own events come after the business events, under a heading of their own.
    const headings = await page.getByRole('heading', { level: 2 }).allInnerTexts();
    expect(headings.slice(0, 2)).toEqual(['Business events', 'Operational events']);
    const failing = page.locator('article', { has: page.getByRole('heading', { name: 'subscription.failing' }) });
    expect(await failing.innerText()).toContain('Raised by the webhooks service.');
    await shot('event-types');
  });

  it('charts deliveries and failure rate per subscription, matching the history', async () => {
    await page.getByRole('navigation', { name: 'Console' }).getByRole('link', { name: 'At a glance' }).click();
    const card = page.locator(`article[data-id="${subscriptionId}"]:not([aria-busy])`);
    await card.waitFor();
    const history = (await call('GET', `${WEBHOOKS}/Deliveries?subscriptionId=${subscriptionId}&limit=500`)).json<{
      items: Delivery[];
    }>().items;
    const failingCount = history.filter((entry) => ['retrying', 'abandoned'].includes(entry.status)).length;
    expect(history.length).toBeGreaterThanOrEqual(5);
    expect(failingCount).toBeGreaterThanOrEqual(1);
    expect(await card.locator('[data-metric="hour-total"]').innerText()).toBe(String(history.length));
    expect(await card.locator('[data-metric="day-total"]').innerText()).toBe(String(history.length));
    const rate = (failingCount / history.length) * 100;
    expect(await card.locator('[data-metric="hour-rate"]').innerText()).toBe(
      `${rate < 10 ? rate.toFixed(1) : Math.round(rate)} %`,
    );
    expect(await card.getByRole('img').count()).toBe(2);
    expect(await card.getByRole('img').first().getAttribute('aria-label')).toMatch(/^Last hour: \d+ deliveries/);
    await shot('glance');
  });

  it('pages a long history with "Load more", each delivery once, until the end of the history', async () => {
    // 110 older deliveries of the subscription, written into the history as the router writes them.
    const config = loadConfig(env);
    const db = await connectCassandra(config);
    try {
      const history = new DeliveryStore(db, config.webhook.historyRetentionMs);
      const now = Date.now();
      await Promise.all(
        Array.from({ length: 110 }, (_, index) =>
          history.insertDelivery({
            tenantId,
            id: newId(),
            eventId: newId(),
            eventType: 'purchaseOrder.validated',
            subscriptionId,
            entityId: `po-seeded-${index}`,
            status: 'acknowledged',
            attemptCount: 1,
            lastStatusCode: 204,
            lastErrorMessage: null,
            nextRetryAt: null,
            queuedAt: new Date(now - 3_600_000 - index * 60_000),
            occurredAt: new Date(now - 3_600_000 - index * 60_000).toISOString(),
            replayOf: null,
            signature: null,
          }),
        ),
      );
    } finally {
      await db.shutdown();
    }
    // What the API lists, following every cursor.
    const listed: string[] = [];
    for (let cursor: string | null = ''; cursor !== null;) {
      const answer = await call('GET', `${WEBHOOKS}/Deliveries?limit=500${cursor ? `&cursor=${cursor}` : ''}`);
      const listing = answer.json<{ items: { id: string }[]; nextCursor: string | null }>();
      listed.push(...listing.items.map((item) => item.id));
      cursor = listing.nextCursor;
    }
    expect(listed.length).toBeGreaterThan(100);

    await page.getByRole('navigation', { name: 'Console' }).getByRole('link', { name: 'Deliveries' }).click();
    await page.getByRole('heading', { level: 1, name: 'Deliveries' }).waitFor();
    const ids = () => page.locator('tbody tr').evaluateAll((rows) => rows.map((row) => row.dataset.id ?? ''));
    await expect.poll(async () => (await ids()).length, UI).toBe(50);
    // includeHidden: a role locator skips hidden elements, and isEnabled() then waits for the button to show again,
    // forever. The check below asked isHidden(), then isEnabled(): a button hidden between the two (the end of the
    // history reached) hung it until its deadline (CI failed on this).
    const more = page.getByRole('button', { name: 'Load more', includeHidden: true });
    // Each click loads until it finds rows or the end (a stretch of empty hours takes several requests).
    for (let clicks = 0; await more.isVisible(); clicks += 1) {
      expect(clicks).toBeLessThan(10);
      const trace: string[] = [];
      trace.push(`${((Date.now() - started) / 1000).toFixed(3)} s: click ${clicks + 1}`);
      await more.click();
      const settled = traced(trace, async () => ({ hidden: await more.isHidden(), enabled: await more.isEnabled() }));
      await withNetwork(
        expect.poll(async () => ((state) => state.hidden || state.enabled)(await settled()), UI).toBe(true),
        trace,
      );
    }
    expect(await page.getByText('End of the history.').isVisible()).toBe(true);
    expect(await ids()).toEqual(listed);
    expect(await page.locator('.summary').innerText()).toBe(`${listed.length} deliveries shown.`);
    await page.getByRole('navigation', { name: 'Console' }).getByRole('link', { name: 'Subscriptions' }).click();
    await page.getByRole('heading', { level: 1, name: 'Subscriptions' }).waitFor();
  });

  it('works by keyboard from the top of the page, reads on a phone, signs out, and logged no error', async () => {
    // The skip link, first in the page: Enter takes focus to the view's heading.
    await page.locator('.brand').click();
    await page.keyboard.press('Shift+Tab');
    expect(await focused()).toEqual({ tag: 'A', text: 'Skip to content' });
    await page.keyboard.press('Enter');
    expect(await focused()).toMatchObject({ tag: 'H1' });
    // The navigation: Tab to "Deliveries", Enter.
    await page.locator('.brand').click();
    await page.keyboard.press('Tab');
    expect(await focused()).toEqual({ tag: 'A', text: 'Subscriptions' });
    await page.keyboard.press('Tab');
    expect(await focused()).toEqual({ tag: 'A', text: 'Deliveries' });
    await page.keyboard.press('Enter');
    await page.getByRole('heading', { level: 1, name: 'Deliveries' }).waitFor();
    await expect.poll(focused, UI).toEqual({ tag: 'H1', text: 'Deliveries' });
    // The filters render once the subscriptions and the catalogue are read; Tab from the heading then reaches them.
    await page.getByRole('search', { name: 'Filter deliveries' }).waitFor();
    await page.keyboard.press('Tab');
    expect(await focused()).toMatchObject({ tag: 'SELECT' });
    // A filter applied by keyboard: the status select, then Enter on "Apply filters".
    await page.getByLabel('Status').selectOption('abandoned');
    await page.getByRole('button', { name: 'Apply filters' }).press('Enter');
    await expect.poll(() => page.locator('tbody tr').count(), UI).toBe(1);
    expect(await page.locator('tbody tr td[data-label="Status"]').innerText()).toBe('abandoned');
    expect(page.url()).toContain('status=abandoned');

    // The other filters are the API's too: an event id finds its one delivery, a subscription and an event type
    // keep only theirs.
    await page.getByRole('button', { name: 'Clear filters' }).click();
    await expect.poll(() => page.locator('tbody tr').count(), UI).toBeGreaterThan(1);
    const [someId] = await page.locator('tbody tr').evaluateAll((rows) => rows.map((tr) => tr.dataset.id ?? ''));
    const some = (await call('GET', `${WEBHOOKS}/Deliveries/${someId}`)).json<{ eventId: string }>();
    await page.getByLabel('Event ID').fill(some.eventId);
    await page.getByRole('button', { name: 'Apply filters' }).click();
    await expect.poll(() => page.locator('tbody tr').count(), UI).toBe(1);
    expect(page.url()).toContain(`eventId=${some.eventId}`);
    await page.getByLabel('Event ID').fill('');
    // The subscription got a purchaseOrder.cancelled test event above.
    await page.getByLabel('Subscription').selectOption(subscriptionId);
    await page.getByLabel('Event type').selectOption('purchaseOrder.cancelled');
    await page.getByRole('button', { name: 'Apply filters' }).click();
    // Until the answer to these filters has replaced the rows: some, and every one of them a cancellation.
    await expect
      .poll(async () => {
        const types = await page.locator('tbody tr td[data-label="Event type"]').allInnerTexts();
        return types.length > 0 && types.every((text) => text.startsWith('purchaseOrder.cancelled'));
      }, UI)
      .toBe(true);
    expect(page.url()).toContain(`subscriptionId=${subscriptionId}`);

    // The time range is the API's as well: a range in the future finds nothing; one that ends before it starts is
    // refused with the problem's field error.
    await page.getByRole('button', { name: 'Clear filters' }).click();
    await expect.poll(() => page.locator('tbody tr').count(), UI).toBeGreaterThan(1);
    await page.getByLabel('Queued from').fill('2999-01-01T00:00');
    await page.getByRole('button', { name: 'Apply filters' }).click();
    await expect.poll(() => page.locator('.summary').innerText(), UI).toBe('0 deliveries shown.');
    expect(await page.locator('tbody tr').count()).toBe(0);
    expect(page.url()).toContain('from=2999-01-01T00%3A00');
    await page.getByLabel('Queued before').fill('2998-01-01T00:00');
    await page.getByRole('button', { name: 'Apply filters' }).click();
    await expect.poll(() => page.getByRole('alert').innerText(), UI).toMatch(/\(400\)[\s\S]*to: must be after from/);
    // Live refresh pauses and resumes, and says so.
    await page.getByLabel(/^Live refresh/).uncheck();
    await expect.poll(() => page.locator('#status').innerText(), UI).toBe('Live refresh paused');
    await page.getByLabel(/^Live refresh/).check();
    await expect.poll(() => page.locator('#status').innerText(), UI).toBe('Live refresh resumed');

    await page.setViewportSize({ width: 390, height: 844 });
    await page.getByRole('button', { name: 'Clear filters' }).click();
    await expect.poll(() => page.locator('tbody tr').count(), UI).toBeGreaterThan(1);
    expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(390);
    await shot('phone-deliveries');
    await page.getByRole('navigation', { name: 'Console' }).getByRole('link', { name: 'Subscriptions' }).click();
    await row(subscriptionId).waitFor();
    expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(390);
    await shot('phone-subscriptions');
    await page.setViewportSize({ width: 1280, height: 900 });

    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.getByRole('heading', { level: 1, name: 'Sign in' }).waitFor();
    expect(await page.getByRole('navigation', { name: 'Console' }).isVisible()).toBe(false);
    expect(await page.getByRole('button', { name: 'Sign out' }).isVisible()).toBe(false);
    expect(pageErrors).toEqual([]);
  });
});
