/**
 * A CocoonSet's desire on the VM workflow (docs/cocoonset.md#suspend): the set's suspend and un-suspend reach
 * a VM only through that VM's workflow, which serializes them with the CocoonHibernations targeting the same
 * pod. The set's side is played by the world (`setDesire`, as the set workflow's `askVM` activity sends it);
 * the un-suspend skips of the reference (reconciler_test.go ApplyUnsuspendSkipsPodHibernatedByCR,
 * ApplyUnsuspendSkipsPodMidHibernateOnReverseDesire: §7.4 #8, #9 of the flows catalogue) are pinned here,
 * where the decision now lives.
 */
import { defaultPayloadConverter } from '@temporalio/common';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { vmWorkflowId } from '../../src/api/ids.js';
import { Annotations, CONDITION_CONFLICT } from '../../src/api/keys.js';
import { hibernatedPodAnnotations, vmPodAnnotations } from '../support/builders.js';
import { waitFor } from '../support/wait.js';
import { createEnv, withWorld } from './harness.js';
import type { VMWorld } from './vm-world.js';

const NS = 'ns';
const POD = 'demo-0';
const VM = 'vk-ns-demo-0';
let env: TestWorkflowEnvironment;

beforeEach(async () => {
  env = await createEnv();
});
afterEach(async () => {
  await env?.teardown();
});

const settled = (world: VMWorld) => world.settled(env, NS, POD);
const hibernate = (world: VMWorld) => world.pod(NS, POD)?.annotations?.[Annotations.hibernate];
/** A running VM of a CocoonSet's pod. */
const setPod = (world: VMWorld, annotations = vmPodAnnotations(VM, { [Annotations.vmID]: 'vm-1' })) =>
  world.putPod(NS, POD, { annotations, containerRunning: true, ownerKind: 'CocoonSet' });
const conflictOf = (world: VMWorld, name: string) =>
  world.cr(NS, name)?.status?.conditions?.find((c) => c.type === CONDITION_CONFLICT);

/**
 * What the VM workflow signalled to its set's workflow under signal `name`, oldest first, from its history
 * (no set workflow runs here: each signal is initiated, then fails as the set's workflow is not found).
 */
async function setSignals(name: string): Promise<unknown[]> {
  const history = await env.client.workflow.getHandle(vmWorkflowId(NS, POD)).fetchHistory();
  return (history.events ?? []).flatMap((e) => {
    const a = e.signalExternalWorkflowExecutionInitiatedEventAttributes;
    if (!a || a.signalName !== name) return [];
    return (a.input?.payloads ?? []).map((p) => defaultPayloadConverter.fromPayload(p));
  });
}

/** The set suspends the VM (vk hibernates it), then un-suspends it: the annotation is cleared, no VM yet. */
async function suspendedThenUnsuspended(world: VMWorld): Promise<void> {
  await setPod(world);
  await world.setDesire(NS, POD, 'Hibernate');
  await waitFor('hibernate annotation', () => hibernate(world) === 'true');
  await world.vkHibernated(NS, POD, VM);
  await world.setDesire(NS, POD, 'Wake');
  await waitFor('annotation cleared', () => hibernate(world) === undefined);
}

/** suspendedThenUnsuspended, then vk does not bring the VM up for 6 min. */
async function unsuspendedNotRunningFor6Min(world: VMWorld): Promise<void> {
  await suspendedThenUnsuspended(world);
  await env.sleep(6 * 60_000);
}

describe('VM workflow: a CocoonSet desire', () => {
  it('Hibernate sets the annotation of a pod no CocoonHibernation targets and keeps the workflow running; Wake clears it and the workflow completes', async () => {
    await withWorld(env, async (world) => {
      await setPod(world);
      await world.setDesire(NS, POD, 'Hibernate');
      await waitFor('hibernate annotation', () => hibernate(world) === 'true');
      const s = await settled(world);
      expect([s.holder, s.setDesire?.desire, s.setDesire?.conflict]).toEqual([
        'cocoonset/demo',
        'Hibernate',
        undefined,
      ]);
      const handle = env.client.workflow.getHandle(vmWorkflowId(NS, POD));
      expect((await handle.describe()).status.name).toBe('RUNNING');
      // The set's gate probes the registry, not the VM workflow.
      expect(world.calls.filter((c) => c.startsWith('HEAD') || c.startsWith('DELETE'))).toEqual([]);
      await world.vkHibernated(NS, POD, VM);
      await world.setDesire(NS, POD, 'Wake');
      await waitFor('annotation cleared', () => hibernate(world) === undefined);
      // vk wakes the VM; once it runs, the suspend's tag is dropped (vk would restore from it on a later
      // create of the pod) and the workflow completes.
      expect(world.tags.has(`${VM}:hibernate`)).toBe(true);
      await world.annotatePod(NS, POD, { [Annotations.vmID]: 'vm-2' }, { containerRunning: true });
      await world.resync(NS, POD);
      await handle.result();
      expect(world.calls.filter((c) => c.startsWith('DELETE'))).toEqual([`DELETE ${VM}:hibernate`]);
      expect(world.tags.has(`${VM}:hibernate`)).toBe(false);
    });
  });

  it('an un-suspend while vk still pushes the snapshot (lifecycle hibernating, the VM still running) waits for that round to end and the VM to run again, then drops the tag the round pushed', async () => {
    await withWorld(env, async (world) => {
      await setPod(world);
      await world.setDesire(NS, POD, 'Hibernate');
      await waitFor('hibernate annotation', () => hibernate(world) === 'true');
      // vk starts the round: lifecycle hibernating, the VM still running while the snapshot is pushed.
      await world.annotatePod(NS, POD, { [Annotations.lifecycleState]: 'hibernating' });
      await world.setDesire(NS, POD, 'Wake');
      await waitFor('annotation cleared', () => hibernate(world) === undefined);
      await settled(world);
      expect(world.calls.filter((c) => c.startsWith('DELETE'))).toEqual([]);
      // vk finishes the round (the tag appears), then wakes the VM as the annotation is gone.
      await world.vkHibernated(NS, POD, VM);
      await world.annotatePod(
        NS,
        POD,
        { [Annotations.lifecycleState]: 'creating', [Annotations.vmID]: 'vm-2' },
        { containerRunning: true },
      );
      await env.client.workflow.getHandle(vmWorkflowId(NS, POD)).result();
      expect(world.calls.filter((c) => c.startsWith('DELETE'))).toEqual([`DELETE ${VM}:hibernate`]);
      expect(world.tags.has(`${VM}:hibernate`)).toBe(false);
    });
  });

  it('an un-suspend whose tag DELETE fails keeps its desire and tries again at its next look; the workflow completes once the DELETE succeeds (ours: a leftover tag would restore the suspend-time state on a later create of the pod)', async () => {
    await withWorld(env, async (world) => {
      await setPod(world);
      await world.setDesire(NS, POD, 'Hibernate');
      await waitFor('hibernate annotation', () => hibernate(world) === 'true');
      await world.vkHibernated(NS, POD, VM);
      world.deleteError = new Error('registry answered 503');
      await world.setDesire(NS, POD, 'Wake');
      await waitFor('annotation cleared', () => hibernate(world) === undefined);
      await world.annotatePod(NS, POD, { [Annotations.vmID]: 'vm-2' }, { containerRunning: true });
      await world.resync(NS, POD);
      await waitFor('a DELETE', () => world.calls.some((c) => c.startsWith('DELETE')));
      const s = await settled(world);
      expect(s.setDesire?.desire).toBe('Wake');
      const handle = env.client.workflow.getHandle(vmWorkflowId(NS, POD));
      expect((await handle.describe()).status.name).toBe('RUNNING');
      expect(world.tags.has(`${VM}:hibernate`)).toBe(true);
      world.deleteError = undefined;
      await env.sleep(10_000);
      await handle.result();
      expect(world.tags.has(`${VM}:hibernate`)).toBe(false);
      expect(world.calls.filter((c) => c.startsWith('DELETE')).length).toBeGreaterThanOrEqual(2);
    });
  });

  it('deliberate (patch set-wake-outlasts-deadline; before it the desire was spent at the wake deadline and the tag stayed, for a later create to roll the VM back): an un-suspend whose VM runs only after 5 min (vk retrying a failed pull) still drops the tag once it runs, looking every minute past the deadline', async () => {
    await withWorld(env, async (world) => {
      await unsuspendedNotRunningFor6Min(world);
      const handle = env.client.workflow.getHandle(vmWorkflowId(NS, POD));
      expect((await handle.describe()).status.name).toBe('RUNNING');
      const late = await settled(world);
      expect(late.setDesire).toMatchObject({ desire: 'Wake', late: true });
      // It looks once a minute now, not every 5 s: 5 more minutes bring at most 6 re-reads (not 60).
      const reads = () => world.calls.filter((c) => c.startsWith('readVMWorld')).length;
      const before = reads();
      await env.sleep(5 * 60_000);
      await settled(world);
      expect(reads() - before).toBeGreaterThanOrEqual(4);
      expect(reads() - before).toBeLessThanOrEqual(6);
      // vk's retry brings the VM up; no watch event reaches the workflow: its minute look finds it.
      world.pods.set(`${NS}/${POD}`, {
        ...world.pod(NS, POD)!,
        containerRunning: true,
        annotations: { ...world.pod(NS, POD)!.annotations, [Annotations.vmID]: 'vm-2' },
      });
      await env.sleep(60_000);
      await handle.result();
      expect(world.calls.filter((c) => c.startsWith('DELETE'))).toEqual([`DELETE ${VM}:hibernate`]);
      expect(world.tags.has(`${VM}:hibernate`)).toBe(false);
    });
  });

  it('a run an older version started (patches: 30) spends an un-suspend at the wake deadline and keeps the tag', async () => {
    await withWorld(env, async (world) => {
      world.startExtra = { patches: 30 };
      await unsuspendedNotRunningFor6Min(world);
      await env.client.workflow.getHandle(vmWorkflowId(NS, POD)).result();
      expect(world.calls.filter((c) => c.startsWith('DELETE'))).toEqual([]);
      expect(world.tags.has(`${VM}:hibernate`)).toBe(true);
    });
  });

  describe("deliberate (patch set-wake-outlives-pod; before it the pod's deletion spent the Wake and the tag stayed, for a later create to roll the VM back): a Wake whose pod goes before its VM runs", () => {
    /** Suspended, un-suspended; vk cannot pull the snapshot (the VM never runs); the pod is deleted. */
    async function podGoneMidWake(world: VMWorld): Promise<void> {
      await suspendedThenUnsuspended(world);
      await settled(world);
      await world.deletePod(NS, POD);
    }
    /** The pod created again under the same name (a new uid), running `vm` (vk restored it from the tag). */
    const nextPod = (world: VMWorld, vm: string, extra: Record<string, string> = {}) =>
      world.putPod(NS, POD, {
        uid: 'pod-uid-next',
        annotations: vmPodAnnotations(vm, { [Annotations.vmID]: 'vm-3', ...extra }),
        containerRunning: true,
        ownerKind: 'CocoonSet',
      });

    it('passes to the next pod of the same VM and drops the tag once that one runs', async () => {
      await withWorld(env, async (world) => {
        await podGoneMidWake(world);
        const gone = await settled(world);
        expect(gone.setDesire).toMatchObject({ desire: 'Wake', vmName: VM });
        const handle = env.client.workflow.getHandle(vmWorkflowId(NS, POD));
        expect((await handle.describe()).status.name).toBe('RUNNING');
        expect(world.tags.has(`${VM}:hibernate`)).toBe(true);
        // The set creates the pod again; vk restores it from the tag (its evidence check). No watch event
        // reaches the workflow (no CocoonHibernation): its 5 s look finds the new pod.
        await nextPod(world, VM);
        await env.sleep(10_000);
        await handle.result();
        expect(world.calls.filter((c) => c.startsWith('DELETE'))).toEqual([`DELETE ${VM}:hibernate`]);
        expect(world.tags.has(`${VM}:hibernate`)).toBe(false);
        // The new pod's annotations were never written.
        expect(world.calls.filter((c) => c.startsWith('patchPod'))).toHaveLength(2);
      });
    });

    it('a next pod asked to hibernate ends it: the annotation stays, the tag stays', async () => {
      await withWorld(env, async (world) => {
        await podGoneMidWake(world);
        // Carried while no pod is there (before the patch it was spent here).
        expect((await settled(world)).setDesire).toMatchObject({ desire: 'Wake', vmName: VM });
        const patches = world.calls.filter((c) => c.startsWith('patchPod')).length;
        await nextPod(world, VM, { [Annotations.hibernate]: 'true' });
        await env.sleep(10_000);
        await env.client.workflow.getHandle(vmWorkflowId(NS, POD)).result();
        expect(hibernate(world)).toBe('true');
        expect(world.calls.filter((c) => c.startsWith('patchPod'))).toHaveLength(patches);
        expect(world.calls.filter((c) => c.startsWith('DELETE'))).toEqual([]);
      });
    });

    it('a next pod running another VM ends it without a DELETE', async () => {
      await withWorld(env, async (world) => {
        await podGoneMidWake(world);
        expect((await settled(world)).setDesire).toMatchObject({ desire: 'Wake', vmName: VM });
        await nextPod(world, 'vk-ns-other');
        await env.sleep(10_000);
        await env.client.workflow.getHandle(vmWorkflowId(NS, POD)).result();
        expect(world.calls.filter((c) => c.startsWith('DELETE'))).toEqual([]);
        expect(world.tags.has(`${VM}:hibernate`)).toBe(true);
      });
    });

    it('no pod within the wake deadline (a scale-down): the workflow lets go, keeping the tag, having looked every 5 s', async () => {
      await withWorld(env, async (world) => {
        await podGoneMidWake(world);
        await settled(world);
        const reads = () => world.calls.filter((c) => c.startsWith('readVMWorld')).length;
        const before = reads();
        await env.sleep(6 * 60_000);
        await env.client.workflow.getHandle(vmWorkflowId(NS, POD)).result();
        expect(reads() - before).toBeGreaterThanOrEqual(50);
        expect(reads() - before).toBeLessThanOrEqual(62);
        expect(world.calls.filter((c) => c.startsWith('DELETE'))).toEqual([]);
        expect(world.tags.has(`${VM}:hibernate`)).toBe(true);
      });
    });

    it('a run an older version started (patches: 31) spends it with the pod: the next pod keeps the tag', async () => {
      await withWorld(env, async (world) => {
        world.startExtra = { patches: 31 };
        await podGoneMidWake(world);
        await env.client.workflow.getHandle(vmWorkflowId(NS, POD)).result();
        await nextPod(world, VM);
        expect(world.calls.filter((c) => c.startsWith('DELETE'))).toEqual([]);
        expect(world.tags.has(`${VM}:hibernate`)).toBe(true);
      });
    });
  });

  it('a Wake that leaves the tag to the set (a migration wakes in place and drops it itself): the VM workflow clears the annotation and sends no DELETE', async () => {
    await withWorld(env, async (world) => {
      await setPod(world);
      await world.setDesire(NS, POD, 'Hibernate');
      await waitFor('hibernate annotation', () => hibernate(world) === 'true');
      await world.vkHibernated(NS, POD, VM);
      await world.setDesire(NS, POD, 'Wake', { keepTag: true });
      await waitFor('annotation cleared', () => hibernate(world) === undefined);
      await world.annotatePod(NS, POD, { [Annotations.vmID]: 'vm-2' }, { containerRunning: true });
      await world.resync(NS, POD);
      await env.client.workflow.getHandle(vmWorkflowId(NS, POD)).result();
      expect(world.calls.filter((c) => c.startsWith('DELETE'))).toEqual([]);
      expect(world.tags.has(`${VM}:hibernate`)).toBe(true);
    });
  });

  it('an un-suspend whose round made no re-read still looks again until the VM runs, then drops the tag', async () => {
    await withWorld(env, async (world) => {
      await setPod(world);
      await world.setDesire(NS, POD, 'Hibernate');
      await waitFor('hibernate annotation', () => hibernate(world) === 'true');
      await world.vkHibernated(NS, POD, VM);
      await world.resync(NS, POD);
      await settled(world);
      // Later, the set's Wake carries nothing newer than the workflow read: its round patches, no re-read.
      await env.sleep(30_000);
      await world.setDesire(NS, POD, 'Wake');
      await waitFor('annotation cleared', () => hibernate(world) === undefined);
      // vk wakes the VM; no watch event reaches the workflow (no CocoonHibernation): only its own timer.
      world.pods.set(`${NS}/${POD}`, {
        ...world.pod(NS, POD)!,
        containerRunning: true,
        annotations: { ...world.pod(NS, POD)!.annotations, [Annotations.vmID]: 'vm-2' },
      });
      await env.sleep(10_000);
      await env.client.workflow.getHandle(vmWorkflowId(NS, POD)).result();
      expect(world.tags.has(`${VM}:hibernate`)).toBe(false);
    });
  });

  it('a repeated desire (the set asks on every pass) writes nothing more', async () => {
    await withWorld(env, async (world) => {
      await setPod(world);
      await world.setDesire(NS, POD, 'Hibernate');
      await waitFor('hibernate annotation', () => hibernate(world) === 'true');
      await settled(world);
      const patches = world.calls.filter((c) => c.startsWith('patchPod')).length;
      await world.setDesire(NS, POD, 'Hibernate');
      await world.setDesire(NS, POD, 'Hibernate');
      await settled(world);
      expect(world.calls.filter((c) => c.startsWith('patchPod'))).toHaveLength(patches);
    });
  });

  const HELD =
    "VM vk-ns-demo-0 is held hibernated by cocoonhibernation hib (desire Hibernate); the set's wake waits until that one wants Wake or is deleted";

  /** A set's VM a CocoonHibernation hibernated (phase Hibernated), then the set's un-suspend Wake. */
  async function heldWhenTheSetWakes(world: VMWorld): Promise<void> {
    await setPod(world);
    await world.putCR({ namespace: NS, name: 'hib', podRef: POD, desire: 'Hibernate' });
    await waitFor('annotated', () => hibernate(world) === 'true');
    await world.vkHibernated(NS, POD, VM);
    await waitFor('Hibernated', () => world.cr(NS, 'hib')?.status?.phase === 'Hibernated');
    await world.setDesire(NS, POD, 'Wake');
  }

  it('un-suspend (Wake) leaves the annotation of a VM a CocoonHibernation holds: desire Hibernate (§7.4 #8)', async () => {
    await withWorld(env, async (world) => {
      await setPod(world, hibernatedPodAnnotations(VM));
      await world.putCR({ namespace: NS, name: 'hib', podRef: POD, desire: 'Hibernate' });
      await waitFor('CR finalizer', () => (world.cr(NS, 'hib')?.finalizers ?? []).length > 0);
      await world.setDesire(NS, POD, 'Wake');
      const s = await settled(world);
      expect(hibernate(world)).toBe('true');
      expect(s.setDesire?.desire).toBe('Wake');
      // Never cleared, not even for a moment (the CR would set it again).
      expect(world.calls.filter((c) => c.includes(`"${Annotations.hibernate}":null`))).toEqual([]);
    });
  });

  describe('deliberate (patch set-wake-waits-for-cr, found by helper-63; before it the Wake was spent at once, and the set, whose main stayed not Ready, asked again every 5 s for as long as the CR held the VM): a Wake a CocoonHibernation holds', () => {
    it('waits, tells the set which CR holds the VM (once, however often the set asks) and re-reads nothing on a timer', async () => {
      await withWorld(env, async (world) => {
        await heldWhenTheSetWakes(world);
        const s = await settled(world);
        expect(s.setDesire).toMatchObject({ desire: 'Wake', conflict: HELD });
        expect(await setSignals('vmDesireConflict')).toEqual([{ pod: POD, message: HELD }]);
        // The set asks again on each of its passes: nothing more is written or said.
        const calls = world.calls.length;
        await world.setDesire(NS, POD, 'Wake');
        await world.setDesire(NS, POD, 'Wake');
        await settled(world);
        expect(world.calls.slice(calls).filter((c) => !c.startsWith('get'))).toEqual([]);
        expect(await setSignals('vmDesireConflict')).toHaveLength(1);
        // Its next look without a signal is the desire's 10-minute recheck, not the wake's 5 s poll.
        const next = Date.parse((await settled(world)).nextWakeAt ?? '');
        expect(next - (await env.currentTimeMs())).toBeGreaterThan(5 * 60_000);
        expect(hibernate(world)).toBe('true');
      });
    });

    it('the CR wants Wake: its wake runs the VM and drops the tag; the set is told at once, and its Wake ends without a second DELETE', async () => {
      await withWorld(env, async (world) => {
        await heldWhenTheSetWakes(world);
        await settled(world);
        await world.putCR({ ...world.cr(NS, 'hib')!, desire: 'Wake' });
        await waitFor('annotation cleared', () => hibernate(world) === undefined);
        await waitFor('conflict cleared', async () => (await setSignals('vmDesireConflict')).length === 2);
        expect((await setSignals('vmDesireConflict'))[1]).toEqual({ pod: POD, message: null });
        await world.annotatePod(
          NS,
          POD,
          { [Annotations.lifecycleState]: 'running', [Annotations.vmID]: 'vm-2' },
          { containerRunning: true },
        );
        await waitFor('Active', () => world.cr(NS, 'hib')?.status?.phase === 'Active');
        const s = await settled(world);
        expect(s.setDesire).toBeNull();
        expect(world.calls.filter((c) => c.startsWith('DELETE'))).toEqual([`DELETE ${VM}:hibernate`]);
      });
    });

    it('the CR is deleted: its deletion wakes the VM, and the set’s Wake completes once the VM runs', async () => {
      await withWorld(env, async (world) => {
        await heldWhenTheSetWakes(world);
        await settled(world);
        await world.deleteCR(NS, 'hib');
        await waitFor('annotation cleared', () => hibernate(world) === undefined);
        await world.annotatePod(
          NS,
          POD,
          { [Annotations.lifecycleState]: 'running', [Annotations.vmID]: 'vm-2' },
          { containerRunning: true },
        );
        await env.client.workflow.getHandle(vmWorkflowId(NS, POD)).result();
        expect(world.cr(NS, 'hib')).toBeUndefined();
        expect(world.tags.has(`${VM}:hibernate`)).toBe(false);
        expect((await setSignals('vmDesireConflict')).at(-1)).toEqual({ pod: POD, message: null });
      });
    });

    it('the set then suspends (Hibernate), which the CR agrees with: the set is told the conflict is over (helper-64: it kept naming the CR, even after the CR was deleted)', async () => {
      await withWorld(env, async (world) => {
        await heldWhenTheSetWakes(world);
        await settled(world);
        await world.setDesire(NS, POD, 'Hibernate');
        const s = await settled(world);
        expect(s.setDesire).toMatchObject({ desire: 'Hibernate' });
        expect(s.setDesire?.conflict).toBeUndefined();
        expect(await setSignals('vmDesireConflict')).toEqual([
          { pod: POD, message: HELD },
          { pod: POD, message: null },
        ]);
      });
    });

    it("a set's Hibernate refused by a CR that wants the VM awake, then the set's Wake: the set is told the conflict is over", async () => {
      await withWorld(env, async (world) => {
        await setPod(world);
        await world.putCR({ namespace: NS, name: 'awake', podRef: POD, desire: 'Wake' });
        await waitFor('Active', () => world.cr(NS, 'awake')?.status?.phase === 'Active');
        await world.setDesire(NS, POD, 'Hibernate');
        expect((await settled(world)).setDesire?.conflict).toBeDefined();
        await world.setDesire(NS, POD, 'Wake');
        await settled(world);
        const told = await setSignals('vmDesireConflict');
        expect(told).toHaveLength(2);
        expect(told[1]).toEqual({ pod: POD, message: null });
      });
    });

    it('its pod deleted: the Wake ends with it (the set is told the conflict is over) and nothing re-reads every 5 s', async () => {
      await withWorld(env, async (world) => {
        await heldWhenTheSetWakes(world);
        await settled(world);
        await world.deletePod(NS, POD);
        const s = await settled(world);
        expect(s.setDesire).toBeNull();
        expect((await setSignals('vmDesireConflict')).at(-1)).toEqual({ pod: POD, message: null });
        const next = s.nextWakeAt === null ? Number.POSITIVE_INFINITY : Date.parse(s.nextWakeAt ?? '');
        expect(next - (await env.currentTimeMs())).toBeGreaterThan(5_000);
      });
    });

    it('a run an older version started (patches: 37) spends it at once and tells the set nothing', async () => {
      await withWorld(env, async (world) => {
        world.startExtra = { patches: 37 };
        await heldWhenTheSetWakes(world);
        const s = await settled(world);
        expect([hibernate(world), s.setDesire]).toEqual(['true', null]);
        expect(await setSignals('vmDesireConflict')).toEqual([]);
      });
    });
  });

  it('un-suspend (Wake) leaves the annotation during the reverse-desire window: desire Wake, phase Hibernating (§7.4 #9)', async () => {
    await withWorld(env, async (world) => {
      await setPod(world, hibernatedPodAnnotations(VM));
      // vk has not finished: lifecycle still hibernating, so the CR stays Hibernating under a Wake desire.
      await world.annotatePod(NS, POD, { [Annotations.lifecycleState]: 'hibernating' });
      await world.putCR({ namespace: NS, name: 'hib', podRef: POD, desire: 'Hibernate' });
      await waitFor('Hibernating', () => world.cr(NS, 'hib')?.status?.phase === 'Hibernating');
      await world.putCR({ ...world.cr(NS, 'hib')!, desire: 'Wake' });
      await world.setDesire(NS, POD, 'Wake');
      const s = await settled(world);
      expect([hibernate(world), world.cr(NS, 'hib')?.status?.phase]).toEqual(['true', 'Hibernating']);
      expect(s.setDesire?.conflict).toBe(
        "VM vk-ns-demo-0 is being hibernated by cocoonhibernation hib (desire Wake, phase Hibernating); the set's wake waits for that round to end",
      );
      expect(world.calls.filter((c) => c.includes(`"${Annotations.hibernate}":null`))).toEqual([]);
    });
  });

  it('a CocoonHibernation that wants the VM awake and came first holds it: the set’s Hibernate waits, its conflict recorded; the CR deleted, the set hibernates the VM', async () => {
    await withWorld(env, async (world) => {
      await setPod(world);
      await world.putCR({ namespace: NS, name: 'awake', podRef: POD, desire: 'Wake' });
      await waitFor('Active', () => world.cr(NS, 'awake')?.status?.phase === 'Active');
      await world.setDesire(NS, POD, 'Hibernate');
      const s = await settled(world);
      expect(hibernate(world)).toBeUndefined();
      expect(s.holder).toBe('awake');
      expect(s.setDesire?.conflict).toBe(
        "VM vk-ns-demo-0 is held by cocoonhibernation awake (desire Wake, created first); the set's hibernate waits until that one is deleted or wants Hibernate",
      );
      await world.deleteCR(NS, 'awake');
      await waitFor('hibernate annotation', () => hibernate(world) === 'true');
      expect((await settled(world)).setDesire?.conflict).toBeUndefined();
    });
  });

  it('a CocoonHibernation that wants the VM awake and came after the set’s Hibernate loses: DesireConflict on the CR, the annotation stays', async () => {
    await withWorld(env, async (world) => {
      await setPod(world);
      await world.setDesire(NS, POD, 'Hibernate');
      await waitFor('hibernate annotation', () => hibernate(world) === 'true');
      // The world's CRs are created in 2026-01-01; the set's desire is newer (workflow time): make the CR newer.
      await world.putCR({
        namespace: NS,
        name: 'late',
        podRef: POD,
        desire: 'Wake',
        creationTimestamp: new Date(Date.now() + 3_600_000).toISOString(),
      });
      await waitFor('DesireConflict', () => conflictOf(world, 'late')?.status === 'True');
      expect(conflictOf(world, 'late')?.message).toBe(
        'VM vk-ns-demo-0 is held by cocoonset demo, which is suspended (created first); desire Wake waits until the set is un-suspended',
      );
      await settled(world);
      expect(hibernate(world)).toBe('true');
      // Un-suspended: the CR's Wake goes ahead.
      await world.setDesire(NS, POD, 'Wake');
      await waitFor('CR Waking or Active', () =>
        ['Waking', 'Active'].includes(world.cr(NS, 'late')?.status?.phase ?? ''),
      );
      expect(hibernate(world)).toBeUndefined();
    });
  });

  it('a CocoonHibernation deleted while the set is suspended neither wakes the VM nor drops its tag', async () => {
    await withWorld(env, async (world) => {
      await setPod(world);
      await world.putCR({ namespace: NS, name: 'hib', podRef: POD, desire: 'Hibernate' });
      await waitFor('annotated', () => hibernate(world) === 'true');
      await world.vkHibernated(NS, POD, VM);
      await waitFor('Hibernated', () => world.cr(NS, 'hib')?.status?.phase === 'Hibernated');
      await world.setDesire(NS, POD, 'Hibernate');
      await world.deleteCR(NS, 'hib');
      await waitFor('CR gone', () => world.cr(NS, 'hib') === undefined);
      await settled(world);
      expect(hibernate(world)).toBe('true');
      expect(world.tags.has(`${VM}:hibernate`)).toBe(true);
      expect(world.calls.filter((c) => c.startsWith('DELETE'))).toEqual([]);
    });
  });

  it('a Hibernate desire is for the pod incarnation the set asked about: a pod created again under the same name (a seat release restore) is not hibernated on the old request', async () => {
    await withWorld(env, async (world) => {
      await setPod(world);
      await world.setDesire(NS, POD, 'Hibernate');
      await waitFor('hibernate annotation', () => hibernate(world) === 'true');
      await settled(world);
      // The pod is deleted and created again (new uid) without a hibernate annotation; the workflow hears of
      // it only on its next re-read (no CocoonHibernation targets the pod, so no watch event reaches it).
      world.pods.set(`${NS}/${POD}`, {
        ...world.pod(NS, POD)!,
        uid: 'pod-uid-new',
        annotations: vmPodAnnotations(VM, { [Annotations.vmID]: 'vm-2' }),
      });
      await world.resync(NS, POD);
      const handle = env.client.workflow.getHandle(vmWorkflowId(NS, POD));
      await handle.result();
      expect(hibernate(world)).toBeUndefined();
    });
  });

  it('a seat release: the desire outlives the deleted pod, so a CocoonHibernation deleted meanwhile keeps the tag (the VM lives in it alone); the set’s Wake ends it', async () => {
    await withWorld(env, async (world) => {
      await setPod(world);
      await world.putCR({ namespace: NS, name: 'hib', podRef: POD, desire: 'Hibernate' });
      await waitFor('annotated', () => hibernate(world) === 'true');
      await world.vkHibernated(NS, POD, VM);
      await waitFor('Hibernated', () => world.cr(NS, 'hib')?.status?.phase === 'Hibernated');
      await world.setDesire(NS, POD, 'Hibernate', { release: true });
      await world.deletePod(NS, POD);
      await world.deleteCR(NS, 'hib');
      await waitFor('CR gone', () => world.cr(NS, 'hib') === undefined);
      const s = await settled(world);
      expect(s.setDesire?.desire).toBe('Hibernate');
      expect(world.tags.has(`${VM}:hibernate`)).toBe(true);
      expect(world.calls.filter((c) => c.startsWith('DELETE'))).toEqual([]);
      await world.setDesire(NS, POD, 'Wake');
      await env.client.workflow.getHandle(vmWorkflowId(NS, POD)).result();
      expect(world.tags.has(`${VM}:hibernate`)).toBe(true);
    });
  });

  it('a Hibernate desire for a pod that is gone is dropped and the workflow completes', async () => {
    await withWorld(env, async (world) => {
      await world.setDesire(NS, POD, 'Hibernate');
      await env.client.workflow.getHandle(vmWorkflowId(NS, POD)).result();
      expect(world.calls.filter((c) => c.startsWith('patchPod'))).toEqual([]);
    });
  });
});
