import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { bundleCacheDir, workflowBundleFor, workflowSourceHash } from '../../src/workflow-code.js';

/** A throwaway tree: `files` relative path → content. */
function tree(files: Record<string, string>): string {
  const root = mkdtempSync(join(tmpdir(), 'wf-code-'));
  for (const [f, text] of Object.entries(files)) {
    mkdirSync(join(root, f, '..'), { recursive: true });
    writeFileSync(join(root, f), text);
  }
  return root;
}

describe('workflow code source', () => {
  it('keys the cache by content: same sources → same key; any changed, added or renamed .ts file → new key', () => {
    const base = { 'workflows/index.ts': 'export {}', 'api/keys.ts': 'a' };
    const a = workflowSourceHash(tree(base), '1.0');
    expect(workflowSourceHash(tree(base), '1.0')).toBe(a);
    expect(workflowSourceHash(tree({ ...base, 'api/keys.ts': 'b' }), '1.0')).not.toBe(a);
    expect(workflowSourceHash(tree({ ...base, 'api/more.ts': '' }), '1.0')).not.toBe(a);
    expect(
      workflowSourceHash(tree({ 'workflows/index.ts': 'export {}', 'api/keyz.ts': 'a' }), '1.0'),
    ).not.toBe(a);
    expect(workflowSourceHash(tree(base), '1.1')).not.toBe(a); // another SDK version
    expect(workflowSourceHash(tree({ ...base, 'README.md': 'x' }), '1.0')).toBe(a); // not a source
  });

  it('compiled code uses the prebuilt bundle next to it, and says so when there is none', async () => {
    const dist = tree({ 'worker.js': '', 'workflows/index.js': '', 'workflow-bundle.js': '' });
    expect(await workflowBundleFor(dist)).toEqual({
      codePath: join(dist, 'workflow-bundle.js'),
      origin: 'prebuilt',
    });
    const bare = tree({ 'worker.js': '', 'workflows/index.js': '' });
    await expect(workflowBundleFor(bare)).rejects.toThrow(/npm run build/);
  });

  it('source code never uses a dist/ bundle (it could be stale): it uses the content-hash cache', async () => {
    const root = tree({ 'src/workflows/index.ts': '', 'dist/workflow-bundle.js': '' });
    const cacheDir = bundleCacheDir({ XDG_CACHE_HOME: join(root, 'cache') });
    const key = workflowSourceHash(join(root, 'src'));
    mkdirSync(cacheDir, { recursive: true });
    writeFileSync(join(cacheDir, `${key}.js`), '// cached');
    const prev = process.env.XDG_CACHE_HOME;
    process.env.XDG_CACHE_HOME = join(root, 'cache');
    try {
      expect(await workflowBundleFor(join(root, 'src'))).toEqual({
        codePath: join(cacheDir, `${key}.js`),
        origin: 'cached',
      });
    } finally {
      if (prev === undefined) delete process.env.XDG_CACHE_HOME;
      else process.env.XDG_CACHE_HOME = prev;
    }
  });
});
