/**
 * Cross-node migration of the main (`migrate`, entry gate `migrationMayEngage`; docs/cocoonset.md#migration),
 * driven as whole passes (`reconcilePass`) against the in-memory world of plan-world.ts. Where the reference
 * patches the old main's hibernate annotation (`true` to quiesce it, cleared to wake it in place), the pass
 * asks the main's VM workflow instead (`w.asks`: the world changes no annotation for it), so these tests
 * assert the asks; registry tag deletes are `w.droppedTags`. "Not handled" shows as the normal flow running
 * on: no `Migrating`, and (where the reference says so) no probe.
 *
 * Port of the reference's cocoonset/migrate_test.go. Each test's name ends with the reference test it ports,
 * in parentheses:
 *
 * | reference (Go)                                  | here                                                          |
 * | ----------------------------------------------- | ------------------------------------------------------------- |
 * | MigrationNoopWithoutNodeName                    | no pin: not handled, no probe                                 |
 * | MigrationNoopWhenSettledOnTarget                | settled on the pin: not handled, no probe                     |
 * | MigrationStartsHibernateOnWrongNode             | live on the wrong node: Migrating, then the Hibernate ask     |
 * | MigrationDeletesOldPodAfterSnapshotLands        | the snapshot landed: deletes the old main, keeps the tag      |
 * | (ours, deliberate difference)                   | the old main mid-round is kept until vk reports hibernated    |
 * | MigrationRecreatesOnTargetWithRestoreAnnotation | no main: recreates it restoring, pinned to the target         |
 * | MigrationWaitsWhileRestoring                    | waits while the restore runs, keeps the tag                   |
 * | MigrationDropsSnapshotWhenRestored              | restored and live: drops the tag                              |
 * | MigrationDoesNotDeleteRecreatedRestorePod       | an unscheduled restore pod is not deleted                     |
 * | MigrationProbeErrorIsHandled                    | a probe error fails the pass, nothing else done               |
 * | MigrationDropsStaleTagInsteadOfDeletingLivePod  | a stale tag is dropped, the live main survives                |
 * | MigrationWakesInPlaceOnRetargetBack             | re-target back: the main asked to wake in place               |
 * | MigrationLeavesCRHibernationAlone               | a CR-hibernated main on the target: not handled, no probe     |
 * | MigrationFinishesAbortedRestore                 | pin cleared mid-migration: restores with no affinity          |
 * | MigrationSkipsProbeWhenSettled                  | settled: a broken registry is never probed                    |
 * | MigrationDisengagesFromCRWakeWindow             | a CR wake on the target without Migrating: not handled        |
 * | (ours, deliberate difference)                   | a re-target while the restore pulls the tag keeps the tag     |
 * | (ours, deliberate difference)                   | a tag the set's own hibernate request made is not stale       |
 * | (ours, deliberate difference)                   | a live CocoonHibernation keeps the tag (stale / completion)   |
 * | (ours)                                          | a pinned released set: migration restores, the wake cleans up |
 * | (ours, deliberate difference)                   | a failed tag drop keeps Migrating; the next pass retries it   |
 * | (ours, deliberate difference)                   | an unscheduled restore follows a moved or cleared pin         |
 * | (ours)                                          | a CR holding the main awake shows on Progressing              |
 * | (ours, deliberate difference)                   | an invalid pin is InvalidSpec; the live main is untouched     |
 * | (ours, deliberate difference)                   | a restore the namespace would refuse: the live main is kept   |
 */
import type { V1Pod } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { Annotations, Labels } from '../../src/api/keys.js';
import type { CocoonSet } from '../../src/api/types.js';
import { buildAgentPod } from '../../src/cocoonset/pods.js';
import { annotate, finalizedSet, hibernation, lifecycleHibernated, readyPod } from '../support/builders.js';
import { done, PlanWorld } from './plan-world.js';

const VM = 'vk-ns-demo-0';
const TAG = `${VM}:hibernate`;
const OK_5S = { requeue: false, requeueAfterMs: 5_000, error: undefined };
/** The normal flow's end for a live, Ready main with nothing else to do: derived status, no requeue. */
const SETTLED = { requeue: false, requeueAfterMs: 0, error: undefined };
/** The normal flow's end for a main that is not Ready: `Pending`, 5 s. */
const PENDING_5S = OK_5S;

/** `spec.nodeName` (the pin); '' leaves the set unpinned. */
const pinned =
  (node: string) =>
  (c: CocoonSet): void => {
    if (node !== '') c.spec.nodeName = node;
  };
/** The set's status phase. */
const phase =
  (p: string) =>
  (c: CocoonSet): void => {
    c.status = { phase: p } as CocoonSet['status'];
  };
/** A migration set (`migCocoonSet`): pinned to `node` ('' = no pin), then `mods`. */
const migSet = (node: string, ...mods: ((c: CocoonSet) => void)[]) => finalizedSet(pinned(node), ...mods);

/**
 * The main as the reference's `migMainPod` builds it: bound to `node` ('' = unscheduled), with VM id `vmid`
 * when given, and a running container when `running` (Ready too, so the normal flow after a "not handled"
 * derives Running).
 */
function migMain(cs: CocoonSet, node: string, vmid: string, running: boolean): V1Pod {
  const p = buildAgentPod(cs, 0, '', '');
  if (node !== '') p.spec!.nodeName = node;
  if (vmid !== '') annotate(p, { [Annotations.vmID]: vmid });
  if (running) {
    readyPod(p);
    p.status!.containerStatuses = [
      { name: 'agent', image: 'x', imageID: '', ready: true, restartCount: 0, state: { running: {} } },
    ];
  }
  return p;
}
const hibernating = (p: V1Pod) => annotate(p, { [Annotations.hibernate]: 'true' });
const restoreMarked = (p: V1Pod) => annotate(p, { [Annotations.restoreFromHibernate]: 'true' });
const requiredHosts = (p: V1Pod) =>
  p.spec!.affinity?.nodeAffinity?.requiredDuringSchedulingIgnoredDuringExecution?.nodeSelectorTerms;
const pinTerm = (node: string) => [
  { matchExpressions: [{ key: Labels.hostname, operator: 'In', values: [node] }] },
];
/** Actions the pass took beyond status writes (what "nothing else done" means). */
const effects = (w: PlanWorld) => w.log.filter((a) => a.type !== 'patchStatus').map((a) => a.id);

describe('migration', () => {
  it('no pin: not handled, no probe; the normal flow runs (MigrationNoopWithoutNodeName)', async () => {
    const cs = migSet('');
    const w = new PlanWorld(cs, [migMain(cs, 'node-a', 'vmid-1', true)]);
    w.probeError = 'registry down';
    expect(done(await w.pass()).result).toEqual(SETTLED);
    expect([w.probes, w.asks, w.droppedTags, w.ids('deletePod')]).toEqual([[], [], [], []]);
    expect(w.cs.status?.phase).toBe('Running');
  });

  it('settled on the pin (on it, live, not hibernating): not handled, no probe (MigrationNoopWhenSettledOnTarget)', async () => {
    const cs = migSet('node-b');
    const w = new PlanWorld(cs, [migMain(cs, 'node-b', 'vmid-1', true)]);
    expect(done(await w.pass()).result).toEqual(SETTLED);
    expect([w.probes, w.asks, w.droppedTags, w.ids('deletePod')]).toEqual([[], [], [], []]);
    expect(w.cs.status?.phase).toBe('Running');
  });

  it('a main live on another node than the pin, no tag: Migrating written first, then its VM workflow asked to hibernate it; 5 s (MigrationStartsHibernateOnWrongNode)', async () => {
    const cs = migSet('node-b');
    const w = new PlanWorld(cs, [migMain(cs, 'node-a', 'vmid-1', true)]);
    expect(done(await w.pass()).result).toEqual(OK_5S);
    expect(w.cs.status?.phase).toBe('Migrating');
    expect(w.asks).toEqual([{ pod: 'demo-0', desire: 'Hibernate' }]);
    // Ours first: the namespace's limits, read before a migration starts (it replaces the main).
    expect(w.ids()).toEqual([
      'namespace-limits',
      `migrate-probe:${VM}`,
      'status-migrating',
      'ask:Hibernate:demo-0',
    ]);
    expect([w.droppedTags, w.ids('deletePod'), w.ids('createPod')]).toEqual([[], [], []]);
  });

  it('a CocoonHibernation holding the main awake (the VM workflow reported the conflict): Migrating with Progressing=False DesireConflict naming it; gone once the conflict is (ours: the reference says only Migrating)', async () => {
    const cs = migSet('node-b', phase('Migrating'));
    const w = new PlanWorld(cs, [migMain(cs, 'node-a', 'vmid-1', true)]);
    const held = 'VM vk-ns-demo-0 is held by cocoonhibernation keep (desire Wake, older)';
    expect(done(await w.pass({ desireConflicts: { 'demo-0': held } })).result).toEqual(OK_5S);
    const progressing = () => w.cs.status?.conditions?.find((c) => c.type === 'Progressing');
    expect([
      w.cs.status?.phase,
      progressing()?.status,
      progressing()?.reason,
      progressing()?.message,
    ]).toEqual(['Migrating', 'False', 'DesireConflict', `pod demo-0: ${held}`]);
    expect(w.asks).toEqual([{ pod: 'demo-0', desire: 'Hibernate' }]);
    done(await w.pass());
    expect([w.cs.status?.phase, progressing()?.reason]).not.toContain('DesireConflict');

    const legacy = new PlanWorld(cs, [migMain(cs, 'node-a', 'vmid-1', true)]);
    done(await legacy.pass({ desireConflicts: { 'demo-0': held }, migrationShowsConflict: false }));
    expect(legacy.cs.status?.conditions?.find((c) => c.type === 'Progressing')?.reason).not.toBe(
      'DesireConflict',
    );
  });

  it('a pin no node can have (not a label value, e.g. Bad_Node!): InvalidSpec on Progressing, no probe, no ask, the live main untouched (deliberate difference: the CRD accepts it and the reference deletes the old main before the new one’s create fails with 422)', async () => {
    const cs = migSet('Bad_Node!');
    const w = new PlanWorld(cs, [migMain(cs, 'node-a', 'vmid-1', true)]);
    done(await w.pass());
    const progressing = w.cs.status?.conditions?.find((c) => c.type === 'Progressing');
    expect([progressing?.status, progressing?.reason]).toEqual(['False', 'InvalidSpec']);
    expect(progressing?.message).toContain('Invalid value: "Bad_Node!"');
    expect(progressing?.message).toContain('(from spec.nodeName)');
    expect([w.probes, w.asks, w.ids('deletePod'), w.ids('createPod')]).toEqual([[], [], [], []]);
    expect(w.pods.has('demo-0')).toBe(true);

    const legacy = new PlanWorld(cs, [migMain(cs, 'node-a', 'vmid-1', true)]);
    done(await legacy.pass({ validatesPin: false }));
    expect(legacy.asks).toEqual([{ pod: 'demo-0', desire: 'Hibernate' }]);
  });

  it('the snapshot landed (old main hibernating, vk reports it hibernated, tag present): deletes the old main, keeps the tag; Migrating (MigrationDeletesOldPodAfterSnapshotLands)', async () => {
    const cs = migSet('node-b');
    const w = new PlanWorld(cs, [lifecycleHibernated(hibernating(migMain(cs, 'node-a', '', false)))]);
    w.tags.add(TAG);
    expect(done(await w.pass()).result).toEqual(OK_5S);
    expect(w.pods.has('demo-0')).toBe(false);
    expect(w.ids('deletePod')).toEqual(['delete:demo-0']);
    expect([w.droppedTags, w.tags.has(TAG)]).toEqual([[], true]);
    expect(w.cs.status?.phase).toBe('Migrating');
  });

  it('the old main asked to hibernate while vk still pushes (lifecycle hibernating, VM running) and a tag in: the pod is kept until vk reports hibernated, then deleted; Migrating, 5 s (deliberate difference: the reference deletes on the request and the tag, which may be an earlier round’s; found by the flows-crash e2e)', async () => {
    const cs = migSet('node-b');
    const main = hibernating(migMain(cs, 'node-a', 'vmid-1', true));
    annotate(main, {
      [Annotations.lifecycleState]: 'hibernating',
      [Annotations.lifecycleObservedGeneration]: '1',
      [Annotations.cocoonSetGeneration]: '1',
    });
    const w = new PlanWorld(cs, [main]);
    w.tags.add(TAG);
    expect(done(await w.pass()).result).toEqual(OK_5S);
    expect([w.ids('deletePod'), w.droppedTags, w.pods.has('demo-0')]).toEqual([[], [], true]);
    expect(w.cs.status?.phase).toBe('Migrating');
    // vk's `hibernated` for an older generation stamp than the pod's is an earlier round's: still kept.
    annotate(w.pods.get('demo-0')!, {
      [Annotations.lifecycleState]: 'hibernated',
      [Annotations.cocoonSetGeneration]: '2',
    });
    expect(done(await w.pass()).result).toEqual(OK_5S);
    expect(w.ids('deletePod')).toEqual([]);
    annotate(w.pods.get('demo-0')!, { [Annotations.lifecycleObservedGeneration]: '2' });
    expect(done(await w.pass()).result).toEqual(OK_5S);
    expect([w.ids('deletePod'), w.droppedTags, w.tags.has(TAG)]).toEqual([['delete:demo-0'], [], true]);
  });

  it('without migration-waits-for-quiesce (a run an older version started): the old main mid-round is deleted on the request and the tag, as the reference', async () => {
    const cs = migSet('node-b');
    const main = hibernating(migMain(cs, 'node-a', 'vmid-1', true));
    annotate(main, { [Annotations.lifecycleState]: 'hibernating' });
    const w = new PlanWorld(cs, [main]);
    w.tags.add(TAG);
    expect(done(await w.pass({ migrationWaitsForQuiesce: false })).result).toEqual(OK_5S);
    expect(w.ids('deletePod')).toEqual(['delete:demo-0']);
  });

  it('no main, tag present: recreates it restoring from the tag, with the required affinity to the target; Migrating (MigrationRecreatesOnTargetWithRestoreAnnotation)', async () => {
    const w = new PlanWorld(migSet('node-b'));
    w.tags.add(TAG);
    expect(done(await w.pass()).result).toEqual(OK_5S);
    const pod = w.pod('demo-0')!;
    expect(pod.metadata!.annotations![Annotations.restoreFromHibernate]).toBe('true');
    expect(requiredHosts(pod)).toEqual(pinTerm('node-b'));
    expect(pod.spec!.nodeName).toBeUndefined();
    expect(w.ids('createPod')).toEqual(['create:demo-0']);
    expect([w.droppedTags, w.tags.has(TAG)]).toEqual([[], true]);
    expect(w.cs.status?.phase).toBe('Migrating');
  });

  it("deliberate (restoresCheckSnapshotImage; before it the restore pod named the new image over the old VM's snapshot): no main, tag present, the agent image edited since the snapshot: no create, Migrating with SnapshotImageMismatch naming the snapshot's image, 30 s", async () => {
    const w = new PlanWorld(migSet('node-b', (c) => (c.spec.agent.image = 'cocoonstack/ubuntu:26.04')));
    w.tags.add(TAG);
    w.snapshotImages.set(VM, 'cocoonstack/ubuntu:24.04');
    expect(done(await w.pass()).result.requeueAfterMs).toBe(30_000);
    expect(w.ids('createPod')).toEqual([]);
    expect(w.cs.status?.phase).toBe('Migrating');
    const c = w.cs.status?.conditions?.find((x) => x.type === 'Progressing');
    expect(c?.reason).toBe('SnapshotImageMismatch');
    expect(c?.message).toContain('set spec.agent.image back to cocoonstack/ubuntu:24.04');
    expect([w.droppedTags, w.tags.has(TAG)]).toEqual([[], true]);
    // The same image: the restore goes ahead.
    w.snapshotImages.set(VM, 'cocoonstack/ubuntu:26.04');
    done(await w.pass());
    expect(w.ids('createPod')).toEqual(['create:demo-0']);
  });

  it('Migrating while the restore runs on the target (no VM id, not running): Migrating, 5 s; no tag dropped (MigrationWaitsWhileRestoring)', async () => {
    const cs = migSet('node-b', phase('Migrating'));
    const w = new PlanWorld(cs, [migMain(cs, 'node-b', '', false)]);
    w.tags.add(TAG);
    expect(done(await w.pass()).result).toEqual(OK_5S);
    expect(w.cs.status?.phase).toBe('Migrating');
    expect([w.droppedTags, w.tags.has(TAG), w.asks]).toEqual([[], true, []]);
  });

  it('Migrating, the main on the target still running while vk hibernates it (lifecycle hibernating: a re-target back during the push): keeps the tag the coming wake restores from; Migrating, 5 s (ours: the reference drops it on vmLive)', async () => {
    const cs = migSet('node-b', phase('Migrating'));
    const mid = annotate(migMain(cs, 'node-b', 'vmid-old', true), {
      [Annotations.lifecycleState]: 'hibernating',
    });
    const w = new PlanWorld(cs, [mid]);
    w.tags.add(TAG);
    expect(done(await w.pass()).result).toEqual(OK_5S);
    expect([w.droppedTags, w.tags.has(TAG), w.cs.status?.phase]).toEqual([[], true, 'Migrating']);
    const legacy = new PlanWorld(cs, [mid]);
    legacy.tags.add(TAG);
    done(await legacy.pass({ wakeWaitsForHibernateRound: false }));
    expect(legacy.droppedTags).toEqual([TAG]);
  });

  it('Migrating, the main restored and live on the target: drops the tag; Migrating, 5 s (MigrationDropsSnapshotWhenRestored)', async () => {
    const cs = migSet('node-b', phase('Migrating'));
    const w = new PlanWorld(cs, [migMain(cs, 'node-b', 'vmid-new', true)]);
    w.tags.add(TAG);
    expect(done(await w.pass()).result).toEqual(OK_5S);
    expect(w.droppedTags).toEqual([TAG]);
    expect(w.wokenBySet).toEqual(['demo-0']);
    expect(w.tags.has(TAG)).toBe(false);
    expect(w.cs.status?.phase).toBe('Migrating');
    // The next pass finds no tag and hands back to the normal flow.
    done(await w.pass());
    expect(w.cs.status?.phase).toBe('Running');
    expect(w.droppedTags).toEqual([TAG]);
  });

  it('does not delete the recreated restore pod while it is unscheduled (empty nodeName, no VM id) (MigrationDoesNotDeleteRecreatedRestorePod)', async () => {
    const cs = migSet('node-b', phase('Migrating'));
    const w = new PlanWorld(cs, [migMain(cs, '', '', false)]);
    w.tags.add(TAG);
    expect(done(await w.pass()).result).toEqual(OK_5S);
    expect(w.pods.has('demo-0')).toBe(true);
    expect([w.ids('deletePod'), w.droppedTags, w.asks]).toEqual([[], [], []]);
    expect(w.cs.status?.phase).toBe('Migrating');
  });

  it('the completion drop failing (registry 503) keeps the set Migrating with the error, and the next pass drops the tag (deliberate difference: the reference writes the derived phase, a main live on the pin no longer engages the migration, and the tag stays for a later recreate to restore)', async () => {
    const cs = migSet('node-b', phase('Migrating'));
    const w = new PlanWorld(cs, [migMain(cs, 'node-b', 'vmid-new', true)]);
    w.tags.add(TAG);
    w.failures.set(`drop-tag:${VM}`, 'registry answered 503');
    const end = done(await w.pass());
    expect(end.result.error).toBe(`migrate: drop hibernate snapshot ${VM}: registry answered 503`);
    expect(w.cs.status?.phase).toBe('Migrating');
    const progressing = w.cs.status?.conditions?.find((c) => c.type === 'Progressing');
    expect(progressing?.reason).toBe('ReconcileFailed');
    expect(w.tags.has(TAG)).toBe(true);
    w.failures.clear();
    expect(done(await w.pass()).result).toEqual(OK_5S);
    expect(w.tags.has(TAG)).toBe(false);
    done(await w.pass());
    expect(w.cs.status?.phase).toBe('Running');

    // A run an older version started: the derived phase, and the migration never comes back for the tag.
    const legacy = new PlanWorld(cs, [migMain(cs, 'node-b', 'vmid-new', true)]);
    legacy.tags.add(TAG);
    legacy.failures.set(`drop-tag:${VM}`, 'registry answered 503');
    done(await legacy.pass({ migrationFailureKeepsPhase: false, blockKeepsFlowPhase: false }));
    expect(legacy.cs.status?.phase).toBe('Running');
    legacy.failures.clear();
    done(await legacy.pass({ migrationFailureKeepsPhase: false, blockKeepsFlowPhase: false }));
    expect(legacy.tags.has(TAG)).toBe(true);
  });

  it('a fresh main no node took (a set created with a mistyped pin): once the pin is fixed or cleared it is deleted and created again on the new pin; a bound main and a main on its pin are left to the migration and the normal flow (deliberate difference: drift does not compare the pin, so the reference leaves it Pending for ever)', async () => {
    for (const next of ['node-b', '']) {
      const typo = migSet('nodeb');
      const cs = migSet('nodeb', phase('Pending'));
      if (next === '') delete cs.spec.nodeName;
      else cs.spec.nodeName = next;
      const w = new PlanWorld(cs, [migMain(typo, '', '', false)]);
      expect(done(await w.pass()).result.requeue, next).toBe(true);
      expect(w.ids('deletePod'), next).toEqual(['delete:demo-0']);
      done(await w.pass());
      const rebuilt = w.pod('demo-0')!;
      expect(requiredHosts(rebuilt), next).toEqual(next === '' ? undefined : pinTerm(next));
      expect(rebuilt.metadata?.annotations?.[Annotations.restoreFromHibernate], next).toBeUndefined();
      // On its pin, unbound: Pending, nothing deleted.
      expect(done(await w.pass()).result, next).toEqual(PENDING_5S);
      expect([w.ids('deletePod'), w.cs.status?.phase], next).toEqual([['delete:demo-0'], 'Pending']);

      const legacy = new PlanWorld(cs, [migMain(typo, '', '', false)]);
      expect(done(await legacy.pass({ unboundMainFollowsPin: false })).result, next).toEqual(PENDING_5S);
      expect(legacy.ids('deletePod'), next).toEqual([]);
    }
    // A main a node took with its VM running is the migration's (a pin change moves it with its state).
    const before = migSet('node-a');
    const live = new PlanWorld(migSet('node-b', phase('Running')), [migMain(before, 'node-a', 'vm-1', true)]);
    done(await live.pass());
    expect([live.ids('deletePod'), live.cs.status?.phase, live.asks]).toEqual([
      [],
      'Migrating',
      [{ pod: 'demo-0', desire: 'Hibernate' }],
    ]);
  });

  it('a restore main no node took (unbound, pinned to a node that never takes it): Migrating with Progressing=False Unschedulable and the scheduler message; after the pin moved: deleted, then rebuilt pinned to the new node, the tag kept; after the pin is cleared: rebuilt unpinned (deliberate difference: the reference leaves it Pending for ever)', async () => {
    for (const next of ['node-b', '']) {
      const cs = migSet('ghost-node', phase('Migrating'));
      const stuck = restoreMarked(migMain(cs, '', '', false));
      stuck.status = {
        conditions: [
          {
            type: 'PodScheduled',
            status: 'False',
            reason: 'Unschedulable',
            message: '0/1 nodes are available',
          },
        ],
      };
      const w = new PlanWorld(cs, [stuck]);
      w.tags.add(TAG);
      // On its pin it waits, and says why and how to get out of it.
      expect(done(await w.pass()).result).toEqual(OK_5S);
      const progressing = w.cs.status?.conditions?.find((c) => c.type === 'Progressing');
      expect([w.cs.status?.phase, progressing?.status, progressing?.reason, progressing?.message]).toEqual([
        'Migrating',
        'False',
        'Unschedulable',
        'main pod demo-0 unschedulable: 0/1 nodes are available (change or clear spec.nodeName to move it)',
      ]);
      expect(w.ids('deletePod')).toEqual([]);
      if (next === '') delete w.cs.spec.nodeName;
      else w.cs.spec.nodeName = next;
      expect(done(await w.pass()).result).toEqual(OK_5S);
      expect(w.ids('deletePod')).toEqual(['delete:demo-0']);
      expect([w.pods.has('demo-0'), w.tags.has(TAG), w.cs.status?.phase]).toEqual([false, true, 'Migrating']);
      expect(done(await w.pass()).result).toEqual(OK_5S);
      const rebuilt = w.pod('demo-0')!;
      expect(rebuilt.metadata?.annotations?.[Annotations.restoreFromHibernate]).toBe('true');
      expect(requiredHosts(rebuilt)).toEqual(next === '' ? undefined : pinTerm(next));
      expect(w.droppedTags).toEqual([]);
      // Unbound on its current pin: it waits (MigrationDoesNotDeleteRecreatedRestorePod).
      expect(done(await w.pass()).result).toEqual(OK_5S);
      expect(w.ids('deletePod')).toEqual(['delete:demo-0']);

      const legacy = new PlanWorld(cs, [restoreMarked(migMain(cs, '', '', false))]);
      legacy.tags.add(TAG);
      legacy.cs.spec.nodeName = 'node-b';
      done(await legacy.pass({ migrationFollowsPin: false }));
      expect(legacy.ids('deletePod')).toEqual([]);
    }
  });

  it('a restore pod the namespace would not admit (a LimitRange lowered since the main was created): ExceedsNamespaceLimits, the live main neither asked to hibernate nor deleted, no Migrating (deliberate difference: found by a new-user run, the reference hibernated and deleted it and the restore create was refused)', async () => {
    const cs = migSet('node-b', (c) => {
      c.spec.agent.resources = { limits: { memory: '4Gi' } };
    });
    const w = new PlanWorld(cs, [migMain(cs, 'node-a', 'vmid-1', true)]);
    w.limits = {
      limitRanges: [{ name: 'max', limits: [{ type: 'Container', max: { memory: '2Gi' } }] }],
      quotas: [],
    };
    done(await w.pass());
    expect([w.asks, w.ids('deletePod'), w.cs.status?.phase]).toEqual([[], [], 'Running']);
    expect(w.cs.status?.conditions?.find((c) => c.type === 'Progressing')).toMatchObject({
      reason: 'ExceedsNamespaceLimits',
    });
  });

  it('a probe error fails the pass with the migration prefix; nothing else done (MigrationProbeErrorIsHandled)', async () => {
    const cs = migSet('node-b');
    const w = new PlanWorld(cs, [migMain(cs, 'node-a', 'vmid-1', true)]);
    w.probeError = 'boom';
    const end = done(await w.pass());
    expect(end.result.error).toBe(`migrate: probe hibernate snapshot ${VM}: boom`);
    expect(effects(w)).toEqual(['namespace-limits', `migrate-probe:${VM}`]);
    expect([w.asks, w.droppedTags]).toEqual([[], []]);
    expect(w.pods.has('demo-0')).toBe(true);
    expect(w.cs.status?.phase).not.toBe('Migrating');
  });

  it('a tag the set’s own hibernate request made is not stale, though the pass read the pod before its annotation: kept, Migrating, 5 s (deliberate difference: found by the crash e2e, the reference drops the only copy)', async () => {
    const cs = migSet('node-b');
    const main = migMain(cs, 'node-a', 'vmid-1', true);
    main.metadata!.uid = 'uid-main';
    const w = new PlanWorld(cs, [main]);
    w.tags.add(TAG);
    expect(done(await w.pass({ hibernateAsked: { 'demo-0': 'uid-main' } })).result).toEqual(OK_5S);
    expect([w.droppedTags, w.ids('deletePod'), w.cs.status?.phase]).toEqual([[], [], 'Migrating']);
    // A request made for another incarnation of the pod does not count.
    done(await w.pass({ hibernateAsked: { 'demo-0': 'uid-older' } }));
    expect(w.droppedTags).toEqual([TAG]);
  });

  it('a stale tag (main live on another node, not hibernating): drops the tag, the live main survives; Migrating (MigrationDropsStaleTagInsteadOfDeletingLivePod)', async () => {
    const cs = migSet('node-b');
    const w = new PlanWorld(cs, [migMain(cs, 'node-a', 'vmid-1', true)]);
    w.tags.add(TAG);
    expect(done(await w.pass()).result).toEqual(OK_5S);
    expect(w.pods.has('demo-0')).toBe(true);
    expect(w.ids('deletePod')).toEqual([]);
    expect(w.droppedTags).toEqual([TAG]);
    expect(w.cs.status?.phase).toBe('Migrating');
    // Start over: the next pass (no tag) quiesces the main for the move.
    done(await w.pass());
    expect(w.asks).toEqual([{ pod: 'demo-0', desire: 'Hibernate' }]);
  });

  it('re-target back (main hibernating on the pin, tag present, no CR): its VM workflow asked to wake it in place and to leave the tag to the migration (one DELETE per wake); no tag dropped yet (MigrationWakesInPlaceOnRetargetBack)', async () => {
    const cs = migSet('node-b');
    const w = new PlanWorld(cs, [hibernating(migMain(cs, 'node-b', '', false))]);
    w.tags.add(TAG);
    expect(done(await w.pass()).result).toEqual(OK_5S);
    expect(w.asks).toEqual([{ pod: 'demo-0', desire: 'Wake', keepTag: true }]);
    expect([w.droppedTags, w.tags.has(TAG), w.ids('deletePod'), w.ids('createPod')]).toEqual([
      [],
      true,
      [],
      [],
    ]);
    expect(w.lists).toBe(1);
    expect(w.cs.status?.phase).toBe('Migrating');
  });

  it('a main a CocoonHibernation keeps hibernated on the pin: not handled, no probe, no error; un-suspend (set desires) asks its VM workflow to wake, which decides; the pod stays hibernating (MigrationLeavesCRHibernationAlone)', async () => {
    const cs = migSet('node-b');
    const w = new PlanWorld(cs, [hibernating(migMain(cs, 'node-b', '', false))]);
    w.crs = [hibernation('demo-0', 'Hibernate')];
    w.probeError = 'boom';
    const end = done(await w.pass());
    expect(end.result).toEqual(PENDING_5S);
    expect(w.probes).toEqual([]);
    expect(w.lists).toBe(1);
    expect(w.cs.status?.phase).toBe('Pending');
    // Not migration's ask: step 11 (un-suspend) asks every hibernating pod's VM workflow to wake; the VM
    // workflow knows the CocoonHibernation and keeps the VM hibernated (the world changes nothing).
    expect(w.asks).toEqual([{ pod: 'demo-0', desire: 'Wake' }]);
    expect(w.pod('demo-0')!.metadata!.annotations![Annotations.hibernate]).toBe('true');
    expect([w.droppedTags, w.ids('deletePod'), w.ids('createPod')]).toEqual([[], [], []]);
    // Without set desires, un-suspend skips the CR-owned pod itself: the annotation is never touched.
    const legacy = new PlanWorld(cs, [hibernating(migMain(cs, 'node-b', '', false))]);
    legacy.crs = [hibernation('demo-0', 'Hibernate')];
    legacy.probeError = 'boom';
    expect(done(await legacy.pass({ setDesires: false })).result.error).toBeUndefined();
    expect([legacy.probes, legacy.asks, legacy.ids('patchPodAnnotations'), legacy.lists]).toEqual([
      [],
      [],
      [],
      1,
    ]);
    expect(legacy.pod('demo-0')!.metadata!.annotations![Annotations.hibernate]).toBe('true');
  });

  it('the pin cleared mid-migration, no main, tag present: recreates it restoring, with no affinity; Migrating (MigrationFinishesAbortedRestore)', async () => {
    const w = new PlanWorld(migSet('', phase('Migrating')));
    w.tags.add(TAG);
    expect(done(await w.pass()).result).toEqual(OK_5S);
    const pod = w.pod('demo-0')!;
    expect(pod.metadata!.annotations![Annotations.restoreFromHibernate]).toBe('true');
    expect(pod.spec!.affinity).toBeUndefined();
    expect(pod.spec!.nodeName).toBeUndefined();
    expect([w.droppedTags, w.tags.has(TAG)]).toEqual([[], true]);
    expect(w.cs.status?.phase).toBe('Migrating');
  });

  it('settled on the pin: a broken registry is never probed, no error (MigrationSkipsProbeWhenSettled)', async () => {
    const cs = migSet('node-b');
    const w = new PlanWorld(cs, [migMain(cs, 'node-b', 'vmid-1', true)]);
    w.probeError = 'boom';
    const end = done(await w.pass());
    expect(end.result).toEqual(SETTLED);
    expect(w.probes).toEqual([]);
  });

  it('a CR wake on the target without Migrating (not hibernating, no VM id, not running, tag present): not handled, no tag dropped (MigrationDisengagesFromCRWakeWindow)', async () => {
    const cs = migSet('node-b');
    const w = new PlanWorld(cs, [migMain(cs, 'node-b', '', false)]);
    w.tags.add(TAG);
    expect(done(await w.pass()).result).toEqual(PENDING_5S);
    expect(w.probes).toEqual([VM]);
    expect([w.droppedTags, w.tags.has(TAG), w.asks]).toEqual([[], true, []]);
    expect(w.cs.status?.phase).toBe('Pending');
  });

  it('a re-target while the restore pod still pulls the tag (restore-marked on the old pin, not live, not hibernating): keeps the tag; Migrating, 5 s (deliberate difference: the reference drops it as stale, the only copy)', async () => {
    const cs = migSet('node-b', phase('Migrating'));
    const w = new PlanWorld(cs, [restoreMarked(migMain(cs, 'node-b', '', false))]);
    w.tags.add(TAG);
    w.cs.spec.nodeName = 'node-c';
    expect(done(await w.pass()).result).toEqual(OK_5S);
    expect([w.droppedTags, w.tags.has(TAG)]).toEqual([[], true]);
    expect([w.ids('deletePod'), w.asks]).toEqual([[], []]);
    expect(w.cs.status?.phase).toBe('Migrating');
  });

  it('a live CocoonHibernation needing the tag keeps it, for the stale-tag drop and for the completion drop; Migrating (deliberate difference: the reference drops unconditionally)', async () => {
    // Stale tag: main live on another node, not hibernating.
    const cs = migSet('node-b');
    const stale = new PlanWorld(cs, [migMain(cs, 'node-a', 'vmid-1', true)]);
    stale.tags.add(TAG);
    stale.crs = [hibernation('demo-0', 'Hibernate')];
    expect(done(await stale.pass()).result).toEqual(OK_5S);
    expect([stale.droppedTags, stale.tags.has(TAG), stale.lists]).toEqual([[], true, 1]);
    expect([stale.pods.has('demo-0'), stale.ids('deletePod')]).toEqual([true, []]);
    expect(stale.cs.status?.phase).toBe('Migrating');
    // Completion: Migrating, the main live on the target.
    const csDone = migSet('node-b', phase('Migrating'));
    const completion = new PlanWorld(csDone, [migMain(csDone, 'node-b', 'vmid-new', true)]);
    completion.tags.add(TAG);
    completion.crs = [hibernation('demo-0', 'Hibernate')];
    expect(done(await completion.pass()).result).toEqual(OK_5S);
    expect([completion.droppedTags, completion.tags.has(TAG)]).toEqual([[], true]);
    expect(completion.cs.status?.phase).toBe('Migrating');
    // A CR being deleted no longer holds the tag.
    const deleting = hibernation('demo-0', 'Hibernate');
    deleting.metadata!.deletionTimestamp = new Date('2026-05-14T00:59:00Z');
    const released = new PlanWorld(csDone, [migMain(csDone, 'node-b', 'vmid-new', true)]);
    released.tags.add(TAG);
    released.crs = [deleting];
    done(await released.pass());
    expect(released.droppedTags).toEqual([TAG]);
  });

  it('a pinned released set (Suspended, hint node-a, pin node-b, no pods, tag): migration restores it pinned; once live and the tag dropped, the wake clears the hint and scores placement pool (ours)', async () => {
    const cs = finalizedSet((c) => {
      c.spec.hibernatePolicy = 'release';
      c.metadata.generation = 1;
      c.spec.nodeName = 'node-b';
      c.metadata.annotations = { [Annotations.hibernatedOnNode]: 'node-a' };
    }, phase('Suspended'));
    const w = new PlanWorld(cs);
    w.tags.add(TAG);
    // Pass 1: migration takes it before the wake, restoring to the pin.
    expect(done(await w.pass()).result).toEqual(OK_5S);
    const pod = w.pod('demo-0')!;
    expect(pod.metadata!.annotations![Annotations.restoreFromHibernate]).toBe('true');
    expect(requiredHosts(pod)).toEqual(pinTerm('node-b'));
    expect(pod.spec!.affinity!.nodeAffinity!.preferredDuringSchedulingIgnoredDuringExecution).toBeUndefined();
    expect(w.cs.status?.phase).toBe('Migrating');
    expect(w.ids('probeHibernate')).toEqual([`migrate-probe:${VM}`]);
    expect(w.cs.metadata.annotations?.[Annotations.hibernatedOnNode]).toBe('node-a');
    // vk-cocoon binds it to node-b and restores the VM.
    const bound = w.pod('demo-0')!;
    bound.spec!.nodeName = 'node-b';
    annotate(readyPod(bound), { [Annotations.vmID]: 'vmid-new' });
    bound.status!.containerStatuses = [
      { name: 'agent', image: 'x', imageID: '', ready: true, restartCount: 0, state: { running: {} } },
    ];
    // Pass 2: live on the target, migration drops the tag.
    expect(done(await w.pass()).result).toEqual(OK_5S);
    expect(w.droppedTags).toEqual([TAG]);
    expect(w.cs.status?.phase).toBe('Migrating');
    expect(w.metrics.filter((m) => m.metric === 'slotReleaseWakeTotal')).toEqual([]);
    // Pass 3: Migrating, no tag: migration hands to the wake's cleanup (restore-marked, hint set). The wake
    // deletes the (already absent) tag once more: a no-op registry delete.
    const before = w.log.length;
    const end = done(await w.pass());
    expect(end.result).toEqual({ requeue: true, requeueAfterMs: 0, error: undefined });
    expect(w.ids().slice(before)).toEqual([
      `migrate-probe:${VM}`,
      'list-hibernations',
      `drop-tag:${VM}`,
      'metric:slotReleaseWakeTotal',
      'clear-hint',
      'status',
    ]);
    expect(w.droppedTags).toEqual([TAG, TAG]);
    expect(w.cs.metadata.annotations?.[Annotations.hibernatedOnNode]).toBeUndefined();
    expect(w.metrics.filter((m) => m.metric === 'slotReleaseWakeTotal')).toEqual([
      { metric: 'slotReleaseWakeTotal', labels: { namespace: 'ns', cocoonset: 'demo', placement: 'pool' } },
    ]);
    expect(w.cs.status?.phase).toBe('Running');
    // Pass 4: settled on the pin, no hint: nothing to do.
    const settled = w.log.length;
    expect(done(await w.pass()).result).toEqual(SETTLED);
    expect(w.ids().slice(settled)).toEqual([]);
  });
});
