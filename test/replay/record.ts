/**
 * Records the golden workflow histories: runs every scenario of test/replay/scenarios.ts (or those named
 * on the command line) on a fresh time-skipping server each and writes test/replay/histories/<into>/<name>.json.
 * `npm run record-histories -- --into <folder> [name...]`. Never overwrite a recorded folder: each one pins
 * what runs started on the code of its day do. After a replay-safe change of the workflows (a `patched()`
 * branch, a new workflow type), record a new folder beside the old ones, so both old runs and new runs are
 * replayed (test/replay/replay.test.ts also checks every `patched()` id appears in some history).
 */
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { historyToJSON } from '@temporalio/common/lib/proto-utils.js';
import { createEnv } from '../workflow/harness.js';
import { scenarios } from './scenarios.js';

const root = new URL('./histories/', import.meta.url).pathname;

async function main(): Promise<void> {
  const args = process.argv.slice(2);
  const at = args.indexOf('--into');
  const into = at >= 0 ? args[at + 1] : undefined;
  if (!into || !/^[\w.-]+$/.test(into))
    throw new Error('usage: record-histories -- --into <folder> [name...]');
  const dir = `${root}${into}/`;
  const wanted = args.filter((_, i) => i !== at && i !== at + 1);
  const unknown = wanted.filter((n) => !scenarios.some((s) => s.name === n));
  if (unknown.length > 0) throw new Error(`unknown scenario(s) ${unknown.join(', ')}`);
  if (existsSync(dir) && wanted.length === 0) throw new Error(`${dir} exists: record into a new folder`);
  mkdirSync(dir, { recursive: true });
  for (const s of scenarios) {
    if (wanted.length > 0 && !wanted.includes(s.name)) continue;
    const env = await createEnv();
    try {
      const histories = await s.record(env);
      for (const [file, history] of Object.entries(histories)) {
        const path = `${dir}${file}.json`;
        writeFileSync(path, `${JSON.stringify(JSON.parse(historyToJSON(history)), null, 1)}\n`);
        console.log(`${path}: ${history.events?.length ?? 0} events`);
      }
    } finally {
      await env.teardown();
    }
  }
}

main().then(
  () => process.exit(0),
  (err) => {
    console.error(err);
    process.exit(1);
  },
);
