/**
 * Which filter paths the subscribed event types' payload schemas do not have: a typo such as `payload.totalAmont`
 * would otherwise make a filter that silently never matches. Walks JSON Schema in its draft 2020-12 and draft-07
 * forms; lenient where it cannot tell (a `$ref` it cannot resolve), since a wrong "unknown" refuses a good filter.
 */

/** Keywords that constrain what lies below a schema: one with none of them (`{}`, `{type:'object'}`) is open. */
const CONSTRAINING = [
  'properties',
  'patternProperties',
  'additionalProperties',
  'unevaluatedProperties',
  'allOf',
  'anyOf',
  'oneOf',
  '$ref',
  'items',
  'prefixItems',
  'enum',
  'const',
];
const COMBINATORS = ['allOf', 'anyOf', 'oneOf'];
const INDEX = /^(0|[1-9]\d*)$/;
/** A `$ref` that could not be followed (remote, an anchor, or dangling). */
const UNRESOLVED = Symbol('unresolved');

type Schema = Record<string, unknown>;

/**
 * The paths of `paths` (as CompiledFilter.paths names them) that none of the schemas has. Envelope fields and
 * `payload` itself are always known; a null schema (an event type that declares none) makes every payload path known.
 */
export function pathsUnknownToSchemas(paths: string[], payloadSchemas: (Record<string, unknown> | null)[]): string[] {
  return paths.filter((path) => {
    if (path === 'payload' || !path.startsWith('payload')) return false;
    if (!path.startsWith('payload.')) return true;
    const segments = path.slice('payload.'.length).split('.');
    return !payloadSchemas.some((schema) => schema === null || knownIn(schema, segments));
  });
}

function knownIn(root: Schema, segments: string[]): boolean {
  // (schema, segment index) pairs already entered. A pair seen again is either on the current branch (a `$ref` or
  // combinator cycle, which must not loop) or was finished without success (the walk stops at the first success), so
  // false is right both times, and each pair is walked once at most however the branches multiply.
  const entered = new Map<object, Set<number>>();

  const walk = (schema: unknown, at: number): boolean => {
    if (schema === true) return true;
    if (!isObject(schema)) return false;
    if (at === segments.length) return true;
    const seen = entered.get(schema) ?? new Set<number>();
    if (seen.has(at)) return false;
    entered.set(schema, seen.add(at));
    const same = (branch: unknown) => walk(branch, at);
    const next = (branch: unknown) => walk(branch, at + 1);

    if (typeof schema.$ref === 'string') {
      const target = resolveRef(root, schema.$ref);
      if (target === UNRESOLVED || same(target)) return true;
    }
    if (COMBINATORS.some((keyword) => arrayOf(schema[keyword]).some(same))) return true;

    const segment = segments[at]!;
    const properties = isObject(schema.properties) ? schema.properties : {};
    const declared = Object.hasOwn(properties, segment);
    if (declared && next(properties[segment])) return true;
    if (isObject(schema.patternProperties)) {
      for (const [pattern, branch] of Object.entries(schema.patternProperties)) {
        if (matchesPattern(pattern, segment) && next(branch)) return true;
      }
    }
    // A schema object (not `true`): only then do the names it does not declare have a known shape.
    if (!declared && isObject(schema.additionalProperties) && next(schema.additionalProperties)) return true;

    const { items } = schema;
    const prefixItems = arrayOf(schema.prefixItems);
    if (INDEX.test(segment)) {
      const index = Number(segment);
      if (index < prefixItems.length && next(prefixItems[index])) return true;
      if (Array.isArray(items) ? index < items.length && next(items[index]) : items !== undefined && next(items)) {
        return true;
      }
    } else {
      // A field name on an array fans out over its elements: each element schema goes on with the same segment.
      if (prefixItems.some(same)) return true;
      if (Array.isArray(items) ? items.some(same) : items !== undefined && same(items)) return true;
    }
    return isOpen(schema);
  };

  return walk(root, 0);
}

/** An unconstrained schema that may hold an object or an array: any deeper path is known. */
function isOpen(schema: Schema): boolean {
  const constrained = CONSTRAINING.some(
    // `additionalProperties: true` says no more than its absence.
    (keyword) => schema[keyword] !== undefined && schema[keyword] !== true,
  );
  if (constrained) return false;
  const types = typeof schema.type === 'string' ? [schema.type] : arrayOf(schema.type);
  return schema.type === undefined || types.includes('object') || types.includes('array');
}

/** A local `$ref` (`#`, `#/$defs/…`, `#/definitions/…`: a JSON Pointer in a URI fragment) within `root`. */
function resolveRef(root: Schema, ref: string): unknown {
  if (ref === '#') return root;
  if (!ref.startsWith('#/')) return UNRESOLVED;
  let node: unknown = root;
  for (const raw of ref.slice(2).split('/')) {
    let token: string;
    try {
      token = decodeURIComponent(raw).replace(/~1/g, '/').replace(/~0/g, '~');
    } catch {
      return UNRESOLVED;
    }
    if ((!isObject(node) && !Array.isArray(node)) || !Object.hasOwn(node, token)) return UNRESOLVED;
    node = (node as Record<string, unknown>)[token];
  }
  return node;
}

function matchesPattern(pattern: string, segment: string): boolean {
  try {
    return new RegExp(pattern, 'u').test(segment);
  } catch {
    return false;
  }
}

function isObject(value: unknown): value is Schema {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function arrayOf(value: unknown): unknown[] {
  return Array.isArray(value) ? value : [];
}
