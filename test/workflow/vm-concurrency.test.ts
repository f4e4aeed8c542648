/**
 * The seed's concurrency tests (the reference operator's, seed PR #16), made to bite: a recording
 * registry that detects overlapping calls per VM (annotation writes count too) and a probe that blocks
 * until released. Serialization is the VM workflow's own construction, so the per-VM peak must stay 1;
 * removing it (running the CR passes of one VM concurrently) makes tests (b) and (c) fail — checked by hand.
 */
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Annotations, CONDITION_CONFLICT, CONDITION_READY, Finalizers } from '../../src/api/keys.js';
import { hibernatedPodAnnotations, vmPodAnnotations } from '../support/builders.js';
import { waitFor } from '../support/wait.js';
import { createEnv, withWorld } from './harness.js';

const NS = 'ns';
let env: TestWorkflowEnvironment;

beforeEach(async () => {
  env = await createEnv();
});
afterEach(async () => {
  await env?.teardown();
});

const hibernatedPod = (vm: string) => ({ annotations: hibernatedPodAnnotations(vm) });

describe('VM workflow concurrency', () => {
  it('(a) an unrelated VM completes while another VM’s registry probe is wedged', async () => {
    await withWorld(
      env,
      async (world) => {
        world.tags.add('vk-ns-demo-0:hibernate');
        world.tags.add('vk-ns-demo-1:hibernate');
        world.blockProbe('vk-ns-demo-0');
        await world.putPod(NS, 'demo-0', hibernatedPod('vk-ns-demo-0'));
        await world.putPod(NS, 'demo-1', hibernatedPod('vk-ns-demo-1'));
        await world.putCR({ namespace: NS, name: 'a', podRef: 'demo-0', desire: 'Hibernate' });
        // Wait until the probe really blocks inside the registry, so the test cannot pass serialized.
        await world.probeBlocked('vk-ns-demo-0');
        await world.putCR({ namespace: NS, name: 'b', podRef: 'demo-1', desire: 'Hibernate' });
        await waitFor('b Hibernated', () => world.cr(NS, 'b')?.status?.phase === 'Hibernated');
        expect(world.cr(NS, 'a')?.status?.phase).not.toBe('Hibernated');
        world.releaseProbe('vk-ns-demo-0');
        await waitFor('a Hibernated', () => world.cr(NS, 'a')?.status?.phase === 'Hibernated');
      },
      { registrySlots: 2 },
    );
  });

  it('(b) two live CRs on one VM, same then opposing desires, never overlap a registry call or annotation write; the loser of the opposing edit keeps its phase but is no longer Ready', async () => {
    await withWorld(env, async (world) => {
      world.opDelayMs = 30;
      world.tags.add('vk-ns-demo-0:hibernate');
      await world.putPod(NS, 'demo-0', hibernatedPod('vk-ns-demo-0'));
      await Promise.all([
        world.putCR({ namespace: NS, name: 'a', podRef: 'demo-0', desire: 'Hibernate' }),
        world.putCR({ namespace: NS, name: 'b', podRef: 'demo-0', desire: 'Hibernate' }),
      ]);
      await waitFor(
        'both Hibernated',
        () =>
          world.cr(NS, 'a')?.status?.phase === 'Hibernated' &&
          world.cr(NS, 'b')?.status?.phase === 'Hibernated',
      );
      expect(world.calls.filter((c) => c.startsWith('HEAD')).length).toBeGreaterThanOrEqual(2);
      // Opposing desire: b loses to the older a and says so; the VM stays hibernated.
      await world.putCR({ ...world.cr(NS, 'b')!, desire: 'Wake' });
      await waitFor('conflict reported', () =>
        (world.cr(NS, 'b')?.status?.conditions ?? []).some(
          (c) => c.type === CONDITION_CONFLICT && c.status === 'True',
        ),
      );
      expect(world.pod(NS, 'demo-0')?.annotations?.[Annotations.hibernate]).toBe('true');
      // Deliberate (the reference has no conflict at all): b still says Hibernated, true of the VM, but not
      // Ready for its new desire, at its new generation.
      await world.settled(env, NS, 'demo-0');
      const loser = world.cr(NS, 'b')!;
      expect(loser.status?.phase).toBe('Hibernated');
      expect(loser.status?.observedGeneration).toBe(loser.generation);
      expect(loser.status?.conditions?.find((c) => c.type === CONDITION_READY)).toMatchObject({
        status: 'False',
        reason: 'Pending',
        message:
          'VM vk-ns-demo-0 is held by cocoonhibernation a (desire Hibernate, created first); desire Wake waits until that one is deleted',
        observedGeneration: loser.generation,
      });
      // a goes: b's wake proceeds, and the tag outlives a's deletion until b's wake completes.
      await world.deleteCR(NS, 'a');
      await waitFor('b Waking', () => world.cr(NS, 'b')?.status?.phase === 'Waking');
      await world.settled(env, NS, 'demo-0');
      expect(world.tags.has('vk-ns-demo-0:hibernate')).toBe(true);
      expect(world.pod(NS, 'demo-0')?.annotations?.[Annotations.hibernate]).toBeUndefined();
      expect((world.cr(NS, 'b')?.status?.conditions ?? []).some((c) => c.type === CONDITION_CONFLICT)).toBe(
        false,
      );
      await world.annotatePod(
        NS,
        'demo-0',
        { [Annotations.vmID]: 'vmid-2', [Annotations.lifecycleState]: 'creating' },
        { containerRunning: true },
      );
      await waitFor('b Active', () => world.cr(NS, 'b')?.status?.phase === 'Active');
      expect(world.tags.has('vk-ns-demo-0:hibernate')).toBe(false);
      expect(world.maxPeak()).toBe(1);
    });
  });

  it('(c) a deleting CR and a live CR on one VM never overlap (uids empty, as the Go fixture has them)', async () => {
    await withWorld(env, async (world) => {
      world.opDelayMs = 30;
      world.tags.add('vk-ns-demo-0:hibernate');
      await world.putPod(NS, 'demo-0', hibernatedPod('vk-ns-demo-0'));
      await Promise.all([
        world.putCR({
          namespace: NS,
          name: 'a',
          uid: '',
          podRef: 'demo-0',
          desire: 'Hibernate',
          finalizers: [Finalizers.cocoonHibernation],
          deleting: true,
          deletionTimestamp: new Date().toISOString(),
          status: { phase: 'Hibernated', vmName: 'vk-ns-demo-0' },
        }),
        world.putCR({
          namespace: NS,
          name: 'b',
          uid: '',
          podRef: 'demo-0',
          desire: 'Hibernate',
          finalizers: [Finalizers.cocoonHibernation],
        }),
      ]);
      await waitFor('a gone', () => world.cr(NS, 'a') === undefined);
      await waitFor('b settled', () =>
        ['Hibernated', 'Hibernating'].includes(world.cr(NS, 'b')?.status?.phase ?? ''),
      );
      expect(world.calls.some((c) => c.startsWith('DELETE'))).toBe(true);
      expect(world.calls.some((c) => c.startsWith('HEAD'))).toBe(true);
      expect(world.maxPeak()).toBe(1);
    });
  });
  it('(d) a loser whose pod is gone drops the conflict once the holder is deleted, and its own deletion then drops the tag the holder kept for it (fails without patches pod-wait-status and deletion-drops-inherited-tag)', async () => {
    await withWorld(env, async (world) => {
      world.tags.add('vk-ns-demo-0:hibernate');
      await world.putPod(NS, 'demo-0', hibernatedPod('vk-ns-demo-0'));
      await world.putCR({ namespace: NS, name: 'a', podRef: 'demo-0', desire: 'Hibernate' });
      await waitFor('a Hibernated', () => world.cr(NS, 'a')?.status?.phase === 'Hibernated');
      await world.putCR({ namespace: NS, name: 'b', podRef: 'demo-0', desire: 'Wake' });
      await world.settled(env, NS, 'demo-0');
      expect(world.cr(NS, 'b')?.status?.conditions?.find((c) => c.type === CONDITION_CONFLICT)?.status).toBe(
        'True',
      );
      // The pod goes, then the holder: a keeps the tag, as b still tracks the VM.
      await world.deletePod(NS, 'demo-0');
      await world.settled(env, NS, 'demo-0');
      await world.deleteCR(NS, 'a');
      await world.settled(env, NS, 'demo-0');
      expect(world.cr(NS, 'a')).toBeUndefined();
      expect(world.tags.has('vk-ns-demo-0:hibernate')).toBe(true);
      const loser = world.cr(NS, 'b')!;
      expect(loser.status?.phase).toBe('Pending');
      expect((loser.status?.conditions ?? []).some((c) => c.type === CONDITION_CONFLICT)).toBe(false);
      expect(loser.status?.conditions?.find((c) => c.type === CONDITION_READY)).toMatchObject({
        status: 'False',
        reason: 'Pending',
        message: 'pod ns/demo-0 not yet present',
      });
      // b goes too: nobody tracks the VM any more, so its tag goes with b.
      await world.deleteCR(NS, 'b');
      await world.settled(env, NS, 'demo-0');
      expect(world.cr(NS, 'b')).toBeUndefined();
      expect(world.tags.has('vk-ns-demo-0:hibernate')).toBe(false);
    });
  });
  it('(e) a Wake CR that takes the VM over while vk is still hibernating it (the Hibernating holder deleted) waits in Waking for the round, then wakes from the tag; it never says Active nor deletes the tag mid-round (fails without patch wake-waits-for-hibernate-round)', async () => {
    await withWorld(env, async (world) => {
      await world.putPod(NS, 'demo-0', {
        annotations: vmPodAnnotations('vk-ns-demo-0', { [Annotations.vmID]: 'vmid-old' }),
        containerRunning: true,
      });
      await world.putCR({ namespace: NS, name: 'h', podRef: 'demo-0', desire: 'Hibernate' });
      await waitFor('h Hibernating', () => world.cr(NS, 'h')?.status?.phase === 'Hibernating');
      // vk starts the round: the VM still runs while it saves and pushes.
      await world.annotatePod(NS, 'demo-0', { [Annotations.lifecycleState]: 'hibernating' });
      await world.putCR({ namespace: NS, name: 'w', podRef: 'demo-0', desire: 'Wake' });
      await world.settled(env, NS, 'demo-0');
      await world.deleteCR(NS, 'h');
      await world.settled(env, NS, 'demo-0');
      expect(world.cr(NS, 'w')?.status?.phase).toBe('Waking');
      expect(world.calls.filter((c) => c.startsWith('DELETE'))).toEqual([]);
      expect(world.events.map((e) => e.reason)).not.toContain('WokenActive');
      // vk finishes the round (tag pushed, VM removed), then wakes the VM from the tag.
      await world.vkHibernated(NS, 'demo-0', 'vk-ns-demo-0');
      await world.settled(env, NS, 'demo-0');
      expect(world.tags.has('vk-ns-demo-0:hibernate')).toBe(true);
      expect(world.cr(NS, 'w')?.status?.phase).toBe('Waking');
      // h's deletion waits too: the tag is the VM's only copy while vk wakes it.
      await world.annotatePod(
        NS,
        'demo-0',
        { [Annotations.vmID]: 'vmid-new', [Annotations.lifecycleState]: 'ready' },
        { containerRunning: true },
      );
      await waitFor('w Active', () => world.cr(NS, 'w')?.status?.phase === 'Active');
      await waitFor('h gone', () => world.cr(NS, 'h') === undefined);
      await world.settled(env, NS, 'demo-0');
      expect(world.tags.has('vk-ns-demo-0:hibernate')).toBe(false);
      expect(world.events.filter((e) => e.reason === 'WokenActive')).toHaveLength(1);
      expect(world.calls.filter((c) => c.startsWith('DELETE'))).toHaveLength(1);
    });
  });

  it('(f) two CRs hibernated the VM and the holder is edited to Wake: the VM wakes, the other CR (desire Hibernate) goes Pending with the conflict instead of saying Hibernated on a running VM; once the holder is deleted it hibernates the VM again (fails without patch loser-phase-follows-holder)', async () => {
    await withWorld(env, async (world) => {
      world.tags.add('vk-ns-demo-0:hibernate');
      await world.putPod(NS, 'demo-0', hibernatedPod('vk-ns-demo-0'));
      await world.putCR({ namespace: NS, name: 'a', podRef: 'demo-0', desire: 'Hibernate' });
      await waitFor('a Hibernated', () => world.cr(NS, 'a')?.status?.phase === 'Hibernated');
      await world.putCR({ namespace: NS, name: 'b', podRef: 'demo-0', desire: 'Hibernate' });
      await waitFor('b Hibernated', () => world.cr(NS, 'b')?.status?.phase === 'Hibernated');
      await world.putCR({ ...world.cr(NS, 'a')!, desire: 'Wake' });
      await waitFor('a Waking', () => world.cr(NS, 'a')?.status?.phase === 'Waking');
      await world.settled(env, NS, 'demo-0');
      expect(world.pod(NS, 'demo-0')?.annotations?.[Annotations.hibernate]).toBeUndefined();
      const loser = () => world.cr(NS, 'b')!;
      expect(loser().status?.phase).toBe('Pending');
      expect(loser().status?.conditions?.find((c) => c.type === CONDITION_READY)).toMatchObject({
        status: 'False',
        reason: 'Pending',
        message:
          'VM vk-ns-demo-0 is held by cocoonhibernation a (desire Wake, its transition is in flight); desire Hibernate waits until that one is deleted',
      });
      expect(loser().status?.conditions?.find((c) => c.type === CONDITION_CONFLICT)?.status).toBe('True');
      await world.annotatePod(
        NS,
        'demo-0',
        { [Annotations.vmID]: 'vmid-2', [Annotations.lifecycleState]: 'ready' },
        { containerRunning: true },
      );
      await waitFor('a Active', () => world.cr(NS, 'a')?.status?.phase === 'Active');
      await world.settled(env, NS, 'demo-0');
      expect(loser().status?.phase).toBe('Pending');
      // The holder goes: b takes the VM and hibernates it again.
      await world.deleteCR(NS, 'a');
      await waitFor('b Hibernating', () => world.cr(NS, 'b')?.status?.phase === 'Hibernating');
      expect(world.pod(NS, 'demo-0')?.annotations?.[Annotations.hibernate]).toBe('true');
      await world.vkHibernated(NS, 'demo-0', 'vk-ns-demo-0');
      await waitFor('b Hibernated', () => world.cr(NS, 'b')?.status?.phase === 'Hibernated');
      expect((loser().status?.conditions ?? []).some((c) => c.type === CONDITION_CONFLICT)).toBe(false);
    });
  });
});
