/**
 * Pod builders, classification and drift (port of the reference's pods_test.go; docs/cocoonset.md#pods),
 * plus a worked example written out literally: the exact objects the Go operator sends,
 * and the same pods as the apiserver returns them (defaults filled, vk runtime annotations added),
 * which must be adopted without drift.
 */
import type { V1Pod } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { Annotations, Labels, LIMIT_RANGER_ANNOTATION } from '../../src/api/keys.js';
import type { CocoonSet, ToolboxSpec } from '../../src/api/types.js';
import {
  classifyPods,
  failedRoundHoldsVM,
  isControlledBy,
  noteFailedRounds,
  ownedPods,
} from '../../src/cocoonset/classify.js';
import {
  envFromEqual,
  limitRangerDefaults,
  podNodePool,
  podSpecMatchesAgent,
  podSpecMatchesToolbox,
  resourcesMatch,
} from '../../src/cocoonset/drift.js';
import { buildAgentPod, buildToolboxPod, newManagedPod } from '../../src/cocoonset/pods.js';
import { newCocoonSet, readyPod } from '../support/builders.js';

const ann = (p: V1Pod) => p.metadata!.annotations!;
const labels = (p: V1Pod) => p.metadata!.labels!;

function clone<T>(v: T): T {
  return JSON.parse(JSON.stringify(v)) as T;
}

describe('a main, a sub-agent and a toolbox built byte-compatible with the Go operator', () => {
  const cs: CocoonSet = {
    metadata: { name: 'demo', namespace: 'ns', uid: 'U', generation: 3 },
    spec: {
      agent: { image: 'img', replicas: 1, storage: '100Gi' },
      toolboxes: [{ name: 'vnc', mode: 'static', staticVMID: 'qemu-1', staticIP: '10.0.0.1', vncPort: 5901 }],
    },
  };
  const tolerations = [
    { key: 'virtual-kubelet.io/provider', operator: 'Exists' },
    { key: 'node.kubernetes.io/not-ready', operator: 'Exists', effect: 'NoExecute' },
    { key: 'node.kubernetes.io/unreachable', operator: 'Exists', effect: 'NoExecute' },
  ];
  const ownerReferences = [
    {
      apiVersion: 'cocoonset.cocoonstack.io/v1',
      kind: 'CocoonSet',
      name: 'demo',
      uid: 'U',
      controller: true,
      blockOwnerDeletion: true,
    },
  ];
  const storage = { limits: { 'ephemeral-storage': '100Gi' }, requests: { 'ephemeral-storage': '100Gi' } };

  const demo0Sent = {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      name: 'demo-0',
      namespace: 'ns',
      labels: {
        'cocoonset.cocoonstack.io/name': 'demo',
        'cocoonset.cocoonstack.io/role': 'main',
        'cocoonset.cocoonstack.io/slot': '0',
        'app.kubernetes.io/name': 'demo',
      },
      annotations: {
        'cocoonset.cocoonstack.io/generation': '3',
        'vm.cocoonstack.io/name': 'vk-ns-demo-0',
        'cocoonset.cocoonstack.io/image': 'img',
        'cocoonset.cocoonstack.io/mode': 'clone',
        'cocoonset.cocoonstack.io/os': 'linux',
        'cocoonset.cocoonstack.io/storage': '100Gi',
        'cocoonset.cocoonstack.io/snapshot-policy': 'always',
        'cocoonset.cocoonstack.io/managed': 'true',
        'vm.cocoonstack.io/backend': 'cloud-hypervisor',
      },
      ownerReferences,
    },
    spec: {
      terminationGracePeriodSeconds: 1,
      tolerations,
      nodeSelector: { 'cocoonstack.io/pool': 'default' },
      containers: [{ name: 'agent', image: 'ghcr.io/cocoonstack/placeholder:latest', resources: storage }],
    },
  };

  /** What a GET returns for a pod the Go operator created: server defaults and vk annotations added. */
  function asServed(sent: object, extraAnnotations: Record<string, string>, nodeName: string): V1Pod {
    const p = clone(sent) as V1Pod;
    p.metadata!.uid = `uid-${p.metadata!.name}`;
    p.metadata!.resourceVersion = '4711';
    p.metadata!.annotations = {
      ...p.metadata!.annotations,
      'vm.cocoonstack.io/lifecycle-state': 'ready',
      'vm.cocoonstack.io/lifecycle-observed-generation': '3',
      ...extraAnnotations,
    };
    Object.assign(p.spec!, {
      restartPolicy: 'Always',
      dnsPolicy: 'ClusterFirst',
      serviceAccountName: 'default',
      serviceAccount: 'default',
      schedulerName: 'default-scheduler',
      securityContext: {},
      enableServiceLinks: true,
      preemptionPolicy: 'PreemptLowerPriority',
      priority: 0,
      nodeName,
    });
    Object.assign(p.spec!.containers[0]!, {
      imagePullPolicy: 'Always',
      terminationMessagePath: '/dev/termination-log',
      terminationMessagePolicy: 'File',
    });
    return readyPod(p);
  }

  it('builds demo-0 exactly as the reference sends it', () => {
    expect(buildAgentPod(cs, 0, '', '')).toEqual(demo0Sent);
  });

  it('builds demo-1 with fork-from the main and a hard bind to its node', () => {
    const sent = clone(demo0Sent);
    sent.metadata.name = 'demo-1';
    sent.metadata.labels['cocoonset.cocoonstack.io/role'] = 'sub-agent';
    sent.metadata.labels['cocoonset.cocoonstack.io/slot'] = '1';
    Object.assign(sent.metadata.annotations, {
      'vm.cocoonstack.io/name': 'vk-ns-demo-1',
      'vm.cocoonstack.io/fork-from': 'vk-ns-demo-0',
    });
    Object.assign(sent.spec, { nodeName: 'vk-node-1' });
    expect(buildAgentPod(cs, 1, 'vk-ns-demo-0', 'vk-node-1')).toEqual(sent);
  });

  it('builds demo-vnc: static, unmanaged, no image key, runtime hints pre-written', () => {
    expect(buildToolboxPod(cs, cs.spec.toolboxes![0]!)).toEqual({
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: {
        name: 'demo-vnc',
        namespace: 'ns',
        labels: {
          'cocoonset.cocoonstack.io/name': 'demo',
          'cocoonset.cocoonstack.io/role': 'toolbox',
          'cocoonset.cocoonstack.io/slot': 'vnc',
          'app.kubernetes.io/name': 'demo',
        },
        annotations: {
          'cocoonset.cocoonstack.io/generation': '3',
          'vm.cocoonstack.io/name': 'vk-ns-demo-vnc',
          'cocoonset.cocoonstack.io/mode': 'static',
          'cocoonset.cocoonstack.io/os': 'linux',
          'cocoonset.cocoonstack.io/snapshot-policy': 'always',
          'vm.cocoonstack.io/backend': 'cloud-hypervisor',
          'vm.cocoonstack.io/id': 'qemu-1',
          'vm.cocoonstack.io/ip': '10.0.0.1',
          'vm.cocoonstack.io/vnc-port': '5901',
        },
        ownerReferences,
      },
      spec: {
        terminationGracePeriodSeconds: 1,
        tolerations,
        nodeSelector: { 'cocoonstack.io/pool': 'default' },
        containers: [{ name: 'agent', image: 'ghcr.io/cocoonstack/placeholder:latest', resources: {} }],
      },
    });
  });

  it('adopts the Go-created main as served by the apiserver without drift', () => {
    const served = asServed(
      demo0Sent,
      { 'vm.cocoonstack.io/id': 'vm-0', 'vm.cocoonstack.io/ip': '10.1.0.2' },
      'n1',
    );
    expect(podSpecMatchesAgent(served, cs, 0)).toBe(true);
  });

  it('adopts the Go-created sub-agent and static toolbox without drift', () => {
    const sub = asServed(
      buildAgentPod(cs, 1, 'vk-ns-demo-0', 'n1'),
      { 'vm.cocoonstack.io/id': 'vm-1' },
      'n1',
    );
    expect(podSpecMatchesAgent(sub, cs, 1)).toBe(true);
    const tb = asServed(buildToolboxPod(cs, cs.spec.toolboxes![0]!), {}, 'n1');
    expect(podSpecMatchesToolbox(tb, cs, cs.spec.toolboxes![0]!)).toBe(true);
  });

  it('sees drift when the served pod carries a non-canonical storage string', () => {
    const served = asServed(demo0Sent, {}, 'n1');
    served.metadata!.annotations!['cocoonset.cocoonstack.io/storage'] = '102400Mi';
    expect(podSpecMatchesAgent(served, cs, 0)).toBe(false);
  });
});

describe('buildAgentPod / buildToolboxPod', () => {
  it('slot 0 is the main: demo-0, role main, slot "0", VM vk-ns-demo-0, no fork-from', () => {
    const p = buildAgentPod(newCocoonSet(), 0, '', '');
    expect(p.metadata!.name).toBe('demo-0');
    expect(labels(p)[Labels.role]).toBe('main');
    expect(labels(p)[Labels.slot]).toBe('0');
    expect(ann(p)[Annotations.vmName]).toBe('vk-ns-demo-0');
    expect(ann(p)[Annotations.forkFrom]).toBeUndefined();
  });

  it('sub-agent forks from the main and is bound to its node', () => {
    const cs = newCocoonSet('demo', (c) => {
      c.spec.agent.replicas = 2;
    });
    const p = buildAgentPod(cs, 1, 'vk-ns-demo-0', 'cocoonset-node-2');
    expect(labels(p)[Labels.role]).toBe('sub-agent');
    expect(ann(p)[Annotations.forkFrom]).toBe('vk-ns-demo-0');
    expect(p.spec!.nodeName).toBe('cocoonset-node-2');
  });

  it('applies code-side defaults on an un-defaulted spec (clone, linux, managed)', () => {
    const p = buildAgentPod(newCocoonSet(), 0, '', '');
    expect([ann(p)[Annotations.mode], ann(p)[Annotations.os], ann(p)[Annotations.managed]]).toEqual([
      'clone',
      'linux',
      'true',
    ]);
  });

  it('propagates storage to the annotation and to ephemeral-storage requests and limits', () => {
    const p = buildAgentPod(
      newCocoonSet('demo', (c) => {
        c.spec.agent.storage = '100Gi';
      }),
      0,
      '',
      '',
    );
    expect(ann(p)[Annotations.storage]).toBe('100Gi');
    expect(p.spec!.containers[0]!.resources).toEqual({
      requests: { 'ephemeral-storage': '100Gi' },
      limits: { 'ephemeral-storage': '100Gi' },
    });
  });

  it('writes storage and resource quantities in canonical form, and never touches the spec maps', () => {
    const cs = newCocoonSet('demo', (c) => {
      c.spec.agent.storage = '1024Mi';
      c.spec.agent.resources = { requests: { cpu: '1000m', memory: '1.5Gi' }, limits: { cpu: '2' } };
    });
    const before = clone(cs);
    const p = buildAgentPod(cs, 0, '', '');
    expect(ann(p)[Annotations.storage]).toBe('1Gi');
    expect(p.spec!.containers[0]!.resources).toEqual({
      requests: { cpu: '1', memory: '1536Mi', 'ephemeral-storage': '1Gi' },
      limits: { cpu: '2', 'ephemeral-storage': '1Gi' },
    });
    expect(cs).toEqual(before);
  });

  it('omits ephemeral-storage for a zero storage but still stamps the annotation', () => {
    const p = buildAgentPod(
      newCocoonSet('demo', (c) => {
        c.spec.agent.storage = '0';
      }),
      0,
      '',
      '',
    );
    expect(ann(p)[Annotations.storage]).toBe('0');
    expect(p.spec!.containers[0]!.resources).toEqual({});
  });

  it('carries envFrom and service account on agents only', () => {
    const cs = newCocoonSet('demo', (c) => {
      c.spec.agent.envFrom = [{ configMapRef: { name: 'cm-a' } }];
      c.spec.agent.serviceAccountName = 'sa';
      c.spec.toolboxes = [{ name: 'tb' }];
    });
    const main = buildAgentPod(cs, 0, '', '');
    expect(main.spec!.serviceAccountName).toBe('sa');
    expect(main.spec!.containers[0]!.envFrom).toEqual([{ configMapRef: { name: 'cm-a' } }]);
    const tb = buildToolboxPod(cs, cs.spec.toolboxes![0]!);
    expect(tb.spec!.serviceAccountName).toBeUndefined();
    expect(tb.spec!.containers[0]!.envFrom).toBeUndefined();
  });

  it('static toolbox carries runtime hints and is not managed', () => {
    const cs = newCocoonSet();
    const p = buildToolboxPod(cs, {
      name: 'vnc',
      mode: 'static',
      staticVMID: 'qemu-1',
      staticIP: '10.0.0.1',
      vncPort: 5901,
    });
    expect(ann(p)[Annotations.managed]).not.toBe('true');
    expect([ann(p)[Annotations.vmID], ann(p)[Annotations.ip], ann(p)[Annotations.vncPort]]).toEqual([
      'qemu-1',
      '10.0.0.1',
      '5901',
    ]);
  });

  it('run-mode toolbox is managed and ignores the static fields', () => {
    const p = buildToolboxPod(newCocoonSet(), {
      name: 'tb',
      mode: 'run',
      staticVMID: 'x',
      staticIP: 'y',
      vncPort: 1,
    });
    expect(ann(p)[Annotations.managed]).toBe('true');
    expect(ann(p)[Annotations.vmID]).toBeUndefined();
    expect(ann(p)[Annotations.vncPort]).toBeUndefined();
    expect(buildToolboxPod(newCocoonSet(), { name: 'tb' }).metadata!.annotations![Annotations.managed]).toBe(
      'true',
    );
  });

  it('preserves the generation stamp through the VMSpec / VMRuntime apply (11 agent, 13 toolbox)', () => {
    const agent = buildAgentPod(
      newCocoonSet('demo', (c) => {
        c.metadata.generation = 11;
      }),
      0,
      '',
      '',
    );
    expect(ann(agent)[Annotations.cocoonSetGeneration]).toBe('11');
    const tb = buildToolboxPod(
      newCocoonSet('demo', (c) => {
        c.metadata.generation = 13;
      }),
      { name: 'vnc', mode: 'static', staticVMID: 'q', vncPort: 5901 },
    );
    expect(ann(tb)[Annotations.cocoonSetGeneration]).toBe('13');
  });

  it('pins the main with a required hostname affinity instead of nodeName', () => {
    const p = buildAgentPod(
      newCocoonSet('demo', (c) => {
        c.spec.nodeName = 'node-b';
      }),
      0,
      '',
      '',
    );
    expect(p.spec!.nodeName).toBeUndefined();
    expect(p.spec!.affinity).toEqual({
      nodeAffinity: {
        requiredDuringSchedulingIgnoredDuringExecution: {
          nodeSelectorTerms: [
            { matchExpressions: [{ key: 'kubernetes.io/hostname', operator: 'In', values: ['node-b'] }] },
          ],
        },
      },
    });
  });

  it('sets no affinity when spec.nodeName is empty', () => {
    expect(buildAgentPod(newCocoonSet(), 0, '', '').spec!.affinity).toBeUndefined();
  });

  it('sub-agent follows its bind and ignores spec.nodeName', () => {
    const cs = newCocoonSet('demo', (c) => {
      c.spec.nodeName = 'node-b';
      c.spec.agent.replicas = 1;
    });
    const p = buildAgentPod(cs, 1, 'vk-ns-demo-0', 'node-a');
    expect(p.spec!.nodeName).toBe('node-a');
    expect(p.spec!.affinity).toBeUndefined();
    expect(buildAgentPod(cs, 1, 'vk-ns-demo-0', '').spec!.affinity).toBeUndefined();
  });
});

describe('newManagedPod', () => {
  it('has exactly one controller owner reference to the CocoonSet', () => {
    const p = newManagedPod(newCocoonSet(), 'demo-0', 'main', '0');
    expect(p.metadata!.ownerReferences).toEqual([
      {
        apiVersion: 'cocoonset.cocoonstack.io/v1',
        kind: 'CocoonSet',
        name: 'demo',
        uid: 'test-uid',
        controller: true,
        blockOwnerDeletion: true,
      },
    ]);
  });

  it('selects the pool and the snapshot compatibility class', () => {
    const p = newManagedPod(
      newCocoonSet('demo', (c) => {
        c.spec.nodePool = 'purpose-a';
        c.spec.snapshotCompatibilityClass = 'n2-cascade-lake-v1';
      }),
      'demo-0',
      'main',
      '0',
    );
    expect(p.spec!.nodeSelector).toEqual({
      'cocoonstack.io/pool': 'purpose-a',
      'cocoonstack.io/snapshot-cpu-class': 'n2-cascade-lake-v1',
    });
  });

  it('omits an empty snapshot compatibility class and defaults the pool', () => {
    expect(newManagedPod(newCocoonSet(), 'demo-0', 'main', '0').spec!.nodeSelector).toEqual({
      'cocoonstack.io/pool': 'default',
    });
  });

  it('tolerates the vk provider taint with every effect', () => {
    const t = newManagedPod(newCocoonSet(), 'demo-0', 'main', '0').spec!.tolerations!;
    expect(t).toContainEqual({ key: 'virtual-kubelet.io/provider', operator: 'Exists' });
  });

  it('tolerates node flaps forever: not-ready / unreachable NoExecute without tolerationSeconds', () => {
    const t = newManagedPod(newCocoonSet(), 'demo-0', 'main', '0').spec!.tolerations!;
    for (const key of ['node.kubernetes.io/not-ready', 'node.kubernetes.io/unreachable']) {
      const tol = t.find((x) => x.key === key)!;
      expect(tol).toEqual({ key, operator: 'Exists', effect: 'NoExecute' });
      expect('tolerationSeconds' in tol).toBe(false);
    }
  });

  it('stamps the CocoonSet generation', () => {
    const p = newManagedPod(
      newCocoonSet('demo', (c) => {
        c.metadata.generation = 42;
      }),
      'demo-0',
      'main',
      '0',
    );
    expect(ann(p)[Annotations.cocoonSetGeneration]).toBe('42');
  });
});

describe('classification and ownership', () => {
  const cs = newCocoonSet('demo', (c) => {
    c.spec.agent.replicas = 2;
    c.spec.toolboxes = [{ name: 'tb' }];
  });

  it('groups pods by role', () => {
    const main = buildAgentPod(cs, 0, '', '');
    const s1 = buildAgentPod(cs, 1, 'vk-ns-demo-0', '');
    const s2 = buildAgentPod(cs, 2, 'vk-ns-demo-0', '');
    const tb = buildToolboxPod(cs, { name: 'tb' });
    const c = classifyPods([main, s1, s2, tb]);
    expect(c.main).toBe(main);
    expect([...c.sub.entries()]).toEqual([
      [1, s1],
      [2, s2],
    ]);
    expect([...c.toolbox.entries()]).toEqual([['tb', tb]]);
    expect(c.allByName.size).toBe(4);
  });

  it('keeps a pod without a role in allByName only', () => {
    const p = newManagedPod(cs, 'demo-x', 'main', 'x');
    delete p.metadata!.labels![Labels.role];
    const c = classifyPods([p]);
    expect(c.main).toBeUndefined();
    expect(c.sub.size + c.toolbox.size).toBe(0);
    expect(c.allByName.get('demo-x')).toBe(p);
  });

  it('parses sub slots like ParseInt and skips bad labels and terminating pods', () => {
    const odd = newManagedPod(cs, 'demo-01', 'sub-agent', '01');
    const bad = newManagedPod(cs, 'demo-b', 'sub-agent', 'one');
    const gone = buildAgentPod(cs, 2, '', '');
    gone.metadata!.deletionTimestamp = new Date();
    const c = classifyPods([odd, bad, gone]);
    expect([...c.sub.keys()]).toEqual([1]);
    expect([...c.allByName.keys()]).toEqual(['demo-01', 'demo-b']);
  });

  it('owns only pods whose controller reference carries this UID', () => {
    const mine = buildAgentPod(cs, 0, '', '');
    const stale = buildAgentPod(
      newCocoonSet('demo', (c) => (c.metadata.uid = 'old-uid')),
      1,
      '',
      '',
    );
    const noCtl = buildAgentPod(cs, 2, '', '');
    noCtl.metadata!.ownerReferences![0]!.controller = false;
    expect(ownedPods(cs, [mine, stale, noCtl])).toEqual([mine]);
    expect(isControlledBy(stale, 'old-uid')).toBe(true);
  });
});

describe('drift: podSpecMatchesAgent / podSpecMatchesToolbox', () => {
  const base = () =>
    newCocoonSet('demo', (c) => {
      c.spec.agent.replicas = 1;
      c.spec.agent.resources = { requests: { cpu: '1', memory: '1Gi' }, limits: { cpu: '1', memory: '1Gi' } };
    });

  it('a freshly built main matches its own spec', () => {
    const cs = base();
    expect(podSpecMatchesAgent(buildAgentPod(cs, 0, '', ''), cs, 0)).toBe(true);
  });

  it.each([
    ['image', (c: CocoonSet) => (c.spec.agent.image = 'ubuntu:26.04')],
    ['backend', (c: CocoonSet) => (c.spec.agent.backend = 'firecracker')],
    [
      'resources',
      (c: CocoonSet) =>
        (c.spec.agent.resources = {
          requests: { cpu: '2', memory: '2Gi' },
          limits: { cpu: '2', memory: '2Gi' },
        }),
    ],
    ['probePort', (c: CocoonSet) => (c.spec.agent.probePort = 8080)],
    ['snapshotPolicy', (c: CocoonSet) => (c.spec.snapshotPolicy = 'never')],
    ['serviceAccount', (c: CocoonSet) => (c.spec.agent.serviceAccountName = 'sa-new')],
    ['envFrom', (c: CocoonSet) => (c.spec.agent.envFrom = [{ configMapRef: { name: 'cm-b' } }])],
    ['nodePool', (c: CocoonSet) => (c.spec.nodePool = 'cpu')],
    ['storage', (c: CocoonSet) => (c.spec.agent.storage = '10Gi')],
  ])('detects %s drift on the main', (_what, edit) => {
    const cs = base();
    const pod = buildAgentPod(cs, 0, '', '');
    const next = clone(cs);
    edit(next);
    expect(podSpecMatchesAgent(pod, next, 0)).toBe(false);
  });

  it('detects service account drift sa-old → sa-new and envFrom cm-a → cm-b', () => {
    const cs = base();
    cs.spec.agent.serviceAccountName = 'sa-old';
    cs.spec.agent.envFrom = [{ configMapRef: { name: 'cm-a' } }];
    const pod = buildAgentPod(cs, 0, '', '');
    expect(podSpecMatchesAgent(pod, cs, 0)).toBe(true);
    expect(
      podSpecMatchesAgent(
        pod,
        { ...cs, spec: { ...cs.spec, agent: { ...cs.spec.agent, serviceAccountName: 'sa-new' } } },
        0,
      ),
    ).toBe(false);
    expect(
      podSpecMatchesAgent(
        pod,
        {
          ...cs,
          spec: { ...cs.spec, agent: { ...cs.spec.agent, envFrom: [{ configMapRef: { name: 'cm-b' } }] } },
        },
        0,
      ),
    ).toBe(false);
  });

  it('treats an empty pool as default and an empty service account as "default"', () => {
    const cs = base();
    const pod = buildAgentPod(cs, 0, '', '');
    pod.spec!.serviceAccountName = 'default';
    expect(pod.spec!.nodeSelector![Labels.nodePool]).toBe('default');
    expect(podSpecMatchesAgent(pod, cs, 0)).toBe(true);
  });

  it('pool moves gpu → cpu drift agents and toolboxes', () => {
    const cs = base();
    cs.spec.nodePool = 'gpu';
    cs.spec.toolboxes = [{ name: 'tb' }];
    const main = buildAgentPod(cs, 0, '', '');
    const tb = buildToolboxPod(cs, cs.spec.toolboxes[0]!);
    const moved = clone(cs);
    moved.spec.nodePool = 'cpu';
    expect(podSpecMatchesAgent(main, moved, 0)).toBe(false);
    expect(podSpecMatchesToolbox(tb, moved, moved.spec.toolboxes![0]!)).toBe(false);
  });

  it('reads the pool from selector, then labels, then annotations', () => {
    const p: V1Pod = {
      metadata: { labels: { [Labels.nodePool]: 'l' }, annotations: { [Labels.nodePool]: 'a' } },
      spec: { containers: [] },
    };
    expect(podNodePool(p)).toBe('l');
    p.spec!.nodeSelector = { [Labels.nodePool]: 's' };
    expect(podNodePool(p)).toBe('s');
    expect(podNodePool({ metadata: { annotations: { [Labels.nodePool]: 'a' } } })).toBe('a');
    expect(podNodePool({})).toBe('default');
  });

  it('detects a snapshot CPU class change', () => {
    const cs = base();
    cs.spec.snapshotCompatibilityClass = 'n4-emerald-rapids-v1';
    const pod = buildAgentPod(cs, 0, '', '');
    cs.spec.snapshotCompatibilityClass = 'n2-cascade-lake-v1';
    expect(podSpecMatchesAgent(pod, cs, 0)).toBe(false);
  });

  it('drifts a pod that has a class when the spec has none', () => {
    const cs = base();
    cs.spec.snapshotCompatibilityClass = 'n2-cascade-lake-v1';
    const pod = buildAgentPod(cs, 0, '', '');
    delete cs.spec.snapshotCompatibilityClass;
    expect(podSpecMatchesAgent(pod, cs, 0)).toBe(false);
  });

  it('adopts a live legacy pod without the class, but not a terminal one', () => {
    const cs = base();
    cs.spec.snapshotCompatibilityClass = 'n2-cascade-lake-v1';
    const pod = buildAgentPod(cs, 0, '', '');
    delete pod.spec!.nodeSelector![Labels.snapshotCPUClass];
    expect(podSpecMatchesAgent(pod, cs, 0)).toBe(true);
    pod.status = { phase: 'Failed' };
    expect(podSpecMatchesAgent(pod, cs, 0)).toBe(false);
    pod.status = { phase: 'Running' };
    pod.metadata!.annotations![Annotations.lifecycleState] = 'failed';
    expect(podSpecMatchesAgent(pod, cs, 0)).toBe(false);
  });

  it('adopts a live legacy toolbox without the class', () => {
    const cs = base();
    cs.spec.snapshotCompatibilityClass = 'n2-cascade-lake-v1';
    const tb: ToolboxSpec = { name: 'tb' };
    const pod = buildToolboxPod(cs, tb);
    delete pod.spec!.nodeSelector![Labels.snapshotCPUClass];
    expect(podSpecMatchesToolbox(pod, cs, tb)).toBe(true);
  });

  it('keeps the sub-agent fork-from out of drift, but a main with a fork-from drifts', () => {
    const cs = base();
    const sub = buildAgentPod(cs, 1, 'vk-ns-demo-0', 'node-a');
    expect(podSpecMatchesAgent(sub, cs, 1)).toBe(true);
    const main = buildAgentPod(cs, 0, '', '');
    main.metadata!.annotations![Annotations.forkFrom] = 'vk-ns-other-0';
    expect(podSpecMatchesAgent(main, cs, 0)).toBe(false);
  });

  it('ignores affinity and nodeName (pinning is a migration, not a drift)', () => {
    const cs = base();
    const pod = buildAgentPod(cs, 0, '', '');
    cs.spec.nodeName = 'node-b';
    expect(podSpecMatchesAgent(pod, cs, 0)).toBe(true);
  });

  it('ignores the generation, hibernate, restore, dead-letter and runtime annotations', () => {
    const cs = base();
    const pod = buildAgentPod(cs, 0, '', '');
    Object.assign(pod.metadata!.annotations!, {
      [Annotations.cocoonSetGeneration]: '99',
      [Annotations.hibernate]: 'true',
      [Annotations.restoreFromHibernate]: 'true',
      [Annotations.deadLetter]: 'true',
      [Annotations.vmID]: 'vm',
      [Annotations.ip]: '10.0.0.9',
    });
    expect(podSpecMatchesAgent(pod, cs, 0)).toBe(true);
  });

  it('toolboxes: identical run and static specs match; image, probePort and static runtime edits drift', () => {
    const cs = base();
    const run: ToolboxSpec = { name: 'tb', image: 'toolbox:v1' };
    const stat: ToolboxSpec = {
      name: 'vnc',
      mode: 'static',
      staticVMID: 'qemu-1',
      staticIP: '10.0.0.1',
      vncPort: 5901,
    };
    const runPod = buildToolboxPod(cs, run);
    const statPod = buildToolboxPod(cs, stat);
    expect(podSpecMatchesToolbox(runPod, cs, run)).toBe(true);
    expect(podSpecMatchesToolbox(statPod, cs, stat)).toBe(true);
    expect(podSpecMatchesToolbox(runPod, cs, { ...run, image: 'toolbox:v2' })).toBe(false);
    expect(podSpecMatchesToolbox(runPod, cs, { ...run, probePort: 9090 })).toBe(false);
    expect(podSpecMatchesToolbox(statPod, cs, { ...stat, staticVMID: 'qemu-2' })).toBe(false);
    expect(podSpecMatchesToolbox(statPod, cs, { ...stat, staticIP: '10.0.0.2' })).toBe(false);
    expect(podSpecMatchesToolbox(statPod, cs, { ...stat, vncPort: 5902 })).toBe(false);
    // Run mode never compares the static fields.
    expect(podSpecMatchesToolbox(runPod, cs, { ...run, staticVMID: 'x', vncPort: 1 })).toBe(true);
  });
});

describe('resourcesMatch', () => {
  const pod = (resources: object): V1Pod => ({ spec: { containers: [{ name: 'agent', resources }] } });

  it('compares cpu and memory numerically (1000m == 1, 1024Mi == 1Gi)', () => {
    const want = { requests: { cpu: '1000m', memory: '1024Mi' }, limits: { cpu: '1', memory: '1Gi' } };
    expect(
      resourcesMatch(
        pod({ requests: { cpu: '1', memory: '1Gi' }, limits: { cpu: '1', memory: '1Gi' } }),
        want,
      ),
    ).toBe(true);
  });

  it('falls back to limits for requests only when requests are empty as a whole', () => {
    const served = pod({ requests: { cpu: '2', memory: '1Gi' }, limits: { cpu: '2', memory: '1Gi' } });
    expect(resourcesMatch(served, { limits: { cpu: '2', memory: '1Gi' } })).toBe(true);
    expect(resourcesMatch(served, { limits: { cpu: '2', memory: '1Gi' }, requests: {} })).toBe(true);
    // Partial requests do not fall back (the reference's latent quirk, kept).
    expect(resourcesMatch(served, { limits: { cpu: '2' }, requests: { memory: '1Gi' } })).toBe(false);
  });

  it('with admittedResources, a request the spec leaves unset is its limit, per resource, as the apiserver stores it (found by a new-user run: the reference rule saw drift in every such pod, a delete loop)', () => {
    const spec = { requests: { cpu: '1' }, limits: { cpu: '2', memory: '2Gi' } };
    // What the apiserver stores for that spec: the memory request defaulted to the memory limit.
    const stored = pod({ requests: { cpu: '1', memory: '2Gi' }, limits: { cpu: '2', memory: '2Gi' } });
    expect(resourcesMatch(stored, spec)).toBe(false);
    expect(resourcesMatch(stored, spec, { admittedResources: true })).toBe(true);
    expect(
      resourcesMatch(stored, { ...spec, requests: { cpu: '1', memory: '1Gi' } }, { admittedResources: true }),
    ).toBe(false);
  });

  it('treats one-sided presence as drift and ignores ephemeral-storage and other resources', () => {
    expect(resourcesMatch(pod({ limits: { cpu: '1' } }), {})).toBe(false);
    expect(resourcesMatch(pod({}), { limits: { cpu: '1' } })).toBe(false);
    expect(resourcesMatch(pod({ limits: { 'ephemeral-storage': '1Gi', 'nvidia.com/gpu': '1' } }), {})).toBe(
      true,
    );
    expect(resourcesMatch({ spec: { containers: [] } }, {})).toBe(false);
  });

  it('with admittedResources, a value the spec leaves unset that the LimitRanger set is not drift; a value the spec sets still compares', () => {
    const served: V1Pod = {
      metadata: {
        annotations: {
          [LIMIT_RANGER_ANNOTATION]:
            'LimitRanger plugin set: cpu request for container agent; cpu, memory limit for container agent',
        },
      },
      spec: {
        containers: [
          {
            name: 'agent',
            resources: { requests: { cpu: '250m', memory: '1Gi' }, limits: { cpu: '500m', memory: '2Gi' } },
          },
        ],
      },
    };
    const spec = { requests: { memory: '1Gi' } };
    expect(resourcesMatch(served, spec)).toBe(false);
    expect(resourcesMatch(served, spec, { admittedResources: true })).toBe(true);
    // The spec now names a limit the LimitRanger had defaulted: compared as usual.
    expect(resourcesMatch(served, { ...spec, limits: { memory: '4Gi' } }, { admittedResources: true })).toBe(
      false,
    );
    expect(resourcesMatch(served, { ...spec, limits: { memory: '2Gi' } }, { admittedResources: true })).toBe(
      true,
    );
    // Another container's defaults, or a malformed annotation, excuse nothing.
    const other = {
      ...served,
      metadata: {
        annotations: {
          [LIMIT_RANGER_ANNOTATION]: 'LimitRanger plugin set: cpu request for container sidecar',
        },
      },
    };
    expect(resourcesMatch(other, spec, { admittedResources: true })).toBe(false);
    expect(limitRangerDefaults(other, 'agent')).toEqual({ requests: new Set(), limits: new Set() });
    expect(limitRangerDefaults(served, 'agent')).toEqual({
      requests: new Set(['cpu']),
      limits: new Set(['cpu', 'memory']),
    });
    expect(
      limitRangerDefaults({ metadata: { annotations: { [LIMIT_RANGER_ANNOTATION]: 'garbage' } } }, 'agent'),
    ).toEqual({
      requests: new Set(),
      limits: new Set(),
    });
  });

  it('compares envFrom with nil ≡ empty and Go zero values', () => {
    expect(envFromEqual(undefined, [])).toBe(true);
    expect(envFromEqual([{ configMapRef: { name: '' } }], [{ configMapRef: {} }])).toBe(true);
    expect(
      envFromEqual([{ configMapRef: { name: 'a' } }], [{ configMapRef: { name: 'a', optional: false } }]),
    ).toBe(false);
    expect(envFromEqual([{ secretRef: { name: 'a' } }], [{ configMapRef: { name: 'a' } }])).toBe(false);
  });
});

describe('failed hibernate rounds (noteFailedRounds, failedRoundHoldsVM)', () => {
  const pod = (uid: string, ann: Record<string, string>, phase = 'Running'): V1Pod => ({
    metadata: { name: 'demo-1', uid, annotations: ann },
    status: { phase },
  });
  const failed = {
    [Annotations.lifecycleState]: 'failed',
    [Annotations.lifecycleStateMessage]: 'push refused',
  };
  const inRound = pod('u1', { ...failed, [Annotations.hibernate]: 'true' });

  it('records a round vk reported failed, and keeps it while the same pod stays failed or retries (hibernating)', () => {
    const seen = noteFailedRounds(undefined, [inRound]);
    expect(seen).toEqual({ 'demo-1': { uid: 'u1', message: 'push refused' } });
    expect(noteFailedRounds(seen, [pod('u1', failed)])).toEqual(seen);
    expect(noteFailedRounds(seen, [pod('u1', { [Annotations.lifecycleState]: 'hibernating' })])).toEqual(
      seen,
    );
  });

  it('forgets it on any other state, another incarnation, phase Failed, or a pod no longer read', () => {
    const seen = noteFailedRounds(undefined, [inRound]);
    expect(noteFailedRounds(seen, [pod('u1', { [Annotations.lifecycleState]: 'ready' })])).toBeUndefined();
    expect(noteFailedRounds(seen, [pod('u2', failed)])).toBeUndefined();
    expect(noteFailedRounds(seen, [pod('u1', failed, 'Failed')])).toBeUndefined();
    expect(noteFailedRounds(seen, [])).toBeUndefined();
  });

  it('a failed lifecycle holds the VM only in a round, or after a recorded round on the same incarnation; never with phase Failed', () => {
    const seen = noteFailedRounds(undefined, [inRound]);
    expect(failedRoundHoldsVM(inRound, undefined)).toBe(true);
    expect(failedRoundHoldsVM(pod('u1', failed), seen)).toBe(true);
    expect(failedRoundHoldsVM(pod('u1', failed), undefined)).toBe(false);
    expect(failedRoundHoldsVM(pod('u2', failed), seen)).toBe(false);
    expect(failedRoundHoldsVM(pod('u1', failed, 'Failed'), seen)).toBe(false);
    expect(failedRoundHoldsVM(pod('u1', { [Annotations.lifecycleState]: 'ready' }), seen)).toBe(false);
  });
});
