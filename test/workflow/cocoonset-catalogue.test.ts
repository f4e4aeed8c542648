/**
 * The reference operator's CocoonSet test catalogue (its Go test files, listed below) at workflow
 * level: what a reconcile pass of the real CocoonSet workflow does to the world (creates, deletes,
 * patches, events, metrics, status, requeue timing) on the time-skipping test server, through the
 * in-memory CocoonSetWorld (cocoonset-world.ts). Pure builders, drift and the rest of the pure core are
 * pinned by unit tests (test/unit/cocoonset-*.test.ts); the table below maps every catalogue case to the
 * test that pins it.
 *
 * Files: U-plan = test/unit/cocoonset-plan.test.ts, U-pods = …-pods, U-status = …-status,
 * U-restore = …-restore, U-rebuild = …-rebuild, U-life = …-lifecycle, U-config = test/unit/config.test.ts,
 * W = test/workflow/cocoonset.test.ts, C = this file, V = test/workflow/vm-set-desire.test.ts (the un-suspend's
 * decision per pod now lives in the pod's VM workflow; docs/cocoonset.md#suspend).
 *
 * Where the reference's seams differ from ours: its tests call internal functions (ensureToolboxes,
 * reconcileDelete, …) on a fake client; here the same behaviour is driven through whole passes of the
 * workflow, so a case's setup may carry a Ready main (a pass reaches toolboxes only then) and a deletion
 * case starts the workflow on a CocoonSet that already has its deletionTimestamp. A nil Registry is our
 * `registryConfigured: false`. Two cases name a deliberate difference (rows marked so).
 *
 * reconciler_test.go
 * | ApplyUnsuspendClearsHibernateAnnotation | U-plan "asks the VM workflow of each hibernating pod, in name order, to wake it: …"; V "Hibernate sets the annotation … Wake clears it …"; W "spec.suspend (retain) asks every VM workflow to hibernate, …; un-suspend asks them to wake" |
 * | ApplyUnsuspendNoopOnCleanSet | U-plan "is free on a clean set: no List, no patch, no VM workflow asked" |
 * | EnsureToolboxesCollisionReturnsError | U-plan "rejects a toolbox named like an agent slot before any write ("0" and "1")"; C "a toolbox named like an agent slot ("0", "1") or a repeated name fails every pass before any toolbox write, …" |
 * | EnsureToolboxesRejectsIntegerName | same two tests |
 * | EnsureToolboxesRejectsDuplicateNames | U-plan "rejects duplicate names before any create"; C same test as above |
 * | EnsureToolboxesIdempotentOnExistingToolbox | U-plan "is idempotent when its own toolbox exists but the cache does not show it"; C "its own toolbox hidden by a lagging cache: …" |
 * | AllOwnedPodsHibernatedWaitsForEachManagedPod | U-plan "settles Suspended (no requeue) once every managed VM is hibernated for this generation with its tag; …" |
 * | AllOwnedPodsHibernatedSkipsUnmanagedToolbox | U-plan "skips unmanaged (static) toolboxes and terminal pods in the gate" |
 * | AllOwnedPodsHibernatedPropagatesProbeError | U-plan "fails the pass on a probe error (AllOwnedPodsHibernatedPropagatesProbeError), with no phase change" |
 * | AllOwnedPodsHibernatedIgnoresStaleTag | U-plan "ignores a stale tag: lifecycle hibernated and its generation floor come before the probe" |
 * | AllOwnedPodsHibernatedSkipsTerminalPod | U-plan "skips unmanaged (static) toolboxes and terminal pods in the gate" |
 * | EnsureSubAgentsReplacesTerminalPod | U-plan "replaces a terminal sub-agent: history first, then delete, metric and event"; W "rebuilds a terminal sub-agent with 0/1/5/30 s backoff and dead-letters it after 4 rebuilds" |
 * | EnsureSubAgentsDeadLetterYieldsToSpecDrift | U-plan "a dead-lettered sub-agent yields to a spec edit, which resets its history"; C "a dead-lettered sub-agent stays until a spec edit, which deletes it, drops its history and recreates it" |
 * | MainPodFailedReason | U-plan "names the failure reason with the lifecycle annotation winning" |
 * | ReconcileMainLifecycleFailedTransitionsToFailed | U-plan "moves to Failed with event and metric, and short-circuits everything else"; C "a main vk reports lifecycle failed turns the set Failed (Warning event, metric labelled with the phase before), …" |
 * | ReconcileMainLifecycleFailedWithDriftRecreatesPod | U-plan "deletes a failed main that drifted instead of parking in Failed"; C "a failed main whose spec was edited is deleted and recreated from the new spec, …" |
 * | EnsureSubAgentsTreatsLifecycleFailedAsTerminal | U-plan "treats lifecycle failed as terminal while the phase is Running"; C "a sub-agent vk reports lifecycle failed is rebuilt although the kubelet still says Running" |
 * | EnsureToolboxesReplacesTerminalPod | U-plan "replaces a terminal or drifted toolbox (no backoff)"; C "a terminal toolbox is replaced every time it fails, with no rebuild history, event, metric or dead letter" |
 * | ReconcileDeleteSkipsUnownedPods | C "deletion leaves a pod with the name label but no controller reference alone; …" |
 * | ReconcileDeleteSnapshotPolicyGC (4) | C "deletion GC, policy %s: …" (never / always / main-only / main-only with toolbox db-0, plus an empty policy read as `always`, the code-side default); W "deletes the pods, drops the registry tags per snapshot policy …" |
 * | ReconcileDeleteStashesPodVMNamesEvenWhenStatusIsEmpty | C "deletion stashes the VM names of owned pods when status lists none, …" |
 * | ReconcileDeleteCleansTagsAfterPodsGone | C "deletion takes the GC names from status when no pod is left: …"; W "deletion waits (5 s requeue) while owned pods are still terminating, then collects" |
 * | ApplyUnsuspendSkipsPodHibernatedByCR | V "un-suspend (Wake) leaves the annotation of a VM a CocoonHibernation holds: desire Hibernate (§7.4 #8)"; before `set-desires`: U-plan "before set-desires: skips pods a CocoonHibernation holds (…)" |
 * | ApplyUnsuspendSkipsPodMidHibernateOnReverseDesire | V "un-suspend (Wake) leaves the annotation during the reverse-desire window: …(§7.4 #9)"; before `set-desires`: same U-plan test |
 * | SetupWithManagerRejectsInvalidConcurrency | deliberate difference — U-config "rejects %s below 1 with the reference wording, and non-integers too (deliberate: …)": the knob is the registry activity slots, validated at start (non-integers too, where Go falls back to 4), not in SetupWithManager |
 *
 * pods_test.go (all U-pods)
 * | BuildAgentPodSlot0IsMain | "slot 0 is the main: demo-0, role main, slot "0", VM vk-ns-demo-0, no fork-from" |
 * | BuildAgentPodSubAgentForksFromMain | "sub-agent forks from the main and is bound to its node" |
 * | BuildAgentPodAppliesAgentDefaults | "applies code-side defaults on an un-defaulted spec (clone, linux, managed)" |
 * | BuildAgentPodPropagatesStorage | "propagates storage to the annotation and to ephemeral-storage requests and limits" |
 * | BuildToolboxPodStaticCarriesRuntimeHints | "static toolbox carries runtime hints and is not managed" |
 * | BuildToolboxPodNonStaticIsManaged | "run-mode toolbox is managed and ignores the static fields" |
 * | ClassifyPodsGroupsByRole | "groups pods by role" |
 * | ClassifyPodsUnknownRoleStaysInAllByName | "keeps a pod without a role in allByName only" |
 * | NewManagedPodHasOwnerReference | "has exactly one controller owner reference to the CocoonSet" |
 * | NewManagedPodSelectsPoolAndSnapshotCompatibilityClass | "selects the pool and the snapshot compatibility class" |
 * | NewManagedPodOmitsEmptySnapshotCompatibilityClass | "omits an empty snapshot compatibility class and defaults the pool" |
 * | NewManagedPodCarriesCocoonToleration | "tolerates the vk provider taint with every effect" |
 * | NewManagedPodToleratesNodeFlapForever | "tolerates node flaps forever: not-ready / unreachable NoExecute without tolerationSeconds" |
 * | NewManagedPodStampsCocoonSetGeneration | "stamps the CocoonSet generation" |
 * | Build{Agent,Toolbox}PodPreservesCocoonSetGeneration | "preserves the generation stamp through the VMSpec / VMRuntime apply (11 agent, 13 toolbox)" |
 * | PodSpecMatchesAgentIdenticalSpec | "a freshly built main matches its own spec" |
 * | PodSpecMatchesAgentDetects{Image,Backend,Resource,ProbePort}Drift | "detects %s drift on the main" (image, backend, resources, probePort, …) |
 * | PodSpecMatchesToolboxDetectsProbePortDrift | "toolboxes: identical run and static specs match; image, probePort and static runtime edits drift" |
 * | PodSpecMatchesToolboxIdenticalSpec / …StaticIdenticalSpec | same test |
 * | PodSpecMatchesToolboxDetectsImageDrift | same test |
 * | PodSpecMatchesSubAgentPreservesForkFrom | "keeps the sub-agent fork-from out of drift, but a main with a fork-from drifts" |
 * | PodSpecMatchesAgentDetectsServiceAccountDrift | "detects service account drift sa-old → sa-new and envFrom cm-a → cm-b" |
 * | PodSpecMatchesAgentDetectsEnvFromDrift | same test (its envFrom half was missing: added in this change) |
 * | PodSpecMatches{Agent,Toolbox}DetectsNodePoolDrift | "pool moves gpu → cpu drift agents and toolboxes" |
 * | PodSpecMatchesAgentNodePoolDefaultFallback | "treats an empty pool as default and an empty service account as "default"" |
 * | PodSpecMatchesAgentDetectsSnapshotCompatibilityClassDrift | "detects a snapshot CPU class change" |
 * | PodSpecMatchesAgentAdoptsLiveLegacyMissingSnapshotCompatibilityClass | "adopts a live legacy pod without the class, but not a terminal one" |
 * | PodSpecMatchesToolboxAdoptsLegacyMissingSnapshotCompatibilityClass | "adopts a live legacy toolbox without the class" |
 * | PodSpecMatchesToolboxDetects{StaticVMID,StaticIP,VNCPort}Drift | "toolboxes: identical run and static specs match; …" |
 * | BuildAgentPodMainPinnedViaHostnameAffinity | "pins the main with a required hostname affinity instead of nodeName" |
 * | BuildAgentPodNoAffinityWhenNodeNameEmpty | "sets no affinity when spec.nodeName is empty" |
 * | BuildAgentPodSubAgentIgnoresNodeNameAffinity | "sub-agent follows its bind and ignores spec.nodeName" |
 * | PodSpecMatchesAgentIgnoresAffinity | "ignores affinity and nodeName (pinning is a migration, not a drift)" |
 *
 * status_test.go (U-status; reconcile level: C status_test.go and W "creates the main first, …; rolls status
 * up")
 * | BuildStatusPendingWhenNoMain | "is Pending when there is no main" |
 * | BuildStatusScalingWhenSubsMissing | "is Scaling when sub-agents are missing" |
 * | BuildStatusRunningWhenAllReady | "is Running when all are Ready" |
 * | BuildStatusReportsAgents | "reports agents with forkedFrom = the main VM name" |
 * | StatusEqualIgnoresConditionTimestamps | "two builds of the same observation are equal (no timestamps); Pending vs Running differ" |
 * | StatusEqualDetectsChange | same test |
 * | AgentStatusFromPod | "derives agent status from the pod (vmName, vmID, ip, phase)" |
 * | BuildConditionsAllReady | "Ready=True when all agents and toolboxes are ready" |
 * | BuildConditionsNotReadyWhenToolboxesPending | "Ready=False while toolboxes are pending, Progressing while Scaling" |
 * | BuildStatusScalingWhenToolboxesPending | "is Scaling while a toolbox is pending"; C "a toolbox stuck Pending keeps the set Scaling with Ready=False …" |
 *
 * restore_test.go
 * | MarkRestoreIfHibernated (table a–d) | U-restore "without intent: …", "with intent: asks for the probe …", "with intent and the tag absent: …", "with intent and a probe error: fails closed, not marked"; C "a failing restore probe creates nothing (fail closed) …" |
 * | MarkRestoreIfHibernatedNoRegistry | U-restore "without a registry: no error, not marked, no probe" (our nil registry is `registryConfigured: false`) |
 * | PodsRestorableByCR | U-restore "only Hibernated and Waking CRs give restore intent, whatever the desire" |
 * | EnsureToolboxesRestoresHibernated | U-restore "restores a hibernated toolbox on recreate (no UID, empty classification)"; W "a pass with a missing sub-agent and a missing toolbox looks restore intent up exactly once" |
 *
 * restore_intent_test.go
 * | ReconcileSteadyStateSkipsHibernationList | U-plan "lists no CocoonHibernations and probes nothing in steady state"; W "a steady pass keeps every pod and makes no CocoonHibernation list and no registry call" |
 * | ReconcileMissingPodsListsHibernationsOnce | U-plan "lists CocoonHibernations exactly once when sub-agents and toolboxes are both missing"; W "a pass with a missing sub-agent and a missing toolbox looks restore intent up exactly once" |
 * | ReconcileUnrelatedKeyProgressesWhileProbeBlocks | deliberate difference (architecture) — C "an unrelated CocoonSet progresses while another set's registry probe is wedged (one entity workflow per set; …)": no reconcile worker pool, one workflow per set on one worker; the wedged probe holds one of the COCOONSET_CONCURRENCY registry activity slots (the two sets sit in two namespaces only so the fake world can route them) |
 *
 * rebuild_test.go (U-rebuild; reconcile level: C rebuild_test.go)
 * | RebuildHistoryRoundTrip | "round-trips counts" |
 * | RebuildHistoryGarbageCollectsStaleSlots | "garbage-collects slots above replicas on encode, mutating the map"; C "rebuild history as written drops slots above replicas …" |
 * | BackoffDelaySchedule | "follows the schedule 0, 1 s, 5 s, 30 s, 30 s"; W rebuild test (timeline) |
 * | ReadRebuildHistoryHandlesCorruptAnnotation | "reads a corrupt annotation as empty"; C "a corrupt rebuild history reads as empty: …" |
 * | ReadRebuildHistoryHandlesNullPayload | "reads null as an empty, writable map" |
 *
 * lifecycle_test.go
 * | SyncCocoonSetGenerationStampsAllOwnedPods | U-life "stamps every owned pod whose stamp differs, in name order, before anything else"; C "stamps the generation on every owned pod whose stamp differs, before any other write, …" |
 * | SyncCocoonSetGenerationNoOpWhenAlreadyCurrent | U-life "sends no patch when the stamp is already current"; C same test (second half) |
 *
 * The reference's benchmark is not a test here; `npm run bench` measures the CocoonHibernation side.
 */
import type { V1Pod } from '@kubernetes/client-node';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Annotations, EventReasons, Labels, LifecycleStates } from '../../src/api/keys.js';
import type { AgentStatus, CocoonSet, ToolboxStatus } from '../../src/api/types.js';
import { buildAgentPod } from '../../src/cocoonset/pods.js';
import { readRebuildHistory } from '../../src/cocoonset/rebuild.js';
import {
  annotate,
  convergedPods,
  hibernation,
  IMAGE,
  newCocoonSet,
  withFinalizer,
} from '../support/builders.js';
import { waitFor } from '../support/wait.js';
import { CocoonSetWorld, withCocoonSetWorld, withCocoonSetWorlds } from './cocoonset-world.js';
import { createEnv, skipUntil } from './harness.js';

let env: TestWorkflowEnvironment;

// A fresh time-skipping server per test: skipped time and leftover timers never leak between tests.
beforeEach(async () => {
  env = await createEnv();
});
afterEach(async () => {
  await env?.teardown();
});

const MAIN_VM = 'vk-ns-demo-0';
const T_OLD = '2020-01-01T00:00:00Z';

/** `demo` past its first pass (finalizer), generation 1, plus `mods`. */
function catalogueSet(...mods: ((cs: CocoonSet) => void)[]): CocoonSet {
  return newCocoonSet(
    'demo',
    withFinalizer,
    (cs) => {
      cs.metadata.generation = 1;
    },
    ...mods,
  );
}
const replicas = (n: number) => (cs: CocoonSet) => {
  cs.spec.agent.replicas = n;
};
const toolboxes =
  (...names: string[]) =>
  (cs: CocoonSet) => {
    cs.spec.toolboxes = names.map((name) => ({ name, image: IMAGE }));
  };
const deleting = (cs: CocoonSet) => {
  cs.metadata.deletionTimestamp = new Date(T_OLD) as unknown as CocoonSet['metadata']['deletionTimestamp'];
};

/** The last pass ended without error and asked for no further pass (it waits for the next event). */
async function expectWaitsForEvents(w: CocoonSetWorld): Promise<void> {
  const r = await w.lastResult();
  expect(r).toMatchObject({ requeue: false, requeueAfterMs: 0 });
  expect(r?.error).toBeUndefined();
}
const uidOf = (w: CocoonSetWorld, pod: string) => w.pod(pod)?.metadata?.uid;
const failedPhase = (p: V1Pod) => {
  p.status = { phase: 'Failed' };
};
const lifecycleFailed = (message: string) => (p: V1Pod) => {
  annotate(p, { [Annotations.lifecycleState]: 'failed', [Annotations.lifecycleStateMessage]: message });
};
const eventsOf = (w: CocoonSetWorld, reason: string) => w.events.filter((e) => e.reason === reason);
const registryDeletes = (w: CocoonSetWorld) =>
  w.calls.filter((c) => c.startsWith('registry-delete ')).map((c) => c.slice('registry-delete '.length));
/**
 * The tag deletes as the workflow scheduled them (`vm:tag`, history order). The deletion schedules them in
 * the reference's order but runs them together, so the calls themselves may land in any order.
 */
async function scheduledDeletes(w: CocoonSetWorld): Promise<string[]> {
  const history = await env.client.workflow.getHandle(w.workflowId).fetchHistory();
  return (history.events ?? []).flatMap((e) => {
    const a = e.activityTaskScheduledEventAttributes;
    if (a?.activityType?.name !== 'deleteManifest') return [];
    const arg = JSON.parse(Buffer.from(a.input!.payloads![0]!.data!).toString('utf8')) as {
      vmName: string;
      tag: string;
    };
    return [`${arg.vmName}:${arg.tag}`];
  });
}

describe("the reference operator's reconciler_test.go cases at workflow level", () => {
  it('a toolbox named like an agent slot ("0", "1") or a repeated name fails every pass before any toolbox write, retries with backoff, and the fixed spec creates it', async () => {
    const world = new CocoonSetWorld(catalogueSet(toolboxes('0')), convergedPods(catalogueSet()));
    const mainUID = uidOf(world, 'demo-0');
    const reads = () => world.calls.filter((c) => c === 'read').length;
    const intError = (n: string) =>
      `toolbox name "${n}" must not be an integer: collides with agent slot pod naming`;
    await withCocoonSetWorld(env, world, async (w) => {
      await w.start();
      await waitFor('integer-name error', async () => (await w.lastResult())?.error === intError('0'));
      // Failed passes retry on the error backoff (1 s doubling), not in a tight loop: skipping the test
      // server's clock to each scheduled pass runs exactly that one pass, which schedules the next one
      // twice as far out.
      let s = await w.settled(env);
      for (let k = 0; k < 3; k++) {
        const failures = s.failures as number;
        const at = Date.parse(s.nextPassAt!);
        const before = reads();
        await env.sleep(Math.max(0, at - (await env.currentTimeMs())) + 10);
        s = await w.settled(env);
        expect(reads() - before).toBe(1);
        expect(s.failures).toBe(failures + 1);
        const delay = Date.parse(s.nextPassAt!) - at;
        const backoff = 1_000 * 2 ** failures; // the delay after failure number failures + 1
        expect(delay).toBeGreaterThanOrEqual(backoff);
        expect(delay).toBeLessThan(backoff + 1_000);
      }

      await w.editSpec(toolboxes('1'));
      await waitFor(
        'integer-name error for "1"',
        async () => (await w.lastResult())?.error === intError('1'),
      );
      await w.editSpec(toolboxes('tb', 'tb'));
      await waitFor(
        'duplicate-name error',
        async () => (await w.lastResult())?.error === 'duplicate toolbox name "tb" in spec',
      );
      // Nothing was created or deleted and the main was never replaced. The status says why the set does
      // not progress (ours: the reference writes no status on a failed pass).
      expect(w.calls.filter((c) => /^(create|delete)/.test(c))).toEqual([]);
      expect(w.cs?.status?.conditions?.find((c) => c.type === 'Progressing')).toMatchObject({
        status: 'False',
        reason: 'ReconcileFailed',
        message: 'duplicate toolbox name "tb" in spec',
      });
      expect(uidOf(w, 'demo-0')).toBe(mainUID);

      await w.editSpec(toolboxes('tb'));
      await waitFor('toolbox created', () => w.pods.has('demo-tb'));
      await w.makeReady('demo-tb');
      await waitFor('Running', () => w.cs?.status?.phase === 'Running');
      // The pass that wrote Running resets the failure count when it ends: wait for it (the status patch is
      // seen before the pass has returned its result).
      expect((await w.settled(env)).failures).toBe(0);
      expect(w.creates).toEqual(['demo-tb']);
    });
  });

  it('its own toolbox hidden by a lagging cache: the create meets AlreadyExists, the GET finds our toolbox, nothing is deleted and the pass does not fail', async () => {
    const cs = catalogueSet(toolboxes('tb'));
    const world = new CocoonSetWorld(cs, convergedPods(cs));
    world.hidden.add('demo-tb');
    const tbUID = uidOf(world, 'demo-tb');
    await withCocoonSetWorld(env, world, async (w) => {
      await w.start();
      await w.settledAfter(0);
      await expectWaitsForEvents(w);
      expect(w.calls).toContain('create demo-tb');
      expect(w.calls).toContain('get demo-tb');
      expect(w.calls.filter((c) => c.startsWith('delete'))).toEqual([]);
      expect(w.creates).toEqual([]);
      expect(uidOf(w, 'demo-tb')).toBe(tbUID);
      // Status is built from what the pass saw: the toolbox is not counted until the cache shows it.
      expect(w.cs?.status).toMatchObject({ phase: 'Scaling', readyToolboxes: 0, desiredToolboxes: 1 });
      w.hidden.clear();
      await w.updatePod('demo-tb', (p) => {
        p.metadata!.labels = { ...p.metadata!.labels, seen: 'yes' };
      });
      await waitFor('Running once the cache shows it', () => w.cs?.status?.phase === 'Running');
    });
  });

  it('a sub-agent vk reports lifecycle failed is rebuilt although the kubelet still says Running', async () => {
    const cs = catalogueSet(replicas(1));
    const world = new CocoonSetWorld(cs, convergedPods(cs));
    const oldUID = uidOf(world, 'demo-1');
    await withCocoonSetWorld(env, world, async (w) => {
      await w.start();
      await waitFor('Running', () => w.cs?.status?.phase === 'Running');
      await w.updatePod('demo-1', lifecycleFailed('guest crashed'));
      expect(w.pod('demo-1')!.status!.phase).toBe('Running');
      await waitFor('demo-1 recreated', () => w.pods.has('demo-1') && uidOf(w, 'demo-1') !== oldUID);
      expect(eventsOf(w, EventReasons.subAgentRebuilding).map((e) => [e.type, e.message])).toEqual([
        ['Normal', 'slot 1 attempt 1/4'],
      ]);
      expect(w.metrics).toEqual([
        { metric: 'subagentRebuildTotal', labels: { namespace: 'ns', cocoonset: 'demo' } },
      ]);
      expect(readRebuildHistory(w.cs!).get(1)!.count).toBe(1);
      // The replacement is a fresh fork of the main, bound like the first.
      expect(w.pod('demo-1')!.metadata!.annotations![Annotations.forkFrom]).toBe(MAIN_VM);
      expect(w.pod('demo-1')!.metadata!.annotations![Annotations.lifecycleState]).toBeUndefined();
    });
  });

  it('a dead-lettered sub-agent stays until a spec edit, which deletes it, drops its history and recreates it', async () => {
    const cs = catalogueSet(replicas(1), (c) => {
      c.metadata.annotations = {
        [Annotations.rebuildHistory]: `{"1":{"count":4,"lastDeleted":"${T_OLD}"}}`,
      };
    });
    const pods = convergedPods(cs);
    failedPhase(pods[1]!);
    annotate(pods[1]!, { [Annotations.deadLetter]: 'true' });
    const world = new CocoonSetWorld(cs, pods);
    const deadUID = uidOf(world, 'demo-1');
    await withCocoonSetWorld(env, world, async (w) => {
      await w.start();
      await w.settledAfter(0);
      // Kept for inspection, counted as not Ready: the set stays Scaling and waits (no requeue).
      expect(w.cs?.status).toMatchObject({ phase: 'Scaling', readyAgents: 1, desiredAgents: 2 });
      await expectWaitsForEvents(w);
      expect(uidOf(w, 'demo-1')).toBe(deadUID);
      expect(w.historyWrites).toEqual([]);

      w.tags.add('ghcr.io/cocoonstack/cocoon/ubuntu:26.04'); // the clone image the edit names
      await w.editSpec((c) => {
        c.spec.agent.image = 'ghcr.io/cocoonstack/cocoon/ubuntu:26.04';
      });
      // The main drifted too: it is recreated first; the sub-agents wait for it to be Ready.
      await waitFor('main recreated', () => w.creates.includes('demo-0'));
      await w.makeReady('demo-0');
      await waitFor('demo-1 recreated', () => w.creates.includes('demo-1'));
      await w.settled(env);
      expect(w.historyWrites).toEqual(['{}']);
      expect(readRebuildHistory(w.cs!).has(1)).toBe(false);
      const fresh = w.pod('demo-1')!;
      expect(fresh.metadata!.uid).not.toBe(deadUID);
      expect(fresh.metadata!.annotations![Annotations.deadLetter]).toBeUndefined();
      expect(fresh.metadata!.annotations![Annotations.image]).toBe('ghcr.io/cocoonstack/cocoon/ubuntu:26.04');
      // Lifting a dead letter is not a rebuild: no rebuild event or metric.
      expect(eventsOf(w, EventReasons.subAgentRebuilding)).toEqual([]);
      expect(w.metrics).toEqual([]);
    });
  });

  it('a main vk reports lifecycle failed turns the set Failed (Warning event, metric labelled with the phase before), stops every other step and waits; Ready again, it recovers with an event (deliberate, patch replaced-main-keeps-snapshot: Progressing carries the Event reason and message, where the reference says Stable "Failed")', async () => {
    const cs = catalogueSet(replicas(1));
    const world = new CocoonSetWorld(cs, convergedPods(cs));
    const subUID = uidOf(world, 'demo-1');
    await withCocoonSetWorld(env, world, async (w) => {
      await w.start();
      await waitFor('Running', () => w.cs?.status?.phase === 'Running');
      await w.updatePod('demo-0', lifecycleFailed('hibernate push failed'));
      await waitFor('Failed', () => w.cs?.status?.phase === 'Failed');
      expect(eventsOf(w, EventReasons.podLifecycleFailed)[0]).toMatchObject({
        type: 'Warning',
        message: 'main pod ns/demo-0: hibernate push failed',
      });
      expect(w.metrics).toEqual([
        { metric: 'lifecycleStateFailedObservedTotal', labels: { phase: 'Running' } },
      ]);
      expect(w.cs!.status!.conditions!.find((c) => c.type === 'Progressing')).toMatchObject({
        status: 'False',
        reason: EventReasons.podLifecycleFailed,
        message: 'main pod ns/demo-0: hibernate push failed',
      });
      // No requeue: nothing happens until the next event.
      const n = await w.passes();
      await w.settledAfter(n - 1);
      expect((await w.state()).nextPassAt).toBeNull();
      await env.sleep(60_000);
      expect((await w.settled(env)).passes).toBe(n);

      // A failing sub-agent is not rebuilt while the main is terminal: the short-circuit skips sub-agents.
      await w.updatePod('demo-1', failedPhase);
      await w.settledAfter(n);
      expect(uidOf(w, 'demo-1')).toBe(subUID);
      expect(eventsOf(w, EventReasons.subAgentRebuilding)).toEqual([]);
      expect(w.metrics.at(-1)).toEqual({
        metric: 'lifecycleStateFailedObservedTotal',
        labels: { phase: 'Failed' },
      });

      // vk clears the failure while the pod is Ready: RecoveredFromFailure, then the normal flow resumes.
      await w.updatePod('demo-0', (p) => {
        p.metadata!.annotations![Annotations.lifecycleState] = 'ready';
        delete p.metadata!.annotations![Annotations.lifecycleStateMessage];
      });
      await waitFor('demo-1 rebuilt', () => uidOf(w, 'demo-1') !== subUID && w.pods.has('demo-1'));
      expect(eventsOf(w, EventReasons.recoveredFromFailure)[0]).toMatchObject({
        type: 'Normal',
        message: 'main pod ns/demo-0 is Ready again',
      });
      await waitFor('Scaling', () => w.cs?.status?.phase === 'Scaling');
      await w.makeReady('demo-1');
      await waitFor('Running', () => w.cs?.status?.phase === 'Running');
    });
  });

  it('a failed main whose spec was edited is deleted and recreated from the new spec, without another failure event', async () => {
    const cs = catalogueSet();
    const world = new CocoonSetWorld(cs, convergedPods(cs));
    const oldUID = uidOf(world, 'demo-0');
    await withCocoonSetWorld(env, world, async (w) => {
      await w.start();
      await waitFor('Running', () => w.cs?.status?.phase === 'Running');
      await w.updatePod('demo-0', lifecycleFailed('hibernate push failed'));
      await waitFor('Failed', () => w.cs?.status?.phase === 'Failed');
      await w.settledAfter((await w.passes()) - 1);
      const failedEvents = eventsOf(w, EventReasons.podLifecycleFailed).length;

      await w.editSpec((c) => {
        c.spec.agent.image = 'ghcr.io/cocoonstack/cocoon/ubuntu:26.04';
      });
      await waitFor('main recreated', () => w.pods.has('demo-0') && uidOf(w, 'demo-0') !== oldUID);
      expect(w.calls).toContain('delete demo-0');
      const main = w.pod('demo-0')!;
      expect(main.metadata!.annotations![Annotations.image]).toBe('ghcr.io/cocoonstack/cocoon/ubuntu:26.04');
      expect(main.metadata!.annotations![Annotations.lifecycleState]).toBeUndefined();
      // The new main is not Ready yet: Pending replaces Failed, no recovery event.
      await waitFor('Pending', () => w.cs?.status?.phase === 'Pending');
      await w.settled(env);
      expect(eventsOf(w, EventReasons.podLifecycleFailed)).toHaveLength(failedEvents);
      expect(eventsOf(w, EventReasons.recoveredFromFailure)).toEqual([]);
    });
  });

  /**
   * vk-cocoon failed a hibernate round (the registry push): the VM is left running (its id stays), the round
   * retried.
   */
  const roundFailed = (p: V1Pod) =>
    annotate(p, {
      [Annotations.vmID]: p.metadata?.annotations?.[Annotations.vmID] ?? 'vm-id',
      [Annotations.hibernate]: 'true',
      [Annotations.lifecycleState]: 'failed',
      [Annotations.lifecycleStateMessage]: 'push vk-ns-demo-1:hibernate: registry push failed',
    });

  /** The set runs; a CocoonHibernation asks to hibernate its main and vk fails the round: the set is Pending. */
  async function mainRoundFailing(w: CocoonSetWorld): Promise<void> {
    await w.start();
    await waitFor('Running', () => w.cs?.status?.phase === 'Running');
    w.crs = [hibernation('demo-0', 'Hibernate', 'Hibernating')];
    await w.updatePod('demo-0', roundFailed);
    await waitFor('Pending', () => w.cs?.status?.phase === 'Pending');
  }

  for (const [what, cs, pod] of [
    ['sub-agent', catalogueSet(replicas(1)), 'demo-1'],
    ['toolbox', catalogueSet(toolboxes('tb')), 'demo-tb'],
  ] as const) {
    it(`deliberate (patch failed-hibernate-round-keeps-vm; the reference counts lifecycle failed as terminal and deletes the live VM): a ${what} whose hibernate round vk reports failed is neither rebuilt nor recreated; vk's retry then hibernates the same pod`, async () => {
      const world = new CocoonSetWorld(cs, convergedPods(cs));
      const oldUID = uidOf(world, pod);
      await withCocoonSetWorld(env, world, async (w) => {
        await w.start();
        await waitFor('Running', () => w.cs?.status?.phase === 'Running');
        // A CocoonHibernation holds the VM: its VM workflow set the annotation, vk's round failed.
        w.crs = [hibernation(pod, 'Hibernate', 'Hibernating')];
        await w.updatePod(pod, roundFailed);
        await w.settled(env);
        expect(uidOf(w, pod)).toBe(oldUID);
        expect(w.calls.filter((c) => c.startsWith('delete ') || c.startsWith('create '))).toEqual([]);
        expect(w.historyWrites).toEqual([]);
        expect(eventsOf(w, EventReasons.subAgentRebuilding)).toEqual([]);
        expect(eventsOf(w, EventReasons.toolboxFailing)).toEqual([]);
        await w.updatePod(pod, (p) => annotate(p, { [Annotations.lifecycleState]: 'hibernated' }));
        await w.settled(env);
        expect(uidOf(w, pod)).toBe(oldUID);
        expect(w.calls.filter((c) => c.startsWith('delete ') || c.startsWith('create '))).toEqual([]);
      });
    });
  }

  it("deliberate (patch failed-main-round-keeps-phase; the reference turns the set Failed and says RecoveredFromFailure at each retry): a main whose hibernate round vk reports failed keeps the set Pending with Progressing HibernateRoundFailed and vk's reason, a Warning PodLifecycleFailed and no recovery event; an edit meanwhile does not delete it", async () => {
    const cs = catalogueSet(replicas(1));
    const world = new CocoonSetWorld(cs, convergedPods(cs));
    const mainUID = uidOf(world, 'demo-0');
    await withCocoonSetWorld(env, world, async (w) => {
      await mainRoundFailing(w);
      await w.settled(env);
      expect(w.cs!.status!.conditions!.find((c) => c.type === 'Progressing')).toMatchObject({
        status: 'False',
        reason: 'HibernateRoundFailed',
        message:
          'main pod ns/demo-0: vk-cocoon reported its hibernate round failed (push vk-ns-demo-1:hibernate: registry push failed); the VM keeps running and vk-cocoon retries the round',
      });
      expect(eventsOf(w, EventReasons.podLifecycleFailed)[0]).toMatchObject({
        type: 'Warning',
        message: 'main pod ns/demo-0: push vk-ns-demo-1:hibernate: registry push failed',
      });
      // vk retries the round (hibernating), fails it again; meanwhile the spec is edited.
      await w.updatePod('demo-0', (p) => annotate(p, { [Annotations.lifecycleState]: 'hibernating' }));
      await w.settled(env);
      // The new image is in the registry: the edit would replace the main, were it not mid-round.
      w.tags.add('ghcr.io/cocoonstack/cocoon/ubuntu:26.04');
      await w.editSpec((c) => {
        c.spec.agent.image = 'ghcr.io/cocoonstack/cocoon/ubuntu:26.04';
      });
      await w.updatePod('demo-0', roundFailed);
      await w.settled(env);
      expect(uidOf(w, 'demo-0')).toBe(mainUID);
      expect(w.calls.filter((c) => c.startsWith('delete ') || c.startsWith('create '))).toEqual([]);
      expect(w.phaseWrites).not.toContain('Failed');
      expect(eventsOf(w, EventReasons.recoveredFromFailure)).toEqual([]);
      expect(w.cs!.status!.phase).toBe('Pending');
    });
  });

  it('a run an older version started (patches: 27) turns the set Failed on a main whose hibernate round failed, and Pending with RecoveredFromFailure once vk retries, as the reference', async () => {
    const cs = catalogueSet(replicas(1));
    const world = new CocoonSetWorld(cs, convergedPods(cs));
    await withCocoonSetWorld(env, world, async (w) => {
      await w.start({ patches: 27 });
      await waitFor('Running', () => w.cs?.status?.phase === 'Running');
      w.crs = [hibernation('demo-0', 'Hibernate', 'Hibernating')];
      await w.updatePod('demo-0', roundFailed);
      await waitFor('Failed', () => w.cs?.status?.phase === 'Failed');
      await w.updatePod('demo-0', (p) => annotate(p, { [Annotations.lifecycleState]: 'hibernating' }));
      await waitFor('RecoveredFromFailure', () => eventsOf(w, EventReasons.recoveredFromFailure).length > 0);
    });
  });

  it('a run an older version started (patches: 26) rebuilds a sub-agent whose hibernate round failed, as the reference', async () => {
    const cs = catalogueSet(replicas(1));
    const world = new CocoonSetWorld(cs, convergedPods(cs));
    const oldUID = uidOf(world, 'demo-1');
    await withCocoonSetWorld(env, world, async (w) => {
      await w.start({ patches: 26 });
      await waitFor('Running', () => w.cs?.status?.phase === 'Running');
      w.crs = [hibernation('demo-1', 'Hibernate', 'Hibernating')];
      await w.updatePod('demo-1', roundFailed);
      await waitFor('demo-1 recreated', () => w.pods.has('demo-1') && uidOf(w, 'demo-1') !== oldUID);
      expect(eventsOf(w, EventReasons.subAgentRebuilding)).toHaveLength(1);
    });
  });

  /**
   * vk-cocoon's failed round called off: the hibernate annotation goes, lifecycle `failed` stays (sticky), and
   * vk-cocoon reports the pod not Ready (Ready needs lifecycle `ready`).
   */
  const roundCalledOff = (p: V1Pod) => {
    const { [Annotations.hibernate]: _asked, ...rest } = p.metadata!.annotations!;
    p.metadata!.annotations = rest;
    p.status = {
      ...p.status,
      conditions: (p.status?.conditions ?? []).map((c) =>
        c.type === 'Ready' ? { ...c, status: 'False' } : c,
      ),
    };
  };

  for (const [what, cs, pod] of [
    ['sub-agent', catalogueSet(replicas(1)), 'demo-1'],
    ['toolbox', catalogueSet(toolboxes('tb')), 'demo-tb'],
  ] as const) {
    it(`deliberate (patch failed-round-holds-vm; the reference counts lifecycle failed as terminal and deletes the live VM): a ${what} whose failed hibernate round is called off (the annotation goes, vk keeps reporting failed) keeps its VM: neither rebuilt nor recreated`, async () => {
      const world = new CocoonSetWorld(cs, convergedPods(cs));
      const oldUID = uidOf(world, pod);
      await withCocoonSetWorld(env, world, async (w) => {
        await w.start();
        await waitFor('Running', () => w.cs?.status?.phase === 'Running');
        w.crs = [hibernation(pod, 'Hibernate', 'Hibernating')];
        await w.updatePod(pod, roundFailed);
        await w.settled(env);
        expect(w.cs!.status!.conditions!.find((c) => c.type === 'Progressing')).toMatchObject({
          status: 'False',
          reason: 'HibernateRoundFailed',
          message: `pod ns/${pod}: vk-cocoon reported its hibernate round failed (push vk-ns-demo-1:hibernate: registry push failed); the VM keeps running and vk-cocoon retries the round`,
        });
        // The CocoonHibernation is deleted: its VM workflow clears the annotation; vk writes nothing more.
        w.crs = [];
        await w.updatePod(pod, roundCalledOff);
        await w.settled(env);
        await w.updatePod(pod, () => {});
        await w.settled(env);
        expect(w.cs!.status!.conditions!.find((c) => c.type === 'Progressing')).toMatchObject({
          status: 'False',
          reason: 'HibernateRoundFailed',
          message: expect.stringContaining(
            `pod ns/${pod}: its hibernate round failed (push vk-ns-demo-1:hibernate: registry push failed) and was called off`,
          ),
        });
        await expectWaitsForEvents(w);
        // The set remembers the round on the CocoonSet: a run started afresh (here the old one is terminated
        // by hand) still knows the pod holds its VM.
        expect(
          JSON.parse(w.cs!.metadata.annotations![Annotations.failedHibernateRounds]!)[pod],
        ).toMatchObject({ uid: oldUID, message: 'push vk-ns-demo-1:hibernate: registry push failed' });
        await w.client!.getHandle(w.workflowId).terminate('a fresh run must remember the round');
        w.sent.signals = 0; // the fresh run counts its signals from 0
        await w.start();
        await w.updatePod(pod, () => {});
        await w.settled(env);
        expect(uidOf(w, pod)).toBe(oldUID);
        expect(w.calls.filter((c) => c.startsWith('delete ') || c.startsWith('create '))).toEqual([]);
        expect(w.historyWrites).toEqual([]);
        expect(eventsOf(w, EventReasons.subAgentRebuilding)).toEqual([]);
        expect(eventsOf(w, EventReasons.toolboxFailing)).toEqual([]);
      });
    });
  }

  it('deliberate (patch failed-round-holds-vm; the reference turns the set Failed for good): a main whose failed hibernate round is called off keeps its VM and the set Pending, Progressing HibernateRoundFailed saying how to clear it; a later successful round and wake make it Running', async () => {
    const cs = catalogueSet(replicas(1));
    const world = new CocoonSetWorld(cs, convergedPods(cs));
    const mainUID = uidOf(world, 'demo-0');
    await withCocoonSetWorld(env, world, async (w) => {
      await mainRoundFailing(w);
      // vk retries the round: the condition stays (no flap to Reconciling at each retry).
      await w.updatePod('demo-0', (p) => annotate(p, { [Annotations.lifecycleState]: 'hibernating' }));
      await w.settled(env);
      expect(w.cs!.status!.conditions!.find((c) => c.type === 'Progressing')).toMatchObject({
        reason: 'HibernateRoundFailed',
        message:
          'main pod ns/demo-0: vk-cocoon reported its hibernate round failed (push vk-ns-demo-1:hibernate: registry push failed); the VM keeps running and vk-cocoon retries the round',
      });
      await w.updatePod('demo-0', roundFailed);
      await w.settled(env);
      w.crs = [];
      await w.updatePod('demo-0', roundCalledOff);
      await w.settled(env);
      await w.updatePod('demo-0', () => {});
      await w.settled(env);
      expect(uidOf(w, 'demo-0')).toBe(mainUID);
      expect(w.calls.filter((c) => c.startsWith('delete ') || c.startsWith('create '))).toEqual([]);
      expect(w.phaseWrites).not.toContain('Failed');
      expect(w.cs!.status!.phase).toBe('Pending');
      expect(w.cs!.status!.conditions!.find((c) => c.type === 'Progressing')).toMatchObject({
        status: 'False',
        reason: 'HibernateRoundFailed',
        message: expect.stringContaining(
          'main pod ns/demo-0: its hibernate round failed (push vk-ns-demo-1:hibernate: registry push failed) and was called off; the VM keeps running',
        ),
      });
      // A later round succeeds and the VM is woken: vk reports ready again.
      await w.updatePod('demo-0', (p) => {
        annotate(p, { [Annotations.lifecycleState]: 'ready', [Annotations.lifecycleStateMessage]: '' });
        p.status!.conditions = p.status!.conditions!.map((c) =>
          c.type === 'Ready' ? { ...c, status: 'True' } : c,
        );
      });
      await waitFor('Running', () => w.cs?.status?.phase === 'Running');
      expect(uidOf(w, 'demo-0')).toBe(mainUID);
      expect(w.phaseWrites).not.toContain('Failed');
    });
  });

  it('deliberate (patch failed-round-holds-vm; the reference skips the failed pod and says Suspended): a suspend whose hibernate round vk reports failed on one pod stays Suspending with Progressing HibernateRoundFailed until that pod is hibernated', async () => {
    const cs = catalogueSet(replicas(1));
    const world = new CocoonSetWorld(cs, convergedPods(cs));
    await withCocoonSetWorld(env, world, async (w) => {
      await w.start();
      await waitFor('Running', () => w.cs?.status?.phase === 'Running');
      await w.editSpec((c) => (c.spec.suspend = true));
      await waitFor('both asked to hibernate', () =>
        ['demo-0', 'demo-1'].every(
          (n) => w.pod(n)?.metadata?.annotations?.[Annotations.hibernate] === 'true',
        ),
      );
      const generation = w.cs!.metadata.generation!;
      await w.vkHibernated('demo-0', generation);
      await w.updatePod('demo-1', roundFailed);
      await w.settled(env);
      await w.updatePod('demo-1', () => {});
      await w.settled(env);
      expect(w.phaseWrites).not.toContain('Suspended');
      expect(w.cs!.status!.phase).toBe('Suspending');
      expect(w.cs!.status!.conditions!.find((c) => c.type === 'Progressing')).toMatchObject({
        reason: 'HibernateRoundFailed',
        message:
          'pod ns/demo-1: vk-cocoon reported its hibernate round failed (push vk-ns-demo-1:hibernate: registry push failed) and retries it; the set is Suspended once its snapshot is in',
      });
      await w.vkHibernated('demo-1', generation);
      await waitFor('Suspended', () => w.cs?.status?.phase === 'Suspended');
    });
  });

  it('deliberate (patch failed-round-holds-vm; the reference rebuilds it, and our rebuild would drop its tag): a sub-agent vk reports failed while it runs no VM and whose :hibernate tag is in the registry (a failed wake vk retries) is kept and named in Progressing HibernateRoundFailed; without the tag it is rebuilt', async () => {
    const cs = catalogueSet(replicas(1));
    const world = new CocoonSetWorld(cs, convergedPods(cs));
    const oldUID = uidOf(world, 'demo-1');
    await withCocoonSetWorld(env, world, async (w) => {
      await w.start();
      await waitFor('Running', () => w.cs?.status?.phase === 'Running');
      w.tags.add('vk-ns-demo-1:hibernate');
      await w.updatePod('demo-1', lifecycleFailed('pull failed'));
      await w.settled(env);
      expect(uidOf(w, 'demo-1')).toBe(oldUID);
      expect(w.calls).toContain('probe vk-ns-demo-1:hibernate');
      expect(w.calls.filter((c) => c.startsWith('delete ') || c.startsWith('registry-delete'))).toEqual([]);
      expect(w.cs!.status!.conditions!.find((c) => c.type === 'Progressing')).toMatchObject({
        status: 'False',
        reason: 'HibernateRoundFailed',
        message: expect.stringContaining(
          'pod ns/demo-1: vk-cocoon reported it failed with no VM running (pull failed)',
        ),
      });
      // The snapshot is given up (deleted by hand): the pod is rebuilt as the reference does.
      w.tags.delete('vk-ns-demo-1:hibernate');
      await w.updatePod('demo-1', () => {});
      await waitFor('demo-1 rebuilt', () => w.pods.has('demo-1') && uidOf(w, 'demo-1') !== oldUID);
    });
  });

  /** vk-cocoon failed a wake of the main (its pull): no VM, the `:hibernate` tag still holds its state. */
  const mainWakeFailed = async (w: CocoonSetWorld) => {
    w.tags.add(`${MAIN_VM}:hibernate`);
    await w.updatePod('demo-0', (p) => {
      delete p.metadata!.annotations![Annotations.vmID];
      lifecycleFailed(`wake ${MAIN_VM}: pull failed`)(p);
    });
  };

  it("deliberate (patch replaced-main-keeps-snapshot; our drift replacement dropped the tag, the Go operator keeps it): a failed main that runs no VM and whose :hibernate tag is in the registry is Failed with vk's reason in Progressing; its spec edited, it is replaced with the tag kept and the new pod's VM workflow asked to wake", async () => {
    const cs = catalogueSet();
    const world = new CocoonSetWorld(cs, convergedPods(cs));
    const oldUID = uidOf(world, 'demo-0');
    await withCocoonSetWorld(env, world, async (w) => {
      await w.start();
      await waitFor('Running', () => w.cs?.status?.phase === 'Running');
      await mainWakeFailed(w);
      await waitFor('Failed', () => w.cs?.status?.phase === 'Failed');
      expect(w.cs!.status!.conditions!.find((c) => c.type === 'Progressing')).toMatchObject({
        status: 'False',
        reason: EventReasons.podLifecycleFailed,
        message: expect.stringMatching(/^main pod ns\/demo-0: .*pull failed/),
      });

      await w.editSpec((c) => {
        c.spec.agent.resources = { requests: { cpu: '250m' } };
      });
      await waitFor('main recreated', () => w.pods.has('demo-0') && uidOf(w, 'demo-0') !== oldUID);
      await waitFor('the new main asked to wake', () => w.calls.includes('ask demo-0 Wake'));
      expect(w.calls).toContain(`probe ${MAIN_VM}:hibernate`);
      expect(registryDeletes(w)).toEqual([]);
      expect(w.tags.has(`${MAIN_VM}:hibernate`)).toBe(true);
    });
  });

  it('deliberate (patch replaced-main-keeps-snapshot): a failed main that runs no VM and whose :hibernate tag is in the registry, its agent image edited, is not replaced (vk-cocoon would not restore the snapshot under the new image): Failed with SnapshotImageMismatch naming both ways out; the snapshot deleted, it is replaced', async () => {
    const cs = catalogueSet();
    const world = new CocoonSetWorld(cs, convergedPods(cs));
    const oldUID = uidOf(world, 'demo-0');
    const oldImage = world.pod('demo-0')!.metadata!.annotations![Annotations.image]!;
    await withCocoonSetWorld(env, world, async (w) => {
      await w.start();
      await waitFor('Running', () => w.cs?.status?.phase === 'Running');
      await mainWakeFailed(w);
      await waitFor('Failed', () => w.cs?.status?.phase === 'Failed');
      await w.editSpec((c) => {
        c.spec.agent.image = 'ghcr.io/cocoonstack/cocoon/ubuntu:26.04';
      });
      await waitFor(
        'SnapshotImageMismatch',
        () =>
          w.cs?.status?.conditions?.find((c) => c.type === 'Progressing')?.reason === 'SnapshotImageMismatch',
      );
      expect(w.cs!.status!.phase).toBe('Failed');
      expect(w.cs!.status!.conditions!.find((c) => c.type === 'Progressing')!.message).toContain(
        `set spec.agent.image back to ${oldImage} to keep that state`,
      );
      await w.settled(env);
      expect(uidOf(w, 'demo-0')).toBe(oldUID);
      expect(w.calls.filter((c) => c.startsWith('delete ') || c.startsWith('registry-delete'))).toEqual([]);
      // The user gives the state up: the next look (30 s) replaces the main.
      w.tags.delete(`${MAIN_VM}:hibernate`);
      await env.sleep(30_000);
      await waitFor('main recreated', () => w.pods.has('demo-0') && uidOf(w, 'demo-0') !== oldUID);
    });
  });

  it('deliberate (patch replaced-main-keeps-snapshot; before it the hibernated main was drift-deleted and re-created, and vk-cocoon restored the old VM under a pod naming the new image, or refused it): a main a CocoonHibernation holds hibernated, its agent image edited, is kept with its snapshot and SnapshotImageMismatch', async () => {
    const cs = catalogueSet();
    const world = new CocoonSetWorld(cs, convergedPods(cs));
    const oldUID = uidOf(world, 'demo-0');
    const newImage = 'ghcr.io/cocoonstack/cocoon/ubuntu:26.04';
    world.tags.add(newImage);
    await withCocoonSetWorld(env, world, async (w) => {
      await w.start();
      await waitFor('Running', () => w.cs?.status?.phase === 'Running');
      w.crs = [hibernation('demo-0', 'Hibernate', 'Hibernated')];
      w.tags.add(`${MAIN_VM}:hibernate`);
      await w.updatePod('demo-0', (p) => {
        delete p.metadata!.annotations![Annotations.vmID];
        p.metadata!.annotations![Annotations.hibernate] = 'true';
        p.metadata!.annotations![Annotations.lifecycleState] = LifecycleStates.hibernated;
      });
      await w.settled(env);
      await w.editSpec((c) => {
        c.spec.agent.image = newImage;
      });
      await waitFor(
        'SnapshotImageMismatch',
        () =>
          w.cs?.status?.conditions?.find((c) => c.type === 'Progressing')?.reason === 'SnapshotImageMismatch',
      );
      await env.sleep(60_000);
      await w.settled(env);
      expect(uidOf(w, 'demo-0')).toBe(oldUID);
      expect(w.calls.filter((c) => c.startsWith('delete ') || c.startsWith('registry-delete'))).toEqual([]);
      expect(w.tags.has(`${MAIN_VM}:hibernate`)).toBe(true);
    });
  });

  describe("deliberate (patch restores-check-snapshot-image; before it the restore-marked create skipped vk-cocoon's image check and brought the old VM back under a pod naming the new image): a main to be created restore-marked under another image than its snapshot records", () => {
    const OLD_IMAGE = IMAGE;
    const NEW_IMAGE = 'ghcr.io/cocoonstack/cocoon/ubuntu:26.04';
    /** The main hibernated by vk (its snapshot recording the old image), the agent image then edited. */
    const hibernatedThenReimaged = async (w: CocoonSetWorld) => {
      w.tags.add(NEW_IMAGE);
      w.snapshotImages.set(MAIN_VM, `${OLD_IMAGE}`);
      const generation = w.cs!.metadata.generation!;
      await w.vkHibernated('demo-0', generation);
      await w.settled(env);
      await w.editSpec((c) => {
        c.spec.agent.image = NEW_IMAGE;
      });
      await w.settled(env);
    };
    const progressing = (w: CocoonSetWorld) =>
      w.cs?.status?.conditions?.find((c) => c.type === 'Progressing');

    it("a suspended set whose main pod is deleted is held Suspending with SnapshotImageMismatch naming the snapshot's image, creating nothing", async () => {
      const cs = catalogueSet();
      const world = new CocoonSetWorld(cs, convergedPods(cs));
      await withCocoonSetWorld(env, world, async (w) => {
        await w.start();
        await waitFor('Running', () => w.cs?.status?.phase === 'Running');
        await w.editSpec((c) => (c.spec.suspend = true));
        await waitFor(
          'asked to hibernate',
          () => w.pod('demo-0')?.metadata?.annotations?.[Annotations.hibernate] === 'true',
        );
        await hibernatedThenReimaged(w);
        await w.deletePodByHand('demo-0');
        await waitFor('SnapshotImageMismatch', () => progressing(w)?.reason === 'SnapshotImageMismatch');
        expect(w.cs!.status!.phase).toBe('Suspending');
        expect(progressing(w)!.message).toContain(
          `set spec.agent.image back to ${OLD_IMAGE} to keep that state`,
        );
        await w.settled(env);
        expect(w.creates).toEqual([]);
        expect(w.tags.has(`${MAIN_VM}:hibernate`)).toBe(true);
        // The image set back, the main is created restore-marked: test/e2e/cocoonset.test.ts (the
        // time-skipping server races the edit's signal with the 30 s look it skips to).
      });
    });

    it('a main a CocoonHibernation holds, deleted: Pending with SnapshotImageMismatch, nothing created', async () => {
      const cs = catalogueSet();
      const world = new CocoonSetWorld(cs, convergedPods(cs));
      await withCocoonSetWorld(env, world, async (w) => {
        await w.start();
        await waitFor('Running', () => w.cs?.status?.phase === 'Running');
        w.crs = [hibernation('demo-0', 'Hibernate', 'Hibernated')];
        await w.updatePod('demo-0', (p) => annotate(p, { [Annotations.hibernate]: 'true' }));
        await hibernatedThenReimaged(w);
        await w.deletePodByHand('demo-0');
        await waitFor(
          'SnapshotImageMismatch while the main is gone',
          () =>
            !w.pods.has('demo-0') &&
            w.cs?.status?.phase === 'Pending' &&
            progressing(w)?.reason === 'SnapshotImageMismatch',
        );
        await env.sleep(60_000);
        await w.settled(env);
        expect(w.creates).toEqual([]);
      });
    });

    it("a failed restore pod created under the new image, the image set back: judged by the snapshot's image, the main is replaced keeping its tag (before, held for good naming the pod's image)", async () => {
      const cs = catalogueSet();
      const world = new CocoonSetWorld(cs, convergedPods(cs));
      const oldUID = uidOf(world, 'demo-0');
      await withCocoonSetWorld(env, world, async (w) => {
        await w.start();
        await waitFor('Running', () => w.cs?.status?.phase === 'Running');
        w.tags.add(`${MAIN_VM}:hibernate`);
        w.snapshotImages.set(MAIN_VM, OLD_IMAGE);
        // The main pod names the new image (created under it) and vk-cocoon refused to restore it there.
        await w.updatePod('demo-0', (p) => {
          delete p.metadata!.annotations![Annotations.vmID];
          annotate(p, { [Annotations.image]: NEW_IMAGE });
          lifecycleFailed(
            `restore of ${MAIN_VM}: snapshot taken from image ${OLD_IMAGE}, pod wants ${NEW_IMAGE}`,
          )(p);
        });
        await waitFor('main replaced', () => w.pods.has('demo-0') && uidOf(w, 'demo-0') !== oldUID);
        expect(w.calls).toContain(`manifest ${MAIN_VM}:hibernate`);
        expect(progressing(w)?.reason).not.toBe('SnapshotImageMismatch');
        expect(registryDeletes(w)).toEqual([]);
        expect(w.tags.has(`${MAIN_VM}:hibernate`)).toBe(true);
      });
    });
  });

  it('a run an older version started (patches: 29) replaces a failed main whose spec was edited dropping its :hibernate tag, and says nothing of the failure in Progressing', async () => {
    const cs = catalogueSet();
    const world = new CocoonSetWorld(cs, convergedPods(cs));
    const oldUID = uidOf(world, 'demo-0');
    await withCocoonSetWorld(env, world, async (w) => {
      await w.start({ patches: 29 });
      await waitFor('Running', () => w.cs?.status?.phase === 'Running');
      await mainWakeFailed(w);
      await waitFor('Failed', () => w.cs?.status?.phase === 'Failed');
      expect(w.cs!.status!.conditions!.find((c) => c.type === 'Progressing')?.reason).not.toBe(
        EventReasons.podLifecycleFailed,
      );
      await w.editSpec((c) => {
        c.spec.agent.resources = { requests: { cpu: '250m' } };
      });
      await waitFor('main recreated', () => w.pods.has('demo-0') && uidOf(w, 'demo-0') !== oldUID);
      await waitFor('tag dropped', () => registryDeletes(w).includes(`${MAIN_VM}:hibernate`));
    });
  });

  it('a run an older version started (patches: 28) rebuilds a sub-agent once its failed hibernate round is called off, as the reference', async () => {
    const cs = catalogueSet(replicas(1));
    const world = new CocoonSetWorld(cs, convergedPods(cs));
    const oldUID = uidOf(world, 'demo-1');
    await withCocoonSetWorld(env, world, async (w) => {
      await w.start({ patches: 28 });
      await waitFor('Running', () => w.cs?.status?.phase === 'Running');
      w.crs = [hibernation('demo-1', 'Hibernate', 'Hibernating')];
      await w.updatePod('demo-1', roundFailed);
      await w.settled(env);
      w.crs = [];
      await w.updatePod('demo-1', roundCalledOff);
      await waitFor('demo-1 recreated', () => w.pods.has('demo-1') && uidOf(w, 'demo-1') !== oldUID);
      expect(eventsOf(w, EventReasons.subAgentRebuilding)).toHaveLength(1);
    });
  });

  it('a terminal toolbox is replaced every time it fails, with no rebuild history, event, metric or dead letter', async () => {
    const cs = catalogueSet(toolboxes('tb'));
    const world = new CocoonSetWorld(cs, convergedPods(cs));
    await withCocoonSetWorld(env, world, async (w) => {
      await w.start();
      await waitFor('Running', () => w.cs?.status?.phase === 'Running');
      for (let round = 1; round <= 3; round++) {
        const uid = uidOf(w, 'demo-tb');
        await w.updatePod('demo-tb', failedPhase);
        await waitFor(
          `toolbox replaced (${round})`,
          () => w.pods.has('demo-tb') && uidOf(w, 'demo-tb') !== uid,
        );
        expect(w.pod('demo-tb')!.status!.phase).toBe('Pending');
      }
      await w.settled(env);
      expect(w.creates).toEqual(['demo-tb', 'demo-tb', 'demo-tb']);
      expect(w.historyWrites).toEqual([]);
      expect(w.events).toEqual([]);
      expect(w.metrics).toEqual([]);
      expect(w.pod('demo-tb')!.metadata!.annotations![Annotations.deadLetter]).toBeUndefined();
    });
  });

  it('deletion leaves a pod with the name label but no controller reference alone; it neither blocks the finalizer nor reaches the registry (none configured)', async () => {
    const cs = catalogueSet();
    const stale = buildAgentPod(cs, 0, '', '');
    stale.metadata!.name = 'demo-stale';
    stale.metadata!.ownerReferences = [];
    const world = new CocoonSetWorld(cs, [...convergedPods(cs), stale]);
    await withCocoonSetWorld(env, world, async (w) => {
      await w.start({ registryConfigured: false });
      await waitFor('Running', () => w.cs?.status?.phase === 'Running');
      await w.markDeleted();
      await waitFor('finalizer removed', () => w.cs === null);
      expect([...w.pods.keys()]).toEqual(['demo-stale']);
      expect(w.calls.filter((c) => c.startsWith('delete'))).toEqual(['delete demo-0']);
      expect(w.registryCalls).toBe(0);
    });
  });

  const agents = (...slots: number[]): AgentStatus[] =>
    slots.map((slot) => ({ slot, role: slot === 0 ? 'main' : 'sub', vmName: `vk-ns-demo-${slot}` }));
  const tbs = (...names: string[]): ToolboxStatus[] =>
    names.map((name) => ({ name, vmName: `vk-ns-demo-${name}` }));
  it.each([
    ['never', 'never', agents(0), [], ['vk-ns-demo-0:hibernate', 'vk-ns-demo-0:latest']],
    ['always', 'always', agents(0), [], ['vk-ns-demo-0:hibernate']],
    [
      'main-only (the main keeps :latest; sub-agents and toolboxes lose it)',
      'main-only',
      agents(0, 1),
      tbs('tb'),
      [
        'vk-ns-demo-0:hibernate',
        'vk-ns-demo-1:hibernate',
        'vk-ns-demo-1:latest',
        'vk-ns-demo-tb:hibernate',
        'vk-ns-demo-tb:latest',
      ],
    ],
    [
      'main-only with toolbox db-0 (not mistaken for slot 0)',
      'main-only',
      agents(0),
      tbs('db-0'),
      ['vk-ns-demo-0:hibernate', 'vk-ns-demo-db-0:hibernate', 'vk-ns-demo-db-0:latest'],
    ],
    ['empty (the code-side default, always)', '', agents(0), [], ['vk-ns-demo-0:hibernate']],
  ])(
    'deletion GC, policy %s: deletes exactly these tags, scheduled in this order (they run together: deliberate, the reference deletes one after the other), then the finalizer',
    async (_n, policy, a, t, want) => {
      const cs = catalogueSet(deleting, (c) => {
        c.spec.snapshotPolicy = policy as CocoonSet['spec']['snapshotPolicy'];
        c.status = {
          readyAgents: 0,
          desiredAgents: 1,
          readyToolboxes: 0,
          desiredToolboxes: 0,
          agents: a as AgentStatus[],
          toolboxes: t as ToolboxStatus[],
        };
      });
      const world = new CocoonSetWorld(cs);
      await withCocoonSetWorld(env, world, async (w) => {
        await w.start();
        await waitFor('finalizer removed', () => w.cs === null);
        expect(await scheduledDeletes(w)).toEqual(want);
        expect([...registryDeletes(w)].sort()).toEqual([...want].sort());
      });
    },
  );

  it('deletion stashes the VM names of owned pods when status lists none, so their tags are collected', async () => {
    const cs = catalogueSet(deleting);
    const world = new CocoonSetWorld(cs, convergedPods(cs));
    await withCocoonSetWorld(env, world, async (w) => {
      await w.start();
      await waitFor('finalizer removed', () => w.cs === null);
      const firstWrites = w.calls.filter((c) => c !== 'read').slice(0, 2);
      expect(firstWrites).toEqual([
        `annotate-cs {"${Annotations.deleteVMNames}":"${MAIN_VM}"}`,
        'delete demo-0',
      ]);
      expect(registryDeletes(w)).toEqual([`${MAIN_VM}:hibernate`]);
    });
  });

  it('deletion takes the GC names from status when no pod is left: every :hibernate tag, scheduled sorted', async () => {
    const cs = catalogueSet(deleting, replicas(1), toolboxes('tb'), (c) => {
      c.status = {
        readyAgents: 0,
        desiredAgents: 2,
        readyToolboxes: 0,
        desiredToolboxes: 1,
        toolboxes: tbs('tb'),
        agents: agents(1, 0),
      };
    });
    const world = new CocoonSetWorld(cs);
    for (const vm of ['vk-ns-demo-0', 'vk-ns-demo-1', 'vk-ns-demo-tb']) world.tags.add(`${vm}:hibernate`);
    await withCocoonSetWorld(env, world, async (w) => {
      await w.start();
      await waitFor('finalizer removed', () => w.cs === null);
      const want = ['vk-ns-demo-0:hibernate', 'vk-ns-demo-1:hibernate', 'vk-ns-demo-tb:hibernate'];
      expect(await scheduledDeletes(w)).toEqual(want);
      expect([...registryDeletes(w)].sort()).toEqual(want);
      expect(w.tags.size).toBe(0);
    });
  });
});

describe("the reference operator's status_test.go cases at workflow level", () => {
  it('a toolbox stuck Pending keeps the set Scaling with Ready=False and Progressing=True, and the pass waits for events; Ready, it turns Running', async () => {
    const cs = catalogueSet(replicas(1), toolboxes('tb'));
    const pods = convergedPods(cs);
    pods[2]!.status = { phase: 'Pending' };
    const world = new CocoonSetWorld(cs, pods);
    await withCocoonSetWorld(env, world, async (w) => {
      await w.start();
      await w.settledAfter(0);
      await expectWaitsForEvents(w);
      expect((await w.state()).nextPassAt).toBeNull();
      const st = w.cs!.status!;
      expect(st).toMatchObject({
        phase: 'Scaling',
        readyAgents: 2,
        desiredAgents: 2,
        readyToolboxes: 0,
        desiredToolboxes: 1,
        observedGeneration: 1,
      });
      expect(st.conditions!.map((c) => [c.type, c.status, c.reason, c.message])).toEqual([
        ['Ready', 'False', 'AgentsNotReady', '2/2 agents ready, 0/1 toolboxes ready'],
        ['Progressing', 'True', 'Reconciling', 'Scaling'],
      ]);
      await w.makeReady('demo-tb');
      await waitFor('Running', () => w.cs?.status?.phase === 'Running');
      expect(w.cs!.status!.conditions!.map((c) => [c.type, c.status, c.reason, c.message])).toEqual([
        ['Ready', 'True', 'AllAgentsReady', '2/2 agents ready, 1/1 toolboxes ready'],
        ['Progressing', 'False', 'Stable', 'Running'],
      ]);
    });
  });
});

describe("the reference operator's restore_test.go cases at workflow level", () => {
  it('a failing restore probe creates nothing (fail closed) and fails the pass; once the registry answers, the main is created restoring from :hibernate', async () => {
    const world = new CocoonSetWorld(catalogueSet());
    world.crs = [hibernation('demo-0', 'Hibernate', 'Hibernated')];
    world.tags.add(`${MAIN_VM}:hibernate`);
    world.probeError = 'registry unavailable';
    await withCocoonSetWorld(env, world, async (w) => {
      await w.start();
      // The probe activity retries (3 attempts) on server timers: skip time until the pass gives up.
      await skipUntil(
        env,
        'probe attempts',
        () => w.calls.filter((c) => c.startsWith('probe')).length >= 3,
        60_000,
        1_000,
      );
      await waitFor(
        'pass error',
        async () =>
          (await w.lastResult())?.error === `probe hibernate snapshot ${MAIN_VM}: registry unavailable`,
      );
      expect(w.pods.size).toBe(0);
      expect(w.calls.filter((c) => c.startsWith('create'))).toEqual([]);

      world.probeError = undefined;
      await skipUntil(env, 'main created', () => w.pods.has('demo-0'), 60_000, 1_000);
      expect(w.pod('demo-0')!.metadata!.annotations![Annotations.restoreFromHibernate]).toBe('true');
    });
  });
});

describe("the reference operator's restore_intent_test.go cases at workflow level", () => {
  it("an unrelated CocoonSet progresses while another set's registry probe is wedged (one entity workflow per set; the wedged call holds one registry slot, no global lock)", async () => {
    const inNamespace = (ns: string, uid: string) => (c: CocoonSet) => {
      c.metadata.namespace = ns;
      c.metadata.uid = uid;
    };
    const hibernatedFor = (ns: string, pod: string) => {
      const cr = hibernation(pod, 'Hibernate', 'Hibernated');
      cr.metadata.namespace = ns;
      return cr;
    };
    const blocked = new CocoonSetWorld(newCocoonSet('blocked', withFinalizer, inNamespace('ns-b', 'uid-b')));
    blocked.crs = [hibernatedFor('ns-b', 'blocked-0')];
    const free = new CocoonSetWorld(newCocoonSet('free', withFinalizer, inNamespace('ns-f', 'uid-f')));
    free.crs = [hibernatedFor('ns-f', 'free-0')];
    const wedge = blocked.blockProbe('vk-ns-b-blocked-0');
    await withCocoonSetWorlds(env, [blocked, free], async () => {
      try {
        await blocked.start();
        await Promise.race([
          wedge.entered,
          new Promise((_, reject) => setTimeout(() => reject(new Error('probe never started')), 30_000)),
        ]);
        await free.start();
        await waitFor('free main created', () => free.pods.has('free-0'));
        // free probed its own tag (absent: fresh boot) while blocked's probe was still in flight.
        expect(free.calls).toContain('probe vk-ns-f-free-0:hibernate');
        expect(free.pod('free-0')!.metadata!.annotations![Annotations.restoreFromHibernate]).toBeUndefined();
        expect(blocked.pods.size).toBe(0);
      } finally {
        wedge.release();
      }
      await waitFor('blocked main created after the release', () => blocked.pods.has('blocked-0'));
      expect(blocked.pod('blocked-0')!.metadata!.labels![Labels.cocoonSet]).toBe('blocked');
    });
  });
});

describe("the reference operator's rebuild_test.go cases at workflow level", () => {
  it.each([
    [
      'rebuild history as written drops slots above replicas (a scale-down leftover), and counts on from the kept entry',
      `{"1":{"count":1,"lastDeleted":"${T_OLD}"},"3":{"count":2,"lastDeleted":"${T_OLD}"}}`,
      2,
    ],
    ['a corrupt rebuild history reads as empty: the rebuild is attempt 1 and rewrites it', 'not-json', 1],
  ])('%s', async (_name, history, attempt) => {
    const cs = catalogueSet(replicas(1), (c) => {
      c.metadata.annotations = { [Annotations.rebuildHistory]: history };
    });
    const pods = convergedPods(cs);
    failedPhase(pods[1]!);
    const world = new CocoonSetWorld(cs, pods);
    const oldUID = uidOf(world, 'demo-1');
    await withCocoonSetWorld(env, world, async (w) => {
      await w.start();
      await waitFor('demo-1 rebuilt', () => w.pods.has('demo-1') && uidOf(w, 'demo-1') !== oldUID);
      expect(eventsOf(w, EventReasons.subAgentRebuilding).map((e) => e.message)).toEqual([
        `slot 1 attempt ${attempt}/4`,
      ]);
      expect(w.historyWrites).toHaveLength(1);
      const written = JSON.parse(w.historyWrites[0]!) as Record<string, { count: number }>;
      expect(Object.keys(written)).toEqual(['1']);
      expect(written['1']!.count).toBe(attempt);
    });
  });
});

describe("the reference operator's lifecycle_test.go cases at workflow level", () => {
  it('stamps the generation on every owned pod whose stamp differs, before any other write (as one concurrent batch: deliberate, the reference stamps one by one in name order), and sends no patch once it is current', async () => {
    const cs = catalogueSet(replicas(1), (c) => {
      c.metadata.generation = 7;
    });
    const pods = convergedPods(cs);
    delete pods[0]!.metadata!.annotations![Annotations.cocoonSetGeneration];
    pods[1]!.metadata!.annotations![Annotations.cocoonSetGeneration] = '5';
    const world = new CocoonSetWorld(cs, pods);
    const stamp = (pod: string) => `annotate ${pod} {"${Annotations.cocoonSetGeneration}":"7"}`;
    await withCocoonSetWorld(env, world, async (w) => {
      await w.start();
      await w.settledAfter(0);
      const writes = w.calls.filter((c) => c !== 'read');
      expect(writes.slice(0, 2).sort()).toEqual([stamp('demo-0'), stamp('demo-1')]);
      expect(writes.slice(2)).toEqual(['status']);
      for (const p of ['demo-0', 'demo-1']) {
        expect(w.pod(p)!.metadata!.annotations![Annotations.cocoonSetGeneration]).toBe('7');
      }
      expect(w.cs!.status!.observedGeneration).toBe(7);

      // Current stamps: a later pass (a pod event) sends no annotation patch at all.
      const n = await w.passes();
      const annotates = w.calls.filter((c) => c.startsWith('annotate')).length;
      await w.updatePod('demo-1', (p) => {
        p.metadata!.labels = { ...p.metadata!.labels, tick: '1' };
      });
      await w.settledAfter(n);
      expect(w.calls.filter((c) => c.startsWith('annotate'))).toHaveLength(annotates);
    });
  });
});
