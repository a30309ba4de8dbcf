// At a glance: per subscription, deliveries and failure rate over the last hour and day, counted from the delivery
// history API. At most HISTORY_CAP deliveries are read per subscription; counts that reach the cap show "≥".
import { api, query } from '../lib/api.js';
import { allSubscriptions, subscriptionLabel } from '../lib/catalogue.js';
import { barChart } from '../lib/chart.js';
import { announce, append, badge, h, replace } from '../lib/dom.js';
import { showProblem } from '../lib/problem.js';
import { bucketize, countText, DAY_MS, HOUR_MS, rateText } from '../lib/stats.js';

export const HISTORY_CAP = 2_000;
const PAGE = 500;
/** Subscriptions whose history is read at once (each is a few requests of up to 500 deliveries). */
const CONCURRENCY = 2;
/** Requests per subscription at most: a sparse history can answer short pages with a cursor. */
const MAX_REQUESTS = 20;

export async function renderGlance(view, { signal }) {
  const cards = h('div', { class: 'cards' });
  const problems = h('div');
  const refresh = h('button', { type: 'button', class: 'button' }, 'Refresh');
  append(
    view,
    h('div', { class: 'view-head' }, h('h1', {}, 'At a glance'), refresh),
    h(
      'p',
      { class: 'lead' },
      'Deliveries per subscription over the last hour (5-minute bars) and the last 24 hours (hourly bars), with the ' +
        'share failing (retrying or abandoned). Counted from the delivery history: at most ' +
        `${HISTORY_CAP.toLocaleString('en')} deliveries are read per subscription, and a count marked \u2265 reached ` +
        'that cap.',
    ),
    h(
      'p',
      { class: 'legend', 'aria-hidden': 'true' },
      h('span', { class: 'swatch bar' }),
      ' deliveries ',
      h('span', { class: 'swatch bar-failing' }),
      ' failing',
    ),
    problems,
    cards,
  );
  const load = async () => {
    replace(problems);
    replace(cards, h('p', { class: 'muted' }, 'Reading the delivery history…'));
    const { items, complete } = await allSubscriptions(signal, 200);
    replace(cards);
    if (items.length === 0) {
      cards.append(h('p', { class: 'empty' }, 'No subscriptions yet.'));
      return;
    }
    const now = Date.now();
    const slots = items.map((subscription) => {
      const card = h(
        'article',
        { class: 'card glance', 'data-id': subscription.id, 'aria-busy': 'true' },
        h('h2', {}, h('span', { class: 'url' }, subscriptionLabel(subscription)), ' ', badge(subscription.status)),
        h('p', { class: 'muted' }, 'Loading…'),
      );
      cards.append(card);
      return { subscription, card };
    });
    if (!complete) cards.append(h('p', { class: 'muted' }, 'Only the first 200 subscriptions are shown.'));
    let next = 0;
    const worker = async () => {
      while (next < slots.length && !signal.aborted) {
        const { subscription, card } = slots[next++];
        try {
          fillCard(card, subscription, await history(subscription.id, now, signal), now);
        } catch (error) {
          if (signal.aborted) return;
          replace(card, h('h2', {}, h('span', { class: 'url' }, subscriptionLabel(subscription))));
          showProblem(card.appendChild(h('div')), error);
        }
        card.removeAttribute('aria-busy');
      }
    };
    await Promise.all(Array.from({ length: CONCURRENCY }, worker));
    announce(`Statistics of ${slots.length} ${slots.length === 1 ? 'subscription' : 'subscriptions'} loaded`);
  };
  refresh.addEventListener('click', async () => {
    refresh.disabled = true;
    try {
      await load();
    } catch (error) {
      showProblem(problems, error).focus();
    } finally {
      refresh.disabled = false;
    }
  });
  await load();
}

/** A subscription's deliveries of the last day, newest first, at most HISTORY_CAP; `oldestRead` set when capped. */
async function history(subscriptionId, now, signal) {
  const items = [];
  let cursor = null;
  let requests = 0;
  for (;;) {
    const page = await api('GET', `/Deliveries${query({ subscriptionId, limit: PAGE, cursor })}`, undefined, {
      signal,
    });
    items.push(...page.items);
    cursor = page.nextCursor;
    requests += 1;
    const oldest = items.at(-1);
    if (!cursor || (oldest && new Date(oldest.queuedAt).getTime() <= now - DAY_MS)) {
      return { items, oldestRead: null };
    }
    if (items.length >= HISTORY_CAP || requests >= MAX_REQUESTS) {
      const kept = items.slice(0, HISTORY_CAP);
      return { items: kept, oldestRead: kept.length ? new Date(kept.at(-1).queuedAt).getTime() : now };
    }
  }
}

function fillCard(card, subscription, { items, oldestRead }, now) {
  const hour = bucketize(items, { now, windowMs: HOUR_MS, buckets: 12, oldestRead });
  const day = bucketize(items, { now, windowMs: DAY_MS, buckets: 24, oldestRead });
  const figure = (title, stats, sliceName, key) => {
    const caption = `${title}: ${countText(stats.total, stats.lowerBound)} deliveries, ${rateText(stats.failureRate)} failing`;
    return h(
      'figure',
      { class: 'metric' },
      h(
        'figcaption',
        {},
        h('span', { class: 'metric-title' }, title),
        h('span', { class: 'metric-value', 'data-metric': `${key}-total` }, countText(stats.total, stats.lowerBound)),
        ' deliveries, ',
        h('span', { class: 'metric-value', 'data-metric': `${key}-rate` }, rateText(stats.failureRate)),
        ' failing',
      ),
      barChart(stats.slots, { label: caption, sliceName }),
    );
  };
  replace(
    card,
    h('h2', {}, h('span', { class: 'url' }, subscriptionLabel(subscription)), ' ', badge(subscription.status)),
    h(
      'div',
      { class: 'metrics' },
      figure('Last hour', hour, '5 minutes', 'hour'),
      figure('Last 24 hours', day, 'hour', 'day'),
    ),
    oldestRead !== null
      ? h(
          'p',
          { class: 'muted small' },
          `Only the latest ${items.length.toLocaleString('en')} deliveries were read (back to ` +
            `${new Date(oldestRead).toLocaleString()}): counts marked \u2265 are lower bounds and rates are those of ` +
            'the deliveries read.',
        )
      : null,
    h(
      'p',
      {},
      h(
        'a',
        { href: `#/deliveries?subscriptionId=${encodeURIComponent(subscription.id)}` },
        'Deliveries of this subscription',
      ),
      subscription.failureDays > 0 ? ` · ${subscription.failureDays} failure days` : '',
    ),
  );
}
