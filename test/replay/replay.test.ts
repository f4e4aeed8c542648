/**
 * Replays every golden history under test/replay/histories/<recorded on>/ (recorded by `npm run
 * record-histories` from test/replay/scenarios.ts) against the current workflow code: a change that would
 * break a run already in flight (a command added, removed or reordered without `patched()`) fails here with
 * a non-determinism error. Each folder pins the code of its day, so old runs (the unpatched branches) and
 * newer runs (the patched ones) are both replayed; every `patched()` id of src/workflows must be recorded in
 * some history, or its branch would go unreplayed. No server: the replay worker runs the workflow bundle
 * against the recorded events alone.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { historyFromJSON } from '@temporalio/common/lib/proto-utils.js';
import type { temporal } from '@temporalio/proto';
import { Worker } from '@temporalio/worker';
import { describe, expect, it } from 'vitest';
import { LEVELED_PATCHES } from '../../src/workflows/messages.js';
import { workflowBundle } from '../workflow/harness.js';
import { scenarios } from './scenarios.js';

const dir = new URL('./histories/', import.meta.url).pathname;
const files = readdirSync(dir, { recursive: true, encoding: 'utf8' })
  .filter((f) => f.endsWith('.json'))
  .sort();
const folders = [...new Set(files.map((f) => f.split('/')[0]!))];
const workflowsDir = new URL('../../src/workflows/', import.meta.url).pathname;

/**
 * Patch ids added with the start argument `patches: 'all'` (entity.ts `on`; VM workflow since 2026-12-03e,
 * CocoonSet workflow since 2026-12-03f): a run this version starts takes every patched branch without a
 * marker, so no recorded history holds them; only a run an older version started asks `patched()` for
 * them, where the branch is. Ids added later are in messages.ts `LEVELED_PATCHES` (markerless too).
 */
const ADDED_WITH_RUN_START_MARKER = new Set([
  'pod-wait-status',
  'deletion-drops-inherited-tag',
  'wake-waits-for-hibernate-round',
  'migration-waits-for-quiesce',
  'loser-phase-follows-holder',
  'tag-drop-retries',
  'migration-failure-keeps-phase',
  'migration-follows-pin',
  'migration-shows-conflict',
  'validates-pin',
  'create-waits-for-spent-tag',
  'spent-tag-drop-without-pod',
]);

/** The ids the workflow code passes to `patched()`, directly or through entity.ts `on` (src/workflows/*.ts). */
function patchIds(): Set<string> {
  const ids = new Set<string>();
  for (const f of readdirSync(workflowsDir).filter((n) => n.endsWith('.ts'))) {
    for (const m of readFileSync(`${workflowsDir}${f}`, 'utf8').matchAll(
      /(?:patched|on)\((?:io, )?'([^']+)'\)/g,
    ))
      if (!ADDED_WITH_RUN_START_MARKER.has(m[1]!) && !LEVELED_PATCHES.includes(m[1]!)) ids.add(m[1]!);
  }
  return ids;
}

/** The patch ids a history recorded (its `core_patch` markers). */
function recordedPatches(history: temporal.api.history.v1.IHistory): string[] {
  return (history.events ?? []).flatMap((e) => {
    const m = e.markerRecordedEventAttributes;
    const data = m?.markerName === 'core_patch' ? m.details?.['patch-data']?.payloads?.[0]?.data : undefined;
    return data ? [(JSON.parse(Buffer.from(data).toString('utf8')) as { id: string }).id] : [];
  });
}

describe('golden workflow histories', () => {
  it('has a recorded history for every scenario in the newest folder', () => {
    const newest = folders.at(-1)!;
    for (const s of scenarios) {
      expect(
        files.some((f) => f === `${newest}/${s.name}.json` || f.startsWith(`${newest}/${s.name}-`)),
        `${s.name}: run npm run record-histories -- --into <today>`,
      ).toBe(true);
    }
  });

  it('records every patched() id of the workflow code in some history (else its branch is never replayed)', () => {
    const recorded = new Set(
      files.flatMap((f) => recordedPatches(historyFromJSON(JSON.parse(readFileSync(`${dir}${f}`, 'utf8'))))),
    );
    expect([...patchIds()].filter((id) => !recorded.has(id)).sort()).toEqual([]);
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
