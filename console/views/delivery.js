// One delivery: its ids, the body and headers it was sent with (headers reconstructed), every attempt on a timeline
// with the next retry, and replay. Refreshed live while it is still pending.
import { api } from '../lib/api.js';
import { announce, append, badge, h, relative, replace, timeElement } from '../lib/dom.js';
import { liveControl, poll } from '../lib/live.js';
import { showProblem } from '../lib/problem.js';

const PENDING = new Set(['queued', 'retrying']);

export async function renderDelivery(view, { id, signal }) {
  const heading = h('h1', {}, 'Delivery');
  const problems = h('div');
  const content = h('div', { class: 'stack' });
  append(view, h('p', { class: 'crumbs' }, h('a', { href: '#/deliveries' }, 'Deliveries')), heading, problems, content);
  const path = `/Deliveries/${encodeURIComponent(id)}`;
  let delivery = await api('GET', path, undefined, { signal });
  // The subscription tells which signature and authentication headers were sent; it may have been deleted since.
  const subscription = await api('GET', `/Subscriptions/${encodeURIComponent(delivery.subscriptionId)}`, undefined, {
    signal,
  }).catch((error) => {
    if (error.status === 404) return null;
    throw error;
  });

  const live = liveControl((on) => announce(on ? 'Live refresh resumed' : 'Live refresh paused'));
  const replayProblems = h('div');
  const show = () => {
    heading.replaceChildren(`Delivery of ${delivery.eventType} `, badge(delivery.status));
    replace(
      content,
      actions(delivery, replayProblems),
      replayProblems,
      h('div', { class: 'list-head' }, h('span'), PENDING.has(delivery.status) ? live.element : null),
      ids(delivery, subscription),
      timeline(delivery),
      headers(delivery, subscription),
      body(delivery),
    );
  };
  show();
  poll(async () => {
    if (!PENDING.has(delivery.status)) return;
    try {
      const fresh = await api('GET', path, undefined, { signal });
      replace(problems);
      live.refreshed();
      if (fresh.attemptCount === delivery.attemptCount && fresh.status === delivery.status) return;
      const attempts = fresh.attempts.length - delivery.attempts.length;
      if (fresh.status !== delivery.status) replace(replayProblems);
      delivery = fresh;
      const focusedId = document.activeElement?.id;
      show();
      if (focusedId) document.getElementById(focusedId)?.focus();
      const last = fresh.attempts.at(-1);
      announce(
        attempts > 0 && last
          ? `Attempt ${last.attempt}: ${last.statusCode ?? last.errorMessage ?? 'no answer'}. Delivery ${fresh.status}.`
          : `Delivery ${fresh.status}.`,
      );
    } catch (error) {
      if (!signal.aborted) showProblem(problems, error);
      throw error;
    }
  }, signal);
}

function actions(delivery, problems) {
  const pending = PENDING.has(delivery.status);
  const replay = h(
    'button',
    {
      type: 'button',
      // Still clickable while pending, so the API's answer (409) says why; only its look steps back.
      class: pending ? 'button' : 'button primary',
      id: 'replay',
      'aria-describedby': 'replay-hint',
      onclick: async () => {
        replay.disabled = true;
        try {
          const fresh = await api('POST', `/Deliveries/${encodeURIComponent(delivery.id)}/replay`);
          announce(`Replayed as a new delivery, ${fresh.id}`);
          window.location.hash = `#/deliveries/${encodeURIComponent(fresh.id)}`;
        } catch (error) {
          replay.disabled = false;
          showProblem(problems, error).focus();
        }
      },
    },
    'Replay',
  );
  return h(
    'div',
    { class: 'actions' },
    replay,
    h(
      'a',
      { class: 'button', href: `#/deliveries?subscriptionId=${encodeURIComponent(delivery.subscriptionId)}` },
      'Deliveries of this subscription',
    ),
    h(
      'p',
      { class: 'hint', id: 'replay-hint' },
      pending
        ? `Replay becomes possible once this delivery has ended (it is ${delivery.status}).`
        : 'Replay sends the same event again, with the same body and signature, as a new delivery.',
    ),
  );
}

function ids(delivery, subscription) {
  const rows = [
    ['Delivery id', h('code', {}, delivery.id)],
    ['Event id', h('code', {}, delivery.eventId)],
    ['Event type', h('code', {}, delivery.eventType)],
    [
      'Subscription',
      [h('code', {}, delivery.subscriptionId), subscription ? h('span', { class: 'block url' }, subscription.url) : ''],
    ],
    ['Entity id', h('code', {}, delivery.entityId ?? '—')],
    ['Occurred at', timeElement(delivery.occurredAt)],
    ['Queued at', timeElement(delivery.queuedAt)],
    ['Status', badge(delivery.status)],
    ['Attempts', String(delivery.attemptCount)],
    delivery.replayOf
      ? ['Replay of', h('a', { href: `#/deliveries/${encodeURIComponent(delivery.replayOf)}` }, delivery.replayOf)]
      : null,
    delivery.test ? ['Test', 'yes: raised by "Send test event", not by a real event'] : null,
    delivery.abandonReason ? ['Why it ended', delivery.abandonReason] : null,
  ].filter(Boolean);
  return h(
    'section',
    { 'aria-labelledby': 'envelope-heading' },
    h('h2', { id: 'envelope-heading' }, 'Envelope and ids'),
    h(
      'p',
      { class: 'hint' },
      'The body sent is a WebhookEventEnvelope with these ids around the producer\u2019s payload (below). ',
      h('a', { href: '#/event-types' }, 'The payload\u2019s schema and an example'),
      ' are in the catalogue.',
    ),
    h(
      'dl',
      { class: 'facts' },
      rows.map(([term, value]) => [h('dt', {}, term), h('dd', {}, value)]),
    ),
  );
}

/** The documented request headers, rebuilt from the delivery's fields and its subscription's settings. */
function headers(delivery, subscription) {
  const attempts = delivery.attemptCount;
  const list = [
    ['Content-Type', 'application/json'],
    ['X-Webhook-Event-Id', delivery.eventId],
    ['X-Webhook-Delivery-Id', delivery.id],
    ['X-Webhook-Event-Type', delivery.eventType],
    ['X-Webhook-Subscription-Id', delivery.subscriptionId],
    ['X-Webhook-Attempt', attempts > 1 ? `1 to ${attempts} (one per attempt)` : '1'],
  ];
  if (delivery.test) list.push(['X-Webhook-Test', 'true']);
  if (subscription?.authenticationMode === 'Hmac') {
    list.push([subscription.signatureHeaderName, '(hidden) base64 HMAC-SHA256 of the body, computed once when queued']);
  } else if (subscription?.authenticationMode === 'StandardWebhooks') {
    list.push(
      ['webhook-id', delivery.eventId],
      ['webhook-timestamp', '(per attempt) Unix seconds when it was sent'],
      ['webhook-signature', '(hidden) v1,base64 HMAC-SHA256 of id.timestamp.body, computed per attempt'],
    );
  } else if (subscription?.authenticationMode === 'ApiKey' && subscription.apiKey) {
    list.push([subscription.apiKey.headerName, '(hidden) the API key']);
  } else if (subscription?.authenticationMode === 'OAuth2') {
    list.push(['Authorization', '(hidden) Bearer token from the subscription\u2019s token URL']);
  }
  return h(
    'section',
    { 'aria-labelledby': 'headers-heading' },
    h('h2', { id: 'headers-heading' }, 'Headers sent (reconstructed)'),
    h(
      'p',
      { class: 'hint' },
      'Rebuilt from the delivery\u2019s fields and ',
      subscription ? 'the subscription\u2019s current settings' : 'no subscription (it was deleted)',
      ': the history does not record request headers. Secret values are never shown.',
    ),
    h(
      'div',
      { class: 'table-wrap' },
      h(
        'table',
        { class: 'headers' },
        h('caption', { class: 'visually-hidden' }, 'Request headers, reconstructed'),
        h('thead', {}, h('tr', {}, h('th', { scope: 'col' }, 'Header'), h('th', { scope: 'col' }, 'Value'))),
        h(
          'tbody',
          {},
          list.map(([name, value]) =>
            h('tr', {}, h('th', { scope: 'row' }, h('code', {}, name)), h('td', {}, h('code', {}, value))),
          ),
        ),
      ),
    ),
  );
}

function timeline(delivery) {
  const items = delivery.attempts.map((attempt) => {
    const ok = attempt.statusCode !== null && attempt.statusCode >= 200 && attempt.statusCode < 300;
    return h(
      'li',
      { class: `event ${ok ? 'ok' : 'failed'}`, 'data-attempt': attempt.attempt },
      h('p', { class: 'event-title' }, h('strong', {}, `Attempt ${attempt.attempt}`), ' · ', timeElement(attempt.at)),
      h(
        'dl',
        { class: 'inline' },
        h('dt', {}, 'Status code'),
        h('dd', {}, attempt.statusCode === null ? 'no answer' : String(attempt.statusCode)),
        h('dt', {}, 'Duration'),
        h('dd', {}, `${attempt.durationMs} ms`),
        attempt.errorMessage ? [h('dt', {}, 'Error'), h('dd', {}, attempt.errorMessage)] : null,
      ),
    );
  });
  if (delivery.nextRetryAt && PENDING.has(delivery.status)) {
    items.push(
      h(
        'li',
        { class: 'event next', 'data-next-retry': delivery.nextRetryAt },
        h('p', { class: 'event-title' }, h('strong', {}, 'Next retry'), ' · ', timeElement(delivery.nextRetryAt)),
        h('p', {}, `Attempt ${delivery.attemptCount + 1}, due ${relative(delivery.nextRetryAt)}.`),
      ),
    );
  } else if (delivery.status === 'queued') {
    items.push(h('li', { class: 'event next' }, h('p', {}, h('strong', {}, 'Waiting for the first attempt'))));
  } else {
    const ended = {
      acknowledged: 'Acknowledged: the receiver answered 2xx.',
      abandoned: `Abandoned: ${delivery.abandonReason ?? 'no more retries'}.`,
      superseded: `Superseded: ${delivery.abandonReason ?? 'a newer delivery of the same entity was queued'}.`,
    }[delivery.status];
    if (ended) items.push(h('li', { class: `event end ${delivery.status}` }, h('p', {}, h('strong', {}, ended))));
  }
  return h(
    'section',
    { 'aria-labelledby': 'attempts-heading' },
    h('h2', { id: 'attempts-heading' }, 'Attempts'),
    items.length === 0 ? h('p', { class: 'muted' }, 'No attempt yet.') : h('ol', { class: 'timeline' }, items),
  );
}

/** The request body, as sent (the bytes the signature covers), shown indented for reading. */
function body(delivery) {
  let shown = delivery.envelope;
  if (shown !== null) {
    try {
      shown = JSON.stringify(JSON.parse(shown), null, 2);
    } catch {
      // Not JSON after all: shown as it is.
    }
  }
  return h(
    'section',
    { 'aria-labelledby': 'body-heading' },
    h('h2', { id: 'body-heading' }, 'Body sent'),
    shown === null
      ? h('p', { class: 'muted' }, 'The event is past its retention: its body is no longer kept.')
      : [
          h(
            'p',
            { class: 'hint' },
            'Indented here for reading; the receiver got it on one line, byte for byte as in the history, which is ' +
              'what the signature covers.',
          ),
          h('pre', { class: 'json', tabindex: 0, 'aria-label': 'Body sent' }, h('code', {}, shown)),
        ],
  );
}
