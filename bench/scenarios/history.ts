/**
 * Scenario 5: workflow history per VM. One VM is driven through hibernate+wake cycles (each cycle: the
 * `:hibernate` tag pushed again as vk-cocoon would, desire Hibernate → Hibernated, desire Wake → Active).
 * After every cycle the VM workflow's current run is described; a new run id means it continued as new,
 * and the finished run's final length is read. Reports events per cycle (within one run), the number of
 * runs, and the largest history length and size any run reached against Temporal's limits.
 */
import { vmWorkflowId } from '../../src/api/ids.js';
import type { BenchEnv } from '../lib/env.js';
import { historyFigures, terminateAll } from '../lib/history.js';
import { startOperator } from '../lib/operator.js';
import { median } from '../lib/stats.js';
import { awaitTransition, type StallRecord, workflowSettled } from '../lib/transition.js';
import { BenchWorld } from '../lib/world.js';

/** Temporal's default hard limits per run (history.maxHistoryLength / history.maxHistorySize). */
export const TEMPORAL_HISTORY_LIMITS = { events: 51_200, bytes: 50 * 2 ** 20 } as const;
/** Temporal's default warning thresholds (history.historyCountLimitWarn / historySizeLimitWarn). */
export const TEMPORAL_HISTORY_WARN = { events: 10_240, bytes: 10 * 2 ** 20 } as const;

/** A transition not finished after this long is a stall (recorded, then nudged with a resync signal). */
const STALL_MS = 10_000;

/** Cycles to drive, and the registry latency and concurrency of the run. */
export interface HistoryOptions {
  cycles: number;
  latencyMs: number;
  concurrency: number;
  progress?: (msg: string) => void;
}

/** History figures of the driven VM (event counts are Temporal history events). */
export interface HistoryResult {
  cyclesRequested: number;
  cyclesDone: number;
  /** Median history events one hibernate+wake cycle adds (cycles that stayed within one run). */
  eventsPerCycle: number;
  eventsPerCycleMin: number;
  eventsPerCycleMax: number;
  /** Events of the first run before the first cycle (CR create → Hibernated at start). */
  eventsBeforeFirstCycle: number;
  runs: number;
  continuedAsNew: number;
  maxRunLength: number;
  maxRunSizeBytes: number;
  limits: typeof TEMPORAL_HISTORY_LIMITS;
  warnThresholds: typeof TEMPORAL_HISTORY_WARN;
  /** Final length and size of every run, in order. */
  runFigures: { runId: string; length: number; sizeBytes: number }[];
  /** Transitions that did not finish within STALL_MS and needed a resync signal. */
  stalls: (StallRecord & { cycle: number })[];
  wallMs: number;
}

/** Drives the cycles and reads the history figures. */
export async function runHistory(env: BenchEnv, opts: HistoryOptions): Promise<HistoryResult> {
  const world = await BenchWorld.create(env.admin, env.stack.ociRegistry, 'bench-history', env.log);
  const [pod] = await world.createPods(1, { running: true });
  const id = vmWorkflowId(world.namespace, pod!);
  const t0 = Date.now();
  try {
    await world.pushHibernateTag(pod!);
    await world.track();
    const op = await startOperator(env, {
      namespace: world.namespace,
      concurrency: opts.concurrency,
      latencyMs: opts.latencyMs,
    });
    const perCycle: number[] = [];
    const runFigures: HistoryResult['runFigures'] = [];
    let cyclesDone = 0;
    const stalls: HistoryResult['stalls'] = [];
    let before = 0;
    try {
      await world.createCRs([pod!], 'Wake', 1);
      await world.waitPhase([pod!], 'Active', 120_000);
      await workflowSettled(env, world, pod!, 'Active');
      let cur = await historyFigures(env.client, id);
      before = cur.length;
      for (let c = 0; c < opts.cycles; c++) {
        await world.pushHibernateTag(pod!);
        for (const [desire, phase] of [
          ['Hibernate', 'Hibernated'],
          ['Wake', 'Active'],
        ] as const) {
          const gen = await world.setDesire(pod!, desire);
          const { stall } = await awaitTransition(env, world, pod!, phase, gen, {
            stallMs: STALL_MS,
            timeoutMs: 120_000,
          });
          // Before the next edit, let the workflow apply its own status write (its state query shows the
          // phase): an edit arriving in the same workflow task as that write's response is lost (see
          // the latency scenario's back-to-back part), which would add resync events to this count.
          await workflowSettled(env, world, pod!, phase);
          if (stall) {
            stalls.push({ ...stall, cycle: c + 1 });
            opts.progress?.(
              `history: cycle ${c + 1} ${desire} stalled ${STALL_MS} ms (${JSON.stringify(stall)})`,
            );
          }
        }
        cyclesDone++;
        const next = await historyFigures(env.client, id);
        if (next.runId === cur.runId) {
          perCycle.push(next.length - cur.length);
        } else {
          const old = await env.client.workflow.getHandle(id, cur.runId).describe();
          runFigures.push({
            runId: cur.runId,
            length: old.historyLength,
            sizeBytes: old.historySize ?? Number.NaN,
          });
        }
        cur = next;
        if ((c + 1) % 100 === 0)
          opts.progress?.(`history: ${c + 1}/${opts.cycles} cycles, run length ${cur.length}`);
      }
      runFigures.push(cur);
    } finally {
      await op.stop();
    }
    return {
      cyclesRequested: opts.cycles,
      cyclesDone,
      eventsPerCycle: median(perCycle),
      eventsPerCycleMin: perCycle.length ? Math.min(...perCycle) : Number.NaN,
      eventsPerCycleMax: perCycle.length ? Math.max(...perCycle) : Number.NaN,
      eventsBeforeFirstCycle: before,
      runs: runFigures.length,
      continuedAsNew: runFigures.length - 1,
      maxRunLength: Math.max(...runFigures.map((r) => r.length)),
      maxRunSizeBytes: Math.max(...runFigures.map((r) => r.sizeBytes)),
      limits: TEMPORAL_HISTORY_LIMITS,
      warnThresholds: TEMPORAL_HISTORY_WARN,
      runFigures,
      stalls,
      wallMs: Date.now() - t0,
    };
  } finally {
    await terminateAll(env.client, [id]);
    await world.cleanup();
  }
}
