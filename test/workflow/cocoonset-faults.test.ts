/**
 * CocoonSet workflow faults on the time-skipping test server, through the in-memory CocoonSetWorld: an
 * invalid spec edit touches no pod (ours: the reference deletes the drifted main, then its replacement is
 * rejected), a failure every pass repeats backs off instead of looping on pod events or continue-as-new,
 * and a set of 1000 pods is read in bounded pages and can still be deleted.
 */
import type { V1Pod } from '@kubernetes/client-node';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { POD_PAGE_SIZE } from '../../src/activities/cocoonset.js';
import type { CocoonSet } from '../../src/api/types.js';
import { buildAgentPod } from '../../src/cocoonset/pods.js';
import { RECONCILE_FAILED } from '../../src/workflows/cocoonset.js';
import { newCocoonSet, readyPod, withFinalizer } from '../support/builders.js';
import { waitFor } from '../support/wait.js';
import { CocoonSetWorld, withCocoonSetWorld } from './cocoonset-world.js';
import { createEnv, timerDurations } from './harness.js';

let env: TestWorkflowEnvironment;

beforeEach(async () => {
  env = await createEnv();
});
afterEach(async () => {
  await env?.teardown();
});

const MAIN_VM = 'vk-ns-demo-0';

/** demo with `replicas` sub-agents, 10Gi storage, generation 1, finalizer on. */
function storageSet(replicas: number): CocoonSet {
  return newCocoonSet('demo', withFinalizer, (cs) => {
    cs.metadata.generation = 1;
    cs.spec.agent.replicas = replicas;
    cs.spec.agent.storage = '10Gi';
  });
}

/** The main and `replicas` sub-agents, all Ready. `pad` bytes of an annotation no pass reads on each. */
function readyAgents(cs: CocoonSet, replicas: number, pad = 0): V1Pod[] {
  const pods = [readyPod(buildAgentPod(cs, 0, '', ''))];
  for (let s = 1; s <= replicas; s++) pods.push(readyPod(buildAgentPod(cs, s, MAIN_VM, '')));
  if (pad > 0) {
    for (const p of pods)
      p.metadata!.annotations!['kubectl.kubernetes.io/last-applied-configuration'] = 'x'.repeat(pad);
  }
  return pods;
}

function uids(world: CocoonSetWorld): Record<string, string | undefined> {
  return Object.fromEntries([...world.pods].map(([n, p]) => [n, p.metadata?.uid]));
}

function progressing(world: CocoonSetWorld) {
  return world.cs?.status?.conditions?.find((c) => c.type === 'Progressing');
}

interface SetState {
  passes: number;
  passing: boolean;
  signals: number;
  failures: number;
  nextPassAt: string | null;
  lastResult: { error?: string; pass: number } | null;
}

describe('CocoonSet workflow faults', () => {
  it('an edit to storage -5Gi deletes no pod (deliberate: the reference deletes the main, then its create is rejected): Progressing=False InvalidSpec, the Ready pods still counted, a Warning Event; the fix recovers', async () => {
    const cs = storageSet(1);
    const world = new CocoonSetWorld(cs, readyAgents(cs, 1));
    const before = uids(world);
    await withCocoonSetWorld(env, world, async (w) => {
      await w.start();
      await waitFor('Running', () => w.cs?.status?.phase === 'Running');
      const n = await w.passes();
      const calls = w.calls.length;
      await w.editSpec((c) => {
        c.spec.agent.storage = '-5Gi';
      });
      await w.settledAfter(n);
      expect(uids(w)).toEqual(before);
      expect(w.calls.slice(calls).filter((c) => /^(create|delete|annotate )/.test(c))).toEqual([]);
      expect(w.cs?.status).toMatchObject({ phase: 'Running', readyAgents: 2, observedGeneration: 2 });
      expect(progressing(w)).toMatchObject({ status: 'False', reason: 'InvalidSpec' });
      expect(progressing(w)?.message).toContain(
        'spec.containers[0].resources.limits[ephemeral-storage]: Invalid value: "-5Gi": must be greater than or equal to 0 (from spec.agent.storage)',
      );
      const ev = w.events.find((e) => e.reason === 'InvalidSpec');
      expect(ev).toMatchObject({ type: 'Warning', message: progressing(w)?.message });
      // Not a failed pass: nothing to retry until the spec changes.
      expect(await w.lastResult()).toMatchObject({ requeue: false, requeueAfterMs: 0 });
      expect((await w.lastResult())?.error).toBeUndefined();

      const m = await w.passes();
      await w.editSpec((c) => {
        c.spec.agent.storage = '10Gi';
      });
      await w.settledAfter(m);
      expect(uids(w)).toEqual(before);
      expect(progressing(w)).toMatchObject({ status: 'False', reason: 'Stable', message: 'Running' });
      expect(w.cs?.status).toMatchObject({ phase: 'Running', readyAgents: 2, observedGeneration: 3 });
    });
  });

  it('a failure every pass repeats (a create rejected 403) is visible and backs off: pod events and continue-as-new start no pass during the backoff', async () => {
    const cs = storageSet(2);
    const world = new CocoonSetWorld(cs, readyAgents(cs, 0));
    world.rejectCreate.set('demo-1', {
      type: 'KubeApiForbidden',
      message:
        'pods "demo-1" is forbidden: exceeded quota: q, requested: pods=1, used: pods=1, limited: pods=1 (Forbidden, HTTP 403)',
    });
    await withCocoonSetWorld(env, world, async (w) => {
      // A history bound of 1 byte asks for continue-as-new after every pass.
      await w.start({ historyBytesLimit: 1 });
      await waitFor('a failed pass', () => w.events.some((e) => e.reason === RECONCILE_FAILED));
      const ev = w.events.find((e) => e.reason === RECONCILE_FAILED)!;
      expect(ev.message).toBe(`create sub-agent slot 1: ${world.rejectCreate.get('demo-1')!.message}`);
      await waitFor('the failure roll-up', () => progressing(w)?.reason === 'ReconcileFailed');
      // The Ready main is counted although no pass succeeded since it became Ready.
      expect(w.cs?.status).toMatchObject({ readyAgents: 1, desiredAgents: 3 });
      expect(progressing(w)).toMatchObject({ status: 'False', message: ev.message });

      // Ten minutes of failing passes: each waits twice as long as the one before (1 s doubling, capped
      // at 5 min). Read from the timers the server recorded (one run per pass here), not by counting.
      await env.sleep(10 * 60_000);
      const st = (await w.settled(env)) as unknown as SetState;
      expect(st.lastResult?.error).toBe(ev.message);
      const timers = await timerDurations(env, w.workflowId);
      expect(timers.length).toBeGreaterThanOrEqual(6);
      // The k-th failure's wait is 2^(k-1) s, less the moments between the pass ending and the next run
      // starting its timer.
      const firstFailure = Math.round(Math.log2(timers[0]! / 1000)) + 1;
      expect(firstFailure).toBeLessThanOrEqual(2); // the first waits are 1 s or 2 s (the first may precede the run)
      timers.forEach((t, i) => {
        const backoff = Math.min(1000 * 2 ** (firstFailure + i - 1), 300_000);
        expect(t, `timer ${i} after failure ${firstFailure + i}`).toBeLessThanOrEqual(backoff);
        expect(t, `timer ${i} after failure ${firstFailure + i}`).toBeGreaterThan(backoff - 1000);
      });

      // Pod events during the backoff start no pass (they are seen: the signal count moves).
      const { passes, signals } = st;
      for (let i = 0; i < 10; i++) {
        await w.updatePod('demo-0', (p) => {
          p.metadata!.labels = { ...p.metadata!.labels, poke: String(i) };
        });
      }
      const after = (await w.settled(env)) as unknown as SetState;
      expect(after.signals).toBe(signals + 10);
      expect(after.passes).toBe(passes);

      // A spec edit still starts a pass at once; fixing the cause recovers.
      w.rejectCreate.clear();
      await w.editSpec((c) => {
        c.spec.agent.replicas = 2;
      });
      await waitFor('sub-agents created', () => w.pods.has('demo-1') && w.pods.has('demo-2'));
    });
  });

  it('a set of 1000 pods is read in pages of bounded size, scales to 0 and is deleted', {
    timeout: 600_000,
  }, async () => {
    const cs = storageSet(999);
    // ~2 KB of an annotation no pass reads on each pod: 1000 such pods as read would be ~3 MB.
    const world = new CocoonSetWorld(cs, readyAgents(cs, 999, 2048));
    await withCocoonSetWorld(env, world, async (w) => {
      await w.start();
      await waitFor('Running with 1000 Ready agents', () => w.cs?.status?.readyAgents === 1000, 120_000);
      expect(w.cs?.status?.phase).toBe('Running');
      const pages = Math.ceil(1000 / POD_PAGE_SIZE);
      expect(w.readPayloadBytes.slice(0, pages)).toHaveLength(pages);
      const perPod = Math.max(...w.readPayloadBytes) / POD_PAGE_SIZE;
      console.log(
        `[payload] 1000 pods: ${w.readPayloadBytes.slice(0, pages).join(' + ')} B in ${pages} pages (${perPod.toFixed(0)} B a pod)`,
      );
      for (const bytes of w.readPayloadBytes) expect(bytes).toBeLessThan(400 * 1024);
      expect(w.calls.filter((c) => /^(create|delete)/.test(c))).toEqual([]);

      // Scale to 0: every sub-agent is deleted (the generation stamp goes out first, one patch a pod).
      await w.editSpec((c) => {
        c.spec.agent.replicas = 0;
      });
      await waitFor('the main alone', () => w.pods.size === 1 && w.pods.has('demo-0'), 300_000);
      await waitFor('Running 1/1', () => w.cs?.status?.desiredAgents === 1 && w.cs.status.readyAgents === 1);

      await w.markDeleted();
      await waitFor('the set and its pods gone', () => w.cs === null && w.pods.size === 0, 300_000);
    });
  });
});
