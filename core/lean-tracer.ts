import {
  context,
  SamplingDecision,
  SpanKind,
  SpanStatusCode,
  trace,
  TraceFlags,
  type Attributes,
  type AttributeValue,
  type Context,
  type Exception,
  type HrTime,
  type Link,
  type Span,
  type SpanContext,
  type SpanOptions,
  type SpanStatus,
  type TimeInput,
  type Tracer,
  type TracerProvider,
} from '@opentelemetry/api';
import type { Resource } from '@opentelemetry/resources';
import type { ReadableSpan, Sampler, SpanProcessor, TimedEvent } from '@opentelemetry/sdk-trace';

/**
 * The OpenTelemetry API's tracer, made lean for a pipeline that makes a span per delivery attempt: a sampled span is
 * one small object (no span limits, no tracer self-metrics, no processor chain), handed to its processor when it ends
 * (OtlpSpanProcessor writes it as protobuf there and lets it go). The SDK's samplers decide, so OTEL_TRACES_SAMPLER
 * behaves as the specification says. Measured against the SDK's tracer with `npm run bench -- --tracing` (README,
 * "Traces"). Spans are the API's: any instrumentation written against @opentelemetry/api records through it.
 */
export class LeanTracerProvider implements TracerProvider {
  readonly #tracer: LeanTracer;
  readonly #processor: SpanProcessor;

  constructor(options: { resource: Resource; sampler: Sampler; processor: SpanProcessor; scope?: string }) {
    this.#processor = options.processor;
    this.#tracer = new LeanTracer(options.sampler, options.processor, options.resource, {
      name: options.scope ?? 'core-webhooks',
    });
  }

  getTracer(): Tracer {
    return this.#tracer;
  }

  forceFlush(): Promise<void> {
    return this.#processor.forceFlush();
  }

  shutdown(): Promise<void> {
    return this.#processor.shutdown();
  }
}

class LeanTracer implements Tracer {
  constructor(
    private readonly sampler: Sampler,
    private readonly processor: SpanProcessor,
    private readonly resource: Resource,
    private readonly scope: { name: string },
  ) {}

  startSpan(name: string, options: SpanOptions = {}, parentContext: Context = context.active()): Span {
    const within = options.root ? trace.deleteSpan(parentContext) : parentContext;
    const parent = trace.getSpanContext(within);
    const validParent = parent && trace.isSpanContextValid(parent) ? parent : undefined;
    const traceId = validParent?.traceId ?? randomId(16);
    const kind = options.kind ?? SpanKind.INTERNAL;
    const attributes: Attributes = {};
    if (options.attributes) setAll(attributes, options.attributes);
    const links = options.links ?? [];
    const sampling = this.sampler.shouldSample(within, traceId, name, kind, attributes, links);
    const traceState = sampling.traceState ?? validParent?.traceState;
    const spanContext: SpanContext = {
      traceId,
      spanId: randomId(8),
      traceFlags: sampling.decision === SamplingDecision.RECORD_AND_SAMPLED ? TraceFlags.SAMPLED : TraceFlags.NONE,
      ...(traceState ? { traceState } : {}),
    };
    if (sampling.decision === SamplingDecision.NOT_RECORD) return trace.wrapSpanContext(spanContext);
    if (sampling.attributes) setAll(attributes, sampling.attributes);
    return new LeanSpan(name, kind, spanContext, validParent, attributes, [...links], options.startTime, this);
  }

  startActiveSpan<F extends (span: Span) => unknown>(name: string, ...rest: unknown[]): ReturnType<F> {
    const fn = rest.at(-1) as F;
    const options = (rest.length >= 2 ? rest[0] : undefined) as SpanOptions | undefined;
    const parentContext = (rest.length >= 3 ? rest[1] : undefined) as Context | undefined;
    const within = parentContext ?? context.active();
    const span = this.startSpan(name, options, within);
    return context.with(trace.setSpan(within, span), (active: Span) => fn(active) as ReturnType<F>, undefined, span);
  }

  /** Called by a span as it ends. */
  ended(span: LeanSpan): void {
    this.processor.onEnd(span);
  }

  get spanResource(): Resource {
    return this.resource;
  }

  get instrumentationScope(): { name: string } {
    return this.scope;
  }
}

/** A recording span: what the API lets callers set, and the ReadableSpan view its processor reads once it ended. */
class LeanSpan implements Span, ReadableSpan {
  readonly attributes: Attributes;
  readonly links: Link[];
  readonly events: TimedEvent[] = [];
  status: SpanStatus = { code: SpanStatusCode.UNSET };
  ended = false;
  readonly droppedAttributesCount = 0;
  readonly droppedEventsCount = 0;
  readonly droppedLinksCount = 0;
  readonly #context: SpanContext;
  readonly #started: number;
  #finished = 0;
  readonly #tracer: LeanTracer;

  constructor(
    public name: string,
    readonly kind: SpanKind,
    spanContext: SpanContext,
    readonly parentSpanContext: SpanContext | undefined,
    attributes: Attributes,
    links: Link[],
    startTime: TimeInput | undefined,
    tracer: LeanTracer,
  ) {
    this.#context = spanContext;
    this.attributes = attributes;
    this.links = links;
    this.#started = startTime === undefined ? now() : millisOf(startTime);
    this.#tracer = tracer;
  }

  get resource(): Resource {
    return this.#tracer.spanResource;
  }

  get instrumentationScope(): { name: string } {
    return this.#tracer.instrumentationScope;
  }

  get startTime(): HrTime {
    return hrTimeOf(this.#started);
  }

  get endTime(): HrTime {
    return hrTimeOf(this.#finished);
  }

  get duration(): HrTime {
    const millis = Math.max(0, this.#finished - this.#started);
    return [Math.trunc(millis / 1000), Math.round((millis % 1000) * 1e6)];
  }

  spanContext(): SpanContext {
    return this.#context;
  }

  setAttribute(key: string, value: AttributeValue): this {
    if (!this.ended && isAttributeValue(value)) this.attributes[key] = value;
    return this;
  }

  setAttributes(attributes: Attributes): this {
    if (!this.ended) setAll(this.attributes, attributes);
    return this;
  }

  addEvent(name: string, attributesOrTime?: Attributes | TimeInput, time?: TimeInput): this {
    if (this.ended) return this;
    const timeGiven = isTimeInput(attributesOrTime);
    const attributes: Attributes = {};
    if (!timeGiven && attributesOrTime) setAll(attributes, attributesOrTime);
    const at = timeGiven ? attributesOrTime : time;
    this.events.push({ name, attributes, time: hrTimeOf(at === undefined ? now() : millisOf(at)) });
    return this;
  }

  addLink(link: Link): this {
    if (!this.ended) this.links.push(link);
    return this;
  }

  addLinks(links: Link[]): this {
    if (!this.ended) this.links.push(...links);
    return this;
  }

  /** OK is final; UNSET changes nothing; a message goes with ERROR only (the API's rules). */
  setStatus(status: SpanStatus): this {
    if (this.ended || status.code === SpanStatusCode.UNSET || this.status.code === SpanStatusCode.OK) return this;
    this.status =
      status.code === SpanStatusCode.ERROR && status.message !== undefined
        ? { code: status.code, message: status.message }
        : { code: status.code };
    return this;
  }

  updateName(name: string): this {
    if (!this.ended) this.name = name;
    return this;
  }

  end(endTime?: TimeInput): void {
    if (this.ended) return;
    this.#finished = endTime === undefined ? now() : millisOf(endTime);
    this.ended = true;
    this.#tracer.ended(this);
  }

  isRecording(): boolean {
    return !this.ended;
  }

  recordException(exception: Exception, time?: TimeInput): void {
    const attributes: Attributes =
      typeof exception === 'string'
        ? { 'exception.message': exception }
        : {
            ...(exception.name ? { 'exception.type': exception.name } : {}),
            ...(exception.message ? { 'exception.message': exception.message } : {}),
            ...(exception.stack ? { 'exception.stacktrace': exception.stack } : {}),
          };
    this.addEvent('exception', attributes, time);
  }
}

const timeOrigin = performance.timeOrigin;
const now = (): number => timeOrigin + performance.now();

/** Milliseconds since the epoch of a TimeInput (a number below the process's start is performance.now() time). */
function millisOf(time: TimeInput): number {
  if (Array.isArray(time)) return time[0] * 1000 + time[1] / 1e6;
  if (time instanceof Date) return time.getTime();
  return time < timeOrigin ? timeOrigin + time : time;
}

function hrTimeOf(millis: number): HrTime {
  const seconds = Math.trunc(millis / 1000);
  return [seconds, Math.min(999_999_999, Math.round((millis - seconds * 1000) * 1e6))];
}

function isTimeInput(value: unknown): value is TimeInput {
  return typeof value === 'number' || value instanceof Date || (Array.isArray(value) && value.length === 2);
}

function isAttributeValue(value: unknown): value is AttributeValue {
  const type = typeof value;
  if (type === 'string' || type === 'number' || type === 'boolean') return true;
  if (!Array.isArray(value)) return false;
  let itemType: string | undefined;
  for (const item of value as unknown[]) {
    if (item === null || item === undefined) continue;
    const t = typeof item;
    if ((t !== 'string' && t !== 'number' && t !== 'boolean') || (itemType && t !== itemType)) return false;
    itemType = t;
  }
  return true;
}

function setAll(target: Attributes, source: Attributes): void {
  for (const key in source) {
    const value = source[key];
    if (isAttributeValue(value)) target[key] = value;
  }
}

/** A random trace (16 bytes) or span (8 bytes) id in hex, never all zeros (the SDK's way: Math.random). */
const idBytes = Buffer.alloc(16);
function randomId(bytes: 8 | 16): string {
  for (;;) {
    for (let at = 0; at < bytes; at += 4) idBytes.writeUInt32BE((Math.random() * 2 ** 32) >>> 0, at);
    for (let at = 0; at < bytes; at++) if (idBytes[at] !== 0) return idBytes.toString('hex', 0, bytes);
  }
}
