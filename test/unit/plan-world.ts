/**
 * An in-memory world that executes the CocoonSet pass's (`reconcilePass`) actions, for the pure-core tests.
 * It fakes exactly one boundary, the action/outcome interface the CocoonSet workflow's activities
 * implement, with the semantics of the real API: synchronous pod deletes, AlreadyExists on duplicate
 * creates, NotFound, merge-patch annotations with `null` deleting a key, rejection of an empty patch, a
 * separate status write.
 */
import type { V1Pod } from '@kubernetes/client-node';
import type { CocoonHibernation, CocoonSet } from '../../src/api/types.js';
import type { NamespaceLimits } from '../../src/cocoonset/admission.js';
import {
  type ActionOutcome,
  type PassAction,
  type PassEnd,
  type PassInput,
  reconcilePass,
} from '../../src/cocoonset/plan.js';
import { nodesMatch } from '../support/nodes.js';

function clone<T>(v: T): T {
  return JSON.parse(JSON.stringify(v)) as T;
}

/** The in-memory cluster + registry + recorder the pass's actions run against. */
export class PlanWorld {
  cs: CocoonSet;
  readonly pods = new Map<string, V1Pod>();
  crs: CocoonHibernation[] = [];
  /** Batches of I/O the passes asked for so far (each one workflow activity round), all passes. */
  steps = 0;
  /** Those batches, in order: action ids, and whether they ran concurrently (with at most how many in flight). */
  readonly batches: { ids: string[]; concurrent: boolean; maxConcurrency: number }[] = [];
  /** `"<vm>:<tag>"` present in the registry. */
  readonly tags = new Set<string>();
  /** VM name → the image its `:hibernate` snapshot records ('' when unset). */
  readonly snapshotImages = new Map<string, string>();
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
  /** Registry tags the passes dropped (`<vm>:hibernate`), in order. */
  readonly droppedTags: string[] = [];
  /** When set, every `dropHibernateTag` fails with this message (a registry refusing DELETEs). */
  dropError?: string;
  /** Pods named by those drops as restored by the set's own wake (`wokenPod`), in order. */
  readonly wokenBySet: string[] = [];
  /** When set, every apiserver read of a pod (`readPod`) fails with this text. */
  readPodError?: string;
  /**
   * The labels of each Node, for `anyNode`; undefined: every selector matches (a cluster with every node
   * the tests' sets ask for).
   */
  nodes?: Record<string, string>[];
  /** Clone-mode base images in the registry (`repo:tag`); undefined: every image the tests name. */
  images?: Set<string>;
  /**
   * The generation the apiserver holds for the set (`readGeneration`); undefined: the world's own. A test
   * sets it to stage an edit that landed after the pass read the set.
   */
  storedGeneration?: number;
  /** When set, every Node List (`anyNode`) fails with this text. */
  nodeListError?: string;
  /** The namespace's LimitRanges and ResourceQuotas (`readNamespaceLimits`); default: none. */
  limits: NamespaceLimits = { limitRanges: [], quotas: [] };
  /** When set, every `readNamespaceLimits` fails with this text. */
  limitsError?: string;
  /** How many times the passes read the namespace's limits. */
  limitReads = 0;
  /** The set's desires sent to VM workflows (`askVM`), in order; the world changes nothing for them. */
  readonly asks: { pod: string; desire: string; keepTag?: true }[] = [];

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
        if (
          a.ifGeneration !== undefined &&
          a.ifGeneration !== (this.storedGeneration ?? this.cs.metadata.generation ?? 0)
        )
          return { kind: 'stale' };
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
      case 'readGeneration':
        return { kind: 'generation', generation: this.storedGeneration ?? this.cs.metadata.generation ?? 0 };
      case 'anyNode':
        if (this.nodeListError !== undefined) return { kind: 'error', message: this.nodeListError };
        return { kind: 'nodes', any: nodesMatch(this.nodes, a.labelSelector) };
      case 'listHibernations':
        this.lists++;
        return { kind: 'hibernations', items: clone(this.crs) };
      case 'readNamespaceLimits':
        this.limitReads++;
        if (this.limitsError !== undefined) return { kind: 'error', message: this.limitsError };
        return { kind: 'limits', limits: clone(this.limits) };
      case 'probeImage':
        this.probes.push(`${a.repo}:${a.tag}`);
        if (this.probeError !== undefined) return { kind: 'error', message: this.probeError };
        return { kind: 'probe', present: this.images === undefined || this.images.has(`${a.repo}:${a.tag}`) };
      case 'probeHibernate':
        this.probes.push(a.vmName);
        if (this.probeError !== undefined) return { kind: 'error', message: this.probeError };
        return { kind: 'probe', present: this.tags.has(`${a.vmName}:hibernate`) };
      case 'readSnapshotImage':
        this.probes.push(`read ${a.vmName}`);
        if (this.probeError !== undefined) return { kind: 'error', message: this.probeError };
        return {
          kind: 'snapshot',
          present: this.tags.has(`${a.vmName}:hibernate`),
          image: this.snapshotImages.get(a.vmName) ?? '',
        };
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
      case 'askVM':
        this.asks.push({ pod: a.pod, desire: a.desire, ...(a.keepTag ? { keepTag: true } : {}) });
        return { kind: 'ok' };
      case 'readPod': {
        if (this.readPodError !== undefined) return { kind: 'error', message: this.readPodError };
        const p = this.pods.get(a.pod);
        return p ? { kind: 'pod', pod: clone(p) } : { kind: 'notFound' };
      }
      case 'dropHibernateTag':
        if (this.dropError !== undefined) return { kind: 'error', message: this.dropError };
        this.droppedTags.push(`${a.vmName}:hibernate`);
        if (a.wokenPod) this.wokenBySet.push(a.wokenPod);
        this.tags.delete(`${a.vmName}:hibernate`);
        return { kind: 'ok' };
    }
  }

  /**
   * Runs one pass: the cache view is a snapshot of the world at the start (or `view` pods when given,
   * to model a stale cache), then actions run until the pass ends. A flow offered the pass (migration,
   * wake) takes it unless `declined` says it answers "not handled". Every action id runs at most once per
   * pass (a second run is I/O the pass should not repeat, e.g. a second List).
   */
  async pass(
    opts: {
      nowMs?: number;
      registryConfigured?: boolean;
      view?: V1Pod[];
      declined?: { migration?: boolean; wake?: boolean };
      subAgentsWaitForHibernatingMain?: boolean;
      batchPodLoops?: boolean;
      setDesires?: boolean;
      seatRelease?: boolean;
      migration?: boolean;
      tagDroppedFor?: Record<string, true>;
      deletedVMsDropTag?: boolean;
      wakeWaitsForHibernateRound?: boolean;
      releaseSkipsUnbound?: boolean;
      waitsForTerminatingMain?: boolean;
      migrationWaitsForQuiesce?: boolean;
      migrationFailureKeepsPhase?: boolean;
      migrationFollowsPin?: boolean;
      migrationShowsConflict?: boolean;
      validatesPin?: boolean;
      createWaitsForSpentTag?: boolean;
      mainRestoresWaitForSpentTag?: boolean;
      spentTagOutlivesCR?: boolean;
      driftWaitsForSpentTag?: boolean;
      capsSubAgents?: boolean;
      hibernatingMainHoldsMembers?: boolean;
      toolboxRecreateBackoff?: boolean;
      validatesStaticToolboxes?: boolean;
      validatesVMRules?: boolean;
      waitsForANode?: boolean;
      blockKeepsFlowPhase?: boolean;
      validatesMorePodFields?: boolean;
      releasedWakeFollowsPlacement?: boolean;
      driftWaitsForCloneImage?: boolean;
      unboundMainFollowsPin?: boolean;
      retainSkipsUnbound?: boolean;
      subAgentsFollowMainClass?: boolean;
      deletesCheckGeneration?: boolean;
      driftComparesAdmittedResources?: boolean;
      driftChecksNamespaceLimits?: boolean;
      pendingMainNamesMissingNode?: boolean;
      deleteReadsGeneration?: boolean;
      statusDiffFollowsOwnWrites?: boolean;
      restoresCheckSnapshotImage?: boolean;
      subAgentsRestoreSuspendState?: boolean;
      retriesSpentDropsOfMembers?: boolean;
      dropsTagsOfRemovedGone?: boolean;
      spentBySet?: Record<string, string>;
      desireConflicts?: Record<string, string>;
      hibernateAsked?: Record<string, string>;
      wakesOpen?: Record<string, true>;
    } = {},
  ): Promise<PassEnd> {
    const input: PassInput = {
      cs: clone(this.cs),
      pods: clone(opts.view ?? [...this.pods.values()]),
      nowMs: opts.nowMs ?? Date.parse('2026-05-14T01:00:00Z'),
      registryConfigured: opts.registryConfigured ?? true,
      subAgentsWaitForHibernatingMain: opts.subAgentsWaitForHibernatingMain ?? true,
      batchPodLoops: opts.batchPodLoops ?? true,
      setDesires: opts.setDesires ?? true,
      seatRelease: opts.seatRelease ?? true,
      migration: opts.migration ?? true,
      tagDroppedFor: opts.tagDroppedFor,
      deletedVMsDropTag: opts.deletedVMsDropTag ?? true,
      wakeWaitsForHibernateRound: opts.wakeWaitsForHibernateRound ?? true,
      releaseSkipsUnbound: opts.releaseSkipsUnbound ?? true,
      waitsForTerminatingMain: opts.waitsForTerminatingMain ?? true,
      migrationWaitsForQuiesce: opts.migrationWaitsForQuiesce ?? true,
      migrationFailureKeepsPhase: opts.migrationFailureKeepsPhase ?? true,
      migrationFollowsPin: opts.migrationFollowsPin ?? true,
      migrationShowsConflict: opts.migrationShowsConflict ?? true,
      validatesPin: opts.validatesPin ?? true,
      createWaitsForSpentTag: opts.createWaitsForSpentTag ?? true,
      mainRestoresWaitForSpentTag: opts.mainRestoresWaitForSpentTag ?? true,
      spentTagOutlivesCR: opts.spentTagOutlivesCR ?? true,
      driftWaitsForSpentTag: opts.driftWaitsForSpentTag ?? true,
      capsSubAgents: opts.capsSubAgents ?? true,
      hibernatingMainHoldsMembers: opts.hibernatingMainHoldsMembers ?? true,
      toolboxRecreateBackoff: opts.toolboxRecreateBackoff ?? true,
      validatesStaticToolboxes: opts.validatesStaticToolboxes ?? true,
      validatesVMRules: opts.validatesVMRules ?? true,
      waitsForANode: opts.waitsForANode ?? true,
      blockKeepsFlowPhase: opts.blockKeepsFlowPhase ?? true,
      validatesMorePodFields: opts.validatesMorePodFields ?? true,
      releasedWakeFollowsPlacement: opts.releasedWakeFollowsPlacement ?? true,
      driftWaitsForCloneImage: opts.driftWaitsForCloneImage ?? true,
      unboundMainFollowsPin: opts.unboundMainFollowsPin ?? true,
      retainSkipsUnbound: opts.retainSkipsUnbound ?? true,
      subAgentsFollowMainClass: opts.subAgentsFollowMainClass ?? true,
      deletesCheckGeneration: opts.deletesCheckGeneration ?? true,
      driftComparesAdmittedResources: opts.driftComparesAdmittedResources ?? true,
      driftChecksNamespaceLimits: opts.driftChecksNamespaceLimits ?? true,
      pendingMainNamesMissingNode: opts.pendingMainNamesMissingNode ?? true,
      deleteReadsGeneration: opts.deleteReadsGeneration ?? true,
      statusDiffFollowsOwnWrites: opts.statusDiffFollowsOwnWrites ?? true,
      restoresCheckSnapshotImage: opts.restoresCheckSnapshotImage ?? true,
      subAgentsRestoreSuspendState: opts.subAgentsRestoreSuspendState ?? true,
      retriesSpentDropsOfMembers: opts.retriesSpentDropsOfMembers ?? true,
      dropsTagsOfRemovedGone: opts.dropsTagsOfRemovedGone ?? true,
      spentBySet: opts.spentBySet,
      desireConflicts: opts.desireConflicts,
      hibernateAsked: opts.hibernateAsked,
      wakesOpen: opts.wakesOpen,
    };
    const ran = new Set<string>();
    return reconcilePass(input, {
      exec: async (actions, concurrent, maxConcurrency) => {
        if (actions.length === 0) throw new Error('the pass asked for an empty batch');
        this.steps++;
        this.batches.push({ ids: actions.map((a) => a.id), concurrent, maxConcurrency });
        return actions.map((a) => {
          if (ran.has(a.id)) throw new Error(`action ${a.id} ran twice in one pass`);
          ran.add(a.id);
          return this.execute(a);
        });
      },
      offer: async (flow) => (opts.declined?.[flow] ? undefined : { kind: 'delegate', flow }),
    });
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

/** The `done` end of a pass, failing the test if it delegated. */
export function done(step: PassEnd): Extract<PassEnd, { kind: 'done' }> {
  if (step.kind !== 'done') throw new Error(`expected done, got delegate ${step.flow}`);
  return step;
}
