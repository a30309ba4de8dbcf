// The alerting rules and the Grafana dashboard of infra/monitoring, checked offline: `promtool check rules` and
// `promtool test rules` (alerts.test.yml says which alerts fire on which series), every dashboard query parsed by
// promtool too, and every metric either file names served by the services (core/metrics.ts), so a renamed metric
// cannot leave an alert that never fires. promtool is built from the Go module proxy (infra/deploy/validators.ts).
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parse } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createGatewayMetrics, createMetrics } from '../../core/metrics.ts';
import { ensurePromtool, repoRoot, tool } from '../deploy/validators.ts';

const here = path.join(repoRoot, 'infra', 'monitoring');
const alertsFile = path.join(here, 'alerts.yml');

interface Rule {
  alert?: string;
  record?: string;
  expr: string;
  for?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}
interface Panel {
  type: string;
  title: string;
  id: number;
  gridPos: { h: number; w: number; x: number; y: number };
  targets?: { refId: string; expr: string }[];
}

let promtool: string;
let work: string;

beforeAll(async () => {
  const [binary, seconds] = await ensurePromtool();
  promtool = binary;
  if (seconds > 0) console.log(`promtool built in ${seconds.toFixed(1)} s`);
  work = await mkdtemp(path.join(tmpdir(), 'monitoring-'));
}, 900_000);

afterAll(async () => {
  if (work) await rm(work, { recursive: true, force: true });
});

const rules = async (): Promise<Rule[]> =>
  (parse(await readFile(alertsFile, 'utf8')) as { groups: { rules: Rule[] }[] }).groups.flatMap((g) => g.rules);
const dashboard = async () =>
  JSON.parse(await readFile(path.join(here, 'dashboard.json'), 'utf8')) as {
    uid: string;
    panels: Panel[];
    templating: { list: { name: string }[] };
  };
// Grafana's variables, as the queries would read with "All" selected.
const expand = (expr: string) => expr.replaceAll('$service', '.*');

/** The metric names the router, the dispatcher and the gateway serve, with a histogram's series suffixes. */
async function servedNames(): Promise<Set<string>> {
  const registries = [createMetrics('router'), createMetrics('dispatcher'), createGatewayMetrics()].map(
    (m) => m.registry,
  );
  const metrics = (await Promise.all(registries.map((registry) => registry.getMetricsAsJSON()))).flat();
  const names = new Set<string>();
  for (const metric of metrics) {
    names.add(metric.name);
    if (String(metric.type) === 'histogram')
      for (const suffix of ['_bucket', '_count', '_sum']) names.add(metric.name + suffix);
  }
  return names;
}

/** Metric names an expression selects: identifiers followed by a selector, a range or the end, not functions. */
function metricNames(expr: string): string[] {
  const withoutStrings = expr.replace(/"(?:[^"\\]|\\.)*"/g, '""');
  const names: string[] = [];
  for (const match of withoutStrings.matchAll(/\b([a-zA-Z_:][a-zA-Z0-9_:]*)\b(?!\s*\()/g)) {
    const name = match[1]!;
    if (/^(webhook|gateway|purchase|process|nodejs)[_:]/.test(name)) names.push(name);
  }
  return names;
}

describe('alerting rules', () => {
  it('pass promtool check rules', async () => {
    const result = await tool(promtool, ['check', 'rules', alertsFile]);
    expect(result.stderr).toBe('');
    expect(result.code).toBe(0);
    expect(result.stdout).toContain(`SUCCESS: ${(await rules()).length} rules found`);
  });

  it('fire as alerts.test.yml expects (promtool test rules)', async () => {
    const result = await tool(promtool, ['test', 'rules', path.join(here, 'alerts.test.yml')]);
    expect(result.stdout + result.stderr).toContain('SUCCESS');
    expect(result.code, result.stdout + result.stderr).toBe(0);
  });

  it('are checked for real: a broken expression or a failing expectation is refused', async () => {
    const broken = path.join(work, 'broken.yml');
    const source = await readFile(alertsFile, 'utf8');
    await writeFile(broken, source.replace('> 1000 and delta(', '> 1000 and delta (('));
    expect((await tool(promtool, ['check', 'rules', broken])).code).not.toBe(0);

    // The same expectations against rules whose abandon threshold is 50 %: the alert the test expects never fires.
    await writeFile(path.join(work, 'alerts.yml'), source.replace(') > 0.05', ') > 0.5'));
    const tests = path.join(work, 'alerts.test.yml');
    await writeFile(tests, await readFile(path.join(here, 'alerts.test.yml'), 'utf8'));
    const result = await tool(promtool, ['test', 'rules', tests]);
    expect(result.code).not.toBe(0);
    expect(result.stdout + result.stderr).toContain('WebhookAbandonRateHigh');
  });

  it('cover what an operator must hear of: lag, abandonment, auto-disable, a service down, the gateway', async () => {
    const alerts = (await rules()).filter((rule) => rule.alert);
    for (const rule of alerts) {
      expect(rule.labels?.severity, rule.alert).toMatch(/^(critical|warning|info)$/);
      expect(rule.annotations?.summary, rule.alert).toBeTruthy();
      expect(rule.annotations?.description, rule.alert).toBeTruthy();
    }
    expect(alerts.map((rule) => rule.alert)).toEqual(
      expect.arrayContaining([
        'WebhookConsumerLagGrowing',
        'WebhookAbandonRateHigh',
        'WebhookSubscriptionsAutoDisabled',
        'WebhookDispatcherDown',
        'WebhookRouterDown',
        'GatewayDown',
        'GatewayErrorRateHigh',
        'GatewayLatencyHigh',
        'PurchaseEventsPublishedBySweep',
      ]),
    );
  });

  it('name only metrics the services serve, and recording rules they define', async () => {
    const served = await servedNames();
    const all = await rules();
    const recorded = new Set(all.map((rule) => rule.record).filter(Boolean));
    const named = new Set<string>();
    for (const rule of all) {
      for (const name of metricNames(rule.expr)) {
        named.add(name);
        expect(served.has(name) || recorded.has(name), `${rule.alert ?? rule.record} names ${name}`).toBe(true);
      }
    }
    expect([...named]).toEqual(
      expect.arrayContaining([
        'webhook_consumer_lag',
        'webhook:consumer_lag:sum',
        'webhook_deliveries_total',
        'webhook_subscriptions_auto_disabled_total',
        'process_start_time_seconds',
        'webhook_stage_seconds_bucket',
        'gateway_request_duration_seconds_bucket',
        'gateway_request_duration_seconds_count',
        'purchase_events_published_total',
      ]),
    );
    expect(metricNames('rate(webhook_nope_total[5m])').filter((name) => !served.has(name))).toEqual([
      'webhook_nope_total',
    ]);
    // The gateway's names are checked too: a renamed one is not served.
    expect(
      metricNames('rate(gateway_nope_seconds_count[5m]) + rate(purchase_nope_total[5m])').filter(
        (name) => !served.has(name),
      ),
    ).toEqual(['gateway_nope_seconds_count', 'purchase_nope_total']);
  });
});

describe('Grafana dashboard', () => {
  it('has panels on a grid that do not overlap, each query with its own refId', async () => {
    const { uid, panels, templating } = await dashboard();
    expect(uid).toBe('core-webhooks');
    expect(templating.list.map((variable) => variable.name)).toEqual(['datasource', 'service']);
    expect(new Set(panels.map((panel) => panel.id)).size).toBe(panels.length);
    const cells = new Set<string>();
    for (const { title, gridPos } of panels) {
      expect(gridPos.x + gridPos.w, title).toBeLessThanOrEqual(24);
      for (let x = gridPos.x; x < gridPos.x + gridPos.w; x += 1) {
        for (let y = gridPos.y; y < gridPos.y + gridPos.h; y += 1) {
          expect(cells.has(`${x},${y}`), `${title} overlaps another panel at ${x},${y}`).toBe(false);
          cells.add(`${x},${y}`);
        }
      }
    }
    for (const panel of panels.filter((p) => p.type !== 'row')) {
      expect(panel.targets?.length, panel.title).toBeGreaterThan(0);
      expect(new Set(panel.targets!.map((target) => target.refId)).size).toBe(panel.targets!.length);
    }
  });

  it('queries parse as PromQL (promtool) and name only metrics the services serve', async () => {
    const { panels } = await dashboard();
    const served = await servedNames();
    const queries = panels.flatMap((panel) =>
      (panel.targets ?? []).map((target, index) => ({ panel: panel.title, expr: expand(target.expr), index })),
    );
    expect(queries.length).toBeGreaterThan(20);
    for (const { panel, expr } of queries) {
      for (const name of metricNames(expr)) expect(served.has(name), `"${panel}" names ${name}`).toBe(true);
    }
    // Each query as a recording rule: promtool parses every expression and names the one it cannot.
    const file = path.join(work, 'dashboard-queries.yml');
    const groups = [
      { name: 'dashboard', rules: queries.map((query, n) => ({ record: `dashboard:query${n}`, expr: query.expr })) },
    ];
    await writeFile(file, JSON.stringify({ groups }));
    const result = await tool(promtool, ['check', 'rules', file]);
    expect(result.code, result.stdout + result.stderr).toBe(0);
    expect(result.stdout).toContain(`SUCCESS: ${queries.length} rules found`);
  });
});
