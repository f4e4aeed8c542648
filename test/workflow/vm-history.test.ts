/**
 * History hygiene of the VM workflow: it continues as new with its state (and keeps serving). Replay
 * safety against runs already in flight is test/replay/replay.test.ts (golden histories).
 */

import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Annotations } from '../../src/api/keys.js';
import { waitFor } from '../support/wait.js';
import { createEnv, withWorld } from './harness.js';
import type { VMWorld } from './vm-world.js';

const NS = 'ns';
const VM = 'vk-ns-demo-0';
let env: TestWorkflowEnvironment;

beforeEach(async () => {
  env = await createEnv();
});
afterEach(async () => {
  await env?.teardown();
});

/** One hibernate + wake cycle, playing vk-cocoon's part by hand. */
async function cycle(world: VMWorld): Promise<void> {
  // No time skipping here: a signal lost across continue-as-new must fail the test, not wait for the
  // workflow's 60 s fallback re-read.
  const reached = (what: string, check: () => boolean) => waitFor(what, check);
  await world.putCR({ ...world.cr(NS, 'hib')!, desire: 'Hibernate' });
  await reached(
    'Hibernating',
    () => world.pod(NS, 'demo-0')?.annotations?.[Annotations.hibernate] === 'true',
  );
  await world.vkHibernated(NS, 'demo-0', VM);
  await reached('Hibernated', () => world.cr(NS, 'hib')?.status?.phase === 'Hibernated');
  await world.putCR({ ...world.cr(NS, 'hib')!, desire: 'Wake' });
  await reached(
    'annotation cleared',
    () => world.pod(NS, 'demo-0')?.annotations?.[Annotations.hibernate] === undefined,
  );
  await world.annotatePod(
    NS,
    'demo-0',
    { [Annotations.lifecycleState]: 'ready', [Annotations.vmID]: `vm-${world.calls.length}` },
    { containerRunning: true },
  );
  await reached('Active', () => world.cr(NS, 'hib')?.status?.phase === 'Active');
}

/**
 * The run's search attributes as name → first value (describe()'s legacy map), without removed ones (the
 * time-skipping server lists a removed attribute with a null value; the real server drops it).
 */
async function attributesOf(runId?: string): Promise<Record<string, unknown>> {
  const desc = await env.client.workflow.getHandle('vm/ns/demo-0', runId).describe();
  return Object.fromEntries(
    Object.entries(desc.searchAttributes ?? {}).flatMap(([k, v]) => (v?.[0] == null ? [] : [[k, v[0]]])),
  );
}

/** The attributes each UpsertWorkflowSearchAttributes event of a run set (name → first value or null). */
async function upserts(runId?: string): Promise<Array<Record<string, unknown>>> {
  const history = await env.client.workflow.getHandle('vm/ns/demo-0', runId).fetchHistory();
  return (history.events ?? []).flatMap((e) => {
    const fields = e.upsertWorkflowSearchAttributesEventAttributes?.searchAttributes?.indexedFields;
    if (!fields) return [];
    return [
      Object.fromEntries(
        Object.entries(fields).map(([k, p]) => {
          const v = p.data?.length ? JSON.parse(Buffer.from(p.data).toString()) : null;
          return [k, Array.isArray(v) ? (v[0] ?? null) : v];
        }),
      ),
    ];
  });
}

/** A running VM's pod, then a Wake CR on it, until the CR says Active. */
async function runningVMWithWakeCR(world: VMWorld): Promise<void> {
  await world.putPod(NS, 'demo-0', {
    annotations: { [Annotations.vmName]: VM, [Annotations.managed]: 'true', [Annotations.vmID]: 'vm-first' },
    containerRunning: true,
  });
  await world.putCR({ namespace: NS, name: 'hib', podRef: 'demo-0', desire: 'Wake' });
  await waitFor('Active', () => world.cr(NS, 'hib')?.status?.phase === 'Active');
}

describe('VM workflow search attributes', () => {
  it("takes its identity attributes from the watcher's start and upserts none across transitions (no CocoonPhase)", async () => {
    await withWorld(env, async (world) => {
      await runningVMWithWakeCR(world);
      await cycle(world);
      await cycle(world);
      expect(await upserts()).toEqual([]);
      expect(await attributesOf()).toEqual({ CocoonNamespace: NS, CocoonVMName: VM, CocoonKind: 'VM' });
    });
  });

  it('upserts a VM name it learns after the start, once', async () => {
    await withWorld(env, async (world) => {
      await world.putCR({ namespace: NS, name: 'hib', podRef: 'demo-0', desire: 'Wake' });
      await waitFor('Pending', () => world.cr(NS, 'hib')?.status?.phase === 'Pending');
      await world.putPod(NS, 'demo-0', {
        annotations: {
          [Annotations.vmName]: VM,
          [Annotations.managed]: 'true',
          [Annotations.vmID]: 'vm-first',
        },
        containerRunning: true,
      });
      await waitFor('Active', () => world.cr(NS, 'hib')?.status?.phase === 'Active');
      await cycle(world);
      expect(await upserts()).toEqual([{ CocoonVMName: VM }]);
      expect(await attributesOf()).toEqual({ CocoonNamespace: NS, CocoonVMName: VM, CocoonKind: 'VM' });
    });
  });

  it('a run an older version started upserts CocoonPhase at every change; the run it continues as new removes it', async () => {
    await withWorld(env, async (world) => {
      // An older version's start argument: no `searchAttributes` field.
      world.startExtra = { searchAttributes: undefined, historyLimit: 60 };
      await runningVMWithWakeCR(world);
      const handle = env.client.workflow.getHandle('vm/ns/demo-0');
      const firstRun = (await handle.describe()).runId;
      await cycle(world);
      const phases = (await upserts(firstRun)).map((u) => u.CocoonPhase);
      expect(phases).toEqual(expect.arrayContaining(['Active', 'Hibernating', 'Hibernated']));
      for (let i = 0; i < 6 && (await handle.describe()).runId === firstRun; i++) await cycle(world);
      expect((await handle.describe()).runId).not.toBe(firstRun);
      await cycle(world);
      expect(await attributesOf()).toEqual({ CocoonNamespace: NS, CocoonVMName: VM, CocoonKind: 'VM' });
    });
  }, 120_000);
});

describe('VM workflow history', () => {
  it('continues as new past its history limit, carrying its state, and keeps serving', async () => {
    await withWorld(env, async (world) => {
      world.startExtra = { historyLimit: 120 };
      await runningVMWithWakeCR(world);
      const handle = env.client.workflow.getHandle('vm/ns/demo-0');
      const firstRun = (await handle.describe()).runId;
      for (let i = 0; i < 6; i++) await cycle(world);
      const desc = await handle.describe();
      expect(desc.runId).not.toBe(firstRun);
      expect(desc.historyLength).toBeLessThan(200);
      // The carried state still knows the CR: the query answers without a re-read.
      const state = (await handle.query('state')) as { hibernations: Array<{ name: string; phase: string }> };
      expect(state.hibernations).toEqual([expect.objectContaining({ name: 'hib', phase: 'Active' })]);
      expect(world.events.filter((e) => e.reason === 'Hibernated')).toHaveLength(6);
      expect(world.events.filter((e) => e.reason === 'WokenActive')).toHaveLength(7);
    });
  }, 120_000);
});
