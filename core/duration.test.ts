import { describe, expect, it } from 'vitest';
import { formatDuration, parseDuration } from './duration.ts';

describe('parseDuration', () => {
  it.each([
    ['500ms', 500],
    ['1ms', 1],
    ['30s', 30_000],
    ['1m', 60_000],
    ['128m', 7_680_000],
    ['4h', 14_400_000],
    ['24h', 86_400_000],
    ['30d', 2_592_000_000],
    ['1.5s', 1_500],
    ['0.5m', 30_000],
    ['0.5ms', 1], // rounds to the nearest millisecond
    [' 2m ', 120_000],
    ['007s', 7_000],
  ])('%j → %i ms', (text, ms) => {
    expect(parseDuration(text)).toBe(ms);
  });

  it.each([
    '',
    ' ',
    '5',
    's',
    '0s',
    '0ms',
    '0.0h',
    '0.4ms', // rounds to zero: not a usable duration
    '0.0001s',
    '-1s',
    '+1s',
    '1 s',
    '1S',
    '1min',
    '1w',
    '1e3ms',
    '.5s',
    '5.s',
    '1h30m',
    'PT1M',
    '1,5s',
    'Infinity',
  ])('rejects %j', (text) => {
    expect(parseDuration(text)).toBeUndefined();
  });
});

describe('formatDuration', () => {
  it.each([
    [60_000, '1m'],
    [120_000, '2m'],
    [3_840_000, '64m'],
    [7_680_000, '128m'],
    [14_400_000, '4h'],
    [86_400_000, '1d'],
    [90_000, '90s'],
    [1_000, '1s'],
    [1_500, '1500ms'],
    [1, '1ms'],
  ])('%i ms → %s', (ms, text) => {
    expect(formatDuration(ms)).toBe(text);
  });

  it.each([1, 999, 1_000, 1_500, 60_000, 61_000, 3_600_000, 5_400_000, 14_400_000, 86_400_000, 2_592_000_000])(
    'round-trips %i ms through parseDuration',
    (ms) => {
      expect(parseDuration(formatDuration(ms))).toBe(ms);
    },
  );
});
