/**
 * The crash test's trial plans (bench/scenarios/crash.ts): reproducible from the seed, covering every
 * scenario and kill point, and never asking `delete-held` (no registry call) to park a registry request.
 */
import { describe, expect, it } from 'vitest';
import { CRASH_SCENARIOS, prng, randomPlan, type TrialPlan } from '../../bench/scenarios/crash.js';

const plans = (seed: number, n: number): TrialPlan[] => {
  const rnd = prng(seed);
  return Array.from({ length: n }, () => randomPlan(rnd, CRASH_SCENARIOS));
};

describe('crash trial plans', () => {
  it('the same seed gives the same plans; another seed other plans', () => {
    expect(plans(42, 50)).toEqual(plans(42, 50));
    expect(plans(43, 50)).not.toEqual(plans(42, 50));
  });

  it('100 plans cover every scenario and every kill point kind; delete-held is never a registry point', () => {
    const ps = plans(4242, 100);
    expect(new Set(ps.map((p) => p.scenario))).toEqual(new Set(CRASH_SCENARIOS));
    expect(new Set(ps.map((p) => p.point.kind))).toEqual(new Set(['delay', 'change', 'registry']));
    expect(ps.filter((p) => p.scenario === 'delete-held' && p.point.kind === 'registry')).toEqual([]);
    for (const p of ps) {
      if (p.point.kind === 'delay') expect(p.point.ms).toBeGreaterThanOrEqual(0);
      if (p.point.kind === 'change') expect(p.point.k).toBeGreaterThanOrEqual(1);
      expect(p.downMs).toBeGreaterThanOrEqual(0);
    }
  });

  it('prng yields floats in [0, 1)', () => {
    const rnd = prng(1);
    for (let i = 0; i < 1000; i++) {
      const x = rnd();
      expect(x).toBeGreaterThanOrEqual(0);
      expect(x).toBeLessThan(1);
    }
  });
});
