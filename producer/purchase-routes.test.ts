import { describe, expect, it } from 'vitest';
import { decimalQuantity } from './purchase-routes.ts';

// A row quantity sent as a JSON number becomes the decimal string the order keeps (purchase-schemas.ts documents it).

describe('decimalQuantity', () => {
  it('keeps a string as sent (money.ts judges it)', () => {
    expect(decimalQuantity('10')).toBe('10');
    expect(decimalQuantity('abc')).toBe('abc');
  });

  it('writes a number from 0.000001 to below 1e21 in its shortest decimal form', () => {
    expect(decimalQuantity(2.5)).toBe('2.5');
    expect(decimalQuantity(0.000001)).toBe('0.000001');
    expect(decimalQuantity(1.2345678901234568e20)).toBe('123456789012345680000');
  });

  it('rounds half up to 18 fraction digits', () => {
    expect(decimalQuantity(0.0000012345678901234567)).toBe('0.000001234567890123');
    expect(decimalQuantity(0.0000015555555555555556)).toBe('0.000001555555555556');
  });

  it('has no decimal for a number outside the range (JavaScript would write an exponent)', () => {
    for (const quantity of [0, -1, 1e-7, 5e-324, 1e21, Number.POSITIVE_INFINITY, Number.NaN]) {
      expect(decimalQuantity(quantity), String(quantity)).toBeUndefined();
    }
  });
});
