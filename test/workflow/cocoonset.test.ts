import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Annotations, EventReasons } from '../../src/api/keys.js';
import type { CocoonSet } from '../../src/api/types.js';
import { toolboxVMName } from '../../src/cocoonset/pods.js';
import { lastDeletedMs, readRebuildHistory } from '../../src/cocoonset/rebuild.js';
import {
  LOCAL_PASS_MAX_SIGNALS,
  LOCAL_SET_MAX_PODS,
  RECONCILE_FAILED,
} from '../../src/workflows/cocoonset.js';
import { vmDesireConflictSignal, vmTagSpentSignal } from '../../src/workflows/messages.js';
import {
  CONVERGED_NODE,
  hibernation,
  IMAGE,
  liveOn,
  newCocoonSet,
  withFinalizer,
} from '../support/builders.js';
import { waitFor } from '../support/wait.js';
import { CocoonSetWorld, convergedPods, demoSet, MAIN_VM, withCocoonSetWorld } from './cocoonset-world.js';
import { createEnv, skipUntil, timerDurations } from './harness.js';

let env: TestWorkflowEnvironment;

// A fresh time-skipping server per test: skipped time and leftover timers never leak between tests.
beforeEach(async () => {
  env = await createEnv();
});
afterEach(async () => {
  await env?.teardown();
});

function uids(world: CocoonSetWorld): Record<string, string | undefined> {
  return Object.fromEntries([...world.pods].map(([n, p]) => [n, p.metadata?.uid]));
}

describe('CocoonSet workflow', () => {
  it('creates the main first, the sub-agents (forked from the main) only once it is Ready, then the toolbox; rolls status up', async () => {
    const world = new CocoonSetWorld(demoSet());
    await withCocoonSetWorld(env, world, async (w) => {
      await w.start();
      await waitFor('main created', () => w.pods.has('demo-0'));
      expect(w.hasFinalizer()).toBe(true);
      await waitFor('Pending', () => w.cs?.status?.phase === 'Pending');
      // Several 5 s "wait for main" requeues pass; nothing else is created while the main is not Ready.
      // Read from the timers the server recorded: every wait is the 5 s requeue, none shorter (no loop).
      await env.sleep(16_000);
      await w.settled(env);
      const timers = await timerDurations(env, w.workflowId);
      expect(timers.length).toBeGreaterThanOrEqual(3);
      expect(new Set(timers)).toEqual(new Set([5_000]));
      expect([...w.pods.keys()]).toEqual(['demo-0']);

      await w.updatePod('demo-0', (p) => {
        p.spec!.nodeName = 'node-a';
      });
      await w.makeReady('demo-0');
      await waitFor('all pods created', () => w.pods.size === 4);
      expect(w.creates[0]).toBe('demo-0');
      expect(new Set(w.creates.slice(1, 3))).toEqual(new Set(['demo-1', 'demo-2']));
      expect(w.creates[3]).toBe('demo-tb');
      for (const sub of ['demo-1', 'demo-2']) {
        const p = w.pod(sub)!;
        expect(p.metadata?.annotations?.[Annotations.forkFrom]).toBe(MAIN_VM);
        expect(p.spec?.nodeName).toBe('node-a');
      }
      expect(w.pod('demo-tb')!.metadata?.annotations?.[Annotations.forkFrom] ?? '').toBe('');

      for (const p of ['demo-1', 'demo-2', 'demo-tb']) await w.makeReady(p);
      await waitFor('Running', () => w.cs?.status?.phase === 'Running' && w.cs.status.readyAgents === 3);
      const st = w.cs!.status!;
      expect(st).toMatchObject({
        desiredAgents: 3,
        readyAgents: 3,
        desiredToolboxes: 1,
        readyToolboxes: 1,
        observedGeneration: 1,
      });
      expect(st.agents?.map((a) => [a.slot, a.podName, a.forkedFrom ?? ''])).toEqual([
        [0, 'demo-0', ''],
        [1, 'demo-1', MAIN_VM],
        [2, 'demo-2', MAIN_VM],
      ]);
      expect(st.toolboxes?.map((t) => t.podName)).toEqual(['demo-tb']);
      // Pods were generation-stamped; no pass restored anything (no CR in the namespace).
      expect(w.registryCalls).toBe(0);
      const s = await w.state();
      expect(s.phase).toBe('Running');
      expect(s.mainVM).toBe(MAIN_VM);
    });
  });

  it('two quick edits (replicas 0, then back to 2) landing between a pass read and its deletes: that pass deletes nothing and the next one, on the current spec, keeps every sub-agent (deletes-check-generation, the check inside each delete since delete-reads-generation; found by a new-user run)', async () => {
    const cs = demoSet(withFinalizer);
    const world = new CocoonSetWorld(cs, convergedPods(cs));
    const before = uids(world);
    await withCocoonSetWorld(env, world, async (w) => {
      await w.start();
      await waitFor('Running', () => w.cs?.status?.phase === 'Running');
      await w.settledAfter(0);
      w.onGenerationRead = () => w.editSpec((c) => (c.spec.agent.replicas = 2));
      await w.editSpec((c) => (c.spec.agent.replicas = 0));
      await waitFor('the generation read inside the first delete', () => w.onGenerationRead === undefined);
      await w.settled(env);
      expect(w.calls.filter((c) => c.startsWith('delete'))).toEqual([]);
      expect(uids(w)).toEqual(before);
      expect(w.cs?.status).toMatchObject({ phase: 'Running', readyAgents: 3 });
      expect(w.cs?.status?.observedGeneration).toBe(w.cs?.metadata.generation);
    });
  });

  it('a steady pass keeps every pod and makes no CocoonHibernation list and no registry call', async () => {
    const cs = demoSet(withFinalizer);
    const world = new CocoonSetWorld(cs, convergedPods(cs));
    // Restore intent that a needless lookup would find (and probe).
    world.crs = [hibernation('demo-1', 'Hibernate', 'Hibernated')];
    world.tags.add('vk-ns-demo-1:hibernate');
    const before = uids(world);
    await withCocoonSetWorld(env, world, async (w) => {
      await w.start();
      await w.settledAfter(0);
      await waitFor('Running', () => w.cs?.status?.phase === 'Running');
      // A pod event triggers another pass.
      const n = await w.passes();
      await w.updatePod('demo-2', (p) => {
        p.metadata!.labels = { ...p.metadata!.labels, extra: 'x' };
      });
      await w.settledAfter(n);
      expect(uids(w)).toEqual(before);
      expect(w.calls.filter((c) => c.startsWith('create') || c.startsWith('delete'))).toEqual([]);
      expect(w.lists).toBe(0);
      expect(w.registryCalls).toBe(0);
      expect(w.cs?.status?.readyAgents).toBe(3);
    });
  });

  it('a retain suspend whose main pod a user deleted waits while it terminates (Suspending, Progressing False MainTerminating, no create), then recreates it and hibernates the set (deliberate: the reference fails its create with AlreadyExists)', async () => {
    const cs = demoSet(withFinalizer);
    const world = new CocoonSetWorld(cs, convergedPods(cs));
    world.slowDeletes = true;
    await withCocoonSetWorld(env, world, async (w) => {
      await w.start();
      await waitFor('Running', () => w.cs?.status?.phase === 'Running');
      await w.updatePod('demo-0', (p) => {
        p.metadata!.deletionTimestamp = new Date() as unknown as Date;
      });
      await w.editSpec((c) => (c.spec.suspend = true));
      await w.settled(env);
      expect(w.cs?.status?.phase).toBe('Suspending');
      expect(w.cs?.status?.conditions?.find((c) => c.type === 'Progressing')).toMatchObject({
        status: 'False',
        reason: 'MainTerminating',
        message: 'main pod ns/demo-0 is terminating: it is created again once it is gone',
      });
      expect(w.creates).toEqual([]);
      await w.finishDeletes();
      await waitFor('main recreated', () => w.creates.includes('demo-0'));
      // The set asks once a node has taken the new main (a pod no node took runs no VM to hibernate).
      await w.makeReady('demo-0');
      await waitFor(
        'the set asks for hibernate',
        () => w.pod('demo-0')?.metadata?.annotations?.[Annotations.hibernate] === 'true',
      );
      await w.settled(env);
      expect(w.cs?.status?.phase).toBe('Suspending');
      expect(w.cs?.status?.conditions?.find((c) => c.type === 'Progressing')?.reason).not.toBe(
        'MainTerminating',
      );
    });
  });

  it('hibernatePolicy release: suspend hibernates the main, stashes its VM name and node hint, marks keep-snapshot and deletes the pod (Suspended); un-suspend restores it preferring the hinted node (Waking), drops the tag and clears the hint once live, scored hint-node', async () => {
    const cs = newCocoonSet('demo', withFinalizer, (c) => {
      c.metadata.generation = 1;
      c.spec.hibernatePolicy = 'release';
    });
    const pods = convergedPods(cs);
    pods[0]!.spec!.nodeName = 'node-a';
    const world = new CocoonSetWorld(cs, pods);
    await withCocoonSetWorld(env, world, async (w) => {
      await w.start();
      await waitFor('Running', () => w.cs?.status?.phase === 'Running');
      await w.editSpec((c) => (c.spec.suspend = true));
      await waitFor(
        'asked to hibernate',
        () => w.pod('demo-0')?.metadata?.annotations?.[Annotations.hibernate] === 'true',
      );
      await w.vkHibernated('demo-0', 2);
      await waitFor('Suspended', () => w.cs?.status?.phase === 'Suspended');
      expect(w.pods.has('demo-0')).toBe(false);
      expect(w.cs?.metadata.annotations?.[Annotations.hibernatedOnNode]).toBe('node-a');
      expect(w.cs?.metadata.annotations?.[Annotations.deleteVMNames]).toBe(MAIN_VM);
      const keep = w.calls.findIndex(
        (c) => c.startsWith('annotate demo-0') && c.includes(Annotations.keepSnapshotOnDelete),
      );
      expect(keep).toBeGreaterThanOrEqual(0);
      expect(keep).toBeLessThan(w.calls.indexOf('delete demo-0'));
      expect(
        w.metrics.filter((m) => m.metric === 'slotReleasePodsDeletedTotal').length,
      ).toBeGreaterThanOrEqual(1);

      await w.editSpec((c) => (c.spec.suspend = false));
      await waitFor('restore pod created', () => w.pods.has('demo-0'));
      const restore = w.pod('demo-0')!;
      expect(restore.metadata?.annotations?.[Annotations.restoreFromHibernate]).toBe('true');
      expect(restore.spec?.nodeName).toBeUndefined();
      expect(
        restore.spec?.affinity?.nodeAffinity?.preferredDuringSchedulingIgnoredDuringExecution?.[0]?.preference
          .matchExpressions?.[0]?.values,
      ).toEqual(['node-a']);
      await waitFor('Waking', () => w.cs?.status?.phase === 'Waking');
      expect(w.tags.has(`${MAIN_VM}:hibernate`)).toBe(true);
      // vk-cocoon restores the VM on the hinted node.
      await w.vkRunning('demo-0', 'node-a', 'vm-restored');
      await waitFor('Running again', () => w.cs?.status?.phase === 'Running');
      expect(w.tags.has(`${MAIN_VM}:hibernate`)).toBe(false);
      // One tag drop per wake: the set's. The VM workflow is asked to let go of the suspend's request and to
      // leave the tag (else it would drop it a second time once the VM runs).
      await w.settled(env);
      expect(w.calls.slice(w.calls.lastIndexOf('create demo-0')).filter((c) => c.startsWith('ask'))).toEqual([
        'ask demo-0 Wake keepTag',
      ]);
      expect(w.cs?.metadata.annotations?.[Annotations.hibernatedOnNode]).toBeUndefined();
      expect(
        w.metrics.filter((m) => m.metric === 'slotReleaseWakeTotal').map((m) => m.labels.placement),
      ).toEqual(['hint-node']);
    });
  });

  it('a changed spec.nodeName migrates the live main: Migrating, its VM workflow asked to hibernate, the old pod deleted once the tag is in, a restore pod pinned to the new node, the tag dropped once the VM runs there', async () => {
    const cs = newCocoonSet('demo', withFinalizer, (c) => {
      c.metadata.generation = 1;
    });
    const pods = convergedPods(cs);
    liveOn(pods[0]!, 'node-a', 'vm-a');
    await withCocoonSetWorld(env, new CocoonSetWorld(cs, pods), async (w) => {
      await w.start();
      await waitFor('Running', () => w.cs?.status?.phase === 'Running');
      await w.editSpec((c) => (c.spec.nodeName = 'node-b'));
      await waitFor(
        'asked to hibernate',
        () => w.pod('demo-0')?.metadata?.annotations?.[Annotations.hibernate] === 'true',
      );
      await waitFor('Migrating', () => w.cs?.status?.phase === 'Migrating');
      const oldUID = w.pod('demo-0')!.metadata!.uid;
      // vk-cocoon pushes the snapshot and stops the VM.
      await w.vkHibernated('demo-0', 2);
      await waitFor('restore pod on the new node', () => {
        const p = w.pod('demo-0');
        return p !== undefined && p.metadata?.uid !== oldUID;
      });
      const restore = w.pod('demo-0')!;
      expect(restore.metadata?.annotations?.[Annotations.restoreFromHibernate]).toBe('true');
      expect(
        restore.spec?.affinity?.nodeAffinity?.requiredDuringSchedulingIgnoredDuringExecution
          ?.nodeSelectorTerms?.[0]?.matchExpressions?.[0]?.values,
      ).toEqual(['node-b']);
      expect(w.tags.has(`${MAIN_VM}:hibernate`)).toBe(true);
      // vk-cocoon restores the VM on node-b.
      await w.vkRunning('demo-0', 'node-b', 'vm-b');
      await waitFor('Running on node-b', () => w.cs?.status?.phase === 'Running');
      expect(w.tags.has(`${MAIN_VM}:hibernate`)).toBe(false);
      // One tag drop per wake: the migration's. The VM workflow is asked to leave the tag.
      await w.settled(env);
      expect(w.calls.slice(w.calls.lastIndexOf('create demo-0')).filter((c) => c.startsWith('ask'))).toEqual([
        'ask demo-0 Wake keepTag',
      ]);
    });
  });

  it('spec.suspend (retain) asks every VM workflow to hibernate, reports Suspending until vk reports hibernated for this generation and the tags are in, then Suspended; un-suspend asks them to wake', async () => {
    const cs = demoSet(withFinalizer);
    const world = new CocoonSetWorld(cs, convergedPods(cs));
    const before = uids(world);
    const names = ['demo-0', 'demo-1', 'demo-2', 'demo-tb'];
    await withCocoonSetWorld(env, world, async (w) => {
      await w.start();
      await waitFor('Running', () => w.cs?.status?.phase === 'Running');
      await w.editSpec((c) => (c.spec.suspend = true));
      await waitFor('Suspending', () => w.cs?.status?.phase === 'Suspending');
      await waitFor('every pod asked to hibernate', () =>
        names.every((n) => w.pod(n)?.metadata?.annotations?.[Annotations.hibernate] === 'true'),
      );
      expect(names.map((n) => w.calls.indexOf(`ask ${n} Hibernate`) >= 0)).toEqual([true, true, true, true]);
      // vk-cocoon hibernates each VM: tag pushed, lifecycle hibernated for the set's generation (2).
      for (const n of names) {
        await w.vkHibernated(n, 2);
      }
      await waitFor('Suspended', () => w.cs?.status?.phase === 'Suspended');
      const done = await w.lastResult();
      expect(done).toMatchObject({ requeue: false, requeueAfterMs: 0 });
      expect(uids(w)).toEqual(before);
      await w.editSpec((c) => (c.spec.suspend = false));
      await waitFor('every hibernate annotation cleared', () =>
        names.every((n) => w.pod(n)?.metadata?.annotations?.[Annotations.hibernate] === undefined),
      );
      expect(names.map((n) => w.calls.indexOf(`ask ${n} Wake`) >= 0)).toEqual([true, true, true, true]);
      expect(w.lists).toBe(0);
      expect(uids(w)).toEqual(before);
      // Suspend and un-suspend never delete a tag.
      expect(w.calls.filter((c) => c.startsWith('registry-delete'))).toEqual([]);
    });
  });

  it("deliberate (patch sub-agents-restore-open-wake): an un-suspend's wake asks stay open (the state query's wakesOpen) until each pod's VM workflow says its tag is gone (vmTagSpent, spent: false); a suspend's hibernate ask ends them too", async () => {
    const cs = demoSet(withFinalizer);
    const world = new CocoonSetWorld(cs, convergedPods(cs));
    const names = ['demo-0', 'demo-1', 'demo-2', 'demo-tb'];
    const asked = (w: CocoonSetWorld, desire: string) =>
      names.filter((n) => w.calls.includes(`ask ${n} ${desire}`));
    await withCocoonSetWorld(env, world, async (w) => {
      await w.start();
      await waitFor('Running', () => w.cs?.status?.phase === 'Running');
      const open = async () => (await w.state()).wakesOpen;
      await w.editSpec((c) => (c.spec.suspend = true));
      await waitFor('every pod asked to hibernate', () => asked(w, 'Hibernate').length === names.length);
      for (const n of names) await w.vkHibernated(n, 2);
      await waitFor('Suspended', () => w.cs?.status?.phase === 'Suspended');
      expect(await open()).toEqual([]);

      await w.editSpec((c) => (c.spec.suspend = false));
      await waitFor('every pod asked to wake', () => asked(w, 'Wake').length === names.length);
      await w.settled(env);
      expect(await open()).toEqual(names);
      // Running again is not enough (its VM workflow may not have dropped the tag yet)…
      await w.vkRunning('demo-1', CONVERGED_NODE, 'id-1');
      await w.settled(env);
      expect(await open()).toEqual(names);
      // …its VM workflow's word that the tag is gone is.
      const handle = env.client.workflow.getHandle(w.workflowId);
      await handle.signal(vmTagSpentSignal, { pod: 'demo-1', vmName: 'vk-ns-demo-1', spent: false });
      await w.settled(env);
      expect(await open()).toEqual(names.filter((n) => n !== 'demo-1'));

      const hibernateAsks = w.calls.filter((c) => c.endsWith(' Hibernate')).length;
      await w.editSpec((c) => (c.spec.suspend = true));
      await waitFor(
        'every pod asked to hibernate again',
        () => w.calls.filter((c) => c.endsWith(' Hibernate')).length >= hibernateAsks + names.length,
      );
      await w.settled(env);
      expect(await open()).toEqual([]);
    });
  });

  it('a VM workflow reporting that a CocoonHibernation holds its VM awake shows on the suspending set as Progressing=False DesireConflict, with no look every 5 s (deliberate, patch set-wake-waits-for-cr, helper-64: ~300 set history events a minute), until it follows the set again', async () => {
    const cs = demoSet(withFinalizer, (c) => (c.spec.suspend = true));
    const world = new CocoonSetWorld(cs, convergedPods(cs));
    world.crs = [hibernation('demo-1', 'Wake', 'Active')];
    await withCocoonSetWorld(env, world, async (w) => {
      await w.start();
      await waitFor('Suspending', () => w.cs?.status?.phase === 'Suspending');
      expect((await w.settled(env)).nextPassAt).not.toBeNull();
      const handle = env.client.workflow.getHandle(w.workflowId);
      await handle.signal(vmDesireConflictSignal, {
        pod: 'demo-1',
        message: 'VM vk-ns-demo-1 is held by cocoonhibernation keep',
      });
      const progressing = () => w.cs?.status?.conditions?.find((c) => c.type === 'Progressing');
      await waitFor('DesireConflict', () => progressing()?.reason === 'DesireConflict');
      expect(progressing()).toMatchObject({
        status: 'False',
        message: 'pod demo-1: VM vk-ns-demo-1 is held by cocoonhibernation keep',
      });
      expect((await w.settled(env)).nextPassAt).toBeNull();
      w.crs = [];
      await handle.signal(vmDesireConflictSignal, { pod: 'demo-1', message: null });
      await waitFor('Stable', () => progressing()?.reason === 'Stable');
      expect(w.cs?.status?.phase).toBe('Suspending');
      expect(w.pod('demo-1')?.metadata?.annotations?.[Annotations.hibernate]).toBe('true');
      expect((await w.settled(env)).nextPassAt).not.toBeNull();
    });
  });

  it('deliberate (patch set-wake-waits-for-cr, helper-63; the reference looks every 5 s while the CR holds the main): a main whose VM workflow reports a CocoonHibernation holding it hibernated ends the pass Pending with Progressing=False DesireConflict and no pass scheduled; the hold reported over, the set looks every 5 s again and is Running once the main is', async () => {
    const cs = demoSet(withFinalizer);
    const world = new CocoonSetWorld(cs, convergedPods(cs));
    await withCocoonSetWorld(env, world, async (w) => {
      await w.start();
      await waitFor('Running', () => w.cs?.status?.phase === 'Running');
      await w.crHibernated('demo-0', 1);
      await waitFor('Pending', () => w.cs?.status?.phase === 'Pending');
      expect((await w.settled(env)).nextPassAt).not.toBeNull();
      const handle = env.client.workflow.getHandle(w.workflowId);
      const message =
        "VM vk-ns-demo-0 is held hibernated by cocoonhibernation h-demo-0 (desire Hibernate); the set's wake waits until that one wants Wake or is deleted";
      await handle.signal(vmDesireConflictSignal, { pod: 'demo-0', message });
      const progressing = () => w.cs?.status?.conditions?.find((c) => c.type === 'Progressing');
      await waitFor('DesireConflict', () => progressing()?.reason === 'DesireConflict');
      expect(progressing()).toMatchObject({ status: 'False', message: `main pod ns/demo-0: ${message}` });
      const s = await w.settled(env);
      expect([s.phase, s.nextPassAt]).toEqual(['Pending', null]);

      await handle.signal(vmDesireConflictSignal, { pod: 'demo-0', message: null });
      expect((await w.settled(env)).nextPassAt).not.toBeNull();
      w.crs = [];
      await w.vkRunning('demo-0', CONVERGED_NODE, 'id-0');
      await waitFor('Running again', () => w.cs?.status?.phase === 'Running');
    });
  });

  it('deliberate (patch set-wake-waits-for-cr): a sub-agent a CocoonHibernation keeps hibernated, as its VM workflow reports, is named on Progressing=False DesireConflict (before: Scaling, naming nothing), no pass scheduled; the hold reported over, the condition goes', async () => {
    const cs = demoSet(withFinalizer);
    const world = new CocoonSetWorld(cs, convergedPods(cs));
    await withCocoonSetWorld(env, world, async (w) => {
      await w.start();
      await waitFor('Running', () => w.cs?.status?.phase === 'Running');
      await w.crHibernated('demo-1', 1);
      await w.settled(env);
      const handle = env.client.workflow.getHandle(w.workflowId);
      const message =
        "VM vk-ns-demo-1 is held hibernated by cocoonhibernation h-demo-1 (desire Hibernate); the set's wake waits until that one wants Wake or is deleted";
      await handle.signal(vmDesireConflictSignal, { pod: 'demo-1', message });
      const progressing = () => w.cs?.status?.conditions?.find((c) => c.type === 'Progressing');
      await waitFor('DesireConflict', () => progressing()?.reason === 'DesireConflict');
      expect(progressing()).toMatchObject({ status: 'False', message: `pod ns/demo-1: ${message}` });
      expect((await w.settled(env)).nextPassAt).toBeNull();
      await handle.signal(vmDesireConflictSignal, { pod: 'demo-1', message: null });
      await waitFor('no DesireConflict', () => progressing()?.reason !== 'DesireConflict');
    });
  });

  it("a VM workflow's spent-tag report is kept (the state query's spentTags) and cleared by its 'no longer'; a suspend's hibernate ask clears it too, since the new round pushes the tag anew (found by helper-56: the stale record had a later create DELETE the new tag)", async () => {
    const cs = demoSet(withFinalizer);
    const world = new CocoonSetWorld(cs, convergedPods(cs));
    await withCocoonSetWorld(env, world, async (w) => {
      await w.start();
      await waitFor('Running', () => w.cs?.status?.phase === 'Running');
      const handle = env.client.workflow.getHandle(w.workflowId);
      const spentTags = async () => (await w.state()).spentTags;
      await handle.signal(vmTagSpentSignal, { pod: 'demo-1', vmName: 'vk-ns-demo-1', spent: true });
      await handle.signal(vmTagSpentSignal, { pod: 'demo-2', vmName: 'vk-ns-demo-2', spent: true });
      await w.settled(env);
      expect(await spentTags()).toEqual({ 'demo-1': 'vk-ns-demo-1', 'demo-2': 'vk-ns-demo-2' });
      await handle.signal(vmTagSpentSignal, { pod: 'demo-2', vmName: 'vk-ns-demo-2', spent: false });
      await w.settled(env);
      expect(await spentTags()).toEqual({ 'demo-1': 'vk-ns-demo-1' });

      await w.editSpec((c) => (c.spec.suspend = true));
      await waitFor('demo-1 asked to hibernate', () => w.calls.includes('ask demo-1 Hibernate'));
      await w.settled(env);
      expect(await spentTags()).toBeNull();
    });
  });

  it('a failed pass (a toolbox named like an agent slot) is told on the CocoonSet as a Warning Event ReconcileFailed, not only logged (deliberate: the reference only returns the error)', async () => {
    const cs = demoSet(withFinalizer, (c) => {
      c.spec.toolboxes = [{ name: '0', image: IMAGE }];
    });
    const world = new CocoonSetWorld(cs, convergedPods(demoSet()).slice(0, 3));
    await withCocoonSetWorld(env, world, async (w) => {
      await w.start();
      await waitFor('the Warning Event', () => w.events.some((e) => e.reason === RECONCILE_FAILED));
      const e = w.events.find((x) => x.reason === RECONCILE_FAILED)!;
      expect(e.type).toBe('Warning');
      expect(e.message).toContain('must not be an integer');
    });
  });

  it('a pass with a missing sub-agent and a missing toolbox looks restore intent up exactly once', async () => {
    const cs = demoSet(withFinalizer);
    const pods = convergedPods(cs).filter((p) => !['demo-2', 'demo-tb'].includes(p.metadata!.name!));
    const world = new CocoonSetWorld(cs, pods);
    const tbVM = toolboxVMName(cs, 'tb');
    world.crs = [
      hibernation('demo-2', 'Hibernate', 'Hibernated'),
      { ...hibernation('demo-tb', 'Hibernate', 'Hibernated'), metadata: { name: 'h-tb', namespace: 'ns' } },
    ];
    world.tags.add('vk-ns-demo-2:hibernate');
    world.tags.add(`${tbVM}:hibernate`);
    await withCocoonSetWorld(env, world, async (w) => {
      await w.start();
      await waitFor('recreated', () => w.pods.has('demo-2') && w.pods.has('demo-tb'));
      await w.settledAfter(0);
      await waitFor('status written', () => w.cs?.status?.desiredAgents === 3);
      expect(w.lists).toBe(1);
      expect(w.calls.filter((c) => c.startsWith('probe')).sort()).toEqual(
        [`probe ${tbVM}:hibernate`, 'probe vk-ns-demo-2:hibernate'].sort(),
      );
      for (const p of ['demo-2', 'demo-tb']) {
        expect(w.pod(p)!.metadata?.annotations?.[Annotations.restoreFromHibernate]).toBe('true');
      }
      expect(w.creates.sort()).toEqual(['demo-2', 'demo-tb']);
      // Later passes (pods coming up) are steady: still one lookup.
      await w.makeReady('demo-2');
      await w.makeReady('demo-tb');
      await waitFor('Running', () => w.cs?.status?.readyAgents === 3 && w.cs.status.readyToolboxes === 1);
      expect(w.lists).toBe(1);
    });
  });

  it('rebuilds a terminal sub-agent with 0/1/5/30 s backoff and dead-letters it after 4 rebuilds', async () => {
    const cs = demoSet(withFinalizer);
    const pods = convergedPods(cs);
    pods[1]!.status = { phase: 'Failed' };
    const world = new CocoonSetWorld(cs, pods);
    world.failOnCreate.add('demo-1'); // every incarnation of slot 1 crashes
    await withCocoonSetWorld(env, world, async (w) => {
      await w.start();
      const dead = () => w.pod('demo-1')?.metadata?.annotations?.[Annotations.deadLetter] === 'true';
      await skipUntil(env, 'dead letter', dead, 180_000, 1_000);
      // The pass sends its event after the dead-letter patch.
      await waitFor('dead-letter event', () =>
        w.events.some((e) => e.reason === EventReasons.subAgentDeadLetter),
      );
      const rebuilds = w.events.filter((e) => e.reason === EventReasons.subAgentRebuilding);
      expect(rebuilds.map((e) => e.message)).toEqual([
        'slot 1 attempt 1/4',
        'slot 1 attempt 2/4',
        'slot 1 attempt 3/4',
        'slot 1 attempt 4/4',
      ]);
      const deadLetters = w.events.filter((e) => e.reason === EventReasons.subAgentDeadLetter);
      expect(deadLetters).toHaveLength(1);
      expect(deadLetters[0]!.type).toBe('Warning');
      // Backoff between rebuilds, from the history the workflow wrote (workflow clock).
      const deletedAt = w.historyWrites.map((h) => {
        const entry = readRebuildHistory({
          metadata: { annotations: { [Annotations.rebuildHistory]: h } },
          spec: { agent: { image: IMAGE, replicas: 2 } },
        } as CocoonSet).get(1)!;
        return { count: entry.count, ms: lastDeletedMs(entry) };
      });
      expect(deletedAt.map((d) => d.count)).toEqual([1, 2, 3, 4]);
      const gaps = deletedAt.slice(1).map((d, i) => d.ms - deletedAt[i]!.ms);
      expect(gaps[0]).toBeGreaterThanOrEqual(1_000);
      expect(gaps[0]).toBeLessThan(5_000);
      expect(gaps[1]).toBeGreaterThanOrEqual(5_000);
      expect(gaps[1]).toBeLessThan(30_000);
      expect(gaps[2]).toBeGreaterThanOrEqual(30_000);
      expect(gaps[2]).toBeLessThan(60_000);
      // Dead-lettered: the pod is kept and no further rebuild happens.
      const createsBefore = w.creates.length;
      await env.sleep(120_000);
      await w.settled(env);
      expect(w.pods.has('demo-1')).toBe(true);
      expect(w.creates.length).toBe(createsBefore);
      expect(w.creates.filter((n) => n === 'demo-1')).toHaveLength(4);
      expect(w.events.filter((e) => e.reason === EventReasons.subAgentRebuilding)).toHaveLength(4);
      // The rest of the set stayed up.
      expect(uids(w)['demo-0']).toBeDefined();
    });
  });

  it('continues as new past its history limit and keeps reconciling', async () => {
    const cs = demoSet(withFinalizer);
    const world = new CocoonSetWorld(cs, convergedPods(cs));
    // Progress is read from the world (each pass reads it once), not by query: a query racing the
    // continue-as-new can hang on the time-skipping test server.
    const reads = () => world.calls.filter((c) => c === 'read').length;
    await withCocoonSetWorld(env, world, async (w) => {
      await w.start({ historyLimit: 60 });
      await waitFor('Running', () => w.cs?.status?.phase === 'Running');
      const handle = env.client.workflow.getHandle(w.workflowId);
      const firstRun = (await handle.describe()).runId;
      for (let i = 0; i < 12; i++) {
        const r = reads();
        await w.updatePod('demo-1', (p) => {
          p.metadata!.labels = { ...p.metadata!.labels, tick: String(i) };
        });
        await waitFor(`pass ${i}`, () => reads() > r);
        await new Promise((res) => setTimeout(res, 100));
      }
      const desc = await handle.describe();
      expect(desc.runId).not.toBe(firstRun);
      expect(desc.status.name).toBe('RUNNING');
      // The new run still reconciles: a deleted toolbox pod comes back.
      w.pods.delete('demo-tb');
      await w.updatePod('demo-1', (p) => {
        p.metadata!.labels = { ...p.metadata!.labels, tick: 'last' };
      });
      await waitFor('toolbox recreated', () => w.pods.has('demo-tb'));
      expect(w.creates).toEqual(['demo-tb']);
    });
  });

  it('continues as new when a signal lands during the local activities of its last pass', async () => {
    // The server refuses to close a run while a signal waits (UNHANDLED_COMMAND, when the signal lands
    // before the task ends); the SDK retries the task with the signal, and the run that continues as new
    // carries it. Either way the set keeps reconciling.
    const cs = demoSet(withFinalizer);
    const world = new CocoonSetWorld(cs, convergedPods(cs));
    let signalDuringRead = true;
    world.beforeRead = async () => {
      if (!signalDuringRead) return;
      signalDuringRead = false;
      await world.updatePod('demo-1', (p) => {
        p.metadata!.labels = { ...p.metadata!.labels, tick: 'during-read' };
      });
    };
    await withCocoonSetWorld(env, world, async (w) => {
      const handle = env.client.workflow.getHandle(w.workflowId);
      await w.start({ historyLimit: 1 });
      await waitFor('the signal sent during the read', () => !signalDuringRead);
      const firstRun = (await handle.describe()).runId;
      await waitFor('a new run', async () => (await handle.describe()).runId !== firstRun);
      // The new run still reconciles: a deleted toolbox pod comes back.
      w.pods.delete('demo-tb');
      await w.updatePod('demo-1', (p) => {
        p.metadata!.labels = { ...p.metadata!.labels, tick: 'last' };
      });
      await waitFor('toolbox recreated', () => w.pods.has('demo-tb'));
      expect(w.creates).toEqual(['demo-tb']);
    });
  });

  it(`runs a pass as regular activities once it knows more than ${LOCAL_SET_MAX_PODS} pods (local activities below)`, async () => {
    // A workflow task of local activities stays open while they run; a large set's pod signals buffered
    // past 100 meanwhile made the server fail it, and the SDK's retry recorded a history that no longer
    // replayed (see LOCAL_SET_MAX_PODS). Regular activities end the task once scheduled.
    const cs = demoSet(withFinalizer, (c) => (c.spec.agent.replicas = LOCAL_SET_MAX_PODS));
    const world = new CocoonSetWorld(cs, convergedPods(cs));
    await withCocoonSetWorld(env, world, async (w) => {
      await w.start();
      await waitFor('Running', () => w.cs?.status?.phase === 'Running');
      const handle = env.client.workflow.getHandle(w.workflowId);
      const readsAsActivities = async () =>
        ((await handle.fetchHistory()).events ?? []).filter(
          (e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'cocoonSetReadWorld',
        ).length;
      const markers = async () =>
        ((await handle.fetchHistory()).events ?? []).filter(
          (e) => e.markerRecordedEventAttributes?.markerName === 'core_local_activity',
        ).length;
      await w.settled(env);
      // The watcher's informer lists every pod at its start: the workflow learns them one signal each.
      const names = [...w.pods.keys()];
      expect(names.length).toBe(LOCAL_SET_MAX_PODS + 2);
      for (const name of names.slice(0, LOCAL_SET_MAX_PODS)) {
        await w.updatePod(name, (p) => {
          p.metadata!.labels = { ...p.metadata!.labels, seen: 'yes' };
        });
      }
      await w.settled(env);
      expect(await readsAsActivities()).toBe(0);
      const localBefore = await markers();
      expect(localBefore).toBeGreaterThan(0);
      for (const name of names.slice(LOCAL_SET_MAX_PODS)) {
        await w.updatePod(name, (p) => {
          p.metadata!.labels = { ...p.metadata!.labels, seen: 'yes' };
        });
      }
      await w.settled(env);
      expect(await readsAsActivities()).toBeGreaterThan(0);
      expect(await markers()).toBe(localBefore);
    });
  });

  it(`runs a pass as regular activities after more than ${LOCAL_PASS_MAX_SIGNALS} signals since the previous pass began`, async () => {
    const cs = demoSet(withFinalizer);
    const world = new CocoonSetWorld(cs, convergedPods(cs));
    await withCocoonSetWorld(env, world, async (w) => {
      await w.start();
      await waitFor('Running', () => w.cs?.status?.phase === 'Running');
      await w.settled(env);
      const handle = env.client.workflow.getHandle(w.workflowId);
      const readsAsActivities = async () =>
        ((await handle.fetchHistory()).events ?? []).filter(
          (e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'cocoonSetReadWorld',
        ).length;
      const tick = (name: string, value: string) =>
        w.updatePod(name, (p) => {
          p.metadata!.labels = { ...p.metadata!.labels, tick: value };
        });
      // One signal a pass: every read stays local.
      for (let i = 0; i < 3; i++) {
        await tick('demo-1', `quiet-${i}`);
        await w.settled(env);
      }
      expect(await readsAsActivities()).toBe(0);
      // A burst: the pass's read waits until the burst is sent, so it all lands during that pass.
      let burst = true;
      let burstSent!: () => void;
      const sent = new Promise<void>((resolve) => (burstSent = resolve));
      w.beforeRead = async () => {
        if (!burst) return;
        burst = false;
        for (let i = 0; i <= LOCAL_PASS_MAX_SIGNALS; i++) await tick('demo-2', `burst-${i}`);
        burstSent();
      };
      await tick('demo-1', 'start-burst');
      // settled() waits for the signals sent before it is called: called while the burst was still going
      // out, it could return in the gap after the burst's pass, before the burst reached the workflow
      // (CI, 2026-12-06: no regular read yet at the assertion).
      await sent;
      await w.settled(env);
      expect(await readsAsActivities()).toBe(1);
      // Quiet again: the next pass after one more signal is local.
      await tick('demo-1', 'quiet-again');
      await w.settled(env);
      await tick('demo-1', 'quiet-again-2');
      await w.settled(env);
      expect(await readsAsActivities()).toBe(1);
    });
  });

  it('deletion deletes the owned pods together, waits (5 s requeue) while they terminate without deleting them again (the reference deletes each one after the other on every requeue), then collects and completes without waiting for the watch to report the set gone', async () => {
    // Six pods: more than LOCAL_ROUND_MAX, so the deletes are regular activities the history shows.
    const cs = demoSet(withFinalizer, (c) => (c.spec.agent.replicas = 4));
    const world = new CocoonSetWorld(cs, convergedPods(cs));
    world.slowDeletes = true;
    world.tags.add('vk-ns-demo-1:hibernate');
    await withCocoonSetWorld(env, world, async (w) => {
      await w.start();
      await waitFor('Running', () => w.cs?.status?.phase === 'Running');
      const pods = [...w.pods.keys()].sort();
      expect(pods).toHaveLength(6);
      await w.markDeleted();
      await waitFor('pods terminating', () =>
        [...w.pods.values()].every((p) => p.metadata?.deletionTimestamp != null),
      );
      await env.sleep(11_000);
      await w.settled(env);
      expect(w.hasFinalizer()).toBe(true);
      expect(w.registryCalls).toBe(0);
      // Two requeues later every pod was still deleted once, all six scheduled by one workflow task.
      const deletes = w.calls.filter((c) => c.startsWith('delete '));
      expect(deletes.sort()).toEqual(pods.map((p) => `delete ${p}`));
      let run = 0;
      let longest = 0;
      for (const e of (await env.client.workflow.getHandle(w.workflowId).fetchHistory()).events ?? []) {
        const scheduled = e.activityTaskScheduledEventAttributes?.activityType?.name;
        if (scheduled === 'cocoonSetDeletePod') longest = Math.max(longest, ++run);
        else if (e.workflowTaskCompletedEventAttributes) run = 0;
      }
      expect(longest).toBe(6);
      // The pods go unseen (no signal), and this world reports no "gone" for the set either, as when both
      // went while the operator restarted: the 5 s requeue finds them gone and removes the finalizer, and the
      // workflow completes on its own, not at its 10 h fallback pass.
      await w.finishDeletes({ unseen: true });
      await skipUntil(env, 'finalizer removed', () => w.cs === null, 30_000, 2_000);
      expect(w.tags.size).toBe(0);
      const handle = env.client.workflow.getHandle(w.workflowId);
      await waitFor('completed', async () => (await handle.describe()).status.name === 'COMPLETED', 10_000);
      // snapshotPolicy unset = always: every :latest is kept, only :hibernate tags are deleted.
      expect(
        w.calls.filter((c) => c.startsWith('registry-delete')).every((c) => c.endsWith(':hibernate')),
      ).toBe(true);
    });
  });

  it('deletes the pods, drops the registry tags per snapshot policy (scheduled together, not one after the other) and removes the finalizer; then completes', async () => {
    const cs = demoSet(withFinalizer, (c) => {
      c.spec.snapshotPolicy = 'main-only';
    });
    const world = new CocoonSetWorld(cs, convergedPods(cs));
    const tbVM = toolboxVMName(cs, 'tb');
    for (const vm of [MAIN_VM, 'vk-ns-demo-1', 'vk-ns-demo-2', tbVM]) {
      world.tags.add(`${vm}:hibernate`);
      world.tags.add(`${vm}:latest`);
    }
    await withCocoonSetWorld(env, world, async (w) => {
      await w.start();
      await waitFor('Running', () => w.cs?.status?.phase === 'Running');
      await w.markDeleted();
      await waitFor('gone', () => w.cs === null);
      expect(w.pods.size).toBe(0);
      expect([...w.tags].sort()).toEqual([`${MAIN_VM}:latest`]);
      const handle = env.client.workflow.getHandle(w.workflowId);
      await handle.result();
      // The 7 tag deletes go out in one workflow task (DELETION_GC_LANES); the reference sends one at a time.
      let run = 0;
      let longest = 0;
      for (const e of (await handle.fetchHistory()).events ?? []) {
        const scheduled = e.activityTaskScheduledEventAttributes?.activityType?.name;
        if (scheduled === 'deleteManifest') longest = Math.max(longest, ++run);
        else if (e.workflowTaskCompletedEventAttributes) run = 0;
      }
      expect(longest).toBe(7);
    });
  });

  it('deletion keeps the :hibernate tag a live CocoonHibernation still holds, drops the rest (deliberate: the reference drops it and a re-applied set cannot restore the VM)', async () => {
    const cs = demoSet(withFinalizer);
    const world = new CocoonSetWorld(cs, convergedPods(cs));
    for (const vm of [MAIN_VM, 'vk-ns-demo-1', 'vk-ns-demo-2']) world.tags.add(`${vm}:hibernate`);
    // The main is hibernated by a live CR; demo-1's CR woke it (Active, desire Wake); demo-2's is deleting.
    const deleting = hibernation('demo-2', 'Hibernate', 'Hibernated');
    deleting.metadata!.deletionTimestamp = new Date('2026-01-01T00:00:00Z');
    world.crs = [
      hibernation('demo-0', 'Hibernate', 'Hibernated'),
      hibernation('demo-1', 'Wake', 'Active'),
      deleting,
    ];
    await withCocoonSetWorld(env, world, async (w) => {
      await w.start();
      await waitFor('Running', () => w.cs?.status?.phase === 'Running');
      await w.markDeleted();
      await waitFor('gone', () => w.cs === null);
      expect([...w.tags].sort()).toEqual([`${MAIN_VM}:hibernate`]);
    });
  });

  it('deletion with a failing CocoonHibernation List drops no :hibernate tag and keeps the finalizer until the List works', async () => {
    const cs = demoSet(withFinalizer);
    const world = new CocoonSetWorld(cs, convergedPods(cs));
    world.tags.add(`${MAIN_VM}:hibernate`);
    world.crs = [hibernation('demo-0', 'Hibernate', 'Hibernated')];
    await withCocoonSetWorld(env, world, async (w) => {
      await w.start();
      await waitFor('Running', () => w.cs?.status?.phase === 'Running');
      w.listHibernationsError = new Error('apiserver unavailable');
      await w.markDeleted();
      await waitFor('the List attempted', () => w.calls.includes('list-hibernations'));
      await waitFor('pods gone', () => w.pods.size === 0);
      await env.sleep(5_000);
      await w.settled(env);
      expect(w.hasFinalizer()).toBe(true);
      expect(w.tags.has(`${MAIN_VM}:hibernate`)).toBe(true);
      w.listHibernationsError = undefined;
      await skipUntil(env, 'finalizer removed', () => w.cs === null, 120_000, 5_000);
      expect(w.tags.has(`${MAIN_VM}:hibernate`)).toBe(true);
    });
  });
});
