/** Small helpers shared by the infra/servers/ modules. */
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import type { ServerEndpoints } from '../servers.ts';

export const LOG_TAIL_LINES = 30;

export function portFromEnv(name: string, fallback: number): number {
  const raw = process.env[name];
  if (!raw) return fallback;
  const port = Number(raw);
  if (!Number.isInteger(port) || port <= 0 || port > 65535) throw new Error(`${name}=${raw} is not a port number`);
  return port;
}

export function splitList(value: string | undefined): string[] | undefined {
  const items = (value ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  return items.length > 0 ? items : undefined;
}

export function withTimeout<T>(promise: Promise<T>, ms: number, message: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(message)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

export function onceOnly(fn: () => Promise<void>): () => Promise<void> {
  let result: Promise<void> | undefined;
  return () => (result ??= fn());
}

export function fileHash(file: string): string {
  return createHash('sha256').update(fs.readFileSync(file)).digest('hex');
}

export async function readText(file: string): Promise<string | undefined> {
  try {
    return await fsp.readFile(file, 'utf8');
  } catch {
    return undefined;
  }
}

export function tail(text: string, lines = LOG_TAIL_LINES): string {
  return text.trimEnd().split('\n').slice(-lines).join('\n');
}

export function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

export function secondsSince(t0: number): string {
  return `${((Date.now() - t0) / 1000).toFixed(1)}s`;
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** The services' settings that point at `endpoints`. */
export function endpointsEnv(endpoints: ServerEndpoints): Record<string, string> {
  return {
    KAFKA_BROKERS: endpoints.kafkaBrokers.join(','),
    CASSANDRA_CONTACT_POINTS: endpoints.cassandraContactPoints.join(','),
    CASSANDRA_LOCAL_DC: endpoints.cassandraLocalDc,
    SCHEMA_REGISTRY_URL: endpoints.schemaRegistryUrl,
  };
}
