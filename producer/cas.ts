import { types } from '../core/cassandra.ts';

/** A write timeout of a lightweight transaction (server side) or of the request (client side): outcome unknown. */
export function isCasTimeout(error: unknown): boolean {
  if (!(error instanceof Error)) return false;
  const { code, writeType } = error as Error & { code?: number; writeType?: string };
  if (code === types.responseErrorCodes.writeTimeout) return writeType === 'CAS';
  return error.name === 'OperationTimedOutError';
}
