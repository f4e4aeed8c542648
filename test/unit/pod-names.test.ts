/** `podNameProblem` (src/api/pod.ts): which `spec.podRef.name` values can never name a pod, and why. */
import { describe, expect, it } from 'vitest';
import { podNameProblem } from '../../src/api/pod.js';

describe('podNameProblem', () => {
  it('accepts DNS-1123 subdomains up to 253 characters', () => {
    for (const name of [
      'demo-0',
      'a',
      'agent.v1-2',
      `${'a'.repeat(63)}.${'b'.repeat(63)}`,
      'a'.repeat(253),
    ]) {
      expect(podNameProblem(name)).toBeUndefined();
    }
  });

  it('rejects upper case, underscores, slashes, edge dashes and dots, empty labels and 254+ characters', () => {
    for (const name of ['Foo', 'foo_bar', 'Foo_Bar/x', 'x/y', '-a', 'a-', '.a', 'a.', 'a..b', '']) {
      expect(podNameProblem(name)).toMatch(/^a lowercase RFC 1123 subdomain must consist of/);
    }
    expect(podNameProblem('a'.repeat(254))).toBe('must be no more than 253 characters (it has 254)');
  });
});
