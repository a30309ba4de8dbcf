import { readFile } from 'node:fs/promises';
import { SchemaRegistry, SchemaType } from '@kafkajs/confluent-schema-registry';
import { PoisonRecordError } from './kafka.ts';

/** The Avro schemas in `schemas/`, by the topic role that uses them. */
export const schemaFiles = {
  integrationEvent: 'integration-event.avsc',
  eventType: 'event-type.avsc',
  delivery: 'delivery.avsc',
} as const;

export type SchemaName = keyof typeof schemaFiles;

/** Avro encoding through a Confluent-compatible registry (Apicurio's ccompat API locally). */
export class AvroCodec<T> {
  constructor(
    private readonly registry: SchemaRegistry,
    readonly schemaId: number,
  ) {}

  encode(value: T): Promise<Buffer> {
    return this.registry.encode(this.schemaId, value);
  }

  /** Decodes a record; one that is not Avro of a schema the registry knows is a PoisonRecordError. */
  async decode(buffer: Buffer): Promise<T> {
    try {
      return (await this.registry.decode(buffer)) as T;
    } catch (error) {
      if (unreachable(error)) throw error; // the registry is down or slow: a later try decodes it
      throw new PoisonRecordError(`undecodable record: ${(error as Error).message}`, { cause: error });
    }
  }
}

export function createRegistry(url: string): SchemaRegistry {
  // The client joins host and path by concatenation, so the full ccompat base URL works as the host.
  return new SchemaRegistry({ host: url.replace(/\/$/, '') });
}

/** Registers (idempotently: same schema, same id) the schema under `<topic>-value` and returns a codec for it. */
export async function codecFor<T>(registry: SchemaRegistry, name: SchemaName, topic: string): Promise<AvroCodec<T>> {
  const schema = await readFile(new URL(`../schemas/${schemaFiles[name]}`, import.meta.url), 'utf8');
  const { id } = await registry.register({ type: SchemaType.AVRO, schema }, { subject: `${topic}-value` });
  return new AvroCodec<T>(registry, id);
}

/**
 * The registry could not be asked (network, timeout, 5xx), as opposed to answering that the record is bad. The client
 * reports a network error as a status 400 whose message is the socket error, so the message is checked first.
 */
function unreachable(error: unknown): boolean {
  const err = error as { code?: string; status?: number; message?: string; name?: string };
  if (
    /ECONN|ETIMEDOUT|EAI_AGAIN|ENOTFOUND|EPIPE|socket|timed? ?out|fetch failed|network/i.test(
      `${err.name} ${err.message}`,
    )
  )
    return true;
  if (typeof err.status === 'number') return err.status >= 500 || err.status === 429 || err.status === 408;
  return err.code !== undefined && /^(E[A-Z]+|UND_ERR.*)$/.test(err.code);
}
