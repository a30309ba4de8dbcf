/** Exact decimal arithmetic on strings through scaled bigints: money never passes through a float. */
const DECIMAL = /^-?\d{1,30}(\.\d{1,18})?$/;

export function isDecimal(text: string): boolean {
  return DECIMAL.test(text);
}

function parse(text: string): { units: bigint; scale: number } {
  const negative = text.startsWith('-');
  const [whole = '0', fraction = ''] = (negative ? text.slice(1) : text).split('.');
  const units = BigInt(whole + fraction);
  return { units: negative ? -units : units, scale: fraction.length };
}

function format(units: bigint, scale: number): string {
  const negative = units < 0n;
  const digits = (negative ? -units : units).toString().padStart(scale + 1, '0');
  const text = scale === 0 ? digits : `${digits.slice(0, -scale)}.${digits.slice(-scale)}`;
  return negative ? `-${text}` : text;
}

export function multiply(a: string, b: string): string {
  const x = parse(a);
  const y = parse(b);
  return format(x.units * y.units, x.scale + y.scale);
}

export function sum(values: string[]): string {
  const parsed = values.map(parse);
  const scale = Math.max(0, ...parsed.map((value) => value.scale));
  const total = parsed.reduce((acc, value) => acc + value.units * 10n ** BigInt(scale - value.scale), 0n);
  return format(total, scale);
}

export function isPositive(text: string): boolean {
  return parse(text).units > 0n;
}
