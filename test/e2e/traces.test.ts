// OpenTelemetry traces on the real pipeline: with OTEL_EXPORTER_OTLP_ENDPOINT pointing at a receiver of the test's
// own (protobuf decoded by test/support/otlp-receiver.ts), one validation through the purchase API, called with a
// traceparent of the caller's, makes one trace: the API call, the outbox relay's publication, the routing and each
// attempt of its delivery, each the child of the one before (an attempt retried is a second child of the routing),
// and the receiver's request carries its attempt's traceparent.
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startReceiver, waitFor } from '../support/harness.ts';
import { startOtlpReceiver, type ReceivedSpan } from '../support/otlp-receiver.ts';
import { startPipeline, type Answer } from '../support/pipeline.ts';

const SERVER = 2;
const CLIENT = 3;
const PRODUCER = 4;
const CONSUMER = 5;
const ERROR = 2;

describe('traces across the pipeline', () => {
  let otlp: Awaited<ReturnType<typeof startOtlpReceiver>>;
  let pipeline: Awaited<ReturnType<typeof startPipeline>>;
  let receiver: Awaited<ReturnType<typeof startReceiver>>;

  beforeAll(async () => {
    otlp = await startOtlpReceiver();
    pipeline = await startPipeline('traces', {
      OTEL_EXPORTER_OTLP_ENDPOINT: otlp.endpoint,
      OTEL_BSP_SCHEDULE_DELAY: '100',
      WEBHOOK_RETRY_DELAYS: '1s,2s',
    });
    let calls = 0;
    receiver = await startReceiver(() => (++calls === 1 ? 503 : 204)); // the first attempt fails, the retry passes
  });

  afterAll(async () => {
    await pipeline?.stop();
    await receiver?.close();
    await otlp?.close();
  });

  const json = <T>(answer: Answer, status: number): T => pipeline.json<T>(answer, status);

  it('makes one trace from the purchase API call to the receiver, parent links intact', async () => {
    await waitFor(async () => {
      const created = await pipeline.api('POST', '/CoreWebhook/REST/Webhooks/Subscriptions', {
        url: receiver.url,
        eventTypes: ['purchaseOrder.validated'],
        authenticationMode: 'Hmac',
      });
      return created.status === 201;
    }, 'the subscription to be created');
    await new Promise((resolve) => setTimeout(resolve, 400)); // two router cache periods: the subscription seen

    const item = json<{ id: string }>(
      await pipeline.api('POST', '/CorePurchase/REST/Items', {
        code: `T-${randomUUID().slice(0, 6)}`,
        name: 'Traced bolt',
        unitPrice: '1.50',
      }),
      201,
    );
    const order = json<{ id: string }>(
      await pipeline.api('POST', '/CorePurchase/REST/PurchaseOrders', {
        supplierName: 'Tracing Ltd',
        currency: 'EUR',
        rows: [{ itemId: item.id, quantity: '2' }],
      }),
      201,
    );
    const traceId = randomUUID().replaceAll('-', '');
    const callerSpanId = '00f067aa0ba902b7';
    const validation = await pipeline.api('POST', `/CorePurchase/REST/PurchaseOrders/${order.id}/validate`, undefined, {
      traceparent: `00-${traceId}-${callerSpanId}-01`,
    });
    expect(validation.status, validation.text).toBe(200);

    await waitFor(() => receiver.received.length >= 2, 'the failed attempt and its retry', 30_000);
    const traceparents = receiver.received.map((request) => String(request.headers.traceparent));
    for (const header of traceparents) expect(header).toMatch(new RegExp(`^00-${traceId}-[0-9a-f]{16}-01$`));

    const trace = await waitFor(
      () => {
        const spans = otlp.spans.filter((span) => span.traceId === traceId);
        return spans.filter((span) => span.kind === CLIENT).length >= 2 ? spans : undefined;
      },
      'the spans of the trace',
      30_000,
    );
    const one = (predicate: (span: ReceivedSpan) => boolean, what: string) => {
      const found = trace.filter(predicate);
      expect(found, `${what} in ${JSON.stringify(trace, null, 1)}`).toHaveLength(1);
      return found[0]!;
    };
    const call = one((span) => span.kind === SERVER, 'the API call');
    expect(call).toMatchObject({
      service: 'gateway',
      name: 'POST /CorePurchase/REST/PurchaseOrders/:id/validate',
      parentSpanId: callerSpanId,
      attributes: { 'http.response.status_code': 200 },
    });
    const publication = one((span) => span.kind === PRODUCER, 'the publication');
    expect(publication).toMatchObject({
      service: 'gateway',
      name: 'publish purchaseOrder.validated',
      parentSpanId: call.spanId,
    });
    const routing = one((span) => span.kind === CONSUMER, 'the routing');
    expect(routing).toMatchObject({
      service: 'router',
      name: 'route purchaseOrder.validated',
      parentSpanId: publication.spanId,
      attributes: { 'webhook.deliveries': 1 },
    });
    const attempts = trace
      .filter((span) => span.kind === CLIENT)
      .sort((a, b) => Number(a.attributes['webhook.attempt']) - Number(b.attributes['webhook.attempt']));
    expect(
      attempts.map((span) => [
        span.service,
        span.name,
        span.parentSpanId,
        span.attributes['webhook.attempt'],
        span.attributes['http.response.status_code'],
        span.statusCode,
      ]),
    ).toEqual([
      ['dispatcher', 'POST purchaseOrder.validated', routing.spanId, 1, 503, ERROR],
      ['dispatcher', 'POST purchaseOrder.validated', routing.spanId, 2, 204, 0],
    ]);
    // Each request names its attempt's span as its parent: the receiver's trace joins there.
    expect(traceparents).toEqual(attempts.map((span) => `00-${traceId}-${span.spanId}-01`));
    expect(otlp.refused).toEqual([]);
  });
});
