// API errors shown as their problem document says: title, detail, and the field errors, each tied to its input.
import { ApiError } from './api.js';
import { h, replace } from './dom.js';

/**
 * A problem as an alert: the title, the detail and every field error. `fields` maps an error path to an input id, so a
 * field error links to its input (and the input gets the message as its description).
 */
export function problemBox(error, fields = {}) {
  const problem =
    error instanceof ApiError ? error : new ApiError({ title: 'Unexpected error', detail: String(error) });
  return h(
    'div',
    { class: 'problem', role: 'alert', tabindex: -1 },
    h('p', { class: 'problem-title' }, h('strong', {}, problem.title), problem.status ? ` (${problem.status})` : ''),
    problem.detail && problem.errors.length === 0 ? h('p', {}, problem.detail) : null,
    problem.errors.length > 0
      ? h(
          'ul',
          {},
          problem.errors.map((entry) => {
            const id = fieldFor(entry.path, fields);
            const text = `${entry.path || 'request'}: ${entry.message}`;
            return h('li', {}, id ? h('a', { href: `#${id}`, onclick: focusField(id) }, text) : text);
          }),
        )
      : null,
  );
}

/** Shows `error` in `slot` (emptied first) and marks the inputs it names; returns the alert for focusing. */
export function showProblem(slot, error, fields = {}) {
  const box = problemBox(error, fields);
  replace(slot, box);
  if (error instanceof ApiError) markFields(error.errors, fields);
  return box;
}

/** Removes the marks of an earlier problem from a form. */
export function clearFieldErrors(form) {
  for (const message of form.querySelectorAll('.field-error')) message.remove();
  for (const input of form.querySelectorAll('[aria-invalid="true"]')) {
    input.removeAttribute('aria-invalid');
    const described = (input.getAttribute('aria-describedby') ?? '')
      .split(' ')
      .filter((id) => id && !id.endsWith('-error'))
      .join(' ');
    if (described) input.setAttribute('aria-describedby', described);
    else input.removeAttribute('aria-describedby');
  }
}

function markFields(errors, fields) {
  for (const entry of errors) {
    const id = fieldFor(entry.path, fields);
    const input = id ? document.getElementById(id) : null;
    if (!input) continue;
    const messageId = `${id}-error`;
    let message = document.getElementById(messageId);
    if (!message) {
      message = h('p', { class: 'field-error', id: messageId });
      // After the input (or after the legend of a fieldset, where a group's error belongs).
      if (input.tagName === 'FIELDSET') input.querySelector('legend')?.after(message);
      else input.after(message);
    }
    message.textContent = message.textContent ? `${message.textContent}; ${entry.message}` : entry.message;
    input.setAttribute('aria-invalid', 'true');
    const described = new Set((input.getAttribute('aria-describedby') ?? '').split(' ').filter(Boolean));
    described.add(messageId);
    input.setAttribute('aria-describedby', [...described].join(' '));
  }
}

/**
 * The input id for an error path: the path itself, else its longest known prefix (`eventTypes.2` → `eventTypes`). A
 * path into a JSON document field is a JSON Pointer after the field's name (`filter/payload.amount/$gt` → `filter`).
 */
function fieldFor(path, fields) {
  const segments = (path ?? '').split('/')[0].split('.');
  for (let length = segments.length; length > 0; length -= 1) {
    const id = fields[segments.slice(0, length).join('.')];
    if (id) return id;
  }
  return undefined;
}

function focusField(id) {
  return (event) => {
    // A hash link would change the console's route: focus the field instead.
    event.preventDefault();
    const target = document.getElementById(id);
    const focusable = target?.tagName === 'FIELDSET' ? target.querySelector('input, select, textarea') : target;
    focusable?.focus();
  };
}
