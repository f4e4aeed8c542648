/**
 * The workflow bundle outside the worker's start: `tsx scripts/bundle-workflows.ts [outFile]` writes
 * dist/workflow-bundle.js (part of `npm run build`, so `node dist/worker.js` and the image never bundle);
 * `bundleWorkflows()` without a file warms the content-hash cache that `npm start` and the tests use
 * (src/workflow-code.ts).
 */
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildWorkflowBundle, cachedWorkflowBundle, PREBUILT_BUNDLE_NAME } from '../src/workflow-code.js';

const ROOT = join(fileURLToPath(import.meta.url), '..', '..');
const SRC = join(ROOT, 'src');

/**
 * With `outFile`: bundles src/workflows/index.ts into it. Without: makes sure the content-hash cache holds
 * the bundle of the current sources (a no-op when it does). Returns the bundle's path.
 */
export async function bundleWorkflows(outFile?: string): Promise<string> {
  if (!outFile) return (await cachedWorkflowBundle({ srcDir: SRC })).codePath;
  await buildWorkflowBundle(SRC, outFile);
  return outFile;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === resolve(process.argv[1])) {
  const out = await bundleWorkflows(resolve(process.argv[2] ?? join(ROOT, 'dist', PREBUILT_BUNDLE_NAME)));
  console.log(`workflow bundle written to ${out}`);
}
