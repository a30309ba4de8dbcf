/** Parses durations such as `500ms`, `30s`, `4h`, `30d` into milliseconds; returns undefined when malformed. */
export function parseDuration(text: string): number | undefined {
  const match = /^(\d+(?:\.\d+)?)(ms|s|m|h|d)$/.exec(text.trim());
  if (!match) return undefined;
  const unit = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 }[match[2] as 'ms' | 's' | 'm' | 'h' | 'd'];
  // Checked after rounding: a sub-millisecond value such as `0.4ms` would otherwise become a zero duration.
  const value = Math.round(Number(match[1]) * unit);
  return Number.isFinite(value) && value > 0 ? value : undefined;
}

/** Formats milliseconds as the shortest exact duration string (`60000` → `1m`), used in retry topic names. */
export function formatDuration(ms: number): string {
  for (const [unit, size] of [
    ['d', 86_400_000],
    ['h', 3_600_000],
    ['m', 60_000],
    ['s', 1_000],
  ] as const) {
    if (ms % size === 0) return `${ms / size}${unit}`;
  }
  return `${ms}ms`;
}
