import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { validatedPurchaseOrderExample } from '../../producer/purchase-order-schema.ts';
import { compileFilter, FilterError, type FilterProblem, type FilterSubject } from './filter.ts';

/** The catalogue's validated order as a parsed payload: totalAmount '124.80', rows PAPER-A4 (45.00), TONER-K (79.80). */
const order = JSON.parse(JSON.stringify(validatedPurchaseOrderExample)) as unknown;

function subject(payload: unknown, envelope: Partial<FilterSubject> = {}): FilterSubject {
  return {
    eventId: 'evt-1',
    eventType: 'purchaseOrder.validated',
    occurredAt: '2026-03-02T09:17:03.112Z',
    entityId: '0b7c2f4e',
    reference: 'PO-000042',
    resourceUrl: 'https://purchase.example/orders/0b7c2f4e',
    payload,
    ...envelope,
  };
}

const matches = (filter: unknown, on: FilterSubject = subject(order)) => compileFilter(filter).matches(on);

/** The problems compileFilter reports, checking it throws a FilterError with its code. */
function problemsOf(document: unknown): FilterProblem[] {
  try {
    compileFilter(document);
  } catch (error) {
    expect(error).toBeInstanceOf(FilterError);
    expect((error as FilterError).code).toBe('INVALID_FILTER');
    return (error as FilterError).problems;
  }
  throw new Error(`compileFilter accepted ${JSON.stringify(document)}`);
}

describe('comparison operators on the purchase order', () => {
  it.each([
    ['$eq', { 'payload.status': { $eq: 'Validated' } }, true],
    ['$eq', { 'payload.status': { $eq: 'Cancelled' } }, false],
    ['implicit $eq', { 'payload.status': 'Validated' }, true],
    ['implicit $eq', { 'payload.status': 'Draft' }, false],
    ['$neq', { 'payload.status': { $neq: 'Cancelled' } }, true],
    ['$neq', { 'payload.status': { $neq: 'Validated' } }, false],
    ['$gt', { 'payload.totalAmount': { $gt: 100 } }, true],
    ['$gt', { 'payload.totalAmount': { $gt: 124.8 } }, false],
    ['$gte', { 'payload.totalAmount': { $gte: 124.8 } }, true],
    ['$gte', { 'payload.totalAmount': { $gte: '124.81' } }, false],
    ['$lt', { 'payload.totalAmount': { $lt: '124.81' } }, true],
    ['$lt', { 'payload.totalAmount': { $lt: 124.8 } }, false],
    ['$lte', { 'payload.totalAmount': { $lte: 124.8 } }, true],
    ['$lte', { 'payload.totalAmount': { $lte: '124.79' } }, false],
    ['$in', { 'payload.currency': { $in: ['USD', 'EUR'] } }, true],
    ['$in', { 'payload.currency': { $in: ['USD', 'GBP'] } }, false],
    ['$nin', { 'payload.currency': { $nin: ['USD', 'GBP'] } }, true],
    ['$nin', { 'payload.currency': { $nin: ['EUR'] } }, false],
    ['$exist true on a null', { 'payload.amends': { $exist: true } }, true],
    ['$exist true', { 'payload.nope': { $exist: true } }, false],
    ['$exist false', { 'payload.nope': { $exist: false } }, true],
    ['$exist false on a null', { 'payload.amends': { $exist: false } }, false],
    ['$startsWith', { 'payload.reference': { $startsWith: 'PO-' } }, true],
    ['$startsWith', { 'payload.reference': { $startsWith: 'XX-' } }, false],
    ['$startsWith on a number', { 'payload.rows.lineNumber': { $startsWith: '1' } }, false],
    ['$endsWith', { 'payload.supplierName': { $endsWith: 'Supplies' } }, true],
    ['$endsWith', { 'payload.supplierName': { $endsWith: 'Acme' } }, false],
    ['$endsWith on a null', { 'payload.amends': { $endsWith: '' } }, false],
    ['every operator of a condition', { 'payload.totalAmount': { $gt: 100, $lt: 200 } }, true],
    ['every operator of a condition', { 'payload.totalAmount': { $gt: 100, $lt: 110 } }, false],
    ['every key of a filter', { 'payload.status': 'Validated', 'payload.currency': 'USD' }, false],
  ])('%s: %j → %s', (_name, filter, expected) => {
    expect(matches(filter)).toBe(expected);
  });
});

describe('equality', () => {
  it.each([
    ['$eq an object, keys in another order', { 'payload.x': { $eq: { b: 2, a: 1 } } }, { x: { a: 1, b: 2 } }, true],
    ['$eq an object, one value differs', { 'payload.x': { $eq: { a: 1, b: 3 } } }, { x: { a: 1, b: 2 } }, false],
    ['$eq an object, an extra key', { 'payload.x': { $eq: { a: 1 } } }, { x: { a: 1, b: 2 } }, false],
    ['$eq an empty object', { 'payload.x': { $eq: {} } }, { x: {} }, true],
    ['$eq an empty object against a full one', { 'payload.x': { $eq: {} } }, { x: { a: 1 } }, false],
    ['array, same order', { 'payload.tags': ['a', 'b'] }, { tags: ['a', 'b'] }, true],
    ['array, other order', { 'payload.tags': ['b', 'a'] }, { tags: ['a', 'b'] }, false],
    ['array, a prefix', { 'payload.tags': ['a'] }, { tags: ['a', 'b'] }, false],
    ['a scalar against an array (the array is one value)', { 'payload.tags': 'a' }, { tags: ['a', 'b'] }, false],
    ['nested decimal rule', { 'payload.x': { $eq: { a: [1.5] } } }, { x: { a: ['1.50'] } }, true],
    ['null', { 'payload.x': null }, { x: null }, true],
    ['null is not missing', { 'payload.x': null }, {}, false],
    ['boolean', { 'payload.x': true }, { x: true }, true],
    ['boolean is not 1', { 'payload.x': 1 }, { x: true }, false],
    ['the whole payload', { payload: { $eq: { a: '1' } } }, { a: 1 }, true],
  ])('%s', (_name, filter, payload, expected) => {
    expect(matches(filter, subject(payload))).toBe(expected);
  });

  it.each([
    ['124.80', 124.8, true],
    ['124.8', 124.8, true],
    ['124.81', 124.8, false],
    ['0.1', 0.1, true],
    ['0.10000000000000001', 0.1, false],
    ['1000000000000000000000', 1e21, true],
    ['1000000000000000000001', 1e21, false],
    ['0.0000001', 1e-7, true],
    ['-0', 0, true],
    ['-0.000', 0, true],
    ['007', 7, true],
    ['-3.50', -3.5, true],
    ['3.50', -3.5, false],
    ['1e3', 1000, false],
    [' 7', 7, false],
    ['7.', 7, false],
    ['.5', 0.5, false],
    ['+7', 7, false],
  ])('the decimal string %s equals %s exactly: %s, whichever side is the operand', (text, number, expected) => {
    expect(matches({ 'payload.x': text }, subject({ x: number }))).toBe(expected);
    expect(matches({ 'payload.x': number }, subject({ x: text }))).toBe(expected);
    expect(matches({ 'payload.x': { $in: ['nope', number] } }, subject({ x: text }))).toBe(expected);
    expect(matches({ 'payload.x': { $neq: text } }, subject({ x: number }))).toBe(!expected);
  });

  it('two strings compare as strings', () => {
    expect(matches({ 'payload.totalAmount': '124.80' })).toBe(true);
    expect(matches({ 'payload.totalAmount': '124.8' })).toBe(false);
    expect(matches({ 'payload.totalAmount': { $in: ['124.8'] } })).toBe(false);
  });
});

describe('ordering', () => {
  const at = (value: unknown, condition: Record<string, unknown>) =>
    matches({ 'payload.x': condition }, subject({ x: value }));

  it('compares long decimals exactly, as strings or against numbers', () => {
    expect(at('100000000000000000000.000000001', { $gt: 1e20 })).toBe(true);
    expect(at(1e20, { $lt: '100000000000000000000.000000001' })).toBe(true);
    expect(at(1e20, { $gte: '100000000000000000000.000000001' })).toBe(false);
    expect(at('99999999999999999999999', { $lt: '100000000000000000000000' })).toBe(true);
    expect(at('0.30000000000000001', { $gt: 0.3 })).toBe(true);
    expect(at(0.1, { $gt: '0.1' })).toBe(false);
    expect(at(0.1, { $gte: '0.1' })).toBe(true);
    expect(at(0.1, { $lt: '0.10000000000000001' })).toBe(true);
    expect(at('-2', { $lt: '-10' })).toBe(false);
    expect(at('-10', { $lt: -2 })).toBe(true);
    expect(at(5e-324, { $gt: '0.' + '0'.repeat(400) + '1' })).toBe(true);
    expect(at(1.7976931348623157e308, { $lt: '1' + '0'.repeat(400) })).toBe(true);
  });

  it('orders decimal strings by value, though they are not equal as strings', () => {
    expect(at('124.80', { $gte: '124.8' })).toBe(true);
    expect(at('124.80', { $lte: '124.8' })).toBe(true);
    expect(at('124.80', { $gt: '124.8' })).toBe(false);
  });

  it('orders ISO timestamps as strings', () => {
    expect(matches({ occurredAt: { $gt: '2026-03-02T09:15:27.481Z' } })).toBe(true);
    expect(matches({ occurredAt: { $lt: '2026-03-02T09:15:27.481Z' } })).toBe(false);
    expect(matches({ occurredAt: { $gte: '2026-03-02T09:17:03.112Z', $lt: '2026-03-03' } })).toBe(true);
    expect(matches({ 'payload.createdAt': { $lt: '2026-03-02T10:00:00.000Z' } })).toBe(true);
  });

  it('compares two strings by UTF-16 code units when not both are decimals', () => {
    expect(at('b', { $gt: 'a' })).toBe(true);
    expect(at('10', { $gt: 'abc' })).toBe(false);
    expect(at('10', { $lt: 'abc' })).toBe(true);
    expect(at('\u{1F600}', { $gt: '\uFFFF' })).toBe(false); // a surrogate pair sorts below U+FFFF in code units
  });

  it.each([
    ['a non-decimal string and a number', 'abc', 1],
    ['a number and a non-decimal string', 1, 'abc'],
    ['a boolean', true, 0],
    ['null', null, 0],
    ['an object', { a: 1 }, 'a'],
    ['an array', [1], 0],
  ])('is false for %s, in every direction', (_name, value, operand) => {
    for (const operator of ['$gt', '$gte', '$lt', '$lte']) {
      expect(at(value, { [operator]: operand })).toBe(false);
    }
  });
});

describe('missing fields', () => {
  it.each([
    [{ $eq: 1 }, false],
    [{ $neq: 1 }, true],
    [{ $in: [1, null] }, false],
    [{ $nin: [1, null] }, true],
    [{ $gt: 0 }, false],
    [{ $gte: '' }, false],
    [{ $lt: 'z' }, false],
    [{ $lte: 0 }, false],
    [{ $exist: true }, false],
    [{ $exist: false }, true],
    [{ $startsWith: '' }, false],
    [{ $endsWith: '' }, false],
  ])('%j on a missing path → %s, and the same when there is no payload', (condition, expected) => {
    expect(matches({ 'payload.nope.deeper': condition })).toBe(expected);
    expect(matches({ 'payload.status': condition }, subject(undefined))).toBe(expected);
    expect(matches({ payload: condition }, subject(undefined))).toBe(expected);
  });

  it('a null payload is a value, and has no fields', () => {
    expect(matches({ payload: null }, subject(null))).toBe(true);
    expect(matches({ payload: { $exist: true } }, subject(null))).toBe(true);
    expect(matches({ 'payload.a': { $exist: false } }, subject(null))).toBe(true);
  });

  it('resolves own properties only', () => {
    expect(matches({ 'payload.constructor': { $exist: true } }, subject({}))).toBe(false);
    expect(matches({ 'payload.toString': { $exist: true } }, subject({}))).toBe(false);
    expect(matches({ 'payload.x.length': { $exist: true } }, subject({ x: 'abc' }))).toBe(false);
    expect(matches({ 'payload.x.length': { $exist: true } }, subject({ x: [1, 2] }))).toBe(false);
  });
});

describe('array paths', () => {
  it('a field name fans out over the elements', () => {
    expect(matches({ 'payload.rows.itemCode': 'TONER-K' })).toBe(true);
    expect(matches({ 'payload.rows.itemCode': { $eq: 'PAPER-A4' } })).toBe(true);
    expect(matches({ 'payload.rows.itemCode': 'STAPLER' })).toBe(false);
    expect(matches({ 'payload.rows.itemCode': { $neq: 'TONER-K' } })).toBe(false);
    expect(matches({ 'payload.rows.amount': { $gt: 50 } })).toBe(true);
    expect(matches({ 'payload.rows.amount': { $gt: 80 } })).toBe(false);
    expect(matches({ 'payload.rows.itemCode': { $in: ['STAPLER', 'TONER-K'] } })).toBe(true);
    expect(matches({ 'payload.rows.itemCode': { $nin: ['STAPLER', 'TONER-K'] } })).toBe(false);
    // Each operator over all elements: one row is above 50, another below it.
    expect(matches({ 'payload.rows.amount': { $gt: 50, $lt: 50 } })).toBe(true);
  });

  it('a numeric segment indexes the array', () => {
    expect(matches({ 'payload.rows.1.itemCode': 'TONER-K' })).toBe(true);
    expect(matches({ 'payload.rows.0.itemCode': 'TONER-K' })).toBe(false);
    expect(matches({ 'payload.rows.2.itemCode': { $exist: true } })).toBe(false);
    expect(matches({ 'payload.rows.0': { $exist: true } })).toBe(true);
    expect(matches({ 'payload.rows.00.itemCode': { $exist: true } })).toBe(false);
  });

  it('a numeric segment on an object names a key', () => {
    expect(matches({ 'payload.a.0': 'x' }, subject({ a: { '0': 'x' } }))).toBe(true);
  });

  it('fans out at each array met, but does not enter an array directly inside an array', () => {
    const payload = { orders: [{ rows: [{ code: 'A' }, { code: 'B' }] }, { rows: [{ code: 'C' }] }] };
    expect(matches({ 'payload.orders.rows.code': 'C' }, subject(payload))).toBe(true);
    expect(matches({ 'payload.a.b': 1 }, subject({ a: [[{ b: 1 }]] }))).toBe(false);
    expect(matches({ 'payload.a.0.0.b': 1 }, subject({ a: [[{ b: 1 }]] }))).toBe(true);
  });
});

describe('logical operators', () => {
  it.each([
    [{ $and: [{ 'payload.status': 'Validated' }, { 'payload.currency': 'EUR' }] }, true],
    [{ $and: [{ 'payload.status': 'Validated' }, { 'payload.currency': 'USD' }] }, false],
    [{ $or: [{ 'payload.status': 'Draft' }, { 'payload.currency': 'EUR' }] }, true],
    [{ $or: [{ 'payload.status': 'Draft' }, { 'payload.currency': 'USD' }] }, false],
    [{ $not: { 'payload.status': 'Draft' } }, true],
    [{ $not: { 'payload.status': 'Validated' } }, false],
    [{ $not: {} }, false],
    [{ $or: [{}] }, true],
    [{ $or: [{ $and: [{ eventType: 'purchaseOrder.validated' }, { $not: { reference: null } }] }] }, true],
    [{ $not: { $or: [{ eventType: { $startsWith: 'invoice.' } }, { 'payload.rows.itemCode': 'TONER-K' }] } }, false],
    [{ 'payload.status': 'Validated', $not: { 'payload.rows.itemCode': 'STAPLER' } }, true],
  ])('%j → %s', (filter, expected) => {
    expect(matches(filter)).toBe(expected);
  });

  it('{} matches everything', () => {
    for (const payload of [order, undefined, null, 5, []]) expect(matches({}, subject(payload))).toBe(true);
  });
});

describe('envelope fields', () => {
  it('are matched like payload fields; a null reference is a value', () => {
    expect(matches({ eventType: { $startsWith: 'purchaseOrder.' } })).toBe(true);
    expect(matches({ eventId: 'evt-1', entityId: { $in: ['0b7c2f4e'] } })).toBe(true);
    expect(matches({ resourceUrl: { $endsWith: '/0b7c2f4e' } })).toBe(true);
    expect(matches({ reference: null }, subject(order, { reference: null }))).toBe(true);
    expect(matches({ reference: { $exist: true } }, subject(order, { reference: null }))).toBe(true);
    expect(matches({ reference: { $startsWith: 'PO-' } }, subject(order, { reference: null }))).toBe(false);
  });
});

describe('readsPayload and paths', () => {
  it('an envelope-only filter does not read the payload', () => {
    const filter = compileFilter({ eventType: 'purchaseOrder.validated', reference: { $exist: true } });
    expect(filter.readsPayload).toBe(false);
    expect(filter.paths).toEqual([
      { path: 'eventType', pointer: '/eventType' },
      { path: 'reference', pointer: '/reference' },
    ]);
  });

  it('{} names no path', () => {
    expect(compileFilter({})).toMatchObject({ readsPayload: false, paths: [] });
  });

  it('any payload path reads the payload, $exist and `payload` alone included', () => {
    expect(compileFilter({ payload: { $exist: true } }).readsPayload).toBe(true);
    expect(compileFilter({ $not: { 'payload.a': { $exist: false } } }).readsPayload).toBe(true);
  });

  it('lists each path once, at its first occurrence in document order, with RFC 6901 escapes', () => {
    const filter = compileFilter({
      $or: [{ 'payload.a': 1 }, { eventType: 'x', 'payload.a/b~c': { $exist: true } }],
      'payload.a': { $gt: 0 },
      $not: { eventType: 'y', 'payload.rows.0.amount': '1' },
    });
    expect(filter.readsPayload).toBe(true);
    expect(filter.paths).toEqual([
      { path: 'payload.a', pointer: '/$or/0/payload.a' },
      { path: 'eventType', pointer: '/$or/1/eventType' },
      { path: 'payload.a/b~c', pointer: '/$or/1/payload.a~1b~0c' },
      { path: 'payload.rows.0.amount', pointer: '/$not/payload.rows.0.amount' },
    ]);
  });
});

describe('validation', () => {
  it('FilterError carries its code and every problem in its message', () => {
    try {
      compileFilter({ foo: 1, 'payload.a': { $gtee: 1 } });
      expect.unreachable();
    } catch (error) {
      expect(error).toBeInstanceOf(Error);
      expect(error).toMatchObject({ code: 'INVALID_FILTER' });
      expect((error as Error).message).toMatch(/^\/foo: unknown field "foo".*; \/payload.a\/\$gtee: unknown operator/);
    }
    expect(new FilterError([{ pointer: '', message: 'must be a filter (a JSON object)' }]).message).toBe(
      'filter: must be a filter (a JSON object)',
    );
  });

  it.each([
    ['an unknown operator', { 'payload.totalAmount': { $gtee: 5 } }, '/payload.totalAmount/$gtee', /unknown operator/],
    ['an unknown logical operator', { $nor: [{}] }, '/$nor', /unknown operator \$nor/],
    ['a comparison at filter level', { $eq: 1 }, '/$eq', /unknown operator \$eq/],
    ['mixed $ and non-$ keys', { 'payload.a': { $eq: 1, b: 2 } }, '/payload.a', /must be operators/],
    ['an object literal (compare it with $eq)', { 'payload.a': { b: 2 } }, '/payload.a', /use \$eq/],
    ['an empty object', { 'payload.a': {} }, '/payload.a', /must be operators/],
    ['$eq of undefined', { 'payload.a': { $eq: undefined } }, '/payload.a/$eq', /JSON value/],
    ['$neq of a function', { 'payload.a': { $neq: () => 1 } }, '/payload.a/$neq', /JSON value/],
    ['$eq of NaN deep inside', { 'payload.a': { $eq: { b: [NaN] } } }, '/payload.a/$eq', /JSON value/],
    ['a literal Date', { 'payload.a': new Date(0) }, '/payload.a', /JSON value/],
    ['$gt of a boolean', { 'payload.a': { $gt: true } }, '/payload.a/$gt', /finite number or a string/],
    ['$gte of null', { 'payload.a': { $gte: null } }, '/payload.a/$gte', /finite number or a string/],
    ['$lt of an object', { 'payload.a': { $lt: {} } }, '/payload.a/$lt', /finite number or a string/],
    ['$lte of an array', { 'payload.a': { $lte: [1] } }, '/payload.a/$lte', /finite number or a string/],
    ['$gt of Infinity', { 'payload.a': { $gt: Infinity } }, '/payload.a/$gt', /finite number or a string/],
    ['$in of a string', { 'payload.a': { $in: 'EUR' } }, '/payload.a/$in', /non-empty array/],
    ['$in empty', { 'payload.a': { $in: [] } }, '/payload.a/$in', /non-empty array/],
    ['$nin empty', { 'payload.a': { $nin: [] } }, '/payload.a/$nin', /non-empty array/],
    [
      '$in of 101 values',
      { 'payload.a': { $in: [...Array(101).keys()] } },
      '/payload.a/$in',
      /101 values; at most 100/,
    ],
    ['$in of an object', { 'payload.a': { $in: [1, { b: 1 }] } }, '/payload.a/$in/1', /string, a number/],
    ['$nin of an array', { 'payload.a': { $nin: [[1]] } }, '/payload.a/$nin/0', /string, a number/],
    ['$exist of a string', { 'payload.a': { $exist: 'yes' } }, '/payload.a/$exist', /true or false/],
    ['$exist of 1', { 'payload.a': { $exist: 1 } }, '/payload.a/$exist', /true or false/],
    ['$startsWith of a number', { 'payload.a': { $startsWith: 5 } }, '/payload.a/$startsWith', /a string/],
    ['$endsWith of null', { 'payload.a': { $endsWith: null } }, '/payload.a/$endsWith', /a string/],
    ['$and of an object', { $and: { 'payload.a': 1 } }, '/$and', /non-empty array of filters/],
    ['$and empty', { $and: [] }, '/$and', /non-empty array of filters/],
    ['$or empty', { $or: [] }, '/$or', /non-empty array of filters/],
    ['$or of a non-filter', { $or: [{}, 1] }, '/$or/1', /must be a filter/],
    ['$and of an array', { $and: [[]] }, '/$and/0', /must be a filter/],
    ['$not of an array', { $not: [{}] }, '/$not', /must be a filter/],
    ['$not of a string', { $not: 'x' }, '/$not', /must be a filter/],
    ['path foo', { foo: 1 }, '/foo', /unknown field "foo"/],
    ['path eventTypes', { eventTypes: 'x' }, '/eventTypes', /unknown field/],
    ['path payloadx', { payloadx: 1 }, '/payloadx', /unknown field/],
    ['path eventId.x', { 'eventId.x': 1 }, '/eventId.x', /unknown field/],
    ['an empty path', { '': 1 }, '/', /unknown field/],
    ['path payload..x', { 'payload..x': 1 }, '/payload..x', /empty segment/],
    ['path payload.', { 'payload.': 1 }, '/payload.', /empty segment/],
    ['path payload.$x', { 'payload.$x': 1 }, '/payload.$x', /may not start with \$/],
    ['path payload.a.$b', { 'payload.a.$b': { $exist: true } }, '/payload.a.$b', /may not start with \$/],
  ])('%s', (_name, document, pointer, message) => {
    const problems = problemsOf(document);
    expect(problems).toHaveLength(1);
    expect(problems[0]!.pointer).toBe(pointer);
    expect(problems[0]!.message).toMatch(message);
  });

  it.each([
    ['an array', []],
    ['null', null],
    ['a string', 'eventType'],
    ['a number', 5],
    ['a boolean', true],
  ])('a document that is %s is not a filter', (_name, document) => {
    expect(problemsOf(document)).toEqual([{ pointer: '', message: 'must be a filter (a JSON object)' }]);
  });

  it('a document that is not JSON at all', () => {
    const cyclic: Record<string, unknown> = {};
    cyclic.self = cyclic;
    for (const document of [undefined, () => 1, cyclic, { a: 1n }]) {
      expect(problemsOf(document)).toEqual([{ pointer: '', message: 'must be a JSON document' }]);
    }
  });

  it('the JSON text is at most 4096 bytes of UTF-8', () => {
    const sized = (bytes: number, char = 'x') => ({ 'payload.a': char.repeat(bytes - 16) }); // {"payload.a":"…"}
    expect(JSON.stringify(sized(4096)).length).toBe(4096);
    expect(() => compileFilter(sized(4096))).not.toThrow();
    expect(problemsOf(sized(4097))).toEqual([{ pointer: '', message: 'is 4097 bytes as JSON; at most 4096' }]);
    // 'é' is one UTF-16 unit but two bytes.
    expect(problemsOf({ 'payload.a': 'é'.repeat(2100) })).toEqual([
      { pointer: '', message: 'is 4216 bytes as JSON; at most 4096' },
    ]);
  });

  it('$and, $or and $not nest at most 3 deep; clauses are bounded by the size alone', () => {
    const nested = (levels: number): Record<string, unknown> => {
      let filter: Record<string, unknown> = { eventType: 'purchaseOrder.validated' };
      for (let level = 0; level < levels; level++) filter = level % 2 === 0 ? { $not: filter } : { $and: [{}, filter] };
      return filter;
    };
    expect(compileFilter(nested(3)).matches(subject(order))).toBe(true); // $not $and $not around a match
    // $and/1, $not, $and/1 from the top; the 4th level, the innermost $not, is the one reported.
    expect(problemsOf(nested(4))).toEqual([
      { pointer: '/$and/1/$not/$and/1/$not', message: expect.stringMatching(/3 deep/) },
    ]);
    const wide = Object.fromEntries([...Array(120).keys()].map((i) => [`payload.f${i}`, { $exist: false }]));
    expect(Buffer.byteLength(JSON.stringify(wide))).toBeLessThanOrEqual(4096);
    expect(compileFilter(wide).matches(subject(order))).toBe(true);
  });

  it('reports every problem together, in document order', () => {
    const problems = problemsOf({
      'payload.totalAmount': { $gtee: 5, $gt: true },
      foo: 1,
      $or: [{ 'payload..x': { $in: [] } }, 5],
      $not: { 'payload.a': { $eq: 1, b: 2 } },
      $xor: [],
    });
    expect(problems.map(({ pointer }) => pointer)).toEqual([
      '/payload.totalAmount/$gtee',
      '/payload.totalAmount/$gt',
      '/foo',
      '/$or/0/payload..x',
      '/$or/0/payload..x/$in',
      '/$or/1',
      '/$not/payload.a',
      '/$xor',
    ]);
  });

  it('escapes ~ and / in pointers (RFC 6901)', () => {
    expect(problemsOf({ 'a/b~c': 1 })[0]!.pointer).toBe('/a~1b~0c');
    expect(problemsOf({ 'payload.x': { '$a/b': 1 } })[0]!.pointer).toBe('/payload.x/$a~1b');
  });
});

// ---------------------------------------------------------------------------------------------------------------
// Property-based: the compiled filter against a plain reference evaluator that interprets the document every call.
// ---------------------------------------------------------------------------------------------------------------

/** A decimal as an integer scaled by 10^-scale, through BigInt: independent of the module's digit-string scans. */
interface RefDecimal {
  units: bigint;
  scale: number;
}

function refDecimal(value: unknown): RefDecimal | null {
  let text: string;
  if (typeof value === 'number' && Number.isFinite(value)) text = String(value);
  else if (typeof value === 'string' && /^-?\d+(\.\d+)?$/.test(value)) text = value;
  else return null;
  const match = /^(-?)(\d+)(?:\.(\d+))?(?:e([+-]?\d+))?$/.exec(text)!;
  const fraction = match[3] ?? '';
  let units = BigInt(`${match[1]}${match[2]}${fraction}`);
  let scale = fraction.length - Number(match[4] ?? 0);
  if (scale < 0) {
    units *= 10n ** BigInt(-scale);
    scale = 0;
  }
  return { units, scale };
}

function refCompareDecimals(a: RefDecimal, b: RefDecimal): number {
  const scale = Math.max(a.scale, b.scale);
  const left = a.units * 10n ** BigInt(scale - a.scale);
  const right = b.units * 10n ** BigInt(scale - b.scale);
  return left < right ? -1 : left > right ? 1 : 0;
}

function refCompareStrings(a: string, b: string): number {
  for (let i = 0; i < Math.min(a.length, b.length); i++) {
    const difference = a.charCodeAt(i) - b.charCodeAt(i);
    if (difference !== 0) return Math.sign(difference);
  }
  return Math.sign(a.length - b.length);
}

const isRecord = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

function refEquals(a: unknown, b: unknown): boolean {
  if (typeof a === 'string' && typeof b === 'string') return a === b;
  if ((typeof a === 'number' || typeof a === 'string') && (typeof b === 'number' || typeof b === 'string')) {
    const left = refDecimal(a);
    const right = refDecimal(b);
    return left !== null && right !== null && refCompareDecimals(left, right) === 0;
  }
  if (Array.isArray(a) && Array.isArray(b)) return a.length === b.length && a.every((x, i) => refEquals(x, b[i]));
  if (isRecord(a) && isRecord(b)) {
    const keys = Object.keys(a).sort();
    return (
      JSON.stringify(keys) === JSON.stringify(Object.keys(b).sort()) && keys.every((key) => refEquals(a[key], b[key]))
    );
  }
  return a === b;
}

function refOrder(value: unknown, operand: unknown): number {
  const left = refDecimal(value);
  const right = refDecimal(operand);
  if (left !== null && right !== null) return refCompareDecimals(left, right);
  if (typeof value === 'string' && typeof operand === 'string') return refCompareStrings(value, operand);
  return NaN;
}

/** Every value the path resolves to, as an array. */
function refResolve(on: FilterSubject, path: string): unknown[] {
  if (!path.startsWith('payload')) return [on[path as keyof FilterSubject]];
  let values: unknown[] = on.payload === undefined ? [] : [on.payload];
  for (const segment of path.split('.').slice(1)) {
    const next: unknown[] = [];
    for (const value of values) {
      if (Array.isArray(value) && /^(0|[1-9]\d*)$/.test(segment)) {
        if (Number(segment) < value.length) next.push(value[Number(segment)]);
      } else if (Array.isArray(value)) {
        for (const element of value) {
          if (isRecord(element) && Object.hasOwn(element, segment)) next.push(element[segment]);
        }
      } else if (isRecord(value) && Object.hasOwn(value, segment)) {
        next.push(value[segment]);
      }
    }
    values = next;
  }
  return values;
}

function refOperator(operator: string, operand: unknown, values: unknown[]): boolean {
  const some = (test: (value: unknown) => boolean) => values.some(test);
  const strings = (test: (value: string) => boolean) => some((value) => typeof value === 'string' && test(value));
  const operands = operand as unknown[];
  switch (operator) {
    case '$eq':
      return some((value) => refEquals(value, operand));
    case '$neq':
      return !some((value) => refEquals(value, operand));
    case '$in':
      return some((value) => operands.some((item) => refEquals(value, item)));
    case '$nin':
      return !some((value) => operands.some((item) => refEquals(value, item)));
    case '$gt':
      return some((value) => refOrder(value, operand) > 0);
    case '$gte':
      return some((value) => refOrder(value, operand) >= 0);
    case '$lt':
      return some((value) => refOrder(value, operand) < 0);
    case '$lte':
      return some((value) => refOrder(value, operand) <= 0);
    case '$exist':
      return values.length > 0 === operand;
    case '$startsWith':
      return strings((value) => value.slice(0, (operand as string).length) === operand);
    case '$endsWith':
      return strings((value) => value.length >= (operand as string).length && value.endsWith(operand as string));
  }
  throw new Error(`reference: unknown operator ${operator}`);
}

function reference(filter: Record<string, unknown>, on: FilterSubject): boolean {
  return Object.entries(filter).every(([key, value]) => {
    if (key === '$and') return (value as Record<string, unknown>[]).every((item) => reference(item, on));
    if (key === '$or') return (value as Record<string, unknown>[]).some((item) => reference(item, on));
    if (key === '$not') return !reference(value as Record<string, unknown>, on);
    const values = refResolve(on, key);
    const isCondition = isRecord(value) && Object.keys(value).length > 0 && Object.keys(value)[0]!.startsWith('$');
    if (!isCondition) return refOperator('$eq', value, values);
    return Object.entries(value).every(([operator, operand]) => refOperator(operator, operand, values));
  });
}

/** First-occurrence paths, by walking the document like a reader would. */
function refPaths(filter: Record<string, unknown>, pointer = '', paths = new Map<string, string>()) {
  for (const [key, value] of Object.entries(filter)) {
    const at = `${pointer}/${key.replaceAll('~', '~0').replaceAll('/', '~1')}`;
    if (key === '$and' || key === '$or') {
      (value as Record<string, unknown>[]).forEach((item, i) => refPaths(item, `${at}/${i}`, paths));
    } else if (key === '$not') refPaths(value as Record<string, unknown>, at, paths);
    else if (!paths.has(key)) paths.set(key, at);
  }
  return paths;
}

const STRINGS = ['A', 'TONER-K', '', 'a.b', 'abc', '2026-03-02T09:15:27.481Z', '2026-03-02T10:00:00Z'];
const DECIMALS = [
  '124.80',
  '124.8',
  '0',
  '-0',
  '0.1',
  '0.10000000000000001',
  '1000000000000000000000',
  '0.0000001',
  '100000000000000000000.000000001',
  '-3.5',
  '007',
];
const NUMBERS = [124.8, 0, -0, 0.1, 1e21, 1e-7, 1e20, -3.5, 7, 5e-324];
const KEYS = ['a', 'b', 'itemCode', 'amount', 'tags', '0', 'rows'];
const PATHS = [
  'eventId',
  'eventType',
  'occurredAt',
  'entityId',
  'reference',
  'resourceUrl',
  'payload',
  'payload.totalAmount',
  'payload.status',
  'payload.rows',
  'payload.rows.itemCode',
  'payload.rows.0.itemCode',
  'payload.rows.1.amount',
  'payload.rows.amount',
  'payload.rows.tags',
  'payload.a',
  'payload.a.b',
  'payload.a.0',
  'payload.a.rows.itemCode',
  'payload.b.a',
  'payload.b.0.a',
];

type Scalar = string | number | boolean | null;
const scalarArb: fc.Arbitrary<Scalar> = fc.oneof(
  fc.constantFrom(...STRINGS),
  fc.constantFrom(...DECIMALS),
  fc.constantFrom(...NUMBERS),
  fc.boolean(),
  fc.constant(null),
);
const { value: valueArb } = fc.letrec<{ value: unknown; array: unknown[]; object: Record<string, unknown> }>((tie) => ({
  value: fc.oneof({ maxDepth: 3, depthSize: 'small' }, scalarArb, tie('array'), tie('object')),
  array: fc.array(tie('value'), { maxLength: 3 }),
  object: fc.dictionary(fc.constantFrom(...KEYS), tie('value'), { maxKeys: 3 }),
}));
/** A payload leaf: mostly strings and numbers, which every operator applies to. */
const leafArb = fc.oneof(
  { weight: 3, arbitrary: fc.constantFrom(...STRINGS) },
  { weight: 3, arbitrary: fc.constantFrom(...DECIMALS) },
  { weight: 3, arbitrary: fc.constantFrom(...NUMBERS) },
  { weight: 1, arbitrary: fc.oneof(fc.boolean(), fc.constant(null)) },
);
const rowArb = fc.record(
  { itemCode: leafArb, amount: leafArb, tags: fc.array(leafArb, { maxLength: 3 }) },
  { requiredKeys: ['itemCode', 'amount'] },
);
/** Payloads shaped so that the paths of PATHS often resolve, with arbitrary values mixed in. */
const payloadArb = fc.oneof(
  {
    weight: 12,
    arbitrary: fc.record(
      {
        totalAmount: leafArb,
        status: leafArb,
        rows: fc.oneof(
          { weight: 4, arbitrary: fc.array(rowArb, { minLength: 1, maxLength: 3 }) },
          { weight: 1, arbitrary: valueArb },
        ),
        a: fc.oneof(
          { weight: 2, arbitrary: leafArb },
          {
            weight: 3,
            arbitrary: fc.record(
              { b: fc.oneof(leafArb, valueArb), '0': leafArb, rows: fc.array(rowArb, { maxLength: 2 }) },
              { requiredKeys: ['b'] },
            ),
          },
          { weight: 2, arbitrary: fc.array(leafArb, { minLength: 1, maxLength: 3 }) },
          { weight: 1, arbitrary: valueArb },
        ),
        b: fc.oneof(
          { weight: 3, arbitrary: fc.array(fc.record({ a: leafArb }), { minLength: 1, maxLength: 3 }) },
          {
            // Arrays directly inside the array: not entered by a field name.
            weight: 1,
            arbitrary: fc.array(
              fc.oneof(fc.record({ a: leafArb }), fc.array(fc.record({ a: leafArb }), { maxLength: 2 })),
              {
                minLength: 1,
                maxLength: 3,
              },
            ),
          },
          { weight: 1, arbitrary: valueArb },
        ),
      },
      { requiredKeys: ['totalAmount', 'status', 'rows', 'a'] },
    ),
  },
  { weight: 1, arbitrary: fc.constant(undefined) },
  { weight: 1, arbitrary: valueArb },
);
const subjectArb: fc.Arbitrary<FilterSubject> = fc.record({
  eventId: fc.constantFrom(...STRINGS, ...DECIMALS),
  eventType: fc.constantFrom('purchaseOrder.validated', 'purchaseOrder.cancelled', ...STRINGS),
  occurredAt: fc.constantFrom('2026-03-02T09:15:27.481Z', '2026-03-02T10:00:00Z', '2026-03-02T09:15:27.481+01:00'),
  entityId: fc.constantFrom(...STRINGS, ...DECIMALS),
  reference: fc.oneof(fc.constantFrom(...STRINGS), fc.constant(null)),
  resourceUrl: fc.constantFrom(...STRINGS),
  payload: payloadArb,
});

/** The number written out in plain decimal digits (no exponent), through refDecimal. */
function refPlain(value: number): string {
  const { units, scale } = refDecimal(value)!;
  const magnitude = (units < 0n ? -units : units).toString().padStart(scale + 1, '0');
  const fraction = magnitude.slice(magnitude.length - scale);
  return `${units < 0n ? '-' : ''}${magnitude.slice(0, magnitude.length - scale)}${fraction === '' ? '' : `.${fraction}`}`;
}

/**
 * An operand to take from what the clause's path resolves to in the subjects (the `index`-th candidate of its kind),
 * or `fallback` when it resolves to none: clauses then hold often. Filters are generated with these placeholders and
 * the subjects apart, then put together (`instantiate`); resolution here only picks operands, the check is the
 * reference's.
 */
class Pick {
  constructor(
    readonly kind: 'value' | 'scalar' | 'orderable' | 'affix',
    readonly index: number,
    readonly fallback: unknown,
  ) {}

  operand(resolved: unknown[]): unknown {
    const scalars = resolved.filter((value): value is Scalar => !isRecord(value) && !Array.isArray(value));
    // A number also as its decimal string, and a decimal string as a number.
    for (const value of [...scalars]) {
      if (typeof value === 'number') scalars.push(refPlain(value));
      if (typeof value === 'string' && refDecimal(value) !== null) scalars.push(Number(value));
    }
    const candidates = {
      // Objects and arrays also with a member less or more: equal but for one member.
      value: resolved.flatMap((value) => {
        if (Array.isArray(value)) return [value, value.slice(0, -1), [...value, null]];
        if (!isRecord(value)) return [value];
        return [value, Object.fromEntries(Object.entries(value).slice(0, -1)), { ...value, extra: 0 }];
      }),
      scalar: scalars,
      // Each also nudged: a decimal a little further from zero, a string a little after and a little before.
      orderable: scalars.flatMap((value) => {
        if (typeof value === 'number') return [value, `${refPlain(value)}${refPlain(value).includes('.') ? '' : '.'}1`];
        if (typeof value !== 'string') return [];
        if (refDecimal(value) !== null) return [value, `${value}${value.includes('.') ? '' : '.'}1`];
        return [value, `${value} `, value.slice(0, -1)];
      }),
      affix: scalars
        .filter((value) => typeof value === 'string')
        .flatMap((text) => [text, text.slice(0, 1), text.slice(0, 3), text.slice(-1), text.slice(-3)]),
    }[this.kind];
    return candidates.length === 0 ? this.fallback : structuredClone(candidates[this.index % candidates.length]);
  }
}

const pick = <T>(kind: Pick['kind'], fallback: fc.Arbitrary<T>): fc.Arbitrary<T | Pick> =>
  fc.oneof(
    { weight: 1, arbitrary: fallback },
    { weight: 2, arbitrary: fc.tuple(fc.nat(99), fallback).map(([index, value]) => new Pick(kind, index, value)) },
  );

const scalarOperandArb = pick('scalar', scalarArb);
const literalArb = fc.oneof(
  { weight: 4, arbitrary: scalarOperandArb },
  { weight: 2, arbitrary: pick('value', valueArb) },
  { weight: 1, arbitrary: valueArb },
);
const operatorArb: fc.Arbitrary<[string, unknown]> = fc.oneof(
  fc.tuple(fc.constantFrom('$eq', '$neq'), literalArb),
  fc.tuple(
    fc.constantFrom('$gt', '$gte', '$lt', '$lte'),
    pick('orderable', fc.constantFrom<string | number>(...STRINGS, ...DECIMALS, ...NUMBERS)),
  ),
  fc.tuple(fc.constantFrom('$in', '$nin'), fc.array(scalarOperandArb, { minLength: 1, maxLength: 4 })),
  fc.tuple(fc.constant('$exist'), fc.boolean()),
  fc.tuple(
    fc.constantFrom('$startsWith', '$endsWith'),
    pick('affix', fc.constantFrom('', 'A', '2026-03-02', 'Z', '.8')),
  ),
);
const conditionArb = fc.oneof(
  // An object to compare with goes through $eq: an object in a field's place is a condition.
  literalArb.map((literal) => (isRecord(literal) ? { $eq: literal } : literal)),
  fc.array(operatorArb, { minLength: 1, maxLength: 3 }).map((entries) => Object.fromEntries(entries)),
);

/** Filters (with Pick placeholders) whose logical operators nest `depth` levels at most. */
function filterArb(depth: number): fc.Arbitrary<Record<string, unknown>> {
  const field = fc.tuple(fc.constantFrom(...PATHS), conditionArb);
  const entry: fc.Arbitrary<[string, unknown]> =
    depth === 0
      ? field
      : fc.oneof(
          { weight: 3, arbitrary: field },
          {
            weight: 1,
            arbitrary: fc.oneof(
              fc.tuple(fc.constantFrom('$and', '$or'), fc.array(filterArb(depth - 1), { minLength: 1, maxLength: 3 })),
              fc.tuple(fc.constant('$not'), filterArb(depth - 1)),
            ),
          },
        );
  return fc.array(entry, { maxLength: 3 }).map((entries) => Object.fromEntries(entries));
}

/** The filter with each Pick replaced by an operand from the subjects. */
function instantiate(filter: Record<string, unknown>, subjects: FilterSubject[]): Record<string, unknown> {
  const operand = (value: unknown, path: string): unknown => {
    if (value instanceof Pick) return value.operand(subjects.flatMap((on) => refResolve(on, path)));
    return Array.isArray(value) ? value.map((item) => operand(item, path)) : value;
  };
  return Object.fromEntries(
    Object.entries(filter).map(([key, value]) => {
      if (key === '$and' || key === '$or') {
        return [key, (value as Record<string, unknown>[]).map((item) => instantiate(item, subjects))];
      }
      if (key === '$not') return [key, instantiate(value as Record<string, unknown>, subjects)];
      if (value instanceof Pick || !isRecord(value)) {
        // An object in a field's place is a condition: an object to compare with goes through $eq.
        const resolved = operand(value, key);
        return [key, isRecord(resolved) ? { $eq: resolved } : resolved];
      }
      return [key, Object.fromEntries(Object.entries(value).map(([name, item]) => [name, operand(item, key)]))];
    }),
  );
}

/** A valid filter (logical depth ≤ 3, within the limits) and the subjects it is evaluated against. */
const casesArb = fc
  .tuple(filterArb(3), fc.array(subjectArb, { minLength: 1, maxLength: 4 }))
  .map(([filter, subjects]): [Record<string, unknown>, FilterSubject[]] => [instantiate(filter, subjects), subjects])
  .filter(([filter]) => Buffer.byteLength(JSON.stringify(filter)) <= 4096);

// Each runs in about a second; the bound leaves room for a loaded machine, the runs are seeded (no timing in results).
describe('properties', { timeout: 30_000 }, () => {
  it('a compiled filter agrees with the reference evaluator', () => {
    fc.assert(
      fc.property(casesArb, ([filter, subjects]) => {
        const compiled = compileFilter(filter);
        for (const on of subjects) expect(compiled.matches(on)).toBe(reference(filter, on));
      }),
      { seed: 20260302, numRuns: 3000 },
    );
  });

  it('the generated cases make each kind of clause both hold and fail often (the property is not vacuous)', () => {
    const cases = fc.sample(casesArb, { seed: 7, numRuns: 1000 });
    const outcomes = new Map<string, { held: number; failed: number }>();
    let matched = 0;
    let evaluated = 0;
    const count = (filter: Record<string, unknown>, on: FilterSubject) => {
      for (const [key, value] of Object.entries(filter)) {
        if (key === '$and' || key === '$or') (value as Record<string, unknown>[]).forEach((item) => count(item, on));
        else if (key === '$not') count(value as Record<string, unknown>, on);
        else {
          const isCondition = isRecord(value) && Object.keys(value)[0]?.startsWith('$');
          for (const [operator, operand] of isCondition ? Object.entries(value) : [['$eq', value] as const]) {
            const kind = `${key.startsWith('payload') ? 'payload' : 'envelope'} ${operator}`;
            const outcome = outcomes.get(kind) ?? { held: 0, failed: 0 };
            if (refOperator(operator, operand, refResolve(on, key))) outcome.held += 1;
            else outcome.failed += 1;
            outcomes.set(kind, outcome);
          }
        }
      }
    };
    for (const [filter, subjects] of cases) {
      for (const on of subjects) {
        evaluated += 1;
        if (reference(filter, on)) matched += 1;
        count(filter, on);
      }
    }
    expect(matched / evaluated).toBeGreaterThan(0.2);
    expect(matched / evaluated).toBeLessThan(0.8);
    expect(outcomes.size).toBe(22); // 11 operators, on envelope and payload paths
    const lopsided = [...outcomes]
      .filter(([, { held, failed }]) => Math.min(held, failed) < 0.1 * (held + failed))
      .map(([kind, { held, failed }]) => `${kind}: held ${held}, failed ${failed}`);
    expect(lopsided).toEqual([]);
  });

  it('accepts every generated valid filter, with its paths and readsPayload', () => {
    fc.assert(
      fc.property(casesArb, ([filter]) => {
        const compiled = compileFilter(filter);
        const paths = [...refPaths(filter)].map(([path, pointer]) => ({ path, pointer }));
        expect(compiled.paths).toEqual(paths);
        expect(compiled.readsPayload).toBe(paths.some(({ path }) => path.startsWith('payload')));
      }),
      { seed: 1, numRuns: 2000 },
    );
  });

  it('numbers and decimal strings compare exactly, in equality and order', () => {
    const digits = (max: number) => fc.string({ unit: fc.constantFrom(...'0123456789'), minLength: 1, maxLength: max });
    const decimalText = fc.oneof(
      fc
        .tuple(fc.boolean(), digits(25), fc.option(digits(25)))
        .map(
          ([negative, whole, fraction]) => `${negative ? '-' : ''}${whole}${fraction === null ? '' : `.${fraction}`}`,
        ),
      // Close to a double: its shortest form written out, perhaps with a digit or zeros added.
      fc
        .tuple(fc.double({ noNaN: true, noDefaultInfinity: true }), fc.constantFrom('', '0', '00', '1', '9'))
        .map(
          ([number, tail]) => `${refPlain(number)}${refPlain(number).includes('.') || tail === '' ? '' : '.'}${tail}`,
        ),
    );
    const numeric = fc.oneof(decimalText, fc.double({ noNaN: true, noDefaultInfinity: true }));
    fc.assert(
      fc.property(
        numeric,
        numeric,
        fc.constantFrom('$eq', '$neq', '$gt', '$gte', '$lt', '$lte'),
        (value, operand, operator) => {
          const on = subject({ x: value });
          expect(matches({ 'payload.x': { [operator]: operand } }, on)).toBe(refOperator(operator, operand, [value]));
        },
      ),
      { seed: 42, numRuns: 5000 },
    );
  });

  it('compileFilter throws nothing but FilterError on arbitrary JSON', () => {
    const check = (document: unknown) => {
      try {
        compileFilter(document).matches(subject(order));
      } catch (error) {
        expect(error).toBeInstanceOf(FilterError);
        expect((error as FilterError).problems.length).toBeGreaterThan(0);
      }
    };
    fc.assert(fc.property(fc.jsonValue(), check), { seed: 3, numRuns: 2000 });
    // Filter-shaped documents reach deeper into the validation.
    const key = fc.oneof(
      fc.constantFrom(...PATHS, '$and', '$or', '$not', 'payload..x', 'foo'),
      fc.string({ maxLength: 8 }),
    );
    const operator = fc.oneof(fc.constantFrom('$eq', '$in', '$gt', '$exist', '$startsWith', '$and'), fc.string());
    const shaped = fc.letrec<{ filter: unknown }>((tie) => ({
      filter: fc.dictionary(
        key,
        fc.oneof(
          { maxDepth: 4 },
          fc.jsonValue({ maxDepth: 2 }),
          fc.dictionary(operator, fc.jsonValue({ maxDepth: 2 }), { maxKeys: 3 }),
          fc.array(tie('filter'), { maxLength: 3 }),
          tie('filter'),
        ),
        { maxKeys: 4 },
      ),
    })).filter;
    fc.assert(fc.property(shaped, check), { seed: 4, numRuns: 2000 });
  });
});
