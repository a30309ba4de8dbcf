import { types } from '../core/cassandra.ts';

/**
 * A lightweight transaction whose outcome is unknown: it may or may not have applied. A write timeout (server side),
 * the request's own timeout (client side), or its connection closing before the answer came (a node draining or
 * dying; the driver retries such a request elsewhere only when it is idempotent, which a compare-and-set is not).
 * The caller reads at SERIAL to tell.
 */
export function casOutcomeUnknown(error: unknown): boolean {
  if (!(error instanceof Error)) return false;
  const { code, writeType, isSocketError } = error as Error & {
    code?: number;
    writeType?: string;
    isSocketError?: boolean;
  };
  if (code === types.responseErrorCodes.writeTimeout) return writeType === 'CAS';
  return error.name === 'OperationTimedOutError' || isSocketError === true;
}
