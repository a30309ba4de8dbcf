// The event-type catalogue: what a subscription can ask for, with each payload's JSON Schema and an example.
import { eventTypes } from '../lib/catalogue.js';
import { append, h, jsonBlock } from '../lib/dom.js';

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
                  target?.querySelector('h2')?.focus();
                },
              },
              type.eventType,
            ),
          ),
        ),
      ),
    ),
    types.map((type) =>
      h(
        'article',
        { class: 'card event-type', id: anchor(type.eventType), 'aria-labelledby': `${anchor(type.eventType)}-name` },
        h('h2', { id: `${anchor(type.eventType)}-name`, tabindex: -1 }, h('code', {}, type.eventType)),
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
      ),
    ),
  );
}

function anchor(name) {
  return `type-${name.replace(/[^A-Za-z0-9_-]/g, '-')}`;
}
