// Exact decimal comparison for subscription filters (filter.ts): the purchase service writes amounts as decimal strings
// ("124.80"), and a filter compares them with numbers or other decimal strings exactly, never through a double alone.

/**
 * An exact decimal: integer digits without leading zeros, fraction digits without trailing zeros (zero is '' and '',
 * never negative).
 */
export interface Decimal {
  negative: boolean;
  integer: string;
  fraction: string;
}

/**
 * A decimal string operand pre-parsed, with the double nearest to it and how that double's shortest form (String)
 * orders against it. A number then compares with the string exactly and without allocating: the decimals that round
 * to distinct doubles lie in disjoint, ordered intervals, and both String(v) and the string round to their doubles, so
 * a double below `nearest` is below the string; only `nearest` itself needs the digits, compared here once.
 */
export interface NumericString {
  decimal: Decimal;
  nearest: number;
  nearestOrder: number;
}

export function numericString(text: string): NumericString | null {
  if (!/^-?\d+(\.\d+)?$/.test(text)) return null;
  const decimal = toDecimal(text);
  const nearest = Number(text);
  const nearestOrder = Number.isFinite(nearest)
    ? compareDecimalText(plainText(toDecimal(String(nearest))), decimal)
    : 0;
  return { decimal, nearest, nearestOrder };
}

export function compareNumber(value: number, numeric: NumericString): number {
  return value < numeric.nearest ? -1 : value > numeric.nearest ? 1 : numeric.nearestOrder;
}

/** A decimal string, or String(n) of a finite number (whose exponent forms such as 1e21 and 1.5e-7 are expanded). */
export function toDecimal(text: string): Decimal {
  const negative = text.startsWith('-');
  const [mantissa = '', exponent = '0'] = text.slice(negative ? 1 : 0).split('e');
  const [whole = '', fraction = ''] = mantissa.split('.');
  let digits = whole + fraction;
  let point = whole.length + Number(exponent);
  if (point < 0) {
    digits = '0'.repeat(-point) + digits;
    point = 0;
  }
  if (point > digits.length) digits += '0'.repeat(point - digits.length);
  const integer = digits.slice(0, point).replace(/^0+/, '');
  const fractionDigits = digits.slice(point).replace(/0+$/, '');
  return { negative: negative && (integer !== '' || fractionDigits !== ''), integer, fraction: fractionDigits };
}

function plainText(decimal: Decimal): string {
  const sign = decimal.negative ? '-' : '';
  return `${sign}${decimal.integer || '0'}${decimal.fraction === '' ? '' : `.${decimal.fraction}`}`;
}

const ZERO = 48;
const NINE = 57;
const DOT = 46;
const MINUS = 45;

/** The sign of (text − decimal) when text is a decimal string (`-?\d+(\.\d+)?`), else NaN; scans, allocates nothing. */
export function compareDecimalText(text: string, decimal: Decimal): number {
  const length = text.length;
  const start = text.charCodeAt(0) === MINUS ? 1 : 0;
  if (start === length) return NaN;
  let dot = -1;
  for (let i = start; i < length; i++) {
    const code = text.charCodeAt(i);
    if (code === DOT && dot < 0 && i > start && i < length - 1) dot = i;
    else if (code < ZERO || code > NINE) return NaN;
  }
  const integerEnd = dot < 0 ? length : dot;
  let integerStart = start;
  while (integerStart < integerEnd && text.charCodeAt(integerStart) === ZERO) integerStart++;
  const fractionStart = dot < 0 ? length : dot + 1;
  let fractionEnd = length;
  while (fractionEnd > fractionStart && text.charCodeAt(fractionEnd - 1) === ZERO) fractionEnd--;
  const negative = start === 1 && (integerStart < integerEnd || fractionStart < fractionEnd);
  if (negative !== decimal.negative) return negative ? -1 : 1;
  let order = integerEnd - integerStart - decimal.integer.length;
  for (let i = 0; order === 0 && i < decimal.integer.length; i++) {
    order = text.charCodeAt(integerStart + i) - decimal.integer.charCodeAt(i);
  }
  const fractionLength = fractionEnd - fractionStart;
  const common = Math.min(fractionLength, decimal.fraction.length);
  for (let i = 0; order === 0 && i < common; i++) {
    order = text.charCodeAt(fractionStart + i) - decimal.fraction.charCodeAt(i);
  }
  // Trailing zeros are trimmed, so with a common prefix the longer fraction is the larger.
  if (order === 0) order = fractionLength - decimal.fraction.length;
  return negative ? -Math.sign(order) : Math.sign(order);
}
