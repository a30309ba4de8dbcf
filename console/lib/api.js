// The console's only way to the server: the public webhook API with the signed-in client's bearer token, and the
// gateway's sign-in route. The token lives in this module's memory only: never in localStorage, sessionStorage or a
// cookie, so reloading or closing the tab signs out.

export const WEBHOOKS = '/CoreWebhook/REST/Webhooks';

/** @type {{ token: string, expiresAt: number, clientId: string, tenantId: string } | null} */
let session = null;
let expiryTimer = 0;
let onEnd = () => {};

/** An answer other than 2xx, as its problem document (RFC 9457) says: title, detail, status, field errors. */
export class ApiError extends Error {
  constructor(problem) {
    super(problem.detail || problem.title);
    this.name = 'ApiError';
    this.title = problem.title || 'Request failed';
    this.detail = problem.detail || '';
    this.status = problem.status ?? 0;
    this.errors = Array.isArray(problem.errors) ? problem.errors : [];
  }
}

/** Called with a reason when the session ends by itself (token expired or refused); not on an explicit sign-out. */
export function onSessionEnd(callback) {
  onEnd = callback;
}

export function currentSession() {
  return session;
}

/** Exchanges the client id and secret for a token; the secret is not kept anywhere after this call. */
export async function signIn(clientId, clientSecret) {
  const response = await send('/console/token', {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json' },
    body: JSON.stringify({ clientId, clientSecret }),
  });
  if (!response.ok) throw await problemOf(response);
  const { accessToken, expiresIn } = await response.json();
  const claims = claimsOf(accessToken);
  const expiresAt = typeof expiresIn === 'number' ? Date.now() + expiresIn * 1000 : (claims.exp ?? 0) * 1000;
  session = {
    token: accessToken,
    expiresAt,
    clientId: typeof claims.azp === 'string' ? claims.azp : clientId,
    tenantId: typeof claims.tenant_id === 'string' ? claims.tenant_id : '(unknown tenant)',
  };
  window.clearTimeout(expiryTimer);
  // Ends the session when the token expires, even if the console is idle (timers cap near 24.8 days).
  expiryTimer = window.setTimeout(() => end('expired'), Math.min(Math.max(expiresAt - Date.now(), 0), 2 ** 31 - 1));
  return session;
}

export function signOut() {
  session = null;
  window.clearTimeout(expiryTimer);
}

function end(reason) {
  if (!session) return;
  signOut();
  onEnd(reason);
}

/**
 * Calls the webhook API: `path` is relative to /CoreWebhook/REST/Webhooks. Resolves the JSON answer (null for 204);
 * rejects with ApiError. A 401 ends the session.
 */
export async function api(method, path, body, { signal } = {}) {
  if (!session) throw new ApiError({ title: 'Signed out', detail: 'sign in to use the console', status: 401 });
  if (Date.now() >= session.expiresAt) {
    end('expired');
    throw new ApiError({
      title: 'Session expired',
      detail: 'the access token has expired; sign in again',
      status: 401,
    });
  }
  const response = await send(`${WEBHOOKS}${path}`, {
    method,
    headers: {
      authorization: `Bearer ${session.token}`,
      accept: 'application/json, application/problem+json',
      ...(body === undefined ? {} : { 'content-type': 'application/json' }),
    },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal,
  });
  if (response.status === 401) {
    const problem = await problemOf(response);
    end('refused');
    throw problem;
  }
  if (!response.ok) throw await problemOf(response);
  if (response.status === 204) return null;
  return response.json();
}

/** Builds a query string from the defined, non-empty values. */
export function query(params) {
  const search = new URLSearchParams();
  for (const [name, value] of Object.entries(params)) {
    if (value !== undefined && value !== null && value !== '') search.set(name, String(value));
  }
  const text = search.toString();
  return text ? `?${text}` : '';
}

async function send(url, init) {
  try {
    // No cookies and no HTTP cache: every answer is fresh and nothing is stored by the browser.
    return await fetch(url, { ...init, credentials: 'omit', cache: 'no-store' });
  } catch (error) {
    if (error instanceof DOMException && error.name === 'AbortError') throw error;
    throw new ApiError({ title: 'Network error', detail: 'the gateway could not be reached; check your connection' });
  }
}

async function problemOf(response) {
  const text = await response.text();
  try {
    const body = JSON.parse(text);
    if (body && typeof body === 'object' && (body.title || body.detail)) {
      return new ApiError({ status: response.status, ...body });
    }
  } catch {
    // not JSON: described by its status below
  }
  return new ApiError({
    title: `HTTP ${response.status}${response.statusText ? ` ${response.statusText}` : ''}`,
    detail: text.slice(0, 300),
    status: response.status,
  });
}

/** The token's claims, for showing who is signed in. The signature is the API's business, not the console's. */
function claimsOf(token) {
  try {
    const part = token.split('.')[1].replace(/-/g, '+').replace(/_/g, '/');
    return JSON.parse(atob(part.padEnd(part.length + ((4 - (part.length % 4)) % 4), '=')));
  } catch {
    return {};
  }
}
