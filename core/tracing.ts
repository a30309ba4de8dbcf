import {
  context,
  propagation,
  SpanKind,
  SpanStatusCode,
  trace,
  type Attributes,
  type Context,
  type Span,
  type TextMapGetter,
} from '@opentelemetry/api';
import type { Sampler, SpanProcessor } from '@opentelemetry/sdk-trace';
import type { TracingConfig } from './config.ts';
import type { Logger } from './log.ts';

/**
 * OpenTelemetry traces across the pipeline: the purchase API call, the outbox relay's publication, the routing of the
 * event and each attempt of each delivery, one trace per event, parent to child through the W3C `traceparent`
 * carried in the outbox row and in the Kafka records' headers; each delivery's POST carries its attempt's
 * `traceparent`, so the receiver's trace joins. Off unless configured (config.ts, readTracing): then `tracing()` is
 * false and callers skip every span, so an untraced pipeline does no tracing work at all.
 */
export const TRACEPARENT_HEADER = 'traceparent';
export const TRACESTATE_HEADER = 'tracestate';

const TRACER_NAME = 'core-webhooks';
let enabled = false;

/** Whether spans are made in this process. */
export function tracing(): boolean {
  return enabled;
}

/**
 * Starts tracing for `service` when the configuration asks for it: the global tracer provider, its spans written as
 * OTLP protobuf as they end and posted in batches (otlp-span-processor.ts), and the W3C trace-context propagator.
 * Returns what flushes and stops it. The SDK is loaded only then: a service without tracing does not even load it.
 * `processor` (tests) takes the spans instead of the OTLP export.
 */
export async function startTracing(
  config: TracingConfig,
  service: string,
  logger: Logger,
  processor?: SpanProcessor,
): Promise<{ stop(): Promise<void> }> {
  if (!config.enabled && !processor) return { stop: async () => undefined };
  const [
    { W3CTraceContextPropagator },
    { defaultResource, resourceFromAttributes },
    sdk,
    { OtlpSpanProcessor },
    { LeanTracerProvider },
  ] = await Promise.all([
    import('@opentelemetry/core'),
    import('@opentelemetry/resources'),
    import('@opentelemetry/sdk-trace'),
    import('./otlp-span-processor.ts'),
    import('./lean-tracer.ts'),
  ]);
  const resource = defaultResource().merge(
    resourceFromAttributes({ ...config.resourceAttributes, 'service.name': config.serviceName ?? service }),
  );
  const provider = new LeanTracerProvider({
    resource,
    sampler: samplerOf(config, sdk),
    scope: TRACER_NAME,
    processor:
      processor ??
      new OtlpSpanProcessor({
        url: config.endpoint,
        headers: { ...config.headers },
        resource: resource.attributes,
        scheduleDelayMs: config.scheduleDelayMs,
        maxQueueSize: config.maxQueueSize,
        maxExportBatchSize: config.maxExportBatchSize,
        timeoutMs: config.timeoutMs,
        logger,
      }),
  });
  trace.setGlobalTracerProvider(provider);
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
  enabled = true;
  logger.info({ endpoint: config.endpoint, sampler: config.sampler }, 'tracing: spans exported over OTLP');
  return {
    stop: async () => {
      enabled = false;
      await provider.shutdown().catch((error: unknown) => logger.warn({ err: error }, 'tracing: last spans lost'));
      trace.disable();
      propagation.disable();
    },
  };
}

function samplerOf(config: TracingConfig, sdk: typeof import('@opentelemetry/sdk-trace')): Sampler {
  const ratio = new sdk.TraceIdRatioBasedSampler(config.samplerRatio);
  switch (config.sampler) {
    case 'always_on':
      return new sdk.AlwaysOnSampler();
    case 'always_off':
      return new sdk.AlwaysOffSampler();
    case 'traceidratio':
      return ratio;
    case 'parentbased_always_off':
      return new sdk.ParentBasedSampler({ root: new sdk.AlwaysOffSampler() });
    case 'parentbased_traceidratio':
      return new sdk.ParentBasedSampler({ root: ratio });
    case 'parentbased_always_on':
      return new sdk.ParentBasedSampler({ root: new sdk.AlwaysOnSampler() });
  }
}

const getter: TextMapGetter<Record<string, string | string[] | undefined>> = {
  keys: (carrier) => Object.keys(carrier),
  get: (carrier, key) => carrier[key],
};

/** The trace context a carrier's `traceparent` (and `tracestate`) names; the empty root context without one. */
export function contextOf(carrier: Record<string, string | string[] | undefined>): Context {
  return propagation.extract(context.active(), carrier, getter);
}

/** The `traceparent` (and `tracestate`) headers naming `span` as the parent of what follows. */
export function headersOf(span: Span): Record<string, string> {
  const headers: Record<string, string> = {};
  propagation.inject(trace.setSpan(context.active(), span), headers);
  return headers;
}

export type SpanRole = 'server' | 'client' | 'producer' | 'consumer' | 'internal';
const KINDS: Record<SpanRole, SpanKind> = {
  server: SpanKind.SERVER,
  client: SpanKind.CLIENT,
  producer: SpanKind.PRODUCER,
  consumer: SpanKind.CONSUMER,
  internal: SpanKind.INTERNAL,
};

/** Runs `work` in `span` (when there is one), ending the span with its outcome. */
export async function inSpan<T>(span: Span | undefined, work: () => Promise<T>): Promise<T> {
  if (!span) return work();
  try {
    const result = await work();
    span.end();
    return result;
  } catch (error) {
    endSpan(span, error);
    throw error;
  }
}

/** Starts a span under `parent` (a `traceparent` carrier or a context). */
export function startSpan(
  name: string,
  role: SpanRole,
  parent: Context | Record<string, string | string[] | undefined>,
  attributes: Attributes = {},
): Span {
  const parentContext = isContext(parent) ? parent : contextOf(parent);
  return trace.getTracer(TRACER_NAME).startSpan(name, { kind: KINDS[role], attributes }, parentContext);
}

/** Ends a span, marked as an error when `error` is given. */
export function endSpan(span: Span, error?: unknown): void {
  if (error !== undefined) {
    span.setStatus({ code: SpanStatusCode.ERROR, message: error instanceof Error ? error.message : String(error) });
  }
  span.end();
}

/** Marks a span failed without an exception (an HTTP answer that is a failure). */
export function failSpan(span: Span, message: string): void {
  span.setStatus({ code: SpanStatusCode.ERROR, message });
}

function isContext(value: unknown): value is Context {
  return typeof (value as Context).getValue === 'function';
}

export type { Span };
