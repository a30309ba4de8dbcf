import v8 from 'node:v8';

/**
 * Sets how far V8 lets the old generation grow past what its last full collection kept before the next one, in
 * percent (V8's `--heap-growing-percent`; its factor is 1 + this / 100); 0 leaves V8's own. A service calls it at start,
 * before any load: V8 reads the factor at each full collection, and Node takes no such flag from NODE_OPTIONS (which
 * is how the image and the chart pass the others). The router's and the dispatcher's settings (ROUTER_HEAP_GROWTH_PERCENT,
 * DISPATCHER_HEAP_GROWTH_PERCENT) say why each has its value (core/config.ts).
 */
export function setHeapGrowth(percent: number, setFlags: (flags: string) => void = v8.setFlagsFromString): void {
  if (percent > 0) setFlags(`--heap-growing-percent=${percent}`);
}
