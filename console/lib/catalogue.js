// The event-type catalogue and the tenant's subscriptions, as several views need them (pickers, labels).
import { api } from './api.js';

const CATALOGUE_TTL_MS = 60_000;
let cached = { at: 0, items: null };

/** The catalogue (GET /EventTypes), kept a minute so that moving between views does not ask again. */
export async function eventTypes(signal) {
  if (cached.items && Date.now() - cached.at < CATALOGUE_TTL_MS) return cached.items;
  const answer = await api('GET', '/EventTypes', undefined, { signal });
  cached = { at: Date.now(), items: answer.items };
  return answer.items;
}

/** Every subscription of the tenant, page by page (at most `max`); `complete` says whether all were read. */
export async function allSubscriptions(signal, max = 1_000) {
  const items = [];
  let cursor;
  do {
    const search = new URLSearchParams({ limit: '500' });
    if (cursor) search.set('cursor', cursor);
    const page = await api('GET', `/Subscriptions?${search}`, undefined, { signal });
    items.push(...page.items);
    cursor = page.nextCursor;
  } while (cursor && items.length < max);
  return { items, complete: !cursor };
}

/** How a subscription is named in lists and pickers: its description, else its URL. */
export function subscriptionLabel(subscription) {
  return subscription.description ? `${subscription.description} (${subscription.url})` : subscription.url;
}
