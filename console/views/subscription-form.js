// Create or edit a subscription: endpoint, event types picked from the catalogue, and the settings of each
// authentication mode. Secrets are write-only: an edit leaves a secret field empty to keep the current one.
import { api, ApiError } from '../lib/api.js';
import { eventTypes } from '../lib/catalogue.js';
import { announce, append, h, replace, uid } from '../lib/dom.js';
import { clearFieldErrors, showProblem } from '../lib/problem.js';
import { secretPanel } from '../lib/secret.js';

const MODES = [
  ['None', 'No authentication header: only for receivers that authenticate requests some other way.'],
  ['ApiKey', 'A fixed header carrying a key, such as X-Api-Key.'],
  ['Hmac', 'Every body signed with HMAC-SHA256 of a shared secret, in a signature header.'],
  ['OAuth2', 'A bearer token the service gets from your token endpoint (client credentials grant).'],
  [
    'StandardWebhooks',
    'Standard Webhooks: webhook-id, webhook-timestamp and webhook-signature headers signed with a whsec_ secret, ' +
      'verified by the official libraries; a request replayed later is refused.',
  ],
];

/** Modes signed with the subscription's secret: its settings section is the Hmac one. */
const SIGNED = new Set(['Hmac', 'StandardWebhooks']);

/** Where each error path of the API's problem documents points in this form. */
const FIELDS = {
  url: 'f-url',
  description: 'f-description',
  eventTypes: 'f-event-types',
  authenticationMode: 'f-auth',
  signatureHeaderName: 'f-signature-header',
  hmacSecret: 'f-hmac-secret',
  apiKey: 'f-apikey-value',
  'apiKey.headerName': 'f-apikey-header',
  'apiKey.value': 'f-apikey-value',
  oauth2: 'f-oauth-token-url',
  'oauth2.tokenUrl': 'f-oauth-token-url',
  'oauth2.clientId': 'f-oauth-client-id',
  'oauth2.clientSecret': 'f-oauth-client-secret',
  'oauth2.audience': 'f-oauth-audience',
  'oauth2.scope': 'f-oauth-scope',
  supersedePendingDeliveries: 'f-supersede',
  ordering: 'f-ordering',
  filter: 'f-filter',
};

/** The service under which the webhook service declares its operational events (core/operational-events.ts). */
const OPERATIONAL_SERVICE = 'webhooks';

const FILTER_EXAMPLE = `{
  "eventType": "purchaseOrder.validated",
  "payload.totalAmount": { "$gte": "10000" },
  "payload.supplierName": { "$in": ["Acme Supplies", "Globex"] }
}`;

export async function renderSubscriptionForm(view, { id, signal }) {
  const editing = id !== undefined;
  const heading = h('h1', {}, editing ? 'Edit subscription' : 'New subscription');
  const loading = h('p', { class: 'muted' }, 'Loading the catalogue…');
  append(view, h('p', { class: 'crumbs' }, h('a', { href: '#/subscriptions' }, 'Subscriptions')), heading, loading);
  const [types, current] = await Promise.all([
    eventTypes(signal),
    editing ? api('GET', `/Subscriptions/${encodeURIComponent(id)}`, undefined, { signal }) : null,
  ]);
  loading.remove();
  const saved = (answer) => {
    if (!answer.hmacSecret) {
      announce(editing ? 'Changes saved' : 'Subscription created');
      window.location.hash = '#/subscriptions';
      return;
    }
    heading.textContent = editing ? 'Subscription saved' : 'Subscription created';
    replace(
      view,
      h('p', { class: 'crumbs' }, h('a', { href: '#/subscriptions' }, 'Subscriptions')),
      heading,
      h('p', { class: 'notice success' }, `Deliveries to ${answer.url} are signed with the secret below.`),
      secretPanel(answer.hmacSecret, { onDone: () => (window.location.hash = '#/subscriptions') }),
    );
    heading.focus();
    announce(`${heading.textContent}. Its signing secret is shown once, below.`);
  };
  view.append(subscriptionForm(types, current, saved));
}

function subscriptionForm(types, current, saved) {
  const problemSlot = h('div');
  const url = input('f-url', { type: 'url', value: current?.url ?? '', required: true, autocomplete: 'off' });
  const description = h('textarea', { id: 'f-description', rows: 2, maxlength: 1000 }, current?.description ?? '');
  const picker = eventTypePicker(types, current?.eventTypes ?? []);
  const modes = authModes(current?.authenticationMode ?? 'Hmac');
  const hmac = {
    header: input('f-signature-header', { value: current?.signatureHeaderName ?? 'X-Webhook-Signature' }),
    secret: input('f-hmac-secret', { type: 'password', autocomplete: 'new-password' }),
  };
  const apiKey = {
    header: input('f-apikey-header', { value: current?.apiKey?.headerName ?? 'X-Api-Key' }),
    value: input('f-apikey-value', { type: 'password', autocomplete: 'new-password' }),
  };
  const oauth = {
    tokenUrl: input('f-oauth-token-url', { type: 'url', value: current?.oauth2?.tokenUrl ?? '' }),
    clientId: input('f-oauth-client-id', { value: current?.oauth2?.clientId ?? '' }),
    clientSecret: input('f-oauth-client-secret', { type: 'password', autocomplete: 'new-password' }),
    audience: input('f-oauth-audience', { value: current?.oauth2?.audience ?? '' }),
    scope: input('f-oauth-scope', { value: current?.oauth2?.scope ?? '' }),
  };
  const keep = current ? 'Leave empty to keep the current one.' : '';
  const headerField = field(hmac.header, 'Signature header name');
  const sections = {
    None: null,
    Hmac: section(
      'Signing settings',
      headerField,
      field(
        hmac.secret,
        'Secret (optional)',
        current
          ? 'Leave empty to keep the current secret; "Rotate secret" in the list generates a new one.'
          : 'Leave empty to have a strong secret generated: it is shown once, after saving.',
      ),
    ),
    ApiKey: section('API key settings', field(apiKey.header, 'Header name'), field(apiKey.value, 'Key value', keep)),
    OAuth2: section(
      'OAuth2 settings',
      field(oauth.tokenUrl, 'Token URL'),
      field(oauth.clientId, 'Client ID'),
      field(oauth.clientSecret, 'Client secret', current ? 'Enter it again to change any OAuth2 setting.' : ''),
      field(oauth.audience, 'Audience (optional)'),
      field(oauth.scope, 'Scope (optional)'),
    ),
  };
  const showMode = () => {
    const shown = SIGNED.has(modes.value()) ? 'Hmac' : modes.value();
    for (const [mode, element] of Object.entries(sections)) if (element) element.hidden = mode !== shown;
    // Standard Webhooks names its headers itself.
    headerField.hidden = modes.value() !== 'Hmac';
  };
  modes.onChange(showMode);
  showMode();
  const supersede = h('input', {
    type: 'checkbox',
    id: 'f-supersede',
    checked: current?.supersedePendingDeliveries ?? false,
    'aria-describedby': 'f-supersede-hint',
  });
  const ordering = h('input', {
    type: 'checkbox',
    id: 'f-ordering',
    checked: current?.ordering === 'entity',
    'aria-describedby': 'f-ordering-hint',
  });
  const filter = h(
    'textarea',
    { id: 'f-filter', class: 'code', rows: 6, spellcheck: 'false', placeholder: FILTER_EXAMPLE },
    current?.filter ? JSON.stringify(current.filter, null, 2) : '',
  );
  const submit = h(
    'button',
    { type: 'submit', class: 'button primary' },
    current ? 'Save changes' : 'Create subscription',
  );

  const form = h(
    'form',
    {
      class: 'stack subscription-form',
      novalidate: true,
      'aria-label': current ? 'Edit subscription' : 'New subscription',
    },
    problemSlot,
    field(url, 'Endpoint URL', 'Absolute https URL of your receiver (http only where the operator allows it).'),
    field(description, 'Description (optional)'),
    picker.element,
    modes.element,
    sections.Hmac,
    sections.ApiKey,
    sections.OAuth2,
    h(
      'div',
      { class: 'field check' },
      supersede,
      h('label', { for: 'f-supersede' }, 'Supersede pending deliveries'),
      h(
        'p',
        { class: 'hint', id: 'f-supersede-hint' },
        'When a newer event of the same entity is queued, older pending deliveries of it are not attempted again.',
      ),
    ),
    h(
      'div',
      { class: 'field check' },
      ordering,
      h('label', { for: 'f-ordering' }, "Deliver each entity's events in order"),
      h(
        'p',
        { class: 'hint', id: 'f-ordering-hint' },
        'Deliveries of one entity (the same entityId) arrive one at a time, in the order their events were raised: ' +
          'each waits until the one before it is acknowledged, abandoned or superseded. Other entities are not held ' +
          'back; replays and test events are sent outside this order.',
      ),
    ),
    field(
      filter,
      'Filter (optional)',
      'Only events matching this JSON filter are delivered; empty for all events of the types. Keys are eventType, ' +
        'entityId, reference, occurredAt, resourceUrl or payload.<path>; values are a value to equal or operators ' +
        '($eq $neq $gt $gte $lt $lte $in $nin $exist $startsWith $endsWith), combined with $and, $or, $not. ' +
        'Amounts are decimal strings and compare as numbers.',
    ),
    h('div', { class: 'actions' }, submit, h('a', { href: '#/subscriptions', class: 'button' }, 'Cancel')),
  );

  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    clearFieldErrors(form);
    const { body, errors } = requestBody(
      { url, description, picker, modes, hmac, apiKey, oauth, supersede, ordering, filter },
      current,
    );
    if (errors.length > 0) {
      showProblem(problemSlot, new ApiError({ title: 'Check the form', errors }), FIELDS).focus();
      pointAtFilterError(filter, errors);
      return;
    }
    submit.disabled = true;
    try {
      const answer = current
        ? await api('PATCH', `/Subscriptions/${encodeURIComponent(current.id)}`, body)
        : await api('POST', '/Subscriptions', body);
      saved(answer);
    } catch (error) {
      showProblem(problemSlot, error, FIELDS).focus();
      if (error instanceof ApiError) pointAtFilterError(filter, error.errors);
    } finally {
      submit.disabled = false;
    }
  });
  return form;
}

/** The POST body, or for an edit the PATCH of what changed; plus the errors the API cannot see (write-only secrets). */
function requestBody(form, current) {
  const errors = [];
  const body = {};
  const mode = form.modes.value();
  const url = form.url.value.trim();
  const description = form.description.value.trim();
  const types = form.picker.selected();
  const changed = (value, before) => !current || value !== before;
  if (changed(url, current?.url)) body.url = url;
  if (!current || !sameSet(types, current.eventTypes)) body.eventTypes = types;
  if (changed(mode, current?.authenticationMode)) body.authenticationMode = mode;
  if (current ? description !== (current.description ?? '') : description) body.description = description || null;
  if (changed(form.supersede.checked, current?.supersedePendingDeliveries)) {
    body.supersedePendingDeliveries = form.supersede.checked;
  }
  const ordering = form.ordering.checked ? 'entity' : 'none';
  if (changed(ordering, current?.ordering)) body.ordering = ordering;
  const filterText = form.filter.value.trim();
  if (filterText) {
    try {
      const parsed = JSON.parse(filterText);
      if (!current || JSON.stringify(parsed) !== JSON.stringify(current.filter)) body.filter = parsed;
    } catch (error) {
      errors.push({ path: 'filter', message: `is not JSON: ${jsonProblem(error, filterText)}`, at: jsonOffset(error) });
    }
  } else if (current?.filter) {
    body.filter = null;
  }
  if (mode === 'Hmac') {
    const header = form.hmac.header.value.trim();
    if (header && changed(header, current?.signatureHeaderName)) body.signatureHeaderName = header;
  }
  if (SIGNED.has(mode) && form.hmac.secret.value) body.hmacSecret = form.hmac.secret.value;
  if (mode === 'ApiKey') {
    const headerName = form.apiKey.header.value.trim();
    const value = form.apiKey.value.value;
    if (value) body.apiKey = { headerName, value };
    else if (!current) errors.push({ path: 'apiKey.value', message: 'is required for ApiKey authentication' });
    else if (headerName !== (current.apiKey?.headerName ?? '')) {
      errors.push({ path: 'apiKey.value', message: 'enter the key again to change its header name' });
    }
  }
  if (mode === 'OAuth2') {
    const oauth = Object.fromEntries(Object.entries(form.oauth).map(([name, field]) => [name, field.value.trim()]));
    const before = current?.oauth2 ?? {};
    const edited = ['tokenUrl', 'clientId', 'audience', 'scope'].some((name) => oauth[name] !== (before[name] ?? ''));
    if (form.oauth.clientSecret.value) {
      body.oauth2 = {
        tokenUrl: oauth.tokenUrl,
        clientId: oauth.clientId,
        clientSecret: form.oauth.clientSecret.value,
        ...(oauth.audience ? { audience: oauth.audience } : {}),
        ...(oauth.scope ? { scope: oauth.scope } : {}),
      };
    } else if (!current || current.authenticationMode !== 'OAuth2' || edited) {
      errors.push({ path: 'oauth2.clientSecret', message: 'is required to set the OAuth2 settings' });
    }
  }
  return { body, errors };
}

/** A JSON.parse error's message, with the line and column of its position when the engine gives one. */
function jsonProblem(error, text) {
  const offset = jsonOffset(error);
  if (offset === undefined) return error.message;
  const before = text.slice(0, offset).split('\n');
  return `${error.message} (line ${before.length}, column ${before.at(-1).length + 1})`;
}

function jsonOffset(error) {
  const match = /position (\d+)/.exec(error.message);
  return match ? Number(match[1]) : undefined;
}

/**
 * Selects in the filter editor the text an error is about: a JSON syntax error's position, or the key an API error's
 * path names (`filter/$or/1/payload.x`: the last key of the JSON Pointer, searched after the keys before it).
 */
function pointAtFilterError(editor, errors) {
  const entry = errors.find((error) => error.path === 'filter' || error.path?.startsWith('filter/'));
  if (!entry) return;
  const text = editor.value;
  let start;
  let end;
  if (entry.at !== undefined) {
    start = Math.min(entry.at, text.length);
    end = Math.min(start + 1, text.length);
  } else {
    const keys = entry.path
      .split('/')
      .slice(1)
      .map((key) => key.replaceAll('~1', '/').replaceAll('~0', '~'))
      .filter((key) => !/^\d+$/.test(key));
    let from = 0;
    for (const key of keys) {
      const found = text.indexOf(JSON.stringify(key), from);
      if (found < 0) break;
      start = found;
      end = found + JSON.stringify(key).length;
      from = end;
    }
  }
  if (start === undefined) return;
  editor.setSelectionRange(start, end);
  editor.dataset.errorAt = String(start);
}

function sameSet(a, b) {
  return a.length === b.length && a.every((value) => b.includes(value));
}

function input(id, attrs = {}) {
  return h('input', { id, type: 'text', spellcheck: 'false', ...attrs });
}

/** A labelled control with an optional hint tied to it by aria-describedby. */
function field(control, label, hint = '') {
  const hintId = hint ? `${control.id}-hint` : undefined;
  if (hintId) control.setAttribute('aria-describedby', hintId);
  return h(
    'div',
    { class: 'field' },
    h('label', { for: control.id }, label),
    control,
    hint ? h('p', { class: 'hint', id: hintId }, hint) : null,
  );
}

function section(legend, ...fields) {
  return h('fieldset', { class: 'auth-settings' }, h('legend', {}, legend), fields);
}

/**
 * Checkboxes: a wildcard per family of the catalogue (`purchaseOrder.*`), then every event type with its description;
 * the service's operational events (about the tenant's own subscriptions and deliveries) in a group of their own.
 */
function eventTypePicker(types, selected) {
  const business = types.filter((type) => type.service !== OPERATIONAL_SERVICE);
  const operational = types.filter((type) => type.service === OPERATIONAL_SERVICE);
  const groups = [typeOptions(business), typeOptions(operational)];
  for (const pattern of selected) {
    if (!groups.flat().some((option) => option.value === pattern)) {
      groups[0].push({ value: pattern, hint: 'a pattern of this subscription' });
    }
  }
  const boxes = groups.map((options) =>
    options.map((option) => {
      const boxId = uid('f-type');
      const box = h('input', {
        type: 'checkbox',
        id: boxId,
        value: option.value,
        checked: selected.includes(option.value),
        'aria-describedby': `${boxId}-hint`,
      });
      return {
        box,
        element: h(
          'div',
          { class: 'check' },
          box,
          h('label', { for: boxId }, h('code', {}, option.value)),
          h('span', { class: 'hint', id: `${boxId}-hint` }, option.hint),
        ),
      };
    }),
  );
  const element = h(
    'fieldset',
    { id: 'f-event-types', class: 'checks' },
    h('legend', {}, 'Event types'),
    h('p', { class: 'hint' }, 'A wildcard * stands for exactly one segment of the name.'),
    boxes[0].map((entry) => entry.element),
    boxes[1].length > 0
      ? h(
          'fieldset',
          { class: 'checks', id: 'f-operational-types' },
          h('legend', {}, 'Operational events'),
          h(
            'p',
            { class: 'hint' },
            'What the service tells you about your own subscriptions and deliveries (an endpoint failing or ' +
              'recovering, a delivery abandoned, a subscription disabled or changed). *.* does not include them.',
          ),
          boxes[1].map((entry) => entry.element),
        )
      : null,
  );
  return {
    element,
    selected: () =>
      boxes
        .flat()
        .filter((entry) => entry.box.checked)
        .map((entry) => entry.box.value),
  };
}

/** A wildcard per family of `types`, then each type with its description. */
function typeOptions(types) {
  const families = new Map();
  for (const { eventType } of types) {
    const family = eventType.split('.').slice(0, -1).join('.');
    if (family) families.set(family, (families.get(family) ?? 0) + 1);
  }
  return [
    ...[...families].map(([family, count]) => ({
      value: `${family}.*`,
      hint: `every ${family} event: the ${count} of the catalogue and any added later`,
    })),
    ...types.map((type) => ({ value: type.eventType, hint: type.description })),
  ];
}

function authModes(initial) {
  const name = uid('auth');
  const radios = MODES.map(([mode, hint]) => {
    const radioId = `${name}-${mode}`;
    const radio = h('input', {
      type: 'radio',
      name,
      id: radioId,
      value: mode,
      checked: mode === initial,
      'aria-describedby': `${radioId}-hint`,
    });
    return {
      radio,
      element: h(
        'div',
        { class: 'check' },
        radio,
        h('label', { for: radioId }, mode),
        h('span', { class: 'hint', id: `${radioId}-hint` }, hint),
      ),
    };
  });
  const element = h(
    'fieldset',
    { id: 'f-auth', class: 'checks' },
    h('legend', {}, 'Authentication to your receiver'),
    radios.map((entry) => entry.element),
  );
  return {
    element,
    value: () => radios.find((entry) => entry.radio.checked)?.radio.value ?? 'None',
    onChange: (listener) => radios.forEach((entry) => entry.radio.addEventListener('change', listener)),
  };
}
