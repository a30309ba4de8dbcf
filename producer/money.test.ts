import { describe, expect, it } from 'vitest';
import { isDecimal, isPositive, multiply, sum } from './money.ts';

// Expected values were computed independently with Python's decimal module (precision 200).
const MAX = '999999999999999999999999999999.999999999999999999'; // 30 integer digits, 18 fraction digits

describe('multiply', () => {
  it.each([
    ['2', '3', '6'],
    ['0.1', '3', '0.3'], // a float would give 0.30000000000000004
    ['0.1', '0.2', '0.02'],
    ['1.1', '1.1', '1.21'], // a float would give 1.2100000000000002
    ['10.50', '3', '31.50'],
    ['0', '123.45', '0.00'],
    ['-1.5', '2', '-3.0'],
    ['-1.5', '-2', '3.0'],
    ['1.5', '-2', '-3.0'],
    ['-0.5', '0', '0.0'], // never "-0.0"
    ['0.000000000000000001', '0.000000000000000001', '0.000000000000000000000000000000000001'],
    ['-0.01', '0.5', '-0.005'],
    ['123456789.123456789', '987654321.987654321', '121932631356500531.347203169112635269'],
    ['-0.000000000000000001', '999999999999999999999999999999', '-999999999999.999999999999999999'],
    ['12345678901234567890.12', '-3.5', '-43209876154320987615.420'],
    [MAX, MAX, '999999999999999999999999999999999999999999999998000000000000.000000000000000000000000000000000001'],
  ])('%s × %s = %s', (a, b, expected) => {
    expect(multiply(a, b)).toBe(expected);
  });

  it('is commutative', () => {
    expect(multiply('12.345', '-6.7')).toBe(multiply('-6.7', '12.345'));
  });
});

describe('sum', () => {
  it.each([
    [['0.1', '0.2'], '0.3'], // a float would give 0.30000000000000004
    [Array<string>(10).fill('0.1'), '1.0'], // a float would give 0.9999999999999999
    [[], '0'],
    [['42'], '42'],
    [['1', '2.50', '-0.25'], '3.25'],
    [['-0.1', '0.1'], '0.0'],
    [['-5', '-5.5'], '-10.5'],
    [['-0.01', '0.001'], '-0.009'],
    [['0.000000000000000001', '0.000000000000000002'], '0.000000000000000003'],
    [[MAX, '0.000000000000000001'], '1000000000000000000000000000000.000000000000000000'],
    [Array<string>(7).fill(MAX), '6999999999999999999999999999999.999999999999999993'],
    [['9007199254740993', '1'], '9007199254740994'], // above 2^53: a float would lose the last digit
  ])('sum(%j) = %s', (values, expected) => {
    expect(sum(values)).toBe(expected);
  });

  it('does not depend on the order of the values', () => {
    const values = ['0.7', '-3.25', '100', '0.000000000000000001', '-0.45'];
    expect(sum([...values].reverse())).toBe(sum(values));
    expect(sum(values)).toBe('97.000000000000000001');
  });
});

describe('isDecimal', () => {
  it.each([
    '0',
    '1',
    '-1',
    '0.1',
    '123.456',
    '-0.000000000000000001',
    '1'.repeat(30),
    `1.${'9'.repeat(18)}`,
    MAX,
    `-${MAX}`,
    '007', // leading zeros still denote an exact value
  ])('accepts %s', (text) => {
    expect(isDecimal(text)).toBe(true);
  });

  it.each([
    '',
    '-',
    '.5',
    '1.',
    '+1',
    '1e3',
    '1E-2',
    '1,5',
    ' 1',
    '1 ',
    '0x10',
    'NaN',
    'Infinity',
    '--1',
    '1.2.3',
    '１', // full-width digit
    '١', // Arabic-Indic digit
    '1'.repeat(31),
    `1.${'1'.repeat(19)}`,
  ])('rejects %j', (text) => {
    expect(isDecimal(text)).toBe(false);
  });
});

describe('isPositive', () => {
  it.each([
    ['1', true],
    ['0.000000000000000001', true],
    [MAX, true],
    ['0', false],
    ['0.00', false],
    ['-0', false],
    ['-0.0', false],
    ['-1', false],
    ['-0.000000000000000001', false],
  ])('%s → %s', (text, expected) => {
    expect(isPositive(text)).toBe(expected);
  });
});
