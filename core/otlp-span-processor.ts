import { Agent, request } from 'node:http';
import { request as requestTls, Agent as TlsAgent } from 'node:https';
import { TraceFlags, type AttributeValue, type Attributes, type HrTime } from '@opentelemetry/api';
import type { ReadableSpan, Span, SpanProcessor } from '@opentelemetry/sdk-trace';
import type { Logger } from './log.ts';

/**
 * The way spans leave a process: each span is written as OTLP protobuf (its `Span` message) the moment it ends and
 * the span object is let go, so a traced process holds bytes, not span objects, between two exports. Batches are
 * posted as an ExportTraceServiceRequest (OTLP/HTTP, protobuf) when `maxExportBatchSize` spans wait or
 * `scheduleDelayMs` after the first one; one post at a time; a refused post (429, 502, 503, 504, no answer) is tried
 * twice more. Spans beyond `maxQueueSize` waiting are dropped and counted, never blocking the work they describe.
 * On its own (with the SDK's tracer) it did not lower tracing's CPU cost measurably; with the lean tracer it is the
 * processor that tracer hands its spans to (README, "Cost of tracing").
 */
export interface OtlpSpanProcessorOptions {
  url: string;
  headers: Record<string, string>;
  /** The resource's attributes (service.name and the rest), written once into every export. */
  resource: Attributes;
  scheduleDelayMs: number;
  maxQueueSize: number;
  maxExportBatchSize: number;
  timeoutMs: number;
  logger: Logger;
  /** Delays before the 2nd and 3rd try of a refused post. */
  retryDelaysMs?: readonly number[];
}

const RETRYABLE = new Set([429, 502, 503, 504]);

export class OtlpSpanProcessor implements SpanProcessor {
  readonly #options: OtlpSpanProcessorOptions;
  readonly #resource: Buffer;
  /** The spans written since the last batch was cut, per instrumentation scope (its ScopeSpans' scope bytes). */
  #scopes = new Map<string, { scope: Buffer; spans: ProtoWriter }>();
  #written = 0;
  /** Batches cut and not yet posted, and how many spans they hold. */
  readonly #batches: { body: Buffer; spans: number }[] = [];
  #queued = 0;
  #timer: NodeJS.Timeout | undefined;
  #posting: Promise<void> | undefined;
  #dropped = 0;
  #lastDropWarning = 0;
  #closed = false;
  readonly #agent: Agent;

  constructor(options: OtlpSpanProcessorOptions) {
    this.#options = options;
    const resource = new ProtoWriter(256);
    writeAttributes(resource, 1, options.resource);
    this.#resource = resource.bytes();
    this.#agent = options.url.startsWith('https:')
      ? new TlsAgent({ keepAlive: true, maxSockets: 1 })
      : new Agent({ keepAlive: true, maxSockets: 1 });
  }

  /** Spans lost because too many waited (the exporter slower than the spans, or the collector away). */
  get dropped(): number {
    return this.#dropped;
  }

  onStart(_span: Span): void {}

  onEnd(span: ReadableSpan): void {
    if (this.#closed || (span.spanContext().traceFlags & TraceFlags.SAMPLED) === 0) return;
    if (this.#written + this.#queued >= this.#options.maxQueueSize) {
      this.#drop(1);
      return;
    }
    const { name, version } = span.instrumentationScope;
    const key = version ? `${name}@${version}` : name;
    let scope = this.#scopes.get(key);
    if (!scope) {
      const writer = new ProtoWriter(64);
      writer.string(1, name);
      if (version) writer.string(2, version);
      scope = { scope: writer.bytes(), spans: new ProtoWriter(64 * 1024) };
      this.#scopes.set(key, scope);
    }
    writeSpan(scope.spans, span);
    this.#written += 1;
    if (this.#written >= this.#options.maxExportBatchSize) this.#cut();
    else if (!this.#timer) {
      this.#timer = setTimeout(() => this.#cut(), this.#options.scheduleDelayMs);
      this.#timer.unref();
    }
  }

  /** Posts every span ended so far; resolves once they are posted (or given up). */
  async forceFlush(): Promise<void> {
    this.#cut();
    while (this.#posting) await this.#posting;
  }

  async shutdown(): Promise<void> {
    await this.forceFlush();
    this.#closed = true;
    this.#agent.destroy();
  }

  /** Ends the current batch: its ExportTraceServiceRequest is queued and posted in turn. */
  #cut(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    if (this.#written === 0) return;
    const request = new ProtoWriter(1024);
    const resourceSpans = request.begin(1);
    request.raw(1, this.#resource);
    for (const { scope, spans } of this.#scopes.values()) {
      if (spans.length === 0) continue;
      const scopeSpans = request.begin(2);
      request.raw(1, scope);
      request.append(spans);
      request.end(scopeSpans);
      spans.reset();
    }
    request.end(resourceSpans);
    this.#batches.push({ body: request.bytes(), spans: this.#written });
    this.#queued += this.#written;
    this.#written = 0;
    this.#posting ??= this.#postAll();
  }

  async #postAll(): Promise<void> {
    try {
      for (let batch = this.#batches.shift(); batch; batch = this.#batches.shift()) {
        await this.#post(batch.body, batch.spans);
        this.#queued -= batch.spans;
      }
    } finally {
      this.#posting = undefined;
    }
  }

  async #post(body: Buffer, spans: number): Promise<void> {
    const delays = this.#options.retryDelaysMs ?? [1000, 2000];
    for (let attempt = 0; ; attempt++) {
      const outcome = await this.#send(body);
      if (outcome.ok) return;
      if (!outcome.retryable || attempt >= delays.length) {
        this.#options.logger.warn(
          { endpoint: this.#options.url, spans, status: outcome.status, err: outcome.error },
          'tracing: the collector did not take a batch of spans; they are lost',
        );
        return;
      }
      await new Promise((resolve) => setTimeout(resolve, delays[attempt]).unref());
    }
  }

  #send(body: Buffer): Promise<{ ok: boolean; retryable: boolean; status?: number; error?: string }> {
    return new Promise((resolve) => {
      const send = this.#options.url.startsWith('https:') ? requestTls : request;
      const outgoing = send(
        this.#options.url,
        {
          method: 'POST',
          agent: this.#agent,
          timeout: this.#options.timeoutMs,
          headers: {
            ...this.#options.headers,
            'content-type': 'application/x-protobuf',
            'content-length': body.length,
          },
        },
        (response) => {
          response.resume();
          response.on('end', () => {
            const status = response.statusCode ?? 0;
            resolve({ ok: status >= 200 && status < 300, retryable: RETRYABLE.has(status), status });
          });
          response.on('error', (error) => resolve({ ok: false, retryable: true, error: error.message }));
        },
      );
      outgoing.on('timeout', () => outgoing.destroy(new Error(`no answer within ${this.#options.timeoutMs} ms`)));
      outgoing.on('error', (error) => resolve({ ok: false, retryable: true, error: error.message }));
      outgoing.end(body);
    });
  }

  #drop(count: number): void {
    this.#dropped += count;
    const now = Date.now();
    if (now - this.#lastDropWarning < 60_000) return;
    this.#lastDropWarning = now;
    this.#options.logger.warn(
      { dropped: this.#dropped, maxQueueSize: this.#options.maxQueueSize },
      'tracing: spans dropped, more were waiting than OTEL_BSP_MAX_QUEUE_SIZE',
    );
  }
}

/**
 * A protobuf writer into one growing buffer. A nested message is written in place: begin() leaves one byte for its
 * length, end() writes it (moving the content when the length needs more bytes than one).
 */
export class ProtoWriter {
  #buffer: Buffer;
  #at = 0;

  constructor(size: number) {
    this.#buffer = Buffer.allocUnsafe(size);
  }

  get length(): number {
    return this.#at;
  }

  reset(): void {
    this.#at = 0;
  }

  /** A copy of what was written. */
  bytes(): Buffer {
    return Buffer.from(this.#buffer.subarray(0, this.#at));
  }

  #room(bytes: number): void {
    if (this.#at + bytes <= this.#buffer.length) return;
    const grown = Buffer.allocUnsafe(Math.max(this.#buffer.length * 2, this.#at + bytes));
    this.#buffer.copy(grown, 0, 0, this.#at);
    this.#buffer = grown;
  }

  varint(value: number): void {
    this.#room(10);
    const buffer = this.#buffer;
    while (value > 0x7f) {
      buffer[this.#at++] = (value & 0x7f) | 0x80;
      value = value > 0xffffffff ? Math.floor(value / 128) : value >>> 7;
    }
    buffer[this.#at++] = value;
  }

  tag(field: number, wireType: number): void {
    this.varint((field << 3) | wireType);
  }

  /** A uint64/int64 field (a negative one as its two's complement, ten bytes). */
  integer(field: number, value: number): void {
    this.tag(field, 0);
    if (value >= 0) {
      this.varint(value);
      return;
    }
    let rest = BigInt.asUintN(64, BigInt(value));
    this.#room(10);
    while (rest > 0x7fn) {
      this.#buffer[this.#at++] = Number(rest & 0x7fn) | 0x80;
      rest >>= 7n;
    }
    this.#buffer[this.#at++] = Number(rest);
  }

  double(field: number, value: number): void {
    this.tag(field, 1);
    this.#room(8);
    this.#at = this.#buffer.writeDoubleLE(value, this.#at);
  }

  fixed32(field: number, value: number): void {
    this.tag(field, 5);
    this.#room(4);
    this.#at = this.#buffer.writeUInt32LE(value >>> 0, this.#at);
  }

  /** An HrTime as fixed64 nanoseconds since the epoch. */
  time(field: number, [seconds, nanoseconds]: HrTime): void {
    this.tag(field, 1);
    this.#room(8);
    this.#at = this.#buffer.writeBigUInt64LE(BigInt(seconds) * 1_000_000_000n + BigInt(nanoseconds), this.#at);
  }

  string(field: number, value: string): void {
    this.tag(field, 2);
    const start = this.#open(value.length * 3);
    this.#at += this.#buffer.write(value, this.#at, 'utf8');
    this.end(start);
  }

  /** Bytes given as hex (trace and span ids). */
  hex(field: number, value: string): void {
    this.tag(field, 2);
    this.#room(1 + value.length / 2);
    this.#buffer[this.#at++] = value.length / 2;
    this.#at += this.#buffer.write(value, this.#at, 'hex');
  }

  /** A field holding already written bytes (a message). */
  raw(field: number, bytes: Buffer): void {
    this.tag(field, 2);
    this.varint(bytes.length);
    this.#room(bytes.length);
    this.#at += bytes.copy(this.#buffer, this.#at);
  }

  /** Appends what `other` holds (whole fields). */
  append(other: ProtoWriter): void {
    this.#room(other.#at);
    this.#at += other.#buffer.copy(this.#buffer, this.#at, 0, other.#at);
  }

  /** Starts a nested message in `field`; end() closes it. */
  begin(field: number): number {
    this.tag(field, 2);
    return this.#open(0);
  }

  #open(room: number): number {
    this.#room(1 + room);
    return this.#at++;
  }

  end(start: number): void {
    const length = this.#at - start - 1;
    if (length < 0x80) {
      this.#buffer[start] = length;
      return;
    }
    let size = 1;
    for (let rest = length; rest > 0x7f; rest >>>= 7) size++;
    this.#room(size - 1);
    this.#buffer.copy(this.#buffer, start + size, start + 1, this.#at);
    this.#at += size - 1;
    let at = start;
    let rest = length;
    while (rest > 0x7f) {
      this.#buffer[at++] = (rest & 0x7f) | 0x80;
      rest >>>= 7;
    }
    this.#buffer[at] = rest;
  }
}

/** Span flags: the W3C trace flags, and whether the parent was remote (opentelemetry-proto's SpanFlags). */
const HAS_IS_REMOTE = 0x100;
const IS_REMOTE = 0x200;

/**
 * One `ScopeSpans.spans` entry (opentelemetry-proto trace.proto): trace_id 1, span_id 2, trace_state 3,
 * parent_span_id 4, name 5, kind 6 (the API's kind + 1), start 7, end 8, attributes 9, dropped attributes 10, events
 * 11, dropped events 12, links 13, dropped links 14, status 15, flags 16.
 */
export function writeSpan(writer: ProtoWriter, span: ReadableSpan): void {
  const context = span.spanContext();
  const message = writer.begin(2);
  writer.hex(1, context.traceId);
  writer.hex(2, context.spanId);
  const traceState = context.traceState?.serialize();
  if (traceState) writer.string(3, traceState);
  const parent = span.parentSpanContext;
  if (parent?.spanId) writer.hex(4, parent.spanId);
  writer.string(5, span.name);
  writer.tag(6, 0);
  writer.varint(span.kind + 1);
  writer.time(7, span.startTime);
  writer.time(8, span.endTime);
  writeAttributes(writer, 9, span.attributes);
  if (span.droppedAttributesCount > 0) writer.integer(10, span.droppedAttributesCount);
  for (const event of span.events) {
    const at = writer.begin(11);
    writer.time(1, event.time);
    writer.string(2, event.name);
    if (event.attributes) writeAttributes(writer, 3, event.attributes);
    if (event.droppedAttributesCount) writer.integer(4, event.droppedAttributesCount);
    writer.end(at);
  }
  if (span.droppedEventsCount > 0) writer.integer(12, span.droppedEventsCount);
  for (const link of span.links) {
    const at = writer.begin(13);
    writer.hex(1, link.context.traceId);
    writer.hex(2, link.context.spanId);
    const linkState = link.context.traceState?.serialize();
    if (linkState) writer.string(3, linkState);
    if (link.attributes) writeAttributes(writer, 4, link.attributes);
    if (link.droppedAttributesCount) writer.integer(5, link.droppedAttributesCount);
    writer.fixed32(6, (link.context.traceFlags & 0xff) | HAS_IS_REMOTE | (link.context.isRemote ? IS_REMOTE : 0));
    writer.end(at);
  }
  if (span.droppedLinksCount > 0) writer.integer(14, span.droppedLinksCount);
  if (span.status.code !== 0 || span.status.message) {
    const at = writer.begin(15);
    if (span.status.message) writer.string(2, span.status.message);
    if (span.status.code !== 0) {
      writer.tag(3, 0);
      writer.varint(span.status.code);
    }
    writer.end(at);
  }
  writer.fixed32(16, (context.traceFlags & 0xff) | HAS_IS_REMOTE | (parent?.isRemote ? IS_REMOTE : 0));
  writer.end(message);
}

/** Repeated KeyValue { key 1, AnyValue value 2 } in `field`. */
function writeAttributes(writer: ProtoWriter, field: number, attributes: Attributes): void {
  for (const key in attributes) {
    const value = attributes[key];
    if (value === undefined || value === null) continue;
    const pair = writer.begin(field);
    writer.string(1, key);
    const any = writer.begin(2);
    writeValue(writer, value);
    writer.end(any);
    writer.end(pair);
  }
}

/** AnyValue: string 1, bool 2, int 3, double 4, array 5 (ArrayValue { repeated AnyValue values 1 }). */
function writeValue(writer: ProtoWriter, value: AttributeValue | null | undefined): void {
  if (typeof value === 'string') writer.string(1, value);
  else if (typeof value === 'boolean') {
    writer.tag(2, 0);
    writer.varint(value ? 1 : 0);
  } else if (typeof value === 'number') {
    if (Number.isSafeInteger(value)) writer.integer(3, value);
    else writer.double(4, value);
  } else if (Array.isArray(value)) {
    const array = writer.begin(5);
    for (const item of value as (string | number | boolean | null | undefined)[]) {
      const entry = writer.begin(1);
      if (item !== null && item !== undefined) writeValue(writer, item);
      writer.end(entry);
    }
    writer.end(array);
  }
}
