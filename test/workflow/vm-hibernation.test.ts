/**
 * The CocoonHibernation test catalogue (the reference operator's, docs/hibernation.md) at workflow level, on
 * the time-skipping test server: each test drives the VM workflow through the VMWorld (activities + watcher
 * signals).
 */
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  Annotations,
  CONDITION_DELETE_FAILING,
  CONDITION_READY,
  EventReasons,
  Finalizers,
  Labels,
} from '../../src/api/keys.js';
import { hibernatedPodAnnotations, vmPodAnnotations } from '../support/builders.js';
import { waitFor } from '../support/wait.js';
import { createEnv, skipUntil, timerDurations, withWorld } from './harness.js';
import type { VMWorld } from './vm-world.js';

const NS = 'ns';
const VM = 'vk-ns-demo-0';
let env: TestWorkflowEnvironment;

// A fresh time-skipping server per test: skipped time and leftover timers never leak between tests.
beforeEach(async () => {
  env = await createEnv();
});
afterEach(async () => {
  await env?.teardown();
});

const podAnnotations = (extra: Record<string, string> = {}) => vmPodAnnotations(VM, extra);
/** A pod of CocoonSet `demo`, as the set creates it (owner reference and name label). */
const SET_OWNED = { labels: { [Labels.cocoonSet]: 'demo' }, ownerKind: 'CocoonSet', ownerUID: 'set-uid' };

function phase(world: VMWorld, name = 'hib'): string | undefined {
  return world.cr(NS, name)?.status?.phase;
}

async function hibernateCR(world: VMWorld, extra: Record<string, unknown> = {}) {
  return world.putCR({ namespace: NS, name: 'hib', podRef: 'demo-0', desire: 'Hibernate', ...extra });
}

/**
 * The local activities the VM workflow ran, in order (its `core_local_activity` markers, this run), once it
 * has settled and its last workflow task is recorded (a query can be answered before the task's completion,
 * with its markers, reaches the server).
 */
async function localActivities(world: VMWorld): Promise<string[]> {
  await settled(world);
  const handle = env.client.workflow.getHandle('vm/ns/demo-0');
  return waitFor('the last workflow task recorded', async () => {
    const events = (await handle.fetchHistory()).events ?? [];
    const last = events.at(-1);
    if (!last || last.workflowTaskScheduledEventAttributes || last.workflowTaskStartedEventAttributes)
      return undefined;
    return events.flatMap((e) => {
      const m = e.markerRecordedEventAttributes;
      const data = m?.markerName === 'core_local_activity' ? m.details?.data?.payloads?.[0]?.data : undefined;
      return data
        ? [(JSON.parse(Buffer.from(data).toString('utf8')) as { activity_type: string }).activity_type]
        : [];
    });
  });
}

/** The barrier before a negative assertion: the workflow applied every signal and finished acting. */
const settled = (world: VMWorld) => world.settled(env, NS, 'demo-0');

/**
 * The error-backoff waits among a VM workflow's timers (those under the 60 s cap; the hibernate deadline's
 * timer is minutes long), checked to double from 1 s: 1 s, 2 s, 4 s, …
 */
function errorBackoffs(timers: number[]): number[] {
  const backoffs = timers.filter((t) => t < 60_000);
  expect(backoffs).toEqual(backoffs.map((_, i) => 1_000 * 2 ** i));
  return backoffs;
}

describe('VM workflow: CocoonHibernation reconcile', () => {
  it('deliberate (patch finalizer-rides-first-write; the reference adds it in a pass of its own, test 12): a new CR gets the finalizer with its first write, in one local activity: no pod, the finalizer and then Pending', async () => {
    await withWorld(env, async (world) => {
      await hibernateCR(world);
      await waitFor('Pending', () => phase(world) === 'Pending');
      expect(world.cr(NS, 'hib')?.finalizers).toEqual([Finalizers.cocoonHibernation]);
      expect(world.calls.filter((c) => c.includes(' hib '))).toEqual([
        'finalizer hib true',
        expect.stringMatching(/^status hib .*"phase":"Pending"/),
      ]);
      expect(await localActivities(world)).toEqual(['patchHibernationStatus']);
    });
  });

  it('a run an older version started (patches: 24) adds the finalizer in a pass of its own first, as the reference (test 12)', async () => {
    await withWorld(env, async (world) => {
      world.startExtra = { patches: 24 };
      await hibernateCR(world);
      await waitFor('Pending', () => phase(world) === 'Pending');
      expect(await localActivities(world)).toEqual(['setHibernationFinalizer', 'patchHibernationStatus']);
    });
  });

  it('a new CR on a pod whose VM is already hibernated (the tag pushed): HEAD, then the finalizer, the Event and Hibernated in one local activity, none before the probe', async () => {
    await withWorld(env, async (world) => {
      world.tags.add(`${VM}:hibernate`);
      await world.putPod(NS, 'demo-0', { annotations: hibernatedPodAnnotations(VM) });
      await hibernateCR(world);
      await waitFor('Hibernated', () => phase(world) === 'Hibernated');
      expect(world.calls.filter((c) => !c.startsWith('readVMWorld'))).toEqual([
        `HEAD ${VM}:hibernate`,
        'finalizer hib true',
        expect.stringMatching(/^status hib .*"phase":"Hibernated"/),
      ]);
      expect(world.cr(NS, 'hib')?.finalizers).toEqual([Finalizers.cocoonHibernation]);
      expect(world.events.map((e) => e.reason)).toEqual([EventReasons.hibernated]);
      expect(await localActivities(world)).toEqual(['patchHibernationStatus']);
    });
  });

  /** A static toolbox's pod: vk-cocoon adopts its pre-assigned VM and does not manage it. */
  const unmanagedAnnotations = { [Annotations.vmName]: VM, [Annotations.vmID]: 'vm-desktop-01' };

  it('deliberate (patch refuses-unmanaged-hibernate; the reference annotates the pod and fails at the 3m0s deadline, "hibernate not confirmed"): a hibernate of a pod vk-cocoon does not manage (a static toolbox) is Failed at once, saying why, and the pod is left alone', async () => {
    await withWorld(env, async (world) => {
      await world.putPod(NS, 'demo-0', { annotations: unmanagedAnnotations, containerRunning: true });
      await hibernateCR(world);
      await waitFor('Failed', () => phase(world) === 'Failed');
      const ready = world.cr(NS, 'hib')?.status?.conditions?.find((c) => c.type === CONDITION_READY);
      expect(ready).toMatchObject({ status: 'False', reason: 'Failed' });
      expect(ready?.message).toBe(
        `pod ns/demo-0 is not managed by vk-cocoon (${Annotations.managed} is not "true", as on a static toolbox); vk-cocoon never hibernates its VM ${VM}`,
      );
      await settled(world);
      expect(world.calls.filter((c) => c.startsWith('patchPod') || c.startsWith('HEAD'))).toEqual([]);
      expect(world.pod(NS, 'demo-0')?.annotations?.[Annotations.hibernate]).toBeUndefined();
      expect(world.events).toEqual([]);

      // The toolbox's mode edited: its pod is replaced by one vk-cocoon manages, which hibernates as usual.
      await world.putPod(NS, 'demo-0', { annotations: podAnnotations(), containerRunning: true });
      await waitFor('Hibernating', () => phase(world) === 'Hibernating');
      expect(world.pod(NS, 'demo-0')?.annotations?.[Annotations.hibernate]).toBe('true');
    });
  });

  it('a run an older version started (patches: 25) annotates an unmanaged pod and waits, as the reference', async () => {
    await withWorld(env, async (world) => {
      world.startExtra = { patches: 25 };
      await world.putPod(NS, 'demo-0', { annotations: unmanagedAnnotations, containerRunning: true });
      await hibernateCR(world);
      await waitFor('Hibernating', () => phase(world) === 'Hibernating');
      expect(world.pod(NS, 'demo-0')?.annotations?.[Annotations.hibernate]).toBe('true');
    });
  });

  it('a new CR never has the pod annotated before its finalizer is on: the finalizer write comes first', async () => {
    await withWorld(env, async (world) => {
      await world.putPod(NS, 'demo-0', { annotations: podAnnotations(), containerRunning: true });
      await hibernateCR(world);
      await waitFor('Hibernating', () => phase(world) === 'Hibernating');
      const finalizer = world.calls.indexOf('finalizer hib true');
      const patch = world.calls.findIndex((c) => c.startsWith('patchPod'));
      expect(finalizer).toBeGreaterThanOrEqual(0);
      expect(patch).toBeGreaterThan(finalizer);
      expect(world.calls.filter((c) => c.startsWith('finalizer'))).toHaveLength(1);
    });
  });

  it("a new Wake CR held by another finalizer and deleted just before the operator first acts: the hibernated VM and its tag stay (nothing was done for that CR; found by a new-user run: the tag, the VM's only copy, was deleted)", async () => {
    await withWorld(env, async (world) => {
      world.tags.add(`${VM}:hibernate`);
      await world.putPod(NS, 'demo-0', { annotations: hibernatedPodAnnotations(VM) });
      world.beforeFinalizer = () => world.deleteCR(NS, 'wake');
      await world.putCR({
        namespace: NS,
        name: 'wake',
        podRef: 'demo-0',
        desire: 'Wake',
        finalizers: ['example.com/hold'],
      });
      await waitFor('the deletion seen', () => world.calls.includes('finalizer wake true'));
      const view = await settled(world);
      expect(view.hibernations).toEqual([]);
      expect(world.tags.has(`${VM}:hibernate`)).toBe(true);
      expect(world.calls.filter((c) => c.startsWith('DELETE') || c.startsWith('patchPod'))).toEqual([]);
      expect(world.pod(NS, 'demo-0')?.annotations?.[Annotations.hibernate]).toBe('true');
      expect(world.cr(NS, 'wake')?.finalizers).toEqual(['example.com/hold']);
      expect(world.events).toEqual([]);
    });
  });

  it('a new CR deleted while its first probe runs (no finalizer yet, so it is gone at once): nothing is written for it', async () => {
    await withWorld(env, async (world) => {
      world.tags.add(`${VM}:hibernate`);
      await world.putPod(NS, 'demo-0', { annotations: hibernatedPodAnnotations(VM) });
      world.blockProbe(VM);
      await hibernateCR(world);
      await world.probeBlocked(VM);
      await world.deleteCR(NS, 'hib');
      world.releaseProbe(VM);
      const view = await settled(world);
      expect(view.hibernations).toEqual([]);
      expect(world.cr(NS, 'hib')).toBeUndefined();
      expect(world.calls.filter((c) => c.startsWith('status') || c.startsWith('patchPod'))).toEqual([]);
      expect(world.tags.has(`${VM}:hibernate`)).toBe(true);
      expect(world.events).toEqual([]);
    });
  });

  it('reports Pending while the pod is missing, then hibernates when it arrives (tests 18, pod after CR)', async () => {
    await withWorld(env, async (world) => {
      await hibernateCR(world);
      await waitFor('Pending', () => phase(world) === 'Pending');
      expect(world.cr(NS, 'hib')?.status?.conditions?.[0]?.message).toBe('pod ns/demo-0 not yet present');
      await world.putPod(NS, 'demo-0', { annotations: podAnnotations(), containerRunning: true });
      await waitFor('Hibernating', () => phase(world) === 'Hibernating');
      expect(world.pod(NS, 'demo-0')?.annotations?.[Annotations.hibernate]).toBe('true');
    });
  });

  it('reports Pending while the pod has no VM name annotation (test 19)', async () => {
    await withWorld(env, async (world) => {
      await world.putCR({ namespace: NS, name: 'hib', podRef: 'demo-0', desire: 'Hibernate' });
      await world.putPod(NS, 'demo-0', { annotations: {} });
      // First Pending for the missing pod (the CR came first), then for the missing annotation.
      await waitFor(
        'Pending for the annotation',
        () =>
          world.cr(NS, 'hib')?.status?.conditions?.[0]?.message ===
          'pod ns/demo-0 has no vm.cocoonstack.io/name annotation yet',
      );
      expect(phase(world)).toBe('Pending');
    });
  });

  it('completes a hibernate only after lifecycle hibernated and the tag exists, with one Hibernated event', async () => {
    await withWorld(env, async (world) => {
      await world.putPod(NS, 'demo-0', { annotations: podAnnotations(), containerRunning: true });
      await hibernateCR(world);
      await waitFor('Hibernating', () => phase(world) === 'Hibernating');
      await world.vkHibernated(NS, 'demo-0', VM);
      await waitFor('Hibernated', () => phase(world) === 'Hibernated');
      expect(world.cr(NS, 'hib')?.status?.vmName).toBe(VM);
      // Steady state: more pod churn neither re-probes nor re-announces.
      const heads = world.calls.filter((c) => c.startsWith('HEAD')).length;
      await world.annotatePod(NS, 'demo-0', { 'unrelated/churn': '1' });
      await world.annotatePod(NS, 'demo-0', { 'unrelated/churn': '2' });
      const churned = await settled(world);
      expect(churned.lifecycleState).toBe('hibernated'); // the churn was applied, and its pass ran
      expect(world.calls.filter((c) => c.startsWith('HEAD')).length).toBe(heads);
      expect(world.events.filter((e) => e.reason === 'Hibernated')).toHaveLength(1);
      expect(world.phaseDurations).toEqual([{ kind: 'hibernate', result: 'ok' }]);
    });
  });

  it('ignores a stale tag until lifecycle-state says hibernated (test 24)', async () => {
    await withWorld(env, async (world) => {
      world.tags.add(`${VM}:hibernate`);
      await world.putPod(NS, 'demo-0', { annotations: podAnnotations({ [Annotations.hibernate]: 'true' }) });
      await hibernateCR(world);
      await waitFor('Hibernating', () => phase(world) === 'Hibernating');
      await settled(world);
      expect(world.calls.some((c) => c.startsWith('HEAD'))).toBe(false);
      await world.annotatePod(NS, 'demo-0', { [Annotations.lifecycleState]: 'hibernated' });
      await waitFor('Hibernated', () => phase(world) === 'Hibernated');
    });
  });

  it('rejects a lifecycle round older than the CocoonSet generation stamp (test 25)', async () => {
    await withWorld(env, async (world) => {
      world.tags.add(`${VM}:hibernate`);
      await world.putPod(NS, 'demo-0', {
        annotations: podAnnotations({
          [Annotations.hibernate]: 'true',
          [Annotations.cocoonSetGeneration]: '3',
          [Annotations.lifecycleState]: 'hibernated',
          [Annotations.lifecycleObservedGeneration]: '2',
        }),
      });
      await hibernateCR(world);
      await waitFor('Hibernating', () => phase(world) === 'Hibernating');
      // The round vk reported is for generation 2: not this one. No probe, still Hibernating.
      await settled(world);
      expect(phase(world)).toBe('Hibernating');
      expect(world.calls.some((c) => c.startsWith('HEAD'))).toBe(false);
      await world.annotatePod(NS, 'demo-0', { [Annotations.lifecycleObservedGeneration]: '3' });
      await waitFor('Hibernated', () => phase(world) === 'Hibernated');
    });
  });

  it('fails a hibernate after 3m0s with HibernateTimedOut, then retries with a fresh clock (tests 26, 27)', async () => {
    await withWorld(env, async (world) => {
      await world.putPod(NS, 'demo-0', { annotations: podAnnotations(), containerRunning: true });
      await hibernateCR(world);
      await waitFor('Hibernating', () => phase(world) === 'Hibernating');
      const started = world.cr(NS, 'hib')?.status?.conditions?.[0]?.lastTransitionTime;
      await env.sleep(3 * 60_000 + 2_000);
      await waitFor('Failed', () => phase(world) === 'Failed');
      const failed = world.cr(NS, 'hib')!.status!.conditions![0]!;
      expect(failed.message).toBe('hibernate not confirmed within 3m0s');
      expect(failed.lastTransitionTime).toBe(started); // Failed keeps the attempt's start
      expect(world.events.map((e) => e.reason)).toContain('HibernateTimedOut');
      expect(world.phaseDurations).toContainEqual({ kind: 'hibernate', result: 'timeout' });
      await env.sleep(31_000);
      await waitFor('retry', () => phase(world) === 'Hibernating');
      expect(world.events.map((e) => e.reason)).toContain('RetryRequested');
      const retried = world.cr(NS, 'hib')!.status!.conditions![0]!.lastTransitionTime!;
      expect(Date.parse(retried)).toBeGreaterThan(Date.parse(started!));
    });
  });

  it('turns a probe error into backoff before the deadline and into Failed after it (tests 21, 22)', async () => {
    await withWorld(env, async (world) => {
      world.probeError = new Error('transport boom');
      await world.putPod(NS, 'demo-0', {
        annotations: hibernatedPodAnnotations(VM),
      });
      await hibernateCR(world);
      await waitFor('probe attempted', () => world.calls.some((c) => c.startsWith('HEAD')));
      await env.sleep(10_000);
      await settled(world);
      expect(phase(world)).not.toBe('Hibernated');
      // Retried with backoff: the waits between failed passes double from 1 s (the timers the server
      // recorded; the longer ones are the deadline's own timer).
      expect(errorBackoffs(await timerDurations(env, 'vm/ns/demo-0')).length).toBeGreaterThanOrEqual(2);
      // Past the deadline, the next retry (error backoff caps at 60 s) turns the error into Failed.
      const skipped = await skipUntil(env, 'Failed', () => phase(world) === 'Failed', 6 * 60_000);
      expect(skipped).toBeGreaterThanOrEqual(3 * 60_000 - 15_000);
      expect(world.cr(NS, 'hib')!.status!.conditions![0]!.message).toBe(
        'hibernate not confirmed within 3m0s',
      );
      // Registry back: the retry after Failed completes.
      world.probeError = undefined;
      world.tags.add(`${VM}:hibernate`);
      await env.sleep(31_000);
      await waitFor('Hibernated', () => phase(world) === 'Hibernated', 20_000);
    });
  }, 180_000);

  it('wakes: clears the annotation, completes on running + VM id, deletes the tag once (tests 30, happy wake)', async () => {
    await withWorld(env, async (world) => {
      world.tags.add(`${VM}:hibernate`);
      await world.putPod(NS, 'demo-0', {
        annotations: hibernatedPodAnnotations(VM),
      });
      await world.putCR({ namespace: NS, name: 'hib', podRef: 'demo-0', desire: 'Wake' });
      await waitFor('Waking', () => phase(world) === 'Waking');
      await settled(world); // the Waking pass is over: nothing more happens until the VM runs
      expect(world.pod(NS, 'demo-0')?.annotations?.[Annotations.hibernate]).toBeUndefined();
      expect(world.tags.has(`${VM}:hibernate`)).toBe(true); // never before the VM runs
      await world.annotatePod(
        NS,
        'demo-0',
        { [Annotations.vmID]: 'vmid-new', [Annotations.lifecycleState]: 'creating' },
        { containerRunning: true },
      );
      await waitFor('Active', () => phase(world) === 'Active');
      expect(world.tags.has(`${VM}:hibernate`)).toBe(false);
      await world.annotatePod(NS, 'demo-0', { [Annotations.lifecycleState]: 'ready' });
      expect((await settled(world)).lifecycleState).toBe('ready');
      expect(world.calls.filter((c) => c.startsWith('DELETE')).length).toBe(1);
      expect(world.events.filter((e) => e.reason === 'WokenActive')).toHaveLength(1);
    });
  });

  it('a wake that vk finishes while the annotation patch is in flight (never Waking) still records its phase duration (found by the observability e2e)', async () => {
    await withWorld(env, async (world) => {
      world.tags.add(`${VM}:hibernate`);
      await world.putPod(NS, 'demo-0', { annotations: hibernatedPodAnnotations(VM) });
      world.duringPodPatch = async (patched) => {
        world.duringPodPatch = undefined;
        await world.putPod(NS, patched.name, {
          annotations: { ...patched.annotations, [Annotations.vmID]: 'vmid-new' },
          containerRunning: true,
        });
      };
      await world.putCR({ namespace: NS, name: 'hib', podRef: 'demo-0', desire: 'Wake' });
      await waitFor('Active', () => phase(world) === 'Active');
      expect(world.calls.some((c) => c.startsWith('status hib') && c.includes('Waking'))).toBe(false);
      expect(world.phaseDurations).toEqual([{ kind: 'wake', result: 'ok' }]);
    });
  });

  it('a wake vk finishes while the annotation patch is in flight, whose tag DELETE fails: Waking with SnapshotDeleteFailing (not the old phase on a running VM), then Active once the DELETE succeeds', async () => {
    await withWorld(env, async (world) => {
      world.tags.add(`${VM}:hibernate`);
      world.deleteError = new Error('registry answered 503');
      await world.putPod(NS, 'demo-0', { annotations: hibernatedPodAnnotations(VM) });
      world.duringPodPatch = async (patched) => {
        world.duringPodPatch = undefined;
        await world.putPod(NS, patched.name, {
          annotations: { ...patched.annotations, [Annotations.vmID]: 'vmid-new' },
          containerRunning: true,
        });
      };
      await world.putCR({ namespace: NS, name: 'hib', podRef: 'demo-0', desire: 'Wake' });
      const failing = () =>
        world.cr(NS, 'hib')?.status?.conditions?.find((c) => c.type === CONDITION_DELETE_FAILING);
      await waitFor('SnapshotDeleteFailing', () => failing() !== undefined);
      expect(phase(world)).toBe('Waking');
      world.deleteError = undefined;
      await skipUntil(env, 'Active', () => phase(world) === 'Active', 120_000);
      expect([world.tags.has(`${VM}:hibernate`), failing()]).toEqual([false, undefined]);
      expect(world.events.filter((e) => e.reason === 'WokenActive')).toHaveLength(1);
    });
  });

  it('fails a wake after 5m0s (test 28)', async () => {
    await withWorld(env, async (world) => {
      await world.putPod(NS, 'demo-0', {
        annotations: podAnnotations({ [Annotations.lifecycleState]: 'hibernated' }),
      });
      await world.putCR({ namespace: NS, name: 'hib', podRef: 'demo-0', desire: 'Wake' });
      await waitFor('Waking', () => phase(world) === 'Waking');
      await env.sleep(5 * 60_000 + 2_000);
      await waitFor('Failed', () => phase(world) === 'Failed');
      expect(world.cr(NS, 'hib')!.status!.conditions![0]!.message).toBe(
        'wake timed out after 5m0s; vk-cocoon never reported the container running',
      );
      expect(world.events.find((e) => e.reason === 'WakeTimedOut')?.message).toBe(
        'vk-cocoon did not report the container running within 5m0s',
      );
    });
  });

  it("a wake vk-cocoon reported failed times out at 5m0s with vk's reason in the status and the Event (ours: the reference says only that it timed out)", async () => {
    await withWorld(env, async (world) => {
      await world.putPod(NS, 'demo-0', {
        annotations: podAnnotations({ [Annotations.lifecycleState]: 'hibernated' }),
      });
      await world.putCR({ namespace: NS, name: 'hib', podRef: 'demo-0', desire: 'Wake' });
      await waitFor('Waking', () => phase(world) === 'Waking');
      await world.annotatePod(NS, 'demo-0', {
        [Annotations.lifecycleState]: 'failed',
        [Annotations.lifecycleStateMessage]: 'pull vk-ns-demo-0:hibernate: manifest unknown',
      });
      await env.sleep(5 * 60_000 + 2_000);
      await waitFor('Failed', () => phase(world) === 'Failed');
      expect(world.cr(NS, 'hib')!.status!.conditions![0]!.message).toBe(
        'wake timed out after 5m0s; vk-cocoon reported the wake failed: pull vk-ns-demo-0:hibernate: manifest unknown',
      );
      expect(world.events.find((e) => e.reason === 'WakeTimedOut')?.message).toBe(
        'vk-cocoon did not report the container running within 5m0s (it reported: pull vk-ns-demo-0:hibernate: manifest unknown)',
      );
    });
  });

  it("a hibernate whose rounds vk-cocoon reports failed (the push refused) times out at 3m0s with vk's reason in the status and the Event (ours: the reference says only that it timed out)", async () => {
    await withWorld(env, async (world) => {
      await world.putPod(NS, 'demo-0', { annotations: podAnnotations(), containerRunning: true });
      await hibernateCR(world);
      await waitFor('Hibernating', () => phase(world) === 'Hibernating');
      await world.annotatePod(NS, 'demo-0', {
        [Annotations.lifecycleState]: 'failed',
        [Annotations.lifecycleStateMessage]: 'push vk-ns-demo-0:hibernate: registry push failed',
      });
      await env.sleep(3 * 60_000 + 2_000);
      await waitFor('Failed', () => phase(world) === 'Failed');
      expect(world.cr(NS, 'hib')!.status!.conditions![0]!.message).toBe(
        'hibernate not confirmed within 3m0s; vk-cocoon reported the hibernate failed: push vk-ns-demo-0:hibernate: registry push failed',
      );
      expect(world.events.find((e) => e.reason === 'HibernateTimedOut')?.message).toBe(
        `snapshot ${VM} not confirmed in the registry within 3m0s (it reported: push vk-ns-demo-0:hibernate: registry push failed)`,
      );
    });
  });

  it('finishes an in-flight hibernate before a reversed Wake desire (test 32)', async () => {
    await withWorld(env, async (world) => {
      await world.putPod(NS, 'demo-0', {
        annotations: podAnnotations({ [Annotations.vmID]: 'vmid-old' }),
        containerRunning: true,
      });
      await hibernateCR(world);
      await waitFor('Hibernating', () => phase(world) === 'Hibernating');
      await hibernateCR(world, { desire: 'Wake' });
      expect((await settled(world)).hibernations[0]).toMatchObject({ desire: 'Wake' });
      // The stale Running + VM id view must not complete a wake and delete the only snapshot.
      expect(phase(world)).toBe('Hibernating');
      expect(world.calls.some((c) => c.startsWith('DELETE'))).toBe(false);
      expect(world.pod(NS, 'demo-0')?.annotations?.[Annotations.hibernate]).toBe('true');
      await world.vkHibernated(NS, 'demo-0', VM);
      await waitFor('Hibernated then Waking', () => phase(world) === 'Waking');
      expect(world.events.map((e) => e.reason)).toContain('Hibernated');
      expect(world.pod(NS, 'demo-0')?.annotations?.[Annotations.hibernate]).toBeUndefined();
    });
  });

  it('finishes an in-flight wake before a reversed Hibernate desire (test 31)', async () => {
    await withWorld(env, async (world) => {
      world.tags.add(`${VM}:hibernate`);
      await world.putPod(NS, 'demo-0', {
        annotations: podAnnotations({ [Annotations.lifecycleState]: 'hibernated' }),
      });
      await world.putCR({ namespace: NS, name: 'hib', podRef: 'demo-0', desire: 'Wake' });
      await waitFor('Waking', () => phase(world) === 'Waking');
      await hibernateCR(world, { desire: 'Hibernate' });
      expect((await settled(world)).hibernations[0]).toMatchObject({ desire: 'Hibernate' });
      expect(phase(world)).toBe('Waking');
      expect(world.calls.some((c) => c.startsWith('DELETE') || c.startsWith('HEAD'))).toBe(false);
    });
  });

  it('never demotes Hibernated while the pod is gone (test 20)', async () => {
    await withWorld(env, async (world) => {
      world.tags.add(`${VM}:hibernate`);
      await world.putPod(NS, 'demo-0', {
        annotations: hibernatedPodAnnotations(VM),
      });
      await hibernateCR(world);
      await waitFor('Hibernated', () => phase(world) === 'Hibernated');
      await world.deletePod(NS, 'demo-0');
      expect((await settled(world)).podExists).toBe(false);
      expect(phase(world)).toBe('Hibernated');
    });
  });

  it('a Waking CR whose pod is deleted still times out at 5m0s, then says Pending (deliberate fix: the reference stays Waking while the pod is away)', async () => {
    await withWorld(env, async (world) => {
      await world.putPod(NS, 'demo-0', {
        annotations: podAnnotations({ [Annotations.lifecycleState]: 'hibernated' }),
      });
      await world.putCR({ namespace: NS, name: 'hib', podRef: 'demo-0', desire: 'Wake' });
      await waitFor('Waking', () => phase(world) === 'Waking');
      await world.deletePod(NS, 'demo-0');
      expect((await settled(world)).podExists).toBe(false);
      expect(phase(world)).toBe('Waking');
      const message = () => world.cr(NS, 'hib')!.status!.conditions![0]!.message;
      await env.sleep(5 * 60_000 + 2_000);
      await waitFor('Failed', () => phase(world) === 'Failed');
      expect(message()).toBe('wake timed out after 5m0s; pod ns/demo-0 is gone');
      expect(world.events.find((e) => e.reason === 'WakeTimedOut')?.message).toBe(
        'pod ns/demo-0 is gone; vk-cocoon did not report the container running within 5m0s',
      );
      expect(world.phaseDurations).toEqual([{ kind: 'wake', result: 'timeout' }]);
      // The retry 30 s later finds no pod: Pending says so.
      await env.sleep(31_000);
      await waitFor('Pending', () => phase(world) === 'Pending');
      expect(message()).toBe('pod ns/demo-0 not yet present');
    });
  });

  it('an Active CR whose pod is being deleted says Pending, never Waking (deliberate fix: the reference goes Waking, then Failed at 5m0s)', async () => {
    await withWorld(env, async (world) => {
      world.tags.add(`${VM}:hibernate`);
      await world.putPod(NS, 'demo-0', { annotations: hibernatedPodAnnotations(VM) });
      await world.putCR({ namespace: NS, name: 'hib', podRef: 'demo-0', desire: 'Wake' });
      await waitFor('Waking', () => phase(world) === 'Waking');
      await world.annotatePod(
        NS,
        'demo-0',
        { [Annotations.vmID]: 'vmid-new', [Annotations.lifecycleState]: 'ready' },
        { containerRunning: true },
      );
      await waitFor('Active', () => phase(world) === 'Active');
      const writes = world.calls.length;
      // A CocoonSet deletion (or kubectl delete pod): vk stops the VM before the pod goes.
      await world.annotatePod(
        NS,
        'demo-0',
        { [Annotations.vmID]: null },
        { containerRunning: false, deleting: true },
      );
      expect((await settled(world)).podExists).toBe(true);
      expect(phase(world)).toBe('Pending');
      const message = () => world.cr(NS, 'hib')!.status!.conditions![0]!.message;
      expect(message()).toBe('pod ns/demo-0 is being deleted');
      // No wake started: the annotation is left alone and the registry is not called.
      expect(world.calls.slice(writes).filter((c) => !c.startsWith('status hib'))).toEqual([]);
      await world.deletePod(NS, 'demo-0');
      expect((await settled(world)).podExists).toBe(false);
      expect(message()).toBe('pod ns/demo-0 not yet present');
      await env.sleep(5 * 60_000 + 2_000);
      expect((await settled(world)).podExists).toBe(false);
      expect(phase(world)).toBe('Pending');
      expect(world.events.map((e) => e.reason)).not.toContain('WakeTimedOut');
    });
  });

  it('a Hibernated CR turned to Wake on a pod being deleted stays Hibernated and keeps the tag, but is not Ready until the wake can start (deliberate fix; Ready: patch pod-wait-status, it said Ready=True "Hibernated")', async () => {
    await withWorld(env, async (world) => {
      world.tags.add(`${VM}:hibernate`);
      await world.putPod(NS, 'demo-0', { annotations: hibernatedPodAnnotations(VM) });
      await hibernateCR(world);
      await waitFor('Hibernated', () => phase(world) === 'Hibernated');
      await world.putPod(NS, 'demo-0', { deleting: true });
      await hibernateCR(world, { desire: 'Wake' });
      expect((await settled(world)).hibernations[0]).toMatchObject({ desire: 'Wake' });
      const cr = world.cr(NS, 'hib')!;
      expect(cr.status?.phase).toBe('Hibernated');
      expect(cr.status?.observedGeneration).toBe(cr.generation);
      expect(cr.status?.conditions?.find((c) => c.type === CONDITION_READY)).toMatchObject({
        status: 'False',
        reason: 'Pending',
        message: 'pod ns/demo-0 is being deleted',
        observedGeneration: cr.generation,
      });
      expect(world.pod(NS, 'demo-0')?.annotations?.[Annotations.hibernate]).toBe('true');
      expect(world.tags.has(`${VM}:hibernate`)).toBe(true);
      await world.deletePod(NS, 'demo-0');
      await settled(world);
      expect(world.cr(NS, 'hib')?.status?.conditions?.find((c) => c.type === CONDITION_READY)?.message).toBe(
        'pod ns/demo-0 not yet present',
      );
    });
  });

  it('a hibernate goes on while its pod is being deleted: a snapshot that lands still completes it', async () => {
    await withWorld(env, async (world) => {
      await world.putPod(NS, 'demo-0', {
        annotations: podAnnotations({ [Annotations.vmID]: 'vmid-old' }),
        containerRunning: true,
      });
      await hibernateCR(world);
      await waitFor('Hibernating', () => phase(world) === 'Hibernating');
      await world.putPod(NS, 'demo-0', { deleting: true });
      expect((await settled(world)).podExists).toBe(true);
      expect(phase(world)).toBe('Hibernating');
      await world.vkHibernated(NS, 'demo-0', VM);
      await waitFor('Hibernated', () => phase(world) === 'Hibernated');
    });
  });

  it('a Hibernate CR on a pod held Terminating says Pending and starts no hibernate, not even after 3m30s (deliberate fix: it timed out and retried every 3m30s)', async () => {
    await withWorld(env, async (world) => {
      // vk stopped the VM when the deletion began; a finalizer holds the pod.
      await world.putPod(NS, 'demo-0', { annotations: podAnnotations(), deleting: true });
      await hibernateCR(world);
      expect((await settled(world)).podExists).toBe(true);
      expect(phase(world)).toBe('Pending');
      const message = () => world.cr(NS, 'hib')!.status!.conditions![0]!.message;
      expect(message()).toBe('pod ns/demo-0 is being deleted');
      await env.sleep(4 * 60_000);
      expect((await settled(world)).podExists).toBe(true);
      expect(phase(world)).toBe('Pending');
      expect(world.pod(NS, 'demo-0')?.annotations?.[Annotations.hibernate]).toBeUndefined();
      expect(world.calls.filter((c) => c.startsWith('patchPod') || c.startsWith('HEAD'))).toEqual([]);
      expect(world.events.map((e) => e.reason)).toEqual([]);
      // The set recreates the pod: the hibernate starts on the new one.
      await world.deletePod(NS, 'demo-0');
      await world.putPod(NS, 'demo-0', {
        uid: 'pod-uid-2',
        annotations: podAnnotations({ [Annotations.vmID]: 'vmid-2' }),
        containerRunning: true,
        deleting: false,
      });
      await waitFor('Hibernating', () => phase(world) === 'Hibernating');
    });
  });

  it('marks an unknown desire Failed with Go quoting', async () => {
    await withWorld(env, async (world) => {
      await world.putPod(NS, 'demo-0', { annotations: podAnnotations() });
      await world.putCR({ namespace: NS, name: 'hib', podRef: 'demo-0', desire: 'Sleep' });
      await waitFor('Failed', () => phase(world) === 'Failed');
      expect(world.cr(NS, 'hib')!.status!.conditions![0]!.message).toBe('unknown desire "Sleep"');
    });
  });

  it('deletes the tag and the finalizer when the last CR goes (tests 13, 15)', async () => {
    await withWorld(env, async (world) => {
      world.tags.add(`${VM}:hibernate`);
      await world.putPod(NS, 'demo-0', {
        annotations: hibernatedPodAnnotations(VM),
      });
      await hibernateCR(world);
      await waitFor('Hibernated', () => phase(world) === 'Hibernated');
      await world.deleteCR(NS, 'hib');
      await waitFor('CR gone', () => world.cr(NS, 'hib') === undefined);
      expect(world.tags.has(`${VM}:hibernate`)).toBe(false);
    });
  });

  it('keeps the finalizer removal going when the tag delete fails (test 14)', async () => {
    await withWorld(env, async (world) => {
      world.tags.add(`${VM}:hibernate`);
      world.deleteError = new Error('registry unavailable');
      await world.putPod(NS, 'demo-0', {
        annotations: hibernatedPodAnnotations(VM),
      });
      await hibernateCR(world);
      await waitFor('Hibernated', () => phase(world) === 'Hibernated');
      await world.deleteCR(NS, 'hib');
      await waitFor('CR gone', () => world.cr(NS, 'hib') === undefined);
      expect(world.calls.some((c) => c.startsWith('DELETE'))).toBe(true);
    });
  });

  it('a deleting CR waits for an in-flight vk hibernate round before dropping the tag (deliberate fix)', async () => {
    await withWorld(env, async (world) => {
      await world.putPod(NS, 'demo-0', { annotations: podAnnotations(), containerRunning: true });
      await hibernateCR(world);
      await waitFor('Hibernating', () => phase(world) === 'Hibernating');
      await world.annotatePod(NS, 'demo-0', { [Annotations.lifecycleState]: 'hibernating' });
      await world.deleteCR(NS, 'hib');
      await env.sleep(20_000);
      expect((await settled(world)).hibernations[0]).toMatchObject({ deleting: true });
      expect(world.calls.some((c) => c.startsWith('DELETE'))).toBe(false);
      expect(world.cr(NS, 'hib')).toBeDefined();
      // vk finishes the round (tag pushed, then hibernated): now the deletion discards it.
      await world.vkHibernated(NS, 'demo-0', VM);
      await waitFor('CR gone', () => world.cr(NS, 'hib') === undefined);
      expect(world.tags.has(`${VM}:hibernate`)).toBe(false);
    });
  });

  it('a CR deleted right after its hibernate request, before vk reports hibernating: the deletion does not wait for the round, and the tag vk pushes after stays (deliberate: the VM can be woken from it; waiting and then dropping it discarded VMs whose hibernate a stale view had started, found by a new-user run)', async () => {
    await withWorld(env, async (world) => {
      await world.putPod(NS, 'demo-0', { annotations: podAnnotations(), containerRunning: true });
      await hibernateCR(world);
      await waitFor('Hibernating', () => phase(world) === 'Hibernating');
      await world.deleteCR(NS, 'hib');
      await waitFor('CR gone', () => world.cr(NS, 'hib') === undefined);
      await world.annotatePod(NS, 'demo-0', { [Annotations.lifecycleState]: 'hibernating' });
      await world.vkHibernated(NS, 'demo-0', VM);
      await settled(world);
      expect(world.tags.has(`${VM}:hibernate`)).toBe(true);
    });
  });

  /** A hibernated VM with its tag, a Wake CR, and vk not yet done waking: the CR is Waking, the pod has no VM. */
  async function wakingVM(world: VMWorld, owner: Partial<typeof SET_OWNED> = {}): Promise<void> {
    world.tags.add(`${VM}:hibernate`);
    await world.putPod(NS, 'demo-0', { annotations: hibernatedPodAnnotations(VM), ...owner });
    await world.putCR({ namespace: NS, name: 'hib', podRef: 'demo-0', desire: 'Wake' });
    await waitFor('Waking', () => phase(world) === 'Waking');
    expect(world.pod(NS, 'demo-0')?.annotations?.[Annotations.hibernate]).toBeUndefined();
    // vk has started the wake (lifecycle creating) and is pulling the tag.
    await world.annotatePod(NS, 'demo-0', { [Annotations.lifecycleState]: 'creating' });
  }

  /**
   * A wake vk finishes while the registry answers every DELETE with 503, up to the CR's SnapshotDeleteFailing
   * condition; resolves a reader of that condition.
   */
  async function wokenWithFailingDelete(world: VMWorld, owner: Partial<typeof SET_OWNED> = {}) {
    await wakingVM(world, owner);
    world.deleteError = new Error('registry answered 503');
    await world.annotatePod(
      NS,
      'demo-0',
      { [Annotations.lifecycleState]: 'ready', [Annotations.vmID]: 'vmid-2' },
      { containerRunning: true },
    );
    const failing = () =>
      world.cr(NS, 'hib')?.status?.conditions?.find((c) => c.type === CONDITION_DELETE_FAILING);
    await waitFor('SnapshotDeleteFailing', () => failing() !== undefined);
    return failing;
  }

  it('a CR deleted while vk wakes its VM keeps the tag until the VM runs, then drops it (deliberate fix: the reference deletes it under the pull and the VM is lost)', async () => {
    await withWorld(env, async (world) => {
      await wakingVM(world);
      await world.deleteCR(NS, 'hib');
      await env.sleep(20_000);
      expect((await settled(world)).hibernations[0]).toMatchObject({ deleting: true });
      expect(world.calls.some((c) => c.startsWith('DELETE'))).toBe(false);
      expect(world.tags.has(`${VM}:hibernate`)).toBe(true);
      // vk finishes the wake: the VM runs, the snapshot is spent, the deletion completes.
      await world.annotatePod(
        NS,
        'demo-0',
        { [Annotations.lifecycleState]: 'ready', [Annotations.vmID]: 'vmid-2' },
        { containerRunning: true },
      );
      await waitFor('CR gone', () => world.cr(NS, 'hib') === undefined);
      expect(world.tags.has(`${VM}:hibernate`)).toBe(false);
    });
  });

  it('a wake whose tag DELETE fails stays Waking with SnapshotDeleteFailing (and one Warning Event SnapshotDeleteFailing) and retries; Active, the condition gone, once the DELETE succeeds (deliberate difference: the reference goes Active and leaves the tag, which a later create of the pod restores: a rollback)', async () => {
    await withWorld(env, async (world) => {
      const failing = await wokenWithFailingDelete(world);
      expect(failing()).toMatchObject({ status: 'True', reason: 'RegistryError' });
      expect(failing()?.message).toContain(`delete hibernation snapshot ${VM}: registry answered 503`);
      // The failed pass is retried with backoff, still Waking, the tag still there.
      await skipUntil(
        env,
        'a second DELETE',
        () => world.calls.filter((c) => c.startsWith('DELETE')).length >= 2,
        60_000,
        2_000,
      );
      expect([phase(world), world.tags.has(`${VM}:hibernate`)]).toEqual(['Waking', true]);
      // One Warning Event with the condition's change, not one per retry (spent-tag-warning-event).
      const warnings = world.events.filter((e) => e.reason === EventReasons.snapshotDeleteFailing);
      expect(warnings.map((e) => [e.type, e.message])).toEqual([['Warning', failing()?.message]]);
      world.deleteError = undefined;
      await skipUntil(env, 'Active', () => phase(world) === 'Active', 120_000);
      expect(world.tags.has(`${VM}:hibernate`)).toBe(false);
      expect(failing()).toBeUndefined();
    });
  });

  it('a woken VM whose tag DELETE keeps failing, its pod then deleted: the DELETE goes on being retried without the pod (the set holds the re-create back meanwhile); once it succeeds the wake ends Active, then Pending for the missing pod (fails without spent-tag-drop-without-pod: the CR waited for a pod the set waits to create)', async () => {
    await withWorld(env, async (world) => {
      const failing = await wokenWithFailingDelete(world);
      await world.deletePod(NS, 'demo-0');
      const deletes = () => world.calls.filter((c) => c.startsWith('DELETE')).length;
      const atDelete = deletes();
      await skipUntil(env, 'a DELETE with the pod gone', () => deletes() > atDelete, 120_000, 2_000);
      expect([phase(world), failing()?.status, world.tags.has(`${VM}:hibernate`)]).toEqual([
        'Waking',
        'True',
        true,
      ]);
      world.deleteError = undefined;
      await skipUntil(env, 'Pending', () => phase(world) === 'Pending', 180_000, 2_000);
      expect(world.tags.has(`${VM}:hibernate`)).toBe(false);
      expect(failing()).toBeUndefined();
      expect(world.events.filter((e) => e.reason === 'WokenActive')).toHaveLength(1);
    });
  });

  it("a CR deleted while its set's pod is gone and its spent tag's DELETE fails: no wait for the set to restore from that tag (it is older than the VM that ran); the DELETE is retried, the CR kept (its set holds the pod back meanwhile), until it succeeds; then the finalizer goes (deviation, fails without spent-tag-outlives-cr: the deletion waited for the set to restore the VM from the spent tag, a rollback)", async () => {
    await withWorld(env, async (world) => {
      world.sets.set(`${NS}/demo`, 'live');
      await wokenWithFailingDelete(world, SET_OWNED);
      await world.deletePod(NS, 'demo-0');
      await world.deleteCR(NS, 'hib');
      const deletes = () => world.calls.filter((c) => c.startsWith('DELETE')).length;
      const atDelete = deletes();
      await skipUntil(
        env,
        'two DELETEs since the CR was deleted',
        () => deletes() >= atDelete + 2,
        120_000,
        2_000,
      );
      expect((await settled(world)).hibernations[0]).toMatchObject({ deleting: true });
      expect(world.tags.has(`${VM}:hibernate`)).toBe(true);
      world.deleteError = undefined;
      await skipUntil(env, 'CR gone', () => world.cr(NS, 'hib') === undefined, 120_000, 2_000);
      expect(world.tags.has(`${VM}:hibernate`)).toBe(false);
      expect(world.pod(NS, 'demo-0')).toBeUndefined();
    });
  });

  it("a CR deleted mid-hibernate of a CocoonSet's VM wakes the VM after the round, then drops the tag (deliberate fix: the reference drops it and the set's un-suspend wakes from nothing)", async () => {
    await withWorld(env, async (world) => {
      await world.putPod(NS, 'demo-0', {
        annotations: podAnnotations({ [Annotations.vmID]: 'vmid-1' }),
        containerRunning: true,
        ownerKind: 'CocoonSet',
        ownerUID: 'set-uid',
      });
      await hibernateCR(world);
      await waitFor('Hibernating', () => phase(world) === 'Hibernating');
      await world.annotatePod(NS, 'demo-0', { [Annotations.lifecycleState]: 'hibernating' });
      await world.deleteCR(NS, 'hib');
      // vk finishes the round: the tag is pushed, the VM is gone.
      await world.vkHibernated(NS, 'demo-0', VM);
      await waitFor(
        'the deletion wakes the VM',
        () => world.pod(NS, 'demo-0')?.annotations?.[Annotations.hibernate] === undefined,
      );
      expect((await settled(world)).hibernations[0]).toMatchObject({ deleting: true });
      expect(world.tags.has(`${VM}:hibernate`)).toBe(true);
      await world.annotatePod(NS, 'demo-0', { [Annotations.lifecycleState]: 'creating' });
      await world.annotatePod(
        NS,
        'demo-0',
        { [Annotations.lifecycleState]: 'ready', [Annotations.vmID]: 'vmid-2' },
        { containerRunning: true },
      );
      await waitFor('CR gone', () => world.cr(NS, 'hib') === undefined);
      expect(world.tags.has(`${VM}:hibernate`)).toBe(false);
    });
  });

  it('a CR deleted while vk wakes its VM keeps the tag for good when the wake does not finish within 8m0s of the deletion (the VM has no other copy)', async () => {
    await withWorld(env, async (world) => {
      await wakingVM(world);
      // The pull fails; vk retries on its backoff, and needs the tag each time.
      await world.annotatePod(NS, 'demo-0', { [Annotations.lifecycleState]: 'failed' });
      await world.deleteCR(NS, 'hib');
      const skipped = await skipUntil(
        env,
        'CR gone',
        () => world.cr(NS, 'hib') === undefined,
        600_000,
        10_000,
      );
      expect(skipped).toBeGreaterThanOrEqual(470_000);
      expect(world.calls.some((c) => c.startsWith('DELETE'))).toBe(false);
      expect(world.tags.has(`${VM}:hibernate`)).toBe(true);
    });
  });

  describe("a CocoonSet's Hibernated pod deleted together with its CR (deliberate fix: the reference drops the tag at once and the set's recreate boots fresh)", () => {
    /**
     * A set's pod whose VM vk hibernated under CR `hib`; then the pod and the CR are deleted at once (the
     * pod's deletion seen first: the CR's first deletion pass finds no pod).
     */
    async function deleteBoth(world: VMWorld, set: 'live' | 'deleting' | 'gone') {
      if (set !== 'gone') world.sets.set(`${NS}/demo`, set);
      world.tags.add(`${VM}:hibernate`);
      await world.putPod(NS, 'demo-0', {
        annotations: hibernatedPodAnnotations(VM),
        ...SET_OWNED,
      });
      await hibernateCR(world);
      await waitFor('Hibernated', () => phase(world) === 'Hibernated');
      await world.deletePod(NS, 'demo-0');
      await world.deleteCR(NS, 'hib');
    }

    /**
     * The set recreates the pod (`annotations`) and vk runs its VM restored from the tag: the tag is kept
     * until then, and the deletion ends with it dropped.
     */
    async function setRecreatesAndRuns(world: VMWorld, annotations: Record<string, string>) {
      await world.putPod(NS, 'demo-0', {
        uid: 'pod-uid-2',
        annotations: podAnnotations(annotations),
        containerRunning: false,
        deleting: false,
        ...SET_OWNED,
      });
      expect((await settled(world)).podExists).toBe(true);
      expect(world.tags.has(`${VM}:hibernate`)).toBe(true);
      await world.annotatePod(
        NS,
        'demo-0',
        { [Annotations.lifecycleState]: 'ready', [Annotations.vmID]: 'vmid-2' },
        { containerRunning: true },
      );
      await waitFor('CR gone', () => world.cr(NS, 'hib') === undefined);
      expect(world.tags.has(`${VM}:hibernate`)).toBe(false);
    }

    it('keeps the tag while the set recreates the pod and restores the VM from it, then drops it', async () => {
      await withWorld(env, async (world) => {
        await deleteBoth(world, 'live');
        expect((await settled(world)).hibernations[0]).toMatchObject({ deleting: true });
        expect(world.calls).toContain('cocoonSetLiveness demo');
        expect(world.calls.some((c) => c.startsWith('DELETE'))).toBe(false);
        expect(world.tags.has(`${VM}:hibernate`)).toBe(true);
        // The set's new pod restores from the tag (its restore intent reads the deleting CR's phase).
        await setRecreatesAndRuns(world, {
          [Annotations.restoreFromHibernate]: 'true',
          [Annotations.lifecycleState]: 'creating',
        });
      });
    });

    it('keeps the tag for good when the set has not brought the pod back within 8m0s', async () => {
      await withWorld(env, async (world) => {
        await deleteBoth(world, 'live');
        const skipped = await skipUntil(
          env,
          'CR gone',
          () => world.cr(NS, 'hib') === undefined,
          600_000,
          10_000,
        );
        expect(skipped).toBeGreaterThanOrEqual(470_000);
        expect(world.calls.some((c) => c.startsWith('DELETE'))).toBe(false);
        expect(world.tags.has(`${VM}:hibernate`)).toBe(true);
      });
    });

    it('a hibernate round that ends while its pod and CR are deleted: the pushed tag waits for the recreated pod to run (found by a new-user run: it was dropped 0.3 s after the push)', async () => {
      await withWorld(env, async (world) => {
        world.sets.set(`${NS}/demo`, 'live');
        await world.putPod(NS, 'demo-0', {
          annotations: podAnnotations({ [Annotations.vmID]: 'vmid-1' }),
          containerRunning: true,
          ...SET_OWNED,
        });
        await hibernateCR(world);
        await waitFor('Hibernating', () => phase(world) === 'Hibernating');
        await world.annotatePod(
          NS,
          'demo-0',
          { [Annotations.lifecycleState]: 'hibernating' },
          { deleting: true },
        );
        await world.deleteCR(NS, 'hib');
        expect((await settled(world)).hibernations[0]).toMatchObject({ deleting: true });
        // vk finishes the round (the tag is pushed), then the pod goes.
        await world.vkHibernated(NS, 'demo-0', VM);
        await world.deletePod(NS, 'demo-0');
        expect((await settled(world)).podExists).toBe(false);
        expect(world.calls.some((c) => c.startsWith('DELETE'))).toBe(false);
        expect(world.tags.has(`${VM}:hibernate`)).toBe(true);
        // The set recreates the pod; vk restores it from the tag (its own check at create) and runs it.
        await setRecreatesAndRuns(world, { [Annotations.lifecycleState]: 'creating' });
      });
    });

    it('a hibernate round whose pod and CR are deleted before any tag is pushed: nothing to keep, the deletion ends', async () => {
      await withWorld(env, async (world) => {
        world.sets.set(`${NS}/demo`, 'live');
        await world.putPod(NS, 'demo-0', {
          annotations: podAnnotations({ [Annotations.vmID]: 'vmid-1' }),
          containerRunning: true,
          ...SET_OWNED,
        });
        await hibernateCR(world);
        await waitFor('Hibernating', () => phase(world) === 'Hibernating');
        await world.deletePod(NS, 'demo-0');
        await world.deleteCR(NS, 'hib');
        await waitFor('CR gone', () => world.cr(NS, 'hib') === undefined);
        // Whichever deletion the workflow sees first (the CR then says Hibernating or Pending), it looks.
        expect(world.calls).toContain(`HEAD ${VM}:hibernate`);
        expect(world.calls).not.toContain('cocoonSetLiveness demo');
      });
    });

    it('a registry that cannot answer the HEAD does not wedge the deletion: the tag counts as present', async () => {
      await withWorld(env, async (world) => {
        await world.putPod(NS, 'demo-0', {
          annotations: podAnnotations({ [Annotations.vmID]: 'vmid-1' }),
          containerRunning: true,
          ...SET_OWNED,
        });
        await hibernateCR(world);
        await waitFor('Hibernating', () => phase(world) === 'Hibernating');
        world.probeError = new Error('registry down');
        await world.deletePod(NS, 'demo-0');
        await world.deleteCR(NS, 'hib');
        // The set is gone: the tag goes (best effort), and the finalizer with it.
        await waitFor('CR gone', () => world.cr(NS, 'hib') === undefined);
        expect(world.calls).toContain('cocoonSetLiveness demo');
      });
    });

    for (const set of ['deleting', 'gone'] as const) {
      it(`drops the tag at once when the set is ${set} (a deleted set discards its VMs' state)`, async () => {
        await withWorld(env, async (world) => {
          await deleteBoth(world, set);
          await waitFor('CR gone', () => world.cr(NS, 'hib') === undefined);
          expect(world.calls).toContain('cocoonSetLiveness demo');
          expect(world.tags.has(`${VM}:hibernate`)).toBe(false);
        });
      });
    }
  });

  it("a deletion that lands just before a status write is acted on at once, not at the 60 s fallback re-read (its event is older than the write's answer; found by a flaky test)", async () => {
    await withWorld(env, async (world) => {
      await world.putPod(NS, 'demo-0', { annotations: {} });
      // The watch event comes later (or, older than the write's answer, changes nothing): the answer is news.
      world.beforeStatusPatch = () => world.deleteCR(NS, 'hib', { watched: false });
      await hibernateCR(world);
      await waitFor(
        'the deletion landed',
        () => world.cr(NS, 'hib')?.deleting === true || !world.cr(NS, 'hib'),
      );
      await settled(world);
      expect(world.cr(NS, 'hib')).toBeUndefined();
    });
  });

  it("a desire edit that lands just before a status write is acted on at once (its event is older than the write's answer)", async () => {
    await withWorld(env, async (world) => {
      await world.putPod(NS, 'demo-0', { annotations: {} });
      world.beforeStatusPatch = async () => {
        await world.putCR(
          { namespace: NS, name: 'hib', podRef: 'demo-0', desire: 'Wake' },
          { watched: false },
        );
      };
      await hibernateCR(world);
      await waitFor('the edit landed', () => world.cr(NS, 'hib')?.generation === 2);
      await settled(world);
      expect(world.cr(NS, 'hib')?.status?.observedGeneration).toBe(2);
      expect(phase(world)).toBe('Pending');
    });
  });

  it('a desire edit that overtakes the response of its own status patch is not lost (benchmark finding)', async () => {
    await withWorld(env, async (world) => {
      world.tags.add(`${VM}:hibernate`);
      await world.putPod(NS, 'demo-0', {
        annotations: hibernatedPodAnnotations(VM),
      });
      // While the workflow's Hibernated status patch is in flight, the user flips the desire to Wake.
      world.duringStatusPatch = async (patched) => {
        await world.putCR({ ...patched, desire: 'Wake' });
      };
      await hibernateCR(world);
      await waitFor(
        'the Wake edit acted on',
        () => world.pod(NS, 'demo-0')?.annotations?.[Annotations.hibernate] === undefined,
      );
      await waitFor('Waking', () => phase(world) === 'Waking');
    });
  });

  it('a CocoonHibernation created while the workflow re-reads the world is not forgotten (the read predates it)', async () => {
    await withWorld(env, async (world) => {
      world.tags.add(`${VM}:hibernate`);
      await world.putPod(NS, 'demo-0', {
        annotations: hibernatedPodAnnotations(VM),
      });
      // The first CR starts the workflow without the world (as before the watcher's caches are listed), so
      // its first step is a read; a second CR appears during it.
      world.startWorld = false;
      world.duringRead = async () => {
        await world.putCR({ namespace: NS, name: 'late', podRef: 'demo-0', desire: 'Hibernate' });
      };
      await hibernateCR(world);
      await waitFor('the first CR Hibernated', () => phase(world) === 'Hibernated');
      await waitFor('the CR created during the read Hibernated', () => phase(world, 'late') === 'Hibernated');
    });
  });

  it("a CR whose status.vmName was edited by hand to name another VM keeps that VM's tag when deleted (deliberate fix: the reference deletes whatever it names)", async () => {
    await withWorld(env, async (world) => {
      world.tags.add('vk-other-victim:hibernate');
      // A CR on a pod that does not exist (Pending), whose status is then forged to name another VM.
      await world.putCR({ namespace: NS, name: 'evil', podRef: 'ghost', desire: 'Wake' });
      await waitFor('Pending', () => phase(world, 'evil') === 'Pending');
      const cur = world.cr(NS, 'evil')!;
      await world.putCR({ ...cur, status: { ...cur.status, vmName: 'vk-other-victim' } });
      await world.settled(env, NS, 'ghost');
      await world.deleteCR(NS, 'evil');
      await waitFor('CR gone', () => world.cr(NS, 'evil') === undefined);
      expect(world.tags.has('vk-other-victim:hibernate')).toBe(true);
      expect(world.calls.filter((c) => c.startsWith('DELETE'))).toEqual([]);
    });
  });

  it('a pod deleted unseen (operator down) is found by the re-read a NotFound asks for, even long after the last read', async () => {
    await withWorld(env, async (world) => {
      await world.putPod(NS, 'demo-0', {
        annotations: podAnnotations({ [Annotations.vmID]: 'vmid-1' }),
        containerRunning: true,
      });
      await world.putCR({ namespace: NS, name: 'hib', podRef: 'demo-0', desire: 'Wake' });
      await waitFor('Active', () => phase(world) === 'Active');
      // The pod goes while nobody watches (no signal), and the last read is over a minute old.
      world.pods.delete(`${NS}/demo-0`);
      await env.sleep(120_000);
      await world.putCR({ ...world.cr(NS, 'hib')!, desire: 'Hibernate' });
      await skipUntil(env, 'Pending (pod not present)', () => phase(world) === 'Pending', 180_000, 5_000);
    });
  });

  it('a desire edit on a CR in error backoff is acted on at once, not when the backoff ends (found by a new-user test)', async () => {
    await withWorld(env, async (world) => {
      world.probeError = new Error('registry down');
      await world.putPod(NS, 'demo-0', {
        annotations: hibernatedPodAnnotations(VM),
      });
      await hibernateCR(world);
      await waitFor('probe attempted', () => world.calls.some((c) => c.startsWith('HEAD')));
      // Several failed passes: the error backoff has grown to many seconds.
      await env.sleep(45_000);
      // Edit while the workflow waits out its backoff (no pass running, the next one scheduled later).
      const waiting = await settled(world);
      expect(errorBackoffs(await timerDurations(env, 'vm/ns/demo-0')).length).toBeGreaterThanOrEqual(4);
      expect(waiting.hibernations[0]!.backoffUntil).not.toBeNull();
      world.probeError = undefined;
      expect(world.cr(NS, 'hib')?.status?.observedGeneration).toBe(1);
      await world.putCR({ ...world.cr(NS, 'hib')!, desire: 'Wake' });
      // Acted on = a pass ran for generation 2 before the backoff's timer (no time is skipped here; what
      // the pass does with a reversed desire is the routing table's).
      await settled(world);
      expect(world.cr(NS, 'hib')?.status?.observedGeneration).toBe(2);
    });
  });

  it('keeps the tag while another live CR holds the VM; the last holder drops it (tests 16, 17)', async () => {
    await withWorld(env, async (world) => {
      world.tags.add(`${VM}:hibernate`);
      await world.putPod(NS, 'demo-0', {
        annotations: hibernatedPodAnnotations(VM),
      });
      await world.putCR({ namespace: NS, name: 'a', podRef: 'demo-0', desire: 'Hibernate' });
      await world.putCR({ namespace: NS, name: 'b', podRef: 'demo-0', desire: 'Hibernate' });
      await waitFor(
        'both Hibernated',
        () => phase(world, 'a') === 'Hibernated' && phase(world, 'b') === 'Hibernated',
      );
      await world.deleteCR(NS, 'a');
      await waitFor('a gone', () => world.cr(NS, 'a') === undefined);
      await settled(world);
      expect(world.tags.has(`${VM}:hibernate`)).toBe(true);
      await world.deleteCR(NS, 'b');
      await waitFor('b gone', () => world.cr(NS, 'b') === undefined);
      expect(world.tags.has(`${VM}:hibernate`)).toBe(false);
    });
  });
});
