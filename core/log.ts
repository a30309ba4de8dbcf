import { pino, type Logger } from 'pino';

export type { Logger };

/** One structured JSON logger per process; services add a `service` field. */
export function createLogger(service: string, level: string): Logger {
  return pino({ level, base: { service }, timestamp: pino.stdTimeFunctions.isoTime });
}
