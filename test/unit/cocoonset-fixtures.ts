/**
 * Shared fixtures for the CocoonSet pure-core tests (spec/cocoonset-core.md §21.0), and an in-memory
 * world that executes `planPass` actions. The world fakes exactly one boundary — the action/outcome
 * interface the CocoonSet workflow's activities implement — with the semantics §20.17 asks of a fake:
 * synchronous pod deletes, AlreadyExists on duplicate creates, NotFound, merge-patch annotations with
 * `null` deleting a key, rejection of an empty patch, a separate status write.
 */
import type { V1Pod } from '@kubernetes/client-node';
import { Annotations, Finalizers, LifecycleStates } from '../../src/api/keys.js';
import { cocoonSetGenerationOf } from '../../src/api/pod.js';
import type { CocoonHibernation, CocoonSet, HibernationPhase } from '../../src/api/types.js';
import {
  type ActionOutcome,
  type PassAction,
  type PassInput,
  type PassStep,
  planPass,
} from '../../src/cocoonset/plan.js';

export const NS = 'ns';
export const UID = 'test-uid';
export const IMAGE = 'ghcr.io/cocoonstack/cocoon/ubuntu:24.04';

/** `newCocoonSet(name, mods…)`: ns `ns`, UID `test-uid`, the ubuntu image, generation 0, no finalizer. */
export function newCocoonSet(name = 'demo', ...mods: ((cs: CocoonSet) => void)[]): CocoonSet {
  const cs: CocoonSet = {
    apiVersion: 'cocoonset.cocoonstack.io/v1',
    kind: 'CocoonSet',
    metadata: { name, namespace: NS, uid: UID, generation: 0 },
    spec: { agent: { image: IMAGE } },
  };
  for (const m of mods) m(cs);
  return cs;
}

/** Adds the CocoonSet finalizer (a set past its first pass). */
export function withFinalizer(cs: CocoonSet): void {
  cs.metadata.finalizers = [Finalizers.cocoonSet];
}

/** `readyPod(p)`: phase Running plus a Ready=True condition. */
export function readyPod(p: V1Pod): V1Pod {
  p.status = { ...(p.status ?? {}), phase: 'Running' };
  p.status.conditions = [...(p.status.conditions ?? []), { type: 'Ready', status: 'True' }];
  return p;
}

/** Sets arbitrary pod annotations (merging). */
export function annotate(p: V1Pod, ann: Record<string, string>): V1Pod {
  p.metadata ??= {};
  p.metadata.annotations = { ...(p.metadata.annotations ?? {}), ...ann };
  return p;
}

/** `lifecycleHibernated(p)`: lifecycle `hibernated`, observed generation = the pod's own stamp. */
export function lifecycleHibernated(p: V1Pod): V1Pod {
  annotate(p, {
    [Annotations.lifecycleState]: LifecycleStates.hibernated,
    [Annotations.lifecycleObservedGeneration]: String(cocoonSetGenerationOf(p)),
  });
  delete p.metadata!.annotations![Annotations.lifecycleStateMessage];
  return p;
}

/** A CocoonHibernation naming `pod`. */
export function hibernation(
  pod: string,
  desire: 'Hibernate' | 'Wake',
  phase?: HibernationPhase,
): CocoonHibernation {
  return {
    metadata: { name: `h-${pod}`, namespace: NS },
    spec: { podRef: { name: pod }, desire },
    status: phase ? { phase } : undefined,
  };
}

function clone<T>(v: T): T {
  return JSON.parse(JSON.stringify(v)) as T;
}

/** The in-memory cluster + registry + recorder the pass's actions run against. */
export class FakeWorld {
  cs: CocoonSet;
  readonly pods = new Map<string, V1Pod>();
  crs: CocoonHibernation[] = [];
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
    } = {},
  ): Exclude<PassStep, { kind: 'run' }> {
    const input: PassInput = {
      cs: clone(this.cs),
      pods: clone(opts.view ?? [...this.pods.values()]),
      nowMs: opts.nowMs ?? Date.parse('2026-05-14T01:00:00Z'),
      registryConfigured: opts.registryConfigured ?? true,
      declined: opts.declined,
    };
    const outcomes: Record<string, ActionOutcome> = {};
    for (let i = 0; i < 200; i++) {
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
