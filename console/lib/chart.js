// Small inline SVG bar charts: one bar per time slice, its failing part drawn over it. The numbers are in the label
// (for screen readers) and beside the chart, so colour never carries meaning alone.
import { svg } from './dom.js';

const WIDTH = 240;
const HEIGHT = 56;

/** A bar chart of `slots` ({ total, failing }); `label` describes it and is completed with the counts. */
export function barChart(slots, { label, sliceName }) {
  const max = Math.max(1, ...slots.map((slot) => slot.total));
  const gap = 2;
  const barWidth = (WIDTH - gap * (slots.length - 1)) / slots.length;
  const described =
    `${label}. Deliveries per ${sliceName}, oldest first: ${slots.map((slot) => slot.total).join(', ')}. ` +
    `Failing: ${slots.map((slot) => slot.failing).join(', ')}.`;
  return svg(
    'svg',
    {
      viewBox: `0 0 ${WIDTH} ${HEIGHT + 1}`,
      class: 'chart',
      role: 'img',
      'aria-label': described,
      preserveAspectRatio: 'none',
    },
    svg('title', {}, described),
    svg('line', { x1: 0, y1: HEIGHT + 0.5, x2: WIDTH, y2: HEIGHT + 0.5, class: 'axis' }),
    slots.map((slot, index) => {
      const x = index * (barWidth + gap);
      const height = (slot.total / max) * HEIGHT;
      const failing = (slot.failing / max) * HEIGHT;
      return svg(
        'g',
        {},
        slot.total > 0
          ? svg('rect', { x, y: HEIGHT - height, width: barWidth, height, class: 'bar', rx: 1 })
          : svg('rect', { x, y: HEIGHT - 1, width: barWidth, height: 1, class: 'bar-empty' }),
        slot.failing > 0
          ? svg('rect', { x, y: HEIGHT - failing, width: barWidth, height: failing, class: 'bar-failing', rx: 1 })
          : null,
      );
    }),
  );
}
