/**
 * Restore intent (port of restore_test.go and the pure parts of restore_intent_test.go,
 * docs/cocoonset.md#restore-from-hibernation).
 */
import { describe, expect, it } from 'vitest';
import {
  Annotations,
  CONDITION_DELETE_FAILING,
  CONDITION_PROGRESSING,
  ConditionReasons,
} from '../../src/api/keys.js';
import type { CocoonSet } from '../../src/api/types.js';
import { buildAgentPod, buildToolboxPod } from '../../src/cocoonset/pods.js';
import {
  lazyOnce,
  markRestoreIfHibernated,
  podsHibernatedByCR,
  podsRestorableByCR,
  podsWithSpentTagByCR,
} from '../../src/cocoonset/restore.js';
import { hibernation, newCocoonSet, readyPod, withFinalizer } from '../support/builders.js';
import { done, PlanWorld } from './plan-world.js';

const podWithVM = () => {
  const p = buildAgentPod(newCocoonSet(), 0, '', '');
  p.metadata!.annotations![Annotations.vmName] = 'vm';
  return p;
};
const marked = (p: ReturnType<typeof podWithVM>) =>
  p.metadata!.annotations![Annotations.restoreFromHibernate];

describe('markRestoreIfHibernated', () => {
  it('without intent: nothing set and no probe asked for', async () => {
    const p = podWithVM();
    expect(markRestoreIfHibernated(p, false, true)).toEqual({ kind: 'asBuilt' });
    expect(markRestoreIfHibernated(p, false, true, { present: true })).toEqual({ kind: 'asBuilt' });
    expect(marked(p)).toBeUndefined();
  });

  it('with intent: asks for the probe of <vm>:hibernate, then marks when present', async () => {
    const p = podWithVM();
    expect(markRestoreIfHibernated(p, true, true)).toEqual({ kind: 'probe', vmName: 'vm' });
    expect(markRestoreIfHibernated(p, true, true, { present: true })).toEqual({ kind: 'restore' });
    expect(marked(p)).toBe('true');
  });

  it('with intent and the tag absent: fresh boot, not marked', async () => {
    const p = podWithVM();
    expect(markRestoreIfHibernated(p, true, true, { present: false })).toEqual({ kind: 'fresh' });
    expect(marked(p)).toBeUndefined();
  });

  it('with intent and a probe error: fails closed, not marked', async () => {
    const p = podWithVM();
    expect(markRestoreIfHibernated(p, true, true, { error: 'boom' })).toEqual({
      kind: 'error',
      message: 'probe hibernate snapshot vm: boom',
    });
    expect(marked(p)).toBeUndefined();
  });

  it('without a registry: no error, not marked, no probe', async () => {
    const p = podWithVM();
    expect(markRestoreIfHibernated(p, true, false)).toEqual({ kind: 'asBuilt' });
    expect(marked(p)).toBeUndefined();
  });
});

describe('who has intent', () => {
  it('only Hibernated and Waking CRs give restore intent, whatever the desire', async () => {
    const crs = (['Hibernated', 'Waking', 'Active', 'Hibernating'] as const).map((ph) =>
      hibernation(ph.toLowerCase(), 'Hibernate', ph),
    );
    crs.push(hibernation('', 'Hibernate', 'Hibernated'), hibernation('wake-desire', 'Wake', 'Hibernated'));
    expect([...podsRestorableByCR(crs)].sort()).toEqual(['hibernated', 'wake-desire', 'waking']);
  });

  it('un-suspend skips pods whose CR wants Hibernate or is mid-Hibernating', async () => {
    const crs = [
      hibernation('a', 'Hibernate', 'Active'),
      hibernation('b', 'Wake', 'Hibernating'),
      hibernation('c', 'Wake', 'Hibernated'),
      hibernation('d', 'Hibernate'),
    ];
    expect([...podsHibernatedByCR(crs)].sort()).toEqual(['a', 'b', 'd']);
  });
});

describe('lazyOnce (the per-pass intent memo)', () => {
  it('runs once and caches the value', async () => {
    let calls = 0;
    const f = lazyOnce(async () => ++calls);
    expect([await f(), await f()]).toEqual([1, 1]);
    expect(calls).toBe(1);
  });

  it('caches the error too: no retry within the pass', async () => {
    let calls = 0;
    const f = lazyOnce(async () => {
      calls++;
      throw new Error('list failed');
    });
    await expect(f()).rejects.toThrow('list failed');
    await expect(f()).rejects.toThrow('list failed');
    expect(calls).toBe(1);
  });
});

describe('restore through the pass planner', () => {
  it('restores a hibernated toolbox on recreate (no UID, empty classification)', async () => {
    const cs = newCocoonSet('demo', withFinalizer, (c) => {
      delete c.metadata.uid;
      c.spec.toolboxes = [{ name: 'tb', mode: 'run' }];
    });
    const main = readyPod(buildAgentPod(cs, 0, '', ''));
    const w = new PlanWorld(cs, [main]);
    w.crs = [hibernation('demo-tb', 'Hibernate', 'Hibernated')];
    w.tags.add('vk-ns-demo-tb:hibernate');
    expect(done(await w.pass()).result).toEqual({ requeue: true, requeueAfterMs: 0, error: undefined });
    expect(w.pod('demo-tb')!.metadata!.annotations![Annotations.restoreFromHibernate]).toBe('true');
    expect(w.probes).toEqual(['vk-ns-demo-tb']);
  });

  it('restores the main when its CR is Hibernated and the tag exists; a probe error creates nothing', async () => {
    const cs = newCocoonSet('demo', withFinalizer);
    const w = new PlanWorld(cs);
    w.crs = [hibernation('demo-0', 'Hibernate', 'Hibernated')];
    w.tags.add('vk-ns-demo-0:hibernate');
    expect(done(await w.pass()).result.requeue).toBe(true);
    expect(w.pod('demo-0')!.metadata!.annotations![Annotations.restoreFromHibernate]).toBe('true');

    const failing = new PlanWorld(cs);
    failing.crs = w.crs;
    failing.probeError = 'registry down';
    expect(done(await failing.pass()).result.error).toBe(
      'probe hibernate snapshot vk-ns-demo-0: registry down',
    );
    expect(failing.pods.size).toBe(0);
  });

  it('deviation (patch sub-agents-restore-suspend-state; the reference re-forks it, and vk-cocoon refuses a fork over the tag for good): a sub-agent whose pod went while the set was suspended is created at the un-suspend restoring its own snapshot, and its VM workflow is then asked to wake (which drops the tag once it runs); not under another image, not without the tag, not for a slot the set never asked to hibernate', async () => {
    const cs = newCocoonSet('demo', withFinalizer, (c) => {
      c.spec.agent.replicas = 2;
    });
    const image = buildAgentPod(cs, 1, 'vk-ns-demo-0', '').metadata!.annotations![Annotations.image]!;
    const world = (opts: { tag?: boolean; snapshotImage?: string } = {}) => {
      const w = new PlanWorld(cs, [
        readyPod(buildAgentPod(cs, 0, '', '')),
        readyPod(buildAgentPod(cs, 2, 'vk-ns-demo-0', '')),
      ]);
      if (opts.tag ?? true) w.tags.add('vk-ns-demo-1:hibernate');
      w.snapshotImages.set('vk-ns-demo-1', opts.snapshotImage ?? image);
      return w;
    };
    // The set asked demo-1 (and demo-0, demo-2, since woken) to hibernate; demo-1's pod is gone.
    const hibernateAsked = { 'demo-1': 'uid-gone' };
    const w = world();
    expect(done(await w.pass({ hibernateAsked })).result.requeue).toBe(true);
    expect(marked(w.pod('demo-1')!)).toBe('true');
    expect(w.probes).toEqual(['read vk-ns-demo-1']);
    // The next pass asks the new pod's VM workflow to wake: it drops the tag once the VM runs.
    done(await w.pass({ hibernateAsked }));
    expect(w.asks).toContainEqual({ pod: 'demo-1', desire: 'Wake' });

    // A snapshot without a recorded image is restored too (vk-cocoon checks nothing then either).
    const unrecorded = world({ snapshotImage: '' });
    done(await unrecorded.pass({ hibernateAsked }));
    expect(marked(unrecorded.pod('demo-1')!)).toBe('true');
    // Taken under another image (an image edit meanwhile): created as built; vk-cocoon refuses it, saying so.
    const other = world({ snapshotImage: 'ubuntu:22.04' });
    done(await other.pass({ hibernateAsked }));
    expect(marked(other.pod('demo-1')!)).toBeUndefined();
    const noTag = world({ tag: false });
    done(await noTag.pass({ hibernateAsked }));
    expect(marked(noTag.pod('demo-1')!)).toBeUndefined();
    // A slot the set never asked to hibernate (a plain scale-up, a sub-agent deleted while running): no read.
    const never = world();
    done(await never.pass());
    expect([marked(never.pod('demo-1')!), never.probes]).toEqual([undefined, []]);
    // A read that fails creates nothing (a fork would be refused).
    const failing = world();
    failing.probeError = 'registry down';
    expect(done(await failing.pass({ hibernateAsked })).result.error).toBe(
      'read hibernate snapshot vk-ns-demo-1: registry down',
    );
    expect(failing.pod('demo-1')).toBeUndefined();
    // Runs recorded before the patch fork it (vk-cocoon then refuses the fork over the tag).
    const before = world();
    done(await before.pass({ hibernateAsked, subAgentsRestoreSuspendState: false }));
    expect([marked(before.pod('demo-1')!), before.probes]).toEqual([undefined, []]);
  });

  it('deviation (patch sub-agents-restore-open-wake; the reference re-forks it, and vk-cocoon refuses a fork over the tag for good): a sub-agent whose pod went after the un-suspend asked its wake but before its VM workflow said the tag is gone is created restoring its own snapshot, and its new pod is owed a wake ask; not without the tag, not once the wake is closed', async () => {
    const cs = newCocoonSet('demo', withFinalizer, (c) => {
      c.spec.agent.replicas = 2;
    });
    const image = buildAgentPod(cs, 1, 'vk-ns-demo-0', '').metadata!.annotations![Annotations.image]!;
    const world = (tag = true) => {
      const w = new PlanWorld(cs, [
        readyPod(buildAgentPod(cs, 0, '', '')),
        readyPod(buildAgentPod(cs, 2, 'vk-ns-demo-0', '')),
      ]);
      if (tag) w.tags.add('vk-ns-demo-1:hibernate');
      w.snapshotImages.set('vk-ns-demo-1', image);
      return w;
    };
    // The un-suspend asked demo-1 to wake (no longer in hibernateAsked); its pod went before the tag did.
    const wakesOpen = { 'demo-1': true } as const;
    const w = world();
    const end = done(await w.pass({ wakesOpen }));
    expect(marked(w.pod('demo-1')!)).toBe('true');
    expect(w.probes).toEqual(['read vk-ns-demo-1']);
    expect(end.wakeOwed).toEqual(['demo-1']);
    // The tag already went (the VM ran and its VM workflow dropped it): forked as built, nothing owed.
    const noTag = world(false);
    const forked = done(await noTag.pass({ wakesOpen }));
    expect([marked(noTag.pod('demo-1')!), forked.wakeOwed]).toEqual([undefined, undefined]);
    // No record (its wake closed, or runs recorded before the patch): forked, no read.
    const seen = world();
    const plain = done(await seen.pass());
    expect([marked(seen.pod('demo-1')!), seen.probes, plain.wakeOwed]).toEqual([undefined, [], undefined]);
  });

  it('boots fresh without intent even when a leaked tag exists (no probe)', async () => {
    const cs = newCocoonSet('demo', withFinalizer);
    const w = new PlanWorld(cs);
    w.crs = [hibernation('demo-0', 'Hibernate', 'Active')];
    w.tags.add('vk-ns-demo-0:hibernate');
    done(await w.pass());
    expect(w.pod('demo-0')!.metadata!.annotations![Annotations.restoreFromHibernate]).toBeUndefined();
    expect(w.probes).toEqual([]);
  });

  /** A CR whose wake ran its VM and keeps failing to DELETE the tag (`Waking`, SnapshotDeleteFailing True). */
  const spentCR = (pod: string) => {
    const cr = hibernation(pod, 'Wake', 'Waking');
    cr.status!.vmName = `vk-ns-${pod}`;
    cr.status!.conditions = [
      {
        type: CONDITION_DELETE_FAILING,
        status: 'True',
        reason: 'RegistryError',
        message: 'delete hibernation snapshot: 503',
        lastTransitionTime: '2026-12-04T00:00:00Z',
      },
    ];
    return cr;
  };
  const progressing = (w: PlanWorld) =>
    w.cs.status?.conditions?.find((c) => c.type === CONDITION_PROGRESSING);

  it('deviation: a main whose VM tag is spent (its CR woke it, the DELETE keeps failing) is not created; Pending, Progressing=False SpentSnapshotTag, a look in 5 s; created fresh once the CR is done (without createWaitsForSpentTag: created restore-marked, a rollback)', async () => {
    const cs = newCocoonSet('demo', withFinalizer);
    const w = new PlanWorld(cs);
    w.crs = [spentCR('demo-0')];
    w.tags.add('vk-ns-demo-0:hibernate');
    const end = done(await w.pass({ createWaitsForSpentTag: true }));
    expect(end.result.requeueAfterMs).toBe(5_000);
    expect(w.pods.size).toBe(0);
    expect(w.cs.status?.phase).toBe('Pending');
    expect(progressing(w)).toMatchObject({ status: 'False', reason: ConditionReasons.spentSnapshotTag });
    expect(progressing(w)?.message).toContain('pod ns/demo-0 (VM vk-ns-demo-0, cocoonhibernation h-demo-0)');

    w.crs = [hibernation('demo-0', 'Wake', 'Active')];
    w.tags.delete('vk-ns-demo-0:hibernate');
    done(await w.pass({ createWaitsForSpentTag: true }));
    expect(w.pod('demo-0')!.metadata!.annotations![Annotations.restoreFromHibernate]).toBeUndefined();

    const before = new PlanWorld(cs);
    before.crs = [spentCR('demo-0')];
    before.tags.add('vk-ns-demo-0:hibernate');
    done(await before.pass({ createWaitsForSpentTag: false }));
    expect(before.pod('demo-0')!.metadata!.annotations![Annotations.restoreFromHibernate]).toBe('true');
  });

  it('deviation: a sub-agent and a toolbox whose tags are spent are held back, the others created; the set says which and looks again in 5 s', async () => {
    const cs = newCocoonSet('demo', withFinalizer, (c) => {
      c.spec.agent.replicas = 2;
      c.spec.toolboxes = [
        { name: 'a', mode: 'run' },
        { name: 'b', mode: 'run' },
      ];
    });
    const main = readyPod(buildAgentPod(cs, 0, '', ''));
    const w = new PlanWorld(cs, [main]);
    w.crs = [spentCR('demo-1'), spentCR('demo-b')];
    let end = done(await w.pass({ createWaitsForSpentTag: true }));
    expect([...w.pods.keys()].sort()).toEqual(['demo-0', 'demo-2', 'demo-a']);
    expect(end.result.requeue).toBe(true);
    end = done(await w.pass({ createWaitsForSpentTag: true }));
    expect(end.result.requeueAfterMs).toBe(5_000);
    expect(progressing(w)).toMatchObject({ status: 'False', reason: ConditionReasons.spentSnapshotTag });
    expect(progressing(w)?.message).toMatch(/^pod ns\/demo-1 .*; pod ns\/demo-b /);
  });

  it("deviation (patch vm-tells-set-spent-tag): a sub-agent and a toolbox held on the set's own record of a spent tag (a VM workflow's un-suspend Wake whose DELETE failed) get that DELETE again each look, and are created fresh once it goes (before, only the main's was retried: held for good)", async () => {
    const cs = newCocoonSet('demo', withFinalizer, (c) => {
      c.spec.agent.replicas = 1;
      c.spec.toolboxes = [{ name: 'tb', mode: 'run' }];
    });
    const spentBySet = { 'demo-1': 'vk-ns-demo-1', 'demo-tb': 'vk-ns-demo-tb' };
    const w = new PlanWorld(cs, [readyPod(buildAgentPod(cs, 0, '', ''))]);
    for (const vm of Object.values(spentBySet)) w.tags.add(`${vm}:hibernate`);
    w.dropError = 'registry answered 503';
    expect(done(await w.pass({ spentBySet })).result.requeueAfterMs).toBe(5_000);
    expect([...w.pods.keys()]).toEqual(['demo-0']);
    expect(w.ids('dropHibernateTag')).toEqual(['drop-tag:vk-ns-demo-1', 'drop-tag:vk-ns-demo-tb']);
    expect(progressing(w)).toMatchObject({ status: 'False', reason: ConditionReasons.spentSnapshotTag });
    expect(progressing(w)?.message).toMatch(
      /^pod ns\/demo-1 \(VM vk-ns-demo-1, this set's own wake\); pod ns\/demo-tb /,
    );

    w.dropError = undefined;
    done(await w.pass({ spentBySet }));
    expect(w.droppedTags).toEqual(['vk-ns-demo-1:hibernate', 'vk-ns-demo-tb:hibernate']);
    expect([...w.pods.keys()].sort()).toEqual(['demo-0', 'demo-1', 'demo-tb']);
    expect(marked(w.pod('demo-1')!)).toBeUndefined();
    expect(marked(w.pod('demo-tb')!)).toBeUndefined();

    // Runs recorded before the patch hold them without a DELETE.
    const before = new PlanWorld(cs, [readyPod(buildAgentPod(cs, 0, '', ''))]);
    done(await before.pass({ spentBySet, retriesSpentDropsOfMembers: false }));
    expect([[...before.pods.keys()], before.ids('dropHibernateTag')]).toEqual([['demo-0'], []]);
  });

  it('deviation (patch removed-gone-drops-tag; found by helper-55): a slot scaled away and a toolbox removed from the spec after their pods were deleted (while suspended) get their :hibernate tags dropped and their VM workflows let go, unless a CocoonHibernation holds the VM; before, the tags stayed for a later pod of that name to restore', async () => {
    const cs = newCocoonSet('demo', withFinalizer, (c) => {
      c.spec.agent.replicas = 1;
    });
    const pods = () => [
      readyPod(buildAgentPod(cs, 0, '', '')),
      readyPod(buildAgentPod(cs, 1, 'vk-ns-demo-0', '')),
    ];
    // The suspend asked demo-2 and demo-tb; both pods went, then the spec dropped them.
    const hibernateAsked = { 'demo-2': 'uid-2', 'demo-tb': 'uid-tb' };
    const w = new PlanWorld(cs, pods());
    for (const vm of ['vk-ns-demo-2', 'vk-ns-demo-tb']) w.tags.add(`${vm}:hibernate`);
    done(await w.pass({ hibernateAsked }));
    expect(w.droppedTags).toEqual(['vk-ns-demo-2:hibernate', 'vk-ns-demo-tb:hibernate']);
    expect(w.asks).toEqual([
      { pod: 'demo-2', desire: 'Wake', keepTag: true },
      { pod: 'demo-tb', desire: 'Wake', keepTag: true },
    ]);
    expect([...w.pods.keys()].sort()).toEqual(['demo-0', 'demo-1']);

    const held = new PlanWorld(cs, pods());
    held.crs = [hibernation('demo-tb', 'Hibernate', 'Hibernated')];
    done(await held.pass({ hibernateAsked }));
    expect(held.droppedTags).toEqual(['vk-ns-demo-2:hibernate']);
    expect(held.asks.map((a) => a.pod)).toEqual(['demo-2', 'demo-tb']);

    // Names the spec still builds are left to their flows (a slot or toolbox re-created restores its state).
    const built = new PlanWorld(cs, pods());
    done(await built.pass({ hibernateAsked: { 'demo-0': '', 'demo-1': 'uid-1' } }));
    expect(built.droppedTags).toEqual([]);

    // A removed pod whose tag the set only knows spent (its VM ran; helper-56): the DELETE again, no ask.
    const spent = new PlanWorld(cs, pods());
    done(await spent.pass({ spentBySet: { 'demo-2': 'vk-ns-demo-2' } }));
    expect([spent.droppedTags, spent.asks]).toEqual([['vk-ns-demo-2:hibernate'], []]);
    // A removed pod whose un-suspend wake is still open (scaled away before its VM workflow dropped the tag;
    // helper-59, patch sub-agents-restore-open-wake): the DELETE too, no ask.
    const open = new PlanWorld(cs, pods());
    done(await open.pass({ wakesOpen: { 'demo-2': true } }));
    expect([open.droppedTags, open.asks]).toEqual([['vk-ns-demo-2:hibernate'], []]);

    const before = new PlanWorld(cs, pods());
    done(await before.pass({ hibernateAsked, dropsTagsOfRemovedGone: false }));
    expect([before.droppedTags, before.asks]).toEqual([[], []]);
  });

  it.each([
    {
      flow: 'retain suspend',
      phase: 'Suspending',
      set: (c: CocoonSet) => {
        c.spec.suspend = true;
      },
    },
    {
      flow: 'migration (a pinned set)',
      phase: 'Migrating',
      set: (c: CocoonSet) => {
        c.spec.nodeName = 'node-b';
      },
    },
    {
      flow: 'released-seat wake',
      phase: 'Waking',
      set: (c: CocoonSet) => {
        c.spec.hibernatePolicy = 'release';
        c.status = { phase: 'Suspended' } as CocoonSet['status'];
        c.metadata.annotations = { ...c.metadata.annotations, [Annotations.hibernatedOnNode]: 'node-a' };
      },
    },
  ])(
    'deviation: the $flow, which restores a missing main from its tag on purpose, does not while the tag is spent: $phase, Progressing=False SpentSnapshotTag, 5 s; once the CR is done the main is created fresh (without mainRestoresWaitForSpentTag: created restore-marked, a rollback)',
    async ({ phase, set }) => {
      const cs = newCocoonSet('demo', withFinalizer, set);
      const w = new PlanWorld(cs);
      w.crs = [spentCR('demo-0')];
      w.tags.add('vk-ns-demo-0:hibernate');
      const end = done(await w.pass());
      expect(end.result.requeueAfterMs).toBe(5_000);
      expect(w.pods.size).toBe(0);
      expect(w.cs.status?.phase).toBe(phase);
      expect(progressing(w)).toMatchObject({ status: 'False', reason: ConditionReasons.spentSnapshotTag });
      expect(progressing(w)?.message).toContain(
        'pod ns/demo-0 (VM vk-ns-demo-0, cocoonhibernation h-demo-0)',
      );
      expect(w.tags.has('vk-ns-demo-0:hibernate')).toBe(true);

      w.crs = [hibernation('demo-0', 'Wake', 'Active')];
      w.tags.delete('vk-ns-demo-0:hibernate');
      done(await w.pass());
      expect(w.pod('demo-0')!.metadata!.annotations![Annotations.restoreFromHibernate]).toBeUndefined();

      const before = new PlanWorld(cs);
      before.crs = [spentCR('demo-0')];
      before.tags.add('vk-ns-demo-0:hibernate');
      done(await before.pass({ mainRestoresWaitForSpentTag: false }));
      expect(before.pod('demo-0')!.metadata!.annotations![Annotations.restoreFromHibernate]).toBe('true');
    },
  );

  it('deviation: a live main, sub-agent or toolbox whose spec drifted is not deleted for its re-create while its tag is spent (the re-create would wait for the tag); the set says so and looks again in 5 s (without driftWaitsForSpentTag: deleted, the VM down until the registry answers)', async () => {
    const old = newCocoonSet('demo', withFinalizer, (c) => {
      c.spec.agent.replicas = 1;
      c.spec.toolboxes = [{ name: 'tb', mode: 'run', image: 'v1' }];
    });
    const edited = newCocoonSet('demo', withFinalizer, (c) => {
      c.spec.agent.replicas = 1;
      c.spec.agent.image = 'ghcr.io/cocoonstack/cocoon/ubuntu:26.04';
      c.spec.toolboxes = [{ name: 'tb', mode: 'run', image: 'v2' }];
    });
    const pods = () => [
      readyPod(buildAgentPod(old, 0, '', '')),
      readyPod(buildAgentPod(old, 1, 'vk-ns-demo-0', '')),
      readyPod(buildToolboxPod(old, { name: 'tb', mode: 'run', image: 'v1' })),
    ];
    // The main's tag spent: the drifted main stays, the pass ends there.
    const main = new PlanWorld(edited, pods());
    main.crs = [spentCR('demo-0')];
    let end = done(await main.pass());
    expect([main.ids('deletePod'), end.result.requeueAfterMs]).toEqual([[], 5_000]);
    expect(progressing(main)).toMatchObject({ status: 'False', reason: ConditionReasons.spentSnapshotTag });
    expect(progressing(main)?.message).toContain('pod ns/demo-0 ');
    // The sub-agent's and the toolbox's spent (the main matching the spec): both stay.
    const rest = new PlanWorld(edited, [readyPod(buildAgentPod(edited, 0, '', '')), ...pods().slice(1)]);
    rest.crs = [spentCR('demo-1'), spentCR('demo-tb')];
    end = done(await rest.pass());
    expect([rest.ids('deletePod'), end.result.requeueAfterMs]).toEqual([[], 5_000]);
    expect(progressing(rest)?.message).toMatch(/^pod ns\/demo-1 .*; pod ns\/demo-tb /);

    const before = new PlanWorld(edited, pods());
    before.crs = [spentCR('demo-0')];
    done(await before.pass({ driftWaitsForSpentTag: false }));
    expect(before.ids('deletePod')).toEqual(['delete:demo-0']);
    const beforeRest = new PlanWorld(edited, [
      readyPod(buildAgentPod(edited, 0, '', '')),
      ...pods().slice(1),
    ]);
    beforeRest.crs = [spentCR('demo-1'), spentCR('demo-tb')];
    done(await beforeRest.pass({ driftWaitsForSpentTag: false }));
    expect(beforeRest.ids('deletePod')).toEqual(['delete:demo-1', 'delete:demo-tb']);
  });

  it.each([
    {
      flow: 'migration (a pinned set)',
      set: (c: CocoonSet) => {
        c.spec.nodeName = 'node-b';
      },
    },
    {
      flow: 'released-seat wake',
      set: (c: CocoonSet) => {
        c.spec.hibernatePolicy = 'release';
        c.status = { phase: 'Waking' } as CocoonSet['status'];
        c.metadata.annotations = { ...c.metadata.annotations, [Annotations.hibernatedOnNode]: 'node-a' };
      },
    },
  ])(
    'deviation: a main gone after the $flow ran it and failed to DELETE its tag (spentBySet) is not restored from that tag: the pass retries the DELETE (failing: the pass fails, saying why); once it goes, the main is created fresh (without spentBySet: restored, a rollback)',
    async ({ set }) => {
      const cs = newCocoonSet('demo', withFinalizer, set);
      const spentBySet = { 'demo-0': 'vk-ns-demo-0' };
      const w = new PlanWorld(cs);
      w.tags.add('vk-ns-demo-0:hibernate');
      w.dropError = 'registry answered 503';
      let end = done(await w.pass({ spentBySet }));
      expect(end.result.error).toBe(
        'drop spent hibernate snapshot vk-ns-demo-0: registry answered 503 (pod ns/demo-0 is created once it is gone: vk-cocoon would restore the VM from it, rolling it back)',
      );
      expect([w.pods.size, w.tags.has('vk-ns-demo-0:hibernate')]).toEqual([0, true]);

      w.dropError = undefined;
      end = done(await w.pass({ spentBySet }));
      expect([end.result.requeue, w.pods.size, w.droppedTags]).toEqual([true, 0, ['vk-ns-demo-0:hibernate']]);
      // The workflow cleared its record with the DELETE.
      done(await w.pass());
      expect(w.pod('demo-0')!.metadata!.annotations![Annotations.restoreFromHibernate]).toBeUndefined();

      const before = new PlanWorld(cs);
      before.tags.add('vk-ns-demo-0:hibernate');
      done(await before.pass());
      expect(before.pod('demo-0')!.metadata!.annotations![Annotations.restoreFromHibernate]).toBe('true');
    },
  );

  it("a set's own spent-tag record does not hold a VM a CocoonHibernation holds now (the tag is that CR's)", async () => {
    const cs = newCocoonSet('demo', withFinalizer);
    const w = new PlanWorld(cs);
    w.crs = [hibernation('demo-0', 'Hibernate', 'Hibernated')];
    w.crs[0]!.status!.vmName = 'vk-ns-demo-0';
    w.tags.add('vk-ns-demo-0:hibernate');
    done(await w.pass({ spentBySet: { 'demo-0': 'vk-ns-demo-0' } }));
    expect([w.droppedTags, w.pods.has('demo-0')]).toEqual([[], true]);
  });

  it('who has a spent tag: only a Waking CR, not being deleted, with SnapshotDeleteFailing True', async () => {
    const cleared = spentCR('cleared');
    cleared.status!.conditions![0]!.status = 'False';
    const deleting = spentCR('deleting');
    deleting.metadata.deletionTimestamp = new Date('2026-12-04T00:00:00Z');
    const hibernated = spentCR('hibernated');
    hibernated.status!.phase = 'Hibernated';
    const crs = [spentCR('spent'), cleared, deleting, hibernated, hibernation('waking', 'Wake', 'Waking')];
    expect([...podsWithSpentTagByCR(crs).values()]).toEqual([
      { pod: 'spent', vmName: 'vk-ns-spent', cr: 'h-spent' },
    ]);
    // With `deleting` (spentTagOutlivesCR: its deletion retries the DELETE first) the one being deleted too.
    expect([...podsWithSpentTagByCR(crs, true).keys()]).toEqual(['spent', 'deleting']);
  });

  it('deviation: a main whose spent-tag CR is being deleted stays held while that deletion retries the DELETE (without spentTagOutlivesCR: created restore-marked from the spent tag)', async () => {
    const cs = newCocoonSet('demo', withFinalizer);
    const deleting = spentCR('demo-0');
    deleting.metadata.deletionTimestamp = new Date('2026-12-04T00:00:00Z');
    const w = new PlanWorld(cs);
    w.crs = [deleting];
    w.tags.add('vk-ns-demo-0:hibernate');
    done(await w.pass());
    expect(w.pods.size).toBe(0);
    expect(progressing(w)).toMatchObject({ status: 'False', reason: ConditionReasons.spentSnapshotTag });

    const before = new PlanWorld(cs);
    before.crs = [deleting];
    before.tags.add('vk-ns-demo-0:hibernate');
    done(await before.pass({ spentTagOutlivesCR: false }));
    expect(before.pod('demo-0')!.metadata!.annotations![Annotations.restoreFromHibernate]).toBe('true');
  });

  it('builds the static toolbox pod for a restore like any other (probe only with intent)', async () => {
    const cs = newCocoonSet('demo', withFinalizer, (c) => {
      c.spec.toolboxes = [
        { name: 'vnc', mode: 'static', staticVMID: 'q', staticIP: '10.0.0.9', vncPort: 5901 },
      ];
    });
    const w = new PlanWorld(cs, [readyPod(buildAgentPod(cs, 0, '', ''))]);
    done(await w.pass({ registryConfigured: false }));
    expect(w.pod('demo-vnc')).toEqual(buildToolboxPod(cs, cs.spec.toolboxes![0]!));
    expect(w.probes).toEqual([]);
  });
});
