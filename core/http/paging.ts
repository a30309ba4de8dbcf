import { cursorParameter, limitParameter } from './openapi.ts';

/** Query string of the list endpoints (DESIGN §7): `limit` 1–500, default 50, and an opaque `cursor`. */
export const pageQuerySchema = {
  type: 'object',
  additionalProperties: false,
  properties: { limit: limitParameter, cursor: cursorParameter },
} as const;

export interface PageQuery {
  limit: number;
  cursor?: string;
}
