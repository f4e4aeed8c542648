/**
 * The operator's Prometheus families (docs/observability.md#metrics, "the monitoring contract"): names,
 * types, label names and buckets are byte-identical to the Go operator's `metrics/` package so dashboards
 * and alerts keep working across a switch. Help strings are this port's own wording.
 */
import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from 'prom-client';

/** Buckets of both phase-duration histograms, in seconds. */
export const PHASE_DURATION_BUCKETS_SECONDS = [10, 30, 60, 180, 600, 1800];

/**
 * The eight cocoon_operator_* collectors; activities increment them (label values per
 * docs/observability.md#metrics).
 */
export interface OperatorMetrics {
  /** A terminal sub-agent pod deleted for rebuild. */
  subagentRebuildTotal: Counter<'namespace' | 'cocoonset'>;
  /** A sub-agent slot parked in dead-letter after its rebuild budget. */
  subagentDeadLetterTotal: Counter<'namespace' | 'cocoonset'>;
  /** Seconds spent in CocoonHibernation `Hibernating`; result ∈ {ok, timeout}. */
  hibernatePhaseDuration: Histogram<'result'>;
  /** Seconds spent in CocoonHibernation `Waking`; result ∈ {ok, timeout}. */
  wakePhaseDuration: Histogram<'result'>;
  /** A CocoonSet pass that found the main pod's lifecycle-state `failed`; phase = set phase or Pending. */
  lifecycleStateFailedObservedTotal: Counter<'phase'>;
  /** A pod deleted by a `hibernatePolicy: release` suspend. */
  slotReleasePodsDeletedTotal: Counter<'namespace' | 'cocoonset'>;
  /** A released-seat wake reached a live VM; placement ∈ {hint-node, pool}. */
  slotReleaseWakeTotal: Counter<'namespace' | 'cocoonset' | 'placement'>;
  /** A pass that saw the released-seat wake pod Unschedulable. */
  slotReleaseWakeUnschedulableTotal: Counter<'namespace' | 'cocoonset'>;
  /** Observes `seconds` on the hibernate or wake phase histogram (the activities' PhaseDurationObserver). */
  observePhaseDuration(kind: 'hibernate' | 'wake', result: 'ok' | 'timeout', seconds: number): void;
}

/**
 * Registers the eight operator families on `registry` and returns them. Throws (prom-client) if called
 * twice on one registry, like the reference's MustRegister.
 */
export function createOperatorMetrics(registry: Registry): OperatorMetrics {
  const registers = [registry];
  const setLabels = ['namespace', 'cocoonset'] as const;
  const m: Omit<OperatorMetrics, 'observePhaseDuration'> = {
    subagentRebuildTotal: new Counter({
      name: 'cocoon_operator_subagent_rebuild_total',
      help: 'Sub-agent pods deleted so that their slot is rebuilt, within the rebuild budget.',
      labelNames: setLabels,
      registers,
    }),
    subagentDeadLetterTotal: new Counter({
      name: 'cocoon_operator_subagent_dead_letter_total',
      help: 'Sub-agent slots left in dead-letter once their rebuild budget ran out.',
      labelNames: setLabels,
      registers,
    }),
    hibernatePhaseDuration: new Histogram({
      name: 'cocoon_operator_hibernate_phase_duration_seconds',
      help: 'Seconds a CocoonHibernation spent in phase Hibernating, by result.',
      labelNames: ['result'] as const,
      buckets: PHASE_DURATION_BUCKETS_SECONDS,
      registers,
    }),
    wakePhaseDuration: new Histogram({
      name: 'cocoon_operator_wake_phase_duration_seconds',
      help: 'Seconds a CocoonHibernation spent in phase Waking, by result.',
      labelNames: ['result'] as const,
      buckets: PHASE_DURATION_BUCKETS_SECONDS,
      registers,
    }),
    lifecycleStateFailedObservedTotal: new Counter({
      name: 'cocoon_operator_lifecycle_state_failed_observed_total',
      help: 'CocoonSet passes that found the main pod reported as failed by vk-cocoon, by CocoonSet phase.',
      labelNames: ['phase'] as const,
      registers,
    }),
    slotReleasePodsDeletedTotal: new Counter({
      name: 'cocoon_operator_slot_release_pods_deleted_total',
      help: 'Hibernated pods deleted by a release-policy suspend to give their seat back.',
      labelNames: setLabels,
      registers,
    }),
    slotReleaseWakeTotal: new Counter({
      name: 'cocoon_operator_slot_release_wake_total',
      help: 'Released-seat wakes that reached a live VM, by placement (hint-node: back on the node it hibernated on; pool: elsewhere).',
      labelNames: ['namespace', 'cocoonset', 'placement'] as const,
      registers,
    }),
    slotReleaseWakeUnschedulableTotal: new Counter({
      name: 'cocoon_operator_slot_release_wake_unschedulable_total',
      help: 'Passes that found a released-seat wake pod unschedulable for lack of capacity.',
      labelNames: setLabels,
      registers,
    }),
  };
  return {
    ...m,
    observePhaseDuration(kind, result, seconds) {
      (kind === 'hibernate' ? m.hibernatePhaseDuration : m.wakePhaseDuration).observe({ result }, seconds);
    },
  };
}

/**
 * Registers `cocoon_operator_watcher_synced` (this port's own family, not the reference's): 1 while the
 * watcher's informers have synced, or while this process is a standby that does not watch; 0 while the
 * process that should watch has not synced (the same rule as /readyz's `watcher` check). `synced` is
 * read at each scrape. Alert on it staying 0 (config/prometheus/alerts.yaml).
 */
export function registerWatcherSyncedGauge(registry: Registry, synced: () => boolean): Gauge {
  return new Gauge({
    name: 'cocoon_operator_watcher_synced',
    help: '1 when the watcher has synced its informers (or this replica is a standby), 0 while it has not.',
    registers: [registry],
    collect() {
      this.set(synced() ? 1 : 0);
    },
  });
}

/**
 * A fresh registry with the process collectors (CPU, memory, event loop, GC, handles) and the operator
 * families; the worker serves it on /metrics.
 */
export function createMetricsRegistry(): { registry: Registry; metrics: OperatorMetrics } {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  return { registry, metrics: createOperatorMetrics(registry) };
}
