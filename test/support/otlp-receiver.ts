// A small OTLP/HTTP trace receiver for tests: it takes `POST /v1/traces` in protobuf (the exporters' default) and
// decodes the spans with a wire-format reader of its own (opentelemetry-proto's trace.proto, the fields used here), so
// what the services export is checked without trusting their own serializer.
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface ReceivedSpan {
  service: string;
  traceId: string;
  spanId: string;
  /** Empty for a root span. */
  parentSpanId: string;
  name: string;
  /** 1 internal, 2 server, 3 client, 4 producer, 5 consumer. */
  kind: number;
  attributes: Record<string, string | number | boolean>;
  /** 0 unset, 1 ok, 2 error. */
  statusCode: number;
}

/** One protobuf field: its number, wire type and value (a varint as bigint, bytes as a Buffer). */
export interface Field {
  number: number;
  /** 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32. */
  wireType: number;
  value: bigint | Buffer;
}

/** The fields of a protobuf message, in the order written. */
export function fields(buffer: Buffer): Field[] {
  const out: Field[] = [];
  let at = 0;
  const varint = (): bigint => {
    let result = 0n;
    for (let shift = 0n; ; shift += 7n) {
      const byte = buffer[at++]!;
      result |= BigInt(byte & 0x7f) << shift;
      if ((byte & 0x80) === 0) return result;
    }
  };
  while (at < buffer.length) {
    const key = Number(varint());
    const number = key >>> 3;
    const wireType = key & 7;
    switch (wireType) {
      case 0:
        out.push({ number, wireType, value: varint() });
        break;
      case 1:
        out.push({ number, wireType, value: buffer.subarray(at, at + 8) });
        at += 8;
        break;
      case 2: {
        const length = Number(varint());
        out.push({ number, wireType, value: buffer.subarray(at, at + length) });
        at += length;
        break;
      }
      case 5:
        out.push({ number, wireType, value: buffer.subarray(at, at + 4) });
        at += 4;
        break;
      default:
        throw new Error(`unsupported wire type ${key & 7}`);
    }
  }
  return out;
}

const all = (message: Buffer, number: number) =>
  fields(message)
    .filter((field) => field.number === number)
    .map((field) => field.value);
const first = (message: Buffer, number: number) => all(message, number)[0];
const bytesOf = (value: bigint | Buffer | undefined) => (Buffer.isBuffer(value) ? value : Buffer.alloc(0));

/** KeyValue { key = 1; AnyValue value = 2 }, AnyValue { string 1, bool 2, int 3, double 4 }. */
function attributes(messages: (bigint | Buffer)[]): Record<string, string | number | boolean> {
  const result: Record<string, string | number | boolean> = {};
  for (const pair of messages.map(bytesOf)) {
    const key = bytesOf(first(pair, 1)).toString('utf8');
    const value = bytesOf(first(pair, 2));
    const [field] = fields(value);
    if (!field) continue;
    if (field.number === 1) result[key] = bytesOf(field.value).toString('utf8');
    else if (field.number === 2) result[key] = field.value === 1n;
    else if (field.number === 3) result[key] = Number(BigInt.asIntN(64, field.value as bigint));
    else if (field.number === 4) result[key] = bytesOf(field.value).readDoubleLE(0);
  }
  return result;
}

/**
 * ExportTraceServiceRequest { repeated ResourceSpans 1 }; ResourceSpans { Resource 1 { attributes 1 }, repeated
 * ScopeSpans 2 }; ScopeSpans { repeated Span 2 }; Span { trace_id 1, span_id 2, parent_span_id 4, name 5, kind 6,
 * attributes 9, status 15 { code 3 } }.
 */
export function decodeTraces(body: Buffer): ReceivedSpan[] {
  const spans: ReceivedSpan[] = [];
  for (const resourceSpans of all(body, 1).map(bytesOf)) {
    const resource = attributes(all(bytesOf(first(resourceSpans, 1)), 1));
    for (const scopeSpans of all(resourceSpans, 2).map(bytesOf)) {
      for (const span of all(scopeSpans, 2).map(bytesOf)) {
        const status = bytesOf(first(span, 15));
        spans.push({
          service: String(resource['service.name'] ?? ''),
          traceId: bytesOf(first(span, 1)).toString('hex'),
          spanId: bytesOf(first(span, 2)).toString('hex'),
          parentSpanId: bytesOf(first(span, 4)).toString('hex'),
          name: bytesOf(first(span, 5)).toString('utf8'),
          kind: Number(first(span, 6) ?? 0n),
          attributes: attributes(all(span, 9)),
          statusCode: Number(first(status, 3) ?? 0n),
        });
      }
    }
  }
  return spans;
}

/** Starts the receiver on 127.0.0.1; `endpoint` is what OTEL_EXPORTER_OTLP_ENDPOINT takes. */
export async function startOtlpReceiver() {
  const spans: ReceivedSpan[] = [];
  const refused: string[] = [];
  const server = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      if (
        request.method !== 'POST' ||
        request.url !== '/v1/traces' ||
        !/protobuf/.test(request.headers['content-type'] ?? '')
      ) {
        refused.push(`${request.method} ${request.url} ${request.headers['content-type']}`);
        response.writeHead(404).end();
        return;
      }
      spans.push(...decodeTraces(Buffer.concat(chunks)));
      // An empty ExportTraceServiceResponse: everything accepted.
      response.writeHead(200, { 'content-type': 'application/x-protobuf' }).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    endpoint: `http://127.0.0.1:${port}`,
    spans,
    refused,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
