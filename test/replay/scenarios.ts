/**
 * The situations whose workflow histories are kept as golden files under test/replay/histories/: each
 * scenario drives the real entity workflows through the workflow-test worlds (test/workflow/*) on the
 * time-skipping server and returns the histories to keep, by file name. `npm run record-histories`
 * (test/replay/record.ts) runs them all and writes the files; test/replay/replay.test.ts replays every file
 * against the current workflow code, so a change that breaks runs already in flight fails CI.
 */
import type { V1Pod } from '@kubernetes/client-node';
import type { History } from '@temporalio/common/lib/proto-utils.js';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { vmWorkflowId } from '../../src/api/ids.js';
import { Annotations, CONDITION_DELETE_FAILING, EventReasons, Labels } from '../../src/api/keys.js';
import { vmDesireConflictSignal, vmTagSpentSignal } from '../../src/workflows/messages.js';
import {
  CONVERGED_NODE,
  hibernatedPodAnnotations,
  liveOn,
  newCocoonSet,
  vmPodAnnotations,
  withFinalizer,
} from '../support/builders.js';
import { waitFor } from '../support/wait.js';
import {
  CocoonSetWorld,
  convergedPods,
  demoSet,
  MAIN_VM,
  withCocoonSetWorld,
} from '../workflow/cocoonset-world.js';
import { skipUntil, withWorld } from '../workflow/harness.js';
import type { VMWorld } from '../workflow/vm-world.js';

const NS = 'ns';
const POD = 'demo-0';
const VM = 'vk-ns-demo-0';
const VM_ID = vmWorkflowId(NS, POD);

export interface Scenario {
  /** Base name of the history files. */
  name: string;
  /** What the histories cover. */
  covers: string;
  /** Drives the workflows; returns the histories to keep, keyed by file name (without `.json`). */
  record(env: TestWorkflowEnvironment): Promise<Record<string, History>>;
}

const phase = (world: VMWorld, name = 'hib') => world.cr(NS, name)?.status?.phase;

const podAnnotations = (extra: Record<string, string> = {}) => vmPodAnnotations(VM, extra);

/**
 * A wake of the hibernated VM that vk finishes while the registry answers every DELETE with 503; resolves a
 * counter of the DELETEs the workflow sent so far.
 */
async function wokenWithFailingDelete(world: VMWorld, owner: PodOwner = {}): Promise<() => number> {
  world.tags.add(`${VM}:hibernate`);
  await hibernatedPod(world, owner);
  await world.putCR({ namespace: NS, name: 'hib', podRef: POD, desire: 'Wake' });
  await waitFor('Waking', () => phase(world) === 'Waking');
  world.deleteError = new Error('registry answered 503');
  await vkRunning(world, 'vmid-new');
  return () => world.calls.filter((c) => c.startsWith('DELETE')).length;
}

/** A pod's owner: none, or the CocoonSet `demo` (`SET_OWNED`). */
type PodOwner = { labels?: Record<string, string>; ownerKind?: string; ownerUID?: string };
const SET_OWNED: PodOwner = {
  labels: { [Labels.cocoonSet]: 'demo' },
  ownerKind: 'CocoonSet',
  ownerUID: 'set-uid',
};

/** The pod as vk-cocoon leaves it once a hibernate round is done. */
async function hibernatedPod(world: VMWorld, owner: PodOwner = {}): Promise<void> {
  await world.putPod(NS, POD, { annotations: hibernatedPodAnnotations(VM), ...owner });
}

/** vk-cocoon finishes a hibernate round: the tag is pushed, the VM stops. */
async function vkHibernated(world: VMWorld): Promise<void> {
  await world.vkHibernated(NS, POD, VM);
}

/** vk-cocoon finishes a wake: a running container with a fresh VM id. */
async function vkRunning(world: VMWorld, vmID: string): Promise<void> {
  await world.annotatePod(
    NS,
    POD,
    { [Annotations.vmID]: vmID, [Annotations.lifecycleState]: 'ready' },
    { containerRunning: true },
  );
}

/** A running VM of a CocoonSet's pod. */
async function setPodRunning(world: VMWorld): Promise<void> {
  await world.putPod(NS, POD, {
    annotations: podAnnotations({ [Annotations.vmID]: 'vmid-1' }),
    containerRunning: true,
    ownerKind: 'CocoonSet',
    ownerUID: 'set-uid',
  });
}

/**
 * A CocoonSet's running VM that the set asked to hibernate: the pod annotated, vk-cocoon's round done (tag
 * pushed, VM stopped).
 */
async function setHibernated(world: VMWorld): Promise<void> {
  await setPodRunning(world);
  await world.setDesire(NS, POD, 'Hibernate');
  await waitFor('annotated', () => world.pod(NS, POD)?.annotations?.[Annotations.hibernate] === 'true');
  await vkHibernated(world);
}

/** The demo set's pods (main, two sub-agents, a toolbox). */
const DEMO_PODS = ['demo-0', 'demo-1', 'demo-2', 'demo-tb'];

/**
 * A running demo set suspended (retain): started, Running, `spec.suspend` set, every pod annotated, vk-cocoon's
 * rounds done for generation 2, Suspended.
 */
async function setSuspended(w: CocoonSetWorld): Promise<void> {
  await w.start();
  await waitFor('Running', () => w.cs?.status?.phase === 'Running');
  await w.editSpec((c) => (c.spec.suspend = true));
  await waitFor('annotated', () =>
    DEMO_PODS.every((n) => w.pod(n)?.metadata?.annotations?.[Annotations.hibernate] === 'true'),
  );
  for (const n of DEMO_PODS) await w.vkHibernated(n, 2);
  await waitFor('Suspended', () => w.cs?.status?.phase === 'Suspended');
}

async function vmHistory(env: TestWorkflowEnvironment, runId?: string): Promise<History> {
  return env.client.workflow.getHandle(VM_ID, runId).fetchHistory();
}

export const scenarios: Scenario[] = [
  {
    name: 'vm-hibernate',
    covers:
      'a CocoonHibernation hibernates a running VM: finalizer, annotation, Hibernating, probe, Hibernated',
    record: (env) =>
      withWorld(env, async (world) => {
        await world.putPod(NS, POD, { annotations: podAnnotations(), containerRunning: true });
        await world.putCR({ namespace: NS, name: 'hib', podRef: POD, desire: 'Hibernate' });
        await waitFor('Hibernating', () => phase(world) === 'Hibernating');
        await vkHibernated(world);
        await waitFor('Hibernated', () => phase(world) === 'Hibernated');
        await world.settled(env, NS, POD);
        return { 'vm-hibernate': await vmHistory(env) };
      }),
  },
  {
    name: 'vm-wake',
    covers: 'a CocoonHibernation wakes a hibernated VM: annotation cleared, Waking, Active, tag deleted',
    record: (env) =>
      withWorld(env, async (world) => {
        world.tags.add(`${VM}:hibernate`);
        await hibernatedPod(world);
        await world.putCR({ namespace: NS, name: 'hib', podRef: POD, desire: 'Wake' });
        await waitFor('Waking', () => phase(world) === 'Waking');
        await vkRunning(world, 'vmid-new');
        await waitFor('Active', () => phase(world) === 'Active');
        await world.settled(env, NS, POD);
        return { 'vm-wake': await vmHistory(env) };
      }),
  },
  {
    name: 'vm-wake-delete-retries',
    covers:
      'a wake whose tag DELETE fails: Waking with SnapshotDeleteFailing, retried with backoff, then Active',
    record: (env) =>
      withWorld(env, async (world) => {
        const deletes = await wokenWithFailingDelete(world);
        await skipUntil(env, 'a retried DELETE', () => deletes() >= 2, 60_000, 2_000);
        world.deleteError = undefined;
        await skipUntil(env, 'Active', () => phase(world) === 'Active', 120_000);
        await world.settled(env, NS, POD);
        return { 'vm-wake-delete-retries': await vmHistory(env) };
      }),
  },
  {
    name: 'vm-spent-tag-pod-gone',
    covers:
      'a wake whose tag DELETE fails, its pod then deleted: the DELETE retried without the pod, then Active, then Pending',
    record: (env) =>
      withWorld(env, async (world) => {
        const deletes = await wokenWithFailingDelete(world);
        await waitFor('SnapshotDeleteFailing', () =>
          world.cr(NS, 'hib')?.status?.conditions?.some((c) => c.type === CONDITION_DELETE_FAILING),
        );
        await world.deletePod(NS, POD);
        const atDelete = deletes();
        await skipUntil(env, 'a DELETE with the pod gone', () => deletes() > atDelete, 120_000, 2_000);
        world.deleteError = undefined;
        await skipUntil(env, 'Pending', () => phase(world) === 'Pending', 180_000, 2_000);
        await world.settled(env, NS, POD);
        return { 'vm-spent-tag-pod-gone': await vmHistory(env) };
      }),
  },
  {
    name: 'vm-spent-tag-cr-deleted',
    covers:
      "a set's woken VM whose tag DELETE fails, its pod and then its CR deleted: the deletion retries the DELETE, then removes the finalizer",
    record: (env) =>
      withWorld(env, async (world) => {
        world.sets.set(`${NS}/demo`, 'live');
        const deletes = await wokenWithFailingDelete(world, SET_OWNED);
        await waitFor('SnapshotDeleteFailing', () =>
          world.cr(NS, 'hib')?.status?.conditions?.some((c) => c.type === CONDITION_DELETE_FAILING),
        );
        await world.deletePod(NS, POD);
        await world.deleteCR(NS, 'hib');
        const atDelete = deletes();
        await skipUntil(env, 'a DELETE of the deletion', () => deletes() > atDelete, 120_000, 2_000);
        world.deleteError = undefined;
        await skipUntil(env, 'CR gone', () => world.cr(NS, 'hib') === undefined, 120_000, 2_000);
        await world.settled(env, NS, POD);
        return { 'vm-spent-tag-cr-deleted': await vmHistory(env) };
      }),
  },
  {
    name: 'vm-reverse-desire',
    covers: 'a Wake edit while hibernating: the hibernate finishes first, then the wake starts',
    record: (env) =>
      withWorld(env, async (world) => {
        await world.putPod(NS, POD, {
          annotations: podAnnotations({ [Annotations.vmID]: 'vmid-old' }),
          containerRunning: true,
        });
        await world.putCR({ namespace: NS, name: 'hib', podRef: POD, desire: 'Hibernate' });
        await waitFor('Hibernating', () => phase(world) === 'Hibernating');
        await world.putCR({ ...world.cr(NS, 'hib')!, desire: 'Wake' });
        await world.settled(env, NS, POD);
        await vkHibernated(world);
        await waitFor('Waking', () => phase(world) === 'Waking');
        await world.settled(env, NS, POD);
        return { 'vm-reverse-desire': await vmHistory(env) };
      }),
  },
  {
    name: 'vm-deadline-retry',
    covers: 'a hibernate past its 3 min deadline turns Failed (timer), then retries 30 s later (timer)',
    record: (env) =>
      withWorld(env, async (world) => {
        await world.putPod(NS, POD, { annotations: podAnnotations(), containerRunning: true });
        await world.putCR({ namespace: NS, name: 'hib', podRef: POD, desire: 'Hibernate' });
        await waitFor('Hibernating', () => phase(world) === 'Hibernating');
        await env.sleep(3 * 60_000 + 2_000);
        await waitFor('Failed', () => phase(world) === 'Failed');
        await env.sleep(31_000);
        await waitFor('retried', () => world.events.some((e) => e.reason === EventReasons.retryRequested));
        await world.settled(env, NS, POD);
        return { 'vm-deadline-retry': await vmHistory(env) };
      }),
  },
  {
    name: 'vm-deletion-gc',
    covers: 'a Hibernated CR is deleted: the tag is dropped, the finalizer removed, the workflow completes',
    record: (env) =>
      withWorld(env, async (world) => {
        world.tags.add(`${VM}:hibernate`);
        await hibernatedPod(world);
        await world.putCR({ namespace: NS, name: 'hib', podRef: POD, desire: 'Hibernate' });
        await waitFor('Hibernated', () => phase(world) === 'Hibernated');
        await world.deleteCR(NS, 'hib');
        await waitFor('CR gone', () => world.cr(NS, 'hib') === undefined);
        await env.client.workflow.getHandle(VM_ID).result();
        return { 'vm-deletion-gc': await vmHistory(env) };
      }),
  },
  {
    name: 'vm-deletion-foreign-vm',
    covers: "a CR whose status.vmName was forged to another VM is deleted: that VM's tag is kept",
    record: (env) =>
      withWorld(env, async (world) => {
        world.tags.add('vk-other-victim:hibernate');
        await world.putCR({ namespace: NS, name: 'evil', podRef: POD, desire: 'Wake' });
        await waitFor('Pending', () => phase(world, 'evil') === 'Pending');
        const cur = world.cr(NS, 'evil')!;
        await world.putCR({ ...cur, status: { ...cur.status, vmName: 'vk-other-victim' } });
        await world.settled(env, NS, POD);
        await world.deleteCR(NS, 'evil');
        await waitFor('CR gone', () => world.cr(NS, 'evil') === undefined);
        await env.client.workflow.getHandle(VM_ID).result();
        return { 'vm-deletion-foreign-vm': await vmHistory(env) };
      }),
  },
  {
    name: 'vm-loser-outlives-holder',
    covers:
      'a CR that lost the VM to another outlives it while the pod is gone: its conflict goes, and its deletion drops the tag the holder kept for it',
    record: (env) =>
      withWorld(env, async (world) => {
        world.tags.add(`${VM}:hibernate`);
        await hibernatedPod(world);
        await world.putCR({ namespace: NS, name: 'hib', podRef: POD, desire: 'Hibernate' });
        await waitFor('Hibernated', () => phase(world) === 'Hibernated');
        await world.putCR({ namespace: NS, name: 'loser', podRef: POD, desire: 'Wake' });
        await waitFor('loser Pending', () => phase(world, 'loser') === 'Pending');
        await world.deletePod(NS, POD);
        await world.settled(env, NS, POD);
        await world.deleteCR(NS, 'hib');
        await waitFor('holder gone', () => world.cr(NS, 'hib') === undefined);
        await world.settled(env, NS, POD);
        await world.deleteCR(NS, 'loser');
        await waitFor('loser gone', () => world.cr(NS, 'loser') === undefined);
        await env.client.workflow.getHandle(VM_ID).result();
        if (world.tags.has(`${VM}:hibernate`)) throw new Error('the tag outlived both CRs');
        return { 'vm-loser-outlives-holder': await vmHistory(env) };
      }),
  },
  {
    name: 'vm-loser-phase-follows-holder',
    covers:
      'two CRs hibernated the VM and the holder is edited to Wake: the other goes Pending while the VM wakes, then hibernates it again once the holder is deleted',
    record: (env) =>
      withWorld(env, async (world) => {
        world.tags.add(`${VM}:hibernate`);
        await hibernatedPod(world);
        await world.putCR({ namespace: NS, name: 'hib', podRef: POD, desire: 'Hibernate' });
        await waitFor('Hibernated', () => phase(world) === 'Hibernated');
        await world.putCR({ namespace: NS, name: 'other', podRef: POD, desire: 'Hibernate' });
        await waitFor('other Hibernated', () => phase(world, 'other') === 'Hibernated');
        await world.putCR({ ...world.cr(NS, 'hib')!, desire: 'Wake' });
        await waitFor('other Pending', () => phase(world, 'other') === 'Pending');
        await vkRunning(world, 'vmid-new');
        await waitFor('Active', () => phase(world) === 'Active');
        await world.deleteCR(NS, 'hib');
        await waitFor('other Hibernating', () => phase(world, 'other') === 'Hibernating');
        await vkHibernated(world);
        await waitFor('other Hibernated again', () => phase(world, 'other') === 'Hibernated');
        return { 'vm-loser-phase-follows-holder': await vmHistory(env) };
      }),
  },
  {
    name: 'vm-takeover-mid-round',
    covers:
      'a Wake CR takes the VM over while vk hibernates it (the Hibernating holder deleted): Waking until the round ends and the VM runs again',
    record: (env) =>
      withWorld(env, async (world) => {
        await world.putPod(NS, POD, {
          annotations: podAnnotations({ [Annotations.vmID]: 'vmid-old' }),
          containerRunning: true,
        });
        await world.putCR({ namespace: NS, name: 'hib', podRef: POD, desire: 'Hibernate' });
        await waitFor('Hibernating', () => phase(world) === 'Hibernating');
        await world.annotatePod(NS, POD, { [Annotations.lifecycleState]: 'hibernating' });
        await world.putCR({ namespace: NS, name: 'waker', podRef: POD, desire: 'Wake' });
        await waitFor('waker Pending', () => phase(world, 'waker') === 'Pending');
        await world.deleteCR(NS, 'hib');
        await waitFor('waker Waking', () => phase(world, 'waker') === 'Waking');
        await vkHibernated(world);
        await waitFor('tag pushed', () => world.tags.has(`${VM}:hibernate`));
        await vkRunning(world, 'vmid-new');
        await waitFor('waker Active', () => phase(world, 'waker') === 'Active');
        await waitFor('hib gone', () => world.cr(NS, 'hib') === undefined);
        return { 'vm-takeover-mid-round': await vmHistory(env) };
      }),
  },
  {
    name: 'vm-wake-without-pod',
    covers: 'a Waking CR whose pod is deleted: Failed at the 5m0s deadline, then Pending',
    record: (env) =>
      withWorld(env, async (world) => {
        await world.putPod(NS, POD, {
          annotations: podAnnotations({ [Annotations.lifecycleState]: 'hibernated' }),
        });
        await world.putCR({ namespace: NS, name: 'hib', podRef: POD, desire: 'Wake' });
        await waitFor('Waking', () => phase(world) === 'Waking');
        await world.deletePod(NS, POD);
        await world.settled(env, NS, POD);
        await env.sleep(5 * 60_000 + 2_000);
        await waitFor('Failed', () => phase(world) === 'Failed');
        await env.sleep(31_000);
        await waitFor('Pending', () => phase(world) === 'Pending');
        await world.settled(env, NS, POD);
        return { 'vm-wake-without-pod': await vmHistory(env) };
      }),
  },
  {
    name: 'vm-wake-on-deleting-pod',
    covers: 'an Active CR whose pod starts deleting (VM id cleared): Pending, no wake; then the pod is gone',
    record: (env) =>
      withWorld(env, async (world) => {
        await world.putPod(NS, POD, {
          annotations: podAnnotations({ [Annotations.vmID]: 'vmid-1' }),
          containerRunning: true,
        });
        await world.putCR({ namespace: NS, name: 'hib', podRef: POD, desire: 'Wake' });
        await waitFor('Active', () => phase(world) === 'Active');
        await world.annotatePod(
          NS,
          POD,
          { [Annotations.vmID]: null },
          { containerRunning: false, deleting: true },
        );
        await waitFor('Pending', () => phase(world) === 'Pending');
        await world.deletePod(NS, POD);
        await world.settled(env, NS, POD);
        return { 'vm-wake-on-deleting-pod': await vmHistory(env) };
      }),
  },
  {
    name: 'vm-hibernate-on-deleting-pod',
    covers: 'a Hibernate CR on a pod held Terminating: Pending, no hibernate; the recreated pod hibernates',
    record: (env) =>
      withWorld(env, async (world) => {
        await world.putPod(NS, POD, { annotations: podAnnotations(), deleting: true });
        await world.putCR({ namespace: NS, name: 'hib', podRef: POD, desire: 'Hibernate' });
        await waitFor('Pending', () => phase(world) === 'Pending');
        await world.deletePod(NS, POD);
        await world.putPod(NS, POD, {
          uid: 'pod-uid-2',
          annotations: podAnnotations({ [Annotations.vmID]: 'vmid-2' }),
          containerRunning: true,
          deleting: false,
        });
        await waitFor('Hibernating', () => phase(world) === 'Hibernating');
        await world.settled(env, NS, POD);
        return { 'vm-hibernate-on-deleting-pod': await vmHistory(env) };
      }),
  },
  {
    name: 'vm-deletion-waits-for-set-restore',
    covers:
      "a CocoonSet's Hibernated pod and its CR deleted together: the tag waits until the set's new pod runs, then goes",
    record: (env) =>
      withWorld(env, async (world) => {
        world.sets.set(`${NS}/demo`, 'live');
        world.tags.add(`${VM}:hibernate`);
        const owned = SET_OWNED;
        await world.putPod(NS, POD, { annotations: hibernatedPodAnnotations(VM), ...owned });
        await world.putCR({ namespace: NS, name: 'hib', podRef: POD, desire: 'Hibernate' });
        await waitFor('Hibernated', () => phase(world) === 'Hibernated');
        await world.deletePod(NS, POD);
        await world.deleteCR(NS, 'hib');
        await world.settled(env, NS, POD);
        await world.putPod(NS, POD, {
          uid: 'pod-uid-2',
          annotations: podAnnotations({ [Annotations.restoreFromHibernate]: 'true' }),
          ...owned,
        });
        await world.settled(env, NS, POD);
        await vkRunning(world, 'vmid-2');
        await waitFor('CR gone', () => world.cr(NS, 'hib') === undefined);
        await env.client.workflow.getHandle(VM_ID).result();
        return { 'vm-deletion-waits-for-set-restore': await vmHistory(env) };
      }),
  },
  {
    name: 'vm-deletion-after-round-waits-for-set-restore',
    covers:
      "a CocoonSet's pod and its Hibernating CR deleted: the round's pushed tag waits until the set's new pod runs",
    record: (env) =>
      withWorld(env, async (world) => {
        world.sets.set(`${NS}/demo`, 'live');
        const owned = SET_OWNED;
        await world.putPod(NS, POD, {
          annotations: podAnnotations({ [Annotations.vmID]: 'vmid-1' }),
          containerRunning: true,
          ...owned,
        });
        await world.putCR({ namespace: NS, name: 'hib', podRef: POD, desire: 'Hibernate' });
        await waitFor('Hibernating', () => phase(world) === 'Hibernating');
        await world.annotatePod(NS, POD, { [Annotations.lifecycleState]: 'hibernating' }, { deleting: true });
        await world.deleteCR(NS, 'hib');
        await world.settled(env, NS, POD);
        await vkHibernated(world);
        await world.deletePod(NS, POD);
        await world.settled(env, NS, POD);
        await world.putPod(NS, POD, {
          uid: 'pod-uid-2',
          annotations: podAnnotations({ [Annotations.lifecycleState]: 'creating' }),
          containerRunning: false,
          deleting: false,
          ...owned,
        });
        await world.settled(env, NS, POD);
        await vkRunning(world, 'vmid-2');
        await waitFor('CR gone', () => world.cr(NS, 'hib') === undefined);
        await env.client.workflow.getHandle(VM_ID).result();
        return { 'vm-deletion-after-round-waits-for-set-restore': await vmHistory(env) };
      }),
  },
  {
    name: 'vm-deletion-news-in-answer',
    covers:
      "a CR deleted just before the workflow's status write: the write's answer says so, the deletion runs",
    record: (env) =>
      withWorld(env, async (world) => {
        await world.putPod(NS, POD, { annotations: {} });
        world.beforeStatusPatch = () => world.deleteCR(NS, 'hib', { watched: false });
        await world.putCR({ namespace: NS, name: 'hib', podRef: POD, desire: 'Hibernate' });
        await waitFor('CR gone', () => world.cr(NS, 'hib') === undefined);
        await env.client.workflow.getHandle(VM_ID).result();
        return { 'vm-deletion-news-in-answer': await vmHistory(env) };
      }),
  },
  {
    name: 'vm-deletion-during-wake',
    covers: 'a CR deleted while vk wakes its VM: the deletion waits until the VM runs, then drops the tag',
    record: (env) =>
      withWorld(env, async (world) => {
        world.tags.add(`${VM}:hibernate`);
        await hibernatedPod(world);
        await world.putCR({ namespace: NS, name: 'hib', podRef: POD, desire: 'Wake' });
        await waitFor('Waking', () => phase(world) === 'Waking');
        await world.annotatePod(NS, POD, { [Annotations.lifecycleState]: 'creating' });
        await world.deleteCR(NS, 'hib');
        await world.settled(env, NS, POD);
        await vkRunning(world, 'vmid-2');
        await waitFor('CR gone', () => world.cr(NS, 'hib') === undefined);
        await env.client.workflow.getHandle(VM_ID).result();
        return { 'vm-deletion-during-wake': await vmHistory(env) };
      }),
  },
  {
    name: 'vm-deletion-set-vm',
    covers:
      "a CR deleted mid-hibernate of a CocoonSet's VM: after the round the deletion wakes the VM, then drops the tag",
    record: (env) =>
      withWorld(env, async (world) => {
        await setPodRunning(world);
        await world.putCR({ namespace: NS, name: 'hib', podRef: POD, desire: 'Hibernate' });
        await waitFor('Hibernating', () => phase(world) === 'Hibernating');
        await world.annotatePod(NS, POD, { [Annotations.lifecycleState]: 'hibernating' });
        await world.deleteCR(NS, 'hib');
        await vkHibernated(world);
        await waitFor(
          'the deletion wakes the VM',
          () => world.pod(NS, POD)?.annotations?.[Annotations.hibernate] === undefined,
        );
        await world.annotatePod(NS, POD, { [Annotations.lifecycleState]: 'creating' });
        await vkRunning(world, 'vmid-2');
        await waitFor('CR gone', () => world.cr(NS, 'hib') === undefined);
        await env.client.workflow.getHandle(VM_ID).result();
        return { 'vm-deletion-set-vm': await vmHistory(env) };
      }),
  },
  {
    name: 'vm-set-desire',
    covers:
      "a CocoonSet's suspend on its VM: an older CR's Wake holds it (conflict told to the set), deleted; the set's Hibernate desire annotates, a later CR's Wake loses (DesireConflict), its deletion keeps the tag, the set's Wake clears the annotation, the workflow completes",
    record: (env) =>
      withWorld(env, async (world) => {
        await setPodRunning(world);
        await world.putCR({ namespace: NS, name: 'awake', podRef: POD, desire: 'Wake' });
        await waitFor('Active', () => phase(world, 'awake') === 'Active');
        await world.setDesire(NS, POD, 'Hibernate');
        await world.settled(env, NS, POD);
        await world.deleteCR(NS, 'awake');
        await waitFor('annotated', () => world.pod(NS, POD)?.annotations?.[Annotations.hibernate] === 'true');
        await vkHibernated(world);
        await world.putCR({
          namespace: NS,
          name: 'late',
          podRef: POD,
          desire: 'Wake',
          creationTimestamp: new Date(Date.now() + 3_600_000).toISOString(),
        });
        await waitFor('DesireConflict', () =>
          (world.cr(NS, 'late')?.status?.conditions ?? []).some((c) => c.type === 'DesireConflict'),
        );
        await world.deleteCR(NS, 'late');
        await waitFor('CR gone', () => world.cr(NS, 'late') === undefined);
        await world.setDesire(NS, POD, 'Wake');
        await waitFor('woken', () => world.pod(NS, POD)?.annotations?.[Annotations.hibernate] === undefined);
        await vkRunning(world, 'vmid-2');
        await world.resync(NS, POD);
        await env.client.workflow.getHandle(VM_ID).result();
        return { 'vm-set-desire': await vmHistory(env) };
      }),
  },
  {
    name: 'vm-set-wake-pod-gone',
    covers:
      "a set's un-suspend whose pod is deleted before its VM runs: the Wake waits for the next pod of the VM (5 s looks), passes to it, drops the tag once it runs, the workflow completes",
    record: (env) =>
      withWorld(env, async (world) => {
        await setHibernated(world);
        await world.setDesire(NS, POD, 'Wake');
        await waitFor('woken', () => world.pod(NS, POD)?.annotations?.[Annotations.hibernate] === undefined);
        await world.settled(env, NS, POD);
        await world.deletePod(NS, POD);
        await world.settled(env, NS, POD);
        await env.sleep(6_000);
        await world.putPod(NS, POD, {
          uid: 'pod-uid-next',
          annotations: podAnnotations({ [Annotations.vmID]: 'vmid-2' }),
          containerRunning: true,
          ownerKind: 'CocoonSet',
          ownerUID: 'set-uid',
        });
        await env.sleep(6_000);
        await env.client.workflow.getHandle(VM_ID).result();
        return { 'vm-set-wake-pod-gone': await vmHistory(env) };
      }),
  },
  {
    name: 'vm-set-wake-spent-tag',
    covers:
      "a set's un-suspend whose tag DELETE the registry refuses once the VM runs: the set is told the tag is spent (signal vmTagSpent; no set workflow here, so the signal fails and is logged), the DELETE is retried on the 5 s look, goes through, the set is told again, the workflow completes",
    record: (env) =>
      withWorld(env, async (world) => {
        await setHibernated(world);
        world.deleteError = new Error('registry answered 503');
        await world.setDesire(NS, POD, 'Wake');
        await waitFor('woken', () => world.pod(NS, POD)?.annotations?.[Annotations.hibernate] === undefined);
        await vkRunning(world, 'vmid-2');
        await world.resync(NS, POD);
        await waitFor('a refused DELETE', () => world.calls.some((c) => c.startsWith('DELETE')));
        await world.settled(env, NS, POD);
        world.deleteError = undefined;
        await env.sleep(6_000);
        await env.client.workflow.getHandle(VM_ID).result();
        return { 'vm-set-wake-spent-tag': await vmHistory(env) };
      }),
  },
  {
    name: 'vm-set-wake-held-by-cr',
    covers:
      "a set's un-suspend Wake while a CocoonHibernation holds the VM hibernated: it waits, the set is told which CR (signal vmDesireConflict; no set workflow here, so it fails and is logged), a repeated ask changes nothing; the CR set to Wake wakes the VM, the conflict is cleared, the Wake ends without a DELETE of its own",
    record: (env) =>
      withWorld(env, async (world) => {
        await setPodRunning(world);
        await world.putCR({ namespace: NS, name: 'hib', podRef: POD, desire: 'Hibernate' });
        await waitFor('annotated', () => world.pod(NS, POD)?.annotations?.[Annotations.hibernate] === 'true');
        await vkHibernated(world);
        await waitFor('Hibernated', () => phase(world) === 'Hibernated');
        await world.setDesire(NS, POD, 'Wake');
        await world.settled(env, NS, POD);
        await world.setDesire(NS, POD, 'Wake');
        await world.settled(env, NS, POD);
        await world.putCR({ ...world.cr(NS, 'hib')!, desire: 'Wake' });
        await waitFor('woken', () => world.pod(NS, POD)?.annotations?.[Annotations.hibernate] === undefined);
        await vkRunning(world, 'vmid-2');
        await waitFor('Active', () => phase(world) === 'Active');
        await world.settled(env, NS, POD);
        return { 'vm-set-wake-held-by-cr': await vmHistory(env) };
      }),
  },
  {
    name: 'vm-continue-as-new',
    covers:
      'hibernate/wake cycles past a low history limit: the first run continues as new, the next one re-reads',
    record: (env) =>
      withWorld(env, async (world) => {
        world.startExtra = { historyLimit: 60 };
        await world.putPod(NS, POD, {
          annotations: podAnnotations({ [Annotations.vmID]: 'vm-first' }),
          containerRunning: true,
        });
        await world.putCR({ namespace: NS, name: 'hib', podRef: POD, desire: 'Wake' });
        await waitFor('Active', () => phase(world) === 'Active');
        const firstRun = (await env.client.workflow.getHandle(VM_ID).describe()).runId;
        for (let i = 0; ; i++) {
          if ((await env.client.workflow.getHandle(VM_ID).describe()).runId !== firstRun) break;
          if (i >= 10) throw new Error('no continue-as-new after 10 cycles');
          await world.putCR({ ...world.cr(NS, 'hib')!, desire: 'Hibernate' });
          await waitFor(
            'annotated',
            () => world.pod(NS, POD)?.annotations?.[Annotations.hibernate] === 'true',
          );
          await vkHibernated(world);
          await waitFor('Hibernated', () => phase(world) === 'Hibernated');
          await world.putCR({ ...world.cr(NS, 'hib')!, desire: 'Wake' });
          await waitFor(
            'cleared',
            () => world.pod(NS, POD)?.annotations?.[Annotations.hibernate] === undefined,
          );
          await vkRunning(world, `vm-${i}`);
          await waitFor('Active', () => phase(world) === 'Active');
        }
        await world.settled(env, NS, POD);
        return {
          'vm-continue-as-new-run1': await vmHistory(env, firstRun),
          'vm-continue-as-new-run2': await vmHistory(env),
        };
      }),
  },
  {
    name: 'vm-continue-as-new-while-dirty',
    covers:
      'a signal arrives during the pass after which the run is past its history limit: it continues as new at once, carrying the re-read',
    record: (env) =>
      withWorld(env, async (world) => {
        world.startExtra = { historyLimit: 12 };
        await world.putPod(NS, POD, {
          annotations: podAnnotations({ [Annotations.vmID]: 'vm-first' }),
          containerRunning: true,
        });
        // vk starts the hibernate while the workflow's annotation patch is still answering: that pod update
        // is a signal the pass has not acted on when the run reaches its continue-as-new.
        world.duringPodPatch = async (patched) => {
          world.duringPodPatch = undefined;
          await world.putPod(NS, patched.name, {
            annotations: { ...patched.annotations, [Annotations.lifecycleState]: 'hibernating' },
            containerRunning: true,
          });
        };
        await world.putCR({ namespace: NS, name: 'hib', podRef: POD, desire: 'Hibernate' });
        const firstRun = (await env.client.workflow.getHandle(VM_ID).describe()).runId;
        await waitFor('annotated', () => world.pod(NS, POD)?.annotations?.[Annotations.hibernate] === 'true');
        await vkHibernated(world);
        await waitFor('Hibernated', () => phase(world) === 'Hibernated');
        await waitFor('the first run continued as new', async () =>
          (await env.client.workflow.getHandle(VM_ID, firstRun).describe()).status.name === 'CONTINUED_AS_NEW'
            ? true
            : undefined,
        );
        await world.settled(env, NS, POD);
        return { 'vm-continue-as-new-while-dirty': await vmHistory(env, firstRun) };
      }),
  },
  {
    name: 'cocoonset-creates',
    covers:
      'a new CocoonSet: finalizer, main created, 5 s waits for it, sub-agents and toolbox, status roll-up',
    record: async (env) =>
      withCocoonSetWorld(env, new CocoonSetWorld(demoSet()), async (w) => {
        await w.start();
        await waitFor('main created', () => w.pods.has('demo-0'));
        await env.sleep(6_000);
        await w.settled(env);
        await w.makeReady('demo-0');
        await waitFor('all pods created', () => w.pods.size === 4);
        for (const p of ['demo-1', 'demo-2', 'demo-tb']) await w.makeReady(p);
        await waitFor('Running', () => w.cs?.status?.phase === 'Running');
        await w.settled(env);
        return { 'cocoonset-creates': await env.client.workflow.getHandle(w.workflowId).fetchHistory() };
      }),
  },
  {
    name: 'cocoonset-suspend',
    covers:
      'a running set suspended (retain): VM workflows asked to hibernate, Suspending, vk reports, the gate probes, Suspended; un-suspended: asked to wake, Pending, Running',
    record: async (env) => {
      const cs = demoSet(withFinalizer);
      return withCocoonSetWorld(env, new CocoonSetWorld(cs, convergedPods(cs)), async (w) => {
        const names = DEMO_PODS;
        await setSuspended(w);
        await w.editSpec((c) => (c.spec.suspend = false));
        await waitFor('woken', () =>
          names.every((n) => w.pod(n)?.metadata?.annotations?.[Annotations.hibernate] === undefined),
        );
        for (const n of names) await w.makeReady(n);
        await waitFor('Running again', () => w.cs?.status?.phase === 'Running');
        await w.settled(env);
        return { 'cocoonset-suspend': await env.client.workflow.getHandle(w.workflowId).fetchHistory() };
      });
    },
  },
  {
    name: 'cocoonset-main-held-by-cr',
    covers:
      "a running set whose main a CocoonHibernation hibernates: Pending every 5 s until the main's VM workflow reports the hold, then Pending with DesireConflict and no timer; the hold over and the main running again, Running; then a sub-agent so held: Scaling, DesireConflict naming it",
    record: async (env) => {
      const cs = demoSet(withFinalizer);
      return withCocoonSetWorld(env, new CocoonSetWorld(cs, convergedPods(cs)), async (w) => {
        await w.start();
        await waitFor('Running', () => w.cs?.status?.phase === 'Running');
        await w.crHibernated('demo-0', 1);
        await waitFor('Pending', () => w.cs?.status?.phase === 'Pending');
        const handle = env.client.workflow.getHandle(w.workflowId);
        await handle.signal(vmDesireConflictSignal, { pod: 'demo-0', message: 'held by h-demo-0' });
        await waitFor('DesireConflict', () =>
          w.cs?.status?.conditions?.some((c) => c.reason === 'DesireConflict'),
        );
        await w.settled(env);
        await handle.signal(vmDesireConflictSignal, { pod: 'demo-0', message: null });
        w.crs = [];
        await w.vkRunning('demo-0', CONVERGED_NODE, 'id-0');
        await waitFor('Running again', () => w.cs?.status?.phase === 'Running');
        await w.crHibernated('demo-1', 1);
        await handle.signal(vmDesireConflictSignal, { pod: 'demo-1', message: 'held by h-demo-1' });
        await waitFor('pod demo-1 named', () =>
          w.cs?.status?.conditions?.some((c) => c.message?.startsWith('pod ns/demo-1: held')),
        );
        await w.settled(env);
        return { 'cocoonset-main-held-by-cr': await handle.fetchHistory() };
      });
    },
  },
  {
    name: 'cocoonset-suspend-sub-agent-gone',
    covers:
      'a sub-agent deleted while its set is suspended: nothing created while suspended; un-suspended, the others woken, then the sub-agent created restoring its own snapshot (a GET of its manifest) and asked to wake, Running',
    record: async (env) => {
      const cs = demoSet(withFinalizer);
      return withCocoonSetWorld(env, new CocoonSetWorld(cs, convergedPods(cs)), async (w) => {
        const names = DEMO_PODS;
        const kept = names.filter((n) => n !== 'demo-1');
        await setSuspended(w);
        await w.deletePodByHand('demo-1');
        await w.settled(env);
        await w.editSpec((c) => (c.spec.suspend = false));
        await waitFor('woken', () =>
          kept.every((n) => w.pod(n)?.metadata?.annotations?.[Annotations.hibernate] === undefined),
        );
        for (const n of kept) await w.makeReady(n);
        await waitFor(
          'demo-1 restored',
          () => w.pod('demo-1')?.metadata?.annotations?.[Annotations.restoreFromHibernate] === 'true',
        );
        await w.makeReady('demo-1');
        await waitFor('Running again', () => w.cs?.status?.phase === 'Running');
        await w.settled(env);
        return {
          'cocoonset-suspend-sub-agent-gone': await env.client.workflow
            .getHandle(w.workflowId)
            .fetchHistory(),
        };
      });
    },
  },
  {
    name: 'cocoonset-wake-open-sub-agent-gone',
    covers:
      "a sub-agent deleted during the un-suspend, after its wake was asked and before its VM workflow said the tag is gone: created restoring its own snapshot (a GET of its manifest), asked to wake again, Running; the wakes close on the VM workflows' word",
    record: async (env) => {
      const cs = demoSet(withFinalizer);
      return withCocoonSetWorld(env, new CocoonSetWorld(cs, convergedPods(cs)), async (w) => {
        const names = DEMO_PODS;
        await setSuspended(w);
        await w.editSpec((c) => (c.spec.suspend = false));
        await waitFor('woken', () => names.every((n) => w.calls.includes(`ask ${n} Wake`)));
        await w.settled(env);
        // The main runs again (sub-agents fork from it); demo-1's VM is still in its tag when its pod goes.
        await w.vkRunning('demo-0', CONVERGED_NODE, 'id-0');
        await w.settled(env);
        await w.deletePodByHand('demo-1');
        await waitFor(
          'demo-1 restored',
          () => w.pod('demo-1')?.metadata?.annotations?.[Annotations.restoreFromHibernate] === 'true',
        );
        await waitFor(
          'demo-1 asked to wake again',
          () => w.calls.filter((c) => c === 'ask demo-1 Wake').length === 2,
        );
        for (const [i, n] of names.entries()) if (i > 0) await w.vkRunning(n, CONVERGED_NODE, `id-${i}`);
        await waitFor('Running again', () => w.cs?.status?.phase === 'Running');
        // Each VM workflow drops its tag once the VM runs and tells the set: the wakes close.
        const handle = env.client.workflow.getHandle(w.workflowId);
        for (const n of names)
          await handle.signal(vmTagSpentSignal, { pod: n, vmName: `vk-ns-${n}`, spent: false });
        await w.settled(env);
        return {
          'cocoonset-wake-open-sub-agent-gone': await env.client.workflow
            .getHandle(w.workflowId)
            .fetchHistory(),
        };
      });
    },
  },
  {
    name: 'cocoonset-release',
    covers:
      'hibernatePolicy release: suspend hibernates, stashes names and hint, keep-snapshot, deletes the pod, Suspended; un-suspend: probe, Waking, restore pod with the hint, live, tag dropped, hint cleared, Running',
    record: async (env) => {
      const cs = newCocoonSet('demo', withFinalizer, (c) => {
        c.metadata.generation = 1;
        c.spec.hibernatePolicy = 'release';
      });
      const pods = convergedPods(cs);
      pods[0]!.spec!.nodeName = 'node-a';
      return withCocoonSetWorld(env, new CocoonSetWorld(cs, pods), async (w) => {
        await w.start();
        await waitFor('Running', () => w.cs?.status?.phase === 'Running');
        await w.editSpec((c) => (c.spec.suspend = true));
        await waitFor(
          'annotated',
          () => w.pod('demo-0')?.metadata?.annotations?.[Annotations.hibernate] === 'true',
        );
        await w.vkHibernated('demo-0', 2);
        await waitFor('Suspended', () => w.cs?.status?.phase === 'Suspended');
        await w.editSpec((c) => (c.spec.suspend = false));
        await waitFor('restore pod', () => w.pods.has('demo-0'));
        await waitFor('Waking', () => w.cs?.status?.phase === 'Waking');
        await w.vkRunning('demo-0', 'node-a', 'vm-restored');
        await waitFor('Running again', () => w.cs?.status?.phase === 'Running');
        await w.settled(env);
        return { 'cocoonset-release': await env.client.workflow.getHandle(w.workflowId).fetchHistory() };
      });
    },
  },
  {
    name: 'cocoonset-migration',
    covers:
      'spec.nodeName changed under a live main: Migrating, hibernate asked, old pod deleted after the tag, restore pod pinned, live, tag dropped, Running',
    record: async (env) => {
      const cs = newCocoonSet('demo', withFinalizer, (c) => {
        c.metadata.generation = 1;
      });
      const pods = convergedPods(cs);
      liveOn(pods[0]!, 'node-a', 'vm-a');
      return withCocoonSetWorld(env, new CocoonSetWorld(cs, pods), async (w) => {
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
        // vk-cocoon restores the VM on node-b.
        await w.vkRunning('demo-0', 'node-b', 'vm-b');
        await waitFor('Running on node-b', () => w.cs?.status?.phase === 'Running');
        await w.settled(env);
        return { 'cocoonset-migration': await env.client.workflow.getHandle(w.workflowId).fetchHistory() };
      });
    },
  },
  {
    name: 'cocoonset-rebuild-dead-letter',
    covers: 'a sub-agent that keeps failing is rebuilt with 0/1/5/30 s backoff (timers) and dead-lettered',
    record: async (env) => {
      const cs = demoSet(withFinalizer);
      const pods = convergedPods(cs);
      pods[1]!.status = { phase: 'Failed' };
      const world = new CocoonSetWorld(cs, pods);
      world.failOnCreate.add('demo-1');
      return withCocoonSetWorld(env, world, async (w) => {
        await w.start();
        const dead = () => w.pod('demo-1')?.metadata?.annotations?.[Annotations.deadLetter] === 'true';
        await skipUntil(env, 'dead letter', dead, 180_000, 1_000);
        await w.settled(env);
        return {
          'cocoonset-rebuild-dead-letter': await env.client.workflow.getHandle(w.workflowId).fetchHistory(),
        };
      });
    },
  },
  {
    name: 'cocoonset-failed-round',
    covers:
      'a sub-agent whose hibernate round vk reports failed, then called off (remembered in the set annotation), then ready again',
    record: async (env) => {
      const cs = demoSet(withFinalizer);
      return withCocoonSetWorld(env, new CocoonSetWorld(cs, convergedPods(cs)), async (w) => {
        await w.start();
        await waitFor('Running', () => w.cs?.status?.phase === 'Running');
        const set = (ann: Record<string, string | undefined>) => (p: V1Pod) => {
          const merged = { ...p.metadata!.annotations, ...ann };
          p.metadata!.annotations = Object.fromEntries(
            Object.entries(merged).filter((e): e is [string, string] => e[1] !== undefined),
          );
        };
        await w.updatePod(
          'demo-1',
          set({
            [Annotations.hibernate]: 'true',
            [Annotations.lifecycleState]: 'failed',
            [Annotations.lifecycleStateMessage]: 'push refused',
          }),
        );
        await waitFor('round remembered', () =>
          Boolean(w.cs?.metadata.annotations?.[Annotations.failedHibernateRounds]),
        );
        await w.updatePod('demo-1', set({ [Annotations.hibernate]: undefined }));
        await w.settled(env);
        await w.updatePod(
          'demo-1',
          set({ [Annotations.lifecycleState]: 'ready', [Annotations.lifecycleStateMessage]: undefined }),
        );
        await waitFor(
          'round forgotten',
          () => !w.cs?.metadata.annotations?.[Annotations.failedHibernateRounds],
        );
        await w.settled(env);
        return {
          'cocoonset-failed-round': await env.client.workflow.getHandle(w.workflowId).fetchHistory(),
        };
      });
    },
  },
  {
    name: 'cocoonset-replaced-main',
    covers:
      'a main whose wake vk reports failed (no VM, its :hibernate tag in): Failed with the reason; a resources edit replaces it keeping the tag, and the new pod is asked to wake',
    record: async (env) => {
      const cs = demoSet(withFinalizer);
      return withCocoonSetWorld(env, new CocoonSetWorld(cs, convergedPods(cs)), async (w) => {
        await w.start();
        await waitFor('Running', () => w.cs?.status?.phase === 'Running');
        w.tags.add('vk-ns-demo-0:hibernate');
        await w.updatePod('demo-0', (p) => {
          const { [Annotations.vmID]: _gone, ...rest } = p.metadata!.annotations ?? {};
          p.metadata!.annotations = {
            ...rest,
            [Annotations.lifecycleState]: 'failed',
            [Annotations.lifecycleStateMessage]: 'wake pull failed',
          };
        });
        await waitFor('Failed', () => w.cs?.status?.phase === 'Failed');
        const oldUID = w.pod('demo-0')?.metadata?.uid;
        await w.editSpec((c) => {
          c.spec.agent.resources = { requests: { cpu: '250m' } };
        });
        await waitFor(
          'main recreated',
          () => w.pods.has('demo-0') && w.pod('demo-0')?.metadata?.uid !== oldUID,
        );
        await waitFor('asked to wake', () => w.calls.includes('ask demo-0 Wake'));
        await w.settled(env);
        return {
          'cocoonset-replaced-main': await env.client.workflow.getHandle(w.workflowId).fetchHistory(),
        };
      });
    },
  },
  {
    name: 'cocoonset-large-rounds',
    covers:
      'rounds of more than 4 Kubernetes calls as regular activities beside the local ones: 5 more sub-agents created at once, then all 7 scaled away (their deletes)',
    record: async (env) => {
      const cs = demoSet(withFinalizer);
      return withCocoonSetWorld(env, new CocoonSetWorld(cs, convergedPods(cs)), async (w) => {
        await w.start();
        await waitFor('Running', () => w.cs?.status?.phase === 'Running');
        await w.editSpec((c) => (c.spec.agent.replicas = 7));
        await waitFor('all pods created', () => w.pods.size === 9);
        for (const p of [...w.pods.keys()]) await w.makeReady(p);
        await waitFor(
          'Running 8/8',
          () => w.cs?.status?.phase === 'Running' && w.cs.status.readyAgents === 8,
        );
        await w.editSpec((c) => (c.spec.agent.replicas = 0));
        await waitFor('the main and the toolbox alone', () => w.pods.size === 2);
        await waitFor(
          'Running 1/1',
          () => w.cs?.status?.desiredAgents === 1 && w.cs.status.readyAgents === 1,
        );
        await w.settled(env);
        return {
          'cocoonset-large-rounds': await env.client.workflow.getHandle(w.workflowId).fetchHistory(),
        };
      });
    },
  },
  {
    name: 'cocoonset-deletion',
    covers:
      'a CocoonSet deleted: VM names stashed, pods deleted, tags dropped per policy, finalizer removed, done',
    record: async (env) => {
      const cs = demoSet(withFinalizer, (c) => {
        c.spec.snapshotPolicy = 'main-only';
      });
      const world = new CocoonSetWorld(cs, convergedPods(cs));
      for (const vm of [MAIN_VM, 'vk-ns-demo-1', 'vk-ns-demo-2']) world.tags.add(`${vm}:hibernate`);
      return withCocoonSetWorld(env, world, async (w) => {
        await w.start();
        await waitFor('Running', () => w.cs?.status?.phase === 'Running');
        await w.markDeleted();
        await waitFor('gone', () => w.cs === null);
        const handle = env.client.workflow.getHandle(w.workflowId);
        await handle.result();
        return { 'cocoonset-deletion': await handle.fetchHistory() };
      });
    },
  },
];
