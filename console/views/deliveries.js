// Deliveries: the history, newest first, filtered by the API (subscription, event type, event id, status, queue-time
// range); cursor paging and live refresh.
import { api, query } from '../lib/api.js';
import { allSubscriptions, eventTypes, subscriptionLabel } from '../lib/catalogue.js';
import { announce, append, badge, h, hiddenText, relative, replace, shortId, timeElement, uid } from '../lib/dom.js';
import { liveControl, poll } from '../lib/live.js';
import { showProblem } from '../lib/problem.js';

const PAGE = 50;
/** Empty pages followed at most by one load (see loadPage). */
const EMPTY_PAGES_FOLLOWED = 12;
const STATUSES = ['queued', 'retrying', 'acknowledged', 'abandoned', 'superseded'];
const API_FILTERS = ['subscriptionId', 'eventType', 'eventId', 'status'];

export async function renderDeliveries(view, { params, signal }) {
  const filters = Object.fromEntries([...API_FILTERS, 'from', 'to'].map((name) => [name, params.get(name) ?? '']));
  const problems = h('div');
  const summary = h('p', { class: 'summary', id: uid('summary') });
  const body = h('tbody');
  const more = h('button', { type: 'button', class: 'button' }, 'Load more');
  const end = h('p', { class: 'muted', hidden: true }, 'End of the history.');
  append(
    view,
    h('h1', {}, 'Deliveries'),
    h('p', { class: 'lead' }, 'Every delivery of your events, newest first, with its status and last answer.'),
  );
  const [subscriptions, types] = await Promise.all([allSubscriptions(signal), eventTypes(signal)]);
  const labels = new Map(subscriptions.items.map((subscription) => [subscription.id, subscriptionLabel(subscription)]));

  // `generation` changes with the filters: an answer to a request made under older filters is dropped, so a refresh
  // or a page in flight when the filters change never brings rows that do not match them.
  const state = { rows: new Map(), cursor: null, generation: 0 };
  const summarize = () => {
    const shown = state.rows.size;
    summary.textContent =
      `${shown} ${shown === 1 ? 'delivery' : 'deliveries'} shown` + (state.cursor ? '; more can be loaded.' : '.');
  };
  const place = (delivery, where) => {
    const row = deliveryRow(delivery, labels);
    state.rows.set(delivery.id, row);
    if (where === 'top') body.prepend(row);
    else body.append(row);
  };
  // The time inputs are local times without a zone (datetime-local): the API takes them as instants.
  const instant = (local) => (local ? new Date(local).toISOString() : '');
  const apiQuery = (cursor) =>
    query({
      ...Object.fromEntries(API_FILTERS.map((name) => [name, filters[name]])),
      from: instant(filters.from),
      to: instant(filters.to),
      limit: PAGE,
      cursor,
    });

  const loadPage = async () => {
    let count = 0;
    // A sparse history answers empty pages with a cursor (each request reads a bounded stretch of it): go on a few
    // times rather than leave the operator pressing "Load more" on nothing.
    const generation = state.generation;
    for (let requests = 0; requests < EMPTY_PAGES_FOLLOWED; requests += 1) {
      const page = await api('GET', `/Deliveries${apiQuery(state.cursor)}`, undefined, { signal });
      if (generation !== state.generation) return 0;
      for (const delivery of page.items) if (!state.rows.has(delivery.id)) place(delivery, 'bottom');
      state.cursor = page.nextCursor;
      count += page.items.length;
      if (page.items.length > 0 || !state.cursor) break;
    }
    more.hidden = !state.cursor;
    end.hidden = Boolean(state.cursor);
    summarize();
    return count;
  };
  const reload = async () => {
    state.generation += 1;
    state.rows.clear();
    state.cursor = null;
    replace(body);
    replace(problems);
    await loadPage();
    announce(summary.textContent);
  };

  // Live refresh: the first page again; new deliveries go on top, changed ones are updated in place.
  const live = liveControl((on) => announce(on ? 'Live refresh resumed' : 'Live refresh paused'));
  poll(async () => {
    try {
      const generation = state.generation;
      const page = await api('GET', `/Deliveries${apiQuery(null)}`, undefined, { signal });
      if (generation !== state.generation) return;
      let added = 0;
      let changed = 0;
      for (const delivery of [...page.items].reverse()) {
        const row = state.rows.get(delivery.id);
        if (!row) {
          place(delivery, 'top');
          added += 1;
        } else if (row.dataset.version !== version(delivery)) {
          const fresh = deliveryRow(delivery, labels);
          row.replaceWith(fresh);
          state.rows.set(delivery.id, fresh);
          changed += 1;
        }
      }
      replace(problems);
      live.refreshed();
      summarize();
      if (added || changed) {
        announce(
          [added ? `${added} new ${added === 1 ? 'delivery' : 'deliveries'}` : '', changed ? `${changed} updated` : '']
            .filter(Boolean)
            .join(', '),
        );
      }
    } catch (error) {
      if (!signal.aborted) showProblem(problems, error);
      throw error;
    }
  }, signal);

  more.addEventListener('click', async () => {
    more.disabled = true;
    try {
      const count = await loadPage();
      announce(`${count} more loaded. ${summary.textContent}`);
    } catch (error) {
      showProblem(problems, error).focus();
    } finally {
      more.disabled = false;
    }
  });

  const form = filterForm(filters, subscriptions.items, types, async (next) => {
    Object.assign(filters, next);
    const search = query(filters);
    // The address keeps the filters (a link to share or bookmark) without re-rendering the view.
    window.history.replaceState(null, '', `#/deliveries${search}`);
    try {
      await reload();
    } catch (error) {
      showProblem(problems, error).focus();
    }
  });

  append(
    view,
    form,
    h('div', { class: 'list-head' }, summary, live.element),
    problems,
    h(
      'div',
      { class: 'table-wrap' },
      h(
        'table',
        { class: 'list', 'aria-describedby': summary.id },
        h('caption', { class: 'visually-hidden' }, 'Deliveries, newest first'),
        h(
          'thead',
          {},
          h(
            'tr',
            {},
            ['Queued', 'Event type', 'Subscription', 'Status', 'Attempts', 'Last answer', 'Next retry'].map((name) =>
              h('th', { scope: 'col' }, name),
            ),
          ),
        ),
        body,
      ),
    ),
    h('div', { class: 'actions' }, more, end),
  );
  await loadPage();
}

function filterForm(filters, subscriptions, types, apply) {
  const ids = {
    subscription: uid('f-subscription'),
    eventType: uid('f-event-type'),
    eventId: uid('f-event-id'),
    status: uid('f-status'),
    from: uid('f-from'),
    to: uid('f-to'),
    note: uid('time-note'),
  };
  const known = new Set(subscriptions.map((subscription) => subscription.id));
  const subscription = h(
    'select',
    { id: ids.subscription },
    h('option', { value: '' }, 'Any subscription'),
    subscriptions.map((entry) => h('option', { value: entry.id }, subscriptionLabel(entry))),
    filters.subscriptionId && !known.has(filters.subscriptionId)
      ? h('option', { value: filters.subscriptionId }, filters.subscriptionId)
      : null,
  );
  subscription.value = filters.subscriptionId;
  const eventType = h(
    'select',
    { id: ids.eventType },
    h('option', { value: '' }, 'Any event type'),
    types.map((type) => h('option', { value: type.eventType }, type.eventType)),
  );
  eventType.value = filters.eventType;
  const eventId = h('input', { id: ids.eventId, type: 'text', value: filters.eventId, spellcheck: 'false' });
  const status = h(
    'select',
    { id: ids.status },
    h('option', { value: '' }, 'Any status'),
    STATUSES.map((name) => h('option', { value: name }, name)),
  );
  status.value = filters.status;
  const from = h('input', { id: ids.from, type: 'datetime-local', value: filters.from, 'aria-describedby': ids.note });
  const to = h('input', { id: ids.to, type: 'datetime-local', value: filters.to, 'aria-describedby': ids.note });
  const values = () => ({
    subscriptionId: subscription.value,
    eventType: eventType.value,
    eventId: eventId.value.trim(),
    status: status.value,
    from: from.value,
    to: to.value,
  });
  const form = h(
    'form',
    { class: 'filters', role: 'search', 'aria-label': 'Filter deliveries', novalidate: true },
    h('div', { class: 'field' }, h('label', { for: ids.subscription }, 'Subscription'), subscription),
    h('div', { class: 'field' }, h('label', { for: ids.eventType }, 'Event type'), eventType),
    h('div', { class: 'field' }, h('label', { for: ids.eventId }, 'Event ID'), eventId),
    h('div', { class: 'field' }, h('label', { for: ids.status }, 'Status'), status),
    h('div', { class: 'field' }, h('label', { for: ids.from }, 'Queued from'), from),
    h('div', { class: 'field' }, h('label', { for: ids.to }, 'Queued before'), to),
    h('p', { class: 'hint wide', id: ids.note }, 'Times are in your time zone; "from" is included, "before" is not.'),
    h(
      'div',
      { class: 'actions wide' },
      h('button', { type: 'submit', class: 'button primary' }, 'Apply filters'),
      h(
        'button',
        {
          type: 'button',
          class: 'button',
          onclick: () => {
            for (const control of [subscription, eventType, eventId, status, from, to]) control.value = '';
            void apply(values());
          },
        },
        'Clear filters',
      ),
    ),
  );
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    void apply(values());
  });
  return form;
}

/** What a refresh compares to tell a changed delivery. */
function version(delivery) {
  return [delivery.status, delivery.attemptCount, delivery.lastStatusCode, delivery.nextRetryAt].join('|');
}

function deliveryRow(delivery, labels) {
  const lastAnswer =
    delivery.lastStatusCode !== null && delivery.lastStatusCode !== undefined
      ? String(delivery.lastStatusCode)
      : (delivery.lastErrorMessage ?? '');
  return h(
    'tr',
    { 'data-id': delivery.id, 'data-version': version(delivery) },
    h('td', { 'data-label': 'Queued' }, timeElement(delivery.queuedAt)),
    h(
      'td',
      { 'data-label': 'Event type' },
      h(
        'a',
        { href: `#/deliveries/${encodeURIComponent(delivery.id)}` },
        delivery.eventType,
        hiddenText(` delivery ${delivery.id}`),
      ),
      delivery.test ? h('span', { class: 'tag' }, 'test') : null,
      delivery.replayOf ? h('span', { class: 'tag' }, 'replay') : null,
    ),
    h(
      'td',
      { 'data-label': 'Subscription' },
      labels.has(delivery.subscriptionId)
        ? h('span', { class: 'url', title: delivery.subscriptionId }, labels.get(delivery.subscriptionId))
        : shortId(delivery.subscriptionId),
    ),
    h('td', { 'data-label': 'Status' }, badge(delivery.status)),
    h('td', { 'data-label': 'Attempts', class: 'num' }, String(delivery.attemptCount)),
    h(
      'td',
      { 'data-label': 'Last answer' },
      lastAnswer || h('span', { class: 'muted' }, '—'),
      delivery.lastStatusCode !== null && delivery.lastErrorMessage
        ? h('span', { class: 'block muted small' }, delivery.lastErrorMessage)
        : null,
    ),
    h(
      'td',
      { 'data-label': 'Next retry' },
      delivery.nextRetryAt
        ? [timeElement(delivery.nextRetryAt), h('span', { class: 'block muted small' }, relative(delivery.nextRetryAt))]
        : h('span', { class: 'muted' }, '—'),
    ),
  );
}
