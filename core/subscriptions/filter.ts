/**
 * Subscription payload filters: a JSON document (Mongo-like) that an event must satisfy to be delivered. The router
 * evaluates one for every event of the subscription's types, so a document is validated and compiled once into a tree
 * of closures: paths pre-split into segments, decimal operands pre-parsed, and `matches` walks the subject without
 * building intermediate arrays.
 */
import type { EnvelopeFields } from '../envelope.ts';
import { compareDecimalText, compareNumber, numericString, toDecimal } from './filter-decimal.ts';

export { pathsUnknownToSchemas } from './filter-schema-paths.ts';

/** A filter document as given (validated by compileFilter). */
export type Filter = { readonly [key: string]: unknown };

/** What a filter is evaluated against: the envelope's fields and the event's parsed payload. */
export interface FilterSubject extends Omit<EnvelopeFields, 'subscriptionId'> {
  /** The parsed payload (JSON.parse of the payload bytes); undefined when absent or not parsed. */
  payload: unknown;
}

/** One thing wrong with a filter; `pointer` is the RFC 6901 JSON Pointer of the offending member from the root. */
export interface FilterProblem {
  pointer: string;
  message: string;
}

/** A filter document that breaks the language's rules; lists every problem found. */
export class FilterError extends Error {
  readonly code = 'INVALID_FILTER';
  constructor(readonly problems: FilterProblem[]) {
    super(problems.map(({ pointer, message }) => `${pointer === '' ? 'filter' : pointer}: ${message}`).join('; '));
  }
}

/** A filter validated and compiled. */
export interface CompiledFilter {
  /** Whether the subject satisfies the filter. */
  matches(subject: FilterSubject): boolean;
  /** Whether any clause reads the payload (the router parses the payload bytes only then). */
  readonly readsPayload: boolean;
  /** Every field path the filter names, each once, with the JSON Pointer of its first occurrence. */
  readonly paths: { path: string; pointer: string }[];
}

const MAX_BYTES = 4096;
const MAX_IN_VALUES = 100;
/** Levels of $and, $or and $not inside one another. */
const MAX_LOGICAL_DEPTH = 3;
/** Bounds the recursion of the JSON value check (a 4096-byte text cannot nest deeper than 2048). */
const MAX_VALUE_DEPTH = 2100;

const ENVELOPE_FIELDS = new Set(['eventId', 'eventType', 'occurredAt', 'entityId', 'reference', 'resourceUrl']);
const OPERATORS = '$eq, $neq, $gt, $gte, $lt, $lte, $in, $nin, $exist, $startsWith, $endsWith';
const INDEX = /^(0|[1-9]\d*)$/;

/** A predicate on one value a path resolves to. */
type Test = (value: unknown) => boolean;
/** Calls `test` on each value the path resolves to in the subject, stopping at the first true. */
type Resolve = (subject: FilterSubject, test: Test) => boolean;
type Node = (subject: FilterSubject) => boolean;
interface Segment {
  name: string;
  /** The array index the segment names, or -1 (a field name, which fans out over an array's elements). */
  index: number;
}
interface Compilation {
  problems: FilterProblem[];
  paths: Map<string, string>;
}

const ALWAYS: Node = () => true;
const ANY_VALUE: Test = () => true;
const NOTHING: Resolve = () => false;

/**
 * Validates the document (structure, operators, operands, limits) and compiles it; throws FilterError listing every
 * problem found (not just the first).
 */
export function compileFilter(document: unknown): CompiledFilter {
  // The size is judged first and alone: it bounds the work (and the recursion) of everything below.
  let text: string | undefined;
  try {
    text = JSON.stringify(document);
  } catch {
    text = undefined;
  }
  if (text === undefined) throw new FilterError([{ pointer: '', message: 'must be a JSON document' }]);
  const bytes = Buffer.byteLength(text, 'utf8');
  if (bytes > MAX_BYTES) {
    throw new FilterError([{ pointer: '', message: `is ${bytes} bytes as JSON; at most ${MAX_BYTES}` }]);
  }
  const compilation: Compilation = { problems: [], paths: new Map() };
  const root = compileObject(document, '', 0, compilation);
  if (compilation.problems.length > 0) throw new FilterError(compilation.problems);
  const paths = [...compilation.paths].map(([path, pointer]) => ({ path, pointer }));
  return { matches: root, readsPayload: paths.some(({ path }) => isPayloadPath(path)), paths };
}

function compileObject(document: unknown, pointer: string, depth: number, compilation: Compilation): Node {
  if (!isPlainObject(document)) {
    compilation.problems.push({ pointer, message: 'must be a filter (a JSON object)' });
    return ALWAYS;
  }
  const nodes: Node[] = [];
  for (const key of Object.keys(document)) {
    const at = `${pointer}/${escapePointer(key)}`;
    if (key.startsWith('$')) nodes.push(compileLogical(key, document[key], at, depth + 1, compilation));
    else nodes.push(...compileField(key, document[key], at, compilation));
  }
  return every(nodes);
}

function compileLogical(key: string, value: unknown, pointer: string, depth: number, compilation: Compilation): Node {
  const problem = (message: string) => {
    compilation.problems.push({ pointer, message });
    return ALWAYS;
  };
  if (key !== '$and' && key !== '$or' && key !== '$not') {
    return problem(`unknown operator ${key}: a filter's keys are field paths or $and, $or, $not`);
  }
  // Not descended further: one problem for the whole too-deep branch.
  if (depth > MAX_LOGICAL_DEPTH) return problem(`$and, $or and $not nest at most ${MAX_LOGICAL_DEPTH} deep`);
  if (key === '$not') {
    if (!isPlainObject(value)) return problem('must be a filter (a JSON object)');
    const node = compileObject(value, pointer, depth, compilation);
    return (subject) => !node(subject);
  }
  if (!Array.isArray(value) || value.length === 0) return problem('must be a non-empty array of filters');
  // Array.from visits the holes of a sparse array (as undefined), which map would skip.
  const nodes = Array.from(value, (item, index) => compileObject(item, `${pointer}/${index}`, depth, compilation));
  return key === '$and' ? every(nodes) : some(nodes);
}

/** The clauses of one field path: its condition object's operators, or one implicit $eq of a literal. */
function compileField(path: string, value: unknown, pointer: string, compilation: Compilation): Node[] {
  const pathProblem = checkPath(path);
  if (pathProblem !== null) compilation.problems.push({ pointer, message: pathProblem });
  else if (!compilation.paths.has(path)) compilation.paths.set(path, pointer);
  const resolve = pathProblem === null ? resolver(path) : NOTHING;
  if (isPlainObject(value)) {
    // An object here is always a condition: the OpenAPI document can then tell a filter from a mistake by its shape,
    // and an object literal is still comparable through $eq.
    const keys = Object.keys(value);
    if (keys.length === 0 || !keys.every((key) => key.startsWith('$'))) {
      compilation.problems.push({
        pointer,
        message: `an object here must be operators (${OPERATORS}); to compare with an object, use $eq`,
      });
      return [];
    }
    return keys.map((key) =>
      compileOperator(key, value[key], `${pointer}/${escapePointer(key)}`, resolve, compilation),
    );
  }
  if (!isJsonValue(value, 0)) {
    compilation.problems.push({ pointer, message: 'must be a JSON value' });
    return [];
  }
  return [holdsForSome(resolve, equalTo(value))];
}

function compileOperator(
  operator: string,
  operand: unknown,
  pointer: string,
  resolve: Resolve,
  compilation: Compilation,
): Node {
  const problem = (message: string, at = pointer) => {
    compilation.problems.push({ pointer: at, message });
    return ALWAYS;
  };
  switch (operator) {
    case '$eq':
    case '$neq': {
      if (!isJsonValue(operand, 0)) return problem('must be a JSON value');
      const test = equalTo(operand);
      return operator === '$eq' ? holdsForSome(resolve, test) : holdsForNone(resolve, test);
    }
    case '$gt':
    case '$gte':
    case '$lt':
    case '$lte': {
      if (typeof operand === 'string' || (typeof operand === 'number' && Number.isFinite(operand))) {
        return holdsForSome(resolve, orderTest(operator, operand));
      }
      return problem('must be a finite number or a string');
    }
    case '$in':
    case '$nin': {
      if (!Array.isArray(operand) || operand.length === 0) return problem('must be a non-empty array of values');
      if (operand.length > MAX_IN_VALUES) return problem(`has ${operand.length} values; at most ${MAX_IN_VALUES}`);
      const before = compilation.problems.length;
      const tests = Array.from(operand, (item: unknown, index) => {
        if (!isScalar(item)) problem('must be a string, a number, a boolean or null', `${pointer}/${index}`);
        return equalTo(item);
      });
      if (compilation.problems.length > before) return ALWAYS;
      const test: Test = (value) => {
        for (let i = 0; i < tests.length; i++) if (tests[i]!(value)) return true;
        return false;
      };
      return operator === '$in' ? holdsForSome(resolve, test) : holdsForNone(resolve, test);
    }
    case '$exist':
      if (typeof operand !== 'boolean') return problem('must be true or false');
      return operand ? holdsForSome(resolve, ANY_VALUE) : holdsForNone(resolve, ANY_VALUE);
    case '$startsWith':
    case '$endsWith': {
      if (typeof operand !== 'string') return problem('must be a string');
      const test: Test =
        operator === '$startsWith'
          ? (value) => typeof value === 'string' && value.startsWith(operand)
          : (value) => typeof value === 'string' && value.endsWith(operand);
      return holdsForSome(resolve, test);
    }
    default:
      return problem(`unknown operator ${operator}: expected one of ${OPERATORS}`);
  }
}

function holdsForSome(resolve: Resolve, test: Test): Node {
  return (subject) => resolve(subject, test);
}

function holdsForNone(resolve: Resolve, test: Test): Node {
  return (subject) => !resolve(subject, test);
}

function every(nodes: Node[]): Node {
  if (nodes.length === 0) return ALWAYS;
  if (nodes.length === 1) return nodes[0]!;
  return (subject) => {
    for (let i = 0; i < nodes.length; i++) if (!nodes[i]!(subject)) return false;
    return true;
  };
}

function some(nodes: Node[]): Node {
  if (nodes.length === 1) return nodes[0]!;
  return (subject) => {
    for (let i = 0; i < nodes.length; i++) if (nodes[i]!(subject)) return true;
    return false;
  };
}

/** Why `path` is not a field path, or null. */
function checkPath(path: string): string | null {
  if (ENVELOPE_FIELDS.has(path)) return null;
  if (!isPayloadPath(path)) {
    return `unknown field ${JSON.stringify(path)}: a path is an envelope field (${[...ENVELOPE_FIELDS].join(', ')}) or starts with payload`;
  }
  for (const segment of path.split('.').slice(1)) {
    if (segment === '') return 'a path has no empty segment';
    if (segment.startsWith('$')) return `a path segment may not start with $ (${segment})`;
  }
  return null;
}

function isPayloadPath(path: string): boolean {
  return path === 'payload' || path.startsWith('payload.');
}

function resolver(path: string): Resolve {
  if (!isPayloadPath(path)) {
    const field = path as Exclude<keyof FilterSubject, 'payload'>;
    return (subject, test) => {
      const value = subject[field];
      return value !== undefined && test(value);
    };
  }
  const segments: Segment[] = path
    .split('.')
    .slice(1)
    .map((name) => ({ name, index: INDEX.test(name) ? Number(name) : -1 }));
  return (subject, test) => walk(subject.payload, segments, 0, test);
}

/** Mongo-style resolution without intermediate arrays: a field name on an array fans out over its elements. */
function walk(value: unknown, segments: readonly Segment[], at: number, test: Test): boolean {
  if (value === undefined) return false;
  if (at === segments.length) return test(value);
  if (typeof value !== 'object' || value === null) return false;
  const segment = segments[at]!;
  if (Array.isArray(value)) {
    if (segment.index >= 0) return walk(value[segment.index], segments, at + 1, test);
    // One level of fan-out, as in Mongo: an array nested directly in an array is not entered.
    for (let i = 0; i < value.length; i++) {
      const element: unknown = value[i];
      if (typeof element !== 'object' || element === null || Array.isArray(element)) continue;
      if (walk(own(element as Record<string, unknown>, segment.name), segments, at + 1, test)) return true;
    }
    return false;
  }
  return walk(own(value as Record<string, unknown>, segment.name), segments, at + 1, test);
}

/** Own properties only: `constructor` or `__proto__` must not resolve to what the prototype has. */
function own(object: Record<string, unknown>, name: string): unknown {
  return Object.hasOwn(object, name) ? object[name] : undefined;
}

/** Implicit $eq, $eq and each $in value: JSON deep equality, with a number equal to the decimal string of its value. */
function equalTo(operand: unknown): Test {
  if (typeof operand === 'number') {
    const decimal = toDecimal(String(operand));
    return (value) => value === operand || (typeof value === 'string' && compareDecimalText(value, decimal) === 0);
  }
  if (typeof operand === 'string') {
    const numeric = numericString(operand);
    if (numeric === null) return (value) => value === operand;
    return (value) => value === operand || (typeof value === 'number' && compareNumber(value, numeric) === 0);
  }
  if (typeof operand !== 'object' || operand === null) return (value) => value === operand;
  return (value) => jsonEquals(value, operand);
}

/** Deep equality for literal objects and arrays (rare in filters: only they allocate, Object.keys and nested numbers). */
function jsonEquals(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a === 'number' && typeof b === 'string') return compareDecimalText(b, toDecimal(String(a))) === 0;
  if (typeof a === 'string' && typeof b === 'number') return compareDecimalText(a, toDecimal(String(b))) === 0;
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false;
  if (Array.isArray(a) || Array.isArray(b)) {
    return Array.isArray(a) && Array.isArray(b) && a.length === b.length && a.every((x, i) => jsonEquals(x, b[i]));
  }
  const left = a as Record<string, unknown>;
  const right = b as Record<string, unknown>;
  const keys = Object.keys(left);
  return (
    keys.length === Object.keys(right).length &&
    keys.every((key) => Object.hasOwn(right, key) && jsonEquals(left[key], right[key]))
  );
}

/** $gt…$lte: exact decimal order when both sides are numeric, else code-unit order of two strings, else false. */
function orderTest(operator: '$gt' | '$gte' | '$lt' | '$lte', operand: number | string): Test {
  const order = orderAgainst(operand);
  switch (operator) {
    case '$gt':
      return (value) => order(value) > 0;
    case '$gte':
      return (value) => order(value) >= 0;
    case '$lt':
      return (value) => order(value) < 0;
    case '$lte':
      return (value) => order(value) <= 0;
  }
}

/** The sign of (value − operand), or NaN when the two do not compare (every comparison with NaN is false). */
function orderAgainst(operand: number | string): (value: unknown) => number {
  if (typeof operand === 'number') {
    const decimal = toDecimal(String(operand));
    return (value) => {
      if (typeof value === 'number') return value < operand ? -1 : value > operand ? 1 : 0;
      return typeof value === 'string' ? compareDecimalText(value, decimal) : NaN;
    };
  }
  const numeric = numericString(operand);
  return (value) => {
    if (typeof value === 'number') return numeric === null ? NaN : compareNumber(value, numeric);
    if (typeof value !== 'string') return NaN;
    const order = numeric === null ? NaN : compareDecimalText(value, numeric.decimal);
    return Number.isNaN(order) ? (value < operand ? -1 : value > operand ? 1 : 0) : order;
  };
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return false;
  const prototype: unknown = Object.getPrototypeOf(value);
  return prototype === Object.prototype || prototype === null;
}

function isScalar(value: unknown): boolean {
  return (
    value === null ||
    typeof value === 'string' ||
    typeof value === 'boolean' ||
    (typeof value === 'number' && Number.isFinite(value))
  );
}

function isJsonValue(value: unknown, depth: number): boolean {
  if (isScalar(value)) return true;
  if (depth > MAX_VALUE_DEPTH) return false;
  if (Array.isArray(value)) return Array.from(value).every((item) => isJsonValue(item, depth + 1));
  return isPlainObject(value) && Object.values(value).every((item) => isJsonValue(item, depth + 1));
}

/** RFC 6901: `~` as `~0`, `/` as `~1`. */
function escapePointer(token: string): string {
  return token.replace(/~/g, '~0').replace(/\//g, '~1');
}
