// A generated Hmac secret, shown once: the API never returns it again.
import { announce, copyText, h, uid } from './dom.js';

/** The secret with a copy button and the warning that it is not shown again. */
export function secretPanel(secret, { headingLevel = 'h2', onDone } = {}) {
  const inputId = uid('secret');
  const headingId = uid('secret-heading');
  const input = h('input', {
    id: inputId,
    type: 'text',
    readonly: true,
    value: secret,
    class: 'secret-value',
    spellcheck: 'false',
    autocomplete: 'off',
    'data-autofocus': true,
  });
  const copied = h('span', { class: 'muted', 'aria-hidden': 'true' });
  const copy = h(
    'button',
    {
      type: 'button',
      class: 'button',
      onclick: async () => {
        const done = await copyText(secret, input);
        copied.textContent = done ? 'Copied' : 'Press Ctrl+C to copy the selected secret';
        announce(done ? 'Secret copied to the clipboard' : 'The secret is selected: press Ctrl+C to copy it');
      },
    },
    'Copy secret',
  );
  const panel = h(
    'section',
    { class: 'secret-panel', 'aria-labelledby': headingId },
    h(headingLevel, { id: headingId }, 'Hmac secret: shown once'),
    h(
      'p',
      {},
      'Copy it now and give it to your receiver to check the signature header. ',
      h('strong', {}, 'It is not shown again'),
      ': to get a new one, rotate the secret.',
    ),
    h('label', { for: inputId }, 'Secret'),
    h('div', { class: 'secret-row' }, input, copy, copied),
    onDone
      ? h(
          'button',
          {
            type: 'button',
            class: 'button primary',
            onclick: () => {
              // Gone from the page (and this closure's DOM) once the operator says it is saved.
              input.value = '';
              onDone();
            },
          },
          'I have saved the secret',
        )
      : null,
  );
  return panel;
}
