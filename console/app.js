// The console's entry: sign-in, the shell, and a hash router that renders one view at a time and moves focus to its
// heading. Views get an AbortSignal that fires when they are left (their polling and requests stop).
import { ApiError, currentSession, onSessionEnd, signIn, signOut } from './lib/api.js';
import { announce, h, replace } from './lib/dom.js';
import { showProblem } from './lib/problem.js';
import { renderDelivery } from './views/delivery.js';
import { renderDeliveries } from './views/deliveries.js';
import { renderEventTypes } from './views/event-types.js';
import { renderGlance } from './views/glance.js';
import { renderSubscriptionForm } from './views/subscription-form.js';
import { renderSubscriptions } from './views/subscriptions.js';

const routes = [
  { pattern: /^\/subscriptions\/new$/, nav: 'subscriptions', view: renderSubscriptionForm },
  { pattern: /^\/subscriptions\/([^/]+)\/edit$/, nav: 'subscriptions', view: renderSubscriptionForm },
  { pattern: /^\/subscriptions$/, nav: 'subscriptions', view: renderSubscriptions },
  { pattern: /^\/deliveries\/([^/]+)$/, nav: 'deliveries', view: renderDelivery },
  { pattern: /^\/deliveries$/, nav: 'deliveries', view: renderDeliveries },
  { pattern: /^\/event-types$/, nav: 'event-types', view: renderEventTypes },
  { pattern: /^\/glance$/, nav: 'glance', view: renderGlance },
];

const main = document.getElementById('main');
let leaving = new AbortController();

/** The current route: its path, its captured id and its query parameters. */
function currentRoute() {
  const raw = window.location.hash.replace(/^#/, '') || '/subscriptions';
  const [path, search = ''] = raw.split('?');
  return { path, params: new URLSearchParams(search) };
}

async function route() {
  leaving.abort();
  leaving = new AbortController();
  const signal = leaving.signal;
  if (!currentSession()) {
    renderSignIn();
    return;
  }
  const { path, params } = currentRoute();
  let match = routes.find((entry) => entry.pattern.test(path));
  if (!match) match = routes.find((entry) => entry.nav === 'subscriptions' && entry.pattern.test('/subscriptions'));
  const id = path.match(match.pattern)?.[1];
  for (const link of document.querySelectorAll('[data-nav]')) {
    if (link.dataset.nav === match.nav) link.setAttribute('aria-current', 'page');
    else link.removeAttribute('aria-current');
  }
  const view = h('div', { class: 'view' });
  replace(main, view);
  // The visible toast belongs to the view that said it.
  document.getElementById('status').textContent = '';
  // Views put their heading in place before their first request, so focus moves at once.
  const rendering = match.view(view, { id: id === undefined ? undefined : decodeURIComponent(id), params, signal });
  focusHeading();
  try {
    await rendering;
  } catch (error) {
    if (signal.aborted || (error instanceof DOMException && error.name === 'AbortError')) return;
    const slot = h('div');
    view.append(slot);
    showProblem(slot, error);
  }
}

/** Focus on the view's heading, and the document title after it, on every view change. */
function focusHeading() {
  const heading = main.querySelector('h1');
  if (!heading) return;
  heading.setAttribute('tabindex', '-1');
  heading.focus();
  document.title = `${heading.textContent} · Core Webhooks console`;
}

function showShell(signedIn) {
  document.getElementById('nav').hidden = !signedIn;
  document.getElementById('who').hidden = !signedIn;
  const session = currentSession();
  document.getElementById('who-text').textContent = session ? `${session.clientId} · tenant ${session.tenantId}` : '';
}

function renderSignIn(notice) {
  showShell(false);
  const problemSlot = h('div');
  const clientId = h('input', { id: 'client-id', type: 'text', autocomplete: 'username', required: true });
  // No `name` on either input: nothing of this form could ever be submitted natively (the CSP forbids it too).
  const clientSecret = h('input', {
    id: 'client-secret',
    type: 'password',
    autocomplete: 'current-password',
    required: true,
  });
  const submit = h('button', { type: 'submit', class: 'button primary' }, 'Sign in');
  const form = h(
    'form',
    { class: 'stack sign-in', novalidate: true, 'aria-labelledby': 'sign-in-title' },
    problemSlot,
    h('div', { class: 'field' }, h('label', { for: 'client-id' }, 'Client ID'), clientId),
    h('div', { class: 'field' }, h('label', { for: 'client-secret' }, 'Client secret'), clientSecret),
    h('div', { class: 'actions' }, submit),
  );
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const missing = [
      ...(clientId.value.trim() ? [] : [{ path: 'clientId', message: 'is required' }]),
      ...(clientSecret.value ? [] : [{ path: 'clientSecret', message: 'is required' }]),
    ];
    const fields = { clientId: 'client-id', clientSecret: 'client-secret' };
    for (const input of [clientId, clientSecret]) input.removeAttribute('aria-invalid');
    for (const old of form.querySelectorAll('.field-error')) old.remove();
    if (missing.length > 0) {
      showProblem(problemSlot, new ApiError({ title: 'Sign-in incomplete', errors: missing }), fields).focus();
      return;
    }
    submit.disabled = true;
    try {
      await signIn(clientId.value.trim(), clientSecret.value);
      clientSecret.value = '';
      showShell(true);
      announce(`Signed in as ${currentSession().clientId}`);
      await route();
    } catch (error) {
      clientSecret.value = '';
      showProblem(problemSlot, error, fields).focus();
    } finally {
      submit.disabled = false;
    }
  });
  leaving.abort();
  replace(
    main,
    h(
      'div',
      { class: 'view narrow' },
      h('h1', { id: 'sign-in-title' }, 'Sign in'),
      notice ? h('p', { class: 'notice', role: 'alert' }, notice) : null,
      h(
        'p',
        {},
        "Sign in with your API client's id and secret: the client your tenant uses for the webhook API. " +
          'You see and change only that tenant\u2019s webhooks.',
      ),
      form,
      h(
        'p',
        { class: 'muted' },
        'The secret goes once, through this gateway, to the identity provider, and is not kept. The access token ' +
          'stays in this tab\u2019s memory only: reloading or closing the tab signs you out.',
      ),
    ),
  );
  document.title = 'Sign in · Core Webhooks console';
  (notice ? main.querySelector('h1') : clientId).focus();
}

onSessionEnd((reason) => {
  renderSignIn(
    reason === 'expired'
      ? 'Your session has expired. Sign in again to continue.'
      : 'The API no longer accepts your access token. Sign in again to continue.',
  );
});

document.getElementById('sign-out').addEventListener('click', () => {
  signOut();
  renderSignIn('You are signed out.');
});
document.getElementById('skip-link').addEventListener('click', (event) => {
  // A hash link would be taken for a route: move focus instead.
  event.preventDefault();
  (main.querySelector('h1') ?? main).focus();
});
window.addEventListener('hashchange', () => void route());
void route();
