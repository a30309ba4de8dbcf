import { createServer, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { ROOT_CONTEXT, SpanKind, SpanStatusCode, trace, TraceFlags, type Tracer } from '@opentelemetry/api';
import { TraceState } from '@opentelemetry/core';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { AlwaysOnSampler, InMemorySpanExporter, SimpleSpanProcessor, TracerProvider } from '@opentelemetry/sdk-trace';
import { ProtobufTraceSerializer } from '@opentelemetry/otlp-transformer';
import { pino } from 'pino';
import { OtlpSpanProcessor, type OtlpSpanProcessorOptions } from './otlp-span-processor.ts';
import { decodeTraces, fields } from '../test/support/otlp-receiver.ts';

const logger = pino({ level: 'silent' });
const PARENT = trace.setSpanContext(ROOT_CONTEXT, {
  traceId: '4bf92f3577b34da6a3ce929d0e0e4736',
  spanId: '00f067aa0ba902b7',
  traceFlags: TraceFlags.SAMPLED,
  isRemote: true,
  traceState: new TraceState('vendor=value,other=1'),
});

/** A collector stand-in: what it was posted, and the answers it gives in turn (then 200). */
async function collector(answers: number[] = []) {
  const posts: { headers: IncomingHttpHeaders; body: Buffer }[] = [];
  const server = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      posts.push({ headers: request.headers, body: Buffer.concat(chunks) });
      response.writeHead(answers.shift() ?? 200).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1/traces`,
    posts,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

describe('OtlpSpanProcessor', () => {
  const cleanups: (() => Promise<unknown>)[] = [];
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  });

  /** A provider whose spans go both to the processor under test and to memory (for the SDK's own serializer). */
  const setup = async (options: Partial<OtlpSpanProcessorOptions> = {}, answers: number[] = []) => {
    const receiver = await collector(answers);
    const processor = new OtlpSpanProcessor({
      url: receiver.url,
      headers: { authorization: 'Bearer collector-token' },
      resource: { 'service.name': 'dispatcher', 'deployment.environment': 'test' },
      scheduleDelayMs: 60_000,
      maxQueueSize: 100,
      maxExportBatchSize: 50,
      timeoutMs: 2_000,
      retryDelaysMs: [10, 10],
      logger,
      ...options,
    });
    const memory = new InMemorySpanExporter();
    const provider = new TracerProvider({
      resource: resourceFromAttributes({ 'service.name': 'dispatcher', 'deployment.environment': 'test' }),
      sampler: new AlwaysOnSampler(),
      spanProcessors: [processor, new SimpleSpanProcessor({ exporter: memory })],
    });
    cleanups.push(receiver.close, () => provider.shutdown());
    return { receiver, processor, memory, tracer: provider.getTracer('core-webhooks', '1.2.3') };
  };

  const spansOf = (tracer: Tracer, count: number) => {
    for (let i = 0; i < count; i++) tracer.startSpan(`span ${i}`, {}, PARENT).end();
  };

  it('writes the same OTLP request as the SDK serializer, field for field', async () => {
    const { receiver, processor, memory, tracer } = await setup();
    const span = tracer.startSpan(
      'POST purchaseOrder.validated',
      {
        kind: SpanKind.CLIENT,
        attributes: {
          'webhook.attempt': 3,
          negative: -42,
          ratio: 0.25,
          big: 2 ** 40,
          yes: true,
          no: false,
          zero: 0,
          empty: '',
          accents: 'commande validée ✓',
          long: 'x'.repeat(300),
          longer: 'y'.repeat(20_000),
          list: ['a', 'b'],
          numbers: [1, 2.5],
        },
        links: [{ context: trace.getSpanContext(PARENT)!, attributes: { why: 'retry of' } }],
      },
      PARENT,
    );
    span.addEvent('answered', { 'http.response.status_code': 503 });
    span.setStatus({ code: SpanStatusCode.ERROR, message: 'HTTP 503' });
    span.end();
    const root = tracer.startSpan('route e', { kind: SpanKind.CONSUMER });
    root.setStatus({ code: SpanStatusCode.OK });
    root.end();
    await processor.forceFlush();

    expect(receiver.posts).toHaveLength(1);
    const ours = canonical(receiver.posts[0]!.body, 'Request');
    const sdk = canonical(Buffer.from(ProtobufTraceSerializer.serializeRequest(memory.getFinishedSpans())!), 'Request');
    expect(ours).toEqual(sdk);
    const decoded = decodeTraces(receiver.posts[0]!.body);
    expect(decoded.map((span) => [span.name, span.parentSpanId, span.kind, span.statusCode])).toEqual([
      ['POST purchaseOrder.validated', '00f067aa0ba902b7', 3, 2],
      ['route e', '', 5, 1],
    ]);
    expect(decoded[0]!.attributes).toMatchObject({ 'webhook.attempt': 3, negative: -42, ratio: 0.25, yes: true });
  });

  it('posts protobuf with the configured headers, a batch once maxExportBatchSize spans wait', async () => {
    const { receiver, tracer } = await setup({ maxExportBatchSize: 5 });
    spansOf(tracer, 12);
    await expect.poll(() => receiver.posts.length).toBe(2);
    expect(receiver.posts[0]!.headers).toMatchObject({
      'content-type': 'application/x-protobuf',
      authorization: 'Bearer collector-token',
    });
    expect(receiver.posts.map((post) => decodeTraces(post.body).map((span) => span.name))).toEqual([
      ['span 0', 'span 1', 'span 2', 'span 3', 'span 4'],
      ['span 5', 'span 6', 'span 7', 'span 8', 'span 9'],
    ]);
  });

  it('posts what waits scheduleDelayMs after the first span of a batch', async () => {
    const { receiver, tracer } = await setup({ scheduleDelayMs: 30 });
    spansOf(tracer, 3);
    expect(receiver.posts).toHaveLength(0);
    await expect.poll(() => receiver.posts.length).toBe(1);
    expect(decodeTraces(receiver.posts[0]!.body)).toHaveLength(3);
  });

  it('keeps only sampled spans', async () => {
    const { receiver, processor, tracer } = await setup();
    const unsampled = trace.setSpanContext(ROOT_CONTEXT, {
      ...trace.getSpanContext(PARENT)!,
      traceFlags: TraceFlags.NONE,
    });
    const provider = new TracerProvider({ spanProcessors: [processor] });
    provider.getTracer('other').startSpan('not sampled', {}, unsampled).end();
    tracer.startSpan('sampled', {}, PARENT).end();
    await processor.forceFlush();
    expect(receiver.posts.flatMap((post) => decodeTraces(post.body)).map((span) => span.name)).toEqual(['sampled']);
  });

  it('tries a refused batch again (429, 502, 503, 504) and gives up after three tries', async () => {
    const { receiver, processor, tracer } = await setup({}, [503, 429, 503, 502]);
    spansOf(tracer, 2);
    await processor.forceFlush();
    expect(receiver.posts).toHaveLength(3);
    spansOf(tracer, 1);
    await processor.forceFlush();
    // The next batch: 502, then taken.
    expect(receiver.posts).toHaveLength(5);
    expect(decodeTraces(receiver.posts[4]!.body)).toHaveLength(1);
  });

  it('does not try again a batch the collector rejects (400)', async () => {
    const { receiver, processor, tracer } = await setup({}, [400]);
    spansOf(tracer, 2);
    await processor.forceFlush();
    expect(receiver.posts).toHaveLength(1);
  });

  it('drops and counts spans beyond maxQueueSize while the collector is away, and goes on once it is back', async () => {
    const receiver = await collector();
    await receiver.close();
    const { processor, tracer } = await setup({ url: receiver.url, maxQueueSize: 10, maxExportBatchSize: 4 });
    spansOf(tracer, 25);
    // 10 spans wait (two batches of 4 cut, 2 written), the other 15 are dropped.
    expect(processor.dropped).toBe(15);
    await processor.forceFlush();
    spansOf(tracer, 3);
    expect(processor.dropped).toBe(15);
  });

  it('posts the spans still waiting when it shuts down, and takes none after', async () => {
    const { receiver, processor, tracer } = await setup();
    spansOf(tracer, 4);
    await processor.shutdown();
    expect(decodeTraces(receiver.posts[0]!.body)).toHaveLength(4);
    spansOf(tracer, 2);
    await processor.forceFlush();
    expect(receiver.posts).toHaveLength(1);
  });
});

/**
 * A protobuf message decoded into a canonical tree by opentelemetry-proto's trace schema (which fields hold messages),
 * with proto3 defaults (zero numbers, empty strings) left out outside AnyValue: two writers that differ only in field
 * order or in writing defaults give the same tree.
 */
const SCHEMA: Record<string, Record<number, string>> = {
  Request: { 1: 'ResourceSpans' },
  ResourceSpans: { 1: 'Resource', 2: 'ScopeSpans' },
  Resource: { 1: 'KeyValue' },
  ScopeSpans: { 1: 'Scope', 2: 'Span' },
  Scope: { 3: 'KeyValue' },
  Span: { 9: 'KeyValue', 11: 'Event', 13: 'Link', 15: 'Status' },
  Event: { 3: 'KeyValue' },
  Link: { 4: 'KeyValue' },
  Status: {},
  KeyValue: { 2: 'AnyValue' },
  AnyValue: { 5: 'ArrayValue', 6: 'KeyValueList' },
  ArrayValue: { 1: 'AnyValue' },
  KeyValueList: { 1: 'KeyValue' },
};

type Tree = Record<number, unknown[]>;

function canonical(buffer: Buffer, type: string): Tree {
  const tree: Tree = {};
  const keepDefaults = type === 'AnyValue';
  for (const { number, wireType, value } of fields(buffer)) {
    let canonicalValue: unknown;
    if (typeof value === 'bigint') {
      if (value === 0n && !keepDefaults) continue;
      canonicalValue = value.toString();
    } else if (wireType === 2 && SCHEMA[type]![number]) {
      canonicalValue = canonical(value, SCHEMA[type]![number]!);
    } else {
      const zero = wireType === 2 ? value.length === 0 : value.every((byte) => byte === 0);
      if (zero && !keepDefaults) continue;
      canonicalValue = value.toString('hex');
    }
    (tree[number] ??= []).push(canonicalValue);
  }
  return tree;
}
