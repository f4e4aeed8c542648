/**
 * The compact pod a pass reads (src/cocoonset/summary.ts) must decide exactly as the full pod: for a range
 * of worlds (steady, drift of every kind, failed main, terminal sub-agent, leftover hibernate, legacy pod,
 * terminating pod) a pass over the summaries runs the same actions and writes the same status as a pass
 * over the pods as the apiserver returns them.
 */
import type { V1Pod } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { Annotations, Labels, LifecycleStates } from '../../src/api/keys.js';
import type { CocoonSet } from '../../src/api/types.js';
import { buildAgentPod, buildToolboxPod } from '../../src/cocoonset/pods.js';
import { LIFECYCLE_MESSAGE_MAX, summarizePod } from '../../src/cocoonset/summary.js';
import { annotate, newCocoonSet, readyPod, withFinalizer } from '../support/builders.js';
import { PlanWorld } from './plan-world.js';

const MAIN_VM = 'vk-ns-demo-0';

function summarySet(...mods: ((cs: CocoonSet) => void)[]): CocoonSet {
  return newCocoonSet(
    'demo',
    withFinalizer,
    (cs) => {
      cs.metadata.generation = 2;
      cs.spec.agent.replicas = 2;
      cs.spec.agent.storage = '20Gi';
      cs.spec.agent.resources = { limits: { cpu: '2', memory: '4Gi' } };
      cs.spec.agent.envFrom = [{ secretRef: { name: 'creds' } }];
      cs.spec.agent.serviceAccountName = 'agent';
      cs.spec.snapshotCompatibilityClass = 'cl-1';
      cs.spec.toolboxes = [
        { name: 'tools', mode: 'run', image: 'tb:1' },
        { name: 'vnc', mode: 'static', staticVMID: 'q-1', staticIP: '10.0.0.1', vncPort: 5901 },
      ];
    },
    ...mods,
  );
}

/** What the apiserver and vk-cocoon add to a pod that no pass reads. */
function asServed(p: V1Pod, i: number): V1Pod {
  const m = p.metadata!;
  m.uid = `uid-${i}`;
  m.resourceVersion = String(1000 + i);
  m.creationTimestamp = new Date('2026-05-14T00:00:00Z');
  m.managedFields = [{ manager: 'cocoon-operator', operation: 'Update', fieldsV1: { 'f:metadata': {} } }];
  m.labels = { ...m.labels, 'team.example.com/owner': 'x' };
  m.annotations = {
    ...m.annotations,
    'kubectl.kubernetes.io/last-applied-configuration': '{"big":"'.padEnd(3000, 'x'),
    [Annotations.postCloneErrors]: 'e'.repeat(2000),
    [Annotations.vmID]: m.annotations?.[Annotations.vmID] ?? `vm-${i}`,
    [Annotations.ip]: m.annotations?.[Annotations.ip] ?? `10.1.0.${i}`,
  };
  m.ownerReferences = [
    { apiVersion: 'v1', kind: 'Thing', name: 'other', uid: 'o', controller: false },
    ...(m.ownerReferences ?? []),
  ];
  // The apiserver defaults each missing request to its limit.
  const r = p.spec!.containers[0]!.resources ?? {};
  r.requests = { ...(r.limits ?? {}), ...(r.requests ?? {}) };
  p.spec!.containers[0]!.resources = r;
  p.spec!.volumes = [{ name: 'kube-api-access', projected: { sources: [] } }];
  p.spec!.nodeName ??= 'node-a';
  p.spec!.nodeSelector = { ...p.spec!.nodeSelector, 'kubernetes.io/os': 'linux' };
  p.status = {
    ...p.status,
    hostIP: '192.168.0.1',
    conditions: [{ type: 'PodScheduled', status: 'True' }, ...(p.status?.conditions ?? [])],
    containerStatuses:
      p.status?.phase === 'Running'
        ? [
            {
              name: 'agent',
              image: 'x',
              imageID: 'y',
              ready: true,
              restartCount: 0,
              state: { running: { startedAt: new Date() } },
            },
          ]
        : [],
  };
  return p;
}

/**
 * The pods earlier passes left for a two-sub-agent, two-toolbox `demo`, all Ready, whatever `cs` asks for
 * now (so a scenario can scale it down).
 */
function twoAgentPods(cs: CocoonSet): V1Pod[] {
  return [
    readyPod(buildAgentPod(cs, 0, '', '')),
    readyPod(buildAgentPod(cs, 1, MAIN_VM, 'node-a')),
    readyPod(buildAgentPod(cs, 2, MAIN_VM, 'node-a')),
    readyPod(buildToolboxPod(cs, cs.spec.toolboxes![0]!)),
    readyPod(buildToolboxPod(cs, cs.spec.toolboxes![1]!)),
  ];
}

const scenarios: [string, CocoonSet, (cs: CocoonSet) => V1Pod[], string[]][] = [
  ['steady', summarySet(), twoAgentPods, []],
  [
    'image drift of the agents',
    summarySet((c) => (c.spec.agent.image = 'new:2')),
    () => twoAgentPods(summarySet()),
    ['delete:demo-0'],
  ],
  [
    'cpu drift',
    summarySet((c) => (c.spec.agent.resources = { limits: { cpu: '3', memory: '4Gi' } })),
    () => twoAgentPods(summarySet()),
    ['delete:demo-0'],
  ],
  [
    'service account drift',
    summarySet((c) => (c.spec.agent.serviceAccountName = 'other')),
    () => twoAgentPods(summarySet()),
    ['delete:demo-0'],
  ],
  [
    'envFrom drift',
    summarySet((c) => (c.spec.agent.envFrom = [])),
    () => twoAgentPods(summarySet()),
    ['delete:demo-0'],
  ],
  [
    'pool drift',
    summarySet((c) => (c.spec.nodePool = 'gpu')),
    () => twoAgentPods(summarySet()),
    ['delete:demo-0'],
  ],
  [
    'static toolbox runtime drift',
    summarySet((c) => (c.spec.toolboxes![1]!.staticIP = '10.0.0.2')),
    () => twoAgentPods(summarySet()),
    ['delete:demo-vnc'],
  ],
  [
    'failed main (lifecycle)',
    summarySet(),
    (cs) => {
      const pods = twoAgentPods(cs);
      annotate(pods[0]!, {
        [Annotations.lifecycleState]: LifecycleStates.failed,
        [Annotations.lifecycleStateMessage]: 'boom '.repeat(80),
      });
      return pods;
    },
    [],
  ],
  [
    'terminal sub-agent',
    summarySet(),
    (cs) => {
      const pods = twoAgentPods(cs);
      pods[2]!.status = { phase: 'Failed' };
      return pods;
    },
    ['delete:demo-2'],
  ],
  [
    'leftover hibernate, scale down, terminating toolbox, legacy pod without class',
    summarySet((c) => (c.spec.agent.replicas = 1)),
    (cs) => {
      const pods = twoAgentPods(cs);
      annotate(pods[1]!, { [Annotations.hibernate]: 'true' });
      pods[3]!.metadata!.deletionTimestamp = new Date('2026-05-14T00:30:00Z');
      delete pods[4]!.spec!.nodeSelector![Labels.snapshotCPUClass];
      return pods;
    },
    ['delete:demo-2'],
  ],
  ['main not Ready, sub-agents missing', summarySet(), (cs) => [buildAgentPod(cs, 0, '', '')], []],
];

describe('summarizePod', () => {
  it.each(scenarios)(
    'a pass over summaries decides as over full pods: %s',
    async (_name, cs, podsOf, deletes) => {
      const served = podsOf(cs).map(asServed);
      const full = new PlanWorld(cs, served);
      const compact = new PlanWorld(cs, served);
      const a = await full.pass();
      const b = await compact.pass({ view: served.map(summarizePod) });
      expect(b).toEqual(a);
      expect(compact.log).toEqual(full.log);
      expect(compact.cs.status).toEqual(full.cs.status);
      expect(full.ids('deletePod')).toEqual(deletes);
    },
  );

  it("keeps a failed pod's creationTimestamp (a failed toolbox's age), not a healthy one's", () => {
    const cs = newCocoonSet('demo', withFinalizer);
    const at = new Date('2026-05-14T01:00:00Z');
    const healthy = readyPod(buildToolboxPod(cs, { name: 'tb' }));
    healthy.metadata!.creationTimestamp = at;
    expect(summarizePod(healthy).metadata?.creationTimestamp).toBeUndefined();
    const failed = annotate(buildToolboxPod(cs, { name: 'tb' }), {
      [Annotations.lifecycleState]: LifecycleStates.failed,
    });
    failed.metadata!.creationTimestamp = at;
    expect(summarizePod(failed).metadata?.creationTimestamp).toEqual(at);
    const podFailed: V1Pod = { ...buildToolboxPod(cs, { name: 'tb' }), status: { phase: 'Failed' } };
    podFailed.metadata!.creationTimestamp = at;
    expect(summarizePod(podFailed).metadata?.creationTimestamp).toEqual(at);
  });

  it('keeps a pod read ~5x smaller, cuts a long lifecycle message, and is idempotent', async () => {
    const cs = summarySet();
    const pod = asServed(twoAgentPods(cs)[1]!, 1);
    const s = summarizePod(pod);
    const full = Buffer.byteLength(JSON.stringify(pod));
    const small = Buffer.byteLength(JSON.stringify(s));
    expect(small * 5).toBeLessThan(full);
    expect(s.metadata?.annotations?.['kubectl.kubernetes.io/last-applied-configuration']).toBeUndefined();
    expect(s.metadata?.ownerReferences).toEqual([
      expect.objectContaining({ uid: cs.metadata.uid, controller: true }),
    ]);
    expect(summarizePod(s)).toEqual(s);
    const long = summarizePod(annotate(pod, { [Annotations.lifecycleStateMessage]: 'm'.repeat(4000) }));
    expect(long.metadata?.annotations?.[Annotations.lifecycleStateMessage]).toHaveLength(
      LIFECYCLE_MESSAGE_MAX,
    );
  });
});
