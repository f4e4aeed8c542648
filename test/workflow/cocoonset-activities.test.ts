/**
 * The CocoonSet activities (src/activities/cocoonset.ts) against the local stack's real kube-apiserver:
 * the expected answers each planner action relies on (create → alreadyExists, delete → notFound, merge
 * patches with null deleting a key, the finalizer update, the /status subresource, the label-selected read,
 * Events folded like client-go's recorder, once per key). Needs `npm run stack -- up` (npm test brings it up).
 */
import { ApplicationFailure } from '@temporalio/common';
import { beforeAll, describe, expect, it } from 'vitest';
import { createCocoonSetActivities } from '../../src/activities/cocoonset.js';
import { EVENT_FOLD_WINDOW_MS } from '../../src/activities/kube.js';
import {
  Annotations,
  EVENT_SOURCE,
  EventReasons,
  Finalizers,
  GROUP,
  Labels,
  PLURAL_COCOONSETS,
  VERSION,
  WorkflowAnnotations,
} from '../../src/api/keys.js';
import type { CocoonSet } from '../../src/api/types.js';
import { buildAgentPod } from '../../src/cocoonset/pods.js';
import { summarizePod } from '../../src/cocoonset/summary.js';
import { formatFieldError, validatePod } from '../../src/cocoonset/validate.js';
import { type KubeClients, mergePatch } from '../../src/kube/client.js';
import { kubeClients, stackEnv } from '../e2e/stack-harness.js';
import { IMAGE } from '../support/builders.js';

const NS = `cs-act-${process.pid}-${Date.now() % 100000}`;
let kube: KubeClients;
let acts: ReturnType<typeof createCocoonSetActivities>;
let cs: CocoonSet;

beforeAll(async () => {
  await stackEnv();
  kube = kubeClients();
  acts = createCocoonSetActivities({
    kube,
    temporalUi: { url: 'http://127.0.0.1:8233', namespace: 'default' },
  });
  await kube.core.createNamespace({ body: { metadata: { name: NS } } });
  cs = (await kube.custom.createNamespacedCustomObject({
    group: GROUP,
    version: VERSION,
    namespace: NS,
    plural: PLURAL_COCOONSETS,
    body: {
      apiVersion: `${GROUP}/${VERSION}`,
      kind: 'CocoonSet',
      metadata: { name: 'demo', namespace: NS },
      spec: { agent: { image: IMAGE, replicas: 1 } },
    },
  })) as CocoonSet;
}, 60_000);

describe('CocoonSet activities on a real apiserver', () => {
  it('creates, reads by label, patches and deletes pods with the outcomes the planner expects', async () => {
    const pod = buildAgentPod(cs, 0, '', '');
    expect(await acts.cocoonSetCreatePod({ namespace: NS, pod })).toBe('ok');
    expect(await acts.cocoonSetCreatePod({ namespace: NS, pod })).toBe('alreadyExists');
    // A pod without the set's label is not part of the world.
    await kube.core.createNamespacedPod({
      namespace: NS,
      body: { metadata: { name: 'stranger' }, spec: { containers: [{ name: 'c', image: IMAGE }] } },
    });
    const world = await acts.cocoonSetReadWorld({ namespace: NS, name: 'demo' });
    expect(world.cs?.metadata.uid).toBe(cs.metadata.uid);
    expect(world.pods.map((p) => p.metadata?.name)).toEqual(['demo-0']);
    expect(world.pods[0]!.metadata?.managedFields).toBeUndefined();

    await acts.cocoonSetPatchPodAnnotations({
      namespace: NS,
      pod: 'demo-0',
      annotations: { [Annotations.cocoonSetGeneration]: '7' },
    });
    let got = await acts.cocoonSetGetPod({ namespace: NS, pod: 'demo-0' });
    expect(got.metadata?.annotations?.[Annotations.cocoonSetGeneration]).toBe('7');
    await acts.cocoonSetPatchPodAnnotations({
      namespace: NS,
      pod: 'demo-0',
      annotations: { [Annotations.cocoonSetGeneration]: null },
    });
    got = await acts.cocoonSetGetPod({ namespace: NS, pod: 'demo-0' });
    expect(got.metadata?.annotations?.[Annotations.cocoonSetGeneration]).toBeUndefined();
    expect(got.metadata?.annotations?.[Annotations.vmName]).toBe(`vk-${NS}-demo-0`);

    expect(await acts.cocoonSetDeletePod({ namespace: NS, pod: 'demo-0' })).toBe('ok');
    // The pod may linger terminating (the stack's vk-cocoon simulator may have bound it): finish it.
    await kube.core
      .deleteNamespacedPod({ name: 'demo-0', namespace: NS, gracePeriodSeconds: 0 })
      .catch(() => undefined);
    expect(await acts.cocoonSetDeletePod({ namespace: NS, pod: 'demo-0' })).toBe('notFound');
    const missing = await acts.cocoonSetGetPod({ namespace: NS, pod: 'demo-0' }).catch((e) => e);
    expect(missing).toBeInstanceOf(ApplicationFailure);
    expect((missing as ApplicationFailure).type).toBe('NotFound');
    const patchMissing = await acts
      .cocoonSetPatchPodAnnotations({ namespace: NS, pod: 'demo-0', annotations: { a: 'b' } })
      .catch((e) => e);
    expect((patchMissing as ApplicationFailure).type).toBe('NotFound');
  });

  it('reads the pods as compact summaries page by page, and reports a rejected create as one short non-retryable line (no HTTP dump)', async () => {
    const paged = createCocoonSetActivities({ kube, podPageSize: 2 });
    const slots = [1, 2, 3, 4, 5];
    for (const slot of slots) {
      const pod = buildAgentPod(cs, slot, `vk-${NS}-demo-0`, '');
      // Something large that no pass reads (kubectl apply leaves such annotations).
      pod.metadata!.annotations!['kubectl.kubernetes.io/last-applied-configuration'] = 'x'.repeat(2000);
      // A pool no simulated node serves: the pods stay unbound and unwritten, so the page read below and
      // the GET after it see the same pod.
      pod.spec!.nodeSelector = { ...pod.spec!.nodeSelector, [Labels.nodePool]: 'unserved' };
      await kube.core.createNamespacedPod({ namespace: NS, body: pod });
    }
    const first = await paged.cocoonSetReadWorld({ namespace: NS, name: 'demo' });
    const pages = [first.pods.length];
    const read = [...first.pods];
    for (let token = first.continue; token; ) {
      const page = await paged.cocoonSetListPods({ namespace: NS, name: 'demo', continue: token });
      pages.push(page.pods.length);
      read.push(...page.pods);
      token = page.continue;
    }
    expect(pages).toEqual([2, 2, 1]);
    expect(read.map((p) => p.metadata?.name).sort()).toEqual(slots.map((s) => `demo-${s}`));
    const full = await kube.core.readNamespacedPod({ namespace: NS, name: 'demo-5' });
    const summary = read.find((p) => p.metadata?.name === 'demo-5')!;
    expect(summary).toEqual(summarizePod(full));
    const fullBytes = Buffer.byteLength(JSON.stringify(full));
    const summaryBytes = Buffer.byteLength(JSON.stringify(summary));
    console.log(`[payload] pod as read ${fullBytes} B, as the pass reads it ${summaryBytes} B`);
    expect(summaryBytes).toBeLessThan(1200);

    const bad = buildAgentPod(
      { ...cs, spec: { ...cs.spec, agent: { ...cs.spec.agent, storage: '-5Gi' } } },
      9,
      '',
      '',
    );
    const errs: ApplicationFailure[] = [];
    for (let i = 0; i < 2; i++) {
      errs.push(await paged.cocoonSetCreatePod({ namespace: NS, pod: bad }).catch((e) => e));
    }
    for (const e of errs) {
      expect(e).toBeInstanceOf(ApplicationFailure);
      expect(e.nonRetryable).toBe(true);
      expect(e.type).toBe('KubeApiInvalid');
      expect(e.message).toMatch(
        /^Pod "demo-9" is invalid: .*must be greater than or equal to 0\] \(Invalid, HTTP 422\)$/,
      );
      // The operator's own validation words each rejection as the apiserver does.
      for (const fe of validatePod(bad, 'spec.agent')) {
        expect(e.message).toContain(formatFieldError({ ...fe, source: undefined }));
      }
      expect(e.message).not.toMatch(/audit-id|HTTP-Code|Headers/i);
    }
    // The same rejection gives the same text (so its Event folds).
    expect(errs[0]!.message).toBe(errs[1]!.message);
    for (const slot of slots) {
      await kube.core
        .deleteNamespacedPod({ name: `demo-${slot}`, namespace: NS, gracePeriodSeconds: 0 })
        .catch(() => undefined);
    }
  });

  it('writes CocoonSet annotations, the finalizer (with the workflow-link annotations in the same update) and /status', async () => {
    await acts.cocoonSetPatchAnnotations({
      namespace: NS,
      name: 'demo',
      annotations: { [Annotations.rebuildHistory]: 'x' },
    });
    expect(
      await acts.cocoonSetSetFinalizer({
        namespace: NS,
        name: 'demo',
        finalizer: Finalizers.cocoonSet,
        present: true,
      }),
    ).toBe(true);
    // Idempotent: a second add is a no-op.
    expect(
      await acts.cocoonSetSetFinalizer({
        namespace: NS,
        name: 'demo',
        finalizer: Finalizers.cocoonSet,
        present: true,
      }),
    ).toBe(true);
    await acts.cocoonSetPatchStatus({
      namespace: NS,
      name: 'demo',
      body: {
        status: {
          phase: 'Pending',
          desiredAgents: 2,
          readyAgents: 0,
          readyToolboxes: 0,
          desiredToolboxes: 0,
        },
      },
    });
    let world = await acts.cocoonSetReadWorld({ namespace: NS, name: 'demo' });
    expect(world.cs?.metadata.annotations?.[Annotations.rebuildHistory]).toBe('x');
    expect(world.cs?.metadata.finalizers).toEqual([Finalizers.cocoonSet]);
    expect(world.cs?.metadata.annotations).toMatchObject({
      [WorkflowAnnotations.id]: `cocoonset/${NS}/demo`,
      [WorkflowAnnotations.url]: `http://127.0.0.1:8233/namespaces/default/workflows/cocoonset%2F${NS}%2Fdemo`,
    });
    expect(world.cs?.status?.phase).toBe('Pending');
    expect(world.cs?.status?.desiredAgents).toBe(2);

    expect(
      await acts.cocoonSetSetFinalizer({
        namespace: NS,
        name: 'demo',
        finalizer: Finalizers.cocoonSet,
        present: false,
      }),
    ).toBe(true);
    world = await acts.cocoonSetReadWorld({ namespace: NS, name: 'demo' });
    expect(world.cs?.metadata.finalizers ?? []).toEqual([]);
    expect(await acts.cocoonSetListHibernations({ namespace: NS })).toEqual([]);
  });

  it('folds a repeated Event like the event recorder: one Event whose count grows, once per key', async () => {
    const lifecycleFailed = (key: string, message = 'main pod ns/demo-0: push failed') =>
      acts.cocoonSetEmitEvent({
        namespace: NS,
        name: 'demo',
        uid: cs.metadata.uid,
        type: 'Warning',
        reason: EventReasons.podLifecycleFailed,
        message,
        key,
      });
    const ours = async () =>
      (
        await kube.core.listNamespacedEvent({
          namespace: NS,
          fieldSelector: `reason=${EventReasons.podLifecycleFailed}`,
        })
      ).items;

    // Three passes observing the same failed main: one Event, count 3 (was: three Events of count 1).
    await lifecycleFailed('pass-1');
    const [first] = await ours();
    await lifecycleFailed('pass-2');
    await lifecycleFailed('pass-3');
    let events = await ours();
    expect(events).toHaveLength(1);
    expect(events[0]).toMatchObject({
      type: 'Warning',
      message: 'main pod ns/demo-0: push failed',
      count: 3,
      source: { component: EVENT_SOURCE },
      involvedObject: { kind: 'CocoonSet', name: 'demo', uid: cs.metadata.uid },
    });
    expect(events[0]!.metadata?.name).toBe(first!.metadata?.name);
    expect(events[0]!.firstTimestamp).toEqual(first!.firstTimestamp);
    expect(events[0]!.lastTimestamp!.getTime()).toBeGreaterThanOrEqual(first!.lastTimestamp!.getTime());

    // A retried activity (same key) does not count again.
    await lifecycleFailed('pass-3');
    expect((await ours())[0]!.count).toBe(3);

    // Another message is another Event.
    await lifecycleFailed('pass-4', 'main pod ns/demo-0: Failed');
    events = await ours();
    expect(events.map((e) => [e.message, e.count]).sort()).toEqual([
      ['main pod ns/demo-0: Failed', 1],
      ['main pod ns/demo-0: push failed', 3],
    ]);

    // Outside the aggregation window a repeat starts a new series: the same Event (it is found by name),
    // count 1 again, first seen now (client-go would create an Event of another name).
    const stale = new Date(Date.now() - EVENT_FOLD_WINDOW_MS - 60_000);
    await kube.core.patchNamespacedEvent(
      {
        name: first!.metadata!.name!,
        namespace: NS,
        body: { firstTimestamp: stale.toISOString(), lastTimestamp: stale.toISOString() },
      },
      mergePatch,
    );
    await lifecycleFailed('pass-5');
    events = (await ours()).filter((e) => e.message === 'main pod ns/demo-0: push failed');
    expect(events.map((e) => [e.metadata?.name, e.count])).toEqual([[first!.metadata!.name, 1]]);
    expect(events[0]!.firstTimestamp!.getTime()).toBeGreaterThan(stale.getTime() + EVENT_FOLD_WINDOW_MS);
  });

  it('records one Event per key, and reports a gone CocoonSet as cs: null', async () => {
    const ev = {
      namespace: NS,
      name: 'demo',
      uid: cs.metadata.uid,
      type: 'Normal' as const,
      reason: EventReasons.subAgentRebuilding,
      message: 'slot 1 attempt 1/4',
      key: 'k1',
    };
    await acts.cocoonSetEmitEvent(ev);
    await acts.cocoonSetEmitEvent(ev);
    const events = await kube.core.listNamespacedEvent({ namespace: NS });
    expect(events.items.filter((e) => e.reason === EventReasons.subAgentRebuilding)).toHaveLength(1);

    await kube.custom.deleteNamespacedCustomObject({
      group: GROUP,
      version: VERSION,
      namespace: NS,
      plural: PLURAL_COCOONSETS,
      name: 'demo',
    });
    expect(await acts.cocoonSetReadWorld({ namespace: NS, name: 'demo' })).toEqual({ cs: null, pods: [] });
    expect(
      await acts.cocoonSetSetFinalizer({
        namespace: NS,
        name: 'demo',
        finalizer: Finalizers.cocoonSet,
        present: true,
      }),
    ).toBe(false);
  });
});
