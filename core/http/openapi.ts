// Shared pieces of both APIs' OpenAPI documents: the problem+json component, the error answers every operation
// documents, page shapes, and the document of one API cut out of the gateway's whole one.

/** A JSON Schema (or a fragment of one) as route schemas and components are written. */
export type JsonSchema = Record<string, unknown>;

/** RFC 9457 problem document: every error answer of both APIs (problem.ts and the auth plugin send it). */
export const problemSchema = {
  $id: 'Problem',
  type: 'object',
  description: 'An RFC 9457 problem document: every error answer of the API.',
  required: ['type', 'title', 'status', 'detail'],
  properties: {
    type: { type: 'string', description: 'always about:blank: the status and title say what went wrong' },
    title: { type: 'string' },
    status: { type: 'integer', minimum: 400, maximum: 599 },
    detail: { type: 'string', description: 'what was wrong with this request, for a human' },
    errors: {
      type: 'array',
      description: 'validation answers (400) only: one entry per refused field',
      items: {
        type: 'object',
        required: ['path', 'message'],
        additionalProperties: false,
        properties: {
          path: { type: 'string', description: 'the field, dotted (rows.0.quantity); empty for the whole body' },
          message: { type: 'string' },
        },
      },
    },
  },
  examples: [
    {
      type: 'about:blank',
      title: 'Invalid request',
      status: 400,
      detail: 'url: url must use https',
      errors: [{ path: 'url', message: 'url must use https' }],
    },
  ],
} as const;

/** The error statuses an operation may document. */
export type ErrorStatus = 400 | 401 | 403 | 404 | 409 | 413 | 415 | 431 | 503;

const ERROR_DESCRIPTIONS: Record<ErrorStatus, string> = {
  400: 'Invalid request: a parameter or the body breaks a documented rule (`errors` names each field), or the body is not JSON.',
  401: 'No valid bearer token.',
  403: 'The token is valid, but its client is not registered as an integrator of this API for the token tenant, or is registered read-only and the operation changes something.',
  404: 'No such resource for the caller tenant (ids of other tenants answer 404 too).',
  409: 'The request conflicts with the current state of the resource.',
  413: 'The body is larger than this operation accepts.',
  415: 'The body is not `application/json`.',
  431: 'The request line and headers exceed the 16 KiB the server reads (a very long query string or path).',
  503: 'A dependency (Cassandra, Kafka, the event-type catalogue) cannot answer right now: retry after `Retry-After` seconds.',
};

/** The error answers of an operation, each a problem document, with the headers the server sends with them. */
export function errorResponses(statuses: readonly ErrorStatus[], details: Partial<Record<ErrorStatus, string>> = {}) {
  const responses: Record<string, JsonSchema> = {};
  for (const status of statuses) {
    const response: JsonSchema = {
      description: details[status] ?? ERROR_DESCRIPTIONS[status],
      content: { 'application/problem+json': { schema: { $ref: 'Problem#' } } },
    };
    if (status === 401) {
      response.headers = {
        'www-authenticate': { type: 'string', description: 'Bearer, with error="invalid_token" for a bad token' },
      };
    }
    if (status === 503) {
      response.headers = {
        'retry-after': { type: 'integer', minimum: 0, description: 'seconds to wait before retrying' },
      };
    }
    responses[String(status)] = response;
  }
  return responses;
}

/** The errors every operation of an authenticated API can answer, whatever it does (431: any request can be too long). */
export const AUTH_ERRORS = [401, 403, 431, 503] as const satisfies readonly ErrorStatus[];
/** What a method that carries a body can answer before its handler runs: bad JSON, too large, not JSON. */
export const BODY_ERRORS = [400, 413, 415] as const satisfies readonly ErrorStatus[];

/** A cursor as the API hands it out (opaque: base64url of the position), for examples. */
export const CURSOR_EXAMPLE = 'AAEAAAAHZGVsaXZlcnkAAAAAAQ';

/**
 * A `{"items": [...], "nextCursor": …}` page of `item` (a component name), DESIGN §7, with an example page of
 * `example` items.
 */
export function pageSchema(
  name: string,
  item: string,
  description: string,
  example: unknown,
  nextCursor: string | null = CURSOR_EXAMPLE,
) {
  return {
    $id: name,
    type: 'object',
    description,
    examples: [{ items: [example], nextCursor }],
    required: ['items', 'nextCursor'],
    additionalProperties: false,
    properties: {
      items: { type: 'array', items: { $ref: `${item}#` } },
      nextCursor: {
        type: ['string', 'null'],
        description: 'pass as `cursor` to read the next page; null on the last page',
      },
    },
  } as const;
}

/** Query of a list: `limit` 1–500 (default 50) and an opaque `cursor` (DESIGN §7). */
export const cursorParameter = {
  type: 'string',
  minLength: 1,
  maxLength: 2000,
  description:
    'The `nextCursor` of the previous page, as it was returned. Cursors are opaque: any other value, or a cursor of ' +
    'another listing, is answered 400.',
} as const;

export const limitParameter = {
  type: 'integer',
  minimum: 1,
  maximum: 500,
  default: 50,
  description: 'items per page',
  examples: [50],
} as const;

/** An OpenAPI document: only the parts this module reads or rewrites are typed. */
export interface OpenApiDocument {
  paths?: Record<string, unknown>;
  info: Record<string, unknown>;
  components?: { schemas?: Record<string, unknown>; securitySchemes?: Record<string, unknown> };
  [key: string]: unknown;
}

/**
 * Rewrites of component schemas (already in OpenAPI 3.0 form) for the document: the rules a component states there
 * but the validator leaves to code, because they depend on the running server (its configuration, the event-type
 * catalogue) or because code answers them with a better message.
 */
export type ComponentOverrides = Record<string, (documented: JsonSchema) => JsonSchema>;

/**
 * The part of the gateway's document under `prefix`: its paths and only the component schemas they use (directly or
 * through other components), with `overrides` applied.
 */
export function documentOf(
  whole: OpenApiDocument,
  prefix: string,
  title: string,
  overrides: ComponentOverrides = {},
): OpenApiDocument {
  const paths = Object.fromEntries(Object.entries(whole.paths ?? {}).filter(([path]) => path.startsWith(prefix)));
  const available: Record<string, unknown> = { ...whole.components?.schemas };
  for (const [name, override] of Object.entries(overrides)) {
    if (name in available) available[name] = override(available[name] as JsonSchema);
  }
  const used: Record<string, unknown> = {};
  const pending = [...referencedComponents(paths)];
  while (pending.length > 0) {
    const name = pending.pop()!;
    if (name in used || !(name in available)) continue;
    used[name] = available[name];
    pending.push(...referencedComponents(available[name]));
  }
  const schemas = Object.fromEntries(Object.entries(used).sort(([a], [b]) => a.localeCompare(b)));
  return {
    ...whole,
    info: { ...whole.info, title },
    paths: withOptionalBodies(paths, schemas),
    components: { ...whole.components, schemas },
  };
}

const METHODS = ['get', 'put', 'post', 'delete', 'patch'];

/**
 * @fastify/swagger marks every request body with a schema as required; one whose schema admits null is optional
 * (fastify validates an absent body as null), so it is marked so, with the description of its schema.
 */
function withOptionalBodies(paths: Record<string, unknown>, schemas: Record<string, unknown>) {
  const result: Record<string, unknown> = {};
  for (const [path, item] of Object.entries(paths)) {
    const operations: Record<string, unknown> = { ...(item as Record<string, unknown>) };
    for (const method of METHODS) {
      const operation = operations[method] as { requestBody?: { content?: Record<string, { schema?: JsonSchema }> } };
      const ref = operation?.requestBody?.content?.['application/json']?.schema?.$ref;
      const schema = typeof ref === 'string' ? (schemas[ref.slice(COMPONENT_REF.length)] as JsonSchema) : undefined;
      if (schema?.nullable !== true) continue;
      operations[method] = {
        ...operation,
        requestBody: { ...operation.requestBody, required: false, description: schema.description },
      };
    }
    result[path] = operations;
  }
  return result;
}

const COMPONENT_REF = '#/components/schemas/';

/** Names of the component schemas `value` refers to. */
function referencedComponents(value: unknown): string[] {
  const found: string[] = [];
  const visit = (node: unknown) => {
    if (Array.isArray(node)) {
      for (const entry of node) visit(entry);
    } else if (node !== null && typeof node === 'object') {
      for (const [key, child] of Object.entries(node)) {
        if (key === '$ref' && typeof child === 'string' && child.startsWith(COMPONENT_REF)) {
          found.push(child.slice(COMPONENT_REF.length));
        } else {
          visit(child);
        }
      }
    }
  };
  visit(value);
  return found;
}
