import type { V1Pod } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { Annotations, Labels, LifecycleStates, Roles, VK_PROVIDER_TAINT } from '../../src/api/keys.js';
import {
  cpuClassRejection,
  type Intent,
  judgeIntent,
  operatorFingerprint,
  parseImageRef,
  podFitsNode,
  podRunningForDeletion,
  providerBackoffMs,
  roleForPod,
  seedIntent,
  shouldSnapshotVM,
  toleratesTaint,
  truncateBytes,
} from '../vksim/rules.js';

const intent = (state: Intent['state'], gen: number, uid = 'u1', message = ''): Intent => ({
  uid,
  state,
  gen,
  message,
});

describe('judgeIntent (docs/wire-contract.md#vk-cocoon)', () => {
  it('accepts the first write for the tracked incarnation', () => {
    expect(judgeIntent(undefined, intent('creating', 1), 'u1')).toBe('accept');
  });

  it('drops a write for another pod incarnation', () => {
    expect(judgeIntent(intent('creating', 1), intent('ready', 1, 'old'), 'u1')).toBe('old-incarnation');
  });

  it('drops a write with a lower generation than the current intent', () => {
    expect(judgeIntent(intent('hibernating', 5), intent('hibernated', 4), 'u1')).toBe('lower-generation');
  });

  it('keeps failed sticky against late ready and hibernated at the same generation', () => {
    const failed = intent('failed', 3, 'u1', 'push failed');
    expect(judgeIntent(failed, intent('ready', 3), 'u1')).toBe('sticky-failed');
    expect(judgeIntent(failed, intent('hibernated', 3), 'u1')).toBe('sticky-failed');
  });

  it('lets a new attempt (creating, hibernating) or another failed replace failed at the same generation', () => {
    const failed = intent('failed', 3, 'u1', 'x');
    expect(judgeIntent(failed, intent('creating', 3), 'u1')).toBe('accept');
    expect(judgeIntent(failed, intent('hibernating', 3), 'u1')).toBe('accept');
    expect(judgeIntent(failed, intent('failed', 3, 'u1', 'y'), 'u1')).toBe('accept');
  });

  it('lets ready replace failed once the generation moved on', () => {
    expect(judgeIntent(intent('failed', 3), intent('ready', 4), 'u1')).toBe('accept');
  });

  it('treats an intent of an older incarnation as absent', () => {
    expect(judgeIntent(intent('failed', 9, 'old'), intent('ready', 1, 'u1'), 'u1')).toBe('accept');
  });
});

describe('seedIntent', () => {
  it('re-seeds state, generation and message from the annotations', () => {
    const pod = {
      metadata: {
        uid: 'u1',
        annotations: {
          [Annotations.lifecycleState]: 'failed',
          [Annotations.lifecycleObservedGeneration]: '7',
          [Annotations.lifecycleStateMessage]: 'boom',
        },
      },
    };
    expect(seedIntent(pod)).toEqual({ uid: 'u1', state: 'failed', gen: 7, message: 'boom' });
  });

  it('ignores unknown states and the message of non-failed states', () => {
    expect(
      seedIntent({ metadata: { uid: 'u', annotations: { [Annotations.lifecycleState]: 'Failed' } } }),
    ).toBe(undefined);
    const ready = seedIntent({
      metadata: {
        uid: 'u',
        annotations: {
          [Annotations.lifecycleState]: LifecycleStates.ready,
          [Annotations.lifecycleStateMessage]: 'm',
        },
      },
    });
    expect(ready).toEqual({ uid: 'u', state: 'ready', gen: 0, message: '' });
  });
});

describe('roleForPod and shouldSnapshotVM (cocoon-common meta.RoleForPod / ShouldSnapshotVM)', () => {
  const owned = (ns: string, cs: string): Pick<V1Pod, 'metadata'> => ({
    metadata: {
      namespace: ns,
      ownerReferences: [{ apiVersion: 'cocoonset.cocoonstack.io/v1', kind: 'CocoonSet', name: cs, uid: 'x' }],
    },
  });

  it('derives main, sub-agent and toolbox from the owner and the VM-name slot', () => {
    expect(roleForPod(owned('ns', 'demo'), 'vk-ns-demo-0')).toBe(Roles.main);
    expect(roleForPod(owned('ns', 'demo'), 'vk-ns-demo-2')).toBe(Roles.subAgent);
    expect(roleForPod(owned('ns', 'demo'), 'vk-ns-demo-tb')).toBe(Roles.toolbox);
    expect(roleForPod(owned('ns', 'demo'), 'vk-ns-demo-db-0')).toBe(Roles.toolbox);
  });

  it('treats a pod without a CocoonSet owner as a toolbox', () => {
    expect(roleForPod({ metadata: { namespace: 'ns' } }, 'vk-ns-demo-0')).toBe(Roles.toolbox);
  });

  it('snapshots per policy: unset/always → yes, main-only → main only, never → no', () => {
    expect(shouldSnapshotVM(undefined, Roles.toolbox)).toBe(true);
    expect(shouldSnapshotVM('always', Roles.subAgent)).toBe(true);
    expect(shouldSnapshotVM('main-only', Roles.main)).toBe(true);
    expect(shouldSnapshotVM('main-only', Roles.subAgent)).toBe(false);
    expect(shouldSnapshotVM('main-only', Roles.toolbox)).toBe(false);
    expect(shouldSnapshotVM('never', Roles.main)).toBe(false);
  });
});

describe('placement', () => {
  const labels = { [Labels.nodePool]: 'default', [Labels.hostname]: 'cocoon-pool' };

  it('tolerates the provider taint with Exists on the key (operator pods) but not without a toleration', () => {
    expect(toleratesTaint([{ key: VK_PROVIDER_TAINT.key, operator: 'Exists' }], VK_PROVIDER_TAINT)).toBe(
      true,
    );
    expect(toleratesTaint([{ operator: 'Exists' }], VK_PROVIDER_TAINT)).toBe(true);
    expect(toleratesTaint([], VK_PROVIDER_TAINT)).toBe(false);
    expect(toleratesTaint(undefined, VK_PROVIDER_TAINT)).toBe(false);
  });

  it('honours Equal value and effect of a toleration', () => {
    const t = VK_PROVIDER_TAINT;
    expect(toleratesTaint([{ key: t.key, operator: 'Equal', value: 'cocoon' }], t)).toBe(true);
    expect(toleratesTaint([{ key: t.key, value: 'other' }], t)).toBe(false);
    expect(toleratesTaint([{ key: t.key, operator: 'Exists', effect: 'NoExecute' }], t)).toBe(false);
  });

  it('matches nodeSelector against node labels', () => {
    expect(
      podFitsNode({ spec: { containers: [], nodeSelector: { [Labels.nodePool]: 'default' } } }, 'n', labels),
    ).toBe(true);
    expect(
      podFitsNode({ spec: { containers: [], nodeSelector: { [Labels.nodePool]: 'gpu' } } }, 'n', labels),
    ).toBe(false);
    expect(
      podFitsNode(
        { spec: { containers: [], nodeSelector: { [Labels.snapshotCPUClass]: 'zen4' } } },
        'cocoon-pool',
        labels,
      ),
    ).toBe(false);
  });

  it('matches the required hostname affinity the operator puts on a pinned main', () => {
    const pinned = (host: string): Pick<V1Pod, 'spec'> => ({
      spec: {
        containers: [],
        affinity: {
          nodeAffinity: {
            requiredDuringSchedulingIgnoredDuringExecution: {
              nodeSelectorTerms: [
                { matchExpressions: [{ key: Labels.hostname, operator: 'In', values: [host] }] },
              ],
            },
          },
        },
      },
    });
    expect(podFitsNode(pinned('cocoon-pool'), 'cocoon-pool', labels)).toBe(true);
    expect(podFitsNode(pinned('node-b'), 'cocoon-pool', labels)).toBe(false);
  });
});

describe('cpuClassRejection (docs/wire-contract.md#on-pods)', () => {
  const pod = (cls?: string, phase?: string): Pick<V1Pod, 'metadata' | 'spec' | 'status'> => ({
    metadata: { namespace: 'ns', name: 'p' },
    spec: { containers: [], nodeSelector: cls ? { [Labels.snapshotCPUClass]: cls } : {} },
    status: phase ? { phase } : {},
  });
  it('allows unclassified pods anywhere and exact matches', () => {
    expect(cpuClassRejection(pod(), '')).toBeUndefined();
    expect(cpuClassRejection(pod(), 'zen4')).toBeUndefined();
    expect(cpuClassRejection(pod('zen4'), 'zen4')).toBeUndefined();
  });
  it('rejects a classified pod on an unclassified or different node, except terminal pods', () => {
    expect(cpuClassRejection(pod('zen4'), '')).toMatch(/no CPU class/);
    expect(cpuClassRejection(pod('zen4'), 'icelake')).toMatch(/"zen4".*"icelake"/);
    expect(cpuClassRejection(pod('zen4', 'Failed'), '')).toBeUndefined();
  });
});

describe('framework details', () => {
  it('counts a pod as running only with a container neither terminated nor waiting', () => {
    expect(podRunningForDeletion({ status: {} })).toBe(false);
    expect(podRunningForDeletion({ status: { containerStatuses: [] } })).toBe(false);
    const cs = (state: object) => ({
      name: 'agent',
      image: 'i',
      imageID: '',
      ready: false,
      restartCount: 0,
      state,
    });
    expect(podRunningForDeletion({ status: { containerStatuses: [cs({ running: {} })] } })).toBe(true);
    expect(podRunningForDeletion({ status: { containerStatuses: [cs({ waiting: {} })] } })).toBe(false);
    expect(
      podRunningForDeletion({ status: { containerStatuses: [cs({ terminated: { exitCode: 0 } })] } }),
    ).toBe(false);
  });

  it('backs off 5 ms doubling up to the cap', () => {
    expect([1, 2, 3, 4].map((n) => providerBackoffMs(n))).toEqual([5, 10, 20, 40]);
    expect(providerBackoffMs(0)).toBe(0);
    expect(providerBackoffMs(20, 2000)).toBe(2000);
    expect(providerBackoffMs(200, 1500)).toBe(1500);
  });

  it('truncates by UTF-8 bytes without splitting characters', () => {
    expect(truncateBytes('abc', 5)).toBe('abc');
    expect(truncateBytes('héllo', 2)).toBe('h');
    expect(Buffer.byteLength(truncateBytes('€'.repeat(400), 512))).toBeLessThanOrEqual(512);
  });

  it('ignores the simulator’s own annotation writes in the operator fingerprint', () => {
    const base = {
      metadata: { uid: 'u', annotations: { [Annotations.hibernate]: 'true' } },
      spec: { containers: [] },
    };
    const own = {
      ...base,
      metadata: {
        ...base.metadata,
        annotations: { ...base.metadata.annotations, [Annotations.lifecycleState]: 'ready' },
      },
    };
    const operator = { ...base, metadata: { ...base.metadata, annotations: {} } };
    expect(operatorFingerprint(own)).toBe(operatorFingerprint(base));
    expect(operatorFingerprint(operator)).not.toBe(operatorFingerprint(base));
  });

  it('parses registry-relative image references', () => {
    expect(parseImageRef('ubuntu:24.04', '127.0.0.1:5000')).toEqual({ repo: 'ubuntu', tag: '24.04' });
    expect(parseImageRef('team/base', '127.0.0.1:5000')).toEqual({ repo: 'team/base', tag: 'latest' });
    expect(parseImageRef('127.0.0.1:5000/team/base:v1', '127.0.0.1:5000')).toEqual({
      repo: 'team/base',
      tag: 'v1',
    });
  });
});
