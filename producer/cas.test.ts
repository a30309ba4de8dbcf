import cassandra from 'cassandra-driver';
import { describe, expect, it } from 'vitest';
import { casOutcomeUnknown } from './cas.ts';

const { errors, types } = cassandra;

describe('casOutcomeUnknown', () => {
  it.each([
    [
      "a compare-and-set's write timeout",
      Object.assign(new errors.ResponseError(types.responseErrorCodes.writeTimeout, 'CAS timeout'), {
        writeType: 'CAS',
      }),
    ],
    ["the request's own timeout", new errors.OperationTimedOutError('The host did not reply before timeout 1500 ms')],
    [
      'its connection closing before the answer (a node draining)',
      Object.assign(new Error('Socket was closed'), { name: 'DriverError', isSocketError: true }),
    ],
  ])('is unknown after %s', (_what, error) => {
    expect(casOutcomeUnknown(error)).toBe(true);
  });

  it.each([
    ['not enough replicas', new errors.ResponseError(types.responseErrorCodes.unavailableException, 'Not enough')],
    [
      'a simple write timing out (not the compare-and-set)',
      Object.assign(new errors.ResponseError(types.responseErrorCodes.writeTimeout, 'timeout'), {
        writeType: 'SIMPLE',
      }),
    ],
    ['a plain error', new Error('boom')],
  ])('is no unknown compare-and-set outcome after %s', (_what, error) => {
    expect(casOutcomeUnknown(error)).toBe(false);
  });
});
