// Live refresh: views that show changing history poll the API every few seconds, unless the operator pauses it. The
// choice holds for the whole visit (in memory, like everything else).
import { h, uid } from './dom.js';

export const LIVE_INTERVAL_MS = 3_000;
const state = { enabled: true };

/** A labelled checkbox that pauses or resumes live refresh, with the time of the last refresh beside it. */
export function liveControl(onChange) {
  const id = uid('live');
  const checkbox = h('input', {
    type: 'checkbox',
    id,
    checked: state.enabled,
    onchange: () => {
      state.enabled = checkbox.checked;
      onChange(state.enabled);
    },
  });
  const stamp = h('span', { class: 'muted live-stamp' });
  const control = h(
    'div',
    { class: 'live-control' },
    checkbox,
    h('label', { for: id }, `Live refresh (every ${LIVE_INTERVAL_MS / 1000} s)`),
    stamp,
  );
  return {
    element: control,
    /** Shows when the data was last refreshed. */
    refreshed(at = new Date()) {
      stamp.textContent = `updated ${at.toLocaleTimeString()}`;
    },
  };
}

/**
 * Runs `task` every LIVE_INTERVAL_MS while live refresh is on and the page is visible, one run at a time, until
 * `signal` aborts (the view was left). `task` gets the signal and may throw: a failed refresh is reported by the view.
 */
export function poll(task, signal) {
  let timer = 0;
  const tick = async () => {
    if (signal.aborted) return;
    if (state.enabled && document.visibilityState === 'visible') {
      try {
        await task(signal);
      } catch {
        // the view shows refresh errors itself; polling goes on
      }
    }
    if (!signal.aborted) timer = window.setTimeout(tick, LIVE_INTERVAL_MS);
  };
  timer = window.setTimeout(tick, LIVE_INTERVAL_MS);
  signal.addEventListener('abort', () => window.clearTimeout(timer));
}

export function liveEnabled() {
  return state.enabled;
}
