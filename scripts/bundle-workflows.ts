/**
 * Prebuilds the workflow bundle so the worker starts without running webpack (for the image and for
 * repeated test runs): `tsx scripts/bundle-workflows.ts [outFile]` writes dist/workflow-bundle.js from
 * src/workflows/index.ts. src/worker.ts uses the file when it is not older than the sources.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { bundleWorkflowCode } from '@temporalio/worker';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');

/** Bundles src/workflows/index.ts into `outFile` (default dist/workflow-bundle.js); returns the path. */
export async function bundleWorkflows(outFile = join(ROOT, 'dist', 'workflow-bundle.js')): Promise<string> {
  const { code } = await bundleWorkflowCode({ workflowsPath: join(ROOT, 'src', 'workflows', 'index.ts') });
  await mkdir(dirname(outFile), { recursive: true });
  await writeFile(outFile, code);
  return outFile;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === resolve(process.argv[1])) {
  const out = await bundleWorkflows(process.argv[2] ? resolve(process.argv[2]) : undefined);
  console.log(`workflow bundle written to ${out}`);
}
