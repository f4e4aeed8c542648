/**
 * The reconcile order of one pass, `reconcilePass` (the pure parts of reconciler_test.go and
 * restore_intent_test.go; docs/cocoonset.md#a-pass-in-order), driven against the in-memory world of
 * plan-world.ts.
 */
import type { V1Pod } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { Annotations, Labels, LIMIT_RANGER_ANNOTATION } from '../../src/api/keys.js';
import type { CocoonSet } from '../../src/api/types.js';
import { mainPodFailedReason } from '../../src/cocoonset/classify.js';
import { migrationMayEngage, wakeMayEngage } from '../../src/cocoonset/plan.js';
import { buildAgentPod, buildToolboxPod } from '../../src/cocoonset/pods.js';
import { readRebuildHistory } from '../../src/cocoonset/rebuild.js';
import {
  annotate,
  convergedPods,
  finalizedSet,
  hibernation,
  lifecycleHibernated,
  liveOn,
  newCocoonSet,
  readyPod,
} from '../support/builders.js';
import { done, PlanWorld } from './plan-world.js';

const T0 = Date.parse('2026-05-14T01:00:00Z');

const replicas = (n: number) => (c: CocoonSet) => {
  c.spec.agent.replicas = n;
};
const toolboxes =
  (...names: string[]) =>
  (c: CocoonSet) => {
    c.spec.toolboxes = names.map((name) => ({ name }));
  };
const failed = (p: V1Pod) => {
  p.status = { phase: 'Failed' };
  return p;
};

describe('pass entry', () => {
  it('adds the finalizer and requeues, doing nothing else', async () => {
    const w = new PlanWorld(newCocoonSet('demo'));
    expect(done(await w.pass()).result).toEqual({ requeue: true, requeueAfterMs: 0, error: undefined });
    expect(w.ids()).toEqual(['finalizer']);
    expect(w.cs.metadata.finalizers).toEqual(['cocoonset.cocoonstack.io/finalizer']);
  });

  it('delegates a deleting set to the delete flow', async () => {
    const cs = finalizedSet((c) => {
      c.metadata.deletionTimestamp = new Date(T0);
    });
    expect(await new PlanWorld(cs).pass()).toEqual({ kind: 'delegate', flow: 'delete' });
  });

  it('creates the main first and requeues; a terminating predecessor is waited for (5 s): Pending with Progressing False MainTerminating, no create (deliberate: the reference tries the create and requeues on AlreadyExists without a status write, so the set still said Running)', async () => {
    const w = new PlanWorld(finalizedSet(replicas(1), toolboxes('tb')));
    expect(done(await w.pass()).result.requeue).toBe(true);
    expect([...w.pods.keys()]).toEqual(['demo-0']);
    const gone = { ...buildAgentPod(finalizedSet(), 0, '', '') };
    gone.metadata = { ...gone.metadata, deletionTimestamp: new Date(T0) };
    const stale = new PlanWorld(finalizedSet(), [gone]);
    expect(done(await stale.pass()).result).toEqual({
      requeue: false,
      requeueAfterMs: 5_000,
      error: undefined,
    });
    expect(stale.ids('createPod')).toEqual([]);
    expect(stale.cs.status?.phase).toBe('Pending');
    expect(stale.cs.status?.conditions?.find((c) => c.type === 'Progressing')).toMatchObject({
      status: 'False',
      reason: 'MainTerminating',
      message: 'main pod ns/demo-0 is terminating: it is created again once it is gone',
    });
    // The reference's rule, kept for runs recorded before the patch: the create answers AlreadyExists.
    const legacy = new PlanWorld(finalizedSet(), [gone]);
    expect(done(await legacy.pass({ waitsForTerminatingMain: false })).result).toEqual({
      requeue: false,
      requeueAfterMs: 5_000,
      error: undefined,
    });
    expect(legacy.ids('createPod')).toEqual(['create:demo-0']);
    expect(legacy.statusPatches).toEqual([]);
  });

  it('writes Pending and waits 5 s while the main is not Ready', async () => {
    const cs = finalizedSet(replicas(1));
    const w = new PlanWorld(cs, [buildAgentPod(cs, 0, '', '')]);
    expect(done(await w.pass()).result.requeueAfterMs).toBe(5_000);
    expect(w.cs.status!.phase).toBe('Pending');
    expect(w.pods.has('demo-1')).toBe(false);
  });

  it('creates sub-agents bound to the main node with fork-from once the main is Ready, then toolboxes', async () => {
    const cs = finalizedSet(replicas(2), toolboxes('tb'));
    const main = readyPod(buildAgentPod(cs, 0, '', ''));
    main.spec!.nodeName = 'node-a';
    const w = new PlanWorld(cs, [main]);
    const step = done(await w.pass());
    expect(step.result.requeue).toBe(true);
    expect(w.ids('createPod')).toEqual(['create:demo-1', 'create:demo-2', 'create:demo-tb']);
    expect(w.pod('demo-2')!.spec!.nodeName).toBe('node-a');
    expect(w.pod('demo-2')!.metadata!.annotations![Annotations.forkFrom]).toBe('vk-ns-demo-0');
    expect(w.statusPatches).toHaveLength(0);
  });

  it('creates no sub-agent while a CocoonHibernation hibernates the Ready main, and waits 5 s (deliberate: the reference forks them from a VM about to go, found by a new-user run)', async () => {
    const cs = finalizedSet(replicas(2));
    const w = new PlanWorld(cs, [readyPod(buildAgentPod(cs, 0, '', ''))]);
    w.crs = [hibernation('demo-0', 'Hibernate', 'Hibernated')];
    expect(done(await w.pass()).result.requeueAfterMs).toBe(5_000);
    expect(w.ids('createPod')).toEqual([]);
    // The same wait while the main carries the annotation (the CR already gone), and the reference's
    // behaviour without the flag (histories recorded before it).
    w.crs = [];
    w.pods.set('demo-0', annotate(w.pod('demo-0')!, { [Annotations.hibernate]: 'true' }));
    expect(done(await w.pass()).result.requeueAfterMs).toBe(5_000);
    expect(w.ids('createPod')).toEqual([]);
    w.crs = [hibernation('demo-0', 'Hibernate', 'Hibernated')];
    w.pods.set('demo-0', readyPod(buildAgentPod(cs, 0, '', '')));
    done(await w.pass({ subAgentsWaitForHibernatingMain: false }));
    expect(w.ids('createPod')).toEqual(['create:demo-1', 'create:demo-2']);
    // A Wake CR does not hold the main back.
    const woken = new PlanWorld(cs, [readyPod(buildAgentPod(cs, 0, '', ''))]);
    woken.crs = [hibernation('demo-0', 'Wake', 'Active')];
    done(await woken.pass());
    expect(woken.ids('createPod')).toEqual(['create:demo-1', 'create:demo-2']);
  });

  it('a Ready main carrying the hibernate annotation holds back its drifted sub-agents and toolboxes: Pending, 5 s, nothing deleted (ours: a main restored under a Hibernate CR is Ready for a moment, and a pass then deleted them all; new-user finding)', async () => {
    const before = finalizedSet(replicas(1), toolboxes('tb'), (c) => {
      c.spec.snapshotPolicy = 'always';
    });
    const after = finalizedSet(replicas(1), toolboxes('tb'), (c) => {
      c.spec.snapshotPolicy = 'never';
      c.metadata.generation = 2;
    });
    // The main was recreated from the new spec (restored from its tag); vk-cocoon reports it Ready while the
    // CR's VM workflow has already asked for the hibernate. The sub-agent and the toolbox drifted.
    const [, sub, tb] = convergedPods(before);
    const main = annotate(readyPod(buildAgentPod(after, 0, '', '')), { [Annotations.hibernate]: 'true' });
    const w = new PlanWorld(after, [main, sub!, tb!]);
    w.crs = [hibernation('demo-0', 'Hibernate', 'Hibernated')];
    const step = done(await w.pass());
    expect(step.result).toMatchObject({ requeueAfterMs: 5_000, error: undefined });
    expect(w.ids('deletePod')).toEqual([]);
    expect(w.cs.status?.phase).toBe('Pending');
    // Without the flag (runs recorded before it) the pass deletes both.
    const old = new PlanWorld(after, [main, sub!, tb!]);
    old.crs = w.crs;
    done(await old.pass({ hibernatingMainHoldsMembers: false }));
    expect(old.ids('deletePod').sort()).toEqual(['delete:demo-1', 'delete:demo-tb']);
  });

  it('a 1000-pod scale-down stamps and deletes in one batch each, not an I/O round per pod (each round is a workflow task: a 20,000-event run)', async () => {
    const cs = finalizedSet(replicas(999));
    const pods = [readyPod(buildAgentPod(cs, 0, '', ''))];
    for (let s = 1; s <= 999; s++) pods.push(readyPod(buildAgentPod(cs, s, 'vk-ns-demo-0', '')));
    const w = new PlanWorld(cs, pods);
    done(await w.pass());
    w.cs.spec.agent.replicas = 0;
    w.cs.metadata.generation = 2;
    const steps = w.steps;
    done(await w.pass());
    expect(w.ids('patchPodAnnotations')).toHaveLength(1000);
    expect(w.ids('deletePod')).toHaveLength(999);
    expect(w.steps - steps).toBeLessThanOrEqual(5);
    // Without the batch (histories recorded before it) the same pass is a round per pod.
    const old = new PlanWorld(finalizedSet(replicas(20)), []);
    for (let s = 0; s <= 20; s++) old.pods.set(`demo-${s}`, readyPod(buildAgentPod(old.cs, s, '', '')));
    old.cs.spec.agent.replicas = 0;
    old.cs.metadata.generation = 2;
    done(await old.pass({ batchPodLoops: false }));
    expect(old.steps).toBeGreaterThan(40);
  });

  it('runs sub-agent creates as one concurrent batch of at most 8 in flight', async () => {
    const cs = finalizedSet(replicas(3));
    const w = new PlanWorld(cs, [readyPod(buildAgentPod(cs, 0, '', ''))]);
    done(await w.pass());
    expect(w.batches).toEqual([
      { ids: ['list-hibernations'], concurrent: false, maxConcurrency: 1 },
      { ids: ['create:demo-1', 'create:demo-2', 'create:demo-3'], concurrent: true, maxConcurrency: 8 },
    ]);
  });
});

describe('steady state and status', () => {
  function steadyWorld() {
    const cs = finalizedSet(replicas(1), toolboxes('tb'));
    return new PlanWorld(cs, [
      readyPod(buildAgentPod(cs, 0, '', '')),
      readyPod(buildAgentPod(cs, 1, 'vk-ns-demo-0', '')),
      readyPod(buildToolboxPod(cs, { name: 'tb' })),
    ]);
  }

  it('lists no CocoonHibernations and probes nothing in steady state', async () => {
    const w = steadyWorld();
    expect(done(await w.pass()).result).toEqual({ requeue: false, requeueAfterMs: 0, error: undefined });
    expect([...w.pods.keys()].sort()).toEqual(['demo-0', 'demo-1', 'demo-tb']);
    expect([w.lists, w.probes.length]).toEqual([0, 0]);
    expect(w.cs.status!.phase).toBe('Running');
  });

  it('writes status once; a repeated pass is a true no-op', async () => {
    const w = steadyWorld();
    done(await w.pass());
    const second = done(await w.pass({ nowMs: T0 + 60_000 }));
    expect(w.statusPatches).toHaveLength(1);
    expect(second.mirror.status).toBeUndefined();
  });

  it('lists CocoonHibernations exactly once when sub-agents and toolboxes are both missing', async () => {
    const cs = finalizedSet(replicas(2), toolboxes('tb'));
    const w = new PlanWorld(cs, [readyPod(buildAgentPod(cs, 0, '', ''))]);
    done(await w.pass());
    expect(w.lists).toBe(1);
    expect([...w.pods.keys()].sort()).toEqual(['demo-0', 'demo-1', 'demo-2', 'demo-tb']);
  });

  it('deletes extra sub-agents and toolboxes', async () => {
    const cs = finalizedSet(replicas(2), toolboxes('tb', 'old'));
    const pods = [
      readyPod(buildAgentPod(cs, 0, '', '')),
      readyPod(buildAgentPod(cs, 1, 'vk-ns-demo-0', '')),
      readyPod(buildAgentPod(cs, 2, 'vk-ns-demo-0', '')),
      readyPod(buildToolboxPod(cs, { name: 'tb' })),
      readyPod(buildToolboxPod(cs, { name: 'old' })),
    ];
    const w = new PlanWorld(finalizedSet(replicas(1), toolboxes('tb')), pods);
    expect(done(await w.pass()).result.requeue).toBe(true);
    expect(w.ids('deletePod')).toEqual(['delete:demo-2', 'delete:demo-old']);
  });

  it('ignores pods with the name label but another controller UID', async () => {
    const cs = finalizedSet();
    const foreign = readyPod(
      buildAgentPod(
        newCocoonSet('demo', (c) => (c.metadata.uid = 'old')),
        0,
        '',
        '',
      ),
    );
    foreign.metadata!.name = 'demo-stale';
    const w = new PlanWorld(cs, [readyPod(buildAgentPod(cs, 0, '', '')), foreign]);
    done(await w.pass());
    expect(w.cs.status!.agents).toHaveLength(1);
    expect(w.pods.has('demo-stale')).toBe(true);
  });
});

describe('failed main', () => {
  it('names the failure reason with the lifecycle annotation winning', async () => {
    const cs = finalizedSet();
    const healthy = buildAgentPod(cs, 0, '', '');
    const lc = annotate(buildAgentPod(cs, 0, '', ''), { [Annotations.lifecycleState]: 'failed' });
    const ph = failed(buildAgentPod(cs, 0, '', ''));
    const both = failed(annotate(buildAgentPod(cs, 0, '', ''), { [Annotations.lifecycleState]: 'failed' }));
    expect([healthy, lc, ph, both].map(mainPodFailedReason)).toEqual([
      '',
      'PodLifecycleFailed',
      'MainAgentFailed',
      'PodLifecycleFailed',
    ]);
  });

  it('moves to Failed with event and metric, and short-circuits everything else', async () => {
    const cs = finalizedSet(replicas(1));
    const main = annotate(readyPod(buildAgentPod(cs, 0, '', '')), {
      [Annotations.lifecycleState]: 'failed',
      [Annotations.lifecycleStateMessage]: 'hibernate push failed',
    });
    const w = new PlanWorld(cs, [main]);
    expect(done(await w.pass()).result).toEqual({ requeue: false, requeueAfterMs: 0, error: undefined });
    expect(w.cs.status!.phase).toBe('Failed');
    expect(w.events).toEqual([
      {
        eventType: 'Warning',
        reason: 'PodLifecycleFailed',
        message: 'main pod ns/demo-0: hibernate push failed',
      },
    ]);
    expect(w.metrics).toEqual([
      { metric: 'lifecycleStateFailedObservedTotal', labels: { phase: 'Pending' } },
    ]);
    expect(w.pods.has('demo-1')).toBe(false);
    // Repeats every pass; the metric's phase label is the phase before the write.
    done(await w.pass());
    expect(w.metrics[1]).toEqual({
      metric: 'lifecycleStateFailedObservedTotal',
      labels: { phase: 'Failed' },
    });
  });

  it('uses the pod phase as message on the MainAgentFailed path and counts no metric', async () => {
    const cs = finalizedSet();
    const w = new PlanWorld(cs, [failed(buildAgentPod(cs, 0, '', ''))]);
    done(await w.pass());
    expect(w.events).toEqual([
      { eventType: 'Warning', reason: 'MainAgentFailed', message: 'main pod ns/demo-0: Failed' },
    ]);
    expect(w.metrics).toEqual([]);
  });

  it('deletes a failed main that drifted instead of parking in Failed', async () => {
    const cs = finalizedSet();
    const main = annotate(readyPod(buildAgentPod(cs, 0, '', '')), { [Annotations.lifecycleState]: 'failed' });
    const w = new PlanWorld(
      finalizedSet((c) => {
        c.spec.agent.image = 'ubuntu:26.04';
      }),
      [main],
    );
    expect(done(await w.pass()).result.requeue).toBe(true);
    expect(w.pods.has('demo-0')).toBe(false);
    expect(w.events).toEqual([]);
  });

  it('emits RecoveredFromFailure when the main is Ready again while status reads Failed', async () => {
    const cs = finalizedSet((c) => {
      c.status = {
        phase: 'Failed',
        readyAgents: 0,
        desiredAgents: 1,
        readyToolboxes: 0,
        desiredToolboxes: 0,
      };
    });
    const w = new PlanWorld(cs, [readyPod(buildAgentPod(cs, 0, '', ''))]);
    done(await w.pass());
    expect(w.events).toEqual([
      { eventType: 'Normal', reason: 'RecoveredFromFailure', message: 'main pod ns/demo-0 is Ready again' },
    ]);
    expect(w.cs.status!.phase).toBe('Running');
  });
});

describe('main drift', () => {
  it('deletes a drifted main and requeues without touching sub-agents', async () => {
    const old = finalizedSet(replicas(1));
    const w = new PlanWorld(
      finalizedSet(replicas(1), (c) => {
        c.spec.agent.image = 'ghcr.io/cocoonstack/cocoon/ubuntu:26.04';
      }),
      [readyPod(buildAgentPod(old, 0, '', '')), readyPod(buildAgentPod(old, 1, 'vk-ns-demo-0', ''))],
    );
    expect(done(await w.pass()).result.requeue).toBe(true);
    expect(w.ids('deletePod')).toEqual(['delete:demo-0']);
  });
});

describe('LimitRange defaults (drift-compares-admitted-resources)', () => {
  /**
   * The pods as the apiserver stores them in a namespace whose LimitRange defaults cpu (limit and request):
   * requests default to the limits first, then the LimitRanger fills what is still unset.
   */
  function defaulted(pod: V1Pod): V1Pod {
    const c = pod.spec!.containers[0]!;
    const limits = c.resources?.limits ?? {};
    c.resources = {
      limits: { ...limits, cpu: '500m' },
      requests: { ...limits, ...(c.resources?.requests ?? {}), cpu: '250m' },
    };
    return annotate(pod, {
      [LIMIT_RANGER_ANNOTATION]: `LimitRanger plugin set: cpu request for container ${c.name}; cpu limit for container ${c.name}`,
    });
  }
  function world() {
    const cs = finalizedSet(replicas(1), (c) => {
      c.spec.agent.resources = { limits: { memory: '1Gi' } };
      c.spec.toolboxes = [{ name: 'tb', image: 'toolbox', resources: { requests: { memory: '64Mi' } } }];
    });
    return new PlanWorld(cs, [
      defaulted(readyPod(buildAgentPod(cs, 0, '', ''))),
      defaulted(readyPod(buildAgentPod(cs, 1, 'vk-ns-demo-0', ''))),
      defaulted(readyPod(buildToolboxPod(cs, cs.spec.toolboxes![0]!))),
    ]);
  }

  it('keeps pods whose only difference from the spec is what the LimitRanger defaulted', async () => {
    const w = world();
    done(await w.pass());
    expect(w.ids('deletePod')).toEqual([]);
    expect(w.ids('createPod')).toEqual([]);
  });

  it('old version: the main drifts and is deleted on every pass', async () => {
    const w = world();
    done(await w.pass({ driftComparesAdmittedResources: false }));
    expect(w.ids('deletePod')).toEqual(['delete:demo-0']);
  });
});

describe('sub-agent triage', () => {
  function world(sub: V1Pod, mods: ((c: CocoonSet) => void)[] = []) {
    const cs = finalizedSet(replicas(1), ...mods);
    return new PlanWorld(cs, [readyPod(buildAgentPod(cs, 0, '', '')), sub]);
  }
  const sub = () => buildAgentPod(finalizedSet(replicas(1)), 1, 'vk-ns-demo-0', '');

  it('replaces a terminal sub-agent: history first, then delete, metric and event', async () => {
    const w = world(failed(sub()));
    expect(done(await w.pass()).result.requeue).toBe(true);
    expect(w.pods.has('demo-1')).toBe(false);
    // The new pod is a fresh fork of the main: a `:hibernate` tag a suspend left would make vk refuse it.
    expect(w.ids()).toEqual([
      'history:1',
      'delete:demo-1',
      'list-hibernations',
      'drop-tag:vk-ns-demo-1',
      'metric:subagentRebuildTotal:1',
      'event:SubAgentRebuilding:1',
    ]);
    expect(readRebuildHistory(w.cs).get(1)!.count).toBe(1);
  });

  it('treats lifecycle failed as terminal while the phase is Running', async () => {
    const w = world(annotate(readyPod(sub()), { [Annotations.lifecycleState]: 'failed' }));
    done(await w.pass());
    expect(w.pods.has('demo-1')).toBe(false);
  });

  it('does not delete when persisting the history fails', async () => {
    const w = world(failed(sub()));
    w.failures.set('history:1', 'conflict');
    expect(done(await w.pass()).result.error).toBe('persist rebuild history: conflict');
    expect(w.pods.has('demo-1')).toBe(true);
  });

  it('walks the backoff timeline: rebuild at once, then after 1 s, 5 s, 30 s, then dead letter', async () => {
    const w = world(failed(sub()));
    const failAgain = () => w.pods.set('demo-1', failed(sub()));
    let now = T0;
    done(await w.pass({ nowMs: now }));
    const waits: number[] = [];
    for (const wait of [1_000, 5_000, 30_000]) {
      failAgain();
      const blocked = done(await w.pass({ nowMs: now + 10 }));
      waits.push(blocked.result.requeueAfterMs);
      expect(w.pods.has('demo-1')).toBe(true);
      now += wait;
      done(await w.pass({ nowMs: now }));
      expect(w.pods.has('demo-1')).toBe(false);
    }
    expect(waits).toEqual([990, 4_990, 29_990]);
    expect(readRebuildHistory(w.cs).get(1)!.count).toBe(4);
    failAgain();
    const dl = done(await w.pass({ nowMs: now + 3_600_000 }));
    expect(dl.result).toEqual({ requeue: false, requeueAfterMs: 0, error: undefined });
    expect(w.pod('demo-1')!.metadata!.annotations![Annotations.deadLetter]).toBe('true');
    expect(w.events.at(-1)!.reason).toBe('SubAgentDeadLetter');
    expect(w.metrics.filter((m) => m.metric === 'subagentRebuildTotal')).toHaveLength(4);
    // Dead letter is steady: the pod stays and the set stays Scaling / Ready=False.
    done(await w.pass({ nowMs: now + 7_200_000 }));
    expect(w.pods.has('demo-1')).toBe(true);
    expect(w.cs.status!.phase).toBe('Scaling');
  });

  it('a dead-lettered sub-agent yields to a spec edit, which resets its history', async () => {
    const dead = annotate(failed(sub()), { [Annotations.deadLetter]: 'true' });
    const history = '{"1":{"count":4,"lastDeleted":"2026-05-14T00:00:00Z"}}';
    const withHistory = (c: CocoonSet) => {
      c.metadata.annotations = { [Annotations.rebuildHistory]: history };
    };
    const same = world(dead, [withHistory]);
    const kept = done(await same.pass());
    expect(kept.result.requeue).toBe(false);
    expect(same.pods.has('demo-1')).toBe(true);

    const edited = world(dead, [
      withHistory,
      (c) => {
        c.spec.agent.image = 'fixed';
      },
    ]);
    // The main drifts too with a new image; keep it matching so the pass reaches the sub-agents.
    edited.pods.set('demo-0', readyPod(buildAgentPod(edited.cs, 0, '', '')));
    expect(done(await edited.pass()).result.requeue).toBe(true);
    expect(edited.pods.has('demo-1')).toBe(false);
    expect(readRebuildHistory(edited.cs).has(1)).toBe(false);
    expect(edited.ids()).toEqual([
      'history:1',
      'delete:demo-1',
      'list-hibernations',
      'drop-tag:vk-ns-demo-1',
    ]);
  });

  it('waits the smallest remaining backoff when nothing else changes', async () => {
    const cs = finalizedSet(replicas(2), (c) => {
      c.metadata.annotations = {
        [Annotations.rebuildHistory]:
          '{"1":{"count":3,"lastDeleted":"2026-05-14T01:00:00Z"},"2":{"count":1,"lastDeleted":"2026-05-14T01:00:00Z"}}',
      };
    });
    const w = new PlanWorld(cs, [
      readyPod(buildAgentPod(cs, 0, '', '')),
      failed(buildAgentPod(cs, 1, 'vk-ns-demo-0', '')),
      failed(buildAgentPod(cs, 2, 'vk-ns-demo-0', '')),
    ]);
    expect(done(await w.pass({ nowMs: T0 + 200 })).result).toEqual({
      requeue: false,
      requeueAfterMs: 800,
      error: undefined,
    });
    expect(w.cs.status!.phase).toBe('Scaling');
  });
});

describe('toolboxes', () => {
  function mainOnly(cs: CocoonSet) {
    return new PlanWorld(cs, [readyPod(buildAgentPod(cs, 0, '', ''))]);
  }

  it('rejects a toolbox named like an agent slot before any write ("0" and "1")', async () => {
    for (const name of ['0', '1', '+2']) {
      const w = mainOnly(finalizedSet(toolboxes(name)));
      expect(done(await w.pass()).result.error).toBe(
        `toolbox name "${name}" must not be an integer: collides with agent slot pod naming`,
      );
      expect(w.ids('createPod')).toEqual([]);
    }
    // Too large for Atoi: accepted, as in Go.
    expect(
      done(await mainOnly(finalizedSet(toolboxes('99999999999999999999'))).pass()).result.error,
    ).toBeUndefined();
  });

  it('rejects duplicate names before any create', async () => {
    const w = mainOnly(finalizedSet(toolboxes('tb', 'tb')));
    expect(done(await w.pass()).result.error).toBe('duplicate toolbox name "tb" in spec');
    expect(w.ids('createPod')).toEqual([]);
  });

  it('is idempotent when its own toolbox exists but the cache does not show it', async () => {
    const cs = finalizedSet(toolboxes('tb'));
    const main = readyPod(buildAgentPod(cs, 0, '', ''));
    const w = new PlanWorld(cs, [main, readyPod(buildToolboxPod(cs, { name: 'tb' }))]);
    const step = done(await w.pass({ view: [main] }));
    expect(step.result).toEqual({ requeue: false, requeueAfterMs: 0, error: undefined });
    expect(w.ids()).toContain('get:demo-tb');
  });

  it('reports a collision with a foreign pod of the same name', async () => {
    const cs = finalizedSet(toolboxes('tb'));
    const main = readyPod(buildAgentPod(cs, 0, '', ''));
    const foreign = buildAgentPod(cs, 0, '', '');
    foreign.metadata!.name = 'demo-tb';
    const w = new PlanWorld(cs, [main]);
    w.pods.set('demo-tb', foreign);
    expect(done(await w.pass({ view: [main] })).result.error).toBe(
      'create toolbox tb: name collision with existing pod ns/demo-tb (role=main)',
    );
    // Visible in the cache without the toolbox role: refused before the create.
    delete foreign.metadata!.labels!['cocoonset.cocoonstack.io/role'];
    const visible = new PlanWorld(cs, [main, foreign]);
    expect(done(await visible.pass()).result.error).toBe(
      'create toolbox tb: name collision with existing pod demo-tb',
    );
  });

  it("a failed toolbox younger than 30 s waits for its recreate: Progressing=False ToolboxFailing with vk-cocoon's message, a Warning Event, a look again when it is 30 s old (ours: a toolbox whose VM never comes up was recreated in a hot loop; new-user finding)", async () => {
    const cs = finalizedSet(toolboxes('tb'));
    const tb = annotate(failed(buildToolboxPod(cs, { name: 'tb' })), {
      [Annotations.lifecycleStateMessage]: 'image nope/missing:1 not found in registry',
    });
    tb.metadata!.creationTimestamp = new Date(T0 - 10_000);
    const w = new PlanWorld(cs, [readyPod(buildAgentPod(cs, 0, '', '')), tb]);
    const step = done(await w.pass({ nowMs: T0 }));
    expect(step.result).toMatchObject({ requeue: false, requeueAfterMs: 20_000, error: undefined });
    expect(w.ids('deletePod')).toEqual([]);
    const message =
      'toolbox pod ns/demo-tb failed: image nope/missing:1 not found in registry (a failed toolbox is recreated once its pod is 30 s old)';
    expect(w.cs.status?.conditions?.find((c) => c.type === 'Progressing')).toMatchObject({
      status: 'False',
      reason: 'ToolboxFailing',
      message,
    });
    expect(w.events).toEqual([{ eventType: 'Warning', reason: 'ToolboxFailing', message }]);
    // At 30 s it is recreated.
    done(await w.pass({ nowMs: T0 + 20_000 }));
    expect(w.ids('deletePod')).toEqual(['delete:demo-tb']);
    // A spec edit that fixes it (drift) does not wait; nor does a run recorded before the patch.
    const fixed = new PlanWorld(
      finalizedSet((c) => (c.spec.toolboxes = [{ name: 'tb', image: 'v2' }])),
      [readyPod(buildAgentPod(cs, 0, '', '')), tb],
    );
    done(await fixed.pass({ nowMs: T0 }));
    expect(fixed.ids('deletePod')).toEqual(['delete:demo-tb']);
    const old = new PlanWorld(cs, [readyPod(buildAgentPod(cs, 0, '', '')), tb]);
    done(await old.pass({ nowMs: T0, toolboxRecreateBackoff: false }));
    expect(old.ids('deletePod')).toEqual(['delete:demo-tb']);
  });

  it('replaces a terminal or drifted toolbox (no backoff once its pod is 30 s old)', async () => {
    const cs = finalizedSet(toolboxes('tb'));
    const w = new PlanWorld(cs, [
      readyPod(buildAgentPod(cs, 0, '', '')),
      failed(buildToolboxPod(cs, { name: 'tb' })),
    ]);
    expect(done(await w.pass()).result.requeue).toBe(true);
    // The delete itself checks the set's generation (deleteReadsGeneration): no read of its own.
    expect(w.ids()).toEqual(['delete:demo-tb', 'list-hibernations', 'drop-tag:vk-ns-demo-tb']);
    const drift = new PlanWorld(
      finalizedSet((c) => (c.spec.toolboxes = [{ name: 'tb', image: 'v2' }])),
      [readyPod(buildAgentPod(cs, 0, '', '')), readyPod(buildToolboxPod(cs, { name: 'tb', image: 'v1' }))],
    );
    done(await drift.pass());
    // The List first: a live toolbox is not replaced while its VM's tag is spent (driftWaitsForSpentTag).
    expect(drift.ids()).toEqual(['list-hibernations', 'delete:demo-tb', 'drop-tag:vk-ns-demo-tb']);
  });
});

/**
 * Suspend with the retain policy (docs/cocoonset.md#suspend): the reference's reconcileSuspend and
 * allOwnedPodsHibernated (reconciler_test.go AllOwnedPodsHibernated*: §7.4 #3–#7 of the flows catalogue).
 * The VM workflows the pass asks are not part of this world: tests set the annotations vk-cocoon and the VM
 * workflow would write.
 */
describe('suspend (retain)', () => {
  const suspended =
    (generation = 1) =>
    (c: CocoonSet) => {
      c.spec.suspend = true;
      c.metadata.generation = generation;
    };
  /** `p` bound to node-a (a node took it: the retain suspend waits for it). */
  const bound = (p: V1Pod) => {
    p.spec!.nodeName = 'node-a';
    return p;
  };
  /** A pod of `cs` as vk-cocoon leaves it hibernated for the set's generation (stamped by earlier passes). */
  const hibernatedPod = (cs: CocoonSet, p: V1Pod) =>
    bound(
      lifecycleHibernated(
        annotate(p, {
          [Annotations.cocoonSetGeneration]: String(cs.metadata.generation ?? 0),
          [Annotations.hibernate]: 'true',
        }),
      ),
    );
  const suspendWorld = (...mods: ((c: CocoonSet) => void)[]) => {
    const cs = finalizedSet(suspended(), ...mods);
    return { cs, w: new PlanWorld(cs) };
  };

  it('asks every pod VM workflow, in name order and in one batch, to hibernate; Suspending and a 5 s poll until vk reports', async () => {
    const { cs, w } = suspendWorld(replicas(1), toolboxes('tb'));
    for (const p of [
      bound(readyPod(buildAgentPod(cs, 0, '', ''))),
      bound(readyPod(buildAgentPod(cs, 1, 'vk-ns-demo-0', ''))),
      bound(readyPod(buildToolboxPod(cs, { name: 'tb' }))),
    ])
      w.pods.set(p.metadata!.name!, p);
    const end = done(await w.pass());
    expect(w.asks).toEqual([
      { pod: 'demo-0', desire: 'Hibernate' },
      { pod: 'demo-1', desire: 'Hibernate' },
      { pod: 'demo-tb', desire: 'Hibernate' },
    ]);
    expect(w.batches.find((b) => b.ids[0]?.startsWith('ask:'))?.concurrent).toBe(true);
    expect(end.result).toEqual({ requeue: false, requeueAfterMs: 5_000, error: undefined });
    expect(w.cs.status?.phase).toBe('Suspending');
    // Nothing is probed while vk has not reported (the gate's annotation checks come first), and the pass
    // writes no annotation itself: the VM workflows do.
    expect([w.probes, w.ids('patchPodAnnotations').filter((id) => !id.startsWith('stamp:'))]).toEqual([
      [],
      [],
    ]);
  });

  it("a scale-down drops the :hibernate tags of the sub-agents it deletes, in one batch, in the same pass (ours: the reference leaves a suspend's tag, out of the deletion GC's reach and found by a later sub-agent of the slot), except one a CocoonHibernation holds", async () => {
    const cs = finalizedSet(replicas(3), toolboxes('old'));
    const pods = [
      ...[0, 1, 2, 3].map((slot) => readyPod(buildAgentPod(cs, slot, slot === 0 ? '' : 'vk-ns-demo-0', ''))),
      readyPod(buildToolboxPod(cs, { name: 'old' })),
    ];
    const run = async (opts: { deletedVMsDropTag?: boolean; crs?: ReturnType<typeof hibernation>[] }) => {
      const w = new PlanWorld(finalizedSet(replicas(1)), pods);
      // Tags a suspend left: a woken sub-agent's VM workflow drops its own only once the VM runs.
      for (const slot of [0, 1, 2, 3]) w.tags.add(`vk-ns-demo-${slot}:hibernate`);
      w.crs = opts.crs ?? [];
      await w.pass({ deletedVMsDropTag: opts.deletedVMsDropTag });
      return w;
    };
    const w = await run({});
    expect(w.ids('deletePod')).toEqual(['delete:demo-2', 'delete:demo-3', 'delete:demo-old']);
    expect(w.droppedTags).toEqual([
      'vk-ns-demo-2:hibernate',
      'vk-ns-demo-3:hibernate',
      'vk-ns-demo-old:hibernate',
    ]);
    expect(w.batches.find((b) => b.ids[0]?.startsWith('drop-tag:'))).toMatchObject({
      ids: ['drop-tag:vk-ns-demo-2', 'drop-tag:vk-ns-demo-3'],
      concurrent: true,
    });
    const held = await run({ crs: [hibernation('demo-3', 'Hibernate')] });
    expect(held.droppedTags).toEqual(['vk-ns-demo-2:hibernate', 'vk-ns-demo-old:hibernate']);
    // Runs recorded before `scale-down-drops-tag` leave the tags, as the reference does.
    const legacy = await run({ deletedVMsDropTag: false });
    expect([legacy.ids('deletePod'), legacy.droppedTags, legacy.lists]).toEqual([
      ['delete:demo-2', 'delete:demo-3', 'delete:demo-old'],
      [],
      0,
    ]);
  });

  it('a sub-agent deleted for a rebuild and a toolbox recreated for drift get their :hibernate tags dropped (a suspend leaves one; vk-cocoon would refuse the fresh fork or the new image), unless a CocoonHibernation holds the VM', async () => {
    const cs = finalizedSet(replicas(2), toolboxes('tb'));
    const pods = () => [
      readyPod(buildAgentPod(cs, 0, '', '')),
      failed(readyPod(buildAgentPod(cs, 1, 'vk-ns-demo-0', ''))),
      readyPod(buildAgentPod(cs, 2, 'vk-ns-demo-0', '')),
      readyPod(buildToolboxPod(cs, { name: 'tb' })),
    ];
    const edited = finalizedSet(replicas(2), (c) => {
      c.spec.toolboxes = [{ name: 'tb', image: 'chromium:beta' }];
    });
    const w = new PlanWorld(edited, pods());
    for (const vm of ['vk-ns-demo-1', 'vk-ns-demo-2', 'vk-ns-demo-tb']) w.tags.add(`${vm}:hibernate`);
    await w.pass();
    expect(w.ids('deletePod')).toEqual(['delete:demo-1', 'delete:demo-tb']);
    expect(w.droppedTags).toEqual(['vk-ns-demo-1:hibernate', 'vk-ns-demo-tb:hibernate']);
    const held = new PlanWorld(edited, pods());
    held.crs = [hibernation('demo-tb', 'Hibernate')];
    await held.pass();
    expect(held.droppedTags).toEqual(['vk-ns-demo-1:hibernate']);
    // Runs recorded before `deleted-vms-drop-tag` drop nothing.
    const legacy = new PlanWorld(edited, pods());
    await legacy.pass({ deletedVMsDropTag: false });
    expect(legacy.droppedTags).toEqual([]);
  });

  it('a drifted main is deleted with its :hibernate tag (a suspend leaves one; vk-cocoon would refuse the new image or restore old state), but not while vk is still hibernating it: the round ends first', async () => {
    const cs = finalizedSet(replicas(1));
    const edited = finalizedSet(replicas(1), (c) => {
      c.spec.agent.image = 'ubuntu:26.04';
    });
    const mainPod = () => readyPod(buildAgentPod(cs, 0, '', ''));
    const w = new PlanWorld(edited, [mainPod()]);
    w.tags.add('vk-ns-demo-0:hibernate');
    expect(done(await w.pass()).result.requeue).toBe(true);
    expect([w.ids('deletePod'), w.droppedTags]).toEqual([['delete:demo-0'], ['vk-ns-demo-0:hibernate']]);

    const mid = new PlanWorld(edited, [annotate(mainPod(), { [Annotations.lifecycleState]: 'hibernating' })]);
    done(await mid.pass());
    expect([mid.ids('deletePod'), mid.droppedTags]).toEqual([[], []]);
    // A sub-agent likewise.
    const sub = new PlanWorld(edited, [
      readyPod(buildAgentPod(edited, 0, '', '')),
      annotate(readyPod(buildAgentPod(cs, 1, 'vk-ns-demo-0', '')), {
        [Annotations.lifecycleState]: 'hibernating',
      }),
    ]);
    done(await sub.pass());
    expect(sub.ids('deletePod')).toEqual([]);

    const held = new PlanWorld(edited, [mainPod()]);
    held.crs = [hibernation('demo-0', 'Hibernate')];
    done(await held.pass());
    expect([held.ids('deletePod'), held.droppedTags]).toEqual([['delete:demo-0'], []]);
  });

  it('settles Suspended (no requeue) once every managed VM is hibernated for this generation with its tag; Progressing False Stable', async () => {
    const { cs, w } = suspendWorld(replicas(1));
    w.pods.set('demo-0', hibernatedPod(cs, buildAgentPod(cs, 0, '', '')));
    w.pods.set('demo-1', hibernatedPod(cs, buildAgentPod(cs, 1, 'vk-ns-demo-0', '')));
    w.tags.add('vk-ns-demo-0:hibernate');
    // AllOwnedPodsHibernatedWaitsForEachManagedPod: the sub's tag is missing.
    expect(done(await w.pass()).result.requeueAfterMs).toBe(5_000);
    expect(w.cs.status?.phase).toBe('Suspending');
    w.tags.add('vk-ns-demo-1:hibernate');
    const end = done(await w.pass());
    expect(end.result).toEqual({ requeue: false, requeueAfterMs: 0, error: undefined });
    expect(w.cs.status?.phase).toBe('Suspended');
    expect(w.cs.status?.conditions?.find((c) => c.type === 'Progressing')).toMatchObject({
      status: 'False',
      reason: 'Stable',
    });
  });

  it('ignores a stale tag: lifecycle hibernated and its generation floor come before the probe', async () => {
    // AllOwnedPodsHibernatedIgnoresStaleTag (a771f1c, 472581f).
    const { cs, w } = suspendWorld();
    const main = bound(annotate(buildAgentPod(cs, 0, '', ''), { [Annotations.cocoonSetGeneration]: '1' }));
    w.pods.set('demo-0', main);
    w.tags.add('vk-ns-demo-0:hibernate');
    done(await w.pass());
    expect([w.cs.status?.phase, w.probes]).toEqual(['Suspending', []]);
    lifecycleHibernated(main);
    done(await w.pass());
    expect([w.cs.status?.phase, w.probes]).toEqual(['Suspended', ['vk-ns-demo-0']]);
    // A spec edit while suspended raises the floor: vk must report hibernated for generation 5.
    w.cs.metadata.generation = 5;
    done(await w.pass());
    expect(w.cs.status?.phase).toBe('Suspending');
  });

  it('skips unmanaged (static) toolboxes and terminal pods in the gate', async () => {
    // AllOwnedPodsHibernatedSkipsUnmanagedToolbox, AllOwnedPodsHibernatedSkipsTerminalPod.
    const tb = { name: 'vnc', mode: 'static' as const, staticVMID: 'qemu-1', staticIP: '10.0.0.1' };
    const { cs, w } = suspendWorld(replicas(1), (c) => (c.spec.toolboxes = [tb]));
    w.pods.set('demo-0', hibernatedPod(cs, buildAgentPod(cs, 0, '', '')));
    w.pods.set('demo-1', bound(failed(buildAgentPod(cs, 1, 'vk-ns-demo-0', ''))));
    w.pods.set('demo-vnc', bound(readyPod(buildToolboxPod(cs, tb))));
    w.tags.add('vk-ns-demo-0:hibernate');
    done(await w.pass());
    expect(w.cs.status?.phase).toBe('Suspended');
    expect(w.probes).toEqual(['vk-ns-demo-0']);
    // Both still get the set's desire (the reference annotates every classified pod).
    expect(w.asks.map((a) => a.pod)).toEqual(['demo-0', 'demo-1', 'demo-vnc']);
  });

  it('fails the pass on a probe error (AllOwnedPodsHibernatedPropagatesProbeError), with no phase change', async () => {
    const { cs, w } = suspendWorld();
    w.pods.set('demo-0', hibernatedPod(cs, buildAgentPod(cs, 0, '', '')));
    w.probeError = 'registry down';
    expect(done(await w.pass()).result.error).toBe('probe hibernate snapshot vk-ns-demo-0: registry down');
    expect(w.cs.status?.phase).not.toBe('Suspended');
  });

  it('a missing main is created first, restoring from its tag, and the pass requeues at once with no status write; no sub-agent or toolbox is created', async () => {
    const { w } = suspendWorld(replicas(1), toolboxes('tb'));
    w.tags.add('vk-ns-demo-0:hibernate');
    const end = done(await w.pass());
    expect(end.result.requeue).toBe(true);
    expect([...w.pods.keys()]).toEqual(['demo-0']);
    expect(w.pod('demo-0')!.metadata!.annotations![Annotations.restoreFromHibernate]).toBe('true');
    expect([w.statusPatches, w.asks]).toEqual([[], []]);
    // Without a tag it boots fresh.
    const fresh = suspendWorld().w;
    done(await fresh.pass());
    expect(fresh.pod('demo-0')!.metadata!.annotations![Annotations.restoreFromHibernate]).toBeUndefined();
  });

  it('a missing main is not created when the probe fails (fail closed), nor on AlreadyExists', async () => {
    const { w } = suspendWorld();
    w.probeError = 'registry down';
    expect(done(await w.pass()).result.error).toBe('probe hibernate snapshot vk-ns-demo-0: registry down');
    expect(w.pods.size).toBe(0);
    const { cs, w: racing } = suspendWorld();
    racing.pods.set('demo-0', buildAgentPod(cs, 0, '', ''));
    const end = done(await racing.pass({ view: [] }));
    expect(end.result.error).toBe('create main agent before suspend: pod ns/demo-0 already exists');
  });

  it('a main pod still terminating is waited for: Suspending, Progressing False MainTerminating, a 5 s poll, nothing created or asked; once it is gone the main is created (deliberate: the reference fails the create with AlreadyExists and backs off)', async () => {
    const { cs, w } = suspendWorld(replicas(1));
    const terminating = readyPod(buildAgentPod(cs, 0, '', ''));
    terminating.metadata!.deletionTimestamp = new Date('2026-05-14T00:59:50Z');
    w.pods.set('demo-0', terminating);
    w.pods.set('demo-1', readyPod(buildAgentPod(cs, 1, '', '')));
    const end = done(await w.pass());
    expect(end.result).toMatchObject({ requeueAfterMs: 5_000 });
    expect(end.result.error).toBeUndefined();
    expect(w.cs.status?.phase).toBe('Suspending');
    expect(w.cs.status?.conditions?.find((c) => c.type === 'Progressing')).toMatchObject({
      status: 'False',
      reason: 'MainTerminating',
      message: 'main pod ns/demo-0 is terminating: it is created again once it is gone',
    });
    expect([w.ids('createPod'), w.asks, w.probes]).toEqual([[], [], []]);
    // Gone: created (restoring from its tag), as for any missing main.
    w.pods.delete('demo-0');
    w.tags.add('vk-ns-demo-0:hibernate');
    expect(done(await w.pass()).result.requeue).toBe(true);
    expect(w.pod('demo-0')!.metadata!.annotations![Annotations.restoreFromHibernate]).toBe('true');
    // The reference's rule, kept for runs recorded before the patch.
    const legacy = suspendWorld().w;
    legacy.pods.set('demo-0', terminating);
    expect(done(await legacy.pass({ waitsForTerminatingMain: false })).result.error).toBe(
      'create main agent before suspend: pod ns/demo-0 already exists',
    );
  });

  it('a failed main short-circuits the suspend: the set goes Failed, no VM workflow is asked', async () => {
    const { cs, w } = suspendWorld();
    w.pods.set(
      'demo-0',
      annotate(buildAgentPod(cs, 0, '', ''), {
        [Annotations.lifecycleState]: 'failed',
        [Annotations.lifecycleStateMessage]: 'push failed',
      }),
    );
    done(await w.pass());
    expect([w.cs.status?.phase, w.asks]).toEqual(['Failed', []]);
  });

  it('neither asks nor waits for a pod no node took (a restore main pinned to a node that never takes it): Suspended at once; once a node takes it the next pass asks and waits (deliberate difference: the reference waits in Suspending for ever)', async () => {
    const { cs, w } = suspendWorld((c) => (c.spec.nodeName = 'ghost'));
    const restore = annotate(buildAgentPod(cs, 0, '', ''), { [Annotations.restoreFromHibernate]: 'true' });
    w.pods.set('demo-0', restore);
    w.tags.add('vk-ns-demo-0:hibernate');
    expect(done(await w.pass()).result).toEqual({ requeue: false, requeueAfterMs: 0, error: undefined });
    expect([w.cs.status?.phase, w.asks, w.ids('deletePod'), w.tags.has('vk-ns-demo-0:hibernate')]).toEqual([
      'Suspended',
      [],
      [],
      true,
    ]);
    bound(restore);
    done(await w.pass());
    expect([w.cs.status?.phase, w.asks]).toEqual(['Suspending', [{ pod: 'demo-0', desire: 'Hibernate' }]]);

    const legacy = new PlanWorld(cs, [annotate(buildAgentPod(cs, 0, '', ''), {})]);
    done(await legacy.pass({ retainSkipsUnbound: false }));
    expect([legacy.cs.status?.phase, legacy.asks]).toEqual([
      'Suspending',
      [{ pod: 'demo-0', desire: 'Hibernate' }],
    ]);
  });

  it('shows a CocoonHibernation that holds a VM awake on Progressing (reason DesireConflict) while Suspending', async () => {
    const { cs, w } = suspendWorld();
    w.pods.set('demo-0', bound(readyPod(buildAgentPod(cs, 0, '', ''))));
    done(
      await w.pass({ desireConflicts: { 'demo-0': 'VM vk-ns-demo-0 is held by cocoonhibernation keep' } }),
    );
    expect(w.cs.status?.phase).toBe('Suspending');
    expect(w.cs.status?.conditions?.find((c) => c.type === 'Progressing')).toMatchObject({
      status: 'False',
      reason: 'DesireConflict',
      message: 'pod demo-0: VM vk-ns-demo-0 is held by cocoonhibernation keep',
    });
    // Gone once the VM workflow follows the set again.
    done(await w.pass());
    expect(w.cs.status?.conditions?.find((c) => c.type === 'Progressing')?.reason).toBe('Stable');
  });

  it('never deletes a pod or patches the restore mark of an existing pod', async () => {
    const { cs, w } = suspendWorld(replicas(2));
    w.pods.set('demo-0', hibernatedPod(cs, buildAgentPod(cs, 0, '', '')));
    done(await w.pass());
    expect(w.ids('deletePod')).toEqual([]);
    expect(w.ids('createPod')).toEqual([]);
    expect(w.pod('demo-0')!.metadata!.annotations![Annotations.restoreFromHibernate]).toBeUndefined();
  });
});

describe('un-suspend', () => {
  function hibernatedWorld(crs = [] as ReturnType<typeof hibernation>[]) {
    const cs = finalizedSet(replicas(1), toolboxes('tb'));
    const w = new PlanWorld(cs, [
      annotate(readyPod(buildAgentPod(cs, 0, '', '')), { [Annotations.hibernate]: 'true' }),
      annotate(readyPod(buildAgentPod(cs, 1, 'vk-ns-demo-0', '')), { [Annotations.hibernate]: 'true' }),
      readyPod(buildToolboxPod(cs, { name: 'tb' })),
    ]);
    w.crs = crs;
    return w;
  }
  const hib = (w: PlanWorld, pod: string) => w.pod(pod)!.metadata!.annotations![Annotations.hibernate];

  it('asks the VM workflow of each hibernating pod, in name order, to wake it: one batch, no CocoonHibernation List (the VM workflow knows them)', async () => {
    const w = hibernatedWorld([hibernation('demo-0', 'Hibernate', 'Hibernated')]);
    done(await w.pass({ registryConfigured: false }));
    expect(w.asks).toEqual([
      { pod: 'demo-0', desire: 'Wake' },
      { pod: 'demo-1', desire: 'Wake' },
    ]);
    expect(w.batches.find((b) => b.ids[0]?.startsWith('ask:'))).toMatchObject({
      ids: ['ask:Wake:demo-0', 'ask:Wake:demo-1'],
      concurrent: true,
    });
    expect([w.lists, w.ids('patchPodAnnotations')]).toEqual([0, []]);
  });

  it('also asks the VM workflows the set asked to hibernate whose annotation was never written (a CocoonHibernation held the VM awake, or the suspend was undone first): no stale desire stays behind', async () => {
    const cs = finalizedSet(replicas(1));
    const w = new PlanWorld(cs, [
      readyPod(buildAgentPod(cs, 0, '', '')),
      readyPod(buildAgentPod(cs, 1, 'vk-ns-demo-0', '')),
    ]);
    done(await w.pass({ hibernateAsked: { 'demo-0': 'uid-0' } }));
    expect(w.asks).toEqual([{ pod: 'demo-0', desire: 'Wake' }]);
  });

  it('asks a pod whose tag the set’s own wake (released seat, migration) dropped to leave the tag (keepTag: one DELETE per wake); a pod the set recreated otherwise gets a plain wake, so its VM workflow drops the leftover', async () => {
    const cs = finalizedSet(replicas(1));
    const w = new PlanWorld(cs, [
      readyPod(buildAgentPod(cs, 0, '', '')),
      readyPod(buildAgentPod(cs, 1, 'vk-ns-demo-0', '')),
    ]);
    done(
      await w.pass({
        hibernateAsked: { 'demo-0': 'uid-old-0', 'demo-1': 'uid-old-1' },
        tagDroppedFor: { 'demo-0': true },
      }),
    );
    expect(w.asks).toEqual([
      { pod: 'demo-0', desire: 'Wake', keepTag: true },
      { pod: 'demo-1', desire: 'Wake' },
    ]);
  });

  it('fails the pass when a VM workflow cannot be asked', async () => {
    const w = hibernatedWorld();
    w.failures.set('ask:Wake:demo-1', 'temporal unavailable');
    expect(done(await w.pass({ registryConfigured: false })).result.error).toBe(
      'ask the VM workflow to wake ns/demo-1: temporal unavailable',
    );
  });

  it('before set-desires (runs recorded earlier): clears leftover hibernate annotations itself and leaves other pods alone', async () => {
    const w = hibernatedWorld();
    done(await w.pass({ registryConfigured: false, setDesires: false }));
    expect([hib(w, 'demo-0'), hib(w, 'demo-1'), hib(w, 'demo-tb')]).toEqual([
      undefined,
      undefined,
      undefined,
    ]);
    expect(w.ids('patchPodAnnotations')).toEqual(['unsuspend:demo-0', 'unsuspend:demo-1']);
    expect(w.lists).toBe(1);
  });

  it('before set-desires: skips pods a CocoonHibernation holds (desire Hibernate, or Hibernating on a reverse desire)', async () => {
    const w = hibernatedWorld([
      hibernation('demo-0', 'Hibernate', 'Hibernated'),
      hibernation('demo-1', 'Wake', 'Hibernating'),
    ]);
    done(await w.pass({ registryConfigured: false, setDesires: false }));
    expect([hib(w, 'demo-0'), hib(w, 'demo-1')]).toEqual(['true', 'true']);
  });

  it('is free on a clean set: no List, no patch, no VM workflow asked', async () => {
    const cs = finalizedSet();
    const w = new PlanWorld(cs, [readyPod(buildAgentPod(cs, 0, '', ''))]);
    done(await w.pass());
    expect([w.lists, w.ids('patchPodAnnotations').length, w.asks.length]).toEqual([0, 0, 0]);
  });
});

describe('extension points', () => {
  it('before seat-release / set-desires: delegates the release suspend (and the retain one), after the failed-main check', async () => {
    const cs = finalizedSet((c) => (c.spec.suspend = true));
    expect(
      await new PlanWorld(cs, [readyPod(buildAgentPod(cs, 0, '', ''))]).pass({ setDesires: false }),
    ).toEqual({
      kind: 'delegate',
      flow: 'suspend',
    });
    const rel = finalizedSet((c) => {
      c.spec.suspend = true;
      c.spec.hibernatePolicy = 'release';
    });
    expect(await new PlanWorld(rel).pass({ seatRelease: false })).toEqual({
      kind: 'delegate',
      flow: 'suspendRelease',
    });
    const dead = new PlanWorld(cs, [failed(buildAgentPod(cs, 0, '', ''))]);
    expect(done(await dead.pass()).result.error).toBeUndefined();
    expect(dead.cs.status!.phase).toBe('Failed');
  });

  it('runs queued events before delegating', async () => {
    const cs = finalizedSet((c) => {
      c.spec.suspend = true;
      c.status = {
        phase: 'Failed',
        readyAgents: 0,
        desiredAgents: 1,
        readyToolboxes: 0,
        desiredToolboxes: 0,
      };
    });
    const w = new PlanWorld(cs, [readyPod(buildAgentPod(cs, 0, '', ''))]);
    expect(await w.pass({ setDesires: false })).toEqual({ kind: 'delegate', flow: 'suspend' });
    expect(w.events.map((e) => e.reason)).toEqual(['RecoveredFromFailure']);
  });

  it('before the migration patch: delegates migration only when its gate can engage, and continues when it declines', async () => {
    const cs = finalizedSet((c) => (c.spec.nodeName = 'node-b'));
    const main = annotate(readyPod(buildAgentPod(cs, 0, '', '')), { [Annotations.vmID]: 'vm' });
    main.spec!.nodeName = 'node-a';
    main.status!.containerStatuses = [
      { name: 'agent', image: 'x', imageID: '', ready: true, restartCount: 0, state: { running: {} } },
    ];
    const w = new PlanWorld(cs, [main]);
    expect(await w.pass({ migration: false })).toEqual({ kind: 'delegate', flow: 'migration' });
    expect(
      done(await w.pass({ migration: false, declined: { migration: true } })).result.error,
    ).toBeUndefined();
    expect(migrationMayEngage(cs, main, false)).toBe(false);
    main.spec!.nodeName = 'node-b';
    expect(migrationMayEngage(cs, main, true)).toBe(false);
    main.metadata!.annotations![Annotations.hibernate] = 'true';
    expect(migrationMayEngage(cs, main, true)).toBe(true);
    expect(migrationMayEngage(finalizedSet(), main, true)).toBe(false);
    expect(
      migrationMayEngage(
        finalizedSet((c) => (c.status = { phase: 'Migrating' } as CocoonSet['status'])),
        main,
        true,
      ),
    ).toBe(true);
  });

  it('delegates the wake only for the phases and rows that need it', async () => {
    const main = readyPod(buildAgentPod(finalizedSet(), 0, '', ''));
    const phase = (p: string, hint?: string) =>
      finalizedSet((c) => {
        c.status = { phase: p } as CocoonSet['status'];
        if (hint) c.metadata.annotations = { [Annotations.hibernatedOnNode]: hint };
      });
    expect(wakeMayEngage(phase('Running'), main, true)).toBe(false);
    expect(wakeMayEngage(phase('Waking'), main, true)).toBe(true);
    expect(wakeMayEngage(phase('Waking'), main, false)).toBe(false);
    expect(wakeMayEngage(phase('Suspended'), undefined, true)).toBe(true);
    // A retain set leaving suspend (Suspended, main present, no hint) falls through to the normal flow.
    expect(wakeMayEngage(phase('Suspended'), main, true)).toBe(false);
    expect(wakeMayEngage(phase('Suspended', 'node-a'), main, true)).toBe(true);
    expect(wakeMayEngage(phase('Suspending'), undefined, true)).toBe(false);
    expect(
      wakeMayEngage(phase('Suspending', 'node-a'), failed(buildAgentPod(finalizedSet(), 0, '', '')), true),
    ).toBe(false);
    const restored = annotate(readyPod(buildAgentPod(finalizedSet(), 0, '', '')), {
      [Annotations.restoreFromHibernate]: 'true',
    });
    expect(wakeMayEngage(phase('Running', 'node-a'), restored, true)).toBe(true);
    expect((await new PlanWorld(phase('Suspended'), [main]).pass()).kind).toBe('done');
  });
});

describe('planner protocol', () => {
  it('is deterministic: equal inputs and outcomes ask for the same I/O in the same batches (what a workflow replay needs)', async () => {
    const cs = finalizedSet(replicas(2), toolboxes('tb'));
    const worlds = [0, 1].map(() => new PlanWorld(cs, [readyPod(buildAgentPod(cs, 0, '', ''))]));
    const ends = [];
    for (const w of worlds) ends.push(await w.pass({ nowMs: T0 }));
    expect(ends[1]).toEqual(ends[0]);
    expect(worlds[1]!.batches).toEqual(worlds[0]!.batches);
    expect(worlds[1]!.log).toEqual(worlds[0]!.log);
    expect(worlds[0]!.batches[0]).toEqual({
      ids: ['list-hibernations'],
      concurrent: false,
      maxConcurrency: 1,
    });
  });

  it('fails the pass on a List error without creating anything', async () => {
    const cs = finalizedSet(replicas(1));
    const w = new PlanWorld(cs, [readyPod(buildAgentPod(cs, 0, '', ''))]);
    w.failures.set('list-hibernations', 'forbidden');
    expect(done(await w.pass()).result.error).toBe('list cocoonhibernations in ns: forbidden');
    expect(w.ids('createPod')).toEqual([]);
  });

  it('reports the first sub-agent create error after recording the successful creates', async () => {
    const cs = finalizedSet(replicas(2));
    const w = new PlanWorld(cs, [readyPod(buildAgentPod(cs, 0, '', ''))]);
    w.failures.set('create:demo-1', 'quota exceeded');
    expect(done(await w.pass()).result.error).toBe('create sub-agent slot 1: quota exceeded');
    expect(w.pods.has('demo-2')).toBe(true);
  });

  it('a malformed quantity is an invalid spec (deliberate: the reference fails the build after its drift delete): no pod touched, Progressing=False InvalidSpec naming the field', async () => {
    const cs = finalizedSet((c) => (c.spec.agent.storage = '1kk'));
    const w = new PlanWorld(cs, [readyPod(buildAgentPod(finalizedSet(), 0, '', ''))]);
    const step = done(await w.pass());
    expect(step.result).toEqual({ requeue: false, requeueAfterMs: 0, error: undefined });
    expect(w.ids('deletePod')).toEqual([]);
    expect(w.ids('createPod')).toEqual([]);
    const progressing = w.cs.status?.conditions?.find((c) => c.type === 'Progressing');
    expect(progressing).toMatchObject({ status: 'False', reason: 'InvalidSpec' });
    expect(progressing?.message).toContain(
      `spec.agent: Invalid value: "1kk": unable to parse quantity's suffix`,
    );
  });
});

describe('sub-agents of a main without a CPU class', () => {
  it('are built without the class selector when the spec gained a class the main (adopted) does not have: they fork on its node, which vk-cocoon would refuse them on; a classed main gives them its class; the old version built them classed (deliberate difference: refused for ever)', async () => {
    const classless = finalizedSet((c) => (c.metadata.generation = 1));
    const main = liveOn(readyPod(buildAgentPod(classless, 0, '', '')), 'node-a', 'vm-0');
    const withClass = finalizedSet(replicas(1), (c) => {
      c.metadata.generation = 2;
      c.spec.snapshotCompatibilityClass = 'n2-v1';
    });
    const w = new PlanWorld(withClass, [main]);
    done(await w.pass());
    const sub = w.pod('demo-1')!;
    expect([sub.spec?.nodeName, sub.spec?.nodeSelector?.[Labels.snapshotCPUClass]]).toEqual([
      'node-a',
      undefined,
    ]);
    expect(w.ids('deletePod')).toEqual([]);

    const classed = new PlanWorld(withClass, [
      liveOn(readyPod(buildAgentPod(withClass, 0, '', '')), 'node-a', 'vm-0'),
    ]);
    done(await classed.pass());
    expect(classed.pod('demo-1')!.spec?.nodeSelector?.[Labels.snapshotCPUClass]).toBe('n2-v1');

    const legacy = new PlanWorld(withClass, [main]);
    done(await legacy.pass({ subAgentsFollowMainClass: false }));
    expect(legacy.pod('demo-1')!.spec?.nodeSelector?.[Labels.snapshotCPUClass]).toBe('n2-v1');
  });
});

describe('a pass planned from a replaced spec deletes nothing (ours: deletesCheckGeneration)', () => {
  it('each delete checks the generation itself; an edit that landed since ends the pass (another at once) with the running pods kept: a main drift, a scale-down; the version before read it in an activity of its own; the old version deleted them', async () => {
    const before = finalizedSet(replicas(2), (c) => (c.metadata.generation = 3));
    const pods = () => convergedPods(before);
    const cases: [string, (c: CocoonSet) => void][] = [
      ['image edit', (c) => (c.spec.agent.image = 'cocoon/agent:v2')],
      ['scale to 0', (c) => (c.spec.agent.replicas = 0)],
    ];
    const deletes = (w: PlanWorld) =>
      w.log.flatMap((a) => (a.type === 'deletePod' ? [`${a.pod}@${a.ifGeneration ?? '-'}`] : []));
    const reads = (w: PlanWorld) => w.ids().filter((id) => id.startsWith('generation'));
    for (const [what, edit] of cases) {
      const planned = finalizedSet(replicas(2), (c) => (c.metadata.generation = 4), edit);
      const w = new PlanWorld(planned, pods());
      w.storedGeneration = 5; // edited again (back) after the pass read generation 4
      expect(done(await w.pass()).result, what).toEqual({
        requeue: true,
        requeueAfterMs: 0,
        error: undefined,
      });
      expect(w.pods.size, what).toBe(3);
      expect(deletes(w).length, what).toBeGreaterThan(0);
      expect(
        deletes(w).every((d) => d.endsWith('@4')),
        what,
      ).toBe(true);
      expect(reads(w), what).toEqual([]);

      const current = new PlanWorld(planned, pods());
      done(await current.pass());
      expect(current.pods.size, what).toBeLessThan(3);
      expect(reads(current), what).toEqual([]);

      // The version before: one read right before each delete step (a batch is one step).
      const separate = new PlanWorld(planned, pods());
      separate.storedGeneration = 5;
      done(await separate.pass({ deleteReadsGeneration: false }));
      expect([deletes(separate), separate.pods.size, reads(separate)], what).toEqual([
        [],
        3,
        ['generation:1'],
      ]);

      const legacy = new PlanWorld(planned, pods());
      legacy.storedGeneration = 5;
      done(await legacy.pass({ deletesCheckGeneration: false }));
      expect(legacy.pods.size, what).toBeLessThan(3);
    }
  });

  it('(the version before) a read error fails the pass before any delete', async () => {
    const before = finalizedSet(replicas(1), (c) => (c.metadata.generation = 3));
    const planned = finalizedSet(replicas(0), (c) => (c.metadata.generation = 4));
    const w = new PlanWorld(planned, convergedPods(before));
    w.failures.set('generation:1', 'apiserver down');
    expect(done(await w.pass({ deleteReadsGeneration: false })).result.error).toBe(
      'read cocoonset generation before a pod delete: apiserver down',
    );
    expect(w.ids('deletePod')).toEqual([]);
  });
});
