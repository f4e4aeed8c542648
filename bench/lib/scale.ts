/**
 * The scale workload, shared by the scale scenario (bench/scenarios/fleet.ts, operator in this process) and
 * the shipped scenario (bench/scenarios/shipped.ts, the built operator as a child process): N pre-played
 * VMs with their `:hibernate` tags (lib/world.ts), then one phase at a time — all N hibernate (one CR each,
 * desire Hibernate) or all N wake (every CR's desire set to Wake) — until every CR shows the phase's
 * terminal state. Only the driving is here; what a scenario measures around a phase is its own.
 */
import { vmWorkflowId } from '../../src/api/ids.js';
import type { HibernationPhase } from '../../src/api/types.js';
import { resyncSignal } from '../../src/workflows/messages.js';
import type { BenchEnv } from './env.js';
import { pool } from './stats.js';
import type { BenchWorld } from './world.js';

/** One scale phase: every VM hibernates, or every VM wakes. */
export type ScalePhaseName = 'hibernate' | 'wake';

/** With no CR changing phase for this long, the still-pending VMs are nudged with a resync signal. */
const FLEET_STALL_MS = 60_000;
/** Give up after this many nudge rounds without completion. */
const MAX_NUDGES = 3;

/**
 * Creates `n` pods in `world` in the state vk-cocoon reports after a hibernate round, with a running VM
 * (so a wake completes without vk-cocoon), pushes their `:hibernate` tags and starts the phase tracker.
 * Resolves with the pod names.
 */
export async function seedScaleFleet(world: BenchWorld, n: number): Promise<string[]> {
  const pods = await world.createPods(n, { running: true });
  await world.pushHibernateTags(pods);
  await world.track();
  return pods;
}

/**
 * Waits for the whole fleet like BenchWorld.waitPhase, but when no CR has changed for FLEET_STALL_MS,
 * sends the pending VMs' workflows a resync signal (recorded in `nudged`) instead of waiting forever.
 */
export async function waitFleet(
  env: BenchEnv,
  world: BenchWorld,
  phase: HibernationPhase,
  minGeneration: (pod: string) => number,
  nudged: string[],
): Promise<number[]> {
  let nudges = 0;
  for (;;) {
    try {
      return await world.waitPhase(world.pods, phase, FLEET_STALL_MS, minGeneration);
    } catch (err) {
      if (Date.now() - world.lastChangeAt < FLEET_STALL_MS) continue; // still moving
      if (++nudges > MAX_NUDGES) throw err;
      const pending = world.notYet(world.pods, phase, minGeneration);
      nudged.push(...pending);
      await pool(pending, 16, (p) =>
        env.client.workflow.getHandle(vmWorkflowId(world.namespace, p)).signal(resyncSignal),
      );
    }
  }
}

/** Timing of one driven phase (local epoch ms). */
export interface DrivenPhase {
  /** When the first create/edit was issued. */
  startedAt: number;
  /** Time to issue all N creates/edits (part of wall). */
  issueMs: number;
  /** From the first create/edit to the last terminal phase seen. */
  wallMs: number;
  /** VMs that had to be nudged with a resync signal after the fleet stopped progressing (should be none). */
  nudged: string[];
}

/**
 * Runs one phase over every pod of `world`: hibernate = one CR per pod with desire Hibernate, done when all
 * are `Hibernated`; wake = every CR's desire set to Wake, done when all are `Active` at the new generation.
 * At most `parallel` creates/edits in flight.
 */
export async function driveScalePhase(
  env: BenchEnv,
  world: BenchWorld,
  phase: ScalePhaseName,
  parallel: number,
): Promise<DrivenPhase> {
  const pods = world.pods;
  const startedAt = Date.now();
  const nudged: string[] = [];
  let doneAt: number[];
  let issueMs: number;
  if (phase === 'hibernate') {
    await world.createCRs(pods, 'Hibernate', parallel);
    issueMs = Date.now() - startedAt;
    doneAt = await waitFleet(env, world, 'Hibernated', () => 1, nudged);
  } else {
    const gens = new Map<string, number>();
    await pool(pods, parallel, async (p) => {
      gens.set(p, await world.setDesire(p, 'Wake'));
    });
    issueMs = Date.now() - startedAt;
    doneAt = await waitFleet(env, world, 'Active', (p) => gens.get(p) ?? 1, nudged);
  }
  return { startedAt, issueMs, wallMs: Math.max(...doneAt) - startedAt, nudged };
}
