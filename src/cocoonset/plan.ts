/**
 * One CocoonSet reconcile pass (operator cocoonset/reconciler.go `Reconcile` steps 2–21, agents.go,
 * toolboxes.go; docs/cocoonset.md#a-pass-in-order, docs/cocoonset.md#generation-stamp,
 * docs/cocoonset.md#status-roll-up), written straight through as the reference's code reads:
 * `reconcilePass(input, io)` decides, and every read or write it needs goes through `io` (`PassIO`), the
 * planner's one boundary. The CocoonSet workflow implements `io` with activities, so Temporal's replay of
 * the workflow replays the pass deterministically (the pass depends only on `input` and the outcomes `io`
 * answered); the unit tests implement it with an in-memory world (test/unit/plan-world.ts).
 *
 * Reads the pass may need (the CocoonHibernation List, registry probes, a pod GET) are actions too, and are
 * asked for only when a pod is actually built: a steady pass asks for no List and no probe; a pass that
 * builds pods asks for the List exactly once (shared with un-suspend, which Go lists separately). Per-pod
 * loops over many pods go out as one concurrent batch (`io.exec(actions, true, …)`), so a pass of 1000
 * pods stays a handful of workflow tasks.
 *
 * The flows (docs/cocoonset.md#suspend, #seat-release, #migration) are here too, each behind its
 * `PassInput` switch (set by the workflow behind `patched()`); their per-VM hibernate and wake requests go to
 * the pods' VM workflows (`askVM`), the one writer of a pod's hibernate annotation. Not handled here:
 * deletion (docs/cocoonset.md#deletion-and-registry-gc) ends the pass with `{kind: 'delegate', flow}`, as
 * do the flows for a run recorded before their switch (suspend delegated; migration and wake offered to
 * `io`, which declines).
 */
import type { V1Pod, V1ResourceRequirements } from '@kubernetes/client-node';
import {
  AGENT_CONTAINER_NAME,
  Annotations,
  CONDITION_PROGRESSING,
  ConditionReasons,
  EventReasons,
  Finalizers,
  Labels,
  LifecycleStates,
  Roles,
} from '../api/keys.js';
import {
  cocoonSetGenerationOf,
  containerRunning,
  hibernateRequested,
  lifecycleOf,
  podReady,
  podTerminal,
  restoreFromHibernate,
  vmIDOf,
  vmNameForAgent,
  vmNameForPod,
  vmNameOf,
} from '../api/pod.js';
import type { CocoonHibernation, CocoonSet, CocoonSetPhase, ToolboxSpec } from '../api/types.js';
import type { OperatorMetrics } from '../metrics.js';
import { type NamespaceLimits, namespaceLimitsRefusal, type Replacement } from './admission.js';
import {
  type Classified,
  classifyPods,
  compareNames,
  type FailedRound,
  failedRoundHoldsVM,
  hibernateRoundFailed,
  isControlledBy,
  isTerminal,
  mainPodFailedReason,
  noteFailedRounds,
  ownedPods,
  podsInNameOrder,
  readFailedRounds,
  subSlotsAscending,
} from './classify.js';
import {
  type DriftOptions,
  podNodePool,
  podSpecMatchesAgent,
  podSpecMatchesToolbox,
  schedulingMatches,
} from './drift.js';
import {
  agentPodName,
  buildAgentPod,
  buildToolboxPod,
  containerResources,
  nodePoolOf,
  preferredHostnameAffinity,
  requiredHostname,
  toolboxPodName,
} from './pods.js';
import { readRebuildHistory, triageSubAgent } from './rebuild.js';
import {
  markRestoreIfHibernated,
  podsHibernatedByCR,
  podsRestorableByCR,
  podsWithSpentTagByCR,
  type SpentTag,
  stashedVMNames,
  vmsHeldByCR,
} from './restore.js';
import { buildStatus, type CocoonSetStatus, planStatusWrite } from './status.js';
import {
  cloneImageRef,
  invalidSpecReason,
  nodePinReason,
  replicasReason,
  staticToolboxReason,
  vmSpecReason,
} from './validate.js';
import { agentModeOf, hibernatePolicyOf, parseVMSpec, replicasOf, toolboxModeOf } from './vmspec.js';

/** Requeue delay while waiting for the main / for a terminating predecessor (`requeueWaitForMain`). */
export const REQUEUE_WAIT_FOR_MAIN_MS = 5_000;

/** A failed toolbox is recreated once its pod is this old, ms (`toolboxRecreateBackoff`). */
export const TOOLBOX_RECREATE_MIN_AGE_MS = 30_000;
/** Requeue delay while a suspend waits for its VMs to hibernate (`requeueSuspendPoll`). */
export const REQUEUE_SUSPEND_POLL_MS = 5_000;
/** At most this many sub-agent creates in flight (`subAgentCreateConcurrency`). */
export const SUB_AGENT_CREATE_CONCURRENCY = 8;

/** What the pass starts from. */
export interface PassInput {
  /** The CocoonSet as read at the start of the pass (a cache read). Not mutated. */
  cs: CocoonSet;
  /** Pods listed in the namespace by `cocoonset.cocoonstack.io/name=<cs>`; ownership is filtered here. */
  pods: readonly V1Pod[];
  /** The pass's clock, epoch ms (Temporal: `Date.now()` inside the workflow). */
  nowMs: number;
  /** False when no registry is configured (tests): restore is a no-op, migration/wake are off. */
  registryConfigured: boolean;
  /**
   * Deliberate addition (the workflow sets it behind `patched()`): missing sub-agents are not created while
   * the main is asked to hibernate (its hibernate annotation, or a CocoonHibernation with desire
   * Hibernate or phase Hibernating for it). They fork from the main's VM, which is about to go: created in
   * that window they fail (`fork source … is not on node`) and use up rebuild attempts.
   */
  subAgentsWaitForHibernatingMain?: boolean;
  /**
   * Run the generation stamps and the deletes of extra sub-agents as one concurrent batch each (the
   * workflow sets it behind `patched()`; the reference runs them one by one in name order), not one round
   * per pod: one by one, each write is its own workflow task (a 1000-pod scale-down made a 20,000-event run
   * that took 13-16 s to replay, past the 10 s workflow task timeout).
   * All are attempted; the first error in name / slot order fails the pass.
   */
  batchPodLoops?: boolean;
  /**
   * Suspend (retain policy) and un-suspend go through the VM workflows (docs/cocoonset.md#suspend): the
   * pass asks each pod's VM workflow for the set's desire (`askVM`) instead of patching the hibernate
   * annotation itself, so the VM workflow stays the one writer of it. The workflow sets it behind
   * `patched()`; without it, suspend is handed over (`delegate`) and un-suspend patches, as before.
   */
  setDesires?: boolean;
  /**
   * Pods whose VM workflow reported that a CocoonHibernation holds the VM against the set's desire, with
   * its message (`vmDesireConflict`): a suspending set shows it on its status, and so does a set whose main
   * a CR holds hibernated (`crHoldsWait`).
   */
  desireConflicts?: Readonly<Record<string, string>>;
  /**
   * Ours (leveled patch `set-wake-waits-for-cr`): a not-Ready main whose VM workflow reports that a
   * CocoonHibernation holds it hibernated (`desireConflicts`) ends the pass without a requeue
   * (`heldMainBlock`); sub-agents and toolboxes so held are named on `Progressing` (`heldMemberBlock`); a
   * suspend that a CocoonHibernation holding a VM awake keeps `Suspending` does not look every 5 s
   * (`hibernateAll`). The workflow sets it behind `patched()`.
   */
  crHoldsWait?: boolean;
  /**
   * Pods whose VM workflow the set asked to hibernate and not to wake since (`setDesires`): un-suspend asks
   * them to wake too, annotated or not (a VM a CocoonHibernation held awake, or a suspend undone before the
   * VM workflow acted, would otherwise keep a stale desire).
   */
  hibernateAsked?: Readonly<Record<string, string>>;
  /**
   * `hibernatePolicy: release` (docs/cocoonset.md#seat-release): the release suspend frees the pods' node
   * seats, and the released-seat wake restores the main. The workflow sets it behind `patched()`; without
   * it, the release suspend is handed over (`delegate`) and the wake is offered to `io` (which declines).
   */
  seatRelease?: boolean;
  /**
   * Cross-node migration of the main when `spec.nodeName` changes (docs/cocoonset.md#migration). The
   * workflow sets it behind `patched()`; without it, migration is offered to `io` (which declines).
   */
  migration?: boolean;
  /**
   * Pods whose VM the set's own wake (released seat, migration) restored and whose `:hibernate` tag it
   * dropped, since the set last asked their VM workflow: un-suspend's wake ask then says `keepTag`, so a wake
   * sends one DELETE (the VM workflow of a pod the set recreated for any other reason drops the leftover).
   */
  tagDroppedFor?: Readonly<Record<string, true>>;
  /**
   * A pod the pass deletes (scale-down, drift — the main's too —, rebuild, dead letter lifted, toolbox
   * recreate) gets its `:hibernate` tag dropped (`dropRemovedTags`), and a drift delete waits while vk
   * hibernates the VM (`inHibernateRound`). The workflow sets it behind `patched()`.
   */
  deletedVMsDropTag?: boolean;
  /**
   * The set's wakes (released seat, migration) count a VM vk is still hibernating as not awake
   * (`vmAwake`). The workflow sets it behind `patched()`.
   */
  wakeWaitsForHibernateRound?: boolean;
  /**
   * The release suspend deletes a pod no node took without asking it to hibernate first (`suspendRelease`).
   * The workflow sets it behind `patched()`.
   */
  releaseSkipsUnbound?: boolean;
  /**
   * A pass whose main pod is still terminating creates nothing and says so: phase `Pending` (a retain suspend:
   * `Suspending`), `Progressing=False` reason `MainTerminating`, a 5 s requeue (`waitForTerminatingMain`).
   * The reference tries the create: AlreadyExists, which a suspend reports as a failure with backoff and the
   * normal flow as a silent 5 s requeue that leaves the old status (`Running`, Ready). The workflow sets it
   * behind `patched()`.
   */
  waitsForTerminatingMain?: boolean;
  /**
   * The migration deletes the old main only once vk reported its hibernate round done (lifecycle
   * `hibernated` for the pod's generation stamp, `vkQuiesced`), not as soon as the pod carries the hibernate
   * request and a tag is in. The workflow sets it behind `patched()`.
   */
  migrationWaitsForQuiesce?: boolean;
  /**
   * A migration that fails a step keeps the set `Migrating` (the failure's status says why), so the next pass
   * resumes it; the reference writes the derived phase, and a main already running on the target then no
   * longer engages the migration, which leaves its `:hibernate` tag behind for a later recreate to restore.
   * The workflow sets it behind `patched()`.
   */
  migrationFailureKeepsPhase?: boolean;
  /**
   * The migration deletes a restore main no node took (unbound, VM never started) whose required hostname
   * affinity names another node than the current pin, or any node when the pin was cleared: rebuilt, it
   * follows the pin (the tag stays). The reference leaves it Pending for ever. The workflow sets it behind
   * `patched()`.
   */
  migrationFollowsPin?: boolean;
  /**
   * A migration whose hibernate ask a CocoonHibernation refuses (it holds the VM awake: `desireConflicts`)
   * says so on `Progressing` (reason `DesireConflict`), as the suspend does; before, it only said
   * `Migrating`. The workflow sets it behind `patched()`.
   */
  migrationShowsConflict?: boolean;
  /**
   * The validation gate also checks `spec.nodeName` as the label value the main's required affinity makes
   * of it (`nodePinReason`): before, a migration to an invalid pin deleted the old main and then failed to
   * create the new one. The workflow sets it behind `patched()`.
   */
  validatesPin?: boolean;
  /**
   * A pod to create whose VM's `:hibernate` tag is spent (`podsWithSpentTagByCR`: a CR woke the VM and the
   * tag's DELETE keeps failing) is not created until the tag is gone; the pass says why on `Progressing`
   * (reason `SpentSnapshotTag`) and looks again in 5 s. Before, the set created it and vk-cocoon restored
   * the VM from that tag, rolling it back to the hibernate. The workflow sets it behind `patched()`.
   */
  createWaitsForSpentTag?: boolean;
  /**
   * The same hold for the main's other creates, which restore it from its `:hibernate` tag on purpose: the
   * retain suspend's, the migration's and the released-seat wake's (`holdMainWhileSpent`). Before, each
   * restored the VM from a spent tag. The workflow sets it behind `patched()`.
   */
  mainRestoresWaitForSpentTag?: boolean;
  /**
   * A CocoonHibernation being deleted still holds its pod back while its tag is spent: its deletion retries
   * the tag's DELETE before it lets go (the VM workflow's `spent-tag-outlives-cr`). The workflow sets it
   * behind `patched()`.
   */
  spentTagOutlivesCR?: boolean;
  /**
   * A live pod whose spec drifted (main, sub-agent, toolbox) is not deleted for its re-create while its VM's
   * tag is spent (`spentHeld`): the re-create would be held back (above), leaving the VM down for as long as
   * the registry refuses the DELETE. Before, the drift deleted it anyway. The workflow sets it behind
   * `patched()`.
   */
  driftWaitsForSpentTag?: boolean;
  /**
   * Pods (name → VM name) whose `:hibernate` tag the set's own wake (released seat, migration) left spent: it
   * ran the VM, then the tag's DELETE failed (the workflow records it). Held as a CocoonHibernation's spent
   * tag is, unless a CocoonHibernation holds that VM now; a missing main's pass retries the DELETE first
   * (`holdMainWhileSpent`). The workflow passes it behind `patched()`.
   */
  spentBySet?: Readonly<Record<string, string>>;
  /**
   * Ours (leveled patch `sub-agents-restore-open-wake`, helper-55's finding): pods whose VM workflow the
   * un-suspend asked to wake and that has not yet told the set the VM's `:hibernate` tag is gone (it drops the
   * tag once the VM runs, then signals `vmTagSpent` with `spent: false`). A sub-agent among them whose pod
   * went meanwhile has its VM in that tag: it is created restoring the snapshot as a suspended set's is
   * (`restoreSuspendState`), and its VM workflow is asked to wake again (`wakeOwed`). Before, the Wake ask
   * ended the set's record and the pod was forked from the main, which vk-cocoon refuses while the tag exists:
   * the pod stayed failed and a later suspend stayed `Suspending` on it. A pod deleted after its VM ran and
   * before the tag went is restored from the tag too (vk-cocoon's evidence check does the same for a main),
   * unless the set knows the tag spent (`spentBySet`: then it is created fresh once the tag is gone): it loses
   * what the VM did since the wake, not its state from before the suspend. A slot scaled away or a toolbox
   * removed meanwhile has its tag dropped (`letGoOfRemoved`). The workflow passes it behind `patched()`.
   */
  wakesOpen?: Readonly<Record<string, true>>;
  /**
   * The validation gate also refuses `spec.agent.replicas` above `MAX_SUB_AGENTS` (`replicasReason`):
   * before, a pass planned that many sub-agents and `2147483647` aborted the worker process on every start.
   * The workflow sets it behind `patched()`.
   */
  capsSubAgents?: boolean;
  /**
   * A Ready main that carries the hibernate annotation counts as not Ready (step 15: `Pending`, 5 s):
   * nothing touches the sub-agents and toolboxes while it hibernates. vk-cocoon reports a main restored
   * under a CocoonHibernation's `Hibernate` Ready for a moment before it hibernates it again; a pass in that
   * moment drift-deleted every sub-agent and toolbox after a spec edit, and none came back until the main
   * was woken (found by a new-user run; the reference has the same window). The workflow sets it behind
   * `patched()`.
   */
  hibernatingMainHoldsMembers?: boolean;
  /**
   * A failed toolbox (pod phase `Failed` or lifecycle `failed`) is recreated only once its pod is
   * `TOOLBOX_RECREATE_MIN_AGE_MS` old; until then the pass says why (`Progressing=False ToolboxFailing`,
   * Warning Event) and looks again when it may. Before, it was recreated at once: a toolbox whose VM can
   * never come up (a missing clone image, a static toolbox without its VM id and IP) was recreated in a hot
   * loop, hundreds of passes a minute, with only `Scaling` on the status (found by a new-user run; the
   * reference has no toolbox backoff either). The workflow sets it behind `patched()`.
   */
  toolboxRecreateBackoff?: boolean;
  /**
   * The validation gate also refuses a `static` toolbox without `staticVMID` or `staticIP`
   * (`staticToolboxReason`): vk-cocoon cannot adopt it and deletes its pod, which the set recreated at once,
   * in a loop (found by a new-user run). The workflow sets it behind `patched()`.
   */
  validatesStaticToolboxes?: boolean;
  /**
   * The validation gate also refuses what cocoon-webhook refuses and vk-cocoon cannot bring up
   * (`vmSpecReason`: a clone-mode image that is not a registry-relative `repo[:tag]`, firecracker with a
   * Windows guest, a `http(s)://` image or a non-`run` mode, a non-static toolbox on another backend than
   * the agent). Without the webhook installed such an edit drift-deleted the live main
   * and its replacement failed (found by a new-user run). The workflow sets it behind `patched()`.
   */
  validatesVMRules?: boolean;
  /**
   * A live main whose edited spec moves its placement (pool, CPU class, `spec.nodeName`) is kept while no
   * node has the new placement's labels (`placementBlock`): the pass touches no pod and says
   * `Progressing=False NoMatchingNode`, looking again every `NO_NODE_RECHECK_MS`. Before, the drift (or the
   * migration) deleted the live main and its replacement stayed Pending (found by a new-user run). The
   * workflow sets it behind `patched()`.
   */
  waitsForANode?: boolean;
  /**
   * A pass that is blocked (`InvalidSpec`) or fails keeps a flow's phase (`Suspending`, `Suspended`,
   * `Waking`, `Migrating`) instead of writing `Pending`: the flows keep their state in the phase. Before, an
   * invalid edit of a released set that also un-suspended it wrote `Pending`, and the fix then created the
   * main as a fresh pod, without the restore marker or the node hint of the released-seat wake (found by a
   * new-user run). The workflow sets it behind `patched()`.
   */
  blockKeepsFlowPhase?: boolean;
  /**
   * The validation gate also checks what the apiserver rejects in envFrom (exactly one source per entry),
   * resource claims (a CocoonSet pod has none to claim) and extended resources (whole numbers, request =
   * limit): before, such an edit drift-deleted the live main and its replacement was rejected (422; found
   * by a new-user run). The workflow sets it behind `patched()`.
   */
  validatesMorePodFields?: boolean;
  /**
   * A released-seat wake whose restore main no node took yet (unbound, no VM) follows an edit of the
   * placement (pool, CPU class, `spec.nodeName` pin): the pod is deleted and the next pass creates it again,
   * restoring from the same `:hibernate` tag, with the new placement. Before, the wake waited on the old
   * pod for ever (found by a new-user run; the migration does the same since `migrationFollowsPin`). The
   * workflow sets it behind `patched()`.
   */
  releasedWakeFollowsPlacement?: boolean;
  /**
   * A live main whose edited spec gives it another clone-mode image is kept while that image is not in the
   * registry (`cloneImageBlock`): the pass touches no pod and says `Progressing=False ImageNotFound`,
   * looking again every `NO_IMAGE_RECHECK_MS`. Before, a mistyped tag drift-deleted the running main and
   * its replacement failed to clone (found by a new-user run). The workflow sets it behind `patched()`.
   */
  driftWaitsForCloneImage?: boolean;
  /**
   * A main no node has taken (no `spec.nodeName`, no VM) whose required hostname is not the spec's pin (the
   * pin changed or was cleared) counts as drifted: deleted and created again under the current pin. Before,
   * drift did not compare the pin (as the reference), so a set created with a mistyped `spec.nodeName` kept
   * its Pending main on the old pin after the fix, for ever (found by a new-user run). The workflow sets it
   * behind `patched()`.
   */
  unboundMainFollowsPin?: boolean;
  /**
   * A retain suspend neither asks a pod no node has taken (no `spec.nodeName`, no VM) to hibernate nor waits
   * for it: it runs no VM, so no node could ever report it hibernated (a restore pod's VM lives in its tag
   * alone); once a node takes it, the next pass asks. Before, the suspend waited in `Suspending` for ever
   * (found by a new-user run; the release suspend does the same since `releaseSkipsUnbound`). The workflow
   * sets it behind `patched()`.
   */
  retainSkipsUnbound?: boolean;
  /**
   * Sub-agents of a main without a snapshot CPU class (adopted from before the set had one) are built
   * without the class selector: they fork from the main on its node, and vk-cocoon refuses a classed pod on a
   * node of another class or none. Before, they were refused for ever (found by a new-user run). The
   * workflow sets it behind `patched()`.
   */
  subAgentsFollowMainClass?: boolean;
  /**
   * Before its first pod delete a pass reads the CocoonSet's generation and, when the spec changed since the
   * pass read it, ends there and runs again on the new spec (`specStillCurrent`). Before, two quick edits
   * (an image there and back, replicas 0 then 3) had the first edit's pass delete running VMs the final
   * spec keeps (found by a new-user run). The workflow sets it behind `patched()`.
   */
  deletesCheckGeneration?: boolean;
  /**
   * Drift ignores a cpu or memory request or limit the spec leaves unset and the apiserver's LimitRanger set
   * from the namespace's LimitRange defaults (src/cocoonset/drift.ts `DriftOptions`). Before (as the
   * reference), in such a namespace every pod the set created drifted at once and was deleted again, on
   * every pass. The workflow sets it behind `patched()`.
   */
  driftComparesAdmittedResources?: boolean;
  /**
   * A pass that would delete live pods to replace them (drift, a migration) first reads the namespace's
   * LimitRanges and ResourceQuotas and keeps the pods while admission would refuse a replacement or a pod
   * the spec adds beside them (`namespaceLimitsBlock`):
   * `Progressing=False ExceedsNamespaceLimits` with the apiserver's wording, looked at again every
   * `NAMESPACE_LIMITS_RECHECK_MS`. Before, a resources edit past the namespace's quota deleted the running
   * main and its replacement was refused (403). The workflow sets it behind `patched()`.
   */
  driftChecksNamespaceLimits?: boolean;
  /**
   * A main no node has taken (no `spec.nodeName`, no VM) is checked for a node with its labels
   * (`pendingMainBlock`): when none has them, the set says `Progressing=False NoMatchingNode` naming them
   * and looks again every `NO_NODE_RECHECK_MS`. Before, a set created with a mistyped pool, CPU class (which
   * cannot be changed afterwards) or `spec.nodeName` said `Pending` `Reconciling` with no reason, for ever
   * (found by new-user runs). The workflow sets it behind `patched()`.
   */
  pendingMainNamesMissingNode?: boolean;
  /**
   * The generation check before a pod delete (`deletesCheckGeneration`) runs inside the delete itself: the
   * delete activity reads the CocoonSet and deletes only while its generation is the one the pass planned
   * from (`deletePod`'s `ifGeneration`), answering `stale` otherwise. Before, the read and the delete were
   * two activities a workflow round trip apart, and an edit landing between them went unseen (found by a
   * new-user run: 3 of 9 rounds of two quick edits). It also saves that round trip. The workflow sets it
   * behind `patched()`.
   */
  deleteReadsGeneration?: boolean;
  /**
   * A pass's status write is diffed against the pass's own earlier write, when it made one, instead of the
   * status it read, and a failure keeps the flow phase that write set (`phaseAfterBlock`): before, a
   * released wake that wrote `Waking` and then failed wrote `Suspended` with `ReconcileFailed`, and the next
   * such pass compared that with its own (the same) and wrote nothing after its `Waking` write, so the set
   * showed `Progressing=False Stable "Waking"` over the failing create (found by a new-user run). The
   * workflow sets it behind `patched()`.
   */
  statusDiffFollowsOwnWrites?: boolean;
  /**
   * A sub-agent or toolbox whose hibernate round vk-cocoon reported failed (`hibernateRoundFailed`: the VM
   * still runs; vk retries the round) is neither rebuilt, recreated nor drift-deleted: the reference counts
   * its lifecycle `failed` as terminal and deleted the VM a CocoonHibernation was keeping (found by a
   * new-user run: a failing registry push destroyed a forked sub-agent three times over). The workflow sets
   * it behind `patched()`.
   */
  failedRoundKeepsVM?: boolean;
  /**
   * The same for the main (`hibernateRoundFailed`): the set is not `Failed` while vk-cocoon retries a failed
   * hibernate round on it, and the main is not drift-deleted meanwhile. The reference runs its failed-main
   * short-circuit: `Failed`, then a false `RecoveredFromFailure` "Ready again" at each retry (the set flapped
   * `Failed` and `Pending`; found by a new-user run), and an edit then deleted the VM mid-round. Instead the
   * pass records the Warning `PodLifecycleFailed` (vk's reason) and goes on; the hibernating main holds the
   * set `Pending` with `Progressing=False` reason `HibernateRoundFailed`. The workflow sets it behind
   * `patched()`.
   */
  failedMainRoundKeepsPhase?: boolean;
  /**
   * One rule for every pod whose lifecycle `failed` a hibernate round left (`failedRoundHoldsVM`, with the
   * rounds the set remembers in its `failed-hibernate-rounds` annotation, `noteRounds`): it counts as holding
   * its VM, not as terminal, in every step that reads terminal (sub-agent rebuild, toolbox recreate, the failed main, the suspend gate, the seat
   * release, the placement and clone-image checks), and is never drift-deleted. Before, only a pod still
   * carrying the hibernate annotation was spared: once the round was called off (CocoonHibernation deleted
   * or set to `Wake`, set un-suspended) vk-cocoon still reports `failed` and the set deleted the running
   * sub-agent or toolbox, or held the set `Failed` for good; and a suspend gate that skipped the failed pod
   * said `Suspended` with no snapshot taken (found by a new-user run). The workflow sets it behind `patched()`.
   */
  failedRoundsHoldVMs?: boolean;
  /**
   * A main replaced while its VM lives only in its `:hibernate` tag (`mainStateInTag`: no VM running, the tag
   * in the registry; e.g. a suspended set un-suspended together with a resources edit, or a wake that failed)
   * keeps that tag, and the new pod is restored from it; with an agent image change the main is held instead
   * (`imageMismatch`: `SnapshotImageMismatch`). The set asks the new pod's VM workflow to wake it once
   * the pod is there (`wakeOwed`), which drops the tag once the VM runs. Before, the replacement dropped the
   * tag and the new main booted fresh: the suspended state was lost. The Go operator keeps the tag. A `Failed`
   * main also says vk-cocoon's reason in `Progressing` (before, only its Event did). The workflow sets it
   * behind `patched()`.
   */
  replacedMainKeepsSnapshot?: boolean;
  /**
   * Ours (session 33): the image a main's `:hibernate` snapshot was taken under is read from the snapshot
   * itself (its manifest annotation `cocoonstack.snapshot.baseimage`, one GET), not from the pod: a main
   * about to be created restore-marked (a suspended set's, one a CocoonHibernation holds, a migration's or a
   * released seat's restore) under another
   * image is held with `SnapshotImageMismatch` (before, the restore-marked create skipped vk-cocoon's image
   * check and brought the old VM back under a pod naming the new image), and the hold's message names the
   * snapshot's image (before, a failed restore pod's). The workflow sets it behind `patched()`.
   */
  restoresCheckSnapshotImage?: boolean;
  /**
   * Ours (session 34): a sub-agent whose pod went while the set was suspended (the set asked it to
   * hibernate and has not asked it to wake: `hibernateAsked`) is created restoring its own `:hibernate`
   * snapshot, when the snapshot is there and records the pod's image (or none): `restoreSuspendState`. The
   * un-suspend's wake then drops the tag once the VM runs. Before, it was forked from the main as a new
   * sub-agent, which vk-cocoon refuses while the VM's tag exists (an explicit clone source over a
   * snapshot, vk contract §4.1): the pod stayed failed until someone deleted the snapshot, and that state
   * with it. The workflow sets it behind `patched()`.
   */
  subAgentsRestoreSuspendState?: boolean;
  /**
   * Ours (session 34): a sub-agent or toolbox the pass would create whose VM's tag the set's record calls
   * spent (`spentBySet`: since this session also a VM workflow's un-suspend Wake whose DELETE failed after
   * the VM ran, signal `vmTagSpent`) gets that DELETE again each look (`dropSpentBySet`), and is created
   * once it goes, as the main already was (`holdMainWhileSpent`). Before, only the main's was retried and
   * the others' records came from the main's flows alone. The workflow sets it behind `patched()`.
   */
  retriesSpentDropsOfMembers?: boolean;
  /**
   * Ours (session 34, found by helper-55): a pod the set asked to hibernate whose pod is gone and which the
   * spec no longer builds (a slot past `agent.replicas`, a toolbox no longer in `spec.toolboxes`: scaled
   * down or removed after its pod was deleted, e.g. while suspended) has its VM's `:hibernate` tag dropped
   * and its VM workflow let go (`letGoOfRemoved`), as a pod the set deletes itself on a scale-down does.
   * Before, the tag stayed: a later slot or toolbox of that name restored the old VM from it (a sub-agent
   * was refused), and deleting the set left it behind. The workflow sets it behind `patched()`.
   */
  dropsTagsOfRemovedGone?: boolean;
}

/** Metric families the pass increments (keys of src/metrics.ts `OperatorMetrics`). */
export type PassMetric = Extract<
  keyof OperatorMetrics,
  | 'subagentRebuildTotal'
  | 'subagentDeadLetterTotal'
  | 'lifecycleStateFailedObservedTotal'
  | 'slotReleasePodsDeletedTotal'
  | 'slotReleaseWakeTotal'
  | 'slotReleaseWakeUnschedulableTotal'
>;

/**
 * One unit of I/O. `id` names it for logs, tests and Event keys (unique within a pass). Errors from the API
 * are reported as `{kind: 'error', message}`; the pass adds Go's context prefix.
 */
export type PassAction =
  /** Full Update adding the finalizer (resourceVersion-checked). Outcome: ok | error. */
  | { id: string; type: 'addFinalizer'; finalizer: string }
  /** JSON merge patch `{"metadata":{"annotations":…}}` on a pod; `null` deletes a key. Outcome: ok | error. */
  | { id: string; type: 'patchPodAnnotations'; pod: string; annotations: Record<string, string | null> }
  /** JSON merge patch of annotations on the CocoonSet (no resourceVersion). Outcome: ok | error. */
  | { id: string; type: 'patchCocoonSetAnnotations'; annotations: Record<string, string | null> }
  /**
   * Delete a pod; with `ifGeneration`, only while the CocoonSet's generation is still that one (read by the
   * same activity right before the delete). Outcome: ok | notFound | stale (not deleted: the generation
   * differs or the set is gone) | error.
   */
  | { id: string; type: 'deletePod'; pod: string; ifGeneration?: number }
  /** The CocoonSet's current `metadata.generation` (null: it is gone). Outcome: generation | error. */
  | { id: string; type: 'readGeneration' }
  /** Create a pod. Outcome: ok | alreadyExists | error. */
  | { id: string; type: 'createPod'; pod: V1Pod }
  /** Read a pod (from the cache). Outcome: pod | error (NotFound is an error here). */
  | { id: string; type: 'getPod'; pod: string }
  /** Read a pod from the apiserver, not a cache (the wake's delete check). Outcome: pod | notFound | error. */
  | { id: string; type: 'readPod'; pod: string }
  /** Registry `DeleteManifest(vmName, "hibernate")`; absent counts as done. Outcome: ok | error. */
  /**
   * Delete `<vmName>:hibernate`. `wokenPod`: the pod the set's own wake restored (released-seat wake,
   * migration); its later wake ask tells the VM workflow to leave the tag (`PassInput.tagDroppedFor`).
   * Outcome: ok | error.
   */
  | { id: string; type: 'dropHibernateTag'; vmName: string; wokenPod?: string }
  /** List all CocoonHibernations in the namespace. Outcome: hibernations | error. */
  | { id: string; type: 'listHibernations'; namespace: string }
  /** Whether any Node carries every label of `labelSelector` (`k=v,…`). Outcome: nodes | error. */
  | { id: string; type: 'anyNode'; labelSelector: string }
  /** Registry `HasManifest(vmName, "hibernate")`. Outcome: probe | error. */
  | { id: string; type: 'probeHibernate'; vmName: string }
  /** Registry GET of `<vmName>:hibernate`: present, and the image it records. Outcome: snapshot | error. */
  | { id: string; type: 'readSnapshotImage'; vmName: string }
  /** The namespace's LimitRanges and ResourceQuotas (src/cocoonset/admission.ts). Outcome: limits | error. */
  | { id: string; type: 'readNamespaceLimits' }
  /** Registry `HasManifest(repo, tag)` of a clone-mode base image. Outcome: probe | error. */
  | { id: string; type: 'probeImage'; repo: string; tag: string }
  /** JSON merge patch on `/status`; `status` is the resulting status to mirror. Outcome: ok | error. */
  | { id: string; type: 'patchStatus'; body: { status: Record<string, unknown> }; status: CocoonSetStatus }
  /** Emit a Kubernetes Event on the CocoonSet (fire and forget). Outcome: ok. */
  | { id: string; type: 'event'; eventType: 'Normal' | 'Warning'; reason: string; message: string }
  /**
   * Tell a pod's VM workflow what the set wants of its VM (signal-with-start `setDesire`; the pod as read
   * by the pass). Outcome: ok | error.
   */
  | {
      id: string;
      type: 'askVM';
      pod: string;
      desire: 'Hibernate' | 'Wake';
      podUID?: string;
      podResourceVersion?: string;
      /** A seat release: the VM workflow keeps the desire (and the tag) after the pod's deletion. */
      release?: boolean;
      /** A wake whose `:hibernate` tag the set drops itself (migration): the VM workflow leaves it. */
      keepTag?: boolean;
    }
  /** Increment a counter (fire and forget). Outcome: ok. */
  | { id: string; type: 'metric'; metric: PassMetric; labels: Record<string, string> };

/** The result of running one action. */
export type ActionOutcome =
  | { kind: 'ok' }
  | { kind: 'notFound' }
  | { kind: 'alreadyExists' }
  | { kind: 'error'; message: string }
  | { kind: 'hibernations'; items: CocoonHibernation[] }
  | { kind: 'probe'; present: boolean }
  | { kind: 'snapshot'; present: boolean; image: string }
  | { kind: 'nodes'; any: boolean }
  | { kind: 'generation'; generation: number | null }
  | { kind: 'stale' }
  | { kind: 'limits'; limits: NamespaceLimits }
  | { kind: 'pod'; pod: V1Pod };

/** controller-runtime's Result/error, as the pass ends. */
export interface PassResult {
  /** Immediate (rate-limited) requeue. */
  requeue: boolean;
  /** Requeue after this many ms; 0 = none. */
  requeueAfterMs: number;
  /** The pass failed (retry with backoff; requeue fields are then ignored). */
  error?: string;
}

/** Sub-flows this planner does not implement (extension points). */
export type DelegatedFlow = 'delete' | 'suspend' | 'suspendRelease' | 'migration' | 'wake';

/** How a pass ends. */
export type PassEnd =
  /** The pass is handed to another flow (delete, suspend; migration or wake when they took it). */
  | { kind: 'delegate'; flow: DelegatedFlow }
  /** The pass is over. `mirror` lists what was written to the CocoonSet, for the caller's copy. */
  | {
      kind: 'done';
      result: PassResult;
      mirror: { annotations: Record<string, string>; status?: CocoonSetStatus };
      /**
       * Pods the pass replaced keeping their `:hibernate` tag (`replacedMainKeepsSnapshot`): the workflow
       * owes each new pod a wake ask (it records them as asked to hibernate, so the un-suspend step asks).
       */
      wakeOwed?: string[];
    };

/**
 * The planner's one boundary: the CocoonSet workflow implements it with activities, the unit tests'
 * PlanWorld with an in-memory world.
 */
export interface PassIO {
  /**
   * Runs `actions` and resolves their outcomes in input order: one after another when `concurrent` is
   * false, else with at most `maxConcurrency` in flight. API failures are outcomes (`{kind: 'error'}`),
   * never rejections.
   */
  exec(actions: PassAction[], concurrent: boolean, maxConcurrency: number): Promise<ActionOutcome[]>;
  /**
   * Offers the pass to a flow whose entry gate can engage (migration, released-seat wake). Resolves how the
   * pass ended when the flow took it, or undefined when it declined ("not handled": the pass goes on).
   */
  offer(flow: 'migration' | 'wake'): Promise<PassEnd | undefined>;
}

/**
 * Runs the pass's I/O in the order the reference's code issues it. Fire-and-forget effects (Events,
 * metrics) are queued and run, in order, just before the next action the pass waits on, or when it ends.
 */
class Runner {
  private pending: PassAction[] = [];
  constructor(readonly io: PassIO) {}

  /** Queues a fire-and-forget action. */
  effect(a: PassAction): void {
    this.pending.push(a);
  }

  /** Runs the queued effects, then `a`, one after another; resolves `a`'s outcome. */
  async run(a: PassAction): Promise<ActionOutcome> {
    const batch = [...this.pending, a];
    this.pending = [];
    const outcomes = await this.io.exec(batch, false, 1);
    return outcomes[outcomes.length - 1]!;
  }

  /** Runs the queued effects, then independent actions together (at most SUB_AGENT_CREATE_CONCURRENCY in flight). */
  async runAll(as: PassAction[]): Promise<ActionOutcome[]> {
    if (as.length === 0) return [];
    await this.flush();
    return this.io.exec(as, true, SUB_AGENT_CREATE_CONCURRENCY);
  }

  /** Runs the queued effects. */
  async flush(): Promise<void> {
    if (this.pending.length === 0) return;
    const batch = this.pending;
    this.pending = [];
    await this.io.exec(batch, false, 1);
  }
}

/** Ends the pass from inside a helper, like a `return` through the call stack; only `reconcilePass` catches it. */
class PassEnded {
  constructor(readonly end: PassEnd) {}
}

function errText(o: ActionOutcome): string | undefined {
  return o.kind === 'error' ? o.message : undefined;
}

/** Go `strconv.Atoi` success (optional sign, decimal digits, int64 range). */
function atoiParses(s: string): boolean {
  if (!/^[+-]?[0-9]+$/.test(s)) return false;
  const n = BigInt(s);
  return n >= -(1n << 63n) && n < 1n << 63n;
}

/** A live VM: a VM id is reported and some container runs (the reference's `vmLive`). */
export function vmLive(pod: V1Pod | undefined): boolean {
  return pod !== undefined && vmIDOf(pod) !== '' && containerRunning(pod);
}

/**
 * vk-cocoon finished hibernating the pod's VM: lifecycle `hibernated`, observed for at least the pod's
 * CocoonSet generation stamp (the CocoonHibernation's completion gate, docs/hibernation.md#hibernate). vk
 * writes `hibernated` only after the push and the VM's removal (vk contract §4.2).
 */
function vkQuiesced(pod: V1Pod): boolean {
  const lc = lifecycleOf(pod);
  return lc.state === LifecycleStates.hibernated && lc.observedGeneration >= cocoonSetGenerationOf(pod);
}

/**
 * `vmLive`, and (ours, `wakeWaitsForHibernateRound`) not in a hibernate round vk has not finished (lifecycle
 * `hibernating`: the VM still runs while vk pushes its snapshot, then vk removes it and wakes it from that
 * tag; vk contract §4.2-4.3). Before a wake drops the `:hibernate` tag: dropped mid-round, the tag the wake
 * needs is gone (the reference checks `vmLive` alone).
 */
function vmAwake(st: PassState, pod: V1Pod): boolean {
  return (
    vmLive(pod) &&
    !(st.input.wakeWaitsForHibernateRound && lifecycleOf(pod).state === LifecycleStates.hibernating)
  );
}

/**
 * Migration entry gate (docs/cocoonset.md#migration; the flow's first two gates, no I/O): false
 * ("not handled", no I/O) without a registry, when `spec.nodeName` is empty and the phase is not `Migrating`,
 * or when not migrating and the main is settled on `spec.nodeName` (on it, VM live, not hibernating). True
 * means `migrate` must look (it may still not handle the pass).
 */
export function migrationMayEngage(
  cs: CocoonSet,
  main: V1Pod | undefined,
  registryConfigured: boolean,
): boolean {
  if (!registryConfigured) return false;
  const desired = cs.spec.nodeName ?? '';
  const migrating = cs.status?.phase === 'Migrating';
  if (desired === '' && !migrating) return false;
  const settled =
    main !== undefined &&
    (main.spec?.nodeName ?? '') === desired &&
    vmLive(main) &&
    !hibernateRequested(main);
  return !(!migrating && settled);
}

/**
 * Released-seat wake entry gate for runs recorded before `seat-release` (the offer to `io`; the flow's gate
 * and its I/O-free rows): false without a registry or when none of phase Waking, phase Suspended, phase Suspending
 * with a node hint, or a pending wake cleanup holds; also false for the rows that decline without I/O (main
 * present, not waking, and no hint or a terminal main). True means the wake flow must look (it may still
 * decline).
 */
export function wakeMayEngage(cs: CocoonSet, main: V1Pod | undefined, registryConfigured: boolean): boolean {
  if (!registryConfigured) return false;
  const { hint, waking, engaged } = wakeEngagement(cs, main);
  if (!engaged) return false;
  if (main === undefined || waking) return true;
  return hint !== '' && !isTerminal(main);
}

/**
 * The released-seat wake's engagement inputs (reference `reconcileWake`; docs/cocoonset.md#seat-release): the
 * node hint; `waking` = phase `Waking`, or an unfinished wake whose `Waking` was overwritten (a
 * restore-marked, non-hibernating main while the hint is set); `engaged` = waking, phase `Suspended`, or
 * phase `Suspending` with the hint (on the phase, not the policy).
 */
function wakeEngagement(
  cs: CocoonSet,
  main: V1Pod | undefined,
): { hint: string; waking: boolean; engaged: boolean } {
  const hint = cs.metadata.annotations?.[Annotations.hibernatedOnNode] ?? '';
  const phase = cs.status?.phase;
  const cleanupPending =
    main !== undefined && restoreFromHibernate(main) && !hibernateRequested(main) && hint !== '';
  const waking = phase === 'Waking' || cleanupPending;
  const engaged = waking || phase === 'Suspended' || (phase === 'Suspending' && hint !== '');
  return { hint, waking, engaged };
}

/** Per-pass state the Go code keeps in the in-memory CocoonSet. */
interface PassState {
  cs: CocoonSet;
  ns: string;
  name: string;
  c: Classified;
  r: Runner;
  input: PassInput;
  /** Annotations written to the CocoonSet so far (mirrored into later reads). */
  written: Record<string, string>;
  /** The failed hibernate rounds this pass remembers (`noteRounds`). */
  failedRounds?: Readonly<Record<string, FailedRound>>;
  /** Annotations removed from the CocoonSet so far (hidden from later reads). */
  cleared?: Set<string>;
  /** The namespace's CocoonHibernation List of this pass, once asked for. */
  crs?: Promise<{ items: CocoonHibernation[] } | { error: string }>;
  /** The pass is ending with an error (its failure status is being written). */
  failing?: boolean;
  /** The phase a failing pass writes instead of the derived one (a migration under way keeps `Migrating`). */
  failPhase?: CocoonSetPhase;
  /** The status this pass last wrote (the diff base of its next write with `statusDiffFollowsOwnWrites`). */
  writtenStatus?: CocoonSetStatus;
  /** Pods this pass did not create because their VM's `:hibernate` tag is spent (`createWaitsForSpentTag`). */
  spentWaits?: SpentTag[];
  /** How often the pass has read the CocoonSet's generation before a delete (`specStillCurrent`). */
  generationReads?: number;
  /** Failed toolboxes too young to recreate (`toolboxRecreateBackoff`): pod, failure, ms until it may be. */
  toolboxWaits?: { pod: string; failure: string; waitMs: number }[];
  /** Failed pods with no VM kept because their `:hibernate` tag holds their state (`stateInTag`). */
  tagHeld?: V1Pod[];
  /** Pods deleted keeping their `:hibernate` tag, whose new pod must be asked to wake (`mainStateInTag`). */
  wakeOwed?: string[];
}

function finish(st: PassState, result: Partial<PassResult>, status?: CocoonSetStatus): never {
  throw new PassEnded({
    kind: 'done',
    result: {
      requeue: result.requeue ?? false,
      requeueAfterMs: result.requeueAfterMs ?? 0,
      error: result.error,
    },
    mirror: { annotations: { ...st.written }, status },
    ...(st.wakeOwed ? { wakeOwed: st.wakeOwed } : {}),
  });
}

/** Longest condition message written (the error texts are one line; a safety cut). */
const CONDITION_MESSAGE_MAX = 1024;

/**
 * Ends the pass with `error`. First writes the roll-up of the pods as classified at the start of the pass
 * with `Progressing=False` reason `ReconcileFailed` and the error as its message (ours: the reference only
 * returns the error, so its status kept whatever the last good pass wrote, e.g. `Pending` with 0 ready while
 * the main is Ready). A failing status write is not retried here: the pass ends with the original error.
 */
async function fail(st: PassState, error: string): Promise<never> {
  if (!st.failing) {
    st.failing = true;
    await writeStatus(st, st.failPhase ?? phaseAfterBlock(st), 'status-on-failure', {
      reason: ConditionReasons.reconcileFailed,
      message: error,
    });
  }
  return finish(st, { error });
}

/** Phases a flow keeps its state in (docs/cocoonset.md#suspend, #seat-release, #migration). */
const FLOW_PHASES = new Set<string>(['Suspending', 'Suspended', 'Waking', 'Migrating']);

/**
 * The phase a blocked or failed pass reports: the stored phase (the one this pass wrote, with
 * `statusDiffFollowsOwnWrites`) while a flow keeps its state in it (`blockKeepsFlowPhase`), else `Pending`
 * while the main is missing or not Ready, else derived.
 */
function phaseAfterBlock(st: PassState): CocoonSetPhase | '' {
  const own = st.input.statusDiffFollowsOwnWrites ? st.writtenStatus?.phase : undefined;
  const stored = own || st.cs.status?.phase || '';
  if (st.input.blockKeepsFlowPhase && FLOW_PHASES.has(stored)) return stored as CocoonSetPhase;
  return podReady(st.c.main) ? '' : 'Pending';
}

/**
 * The validation gate (ours; the reference has none): when the current spec builds a pod the apiserver
 * would reject (src/cocoonset/validate.ts), the pass touches no pod — no generation stamp, no drift
 * delete, no create — and says why: the roll-up with `Progressing=False` reason `InvalidSpec` and the
 * rejection as message, and a folded Warning Event `InvalidSpec`. It ends without a requeue: only a spec
 * edit (which starts a pass) can change the answer.
 */
async function blockInvalidSpec(st: PassState, reason: string): Promise<never> {
  return block(st, EventReasons.invalidSpec, `invalid spec, no pod changed: ${reason}`, 0);
}

/**
 * Ends a pass that touched no pod because of `reason` (`InvalidSpec`, `NoMatchingNode`: an Event reason and
 * a `Progressing` condition reason alike): a folded Warning Event with `message`, the roll-up with
 * `Progressing=False` `reason` `message` in `phaseAfterBlock`'s phase, and another pass in `requeueAfterMs`
 * (0: none).
 */
async function block(
  st: PassState,
  reason:
    | typeof EventReasons.invalidSpec
    | typeof EventReasons.noMatchingNode
    | typeof EventReasons.imageNotFound
    | typeof EventReasons.exceedsNamespaceLimits,
  message: string,
  requeueAfterMs: number,
): Promise<never> {
  st.r.effect({ id: `event:${reason}`, type: 'event', eventType: 'Warning', reason, message });
  const status = await writeStatus(st, phaseAfterBlock(st), 'status', { reason, message });
  return finish(st, { requeueAfterMs }, status);
}

/** How often a pass held by `placementBlock` looks for a node again, ms (no Node informer tells it). */
export const NO_NODE_RECHECK_MS = 30_000;

/**
 * The label selector (`k=v,…`, sorted by key) of the nodes `pod` may run on: its node selector (pool, CPU
 * class) and its required hostname (the `spec.nodeName` pin) as `kubernetes.io/hostname`.
 */
function placementSelector(pod: V1Pod): string {
  const pin = requiredHostname(pod);
  const selector = pod.spec?.nodeSelector ?? {};
  const labels: Record<string, string> = pin === '' ? selector : { ...selector, [Labels.hostname]: pin };
  return Object.keys(labels)
    .sort()
    .map((k) => `${k}=${labels[k]}`)
    .join(',');
}

/**
 * The label selector of the nodes the spec's main may run on (its pool and CPU-class node selector, and the
 * `spec.nodeName` pin as `kubernetes.io/hostname`), or undefined when the spec does not move the live
 * `main`: its scheduling still matches (`schedulingMatches`, the drift rule: a main without a CPU class is
 * adopted, not moved, when the spec gains one), and there is no pin or the pin names the node it runs on
 * (or its own pin).
 */
function movedPlacement(cs: CocoonSet, main: V1Pod): string | undefined {
  const wanted = buildAgentPod(cs, 0, '', '');
  const pin = requiredHostname(wanted);
  const samePin = pin === '' || pin === requiredHostname(main) || pin === (main.spec?.nodeName ?? '');
  if (schedulingMatches(main, cs) && samePin) return undefined;
  return placementSelector(wanted);
}

/**
 * The placement gate (ours; the reference has none): when the spec gives the main another placement than
 * the live main has (pool, CPU class, `spec.nodeName` pin) and no node carries the new placement's labels,
 * the pass touches no pod (no drift delete, no migration), writes the roll-up with `Progressing=False`
 * reason `NoMatchingNode` and a folded Warning Event of that reason, and looks again in
 * `NO_NODE_RECHECK_MS`; a flow's phase (an un-suspend, a migration) is kept (`phaseAfterBlock`). Returns
 * when there is no main or a failed one (a create of a Pending pod costs nothing), a suspend is asked (it
 * moves nothing), the placement is unchanged (`movedPlacement`), a node matches, or the Node List fails (a
 * role without nodes: as the reference).
 */
async function placementBlock(st: PassState): Promise<void> {
  const main = st.c.main;
  if (!main || terminal(st, main) || st.cs.spec.suspend) return;
  const wanted = movedPlacement(st.cs, main);
  if (wanted === undefined) return;
  const o = await st.r.run({ id: 'any-node', type: 'anyNode', labelSelector: wanted });
  if (o.kind !== 'nodes' || o.any) return;
  const message = `no node has the labels the spec gives the main (${wanted}): main pod ${st.ns}/${main.metadata?.name ?? ''} is kept and no pod changed; add such a node or change the spec`;
  return block(st, EventReasons.noMatchingNode, message, NO_NODE_RECHECK_MS);
}

/**
 * Ends a pass whose main no node has taken (`unbound`: no `spec.nodeName`, no VM; not failed, not being
 * deleted) when no node has the labels it asks for (its pool and CPU-class node selector, and its required
 * hostname: the `spec.nodeName` pin): one Node List (`limit=1`); then the roll-up in `Pending` with
 * `Progressing=False` reason `NoMatchingNode` naming the labels, a folded Warning Event of that reason, and
 * another look in `NO_NODE_RECHECK_MS` (no Node informer tells it). Returns otherwise, and when the List
 * fails (a role without nodes: the plain `Pending` as the reference). Ours (`pendingMainNamesMissingNode`).
 */
async function pendingMainBlock(st: PassState, main: V1Pod): Promise<void> {
  if (!unbound(main) || terminal(st, main) || main.metadata?.deletionTimestamp != null) return;
  const wanted = placementSelector(main);
  const o = await st.r.run({ id: 'any-node-for-pending-main', type: 'anyNode', labelSelector: wanted });
  if (o.kind !== 'nodes' || o.any) return;
  const message = `no node has the labels main pod ${st.ns}/${main.metadata?.name ?? ''} asks for (${wanted}): it waits Pending; add such a node or fix the spec (spec.nodePool, spec.nodeName; a set's snapshotCompatibilityClass cannot change once set)`;
  st.r.effect({
    id: `event:${EventReasons.noMatchingNode}`,
    type: 'event',
    eventType: 'Warning',
    reason: EventReasons.noMatchingNode,
    message,
  });
  const status = await writeStatus(st, 'Pending', 'status', { reason: EventReasons.noMatchingNode, message });
  return finish(st, { requeueAfterMs: NO_NODE_RECHECK_MS }, status);
}

/** How often a pass held by `cloneImageBlock` probes the registry for the image again, ms. */
export const NO_IMAGE_RECHECK_MS = 30_000;

/**
 * A pod holding a VM whose replacement the spec would clone from another image (`image`, named by `field`),
 * or undefined: a node has taken the pod (its VM runs, or is hibernated there: a retain set being
 * un-suspended, whose wake drift would follow with a delete) and it is not failed (else there is nothing to
 * keep), the spec's `mode` is `clone` with a non-empty image, and the pod does not already name that image
 * in clone mode.
 */
function newCloneImage(
  st: PassState,
  pod: V1Pod | undefined,
  mode: string,
  image: string,
  field: string,
): { pod: V1Pod; image: string; field: string } | undefined {
  if (!pod || unbound(pod) || terminal(st, pod) || mode !== 'clone' || image === '') return undefined;
  const current = parseVMSpec(pod);
  if (current.mode === 'clone' && current.image === image) return undefined;
  return { pod, image, field };
}

/**
 * The clone-image gate (ours; the reference has none), next to the placement gate: when the spec gives the
 * main or a toolbox that holds a VM (`newCloneImage`) another clone-mode image (an edit drift would answer by deleting the pod, and
 * for the main its sub-agents after it) and the registry answers that it has no such image (HEAD of its
 * manifest, on the registry task queue; each image once, all at once), the pass touches no pod, writes the
 * roll-up with `Progressing=False` reason `ImageNotFound` naming each missing image and the pod it keeps,
 * with a folded Warning Event of that reason, and probes again in `NO_IMAGE_RECHECK_MS`; a flow's phase is
 * kept (`phaseAfterBlock`). A registry error fails the pass (retried with backoff): the replacement is not
 * known to come up. Nothing is probed while a suspend is asked (it replaces nothing; the un-suspend is
 * held here, before any VM is woken) or without a registry.
 * vk-cocoon also clones from an image a node holds locally; such an image is refused here until the pod is
 * deleted by hand.
 */
async function cloneImageBlock(st: PassState): Promise<void> {
  if (st.cs.spec.suspend || !st.input.registryConfigured) return;
  const agent = st.cs.spec.agent;
  const wants = [
    newCloneImage(st, st.c.main, agentModeOf(agent), agent.image ?? '', 'spec.agent.image'),
    ...(st.cs.spec.toolboxes ?? []).map((tb, i) =>
      newCloneImage(
        st,
        st.c.toolbox.get(tb.name),
        toolboxModeOf(tb),
        tb.image ?? '',
        `spec.toolboxes[${i}].image`,
      ),
    ),
  ].filter((w) => w !== undefined);
  if (wants.length === 0) return;
  const images = [...new Set(wants.map((w) => w.image))];
  const refs = images.map(cloneImageRef);
  const outcomes = await st.r.runAll(
    refs.map(
      ({ repo, tag }): PassAction => ({ id: `image-probe:${repo}:${tag}`, type: 'probeImage', repo, tag }),
    ),
  );
  const present = new Map<string, boolean>();
  for (const [i, o] of outcomes.entries()) {
    if (o.kind !== 'probe')
      return fail(
        st,
        `probe clone image ${refs[i]!.repo}:${refs[i]!.tag}: ${errText(o) ?? 'unexpected outcome'}`,
      );
    present.set(images[i]!, o.present);
  }
  const missing = wants.filter((w) => present.get(w.image) === false);
  if (missing.length === 0) return;
  const kept = missing.map((w) => {
    const { repo, tag } = refs[images.indexOf(w.image)]!;
    const role = w.pod === st.c.main ? 'main' : 'toolbox';
    return `clone image ${repo}:${tag} is not in the registry: ${role} pod ${st.ns}/${w.pod.metadata?.name ?? ''} is kept`;
  });
  const message = `${kept.join('; ')} and no pod changed; push the image or change ${missing.map((w) => w.field).join(', ')}`;
  return block(st, EventReasons.imageNotFound, message, NO_IMAGE_RECHECK_MS);
}

/** How this pass's drift rules read a pod (the run's patches). */
function driftOptions(st: PassState): DriftOptions {
  return { admittedResources: st.input.driftComparesAdmittedResources === true };
}

/** How often a pass held by `namespaceLimitsBlock` reads the namespace's limits again, ms (not watched). */
export const NAMESPACE_LIMITS_RECHECK_MS = 30_000;

/**
 * The pods this pass's drift would delete to replace them, each with the container resources its
 * replacement gets: the main, sub-agents of a slot the spec keeps and toolboxes the spec names, that a node
 * has taken (their VM runs, or is hibernated there) and that are neither failed nor being deleted, whose
 * spec drifted (`podSpecMatchesAgent`, `podSpecMatchesToolbox`); and the main a migration is about to move
 * (`migrationMayEngage`, before the flow starts: it is restored on the new node from a pod the current spec
 * builds).
 */
function driftReplacements(st: PassState): { pod: V1Pod; replacement: Replacement }[] {
  const { cs, c } = st;
  const live = (p: V1Pod | undefined): p is V1Pod =>
    p !== undefined && !unbound(p) && !terminal(st, p) && p.metadata?.deletionTimestamp == null;
  const replacing = (pod: V1Pod, resources: V1ResourceRequirements) => ({
    pod,
    replacement: {
      pod: pod.metadata?.name ?? '',
      container: pod.spec?.containers?.[0]?.name ?? '',
      resources,
      replaces: pod.spec?.containers?.[0]?.resources ?? {},
    },
  });
  const out: { pod: V1Pod; replacement: Replacement }[] = [];
  const agent = () => containerResources(cs.spec.agent);
  // A migration about to start (not yet `Migrating`, its main not yet asked to hibernate): once started
  // the main is hibernated and the flow goes on from the phase.
  const moved = (main: V1Pod) =>
    cs.status?.phase !== 'Migrating' &&
    !hibernateRequested(main) &&
    migrationMayEngage(cs, main, st.input.registryConfigured);
  if (live(c.main) && (!podSpecMatchesAgent(c.main, cs, 0, driftOptions(st)) || moved(c.main)))
    out.push(replacing(c.main, agent()));
  const replicas = replicasOf(cs);
  for (const [slot, pod] of c.sub) {
    if (slot <= replicas && live(pod) && !podSpecMatchesAgent(pod, cs, slot, driftOptions(st)))
      out.push(replacing(pod, agent()));
  }
  for (const tb of cs.spec.toolboxes ?? []) {
    const pod = c.toolbox.get(tb.name);
    if (live(pod) && !podSpecMatchesToolbox(pod, cs, tb, driftOptions(st)))
      out.push(replacing(pod, containerResources(tb)));
  }
  return out;
}

/**
 * The pods the current spec adds beside the ones it replaces: sub-agent slots up to `replicas` and
 * toolboxes the spec names that have no pod yet. They take from the same quota as the replacements, and a
 * pass creates them as soon as the main is Ready: counted in, an edit that both resizes and scales up past
 * the quota keeps its live pods instead of losing a replaced one to a new slot (found by a new-user run).
 */
function podsToAdd(st: PassState): Replacement[] {
  const { cs, c } = st;
  const out: Replacement[] = [];
  const agent = containerResources(cs.spec.agent);
  for (let slot = 1; slot <= replicasOf(cs); slot++) {
    if (!c.sub.has(slot))
      out.push({ pod: agentPodName(cs, slot), container: AGENT_CONTAINER_NAME, resources: agent });
  }
  for (const tb of cs.spec.toolboxes ?? []) {
    if (!c.toolbox.has(tb.name))
      out.push({
        pod: toolboxPodName(cs, tb.name),
        container: AGENT_CONTAINER_NAME,
        resources: containerResources(tb),
      });
  }
  return out;
}

/**
 * The namespace-limits gate (ours; the reference has none), after the clone-image gate: when the pass would
 * delete live pods to replace them (`driftReplacements`: drift, a migration), it reads the namespace's
 * LimitRanges and ResourceQuotas (one activity) and asks src/cocoonset/admission.ts whether the apiserver
 * would refuse a replacement or a pod the spec adds beside them (`podsToAdd`): a LimitRange's min, max or
 * ratio; a quota they exceed together once the pods they replace no longer count; a quota that has not
 * counted a resource it limits yet. If so the pass touches no pod, writes the roll-up with
 * `Progressing=False` reason `ExceedsNamespaceLimits` quoting the refusal (and that an un-suspend waits,
 * when one does), with a folded Warning Event of that reason, and looks again in
 * `NAMESPACE_LIMITS_RECHECK_MS` (LimitRanges and quotas are not watched); a flow's phase is kept
 * (`phaseAfterBlock`). A read error fails the pass (retried): the replacement is not known to be admitted.
 * Nothing is read while a suspend is asked (it replaces nothing) or when no live pod would be replaced (a
 * create costs no VM). Admission webhooks and a quota the namespace's other users fill meanwhile stay
 * unseen: such a create still fails after the delete.
 */
async function namespaceLimitsBlock(st: PassState): Promise<void> {
  if (st.cs.spec.suspend) return;
  const replacing = driftReplacements(st);
  if (replacing.length === 0) return;
  const o = await st.r.run({ id: 'namespace-limits', type: 'readNamespaceLimits' });
  if (o.kind !== 'limits')
    return fail(
      st,
      `read the namespace's limits before replacing pods: ${errText(o) ?? 'unexpected outcome'}`,
    );
  const refusal = namespaceLimitsRefusal(o.limits, [
    ...replacing.map((r) => r.replacement),
    ...podsToAdd(st),
  ]);
  if (refusal === undefined) return;
  const kept = replacing.map((r) => `${st.ns}/${r.pod.metadata?.name ?? ''}`).join(', ');
  const unsuspend = ['Suspended', 'Suspending'].includes(st.cs.status?.phase ?? '')
    ? ' (the un-suspend waits)'
    : '';
  // Pods the spec drops (slots above `replicas`, toolboxes it no longer names) go only after the main is
  // back, so they still count when the replacements are created: say how to free their share first.
  const dropped =
    subSlotsAscending(st.c).some((slot) => slot > replicasOf(st.cs)) ||
    [...st.c.toolbox.keys()].some((name) => !(st.cs.spec.toolboxes ?? []).some((tb) => tb.name === name));
  const dropFirst =
    dropped && refusal.includes('exceeded quota')
      ? ' (the pods the spec drops still count until the main is back: drop them in an edit of their own first)'
      : '';
  const message = `the namespace would not admit a pod the spec needs: ${refusal}; the live pods (${kept}) are kept and no pod changed${unsuspend}; change the spec's resources or storage, or the namespace's LimitRange or ResourceQuota${dropFirst}`;
  return block(st, EventReasons.exceedsNamespaceLimits, message, NAMESPACE_LIMITS_RECHECK_MS);
}

/** Builds a pod, turning a builder exception into Go's wrapped error. */
async function build(st: PassState, prefix: string, fn: () => V1Pod): Promise<V1Pod> {
  let pod: V1Pod;
  try {
    pod = fn();
  } catch (e) {
    return fail(st, `${prefix}: ${(e as Error).message}`);
  }
  return pod;
}

/** The CocoonSet with the annotations written in this pass (Go mirrors them into the in-memory object). */
function currentCS(st: PassState): CocoonSet {
  if (Object.keys(st.written).length === 0 && !st.cleared?.size) return st.cs;
  const annotations = { ...(st.cs.metadata.annotations ?? {}), ...st.written };
  for (const k of st.cleared ?? []) delete annotations[k];
  return { ...st.cs, metadata: { ...st.cs.metadata, annotations } };
}

/** The namespace's CocoonHibernations, listed at most once per pass; a List error is kept too. */
function hibernations(st: PassState): Promise<{ items: CocoonHibernation[] } | { error: string }> {
  st.crs ??= st.r
    .run({ id: 'list-hibernations', type: 'listHibernations', namespace: st.ns })
    .then((o) =>
      o.kind === 'hibernations'
        ? { items: o.items }
        : { error: `list cocoonhibernations in ${st.ns}: ${errText(o) ?? 'unexpected outcome'}` },
    );
  return st.crs;
}

/**
 * Writes the status built from the pass's classification when it changed (no-op diff); `blocked` replaces the
 * Progressing condition with `False` and that reason and message (a pass that cannot progress). Returns
 * the status written, or undefined when nothing changed. A failed write of the failure status is ignored
 * (the pass already ends with an error); any other failed write ends the pass with `patch status …`.
 */
async function writeStatus(
  st: PassState,
  phase: CocoonSetPhase | '',
  id: string,
  blocked?: { reason: string; message: string },
): Promise<CocoonSetStatus | undefined> {
  const fresh = buildStatus(st.cs, st.c, phase);
  if (blocked) {
    const message =
      blocked.message.length > CONDITION_MESSAGE_MAX
        ? `${blocked.message.slice(0, CONDITION_MESSAGE_MAX - 3)}...`
        : blocked.message;
    fresh.conditions = (fresh.conditions ?? []).map((c) =>
      c.type === CONDITION_PROGRESSING ? { ...c, status: 'False', reason: blocked.reason, message } : c,
    );
  }
  // The diff base: the status as stored, i.e. this pass's own earlier write when there was one
  // (`statusDiffFollowsOwnWrites`), else the one the pass read.
  const base =
    st.writtenStatus && st.input.statusDiffFollowsOwnWrites ? { ...st.cs, status: st.writtenStatus } : st.cs;
  const w = planStatusWrite(base, fresh, st.input.nowMs);
  if (!w) return undefined;
  const o = await st.r.run({ id, type: 'patchStatus', body: w.patch, status: w.status });
  const err = errText(o);
  if (err !== undefined) {
    if (id === 'status-on-failure') return undefined;
    return fail(st, `patch status ${st.ns}/${st.name}: ${err}`);
  }
  st.writtenStatus = w.status;
  return w.status;
}

/** Writes the status when it changed (docs/cocoonset.md#status-roll-up), then ends the pass with `result`. */
async function writeStatusAndFinish(
  st: PassState,
  phase: CocoonSetPhase | '',
  result: Partial<PassResult>,
): Promise<never> {
  const status = await writeStatus(st, phase, 'status');
  return finish(st, result, status);
}

/**
 * Ends the pass, with another at once, when the CocoonSet's spec is no longer the one the pass planned from
 * (ours, `deletesCheckGeneration`): its generation, read from the apiserver, differs (or the set is gone).
 * Asked right before each pod delete (one read for a batch): a delete planned from a replaced spec may take
 * a running VM the current spec keeps. An edit that lands between the read and the delete (one activity
 * round trip) still goes unseen. A read error fails the pass (nothing deleted). No status write: the next
 * pass writes its own.
 */
async function specStillCurrent(st: PassState): Promise<void> {
  if (!st.input.deletesCheckGeneration) return;
  st.generationReads = (st.generationReads ?? 0) + 1;
  const o = await st.r.run({ id: `generation:${st.generationReads}`, type: 'readGeneration' });
  if (o.kind !== 'generation')
    return fail(st, `read cocoonset generation before a pod delete: ${errText(o) ?? 'unexpected outcome'}`);
  if (o.generation !== (st.cs.metadata.generation ?? 0)) return finish(st, { requeue: true });
}

/**
 * The delete action of `pod`: with `deleteReadsGeneration` (and `deletesCheckGeneration`) it carries the
 * generation the pass planned from, so the delete activity checks it right before deleting.
 */
function deleteAction(st: PassState, pod: string): PassAction {
  const checked = st.input.deletesCheckGeneration && st.input.deleteReadsGeneration;
  return {
    id: `delete:${pod}`,
    type: 'deletePod',
    pod,
    ...(checked ? { ifGeneration: st.cs.metadata.generation ?? 0 } : {}),
  };
}

/**
 * Deletes a pod, once the spec is known current (`specStillCurrent`, or inside the delete with
 * `deleteReadsGeneration`: a `stale` answer ends the pass with another at once); NotFound counts as done.
 * Resolves false when it was already gone.
 */
async function deletePod(st: PassState, pod: string, prefix: string): Promise<boolean> {
  if (!st.input.deleteReadsGeneration) await specStillCurrent(st);
  const o = await st.r.run(deleteAction(st, pod));
  const err = errText(o);
  if (err !== undefined) return fail(st, `${prefix}: ${err}`);
  if (o.kind === 'stale') return finish(st, { requeue: true });
  return o.kind !== 'notFound';
}

/** `handleFailedMainAgent` (docs/cocoonset.md#failed-main-and-recovery). */
async function handleFailedMain(
  st: PassState,
  main: V1Pod,
  reason: 'PodLifecycleFailed' | 'MainAgentFailed',
): Promise<never> {
  if (!podSpecMatchesAgent(main, st.cs, 0, driftOptions(st))) {
    const keepTag = await mainStateInTag(st, main);
    const mismatch = keepTag ? await imageMismatch(st, main) : undefined;
    if (mismatch) {
      const status = await writeStatus(st, 'Failed', 'status', mismatch);
      return finish(st, { requeueAfterMs: REQUEUE_SNAPSHOT_CHOICE_MS }, status);
    }
    const deleted = await deletePod(st, main.metadata!.name!, 'delete terminal drifted main agent');
    if (keepTag) oweWake(st, main);
    else if (deleted) await dropRemovedTags(st, [main]);
    return finish(st, { requeue: true });
  }
  recordFailedMain(st, main, reason);
  if (!st.input.replacedMainKeepsSnapshot) return writeStatusAndFinish(st, 'Failed', {});
  const status = await writeStatus(st, 'Failed', 'status', {
    reason,
    message: `main pod ${st.ns}/${main.metadata?.name ?? ''}: ${failureOf(main)}`,
  });
  return finish(st, {}, status);
}

/**
 * Ours (`replacedMainKeepsSnapshot`): whether the main's VM lives only in its `:hibernate` tag: a managed
 * main with no VM id (vk-cocoon removed the VM at its hibernate, or a wake has not brought it up) whose tag
 * the registry has (one HEAD). A replacement then keeps the tag for the new pod to be restored from (unless
 * the image changed: `imageMismatch`), where `dropRemovedTags` would discard the state. A probe error fails
 * the pass before anything is deleted.
 */
async function mainStateInTag(st: PassState, main: V1Pod): Promise<boolean> {
  if (!st.input.replacedMainKeepsSnapshot || !st.input.registryConfigured || vmIDOf(main) !== '')
    return false;
  const vm = vmNameOf(main);
  if (main.metadata?.annotations?.[Annotations.managed] !== 'true' || vm === '') return false;
  const o = await st.r.run({ id: `state-probe:${vm}`, type: 'probeHibernate', vmName: vm });
  if (o.kind !== 'probe')
    return fail(
      st,
      `probe hibernate snapshot ${vm} of the main to replace: ${errText(o) ?? 'unexpected outcome'}`,
    );
  return o.present;
}

/** How often a main held for an image its snapshot cannot be restored under looks again (a tag DELETE has no event). */
const REQUEUE_SNAPSHOT_CHOICE_MS = 30_000;

/**
 * Ours (`replacedMainKeepsSnapshot`), for a main whose VM is in its tag alone (`mainStateInTag`): when the
 * spec names another agent image than the pod's, the `SnapshotImageMismatch` block saying how to choose;
 * undefined when the image is the same. vk-cocoon refuses to restore a snapshot under another image (its
 * evidence check), and a restore-marked create skips that check and would bring the old VM back under a pod
 * naming the new image: so the main is not replaced until the user sets the image back (the state kept) or
 * deletes the snapshot (the new image booted fresh).
 */
async function imageMismatch(
  st: PassState,
  main: V1Pod,
): Promise<{ reason: string; message: string } | undefined> {
  const podImage = main.metadata?.annotations?.[Annotations.image] ?? '';
  const want = buildAgentPod(st.cs, 0, '', '').metadata?.annotations?.[Annotations.image] ?? '';
  // The image the snapshot records (`restoresCheckSnapshotImage`): a failed restore pod names the image it
  // was created under, not the snapshot's. A snapshot that records none is judged by the pod's.
  const have = st.input.restoresCheckSnapshotImage ? (await snapshotImage(st, main)) || podImage : podImage;
  return have === want ? undefined : snapshotImageBlock(st, main, have, want);
}

/** The `SnapshotImageMismatch` block for `pod` (the main), whose snapshot records `have`, the spec `want`. */
function snapshotImageBlock(
  st: PassState,
  pod: V1Pod,
  have: string,
  want: string,
): { reason: string; message: string } {
  const vm = vmNameOf(pod);
  return {
    reason: ConditionReasons.snapshotImageMismatch,
    message: `main pod ${st.ns}/${pod.metadata?.name ?? ''}: its VM is in its :hibernate snapshot (${vm}:hibernate), taken under image ${have}, and vk-cocoon will not restore it under ${want}; set spec.agent.image back to ${have} to keep that state, or delete the snapshot to boot ${want} fresh`,
  };
}

/**
 * The image `pod`'s `:hibernate` snapshot records (`cocoonstack.snapshot.baseimage`; '' when it records
 * none or is absent). One registry GET; an error fails the pass (nothing is created or deleted on a guess).
 */
async function snapshotImage(st: PassState, pod: V1Pod): Promise<string> {
  const vm = vmNameOf(pod);
  const o = await st.r.run({ id: `snapshot-image:${vm}`, type: 'readSnapshotImage', vmName: vm });
  if (o.kind !== 'snapshot')
    return fail(st, `read hibernate snapshot ${vm}: ${errText(o) ?? 'unexpected outcome'}`);
  return o.present ? o.image : '';
}

/**
 * Ours (`restoresCheckSnapshotImage`): ends the pass, creating nothing, when the main `pod` about to be
 * created restore-marked (`restoreMarks` set `restore-from-hibernate`) names another image than its
 * snapshot records: the restore would skip vk-cocoon's image check and bring the old VM back under a pod
 * naming the new image (found by helper-53: a suspended set, or a main a CocoonHibernation holds, whose
 * image was edited and whose main pod was then deleted; helper-39/40: an image edit during a migration or
 * with a released set's un-suspend). `Progressing=False SnapshotImageMismatch`, phase
 * `phase`, a look again in 30 s. Returns when the create may go ahead.
 */
async function holdRestoreUnderOtherImage(st: PassState, pod: V1Pod, phase: CocoonSetPhase): Promise<void> {
  if (
    !st.input.restoresCheckSnapshotImage ||
    pod.metadata?.annotations?.[Annotations.restoreFromHibernate] !== 'true'
  )
    return;
  const have = await snapshotImage(st, pod);
  const want = pod.metadata?.annotations?.[Annotations.image] ?? '';
  if (have === '' || have === want) return;
  const status = await writeStatus(st, phase, 'status', snapshotImageBlock(st, pod, have, want));
  return finish(st, { requeueAfterMs: REQUEUE_SNAPSHOT_CHOICE_MS }, status);
}

/**
 * Ours (`subAgentsRestoreSuspendState`): marks for restore (`restore-from-hibernate`) the sub-agent `pods`
 * about to be created that the set asked to hibernate and has not asked to wake (`hibernateAsked`: the pod
 * went while the set was suspended), when their `:hibernate` snapshot is in the registry and records the
 * pod's image or none. That snapshot is the VM's last state: vk-cocoon refuses a fork over it and restores
 * it for a marked pod; the un-suspend's wake asks the new pod's VM workflow, which drops the tag once the
 * VM runs. A snapshot taken under another image (the agent image was edited meanwhile) leaves the pod as
 * built: vk-cocoon refuses it, saying so, and `stateInTag` keeps it. The same for a sub-agent whose wake the
 * set asked and whose VM workflow has not yet said the tag is gone (`wakesOpen`); its new pod is then owed a
 * wake ask. One GET per such pod, all at once; an error ends the pass creating nothing (fail closed: a fork
 * would be refused).
 */
async function restoreSuspendState(st: PassState, pods: V1Pod[]): Promise<void> {
  if (!st.input.subAgentsRestoreSuspendState || !st.input.registryConfigured) return;
  const asked = (p: V1Pod) => st.input.hibernateAsked?.[p.metadata?.name ?? ''] !== undefined;
  const waking = (p: V1Pod) => st.input.wakesOpen?.[p.metadata?.name ?? ''] === true;
  const owed = pods.filter(
    (p) => (asked(p) || waking(p)) && p.metadata?.annotations?.[Annotations.restoreFromHibernate] !== 'true',
  );
  const outcomes = await st.r.runAll(
    owed.map(
      (p): PassAction => ({
        id: `snapshot-image:${vmNameOf(p)}`,
        type: 'readSnapshotImage',
        vmName: vmNameOf(p),
      }),
    ),
  );
  for (const [i, pod] of owed.entries()) {
    const o = outcomes[i]!;
    if (o.kind !== 'snapshot')
      return fail(st, `read hibernate snapshot ${vmNameOf(pod)}: ${errText(o) ?? 'unexpected outcome'}`);
    const image = pod.metadata?.annotations?.[Annotations.image] ?? '';
    if (!o.present || (o.image !== '' && o.image !== image)) continue;
    pod.metadata!.annotations = {
      ...pod.metadata!.annotations,
      [Annotations.restoreFromHibernate]: 'true',
    };
    // Its wake was asked already: the new pod's VM workflow is asked again, to drop the tag once it runs.
    if (!asked(pod)) oweWake(st, pod);
  }
}

/**
 * Records that `pod` was deleted with its `:hibernate` tag kept (`mainStateInTag`): the workflow asks its
 * next pod's VM workflow to wake (`PassEnd.wakeOwed`), which drops the tag once the restored VM runs.
 */
function oweWake(st: PassState, pod: V1Pod): void {
  st.wakeOwed = [...(st.wakeOwed ?? []), pod.metadata?.name ?? ''];
}

/**
 * The failed main's evidence (reference `handleFailedMainAgent`): the Warning Event `reason` with vk-cocoon's
 * (or the pod's) failure, and for `PodLifecycleFailed` the metric labelled with the phase before.
 */
function recordFailedMain(
  st: PassState,
  main: V1Pod,
  reason: 'PodLifecycleFailed' | 'MainAgentFailed',
): void {
  if (reason === EventReasons.podLifecycleFailed) {
    st.r.effect({
      id: 'metric:lifecycleStateFailedObservedTotal',
      type: 'metric',
      metric: 'lifecycleStateFailedObservedTotal',
      labels: { phase: st.cs.status?.phase || 'Pending' },
    });
  }
  st.r.effect({
    id: `event:${reason}`,
    type: 'event',
    eventType: 'Warning',
    reason,
    message: `main pod ${st.ns}/${main.metadata?.name ?? ''}: ${failureOf(main)}`,
  });
}

/**
 * Restore marks for pods about to be created (docs/cocoonset.md#restore-from-hibernation): pods with intent
 * (name in `restorable`) and a registry get their `:hibernate` tag probed, all probes at once; a present tag
 * marks the pod in place. Resolves, per pod, the probe's error text (fail closed) or undefined.
 */
async function restoreMarks(
  st: PassState,
  pods: V1Pod[],
  restorable: Set<string>,
): Promise<(string | undefined)[]> {
  const intent = pods.map((p) => st.input.registryConfigured && restorable.has(p.metadata?.name ?? ''));
  const probes = pods.filter((_, i) => intent[i]).map((p) => vmNameOf(p));
  const outcomes = await st.r.runAll(
    probes.map((vm): PassAction => ({ id: `probe:${vm}`, type: 'probeHibernate', vmName: vm })),
  );
  const byVM = new Map(probes.map((vm, i) => [vm, outcomes[i]!]));
  return pods.map((pod, i) => {
    if (!intent[i]) return undefined;
    const o = byVM.get(vmNameOf(pod))!;
    const probe = o.kind === 'probe' ? { present: o.present } : { error: errText(o) ?? 'unexpected outcome' };
    const decision = markRestoreIfHibernated(pod, true, true, probe);
    return decision.kind === 'error' ? decision.message : undefined;
  });
}

/**
 * The pods among `podNames` a pass must not create yet because their VM's `:hibernate` tag is spent
 * (`podsWithSpentTagByCR`): recorded in `st.spentWaits` for the status (`spentBlock`), and returned by name.
 * Empty unless `enabled` (default PassInput `createWaitsForSpentTag`).
 */
function holdSpent(
  st: PassState,
  crs: readonly CocoonHibernation[],
  podNames: string[],
  enabled = st.input.createWaitsForSpentTag,
): Set<string> {
  if (!enabled) return new Set();
  const spent = podsWithSpentTagByCR(crs, st.input.spentTagOutlivesCR);
  const heldByCR = vmsHeldByCR(st.ns, crs);
  for (const [pod, vmName] of Object.entries(st.input.spentBySet ?? {}))
    if (!spent.has(pod) && !heldByCR.has(vmName)) spent.set(pod, { pod, vmName, cr: '' });
  const held = podNames.flatMap((name) => spent.get(name) ?? []);
  if (held.length > 0) st.spentWaits = [...(st.spentWaits ?? []), ...held];
  return new Set(held.map((h) => h.pod));
}

/**
 * Ours (`retriesSpentDropsOfMembers`): DELETEs again, all at once, the spent tags of the pods in `held`
 * (sub-agents and toolboxes `holdSpent` held back) that the set's own record holds (`spentBySet`: the
 * set's workflow clears an entry once its tag's DELETE goes through). Resolves the pods whose tag went:
 * they are created this pass, fresh (their VM ran after that tag). A DELETE that fails keeps its pod held
 * (`SpentSnapshotTag` on the status; the next look, in 5 s, tries again).
 */
async function dropSpentBySet(st: PassState, held: ReadonlySet<string>): Promise<Set<string>> {
  if (!st.input.retriesSpentDropsOfMembers) return new Set();
  const bySet = (st.spentWaits ?? []).filter((h) => h.cr === '' && held.has(h.pod));
  const outcomes = await st.r.runAll(
    bySet.map(
      (h): PassAction => ({ id: `drop-tag:${h.vmName}`, type: 'dropHibernateTag', vmName: h.vmName }),
    ),
  );
  const gone = new Set(bySet.filter((_, i) => outcomes[i]!.kind === 'ok').map((h) => h.pod));
  st.spentWaits = st.spentWaits?.filter((h) => !gone.has(h.pod));
  return gone;
}

/** The set's sub-agents (slot order), then its toolboxes, as classified at the start of the pass. */
function membersInOrder(st: PassState): V1Pod[] {
  return [...subSlotsAscending(st.c).map((s) => st.c.sub.get(s)!), ...st.c.toolbox.values()];
}

/**
 * `Progressing=False` reason `HibernateRoundFailed` naming the sub-agents and toolboxes whose lifecycle `failed`
 * a hibernate round left (`failedRoundHoldsVM`, with `failedRoundsHoldVMs`): kept with their VMs, but not
 * Ready until a round succeeds (`roundReport`); undefined when there are none.
 */
function memberRoundBlock(st: PassState): { reason: string; message: string } | undefined {
  if (!st.input.failedRoundsHoldVMs) return undefined;
  const members = membersInOrder(st);
  const says = [
    ...members.flatMap((p) => roundReport(st, p, `pod ${st.ns}/${p.metadata?.name ?? ''}`)?.message ?? []),
    ...(st.tagHeld ?? []).map(
      (p) =>
        `pod ${st.ns}/${p.metadata?.name ?? ''}: vk-cocoon reported it failed with no VM running (${failureOf(p)}); its :hibernate snapshot is in the registry, and the set keeps the pod rather than drop that snapshot with a rebuild while vk-cocoon retries; if vk-cocoon refuses the snapshot (its message says so), delete the snapshot to give that state up, and the set rebuilds the pod`,
    ),
  ];
  if (says.length === 0) return undefined;
  return { reason: ConditionReasons.hibernateRoundFailed, message: says.join('; ') };
}

/**
 * `Progressing=False` reason `DesireConflict` naming the sub-agents and toolboxes a CocoonHibernation keeps
 * hibernated, as their VM workflows reported (`desireConflicts`, with `crHoldsWait`); undefined when there
 * are none. Before, such a set said `Scaling` with nothing naming the CR.
 */
function heldMemberBlock(st: PassState): { reason: string; message: string } | undefined {
  if (!st.input.crHoldsWait) return undefined;
  const members = membersInOrder(st);
  const says = members.flatMap((p) => {
    const held = hibernateRequested(p) ? st.input.desireConflicts?.[p.metadata?.name ?? ''] : undefined;
    return held === undefined ? [] : [`pod ${st.ns}/${p.metadata?.name ?? ''}: ${held}`];
  });
  return says.length === 0
    ? undefined
    : { reason: ConditionReasons.desireConflict, message: says.join('; ') };
}

/** `Progressing=False` reason `SpentSnapshotTag` naming the pods this pass held back (`holdSpent`), if any. */
function spentBlock(st: PassState): { reason: string; message: string } | undefined {
  const held = st.spentWaits ?? [];
  if (held.length === 0) return undefined;
  const pods = held.map(
    (h) =>
      `pod ${st.ns}/${h.pod} (VM ${h.vmName}, ${h.cr ? `cocoonhibernation ${h.cr}` : "this set's own wake"})`,
  );
  return {
    reason: ConditionReasons.spentSnapshotTag,
    message: `${pods.join('; ')}: created (or, after a spec change, replaced) once the VM's spent :hibernate tag is deleted (the wake ran the VM and the registry refuses the tag's DELETE; vk-cocoon would restore the VM from that tag, rolling it back)`,
  };
}

/**
 * Ends the pass while the set's main `podName` must not be created because its VM's `:hibernate` tag is
 * spent (`holdSpent`): status `phase` with `Progressing=False` reason `SpentSnapshotTag`, a look again in 5 s.
 * Every create of the main passes here first, whether it restores on purpose (retain suspend, migration,
 * released-seat wake) or by restore intent (`createMain`). Returns when the main may be created, and at once
 * when `enabled` is false (runs recorded before the patch: no List). A failed CocoonHibernation List fails the
 * pass, its message after `prefix`.
 */
async function holdMainWhileSpent(
  st: PassState,
  podName: string,
  phase: 'Pending' | 'Suspending' | 'Migrating' | 'Waking' | '',
  enabled: boolean | undefined,
  prefix: string,
): Promise<void> {
  if (!enabled || !(await spentNow(st, podName, prefix))) return;
  const bySet = st.spentWaits?.find((h) => h.pod === podName && h.cr === '');
  if (bySet !== undefined) {
    // The set's own wake left the tag spent: nothing else retries its DELETE. Gone, the next pass (its probe
    // then finds no tag) creates the main fresh.
    const vm = bySet.vmName;
    const o = await st.r.run({
      id: `drop-tag:${vm}`,
      type: 'dropHibernateTag',
      vmName: vm,
      wokenPod: podName,
    });
    const err = errText(o);
    if (err !== undefined)
      return fail(
        st,
        `drop spent hibernate snapshot ${vm}: ${err} (pod ${st.ns}/${podName} is created once it is gone: vk-cocoon would restore the VM from it, rolling it back)`,
      );
    return finish(st, { requeue: true });
  }
  const status = await writeStatus(st, phase, 'status', spentBlock(st));
  return finish(st, { requeueAfterMs: REQUEUE_WAIT_FOR_MAIN_MS }, status);
}

/**
 * Whether pod `podName`'s VM tag is spent now (`holdSpent`, which records it for the status), from the
 * pass's CocoonHibernation List; a failed List fails the pass, its message after `prefix`.
 */
async function spentNow(st: PassState, podName: string, prefix = ''): Promise<boolean> {
  const crs = await hibernations(st);
  if ('error' in crs) return fail(st, `${prefix}${crs.error}`);
  return holdSpent(st, crs.items, [podName], true).size > 0;
}

/** Whether live pod `podName` must not be deleted for a re-create now (`driftWaitsForSpentTag`, `spentNow`). */
async function spentHeld(st: PassState, podName: string): Promise<boolean> {
  return st.input.driftWaitsForSpentTag === true && (await spentNow(st, podName));
}

/** `createMainAgent` (docs/cocoonset.md#a-pass-in-order). */
async function createMain(st: PassState): Promise<never> {
  const pod = await build(st, 'build main agent', () => buildAgentPod(st.cs, 0, '', ''));
  const podName = pod.metadata?.name ?? '';
  if (st.input.waitsForTerminatingMain && terminatingOwnedPod(st, podName))
    return waitForTerminatingMain(st, 'Pending', podName);
  await holdMainWhileSpent(st, podName, 'Pending', st.input.createWaitsForSpentTag, '');
  const crs = await hibernations(st);
  if ('error' in crs) return fail(st, crs.error);
  const [probeErr] = await restoreMarks(st, [pod], podsRestorableByCR(crs.items));
  if (probeErr !== undefined) return fail(st, probeErr);
  await holdRestoreUnderOtherImage(st, pod, 'Pending');
  const o = await st.r.run({ id: `create:${pod.metadata!.name}`, type: 'createPod', pod });
  if (o.kind === 'alreadyExists') return finish(st, { requeueAfterMs: REQUEUE_WAIT_FOR_MAIN_MS });
  const err = errText(o);
  if (err !== undefined) return fail(st, `create main agent: ${err}`);
  return finish(st, { requeue: true });
}

/** Generation stamp of every classified pod that lacks it, as one batch (`PassInput.batchPodLoops`). */
async function stampAll(st: PassState, generation: number): Promise<void> {
  const pods = podsInNameOrder(st.c)
    .filter((pod) => cocoonSetGenerationOf(pod) !== generation)
    .map((pod) => pod.metadata?.name ?? '');
  const outcomes = await st.r.runAll(
    pods.map(
      (pod): PassAction => ({
        id: `stamp:${pod}`,
        type: 'patchPodAnnotations',
        pod,
        annotations: { [Annotations.cocoonSetGeneration]: String(generation) },
      }),
    ),
  );
  const firstErr = outcomes.findIndex((o) => o.kind === 'error');
  if (firstErr >= 0)
    return fail(
      st,
      `patch cocoonset generation on ${st.ns}/${pods[firstErr]}: ${errText(outcomes[firstErr]!)}`,
    );
}

/** The main is asked to hibernate: its annotation, or a CocoonHibernation that holds it (`podsHibernatedByCR`). */
function mainHibernating(st: PassState, crs: readonly CocoonHibernation[]): boolean {
  const main = st.c.main;
  return hibernateRequested(main) || podsHibernatedByCR(crs).has(main?.metadata?.name ?? '');
}

/**
 * `ensureSubAgents` (docs/cocoonset.md#a-pass-in-order); resolves (changed, requeueAfterMs) or ends the pass
 * with an error.
 */
async function ensureSubAgents(
  st: PassState,
  main: V1Pod,
): Promise<{ changed: boolean; requeueAfterMs: number }> {
  const mainVM = vmNameOf(main);
  const mainNode = main.spec?.nodeName ?? '';
  // Ours (`subAgentsFollowMainClass`): a sub-agent forks on its main's node, so it takes the main's class.
  const classless =
    st.input.subAgentsFollowMainClass === true &&
    (main.spec?.nodeSelector?.[Labels.snapshotCPUClass] ?? '') === '';
  const replicas = replicasOf(st.cs);
  let changed = false;
  let requeueAfterMs = 0;
  const missing: number[] = [];
  const labels = { namespace: st.ns, cocoonset: st.name };
  for (let slot = 1; slot <= replicas; slot++) {
    const pod = st.c.sub.get(slot);
    if (!pod) {
      missing.push(slot);
      continue;
    }
    const podName = pod.metadata?.name ?? '';
    // Ours: a failed hibernate round leaves a live VM; vk-cocoon retries the round (its next report runs
    // the pass again), or the round was called off.
    if (inFailedRound(st, pod) || (await stateInTag(st, pod))) continue;
    const cs = currentCS(st);
    const t = triageSubAgent(cs, pod, slot, readRebuildHistory(cs), st.input.nowMs, driftOptions(st), {
      terminal: terminal(st, pod),
    });
    switch (t.kind) {
      case 'keep':
        break;
      case 'wait':
        requeueAfterMs = requeueAfterMs === 0 ? t.waitMs : Math.min(requeueAfterMs, t.waitMs);
        break;
      case 'deadLetter': {
        const o = await st.r.run({
          id: `dead-letter:${podName}`,
          type: 'patchPodAnnotations',
          pod: podName,
          annotations: t.podAnnotations,
        });
        const err = errText(o);
        if (err !== undefined)
          return fail(st, `patch pod ${st.ns}/${podName} annotation ${Annotations.deadLetter}: ${err}`);
        st.r.effect({
          id: `metric:subagentDeadLetterTotal:${slot}`,
          type: 'metric',
          metric: 'subagentDeadLetterTotal',
          labels,
        });
        st.r.effect({
          id: `event:${t.event.reason}:${slot}`,
          type: 'event',
          eventType: t.event.type,
          reason: t.event.reason,
          message: t.event.message,
        });
        break;
      }
      case 'rebuild': {
        await writeHistory(st, slot, t.history, 'persist rebuild history');
        if (await deletePod(st, podName, `delete terminal sub-agent slot ${slot}`))
          await dropRemovedTags(st, [pod]);
        st.r.effect({
          id: `metric:subagentRebuildTotal:${slot}`,
          type: 'metric',
          metric: 'subagentRebuildTotal',
          labels,
        });
        st.r.effect({
          id: `event:${t.event.reason}:${slot}`,
          type: 'event',
          eventType: t.event.type,
          reason: t.event.reason,
          message: t.event.message,
        });
        changed = true;
        break;
      }
      case 'deleteDrifted':
        if (inHibernateRound(st, pod) || (await spentHeld(st, podName))) break;
        if (await deletePod(st, podName, `delete drifted sub-agent slot ${slot}`))
          await dropRemovedTags(st, [pod]);
        changed = true;
        break;
      case 'liftDeadLetter':
        if (t.history !== undefined)
          await writeHistory(st, slot, t.history, `reset rebuild history for slot ${slot}`);
        if (await deletePod(st, podName, `delete dead-lettered sub-agent slot ${slot}`))
          await dropRemovedTags(st, [pod]);
        changed = true;
        break;
    }
  }

  if (missing.length > 0) {
    const crs = await hibernations(st);
    if ('error' in crs) return fail(st, crs.error);
    if (st.input.subAgentsWaitForHibernatingMain && mainHibernating(st, crs.items)) {
      requeueAfterMs =
        requeueAfterMs === 0 ? REQUEUE_WAIT_FOR_MAIN_MS : Math.min(requeueAfterMs, REQUEUE_WAIT_FOR_MAIN_MS);
      missing.length = 0;
    }
  }
  if (missing.length > 0) {
    const crs = await hibernations(st);
    if ('error' in crs) return fail(st, crs.error);
    // Ours: slots whose VM's tag is spent wait (`holdSpent`); the others are created.
    const held = holdSpent(
      st,
      crs.items,
      missing.map((slot) => agentPodName(st.cs, slot)),
    );
    for (const pod of await dropSpentBySet(st, held)) held.delete(pod);
    const creatable = missing.filter((slot) => !held.has(agentPodName(st.cs, slot)));
    missing.splice(0, missing.length, ...creatable);
  }
  if (missing.length > 0) {
    const crs = await hibernations(st);
    if ('error' in crs) return fail(st, crs.error);
    const pods: V1Pod[] = [];
    for (const slot of missing) {
      pods.push(
        await build(st, `build sub-agent slot ${slot}`, () => {
          const pod = buildAgentPod(st.cs, slot, mainVM, mainNode);
          if (classless) delete pod.spec?.nodeSelector?.[Labels.snapshotCPUClass];
          return pod;
        }),
      );
    }
    const probeErrs = await restoreMarks(st, pods, podsRestorableByCR(crs.items));
    const firstProbeErr = probeErrs.findIndex((e) => e !== undefined);
    if (firstProbeErr >= 0)
      return fail(st, `mark restore sub-agent slot ${missing[firstProbeErr]}: ${probeErrs[firstProbeErr]}`);
    await restoreSuspendState(st, pods);
    const outcomes = await st.r.runAll(
      pods.map((pod): PassAction => ({ id: `create:${pod.metadata!.name}`, type: 'createPod', pod })),
    );
    if (outcomes.some((o) => o.kind === 'ok')) changed = true;
    const firstErr = outcomes.findIndex((o) => o.kind === 'error');
    if (firstErr >= 0)
      return fail(st, `create sub-agent slot ${missing[firstErr]}: ${errText(outcomes[firstErr]!)}`);
  }

  const extra = subSlotsAscending(st.c).filter((slot) => slot > replicas);
  if (st.input.batchPodLoops && extra.length > 0) {
    if (!st.input.deleteReadsGeneration) await specStillCurrent(st);
    const outcomes = await st.r.runAll(
      extra.map((slot) => deleteAction(st, st.c.sub.get(slot)!.metadata!.name!)),
    );
    const firstErr = outcomes.findIndex((o) => o.kind === 'error');
    if (firstErr >= 0)
      return fail(st, `delete extra sub-agent slot ${extra[firstErr]}: ${errText(outcomes[firstErr]!)}`);
    if (outcomes.some((o) => o.kind === 'ok')) changed = true;
    await dropRemovedTags(
      st,
      extra.filter((_, i) => outcomes[i]!.kind === 'ok').map((slot) => st.c.sub.get(slot)!),
    );
    if (outcomes.some((o) => o.kind === 'stale')) return finish(st, { requeue: true });
  }
  for (const slot of st.input.batchPodLoops ? [] : extra) {
    if (await deletePod(st, st.c.sub.get(slot)!.metadata!.name!, `delete extra sub-agent slot ${slot}`)) {
      changed = true;
      await dropRemovedTags(st, [st.c.sub.get(slot)!]);
    }
  }
  return { changed, requeueAfterMs };
}

/**
 * After the pass deleted `removed` for good or to build them anew (sub-agents past `replicas`, toolboxes no
 * longer in the spec; drifted, terminal or dead-lettered sub-agents; toolboxes recreated; a drifted main,
 * whose new pod is a fresh clone of the new spec, as for a running main): drops the
 * `:hibernate` tags of the managed ones in one concurrent batch, except a VM a live CocoonHibernation holds
 * (ours, `deletedVMsDropTag`; the reference leaves them). A sub-agent's or toolbox's state goes with its
 * pod (a running one's VM is deleted by vk-cocoon; the new pod is a fresh fork of the main or a fresh boot of
 * the image), but a tag a suspend left would outlive it: vk-cocoon finds it when the pod is created again and
 * refuses the fork (`HibernateEvidenceFailed`: explicit clone source) or the new image, or restores the old
 * state; and after a scale-down the deletion GC never learns the VM name. The deleted pod cannot tell whether
 * a suspend left a tag (a woken VM's workflow drops it only once the VM runs), so each gets its DELETE (a
 * missing tag is no error). Runs in the pass that deleted the pods: a crash between the two resumes at the
 * drop (the workflow replays the pass).
 */
/**
 * What the set says of a pod that a failed hibernate round holds (`Progressing=False` reason
 * `HibernateRoundFailed`; `who` names it, e.g. "main pod ns/demo-0"), or undefined when none does: the round
 * still asked for (vk-cocoon retries it: `failed`, or `hibernating` again after a remembered failure, whose
 * message it quotes so that the text does not change at each retry), a failure with no VM on the pod (a
 * restore that failed: the state stays in the registry), or a round called off (no hibernate annotation any
 * more: vk-cocoon reports `failed`, and the pod not Ready, until a later round succeeds; `calledOff`,
 * nothing will retry).
 */
function roundReport(
  st: PassState,
  pod: V1Pod,
  who: string,
): { message: string; calledOff: boolean } | undefined {
  const state = lifecycleOf(pod).state;
  const recorded = st.failedRounds?.[pod.metadata?.name ?? ''];
  const mine = recorded !== undefined && recorded.uid === pod.metadata?.uid ? recorded : undefined;
  const asked = hibernateRequested(pod);
  const retried = state === LifecycleStates.hibernating && asked && mine !== undefined;
  if (!retried && (state !== LifecycleStates.failed || !failedRoundHoldsVM(pod, st.failedRounds)))
    return undefined;
  if (!asked)
    return {
      message: `${who}: its hibernate round failed (${failureOf(pod)}) and was called off; the VM keeps running, but vk-cocoon reports it failed and not Ready until a hibernate round succeeds: hibernate and wake it again (a CocoonHibernation, or spec.suspend), or delete the pod to have it created again from the spec (its state is lost)`,
      calledOff: true,
    };
  if (!retried && vmIDOf(pod) === '')
    return {
      message: `${who}: vk-cocoon reported it failed with no VM running (${failureOf(pod)}); its hibernated state stays in the registry and vk-cocoon retries`,
      calledOff: false,
    };
  return {
    message: `${who}: vk-cocoon reported its hibernate round failed (${mine?.message ?? failureOf(pod)}); the VM keeps running and vk-cocoon retries the round`,
    calledOff: false,
  };
}

/**
 * Brings the set's memory of failed hibernate rounds (`noteFailedRounds` over its pods) up to date: kept in
 * the CocoonSet's `cocoon-operator.cocoonstack.io/failed-hibernate-rounds` annotation, written only when it
 * changes, so that it outlives the workflow run (a run started afresh, e.g. after a terminate, still knows a
 * called-off round's pod holds its VM). A failed write fails the pass.
 */
async function noteRounds(st: PassState): Promise<void> {
  const raw = st.cs.metadata.annotations?.[Annotations.failedHibernateRounds];
  st.failedRounds = noteFailedRounds(readFailedRounds(raw), [...st.c.allByName.values()]);
  const next = st.failedRounds === undefined ? null : JSON.stringify(st.failedRounds);
  if (next === (raw ?? null)) return;
  await annotateSet(st, 'failed-rounds', { [Annotations.failedHibernateRounds]: next });
}

/**
 * Terminal for this pass (`isTerminal`: phase `Failed` or lifecycle `failed`), except, with
 * `failedRoundsHoldVMs`, a pod whose lifecycle `failed` a hibernate round left (`failedRoundHoldsVM`): it
 * holds its VM.
 */
function terminal(st: PassState, pod: V1Pod): boolean {
  return (
    isTerminal(pod) && !(st.input.failedRoundsHoldVMs === true && failedRoundHoldsVM(pod, st.failedRounds))
  );
}

/**
 * Ours (`failedRoundsHoldVMs`): a sub-agent or toolbox vk-cocoon reports failed (lifecycle `failed`, phase not
 * `Failed`) while it runs no VM, whose `:hibernate` tag is in the registry: that tag is the VM's state (e.g.
 * the wake after an un-suspend failed its pull; vk-cocoon retries it), so the pod is neither rebuilt nor
 * recreated (the rebuild would also drop the tag with the pod: the reference rebuilds and keeps the tag,
 * which the new pod then restores, or is refused). Probed once per such pod per pass; a probe error keeps it
 * too (fail closed). Kept pods are named in `HibernateRoundFailed` (`memberRoundBlock`).
 */
async function stateInTag(st: PassState, pod: V1Pod): Promise<boolean> {
  if (!st.input.failedRoundsHoldVMs || !st.input.registryConfigured) return false;
  if (!terminal(st, pod) || podTerminal(pod) || vmIDOf(pod) !== '') return false;
  const vm = vmNameOf(pod);
  if (pod.metadata?.annotations?.[Annotations.managed] !== 'true' || vm === '') return false;
  const o = await st.r.run({ id: `state-probe:${vm}`, type: 'probeHibernate', vmName: vm });
  const kept = o.kind !== 'probe' || o.present;
  if (kept) st.tagHeld = [...(st.tagHeld ?? []), pod];
  return kept;
}

/**
 * A sub-agent or toolbox in a failed hibernate round that is still asked for (`hibernateRoundFailed`, with
 * `failedRoundKeepsVM`): kept as it is (no rebuild, recreate or drift delete) while vk-cocoon retries the
 * round. Once the round is called off the pod is a live pod like any other (`terminal` says it is not
 * terminal): a drifted one is replaced as any drifted pod is.
 */
function inFailedRound(st: PassState, pod: V1Pod): boolean {
  return st.input.failedRoundKeepsVM === true && hibernateRoundFailed(pod);
}

/**
 * vk-cocoon is hibernating `pod`'s VM (lifecycle `hibernating`; ours, `deletedVMsDropTag`): a drift delete
 * waits for the round to end (the pod's next change runs the pass again). Deleted mid-round, the snapshot
 * lands after the pod is gone, out of `dropRemovedTags`' reach, and the new pod finds it (a refused image or
 * fork, or old state restored).
 */
function inHibernateRound(st: PassState, pod: V1Pod): boolean {
  return st.input.deletedVMsDropTag === true && lifecycleOf(pod).state === LifecycleStates.hibernating;
}

async function dropRemovedTags(st: PassState, removed: V1Pod[]): Promise<void> {
  const managed = removed.filter((p) => p.metadata?.annotations?.[Annotations.managed] === 'true');
  if (!st.input.deletedVMsDropTag || !st.input.registryConfigured || managed.length === 0) return;
  const crs = await hibernations(st);
  if ('error' in crs) return fail(st, crs.error);
  const held = vmsHeldByCR(st.ns, crs.items);
  const vms = managed.map(vmNameOf).filter((vm) => vm !== '' && !held.has(vm));
  const outcomes = await st.r.runAll(
    vms.map((vm): PassAction => ({ id: `drop-tag:${vm}`, type: 'dropHibernateTag', vmName: vm })),
  );
  const i = outcomes.findIndex((o) => o.kind === 'error');
  if (i >= 0)
    return fail(st, `drop hibernate snapshot of deleted pod's VM ${vms[i]}: ${errText(outcomes[i]!)}`);
}

/**
 * Ours (`dropsTagsOfRemovedGone`): the pods the set asked to hibernate (`hibernateAsked`), knows the
 * spent tag of (`spentBySet`) or asked to wake with no word yet that the tag went (`wakesOpen`) that are
 * gone and that the spec no longer builds (not the main, a slot past `agent.replicas`, a toolbox not in
 * `spec.toolboxes`) get their VM's `:hibernate` tag dropped, as `dropRemovedTags` drops those of the pods a
 * scale-down deletes (not a VM a CocoonHibernation holds), and the asked ones' VM workflows a Wake that
 * leaves the tag (which ends the set's record of them). All at once; an error fails the pass (tried again
 * next pass).
 */
async function letGoOfRemoved(st: PassState): Promise<void> {
  if (!st.input.dropsTagsOfRemovedGone || !st.input.registryConfigured) return;
  const present = new Set(podsInNameOrder(st.c).map((p) => p.metadata?.name ?? ''));
  const built = new Set([
    agentPodName(st.cs, 0),
    ...Array.from({ length: replicasOf(st.cs) }, (_, i) => agentPodName(st.cs, i + 1)),
    ...(st.cs.spec.toolboxes ?? []).map((tb) => toolboxPodName(st.cs, tb.name)),
  ]);
  // Also the pods whose tag the set knows spent (`spentBySet`), or whose wake is open (`wakesOpen`: a slot
  // scaled away, or a toolbox removed, before its VM workflow dropped the tag; that one lets go of a wake
  // whose pod never comes back, found by helper-59): nobody else would ever drop those tags.
  const names = new Set([
    ...Object.keys(st.input.hibernateAsked ?? {}),
    ...Object.keys(st.input.spentBySet ?? {}),
    ...Object.keys(st.input.wakesOpen ?? {}),
  ]);
  const removed = [...names].filter((pod) => !present.has(pod) && !built.has(pod)).sort();
  if (removed.length === 0) return;
  const crs = await hibernations(st);
  if ('error' in crs) return fail(st, crs.error);
  const held = vmsHeldByCR(st.ns, crs.items);
  const vms = removed.map((pod) => vmNameForPod(st.ns, pod)).filter((vm) => !held.has(vm));
  const drops = await st.r.runAll(
    vms.map((vm): PassAction => ({ id: `drop-tag:${vm}`, type: 'dropHibernateTag', vmName: vm })),
  );
  const i = drops.findIndex((o) => o.kind === 'error');
  if (i >= 0) return fail(st, `drop hibernate snapshot of removed pod's VM ${vms[i]}: ${errText(drops[i]!)}`);
  const asked = removed.filter((pod) => st.input.hibernateAsked?.[pod] !== undefined);
  const asks = await st.r.runAll(
    asked.map(
      (pod): PassAction => ({ id: `ask:Wake:${pod}`, type: 'askVM', pod, desire: 'Wake', keepTag: true }),
    ),
  );
  const j = asks.findIndex((o) => o.kind === 'error');
  if (j >= 0)
    return fail(
      st,
      `ask the VM workflow of removed pod ${st.ns}/${asked[j]} to let go: ${errText(asks[j]!)}`,
    );
}

/**
 * Ours (leveled patch `set-wake-waits-for-cr`, found by helper-63): a main a CocoonHibernation holds
 * hibernated, as its VM workflow reported (`desireConflicts`: the un-suspend's Wake, step 11, waits for that
 * CR), ends the pass `Pending` with `Progressing=False` `DesireConflict` naming the CR, and no requeue. The
 * reference looks again every 5 s for as long as the CR holds the VM (the CR's long-lived idle state); here
 * each look was a signal to the VM workflow and a workflow task or two, for nothing: the hold ends only when
 * the CR wants Wake or goes, and then the VM workflow clears its conflict (a signal to this workflow) and
 * clears the pod's hibernate annotation (a pod event). Returns when the VM workflow has reported no hold.
 */
async function heldMainBlock(st: PassState, main: V1Pod): Promise<void> {
  const name = main.metadata?.name ?? '';
  const held = st.input.desireConflicts?.[name];
  if (held === undefined) return;
  const status = await writeStatus(st, 'Pending', 'status', {
    reason: ConditionReasons.desireConflict,
    message: `main pod ${st.ns}/${name}: ${held}`,
  });
  return finish(st, {}, status);
}

/**
 * Writes the rebuild-history annotation and mirrors it for later slots
 * (docs/cocoonset.md#sub-agent-rebuild-and-dead-letter `patchRebuildHistory`).
 */
async function writeHistory(st: PassState, slot: number, history: string, prefix: string): Promise<void> {
  const o = await st.r.run({
    id: `history:${slot}`,
    type: 'patchCocoonSetAnnotations',
    annotations: { [Annotations.rebuildHistory]: history },
  });
  const err = errText(o);
  if (err !== undefined) return fail(st, `${prefix}: ${err}`);
  st.written[Annotations.rebuildHistory] = history;
}

/**
 * Toolbox names: duplicates and integer-like names are rejected before any write (docs/cocoonset.md#pods).
 */
export function validateToolboxes(toolboxes: readonly ToolboxSpec[]): string | undefined {
  const seen = new Set<string>();
  for (const tb of toolboxes) {
    if (seen.has(tb.name)) return `duplicate toolbox name "${tb.name}" in spec`;
    seen.add(tb.name);
    if (atoiParses(tb.name)) {
      return `toolbox name "${tb.name}" must not be an integer: collides with agent slot pod naming`;
    }
  }
  return undefined;
}

/**
 * How long a failed toolbox must still wait for its recreate, ms: until its pod is
 * `TOOLBOX_RECREATE_MIN_AGE_MS` old (by its creationTimestamp against the pass's `nowMs`); 0 when it is not
 * failed, is old enough, or has no creation time.
 */
function recreateWaitMs(st: PassState, pod: V1Pod): number {
  if (!terminal(st, pod)) return 0;
  const created = pod.metadata?.creationTimestamp;
  const at = created instanceof Date ? created.getTime() : Date.parse(String(created ?? ''));
  if (Number.isNaN(at)) return 0;
  return Math.max(0, at + TOOLBOX_RECREATE_MIN_AGE_MS - st.input.nowMs);
}

/**
 * A failed pod's reason, as its Events give it (the reference's failed-main Event): vk-cocoon's lifecycle
 * message, else the pod's phase, else ''.
 */
function failureOf(pod: V1Pod): string {
  return pod.metadata?.annotations?.[Annotations.lifecycleStateMessage] || pod.status?.phase || '';
}

/**
 * `Progressing=False` reason `ToolboxFailing` naming the failed toolboxes this pass did not recreate yet
 * (`toolboxWaits`), with the Warning Event of the same text, and the wait until the first may be; undefined
 * when there are none.
 */
function toolboxBlock(st: PassState): { reason: string; message: string; afterMs: number } | undefined {
  const waits = st.toolboxWaits ?? [];
  if (waits.length === 0) return undefined;
  const message = `${waits.map((w) => `toolbox pod ${st.ns}/${w.pod} failed: ${w.failure}`).join('; ')} (a failed toolbox is recreated once its pod is ${TOOLBOX_RECREATE_MIN_AGE_MS / 1000} s old)`;
  st.r.effect({
    id: `event:${EventReasons.toolboxFailing}`,
    type: 'event',
    eventType: 'Warning',
    reason: EventReasons.toolboxFailing,
    message,
  });
  return {
    reason: ConditionReasons.toolboxFailing,
    message,
    afterMs: Math.min(...waits.map((w) => w.waitMs)),
  };
}

/**
 * `ensureToolboxes` (docs/cocoonset.md#a-pass-in-order); resolves `changed` or ends the pass with an error.
 */
async function ensureToolboxes(st: PassState): Promise<boolean> {
  const toolboxes = st.cs.spec.toolboxes ?? [];
  const invalid = validateToolboxes(toolboxes);
  if (invalid !== undefined) return fail(st, invalid);
  let changed = false;
  for (const tb of toolboxes) {
    const podName = toolboxPodName(st.cs, tb.name);
    const existing = st.c.toolbox.get(tb.name);
    if (!existing && st.c.allByName.has(podName)) {
      return fail(st, `create toolbox ${tb.name}: name collision with existing pod ${podName}`);
    }
    if (existing) {
      // Ours: as for a sub-agent, a failed hibernate round leaves a live VM (see `failedRoundKeepsVM`).
      if (inFailedRound(st, existing) || (await stateInTag(st, existing))) continue;
      const drifted = !podSpecMatchesToolbox(existing, st.cs, tb, driftOptions(st));
      // A failed toolbox the spec still builds waits out its minimum age; a drifted one (the fix) does not.
      const waitMs = st.input.toolboxRecreateBackoff && !drifted ? recreateWaitMs(st, existing) : 0;
      if (waitMs > 0) {
        st.toolboxWaits = [
          ...(st.toolboxWaits ?? []),
          { pod: podName, failure: failureOf(existing) || 'failed', waitMs },
        ];
        continue;
      }
      if (
        (terminal(st, existing) || drifted) &&
        !inHibernateRound(st, existing) &&
        (terminal(st, existing) || !(await spentHeld(st, podName)))
      ) {
        if (await deletePod(st, existing.metadata!.name!, `delete toolbox ${tb.name} for recreate`))
          await dropRemovedTags(st, [existing]);
        changed = true;
      }
      continue;
    }
    const pod = await build(st, `build toolbox ${tb.name}`, () => buildToolboxPod(st.cs, tb));
    const crs = await hibernations(st);
    if ('error' in crs) return fail(st, crs.error);
    const held = holdSpent(st, crs.items, [podName]);
    if (held.size > 0 && (await dropSpentBySet(st, held)).size === 0) continue;
    const [probeErr] = await restoreMarks(st, [pod], podsRestorableByCR(crs.items));
    if (probeErr !== undefined) return fail(st, `mark restore toolbox ${tb.name}: ${probeErr}`);
    const o = await st.r.run({ id: `create:${podName}`, type: 'createPod', pod });
    if (o.kind === 'ok') {
      changed = true;
    } else if (o.kind === 'alreadyExists') {
      const g = await st.r.run({ id: `get:${podName}`, type: 'getPod', pod: podName });
      if (g.kind !== 'pod')
        return fail(st, `get existing pod ${st.ns}/${podName}: ${errText(g) ?? 'unexpected outcome'}`);
      const role = g.pod.metadata?.labels?.[Labels.role] ?? '';
      if (role !== Roles.toolbox || !isControlledBy(g.pod, st.cs.metadata.uid)) {
        return fail(
          st,
          `create toolbox ${tb.name}: name collision with existing pod ${st.ns}/${podName} (role=${role})`,
        );
      }
    } else {
      return fail(st, `create toolbox ${tb.name}: ${errText(o) ?? 'unexpected outcome'}`);
    }
  }
  const wanted = new Set(toolboxes.map((t) => t.name));
  for (const name of [...st.c.toolbox.keys()].sort(compareNames)) {
    if (wanted.has(name)) continue;
    const pod = st.c.toolbox.get(name)!;
    if (await deletePod(st, pod.metadata!.name!, `delete extra toolbox ${name}`)) {
      changed = true;
      await dropRemovedTags(st, [pod]);
    }
  }
  return changed;
}

/**
 * Asks the VM workflow of each of `pods` for the set's `desire`, as one batch; the first error (in the
 * pods' order) fails the pass with `prefix`.
 */
async function askVMs(
  st: PassState,
  pods: V1Pod[],
  desire: 'Hibernate' | 'Wake',
  prefix: string,
  flags: { release?: boolean; keepTag?: (pod: V1Pod) => boolean } = {},
): Promise<void> {
  const outcomes = await st.r.runAll(
    pods.map(
      (pod): PassAction => ({
        id: `ask:${desire}:${pod.metadata?.name ?? ''}`,
        type: 'askVM',
        pod: pod.metadata?.name ?? '',
        desire,
        podUID: pod.metadata?.uid,
        podResourceVersion: pod.metadata?.resourceVersion,
        ...(flags.release ? { release: true } : {}),
        ...(flags.keepTag?.(pod) ? { keepTag: true } : {}),
      }),
    ),
  );
  const i = outcomes.findIndex((o) => o.kind === 'error');
  if (i >= 0)
    return fail(st, `${prefix} ${st.ns}/${pods[i]!.metadata?.name ?? ''}: ${errText(outcomes[i]!)}`);
}

/**
 * The suspend completion gate (reference `allOwnedPodsHibernated`; docs/cocoonset.md#suspend), over `pods`
 * in name order: unmanaged (static toolboxes) and terminal pods (`terminal`) are skipped; every other pod needs a VM
 * name, lifecycle `hibernated` reported for at least the set's generation (a stale tag or lagging
 * annotation from an earlier round cannot pass), and then its `:hibernate` tag in the registry. The
 * annotation checks come first and cost nothing; only when all pass are the tags probed, all at once (the
 * reference probes one by one and stops at the first absent tag). A probe error fails the pass. Resolves
 * the first pod not done yet with why (`roundFailed`: vk-cocoon reported its hibernate round failed, with
 * `failedRoundsHoldVMs`), or undefined when all are done (also when every pod is skipped).
 */
async function suspendGate(
  st: PassState,
  pods: V1Pod[],
): Promise<{ why: string; roundFailed: boolean } | undefined> {
  const generation = st.cs.metadata.generation ?? 0;
  const toProbe: V1Pod[] = [];
  for (const pod of pods) {
    if (pod.metadata?.annotations?.[Annotations.managed] !== 'true' || terminal(st, pod)) continue;
    const name = pod.metadata?.name ?? '';
    if (vmNameOf(pod) === '') return { why: `pod ${name} has no VM name yet`, roundFailed: false };
    const lc = lifecycleOf(pod);
    if (st.input.failedRoundsHoldVMs && lc.state === LifecycleStates.failed)
      return {
        why: `pod ${st.ns}/${name}: vk-cocoon reported its hibernate round failed (${failureOf(pod)}) and retries it; the set is Suspended once its snapshot is in`,
        roundFailed: true,
      };
    if (lc.state !== 'hibernated' || lc.observedGeneration < generation)
      return {
        why: `pod ${name}: vk-cocoon has not reported hibernated for generation ${generation} yet`,
        roundFailed: false,
      };
    toProbe.push(pod);
  }
  if (!st.input.registryConfigured) return undefined;
  const outcomes = await st.r.runAll(
    toProbe.map(
      (pod): PassAction => ({ id: `gate:${vmNameOf(pod)}`, type: 'probeHibernate', vmName: vmNameOf(pod) }),
    ),
  );
  for (const [i, o] of outcomes.entries()) {
    const vm = vmNameOf(toProbe[i]);
    if (o.kind === 'error') return fail(st, `probe hibernate snapshot ${vm}: ${o.message}`);
    if (o.kind === 'probe' && !o.present)
      return { why: `snapshot ${vm}:hibernate is not in the registry yet`, roundFailed: false };
  }
  return undefined;
}

/**
 * Suspend with the retain policy (reference `reconcileSuspend`; docs/cocoonset.md#suspend):
 * 1. No main: create it (restoring from its `:hibernate` tag when one exists; a probe error creates nothing)
 *    and requeue at once; ours (`mainRestoresWaitForSpentTag`): not while that tag is spent
 *    (`holdMainWhileSpent`, `Suspending`): a retain set always keeps its main's seat. Sub-agents and toolboxes are not
 *    created while suspended. Any create error fails the pass (AlreadyExists too, as the reference). Ours
 *    (`waitsForTerminatingMain`): while the pass sees the set's main pod terminating, it creates
 *    nothing and waits (`waitForTerminatingMain`); the reference's create fails with AlreadyExists on every
 *    retry, with backoff, and says ReconcileFailed.
 * 2. Ask every pod's VM workflow, in name order, for `Hibernate` (the VM workflow patches the annotation,
 *    unless a CocoonHibernation holds the VM awake: then the conflict shows here, on `Progressing`).
 * 3. The completion gate (`suspendGate`): `Suspended` and done, or `Suspending` and a 5 s requeue.
 * Never deletes a tag or a pod.
 */
async function suspendRetain(st: PassState): Promise<never> {
  if (!st.c.main) {
    const pod = await build(st, 'build main agent before suspend', () => buildAgentPod(st.cs, 0, '', ''));
    const podName = pod.metadata?.name ?? '';
    if (st.input.waitsForTerminatingMain && terminatingOwnedPod(st, podName))
      return waitForTerminatingMain(st, 'Suspending', podName);
    await holdMainWhileSpent(st, podName, 'Suspending', st.input.mainRestoresWaitForSpentTag, '');
    const [probeErr] = await restoreMarks(st, [pod], new Set([podName]));
    if (probeErr !== undefined) return fail(st, probeErr);
    await holdRestoreUnderOtherImage(st, pod, 'Suspending');
    const o = await st.r.run({ id: `create:${podName}`, type: 'createPod', pod });
    if (o.kind === 'alreadyExists')
      return fail(st, `create main agent before suspend: pod ${st.ns}/${podName} already exists`);
    const err = errText(o);
    if (err !== undefined) return fail(st, `create main agent before suspend: ${err}`);
    return finish(st, { requeue: true });
  }
  const pods = podsInNameOrder(st.c);
  await hibernateAll(
    st,
    pods.filter((p) => !(st.input.retainSkipsUnbound && unbound(p))),
  );
  return writeStatusAndFinish(st, 'Suspended', {});
}

/**
 * Ends the pass while the set's main pod `podName` is terminating (ours, `PassInput.waitsForTerminatingMain`):
 * nothing created, status `phase` with `Progressing=False` reason `MainTerminating`, a look again in 5 s
 * (the pod's deletion event usually comes first).
 */
async function waitForTerminatingMain(
  st: PassState,
  phase: 'Pending' | 'Suspending',
  podName: string,
): Promise<never> {
  const status = await writeStatus(st, phase, 'status', {
    reason: ConditionReasons.mainTerminating,
    message: `main pod ${st.ns}/${podName} is terminating: it is created again once it is gone`,
  });
  return finish(st, { requeueAfterMs: REQUEUE_WAIT_FOR_MAIN_MS }, status);
}

/** Whether the pass read a pod named `name`, controlled by this set, that is being deleted. */
function terminatingOwnedPod(st: PassState, name: string): boolean {
  return st.input.pods.some(
    (p) =>
      p.metadata?.name === name &&
      p.metadata?.deletionTimestamp != null &&
      isControlledBy(p, st.cs.metadata.uid),
  );
}

/**
 * Asks every pod's VM workflow to hibernate its VM and runs the completion gate (`suspendGate`); while the
 * gate is closed, ends the pass `Suspending` (with any DesireConflict on `Progressing`) and a 5 s requeue
 * (none while a CocoonHibernation holds a pod awake, with `crHoldsWait`). Returns only when every pod is
 * done.
 */
async function hibernateAll(st: PassState, pods: V1Pod[], release = false): Promise<void> {
  await askVMs(st, pods, 'Hibernate', 'ask the VM workflow to hibernate', { release });
  const waiting = await suspendGate(st, pods);
  if (waiting === undefined) return;
  const conflicts = pods.flatMap((p) => {
    const m = st.input.desireConflicts?.[p.metadata?.name ?? ''];
    return m === undefined ? [] : [`pod ${p.metadata?.name}: ${m}`];
  });
  const status = await writeStatus(
    st,
    'Suspending',
    'status',
    conflicts.length > 0
      ? { reason: ConditionReasons.desireConflict, message: conflicts.join('; ') }
      : waiting.roundFailed
        ? { reason: ConditionReasons.hibernateRoundFailed, message: waiting.why }
        : undefined,
  );
  // Ours (`crHoldsWait`, helper-64): a pod a CocoonHibernation holds awake (its VM workflow reported it,
  // and left it unannotated) keeps the gate closed until that CR lets go; its VM workflow then annotates
  // the pod (a pod event) and clears the conflict (a signal), so nothing needs a look every 5 s meanwhile.
  const heldAwake = pods.some(
    (p) => st.input.desireConflicts?.[p.metadata?.name ?? ''] !== undefined && !hibernateRequested(p),
  );
  return finish(
    st,
    { requeueAfterMs: st.input.crHoldsWait && heldAwake ? 0 : REQUEUE_SUSPEND_POLL_MS },
    status,
  );
}

/** Writes CocoonSet annotations (`null` deletes); a failure ends the pass with the reference's wording. */
async function annotateSet(
  st: PassState,
  id: string,
  annotations: Record<string, string | null>,
): Promise<void> {
  const o = await st.r.run({ id, type: 'patchCocoonSetAnnotations', annotations });
  const err = errText(o);
  if (err !== undefined)
    return fail(
      st,
      `patch cocoonset ${st.ns}/${st.name} annotation ${Object.keys(annotations).join(',')}: ${err}`,
    );
  for (const [k, v] of Object.entries(annotations)) {
    if (v === null) {
      delete st.written[k];
      st.cleared ??= new Set();
      st.cleared.add(k);
    } else {
      st.written[k] = v;
      st.cleared?.delete(k);
    }
  }
}

/**
 * Suspend with `hibernatePolicy: release` (reference `reconcileSuspendRelease`; docs/cocoonset.md#seat-release):
 * 1. No registry: fail closed (the snapshot could be neither checked nor restored).
 * 2. No pods (already released, or suspended before the first boot): `Suspended`, done.
 * 3. Hibernate every VM through its VM workflow and wait for the completion gate (`hibernateAll`).
 * 4. Before any delete: the VM names for the deletion GC (`delete-vm-names`, the union of the status, the
 *    annotation and the pods), and the main's node as the wake's hint (`hibernated-on-node`).
 * 5. Per pod in name order (terminal pods are kept for triage): `keep-snapshot-on-delete` (best effort: its
 *    loss only costs the wake a pull), then the delete, counted in `slot_release_pods_deleted_total`.
 * 6. `Suspended` in the same pass (the receipt the wake keys on), and a 5 s requeue.
 * Never deletes a tag.
 */
async function suspendRelease(st: PassState): Promise<never> {
  if (!st.input.registryConfigured)
    return fail(st, `hibernatePolicy=release on ${st.ns}/${st.name} requires a configured registry`);
  const pods = podsInNameOrder(st.c);
  if (pods.length === 0) return writeStatusAndFinish(st, 'Suspended', {});
  // Ours (`releaseSkipsUnbound`): a pod no node took (a wake's restore pod waiting for a seat) runs no VM, so
  // there is nothing to hibernate (its VM lives in the tag alone) and no node could ever report it
  // hibernated: it is released as it is, not waited for.
  await hibernateAll(
    st,
    pods.filter((p) => !(st.input.releaseSkipsUnbound && unbound(p))),
    true,
  );
  const cs = currentCS(st);
  const joined = stashedVMNames(cs, pods).join(',');
  if (joined !== '' && joined !== (cs.metadata.annotations?.[Annotations.deleteVMNames] ?? '')) {
    const o = await st.r.run({
      id: 'stash-vm-names',
      type: 'patchCocoonSetAnnotations',
      annotations: { [Annotations.deleteVMNames]: joined },
    });
    const err = errText(o);
    if (err !== undefined) return fail(st, `stash vm names before slot release: ${err}`);
    st.written[Annotations.deleteVMNames] = joined;
  }
  const node = st.c.main?.spec?.nodeName ?? '';
  if (node !== '') await annotateSet(st, 'hint', { [Annotations.hibernatedOnNode]: node });
  for (const pod of pods) {
    if (terminal(st, pod)) continue;
    const podName = pod.metadata?.name ?? '';
    if (pod.metadata?.annotations?.[Annotations.keepSnapshotOnDelete] !== 'true') {
      // Best effort: the outcome is not checked (a lost flag costs the wake a registry pull; failing here
      // would forfeit the seat).
      await st.r.run({
        id: `keep-snapshot:${podName}`,
        type: 'patchPodAnnotations',
        pod: podName,
        annotations: { [Annotations.keepSnapshotOnDelete]: 'true' },
      });
    }
    await deletePod(st, podName, `slot release: delete pod ${st.ns}/${podName}`);
    st.r.effect({
      id: `metric:slotReleasePodsDeletedTotal:${podName}`,
      type: 'metric',
      metric: 'slotReleasePodsDeletedTotal',
      labels: { namespace: st.ns, cocoonset: st.name },
    });
  }
  return writeStatusAndFinish(st, 'Suspended', { requeueAfterMs: REQUEUE_SUSPEND_POLL_MS });
}

/** `Migrating`, and a 5 s look (reference `markMigrating`). */
function markMigrating(st: PassState): Promise<never> {
  return writeStatusAndFinish(st, 'Migrating', { requeueAfterMs: REQUEUE_WAIT_FOR_MAIN_MS });
}

/**
 * Drops the main's `:hibernate` tag unless a live CocoonHibernation needs it (the one "who needs the tag"
 * rule of the set, `vmsHeldByCR`; the reference drops it unconditionally); `prefix` names the step in errors.
 */
async function dropTagUnlessHeld(
  st: PassState,
  vm: string,
  prefix: string,
  wokenPod?: string,
): Promise<void> {
  const crs = await hibernations(st);
  if ('error' in crs) return fail(st, crs.error);
  if (vmsHeldByCR(st.ns, crs.items).has(vm)) return;
  const o = await st.r.run({
    id: `drop-tag:${vm}`,
    type: 'dropHibernateTag',
    vmName: vm,
    ...(wokenPod ? { wokenPod } : {}),
  });
  const err = errText(o);
  if (err !== undefined) return fail(st, `${prefix} ${vm}: ${err}`);
}

/**
 * Cross-node migration of the main (reference `reconcileMigration`; docs/cocoonset.md#migration), called
 * when its cheap gates (`migrationMayEngage`) say it may engage. Returns when it does not handle the pass;
 * else ends it. Every decision is a function of durable state (phase, tag, pod, node, annotations), so a
 * crash at any point resumes at the right step.
 * - A main the set sees hibernated on its target (or unpinned) that a CocoonHibernation holds: not handled
 *   (the CR's long-lived idle state; no probe).
 * - Probe the main's `:hibernate` tag (an error fails the pass: falling through could clear the migration's
 *   hibernate request or boot fresh over the only snapshot).
 * - No tag: a main live on another node than the pin → `Migrating` first, then ask its VM workflow to
 *   hibernate it, 5 s; else not handled.
 * - Tag, main on another node: hibernating → delete the old pod once vk reports it quiesced (ours,
 *   `migrationWaitsForQuiesce`; the reference deletes on the request alone); not hibernating → the tag is stale (never
 *   quiesced by us): drop it (ours: not while the main is a restore still pulling it, nor while a live CR
 *   needs it) and start over. No main → create it restoring from the tag (pinned, or unpinned when the pin was
 *   cleared); AlreadyExists waits 5 s. Hibernated on the target (a re-target back, or un-suspend) → ask its
 *   VM workflow to wake it in place. Restoring → wait (not handled unless `Migrating`: a CR wake in flight is
 *   not ours). Live → drop the tag. Each of these writes `Migrating` and looks again in 5 s; the pass that
 *   finds no tag hands back to the normal flow.
 */
async function migrate(st: PassState): Promise<void> {
  const cs = st.cs;
  const main = st.c.main;
  const desired = cs.spec.nodeName ?? '';
  const node = main?.spec?.nodeName ?? '';
  const vm = vmNameForAgent(st.ns, st.name, 0);
  // Ours: a migration under way stays `Migrating` through a failed step (its status says why), so the next
  // pass resumes it; with the derived phase a main already running on the target would not engage again.
  if (st.input.migrationFailureKeepsPhase && cs.status?.phase === 'Migrating') st.failPhase = 'Migrating';
  if (main && hibernateRequested(main) && (desired === '' || node === desired)) {
    const crs = await hibernations(st);
    if ('error' in crs) return fail(st, `migrate: ${crs.error}`);
    if (podsHibernatedByCR(crs.items).has(main.metadata?.name ?? '')) return;
  }
  const probe = await st.r.run({ id: `migrate-probe:${vm}`, type: 'probeHibernate', vmName: vm });
  if (probe.kind !== 'probe')
    return fail(st, `migrate: probe hibernate snapshot ${vm}: ${errText(probe) ?? 'unexpected outcome'}`);
  if (!probe.present) {
    if (desired === '' || !main || node === '' || node === desired) return;
    const mainName = main.metadata?.name ?? '';
    const conflict = st.input.migrationShowsConflict ? st.input.desireConflicts?.[mainName] : undefined;
    await writeStatus(
      st,
      'Migrating',
      'status-migrating',
      conflict === undefined
        ? undefined
        : { reason: ConditionReasons.desireConflict, message: `pod ${mainName}: ${conflict}` },
    );
    if (st.input.migrationFailureKeepsPhase) st.failPhase = 'Migrating';
    await askVMs(st, [main], 'Hibernate', 'migrate: ask the VM workflow to hibernate');
    return finish(st, { requeueAfterMs: REQUEUE_WAIT_FOR_MAIN_MS });
  }
  if (main && desired !== '' && node !== '' && node !== desired) {
    if (hibernateRequested(main)) {
      // Ours: the tag the probe found may be an earlier round's while vk still pushes this one (the tag
      // exists before `hibernated`, vk contract §4.2); deleted mid-round, the restore would roll the VM back.
      if (st.input.migrationWaitsForQuiesce && !vkQuiesced(main)) return markMigrating(st);
      await deletePod(st, main.metadata!.name!, 'migrate: delete old main');
      return markMigrating(st);
    }
    // Ours: a restore still pulling the tag (restore-marked, VM not live) is not a stale tag; wait for it.
    if (restoreFromHibernate(main) && !vmLive(main)) return markMigrating(st);
    // Ours: nor is a tag this set's own hibernate request made: the pass's pod read can predate the annotation
    // while the probe already finds vk's push (the reference would drop the only copy here).
    const asked = st.input.hibernateAsked?.[main.metadata?.name ?? ''];
    if (asked !== undefined && asked === (main.metadata?.uid ?? '')) return markMigrating(st);
    await dropTagUnlessHeld(st, vm, 'migrate: drop stale hibernate snapshot');
    return markMigrating(st);
  }
  if (!main) {
    const pod = await build(st, `migrate: build main`, () => buildAgentPod(st.cs, 0, '', ''));
    await holdMainWhileSpent(
      st,
      agentPodName(cs, 0),
      'Migrating',
      st.input.mainRestoresWaitForSpentTag,
      'migrate: ',
    );
    pod.metadata!.annotations = {
      ...(pod.metadata!.annotations ?? {}),
      [Annotations.restoreFromHibernate]: 'true',
    };
    await holdRestoreUnderOtherImage(st, pod, 'Migrating');
    const o = await st.r.run({ id: `create:${pod.metadata!.name}`, type: 'createPod', pod });
    if (o.kind === 'alreadyExists') return finish(st, { requeueAfterMs: REQUEUE_WAIT_FOR_MAIN_MS });
    const err = errText(o);
    if (err !== undefined) return fail(st, `migrate: recreate main on ${desired || 'any node'}: ${err}`);
    return markMigrating(st);
  }
  const pinnedTo = requiredHostname(main);
  if (
    st.input.migrationFollowsPin &&
    node === '' &&
    pinnedTo !== '' &&
    pinnedTo !== desired &&
    restoreFromHibernate(main) &&
    !vmLive(main)
  ) {
    // Ours: a restore no node took (e.g. pinned to a node that does not exist) after the pin moved or was
    // cleared: no VM ever ran in it and the tag stays, so rebuild it with the current pin (next pass). The
    // reference waits on it for ever.
    await deletePod(st, main.metadata!.name!, `migrate: delete restore main unscheduled on ${pinnedTo}`);
    return markMigrating(st);
  }
  if (hibernateRequested(main) && (desired === '' || node === desired)) {
    // Ours (`replacedMainKeepsSnapshot`): a main whose VM is in the tag alone and whose spec changed is not
    // woken in place (the drift step would then replace the running VM, booting fresh): the pass goes on
    // to that step, which replaces it keeping the tag; the new pod is restored here (`!main` above).
    if (
      st.input.replacedMainKeepsSnapshot &&
      vmIDOf(main) === '' &&
      !podSpecMatchesAgent(main, cs, 0, driftOptions(st))
    )
      return;
    // The migration drops the tag itself once the VM runs (below): one DELETE per wake.
    await askVMs(st, [main], 'Wake', 'migrate: ask the VM workflow to wake', { keepTag: () => true });
    return markMigrating(st);
  }
  if (!vmAwake(st, main)) {
    if (cs.status?.phase !== 'Migrating') return;
    // Ours: a restore no node takes says why (the scheduler's message) and how to get out of it.
    const unschedulable = st.input.migrationFollowsPin && node === '' ? podUnschedulable(main) : '';
    if (unschedulable === '') return markMigrating(st);
    const status = await writeStatus(st, 'Migrating', 'status', {
      reason: ConditionReasons.unschedulable,
      message: `main pod ${main.metadata?.name} unschedulable: ${unschedulable} (change or clear spec.nodeName to move it)`,
    });
    return finish(st, { requeueAfterMs: REQUEUE_WAIT_FOR_MAIN_MS }, status);
  }
  await dropTagUnlessHeld(st, vm, 'migrate: drop hibernate snapshot', main.metadata?.name);
  return markMigrating(st);
}

/**
 * The message of a `PodScheduled=False` condition with reason `Unschedulable` (the scheduler's, e.g. `0/1
 * nodes are available: …`), or '' (also for such a condition with an empty message, as the reference).
 */
export function podUnschedulable(pod: V1Pod): string {
  const c = (pod.status?.conditions ?? []).find(
    (x) => x.type === 'PodScheduled' && x.status === 'False' && x.reason === 'Unschedulable',
  );
  return c?.message ?? '';
}

/**
 * The released-seat wake (reference `reconcileWake`; docs/cocoonset.md#seat-release), before un-suspend and
 * before the main's create (whose restore intent only looks at CocoonHibernations). Engages on the phase,
 * not the policy: `Waking`, `Suspended`, `Suspending` with the node hint, or an unfinished wake whose
 * `Waking` was overwritten (a restore-marked, non-hibernating main while the hint is set). Returns when
 * it does not handle the pass ("not handled": the pass goes on); else ends it.
 * - No main: `startReleasedWake`.
 * - Waking, VM not live: `WakeNoCapacity` (Warning Event, `slot_release_wake_unschedulable_total`) while the
 *   scheduler finds no seat; `Waking`; look again in 5 s.
 * - Waking, VM live: drop the `:hibernate` tag (unless the main is being hibernated again or a live
 *   CocoonHibernation needs the tag: ours, the reference drops it unconditionally), then, only while the
 *   hint is still there, score the placement (`slot_release_wake_total{placement=hint-node|pool}`) and clear
 *   the hint (so a stale-status re-entry never scores twice); derived phase; run again at once.
 * - Suspended/Suspending with the hint and a visible, non-terminal main: read it from the apiserver; gone or
 *   terminating → a stale cache, wait 5 s; alive → its delete never ran: not handled (un-suspend wakes it in
 *   place).
 */
async function releasedWake(st: PassState): Promise<void> {
  const main = st.c.main;
  const { hint, waking, engaged } = wakeEngagement(currentCS(st), main);
  if (!engaged || !st.input.registryConfigured) return;
  if (!main) return startReleasedWake(st, hint);
  const mainName = main.metadata?.name ?? '';
  if (waking && st.input.releasedWakeFollowsPlacement && unboundRestore(main) && !placedAsSpec(st.cs, main)) {
    // Ours: no VM ever ran in this pod and the tag stays, so recreating it under the new placement loses
    // nothing (next pass: `startReleasedWake`). The reference waits on it for ever.
    await deletePod(st, mainName, `wake: delete restore main no node took (placement changed)`);
    return writeStatusAndFinish(st, 'Waking', { requeueAfterMs: REQUEUE_WAIT_FOR_MAIN_MS });
  }
  // Ours (`replacedMainKeepsSnapshot`): a restore still pulling its tag (no VM yet) whose spec changed again
  // is not waited for: the pass goes on to the drift step, which replaces it keeping the tag (waited for, the
  // running VM would then be replaced and booted fresh).
  if (
    waking &&
    st.input.replacedMainKeepsSnapshot &&
    vmIDOf(main) === '' &&
    !podSpecMatchesAgent(main, st.cs, 0, driftOptions(st))
  )
    return;
  if (waking && !vmAwake(st, main)) {
    const msg = podUnschedulable(main);
    if (msg !== '') {
      st.r.effect({
        id: 'metric:slotReleaseWakeUnschedulableTotal',
        type: 'metric',
        metric: 'slotReleaseWakeUnschedulableTotal',
        labels: { namespace: st.ns, cocoonset: st.name },
      });
      st.r.effect({
        id: `event:${EventReasons.wakeNoCapacity}`,
        type: 'event',
        eventType: 'Warning',
        reason: EventReasons.wakeNoCapacity,
        message: `main pod ${mainName} unschedulable: ${msg}`,
      });
    }
    return writeStatusAndFinish(st, 'Waking', { requeueAfterMs: REQUEUE_WAIT_FOR_MAIN_MS });
  }
  if (waking) {
    const vm = vmNameOf(main);
    if (!hibernateRequested(main)) await dropTagUnlessHeld(st, vm, 'wake: drop hibernate snapshot', mainName);
    if (hint !== '') {
      const placement = hint === (main.spec?.nodeName ?? '') ? 'hint-node' : 'pool';
      st.r.effect({
        id: 'metric:slotReleaseWakeTotal',
        type: 'metric',
        metric: 'slotReleaseWakeTotal',
        labels: { namespace: st.ns, cocoonset: st.name, placement },
      });
      await annotateSet(st, 'clear-hint', { [Annotations.hibernatedOnNode]: null });
    }
    return writeStatusAndFinish(st, '', { requeue: true });
  }
  if (hint === '' || terminal(st, main)) return;
  const o = await st.r.run({ id: `confirm-delete:${mainName}`, type: 'readPod', pod: mainName });
  if (o.kind === 'notFound' || (o.kind === 'pod' && o.pod.metadata?.deletionTimestamp != null))
    return finish(st, { requeueAfterMs: REQUEUE_WAIT_FOR_MAIN_MS });
  const err = errText(o);
  if (err !== undefined) return fail(st, `wake: confirm delete of ${st.ns}/${mainName}: ${err}`);
}

/** A pod no node has taken (no `spec.nodeName`) and that runs no VM. */
function unbound(pod: V1Pod): boolean {
  return (pod.spec?.nodeName ?? '') === '' && !vmLive(pod);
}

/** A restore-marked pod no node has taken and that runs no VM (`unbound`). */
function unboundRestore(pod: V1Pod): boolean {
  return unbound(pod) && restoreFromHibernate(pod);
}

/**
 * A main no node has taken whose required hostname is not the one the spec's pin gives (`unboundMainFollowsPin`):
 * nothing runs in it, so it is rebuilt under the current pin.
 */
function unboundOffPin(st: PassState, main: V1Pod): boolean {
  if (!st.input.unboundMainFollowsPin || !unbound(main)) return false;
  return requiredHostname(main) !== requiredHostname(buildAgentPod(st.cs, 0, '', ''));
}

/**
 * Whether `pod` is placed as the current spec would place a new main: same pool, same CPU class (exactly:
 * an unbound pod has no VM to adopt, unlike drift's `schedulingMatches`), same required hostname (the
 * `spec.nodeName` pin, or none).
 */
function placedAsSpec(cs: CocoonSet, pod: V1Pod): boolean {
  const wanted = buildAgentPod(cs, 0, '', '');
  const classOf = (p: V1Pod) => p.spec?.nodeSelector?.[Labels.snapshotCPUClass] ?? '';
  return (
    podNodePool(pod) === nodePoolOf(cs) &&
    classOf(pod) === classOf(wanted) &&
    requiredHostname(pod) === requiredHostname(wanted)
  );
}

/**
 * `startReleasedWake` (docs/cocoonset.md#seat-release): probe the main's `:hibernate` tag (an error fails
 * closed: falling through would boot fresh over the snapshot); absent → not handled (never booted: the
 * normal flow boots it). Spent (a CocoonHibernation woke the VM and cannot DELETE the tag; ours,
 * `holdMainWhileSpent`) → `Waking` with `SpentSnapshotTag`, 5 s. Else persist `Waking` first, then create the main restoring from the tag, with the
 * weight-100 preferred affinity to the hint unless the pod has an affinity already (the pin wins; the pool
 * and CPU-class selectors always apply; the wake pod never gets a `spec.nodeName`); 5 s to look again
 * (also on AlreadyExists: the old pod is still terminating).
 */
async function startReleasedWake(st: PassState, hint: string): Promise<void> {
  const vm = vmNameForAgent(st.ns, st.name, 0);
  const probe = await st.r.run({ id: `wake-probe:${vm}`, type: 'probeHibernate', vmName: vm });
  if (probe.kind !== 'probe')
    return fail(st, `wake: probe hibernate snapshot ${vm}: ${errText(probe) ?? 'unexpected outcome'}`);
  if (!probe.present) return;
  await holdMainWhileSpent(
    st,
    agentPodName(st.cs, 0),
    'Waking',
    st.input.mainRestoresWaitForSpentTag,
    'wake: ',
  );
  await writeStatus(st, 'Waking', 'status-waking');
  const pod = await build(st, 'wake: build main', () => buildAgentPod(st.cs, 0, '', ''));
  pod.metadata!.annotations = {
    ...(pod.metadata!.annotations ?? {}),
    [Annotations.restoreFromHibernate]: 'true',
  };
  if (hint !== '' && pod.spec!.affinity === undefined) pod.spec!.affinity = preferredHostnameAffinity(hint);
  await holdRestoreUnderOtherImage(st, pod, 'Waking');
  const o = await st.r.run({ id: `create:${pod.metadata!.name}`, type: 'createPod', pod });
  const err = errText(o);
  if (err !== undefined) return fail(st, `wake: create main: ${err}`);
  return finish(st, { requeueAfterMs: REQUEUE_WAIT_FOR_MAIN_MS });
}

/** Ends the pass by handing it to `flow`, once the queued effects have run (so events precede it). */
async function handOver(st: PassState, flow: DelegatedFlow): Promise<never> {
  await st.r.flush();
  throw new PassEnded({ kind: 'delegate', flow });
}

/** Offers the pass to `flow` once the queued effects have run; ends the pass when the flow takes it. */
async function offer(st: PassState, flow: 'migration' | 'wake'): Promise<void> {
  await st.r.flush();
  const end = await st.r.io.offer(flow);
  if (end !== undefined) throw new PassEnded(end);
}

/**
 * The reconcile order (docs/cocoonset.md#a-pass-in-order), from step 2 of the reference's `Reconcile` on.
 * Never returns: every path ends the pass (PassEnded).
 */
async function reconcile(st: PassState): Promise<never> {
  const { cs, c, r } = st;
  // 2. Deletion (docs/cocoonset.md#deletion-and-registry-gc): the workflow's deletion flow.
  if (cs.metadata.deletionTimestamp != null) return handOver(st, 'delete');
  // 3. Finalizer: add it and requeue; nothing else this pass.
  if (!(cs.metadata.finalizers ?? []).includes(Finalizers.cocoonSet)) {
    const o = await r.run({ id: 'finalizer', type: 'addFinalizer', finalizer: Finalizers.cocoonSet });
    const err = errText(o);
    if (err !== undefined) return fail(st, `add finalizer: ${err}`);
    return finish(st, { requeue: true });
  }
  if (st.input.failedRoundsHoldVMs) await noteRounds(st);
  // Validation gate (ours): nothing below touches a pod while the spec builds pods the apiserver rejects.
  // Toolbox names that break the toolbox name rules keep failing at their own step, as in the reference.
  const tbNamesOK = validateToolboxes(cs.spec.toolboxes ?? []) === undefined;
  const invalid =
    (st.input.capsSubAgents ? replicasReason(cs) : undefined) ??
    (st.input.validatesStaticToolboxes ? staticToolboxReason(cs) : undefined) ??
    (st.input.validatesVMRules ? vmSpecReason(cs) : undefined) ??
    invalidSpecReason(cs, vmNameOf(c.main), tbNamesOK, st.input.validatesMorePodFields) ??
    (st.input.validatesPin ? nodePinReason(cs, agentPodName(cs, 0)) : undefined);
  if (invalid !== undefined) return blockInvalidSpec(st, invalid);
  if (st.input.waitsForANode) await placementBlock(st);
  if (st.input.driftWaitsForCloneImage) await cloneImageBlock(st);
  if (st.input.driftChecksNamespaceLimits) await namespaceLimitsBlock(st);
  // 6. Generation stamp on every classified pod, in name order.
  const generation = cs.metadata.generation ?? 0;
  if (st.input.batchPodLoops) await stampAll(st, generation);
  for (const pod of st.input.batchPodLoops ? [] : podsInNameOrder(c)) {
    if (cocoonSetGenerationOf(pod) === generation) continue;
    const podName = pod.metadata?.name ?? '';
    const o = await r.run({
      id: `stamp:${podName}`,
      type: 'patchPodAnnotations',
      pod: podName,
      annotations: { [Annotations.cocoonSetGeneration]: String(generation) },
    });
    const err = errText(o);
    if (err !== undefined) return fail(st, `patch cocoonset generation on ${st.ns}/${podName}: ${err}`);
  }
  // 7. Failed main short-circuit / recovery.
  const main = c.main;
  const mainRoundFailed =
    main !== undefined &&
    (st.input.failedRoundsHoldVMs === true
      ? failedRoundHoldsVM(main, st.failedRounds)
      : st.input.failedMainRoundKeepsPhase === true && hibernateRoundFailed(main));
  if (main && mainRoundFailed) recordFailedMain(st, main, EventReasons.podLifecycleFailed);
  else if (main) {
    const reason = mainPodFailedReason(main);
    if (reason !== '') return handleFailedMain(st, main, reason);
    if (cs.status?.phase === 'Failed' && podReady(main)) {
      r.effect({
        id: `event:${EventReasons.recoveredFromFailure}`,
        type: 'event',
        eventType: 'Normal',
        reason: EventReasons.recoveredFromFailure,
        message: `main pod ${st.ns}/${main.metadata?.name ?? ''} is Ready again`,
      });
    }
  }
  // 8. Suspend: retain, or release (seat release).
  if (cs.spec.suspend) {
    if (hibernatePolicyOf(cs) === 'release')
      return st.input.seatRelease ? suspendRelease(st) : handOver(st, 'suspendRelease');
    if (st.input.setDesires) return suspendRetain(st);
    return handOver(st, 'suspend');
  }
  // 9. Migration (before the wake and un-suspend: un-suspend would clear its hibernate request).
  if (migrationMayEngage(cs, main, st.input.registryConfigured)) {
    if (st.input.migration) await migrate(st);
    else await offer(st, 'migration');
  }
  // 10. Released-seat wake.
  if (st.input.seatRelease) await releasedWake(st);
  else if (wakeMayEngage(cs, main, st.input.registryConfigured)) await offer(st, 'wake');
  // 11. Un-suspend: clear leftover hibernate annotations, except on CR-owned pods. With `setDesires` the
  // pods' VM workflows decide (they know the CocoonHibernations): no List here.
  const mainSpecDrifted =
    main !== undefined && (!podSpecMatchesAgent(main, cs, 0, driftOptions(st)) || unboundOffPin(st, main));
  const mainDrifted =
    mainSpecDrifted && !inHibernateRound(st, main!) && !(mainRoundFailed && hibernateRequested(main!));
  // Ours (`replacedMainKeepsSnapshot`): a drifted main whose VM is in its tag alone is replaced, not woken
  // first (a wake would start the VM the delete then stops); its new pod is asked to wake instead. Nor is a
  // drifted main vk is still hibernating woken: once the round ends its VM is in the tag, and it is replaced
  // the same way (woken, the running VM would be replaced and booted fresh).
  const mainKeepsTag = mainDrifted && (await mainStateInTag(st, main!));
  const mainNotWoken =
    mainKeepsTag ||
    (st.input.replacedMainKeepsSnapshot === true && mainSpecDrifted && inHibernateRound(st, main!));
  const hibernating = podsInNameOrder(c).filter(hibernateRequested);
  const toWake = podsInNameOrder(c).filter(
    (p) =>
      (hibernateRequested(p) || st.input.hibernateAsked?.[p.metadata?.name ?? ''] !== undefined) &&
      !(mainNotWoken && p === main),
  );
  // The set's own wake (released seat, migration) already dropped the tag of the pod it restored: that VM
  // workflow only lets go of the old request (`keepTag`), so a wake sends one DELETE.
  const droppedBySet = (p: V1Pod) => st.input.tagDroppedFor?.[p.metadata?.name ?? ''] === true;
  if (toWake.length > 0 && st.input.setDesires)
    await askVMs(st, toWake, 'Wake', 'ask the VM workflow to wake', { keepTag: droppedBySet });
  else if (hibernating.length > 0 && !st.input.setDesires) {
    const crs = await hibernations(st);
    if ('error' in crs) return fail(st, crs.error);
    const skip = podsHibernatedByCR(crs.items);
    for (const pod of hibernating) {
      const podName = pod.metadata?.name ?? '';
      if (skip.has(podName)) continue;
      const o = await r.run({
        id: `unsuspend:${podName}`,
        type: 'patchPodAnnotations',
        pod: podName,
        annotations: { [Annotations.hibernate]: null },
      });
      const err = errText(o);
      if (err !== undefined) return fail(st, `clear hibernate annotation on ${st.ns}/${podName}: ${err}`);
    }
  }
  // 12. Main drift: delete, requeue.
  if (main && mainDrifted) {
    const mismatch = mainKeepsTag ? await imageMismatch(st, main) : undefined;
    if (mismatch) {
      const status = await writeStatus(st, '', 'status', mismatch);
      return finish(st, { requeueAfterMs: REQUEUE_SNAPSHOT_CHOICE_MS }, status);
    }
    // Ours: not while the main's tag is spent (`driftWaitsForSpentTag`): its re-create would wait for the tag.
    await holdMainWhileSpent(st, main.metadata!.name!, '', st.input.driftWaitsForSpentTag, '');
    const deleted = await deletePod(st, main.metadata!.name!, 'delete drifted main agent');
    if (mainKeepsTag) oweWake(st, main);
    else if (deleted) await dropRemovedTags(st, [main]);
    return finish(st, { requeue: true });
  }
  // 14. Main missing: create it.
  if (!main) return createMain(st);
  // 15. Main not Ready: Pending, 5 s. Ours (`hibernatingMainHoldsMembers`): a main carrying the hibernate
  // annotation counts as not Ready.
  if (!podReady(main) || (st.input.hibernatingMainHoldsMembers && hibernateRequested(main))) {
    const round =
      mainRoundFailed || st.input.failedRoundsHoldVMs
        ? roundReport(st, main, `main pod ${st.ns}/${main.metadata?.name ?? ''}`)
        : undefined;
    if (round !== undefined) {
      const status = await writeStatus(st, 'Pending', 'status', {
        reason: ConditionReasons.hibernateRoundFailed,
        message: round.message,
      });
      return finish(st, { requeueAfterMs: round.calledOff ? 0 : REQUEUE_WAIT_FOR_MAIN_MS }, status);
    }
    if (st.input.pendingMainNamesMissingNode) await pendingMainBlock(st, main);
    if (st.input.crHoldsWait && hibernateRequested(main)) await heldMainBlock(st, main);
    return writeStatusAndFinish(st, 'Pending', { requeueAfterMs: REQUEUE_WAIT_FOR_MAIN_MS });
  }
  // 16–18. Sub-agents, then toolboxes.
  const sub = await ensureSubAgents(st, main);
  const tbChanged = await ensureToolboxes(st);
  await letGoOfRemoved(st);
  // 19. Any create/delete: requeue without a status write.
  if (sub.changed || tbChanged) return finish(st, { requeue: true });
  // Ours: pods held back while their VM's tag is spent say so, and are looked at again in 5 s; failed
  // toolboxes too young to recreate say so too, and are looked at again when they may be.
  const spent = spentBlock(st);
  const failing = toolboxBlock(st);
  const block = spent ?? failing ?? memberRoundBlock(st) ?? heldMemberBlock(st);
  if (block) {
    const status = await writeStatus(st, '', 'status', { reason: block.reason, message: block.message });
    const waits = [spent ? REQUEUE_WAIT_FOR_MAIN_MS : 0, failing?.afterMs ?? 0, sub.requeueAfterMs].filter(
      (ms) => ms > 0,
    );
    // A failed round alone waits for the pod's next change (no look again).
    return finish(st, { requeueAfterMs: waits.length > 0 ? Math.min(...waits) : 0 }, status);
  }
  // 20–21. Derived status; requeue only for rebuild backoff.
  return writeStatusAndFinish(st, '', { requeueAfterMs: sub.requeueAfterMs });
}

/**
 * Runs one reconcile pass (docs/cocoonset.md#a-pass-in-order without the delegated flows) against `io`, and
 * resolves how it ended. Never rejects for API failures: they end the pass with `result.error` carrying
 * Go's message. Deterministic in `input` and the outcomes `io` answers, so it replays in a workflow.
 */
export async function reconcilePass(input: PassInput, io: PassIO): Promise<PassEnd> {
  const cs = input.cs;
  const st: PassState = {
    cs,
    ns: cs.metadata.namespace ?? '',
    name: cs.metadata.name ?? '',
    c: classifyPods(ownedPods(cs, input.pods)),
    r: new Runner(io),
    input,
    written: {},
  };
  try {
    return await reconcile(st);
  } catch (e) {
    if (!(e instanceof PassEnded)) throw e;
    await st.r.flush();
    return e.end;
  }
}
