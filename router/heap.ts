import v8 from 'node:v8';

/**
 * How far V8 lets the router's old generation grow past what its last full collection kept (V8's factor, 1 + this /
 * 100), set at start: Node takes no such flag from NODE_OPTIONS, which is how the image and the chart pass the others.
 *
 * Why: the router runs with 32 MB semi-spaces (infra/processes.ts). V8 starts marking the old generation as soon as
 * what is left below its limit is less than the young generation's capacity, and the limit it computes after a full
 * collection, about 2.2 times the 30-32 MB the router keeps, leaves less than that: so it marked again at once, and the
 * router ran a full collection (a 4-10 ms pause, and marking steps of up to 12 ms) every 2 s whatever it allocated,
 * 14-26 in a 40-80 s run at 500 deliveries/s. With a factor of 4 it runs one when its old generation has grown by
 * about 48 MB of promoted garbage (about 0.3 MB a second at that pace), every 20 s or more: 2-5 in 40-80 s. Its price
 * is memory: the router's RSS at 500 and 1,000/s was 246-256 MB against 183-248 MB, and as fast as possible 358-360
 * against 345-347 MB (the chart's limit is 512 MiB). README "Benchmarks" has the pairs measured.
 */
export const ROUTER_HEAP_GROWING_PERCENT = 300;

export function configureRouterHeap(setFlags: (flags: string) => void = v8.setFlagsFromString): void {
  setFlags(`--heap-growing-percent=${ROUTER_HEAP_GROWING_PERCENT}`);
}
