/**
 * The CocoonSet entity workflow: one per CocoonSet (`cocoonset/<namespace>/<name>`). It serializes the
 * set's reconcile passes (the controller-runtime work queue's "never one key twice";
 * docs/architecture.md#entity-workflows), holds their durable timers (requeue-after, rebuild backoff, error
 * backoff) and executes each pass's I/O as activities.
 *
 * Protocol: signals cocoonSetObserved / ownedPodObserved (src/watcher/cocoonset-signals.ts), query `state`.
 * The body is a loop: read the CocoonSet and its pods, run `reconcilePass` (src/cocoonset/plan.ts) with
 * its actions as activities, honour its result (requeue, requeue-after or error backoff, as controller-runtime
 * does), sleep until a signal or the next timer; continue as new before the history grows large (events or
 * bytes: a restarted worker replays it); complete when the CocoonSet is gone.
 *
 * Suspend, seat release and migration are decided in the planner (behind the `set-desires`, `seat-release`
 * and `migration` patches); the per-VM hibernate and wake requests go to the pods' VM workflows (`askVM`).
 * Runs recorded before those patches keep the old answers: suspend is logged and ends the pass, migration
 * and the released-seat wake decline ("not handled"). Deletion (docs/cocoonset.md#deletion-and-registry-gc)
 * is implemented below.
 */
import type { V1Pod } from '@kubernetes/client-node';
import {
  allHandlersFinished,
  condition,
  continueAsNew,
  defineQuery,
  log,
  proxyActivities,
  setHandler,
  workflowInfo,
} from '@temporalio/workflow';
import type { CocoonSetActivities } from '../activities/cocoonset.js';
import type { RegistryActivities } from '../activities/registry.js';
import { taskQueues } from '../api/ids.js';
import { Annotations, Finalizers, Tags } from '../api/keys.js';
import { extractAgentSlot, vmNameForPod, vmNameOf } from '../api/pod.js';
import type { CocoonSet } from '../api/types.js';
import { classifyPods, isControlledBy, ownedPods } from '../cocoonset/classify.js';
import {
  type ActionOutcome,
  type DelegatedFlow,
  type PassAction,
  type PassInput,
  type PassResult,
  REQUEUE_WAIT_FOR_MAIN_MS,
  reconcilePass,
  SUB_AGENT_CREATE_CONCURRENCY,
} from '../cocoonset/plan.js';
import { stashedVMNames, vmsHeldByCR } from '../cocoonset/restore.js';
import { snapshotPolicyOf } from '../cocoonset/vmspec.js';
import type { CocoonSetObservation } from '../watcher/cocoonset-signals.js';
import { cocoonSetObservedSignal, ownedPodObservedSignal } from '../watcher/cocoonset-signals.js';
import {
  backoffDelay,
  countSignal,
  errorMessage,
  historyFull,
  isNotFound,
  kubeActivities,
  olderThan,
  on,
  registryActivityOptions,
} from './entity.js';
import { RUN_MODES, vmDesireConflictSignal, vmTagSpentSignal } from './messages.js';
import { publishSearchAttributes, type SearchAttributeMode } from './search-attributes.js';

/** Start argument. `carried` is the state handed over by continue-as-new. */
export interface CocoonSetWorkflowInput {
  namespace: string;
  name: string;
  carried?: unknown;
  /** Continue as new past this many history events (default 5,000; tests lower it). */
  historyLimit?: number;
  /** Continue as new past this many history bytes (default 512 KiB; tests may lower it). */
  historyBytesLimit?: number;
  /** False when no registry is configured: restore is a no-op, migration/wake are off. Default true. */
  registryConfigured?: boolean;
  /**
   * `local`: the run's Kubernetes reads and writes are local activities (inside the workflow task, one
   * marker event each; the registry calls stay regular activities on their own queue). Every run this
   * version starts says so (the watcher's `cocoonSetStart`, continue-as-new); a run an older version
   * started (the field absent) keeps regular activities, which its recorded history holds, until it
   * continues as new. See KubeIO in entity.ts.
   */
  kubeIO?: 'local';
  /**
   * `identity`: the start set the identity search attributes and the run publishes no phase (see
   * src/workflows/search-attributes.ts). Every run this version starts says so; absent in a run an older
   * version started, which upserts all four, CocoonPhase at every change, until it continues as new.
   */
  searchAttributes?: 'identity';
  /** Which patched branches the run takes without asking `patched()`: as VMWorkflowInput `patches`. */
  patches?: 'all' | number;
}

/** Current state of a CocoonSet workflow, for `temporal workflow query --type state`. */
export const cocoonSetStateQuery = defineQuery<unknown>('state');

/** Error backoff of a failed pass: 1 s doubling to 5 min (controller-runtime: 5 ms × 2ⁿ to 1000 s). */
const BACKOFF_BASE_MS = 1_000;
const BACKOFF_MAX_MS = 300_000;
/** `Requeue: true` runs the next pass at once this many times in a row, then backs off (rate limit). */
const IMMEDIATE_REQUEUES = 20;
/** Continue as new past this many history events (well under Temporal's 51,200 limit). */
const MAX_HISTORY_EVENTS = 5_000;
/**
 * Continue as new past this many history bytes. Every pass records the set and its pods as read (~3 KB a
 * pod), so the size grows far faster than the event count, and a worker restart replays each history it
 * resumes: on the e2e stack a 700 KB history took ~2 s to replay alone and 10.6 s next to four others on
 * a loaded machine, past the 10 s workflow task timeout (the task timed out and was retried).
 */
const MAX_HISTORY_BYTES = 512 * 1024;
/** With nothing scheduled, pass again after this long anyway (controller-runtime's default SyncPeriod). */
const FALLBACK_PASS_MS = 10 * 60 * 60 * 1000;
/**
 * Reason of the Warning Event a suspend request gets while the suspend flows are an extension point
 * (not in the reference's wire contract: deliberate, so the request is not silently ignored).
 */
export const SUSPEND_NOT_IMPLEMENTED = 'SuspendNotImplemented';

/** Reason of the Warning Event a failed pass records on the CocoonSet (ours; the reference logs only). */
export const RECONCILE_FAILED = 'ReconcileFailed';

/** Workflow state; carried across continue-as-new. Plain JSON. */
export interface CocoonSetState {
  namespace: string;
  name: string;
  /** Latest observations from the watcher (the pass itself re-reads the objects). */
  csObs?: CocoonSetObservation;
  /**
   * uid and resourceVersion of the latest observation per owned pod (to drop stale signals). Only these:
   * the state is carried by continue-as-new, one payload, and a set may own thousands of pods.
   */
  pods: Record<string, { uid?: string; resourceVersion?: string }>;
  /**
   * The last pass failed and `nextPassAt` is its error backoff: until then only a change of the
   * CocoonSet (a spec edit, a deletion) starts a pass early; pod events wait for the timer, so a failure
   * that every pass repeats cannot loop at the pace of the set's pod events.
   */
  failing?: boolean;
  /** Passes run so far (event keys). */
  passes: number;
  /** Consecutive failed or `Requeue: true` passes (the rate limiter's per-item counter). */
  failures: number;
  /** Epoch ms of a requested next pass (requeue-after / backoff); none = wait for a signal. */
  nextPassAt?: number;
  /** How the last finished pass ended; `pass` is its number (a query during a pass sees `passes` ahead). */
  lastResult?: PassResult & { delegated?: DelegatedFlow; pass?: number };
  /** Roll-up shown in the query (and, in a run an older version started, the CocoonPhase attribute). */
  phase?: string;
  mainVM?: string;
  /** See VMState.published in vm.ts: set only by a run an older version started. */
  published?: string;
  /** A signal not yet acted on when the run continued as new: the next run passes at once. */
  pendingPass?: boolean;
  /** The pod count the deletion flow last logged it waits for: it logs again only when the count changes. */
  deletionWaitLogged?: number;
  /** Signals handled so far (all runs), and the newest resourceVersion they carried: the query's barrier. */
  signals?: number;
  lastSignalRV?: string;
  /** `signals` when the last pass began (see LOCAL_PASS_MAX_SIGNALS). */
  signalsAtLastPass?: number;
  /** Per pod, why its VM workflow does not follow the set's desire (`vmDesireConflict`). */
  desireConflicts?: Record<string, string>;
  /**
   * Pods (name → uid asked about) whose VM workflow was asked to hibernate and not asked to wake since:
   * un-suspend asks them to wake even when their annotation was never written (a CocoonHibernation held the
   * VM awake, or the un-suspend came first), so no VM workflow keeps a stale desire. Also (uid '') a main
   * replaced with its `:hibernate` tag kept, or a sub-agent re-created restoring its open wake's tag
   * (`PassEnd.wakeOwed`): its next pod is asked to wake.
   */
  hibernateAsked?: Record<string, string>;
  /** Pods whose tag the set's own wake dropped since it last asked their VM workflow (`PassInput.tagDroppedFor`). */
  tagDroppedFor?: Record<string, true>;
  /**
   * Pods (name → VM name) whose VM the set's own wake (released seat, migration) ran and whose `:hibernate`
   * tag's DELETE then failed: the tag is spent (`PassInput.spentBySet`). Cleared by that tag's DELETE.
   */
  spentBySet?: Record<string, string>;
  /**
   * Pods whose VM workflow the un-suspend asked to wake and that has not yet told the set their VM's
   * `:hibernate` tag is gone (`PassInput.wakesOpen`): a sub-agent among them whose pod went meanwhile is
   * created restoring that tag. Closed per pod by that VM workflow's `vmTagSpent` with `spent: false`, by the
   * set's own DELETE of that tag, by a hibernate ask, or by the set's deletion.
   */
  wakesOpen?: Record<string, true>;
}

/**
 * `record` with `key` set to `value`, or without `key` for undefined; undefined when nothing is left (so an
 * empty record is not carried across continue-as-new). A key already there keeps its place: the order of a
 * record's keys is the order of the commands a pass built from it, which a replay must see unchanged.
 */
function withEntry<V>(
  record: Readonly<Record<string, V>> | undefined,
  key: string,
  value: NoInfer<V> | undefined,
): Record<string, V> | undefined {
  const out = { ...(record ?? {}) };
  if (value === undefined) delete out[key];
  else out[key] = value;
  return Object.keys(out).length > 0 ? out : undefined;
}

/**
 * The activities one run calls: the Kubernetes reads and writes (local activities in a run started with
 * `kubeIO: 'local'`, else regular ones: see CocoonSetWorkflowInput.kubeIO), the same as regular activities
 * for rounds too large to run locally (`bulk`, see LOCAL_ROUND_MAX), and the registry calls, always
 * regular activities on their own task queue, whose worker slots are the concurrency knob
 * (COCOONSET_CONCURRENCY).
 *
 * Every Kubernetes activity of the set is one short API round trip or a few (a page of pods, a create, a
 * patch, a finalizer update retried on conflict at most 5 times, an Event, a signal-with-start to a VM
 * workflow): none polls or waits, so each fits the local activity's 30 s start-to-close as it fitted the
 * regular one's. What waits (deletion for its pods, requeues, backoff) waits on durable timers between
 * passes, never inside an activity.
 */
interface CocoonSetIO {
  kube: CocoonSetActivities;
  bulk: CocoonSetActivities;
  registry: RegistryActivities;
  /** The run's start argument `patches` (see entity.ts `on`). */
  patches: 'all' | number | undefined;
}

/**
 * Most Kubernetes calls one round of a pass (one `exec` of the planner, the deletion's pod deletes) makes
 * as local activities. A larger round (a bring-up, scale-down or drift of many pods, a large set's
 * deletion) runs them as regular activities (`bulk`): local activities hold the workflow task open until
 * they finish, and the signals the round's own writes echo back meanwhile (several per pod) are buffered
 * by the server, which fails the open task once more than 100 are (`history.maximumBufferedEventsBatch`).
 * A 60-pod set lost its bring-up and scale-down tasks that way, and a retry then failed in the SDK core
 * with "Nondeterminism error: Missing associated machine for LocalActivity" (e2e cocoonset-faults (b)).
 * A regular round ends the task once scheduled. Deterministic: the size comes from what the pass read.
 */
const LOCAL_ROUND_MAX = 4;

function cocoonSetIO(input: CocoonSetWorkflowInput): CocoonSetIO {
  return {
    patches: input.patches,
    kube: kubeActivities<CocoonSetActivities>(input.kubeIO, 3),
    bulk: kubeActivities<CocoonSetActivities>(undefined, 3),
    registry: proxyActivities<RegistryActivities>(
      registryActivityOptions(taskQueues(workflowInfo().taskQueue).cocoonSetRegistry),
    ),
  };
}

/**
 * Local activities only while a set is small and quiet: a Kubernetes call of a pass runs as a regular
 * activity when, at the call, the set knows more than LOCAL_SET_MAX_PODS pods or more than
 * LOCAL_PASS_MAX_SIGNALS signals came in since the previous pass began. A busy set's pod signals (vk-cocoon's
 * status updates, the echoes of the pass's own writes) can pour in faster than a workflow task of local
 * activities ends: past 100 buffered events the server fails that task
 * (`WORKFLOW_TASK_FAILED_CAUSE_FORCE_CLOSE_COMMAND`), and the SDK's retry then resolves the local
 * activities it already ran after the new signals, where a replay of the history delivers those signals
 * first. The history it records then does not replay ("Nondeterminism error: Missing associated machine
 * for LocalActivity", e2e cocoonset-faults (b): a 60-pod set on a fast Temporal server). A task of regular
 * activities ends once they are scheduled, so nothing buffers for long. Deterministic: both counts change
 * only with the recorded signals, which a replay delivers where the run saw them.
 */
export const LOCAL_SET_MAX_PODS = 8;
/** See LOCAL_SET_MAX_PODS. */
export const LOCAL_PASS_MAX_SIGNALS = 8;
/**
 * Tag deletes a set's deletion keeps scheduled at once. The registry worker's slots (COCOONSET_CONCURRENCY,
 * default 4) bound how many run; more lanes than slots only keep the queue full.
 */
const DELETION_GC_LANES = 16;

/**
 * The activities of one pass: `io`, except that each Kubernetes call of `io.kube` picks, when it is made,
 * the regular activity in place of the local one if the set is large (more than LOCAL_SET_MAX_PODS known
 * pods) or busy (more than LOCAL_PASS_MAX_SIGNALS signals since the previous pass began), behind the
 * `large-set-regular-io` patch. Records this pass's start in `state.signalsAtLastPass`.
 */
function ioForPass(state: CocoonSetState, io: CocoonSetIO): CocoonSetIO {
  const since = state.signalsAtLastPass ?? 0;
  state.signalsAtLastPass = state.signals ?? 0;
  const busy = () =>
    (Object.keys(state.pods).length > LOCAL_SET_MAX_PODS ||
      (state.signals ?? 0) - since > LOCAL_PASS_MAX_SIGNALS) &&
    on(io, 'large-set-regular-io');
  const kube = new Proxy(io.kube, {
    get: (local, name) => {
      const pick = (busy() ? io.bulk : local) as unknown as Record<string | symbol, unknown>;
      return pick[name];
    },
  });
  return { ...io, kube };
}

/** The Kubernetes activities for a round of `calls` calls: local up to LOCAL_ROUND_MAX, else regular. */
function kubeForRound(io: CocoonSetIO, calls: number): CocoonSetActivities {
  return calls > LOCAL_ROUND_MAX ? io.bulk : io.kube;
}

/** Entity workflow for one CocoonSet. See the module comment. */
export async function cocoonSetWorkflow(input: CocoonSetWorkflowInput): Promise<void> {
  const state: CocoonSetState = (input.carried as CocoonSetState | undefined) ?? {
    namespace: input.namespace,
    name: input.name,
    pods: {},
    passes: 0,
    failures: 0,
  };
  const io = cocoonSetIO(input);
  // Every run starts with a pass (observations are never trusted across runs), except a run carried over
  // during an error backoff: its pass is the backoff timer's, else a failure that outgrows the history
  // bound would pass, continue as new and pass again in a loop.
  let dirty =
    state.pendingPass === true ||
    !(state.failing && state.nextPassAt !== undefined && state.nextPassAt > Date.now());
  state.pendingPass = undefined;
  /** True while a pass runs (between its first read and its result), for the `state` query. */
  let passing = false;
  /** A run continues as new only after a pass of its own, so runs can never chain without work. */
  let passedThisRun = false;

  setHandler(cocoonSetObservedSignal, (obs) => {
    countSignal(state, obs.resourceVersion);
    if (state.csObs?.uid === obs.uid && olderThan(obs.resourceVersion, state.csObs?.resourceVersion)) return;
    state.csObs = obs;
    dirty = true;
  });
  setHandler(ownedPodObservedSignal, (obs) => {
    countSignal(state, obs.resourceVersion);
    const cur = state.pods[obs.name];
    if (cur && cur.uid === obs.uid && olderThan(obs.resourceVersion, cur.resourceVersion)) return;
    if (obs.exists) state.pods[obs.name] = { uid: obs.uid, resourceVersion: obs.resourceVersion };
    else delete state.pods[obs.name];
    if (!state.failing) dirty = true;
  });
  setHandler(vmDesireConflictSignal, ({ pod, message }) => {
    countSignal(state, undefined);
    state.desireConflicts = withEntry(state.desireConflicts, pod, message ?? undefined);
    dirty = true;
  });
  // A VM workflow's Wake left its tag spent (or no longer): the set holds that VM's pod creates meanwhile
  // (`spentBySet`, as for its own wake's failed DELETE).
  setHandler(vmTagSpentSignal, ({ pod, vmName, spent }) => {
    countSignal(state, undefined);
    const spentBefore = state.spentBySet;
    if (spent) state.spentBySet = withEntry(state.spentBySet, pod, vmName);
    else if (state.spentBySet?.[pod] === vmName)
      state.spentBySet = withEntry(state.spentBySet, pod, undefined);
    if (!spent && on(io, 'sub-agents-restore-open-wake')) {
      // The tag is gone: the wake asked of this pod is done. That alone changes no pass (a later create
      // reads it), so every VM of an un-suspend saying so costs the set no pass.
      state.wakesOpen = withEntry(state.wakesOpen, pod, undefined);
      if (state.spentBySet === spentBefore) return;
    }
    dirty = true;
  });
  setHandler(cocoonSetStateQuery, () =>
    describe(state, passing, dirty || (state.nextPassAt !== undefined && state.nextPassAt <= Date.now())),
  );

  for (;;) {
    const due = state.nextPassAt !== undefined && state.nextPassAt <= Date.now();
    if (dirty || due) {
      dirty = false;
      state.nextPassAt = undefined;
      passing = true;
      passedThisRun = true;
      const gone = await runPass(state, input, io).finally(() => {
        passing = false;
      });
      publish(state, input.searchAttributes);
      if (gone) {
        await condition(allHandlersFinished);
        if (!dirty) return; // the CocoonSet is gone
        continue; // a signal came in meanwhile (a re-created set?): look again
      }
      continue;
    }
    if (
      passedThisRun &&
      historyFull(input.historyLimit ?? MAX_HISTORY_EVENTS, input.historyBytesLimit ?? MAX_HISTORY_BYTES)
    ) {
      await condition(allHandlersFinished);
      // A signal not yet acted on does not hold the continue-as-new back (it is carried as `pendingPass`):
      // waiting for a quiet moment starved it while a large pass's own writes kept echoing back, and the
      // history grew past 20,000 events (a 1000-pod scale-down), too long to replay under load.
      if (!dirty) await continueAsNew<typeof cocoonSetWorkflow>({ ...input, ...RUN_MODES, carried: state });
      else if (on(io, 'continue-as-new-while-dirty'))
        await continueAsNew<typeof cocoonSetWorkflow>({
          ...input,
          ...RUN_MODES,
          carried: { ...state, pendingPass: true },
        });
    }
    const at = state.nextPassAt;
    const signalled = await condition(
      () => dirty,
      at === undefined ? FALLBACK_PASS_MS : Math.max(1, at - Date.now()),
    );
    if (!signalled && at === undefined) dirty = true; // the slow fallback re-read
  }
}

/**
 * One reconcile (docs/cocoonset.md#a-pass-in-order): read, drive the planner, record the result and schedule
 * the next pass. Returns true when the CocoonSet is gone (the workflow completes).
 */
async function runPass(
  state: CocoonSetState,
  input: CocoonSetWorkflowInput,
  allIO: CocoonSetIO,
): Promise<boolean> {
  state.passes++;
  const io = ioForPass(state, allIO);
  let result: PassResult & { delegated?: DelegatedFlow; finalizerRemoved?: true };
  let cs: CocoonSet | undefined;
  try {
    const world = await readWorld(io.kube, state.namespace, state.name);
    if (!world.cs) {
      log.info('cocoonset gone; workflow completes', { namespace: state.namespace, name: state.name });
      return true;
    }
    cs = world.cs;
    result = await drive(state, input, world.cs, world.pods, io);
    if (result.finalizerRemoved) {
      log.info('cocoonset finalizer removed; workflow completes', {
        namespace: state.namespace,
        name: state.name,
      });
      return true;
    }
  } catch (err) {
    result = { requeue: false, requeueAfterMs: 0, error: errorMessage(err) };
  }
  state.lastResult = { ...result, pass: state.passes };
  if (result.error !== undefined) {
    log.warn('cocoonset pass failed', { namespace: state.namespace, name: state.name, error: result.error });
    // The user sees it on the CocoonSet (kubectl describe), not only in our log: a folded Warning Event.
    // Not in the reference, which only returns the error (deliberate: bad input gets a visible error).
    if (cs) {
      await execute(
        state,
        cs,
        {
          id: `event:${RECONCILE_FAILED}`,
          type: 'event',
          eventType: 'Warning',
          reason: RECONCILE_FAILED,
          message: result.error,
        },
        io,
      );
    }
    state.failures++;
    state.failing = true;
    state.nextPassAt = Date.now() + backoffDelay(state.failures, BACKOFF_BASE_MS, BACKOFF_MAX_MS);
  } else if (result.requeue) {
    state.failing = false;
    state.failures++;
    state.nextPassAt =
      Date.now() +
      (state.failures <= IMMEDIATE_REQUEUES
        ? 0
        : backoffDelay(state.failures - IMMEDIATE_REQUEUES, BACKOFF_BASE_MS, BACKOFF_MAX_MS));
  } else {
    state.failing = false;
    state.failures = 0;
    state.nextPassAt = result.requeueAfterMs > 0 ? Date.now() + result.requeueAfterMs : undefined;
  }
  return false;
}

/**
 * The CocoonSet and all its pods (compact summaries), read page by page so that no activity result
 * approaches Temporal's payload limit however many pods the set has (src/activities/cocoonset.ts).
 */
async function readWorld(
  kube: CocoonSetActivities,
  namespace: string,
  name: string,
): Promise<{ cs: CocoonSet | null; pods: V1Pod[] }> {
  const first = await kube.cocoonSetReadWorld({ namespace, name });
  const pods = first.pods;
  for (let token = first.continue; first.cs && token; ) {
    const page = await kube.cocoonSetListPods({ namespace, name, continue: token });
    pods.push(...page.pods);
    token = page.continue;
  }
  return { cs: first.cs, pods };
}

/** Runs one pass of the planner (src/cocoonset/plan.ts), its actions as activities. */
async function drive(
  state: CocoonSetState,
  input: CocoonSetWorkflowInput,
  cs: CocoonSet,
  pods: PassInput['pods'],
  io: CocoonSetIO,
): Promise<PassResult & { delegated?: DelegatedFlow; finalizerRemoved?: true }> {
  const passInput: PassInput = {
    cs,
    pods,
    nowMs: Date.now(),
    registryConfigured: input.registryConfigured ?? true,
    subAgentsWaitForHibernatingMain: on(io, 'sub-agents-wait-for-hibernating-main'),
    batchPodLoops: on(io, 'batch-pod-loops'),
    setDesires: on(io, 'set-desires'),
    seatRelease: on(io, 'seat-release'),
    migration: on(io, 'migration'),
    deletedVMsDropTag: on(io, 'deleted-vms-drop-tag'),
    wakeWaitsForHibernateRound: on(io, 'set-wake-waits-for-hibernate-round'),
    releaseSkipsUnbound: on(io, 'release-skips-unbound'),
    waitsForTerminatingMain: on(io, 'waits-for-terminating-main'),
    migrationWaitsForQuiesce: on(io, 'migration-waits-for-quiesce'),
    migrationFailureKeepsPhase: on(io, 'migration-failure-keeps-phase'),
    migrationFollowsPin: on(io, 'migration-follows-pin'),
    migrationShowsConflict: on(io, 'migration-shows-conflict'),
    validatesPin: on(io, 'validates-pin'),
    createWaitsForSpentTag: on(io, 'create-waits-for-spent-tag'),
    mainRestoresWaitForSpentTag: on(io, 'main-restores-wait-for-spent-tag'),
    spentTagOutlivesCR: on(io, 'spent-tag-outlives-cr'),
    driftWaitsForSpentTag: on(io, 'drift-waits-for-spent-tag'),
    spentBySet: on(io, 'set-spent-tag-holds') ? state.spentBySet : undefined,
    wakesOpen: on(io, 'sub-agents-restore-open-wake') ? state.wakesOpen : undefined,
    capsSubAgents: on(io, 'caps-sub-agents'),
    hibernatingMainHoldsMembers: on(io, 'hibernating-main-holds-members'),
    toolboxRecreateBackoff: on(io, 'toolbox-recreate-backoff'),
    validatesStaticToolboxes: on(io, 'validates-static-toolboxes'),
    validatesVMRules: on(io, 'validates-vm-rules'),
    waitsForANode: on(io, 'waits-for-a-node'),
    blockKeepsFlowPhase: on(io, 'blocked-pass-keeps-flow-phase'),
    validatesMorePodFields: on(io, 'validates-more-pod-fields'),
    releasedWakeFollowsPlacement: on(io, 'released-wake-follows-placement'),
    driftWaitsForCloneImage: on(io, 'drift-waits-for-clone-image'),
    unboundMainFollowsPin: on(io, 'unbound-main-follows-pin'),
    retainSkipsUnbound: on(io, 'retain-suspend-skips-unbound'),
    subAgentsFollowMainClass: on(io, 'sub-agents-follow-main-class'),
    deletesCheckGeneration: on(io, 'deletes-check-generation'),
    driftComparesAdmittedResources: on(io, 'drift-compares-admitted-resources'),
    driftChecksNamespaceLimits: on(io, 'drift-checks-namespace-limits'),
    pendingMainNamesMissingNode: on(io, 'pending-main-names-missing-node'),
    deleteReadsGeneration: on(io, 'delete-reads-generation'),
    statusDiffFollowsOwnWrites: on(io, 'status-diff-follows-own-writes'),
    failedRoundKeepsVM: on(io, 'failed-hibernate-round-keeps-vm'),
    failedMainRoundKeepsPhase: on(io, 'failed-main-round-keeps-phase'),
    failedRoundsHoldVMs: on(io, 'failed-round-holds-vm'),
    replacedMainKeepsSnapshot: on(io, 'replaced-main-keeps-snapshot'),
    restoresCheckSnapshotImage: on(io, 'restores-check-snapshot-image'),
    subAgentsRestoreSuspendState: on(io, 'sub-agents-restore-suspend-state'),
    retriesSpentDropsOfMembers: on(io, 'vm-tells-set-spent-tag'),
    dropsTagsOfRemovedGone: on(io, 'removed-gone-drops-tag'),
    crHoldsWait: on(io, 'set-wake-waits-for-cr'),
    desireConflicts: state.desireConflicts,
    hibernateAsked: state.hibernateAsked,
    tagDroppedFor: state.tagDroppedFor,
  };
  const end = await reconcilePass(passInput, {
    exec: (actions, concurrent, maxConcurrency) => {
      const kube = kubeForRound(io, actions.length);
      return concurrent
        ? pool(actions, Math.max(1, maxConcurrency), (a) => execute(state, cs, a, io, kube))
        : sequence(actions, (a) => execute(state, cs, a, io, kube));
    },
    offer: async (flow) => {
      // Only runs recorded before the `migration` / `seat-release` patches offer a flow: it was not
      // implemented then, so it answers "not handled" and the pass goes on past its step.
      log.info(`cocoonset ${flow} flow not implemented yet: declined`, { name: state.name });
      return undefined;
    },
  });
  if (end.kind === 'done') {
    // A main replaced with its :hibernate tag kept: its next pod is owed a wake ask (the un-suspend step asks
    // the pods recorded here), which drops the tag once the restored VM runs. No PodUID: any new pod.
    if (end.wakeOwed)
      state.hibernateAsked = {
        ...(state.hibernateAsked ?? {}),
        ...Object.fromEntries(end.wakeOwed.map((p) => [p, ''])),
      };
    rollUp(state, cs, pods, end.mirror.status?.phase);
    return end.result;
  }
  switch (end.flow) {
    case 'delete':
      return await deletionFlow(state, cs, pods, io, input.registryConfigured ?? true);
    case 'suspend':
    case 'suspendRelease':
      // Only runs recorded before the `set-desires` / `seat-release` patches delegate a suspend: it was not
      // implemented then. The pass ends here, as the reference's does once it enters suspend (nothing past
      // step 8 runs), and the user is told on the CocoonSet itself: a Warning Event (folded, so one Event
      // whose count grows).
      log.warn(`cocoonset ${end.flow} flow not implemented yet: pass ends here`, { name: state.name });
      await execute(
        state,
        cs,
        {
          id: `event:${SUSPEND_NOT_IMPLEMENTED}`,
          type: 'event',
          eventType: 'Warning',
          reason: SUSPEND_NOT_IMPLEMENTED,
          message:
            end.flow === 'suspend'
              ? 'spec.suspend is not implemented by this operator version: pods are left as they are'
              : 'spec.suspend with hibernatePolicy release is not implemented by this operator version: ' +
                'pods are left as they are',
        },
        io,
      );
      rollUp(state, cs, pods, cs.status?.phase);
      return { requeue: false, requeueAfterMs: 0, delegated: end.flow };
    default:
      // Only an offered flow that took the pass ends it this way; none does yet.
      rollUp(state, cs, pods, cs.status?.phase);
      return { requeue: false, requeueAfterMs: 0, delegated: end.flow };
  }
}

async function sequence<T, R>(items: T[], fn: (t: T) => Promise<R>): Promise<R[]> {
  const out: R[] = [];
  for (const t of items) out.push(await fn(t));
  return out;
}

/** Runs `fn` over `items` with at most `limit` in flight; results in input order. */
async function pool<T, R>(items: T[], limit: number, fn: (t: T) => Promise<R>): Promise<R[]> {
  const out: R[] = new Array(items.length);
  let next = 0;
  const lane = async () => {
    for (;;) {
      const k = next++;
      if (k >= items.length) return;
      out[k] = await fn(items[k]!);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, lane));
  return out;
}

/**
 * Executes one planner action as an activity and turns its answer into the outcome the planner reads;
 * `kube`: the Kubernetes activities of its round (see kubeForRound).
 */
/** The phase each run's last status write set (for the phase-change log line only; not workflow state). */
const phaseWritten = new WeakMap<CocoonSetState, string>();

async function execute(
  state: CocoonSetState,
  cs: CocoonSet,
  a: PassAction,
  io: CocoonSetIO,
  kube: CocoonSetActivities = io.kube,
): Promise<ActionOutcome> {
  const { registry } = io;
  const namespace = state.namespace;
  try {
    switch (a.type) {
      case 'addFinalizer':
        await kube.cocoonSetSetFinalizer({
          namespace,
          name: state.name,
          finalizer: a.finalizer,
          present: true,
        });
        return { kind: 'ok' };
      case 'patchPodAnnotations':
        await kube.cocoonSetPatchPodAnnotations({ namespace, pod: a.pod, annotations: a.annotations });
        return { kind: 'ok' };
      case 'patchCocoonSetAnnotations':
        await kube.cocoonSetPatchAnnotations({ namespace, name: state.name, annotations: a.annotations });
        return { kind: 'ok' };
      case 'deletePod': {
        const ifSetGeneration =
          a.ifGeneration !== undefined ? { name: state.name, generation: a.ifGeneration } : undefined;
        return { kind: await kube.cocoonSetDeletePod({ namespace, pod: a.pod, ifSetGeneration }) };
      }
      case 'createPod':
        return { kind: await kube.cocoonSetCreatePod({ namespace, pod: a.pod }) };
      case 'readGeneration':
        return {
          kind: 'generation',
          generation: await kube.cocoonSetGeneration({ namespace, name: state.name }),
        };
      case 'getPod':
        return { kind: 'pod', pod: await kube.cocoonSetGetPod({ namespace, pod: a.pod }) };
      case 'readPod':
        try {
          return { kind: 'pod', pod: await kube.cocoonSetGetPod({ namespace, pod: a.pod }) };
        } catch (err) {
          if (isNotFound(err)) return { kind: 'notFound' };
          throw err;
        }
      case 'dropHibernateTag': {
        try {
          await registry.deleteManifest({ vmName: a.vmName, tag: Tags.hibernate });
        } catch (err) {
          // The set's own wake ran this VM: its tag is spent until the DELETE goes through.
          if (a.wokenPod) state.spentBySet = withEntry(state.spentBySet, a.wokenPod, a.vmName);
          throw err;
        }
        // The DELETE answers alike whether the tag was there (200/202) or not (404): say both.
        log.info(
          `cocoonset ${namespace}/${state.name}: ${a.vmName}:${Tags.hibernate} is gone (deleted, or was absent)`,
        );
        if (a.wokenPod) state.tagDroppedFor = withEntry(state.tagDroppedFor, a.wokenPod, true);
        const spent = Object.entries(state.spentBySet ?? {}).filter(([, vm]) => vm !== a.vmName);
        state.spentBySet = spent.length > 0 ? Object.fromEntries(spent) : undefined;
        // The tag went: an open wake of its pod is done (e.g. a slot scaled away before its VM workflow
        // dropped the tag: `letGoOfRemoved`).
        const open = Object.keys(state.wakesOpen ?? {}).filter(
          (pod) => vmNameForPod(namespace, pod) === a.vmName,
        );
        if (open.length > 0 && on(io, 'sub-agents-restore-open-wake'))
          for (const pod of open) state.wakesOpen = withEntry(state.wakesOpen, pod, undefined);
        return { kind: 'ok' };
      }
      case 'listHibernations':
        return {
          kind: 'hibernations',
          items: await kube.cocoonSetListHibernations({ namespace: a.namespace }),
        };
      case 'anyNode':
        return { kind: 'nodes', any: await kube.cocoonSetAnyNode({ labelSelector: a.labelSelector }) };
      case 'probeHibernate':
        return {
          kind: 'probe',
          present: await registry.hasManifest({ vmName: a.vmName, tag: Tags.hibernate }),
        };
      case 'readSnapshotImage':
        return {
          kind: 'snapshot',
          ...(await registry.snapshotImage({ vmName: a.vmName, tag: Tags.hibernate })),
        };
      case 'readNamespaceLimits':
        return { kind: 'limits', limits: await kube.cocoonSetNamespaceLimits({ namespace }) };
      case 'probeImage':
        // A base image's repository sits under the registry like a VM's snapshot repository.
        return { kind: 'probe', present: await registry.hasManifest({ vmName: a.repo, tag: a.tag }) };
      case 'patchStatus': {
        await kube.cocoonSetPatchStatus({ namespace, name: state.name, body: a.body });
        // Logged only: the Kubernetes Event stream has no phase change, and an operator log without the
        // flows' steps (a migration, a suspend) left users guessing (found by a new-user run). Against the
        // pass's own earlier write too: a pass may write the status twice.
        const from = phaseWritten.get(state) ?? (cs.status?.phase || '(none)');
        const to = a.status.phase || '(none)';
        phaseWritten.set(state, to);
        if (to !== from) log.info(`cocoonset ${namespace}/${state.name}: ${from} → ${to}`);
        return { kind: 'ok' };
      }
      case 'event':
        // Fire and forget (a lost event never fails the pass). The key names this emit uniquely across
        // runs (a fresh run after a terminate or reset restarts `passes`), so only a retried activity
        // reuses it and the Event counts each pass once (src/activities/kube.ts recordEvent).
        try {
          await kube.cocoonSetEmitEvent({
            namespace,
            name: state.name,
            uid: cs.metadata.uid,
            type: a.eventType,
            reason: a.reason,
            message: a.message,
            key: `${cs.metadata.uid ?? ''}/${workflowInfo().runId}/${state.passes}/${a.id}`,
          });
        } catch (err) {
          log.warn('cocoonset event not recorded', { reason: a.reason, error: errorMessage(err) });
        }
        return { kind: 'ok' };
      case 'askVM': {
        await kube.cocoonSetAskVM({
          namespace,
          pod: a.pod,
          desire: {
            set: state.name,
            desire: a.desire,
            generation: cs.metadata.generation ?? 0,
            podUID: a.podUID,
            podResourceVersion: a.podResourceVersion,
            ...(a.release ? { release: true } : {}),
            ...(a.keepTag ? { keepTag: true } : {}),
          },
        });
        const hibernate = a.desire === 'Hibernate';
        // A new hibernate round pushes the VM's tag anew: a spent record of the old one would have a later
        // create of the pod DELETE the new tag, the VM's state (found by helper-56).
        if (hibernate && state.spentBySet?.[a.pod] !== undefined && on(io, 'vm-tells-set-spent-tag'))
          state.spentBySet = withEntry(state.spentBySet, a.pod, undefined);
        state.hibernateAsked = withEntry(
          state.hibernateAsked,
          a.pod,
          hibernate ? (a.podUID ?? '') : undefined,
        );
        // A wake stays open until its VM workflow says the tag is gone (none is sent for `keepTag`: the set
        // dropped that tag itself); a hibernate ask ends it.
        if (on(io, 'sub-agents-restore-open-wake'))
          state.wakesOpen = withEntry(state.wakesOpen, a.pod, hibernate || a.keepTag ? undefined : true);
        state.tagDroppedFor = withEntry(state.tagDroppedFor, a.pod, undefined);
        return { kind: 'ok' };
      }
      case 'metric':
        try {
          await kube.cocoonSetCountMetric({ metric: a.metric, labels: a.labels });
        } catch (err) {
          log.warn('cocoonset metric not counted', { metric: a.metric, error: errorMessage(err) });
        }
        return { kind: 'ok' };
      default:
        return unhandled(a);
    }
  } catch (err) {
    return { kind: 'error', message: errorMessage(err) };
  }
}

/** Compile-time exhaustiveness of `execute`: an action type without its case fails the type check here. */
function unhandled(a: never): never {
  throw new Error(`unhandled pass action ${JSON.stringify(a)}`);
}

/**
 * Deletion (docs/cocoonset.md#deletion-and-registry-gc): stash the VM names on the CocoonSet, delete every
 * owned pod not already terminating (together; patch `deletion-batches-pod-deletes`), wait (5 s requeue)
 * until they are gone, then drop the registry tags (best effort; `:latest` per
 * the snapshot policy) and remove the finalizer; the workflow then completes (`finalizerRemoved`, patch
 * `deletion-completes-workflow`). Without a registry (`registryConfigured` false) the GC is skipped with a
 * warning.
 */
async function deletionFlow(
  state: CocoonSetState,
  cs: CocoonSet,
  pods: PassInput['pods'],
  io: CocoonSetIO,
  registryConfigured: boolean,
): Promise<PassResult & { finalizerRemoved?: true }> {
  const { kube } = io;
  const registry = registryConfigured ? io.registry : undefined;
  const namespace = state.namespace;
  const owned = pods.filter((p) => isControlledBy(p, cs.metadata.uid));
  const sorted = stashedVMNames(cs, owned);
  const joined = sorted.join(',');
  if (sorted.length > 0 && joined !== (cs.metadata.annotations?.[Annotations.deleteVMNames] ?? '')) {
    try {
      await kube.cocoonSetPatchAnnotations({
        namespace,
        name: state.name,
        annotations: { [Annotations.deleteVMNames]: joined },
      });
    } catch (err) {
      return { requeue: false, requeueAfterMs: 0, error: `stash vm names: ${errorMessage(err)}` };
    }
  }
  // The reference deletes every owned pod one after the other on each 5 s requeue. With the patch a pod
  // already terminating is not deleted again (the apiserver would change nothing), and the rest go out
  // together (SUB_AGENT_CREATE_CONCURRENCY in flight, as a pass's other per-pod rounds): a 121-pod set's
  // deletes were 121 workflow round trips, repeated while the pods terminated.
  const batched = on(io, 'deletion-batches-pod-deletes');
  const toDelete = batched ? owned.filter((p) => p.metadata?.deletionTimestamp == null) : owned;
  const deletes = kubeForRound(io, toDelete.length);
  const deletePod = async (p: PassInput['pods'][number]): Promise<string | undefined> => {
    const pod = p.metadata?.name ?? '';
    try {
      await deletes.cocoonSetDeletePod({ namespace, pod });
      return undefined;
    } catch (err) {
      return `delete pod ${namespace}/${pod}: ${errorMessage(err)}`;
    }
  };
  if (batched) {
    const failed = (await pool(toDelete, SUB_AGENT_CREATE_CONCURRENCY, deletePod)).find(
      (e) => e !== undefined,
    );
    if (failed) return { requeue: false, requeueAfterMs: 0, error: failed };
  } else {
    for (const p of toDelete) {
      const failed = await deletePod(p);
      if (failed) return { requeue: false, requeueAfterMs: 0, error: failed };
    }
  }
  let remaining: number;
  try {
    const again = await readWorld(io.kube, namespace, state.name);
    remaining = again.cs ? again.pods.filter((p) => isControlledBy(p, cs.metadata.uid)).length : 0;
  } catch (err) {
    return { requeue: false, requeueAfterMs: 0, error: `re-list pods after delete: ${errorMessage(err)}` };
  }
  if (remaining > 0) {
    // Each pod's deletion events start a pass: one line per count, not one per pass.
    if (remaining !== state.deletionWaitLogged) {
      log.info(`cocoonset deletion waiting for ${remaining} pods`, { name: state.name });
      state.deletionWaitLogged = remaining;
    }
    return { requeue: false, requeueAfterMs: REQUEUE_WAIT_FOR_MAIN_MS };
  }
  // The code-side default (docs/wire-contract.md#defaults): an empty policy is `always` too.
  const policy = snapshotPolicyOf(cs);
  if (!registry) log.warn('no registry configured: skipping snapshot GC', { name: state.name });
  // Deliberate deviation: a `:hibernate` tag a live CocoonHibernation still needs is kept (vmsHeldByCR).
  // A failed List fails the pass (retried): a tag is never dropped on a guess.
  let held = new Set<string>();
  if (registry && sorted.length > 0 && on(io, 'set-gc-keeps-held-hibernate')) {
    try {
      held = vmsHeldByCR(namespace, await kube.cocoonSetListHibernations({ namespace }));
    } catch (err) {
      return {
        requeue: false,
        requeueAfterMs: 0,
        error: `list cocoonhibernations in ${namespace}: ${errorMessage(err)}`,
      };
    }
  }
  const gc: Array<{ vmName: string; tag: string }> = [];
  for (const vmName of registry ? sorted : []) {
    for (const tag of [Tags.hibernate, Tags.latest]) {
      if (tag === Tags.hibernate && held.has(vmName)) {
        log.info(`keeping ${vmName}:${tag}: a live CocoonHibernation still holds it`, { name: state.name });
        continue;
      }
      if (
        tag === Tags.latest &&
        (policy === 'always' ||
          (policy === 'main-only' && extractAgentSlot(namespace, state.name, vmName) === 0))
      )
        continue;
      gc.push({ vmName, tag });
    }
  }
  if (registry && gc.length > 0) {
    const drop = ({ vmName, tag }: { vmName: string; tag: string }) =>
      registry.deleteManifest({ vmName, tag }).catch((err) => {
        log.error(`delete ${vmName}:${tag}`, { error: errorMessage(err) });
      });
    // The reference deletes one tag after the other; with DELETION_GC_LANES in flight the registry worker's
    // slots (COCOONSET_CONCURRENCY) set the pace (a 121-pod set's 243 deletes took 23 s one at a time).
    if (gc.length > 1 && on(io, 'deletion-gc-concurrent')) await pool(gc, DELETION_GC_LANES, drop);
    else await sequence(gc, drop);
  }
  try {
    await kube.cocoonSetSetFinalizer({
      namespace,
      name: state.name,
      finalizer: Finalizers.cocoonSet,
      present: false,
    });
  } catch (err) {
    return { requeue: false, requeueAfterMs: 0, error: `remove finalizer: ${errorMessage(err)}` };
  }
  state.phase = 'Deleting';
  // VM workflows still holding this set's hibernate request (a released seat keeps it without a pod) let go.
  const asked = Object.keys(state.hibernateAsked ?? {}).sort();
  const asks = kubeForRound(io, asked.length);
  const letGo = async (pod: string): Promise<void> => {
    try {
      await asks.cocoonSetAskVM({
        namespace,
        pod,
        desire: { set: state.name, desire: 'Wake', generation: cs.metadata.generation ?? 0 },
      });
    } catch (err) {
      log.warn('VM workflow not told the set is gone', { pod, error: errorMessage(err) });
    }
  };
  if (batched) await pool(asked, SUB_AGENT_CREATE_CONCURRENCY, letGo);
  else await sequence(asked, letGo);
  state.hibernateAsked = undefined;
  state.wakesOpen = undefined;
  // With the patch the workflow completes here: nothing is left to do for this CocoonSet. Before, it waited
  // for the watch to report the set gone, and a set that went while no watcher ran (the operator restarting)
  // left the workflow waiting for its 10 h fallback pass.
  if (on(io, 'deletion-completes-workflow'))
    return { requeue: false, requeueAfterMs: 0, finalizerRemoved: true };
  return { requeue: false, requeueAfterMs: 0 };
}

/** Records the roll-up shown by the query and the search attributes. */
function rollUp(
  state: CocoonSetState,
  cs: CocoonSet,
  pods: PassInput['pods'],
  phase: string | undefined,
): void {
  // The phase change is logged where the status write runs (`patchStatus` in `execute`), once.
  state.phase = phase ?? cs.status?.phase ?? state.phase;
  const main = classifyPods(ownedPods(cs, pods)).main;
  if (main && vmNameOf(main) !== '') state.mainVM = vmNameOf(main);
}

function publish(state: CocoonSetState, mode: SearchAttributeMode): void {
  publishSearchAttributes(
    mode,
    state,
    { namespace: state.namespace, vmName: state.mainVM ?? '', kind: 'CocoonSet' },
    state.phase || 'Pending',
  );
}

/**
 * The `state` query: `passes` counts passes started (the current one included); `passing` is true while
 * one runs, so `passes` = n with `passing` false means pass n has finished (its writes are done). For a
 * caller that signalled the workflow: `signals` (handled, all runs) and `lastSignalResourceVersion` say
 * its signal was applied, and `busy` is true while a pass runs or one is due (a signal or an expired
 * timer asked for it); `busy` false means the workflow has finished acting on everything it was told.
 */
function describe(state: CocoonSetState, passing: boolean, due: boolean) {
  return {
    namespace: state.namespace,
    name: state.name,
    signals: state.signals ?? 0,
    lastSignalResourceVersion: state.lastSignalRV ?? null,
    busy: passing || due,
    phase: state.phase ?? null,
    mainVM: state.mainVM ?? null,
    passes: state.passes,
    passing,
    failures: state.failures,
    nextPassAt: state.nextPassAt ? new Date(state.nextPassAt).toISOString() : null,
    lastResult: state.lastResult ?? null,
    observedPods: Object.keys(state.pods).sort(),
    /** Pod → VM whose `:hibernate` tag the set knows spent (its creates wait: `spentBySet`). */
    spentTags: state.spentBySet ?? null,
    /** Pods asked to wake whose VM workflow has not yet said their tag is gone (`wakesOpen`). */
    wakesOpen: Object.keys(state.wakesOpen ?? {}).sort(),
  };
}

/** The answer of the CocoonSet workflow's `state` query. */
export type CocoonSetStateView = ReturnType<typeof describe>;
