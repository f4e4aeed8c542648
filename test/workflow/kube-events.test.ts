/**
 * The VM workflow's Event writer (`emitEvent` of src/activities/kube.ts, the operator's one folding Event
 * writer, which the CocoonSet activities share) against the local stack's real kube-apiserver: Events on a
 * CocoonHibernation fold as client-go's recorder folds them, each occurrence key counts once however often
 * the activity is retried, and the phase-duration histogram is observed once per counted key. Needs
 * `npm run stack -- up` (npm test brings it up).
 */

import type { CoreV1Api } from '@kubernetes/client-node';
import { beforeAll, describe, expect, it } from 'vitest';
import {
  createKubeActivities,
  EVENT_FOLD_WINDOW_MS,
  EventCache,
  type EventInput,
  hibernationRef,
  recordEvent,
} from '../../src/activities/kube.js';
import { vmWorkflowId } from '../../src/api/ids.js';
import {
  API_VERSION,
  EVENT_SOURCE,
  EventReasons,
  Finalizers,
  GROUP,
  PLURAL_COCOONHIBERNATIONS,
  VERSION,
  WorkflowAnnotations,
} from '../../src/api/keys.js';
import type { CocoonHibernation } from '../../src/api/types.js';
import { type KubeClients, mergePatch } from '../../src/kube/client.js';
import { kubeClients, stackEnv } from '../e2e/stack-harness.js';

const NS = `vm-events-${process.pid}-${Date.now() % 100000}`;
let kube: KubeClients;
const observed: Array<{ kind: string; result: string }> = [];
let acts: ReturnType<typeof createKubeActivities>;

beforeAll(async () => {
  await stackEnv();
  kube = kubeClients();
  acts = createKubeActivities({
    kube,
    metrics: { observePhaseDuration: (kind, result) => observed.push({ kind, result }) },
  });
  await kube.core.createNamespace({ body: { metadata: { name: NS } } });
}, 60_000);

describe('CocoonHibernation Events on a real apiserver', () => {
  it('fold: the same CR, type, reason and message is one Event whose count grows, once per key', async () => {
    const woken = (key: string): EventInput => ({
      namespace: NS,
      involved: hibernationRef('hib', 'uid-hib-1'),
      type: 'Normal',
      reason: EventReasons.wokenActive,
      message: `pod ${NS}/demo-0 is running`,
      key,
      phaseDuration: { kind: 'wake', result: 'ok', seconds: 3 },
    });
    const ours = async () =>
      (
        await kube.core.listNamespacedEvent({
          namespace: NS,
          fieldSelector: `involvedObject.name=hib,reason=${EventReasons.wokenActive}`,
        })
      ).items;

    // Three wake transitions of one CR (one key each): one Event, count 3, three observations.
    await acts.emitEvent(woken('attempt-1'));
    await acts.emitEvent(woken('attempt-2'));
    await acts.emitEvent(woken('attempt-3'));
    // A retried activity of the last transition: not counted, not observed again.
    await acts.emitEvent(woken('attempt-3'));
    const events = await ours();
    expect(events).toHaveLength(1);
    expect(events[0]).toMatchObject({
      type: 'Normal',
      count: 3,
      source: { component: EVENT_SOURCE },
      involvedObject: { kind: 'CocoonHibernation', name: 'hib', uid: 'uid-hib-1', namespace: NS },
    });
    expect(observed).toEqual([
      { kind: 'wake', result: 'ok' },
      { kind: 'wake', result: 'ok' },
      { kind: 'wake', result: 'ok' },
    ]);

    // Two attempts of one occurrence racing (a heartbeat-timed-out attempt still running while its retry
    // runs): one count between them.
    await Promise.all([acts.emitEvent(woken('attempt-4')), acts.emitEvent(woken('attempt-4'))]);
    expect((await ours()).map((e) => e.count)).toEqual([4]);

    // A new process (nothing remembered) retrying an occurrence an earlier one folded: still counted once.
    const restarted = createKubeActivities({
      kube,
      metrics: { observePhaseDuration: (kind, result) => observed.push({ kind, result }) },
    });
    await restarted.emitEvent(woken('attempt-4'));
    expect((await ours()).map((e) => e.count)).toEqual([4]);
    await restarted.emitEvent(woken('attempt-5'));
    expect((await ours()).map((e) => e.count)).toEqual([5]);
    expect(observed).toHaveLength(5);

    // Another CR's Event is its own.
    await acts.emitEvent({ ...woken('other-1'), involved: hibernationRef('other', 'uid-other') });
    expect((await ours()).map((e) => e.count)).toEqual([5]);
  });
});

/** `core` with every Event request it sends counted by method name. */
function countingCore(core: CoreV1Api): { core: CoreV1Api; calls: string[] } {
  const calls: string[] = [];
  const proxy = new Proxy(core, {
    get(target, prop, receiver) {
      const v = Reflect.get(target, prop, receiver);
      if (typeof prop !== 'string' || typeof v !== 'function' || !prop.includes('Event')) return v;
      return (...args: unknown[]) => {
        calls.push(prop);
        return v.apply(target, args);
      };
    },
  });
  return { core: proxy, calls };
}

describe('Event requests do not grow with the namespace', () => {
  const input = (involved: string, key: string, message = 'pod is running'): EventInput => ({
    namespace: NS,
    involved: hibernationRef(involved, `uid-${involved}`),
    type: 'Normal',
    reason: EventReasons.wokenActive,
    message,
    key,
  });

  it('a first occurrence is one create, a repeat one patch, and a new process finds the Event by name (no listing)', async () => {
    // A namespace full of this operator's Events on other objects with the same reason.
    await Promise.all(
      Array.from({ length: 60 }, (_, i) => recordEvent(kube.core, input(`crowd-${i}`, 'k'), Date.now())),
    );

    const { core, calls } = countingCore(kube.core);
    const cache = new EventCache();
    const t0 = Date.now();
    expect(await recordEvent(core, input('lone', 'attempt-1'), t0, cache)).toBe(true);
    expect(calls).toEqual(['createNamespacedEvent']);
    calls.length = 0;
    expect(await recordEvent(core, input('lone', 'attempt-2'), t0 + 1000, cache)).toBe(true);
    expect(calls).toEqual(['patchNamespacedEvent']);
    calls.length = 0;
    // A restarted process (empty cache): the create finds the Event by its name, then folds or skips.
    expect(await recordEvent(core, input('lone', 'attempt-2'), t0 + 2000, new EventCache())).toBe(false);
    expect(calls).toEqual(['createNamespacedEvent', 'readNamespacedEvent']);
    calls.length = 0;
    expect(await recordEvent(core, input('lone', 'attempt-3'), t0 + 3000, new EventCache())).toBe(true);
    expect(calls).toEqual(['createNamespacedEvent', 'readNamespacedEvent', 'patchNamespacedEvent']);
    const lone = (
      await kube.core.listNamespacedEvent({ namespace: NS, fieldSelector: 'involvedObject.name=lone' })
    ).items;
    expect(lone.map((e) => e.count)).toEqual([3]);
  });

  it('an occurrence after the fold window starts a new series on the same Event (count 1); another message is another Event', async () => {
    const t0 = Date.now();
    expect(await recordEvent(kube.core, input('late', 'a-1'), t0)).toBe(true);
    expect(await recordEvent(kube.core, input('late', 'a-2'), t0 + 1000)).toBe(true);
    expect(await recordEvent(kube.core, input('late', 'a-3'), t0 + 1000 + EVENT_FOLD_WINDOW_MS + 1000)).toBe(
      true,
    );
    // The old series' keys are still known: a very late retry of one of them is not counted again.
    expect(await recordEvent(kube.core, input('late', 'a-2'), t0 + 2000 + EVENT_FOLD_WINDOW_MS)).toBe(false);
    expect(await recordEvent(kube.core, input('late', 'b-1', 'another message'), t0)).toBe(true);
    const late = (
      await kube.core.listNamespacedEvent({ namespace: NS, fieldSelector: 'involvedObject.name=late' })
    ).items;
    expect(late.map((e) => [e.message, e.count]).sort()).toEqual([
      ['another message', 1],
      ['pod is running', 1],
    ]);
  });
});

describe('the CocoonHibernation finalizer on a real apiserver', () => {
  const crs = () => ({ group: GROUP, version: VERSION, namespace: NS, plural: PLURAL_COCOONHIBERNATIONS });
  const create = async (name: string) =>
    (await kube.custom.createNamespacedCustomObject({
      ...crs(),
      body: {
        apiVersion: API_VERSION,
        kind: 'CocoonHibernation',
        metadata: { name },
        spec: { podRef: { name: 'demo-0' }, desire: 'Hibernate' },
      },
    })) as CocoonHibernation;
  const read = async (name: string) =>
    (await kube.custom.getNamespacedCustomObject({ ...crs(), name })) as CocoonHibernation;

  it('adds it in one patch from what the workflow saw, and when that is stale, re-reads: no other finalizer is lost', async () => {
    const fresh = await create('fin-fresh');
    const added = await acts.setHibernationFinalizer({
      namespace: NS,
      name: 'fin-fresh',
      present: true,
      seen: { resourceVersion: fresh.metadata.resourceVersion, finalizers: [], podRef: 'demo-0' },
    });
    expect(added.finalizers).toEqual([Finalizers.cocoonHibernation]);
    expect((await read('fin-fresh')).metadata.annotations?.[WorkflowAnnotations.id]).toBe(
      vmWorkflowId(NS, 'demo-0'),
    );

    // Someone else adds a finalizer after the workflow's view: the patch's resourceVersion conflicts, and
    // the update after a re-read keeps theirs.
    const stale = await create('fin-stale');
    await kube.custom.patchNamespacedCustomObject(
      { ...crs(), name: 'fin-stale', body: { metadata: { finalizers: ['example.com/other'] } } },
      mergePatch,
    );
    const merged = await acts.setHibernationFinalizer({
      namespace: NS,
      name: 'fin-stale',
      present: true,
      seen: { resourceVersion: stale.metadata.resourceVersion, finalizers: [], podRef: 'demo-0' },
    });
    expect(merged.finalizers).toEqual(['example.com/other', Finalizers.cocoonHibernation]);
    const removed = await acts.setHibernationFinalizer({
      namespace: NS,
      name: 'fin-stale',
      present: false,
      seen: { resourceVersion: merged.resourceVersion, finalizers: merged.finalizers, podRef: 'demo-0' },
    });
    expect(removed.finalizers).toEqual(['example.com/other']);
    expect((await read('fin-stale')).metadata.finalizers).toEqual(['example.com/other']);
    await kube.custom.patchNamespacedCustomObject(
      { ...crs(), name: 'fin-stale', body: { metadata: { finalizers: null } } },
      mergePatch,
    );
  });
  it('a status write carrying it (a CR never written before) adds it first, then writes the Event and the status; a CR being deleted gets none of them', async () => {
    const fresh = await create('fin-ride');
    const seen = { resourceVersion: fresh.metadata.resourceVersion, finalizers: [], podRef: 'demo-0' };
    const written = await acts.patchHibernationStatus({
      namespace: NS,
      name: 'fin-ride',
      patch: { status: { phase: 'Pending' } },
      event: {
        ...hibernationRefOf('fin-ride', fresh),
        type: 'Normal',
        reason: 'Test',
        message: 'm',
        key: 'k1',
      },
      finalizer: seen,
    });
    expect(written.finalizers).toEqual([Finalizers.cocoonHibernation]);
    expect(written.status?.phase).toBe('Pending');
    const now = await read('fin-ride');
    expect(now.metadata.finalizers).toEqual([Finalizers.cocoonHibernation]);
    expect(now.metadata.annotations?.[WorkflowAnnotations.id]).toBe(vmWorkflowId(NS, 'demo-0'));
    expect(now.status?.phase).toBe('Pending');
    const events = await kube.core.listNamespacedEvent({
      namespace: NS,
      fieldSelector: 'involvedObject.name=fin-ride',
    });
    expect(events.items.map((e) => e.reason)).toEqual(['Test']);

    // Held by someone else's finalizer and deleted before the first write: no finalizer can be added, so
    // no status either; the call fails NotFound (the workflow re-reads and sees the deletion).
    const held = await create('fin-held');
    await kube.custom.patchNamespacedCustomObject(
      { ...crs(), name: 'fin-held', body: { metadata: { finalizers: ['example.com/other'] } } },
      mergePatch,
    );
    await kube.custom.deleteNamespacedCustomObject({ ...crs(), name: 'fin-held' });
    await expect(
      acts.patchHibernationStatus({
        namespace: NS,
        name: 'fin-held',
        patch: { status: { phase: 'Pending' } },
        event: {
          ...hibernationRefOf('fin-held', held),
          type: 'Normal',
          reason: 'Test',
          message: 'm',
          key: 'k2',
        },
        finalizer: { resourceVersion: held.metadata.resourceVersion, finalizers: [], podRef: 'demo-0' },
      }),
    ).rejects.toMatchObject({ type: 'NotFound' });
    const heldEvents = await kube.core.listNamespacedEvent({
      namespace: NS,
      fieldSelector: 'involvedObject.name=fin-held',
    });
    expect(heldEvents.items).toEqual([]);
    // The same when the workflow's view already is the deleting version (the patch then answers 422, not 409).
    const deleting = await read('fin-held');
    await expect(
      acts.patchHibernationStatus({
        namespace: NS,
        name: 'fin-held',
        patch: { status: { phase: 'Pending' } },
        finalizer: { resourceVersion: deleting.metadata.resourceVersion, finalizers: ['example.com/other'] },
      }),
    ).rejects.toMatchObject({ type: 'NotFound' });
    const after = await read('fin-held');
    expect(after.metadata.finalizers).toEqual(['example.com/other']);
    expect(after.status).toBeUndefined();
    await kube.custom.patchNamespacedCustomObject(
      { ...crs(), name: 'fin-held', body: { metadata: { finalizers: null } } },
      mergePatch,
    );
  });
});

/** The involved-object part of an Event on CocoonHibernation `name`. */
function hibernationRefOf(name: string, cr: CocoonHibernation): Pick<EventInput, 'namespace' | 'involved'> {
  return { namespace: NS, involved: hibernationRef(name, cr.metadata.uid) };
}
