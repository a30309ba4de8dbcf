// Subscriptions: the tenant's list with status and failure days, and the actions on each (edit, enable or disable,
// send a test event, rotate the secret, see its deliveries, delete).
import { api, query } from '../lib/api.js';
import { eventTypes, subscriptionLabel } from '../lib/catalogue.js';
import { confirmDialog } from '../lib/dialog.js';
import { announce, append, badge, h, hiddenText, replace, shortId, uid } from '../lib/dom.js';
import { showProblem } from '../lib/problem.js';
import { secretPanel } from '../lib/secret.js';

const PAGE = 100;

export async function renderSubscriptions(view, { signal }) {
  const notices = h('div', { class: 'notices' });
  const problems = h('div');
  const body = h('tbody');
  const empty = h('p', { class: 'empty', hidden: true }, 'No subscriptions yet. Create one to start receiving events.');
  const more = h('button', { type: 'button', class: 'button', hidden: true }, 'Load more subscriptions');
  append(
    view,
    h(
      'div',
      { class: 'view-head' },
      h('h1', {}, 'Subscriptions'),
      h('a', { href: '#/subscriptions/new', class: 'button primary' }, 'New subscription'),
    ),
    h(
      'p',
      { class: 'lead' },
      'Where your events are delivered. A failure day is a day with at least one abandoned delivery; after too many ' +
        'in a row the subscription is disabled, and enabling it again resets the count.',
    ),
    notices,
    problems,
    h(
      'div',
      { class: 'table-wrap' },
      h(
        'table',
        { class: 'list' },
        h('caption', { class: 'visually-hidden' }, 'Subscriptions of your tenant'),
        h(
          'thead',
          {},
          h(
            'tr',
            {},
            ['Endpoint', 'Event types', 'Authentication', 'Status', 'Failure days', 'Actions'].map((name) =>
              h('th', { scope: 'col' }, name),
            ),
          ),
        ),
        body,
      ),
    ),
    empty,
    more,
  );

  const context = { signal, notices, problems };
  let cursor = null;
  const loadPage = async () => {
    // The store may answer an empty last page with a cursor (after deletions): follow a few rather than show it.
    for (let requests = 0; requests < 5; requests += 1) {
      const page = await api('GET', `/Subscriptions${query({ limit: PAGE, cursor })}`, undefined, { signal });
      for (const subscription of page.items) body.append(row(subscription, context));
      cursor = page.nextCursor;
      if (page.items.length > 0 || !cursor) break;
    }
    more.hidden = !cursor;
    empty.hidden = body.children.length > 0;
  };
  more.addEventListener('click', async () => {
    more.disabled = true;
    try {
      const before = body.children.length;
      await loadPage();
      announce(`${body.children.length - before} more subscriptions loaded`);
    } catch (error) {
      showProblem(problems, error).focus();
    } finally {
      more.disabled = false;
    }
  });
  await loadPage();
}

function row(subscription, context) {
  const tr = h('tr', { 'data-id': subscription.id });
  fill(tr, subscription, context);
  return tr;
}

function fill(tr, subscription, context) {
  replace(
    tr,
    h(
      'td',
      { 'data-label': 'Endpoint' },
      h('span', { class: 'url' }, subscription.url),
      subscription.description ? h('span', { class: 'block' }, subscription.description) : null,
      h('span', { class: 'block muted small' }, 'id ', shortId(subscription.id)),
    ),
    h(
      'td',
      { 'data-label': 'Event types' },
      h(
        'ul',
        { class: 'tags' },
        subscription.eventTypes.map((type) => h('li', {}, h('code', {}, type))),
      ),
    ),
    h('td', { 'data-label': 'Authentication' }, subscription.authenticationMode),
    h('td', { 'data-label': 'Status' }, badge(subscription.status)),
    h('td', { 'data-label': 'Failure days', class: 'num' }, String(subscription.failureDays)),
    h('td', { 'data-label': 'Actions' }, actions(tr, subscription, context)),
  );
}

function actions(tr, subscription, context) {
  const { notices, problems, signal } = context;
  const id = subscription.id;
  const about = hiddenText(` subscription ${subscription.url}`);
  const enabled = subscription.status === 'enabled';
  const toggle = h(
    'button',
    {
      type: 'button',
      class: 'button small',
      'data-action': 'status',
      onclick: async () => {
        toggle.disabled = true;
        const next = enabled ? 'disabled' : 'enabled';
        try {
          const updated = await api('PATCH', `/Subscriptions/${encodeURIComponent(id)}/status`, { status: next });
          fill(tr, updated, context);
          tr.querySelector('[data-action="status"]').focus();
          announce(`Subscription ${updated.status}${next === 'enabled' ? '; failure days reset to 0' : ''}`);
        } catch (error) {
          toggle.disabled = false;
          showProblem(problems, error).focus();
        }
      },
    },
    enabled ? 'Disable' : 'Enable',
    about.cloneNode(true),
  );

  const sendTest = async () => {
    const types = await eventTypes(signal);
    const selectId = uid('test-type');
    const select = h(
      'select',
      { id: selectId },
      types.map((type) => h('option', { value: type.eventType }, type.eventType)),
    );
    await confirmDialog({
      title: 'Send a test event',
      body: [
        h(
          'p',
          {},
          `The catalogue's example payload of the chosen type goes to ${subscription.url} through the whole ` +
            'pipeline, signed like any delivery and marked with X-Webhook-Test: true. It never counts toward failure days.',
        ),
        h('div', { class: 'field' }, h('label', { for: selectId }, 'Event type'), select),
      ],
      confirmLabel: 'Send test event',
      onConfirm: async () => {
        const sent = await api('POST', `/Subscriptions/${encodeURIComponent(id)}/test`, { eventType: select.value });
        replace(
          notices,
          h(
            'p',
            { class: 'notice success' },
            'Test event ',
            h('code', {}, sent.eventType),
            ` sent to ${subscription.url}. `,
            h('a', { href: `#/deliveries/${encodeURIComponent(sent.deliveryId)}` }, 'Open its delivery'),
          ),
        );
        announce(`Test event ${sent.eventType} sent`);
      },
    });
  };

  const rotate = () =>
    confirmDialog({
      title:
        subscription.authenticationMode === 'StandardWebhooks'
          ? 'Rotate the Standard Webhooks secret?'
          : 'Rotate the Hmac secret?',
      body: h(
        'p',
        {},
        subscription.authenticationMode === 'StandardWebhooks'
          ? `A new secret signs the deliveries to ${subscription.url} from now on. For 24 hours each delivery also ` +
              'carries a signature made with the old secret: give your receiver the new one within that time.'
          : `A new secret signs the deliveries to ${subscription.url} queued from now on. Deliveries already queued ` +
              'keep their signature made with the old secret, so let your receiver accept both for a while.',
      ),
      confirmLabel: 'Rotate secret',
      onConfirm: async () => {
        const { hmacSecret } = await api('POST', `/Subscriptions/${encodeURIComponent(id)}/secret/rotate`);
        announce('Secret rotated. The new secret is shown once.');
        return secretPanel(hmacSecret, { headingLevel: 'h3' });
      },
    });

  const remove = () =>
    confirmDialog({
      title: 'Delete this subscription?',
      body: [
        h('p', {}, h('span', { class: 'url' }, subscriptionLabel(subscription))),
        h(
          'p',
          {},
          'It stops receiving events at once and its pending deliveries are abandoned. Its delivery history stays ' +
            'readable. This cannot be undone.',
        ),
      ],
      confirmLabel: 'Delete subscription',
      danger: true,
      onConfirm: async () => {
        await api('DELETE', `/Subscriptions/${encodeURIComponent(id)}`);
        tr.remove();
        replace(notices, h('p', { class: 'notice success' }, `Subscription ${subscription.url} deleted.`));
        announce('Subscription deleted');
      },
    });

  const guarded = (action) => async () => {
    try {
      await action();
    } catch (error) {
      showProblem(problems, error).focus();
    }
  };
  return h(
    'div',
    { class: 'row-actions' },
    h(
      'a',
      { class: 'button small', href: `#/subscriptions/${encodeURIComponent(id)}/edit` },
      'Edit',
      about.cloneNode(true),
    ),
    toggle,
    h(
      'button',
      { type: 'button', class: 'button small', onclick: guarded(sendTest) },
      'Send test event',
      about.cloneNode(true),
    ),
    subscription.authenticationMode === 'Hmac' || subscription.authenticationMode === 'StandardWebhooks'
      ? h(
          'button',
          { type: 'button', class: 'button small', onclick: guarded(rotate) },
          'Rotate secret',
          about.cloneNode(true),
        )
      : null,
    h(
      'a',
      { class: 'button small', href: `#/deliveries?subscriptionId=${encodeURIComponent(id)}` },
      'Deliveries',
      about.cloneNode(true),
    ),
    h(
      'button',
      { type: 'button', class: 'button small danger', onclick: guarded(remove) },
      'Delete',
      about.cloneNode(true),
    ),
  );
}
