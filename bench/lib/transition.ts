/**
 * Waiting for one VM's transition in the sequential scenarios (latency, history), with a stall guard: when
 * the CR has not reached its terminal phase for the edited generation within `stallMs`, the benchmark
 * records what the VM workflow believes (its `state` query) next to what the API holds, sends the
 * workflow a `resync` signal (the operator's documented manual nudge) and waits again. Stalls are
 * reported, never hidden.
 */
import { vmWorkflowId } from '../../src/api/ids.js';
import type { HibernationPhase } from '../../src/api/types.js';
import { resyncSignal, vmStateQuery } from '../../src/workflows/messages.js';
import type { BenchEnv } from './env.js';
import { BenchWorld } from './world.js';

/** One stalled transition: what the API and the workflow said when the guard fired. */
export interface StallRecord {
  pod: string;
  wantPhase: HibernationPhase;
  generation: number;
  afterMs: number;
  cr: { desire?: string; phase?: string; observedGeneration?: number; resourceVersion?: string };
  workflowView: unknown;
  /** The workflow's view of the CR's desire differed from the API's: the edit was lost, not slow. */
  lostEdit: boolean;
  /** Whether the resync signal brought the transition to its terminal phase. */
  recovered: boolean;
}

/** The desire the VM workflow's `state` query reports for the pod's CR (undefined when unknown). */
function workflowDesire(view: unknown, crName: string): string | undefined {
  const crs = (view as { hibernations?: { name: string; desire?: string; phase?: string }[] })?.hibernations;
  return crs?.find((c) => c.name === crName)?.desire;
}

/**
 * Waits until the VM workflow itself reports the pod's CR in `phase` (its `state` query), i.e. it has
 * applied the status write it made, so an edit sent now cannot race that write's response. Resolves
 * false after `timeoutMs`.
 */
export async function workflowSettled(
  env: BenchEnv,
  world: BenchWorld,
  pod: string,
  phase: HibernationPhase,
  timeoutMs = 5_000,
): Promise<boolean> {
  const handle = env.client.workflow.getHandle(vmWorkflowId(world.namespace, pod));
  const name = BenchWorld.crName(pod);
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const view = (await handle.query(vmStateQuery).catch(() => undefined)) as
      | { hibernations?: { name: string; phase?: string }[] }
      | undefined;
    if (view?.hibernations?.find((c) => c.name === name)?.phase === phase) return true;
    await new Promise((r) => setTimeout(r, 20));
  }
  return false;
}

/**
 * Resolves with the local time the pod's CR was seen in `phase` at generation ≥ `generation`, and the
 * stall record when the guard had to fire. Rejects when even the resync does not finish it in `timeoutMs`.
 */
export async function awaitTransition(
  env: BenchEnv,
  world: BenchWorld,
  pod: string,
  phase: HibernationPhase,
  generation: number,
  opts: { stallMs: number; timeoutMs: number },
): Promise<{ doneAt: number; stall?: StallRecord }> {
  try {
    const [doneAt] = await world.waitPhase([pod], phase, opts.stallMs, () => generation);
    return { doneAt: doneAt! };
  } catch {
    const handle = env.client.workflow.getHandle(vmWorkflowId(world.namespace, pod));
    const workflowView = await handle
      .query(vmStateQuery)
      .catch((err: unknown) => `query failed: ${String(err)}`);
    const cr = await world.readCR(pod);
    const stall: StallRecord = {
      pod,
      wantPhase: phase,
      generation,
      afterMs: opts.stallMs,
      cr,
      workflowView,
      lostEdit: workflowDesire(workflowView, BenchWorld.crName(pod)) !== cr.desire,
      recovered: false,
    };
    await handle.signal(resyncSignal);
    try {
      const [doneAt] = await world.waitPhase([pod], phase, opts.timeoutMs, () => generation);
      stall.recovered = true;
      return { doneAt: doneAt!, stall };
    } catch (err) {
      throw new Error(`${(err as Error).message}; stall record: ${JSON.stringify(stall)}`);
    }
  }
}
