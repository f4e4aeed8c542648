/**
 * An in-memory world that executes the CocoonSet planner's (`planPass`) actions, for the pure-core tests.
 * It fakes exactly one boundary, the action/outcome interface the CocoonSet workflow's activities
 * implement, with the semantics of the real API: synchronous pod deletes, AlreadyExists on duplicate
 * creates, NotFound, merge-patch annotations with `null` deleting a key, rejection of an empty patch, a
 * separate status write.
 */
import type { V1Pod } from '@kubernetes/client-node';
import type { CocoonHibernation, CocoonSet } from '../../src/api/types.js';
import {
  type ActionOutcome,
  type PassAction,
  type PassInput,
  type PassStep,
  planPass,
} from '../../src/cocoonset/plan.js';

function clone<T>(v: T): T {
  return JSON.parse(JSON.stringify(v)) as T;
}

/** The in-memory cluster + registry + recorder the pass's actions run against. */
export class PlanWorld {
  cs: CocoonSet;
  readonly pods = new Map<string, V1Pod>();
  crs: CocoonHibernation[] = [];
  /** Planner steps (planPass calls) so far, all passes. */
  steps = 0;
  /** `"<vm>:<tag>"` present in the registry. */
  readonly tags = new Set<string>();
  /** When set, every probe fails with this text. */
  probeError?: string;
  /** Injected failures by action id. */
  readonly failures = new Map<string, string>();
  /** Every action executed, in order. */
  readonly log: PassAction[] = [];
  lists = 0;
  readonly probes: string[] = [];
  readonly events: { eventType: string; reason: string; message: string }[] = [];
  readonly metrics: { metric: string; labels: Record<string, string> }[] = [];
  readonly statusPatches: unknown[] = [];

  constructor(cs: CocoonSet, pods: V1Pod[] = []) {
    this.cs = clone(cs);
    for (const p of pods) this.pods.set(p.metadata!.name!, clone(p));
  }

  pod(name: string): V1Pod | undefined {
    return this.pods.get(name);
  }

  execute(a: PassAction): ActionOutcome {
    this.log.push(a);
    const injected = this.failures.get(a.id);
    if (injected !== undefined) return { kind: 'error', message: injected };
    switch (a.type) {
      case 'addFinalizer':
        this.cs.metadata.finalizers = [...(this.cs.metadata.finalizers ?? []), a.finalizer];
        return { kind: 'ok' };
      case 'patchPodAnnotations': {
        if (Object.keys(a.annotations).length === 0) return { kind: 'error', message: 'empty patch' };
        const p = this.pods.get(a.pod);
        if (!p) return { kind: 'error', message: `pods "${a.pod}" not found` };
        mergeAnnotations(p.metadata!, a.annotations);
        return { kind: 'ok' };
      }
      case 'patchCocoonSetAnnotations':
        if (Object.keys(a.annotations).length === 0) return { kind: 'error', message: 'empty patch' };
        mergeAnnotations(this.cs.metadata, a.annotations);
        return { kind: 'ok' };
      case 'deletePod':
        return this.pods.delete(a.pod) ? { kind: 'ok' } : { kind: 'notFound' };
      case 'createPod': {
        const name = a.pod.metadata!.name!;
        if (this.pods.has(name)) return { kind: 'alreadyExists' };
        this.pods.set(name, clone(a.pod));
        return { kind: 'ok' };
      }
      case 'getPod': {
        const p = this.pods.get(a.pod);
        return p ? { kind: 'pod', pod: clone(p) } : { kind: 'error', message: `pods "${a.pod}" not found` };
      }
      case 'listHibernations':
        this.lists++;
        return { kind: 'hibernations', items: clone(this.crs) };
      case 'probeHibernate':
        this.probes.push(a.vmName);
        if (this.probeError !== undefined) return { kind: 'error', message: this.probeError };
        return { kind: 'probe', present: this.tags.has(`${a.vmName}:hibernate`) };
      case 'patchStatus':
        this.statusPatches.push(a.body);
        this.cs.status = clone(a.status);
        return { kind: 'ok' };
      case 'event':
        this.events.push({ eventType: a.eventType, reason: a.reason, message: a.message });
        return { kind: 'ok' };
      case 'metric':
        this.metrics.push({ metric: a.metric, labels: a.labels });
        return { kind: 'ok' };
    }
  }

  /**
   * Runs one pass: the cache view is a snapshot of the world at the start (or `view` pods when given,
   * to model a stale cache), then actions run until the planner is done or delegates.
   */
  pass(
    opts: {
      nowMs?: number;
      registryConfigured?: boolean;
      view?: V1Pod[];
      declined?: PassInput['declined'];
      subAgentsWaitForHibernatingMain?: boolean;
      batchPodLoops?: boolean;
    } = {},
  ): Exclude<PassStep, { kind: 'run' }> {
    const input: PassInput = {
      cs: clone(this.cs),
      pods: clone(opts.view ?? [...this.pods.values()]),
      nowMs: opts.nowMs ?? Date.parse('2026-05-14T01:00:00Z'),
      registryConfigured: opts.registryConfigured ?? true,
      declined: opts.declined,
      subAgentsWaitForHibernatingMain: opts.subAgentsWaitForHibernatingMain ?? true,
      batchPodLoops: opts.batchPodLoops ?? true,
    };
    const outcomes: Record<string, ActionOutcome> = {};
    for (let i = 0; i < 200; i++) {
      this.steps++;
      const step = planPass(input, outcomes);
      if (step.kind !== 'run') return step;
      if (step.actions.length === 0) throw new Error('planner returned an empty batch');
      for (const a of step.actions) {
        if (outcomes[a.id] !== undefined) throw new Error(`action ${a.id} planned twice`);
        outcomes[a.id] = this.execute(a);
      }
    }
    throw new Error('pass did not finish in 200 steps');
  }

  /** Action types executed, as `type:id` strings (for order assertions). */
  ids(type?: PassAction['type']): string[] {
    return this.log.filter((a) => !type || a.type === type).map((a) => a.id);
  }
}

function mergeAnnotations(
  meta: { annotations?: Record<string, string> },
  patch: Record<string, string | null>,
): void {
  const ann = { ...(meta.annotations ?? {}) };
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) delete ann[k];
    else ann[k] = v;
  }
  meta.annotations = ann;
}

/** The `done` result of a pass, failing the test if it delegated. */
export function done(step: Exclude<PassStep, { kind: 'run' }>): Extract<PassStep, { kind: 'done' }> {
  if (step.kind !== 'done') throw new Error(`expected done, got delegate ${step.flow}`);
  return step;
}
