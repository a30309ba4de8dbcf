import { readFile } from 'node:fs/promises';
import { SchemaRegistry, SchemaType } from '@kafkajs/confluent-schema-registry';

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

  decode(buffer: Buffer): Promise<T> {
    return this.registry.decode(buffer) as Promise<T>;
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
