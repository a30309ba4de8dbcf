// Modal dialogs on the native <dialog>: focus moves in and is kept there, Escape cancels, and focus returns to the
// control that opened it.
import { h, replace, uid } from './dom.js';
import { showProblem } from './problem.js';

/**
 * Opens a modal asking to confirm an action. `onConfirm` runs on the confirm button: it may return an element to show
 * instead of the question (a secret shown once: the dialog then only offers "Done"), or nothing to close. An error it
 * throws is shown in the dialog as a problem. Resolves when the dialog has closed.
 */
export function confirmDialog({ title, body, confirmLabel, danger = false, onConfirm }) {
  const opener = document.activeElement;
  const titleId = uid('dialog-title');
  const problemSlot = h('div', { class: 'dialog-problem' });
  const content = h('div', { class: 'dialog-body' }, body);
  const confirm = h('button', { type: 'submit', class: danger ? 'button danger' : 'button primary' }, confirmLabel);
  const cancel = h('button', { type: 'button', class: 'button', onclick: () => dialog.close() }, 'Cancel');
  const form = h(
    'form',
    { novalidate: true },
    h('h2', { id: titleId }, title),
    problemSlot,
    content,
    h('div', { class: 'actions' }, confirm, cancel),
  );
  const dialog = h('dialog', { 'aria-labelledby': titleId, class: 'dialog' }, form);

  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    confirm.disabled = true;
    confirm.setAttribute('aria-busy', 'true');
    try {
      const next = await onConfirm();
      if (!next) {
        dialog.close();
        return;
      }
      replace(problemSlot);
      replace(content, next);
      confirm.remove();
      cancel.textContent = 'Done';
      (content.querySelector('[data-autofocus]') ?? cancel).focus();
    } catch (error) {
      showProblem(problemSlot, error).focus();
      confirm.disabled = false;
    } finally {
      confirm.removeAttribute('aria-busy');
    }
  });

  return new Promise((resolve) => {
    dialog.addEventListener('close', () => {
      dialog.remove();
      const back = opener instanceof HTMLElement && opener.isConnected ? opener : document.querySelector('main h1');
      back?.focus();
      resolve();
    });
    document.body.append(dialog);
    dialog.showModal();
    // A destructive action starts on "Cancel"; any other on the first input, else the confirm button.
    (danger ? cancel : (content.querySelector('input, select, textarea') ?? confirm)).focus();
  });
}
