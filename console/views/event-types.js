// The event-type catalogue: what a subscription can ask for, with each payload's JSON Schema and an example.
import { eventTypes } from '../lib/catalogue.js';
import { append, h, jsonBlock } from '../lib/dom.js';

/** The service under which the webhook service declares its operational events (core/operational-events.ts). */
const OPERATIONAL_SERVICE = 'webhooks';

export async function renderEventTypes(view, { signal }) {
  append(
    view,
    h('h1', {}, 'Event types'),
    h(
      'p',
      { class: 'lead' },
      'The catalogue of subscribable events, declared by the services that raise them. The payload of a delivery is ' +
        'the producer\u2019s content, forwarded byte for byte inside the envelope.',
    ),
  );
  const types = await eventTypes(signal);
  if (types.length === 0) {
    view.append(h('p', { class: 'empty' }, 'The catalogue is empty: no service has declared an event type yet.'));
    return;
  }
  // The service's own events (about the tenant's subscriptions and deliveries) apart from the producers' business events.
  const operational = types.filter((type) => type.service === OPERATIONAL_SERVICE);
  const business = types.filter((type) => type.service !== OPERATIONAL_SERVICE);
  append(
    view,
    h(
      'nav',
      { 'aria-label': 'Event types', class: 'toc' },
      h(
        'ul',
        {},
        types.map((type) =>
          h(
            'li',
            {},
            h(
              'a',
              {
                href: `#/event-types`,
                onclick: (event) => {
                  // In-page links would change the route: scroll and focus instead.
                  event.preventDefault();
                  const target = document.getElementById(anchor(type.eventType));
                  target?.scrollIntoView();
                  target?.querySelector('h3')?.focus();
                },
              },
              type.eventType,
            ),
          ),
        ),
      ),
    ),
    business.length > 0 ? h('h2', { class: 'group' }, 'Business events') : null,
    business.map(card),
    operational.length > 0 ? h('h2', { class: 'group', id: 'operational' }, 'Operational events') : null,
    operational.length > 0
      ? h(
          'p',
          { class: 'lead' },
          'Raised by the webhook service about your own subscriptions and deliveries: an endpoint failing or ' +
            'recovering, a subscription disabled, a delivery abandoned, a subscription created, changed or deleted. ' +
            'Subscribe to them like any event (subscription.*, delivery.abandoned); a catch-all *.* does not ' +
            'include them. Their own deliveries never raise further operational events.',
        )
      : null,
    operational.map(card),
  );
}

function card(type) {
  return h(
    'article',
    { class: 'card event-type', id: anchor(type.eventType), 'aria-labelledby': `${anchor(type.eventType)}-name` },
    h('h3', { id: `${anchor(type.eventType)}-name`, tabindex: -1 }, h('code', {}, type.eventType)),
    h('p', {}, type.description || h('span', { class: 'muted' }, 'No description.')),
    h('p', { class: 'muted small' }, `Raised by the ${type.service} service.`),
    h(
      'details',
      {},
      h('summary', {}, 'Payload schema (JSON Schema)'),
      type.payloadSchema
        ? jsonBlock(type.payloadSchema, `Payload schema of ${type.eventType}`)
        : h('p', { class: 'muted' }, 'Not declared.'),
    ),
    h(
      'details',
      { open: true },
      h('summary', {}, 'Example payload'),
      type.example !== null && type.example !== undefined
        ? jsonBlock(type.example, `Example payload of ${type.eventType}`)
        : h('p', { class: 'muted' }, 'No example declared.'),
    ),
  );
}

function anchor(name) {
  return `type-${name.replace(/[^A-Za-z0-9_-]/g, '-')}`;
}
