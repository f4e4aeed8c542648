/**
 * Generation stamping on owned pods (port of lifecycle_test.go, docs/cocoonset.md#generation-stamp), run
 * through the pass planner against the in-memory world, whose patch rejects an empty body.
 */
import { describe, expect, it } from 'vitest';
import { Annotations } from '../../src/api/keys.js';
import { buildAgentPod } from '../../src/cocoonset/pods.js';
import { newCocoonSet, readyPod, withFinalizer } from '../support/builders.js';
import { done, PlanWorld } from './plan-world.js';

const gen = (w: PlanWorld, pod: string) =>
  w.pod(pod)!.metadata!.annotations![Annotations.cocoonSetGeneration];

describe('generation stamp', () => {
  it('stamps every owned pod whose stamp differs, in name order, before anything else', async () => {
    const cs = newCocoonSet('demo', withFinalizer, (c) => {
      c.spec.agent.replicas = 1;
    });
    const main = readyPod(buildAgentPod(cs, 0, '', ''));
    delete main.metadata!.annotations![Annotations.cocoonSetGeneration];
    const sub = readyPod(buildAgentPod(cs, 1, 'vk-ns-demo-0', ''));
    sub.metadata!.annotations![Annotations.cocoonSetGeneration] = '5';
    const w = new PlanWorld(cs, [sub, main]);
    w.cs.metadata.generation = 7;
    done(await w.pass());
    expect([gen(w, 'demo-0'), gen(w, 'demo-1')]).toEqual(['7', '7']);
    expect(w.ids().slice(0, 2)).toEqual(['stamp:demo-0', 'stamp:demo-1']);
  });

  it('sends no patch when the stamp is already current', async () => {
    const cs = newCocoonSet('demo', withFinalizer, (c) => {
      c.metadata.generation = 3;
    });
    const w = new PlanWorld(cs, [readyPod(buildAgentPod(cs, 0, '', ''))]);
    expect(done(await w.pass()).result.error).toBeUndefined();
    expect(w.ids('patchPodAnnotations')).toEqual([]);
  });

  it('writes nothing at generation 0 for an unstamped pod (absent reads as 0)', async () => {
    const cs = newCocoonSet('demo', withFinalizer);
    const main = readyPod(buildAgentPod(cs, 0, '', ''));
    delete main.metadata!.annotations![Annotations.cocoonSetGeneration];
    const w = new PlanWorld(cs, [main]);
    done(await w.pass());
    expect(w.ids('patchPodAnnotations')).toEqual([]);
  });

  it('skips terminating pods and fails the pass on a patch error', async () => {
    const cs = newCocoonSet('demo', withFinalizer, (c) => {
      c.metadata.generation = 2;
      c.spec.agent.replicas = 1;
    });
    const main = readyPod(buildAgentPod({ ...cs, metadata: { ...cs.metadata, generation: 1 } }, 0, '', ''));
    const leaving = buildAgentPod({ ...cs, metadata: { ...cs.metadata, generation: 1 } }, 1, '', '');
    leaving.metadata!.deletionTimestamp = new Date('2026-05-14T00:00:00Z');
    const w = new PlanWorld(cs, [main, leaving]);
    w.failures.set('stamp:demo-0', 'conflict');
    expect(done(await w.pass()).result.error).toBe('patch cocoonset generation on ns/demo-0: conflict');
    // The terminating pod is not stamped; the failed pass then writes its roll-up (ours: ReconcileFailed).
    expect(w.ids()).toEqual(['stamp:demo-0', 'status-on-failure']);
  });
});
