/**
 * The shipped benchmark runs the operator under the memory limit of its Deployment (bench/lib/cgroup.ts):
 * the limit must be the one config/manager/deployment.yaml gives the manager container, in bytes.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { deploymentMemoryLimit } from '../../bench/lib/cgroup.js';

const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');

describe('deploymentMemoryLimit', () => {
  it("reads the manager container's resources.limits.memory from the shipped Deployment", () => {
    expect(deploymentMemoryLimit(join(REPO_ROOT, 'config/manager/deployment.yaml'))).toEqual({
      quantity: '512Mi',
      bytes: 512 * 2 ** 20,
    });
  });

  it('parses decimal and fractional quantities as Kubernetes does', () => {
    const dir = mkdtempSync(join(tmpdir(), 'deploy-'));
    const file = join(dir, 'd.yaml');
    const manifest = (memory: string) =>
      `spec:\n  template:\n    spec:\n      containers:\n        - name: manager\n          resources:\n            limits:\n              memory: ${memory}\n`;
    writeFileSync(file, manifest('1.5Gi'));
    expect(deploymentMemoryLimit(file).bytes).toBe(1.5 * 2 ** 30);
    writeFileSync(file, manifest('500M'));
    expect(deploymentMemoryLimit(file).bytes).toBe(500e6);
  });

  it('says so when the manifest names no limit', () => {
    const dir = mkdtempSync(join(tmpdir(), 'deploy-'));
    const file = join(dir, 'd.yaml');
    writeFileSync(file, 'spec:\n  template:\n    spec:\n      containers:\n        - name: manager\n');
    expect(() => deploymentMemoryLimit(file)).toThrow(/no resources.limits.memory/);
  });
});
