/**
 * Which patched branches a run takes without asking `patched()` (messages.ts `patchDecision`, entity.ts
 * `on`): a run must never take a branch its recorded history did not take, or its replay fails on every
 * workflow task. test/replay shows the same rule against recorded histories.
 */
import { describe, expect, it } from 'vitest';
import { LEVELED_PATCHES, patchDecision, RUN_MODES } from '../../src/workflows/messages.js';

const [first, second] = LEVELED_PATCHES as [string, string];

describe('patchDecision', () => {
  it('a run started with patches: all (2026-12-03 to 2026-12-04b) takes the branches of its day, none added since', () => {
    expect(patchDecision('all', 'create-waits-for-spent-tag')).toBe(true);
    expect(patchDecision('all', first)).toBe(false);
  });

  it('a run started with patches: N takes the first N added since, not the later ones', () => {
    expect(patchDecision(0, first)).toBe(false);
    expect(patchDecision(1, first)).toBe(true);
    expect(patchDecision(1, second)).toBe(false);
    expect(patchDecision(2, second)).toBe(true);
    expect(patchDecision(1, 'create-waits-for-spent-tag')).toBe(true);
  });

  it('a run started before `patches` existed asks patched() for every branch', () => {
    expect(patchDecision(undefined, 'create-waits-for-spent-tag')).toBe('ask');
    expect(patchDecision(undefined, first)).toBe('ask');
  });

  it('every start and continue-as-new of this version takes every branch this version has', () => {
    expect(RUN_MODES.patches).toBe(LEVELED_PATCHES.length);
    for (const id of LEVELED_PATCHES) expect(patchDecision(RUN_MODES.patches, id)).toBe(true);
    expect(new Set(LEVELED_PATCHES).size).toBe(LEVELED_PATCHES.length);
  });
});
