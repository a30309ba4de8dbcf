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
});
