import type { Filter } from './filter.ts';

/** How the service authenticates to a subscriber endpoint. */
export type AuthenticationMode = 'None' | 'ApiKey' | 'Hmac' | 'OAuth2' | 'StandardWebhooks';
export const AUTHENTICATION_MODES: readonly AuthenticationMode[] = [
  'None',
  'ApiKey',
  'Hmac',
  'OAuth2',
  'StandardWebhooks',
];

/** Modes that sign with the subscription's secret (`hmacSecret`): answered at creation, rotated on request. */
export const signsWithSecret = (mode: AuthenticationMode): boolean => mode === 'Hmac' || mode === 'StandardWebhooks';

/** How long a rotated StandardWebhooks secret still signs, beside the new one (receivers switch within it). */
export const SECRET_ROTATION_WINDOW_MS = 24 * 3_600_000;
export type SubscriptionStatus = 'enabled' | 'disabled';
/** 'entity': deliveries of one entity arrive in the order their events were raised, one at a time (entity-order.ts). */
export type Ordering = 'none' | 'entity';
export const ORDERINGS: readonly Ordering[] = ['none', 'entity'];

/** Write-only fields, sealed at rest and never returned (the Hmac secret only at creation and rotation). */
export interface SubscriptionSecrets {
  hmacSecret?: string;
  /** StandardWebhooks: the secret before the last rotation, and until when (epoch ms) it still signs. */
  previousHmacSecret?: string;
  previousHmacSecretUntil?: number;
  apiKey?: string;
  oauth2ClientSecret?: string;
}

/** A subscription as the services use it, secrets opened. */
export interface Subscription {
  tenantId: string;
  id: string;
  url: string;
  eventTypes: string[];
  authenticationMode: AuthenticationMode;
  signatureHeaderName: string;
  apiKeyHeaderName: string | null;
  oauth2: { tokenUrl: string; clientId: string; audience: string | null; scope: string | null } | null;
  secrets: SubscriptionSecrets;
  /** Why the sealed secrets could not be opened (unknown key, damaged data); its deliveries are abandoned. */
  unreadableSecrets?: string;
  supersedePendingDeliveries: boolean;
  ordering: Ordering;
  description: string | null;
  /** Attempts per second at most, summed over all dispatchers (1..10,000); null for unlimited. */
  maxDeliveriesPerSecond: number | null;
  /** The events to deliver among those of its types (core/subscriptions/filter.ts); null for all of them. */
  filter: Filter | null;
  status: SubscriptionStatus;
  failureDays: number;
  /** Start (epoch ms) of the last failure-day window counted, or null. */
  lastFailureWindow: number | null;
  /** Health (operational events): failing since when, null while healthy; `failingAnnouncedAt`: last announced. */
  failingSince: Date | null;
  failingAnnounced: boolean;
  failingAnnouncedAt: Date | null;
  createdAt: Date;
  updatedAt: Date;
}

export const DEFAULT_SIGNATURE_HEADER = 'X-Webhook-Signature';

/** A new subscription with every field at its default: enabled, mode None, no secrets. */
export function blankSubscription(tenantId: string, id: string, now: Date): Subscription {
  return {
    tenantId,
    id,
    url: '',
    eventTypes: [],
    authenticationMode: 'None',
    signatureHeaderName: DEFAULT_SIGNATURE_HEADER,
    apiKeyHeaderName: null,
    oauth2: null,
    secrets: {},
    supersedePendingDeliveries: false,
    ordering: 'none',
    description: null,
    maxDeliveriesPerSecond: null,
    filter: null,
    status: 'enabled',
    failureDays: 0,
    lastFailureWindow: null,
    failingSince: null,
    failingAnnounced: false,
    failingAnnouncedAt: null,
    createdAt: now,
    updatedAt: now,
  };
}
