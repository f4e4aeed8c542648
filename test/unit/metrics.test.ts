import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import {
  createMetricsRegistry,
  createOperatorMetrics,
  registerWatcherSyncedGauge,
} from '../../src/metrics.js';

// The monitoring contract, transcribed from docs/observability.md#metrics.
const CONTRACT = [
  { name: 'cocoon_operator_subagent_rebuild_total', type: 'counter', labels: ['namespace', 'cocoonset'] },
  { name: 'cocoon_operator_subagent_dead_letter_total', type: 'counter', labels: ['namespace', 'cocoonset'] },
  { name: 'cocoon_operator_hibernate_phase_duration_seconds', type: 'histogram', labels: ['result'] },
  { name: 'cocoon_operator_wake_phase_duration_seconds', type: 'histogram', labels: ['result'] },
  { name: 'cocoon_operator_lifecycle_state_failed_observed_total', type: 'counter', labels: ['phase'] },
  {
    name: 'cocoon_operator_slot_release_pods_deleted_total',
    type: 'counter',
    labels: ['namespace', 'cocoonset'],
  },
  {
    name: 'cocoon_operator_slot_release_wake_total',
    type: 'counter',
    labels: ['namespace', 'cocoonset', 'placement'],
  },
  {
    name: 'cocoon_operator_slot_release_wake_unschedulable_total',
    type: 'counter',
    labels: ['namespace', 'cocoonset'],
  },
];
const BUCKETS = ['10', '30', '60', '180', '600', '1800', '+Inf'];

describe('operator metrics', () => {
  it('registers exactly the eight cocoon_operator_ families with the contract types', async () => {
    const registry = new Registry();
    createOperatorMetrics(registry);
    const json = await registry.getMetricsAsJSON();
    expect(json.map((m) => [m.name, m.type]).sort()).toEqual(CONTRACT.map((c) => [c.name, c.type]).sort());
    const text = await registry.metrics();
    for (const c of CONTRACT) expect(text).toContain(`# TYPE ${c.name} ${c.type}\n`);
  });

  it('exposes each family with exactly its contract label names', async () => {
    const registry = new Registry();
    const m = createOperatorMetrics(registry);
    m.subagentRebuildTotal.inc({ namespace: 'ns', cocoonset: 'cs' });
    m.subagentDeadLetterTotal.inc({ namespace: 'ns', cocoonset: 'cs' });
    m.hibernatePhaseDuration.observe({ result: 'ok' }, 42);
    m.wakePhaseDuration.observe({ result: 'timeout' }, 301);
    m.lifecycleStateFailedObservedTotal.inc({ phase: 'Pending' });
    m.slotReleasePodsDeletedTotal.inc({ namespace: 'ns', cocoonset: 'cs' });
    m.slotReleaseWakeTotal.inc({ namespace: 'ns', cocoonset: 'cs', placement: 'hint-node' });
    m.slotReleaseWakeUnschedulableTotal.inc({ namespace: 'ns', cocoonset: 'cs' });
    const json = await registry.getMetricsAsJSON();
    for (const c of CONTRACT) {
      const family = json.find((j) => j.name === c.name)!;
      expect(family.values.length, c.name).toBeGreaterThan(0);
      for (const v of family.values) {
        const labels = Object.keys(v.labels).filter((k) => k !== 'le');
        expect(labels.sort(), c.name).toEqual([...c.labels].sort());
      }
    }
    // Unknown label names are refused, so a call site cannot drift from the contract.
    expect(() =>
      m.slotReleaseWakeTotal.inc({ namespace: 'ns', cocoonset: 'cs', node: 'x' } as never),
    ).toThrow();
  });

  it('uses the buckets 10, 30, 60, 180, 600, 1800 s for both phase histograms', async () => {
    const registry = new Registry();
    const m = createOperatorMetrics(registry);
    m.hibernatePhaseDuration.observe({ result: 'ok' }, 45);
    m.wakePhaseDuration.observe({ result: 'ok' }, 2000);
    const text = await registry.metrics();
    for (const name of [
      'cocoon_operator_hibernate_phase_duration_seconds',
      'cocoon_operator_wake_phase_duration_seconds',
    ]) {
      const les = [...text.matchAll(new RegExp(`^${name}_bucket\\{le="([^"]+)",result="ok"\\} `, 'gm'))].map(
        (x) => x[1],
      );
      expect(les, name).toEqual(BUCKETS);
    }
    expect(text).toContain('cocoon_operator_hibernate_phase_duration_seconds_bucket{le="30",result="ok"} 0');
    expect(text).toContain('cocoon_operator_hibernate_phase_duration_seconds_bucket{le="60",result="ok"} 1');
    expect(text).toContain('cocoon_operator_wake_phase_duration_seconds_bucket{le="1800",result="ok"} 0');
    expect(text).toContain('cocoon_operator_wake_phase_duration_seconds_bucket{le="+Inf",result="ok"} 1');
  });

  it('observePhaseDuration feeds the histogram of the named phase', async () => {
    const registry = new Registry();
    const m = createOperatorMetrics(registry);
    m.observePhaseDuration('hibernate', 'timeout', 200);
    m.observePhaseDuration('wake', 'ok', 5);
    const text = await registry.metrics();
    expect(text).toContain('cocoon_operator_hibernate_phase_duration_seconds_sum{result="timeout"} 200');
    expect(text).toContain('cocoon_operator_wake_phase_duration_seconds_sum{result="ok"} 5');
    expect(text).not.toContain('cocoon_operator_wake_phase_duration_seconds_sum{result="timeout"}');
  });

  it('refuses a second registration on one registry, like MustRegister', () => {
    const registry = new Registry();
    createOperatorMetrics(registry);
    expect(() => createOperatorMetrics(registry)).toThrow(/already been registered/);
  });

  it('adds the process collectors next to the operator families in the served registry', async () => {
    const { registry } = createMetricsRegistry();
    const text = await registry.metrics();
    expect(text).toContain('# TYPE process_cpu_seconds_total counter');
    expect(text).toContain('# TYPE nodejs_eventloop_lag_seconds gauge');
    expect(text).toContain('# TYPE cocoon_operator_subagent_rebuild_total counter');
  });
});

describe('watcher synced gauge', () => {
  it('reads the watcher state at each scrape: 1 when synced, 0 when not', async () => {
    const registry = new Registry();
    let synced = false;
    registerWatcherSyncedGauge(registry, () => synced);
    expect(await registry.metrics()).toContain('\ncocoon_operator_watcher_synced 0\n');
    synced = true;
    expect(await registry.metrics()).toContain('\ncocoon_operator_watcher_synced 1\n');
  });
});
