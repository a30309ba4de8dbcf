import { describe, expect, it } from 'vitest';
import { phaseFigures, Receivers, type Answer } from './load.ts';

describe('phaseFigures', () => {
  const times = { loadStart: 0, loadEnd: 100_000, faultStart: 10_000, faultEnd: 20_000, windowEnd: 30_000 };
  const answer = (sentAt: number, outcome: string, ms: number): Answer => ({ orderId: '', sentAt, outcome, ms });

  it('reports each outcome of the fault window with its median and slowest answer, HTTP answers first', () => {
    const answers = [
      answer(5_000, '503', 20_000), // before the fault: not counted
      answer(11_000, '200', 100),
      answer(12_000, '200', 200),
      answer(13_000, '200', 300),
      answer(14_000, '503', 60),
      answer(15_000, '503', 9_800),
      answer(16_000, 'timeout', 10_400),
      answer(31_000, '503', 20_000), // after the window: not counted
    ];
    const figures = phaseFigures(answers, new Receivers(), ['s1'], times, 10);
    expect(figures.api).toBe('200×3 (p50 0.2 s, ≤ 0.3 s) 503×2 (p50 0.1 s, ≤ 9.8 s) timeout×1 (p50 10.4 s, ≤ 10.4 s)');
    expect(figures.apiMaxMs).toBe(10_400);
  });
  it('measures the longest stop of one subscription, among the validations of the fault window answered 200', () => {
    const receivers = new Receivers();
    const answers: Answer[] = [];
    // s1 delivers every 100 ms but stops for 2.5 s at 15 s; s2 never stops; a validation refused and one sent before
    // the fault count for nothing.
    for (let sentAt = 10_000; sentAt < 20_000; sentAt += 100) {
      const orderId = `o${sentAt}`;
      answers.push({ orderId, sentAt, outcome: '200', ms: 10 });
      const s1At = sentAt >= 15_000 && sentAt < 17_500 ? 17_500 : sentAt + 50;
      receivers.byEntity.set(orderId, [
        { entityId: orderId, subscriptionId: 's1', eventId: `e${sentAt}`, at: s1At },
        { entityId: orderId, subscriptionId: 's2', eventId: `e${sentAt}`, at: sentAt + 50 },
      ]);
    }
    answers.push({ orderId: 'early', sentAt: 1_000, outcome: '200', ms: 10 });
    receivers.byEntity.set('early', [{ entityId: 'early', subscriptionId: 's2', eventId: 'e-early', at: 1_050 }]);
    answers.push({ orderId: 'refused', sentAt: 19_950, outcome: '503', ms: 10 });
    const figures = phaseFigures(answers, receivers, ['s1', 's2'], times, 10);
    expect(figures.longestStopMs).toBe(17_500 - 14_950);
  });
  it('names the validations answered 200 that are short of a delivery, and no other', () => {
    const receivers = new Receivers();
    const receipt = (entityId: string, subscriptionId: string) => ({
      entityId,
      subscriptionId,
      eventId: `e-${entityId}`,
      at: 12_000,
    });
    receivers.byEntity.set('whole', [receipt('whole', 's1'), receipt('whole', 's2')]);
    receivers.byEntity.set('half', [receipt('half', 's1')]);
    const answers: Answer[] = [
      { orderId: 'whole', sentAt: 11_000, outcome: '200', ms: 10 },
      { orderId: 'half', sentAt: 11_000, outcome: '200', ms: 10 },
      { orderId: 'none', sentAt: 11_000, outcome: '200', ms: 10 },
      { orderId: 'refused', sentAt: 11_000, outcome: '503', ms: 10 },
    ];
    const figures = phaseFigures(answers, receivers, ['s1', 's2'], times, 10);
    expect([figures.expected, figures.delivered]).toEqual([6, 3]);
    expect(figures.missing).toEqual([
      `half (sent at ${new Date(11_000).toISOString()})`,
      `none (sent at ${new Date(11_000).toISOString()})`,
    ]);
  });
});
