// Tiny DOM helpers. Every text goes in as a text node (never innerHTML), so nothing the API answers can inject markup.

const SVG_NS = 'http://www.w3.org/2000/svg';
/** Properties set as such (not as attributes), so a form control reflects them at once. */
const PROPERTIES = new Set(['value', 'checked', 'disabled', 'hidden', 'selected', 'open', 'indeterminate']);

/** An HTML element: `h('button', { class: 'primary', onclick }, 'Save')`. Null, false and undefined are skipped. */
export function h(tag, attrs = {}, ...children) {
  const element = document.createElement(tag);
  setAttributes(element, attrs, false);
  append(element, children);
  return element;
}

/** An SVG element, as h() does for HTML. */
export function svg(tag, attrs = {}, ...children) {
  const element = document.createElementNS(SVG_NS, tag);
  setAttributes(element, attrs, true);
  append(element, children);
  return element;
}

function setAttributes(element, attrs, isSvg) {
  for (const [name, value] of Object.entries(attrs ?? {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith('on') && typeof value === 'function') {
      element.addEventListener(name.slice(2), value);
    } else if (!isSvg && PROPERTIES.has(name)) {
      element[name] = value;
    } else {
      element.setAttribute(name, value === true ? '' : String(value));
    }
  }
}

/** Appends children (nested arrays flattened, strings and numbers as text). */
export function append(parent, ...children) {
  for (const child of [children].flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    parent.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return parent;
}

/** Replaces an element's children. */
export function replace(parent, ...children) {
  parent.replaceChildren();
  return append(parent, children);
}

let ids = 0;
/** A document-unique id with a readable prefix, for label/aria wiring. */
export function uid(prefix) {
  ids += 1;
  return `${prefix}-${ids}`;
}

/** Text only screen readers get (e.g. which subscription a row's "Disable" button acts on). */
export function hiddenText(text) {
  return h('span', { class: 'visually-hidden' }, text);
}

/**
 * Says something in the polite live region (refresh results, confirmations). The region is emptied first so the same
 * message said twice is announced twice.
 */
export function announce(message) {
  const region = document.getElementById('status');
  if (!region) return;
  region.textContent = '';
  window.clearTimeout(announce.timer);
  window.setTimeout(() => {
    region.textContent = message;
  }, 50);
  // The visible toast goes after a while; screen readers have read it by then.
  announce.timer = window.setTimeout(() => {
    if (region.textContent === message) region.textContent = '';
  }, 8_000);
}

const dateTime = new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeStyle: 'medium' });
const relativeTime = new Intl.RelativeTimeFormat(undefined, { numeric: 'auto' });

/** A <time> showing a local date and time, with the exact ISO value as its machine-readable form and tooltip. */
export function timeElement(iso) {
  if (!iso) return h('span', { class: 'muted' }, '—');
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return h('span', {}, iso);
  return h('time', { datetime: iso, title: iso }, dateTime.format(date));
}

/** "in 3 seconds", "2 minutes ago". */
export function relative(iso, now = Date.now()) {
  const seconds = Math.round((new Date(iso).getTime() - now) / 1000);
  const abs = Math.abs(seconds);
  if (abs < 60) return relativeTime.format(seconds, 'second');
  if (abs < 3600) return relativeTime.format(Math.round(seconds / 60), 'minute');
  if (abs < 86_400) return relativeTime.format(Math.round(seconds / 3600), 'hour');
  return relativeTime.format(Math.round(seconds / 86_400), 'day');
}

/** Pretty-printed JSON in a keyboard-scrollable block. */
export function jsonBlock(value, label) {
  return h(
    'pre',
    { class: 'json', tabindex: 0, role: 'region', 'aria-label': label },
    h('code', {}, JSON.stringify(value, null, 2)),
  );
}

/** A status word as a coloured badge (the colour only repeats the word). */
export function badge(status) {
  return h('span', { class: `badge badge-${status}` }, status);
}

/** A shortened id for narrow places; the full id is the tooltip and the screen-reader text. */
export function shortId(id) {
  if (!id || id.length <= 12) return h('code', {}, id ?? '—');
  return h('code', { title: id }, h('span', { 'aria-hidden': 'true' }, `${id.slice(0, 8)}…`), hiddenText(id));
}

/** Copies text to the clipboard; falls back to selecting it in `input` when the Clipboard API is refused. */
export async function copyText(text, input) {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch {
    if (input) {
      input.focus();
      input.select();
    }
    return false;
  }
}
