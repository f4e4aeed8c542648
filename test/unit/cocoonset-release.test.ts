/**
 * The seat-release flow of one pass (`hibernatePolicy: release`; docs/cocoonset.md#seat-release): the
 * release suspend (`suspendRelease`) and the released-seat wake (`releasedWake` / `startReleasedWake`,
 * `podUnschedulable`), driven against the in-memory world of plan-world.ts. The VM workflows are not in
 * this world: the pass asks them (`w.asks`), and the tests write the annotations vk-cocoon / the VM
 * workflow would (hibernate "true", lifecycle hibernated for the set's generation) to pass the suspend
 * gate.
 *
 * Port of the reference's cocoonset/slotrelease_test.go. Each test's name ends with the reference test it
 * ports, in parentheses; `release suspend` and `wake` below are the two describe blocks (`release suspend`,
 * `released-seat wake`):
 *
 * | reference (Go)                                  | here                                                          |
 * | ----------------------------------------------- | ------------------------------------------------------------- |
 * | SuspendReleaseRequiresRegistry                  | release suspend › fails closed without a registry             |
 * | SuspendReleaseNoPodsSettlesSuspended            | release suspend › settles Suspended at once with no pods      |
 * | SuspendReleaseWaitsForSnapshotVerification      | release suspend › keeps the pod while the tag is absent       |
 * | SuspendReleaseDeletesVerifiedPodAndStashes      | release suspend › deletes a verified pod, stashes names+hint  |
 * | SuspendReleaseKeepsTerminalPod                  | release suspend › a failed main short-circuits first (the     |
 * |                                                 |   reference's Reconcile too); keeps a terminal sub-agent pod  |
 * | SuspendReleaseFlagsKeepSnapshotBeforeDelete     | release suspend › flags keep-snapshot before the delete       |
 * | SuspendReleaseFreesSeatWhenFlagPatchFails       | release suspend › frees the seat when the flag patch fails    |
 * | WakeRecreatesWithRestoreAndPreferredAffinity    | wake › recreates the main restoring, preferred hint affinity  |
 * | WakeRespectsNodeNamePin                         | wake › the spec.nodeName pin wins over the hint               |
 * | WakeRestoresOnFastUnsuspendFromSuspending       | wake › restores on a fast un-suspend from Suspending          |
 * | WakeLeavesSuspendingWithoutHintToNormalFlow     | wake › Suspending without a hint: normal flow, no probe       |
 * | WakeWaitsOutStalePodCacheThenRestores (×2)      | wake › waits out a stale pod cache, then restores (×2 phases) |
 * | (ours, same row: a terminating cached main)     | wake › a stale cache showing the main terminating waits too   |
 * | WakeLeavesUndeletedMainToInPlaceWake            | wake › an undeleted main is woken in place by un-suspend      |
 * | WakeFreshBootsWhenNoSnapshot                    | wake › no snapshot: the normal flow boots fresh               |
 * | WakeProbeErrorFailsClosed                       | wake › a probe error fails closed                             |
 * | WakeWaitsWhileRestoring                         | wake › Waking while the restore runs                          |
 * | WakeDropsTagAndClearsHintWhenLive               | wake › live: drops the tag, clears the hint, scores pool      |
 * | WakeIgnoresRunningPhase                         | wake › ignores a Running set                                  |
 * | WakeCompletionSurvivesStalePhase                | wake › completion survives a stale phase                      |
 * | WakeWaitsOnStalePhaseWhileRestoring             | wake › stale phase while restoring repaints Waking            |
 * | WakeDisengagesAfterCleanup                      | wake › disengages after its cleanup                           |
 * | WakeLeavesSuspendedPlaceholderToNormalFlow      | wake › a Suspended placeholder main goes to un-suspend        |
 * | WakeScoresPlacementOnceAcrossStaleStatusReentry | wake › scores the placement once across a stale re-entry      |
 * | (ours) WakeNoCapacity                           | wake › WakeNoCapacity while the scheduler finds no seat       |
 * | (ours) WakeFollowsPlacement                      | wake › follows a placement edit while its restore waits       |
 * | (ours, deliberate difference)                   | wake › keeps the tag while a CocoonHibernation holds the VM   |
 */
import type { V1Pod } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { Annotations, Labels } from '../../src/api/keys.js';
import type { CocoonSet } from '../../src/api/types.js';
import { podUnschedulable } from '../../src/cocoonset/plan.js';
import { buildAgentPod } from '../../src/cocoonset/pods.js';
import { annotate, finalizedSet, hibernation, lifecycleHibernated, readyPod } from '../support/builders.js';
import { done, PlanWorld } from './plan-world.js';

const TAG = 'vk-ns-demo-0:hibernate';
const OK_5S = { requeue: false, requeueAfterMs: 5_000, error: undefined };

/** A release set (`hibernatePolicy: release`, generation 1; replicas 0, no toolboxes, as CEL requires). */
const releaseSet = (...mods: ((c: CocoonSet) => void)[]) =>
  finalizedSet(
    (c) => {
      c.spec.hibernatePolicy = 'release';
      c.metadata.generation = 1;
    },
    ...mods,
  );
const suspended = (c: CocoonSet) => {
  c.spec.suspend = true;
};
/** The set's status phase, and the node hint (`hibernated-on-node`) when given. */
const phase =
  (p: string, hint?: string) =>
  (c: CocoonSet): void => {
    c.status = { phase: p } as CocoonSet['status'];
    if (hint !== undefined)
      c.metadata.annotations = { ...(c.metadata.annotations ?? {}), [Annotations.hibernatedOnNode]: hint };
  };
const onNode = (p: V1Pod, node: string) => {
  p.spec!.nodeName = node;
  return p;
};
/** A pod of `cs` as vk-cocoon leaves it hibernated for the set's generation (stamped by earlier passes). */
const hibernatedPod = (cs: CocoonSet, p: V1Pod) =>
  lifecycleHibernated(
    annotate(p, {
      [Annotations.cocoonSetGeneration]: String(cs.metadata.generation ?? 0),
      [Annotations.hibernate]: 'true',
    }),
  );
/** `vmLive`: a VM id and a running container (Ready too, so a derived phase reads Running). */
const live = (p: V1Pod) => {
  annotate(readyPod(p), { [Annotations.vmID]: 'vm-1' });
  p.status!.containerStatuses = [
    { name: 'agent', image: 'x', imageID: '', ready: true, restartCount: 0, state: { running: {} } },
  ];
  return p;
};
const restoreMarked = (p: V1Pod) => annotate(p, { [Annotations.restoreFromHibernate]: 'true' });
const main = (cs: CocoonSet) => buildAgentPod(cs, 0, '', '');
const hint = (w: PlanWorld) => w.cs.metadata.annotations?.[Annotations.hibernatedOnNode];

describe('release suspend', () => {
  it('fails closed without a registry (SuspendReleaseRequiresRegistry)', async () => {
    const w = new PlanWorld(releaseSet(suspended));
    const end = done(await w.pass({ registryConfigured: false }));
    expect(end.result.error).toBe('hibernatePolicy=release on ns/demo requires a configured registry');
    expect(w.cs.status?.phase).not.toBe('Suspended');
  });

  it('settles Suspended at once with no pods, no requeue (SuspendReleaseNoPodsSettlesSuspended)', async () => {
    const w = new PlanWorld(releaseSet(suspended));
    const end = done(await w.pass());
    expect(end.result).toEqual({ requeue: false, requeueAfterMs: 0, error: undefined });
    expect(w.cs.status?.phase).toBe('Suspended');
    expect([w.asks, w.probes, w.ids('deletePod')]).toEqual([[], [], []]);
  });

  it('a re-suspend while the wake’s restore pod waits for a seat (no node took it, no VM): that pod is released at once, not asked to hibernate; Suspended, the hint and the tag kept (ours: the reference waits in Suspending until a seat frees)', async () => {
    const cs = releaseSet(suspended, phase('Waking', 'node-a'));
    const waiting = restoreMarked(main(cs));
    waiting.status = {
      phase: 'Pending',
      conditions: [{ type: 'PodScheduled', status: 'False', reason: 'Unschedulable', message: '0/1 nodes' }],
    };
    const w = new PlanWorld(cs, [waiting]);
    w.tags.add(TAG);
    done(await w.pass());
    expect([w.asks, w.probes]).toEqual([[], []]);
    expect(w.pods.has('demo-0')).toBe(false);
    expect([w.cs.status?.phase, hint(w), w.tags.has(TAG), w.droppedTags]).toEqual([
      'Suspended',
      'node-a',
      true,
      [],
    ]);
    // Runs recorded before `release-skips-unbound` ask it to hibernate and wait.
    const legacy = new PlanWorld(cs, [restoreMarked(main(cs))]);
    legacy.tags.add(TAG);
    done(await legacy.pass({ releaseSkipsUnbound: false }));
    expect([legacy.asks, legacy.pods.has('demo-0'), legacy.cs.status?.phase]).toEqual([
      [{ pod: 'demo-0', desire: 'Hibernate' }],
      true,
      'Suspending',
    ]);
  });

  it('keeps the pod (Suspending, 5 s) while its :hibernate tag is not in the registry (SuspendReleaseWaitsForSnapshotVerification)', async () => {
    const cs = releaseSet(suspended);
    const w = new PlanWorld(cs, [onNode(hibernatedPod(cs, main(cs)), 'node-a')]);
    const end = done(await w.pass());
    expect(end.result).toEqual(OK_5S);
    expect(w.pods.has('demo-0')).toBe(true);
    expect(w.cs.status?.phase).toBe('Suspending');
    expect(w.probes).toEqual(['vk-ns-demo-0']);
    expect([w.ids('deletePod'), hint(w)]).toEqual([[], undefined]);
  });

  it('deletes a verified pod after stashing the VM names and the node hint; Suspended and a 5 s requeue; no tag deleted (SuspendReleaseDeletesVerifiedPodAndStashes)', async () => {
    const cs = releaseSet(suspended);
    const w = new PlanWorld(cs, [onNode(hibernatedPod(cs, main(cs)), 'node-a')]);
    w.tags.add(TAG);
    const end = done(await w.pass());
    expect(end.result).toEqual(OK_5S);
    expect(w.pods.has('demo-0')).toBe(false);
    expect(hint(w)).toBe('node-a');
    expect(w.cs.metadata.annotations![Annotations.deleteVMNames]?.split(',')).toContain('vk-ns-demo-0');
    expect(w.cs.status?.phase).toBe('Suspended');
    expect([w.droppedTags, w.tags.has(TAG)]).toEqual([[], true]);
    // Both annotations are written before the delete; the delete is counted.
    const order = w.ids();
    expect(order.indexOf('stash-vm-names')).toBeLessThan(order.indexOf('delete:demo-0'));
    expect(order.indexOf('hint')).toBeLessThan(order.indexOf('delete:demo-0'));
    expect(w.metrics).toContainEqual({
      metric: 'slotReleasePodsDeletedTotal',
      labels: { namespace: 'ns', cocoonset: 'demo' },
    });
  });

  it('a failed main short-circuits before the release suspend runs: set Failed, the pod kept, nothing asked (deliberate: the reference Reconcile checks the failed main first too; its SuspendReleaseKeepsTerminalPod calls reconcileSuspendRelease directly)', async () => {
    const cs = releaseSet(suspended);
    const w = new PlanWorld(cs, [
      onNode(
        annotate(main(cs), {
          [Annotations.lifecycleState]: 'failed',
          [Annotations.lifecycleStateMessage]: 'push failed',
        }),
        'node-a',
      ),
    ]);
    w.tags.add(TAG);
    const end = done(await w.pass());
    expect(end.result.error).toBeUndefined();
    expect(w.cs.status?.phase).toBe('Failed');
    expect(w.pods.has('demo-0')).toBe(true);
    expect([w.asks, w.ids('deletePod'), hint(w)]).toEqual([[], [], undefined]);
  });

  it('keeps a terminal pod for triage while releasing the rest (SuspendReleaseKeepsTerminalPod, on a reachable terminal pod: a leftover failed sub-agent)', async () => {
    const cs = releaseSet(suspended);
    const sub = buildAgentPod(cs, 1, 'vk-ns-demo-0', 'node-a');
    sub.status = { phase: 'Failed' };
    const w = new PlanWorld(cs, [onNode(hibernatedPod(cs, main(cs)), 'node-a'), sub]);
    w.tags.add(TAG);
    const end = done(await w.pass());
    expect(end.result).toEqual(OK_5S);
    expect([w.pods.has('demo-0'), w.pods.has('demo-1')]).toEqual([false, true]);
    expect(w.ids('deletePod')).toEqual(['delete:demo-0']);
    expect(w.ids('patchPodAnnotations').filter((id) => id.startsWith('keep-snapshot:'))).toEqual([
      'keep-snapshot:demo-0',
    ]);
    expect(w.cs.status?.phase).toBe('Suspended');
    // The terminal pod's VM is still stashed for the deletion GC.
    expect(w.cs.metadata.annotations![Annotations.deleteVMNames]).toBe('vk-ns-demo-0,vk-ns-demo-1');
  });

  it('writes keep-snapshot-on-delete="true" before the delete (SuspendReleaseFlagsKeepSnapshotBeforeDelete)', async () => {
    const cs = releaseSet(suspended);
    const w = new PlanWorld(cs, [onNode(hibernatedPod(cs, main(cs)), 'node-a')]);
    w.tags.add(TAG);
    done(await w.pass());
    const order = w.ids();
    expect(order.indexOf('keep-snapshot:demo-0')).toBeGreaterThanOrEqual(0);
    expect(order.indexOf('keep-snapshot:demo-0')).toBeLessThan(order.indexOf('delete:demo-0'));
    const flag = w.log.find((a) => a.id === 'keep-snapshot:demo-0');
    expect(flag).toMatchObject({
      type: 'patchPodAnnotations',
      pod: 'demo-0',
      annotations: { [Annotations.keepSnapshotOnDelete]: 'true' },
    });
    // Already flagged: not written again.
    const again = new PlanWorld(cs, [
      onNode(annotate(hibernatedPod(cs, main(cs)), { [Annotations.keepSnapshotOnDelete]: 'true' }), 'node-a'),
    ]);
    again.tags.add(TAG);
    done(await again.pass());
    expect(again.ids().filter((id) => id.startsWith('keep-snapshot:'))).toEqual([]);
    expect(again.pods.has('demo-0')).toBe(false);
  });

  it('frees the seat when the keep-snapshot patch fails: no error, the pod deleted (SuspendReleaseFreesSeatWhenFlagPatchFails)', async () => {
    const cs = releaseSet(suspended);
    const w = new PlanWorld(cs, [onNode(hibernatedPod(cs, main(cs)), 'node-a')]);
    w.tags.add(TAG);
    w.failures.set('keep-snapshot:demo-0', 'boom');
    const end = done(await w.pass());
    expect(end.result).toEqual(OK_5S);
    expect(w.pods.has('demo-0')).toBe(false);
    expect(w.cs.status?.phase).toBe('Suspended');
  });
});

describe('released-seat wake', () => {
  it('recreates the main restoring from its tag, with the hint as the one preferred affinity, no nodeName, the class selector kept; Waking persisted before the create; no tag deleted (WakeRecreatesWithRestoreAndPreferredAffinity)', async () => {
    const cs = releaseSet(phase('Suspended', 'node-a'), (c) => {
      c.spec.snapshotCompatibilityClass = 'n2-cascade-lake-v1';
    });
    const w = new PlanWorld(cs);
    w.tags.add(TAG);
    const end = done(await w.pass());
    expect(end.result).toEqual(OK_5S);
    const pod = w.pod('demo-0')!;
    expect(pod.metadata!.annotations![Annotations.restoreFromHibernate]).toBe('true');
    expect(pod.spec!.nodeName).toBeUndefined();
    expect(pod.spec!.nodeSelector![Labels.snapshotCPUClass]).toBe('n2-cascade-lake-v1');
    const na = pod.spec!.affinity!.nodeAffinity!;
    expect(na.requiredDuringSchedulingIgnoredDuringExecution).toBeUndefined();
    expect(na.preferredDuringSchedulingIgnoredDuringExecution).toEqual([
      {
        weight: 100,
        preference: { matchExpressions: [{ key: Labels.hostname, operator: 'In', values: ['node-a'] }] },
      },
    ]);
    expect(w.cs.status?.phase).toBe('Waking');
    expect(w.ids()).toEqual([
      'wake-probe:vk-ns-demo-0',
      'list-hibernations',
      'status-waking',
      'snapshot-image:vk-ns-demo-0',
      'create:demo-0',
    ]);
    expect([w.droppedTags, w.tags.has(TAG)]).toEqual([[], true]);
  });

  it('a wake whose create keeps failing (a LimitRange the restored main exceeds) shows ReconcileFailed on every pass, not Stable Waking (ours; new-user finding: the second failing pass diffed against the first and wrote nothing after its Waking write)', async () => {
    const cs = releaseSet(phase('Suspended', 'node-a'));
    const w = new PlanWorld(cs);
    w.tags.add(TAG);
    w.failures.set('create:demo-0', 'pods "demo-0" is forbidden: maximum memory usage per Container is 8Gi');
    const progressing = () => w.cs.status?.conditions?.find((c) => c.type === 'Progressing');
    for (const pass of [1, 2, 3]) {
      expect(done(await w.pass()).result.error, `pass ${pass}`).toContain('wake: create main: pods "demo-0"');
      expect([w.cs.status?.phase, progressing()?.reason], `pass ${pass}`).toEqual([
        'Waking',
        'ReconcileFailed',
      ]);
    }
    const old = new PlanWorld(releaseSet(phase('Suspended', 'node-a')));
    old.tags.add(TAG);
    old.failures.set('create:demo-0', 'refused');
    done(await old.pass({ statusDiffFollowsOwnWrites: false }));
    done(await old.pass({ statusDiffFollowsOwnWrites: false }));
    expect(old.cs.status?.conditions?.find((c) => c.type === 'Progressing')?.reason).toBe('Stable');
  });

  it('an un-suspend with an invalid edit keeps Suspended (InvalidSpec, nothing created); the fix then wakes from the tag with the hint, not a fresh main (ours; new-user finding: the block wrote Pending and the fix created the main without the restore marker)', async () => {
    const cs = releaseSet(phase('Suspended', 'node-a'), (c) => {
      c.spec.agent.image = 'localhost:5000/bad:1';
      c.metadata.generation = 2;
    });
    const w = new PlanWorld(cs);
    w.tags.add(TAG);
    done(await w.pass());
    expect(w.cs.status?.phase).toBe('Suspended');
    expect(w.cs.status?.conditions?.find((c) => c.type === 'Progressing')?.reason).toBe('InvalidSpec');
    expect(w.ids('createPod')).toEqual([]);

    w.cs.spec.agent.image = 'cocoonstack/ubuntu:24.04';
    w.cs.metadata.generation = 3;
    done(await w.pass());
    expect(w.cs.status?.phase).toBe('Waking');
    expect(w.pod('demo-0')!.metadata!.annotations![Annotations.restoreFromHibernate]).toBe('true');
    expect(
      w.pod('demo-0')!.spec!.affinity?.nodeAffinity?.preferredDuringSchedulingIgnoredDuringExecution,
    ).toHaveLength(1);

    const old = new PlanWorld(cs);
    old.tags.add(TAG);
    done(await old.pass({ blockKeepsFlowPhase: false }));
    expect(old.cs.status?.phase).toBe('Pending');
  });

  it("deliberate (restoresCheckSnapshotImage; before it the restore pod named the new image over the old VM's snapshot): an un-suspend with an agent image edit whose snapshot records the old image: no create, Waking with SnapshotImageMismatch, 30 s, the tag kept", async () => {
    const cs = releaseSet(phase('Suspended', 'node-a'), (c) => {
      c.spec.agent.image = 'cocoonstack/ubuntu:26.04';
      c.metadata.generation = 2;
    });
    const w = new PlanWorld(cs);
    w.tags.add(TAG);
    w.snapshotImages.set('vk-ns-demo-0', 'cocoonstack/ubuntu:24.04');
    expect(done(await w.pass()).result.requeueAfterMs).toBe(30_000);
    expect(w.ids('createPod')).toEqual([]);
    expect(w.cs.status?.phase).toBe('Waking');
    expect(w.cs.status?.conditions?.find((c) => c.type === 'Progressing')?.reason).toBe(
      'SnapshotImageMismatch',
    );
    expect([w.droppedTags, w.tags.has(TAG)]).toEqual([[], true]);
    const old = new PlanWorld(cs);
    old.tags.add(TAG);
    old.snapshotImages.set('vk-ns-demo-0', 'cocoonstack/ubuntu:24.04');
    done(await old.pass({ restoresCheckSnapshotImage: false }));
    expect(old.ids('createPod')).toEqual(['create:demo-0']);
  });

  it('the spec.nodeName pin wins over the hint: required affinity to the pin, no preferred term (WakeRespectsNodeNamePin; with migration off: with it, migration restores a pinned set, see cocoonset-migration)', async () => {
    const cs = releaseSet(phase('Suspended', 'node-a'), (c) => {
      c.spec.nodeName = 'node-b';
    });
    const w = new PlanWorld(cs);
    w.tags.add(TAG);
    expect(await w.pass({ migration: false })).toEqual({ kind: 'delegate', flow: 'migration' });
    done(await w.pass({ migration: false, declined: { migration: true } }));
    const pod = w.pod('demo-0')!;
    expect(pod.metadata!.annotations![Annotations.restoreFromHibernate]).toBe('true');
    expect(pod.spec!.nodeName).toBeUndefined();
    const na = pod.spec!.affinity!.nodeAffinity!;
    expect(na.requiredDuringSchedulingIgnoredDuringExecution!.nodeSelectorTerms).toEqual([
      { matchExpressions: [{ key: Labels.hostname, operator: 'In', values: ['node-b'] }] },
    ]);
    expect(na.preferredDuringSchedulingIgnoredDuringExecution).toBeUndefined();
    expect(w.cs.status?.phase).toBe('Waking');
  });

  it('restores on a fast un-suspend from Suspending with the hint (WakeRestoresOnFastUnsuspendFromSuspending)', async () => {
    const w = new PlanWorld(releaseSet(phase('Suspending', 'node-a')));
    w.tags.add(TAG);
    expect(done(await w.pass()).result).toEqual(OK_5S);
    expect(w.pod('demo-0')!.metadata!.annotations![Annotations.restoreFromHibernate]).toBe('true');
    expect(w.cs.status?.phase).toBe('Waking');
  });

  it('leaves Suspending without a hint to the normal flow: no probe, the main created fresh (WakeLeavesSuspendingWithoutHintToNormalFlow)', async () => {
    const w = new PlanWorld(releaseSet(phase('Suspending')));
    w.probeError = 'registry down';
    const end = done(await w.pass());
    expect(end.result).toEqual({ requeue: true, requeueAfterMs: 0, error: undefined });
    expect(w.probes).toEqual([]);
    expect(w.ids('createPod')).toEqual(['create:demo-0']);
    expect(w.pod('demo-0')!.metadata!.annotations![Annotations.restoreFromHibernate]).toBeUndefined();
  });

  it.each(['Suspended', 'Suspending'])(
    'waits out a stale pod cache still showing the released main (%s), then restores (WakeWaitsOutStalePodCacheThenRestores)',
    async (p) => {
      const cs = releaseSet(phase(p, 'node-a'));
      const w = new PlanWorld(cs);
      w.tags.add(TAG);
      const staleView = [onNode(hibernatedPod(cs, main(cs)), 'node-a')];
      expect(done(await w.pass({ view: staleView })).result).toEqual(OK_5S);
      expect(w.ids('readPod')).toEqual(['confirm-delete:demo-0']);
      expect([w.ids('createPod'), w.droppedTags, w.probes]).toEqual([[], [], []]);
      // The cache catches up.
      expect(done(await w.pass({ view: [] })).result).toEqual(OK_5S);
      expect(w.ids('createPod')).toEqual(['create:demo-0']);
      expect(w.pod('demo-0')!.metadata!.annotations![Annotations.restoreFromHibernate]).toBe('true');
      expect(w.cs.status?.phase).toBe('Waking');
    },
  );

  it('a stale cache showing the main terminating waits too', async () => {
    const cs = releaseSet(phase('Suspended', 'node-a'));
    const gone = onNode(hibernatedPod(cs, main(cs)), 'node-a');
    gone.metadata!.deletionTimestamp = new Date('2026-05-14T00:59:00Z');
    const w = new PlanWorld(cs, [gone]);
    w.tags.add(TAG);
    const alive = onNode(hibernatedPod(cs, main(cs)), 'node-a');
    expect(done(await w.pass({ view: [alive] })).result).toEqual(OK_5S);
    expect(w.ids('createPod')).toEqual([]);
  });

  it('leaves an undeleted main to the in-place wake: un-suspend asks its VM workflow to wake it, nothing created (WakeLeavesUndeletedMainToInPlaceWake)', async () => {
    const cs = releaseSet(phase('Suspending', 'node-a'));
    const w = new PlanWorld(cs, [onNode(hibernatedPod(cs, main(cs)), 'node-a')]);
    w.tags.add(TAG);
    done(await w.pass());
    expect(w.ids('readPod')).toEqual(['confirm-delete:demo-0']);
    expect(w.asks).toEqual([{ pod: 'demo-0', desire: 'Wake' }]);
    expect([w.ids('createPod'), w.droppedTags, w.probes]).toEqual([[], [], []]);
  });

  it('fresh-boots through the normal flow when there is no snapshot (WakeFreshBootsWhenNoSnapshot)', async () => {
    const w = new PlanWorld(releaseSet(phase('Suspended')));
    done(await w.pass());
    expect(w.probes).toEqual(['vk-ns-demo-0']);
    expect(w.ids('createPod')).toEqual(['create:demo-0']);
    expect(w.pod('demo-0')!.metadata!.annotations![Annotations.restoreFromHibernate]).toBeUndefined();
    expect(w.cs.status?.phase).not.toBe('Waking');
  });

  it('fails closed on a probe error: pass error, nothing created (WakeProbeErrorFailsClosed)', async () => {
    const w = new PlanWorld(releaseSet(phase('Suspended')));
    w.probeError = 'registry down';
    const end = done(await w.pass());
    expect(end.result.error).toBe('wake: probe hibernate snapshot vk-ns-demo-0: registry down');
    expect(w.pods.size).toBe(0);
    expect(w.ids('createPod')).toEqual([]);
  });

  it('stays Waking with a 5 s look while the restore runs (unscheduled, no VM id, not running); no tag dropped (WakeWaitsWhileRestoring)', async () => {
    const cs = releaseSet(phase('Waking', 'node-a'));
    const w = new PlanWorld(cs, [restoreMarked(main(cs))]);
    w.tags.add(TAG);
    expect(done(await w.pass()).result).toEqual(OK_5S);
    expect(w.cs.status?.phase).toBe('Waking');
    expect([w.droppedTags, w.tags.has(TAG), w.events, hint(w)]).toEqual([[], true, [], 'node-a']);
  });

  it('Waking, the restored VM running but vk hibernating it again (lifecycle hibernating): keeps the tag and the hint; Waking, 5 s (ours: the reference drops it on vmLive)', async () => {
    const cs = releaseSet(phase('Waking', 'node-a'));
    const mid = annotate(onNode(live(restoreMarked(main(cs))), 'node-a'), {
      [Annotations.lifecycleState]: 'hibernating',
    });
    const w = new PlanWorld(cs, [mid]);
    w.tags.add(TAG);
    expect(done(await w.pass()).result.requeueAfterMs).toBe(5_000);
    expect([w.droppedTags, w.tags.has(TAG), hint(w), w.cs.status?.phase]).toEqual([
      [],
      true,
      'node-a',
      'Waking',
    ]);
  });

  it('once the VM is live: drops the tag, clears the hint, scores placement pool off the hint node, runs again at once (WakeDropsTagAndClearsHintWhenLive)', async () => {
    const cs = releaseSet(phase('Waking', 'node-a'));
    const w = new PlanWorld(cs, [onNode(live(restoreMarked(main(cs))), 'node-c')]);
    w.tags.add(TAG);
    const end = done(await w.pass());
    expect(end.result).toEqual({ requeue: true, requeueAfterMs: 0, error: undefined });
    expect(w.droppedTags).toEqual([TAG]);
    // Named as the set's own wake: un-suspend's later ask tells the VM workflow to leave the tag.
    expect(w.wokenBySet).toEqual(['demo-0']);
    expect(w.tags.has(TAG)).toBe(false);
    expect(hint(w)).toBeUndefined();
    expect(w.metrics.filter((m) => m.metric === 'slotReleaseWakeTotal')).toEqual([
      { metric: 'slotReleaseWakeTotal', labels: { namespace: 'ns', cocoonset: 'demo', placement: 'pool' } },
    ]);
    expect(w.cs.status?.phase).toBe('Running');
  });

  it('ignores a Running set: no probe, the normal flow creates the main (WakeIgnoresRunningPhase)', async () => {
    const w = new PlanWorld(releaseSet(phase('Running')));
    w.probeError = 'registry down';
    const end = done(await w.pass());
    expect(end.result.error).toBeUndefined();
    expect(w.probes).toEqual([]);
    expect(w.ids('createPod')).toEqual(['create:demo-0']);
    expect(w.pod('demo-0')!.metadata!.annotations![Annotations.restoreFromHibernate]).toBeUndefined();
  });

  it('completes a wake whose Waking was overwritten (phase Pending): drops the tag, clears the hint, scores hint-node (WakeCompletionSurvivesStalePhase)', async () => {
    const cs = releaseSet(phase('Pending', 'node-a'));
    const w = new PlanWorld(cs, [onNode(live(restoreMarked(main(cs))), 'node-a')]);
    w.tags.add(TAG);
    expect(done(await w.pass()).result.requeue).toBe(true);
    expect(w.droppedTags).toEqual([TAG]);
    expect(hint(w)).toBeUndefined();
    expect(w.metrics.filter((m) => m.metric === 'slotReleaseWakeTotal')).toEqual([
      {
        metric: 'slotReleaseWakeTotal',
        labels: { namespace: 'ns', cocoonset: 'demo', placement: 'hint-node' },
      },
    ]);
  });

  it('repaints Waking over a stale phase while the restore runs; no tag dropped (WakeWaitsOnStalePhaseWhileRestoring)', async () => {
    const cs = releaseSet(phase('Pending', 'node-a'));
    const w = new PlanWorld(cs, [onNode(restoreMarked(main(cs)), 'node-a')]);
    w.tags.add(TAG);
    expect(done(await w.pass()).result).toEqual(OK_5S);
    expect(w.cs.status?.phase).toBe('Waking');
    expect([w.droppedTags, hint(w)]).toEqual([[], 'node-a']);
  });

  it('disengages after its cleanup (Running, no hint, restore-marked live main): no probe, no tag drop, the normal flow (WakeDisengagesAfterCleanup)', async () => {
    const cs = releaseSet(phase('Running'));
    const w = new PlanWorld(cs, [onNode(live(restoreMarked(main(cs))), 'node-a')]);
    w.probeError = 'registry down';
    const end = done(await w.pass());
    expect(end.result).toEqual({ requeue: false, requeueAfterMs: 0, error: undefined });
    expect([w.probes, w.droppedTags, w.ids('createPod'), w.ids('deletePod')]).toEqual([[], [], [], []]);
    expect(w.cs.status?.phase).toBe('Running');
  });

  it('leaves a Suspended placeholder main (no hint) to the normal flow: un-suspend asks it to wake, no apiserver read (WakeLeavesSuspendedPlaceholderToNormalFlow)', async () => {
    const cs = releaseSet(phase('Suspended'));
    const w = new PlanWorld(cs, [hibernatedPod(cs, main(cs))]);
    done(await w.pass());
    expect(w.asks).toEqual([{ pod: 'demo-0', desire: 'Wake' }]);
    expect([w.ids('readPod'), w.probes, w.ids('createPod')]).toEqual([[], [], []]);
  });

  it('scores the placement once across a stale-status re-entry into Waking (WakeScoresPlacementOnceAcrossStaleStatusReentry)', async () => {
    const cs = releaseSet(phase('Waking', 'node-a'));
    const w = new PlanWorld(cs, [onNode(live(restoreMarked(main(cs))), 'node-a')]);
    w.tags.add(TAG);
    done(await w.pass());
    const scores = () => w.metrics.filter((m) => m.metric === 'slotReleaseWakeTotal');
    expect(scores().map((m) => m.labels.placement)).toEqual(['hint-node']);
    expect(hint(w)).toBeUndefined();
    w.cs.status = { ...w.cs.status!, phase: 'Waking' };
    done(await w.pass());
    expect(scores()).toHaveLength(1);
  });

  it('WakeNoCapacity (ours): a Warning Event and slot_release_wake_unschedulable_total while the scheduler finds no seat; Waking, 5 s', async () => {
    const cs = releaseSet(phase('Waking', 'node-a'));
    const pod = restoreMarked(main(cs));
    pod.status = {
      phase: 'Pending',
      conditions: [
        {
          type: 'PodScheduled',
          status: 'False',
          reason: 'Unschedulable',
          message: '0/1 nodes are available: 1 Too many pods.',
        },
      ],
    };
    const w = new PlanWorld(cs, [pod]);
    w.tags.add(TAG);
    expect(done(await w.pass()).result).toEqual(OK_5S);
    expect(w.events).toEqual([
      {
        eventType: 'Warning',
        reason: 'WakeNoCapacity',
        message: 'main pod demo-0 unschedulable: 0/1 nodes are available: 1 Too many pods.',
      },
    ]);
    expect(w.metrics).toEqual([
      { metric: 'slotReleaseWakeUnschedulableTotal', labels: { namespace: 'ns', cocoonset: 'demo' } },
    ]);
    expect(w.cs.status?.phase).toBe('Waking');
    expect(w.droppedTags).toEqual([]);
    // An Unschedulable condition without a message does not count.
    const quiet = restoreMarked(main(cs));
    quiet.status = { conditions: [{ type: 'PodScheduled', status: 'False', reason: 'Unschedulable' }] };
    expect(podUnschedulable(quiet)).toBe('');
    quiet.status.conditions![0]!.message = '';
    expect(podUnschedulable(quiet)).toBe('');
    const w2 = new PlanWorld(cs, [quiet]);
    expect(done(await w2.pass()).result).toEqual(OK_5S);
    expect([w2.events, w2.metrics, w2.cs.status?.phase]).toEqual([[], [], 'Waking']);
  });

  it('follows a placement edit (pool, CPU class, pin cleared) while its restore main waits unbound: the pod is deleted (Waking, 5 s) and the next pass creates it restoring from the same tag with the new placement (a pinned set through the migration); a bound restore, an unchanged placement and the old version wait (deliberate: the reference waits on the old pod for ever)', async () => {
    const unbound = (cs: CocoonSet) => restoreMarked(main(cs));
    const edits: [string, (c: CocoonSet) => void][] = [
      ['pool', (c) => (c.spec.nodePool = 'big')],
      ['class', (c) => (c.spec.snapshotCompatibilityClass = 'n2-v2')],
      ['pin cleared', (c) => delete c.spec.nodeName],
    ];
    for (const [what, edit] of edits) {
      const before = releaseSet(phase('Waking', 'node-a'), (c) => {
        c.spec.nodeName = 'node-a';
        c.spec.snapshotCompatibilityClass = 'n2-v1';
      });
      const cs = releaseSet(
        phase('Waking', 'node-a'),
        (c) => {
          c.spec.nodeName = 'node-a';
          c.spec.snapshotCompatibilityClass = 'n2-v1';
        },
        edit,
      );
      const w = new PlanWorld(cs, [unbound(before)]);
      w.tags.add(TAG);
      expect(done(await w.pass()).result, what).toEqual(OK_5S);
      expect(w.ids('deletePod'), what).toEqual(['delete:demo-0']);
      expect([w.pod('demo-0'), w.cs.status?.phase, w.droppedTags], what).toEqual([undefined, 'Waking', []]);
      done(await w.pass());
      const again = w.pod('demo-0')!;
      expect(again.metadata!.annotations![Annotations.restoreFromHibernate], what).toBe('true');
      expect(again.spec!.nodeSelector, what).toEqual(main(w.cs).spec!.nodeSelector);
      expect(again.spec!.affinity, what).toEqual(
        w.cs.spec.nodeName
          ? main(w.cs).spec!.affinity
          : {
              nodeAffinity: {
                preferredDuringSchedulingIgnoredDuringExecution: [
                  {
                    weight: 100,
                    preference: {
                      matchExpressions: [{ key: Labels.hostname, operator: 'In', values: ['node-a'] }],
                    },
                  },
                ],
              },
            },
      );
      // A pinned set's restore main is the migration's to create (it runs first), as at any pinned wake.
      expect([w.tags.has(TAG), w.cs.status?.phase], what).toEqual([
        true,
        w.cs.spec.nodeName ? 'Migrating' : 'Waking',
      ]);
    }
    const waits = async (w: PlanWorld, what: string) => {
      w.tags.add(TAG);
      expect(done(await w.pass()).result, what).toEqual(OK_5S);
      expect([w.ids('deletePod'), w.ids('createPod'), w.cs.status?.phase], what).toEqual([[], [], 'Waking']);
    };
    const cs = releaseSet(phase('Waking', 'node-a'));
    await waits(new PlanWorld(cs, [unbound(cs)]), 'unchanged');
    const moved = releaseSet(phase('Waking', 'node-a'), (c) => (c.spec.nodePool = 'big'));
    await waits(new PlanWorld(moved, [onNode(unbound(cs), 'node-a')]), 'bound');
    const old = new PlanWorld(moved, [unbound(cs)]);
    old.tags.add(TAG);
    expect(done(await old.pass({ releasedWakeFollowsPlacement: false })).result).toEqual(OK_5S);
    expect([old.ids('deletePod'), old.cs.status?.phase]).toEqual([[], 'Waking']);
  });

  it('keeps the tag while a live CocoonHibernation holds the VM, or while the main is being hibernated again; still clears the hint (deliberate: the reference drops it unconditionally)', async () => {
    const cs = releaseSet(phase('Waking', 'node-a'));
    const w = new PlanWorld(cs, [onNode(live(restoreMarked(main(cs))), 'node-a')]);
    w.tags.add(TAG);
    w.crs = [hibernation('demo-0', 'Hibernate')];
    expect(done(await w.pass()).result.requeue).toBe(true);
    expect([w.droppedTags, w.tags.has(TAG), w.lists]).toEqual([[], true, 1]);
    expect(hint(w)).toBeUndefined();
    // A CR being deleted no longer holds it.
    const deleting = hibernation('demo-0', 'Hibernate');
    deleting.metadata!.deletionTimestamp = new Date('2026-05-14T00:59:00Z');
    const w2 = new PlanWorld(cs, [onNode(live(restoreMarked(main(cs))), 'node-a')]);
    w2.tags.add(TAG);
    w2.crs = [deleting];
    done(await w2.pass());
    expect(w2.droppedTags).toEqual([TAG]);
    // The main being hibernated again: no drop (and no List).
    const w3 = new PlanWorld(cs, [
      onNode(annotate(live(restoreMarked(main(cs))), { [Annotations.hibernate]: 'true' }), 'node-a'),
    ]);
    w3.tags.add(TAG);
    done(await w3.pass());
    expect([w3.droppedTags, w3.tags.has(TAG), w3.lists]).toEqual([[], true, 0]);
  });
});
