import { createHmac, randomBytes } from 'node:crypto';

/**
 * The Standard Webhooks signature scheme (https://www.standardwebhooks.com, authenticationMode "StandardWebhooks"):
 * `webhook-id`, `webhook-timestamp` (Unix seconds of the attempt) and `webhook-signature: v1,<base64 HMAC-SHA256 of
 * "id.timestamp.body">`, keyed by the bytes of a `whsec_<base64>` secret. Several signatures go space-separated while a
 * rotated secret is still honoured. The timestamp is signed, so a captured request replayed later than the
 * receiver's tolerance (5 minutes in the official libraries) is rejected.
 */
export const STANDARD_SECRET_PREFIX = 'whsec_';

/** Key sizes the Standard Webhooks specification allows: 24 to 64 bytes. */
const MIN_KEY_BYTES = 24;
const MAX_KEY_BYTES = 64;

/** A new secret: 32 random bytes, as `whsec_<base64>`. */
export function generateStandardSecret(): string {
  return STANDARD_SECRET_PREFIX + randomBytes(32).toString('base64');
}

/** What is wrong with a secret offered for Standard Webhooks, or undefined when it is one. */
export function standardSecretProblem(secret: string): string | undefined {
  if (!secret.startsWith(STANDARD_SECRET_PREFIX)) return `must start with ${STANDARD_SECRET_PREFIX}`;
  const encoded = secret.slice(STANDARD_SECRET_PREFIX.length);
  if (!/^[A-Za-z0-9+/]+={0,2}$/.test(encoded) || encoded.length % 4 !== 0)
    return `must be ${STANDARD_SECRET_PREFIX} followed by standard base64`;
  const bytes = Buffer.from(encoded, 'base64').length;
  if (bytes < MIN_KEY_BYTES || bytes > MAX_KEY_BYTES)
    return `must encode ${MIN_KEY_BYTES} to ${MAX_KEY_BYTES} bytes (it encodes ${bytes})`;
  return undefined;
}

export function isStandardSecret(secret: string | undefined): secret is string {
  return secret !== undefined && standardSecretProblem(secret) === undefined;
}

/** `v1,<signature>` of one message under one secret. */
export function standardSignature(secret: string, id: string, timestampSeconds: number, body: Buffer): string {
  const key = Buffer.from(secret.slice(STANDARD_SECRET_PREFIX.length), 'base64');
  const mac = createHmac('sha256', key).update(`${id}.${timestampSeconds}.`).update(body).digest('base64');
  return `v1,${mac}`;
}

/** The three headers of one attempt, signed with every secret given (the current one first). */
export function standardHeaders(
  secrets: readonly string[],
  id: string,
  timestampSeconds: number,
  body: Buffer,
): Record<'webhook-id' | 'webhook-timestamp' | 'webhook-signature', string> {
  return {
    'webhook-id': id,
    'webhook-timestamp': String(timestampSeconds),
    'webhook-signature': secrets.map((secret) => standardSignature(secret, id, timestampSeconds, body)).join(' '),
  };
}
