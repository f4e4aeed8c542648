/**
 * The VM workflow's Event writer (`emitEvent` of src/activities/kube.ts, the operator's one folding Event
 * writer, which the CocoonSet activities share) against the local stack's real kube-apiserver: Events on a
 * CocoonHibernation fold as client-go's recorder folds them, each occurrence key counts once however often
 * the activity is retried, and the phase-duration histogram is observed once per counted key. Needs
 * `npm run stack -- up` (npm test brings it up).
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { createKubeActivities, type EventInput, hibernationRef } from '../../src/activities/kube.js';
import { EVENT_SOURCE, EventReasons } from '../../src/api/keys.js';
import type { KubeClients } from '../../src/kube/client.js';
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

    // Another CR's Event is its own.
    await acts.emitEvent({ ...woken('other-1'), involved: hibernationRef('other', 'uid-other') });
    expect((await ours()).map((e) => e.count)).toEqual([4]);
  });
});
