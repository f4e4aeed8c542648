/**
 * The CocoonHibernation rules of src/hibernation/rules.ts pinned one by one, without a server: routing
 * (reverse desire), completion gates, Pending/Failed/phase status patches, deadlines, conflict condition,
 * the deletion holder rule and the Go-compatible formatting helpers. Each table row is one rule case.
 */
import { describe, expect, it } from 'vitest';
import { Annotations, CONDITION_CONFLICT, CONDITION_READY } from '../../src/api/keys.js';
import type { PodObservation } from '../../src/api/observe.js';
import {
  applyStatusPatch,
  type CRView,
  conflictPatch,
  conflictWaitPatch,
  deadlineExceeded,
  deadlineOf,
  goDuration,
  goQuote,
  HIBERNATE_TIMEOUT_MS,
  heldByAnother,
  hibernateAnnotated,
  hibernateGateOpen,
  markFailedPatch,
  markPendingPatch,
  podWaitPatch,
  readyConditionFor,
  readyTransitionMs,
  rfc3339,
  route,
  type Status,
  setCondition,
  setPhasePatch,
  WAKE_TIMEOUT_MS,
  wakeGateOpen,
} from '../../src/hibernation/rules.js';

const T0 = Date.UTC(2026, 0, 1, 12, 0, 0); // 2026-01-01T12:00:00Z
const T0_S = '2026-01-01T12:00:00Z';
const LATER = T0 + 90_000;
const LATER_S = '2026-01-01T12:01:30Z';

function pod(annotations: Record<string, string>, extra: Partial<PodObservation> = {}): PodObservation {
  return { exists: true, namespace: 'ns', name: 'demo-0', annotations, ...extra };
}

function ready(status: 'True' | 'False', reason: string, message: string, ltt = T0_S, gen = 1) {
  return { type: CONDITION_READY, status, reason, message, observedGeneration: gen, lastTransitionTime: ltt };
}

function cr(status?: Status, generation = 1): CRView {
  return {
    name: 'hib',
    namespace: 'ns',
    uid: 'u1',
    generation,
    podRef: 'demo-0',
    desire: 'Hibernate',
    status,
  };
}

describe('route: reverse desire finishes the in-flight transition first', () => {
  it.each([
    ['Hibernate', undefined, 'hibernate'],
    ['Hibernate', '', 'hibernate'],
    ['Hibernate', 'Pending', 'hibernate'],
    ['Hibernate', 'Hibernating', 'hibernate'],
    ['Hibernate', 'Hibernated', 'hibernate'],
    ['Hibernate', 'Active', 'hibernate'],
    ['Hibernate', 'Failed', 'hibernate'],
    ['Hibernate', 'Waking', 'wake'],
    ['Wake', undefined, 'wake'],
    ['Wake', 'Pending', 'wake'],
    ['Wake', 'Waking', 'wake'],
    ['Wake', 'Active', 'wake'],
    ['Wake', 'Hibernated', 'wake'],
    ['Wake', 'Failed', 'wake'],
    ['Wake', 'Hibernating', 'hibernate'],
  ])('desire %s in phase %s routes to %s', (desire, phase, path) => {
    expect(route(desire, phase)).toBe(path);
  });

  it.each([
    ['Sleep', { unknown: 'Sleep' }],
    ['hibernate', { unknown: 'hibernate' }],
    ['', { unknown: '' }],
    [undefined, { unknown: '' }],
  ])('an unknown desire %s is reported as such', (desire, out) => {
    expect(route(desire, 'Hibernating')).toEqual(out);
  });
});

describe('gates', () => {
  it.each([
    [{ [Annotations.hibernate]: 'true' }, true],
    [{ [Annotations.hibernate]: 'True' }, false],
    [{ [Annotations.hibernate]: '1' }, false],
    [{ [Annotations.hibernate]: '' }, false],
    [{}, false],
  ])('hibernate annotation %j counts as set: %s', (ann, out) => {
    expect(hibernateAnnotated(pod(ann))).toBe(out);
  });

  it.each([
    ['hibernated, no generations', { [Annotations.lifecycleState]: 'hibernated' }, true],
    [
      'hibernated, observed = stamp',
      {
        [Annotations.lifecycleState]: 'hibernated',
        [Annotations.cocoonSetGeneration]: '3',
        [Annotations.lifecycleObservedGeneration]: '3',
      },
      true,
    ],
    [
      'hibernated, observed > stamp',
      {
        [Annotations.lifecycleState]: 'hibernated',
        [Annotations.cocoonSetGeneration]: '3',
        [Annotations.lifecycleObservedGeneration]: '4',
      },
      true,
    ],
    [
      'hibernated, observed < stamp (an older round)',
      {
        [Annotations.lifecycleState]: 'hibernated',
        [Annotations.cocoonSetGeneration]: '3',
        [Annotations.lifecycleObservedGeneration]: '2',
      },
      false,
    ],
    [
      'hibernated, stamp set, observed missing',
      { [Annotations.lifecycleState]: 'hibernated', [Annotations.cocoonSetGeneration]: '1' },
      false,
    ],
    [
      'hibernated, unparsable stamp reads as 0',
      { [Annotations.lifecycleState]: 'hibernated', [Annotations.cocoonSetGeneration]: 'x' },
      true,
    ],
    ['hibernating', { [Annotations.lifecycleState]: 'hibernating' }, false],
    ['ready', { [Annotations.lifecycleState]: 'ready' }, false],
    ['no lifecycle state', {}, false],
  ])('hibernate gate: %s → %s', (_what, ann, open) => {
    expect(hibernateGateOpen(pod(ann))).toBe(open);
  });

  it.each([
    ['running with a VM id', true, { [Annotations.vmID]: 'vm-1' }, true],
    ['running without a VM id', true, {}, false],
    ['running with an empty VM id', true, { [Annotations.vmID]: '' }, false],
    ['not running with a VM id', false, { [Annotations.vmID]: 'vm-1' }, false],
    ['running unknown', undefined, { [Annotations.vmID]: 'vm-1' }, false],
  ])('wake gate: %s → %s', (_what, running, ann, open) => {
    expect(wakeGateOpen(pod(ann, { containerRunning: running }))).toBe(open);
  });
});

describe('deadlines: Ready.lastTransitionTime + timeout, strictly exceeded, only in their phase', () => {
  const hibernating: Status = {
    phase: 'Hibernating',
    conditions: [ready('False', 'Pending', 'Hibernating')],
  };
  const waking: Status = { phase: 'Waking', conditions: [ready('False', 'Pending', 'Waking')] };

  it('are 3 min for hibernate and 5 min for wake', () => {
    expect(HIBERNATE_TIMEOUT_MS).toBe(180_000);
    expect(WAKE_TIMEOUT_MS).toBe(300_000);
  });

  it.each([
    ['hibernating', hibernating, 'Hibernating', HIBERNATE_TIMEOUT_MS, T0 + 180_000],
    ['waking', waking, 'Waking', WAKE_TIMEOUT_MS, T0 + 300_000],
    ['another phase', hibernating, 'Waking', WAKE_TIMEOUT_MS, undefined],
    ['no status', undefined, 'Hibernating', HIBERNATE_TIMEOUT_MS, undefined],
    [
      'no Ready condition',
      { phase: 'Hibernating' } as Status,
      'Hibernating',
      HIBERNATE_TIMEOUT_MS,
      undefined,
    ],
    [
      'unparsable transition time',
      { phase: 'Hibernating', conditions: [ready('False', 'Pending', 'x', 'not a time')] } as Status,
      'Hibernating',
      HIBERNATE_TIMEOUT_MS,
      undefined,
    ],
  ] as const)('deadline while %s', (_what, status, phase, timeout, deadline) => {
    expect(deadlineOf(status, phase, timeout)).toBe(deadline);
  });

  it.each([
    [T0 + 180_000 - 1, false],
    [T0 + 180_000, false], // now − LTT > timeout: equal is not exceeded
    [T0 + 180_001, true],
  ])('at %i the hibernate deadline is exceeded: %s', (now, out) => {
    expect(deadlineExceeded(hibernating, 'Hibernating', HIBERNATE_TIMEOUT_MS, now)).toBe(out);
  });

  it('readyTransitionMs ignores a zero or missing time', () => {
    expect(readyTransitionMs(hibernating)).toBe(T0);
    expect(readyTransitionMs({ conditions: [ready('False', 'P', 'm', '1970-01-01T00:00:00Z')] })).toBe(
      undefined,
    );
    expect(readyTransitionMs({ conditions: [] })).toBe(undefined);
    expect(readyTransitionMs(undefined)).toBe(undefined);
  });
});

describe('setPhase', () => {
  it.each([
    ['Hibernated', 'True', 'Done'],
    ['Active', 'True', 'Done'],
    ['Hibernating', 'False', 'Pending'],
    ['Waking', 'False', 'Pending'],
    ['Pending', 'False', 'Pending'],
    ['Failed', 'False', 'Failed'],
  ] as const)('phase %s maps to Ready=%s reason %s, message the phase', (phase, status, reason) => {
    expect(readyConditionFor(phase, 4)).toEqual({
      type: CONDITION_READY,
      status,
      reason,
      message: phase,
      observedGeneration: 4,
    });
  });

  it('is a no-op when phase, vmName and observedGeneration already match', () => {
    const st: Status = { phase: 'Hibernated', vmName: 'vm', observedGeneration: 1, conditions: [] };
    expect(setPhasePatch(cr(st), 'Hibernated', 'vm', LATER)).toBeNull();
  });

  it.each([
    ['another vmName', { phase: 'Hibernated', vmName: 'old', observedGeneration: 1 }],
    ['another generation', { phase: 'Hibernated', vmName: 'vm', observedGeneration: 0 }],
    ['another phase', { phase: 'Hibernating', vmName: 'vm', observedGeneration: 1 }],
  ] as const)('writes on %s', (_what, st) => {
    expect(setPhasePatch(cr({ ...st, conditions: [] }), 'Hibernated', 'vm', LATER)).not.toBeNull();
  });

  it('entering Hibernating restarts the clock even when Ready stays False (Pending → Hibernating)', () => {
    const st: Status = {
      phase: 'Pending',
      observedGeneration: 1,
      conditions: [ready('False', 'Pending', 'x')],
    };
    const p = setPhasePatch(cr(st), 'Hibernating', 'vm', LATER)!;
    expect(p.status).toMatchObject({ phase: 'Hibernating', vmName: 'vm', observedGeneration: 1 });
    expect(p.status.conditions).toEqual([ready('False', 'Pending', 'Hibernating', LATER_S)]);
  });

  it('staying in Hibernating keeps the attempt start (a new vmName does not restart the clock)', () => {
    const st: Status = {
      phase: 'Hibernating',
      vmName: 'old',
      conditions: [ready('False', 'Pending', 'Hibernating')],
    };
    expect(setPhasePatch(cr(st), 'Hibernating', 'vm', LATER)!.status.conditions![0]!.lastTransitionTime).toBe(
      T0_S,
    );
  });

  it('Failed → Waking (a retry) restarts the clock; Hibernating → Hibernated flips Ready and stamps now', () => {
    const failed: Status = { phase: 'Failed', conditions: [ready('False', 'Failed', 'boom')] };
    expect(setPhasePatch(cr(failed), 'Waking', 'vm', LATER)!.status.conditions![0]!.lastTransitionTime).toBe(
      LATER_S,
    );
    const hib: Status = { phase: 'Hibernating', conditions: [ready('False', 'Pending', 'Hibernating')] };
    expect(setPhasePatch(cr(hib), 'Hibernated', 'vm', LATER)!.status.conditions).toEqual([
      ready('True', 'Done', 'Hibernated', LATER_S),
    ]);
  });
});

describe('markPending', () => {
  it.each(['Hibernated', 'Waking'] as const)('never demotes %s', (phase) => {
    expect(markPendingPatch(cr({ phase, conditions: [] }), 'pod missing', LATER)).toBeNull();
  });

  it('is a no-op when already Pending at this generation with the same message', () => {
    const st: Status = {
      phase: 'Pending',
      observedGeneration: 1,
      conditions: [ready('False', 'Pending', 'm')],
    };
    expect(markPendingPatch(cr(st), 'm', LATER)).toBeNull();
    expect(markPendingPatch(cr(st, 2), 'm', LATER)).not.toBeNull();
    expect(markPendingPatch(cr(st), 'other', LATER)).not.toBeNull();
  });

  it('sets Pending with the message and leaves vmName alone; keeps LTT when Ready stays False', () => {
    const st: Status = {
      phase: 'Hibernating',
      vmName: 'vm',
      observedGeneration: 1,
      conditions: [ready('False', 'Pending', 'Hibernating')],
    };
    const p = markPendingPatch(cr(st), 'pod ns/demo-0 not yet present', LATER)!;
    expect(p.status).toEqual({
      observedGeneration: 1,
      phase: 'Pending',
      conditions: [ready('False', 'Pending', 'pod ns/demo-0 not yet present', T0_S)],
    });
    expect('vmName' in p.status).toBe(false);
  });

  it('demotes Active (Ready True → False stamps now)', () => {
    const st: Status = { phase: 'Active', conditions: [ready('True', 'Done', 'Active')] };
    expect(markPendingPatch(cr(st), 'm', LATER)!.status.conditions![0]!.lastTransitionTime).toBe(LATER_S);
  });
});

describe('markFailed', () => {
  it('keeps the attempt start as lastTransitionTime (Ready stays False)', () => {
    const st: Status = { phase: 'Hibernating', conditions: [ready('False', 'Pending', 'Hibernating')] };
    expect(markFailedPatch(cr(st), 'hibernate not confirmed within 3m0s', LATER)).toEqual({
      status: {
        observedGeneration: 1,
        phase: 'Failed',
        conditions: [ready('False', 'Failed', 'hibernate not confirmed within 3m0s', T0_S)],
      },
    });
  });

  it('is a no-op when the status already says exactly this', () => {
    const st: Status = {
      phase: 'Failed',
      observedGeneration: 1,
      conditions: [ready('False', 'Failed', 'm')],
    };
    expect(markFailedPatch(cr(st), 'm', LATER)).toBeNull();
    expect(markFailedPatch(cr(st), 'other', LATER)).not.toBeNull();
    expect(markFailedPatch(cr(st, 2), 'm', LATER)).not.toBeNull();
  });
});

describe('DesireConflict condition (ours)', () => {
  const conflict = (msg: string) => ({
    type: CONDITION_CONFLICT,
    status: 'True' as const,
    reason: 'AnotherCRHoldsVM',
    message: msg,
    observedGeneration: 1,
    lastTransitionTime: T0_S,
  });

  it('adds it with the message, leaving Ready as it is', () => {
    const st: Status = { phase: 'Hibernated', conditions: [ready('True', 'Done', 'Hibernated')] };
    expect(conflictPatch(cr(st), 'held', T0)).toEqual({
      status: { conditions: [ready('True', 'Done', 'Hibernated'), conflict('held')] },
    });
  });

  it('is a no-op when it already says so, and when there is none to remove', () => {
    expect(conflictPatch(cr({ conditions: [conflict('held')] }), 'held', LATER)).toBeNull();
    expect(
      conflictPatch(cr({ conditions: [ready('True', 'Done', 'Hibernated')] }), undefined, LATER),
    ).toBeNull();
  });

  it('a CR with no phase yet also shows Pending with the conflict message (found by a new-user run: PHASE was blank)', () => {
    expect(conflictWaitPatch(cr(undefined), 'held', T0)).toEqual({
      status: {
        observedGeneration: 1,
        phase: 'Pending',
        conditions: [ready('False', 'Pending', 'held'), conflict('held')],
      },
    });
    // A CR with a phase keeps it; a condition already set writes nothing (replay of older histories).
    const st: Status = { phase: 'Hibernated', conditions: [ready('True', 'Done', 'Hibernated')] };
    expect(conflictWaitPatch(cr(st), 'held', T0)).toEqual(conflictPatch(cr(st), 'held', T0));
    expect(conflictWaitPatch(cr({ conditions: [conflict('held')] }), 'held', LATER)).toBeNull();
  });

  it('a loser whose phase says its old desire is done (Hibernated, desire edited to Wake) keeps the phase but is no longer Ready, at the new generation (deliberate: Ready=True stayed for the old desire); once said, nothing more is written', () => {
    const st: Status = {
      phase: 'Hibernated',
      observedGeneration: 1,
      conditions: [ready('True', 'Done', 'Hibernated')],
    };
    const patch = conflictWaitPatch(cr(st, 2), 'held', LATER, true);
    expect(patch).toEqual({
      status: {
        observedGeneration: 2,
        conditions: [
          ready('False', 'Pending', 'held', LATER_S, 2),
          { ...conflict('held'), observedGeneration: 2, lastTransitionTime: LATER_S },
        ],
      },
    });
    const after = applyStatusPatch(cr(st, 2), patch!);
    expect(conflictWaitPatch(after, 'held', LATER + 1000, true)).toBeNull();
    // Active the same; Failed and Pending keep their Ready; runs recorded before the patch keep Ready.
    const active: Status = {
      phase: 'Active',
      observedGeneration: 1,
      conditions: [ready('True', 'Done', 'Active')],
    };
    expect(conflictWaitPatch(cr(active, 2), 'held', LATER, true)?.status.conditions?.[0]).toMatchObject({
      status: 'False',
      reason: 'Pending',
      message: 'held',
    });
    // A Pending loser's Ready follows the conflict's message (the holder's reason changed: in flight → older).
    const pending: Status = {
      phase: 'Pending',
      observedGeneration: 1,
      conditions: [ready('False', 'Pending', 'held, in flight'), conflict('held, in flight')],
    };
    expect(conflictWaitPatch(cr(pending), 'held, older', LATER, true)).toEqual({
      status: {
        observedGeneration: 1,
        conditions: [
          ready('False', 'Pending', 'held, older'),
          { ...conflict('held, older'), lastTransitionTime: T0_S },
        ],
      },
    });
    const failed: Status = { phase: 'Failed', conditions: [ready('False', 'Failed', 'x')] };
    expect(conflictWaitPatch(cr(failed), 'held', LATER, true)).toEqual(
      conflictPatch(cr(failed), 'held', LATER),
    );
    expect(conflictWaitPatch(cr(st, 2), 'held', LATER, false)).toEqual(
      conflictPatch(cr(st, 2), 'held', LATER),
    );
  });

  it('a loser whose done phase the holder undoes (Hibernated while the holder wakes the VM, Active while it hibernates it) goes Pending with the conflict (deliberate, loser-phase-follows-holder: it said Hibernated on a running VM); a done phase the holder keeps stays', () => {
    const hibernated: Status = {
      phase: 'Hibernated',
      observedGeneration: 1,
      conditions: [ready('True', 'Done', 'Hibernated')],
    };
    const patch = conflictWaitPatch(cr(hibernated), 'held', LATER, true, 'wake');
    expect(patch).toEqual({
      status: {
        observedGeneration: 1,
        phase: 'Pending',
        conditions: [
          ready('False', 'Pending', 'held', LATER_S),
          { ...conflict('held'), lastTransitionTime: LATER_S },
        ],
      },
    });
    // Once Pending it stays so, and nothing more is written for the same conflict.
    expect(
      conflictWaitPatch(applyStatusPatch(cr(hibernated), patch!), 'held', LATER + 1000, true, 'wake'),
    ).toBeNull();
    // The condition already set (the holder's edit came after the conflict): the phase still goes.
    const flagged: Status = {
      ...hibernated,
      conditions: [ready('False', 'Pending', 'held'), conflict('held')],
    };
    expect(conflictWaitPatch(cr(flagged), 'held', LATER, true, 'wake')?.status.phase).toBe('Pending');
    const active: Status = {
      phase: 'Active',
      observedGeneration: 1,
      conditions: [ready('True', 'Done', 'Active')],
    };
    expect(conflictWaitPatch(cr(active), 'held', LATER, true, 'hibernate')?.status.phase).toBe('Pending');
    // The holder keeps the VM as the phase says (the loser's own desire was edited): the phase stays.
    expect(
      conflictWaitPatch(cr(hibernated, 2), 'held', LATER, true, 'hibernate')?.status.phase,
    ).toBeUndefined();
    expect(conflictWaitPatch(cr(active, 2), 'held', LATER, true, 'wake')?.status.phase).toBeUndefined();
    // A run recorded before the patch passes no holder path: unchanged.
    expect(conflictWaitPatch(cr(hibernated), 'held', LATER, true)?.status.phase).toBeUndefined();
  });

  it('removes it once the CR no longer conflicts', () => {
    const st: Status = { conditions: [ready('True', 'Done', 'Hibernated'), conflict('held')] };
    expect(conflictPatch(cr(st), undefined, LATER)).toEqual({
      status: { conditions: [ready('True', 'Done', 'Hibernated')] },
    });
  });

  it('a loser waiting for its pod, whose holder no longer holds the VM, drops the condition and says what it waits for (deliberate: it named a deleted holder until the pod came back)', () => {
    const pending: Status = {
      phase: 'Pending',
      observedGeneration: 1,
      conditions: [ready('False', 'Pending', 'held'), conflict('held')],
    };
    const patch = podWaitPatch(cr(pending), 'pod ns/demo-0 not yet present', LATER, true);
    expect(patch).toEqual({
      status: {
        observedGeneration: 1,
        phase: 'Pending',
        conditions: [ready('False', 'Pending', 'pod ns/demo-0 not yet present')],
      },
    });
    expect(
      podWaitPatch(applyStatusPatch(cr(pending), patch!), 'pod ns/demo-0 not yet present', LATER, true),
    ).toBeNull();
    // A Hibernated loser keeps its phase (markPending never demotes it); its Ready message follows.
    const hibernated: Status = {
      phase: 'Hibernated',
      observedGeneration: 2,
      conditions: [
        ready('False', 'Pending', 'held', T0_S, 2),
        { ...conflict('held'), observedGeneration: 2 },
      ],
    };
    expect(podWaitPatch(cr(hibernated, 2), 'pod ns/demo-0 not yet present', LATER, true)).toEqual({
      status: {
        observedGeneration: 2,
        conditions: [ready('False', 'Pending', 'pod ns/demo-0 not yet present', T0_S, 2)],
      },
    });
    // A Hibernated CR that never lost (Ready=True) and has no condition: nothing to write.
    const done: Status = {
      phase: 'Hibernated',
      observedGeneration: 1,
      conditions: [ready('True', 'Done', 'Hibernated')],
    };
    expect(podWaitPatch(cr(done), 'pod ns/demo-0 not yet present', LATER, false)).toBeNull();
  });

  it('a Hibernated CR whose desire is now Wake, waiting for its pod, keeps its phase but is not Ready, at its new generation (deliberate: it said Ready=True "Hibernated")', () => {
    const done: Status = {
      phase: 'Hibernated',
      observedGeneration: 1,
      conditions: [ready('True', 'Done', 'Hibernated')],
    };
    const wake = { ...cr(done, 2), desire: 'Wake' };
    const patch = podWaitPatch(wake, 'pod ns/demo-0 is being deleted', LATER, false);
    expect(patch).toEqual({
      status: {
        observedGeneration: 2,
        conditions: [ready('False', 'Pending', 'pod ns/demo-0 is being deleted', LATER_S, 2)],
      },
    });
    expect(
      podWaitPatch(applyStatusPatch(wake, patch!), 'pod ns/demo-0 is being deleted', LATER, false),
    ).toBeNull();
    // Anything else waiting for its pod is markPending's.
    const active: Status = {
      phase: 'Active',
      observedGeneration: 1,
      conditions: [ready('True', 'Done', 'Active')],
    };
    expect(podWaitPatch(cr(active, 2), 'gone', LATER, false)).toEqual(
      markPendingPatch(cr(active, 2), 'gone', LATER),
    );
  });
});

describe('setCondition (apimachinery SetStatusCondition)', () => {
  const next = {
    type: CONDITION_READY,
    status: 'False' as const,
    reason: 'R',
    message: 'm',
    observedGeneration: 2,
  };
  it.each([
    ['appends a new condition with now', [], false, LATER_S],
    ['keeps LTT when the status does not flip', [ready('False', 'Pending', 'x')], false, T0_S],
    ['stamps now on a flip', [ready('True', 'Done', 'x')], false, LATER_S],
    ['stamps now when forced', [ready('False', 'Pending', 'x')], true, LATER_S],
  ])('%s', (_what, list, force, ltt) => {
    expect(setCondition(list, next, LATER, force)).toEqual([{ ...next, lastTransitionTime: ltt }]);
  });
});

describe('deletion holder rule: another live CR on the same VM or pod keeps the tag', () => {
  const self = { uid: 'u1', podRef: 'demo-0', vmName: 'vm-a' };
  it.each([
    ['no others', [], false],
    ['only itself', [{ uid: 'u1', podRef: 'demo-0', status: { vmName: 'vm-a' } }], false],
    ['a live CR that recorded the VM', [{ uid: 'u2', podRef: 'other', status: { vmName: 'vm-a' } }], true],
    ['a live CR targeting the same pod', [{ uid: 'u2', podRef: 'demo-0' }], true],
    [
      'a deleting CR on the same VM',
      [{ uid: 'u2', deleting: true, podRef: 'demo-0', status: { vmName: 'vm-a' } }],
      false,
    ],
    ['a live CR of another VM and pod', [{ uid: 'u2', podRef: 'demo-1', status: { vmName: 'vm-b' } }], false],
  ])('%s → %s', (_what, others, held) => {
    expect(heldByAnother(self, others)).toBe(held);
  });
});

describe('formatting as the Go operator prints it', () => {
  it.each([
    [180_000, '3m0s'],
    [300_000, '5m0s'],
    [30_000, '30s'],
    [0, '0s'],
    [3_723_000, '1h2m3s'],
  ])('goDuration(%i) = %s', (ms, out) => {
    expect(goDuration(ms)).toBe(out);
  });

  it('goQuote quotes like %q; rfc3339 truncates to seconds', () => {
    expect(goQuote('Sleep')).toBe('"Sleep"');
    expect(goQuote('a"b')).toBe('"a\\"b"');
    expect(rfc3339(T0 + 999)).toBe(T0_S);
  });

  it('applyStatusPatch merges the status locally as the apiserver would', () => {
    const before = cr({ phase: 'Hibernating', vmName: 'vm', conditions: [] });
    expect(applyStatusPatch(before, { status: { phase: 'Hibernated' } }).status).toEqual({
      phase: 'Hibernated',
      vmName: 'vm',
      conditions: [],
    });
  });
});
