import { randomBytes } from 'node:crypto';
import { ConflictError, InvalidInputError } from '../core/errors.ts';
import { isEventTypePattern, matchesEventType } from '../core/event-types.ts';
import { checkWebhookUrl, type Cidr } from '../core/ssrf.ts';
import { generateStandardSecret, isStandardSecret, standardSecretProblem } from '../core/standard-webhooks.ts';
import { compileFilter, FilterError, pathsUnknownToSchemas, type Filter } from '../core/subscriptions/filter.ts';
import {
  AUTHENTICATION_MODES,
  ORDERINGS,
  type AuthenticationMode,
  type Ordering,
  type Subscription,
} from '../core/subscriptions/subscription.ts';

/** The request body of POST /Subscriptions (PATCH sends any subset). */
export interface SubscriptionInput {
  url?: string;
  eventTypes?: string[];
  authenticationMode?: AuthenticationMode;
  signatureHeaderName?: string;
  hmacSecret?: string;
  apiKey?: { headerName: string; value: string };
  oauth2?: { tokenUrl: string; clientId: string; clientSecret: string; audience?: string; scope?: string };
  supersedePendingDeliveries?: boolean;
  ordering?: Ordering;
  description?: string | null;
  maxDeliveriesPerSecond?: number | null;
  filter?: Filter | null;
}

/** An HTTP header name (RFC 9110 token): signature and API-key headers are sent under it. */
const headerName = { type: 'string', pattern: "^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,100}$" } as const;

/**
 * The fields of a subscription request (DESIGN §7): all of them may be sent to create one (url and eventTypes must),
 * any subset to change one. `WebhookUrl` and `EventTypePattern` validate only the type and length; code checks the
 * rest (see applySubscriptionInput), and the OpenAPI document states it (webhook-schemas.ts).
 */
export const subscriptionFields = {
  url: { $ref: 'WebhookUrl#' },
  eventTypes: {
    type: 'array',
    minItems: 1,
    maxItems: 100,
    description: 'event types to receive; `*` stands for exactly one whole segment (purchaseOrder.*)',
    items: { $ref: 'EventTypePattern#' },
  },
  authenticationMode: {
    type: 'string',
    enum: [...AUTHENTICATION_MODES],
    description:
      'how the receiver authenticates deliveries; None when absent at creation. StandardWebhooks: the ' +
      'webhook-id, webhook-timestamp and webhook-signature headers of the Standard Webhooks specification',
  },
  signatureHeaderName: { ...headerName, description: 'header carrying the HMAC signature (X-Webhook-Signature)' },
  hmacSecret: {
    type: 'string',
    minLength: 16,
    maxLength: 512,
    writeOnly: true,
    description:
      'HMAC-SHA256 key; generated when Hmac (32 random bytes, base64) or StandardWebhooks (whsec_ and 32 random ' +
      'bytes in base64) is chosen without one. StandardWebhooks takes only a whsec_ secret of 24 to 64 bytes',
  },
  apiKey: {
    type: 'object',
    additionalProperties: false,
    required: ['headerName', 'value'],
    description: 'sent as `headerName: value` with every delivery (authenticationMode ApiKey)',
    properties: { headerName, value: { type: 'string', minLength: 1, maxLength: 2048, writeOnly: true } },
  },
  oauth2: {
    type: 'object',
    additionalProperties: false,
    required: ['tokenUrl', 'clientId', 'clientSecret'],
    description: 'client-credentials grant whose access token is sent as a bearer token (authenticationMode OAuth2)',
    properties: {
      tokenUrl: { $ref: 'WebhookUrl#' },
      clientId: { type: 'string', minLength: 1, maxLength: 512 },
      clientSecret: { type: 'string', minLength: 1, maxLength: 2048, writeOnly: true },
      audience: { type: 'string', maxLength: 512 },
      scope: { type: 'string', maxLength: 1024 },
    },
  },
  supersedePendingDeliveries: {
    type: 'boolean',
    description: 'a newer delivery of the same entity supersedes the pending ones (they end as superseded)',
  },
  ordering: {
    type: 'string',
    enum: ORDERINGS,
    description:
      '`entity`: deliveries of one entity (entityId) arrive in the order their events were raised, each sent once the ' +
      'one before it was acknowledged, abandoned or superseded; other entities go on in parallel. Replays and test ' +
      'deliveries are outside the order. `none` (the default): no order',
  },
  description: { type: ['string', 'null'], maxLength: 1000 },
  maxDeliveriesPerSecond: {
    type: ['integer', 'null'],
    minimum: 1,
    maximum: 10_000,
    description:
      'attempts per second at most, across all dispatchers (a burst of about one attempt per dispatcher above it); ' +
      'null (the default) for unlimited',
  },
  filter: { $ref: 'SubscriptionFilter#' },
} as const;

const OCTET = '(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])';
const IPV4 = `${OCTET}(?:\\.${OCTET}){3}`;
/**
 * A bracketed IPv6 literal's characters. Not its full RFC 3986 grammar: that alternation made schemathesis spend 15 s
 * on each operation using the URL, and the WHATWG parser (checkWebhookUrl) refuses an invalid address anyway.
 */
const IPV6 = '[0-9A-Fa-f:.]{2,45}';
const LABEL = '[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?';
/** A DNS name whose last label starts with a letter: WHATWG parses a numeric last label as an IPv4 address. */
const NAME = `(?:${LABEL}\\.)*[A-Za-z](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?`;
const PORT = '(?:6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3}|0)';
const PCHAR = "(?:[A-Za-z0-9._~!$&'()*+,;=:@-]|%[0-9A-Fa-f]{2})";

/**
 * The grammar of a subscriber URL, as the OpenAPI document states it and applySubscriptionInput enforces it: an
 * absolute https URL (http too when allowed) with a DNS name, a dotted-quad IPv4 or a bracketed IPv6 host, an optional
 * port, and a path, query and fragment of RFC 3986 characters (anything else percent-encoded). No user-info. Whether
 * the host is allowed (a valid IPv6 address; not private, loopback…; for a name, what it resolves to) is no matter of
 * grammar: checkWebhookUrl judges it.
 */
export function webhookUrlPattern(allowHttp: boolean): string {
  const scheme = allowHttp ? 'https?' : 'https';
  const host = `(?:${NAME}|${IPV4}|\\[${IPV6}\\])`;
  return `^${scheme}://${host}(?::${PORT})?(?:/${PCHAR}*)*(?:\\?(?:${PCHAR}|[/?])*)?(?:#(?:${PCHAR}|[/?])*)?$`;
}

export interface InputRules {
  allowHttp: boolean;
  allowed: Cidr[];
  resolve?: (host: string) => Promise<string[]>;
  catalogue: () => string[];
  /** The payload JSON Schema an event type declares (null: none); absent, no filter path is judged unknown. */
  schemaOf?: (eventType: string) => Record<string, unknown> | null;
}

/**
 * Applies a create (base undefined) or update to a subscription, checking every rule the JSON schema cannot: URL
 * safety, event types against the catalogue, and the settings each authentication mode requires.
 */
export async function applySubscriptionInput(
  base: Subscription,
  input: SubscriptionInput,
  rules: InputRules,
  creating: boolean,
): Promise<{ subscription: Subscription; generatedSecret: string | undefined }> {
  const errors: { path: string; message: string }[] = [];
  const next: Subscription = { ...base, secrets: { ...base.secrets } };
  if (creating && input.url === undefined) errors.push({ path: 'url', message: 'is required' });
  if (creating && input.eventTypes === undefined) errors.push({ path: 'eventTypes', message: 'is required' });
  if (input.url !== undefined) {
    const problem = await urlProblem(input.url, rules);
    if (problem) errors.push({ path: 'url', message: problem });
    next.url = input.url;
  }
  if (input.eventTypes !== undefined) {
    const known = rules.catalogue();
    input.eventTypes.forEach((pattern, index) => {
      if (!isEventTypePattern(pattern)) {
        errors.push({ path: `eventTypes.${index}`, message: 'must be dotted segments, each a name or *' });
      } else if (!known.some((name) => matchesEventType(pattern, name))) {
        errors.push({ path: `eventTypes.${index}`, message: `matches no event type of the catalogue (${pattern})` });
      }
    });
    next.eventTypes = [...new Set(input.eventTypes)];
  }
  if (input.authenticationMode !== undefined) next.authenticationMode = input.authenticationMode;
  if (input.signatureHeaderName !== undefined) next.signatureHeaderName = input.signatureHeaderName;
  if (input.supersedePendingDeliveries !== undefined)
    next.supersedePendingDeliveries = input.supersedePendingDeliveries;
  if (input.ordering !== undefined) next.ordering = input.ordering;
  if (input.description !== undefined) next.description = input.description;
  if (input.maxDeliveriesPerSecond !== undefined) next.maxDeliveriesPerSecond = input.maxDeliveriesPerSecond;
  if (input.filter !== undefined) next.filter = input.filter;
  // A stored filter is judged again when the types change: a payload path may belong to none of the new ones.
  if (next.filter !== null && (input.filter !== undefined || input.eventTypes !== undefined)) {
    errors.push(...filterProblems(next.filter, next.eventTypes, rules));
  }
  if (input.apiKey !== undefined) {
    next.apiKeyHeaderName = input.apiKey.headerName;
    next.secrets.apiKey = input.apiKey.value;
  }
  if (input.oauth2 !== undefined) {
    const problem = await urlProblem(input.oauth2.tokenUrl, rules);
    if (problem) errors.push({ path: 'oauth2.tokenUrl', message: problem.replace(/^url/, 'tokenUrl') });
    next.oauth2 = {
      tokenUrl: input.oauth2.tokenUrl,
      clientId: input.oauth2.clientId,
      audience: input.oauth2.audience ?? null,
      scope: input.oauth2.scope ?? null,
    };
    next.secrets.oauth2ClientSecret = input.oauth2.clientSecret;
  }
  if (input.hmacSecret !== undefined) next.secrets.hmacSecret = input.hmacSecret;
  let generatedSecret: string | undefined;
  if (next.authenticationMode === 'Hmac' && !next.secrets.hmacSecret) {
    generatedSecret = randomBytes(32).toString('base64');
    next.secrets.hmacSecret = generatedSecret;
  }
  let secretConflict: string | undefined;
  if (next.authenticationMode === 'StandardWebhooks') {
    const problem = input.hmacSecret === undefined ? undefined : standardSecretProblem(input.hmacSecret);
    // Chosen in this request, the pair is malformed (400); chosen earlier, the secret conflicts with the stored mode.
    if (problem && input.authenticationMode === 'StandardWebhooks')
      errors.push({ path: 'hmacSecret', message: `${problem} (authenticationMode StandardWebhooks)` });
    else if (problem) secretConflict = `hmacSecret ${problem}: the subscription uses StandardWebhooks`;
    else if (!isStandardSecret(next.secrets.hmacSecret)) {
      // None yet, or an Hmac one (any string): Standard Webhooks receivers take only whsec_ secrets.
      generatedSecret = generateStandardSecret();
      next.secrets.hmacSecret = generatedSecret;
    }
    if (input.hmacSecret !== undefined || generatedSecret) {
      delete next.secrets.previousHmacSecret;
      delete next.secrets.previousHmacSecretUntil;
    }
  }
  const missing =
    next.authenticationMode === 'ApiKey' && !next.secrets.apiKey
      ? 'apiKey'
      : next.authenticationMode === 'OAuth2' && !next.oauth2
        ? 'oauth2'
        : undefined;
  // A creation without the settings its mode needs is invalid in itself (the OpenAPI document says so: 400).
  if (missing && creating) {
    errors.push({ path: missing, message: `is required when authenticationMode is ${next.authenticationMode}` });
  }
  if (errors.length > 0) throw new InvalidInputError(errors);
  // A change is valid in itself: whether the subscription has the settings its new mode needs (sent before, or in this
  // request) depends on its stored state, so it is a conflict with that state (409), not a malformed request.
  if (missing) {
    throw new ConflictError(
      `${missing} is required when authenticationMode is ${next.authenticationMode}, and the subscription has none: send it`,
    );
  }
  if (secretConflict) throw new ConflictError(secretConflict);
  return { subscription: next, generatedSecret: generatedSecret ?? (creating ? next.secrets.hmacSecret : undefined) };
}

/** What is wrong with a filter: its own structure, then payload paths that no subscribed type's schema has. */
function filterProblems(filter: Filter, eventTypes: string[], rules: InputRules): { path: string; message: string }[] {
  let paths: { path: string; pointer: string }[];
  try {
    paths = compileFilter(filter).paths;
  } catch (error) {
    if (!(error instanceof FilterError)) throw error;
    return error.problems.map(({ pointer, message }) => ({ path: `filter${pointer}`, message }));
  }
  const schemaOf = rules.schemaOf;
  if (!schemaOf) return [];
  const types = rules.catalogue().filter((name) => eventTypes.some((pattern) => matchesEventType(pattern, name)));
  if (types.length === 0) return []; // the event types are refused already
  const unknown = new Set(
    pathsUnknownToSchemas(
      paths.map(({ path }) => path),
      types.map(schemaOf),
    ),
  );
  return paths
    .filter(({ path }) => unknown.has(path))
    .map(({ path, pointer }) => ({
      path: `filter${pointer}`,
      message: `${path} is in the payload schema of none of the subscribed event types (${types.sort().join(', ')})`,
    }));
}

const URL_GRAMMAR = { https: new RegExp(webhookUrlPattern(false)), http: new RegExp(webhookUrlPattern(true)) };

/** Why a subscriber (or token) URL is refused: its address rules (core/ssrf.ts), then the documented grammar. */
async function urlProblem(url: string, rules: InputRules): Promise<string | undefined> {
  const problem = await checkWebhookUrl(url, rules);
  if (problem) return problem;
  if (!(rules.allowHttp ? URL_GRAMMAR.http : URL_GRAMMAR.https).test(url)) {
    return 'url must have a DNS name, dotted IPv4 or [IPv6] host, and only RFC 3986 characters (percent-encode others)';
  }
  return undefined;
}

/** The public view: secrets are write-only. */
export function subscriptionView(subscription: Subscription, hmacSecret?: string) {
  return {
    id: subscription.id,
    url: subscription.url,
    eventTypes: subscription.eventTypes,
    authenticationMode: subscription.authenticationMode,
    signatureHeaderName: subscription.signatureHeaderName,
    ...(hmacSecret ? { hmacSecret } : {}),
    apiKey: subscription.apiKeyHeaderName ? { headerName: subscription.apiKeyHeaderName } : null,
    oauth2: subscription.oauth2,
    supersedePendingDeliveries: subscription.supersedePendingDeliveries,
    ordering: subscription.ordering,
    description: subscription.description,
    maxDeliveriesPerSecond: subscription.maxDeliveriesPerSecond,
    filter: subscription.filter,
    status: subscription.status,
    failureDays: subscription.failureDays,
    createdAt: subscription.createdAt.toISOString(),
    updatedAt: subscription.updatedAt.toISOString(),
  };
}
