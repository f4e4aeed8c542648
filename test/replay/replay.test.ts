/**
 * Replays every golden history under test/replay/histories/ (recorded by `npm run record-histories` from
 * test/replay/scenarios.ts) against the current workflow code: a change that would break a run already in
 * flight (a command added, removed or reordered without `patched()`) fails here with a non-determinism
 * error. No server: the replay worker runs the workflow bundle against the recorded events alone.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { historyFromJSON } from '@temporalio/common/lib/proto-utils.js';
import { Worker } from '@temporalio/worker';
import { describe, expect, it } from 'vitest';
import { workflowBundle } from '../workflow/harness.js';
import { scenarios } from './scenarios.js';

const dir = new URL('./histories/', import.meta.url).pathname;
const files = readdirSync(dir)
  .filter((f) => f.endsWith('.json'))
  .sort();

describe('golden workflow histories', () => {
  it('has a recorded history for every scenario', () => {
    for (const s of scenarios) {
      expect(
        files.some((f) => f === `${s.name}.json` || f.startsWith(`${s.name}-`)),
        `${s.name}: run npm run record-histories`,
      ).toBe(true);
    }
  });

  it('replays every recorded history against the current workflow code without non-determinism', async () => {
    const histories = files.map((f) => ({
      workflowId: f.replace(/\.json$/, ''),
      history: historyFromJSON(JSON.parse(readFileSync(`${dir}${f}`, 'utf8'))),
    }));
    const failures: string[] = [];
    let replayed = 0;
    for await (const r of Worker.runReplayHistories({ workflowBundle: await workflowBundle() }, histories)) {
      replayed++;
      if (r.error) failures.push(`${r.workflowId}: ${r.error.name}: ${r.error.message}`);
    }
    expect(failures).toEqual([]);
    expect(replayed).toBe(files.length);
  }, 120_000);
});
