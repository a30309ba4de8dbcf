import crypto from 'node:crypto';
import { WebhookVerificationError } from './errors.ts';
import { headerValues, type RequestHeaders } from './headers.ts';
import type { PurchaseOrderEnvelope } from './types.ts';

/** The raw request body exactly as received. */
export type RawBody = Buffer | Uint8Array | string;

/** What `verifyWebhook` needs from one request. */
export interface VerifyWebhookOptions {
  /** The request headers (Node's `request.headers`, any plain object, or a fetch `Headers`). */
  headers: RequestHeaders;
  /** The body bytes as received, before any parsing; a string is taken as their UTF-8 text. */
  rawBody: RawBody;
  /** The subscription's secret; during a rotation the new and the previous one (valid if any matches). */
  secrets: string | readonly string[];
  /** The signature header the subscription chose; X-Webhook-Signature by default. */
  signatureHeader?: string;
}

/** Looked up case-insensitively; written as the spec names it, for messages. */
const DEFAULT_SIGNATURE_HEADER = 'X-Webhook-Signature';
/** An HMAC-SHA256 is 32 bytes. */
const DIGEST_BYTES = 32;
/** Values of the signature header looked at, at most: the service sends one. */
const MAX_CANDIDATES = 8;

/** base64(HMAC-SHA256(key = secret as UTF-8, message = raw body)): the value of the signature header. */
export function signWebhook(secret: string, rawBody: RawBody): string {
  return digest(secret, bytesOf(rawBody)).toString('base64');
}

/**
 * Checks the delivery's signature over the raw body, then parses it: returns the envelope, or throws a
 * WebhookVerificationError (answer 401 for missing_signature and invalid_signature, and do not process the body).
 *
 * The body is parsed only once the signature matched, and signatures are compared in constant time
 * (`crypto.timingSafeEqual` on two 32-byte buffers, for every secret and every value of the header).
 * The type parameter names the envelopes expected; by default those of the purchase service's events.
 */
export function verifyWebhook<E extends { eventType: string } = PurchaseOrderEnvelope>(
  options: VerifyWebhookOptions,
): E {
  const { secrets, body } = secretsAndBody(options);
  const headerName = options.signatureHeader ?? DEFAULT_SIGNATURE_HEADER;
  // A proxy may repeat a header, and Node joins repeats with ", ": each value is a candidate (base64 has no comma).
  const candidates = headerValues(options.headers, headerName)
    .flatMap((value) => value.split(','))
    .map((value) => value.trim())
    .filter((value) => value.length > 0)
    .slice(0, MAX_CANDIDATES);
  if (candidates.length === 0) {
    throw new WebhookVerificationError('missing_signature', `No ${headerName} header`);
  }
  if (!signatureMatches(body, secrets, candidates)) {
    throw new WebhookVerificationError(
      'invalid_signature',
      `The ${headerName} header does not match (${secrets.length} secret(s) tried)`,
    );
  }
  return parseEnvelope(body) as unknown as E;
}

/** True if a candidate equals the HMAC of the body under a secret; every pair is compared, in constant time. */
function signatureMatches(body: Buffer, secrets: string[], candidates: string[]): boolean {
  const given = candidates.map(decodeSignature);
  let matched = false;
  for (const secret of secrets) {
    const expected = digest(secret, body);
    for (const candidate of given) {
      // Always two 32-byte buffers: a malformed candidate is compared as zeros, so no length check returns early.
      const equal = crypto.timingSafeEqual(candidate.bytes, expected);
      if (equal && candidate.wellFormed) matched = true;
    }
  }
  return matched;
}

/** A header value as 32 bytes, and whether it was canonical base64 of exactly 32 bytes. */
function decodeSignature(value: string): { bytes: Buffer; wellFormed: boolean } {
  const decoded = Buffer.from(value, 'base64');
  const bytes = Buffer.alloc(DIGEST_BYTES);
  const wellFormed = decoded.length === DIGEST_BYTES && decoded.toString('base64') === value;
  if (wellFormed) decoded.copy(bytes);
  return { bytes, wellFormed };
}

// The secret's UTF-8 bytes are the key; given as the string, as a Buffer key costs a caught exception per call on Node 24.
function digest(secret: string, body: Buffer): Buffer {
  return crypto.createHmac('sha256', secret).update(body).digest();
}

function bytesOf(rawBody: RawBody): Buffer {
  if (typeof rawBody === 'string') return Buffer.from(rawBody, 'utf8');
  return Buffer.isBuffer(rawBody) ? rawBody : Buffer.from(rawBody.buffer, rawBody.byteOffset, rawBody.byteLength);
}

/** The verified body as an envelope: UTF-8 JSON, an object with the fields every envelope has. */
function parseEnvelope(body: Buffer): Record<string, unknown> {
  let parsed: unknown;
  try {
    parsed = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(body));
  } catch (error) {
    throw new WebhookVerificationError('invalid_body', 'The body is not UTF-8 JSON', { cause: error });
  }
  if (
    typeof parsed !== 'object' ||
    parsed === null ||
    Array.isArray(parsed) ||
    typeof (parsed as Record<string, unknown>).eventId !== 'string' ||
    typeof (parsed as Record<string, unknown>).eventType !== 'string' ||
    typeof (parsed as Record<string, unknown>).payloadOmitted !== 'boolean'
  ) {
    throw new WebhookVerificationError('invalid_body', 'The body is JSON but not an envelope');
  }
  return parsed as Record<string, unknown>;
}

function describe(value: unknown): string {
  if (value === null) return 'null';
  if (typeof value === 'object') return `an object (${value.constructor?.name ?? 'Object'})`;
  return `a ${typeof value}`;
}

/** What `verifyStandardWebhook` needs from one request. */
export interface VerifyStandardWebhookOptions {
  /** The request headers (Node's `request.headers`, any plain object, or a fetch `Headers`). */
  headers: RequestHeaders;
  /** The body bytes as received, before any parsing; a string is taken as their UTF-8 text. */
  rawBody: RawBody;
  /** The subscription's `whsec_` secret; during a rotation the new and the previous one (valid if any matches). */
  secrets: string | readonly string[];
  /** How far webhook-timestamp may be from now, in seconds: 300 by default, as the official libraries. */
  toleranceSeconds?: number;
  /** The clock, in epoch ms (tests). */
  now?: () => number;
}

const STANDARD_PREFIX = 'whsec_';

/**
 * Checks a delivery of a subscription using authenticationMode StandardWebhooks, then parses it: the timestamp within
 * the tolerance, then `v1,` + base64 HMAC-SHA256 of `webhook-id.webhook-timestamp.body` under a secret's bytes (the
 * base64 after `whsec_`) among the space-separated signatures. Returns the envelope, or throws a
 * WebhookVerificationError (answer 401 and do not process the body). Compared in constant time.
 */
export function verifyStandardWebhook<E extends { eventType: string } = PurchaseOrderEnvelope>(
  options: VerifyStandardWebhookOptions,
): E {
  const { secrets, body } = secretsAndBody(options);
  const id = headerValues(options.headers, 'webhook-id')[0];
  const signatures = headerValues(options.headers, 'webhook-signature')
    .flatMap((value) => value.split(' '))
    .filter((value) => value.startsWith('v1,'))
    .slice(0, MAX_CANDIDATES)
    .map((value) => decodeSignature(value.slice(3)));
  if (!id || signatures.length === 0) {
    throw new WebhookVerificationError('missing_signature', 'No webhook-id, or no v1 webhook-signature');
  }
  const stamp = headerValues(options.headers, 'webhook-timestamp')[0] ?? '';
  const now = Math.floor((options.now ?? Date.now)() / 1000);
  const tolerance = options.toleranceSeconds ?? 300;
  if (!/^\d{1,12}$/.test(stamp) || Math.abs(now - Number(stamp)) > tolerance) {
    throw new WebhookVerificationError('invalid_timestamp', `webhook-timestamp ${JSON.stringify(stamp)}, now ${now}`);
  }
  let matched = false;
  for (const secret of secrets) {
    const key = Buffer.from(
      secret.startsWith(STANDARD_PREFIX) ? secret.slice(STANDARD_PREFIX.length) : secret,
      'base64',
    );
    const expected = crypto.createHmac('sha256', key).update(`${id}.${stamp}.`).update(body).digest();
    for (const candidate of signatures) {
      if (crypto.timingSafeEqual(candidate.bytes, expected) && candidate.wellFormed) matched = true;
    }
  }
  if (!matched) {
    throw new WebhookVerificationError(
      'invalid_signature',
      `The webhook-signature header does not match (${secrets.length} secret(s) tried)`,
    );
  }
  return parseEnvelope(body) as unknown as E;
}

/** The non-empty secrets given, and the raw body's bytes; throws when there is no secret or no raw body. */
function secretsAndBody(options: { secrets: string | readonly string[]; rawBody: RawBody }) {
  const secrets = (typeof options.secrets === 'string' ? [options.secrets] : [...(options.secrets ?? [])]).filter(
    (secret): secret is string => typeof secret === 'string' && secret.length > 0,
  );
  if (secrets.length === 0) throw new WebhookVerificationError('no_secrets');
  if (typeof options.rawBody !== 'string' && !(options.rawBody instanceof Uint8Array)) {
    throw new WebhookVerificationError('body_not_raw', `rawBody is ${describe(options.rawBody)}`);
  }
  const body = bytesOf(options.rawBody);
  return { secrets, body };
}
