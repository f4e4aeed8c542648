/**
 * Status roll-up, phase derivation, condition merge and the no-op diff (port of status_test.go,
 * docs/cocoonset.md#status-roll-up).
 */
import { describe, expect, it } from 'vitest';
import { Annotations } from '../../src/api/keys.js';
import type { CocoonSet } from '../../src/api/types.js';
import { classifyPods } from '../../src/cocoonset/classify.js';
import { buildAgentPod, buildToolboxPod } from '../../src/cocoonset/pods.js';
import {
  buildConditions,
  buildStatus,
  derivePhase,
  mergeConditions,
  planStatusWrite,
  statusEqual,
} from '../../src/cocoonset/status.js';
import { annotate, newCocoonSet, readyPod } from '../support/builders.js';

const T0 = Date.parse('2026-05-14T01:00:00Z');
const T1 = Date.parse('2026-05-14T02:30:15.900Z');

const withReplicas = (n: number) =>
  newCocoonSet('demo', (c) => {
    c.spec.agent.replicas = n;
  });

describe('buildStatus', () => {
  it('is Pending when there is no main', () => {
    expect(buildStatus(withReplicas(1), classifyPods([])).phase).toBe('Pending');
  });

  it('is Scaling when sub-agents are missing', () => {
    const cs = withReplicas(1);
    expect(buildStatus(cs, classifyPods([readyPod(buildAgentPod(cs, 0, '', ''))])).phase).toBe('Scaling');
  });

  it('is Running when all are Ready', () => {
    const cs = withReplicas(0);
    expect(buildStatus(cs, classifyPods([readyPod(buildAgentPod(cs, 0, '', ''))])).phase).toBe('Running');
  });

  it('reports agents with forkedFrom = the main VM name', () => {
    const cs = withReplicas(2);
    const s = buildStatus(
      cs,
      classifyPods([
        readyPod(buildAgentPod(cs, 0, '', '')),
        readyPod(buildAgentPod(cs, 1, 'vk-ns-demo-0', '')),
      ]),
    );
    expect([s.desiredAgents, s.readyAgents, s.agents!.length]).toEqual([3, 2, 2]);
    expect(s.agents![1]!.forkedFrom).toBe('vk-ns-demo-0');
  });

  it('uses the main VM name for forkedFrom even when the sub-agent annotation differs, and lists extras', () => {
    const cs = withReplicas(1);
    const sub = buildAgentPod(cs, 1, 'vk-ns-elsewhere-0', '');
    const extra = buildAgentPod(cs, 3, 'vk-ns-demo-0', '');
    const s = buildStatus(cs, classifyPods([buildAgentPod(cs, 0, '', ''), extra, sub]));
    expect(s.agents!.map((a) => [a.slot, a.role, a.forkedFrom])).toEqual([
      [0, 'main', undefined],
      [1, 'sub-agent', 'vk-ns-demo-0'],
      [3, 'sub-agent', 'vk-ns-demo-0'],
    ]);
  });

  it('derives agent status from the pod (vmName, vmID, ip, phase)', () => {
    const cs = withReplicas(0);
    const main = annotate(buildAgentPod(cs, 0, '', ''), {
      [Annotations.vmID]: 'qemu-1',
      [Annotations.ip]: '10.0.0.1',
    });
    main.status = { phase: 'Running' };
    expect(buildStatus(cs, classifyPods([main])).agents![0]).toEqual({
      slot: 0,
      role: 'main',
      podName: 'demo-0',
      vmName: 'vk-ns-demo-0',
      vmID: 'qemu-1',
      ip: '10.0.0.1',
      phase: 'Running',
    });
  });

  it('is Scaling while a toolbox is pending', () => {
    const cs = newCocoonSet('demo', (c) => {
      c.spec.toolboxes = [{ name: 'tb' }];
    });
    const tb = buildToolboxPod(cs, { name: 'tb' });
    tb.status = { phase: 'Pending' };
    const s = buildStatus(cs, classifyPods([readyPod(buildAgentPod(cs, 0, '', '')), tb]));
    expect([s.phase, s.desiredToolboxes, s.readyToolboxes]).toEqual(['Scaling', 1, 0]);
  });

  it('reports toolboxes sorted by name with their connection type', () => {
    const cs = newCocoonSet('demo', (c) => {
      c.spec.toolboxes = [
        { name: 'win', os: 'windows' },
        { name: 'vnc', mode: 'static', vncPort: 5901 },
        { name: 'adb', os: 'android', connType: 'ssh' },
      ];
    });
    const s = buildStatus(cs, classifyPods(cs.spec.toolboxes!.map((t) => buildToolboxPod(cs, t))));
    expect(s.toolboxes!.map((t) => [t.name, t.connType, t.vncPort])).toEqual([
      ['adb', 'ssh', undefined],
      ['vnc', 'vnc', 5901],
      ['win', 'rdp', undefined],
    ]);
  });

  it('a forced phase wins and observedGeneration is the generation', () => {
    const cs = withReplicas(0);
    cs.metadata.generation = 7;
    const s = buildStatus(cs, classifyPods([readyPod(buildAgentPod(cs, 0, '', ''))]), 'Suspended');
    expect([s.phase, s.observedGeneration]).toEqual(['Suspended', 7]);
    expect(s.conditions!.find((c) => c.type === 'Ready')!.status).toBe('True');
    expect(s.conditions!.find((c) => c.type === 'Progressing')).toMatchObject({
      status: 'False',
      reason: 'Stable',
    });
  });

  it('two builds of the same observation are equal (no timestamps); Pending vs Running differ', () => {
    const cs = withReplicas(0);
    const a = buildStatus(cs, classifyPods([]));
    const b = buildStatus(cs, classifyPods([]));
    expect(a.phase).toBe('Pending');
    expect(statusEqual(a, b)).toBe(true);
    expect(statusEqual(a, buildStatus(cs, classifyPods([readyPod(buildAgentPod(cs, 0, '', ''))])))).toBe(
      false,
    );
  });
});

describe('derivePhase and buildConditions', () => {
  it('derives Pending / Scaling / Running', () => {
    expect(derivePhase(false, 0, 1, 0, 0)).toBe('Pending');
    expect(derivePhase(true, 1, 2, 0, 0)).toBe('Scaling');
    expect(derivePhase(true, 1, 1, 0, 1)).toBe('Scaling');
    expect(derivePhase(true, 1, 1, 1, 1)).toBe('Running');
  });

  it('Ready=True when all agents and toolboxes are ready', () => {
    expect(buildConditions(1, 1, 0, 0, 'Running', 4)).toEqual([
      {
        type: 'Ready',
        status: 'True',
        reason: 'AllAgentsReady',
        message: '1/1 agents ready, 0/0 toolboxes ready',
        observedGeneration: 4,
      },
      { type: 'Progressing', status: 'False', reason: 'Stable', message: 'Running', observedGeneration: 4 },
    ]);
  });

  it('Ready=False while toolboxes are pending, Progressing while Scaling', () => {
    const [ready, progressing] = buildConditions(1, 1, 0, 1, 'Scaling', 1);
    expect([ready!.status, ready!.reason, progressing!.status, progressing!.reason]).toEqual([
      'False',
      'AgentsNotReady',
      'True',
      'Reconciling',
    ]);
  });

  it('Ready=False when more agents are ready than desired (extras)', () => {
    expect(buildConditions(3, 2, 0, 0, 'Running', 1)[0]!.status).toBe('False');
  });
});

describe('condition merge and the no-op status diff', () => {
  it('stamps new conditions, keeps timestamps while status holds, moves them on a flip', () => {
    const first = mergeConditions(undefined, buildConditions(0, 1, 0, 0, 'Pending', 1), T0);
    expect(first.map((c) => c.lastTransitionTime)).toEqual(['2026-05-14T01:00:00Z', '2026-05-14T01:00:00Z']);
    const same = mergeConditions(first, buildConditions(0, 2, 0, 0, 'Scaling', 2), T1);
    expect(same.map((c) => c.lastTransitionTime)).toEqual(['2026-05-14T01:00:00Z', '2026-05-14T01:00:00Z']);
    expect(same[0]!.message).toBe('0/2 agents ready, 0/0 toolboxes ready');
    expect(same[0]!.observedGeneration).toBe(2);
    const flipped = mergeConditions(same, buildConditions(1, 1, 0, 0, 'Running', 2), T1);
    expect(flipped.map((c) => c.lastTransitionTime)).toEqual([
      '2026-05-14T02:30:15Z',
      '2026-05-14T02:30:15Z',
    ]);
  });

  it('keeps foreign condition types and their order', () => {
    const existing = [
      {
        type: 'Other',
        status: 'True' as const,
        reason: 'X',
        message: '',
        lastTransitionTime: '2020-01-01T00:00:00Z',
      },
    ];
    const merged = mergeConditions(existing, buildConditions(0, 1, 0, 0, 'Pending', 1), T0);
    expect(merged.map((c) => c.type)).toEqual(['Other', 'Ready', 'Progressing']);
    expect(existing).toHaveLength(1);
  });

  it('writes nothing when the same observation repeats', () => {
    const cs: CocoonSet = withReplicas(0);
    const main = readyPod(buildAgentPod(cs, 0, '', ''));
    const w = planStatusWrite(cs, buildStatus(cs, classifyPods([main])), T0)!;
    expect(w).not.toBeNull();
    cs.status = JSON.parse(JSON.stringify(w.status));
    expect(planStatusWrite(cs, buildStatus(cs, classifyPods([main])), T1)).toBeNull();
  });

  it('treats omitted and zero fields as equal and times as instants', () => {
    const cs = withReplicas(0);
    const w = planStatusWrite(cs, buildStatus(cs, classifyPods([])), T0)!;
    const served = JSON.parse(JSON.stringify(w.status));
    delete served.readyAgents;
    served.agents = [];
    served.conditions[0].lastTransitionTime = '2026-05-14T03:00:00+02:00';
    cs.status = served;
    expect(planStatusWrite(cs, buildStatus(cs, classifyPods([])), T1)).toBeNull();
  });

  it('patches the whole status with null for emptied lists', () => {
    const cs = withReplicas(0);
    cs.metadata.generation = 2;
    const main = readyPod(buildAgentPod(cs, 0, '', ''));
    cs.status = planStatusWrite(cs, buildStatus(cs, classifyPods([main])), T0)!.status;
    const w = planStatusWrite(cs, buildStatus(cs, classifyPods([])), T1)!;
    expect(w.patch.status).toMatchObject({
      observedGeneration: 2,
      phase: 'Pending',
      readyAgents: 0,
      desiredAgents: 1,
      readyToolboxes: 0,
      desiredToolboxes: 0,
      agents: null,
      toolboxes: null,
    });
    expect(
      (w.patch.status.conditions as { lastTransitionTime: string }[]).map((c) => c.lastTransitionTime),
    ).toEqual(['2026-05-14T02:30:15Z', '2026-05-14T02:30:15Z']);
  });
});
