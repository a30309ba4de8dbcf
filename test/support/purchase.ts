// Helpers for the purchase-service tests and benchmark: a reader of a topic from its beginning (Avro decoded through
// the registry), an HTTP client that keeps the exact response bytes, and the gateway in-process on a free port.
import { randomUUID } from 'node:crypto';
import { startGateway } from '../../api/gateway-service.ts';
import { loadConfig, type Config } from '../../core/config.ts';
import { createKafka } from '../../core/kafka.ts';
import { createLogger } from '../../core/log.ts';
import { connectPlatform } from '../../core/platform.ts';
import { createRegistry } from '../../core/registry.ts';

/** An integration event as the purchase service published it (payload as raw bytes). */
export interface PublishedEvent {
  eventId: string;
  eventType: string;
  occurredAt: string;
  tenantId: string;
  entityId: string;
  reference: string | null;
  resourceUrl: string;
  payload: Buffer;
}

export interface ReadRecord<T> {
  key: string | null;
  value: T;
  partition: number;
  offset: string;
  /** When this reader received the record (epoch ms). */
  receivedAt: number;
}

/** Reads `topic` from its beginning in a throwaway consumer group, decoding every value with the registry. */
export async function readTopic<T>(config: Config, topic: string) {
  const logger = createLogger('test-reader', 'warn');
  const kafka = createKafka(config.kafka.brokers, `reader-${randomUUID()}`, logger);
  const registry = createRegistry(config.schemaRegistryUrl);
  const records: ReadRecord<T>[] = [];
  /** Highest offset read per partition, to know when the reader has caught up with the topic's end. */
  const positions = new Map<number, bigint>();
  const consumer = kafka.consumer({ groupId: `reader-${randomUUID()}`, maxWaitTimeInMs: 100 });
  await consumer.connect();
  await consumer.subscribe({ topics: [topic], fromBeginning: true });
  await consumer.run({
    eachMessage: async ({ partition, message }) => {
      if (message.value !== null) {
        records.push({
          key: message.key?.toString('utf8') ?? null,
          value: (await registry.decode(message.value)) as T,
          partition,
          offset: message.offset,
          receivedAt: Date.now(),
        });
      }
      positions.set(partition, BigInt(message.offset));
    },
  });
  return {
    records,
    /** True once every record the topic held when called has been read. */
    async caughtUp(): Promise<boolean> {
      const admin = kafka.admin();
      await admin.connect();
      try {
        const ends = await admin.fetchTopicOffsets(topic);
        return ends.every(({ partition, high }) => {
          const end = BigInt(high);
          return end === 0n || (positions.get(partition) ?? -1n) >= end - 1n;
        });
      } finally {
        await admin.disconnect();
      }
    },
    stop: () => consumer.disconnect(),
  };
}

/** The purchase events of one entity, in the order read. */
export function eventsOf(records: ReadRecord<PublishedEvent>[], entityId: string): PublishedEvent[] {
  return records.filter((record) => record.value.entityId === entityId).map((record) => record.value);
}

/** An answer with its body kept as the exact bytes the server sent. */
export interface Answer {
  status: number;
  bytes: Buffer;
  text: string;
  headers: Headers;
  json<T = Record<string, unknown>>(): T;
}

/** Calls `{base}{path}` with a bearer token; a string body is sent exactly as given. */
export function apiClient(base: string, token: string) {
  return async (method: string, path: string, body?: unknown): Promise<Answer> => {
    const response = await fetch(`${base}${path}`, {
      method,
      headers: {
        authorization: `Bearer ${token}`,
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      },
      body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
    });
    const bytes = Buffer.from(await response.arrayBuffer());
    const text = bytes.toString('utf8');
    return { status: response.status, bytes, text, headers: response.headers, json: () => JSON.parse(text) };
  };
}

/** The gateway with only the purchase API, in this process, listening on `env.GATEWAY_BASE_URL`. */
export async function startPurchaseGateway(env: Record<string, string>) {
  const config = loadConfig(env);
  const logger = createLogger('gateway', 'warn');
  const platform = await connectPlatform(config, logger, 'test-gateway');
  const stop = await startGateway(config, platform, logger, { webhook: false, purchase: true });
  return {
    config,
    stop: async () => {
      await stop();
      await platform.close();
    },
  };
}
