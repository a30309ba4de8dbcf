import { describe, expect, it } from 'vitest';
import { purchaseOrderJsonSchema } from '../../producer/purchase-order-schema.ts';
import { pathsUnknownToSchemas } from './filter-schema-paths.ts';
import { pathsUnknownToSchemas as reexported } from './filter.ts';

const order = purchaseOrderJsonSchema as unknown as Record<string, unknown>;
const unknownIn = (schema: Record<string, unknown> | null, paths: string[]) => pathsUnknownToSchemas(paths, [schema]);
const known = (schema: Record<string, unknown> | null, path: string) => unknownIn(schema, [path]).length === 0;

describe('pathsUnknownToSchemas against the purchase order schema', () => {
  it.each([
    ['payload', true],
    ['payload.totalAmount', true],
    ['payload.reference', true],
    ['payload.rows', true],
    ['payload.rows.amount', true],
    ['payload.rows.0.amount', true],
    ['payload.rows.12.itemCode', true],
    ['payload.rows.0', true],
    ['payload.totalAmont', false],
    ['payload.rows.nope', false],
    ['payload.rows.0.nope', false],
    ['payload.totalAmount.x', false],
    ['payload.status.x', false],
    ['payload.0', false],
  ])('%s known: %s', (path, expected) => {
    expect(known(order, path)).toBe(expected);
  });

  it('keeps the order of the paths given and returns only the unknown ones', () => {
    const paths = ['eventType', 'payload.nope', 'payload.totalAmount', 'reference', 'payload.rows.x'];
    expect(pathsUnknownToSchemas(paths, [order])).toEqual(['payload.nope', 'payload.rows.x']);
    expect(reexported(paths, [order])).toEqual(['payload.nope', 'payload.rows.x']);
  });

  it('envelope fields and payload itself are always known, even with no schema at all', () => {
    const envelope = ['eventId', 'eventType', 'occurredAt', 'entityId', 'reference', 'resourceUrl', 'payload'];
    expect(pathsUnknownToSchemas(envelope, [])).toEqual([]);
    expect(pathsUnknownToSchemas(['payload.totalAmount'], [])).toEqual(['payload.totalAmount']);
  });

  it('a path is known when any of the schemas has it', () => {
    const invoice = { type: 'object', additionalProperties: false, properties: { invoiceNumber: { type: 'string' } } };
    const paths = ['payload.invoiceNumber', 'payload.totalAmount', 'payload.neither'];
    expect(pathsUnknownToSchemas(paths, [order, invoice])).toEqual(['payload.neither']);
    expect(pathsUnknownToSchemas(paths, [invoice])).toEqual(['payload.totalAmount', 'payload.neither']);
  });

  it('a type without a schema (null) makes every payload path known', () => {
    expect(pathsUnknownToSchemas(['payload.anything.at.all', 'payload.totalAmont'], [order, null])).toEqual([]);
  });
});

describe('pathsUnknownToSchemas: JSON Schema forms', () => {
  it('follows $ref to $defs (2020-12) and definitions (draft-07), with RFC 6901 escapes', () => {
    const schema = {
      type: 'object',
      properties: { buyer: { $ref: '#/$defs/party' }, seller: { $ref: '#/definitions/party' } },
      $defs: { party: { type: 'object', properties: { name: { type: 'string' } } } },
      definitions: { party: { $ref: '#/$defs/a~1b~0c' } },
    };
    (schema.$defs as Record<string, unknown>)['a/b~c'] = { properties: { vat: { type: 'string' } } };
    expect(unknownIn(schema, ['payload.buyer.name', 'payload.buyer.vat', 'payload.seller.vat'])).toEqual([
      'payload.buyer.vat',
    ]);
  });

  it('a path known in any branch of allOf, anyOf or oneOf is known', () => {
    const schema = {
      allOf: [{ properties: { a: {} } }],
      anyOf: [{ properties: { b: { type: 'string' } } }, { properties: { c: { type: 'number' } } }],
      oneOf: [{ properties: { d: { properties: { e: {} } } } }],
    };
    expect(
      unknownIn(schema, ['payload.a', 'payload.b', 'payload.c', 'payload.d.e', 'payload.f', 'payload.d.x']),
    ).toEqual(['payload.f', 'payload.d.x']);
  });

  it('additionalProperties as a schema continues any undeclared name; true does not', () => {
    const map = {
      type: 'object',
      properties: { fixed: { type: 'string' } },
      additionalProperties: { type: 'object', properties: { qty: { type: 'string' } } },
    };
    expect(unknownIn(map, ['payload.fixed', 'payload.anyKey.qty', 'payload.anyKey.nope', 'payload.fixed.qty'])).toEqual(
      ['payload.anyKey.nope', 'payload.fixed.qty'],
    );
    const open = { type: 'object', properties: { a: {} }, additionalProperties: true };
    expect(unknownIn(open, ['payload.a', 'payload.b'])).toEqual(['payload.b']);
  });

  it('patternProperties continue the names their regex matches', () => {
    const schema = {
      type: 'object',
      patternProperties: { '^x-': { properties: { v: {} } }, '^[0-9]+$': { type: 'string' }, '(': {} },
    };
    expect(unknownIn(schema, ['payload.x-trace.v', 'payload.x-trace.w', 'payload.42', 'payload.y'])).toEqual([
      'payload.x-trace.w',
      'payload.y',
    ]);
  });

  it('an unconstrained schema ({}, true, {type: object}) makes any deeper path known; a scalar type does not', () => {
    const schema = {
      type: 'object',
      properties: {
        anything: {},
        yes: true,
        object: { type: 'object', description: 'free-form', required: ['x'] },
        array: { type: 'array' },
        either: { type: ['object', 'null'] },
        open: { type: 'object', additionalProperties: true },
        text: { type: 'string' },
        choice: { enum: ['a', 'b'] },
        closed: { type: 'object', additionalProperties: false },
        no: false,
      },
    };
    const deep = (name: string) => `payload.${name}.x.y`;
    const names = Object.keys(schema.properties);
    expect(unknownIn(schema, names.map(deep))).toEqual(['text', 'choice', 'closed', 'no'].map(deep));
    expect(unknownIn(schema, ['payload.no'])).toEqual(['payload.no']);
    expect(unknownIn({}, ['payload.a.b.c'])).toEqual([]);
  });

  it('arrays: prefixItems by index, items for the rest, and a field name fans out over every element schema', () => {
    const tuple = {
      type: 'array',
      prefixItems: [{ properties: { head: {} } }, { type: 'string' }],
      items: { properties: { tail: {} } },
    };
    expect(unknownIn(tuple, ['payload.0.head', 'payload.5.tail', 'payload.head', 'payload.tail'])).toEqual([]);
    expect(unknownIn(tuple, ['payload.1.head', 'payload.nope'])).toEqual(['payload.1.head', 'payload.nope']);
    const draft07 = { type: 'array', items: [{ properties: { a: {} } }, { properties: { b: {} } }] };
    expect(unknownIn(draft07, ['payload.0.a', 'payload.1.b', 'payload.a', 'payload.b'])).toEqual([]);
    expect(unknownIn(draft07, ['payload.0.b', 'payload.2.a', 'payload.c'])).toEqual([
      'payload.0.b',
      'payload.2.a',
      'payload.c',
    ]);
  });

  it('a recursive schema is followed as deep as the path goes', () => {
    const tree = {
      $ref: '#/$defs/node',
      $defs: { node: { type: 'object', properties: { name: {}, children: { items: { $ref: '#/$defs/node' } } } } },
    };
    const deep = `payload${'.children'.repeat(40)}.name`;
    expect(unknownIn(tree, [deep, `payload.children.3.children.name`, 'payload.children.nope'])).toEqual([
      'payload.children.nope',
    ]);
  });

  it('a $ref cycle terminates (the path is unknown), and so do combinators that multiply branches', () => {
    const cycle = { $ref: '#/$defs/a', $defs: { a: { $ref: '#/$defs/b' }, b: { allOf: [{ $ref: '#/$defs/a' }] } } };
    expect(unknownIn(cycle, ['payload.x'])).toEqual(['payload.x']);
    const self = { $ref: '#', properties: { a: { $ref: '#' } } };
    expect(unknownIn(self, ['payload.a.a.a.a', 'payload.a.b'])).toEqual(['payload.a.b']);
    // Each level refers three times to the next: without the walk's memory this is 3^40 branches.
    const defs: Record<string, unknown> = { d40: { $ref: '#/$defs/d0' } };
    for (let i = 0; i < 40; i++) {
      const next = { $ref: `#/$defs/d${i + 1}` };
      defs[`d${i}`] = { anyOf: [next, next, { allOf: [next] }] };
    }
    expect(unknownIn({ $ref: '#/$defs/d0', $defs: defs }, ['payload.x'])).toEqual(['payload.x']);
  });

  it('a $ref it cannot resolve (remote, an anchor, dangling) is given the benefit of the doubt', () => {
    for (const $ref of ['https://example.com/schema.json', '#anchor', '#/$defs/missing', '#/%E0']) {
      expect(unknownIn({ properties: { a: { $ref } } }, ['payload.a.b'])).toEqual([]);
    }
  });
});
