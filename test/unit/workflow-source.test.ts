import { mkdirSync, mkdtempSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { workflowSource } from '../../src/worker.js';

function tree(bundleAgeS: number | undefined, sourceAgeS: number): string {
  const root = mkdtempSync(join(tmpdir(), 'wf-source-'));
  mkdirSync(join(root, 'src', 'workflows'), { recursive: true });
  mkdirSync(join(root, 'src', 'api'), { recursive: true });
  const now = Date.now() / 1000;
  for (const f of ['src/workflows/index.ts', 'src/api/keys.ts']) {
    writeFileSync(join(root, f), '');
    utimesSync(join(root, f), now - 100, now - 100);
  }
  utimesSync(join(root, 'src/api/keys.ts'), now - sourceAgeS, now - sourceAgeS);
  if (bundleAgeS !== undefined) {
    mkdirSync(join(root, 'dist'));
    writeFileSync(join(root, 'dist', 'workflow-bundle.js'), '');
    utimesSync(join(root, 'dist', 'workflow-bundle.js'), now - bundleAgeS, now - bundleAgeS);
  }
  return root;
}

describe('workflowSource', () => {
  it('uses the prebuilt bundle when it is newer than every source file', () => {
    const root = tree(10, 50);
    expect(workflowSource(root)).toEqual({
      workflowBundle: { codePath: join(root, 'dist', 'workflow-bundle.js') },
    });
  });

  it('bundles from source when any source file changed after the bundle was built', () => {
    const root = tree(10, 5);
    expect(workflowSource(root)).toEqual({ workflowsPath: join(root, 'src', 'workflows', 'index.ts') });
  });

  it('bundles from source when there is no prebuilt bundle', () => {
    const root = tree(undefined, 50);
    expect(workflowSource(root)).toEqual({ workflowsPath: join(root, 'src', 'workflows', 'index.ts') });
  });
});
