/**
 * The VM entity workflow: one per pod (`vm/<namespace>/<pod>`). Every effect on that VM's hibernate
 * annotation and `:hibernate` tag happens here, one step at a time, so two CocoonHibernations (or a
 * deleting one and a live one) can never interleave their annotation writes or registry calls: the
 * serialization the Go operator gets from its striped per-VM mutex holds by construction
 * (docs/architecture.md#why-serialization-holds).
 *
 * Protocol: signals podObserved / hibernationObserved / resync, setDesire (the pod's CocoonSet suspends or
 * un-suspends it; docs/cocoonset.md#suspend), query `state`; it signals `vmDesireConflict` to the set's
 * workflow when a CocoonHibernation holds the VM against the set. The body is a loop: reconcile every
 * CocoonHibernation targeting the pod (docs/hibernation.md#one-pass, rules in src/hibernation/rules.ts),
 * then the set's desire, then sleep until a signal, a deadline or the slow fallback re-read; continue as new
 * before the history grows large; complete when no CocoonHibernation targets the pod and no set wants it
 * hibernated.
 */
import {
  allHandlersFinished,
  CancellationScope,
  condition,
  continueAsNew,
  getExternalWorkflowHandle,
  log,
  proxyActivities,
  type SignalDefinition,
  setHandler,
  workflowInfo,
} from '@temporalio/workflow';
import type { EventInput, FinalizerSeen, KubeActivities } from '../activities/kube.js';
import type { RegistryActivities } from '../activities/registry.js';
import { cocoonSetWorkflowId, taskQueues } from '../api/ids.js';
import { Annotations, EventReasons, Finalizers, Labels, LifecycleStates, Tags } from '../api/keys.js';
import type { HibernationObservation, PodObservation } from '../api/observe.js';
import { podNameProblem } from '../api/pod.js';
import type { HibernationPhase } from '../api/types.js';
import {
  applyStatusPatch,
  conflicting,
  conflictPatch,
  conflictWaitPatch,
  deadlineOf,
  deleteFailingPatch,
  goDuration,
  goQuote,
  HIBERNATE_TIMEOUT_MS,
  heldByAnother,
  hibernateAnnotated,
  hibernateGateOpen,
  markFailedPatch,
  markPendingPatch,
  type Path,
  podWaitPatch,
  probeFailingPatch,
  readyTransitionMs,
  rfc3339,
  route,
  type StatusPatch,
  setPhasePatch,
  tagSpent,
  vkFailure,
  vkManaged,
  WAKE_TIMEOUT_MS,
  wakeGateOpen,
} from '../hibernation/rules.js';
import {
  compareResourceVersions,
  countSignal,
  errorMessage,
  historyFull,
  isNotFound,
  kubeActivities,
  olderThan,
  on,
  registryActivityOptions,
} from './entity.js';
import {
  hibernationObservedSignal,
  podObservedSignal,
  RUN_MODES,
  resyncSignal,
  type SetDesire,
  setDesireSignal,
  type VMWorkflowInput,
  vmDesireConflictSignal,
  vmStateQuery,
  vmTagSpentSignal,
} from './messages.js';
import { publishSearchAttributes, type SearchAttributeMode } from './search-attributes.js';
import {
  backoff,
  backoffResync,
  DELETE_ROUND_WAIT_MS,
  DELETE_WAKE_WAIT_MS,
  deadlineDue,
  lookAgainBy,
  nextWake,
  passDue,
  pastDeadline,
  resynced,
  retryAfterFailure,
  TRANSITIONS,
  type TransitionKind,
  timerFired,
  userActed,
  waitingOutFailure,
} from './vm-schedule.js';

/** Continue as new past this many history events (well under Temporal's 51,200 limit). */
const MAX_HISTORY_EVENTS = 5_000;

/** One CocoonHibernation as this workflow tracks it, plus its private scheduling state. */
export interface TrackedCR extends HibernationObservation {
  /** Consecutive failed passes (error backoff). */
  failures?: number;
  /** Epoch ms until which a failed pass backs off (no pass at all before it). */
  backoffUntil?: number;
  /** Epoch ms of the next retry of a Failed transition, or of a deleting CR's next look. */
  retryAt?: number;
  /**
   * The resourceVersion of the first observation of this CR (its creation's, when the watcher saw it
   * created): orders CRs created within the same second (creationTimestamp has second precision).
   */
  firstSeenRV?: string;
}

/** Workflow state; carried across continue-as-new. Plain JSON. */
export interface VMState {
  namespace: string;
  pod: string;
  podObs?: PodObservation;
  crs: Record<string, TrackedCR>;
  needResync: boolean;
  /**
   * The VM this workflow last touched (for search attributes, the query, and the deletion of a CR that
   * recorded none).
   */
  vmName?: string;
  /** Epoch ms of the last full re-read. */
  lastResyncAt?: number;
  /** Epoch ms when the last reconcile round started (wake-up times up to it are spent). */
  lastPassAt?: number;
  /**
   * Search attributes last upserted by a run an older version started (all four, to upsert only on change);
   * carried into an `identity` run, it tells that run to remove their CocoonPhase (search-attributes.ts).
   */
  published?: string;
  /** Consecutive failed re-reads, and when to try the next one. */
  resyncFailures?: number;
  resyncAt?: number;
  /** While a re-read is in flight: the signals received since it started (re-applied after it). */
  readingSince?: Array<{ pod?: PodObservation; cr?: HibernationObservation }>;
  /** Signals handled so far (all runs), and the newest resourceVersion they carried: the query's barrier. */
  signals?: number;
  lastSignalRV?: string;
  /** Reconcile rounds started so far (all runs). */
  passes?: number;
  /** Re-reads of the world completed so far (all runs). */
  reads?: number;
  /**
   * What the pod's CocoonSet wants of the VM (docs/cocoonset.md#suspend), since when (epoch ms, workflow
   * time of the first signal with this desire), and the conflict last reported to the set (a
   * CocoonHibernation holds the VM the other way). `late`: a Wake still waiting for its VM past the wake
   * deadline (`set-wake-outlasts-deadline`), looked at less often. `vmName`: the VM a Wake is for, as
   * last seen on the pod; `goneSince`: when its pod was first seen gone before the VM ran; `inherited`:
   * the Wake passed to a later pod of that VM (`set-wake-outlives-pod`, see carryWakeOver).
   */
  setDesire?: SetDesire & {
    since: number;
    conflict?: string;
    late?: boolean;
    vmName?: string;
    goneSince?: number;
    inherited?: boolean;
    /** The set was told this desire's leftover tag is spent (its DELETE failed after the VM ran). */
    spentTold?: boolean;
    /** The conflict message the set was last told of, for this desire or an earlier one (reportConflict). */
    told?: string;
  };
  /**
   * The CocoonSet that owned the pod when this workflow last saw it exist (its controller owner reference
   * and `cocoonset.cocoonstack.io/name` label): the deletion flow still knows it once the pod is gone.
   */
  podSet?: string;
}

/**
 * The activities one run calls: Kubernetes reads and writes (local activities in a run started with
 * `kubeIO: 'local'`, else regular ones: see VMWorkflowInput) and the registry calls, always regular
 * activities on their own task queue, whose worker slots are the concurrency knob.
 */
interface VMIO {
  kube: KubeActivities;
  registry: RegistryActivities;
  /** The Kubernetes activities are local (the run started with `kubeIO: 'local'`). */
  local: boolean;
  /** The run's start argument `patches` (see entity.ts `on`). */
  patches: 'all' | number | undefined;
}

function vmIO(input: VMWorkflowInput): VMIO {
  return {
    patches: input.patches,
    kube: kubeActivities<KubeActivities>(input.kubeIO, 5),
    registry: proxyActivities<RegistryActivities>(
      registryActivityOptions(taskQueues(workflowInfo().taskQueue).hibernationRegistry),
    ),
    local: input.kubeIO === 'local',
  };
}

/**
 * The first state of a run: the one continue-as-new carried, else the world the watcher's start carried
 * (no re-read needed: the watcher read it from its caches, complete lists kept current by the watch),
 * else nothing known (a re-read first).
 */
function initialState(input: VMWorkflowInput): VMState {
  if (input.carried) return input.carried as VMState;
  const state: VMState = { namespace: input.namespace, pod: input.pod, crs: {}, needResync: true };
  if (input.world) {
    state.podObs = input.world.pod;
    for (const obs of input.world.hibernations)
      if (obs.exists) state.crs[obs.name] = { ...obs, firstSeenRV: obs.resourceVersion };
    state.needResync = false;
    state.lastResyncAt = Date.now();
  }
  return state;
}

function sameIgnoringVersion<T extends { resourceVersion?: string }>(a: T | undefined, b: T): boolean {
  if (!a) return false;
  return (
    JSON.stringify({ ...a, resourceVersion: undefined }) ===
    JSON.stringify({ ...b, resourceVersion: undefined })
  );
}

/** Entity workflow for one VM. See the module comment. */
export async function vmWorkflow(input: VMWorkflowInput): Promise<void> {
  const state = initialState(input);
  const io = vmIO(input);
  let dirty = true;
  /** True while a reconcile round runs, for the `state` query. */
  let passing = false;

  setHandler(podObservedSignal, (obs) => {
    countSignal(state, obs.resourceVersion);
    state.readingSince?.push({ pod: obs });
    if (observePodSignal(state, obs)) dirty = true;
  });
  setHandler(hibernationObservedSignal, ({ pod, ...obs }) => {
    countSignal(state, obs.resourceVersion);
    state.readingSince?.push({ pod, cr: obs });
    if (pod && observePodSignal(state, pod)) dirty = true;
    if (observeHibernationSignal(state, obs)) dirty = true;
  });
  setHandler(setDesireSignal, (d) => {
    countSignal(state, d.podResourceVersion);
    if (observeSetDesire(state, d)) dirty = true;
  });
  setHandler(resyncSignal, () => {
    countSignal(state, undefined);
    state.needResync = true;
    dirty = true;
  });
  setHandler(vmStateQuery, () => describe(state, passing || dirty));

  for (;;) {
    if (dirty) {
      dirty = false;
      passing = true;
      state.passes = (state.passes ?? 0) + 1;
      await reconcileAll(state, io).finally(() => {
        passing = false;
      });
    }
    publish(state, input.searchAttributes);
    if (Object.keys(state.crs).length === 0 && !state.needResync && !state.setDesire) {
      await condition(allHandlersFinished);
      if (!dirty) return; // no CocoonHibernation targets this pod any more
      continue;
    }
    if (historyFull(input.historyLimit ?? MAX_HISTORY_EVENTS)) {
      // A signal racing the continue-as-new can be lost to the carried state (the server rejects the
      // command, and on the retried task the SDK may finish the body before the handler runs), so the
      // next run re-reads the world before acting: observations are never trusted across runs. For the
      // same reason a signal not yet acted on (`dirty`) need not hold the continue-as-new back: waiting for
      // a quiet moment starved it while signals kept coming (the history grew past the limit under load).
      await condition(allHandlersFinished);
      if (!dirty || on(io, 'continue-as-new-while-dirty'))
        await continueAsNew<typeof vmWorkflow>({
          ...input,
          ...RUN_MODES,
          world: undefined,
          carried: { ...state, needResync: true },
        });
    }
    const wakeAt = nextWake(state);
    const signalled = await condition(
      () => dirty,
      wakeAt === undefined ? undefined : Math.max(1, wakeAt - Date.now()),
    );
    // condition() without a timeout resolves to undefined, not true: only `false` means the timer fired.
    // (Read as a timeout, a signal reaching an idle workflow reset needResync and lost a `resync`.)
    if (signalled === false) {
      dirty = true;
      timerFired(state);
    }
  }
}

/** Applies a watcher's pod observation; false when it is older than, or the same as, what is known. */
function observePodSignal(state: VMState, obs: PodObservation): boolean {
  if (olderThan(obs.resourceVersion, state.podObs?.resourceVersion)) return false;
  if (sameIgnoringVersion(state.podObs, obs)) return false;
  state.podObs = obs;
  return true;
}

/**
 * Applies a watcher's CocoonHibernation observation (a deletion drops the CR); false when it changes
 * nothing (older resourceVersion of the same object, or the same content).
 */
function observeHibernationSignal(state: VMState, obs: HibernationObservation): boolean {
  const cur = state.crs[obs.name];
  if (!obs.exists) {
    // Gone from the API (finalizer removed by us or by hand): nothing left to do for it.
    if (cur && (!obs.uid || cur.uid === obs.uid)) delete state.crs[obs.name];
    return true;
  }
  if (cur && cur.uid === obs.uid && olderThan(obs.resourceVersion, cur.resourceVersion)) return false;
  if (cur && sameIgnoringVersion(stripScheduling(cur), obs)) return false;
  const prev = cur?.uid === obs.uid ? cur : undefined;
  // A spec edit (new generation) or a deletion is acted on at once: neither a Failed transition's
  // FAILED_RETRY_MS nor an error backoff makes the user's own action wait.
  const acted = prev?.generation !== obs.generation || (obs.deleting === true && prev?.deleting !== true);
  state.crs[obs.name] = {
    ...obs,
    failures: prev?.failures ?? 0,
    backoffUntil: acted ? undefined : prev?.backoffUntil,
    retryAt: acted ? undefined : prev?.retryAt,
    firstSeenRV: prev?.firstSeenRV ?? obs.resourceVersion,
  };
  return true;
}

/**
 * Applies a CocoonSet's desire (docs/cocoonset.md#suspend); true when the workflow should act on it: the
 * desire changed, the pod annotation does not say it yet, or the set read a newer pod than this workflow
 * knows (which then re-reads the pod first). The set repeats its desire on each of its passes, so a repeat
 * that changes nothing costs no round.
 */
function observeSetDesire(state: VMState, d: SetDesire): boolean {
  const cur = state.setDesire;
  const pod = state.podObs;
  const newerPod =
    d.podUID !== undefined &&
    (pod?.uid !== d.podUID || olderThan(pod?.resourceVersion, d.podResourceVersion));
  if (newerPod) state.needResync = true;
  const same = cur?.desire === d.desire && cur.set === d.set && cur.podUID === d.podUID;
  state.setDesire = {
    ...d,
    since: same ? cur.since : Date.now(),
    conflict: same ? cur.conflict : undefined,
    ...(same && cur.late ? { late: true } : {}),
    // A repeat keeps what the workflow learned of this desire (carryWakeOver's VM, pod gone, inherited).
    ...(same && cur.vmName !== undefined ? { vmName: cur.vmName } : {}),
    ...(same && cur.goneSince !== undefined ? { goneSince: cur.goneSince } : {}),
    ...(same && cur.inherited ? { inherited: true } : {}),
    ...(same && cur.spentTold ? { spentTold: true } : {}),
    // What the set holds for this pod outlives a change of desire (reportConflict clears or replaces it).
    ...(cur?.set === d.set && (cur.told ?? cur.conflict) !== undefined
      ? { told: cur.told ?? cur.conflict }
      : {}),
  };
  const annotated = pod !== undefined && hibernateAnnotated(pod);
  return !same || newerPod || annotated !== (d.desire === 'Hibernate');
}

function stripScheduling(cr: TrackedCR): HibernationObservation {
  const { failures: _f, backoffUntil: _b, retryAt: _r, firstSeenRV: _s, ...obs } = cr;
  return obs;
}

/**
 * CRs in a stable order, oldest first: creationTimestamp (second precision), then the resourceVersion
 * this workflow first saw them at (creation order within a second, as etcd assigns it), then the name.
 */
function ordered(state: VMState): TrackedCR[] {
  return Object.values(state.crs).sort(
    (a, b) =>
      (a.creationTimestamp ?? '').localeCompare(b.creationTimestamp ?? '') ||
      compareResourceVersions(a.firstSeenRV ?? a.resourceVersion, b.firstSeenRV ?? b.resourceVersion) ||
      a.name.localeCompare(b.name),
  );
}

/**
 * Re-reads the pod and its CocoonHibernations and makes them the workflow's view, then re-applies the
 * watcher's signals that arrived while the read was in flight: the read may predate them (a CR created or
 * a pod annotated meanwhile), and the resourceVersion guards of the signal path drop those it already
 * covers. Without the re-apply, a CR created during the read was forgotten until its next event.
 */
async function resync(state: VMState, io: VMIO): Promise<void> {
  state.readingSince = [];
  let world: Awaited<ReturnType<KubeActivities['readVMWorld']>>;
  let arrived: Array<{ pod?: PodObservation; cr?: HibernationObservation }>;
  try {
    world = await io.kube.readVMWorld({ namespace: state.namespace, pod: state.pod });
  } finally {
    arrived = state.readingSince;
    state.readingSince = undefined;
  }
  state.podObs = world.pod;
  const next: Record<string, TrackedCR> = {};
  for (const obs of world.hibernations) {
    const cur = state.crs[obs.name];
    const prev = cur?.uid === obs.uid ? cur : undefined;
    next[obs.name] = {
      ...obs,
      failures: prev?.failures,
      backoffUntil: prev?.backoffUntil,
      retryAt: prev?.retryAt,
      firstSeenRV: prev?.firstSeenRV ?? obs.resourceVersion,
    };
  }
  state.crs = next;
  for (const a of arrived) {
    if (a.pod) observePodSignal(state, a.pod);
    if (a.cr) observeHibernationSignal(state, a.cr);
  }
  state.reads = (state.reads ?? 0) + 1;
  resynced(state);
}

async function reconcileAll(state: VMState, io: VMIO): Promise<void> {
  state.lastPassAt = Date.now();
  if (state.needResync) {
    try {
      await resync(state, io);
    } catch (err) {
      log.warn('resync failed', { error: errorMessage(err) });
      backoffResync(state);
      return;
    }
  }
  const pod = state.podObs;
  if (pod?.exists)
    state.podSet = pod.ownerKind === 'CocoonSet' ? pod.labels?.[Labels.cocoonSet] || undefined : undefined;
  const now = Date.now();
  for (const cr of ordered(state)) {
    if (!state.crs[cr.name]) continue; // removed by an earlier pass this round
    if (!passDue(cr, now)) continue;
    try {
      await passUntilSettled(state, cr.name, io);
      const tracked = state.crs[cr.name];
      if (tracked) tracked.failures = 0;
    } catch (err) {
      const tracked = state.crs[cr.name];
      // An object gone under the pass (a pod deleted with its CR) is a race the re-read settles, not a fault.
      if (isNotFound(err)) {
        log.info('reconcile pass found an object gone; re-reading', {
          cr: cr.name,
          error: errorMessage(err),
        });
        state.needResync = true;
      } else log.warn('reconcile pass failed', { cr: cr.name, error: errorMessage(err) });
      // An edit or a deletion that arrived during the failed pass is acted on at once, not after a backoff.
      const actedMeanwhile =
        tracked !== undefined &&
        (tracked.generation !== cr.generation || (tracked.deleting === true && cr.deleting !== true));
      if (tracked && !actedMeanwhile) backoff(tracked);
    }
  }
  try {
    await setDesirePass(state, io);
  } catch (err) {
    // The set repeats its desire on its next pass (every 5 s while it waits on its VMs), so no backoff here.
    // A pod deleted under the pass (a set being deleted) is no failure: the re-read sees it gone and the
    // desire is spent.
    if (isNotFound(err)) {
      log.info('pod gone during the set desire pass; re-reading', { error: errorMessage(err) });
      state.needResync = true;
    } else log.warn('set desire pass failed', { error: errorMessage(err) });
  }
}

/**
 * The pod's CocoonSet desire (docs/cocoonset.md#suspend), after the CocoonHibernations' passes:
 * - `Hibernate` (the set is suspended): set the hibernate annotation, unless a CocoonHibernation that wants
 *   the VM awake holds it (`holderOf`: in flight, or older than the set's desire); then the set is told why
 *   (`vmDesireConflict`) and the annotation is left alone. The desire stays (and keeps this workflow
 *   running) until the set wakes the VM or the pod is gone.
 * - `Wake` (un-suspend): clear the annotation unless a CocoonHibernation still wants the VM hibernated
 *   (desire Hibernate, or phase Hibernating in the reverse-desire window: the reference's
 *   `podsHibernatedByCR`; ours, patch `set-wake-waits-for-cr`: the Wake then waits for that CR, and the set
 *   is told which one holds the VM); once the VM runs, drop the leftover `:hibernate` tag (not when the set
 *   drops it itself: `keepTag`); then the desire is spent. A pod that goes before its VM runs passes the Wake to its
 *   next pod (carryWakeOver).
 * Nothing here probes the registry: the set's completion gate does (docs/cocoonset.md#suspend).
 */
async function setDesirePass(state: VMState, io: VMIO): Promise<void> {
  const d = state.setDesire;
  if (!d) return;
  const pod = state.podObs;
  // A desire is for the pod incarnation the set asked about: a pod deleted and created again (a seat
  // release's restore pod) is not hibernated on an old request; the set asks again if it still wants it.
  const sameIncarnation = d.podUID === undefined || pod?.uid === d.podUID;
  // A seat release deletes the pod on purpose: its VM lives on in the tag alone, which the set still needs
  // (for the wake) whatever a CocoonHibernation's deletion would do, until the set wakes it or is deleted.
  if (!pod?.exists && d.desire === 'Hibernate' && d.release) return;
  if (!pod?.exists || pod.deleting || !sameIncarnation) {
    // Ours (patch `set-wake-waits-for-cr`): a Wake a CocoonHibernation held ends with its pod: nothing was
    // woken, the CR owns the VM's tag, and the set asks the next pod again if that one is annotated.
    // Carried over, the Wake re-read the world every 5 s until the next pod came.
    const held = d.desire === 'Wake' && d.conflict !== undefined && on(io, 'set-wake-waits-for-cr');
    const carried =
      d.desire === 'Wake' && !held && on(io, 'set-wake-outlives-pod') ? carryWakeOver(state, d) : 'spent';
    if (carried === 'waits') return;
    if (carried === 'spent') {
      await reportConflict(state, undefined, io);
      state.setDesire = undefined;
      return;
    }
  }
  return desirePass(state, io, state.setDesire!, pod!);
}

/**
 * Ours (patch `set-wake-outlives-pod`): an un-suspend's Wake whose pod goes before its VM runs (deleted by
 * hand while vk-cocoon retries a failed pull, or replaced by the set) passes to the next pod of the same
 * name running the same VM. vk-cocoon restores that pod from the `:hibernate` tag (its evidence check on
 * every create, vk contract §4.1), so the tag is spent once the VM runs, and is dropped then. Before, the
 * desire was spent with the pod and the tag stayed, for a later create to roll the VM back to the
 * suspend-time state. The desire waits WAKE_TIMEOUT_MS for the next pod (a scale-down's pod never comes
 * back; the set drops that tag itself); a next pod asked to hibernate ends it (its round pushes the tag
 * anew), as does one running another VM or a VM this workflow never saw.
 * Returns `waits` (keep the desire, look again), `adopted` (state.setDesire now names the current pod) or
 * `spent` (drop the desire, keep the tag).
 */
function carryWakeOver(state: VMState, d: NonNullable<VMState['setDesire']>): 'waits' | 'adopted' | 'spent' {
  const pod = state.podObs;
  const vmName = d.vmName ?? (pod?.exists ? pod.annotations?.[Annotations.vmName] : undefined);
  if (!vmName) return 'spent';
  if (pod?.exists && !pod.deleting) {
    // Another pod of that name: the next incarnation, if it runs the same VM and nobody asked it to sleep.
    if (pod.annotations?.[Annotations.vmName] !== vmName || hibernateAnnotated(pod)) return 'spent';
    log.info(
      `${state.pod}: the un-suspend passes to the new pod of ${vmName}; its tag is dropped once it runs`,
    );
    state.setDesire = {
      ...d,
      podUID: pod.uid,
      podResourceVersion: pod.resourceVersion,
      since: Date.now(),
      late: undefined,
      goneSince: undefined,
      inherited: true,
      vmName,
    };
    return 'adopted';
  }
  const goneSince = d.goneSince ?? Date.now();
  if (Date.now() - goneSince < WAKE_TIMEOUT_MS) {
    state.setDesire = { ...d, vmName, goneSince };
    return 'waits';
  }
  log.warn(
    `${state.pod}: went before its VM ran after the un-suspend and no pod of ${vmName} came back within ${goDuration(WAKE_TIMEOUT_MS)}; letting go (${vmName}:hibernate, if still there, stays)`,
  );
  return 'spent';
}

/** setDesirePass for a desire whose pod is the one the workflow sees (exists, not being deleted). */
async function desirePass(
  state: VMState,
  io: VMIO,
  d: NonNullable<VMState['setDesire']>,
  pod: PodObservation,
): Promise<void> {
  if (d.desire === 'Wake') {
    const holder = ordered(state).find(
      (cr) => cr.exists && (cr.desire === 'Hibernate' || cr.status?.phase === 'Hibernating'),
    );
    const held = holder !== undefined;
    // An inherited Wake (carryWakeOver) never touches the annotation: whoever set it on the new pod wants
    // the VM asleep, and its round pushes the tag anew.
    if (d.inherited && hibernateAnnotated(pod)) {
      await reportConflict(state, undefined, io);
      state.setDesire = undefined;
      return;
    }
    // The VM the Wake is for, kept for carryWakeOver: a gone pod's observation names none.
    if (!d.vmName && on(io, 'set-wake-outlives-pod')) d.vmName = pod.annotations?.[Annotations.vmName];
    if (on(io, 'set-wake-waits-for-cr')) {
      // Ours (found by helper-63): the Wake waits while a CocoonHibernation holds the VM hibernated, and the
      // set is told why. Before, it was spent at once, and the set (whose main then stays not Ready) asked
      // again on every 5 s pass, for as long as the CR held the VM. The hold ends when that CR wants Wake
      // (its own wake runs the VM) or goes (its deletion wakes a set's VM first: `deletion-wakes-set-vm`);
      // then this Wake goes on as any other, and the conflict is cleared at once.
      if (holder) {
        const vmName = pod.annotations?.[Annotations.vmName] ?? state.pod;
        // No phase in the message while the CR wants Hibernate: a message that changes with the CR's
        // progress would be one more signal to the set per change.
        await reportConflict(
          state,
          holder.desire === 'Hibernate'
            ? `VM ${vmName} is held hibernated by cocoonhibernation ${holder.name} (desire Hibernate); the set's wake waits until that one wants Wake or is deleted`
            : `VM ${vmName} is being hibernated by cocoonhibernation ${holder.name} (desire ${holder.desire}, phase ${holder.status?.phase ?? ''}); the set's wake waits for that round to end`,
          io,
        );
        return;
      }
      // A hold that just ended: the wake's deadline counts from now, not from the set's first ask.
      if (d.conflict !== undefined) d.since = Date.now();
      // Clears what the set holds for this pod (this hold, or a conflict of its earlier Hibernate), if any.
      await reportConflict(state, undefined, io);
    }
    if (!held && hibernateAnnotated(pod)) await patchHibernate(io, state, null);
    const now = state.podObs ?? pod;
    // vk is waking it: look again soon (at most a wake's deadline, then the desire is spent as it is). A VM
    // still running while vk hibernates it (lifecycle `hibernating`: the un-suspend came during the push)
    // is not awake yet: vk finishes that round, pushing the tag, and only then wakes it (vk contract §4.2).
    const vkRoundLeft = on(io, 'set-wake-waits-for-hibernate-round') && vkHibernating(now);
    const waiting = !held && !hibernateAnnotated(now) && (!wakeGateOpen(now) || vkRoundLeft);
    if (waiting && Date.now() - d.since < WAKE_TIMEOUT_MS) return;
    if (waiting && on(io, 'set-wake-outlasts-deadline')) {
      // Ours: the wake goes on waiting past its deadline (vk-cocoon retries a failed pull on its own
      // backoff) and drops the tag once the VM runs. Before, the desire was spent here and the tag stayed:
      // a later create of the pod (a node drain, a spec edit) restored the suspend-time state, rolling back
      // everything the VM did since. Looked at every minute from now on; if the pod goes, the wait passes to
      // its next pod (carryWakeOver).
      if (!d.late) {
        log.warn(
          `${state.pod}: not running ${goDuration(WAKE_TIMEOUT_MS)} after the un-suspend; still waiting, its tag is dropped once it runs`,
        );
        state.setDesire = { ...d, late: true };
      }
      return;
    }
    if (waiting)
      log.warn(
        `${state.pod}: not running ${goDuration(WAKE_TIMEOUT_MS)} after the un-suspend; its tag is kept`,
      );
    else if (!held && !d.keepTag) await dropLeftoverTag(state, now, io);
    await reportConflict(state, undefined, io);
    state.setDesire = undefined;
    return;
  }
  const holder = holderOf(state);
  if (holder?.kind === 'cr' && holder.path === 'wake') {
    const vmName = pod.annotations?.[Annotations.vmName] ?? state.pod;
    await reportConflict(
      state,
      `VM ${vmName} is held by cocoonhibernation ${holder.cr.name} (desire ${holder.cr.desire}, ${holder.why}); the set's hibernate waits until that one is deleted or wants Hibernate`,
      io,
    );
    return;
  }
  await reportConflict(state, undefined, io);
  if (!hibernateAnnotated(pod)) await patchHibernate(io, state, 'true');
}

/**
 * After an un-suspend, once the VM runs again: drops the `:hibernate` tag the suspend left, unless a live
 * CocoonHibernation targets the pod or recorded the VM. vk-cocoon looks for that tag on every create of the
 * pod, so a leftover would bring back the suspend-time state on a later recreate (or fail a sub-agent's
 * clone); the reference leaves it. A failed delete is logged and (patch `tag-drop-retries`) throws: the
 * desire is then not spent and the next look (SET_WAKE_POLL_MS) tries again; before the patch it was
 * best effort.
 */
async function dropLeftoverTag(state: VMState, pod: PodObservation, io: VMIO): Promise<void> {
  const vmName = pod.annotations?.[Annotations.vmName] ?? '';
  if (!vmName) return;
  const others = Object.values(state.crs).map((cr) => ({ ...cr, podRef: cr.podRef }));
  if (heldByAnother({ uid: undefined, podRef: state.pod, vmName }, others)) return;
  try {
    await io.registry.deleteManifest({ vmName, tag: Tags.hibernate });
  } catch (err) {
    log.error(`delete leftover hibernate snapshot ${vmName}`, { error: errorMessage(err) });
    // A pod vk-cocoon does not manage (a static toolbox) never has a tag: a refused DELETE spends nothing.
    if (on(io, 'vm-tells-set-spent-tag') && vkManaged(pod)) await tellSetSpent(state, vmName, true);
    if (on(io, 'tag-drop-retries'))
      throw new Error(`delete leftover hibernate snapshot ${vmName}: ${errorMessage(err)}`);
    return;
  }
  // Ours (patch `sub-agents-restore-open-wake`): the set keeps the wake open until told the tag is gone
  // (a sub-agent deleted before then is restored from the tag, not forked over it): told even if never spent.
  await tellSetSpent(state, vmName, false, on(io, 'sub-agents-restore-open-wake'));
}

/**
 * Ours (leveled patch `vm-tells-set-spent-tag`, found by helper-53): tells the set's workflow when the
 * leftover tag of its Wake turns spent or is gone (VMTagSpent), once per change. While told spent, the set
 * creates no pod of that VM (vk-cocoon would restore the new pod from the spent tag, rolling the VM back)
 * and retries the DELETE itself for a pod that is gone. Nothing is sent when nothing was told, unless
 * `always` (patch `sub-agents-restore-open-wake`: "gone" closes the set's open wake of this pod).
 */
async function tellSetSpent(state: VMState, vmName: string, spent: boolean, always = false): Promise<void> {
  const d = state.setDesire;
  if (!d || ((d.spentTold ?? false) === spent && !always)) return;
  d.spentTold = spent;
  await signalSet(state, d.set, 'the spent tag', vmTagSpentSignal, { pod: state.pod, vmName, spent });
}

/**
 * Tells the set's workflow when the answer to its desire changes (a conflict appears or goes). Ours (patch
 * `set-wake-waits-for-cr`, helper-64): compared with what the set was last told (`told`, kept across the
 * set's desire changes), not with this desire's conflict: a conflict told of a Wake and then made moot by
 * the set's Hibernate (or the other way round) is cleared on the set too. Before, the set kept showing it.
 */
async function reportConflict(state: VMState, message: string | undefined, io: VMIO): Promise<void> {
  const d = state.setDesire;
  if (!d) return;
  if (on(io, 'set-wake-waits-for-cr')) {
    const told = d.told;
    d.conflict = message;
    if (told === message) return;
    d.told = message;
  } else {
    if (d.conflict === message) return;
    d.conflict = message;
  }
  await signalSet(state, d.set, 'the desire conflict', vmDesireConflictSignal, {
    pod: state.pod,
    message: message ?? null,
  });
}

/**
 * Signals the workflow of CocoonSet `set` (same namespace) with `arg`. A set whose workflow is not running
 * (the set is gone) has nobody to tell: that is logged at INFO as "set workflow not told of `what`", not
 * thrown.
 */
async function signalSet<T>(
  state: VMState,
  set: string,
  what: string,
  signal: SignalDefinition<[T]>,
  arg: T,
): Promise<void> {
  try {
    await getExternalWorkflowHandle(cocoonSetWorkflowId(state.namespace, set)).signal(signal, arg);
  } catch (err) {
    log.info(`set workflow not told of ${what}`, { set, error: errorMessage(err) });
  }
}

/**
 * Runs passes for one CR until one ends without asking to go again (the finalizer add asks), or without
 * news: the answer of one of the pass's own writes may be the first this workflow hears of a deletion or a
 * spec edit (the user's change landed just before the write; its watch event then carries an older
 * resourceVersion than the answer, so the signal changes nothing and sets no `dirty`). Before the patch
 * `act-on-news-in-answers`, such a deletion waited for the 60 s fallback re-read and such an edit for the
 * CR's next event.
 */
async function passUntilSettled(state: VMState, name: string, io: VMIO): Promise<void> {
  for (let i = 0; i < 5; i++) {
    const before = state.crs[name];
    const again = await pass(state, name, io);
    const now = state.crs[name];
    const news =
      before !== undefined &&
      now !== undefined &&
      now.uid === before.uid &&
      ((now.deleting === true && before.deleting !== true) || now.generation !== before.generation);
    if (!news || !on(io, 'act-on-news-in-answers')) {
      if (!again) return;
      continue;
    }
    // As for the signal (observeHibernationSignal): the user's own action does not wait out a retry time.
    userActed(now);
  }
}

/**
 * One reconcile pass for CR `name` (docs/hibernation.md#one-pass). Returns true to run another pass right
 * away.
 */
async function pass(state: VMState, name: string, io: VMIO): Promise<boolean> {
  const cr = state.crs[name];
  if (!cr?.exists) {
    delete state.crs[name];
    return false;
  }
  if (cr.deleting) {
    await deletionFlow(state, cr, io);
    return false;
  }
  if (!hasFinalizer(cr) && !(cr.status?.phase === undefined && on(io, 'finalizer-rides-first-write'))) {
    await addFinalizer(io, state, cr, seenOf(cr));
    return true;
  }
  if (!cr.podRef) {
    await writeStatus(io, state, cr, markFailedPatch(cr, 'spec.podRef.name is required', Date.now()));
    return false;
  }
  // Deliberate addition: a name no pod can have would otherwise wait Pending for ever ("not yet present").
  // Failed, as the reference's other spec-level errors (empty podRef, unknown desire); podRef is immutable.
  const badName = podNameProblem(cr.podRef);
  if (badName) {
    const msg = `spec.podRef.name ${goQuote(cr.podRef)} can never name a pod: ${badName}`;
    await writeStatus(io, state, cr, markFailedPatch(cr, msg, Date.now()));
    return false;
  }
  const pod = state.podObs;
  // Deliberate fix: a wake never starts on a pod being deleted; that pod counts as gone. vk-cocoon stops
  // its VM first (the container terminates), so the wake gate closes: an Active CR went Waking and, once
  // the pod was gone, Failed at the wake deadline (deleting a CocoonSet whose pods have CRs did that to
  // every one). Now it goes Pending, as for a missing pod; Hibernated and Waking keep their phase
  // (markPending never demotes them). Nor does a new hibernate attempt start on such a pod: vk has
  // stopped the VM, so no snapshot can come, and a pod held Terminating (a finalizer) made the CR time
  // out and retry every 3.5 min. A hibernate already in flight (Hibernating) goes on: its snapshot may
  // still land; a Hibernated CR keeps its phase.
  const deleting = pod?.deleting === true && startsNoTransition(cr, io);
  const absent = deleting ? 'is being deleted' : 'is gone';
  if (
    (!pod?.exists || pod.deleting === true) &&
    tagSpent(cr.status) &&
    on(io, 'spent-tag-drop-without-pod')
  ) {
    // Ours: a wake whose VM ran and whose tag DELETE keeps failing goes on retrying it with the pod gone.
    // vk-cocoon restores any new pod of this VM from a `:hibernate` tag that exists, so the pod's CocoonSet
    // holds its re-create back until the tag is gone (docs/cocoonset.md#restore-from-hibernation); without
    // the retry here the two waited for each other until the wake deadline.
    const vmName = cr.status?.vmName ?? '';
    await dropWakeTag(
      io,
      state,
      cr,
      vmName,
      `pod ${cr.namespace}/${cr.podRef} ran the woken VM; the pod ${absent}`,
    );
    return true; // the wake is done: the next pass finds the pod gone (Pending)
  }
  if (
    (!pod?.exists || deleting) &&
    deadlineDue(cr, Date.now()) &&
    on(io, 'transition-without-pod-times-out')
  ) {
    // Deliberate fix: a transition whose pod went away still ends at its deadline. markPending never
    // demotes Waking, and the paths' own deadline checks need the pod, so the CR said Waking for as long
    // as the pod stayed away (the reference's too). A Hibernating CR reaches this only when its deadline
    // falls due before the pass that would mark it Pending.
    const vmName = cr.status?.vmName ?? '';
    const podName = `${cr.namespace}/${cr.podRef}`;
    if (cr.status?.phase === 'Hibernating') {
      await failAtDeadline(io, state, cr, 'hibernate', (limit) => ({
        event: `snapshot ${vmName} not confirmed in the registry within ${limit}; pod ${podName} ${absent}`,
        status: `hibernate not confirmed within ${limit}; pod ${podName} ${absent}`,
      }));
    } else {
      await failAtDeadline(io, state, cr, 'wake', (limit) => ({
        event: `pod ${podName} ${absent}; vk-cocoon did not report the container running within ${limit}`,
        status: `wake timed out after ${limit}; pod ${podName} ${absent}`,
      }));
    }
    return false;
  }
  if (!pod?.exists || deleting) {
    const why = deleting ? 'is being deleted' : 'not yet present';
    await waitForPod(io, state, cr, `pod ${cr.namespace}/${cr.podRef} ${why}`);
    return false;
  }
  const vmName = pod.annotations?.[Annotations.vmName] ?? '';
  if (!vmName) {
    await waitForPod(
      io,
      state,
      cr,
      `pod ${cr.namespace}/${cr.podRef} has no ${Annotations.vmName} annotation yet`,
    );
    return false;
  }
  const path = route(cr.desire, cr.status?.phase);
  if (typeof path !== 'string') {
    await writeStatus(
      io,
      state,
      cr,
      markFailedPatch(cr, `unknown desire ${goQuote(path.unknown)}`, Date.now()),
    );
    return false;
  }
  const holder = holderOf(state);
  const self = holder?.kind === 'cr' && holder.cr.name === cr.name;
  if (holder && !self && holder.path !== path) {
    const msg =
      holder.kind === 'cr'
        ? `VM ${vmName} is held by cocoonhibernation ${holder.cr.name} (desire ${holder.cr.desire}, ${holder.why}); desire ${cr.desire} waits until that one is deleted`
        : `VM ${vmName} is held by cocoonset ${holder.set}, which is suspended (${holder.why}); desire ${cr.desire} waits until the set is un-suspended`;
    const notReady = on(io, 'conflict-loser-not-ready');
    const followed = on(io, 'loser-phase-follows-holder') ? holder.path : undefined;
    await writeStatus(io, state, cr, conflictWaitPatch(cr, msg, Date.now(), notReady, followed));
    return false;
  }
  await writeStatus(io, state, cr, conflictPatch(cr, undefined, Date.now()));
  state.vmName = vmName;
  if (path === 'hibernate' && !vkManaged(pod) && on(io, 'refuses-unmanaged-hibernate')) {
    // Deliberate deviation: vk-cocoon never hibernates a VM it does not manage (a static toolbox's: it
    // adopts a VM run by someone else). The reference sets the annotation anyway and goes Failed at the
    // 3m0s deadline, saying the registry never confirmed a snapshot it was never asked for. Here the CR
    // says Failed at once, and why, and the pod is left alone. A later pod of that name that vk-cocoon
    // manages (the toolbox's mode edited) routes as usual at its next pass.
    const msg = `pod ${cr.namespace}/${cr.podRef} is not managed by vk-cocoon (${Annotations.managed} is not "true", as on a static toolbox); vk-cocoon never hibernates its VM ${vmName}`;
    await writeStatus(io, state, cr, markFailedPatch(cr, msg, Date.now()));
    return false;
  }
  log.debug(`reconcile hibernation ${cr.namespace}/${cr.name} desire=${cr.desire} vm=${vmName}`);
  const before = cr.status?.phase;
  if (path === 'hibernate') await hibernatePath(state, name, vmName, io);
  else await wakePath(state, name, vmName, io);
  // A finished transition may route the CR the other way now (a desire reversed mid-flight): go again,
  // as the reference's status patch re-triggers its reconcile.
  const after = state.crs[name]?.status?.phase;
  return after !== before && route(cr.desire, after) !== path;
}

/**
 * True when a CR's next step on a pod being deleted would start (or go on waiting for) a transition that
 * cannot finish there (see `pass`): every wake, and a hibernate not yet Hibernating or Hibernated. Each
 * rule sits behind the patch that introduced it.
 */
function startsNoTransition(cr: TrackedCR, io: VMIO): boolean {
  const path = route(cr.desire, cr.status?.phase);
  if (path === 'wake') return on(io, 'wake-on-deleting-pod-is-pending');
  if (path !== 'hibernate' || cr.status?.phase === 'Hibernating' || cr.status?.phase === 'Hibernated')
    return false;
  return on(io, 'hibernate-on-deleting-pod-is-pending');
}

/**
 * The CR whose path the VM follows when live CRs disagree, and why: the first (oldest) one with a
 * transition in flight; else the oldest live one that has not lost the VM already (no DesireConflict
 * condition), so a decision once recorded in the CRs' status survives a restart of the workflow; else the
 * oldest live one (`ordered`: creation time, then creation order within the second). A deliberate
 * addition: the reference only serializes, so opposite desires take turns flipping the annotation.
 */
function holderOf(state: VMState): Holder | undefined {
  const live: Holder[] = ordered(state).flatMap((cr) => {
    if (!cr.exists || cr.deleting || !cr.podRef) return [];
    const path = route(cr.desire, cr.status?.phase);
    return typeof path === 'string' ? [{ kind: 'cr' as const, cr, path, why: '' }] : [];
  });
  const inFlight = live.find(
    (l) => l.kind === 'cr' && (l.cr.status?.phase === 'Hibernating' || l.cr.status?.phase === 'Waking'),
  );
  if (inFlight) return { ...inFlight, why: 'its transition is in flight' };
  const d = state.setDesire;
  if (d?.desire === 'Hibernate') {
    // The set's desire counts from when this workflow first received it; a CR created in the same second
    // counts as older.
    const since = rfc3339(d.since);
    const at = live.findIndex((l) => l.kind === 'cr' && (l.cr.creationTimestamp ?? '') > since);
    live.splice(at < 0 ? live.length : at, 0, { kind: 'set', set: d.set, path: 'hibernate', why: '' });
  }
  const lost = (h: Holder) => (h.kind === 'cr' ? conflicting(h.cr) : state.setDesire?.conflict !== undefined);
  const kept = live.find((l) => !lost(l));
  if (kept && kept !== live[0]) return { ...kept, why: 'it held the VM first' };
  const first = live[0];
  if (!first) return undefined;
  // Creation times have one-second resolution: a tie is decided by which CR this workflow saw first.
  const created = first.kind === 'cr' ? first.cr.creationTimestamp : undefined;
  const tie = live.some((l) => l !== first && l.kind === 'cr' && l.cr.creationTimestamp === created);
  return { ...first, why: tie ? 'created in the same second, seen first' : 'created first' };
}

/**
 * Marks `cr` Pending with `message` while its pod is gone, being deleted or has no VM name yet. Patch
 * `pod-wait-status` (`podWaitPatch`): a CR that lost the VM (DesireConflict) to a holder that no longer
 * holds it (deleted, or its desire now agrees) loses the condition (it named that holder until the pod came
 * back), and a Hibernated CR whose desire is now Wake says Ready=False (it said Ready=True "Hibernated").
 */
async function waitForPod(io: VMIO, state: VMState, cr: TrackedCR, message: string): Promise<void> {
  let clearConflict = false;
  if (conflicting(cr)) {
    const holder = holderOf(state);
    const self = holder?.kind === 'cr' && holder.cr.name === cr.name;
    clearConflict = holder === undefined || self || holder.path === route(cr.desire, cr.status?.phase);
  }
  const wakeFromHibernated = cr.status?.phase === 'Hibernated' && cr.desire === 'Wake';
  if ((clearConflict || wakeFromHibernated) && on(io, 'pod-wait-status')) {
    await writeStatus(io, state, cr, podWaitPatch(cr, message, Date.now(), clearConflict));
    return;
  }
  await writeStatus(io, state, cr, markPendingPatch(cr, message, Date.now()));
}

/** Who the VM follows: a CocoonHibernation, or its CocoonSet's `Hibernate` desire (`holderOf`). */
type Holder =
  | { kind: 'cr'; cr: TrackedCR; path: Path; why: string }
  | { kind: 'set'; set: string; path: 'hibernate'; why: string };

/** The CR as this workflow last saw it, for a write that the server refuses if the CR changed since. */
function seenOf(cr: TrackedCR): FinalizerSeen {
  return { resourceVersion: cr.resourceVersion, finalizers: cr.finalizers, podRef: cr.podRef };
}

function track(state: VMState, obs: HibernationObservation): TrackedCR | undefined {
  const cur = state.crs[obs.name];
  if (!obs.exists) {
    delete state.crs[obs.name];
    return undefined;
  }
  // An activity's response can be older than a watch event that arrived in the same workflow task (e.g. a
  // desire edit right after our own status patch): never let it overwrite the newer observation.
  if (cur && cur.uid === obs.uid && olderThan(obs.resourceVersion, cur.resourceVersion)) return cur;
  const next: TrackedCR = {
    ...obs,
    failures: cur?.failures,
    backoffUntil: cur?.backoffUntil,
    retryAt: cur?.retryAt,
    firstSeenRV: cur?.firstSeenRV ?? obs.resourceVersion,
  };
  state.crs[obs.name] = next;
  return next;
}

/** Whether our finalizer is on the CR. */
function hasFinalizer(cr: { finalizers?: string[] }): boolean {
  return (cr.finalizers ?? []).includes(Finalizers.cocoonHibernation);
}

/**
 * The CR as last seen when our finalizer is still to be added (patch `finalizer-rides-first-write`, a CR
 * never written before: `pass`), else undefined. The first write carries it: a status write as one more
 * request of its local activity (`writeStatus`), a write elsewhere (the pod's annotation, a tag DELETE)
 * after a finalizer write of its own (`finalizerFirst`). Before the patch the finalizer was a pass of its
 * own, as in the reference: one local activity more for every new CR. Nothing is lost by the wait: until
 * the first write nothing was done that the deletion flow would have to undo (no status.vmName, no
 * annotation), so a CR deleted before it goes with nothing to clean up.
 */
function finalizerToAdd(io: VMIO, state: VMState, cr: TrackedCR): FinalizerSeen | undefined {
  const known = state.crs[cr.name] ?? cr;
  if (hasFinalizer(known) || !on(io, 'finalizer-rides-first-write')) return undefined;
  return seenOf(known);
}

/**
 * Adds our finalizer before a write that is not to the CR (see `finalizerToAdd`). False when the CR is gone
 * or being deleted by then: the caller ends its pass, and the next one sees the deletion.
 */
async function finalizerFirst(io: VMIO, state: VMState, cr: TrackedCR): Promise<boolean> {
  const seen = finalizerToAdd(io, state, cr);
  if (!seen) return true;
  const obs = await addFinalizer(io, state, cr, seen);
  return obs !== undefined && !obs.deleting && hasFinalizer(obs);
}

/** Adds our finalizer to `cr` as a write of its own, from `seen`; the CR as answered (undefined: gone). */
async function addFinalizer(
  io: VMIO,
  state: VMState,
  cr: TrackedCR,
  seen: FinalizerSeen,
): Promise<TrackedCR | undefined> {
  const obs = await io.kube.setHibernationFinalizer({
    namespace: cr.namespace,
    name: cr.name,
    present: true,
    seen,
  });
  return track(state, obs);
}

async function writeStatus(
  io: VMIO,
  state: VMState,
  cr: TrackedCR,
  patch: StatusPatch | null,
  event?: EventInput,
): Promise<TrackedCR> {
  if (!patch) return cr;
  const finalizer = finalizerToAdd(io, state, cr);
  const obs = await io.kube.patchHibernationStatus({
    namespace: cr.namespace,
    name: cr.name,
    patch,
    event,
    ...(finalizer && { finalizer }),
  });
  const from = cr.status?.phase || '(none)';
  const to = patch.status.phase;
  if (to && to !== from) log.info(`cocoonhibernation ${cr.namespace}/${cr.name}: ${from} → ${to}`);
  // The response is authoritative; fall back to a local apply if it somehow lacks the status.
  return track(state, obs.status ? obs : applyStatusPatch({ ...obs }, patch)) ?? cr;
}

async function patchHibernate(io: VMIO, state: VMState, value: 'true' | null): Promise<PodObservation> {
  const pod = state.podObs!;
  const updated = await io.kube.patchPodAnnotations({
    namespace: pod.namespace,
    pod: pod.name,
    uid: pod.uid,
    annotations: { [Annotations.hibernate]: value },
  });
  // Same rule for the pod: a newer watch event wins over our own patch's response.
  if (!olderThan(updated.resourceVersion, state.podObs?.resourceVersion)) state.podObs = updated;
  return state.podObs ?? updated;
}

function eventBase(cr: TrackedCR): Pick<EventInput, 'namespace' | 'involved'> {
  return {
    namespace: cr.namespace,
    involved: {
      kind: 'CocoonHibernation',
      name: cr.name,
      uid: cr.uid,
      apiVersion: 'cocoonset.cocoonstack.io/v1',
    },
  };
}

/**
 * Phase-exit announcement (docs/hibernation.md#events): one event per attempt (keyed by the attempt's Ready
 * transition time), and the phase-duration metric: since the phase began when the phase being left is
 * Hibernating/Waking, else since `startedMs` (epoch ms) when the transition began and ended within this
 * pass (vk-cocoon finished while the annotation patch was in flight, so the phase was never written).
 */
function announcement(
  cr: TrackedCR,
  kind: 'hibernate' | 'wake',
  result: 'ok' | 'timeout',
  reason: string,
  type: 'Normal' | 'Warning',
  message: string,
  startedMs?: number,
): EventInput {
  const ltt = readyTransitionMs(cr.status);
  const inPhase = cr.status?.phase === (kind === 'hibernate' ? 'Hibernating' : 'Waking');
  const since = inPhase ? ltt : startedMs;
  return {
    ...eventBase(cr),
    type,
    reason,
    message,
    key: `${cr.uid}/${reason}/${ltt ?? 'none'}/${cr.generation ?? 0}`,
    phaseDuration:
      since !== undefined ? { kind, result, seconds: Math.max(0, (Date.now() - since) / 1000) } : undefined,
  };
}

/**
 * Records `event`, then writes the status change it announces: one local activity in a run with local
 * Kubernetes I/O, two activities in an older run (its history holds two).
 */
async function writeAnnounced(
  io: VMIO,
  state: VMState,
  cr: TrackedCR,
  event: EventInput,
  patch: StatusPatch | null,
): Promise<TrackedCR> {
  if (io.local && patch) return writeStatus(io, state, cr, patch, event);
  await io.kube.emitEvent(event);
  return writeStatus(io, state, cr, patch);
}

async function retryRequested(io: VMIO, cr: TrackedCR, desire: string): Promise<void> {
  if (cr.status?.phase !== 'Failed') return;
  await io.kube.emitEvent({
    ...eventBase(cr),
    type: 'Normal',
    reason: EventReasons.retryRequested,
    message: `retrying ${desire} after prior failure`,
    key: `${cr.uid}/${EventReasons.retryRequested}/${readyTransitionMs(cr.status) ?? 'none'}/${cr.resourceVersion}`,
  });
}

function steady(cr: TrackedCR, phase: HibernationPhase, vmName: string): boolean {
  return (
    cr.status?.phase === phase &&
    cr.status.vmName === vmName &&
    (cr.status.observedGeneration ?? 0) === (cr.generation ?? 0)
  );
}

/**
 * A transition past its deadline (docs/hibernation.md#hibernate, docs/hibernation.md#wake): the timeout
 * announcement (event + histogram), then Failed with the attempt's start kept as lastTransitionTime; the
 * retry comes FAILED_RETRY_MS later (or at once on a spec edit). `messages` gets the limit as Go prints it
 * ("3m0s") and returns the Event's and the status's message.
 */
async function failAtDeadline(
  io: VMIO,
  state: VMState,
  cr: TrackedCR,
  kind: TransitionKind,
  messages: (limit: string) => { event: string; status: string },
): Promise<void> {
  const { timeoutMs, timedOut } = TRANSITIONS[kind];
  const text = messages(goDuration(timeoutMs));
  const event = announcement(cr, kind, 'timeout', timedOut, 'Warning', text.event);
  retryAfterFailure(await writeAnnounced(io, state, cr, event, markFailedPatch(cr, text.status, Date.now())));
}

/**
 * How a path whose gate has not opened ends its pass: Failed when the in-flight phase's deadline has passed
 * (`failAtDeadline`), else that phase (written when it is not the CR's phase already, with the attempt's
 * start as lastTransitionTime).
 */
async function inFlightUntilDeadline(
  io: VMIO,
  state: VMState,
  cr: TrackedCR,
  kind: TransitionKind,
  vmName: string,
  messages: (limit: string) => { event: string; status: string },
): Promise<void> {
  if (pastDeadline(cr, kind, Date.now())) return failAtDeadline(io, state, cr, kind, messages);
  await writeStatus(io, state, cr, setPhasePatch(cr, TRANSITIONS[kind].phase, vmName, Date.now()));
}

/** HIBERNATE path (docs/hibernation.md#hibernate). */
async function hibernatePath(state: VMState, name: string, vmName: string, io: VMIO): Promise<void> {
  let cr = state.crs[name]!;
  if (waitingOutFailure(cr)) return;
  await retryRequested(io, cr, 'Hibernate');
  const startedMs = hibernateAnnotated(state.podObs!) ? undefined : Date.now();
  if (startedMs !== undefined && !(await finalizerFirst(io, state, cr))) return;
  const pod = startedMs === undefined ? state.podObs! : await patchHibernate(io, state, 'true');
  if (hibernateGateOpen(pod)) {
    // A steady Hibernated CR does not re-probe on every pod event (the reference does;
    // docs/hibernation.md#hibernate).
    if (steady(cr, 'Hibernated', vmName)) return;
    let present = false;
    let probeError: string | undefined;
    try {
      present = await probeUntilDeadline(io, cr, vmName);
    } catch (err) {
      probeError = `probe hibernate snapshot ${vmName}: ${errorMessage(err)}`;
    }
    if (probeError && !pastDeadline(cr, 'hibernate', Date.now())) {
      // Deliberate fix: the reference returns before setting Hibernating, so a CR whose first probe
      // fails never starts its deadline clock and retries forever without ever reaching Failed.
      cr = await writeStatus(io, state, cr, setPhasePatch(cr, 'Hibernating', vmName, Date.now()));
      // And the status says why it is still Hibernating, and until when it keeps trying.
      const deadline = deadlineOf(cr.status, 'Hibernating', HIBERNATE_TIMEOUT_MS);
      const until = deadline === undefined ? '' : `; retrying until ${rfc3339(deadline)}, then Failed`;
      await writeStatus(io, state, cr, probeFailingPatch(cr, `${probeError}${until}`, Date.now()));
      throw new Error(probeError);
    }
    // Any answer of the registry ends a probe failure (an error at the deadline keeps it: it is the cause).
    if (!probeError) cr = await writeStatus(io, state, cr, probeFailingPatch(cr, undefined, Date.now()));
    if (present) {
      const event = announcement(
        cr,
        'hibernate',
        'ok',
        EventReasons.hibernated,
        'Normal',
        `snapshot ${vmName} pushed to the registry`,
        startedMs,
      );
      await writeAnnounced(io, state, cr, event, setPhasePatch(cr, 'Hibernated', vmName, Date.now()));
      return;
    }
  }
  // vk-cocoon's own reason, when it reported the round failed (a push the registry refused: it keeps the
  // VM running and retries the round), as for the wake (found by a new-user run).
  const vkFailed = vkFailure(pod);
  const reported = vkFailed === undefined ? '' : ` (it reported: ${vkFailed})`;
  await inFlightUntilDeadline(io, state, cr, 'hibernate', vmName, (limit) => ({
    event: `snapshot ${vmName} not confirmed in the registry within ${limit}${reported}`,
    status: `hibernate not confirmed within ${limit}${vkFailed === undefined ? '' : `; vk-cocoon reported the hibernate failed: ${vkFailed}`}`,
  }));
}

/**
 * HEAD of `<vmName>:hibernate`. While the CR is Hibernating the call is cut at the deadline (the activity
 * is cancelled; a registry that never answers must not hold the CR past its 3m0s): it then throws, and
 * the caller turns the expired deadline into Failed.
 */
async function probeUntilDeadline(io: VMIO, cr: TrackedCR, vmName: string): Promise<boolean> {
  const probe = () => io.registry.hasManifest({ vmName, tag: Tags.hibernate });
  const deadline = deadlineOf(cr.status, 'Hibernating', HIBERNATE_TIMEOUT_MS);
  if (deadline === undefined) return probe();
  // Strictly past the deadline, as nextWake wakes for it.
  const remaining = Math.max(1, deadline + 1 - Date.now());
  try {
    return await CancellationScope.withTimeout(remaining, probe);
  } catch (err) {
    if (pastDeadline(cr, 'hibernate', Date.now())) {
      throw new Error(
        `no answer before the ${goDuration(HIBERNATE_TIMEOUT_MS)} deadline (${errorMessage(err)})`,
      );
    }
    throw err;
  }
}

/** WAKE path (docs/hibernation.md#wake). */
async function wakePath(state: VMState, name: string, vmName: string, io: VMIO): Promise<void> {
  let cr = state.crs[name]!;
  if (waitingOutFailure(cr)) return;
  await retryRequested(io, cr, 'Wake');
  cr = await writeStatus(io, state, cr, probeFailingPatch(cr, undefined, Date.now())); // a hibernate's leftover
  const startedMs = hibernateAnnotated(state.podObs!) ? Date.now() : undefined;
  if (startedMs !== undefined && !(await finalizerFirst(io, state, cr))) return;
  const pod = startedMs !== undefined ? await patchHibernate(io, state, null) : state.podObs!;
  if (wakeGateOpen(pod) && !(vkHibernating(pod) && on(io, 'wake-waits-for-hibernate-round'))) {
    // A steady Active CR does not DELETE the tag on every pod event (the reference does;
    // docs/hibernation.md#wake).
    if (steady(cr, 'Active', vmName)) return;
    await dropWakeTag(io, state, cr, vmName, `pod ${cr.namespace}/${pod.name} is running`, startedMs);
    return;
  }
  // vk-cocoon's own reason, when it reported the wake failed (e.g. the tag missing from the registry), says
  // more than "never running" (found by a new-user run).
  const vkFailed = vkFailure(pod);
  const [why, reported] =
    vkFailed === undefined
      ? ['vk-cocoon never reported the container running', '']
      : [`vk-cocoon reported the wake failed: ${vkFailed}`, ` (it reported: ${vkFailed})`];
  await inFlightUntilDeadline(io, state, cr, 'wake', vmName, (limit) => ({
    event: `vk-cocoon did not report the container running within ${limit}${reported}`,
    status: `wake timed out after ${limit}; ${why}`,
  }));
}

/**
 * The end of a wake whose VM runs: DELETE the spent `<vmName>:hibernate` tag, then Active with the wake's
 * announcement (`running` is its Event message; `startedMs` the attempt's start when this pass started it).
 * A failed DELETE (patch `tag-drop-retries`; the reference logs it and goes Active) keeps the CR `Waking`
 * with `SnapshotDeleteFailing` True saying why, and throws: the pass backs off and retries. Left behind,
 * the tag would bring this snapshot back on the pod's next create, rolling the VM back.
 */
async function dropWakeTag(
  io: VMIO,
  state: VMState,
  cr: TrackedCR,
  vmName: string,
  running: string,
  startedMs?: number,
): Promise<void> {
  if (!(await finalizerFirst(io, state, cr))) return;
  try {
    await io.registry.deleteManifest({ vmName, tag: Tags.hibernate });
  } catch (err) {
    log.error(`delete hibernation snapshot ${vmName}`, { error: errorMessage(err) });
    if (on(io, 'tag-drop-retries')) {
      const error = `delete hibernation snapshot ${vmName}: ${errorMessage(err)}`;
      const why = `${error}; the VM runs, the wake completes once the spent tag is gone`;
      // A wake vk finished during the annotation patch never wrote Waking: it is in flight until the tag goes.
      if (cr.status?.phase !== 'Waking')
        cr = await writeStatus(io, state, cr, setPhasePatch(cr, 'Waking', vmName, Date.now()));
      const failing = deleteFailingPatch(cr, why, Date.now());
      // Ours (leveled patch `spent-tag-warning-event`): the condition's change comes with a Warning Event,
      // so `kubectl get events` shows a wake stuck on the registry (only a change is written: once per error).
      if (failing && on(io, 'spent-tag-warning-event'))
        await writeAnnounced(io, state, cr, deleteFailingEvent(cr, why), failing);
      else await writeStatus(io, state, cr, failing);
      throw new Error(error);
    }
  }
  cr = await writeStatus(io, state, cr, deleteFailingPatch(cr, undefined, Date.now()));
  const event = announcement(cr, 'wake', 'ok', EventReasons.wokenActive, 'Normal', running, startedMs);
  await writeAnnounced(io, state, cr, event, setPhasePatch(cr, 'Active', vmName, Date.now()));
}

/** The Warning Event announcing `SnapshotDeleteFailing` True with message `why` (one occurrence per write). */
function deleteFailingEvent(cr: TrackedCR, why: string): EventInput {
  return {
    ...eventBase(cr),
    type: 'Warning',
    reason: EventReasons.snapshotDeleteFailing,
    message: why,
    key: `${cr.uid}/${EventReasons.snapshotDeleteFailing}/${Date.now()}`,
  };
}

/**
 * vk-cocoon is in a hibernate round on the pod (lifecycle `hibernating`). Its VM still runs until the push is
 * done, so the wake gate would pass; but vk finishes the round (pushing the tag, removing the VM) before it
 * wakes the VM (vk contract §4.2). A CR that takes the VM over mid-round (the Hibernating holder deleted, or
 * a Wake CR created beside it: reverse-desire routing covers only the CR whose phase is Hibernating) waits
 * in `Waking` instead (patch `wake-waits-for-hibernate-round`): before, it went Active at once and deleted
 * the tag while vk was still pushing it; a DELETE between the push and vk's wake pull loses the VM.
 */
function vkHibernating(pod: PodObservation): boolean {
  return pod.annotations?.[Annotations.lifecycleState] === LifecycleStates.hibernating;
}

/**
 * True for a CocoonSet's pod whose VM `vmName` is hibernated (hibernate requested, the VM not running): once
 * no CocoonHibernation holds it, the set clears the annotation and vk wakes the VM from its `:hibernate`
 * tag (docs/cocoonset.md#a-pass-in-order, un-suspend), so a deleting CR must not drop that tag first.
 */
function setVMHibernated(pod: PodObservation, vmName: string): boolean {
  return (
    pod.exists &&
    !pod.deleting &&
    pod.ownerKind === 'CocoonSet' &&
    hibernateAnnotated(pod) &&
    (pod.annotations?.[Annotations.vmName] ?? '') === vmName &&
    !wakeGateOpen(pod)
  );
}

/**
 * True while vk-cocoon may still need the `:hibernate` tag of `vmName` to bring that VM back: the pod
 * exists and carries that VM name, no hibernate is requested, and the VM does not run yet (no VM id or no
 * running container: wake gate closed). vk reads the tag on wake and at a restore-marked create
 * (docs/wire-contract.md#vk-cocoon); a failed pull is retried on vk's backoff, so `failed` counts too.
 */
function wakeInFlight(pod: PodObservation, vmName: string): boolean {
  return (
    pod.exists &&
    !hibernateAnnotated(pod) &&
    (pod.annotations?.[Annotations.vmName] ?? '') === vmName &&
    !wakeGateOpen(pod)
  );
}

/**
 * Deletion (docs/hibernation.md#deletion-and-tag-gc): unless another live CR holds the VM, drop the
 * `:hibernate` tag of the VM this CR recorded (best effort), then remove the finalizer. Deliberate
 * additions, so a deletion never races vk-cocoon over the tag:
 * - while vk is in the middle of a hibernate round for this VM (hibernate requested, lifecycle
 *   `hibernating`), wait — dropping the tag now would race the push — for at most DELETE_ROUND_WAIT_MS
 *   after the deletion started;
 * - a CocoonSet's VM left hibernated (`setVMHibernated`, no other live CR holding it): its set would wake it
 *   from the tag right after the CR goes, so wake it here first (clear the hibernate annotation);
 * - while vk is waking this VM (`wakeInFlight`: the tag is the only copy and vk is pulling it), wait until
 *   the VM runs (then the tag is spent and goes), until DELETE_WAKE_WAIT_MS after the deletion started; past
 *   that, keep the tag: a wake vk still retries must find it. The reference deletes at once and loses the VM;
 * - while the pod's CocoonSet is suspended (its `Hibernate` desire), neither wake the VM nor drop the tag;
 * - a CocoonSet's pod gone or going while its VM lives in the tag (the CR says Hibernated or Waking, or a
 *   HEAD finds the tag: a round that ended while the pod and the CR went): the set recreates the pod
 *   restoring from that tag (its restore intent reads this CR's phase, and the CR stays until its
 *   finalizer goes; otherwise vk-cocoon's own tag check at create restores it), so the tag waits for that
 *   pod's VM to run, as for a wake in flight;
 *   while no pod is back, until DELETE_WAKE_WAIT_MS after the deletion started, then it is kept. A set
 *   itself deleting or gone discards its VMs' state (docs/cocoonset.md#deletion-and-registry-gc): the tag
 *   goes. The reference drops it at once, and the recreated pod boots fresh;
 * - a recorded VM that is not this pod's (neither the VM this workflow acted on nor the pod's annotation: a
 *   status edited by hand) keeps its tag;
 * - a CR that recorded no VM stands for the VM this workflow acted on for the pod (it waited behind a holder
 *   that kept the tag for it), unless our finalizer was never on it (patch `finalizer-rides-first-write`:
 *   deleted before its first write, nothing was done for it);
 * - a spent tag (`tagSpent`: the CR's wake ran the VM and the registry refused the DELETE; leveled patch
 *   `spent-tag-outlives-cr`) is older than the VM that ran: no wait for the set's restore, and a failed
 *   DELETE fails the pass (retried with backoff) until DELETE_WAKE_WAIT_MS after the deletion started, so
 *   the CR, which holds its set's re-create of the pod back, stays until the tag is gone.
 */
async function deletionFlow(state: VMState, cr: TrackedCR, io: VMIO): Promise<void> {
  const recorded = cr.status?.vmName ?? '';
  // Deliberate fix: the tag dropped is the VM of this CR's pod, as this workflow knows it (the VM it acted
  // on, or the pod's annotation now). A status.vmName edited by hand to name another VM (any namespace,
  // even one a suspended set needs) is kept, with a warning; the reference deletes whatever it names.
  const podVM = state.podObs?.exists ? state.podObs.annotations?.[Annotations.vmName] : undefined;
  const foreign =
    recorded !== '' && recorded !== state.vmName && recorded !== podVM && on(io, 'deletion-keeps-foreign-vm');
  if (foreign) {
    log.warn(
      `not deleting ${recorded}:hibernate: cocoonhibernation ${cr.namespace}/${cr.name} recorded it, but pod ${cr.namespace}/${cr.podRef} runs ${podVM ?? state.vmName ?? 'no VM this workflow knows'}`,
    );
  }
  // Deliberate fix: a CR that never recorded a VM (it lost the VM to another CR, then its pod went) and is
  // the last live CR on its pod stands for the VM this workflow acted on for the pod. A holder deleted before
  // it kept the tag because this CR still tracked the VM (heldByAnother); without this, nothing dropped that
  // tag once this CR went too. While another live CR tracks the pod, that one stays responsible.
  const othersTrack = Object.values(state.crs).some((o) => o.name !== cr.name && o.exists && !o.deleting);
  const inherited =
    recorded === '' &&
    state.vmName !== undefined &&
    (podVM === undefined || podVM === state.vmName) &&
    !othersTrack &&
    on(io, 'deletion-drops-inherited-tag') &&
    // A CR our finalizer was never on had nothing done for it (patch finalizer-rides-first-write: the
    // finalizer comes with its first write), so it stands for no VM, even one its pass had named.
    (hasFinalizer(cr) || !on(io, 'finalizer-rides-first-write'))
      ? state.vmName
      : '';
  const vmName = foreign ? '' : recorded || inherited;
  let keepTag = false;
  if (vmName) {
    const pod = state.podObs;
    const roundInFlight =
      pod?.exists === true &&
      hibernateAnnotated(pod) &&
      vkHibernating(pod) &&
      (pod.annotations?.[Annotations.vmName] ?? '') === vmName;
    const since = cr.deletionTimestamp ? Date.parse(cr.deletionTimestamp) : Date.now();
    if (roundInFlight && Date.now() - since < DELETE_ROUND_WAIT_MS) {
      lookAgainBy(cr, since + DELETE_ROUND_WAIT_MS);
      return;
    }
    const waitForWake = () => {
      lookAgainBy(cr, since + DELETE_WAKE_WAIT_MS);
    };
    // The pod's CocoonSet is suspended (its Hibernate desire): the VM stays hibernated and its tag is kept,
    // whatever the CocoonHibernations say (docs/cocoonset.md#suspend).
    const setSuspends = state.setDesire?.desire === 'Hibernate';
    let kept = `vk-cocoon has not finished waking it within ${goDuration(DELETE_WAKE_WAIT_MS)}`;
    const phase = cr.status?.phase;
    // A spent tag (this CR's wake ran the VM, the registry refused the DELETE) holds an older VM than the one
    // that ran: it is never the VM's only copy, and left behind it rolls the VM back at its pod's next create.
    const spent = tagSpent(cr.status) && on(io, 'spent-tag-outlives-cr');
    if (
      (!pod?.exists || pod.deleting === true) &&
      state.podSet !== undefined &&
      !setSuspends &&
      !spent &&
      on(io, 'deletion-waits-for-set-restore') &&
      // Hibernated or Waking: the VM lives in the tag. Otherwise a HEAD says: a hibernate round that ended
      // while the pod and the CR went (the CR then says Hibernating, or Pending once it saw the pod gone)
      // left its snapshot as the VM's only copy; the round wait above let vk finish pushing it.
      (phase === 'Hibernated' || phase === 'Waking' || (await tagMayExist(io, vmName)))
    ) {
      const set = await io.kube.cocoonSetLiveness({ namespace: cr.namespace, name: state.podSet });
      if (set === 'live') {
        if (Date.now() - since < DELETE_WAKE_WAIT_MS) {
          log.info(
            `keeping ${vmName}:hibernate while cocoonset ${state.podSet} recreates pod ${cr.namespace}/${cr.podRef} from it`,
          );
          waitForWake();
          return;
        }
        keepTag = true;
        kept = `cocoonset ${state.podSet} has not brought pod ${cr.namespace}/${cr.podRef} back within ${goDuration(DELETE_WAKE_WAIT_MS)}`;
      }
    }
    let others: HibernationObservation[] | undefined;
    if (pod && !setSuspends && setVMHibernated(pod, vmName) && on(io, 'deletion-wakes-set-vm')) {
      others = await io.kube.listHibernations({ namespace: cr.namespace });
      if (!heldByAnother({ uid: cr.uid, podRef: cr.podRef, vmName }, others)) {
        log.info(`waking ${vmName} before dropping its snapshot: its CocoonSet would wake it from that tag`);
        await patchHibernate(io, state, null);
        waitForWake();
        return;
      }
    }
    if (pod && wakeInFlight(pod, vmName) && on(io, 'deletion-waits-for-wake')) {
      if (Date.now() - since < DELETE_WAKE_WAIT_MS) {
        waitForWake();
        return;
      }
      keepTag = true;
    }
    others ??= keepTag || setSuspends ? [] : await io.kube.listHibernations({ namespace: cr.namespace });
    if (setSuspends) {
      log.info(
        `not deleting ${vmName}:hibernate: cocoonset ${state.setDesire?.set} is suspended and needs it`,
      );
    } else if (keepTag) {
      log.warn(`keeping hibernate snapshot ${vmName}: ${kept}`);
    } else if (heldByAnother({ uid: cr.uid, podRef: cr.podRef, vmName }, others)) {
      log.info(
        `not deleting ${vmName}:hibernate (if any): another live CocoonHibernation still tracks the VM`,
      );
    } else {
      try {
        await io.registry.deleteManifest({ vmName, tag: Tags.hibernate });
        log.info(`deleted ${vmName}:hibernate: cocoonhibernation ${cr.namespace}/${cr.name} was deleted`);
      } catch (err) {
        log.error(`delete hibernate snapshot ${vmName}`, { error: errorMessage(err) });
        // A spent tag is retried (the pass's error backoff) until DELETE_WAKE_WAIT_MS after the deletion
        // started, the CR kept meanwhile: while it exists its CocoonSet holds the pod's re-create back
        // (docs/cocoonset.md#restore-from-hibernation). Past that the deletion completes and the tag stays.
        if (spent && Date.now() - since < DELETE_WAKE_WAIT_MS)
          throw new Error(`delete spent hibernate snapshot ${vmName}: ${errorMessage(err)}`);
      }
    }
  }
  if (hasFinalizer(cr)) {
    log.info(`cocoonhibernation ${cr.namespace}/${cr.name}: deleted, finalizer removed`);
    const obs = await io.kube.setHibernationFinalizer({
      namespace: cr.namespace,
      name: cr.name,
      present: false,
      seen: seenOf(cr),
    });
    if (obs.exists && obs.deleting) {
      // Other finalizers still hold the object; it is no longer ours to process.
      delete state.crs[cr.name];
      return;
    }
  }
  delete state.crs[cr.name];
}

/**
 * HEAD of `<vmName>:hibernate` for the deletion flow: true when the tag exists, and when the registry does
 * not answer (the tag is then kept as if it existed: a registry outage must neither wedge a deletion nor
 * decide that a snapshot is absent).
 */
async function tagMayExist(io: VMIO, vmName: string): Promise<boolean> {
  try {
    return await io.registry.hasManifest({ vmName, tag: Tags.hibernate });
  } catch (err) {
    log.warn(`probe hibernate snapshot ${vmName}: ${errorMessage(err)}; treated as present`);
    return true;
  }
}

function publish(state: VMState, mode: SearchAttributeMode): void {
  const holder = holderOf(state);
  publishSearchAttributes(
    mode,
    state,
    {
      namespace: state.namespace,
      vmName: state.vmName ?? state.podObs?.annotations?.[Annotations.vmName] ?? '',
      kind: 'VM',
    },
    (holder?.kind === 'cr' ? holder.cr.status?.phase : undefined) ||
      (Object.keys(state.crs).length ? 'Pending' : state.setDesire ? 'SetSuspend' : 'Idle'),
  );
}

/**
 * The `state` query: what the workflow knows, per CR, in a readable shape. Its progress fields make a
 * barrier for a caller that signalled it: `signals` (handled, all runs) and `lastSignalResourceVersion`
 * (newest resourceVersion a signal carried) say a signal was applied; `passes` counts reconcile rounds
 * started, `reads` re-reads of the world completed; `busy` is true while a round runs or a signal still asks for one; `nextWakeAt` is the next
 * timer-driven round (ISO time, or null). `busy` false with `nextWakeAt` in the future means the workflow
 * has finished acting on everything it was told.
 */
function describe(state: VMState, busy: boolean) {
  const wakeAt = nextWake(state);
  return {
    namespace: state.namespace,
    pod: state.pod,
    signals: state.signals ?? 0,
    lastSignalResourceVersion: state.lastSignalRV ?? null,
    passes: state.passes ?? 0,
    reads: state.reads ?? 0,
    busy,
    nextWakeAt: wakeAt === undefined ? null : new Date(wakeAt).toISOString(),
    vmName: state.vmName,
    podExists: state.podObs?.exists ?? null,
    hibernateAnnotation: state.podObs?.annotations?.[Annotations.hibernate] ?? null,
    lifecycleState: state.podObs?.annotations?.[Annotations.lifecycleState] ?? null,
    holder: holderName(holderOf(state)),
    setDesire: state.setDesire ?? null,
    hibernations: ordered(state).map((cr) => ({
      name: cr.name,
      desire: cr.desire,
      phase: cr.status?.phase ?? '',
      deleting: cr.deleting ?? false,
      failures: cr.failures ?? 0,
      nextRetryAt: cr.retryAt ? new Date(cr.retryAt).toISOString() : null,
      backoffUntil: cr.backoffUntil ? new Date(cr.backoffUntil).toISOString() : null,
    })),
  };
}

function holderName(h: Holder | undefined): string | null {
  if (!h) return null;
  return h.kind === 'cr' ? h.cr.name : `cocoonset/${h.set}`;
}

/** The answer of the VM workflow's `state` query. */
export type VMStateView = ReturnType<typeof describe>;
