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
import type { BenchWorld } from './world.js';

/** One stalled transition: what the API and the workflow said when the guard fired. */
export interface StallRecord {
  pod: string;
  wantPhase: HibernationPhase;
  generation: number;
  afterMs: number;
  cr: { desire?: string; phase?: string; observedGeneration?: number; resourceVersion?: string };
  workflowView: unknown;
  /** Whether the resync signal brought the transition to its terminal phase. */
  recovered: boolean;
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
