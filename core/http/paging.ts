/** Query string of the list endpoints (DESIGN §7): `limit` 1–500, default 50, and an opaque `cursor`. */
export const pageQuerySchema = {
  type: 'object',
  additionalProperties: false,
  properties: {
    limit: { type: 'integer', minimum: 1, maximum: 500, default: 50 },
    cursor: { type: 'string', minLength: 1, maxLength: 2000 },
  },
} as const;

export interface PageQuery {
  limit: number;
  cursor?: string;
}
