import { describe, expect, it } from 'vitest';
import { formatRuntime, runtimeFigures, stageQuantiles } from './stage-histograms.ts';

const metrics = `# HELP nodejs_eventloop_lag_p99_seconds The 99th percentile of the recorded event loop delays.
# TYPE nodejs_eventloop_lag_p99_seconds gauge
nodejs_eventloop_lag_min_seconds 0.0101
nodejs_eventloop_lag_p99_seconds 0.0342
nodejs_eventloop_lag_max_seconds 0.0636
nodejs_gc_duration_seconds_sum{kind="minor"} 0.25
nodejs_gc_duration_seconds_count{kind="minor"} 73
nodejs_gc_duration_seconds_sum{kind="major"} 0.0286
nodejs_gc_duration_seconds_count{kind="major"} 4
nodejs_gc_duration_seconds_sum{kind="weakcb"} 0
nodejs_gc_duration_seconds_count{kind="weakcb"} 0
webhook_stage_seconds_bucket{le="0.005",stage="attempt"} 50
webhook_stage_seconds_bucket{le="0.01",stage="attempt"} 100
webhook_stage_seconds_bucket{le="+Inf",stage="attempt"} 100
`;

describe('bench scrape of a service /metrics', () => {
  it('reads event-loop delay beyond the sampling tick, and GC pauses by kind, leaving out kinds that never ran', () => {
    const runtime = runtimeFigures(metrics)!;
    // Node's histogram holds whole tick intervals: the on-time one (the minimum, 10.1 ms) is no delay.
    expect(runtime.loopDelayP99Ms).toBeCloseTo(24.1);
    expect(runtime.loopDelayMaxMs).toBeCloseTo(53.5);
    expect(runtime.gc.map(({ kind, count, totalMs }) => [kind, count, Math.round(totalMs * 10) / 10])).toEqual([
      ['minor', 73, 250],
      ['major', 4, 28.6],
    ]);
    expect(formatRuntime('dispatcher', runtime)).toBe(
      'runtime (dispatcher): event-loop delay p99 24.1 ms, max 53.5 ms; GC minor 73× 250.0 ms, major 4× 28.6 ms',
    );
  });

  it('has no runtime figures without the default metrics', () => {
    expect(runtimeFigures('webhook_stage_seconds_count{stage="attempt"} 3\n')).toBeUndefined();
  });

  it('interpolates stage quantiles inside the bucket holding the rank', () => {
    const [attempt] = stageQuantiles(metrics);
    expect(attempt).toMatchObject({ stage: 'attempt', count: 100 });
    expect(attempt!.p50Ms).toBeCloseTo(5);
    expect(attempt!.p99Ms).toBeCloseTo(9.9);
  });

  it('counts only what happened after an earlier scrape when given one', () => {
    const earlier = `nodejs_gc_duration_seconds_sum{kind="minor"} 0.05
nodejs_gc_duration_seconds_count{kind="minor"} 13
nodejs_gc_duration_seconds_sum{kind="major"} 0.0286
nodejs_gc_duration_seconds_count{kind="major"} 4
webhook_stage_seconds_bucket{le="0.005",stage="attempt"} 49
webhook_stage_seconds_bucket{le="0.01",stage="attempt"} 50
webhook_stage_seconds_bucket{le="+Inf",stage="attempt"} 50
`;
    // After it: 1 observation at most 5 ms, 49 between 5 and 10 ms.
    const [attempt] = stageQuantiles(metrics, undefined, earlier);
    expect(attempt).toMatchObject({ stage: 'attempt', count: 50 });
    expect(attempt!.p50Ms).toBeCloseTo(5 + (5 * 24) / 49); // rank 25: the 24th of the 49 in (5, 10] ms
    expect(attempt!.p99Ms).toBeCloseTo(5 + (5 * 48.5) / 49);
    const runtime = runtimeFigures(metrics, earlier)!;
    expect(runtime.gc.map(({ kind, count, totalMs }) => [kind, count, Math.round(totalMs * 10) / 10])).toEqual([
      ['minor', 60, 200],
    ]);
  });
});
