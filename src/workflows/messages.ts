/**
 * The protocol of the entity workflows: names of workflow types, signals and queries. Importable from
 * workflow code and from clients (the watcher, tests, the CLI docs) alike.
 */
import { defineQuery, defineSignal } from '@temporalio/workflow';
import type { HibernationObservation, PodObservation } from '../api/observe.js';

/** Workflow type name of the per-VM entity workflow (id: vmWorkflowId(ns, pod)). */
export const VM_WORKFLOW_TYPE = 'vmWorkflow';
/** Workflow type name of the per-CocoonSet entity workflow (id: cocoonSetWorkflowId(ns, name)). */
export const COCOONSET_WORKFLOW_TYPE = 'cocoonSetWorkflow';

/**
 * Patch ids added since runs stopped asking `patched()` (start argument `patches`, VMWorkflowInput), oldest
 * first; append only, never reorder or remove. A run started with `patches: N` takes the first N of them,
 * one started with `patches: 'all'` (versions of 2026-12-03 to 2026-12-04b) none: the others wait for the
 * run's next continue-as-new, which starts it with this version's count. A run in flight that took a branch
 * its recorded history did not take would fail its replay on every workflow task.
 */
export const LEVELED_PATCHES: readonly string[] = [
  'main-restores-wait-for-spent-tag',
  'spent-tag-warning-event',
  'spent-tag-outlives-cr',
  'drift-waits-for-spent-tag',
  'set-spent-tag-holds',
  'caps-sub-agents',
  'hibernating-main-holds-members',
  'toolbox-recreate-backoff',
  'validates-static-toolboxes',
  'validates-vm-rules',
  'waits-for-a-node',
  'blocked-pass-keeps-flow-phase',
  'validates-more-pod-fields',
  'released-wake-follows-placement',
  'drift-waits-for-clone-image',
  'unbound-main-follows-pin',
  'retain-suspend-skips-unbound',
  'sub-agents-follow-main-class',
  'deletes-check-generation',
  'drift-compares-admitted-resources',
  'drift-checks-namespace-limits',
  'pending-main-names-missing-node',
  'delete-reads-generation',
  'status-diff-follows-own-writes',
  'finalizer-rides-first-write',
  'refuses-unmanaged-hibernate',
  'failed-hibernate-round-keeps-vm',
  'failed-main-round-keeps-phase',
  'failed-round-holds-vm',
  'replaced-main-keeps-snapshot',
  'set-wake-outlasts-deadline',
  'set-wake-outlives-pod',
  'restores-check-snapshot-image',
  'sub-agents-restore-suspend-state',
  'vm-tells-set-spent-tag',
  'removed-gone-drops-tag',
  'sub-agents-restore-open-wake',
  'set-wake-waits-for-cr',
];

/**
 * The run modes every start and continue-as-new of this version sets, for both entity workflows (each is
 * described on VMWorkflowInput): Kubernetes I/O as local activities, identity search attributes set at the
 * start, every patched branch of this version taken without asking `patched()` (`patches`: the count of
 * LEVELED_PATCHES).
 */
export const RUN_MODES = {
  kubeIO: 'local',
  searchAttributes: 'identity',
  patches: LEVELED_PATCHES.length,
} as const;

/**
 * Whether a run started with start argument `patches` takes the branch behind patch `id`: `true`/`false`, or
 * `'ask'` when only `patched(id)` can say (a run started before `patches` existed: its history holds the
 * markers where it asked). Pure; entity.ts `on` is the workflow-side caller.
 */
export function patchDecision(patches: 'all' | number | undefined, id: string): boolean | 'ask' {
  if (patches === undefined) return 'ask';
  const i = LEVELED_PATCHES.indexOf(id);
  return i < 0 || i < (patches === 'all' ? 0 : patches);
}

/** Start argument of the VM workflow. `carried` is the state handed over by continue-as-new. */
export interface VMWorkflowInput {
  namespace: string;
  pod: string;
  carried?: unknown;
  /** Continue as new past this many history events (default 5,000; tests lower it). */
  historyLimit?: number;
  /**
   * `local`: the run's Kubernetes reads and writes are local activities (inside the workflow task, one
   * marker event each). Every run this version starts says so; a run an older version started (the field
   * absent) keeps regular activities, which its recorded history holds, until it continues as new.
   */
  kubeIO?: 'local';
  /**
   * `identity`: the start set the identity search attributes (CocoonNamespace, CocoonKind, CocoonVMName
   * when known) and the run upserts one only when it changes, with no CocoonPhase (see
   * src/workflows/search-attributes.ts). Every run this version starts says so, continue-as-new too; a run
   * an older version started (the field absent) upserts all four, CocoonPhase at every change, until it
   * continues as new.
   */
  searchAttributes?: 'identity';
  /**
   * The run takes patched branches without asking `patched()` (entity.ts `on`, `patchDecision`): a number
   * N, every branch but those of LEVELED_PATCHES after the first N; `all` (runs started 2026-12-03 to
   * 2026-12-04b), every branch but those of LEVELED_PATCHES. Every run this version starts sets N to this
   * version's count, continue-as-new too. Absent (a run an older version started): it asks `patched()` where
   * each branch is, as its recorded history has the markers there, until it continues as new.
   */
  patches?: 'all' | number;
  /**
   * The VM's world as the watcher's caches hold it when it starts the workflow: the pod and every
   * CocoonHibernation targeting it. With it the first round acts without a re-read; without it (a start by
   * the CocoonSet workflow, the watcher's caches not listed yet, continue-as-new) it re-reads.
   */
  world?: VMWorldObservation;
}

/** The pod and the CocoonHibernations targeting it, as one observation (see VMWorkflowInput.world). */
export interface VMWorldObservation {
  pod: PodObservation;
  hibernations: HibernationObservation[];
}

/** The start argument of a VM workflow this version starts for pod `<namespace>/<pod>`. */
export function vmWorkflowInput(namespace: string, pod: string, world?: VMWorldObservation): VMWorkflowInput {
  const input: VMWorkflowInput = { namespace, pod, ...RUN_MODES };
  return world ? { ...input, world } : input;
}

/** The watcher saw the VM's pod change in a field a gate reads, or disappear (`exists: false`). */
export const podObservedSignal = defineSignal<[PodObservation]>('podObserved');
/**
 * The watcher saw a CocoonHibernation targeting this pod change, or disappear (`exists: false`). `pod` rides
 * along when the CR newly targets the pod (the pod as the watcher's cache holds it), so a running workflow
 * that was not told of its pod's changes (no CR targeted it) learns of it with the same signal.
 */
export const hibernationObservedSignal =
  defineSignal<[HibernationObservation & { pod?: PodObservation }]>('hibernationObserved');
/** Re-read the world now (sent by the watcher after a relist, or by an operator by hand). */
export const resyncSignal = defineSignal('resync');

/** Current state of a VM workflow, for `temporal workflow query --type state`. */
export const vmStateQuery = defineQuery<unknown>('state');

/**
 * What a CocoonSet wants of one of its VMs (docs/cocoonset.md#suspend): `Hibernate` while the set is
 * suspended, `Wake` when it no longer is (un-suspend). Sent by the set's workflow to the pod's VM workflow
 * (signal-with-start), the one writer of the pod's hibernate annotation. `podUID`/`podResourceVersion` are
 * the pod as the set's pass read it: a VM workflow whose own view is older re-reads the pod first.
 */
export interface SetDesire {
  /** The CocoonSet's name (same namespace as the pod). */
  set: string;
  desire: 'Hibernate' | 'Wake';
  /** `metadata.generation` of the set when its pass asked (diagnostics: the `state` query shows it). */
  generation: number;
  podUID?: string;
  podResourceVersion?: string;
  /**
   * The set releases the pod's seat (hibernatePolicy release): the pod is deleted after the hibernate, and
   * the desire (keeping the tag) holds on without it until the set wakes or is deleted.
   */
  release?: boolean;
  /**
   * A `Wake` whose leftover `:hibernate` tag the set drops itself once the VM runs (a migration's in-place
   * wake): the VM workflow leaves the tag, so a wake sends one DELETE.
   */
  keepTag?: boolean;
}

/** A CocoonSet's desire for the VM changed (see SetDesire). */
export const setDesireSignal = defineSignal<[SetDesire]>('setDesire');

/**
 * The answer of a VM workflow to its set's desire, sent to the set's workflow when it changes: `message` set
 * when a CocoonHibernation holds the VM against the set's desire (the set shows it on its status), null when
 * the VM follows the set again.
 */
export interface VMDesireConflict {
  pod: string;
  message: string | null;
}

/** See VMDesireConflict. */
export const vmDesireConflictSignal = defineSignal<[VMDesireConflict]>('vmDesireConflict');

/**
 * A VM workflow tells its set's workflow that the `:hibernate` tag of `vmName` (pod `pod`) is spent
 * (`spent` true: the set's Wake ran the VM and the registry refused the tag's DELETE, which it retries) or
 * no longer (`spent` false: that DELETE went through). While a tag is spent, vk-cocoon would restore a new
 * pod of that VM from it, rolling the VM back: the set creates no such pod until the tag is gone (leveled
 * patch `vm-tells-set-spent-tag`; before, the set did not know, and a main deleted meanwhile was restored
 * from the spent tag).
 */
export interface VMTagSpent {
  pod: string;
  vmName: string;
  spent: boolean;
}

/** See VMTagSpent. */
export const vmTagSpentSignal = defineSignal<[VMTagSpent]>('vmTagSpent');
