/**
 * Records the golden workflow histories: runs every scenario of test/replay/scenarios.ts (or those named
 * on the command line) on a fresh time-skipping server each and writes test/replay/histories/<name>.json.
 * `npm run record-histories [-- name...]`. Re-record only for a deliberate, replay-safe change of the
 * workflows (one guarded by `patched()`, or a new workflow type): the files pin what runs in flight do.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { historyToJSON } from '@temporalio/common/lib/proto-utils.js';
import { createEnv } from '../workflow/harness.js';
import { scenarios } from './scenarios.js';

const dir = new URL('./histories/', import.meta.url).pathname;

async function main(): Promise<void> {
  const wanted = process.argv.slice(2);
  const unknown = wanted.filter((n) => !scenarios.some((s) => s.name === n));
  if (unknown.length > 0) throw new Error(`unknown scenario(s) ${unknown.join(', ')}`);
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
