import { afterEach, describe, expect, it } from 'vitest';
import { InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from '@opentelemetry/sdk-trace';
import { ProtobufTraceSerializer } from '@opentelemetry/otlp-transformer';
import { pino } from 'pino';
import { loadConfig } from './config.ts';
import { contextOf, endSpan, headersOf, inSpan, startSpan, startTracing, tracing } from './tracing.ts';
import { decodeTraces } from '../test/support/otlp-receiver.ts';

const logger = pino({ level: 'silent' });
const CALLER = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';

describe('tracing', () => {
  let stop: (() => Promise<void>) | undefined;
  afterEach(async () => {
    await stop?.();
    stop = undefined;
  });

  /** Tracing on, spans kept in memory; `finished()` flushes the batch and returns them. */
  const traced = async (env: Record<string, string> = {}) => {
    const exporter = new InMemorySpanExporter();
    const config = loadConfig({ OTEL_BSP_SCHEDULE_DELAY: '1', ...env }).tracing;
    const started = await startTracing(config, 'dispatcher', logger, new SimpleSpanProcessor({ exporter }));
    stop = started.stop;
    return {
      finished: async (count: number): Promise<ReadableSpan[]> => {
        for (let wait = 0; exporter.getFinishedSpans().length < count && wait < 100; wait += 1)
          await new Promise((resolve) => setTimeout(resolve, 5));
        return exporter.getFinishedSpans();
      },
    };
  };

  it('is off unless configured: no span is made and no header is written', async () => {
    const started = await startTracing(loadConfig({}).tracing, 'router', logger);
    stop = started.stop;
    expect(tracing()).toBe(false);
    const span = startSpan('route x', 'consumer', { traceparent: CALLER });
    expect(span.isRecording()).toBe(false);
    expect(headersOf(span)).toEqual({});
  });

  it("makes a span the child of the carrier's traceparent, and names it as the parent of what follows", async () => {
    const spans = await traced();
    expect(tracing()).toBe(true);
    const route = startSpan('route purchaseOrder.validated', 'consumer', { traceparent: CALLER }, { 'a.b': 1 });
    const { traceparent } = headersOf(route);
    expect(traceparent).toMatch(/^00-4bf92f3577b34da6a3ce929d0e0e4736-[0-9a-f]{16}-01$/);
    const attempt = startSpan('POST purchaseOrder.validated', 'client', { traceparent: traceparent! });
    endSpan(attempt);
    endSpan(route);
    const [ended, routed] = await spans.finished(2);
    expect(routed!.spanContext().spanId).toBe(traceparent!.split('-')[2]);
    expect(routed!.parentSpanContext?.spanId).toBe('00f067aa0ba902b7');
    expect(ended!.parentSpanContext?.spanId).toBe(routed!.spanContext().spanId);
    expect(ended!.resource.attributes['service.name']).toBe('dispatcher');
  });

  it('starts a root span without a carrier, and takes a context as parent too', async () => {
    const spans = await traced();
    const root = startSpan('publish x', 'producer', {});
    const child = startSpan('child', 'internal', contextOf(headersOf(root)));
    endSpan(child);
    endSpan(root);
    const [first, second] = await spans.finished(2);
    expect(second!.parentSpanContext).toBeUndefined();
    expect(first!.parentSpanContext?.spanId).toBe(second!.spanContext().spanId);
  });

  it('ends a span with the outcome of its work: an error status when it throws', async () => {
    const spans = await traced();
    await expect(
      inSpan(startSpan('fails', 'internal', {}), async () => Promise.reject(new Error('boom'))),
    ).rejects.toThrow('boom');
    expect(await inSpan(startSpan('works', 'internal', {}), async () => 42)).toBe(42);
    expect(await inSpan(undefined, async () => 7)).toBe(7);
    const [failed, worked] = await spans.finished(2);
    expect([failed!.status, worked!.status]).toEqual([{ code: 2, message: 'boom' }, { code: 0 }]);
  });

  it('samples as OTEL_TRACES_SAMPLER says, and follows a sampled parent under parentbased_*', async () => {
    const spans = await traced({ OTEL_TRACES_SAMPLER: 'parentbased_always_off' });
    endSpan(startSpan('root, not sampled', 'internal', {}));
    endSpan(startSpan('child of a sampled caller', 'internal', { traceparent: CALLER }));
    const finished = await spans.finished(1);
    expect(finished.map((span) => span.name)).toEqual(['child of a sampled caller']);
  });

  it("lets the test's OTLP receiver decode what the exporter's own protobuf serializer writes", async () => {
    const spans = await traced({ OTEL_SERVICE_NAME: 'renamed' });
    const route = startSpan('route e', 'consumer', { traceparent: CALLER }, { 'webhook.deliveries': 3, ok: true });
    const attempt = startSpan('POST e', 'client', headersOf(route), { 'http.response.status_code': 503 });
    attempt.setStatus({ code: 2, message: 'HTTP 503' });
    endSpan(attempt);
    endSpan(route);
    const body = Buffer.from(ProtobufTraceSerializer.serializeRequest(await spans.finished(2))!);
    const decoded = decodeTraces(body);
    expect(decoded).toEqual([
      {
        service: 'renamed',
        traceId: '4bf92f3577b34da6a3ce929d0e0e4736',
        spanId: attempt.spanContext().spanId,
        parentSpanId: route.spanContext().spanId,
        name: 'POST e',
        kind: 3,
        attributes: { 'http.response.status_code': 503 },
        statusCode: 2,
      },
      {
        service: 'renamed',
        traceId: '4bf92f3577b34da6a3ce929d0e0e4736',
        spanId: route.spanContext().spanId,
        parentSpanId: '00f067aa0ba902b7',
        name: 'route e',
        kind: 5,
        attributes: { 'webhook.deliveries': 3, ok: true },
        statusCode: 0,
      },
    ]);
  });
});
