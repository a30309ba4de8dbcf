import { describe, expect, it } from 'vitest';
import { ROOT_CONTEXT, SpanKind, SpanStatusCode, trace, TraceFlags, type SpanContext } from '@opentelemetry/api';
import { resourceFromAttributes } from '@opentelemetry/resources';
import {
  AlwaysOffSampler,
  AlwaysOnSampler,
  InMemorySpanExporter,
  ParentBasedSampler,
  SimpleSpanProcessor,
  TraceIdRatioBasedSampler,
  type Sampler,
} from '@opentelemetry/sdk-trace';
import { LeanTracerProvider } from './lean-tracer.ts';

const parentOf = (flags: TraceFlags): SpanContext => ({
  traceId: '4bf92f3577b34da6a3ce929d0e0e4736',
  spanId: '00f067aa0ba902b7',
  traceFlags: flags,
  isRemote: true,
});
const under = (flags: TraceFlags) => trace.setSpanContext(ROOT_CONTEXT, parentOf(flags));

function setup(sampler: Sampler = new ParentBasedSampler({ root: new AlwaysOnSampler() })) {
  const exporter = new InMemorySpanExporter();
  const provider = new LeanTracerProvider({
    resource: resourceFromAttributes({ 'service.name': 'router' }),
    sampler,
    processor: new SimpleSpanProcessor({ exporter }),
  });
  return { tracer: provider.getTracer(), finished: () => exporter.getFinishedSpans(), provider };
}

describe('LeanTracerProvider', () => {
  it("makes a child of the parent's trace, hands it to the processor once when it ends, with what was set", () => {
    const { tracer, finished } = setup();
    const span = tracer.startSpan(
      'route e',
      { kind: SpanKind.CONSUMER, attributes: { 'webhook.event_id': 'e1' } },
      under(TraceFlags.SAMPLED),
    );
    span.setAttribute('webhook.deliveries', 2).setAttributes({ ok: true, list: ['a', 'b'] });
    span.addEvent('decoded', { bytes: 120 });
    span.updateName('route purchaseOrder.validated');
    expect(span.isRecording()).toBe(true);
    expect(finished()).toHaveLength(0);
    span.end();
    span.end();
    span.setAttribute('late', 1);
    expect(span.isRecording()).toBe(false);
    const [ended, ...more] = finished();
    expect(more).toHaveLength(0);
    expect(ended!.name).toBe('route purchaseOrder.validated');
    expect(ended!.kind).toBe(SpanKind.CONSUMER);
    expect(ended!.spanContext().traceId).toBe('4bf92f3577b34da6a3ce929d0e0e4736');
    expect(ended!.spanContext().spanId).toMatch(/^[0-9a-f]{16}$/);
    expect(ended!.spanContext().traceFlags).toBe(TraceFlags.SAMPLED);
    expect(ended!.parentSpanContext?.spanId).toBe('00f067aa0ba902b7');
    expect(ended!.attributes).toEqual({
      'webhook.event_id': 'e1',
      'webhook.deliveries': 2,
      ok: true,
      list: ['a', 'b'],
    });
    expect(ended!.events.map((event) => [event.name, event.attributes])).toEqual([['decoded', { bytes: 120 }]]);
    expect(ended!.resource.attributes['service.name']).toBe('router');
    expect(ended!.instrumentationScope.name).toBe('core-webhooks');
    const start = ended!.startTime[0] * 1000 + ended!.startTime[1] / 1e6;
    const end = ended!.endTime[0] * 1000 + ended!.endTime[1] / 1e6;
    expect(Math.abs(start - Date.now())).toBeLessThan(5_000);
    expect(end).toBeGreaterThanOrEqual(start);
  });

  it('starts a new trace without a parent, or with `root`, each id random and valid', () => {
    const { tracer, finished } = setup();
    tracer.startSpan('a').end();
    tracer.startSpan('b', { root: true }, under(TraceFlags.SAMPLED)).end();
    const [a, b] = finished();
    for (const span of [a!, b!]) {
      expect(span.spanContext().traceId).toMatch(/^[0-9a-f]{32}$/);
      expect(span.spanContext().traceId).not.toBe('4bf92f3577b34da6a3ce929d0e0e4736');
      expect(span.parentSpanContext).toBeUndefined();
    }
    expect(a!.spanContext().traceId).not.toBe(b!.spanContext().traceId);
  });

  it("follows the sampler: a parent's unsampled flag, always_off and a zero ratio make spans that record nothing", () => {
    const parentBased = setup();
    const child = parentBased.tracer.startSpan('child', {}, under(TraceFlags.NONE));
    expect(child.isRecording()).toBe(false);
    expect(child.spanContext()).toMatchObject({ traceId: '4bf92f3577b34da6a3ce929d0e0e4736', traceFlags: 0 });
    child.end();
    expect(parentBased.finished()).toHaveLength(0);
    for (const sampler of [new AlwaysOffSampler(), new TraceIdRatioBasedSampler(0)]) {
      const { tracer, finished } = setup(sampler);
      tracer.startSpan('x').end();
      expect(finished()).toHaveLength(0);
    }
    const { tracer, finished } = setup(new TraceIdRatioBasedSampler(1));
    tracer.startSpan('x').end();
    expect(finished()).toHaveLength(1);
  });

  it("keeps the API's status rules: UNSET changes nothing, OK is final, a message only with ERROR", () => {
    const { tracer, finished } = setup();
    const failed = tracer.startSpan('failed');
    failed.setStatus({ code: SpanStatusCode.ERROR, message: 'HTTP 503' });
    failed.setStatus({ code: SpanStatusCode.UNSET });
    failed.end();
    const ok = tracer.startSpan('ok');
    ok.setStatus({ code: SpanStatusCode.OK, message: 'ignored' });
    ok.setStatus({ code: SpanStatusCode.ERROR, message: 'too late' });
    ok.end();
    expect(finished().map((span) => span.status)).toEqual([
      { code: SpanStatusCode.ERROR, message: 'HTTP 503' },
      { code: SpanStatusCode.OK },
    ]);
  });

  it('records an exception as an event, and ignores attribute values the API does not allow', () => {
    const { tracer, finished } = setup();
    const span = tracer.startSpan('x', { attributes: { nested: { a: 1 } as never, mixed: [1, 'a'] as never } });
    span.setAttribute('object', {} as never);
    span.recordException(new TypeError('bad input'));
    span.end();
    const [ended] = finished();
    expect(ended!.attributes).toEqual({});
    expect(ended!.events[0]!.name).toBe('exception');
    expect(ended!.events[0]!.attributes).toMatchObject({
      'exception.type': 'TypeError',
      'exception.message': 'bad input',
    });
  });

  it('runs startActiveSpan with the new span and returns what the callback returns', () => {
    const { tracer, finished } = setup();
    const result = tracer.startActiveSpan('active', { kind: SpanKind.SERVER }, (span) => {
      span.end();
      return 42;
    });
    expect(result).toBe(42);
    expect(finished().map((span) => [span.name, span.kind])).toEqual([['active', SpanKind.SERVER]]);
  });
});
