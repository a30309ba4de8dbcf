import { randomBytes } from 'node:crypto';
import { InvalidInputError } from '../core/errors.ts';
import { isEventTypePattern, matchesEventType } from '../core/event-types.ts';
import { checkWebhookUrl, type Cidr } from '../core/ssrf.ts';
import { type AuthenticationMode, type Subscription } from '../core/subscriptions/subscription.ts';

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
  description?: string | null;
}

export const subscriptionInputSchema = {
  type: 'object',
  additionalProperties: false,
  properties: {
    url: { type: 'string', minLength: 1, maxLength: 2048 },
    eventTypes: { type: 'array', minItems: 1, maxItems: 100, items: { type: 'string', minLength: 1, maxLength: 200 } },
    authenticationMode: { type: 'string', enum: ['None', 'ApiKey', 'Hmac', 'OAuth2'] },
    signatureHeaderName: { type: 'string', pattern: "^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,100}$" },
    hmacSecret: { type: 'string', minLength: 16, maxLength: 512 },
    apiKey: {
      type: 'object',
      additionalProperties: false,
      required: ['headerName', 'value'],
      properties: {
        headerName: { type: 'string', pattern: "^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,100}$" },
        value: { type: 'string', minLength: 1, maxLength: 2048 },
      },
    },
    oauth2: {
      type: 'object',
      additionalProperties: false,
      required: ['tokenUrl', 'clientId', 'clientSecret'],
      properties: {
        tokenUrl: { type: 'string', minLength: 1, maxLength: 2048 },
        clientId: { type: 'string', minLength: 1, maxLength: 512 },
        clientSecret: { type: 'string', minLength: 1, maxLength: 2048 },
        audience: { type: 'string', maxLength: 512 },
        scope: { type: 'string', maxLength: 1024 },
      },
    },
    supersedePendingDeliveries: { type: 'boolean' },
    description: { type: ['string', 'null'], maxLength: 1000 },
  },
} as const;

export interface InputRules {
  allowHttp: boolean;
  allowed: Cidr[];
  resolve?: (host: string) => Promise<string[]>;
  catalogue: () => string[];
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
    const problem = await checkWebhookUrl(input.url, rules);
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
  if (input.description !== undefined) next.description = input.description;
  if (input.apiKey !== undefined) {
    next.apiKeyHeaderName = input.apiKey.headerName;
    next.secrets.apiKey = input.apiKey.value;
  }
  if (input.oauth2 !== undefined) {
    const problem = await checkWebhookUrl(input.oauth2.tokenUrl, rules);
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
  if (next.authenticationMode === 'ApiKey' && !next.secrets.apiKey) {
    errors.push({ path: 'apiKey', message: 'is required when authenticationMode is ApiKey' });
  }
  if (next.authenticationMode === 'OAuth2' && !next.oauth2) {
    errors.push({ path: 'oauth2', message: 'is required when authenticationMode is OAuth2' });
  }
  if (errors.length > 0) throw new InvalidInputError(errors);
  return { subscription: next, generatedSecret: generatedSecret ?? (creating ? next.secrets.hmacSecret : undefined) };
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
    description: subscription.description,
    status: subscription.status,
    failureDays: subscription.failureDays,
    createdAt: subscription.createdAt.toISOString(),
    updatedAt: subscription.updatedAt.toISOString(),
  };
}
