/**
 * Scenario 4: latency from a CocoonHibernation desire edit to the operator's first pod patch (the
 * hibernate annotation set or cleared), at low load: one edit at a time over a few VMs, each edit waiting
 * for the previous transition to reach its terminal phase. The edit time is taken just before the CR
 * merge patch is sent; the patch time when the patchPodAnnotations activity got the apiserver's answer.
 */
import { vmWorkflowId } from '../../src/api/ids.js';
import type { HibernationDesire } from '../../src/api/types.js';
import type { BenchEnv } from '../lib/env.js';
import { terminateAll } from '../lib/history.js';
import { type ActivityCall, startOperator } from '../lib/operator.js';
import { percentile } from '../lib/stats.js';
import { awaitTransition, type StallRecord } from '../lib/transition.js';
import { BenchWorld } from '../lib/world.js';

export interface LatencyOptions {
  edits: number;
  vms: number;
  latencyMs: number;
  concurrency: number;
  progress?: (msg: string) => void;
}

export interface LatencyResult {
  edits: number;
  vms: number;
  latencyMs: number;
  /** Edit → first pod patch, ms. */
  editToPatchMs: { p50: number; p95: number; p99: number; max: number };
  /** Edit → terminal phase (Hibernated / Active) seen by the benchmark's watch, ms. */
  editToDoneMs: { p50: number; p95: number; p99: number; max: number };
  /** Edits that did not complete within STALL_MS and needed a resync signal (excluded from the quantiles). */
  stalls: StallRecord[];
  samples: {
    pod: string;
    desire: HibernationDesire;
    toPatchMs: number;
    toDoneMs: number;
    stalled: boolean;
  }[];
}

/** An edit not finished after this long is a stall (recorded, then nudged with a resync signal). */
const STALL_MS = 30_000;

function quantiles(xs: number[]) {
  return { p50: percentile(xs, 50), p95: percentile(xs, 95), p99: percentile(xs, 99), max: Math.max(...xs) };
}

/** Runs the edits and returns the distributions. */
export async function runLatency(env: BenchEnv, opts: LatencyOptions): Promise<LatencyResult> {
  const world = await BenchWorld.create(env.admin, env.stack.ociRegistry, 'bench-latency', env.log);
  const ids: string[] = [];
  const patches: ActivityCall[] = [];
  try {
    const pods = await world.createPods(opts.vms, { running: true });
    ids.push(...pods.map((p) => vmWorkflowId(world.namespace, p)));
    await world.pushHibernateTags(pods);
    await world.track();
    const op = await startOperator(env, {
      namespace: world.namespace,
      concurrency: opts.concurrency,
      latencyMs: opts.latencyMs,
      onActivity: (call) => {
        if (call.name === 'patchPodAnnotations' && call.ok) patches.push(call);
      },
    });
    const samples: LatencyResult['samples'] = [];
    const stalls: StallRecord[] = [];
    try {
      await world.createCRs(pods, 'Hibernate', pods.length);
      await world.waitPhase(pods, 'Hibernated', 120_000);
      const desire = new Map<string, HibernationDesire>(pods.map((p) => [p, 'Hibernate']));
      for (let i = 0; i < opts.edits; i++) {
        const pod = pods[i % pods.length]!;
        const next: HibernationDesire = desire.get(pod) === 'Hibernate' ? 'Wake' : 'Hibernate';
        // A wake dropped the tag; the next hibernate needs the snapshot vk-cocoon would push again.
        if (next === 'Hibernate') await world.pushHibernateTag(pod);
        const seen = patches.length;
        const t0 = Date.now();
        const gen = await world.setDesire(pod, next);
        const want = next === 'Wake' ? 'Active' : 'Hibernated';
        const { doneAt, stall } = await awaitTransition(env, world, pod, want, gen, {
          stallMs: STALL_MS,
          timeoutMs: 120_000,
        });
        if (stall) {
          stalls.push(stall);
          opts.progress?.(`latency: edit ${i + 1} stalled ${STALL_MS} ms (${JSON.stringify(stall)})`);
        }
        const patch = patches.slice(seen).find((c) => (c.input as { pod?: string }).pod === pod);
        desire.set(pod, next);
        samples.push({
          pod,
          desire: next,
          toPatchMs: patch ? patch.end - t0 : Number.NaN,
          toDoneMs: doneAt - t0,
          stalled: stall !== undefined,
        });
        if ((i + 1) % 50 === 0) opts.progress?.(`latency: ${i + 1}/${opts.edits} edits`);
      }
    } finally {
      await op.stop();
    }
    const clean = samples.filter((s) => !s.stalled);
    const toPatch = clean.map((s) => s.toPatchMs).filter((x) => !Number.isNaN(x));
    if (toPatch.length !== clean.length) {
      throw new Error(`${clean.length - toPatch.length} edits completed without a pod patch being seen`);
    }
    return {
      edits: samples.length,
      vms: opts.vms,
      latencyMs: opts.latencyMs,
      editToPatchMs: quantiles(toPatch),
      editToDoneMs: quantiles(clean.map((s) => s.toDoneMs)),
      stalls,
      samples,
    };
  } finally {
    await terminateAll(env.client, ids);
    await world.cleanup();
  }
}
