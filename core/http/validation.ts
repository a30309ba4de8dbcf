import { Ajv, type AnySchema, type ValidateFunction } from 'ajv';
import type { FastifyServerOptions } from 'fastify';
import formats from 'ajv-formats';

// ajv-formats is CommonJS: its plugin is the default export's `default`.
const addFormats = formats.default;

/**
 * Fastify's validator factory (schemaController.compilersFactory.buildValidator) with two ajv instances: the query
 * string, path and headers are text, so their values are coerced to the schema's types (limit=10 is an integer); a
 * JSON body is not coerced, so `"true"` is no boolean and `1` no string there, as the OpenAPI documents say. Unknown
 * properties are refused, never removed (removeAdditional: false), so a misspelt field is a 400 naming it.
 */
export const buildValidator = ((externalSchemas: Record<string, unknown>) => {
  const instance = (coerceTypes: false | 'array') => {
    const ajv = new Ajv({
      coerceTypes,
      useDefaults: true,
      removeAdditional: false,
      allowUnionTypes: true,
      // Defaults of fastify's own compiler: one error is enough, and allErrors makes some schemas a DoS vector.
      allErrors: false,
      addUsedSchema: false,
    });
    addFormats(ajv);
    for (const schema of Object.values(externalSchemas)) ajv.addSchema(schema as AnySchema);
    return ajv;
  };
  const body = instance(false);
  const text = instance('array');
  return ({ schema, httpPart }: { schema: AnySchema; httpPart?: string }): ValidateFunction => {
    const ajv = httpPart === 'body' ? body : text;
    // A shared schema used as a whole part (body: { $ref }) is compiled once per instance, like fastify does.
    const id = typeof schema === 'object' && '$id' in schema ? (schema.$id as string | undefined) : undefined;
    const stored = id === undefined ? undefined : ajv.getSchema(id);
    return stored ?? ajv.compile(schema);
  };
  // fastify calls the compiler with { schema, httpPart, … }; its type declares an older signature (schema only).
}) as unknown as NonNullable<
  NonNullable<NonNullable<FastifyServerOptions['schemaController']>['compilersFactory']>['buildValidator']
>;
