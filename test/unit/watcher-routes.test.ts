import type { V1Pod } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { Annotations, API_VERSION, KIND_COCOONSET } from '../../src/api/keys.js';
import type { CocoonHibernation, CocoonSet } from '../../src/api/types.js';
import { OwnWrites } from '../../src/kube/own-writes.js';
import {
  CocoonSetRoute,
  HibernationRoute,
  type ObjectEvent,
  type RoutedSignal,
  Router,
  relevanceFingerprint,
  type WorkflowStart,
} from '../../src/watcher/routes.js';
import { LEVELED_PATCHES } from '../../src/workflows/messages.js';

/** The run modes of every start this version makes (every patched branch it knows: LEVELED_PATCHES). */
const startModes = { kubeIO: 'local', searchAttributes: 'identity', patches: LEVELED_PATCHES.length };

let rv = 100;
const nextRV = () => String(++rv);

/** A start's search attributes as name → value. */
function startAttributes(start: WorkflowStart | undefined): Record<string, unknown> {
  return Object.fromEntries((start?.searchAttributes ?? []).map((p) => [p.key.name, p.value]));
}

function pod(
  name: string,
  opts: {
    ns?: string;
    annotations?: Record<string, string>;
    running?: boolean;
    podIP?: string;
    probeTime?: string;
    phase?: string;
    ready?: boolean;
    owner?: string;
    uid?: string;
    deleting?: boolean;
  } = {},
): V1Pod {
  return {
    metadata: {
      ...(opts.deleting ? { deletionTimestamp: new Date(0) } : {}),
      name,
      namespace: opts.ns ?? 'ns1',
      uid: opts.uid ?? `uid-${name}`,
      resourceVersion: nextRV(),
      annotations: opts.annotations ?? { [Annotations.vmName]: `vk-ns1-${name}` },
      ownerReferences: opts.owner
        ? [
            {
              apiVersion: API_VERSION,
              kind: KIND_COCOONSET,
              name: opts.owner,
              uid: 'cs-uid',
              controller: true,
            },
          ]
        : undefined,
    },
    spec: { containers: [{ name: 'vm' }] },
    status: {
      phase: opts.phase ?? 'Running',
      podIP: opts.podIP ?? '10.0.0.1',
      conditions: [
        {
          type: 'Ready',
          status: (opts.ready ?? true) ? 'True' : 'False',
          lastProbeTime: (opts.probeTime ?? '2026-01-01T00:00:00Z') as unknown as Date,
        },
      ],
      containerStatuses: [
        {
          name: 'vm',
          image: 'img',
          imageID: '',
          ready: true,
          restartCount: 0,
          state: opts.running === false ? { waiting: { reason: 'X' } } : { running: {} },
        },
      ],
    },
  };
}

function cr(
  name: string,
  podRef: string,
  opts: { ns?: string; desire?: string; phase?: string; uid?: string } = {},
): CocoonHibernation {
  return {
    apiVersion: API_VERSION,
    kind: 'CocoonHibernation',
    metadata: {
      name,
      namespace: opts.ns ?? 'ns1',
      uid: opts.uid ?? `uid-${name}`,
      resourceVersion: nextRV(),
      generation: 1,
    },
    spec: { podRef: { name: podRef }, desire: opts.desire ?? 'Hibernate' },
    status: opts.phase ? { phase: opts.phase as 'Pending' } : undefined,
  };
}

/**
 * A router with the hibernation route and pod and CR caches the test fills, like the informers would;
 * `listed` says whether both caches hold a complete list; `ownWrites` is the activities' write record.
 */
function setup(opts: { listed?: boolean } = {}) {
  const pods = new Map<string, V1Pod>();
  const crs = new Map<string, CocoonHibernation>();
  const notes: string[] = [];
  const route = new HibernationRoute();
  const ownWrites = new OwnWrites();
  const router = new Router([route], {
    pod: (ns, name) => pods.get(`${ns}/${name}`),
    hibernation: (ns, name) => crs.get(`${ns}/${name}`),
    cachesListed: () => opts.listed ?? false,
    note: (msg) => notes.push(msg),
    ownWrites,
  });
  const podEvent = (type: ObjectEvent['type'], p: V1Pod, old?: V1Pod): RoutedSignal[] => {
    const key = `${p.metadata?.namespace}/${p.metadata?.name}`;
    if (type === 'delete') pods.delete(key);
    else pods.set(key, p);
    return router.route({ kind: 'pod', type, obj: p, old });
  };
  const crEvent = (type: ObjectEvent['type'], c: CocoonHibernation): RoutedSignal[] => {
    const key = `${c.metadata?.namespace}/${c.metadata?.name}`;
    if (type === 'delete') crs.delete(key);
    else crs.set(key, c);
    return router.route({ kind: 'cocoonhibernation', type, obj: c });
  };
  return { router, route, podEvent, crEvent, notes, pods, ownWrites };
}

describe('HibernationRoute', () => {
  it('routes a CocoonHibernation to vm/<ns>/<podRef> with its trimmed observation and a signal-with-start input', () => {
    const { crEvent } = setup();
    const [sig, ...rest] = crEvent('add', cr('h1', 'p1'));
    expect(rest).toEqual([]);
    expect(sig?.workflowId).toBe('vm/ns1/p1');
    expect(sig?.signalName).toBe('hibernationObserved');
    expect(sig?.start.workflowType).toBe('vmWorkflow');
    expect(sig?.start.args).toEqual([{ namespace: 'ns1', pod: 'p1', ...startModes }]);
    // No pod known yet: the VM name is left for the workflow to set when it learns it.
    expect(startAttributes(sig?.start)).toEqual({ CocoonNamespace: 'ns1', CocoonKind: 'VM' });
    expect(sig?.payload).toMatchObject({
      exists: true,
      namespace: 'ns1',
      name: 'h1',
      podRef: 'p1',
      desire: 'Hibernate',
    });
  });

  it('ignores pods no CocoonHibernation targets', () => {
    const { podEvent, crEvent } = setup();
    crEvent('add', cr('h1', 'p1'));
    expect(podEvent('add', pod('other'))).toEqual([]);
    expect(podEvent('add', pod('p1', { ns: 'ns2' }))).toEqual([]);
  });

  it('sends the pod too, in the same signal, when a CR first targets a pod that is already cached', () => {
    const { podEvent, crEvent } = setup();
    expect(podEvent('add', pod('p1'))).toEqual([]);
    const sigs = crEvent('add', cr('h1', 'p1'));
    expect(sigs.map((s) => [s.workflowId, s.signalName])).toEqual([['vm/ns1/p1', 'hibernationObserved']]);
    expect(sigs[0]?.payload).toMatchObject({
      name: 'h1',
      pod: { exists: true, name: 'p1', containerRunning: true },
    });
  });

  it('starts the VM workflow with the cached world (pod and every CR targeting it) once the caches are listed', () => {
    const unlisted = setup({ listed: false });
    unlisted.podEvent('add', pod('p1'));
    const [before] = unlisted.crEvent('add', cr('h1', 'p1'));
    expect(before?.start.args).toEqual([{ namespace: 'ns1', pod: 'p1', ...startModes }]);

    const { podEvent, crEvent } = setup({ listed: true });
    podEvent('add', pod('p1'));
    crEvent('add', cr('h1', 'p1'));
    crEvent('add', cr('other', 'p2'));
    const [sig] = crEvent('add', cr('h2', 'p1'));
    const [input] = (sig?.start.args ?? []) as Array<{
      world: { pod: unknown; hibernations: Array<{ name: string }> };
    }>;
    expect(input?.world.pod).toMatchObject({ exists: true, name: 'p1' });
    expect(input?.world.hibernations.map((h) => h.name).sort()).toEqual(['h1', 'h2']);
    // The start sets the identity search attributes, the VM name from the cached pod's annotation.
    expect(startAttributes(sig?.start)).toEqual({
      CocoonNamespace: 'ns1',
      CocoonKind: 'VM',
      CocoonVMName: 'vk-ns1-p1',
    });
    // A pod not in the cache is known absent.
    const [noPod] = crEvent('add', cr('h3', 'p3'));
    expect((noPod?.start.args[0] as { world: unknown } | undefined)?.world).toEqual({
      pod: { exists: false, namespace: 'ns1', name: 'p3' },
      hibernations: [expect.objectContaining({ name: 'h3' })],
    });
  });

  it("drops the echo of a workflow's own write for that workflow only, and remembers it as sent", () => {
    const { podEvent, crEvent, router, ownWrites } = setup();
    crEvent('add', cr('h1', 'p1'));
    podEvent('add', pod('p1'));
    // The VM workflow patched the CR's status; the write answered with the version the watch delivers next.
    const written = cr('h1', 'p1', { phase: 'Hibernated' });
    ownWrites.record('cocoonhibernation', 'ns1', 'h1', written.metadata.resourceVersion, 'vm/ns1/p1');
    expect(crEvent('update', written)).toEqual([]);
    expect(router.stats().echoes).toBe(1);
    // The same content again (a relist) is not news either; a later change by someone else is.
    expect(crEvent('update', cr('h1', 'p1', { phase: 'Hibernated' }))).toEqual([]);
    expect(crEvent('update', cr('h1', 'p1', { phase: 'Active' }))).toHaveLength(1);
    // A version some other workflow wrote is sent to this one.
    const byOther = cr('h1', 'p1', { phase: 'Failed' });
    ownWrites.record('cocoonhibernation', 'ns1', 'h1', byOther.metadata.resourceVersion, 'vm/ns1/elsewhere');
    expect(crEvent('update', byOther)).toHaveLength(1);
    // A pod write of this workflow: its echo is dropped, the next pod change is sent.
    const annotated = pod('p1', {
      annotations: { [Annotations.vmName]: 'vk-ns1-p1', [Annotations.hibernate]: 'true' },
    });
    ownWrites.record('pod', 'ns1', 'p1', annotated.metadata?.resourceVersion, 'vm/ns1/p1');
    expect(podEvent('update', annotated)).toEqual([]);
    expect(podEvent('update', pod('p1', { running: false }))).toHaveLength(1);
  });

  it('drops pod status-only churn no gate reads (condition lastProbeTime, podIP) — the reference lets it through', () => {
    const { podEvent, crEvent, router } = setup();
    crEvent('add', cr('h1', 'p1'));
    expect(podEvent('add', pod('p1'))).toHaveLength(1);
    expect(podEvent('update', pod('p1', { probeTime: '2026-01-01T00:05:00Z' }))).toEqual([]);
    expect(podEvent('update', pod('p1', { podIP: '10.0.0.9' }))).toEqual([]);
    expect(router.stats().dropped).toBe(2);
  });

  it('sends when a container starts or stops running (the wake gate reads it)', () => {
    const { podEvent, crEvent } = setup();
    crEvent('add', cr('h1', 'p1'));
    podEvent('add', pod('p1', { running: false }));
    const [sig] = podEvent('update', pod('p1', { running: true }));
    expect(sig?.payload).toMatchObject({ containerRunning: true });
    expect(podEvent('update', pod('p1', { running: false }))).toHaveLength(1);
  });

  it('sends on an annotation change (e.g. vk-cocoon writing the lifecycle state)', () => {
    const { podEvent, crEvent } = setup();
    crEvent('add', cr('h1', 'p1'));
    podEvent('add', pod('p1'));
    const [sig] = podEvent(
      'update',
      pod('p1', {
        annotations: { [Annotations.vmName]: 'vk-ns1-p1', [Annotations.lifecycleState]: 'hibernated' },
      }),
    );
    expect(sig?.signalName).toBe('podObserved');
    expect(sig?.payload).toMatchObject({ annotations: { [Annotations.lifecycleState]: 'hibernated' } });
  });

  it('sends a CR status change a gate reads (phase) and drops a resourceVersion-only change', () => {
    const { crEvent } = setup();
    crEvent('add', cr('h1', 'p1'));
    expect(crEvent('update', cr('h1', 'p1'))).toEqual([]);
    const [sig] = crEvent('update', cr('h1', 'p1', { phase: 'Hibernating' }));
    expect(sig?.payload).toMatchObject({ status: { phase: 'Hibernating' } });
  });

  it('signals the same object state once, however often it is seen (relists, duplicate events)', () => {
    const { podEvent, crEvent } = setup();
    const p = pod('p1');
    podEvent('add', p);
    expect(crEvent('add', cr('h1', 'p1'))).toHaveLength(1);
    expect(podEvent('update', p)).toEqual([]);
    expect(podEvent('update', structuredClone(p))).toEqual([]);
    expect(crEvent('update', cr('h1', 'p1'))).toEqual([]);
  });

  it('sends exists:false with uid when the CR is gone, and stops routing its pod', () => {
    const { podEvent, crEvent, route } = setup();
    const c = cr('h1', 'p1', { uid: 'u-1' });
    crEvent('add', c);
    podEvent('add', pod('p1'));
    const [sig, ...rest] = crEvent('delete', c);
    expect(rest).toEqual([]);
    expect(sig?.workflowId).toBe('vm/ns1/p1');
    expect(sig?.payload).toEqual({ exists: false, namespace: 'ns1', name: 'h1', uid: 'u-1' });
    expect(route.targeting('ns1', 'p1')).toEqual([]);
    expect(podEvent('update', pod('p1', { running: false }))).toEqual([]);
  });

  it('sends exists:false when a targeted pod is deleted, and the recreated pod again', () => {
    const { podEvent, crEvent } = setup();
    crEvent('add', cr('h1', 'p1'));
    const p = pod('p1');
    podEvent('add', p);
    const [gone] = podEvent('delete', p);
    expect(gone?.payload).toEqual({ exists: false, namespace: 'ns1', name: 'p1' });
    const [again] = podEvent('add', pod('p1'));
    expect(again?.payload).toMatchObject({ exists: true, name: 'p1' });
  });

  it('re-sends an unchanged pod to a CR that targets it after the previous CR left (a fresh workflow must learn of it)', () => {
    const { podEvent, crEvent } = setup();
    const c1 = cr('h1', 'p1');
    crEvent('add', c1);
    podEvent('add', pod('p1'));
    crEvent('delete', c1);
    const sigs = crEvent('add', cr('h2', 'p1'));
    expect(sigs.map((s) => s.signalName)).toEqual(['hibernationObserved']);
    expect(sigs[0]?.payload).toMatchObject({ pod: { exists: true, name: 'p1' } });
  });

  it('keeps routing the pod while a second CR still targets it', () => {
    const { podEvent, crEvent, route } = setup();
    const c1 = cr('h1', 'p1');
    crEvent('add', c1);
    crEvent('add', cr('h2', 'p1'));
    podEvent('add', pod('p1'));
    crEvent('delete', c1);
    expect(route.targeting('ns1', 'p1')).toEqual(['h2']);
    expect(podEvent('update', pod('p1', { running: false }))).toHaveLength(1);
  });

  it('re-sends the pod when another CR newly targets an already-targeted pod (its workflow may have been reset)', () => {
    const { podEvent, crEvent } = setup();
    crEvent('add', cr('h1', 'p1'));
    podEvent('add', pod('p1'));
    const sigs = crEvent('add', cr('h2', 'p1'));
    expect(sigs.map((s) => s.signalName)).toEqual(['hibernationObserved']);
    expect(sigs[0]?.payload).toMatchObject({ pod: { exists: true, name: 'p1' } });
    expect(crEvent('update', cr('h2', 'p1'))).toEqual([]);
  });

  it('routes a CR with an empty podRef nowhere and notes it', () => {
    const { crEvent, notes } = setup();
    expect(crEvent('add', cr('h1', ''))).toEqual([]);
    expect(notes).toHaveLength(1);
    expect(crEvent('delete', cr('h1', ''))).toEqual([]);
  });

  it('treats a changed podRef (no immutability rule installed) as leaving the old pod and arriving at the new', () => {
    const { crEvent } = setup();
    crEvent('add', cr('h1', 'p1', { uid: 'u' }));
    const sigs = crEvent('update', cr('h1', 'p2', { uid: 'u' }));
    expect(sigs.map((s) => [s.workflowId, (s.payload as { exists: boolean }).exists])).toEqual([
      ['vm/ns1/p1', false],
      ['vm/ns1/p2', true],
    ]);
  });

  it('re-sends an object after forget(key) (a delivery that finally failed)', () => {
    const { podEvent, crEvent, router } = setup();
    const [sig] = crEvent('add', cr('h1', 'p1'));
    router.forget(sig!.key);
    expect(crEvent('update', cr('h1', 'p1'))).toHaveLength(1);
    podEvent('add', pod('p1'));
    expect(podEvent('update', pod('p1'))).toEqual([]);
  });
});

describe('relevanceFingerprint', () => {
  it('ignores the top-level resourceVersion and key order, not nested fields', () => {
    expect(relevanceFingerprint({ a: 1, resourceVersion: '1', b: { x: 1, y: 2 } })).toBe(
      relevanceFingerprint({ b: { y: 2, x: 1 }, resourceVersion: '2', a: 1 }),
    );
    expect(relevanceFingerprint({ a: { resourceVersion: '1' } })).not.toBe(
      relevanceFingerprint({ a: { resourceVersion: '2' } }),
    );
    expect(relevanceFingerprint({ t: new Date('2026-01-01T00:00:00Z') })).toBe(
      relevanceFingerprint({ t: '2026-01-01T00:00:00.000Z' }),
    );
  });
});

describe('CocoonSetRoute', () => {
  function cs(name: string, generation: number, phase?: string): CocoonSet {
    return {
      metadata: { name, namespace: 'ns1', uid: `uid-${name}`, generation, resourceVersion: nextRV() },
      spec: { agent: { image: 'img' } },
      status: {
        phase: phase as 'Running',
        readyAgents: 0,
        desiredAgents: 1,
        readyToolboxes: 0,
        desiredToolboxes: 0,
      },
    };
  }

  it('sends CocoonSet generation changes and deletion, drops status-only updates', () => {
    const router = new Router([new CocoonSetRoute()]);
    const ev = (type: ObjectEvent['type'], obj: CocoonSet) => router.route({ kind: 'cocoonset', type, obj });
    const [first] = ev('add', cs('s1', 1));
    expect(first?.workflowId).toBe('cocoonset/ns1/s1');
    expect(first?.signalName).toBe('cocoonSetObserved');
    expect(first?.start.workflowType).toBe('cocoonSetWorkflow');
    expect(first?.start.args).toEqual([{ namespace: 'ns1', name: 's1', ...startModes }]);
    expect(startAttributes(first?.start)).toEqual({ CocoonNamespace: 'ns1', CocoonKind: 'CocoonSet' });
    expect(ev('update', cs('s1', 1, 'Running'))).toEqual([]);
    expect(ev('update', cs('s1', 2, 'Running'))).toHaveLength(1);
    const [gone] = ev('delete', cs('s1', 2));
    expect(gone?.payload).toEqual({ exists: false, namespace: 'ns1', name: 's1', uid: 'uid-s1' });
  });

  it('sends owned pods’ phase, readiness and annotation changes to the owner, drops podIP churn and unowned pods', () => {
    const router = new Router([new CocoonSetRoute()]);
    const ev = (type: ObjectEvent['type'], obj: V1Pod) => router.route({ kind: 'pod', type, obj });
    expect(ev('add', pod('free'))).toEqual([]);
    const [added] = ev('add', pod('s1-0', { owner: 's1' }));
    expect(added?.workflowId).toBe('cocoonset/ns1/s1');
    expect(added?.signalName).toBe('ownedPodObserved');
    // The signal carries identity and resourceVersion only (the pass re-reads the pod), not its annotations.
    expect(Object.keys(added!.payload as object).sort()).toEqual([
      'exists',
      'name',
      'namespace',
      'resourceVersion',
      'uid',
    ]);
    expect(ev('update', pod('s1-0', { owner: 's1', podIP: '10.9.9.9' }))).toEqual([]);
    expect(ev('update', pod('s1-0', { owner: 's1', ready: false }))).toHaveLength(1);
    expect(ev('update', pod('s1-0', { owner: 's1', ready: false, phase: 'Failed' }))).toHaveLength(1);
    const noted = ev('update', pod('s1-0', { owner: 's1', annotations: { note: 'x'.repeat(4096) } }));
    expect(noted).toHaveLength(1);
    expect(JSON.stringify(noted[0]!.payload).length).toBeLessThan(200);
    const [gone] = ev('delete', pod('s1-0', { owner: 's1', uid: 'u0' }));
    expect(gone?.payload).toEqual({ exists: false, namespace: 'ns1', name: 's1-0', uid: 'u0' });
  });

  it('runs beside the hibernation route: one pod event can signal both workflows', () => {
    const router = new Router([new HibernationRoute(), new CocoonSetRoute()]);
    router.route({ kind: 'cocoonhibernation', type: 'add', obj: cr('h1', 's1-0') });
    const sigs = router.route({ kind: 'pod', type: 'add', obj: pod('s1-0', { owner: 's1' }) });
    expect(sigs.map((s) => s.workflowId)).toEqual(['vm/ns1/s1-0', 'cocoonset/ns1/s1']);
  });

  it("drops the echoes of the set's own pod writes (create, annotation patch, delete) for the set only; vk-cocoon's next change is sent", () => {
    const ownWrites = new OwnWrites();
    const router = new Router([new HibernationRoute(), new CocoonSetRoute()], { ownWrites });
    router.route({ kind: 'cocoonhibernation', type: 'add', obj: cr('h1', 's1-0') });
    const ev = (type: ObjectEvent['type'], obj: V1Pod) =>
      router.route({ kind: 'pod', type, obj }).map((s) => s.workflowId);
    // The set created the pod; the create answered with the version its ADDED event carries.
    const created = pod('s1-0', { owner: 's1', running: false, ready: false });
    ownWrites.record('pod', 'ns1', 's1-0', created.metadata?.resourceVersion, 'cocoonset/ns1/s1');
    expect(ev('add', created)).toEqual(['vm/ns1/s1-0']);
    // Its annotation patch: dropped for the set; the pod's VM workflow still hears of it.
    const stamped = pod('s1-0', { owner: 's1', running: false, ready: false, annotations: { stamp: '2' } });
    ownWrites.record('pod', 'ns1', 's1-0', stamped.metadata?.resourceVersion, 'cocoonset/ns1/s1');
    expect(ev('update', stamped)).toEqual(['vm/ns1/s1-0']);
    // vk-cocoon starts the VM, the pod goes Ready: news to both.
    expect(ev('update', pod('s1-0', { owner: 's1', annotations: { stamp: '2' } }))).toEqual([
      'vm/ns1/s1-0',
      'cocoonset/ns1/s1',
    ]);
    // A write of the pod's VM workflow is news to the set.
    const byVM = pod('s1-0', { owner: 's1', annotations: { stamp: '2', hibernate: 'true' } });
    ownWrites.record('pod', 'ns1', 's1-0', byVM.metadata?.resourceVersion, 'vm/ns1/s1-0');
    expect(ev('update', byVM)).toEqual(['cocoonset/ns1/s1']);
    // The set's delete: the answered version (deletion timestamp set) is its echo; the pod gone is sent.
    const deleting = pod('s1-0', {
      owner: 's1',
      annotations: { stamp: '2', hibernate: 'true' },
      deleting: true,
    });
    ownWrites.record('pod', 'ns1', 's1-0', deleting.metadata?.resourceVersion, 'cocoonset/ns1/s1');
    expect(ev('update', deleting)).toEqual(['vm/ns1/s1-0']);
    expect(ev('delete', deleting)).toEqual(['vm/ns1/s1-0', 'cocoonset/ns1/s1']);
  });
});
