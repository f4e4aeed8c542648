/**
 * Scenario 4: latency at low load. First `creates` CocoonHibernations created one at a time on pre-played
 * pods (create → Hibernated, as the seed shape's transition but alone). Then from a desire edit to the
 * operator's first pod patch (the hibernate annotation set or cleared): one edit at a time, rotating over a few VMs; before
 * the next edit the benchmark waits for the terminal phase and for the VM workflow to report it (its
 * `state` query), outside the timing. The edit time is taken just before the CR merge patch is sent, the
 * patch time when the patchPodAnnotations activity got the apiserver's answer.
 *
 * Then a back-to-back part: each of a few VMs gets its next edit as soon as the benchmark's watch sees
 * the previous terminal phase (as a user script would). Edits the VM workflow never acts on are counted
 * as lost (workflow view of the desire ≠ the API's after the stall guard), then recovered with a resync
 * signal. This measures a race, not a latency.
 */
import { vmWorkflowId } from '../../src/api/ids.js';
import type { HibernationDesire, HibernationPhase } from '../../src/api/types.js';
import type { BenchEnv } from '../lib/env.js';
import {
  eventTimeMs,
  fetchEvents,
  type HistoryEvent,
  medianCounts,
  type TemporalCounts,
  temporalCounts,
  terminateAll,
} from '../lib/history.js';
import { type ActivityCall, startOperator } from '../lib/operator.js';
import { percentile, pool } from '../lib/stats.js';
import { awaitTransition, type StallRecord, workflowSettled } from '../lib/transition.js';
import { BenchWorld } from '../lib/world.js';

/** An edit not finished after this long is a stall (recorded, then nudged with a resync signal). */
const STALL_MS = 10_000;

/** Edit counts, VM counts, registry latency and concurrency of the run. */
export interface LatencyOptions {
  edits: number;
  vms: number;
  /** Edits per VM in the back-to-back part (0 = skip it). */
  backToBackPerVM: number;
  backToBackVMs: number;
  latencyMs: number;
  concurrency: number;
  /** CRs created one at a time on pre-played pods, each awaited to Hibernated (0 = skip). */
  creates?: number;
  /**
   * Idle time before each of those creates, after the previous VM workflow settled, ms (default 200): the
   * target is a CR on an idle operator. Back to back (0) on a dev server at its default dispatch rate,
   * creates after the first few took ~120 ms instead of 60–90: the registry activity and the second
   * workflow task each waited ~30 ms to be dispatched (docs/performance.md#one-cr-on-an-idle-operator).
   */
  createIdleMs?: number;
  progress?: (msg: string) => void;
}

/** Nearest-rank percentiles and maximum, ms. */
export interface Quantiles {
  p50: number;
  p95: number;
  p99: number;
  max: number;
}

/** Latency distributions, stalls and the back-to-back race count. */
export interface LatencyResult {
  edits: number;
  vms: number;
  latencyMs: number;
  /** Edit → first pod patch, ms (edits that stalled excluded). */
  editToPatchMs: Quantiles;
  /** Edit → terminal phase (Hibernated / Active) seen by the benchmark's watch, ms. */
  editToDoneMs: Quantiles;
  /**
   * One CR at a time on an idle operator: create (desire Hibernate) on a pre-played pod → Hibernated seen
   * by the benchmark's watch, ms; `creates` samples (stalls excluded). Absent in results of older versions.
   */
  createToDoneMs?: Quantiles;
  creates?: number;
  createIdleMs?: number;
  /** Each create: local epoch ms just before the create was sent, and to Hibernated (NaN = stalled). */
  createSamples?: { pod: string; createAt: number; toDoneMs: number }[];
  /** Low-load edits that did not finish within STALL_MS and needed a resync signal. */
  stalls: StallRecord[];
  samples: {
    pod: string;
    desire: HibernationDesire;
    /** Local epoch ms just before the edit was sent. */
    editAt: number;
    toPatchMs: number;
    toDoneMs: number;
    stalled: boolean;
  }[];
  /**
   * What one transition cost Temporal, by kind: the initial CR create → Hibernated (which starts the VM
   * workflow) and the low-load hibernate and wake edits that did not stall. Each transition is the slice of
   * its VM workflow's history from its edit (or the run's start) to the VM's next edit (or the end of the
   * low-load part); field-wise medians over the slices. Absent in results of older versions.
   */
  temporalPerTransition?: { transition: string; samples: number; counts: TemporalCounts }[];
  backToBack?: { edits: number; vms: number; lost: number; slow: number; stalls: StallRecord[] };
}

function quantiles(xs: number[]): Quantiles {
  return {
    p50: percentile(xs, 50),
    p95: percentile(xs, 95),
    p99: percentile(xs, 99),
    max: xs.length ? Math.max(...xs) : Number.NaN,
  };
}

const target = (d: HibernationDesire): HibernationPhase => (d === 'Wake' ? 'Active' : 'Hibernated');
const flip = (d: HibernationDesire): HibernationDesire => (d === 'Hibernate' ? 'Wake' : 'Hibernate');

/** Events of `events` with a server time in [from, to). */
function between(events: readonly HistoryEvent[], from: number, to: number): HistoryEvent[] {
  return events.filter((ev) => {
    const t = eventTimeMs(ev);
    return t >= from && t < to;
  });
}

/**
 * Per-transition Temporal figures of the low-load part (see LatencyResult.temporalPerTransition) from the
 * current run of each VM's workflow, read once at its end (`end`, local epoch ms). A run that continued as
 * new drops the slices that began before it, and its creation slice.
 */
async function perTransitionCounts(
  env: BenchEnv,
  namespace: string,
  pods: readonly string[],
  samples: LatencyResult['samples'],
  end: number,
): Promise<NonNullable<LatencyResult['temporalPerTransition']>> {
  const rows = new Map<string, TemporalCounts[]>();
  const push = (kind: string, c: TemporalCounts) => rows.set(kind, [...(rows.get(kind) ?? []), c]);
  await pool(pods, 4, async (pod) => {
    const events = await fetchEvents(env.client, vmWorkflowId(namespace, pod));
    const first = events[0];
    if (!first) return;
    const runStart = eventTimeMs(first);
    const mine = samples.filter((s) => s.pod === pod);
    const firstRun = !first.workflowExecutionStartedEventAttributes?.continuedExecutionRunId;
    if (firstRun) push('create → Hibernated', temporalCounts(between(events, 0, mine[0]?.editAt ?? end)));
    mine.forEach((s, i) => {
      if (s.stalled || s.editAt < runStart) return;
      const to = mine[i + 1]?.editAt ?? end;
      push(
        s.desire === 'Wake' ? 'wake (desire edit)' : 'hibernate (desire edit)',
        temporalCounts(between(events, s.editAt, to)),
      );
    });
  });
  return ['create → Hibernated', 'hibernate (desire edit)', 'wake (desire edit)']
    .filter((k) => rows.has(k))
    .map((k) => ({ transition: k, samples: rows.get(k)!.length, counts: medianCounts(rows.get(k)!) }));
}

/** Runs the edits and returns the distributions. */
export async function runLatency(env: BenchEnv, opts: LatencyOptions): Promise<LatencyResult> {
  const world = await BenchWorld.create(env.admin, env.stack.ociRegistry, 'bench-latency', env.log);
  const ids: string[] = [];
  const patches: ActivityCall[] = [];
  const nVMs = Math.max(opts.vms, opts.backToBackVMs);
  try {
    const pods = await world.createPods(nVMs, { running: true });
    const fresh = await world.createPods(opts.creates ?? 0, { running: true });
    ids.push(...[...pods, ...fresh].map((p) => vmWorkflowId(world.namespace, p)));
    await world.pushHibernateTags([...pods, ...fresh]);
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
    const desire = new Map<string, HibernationDesire>(pods.map((p) => [p, 'Hibernate']));
    const createSamples: NonNullable<LatencyResult['createSamples']> = [];
    let backToBack: LatencyResult['backToBack'];
    let temporalPerTransition: LatencyResult['temporalPerTransition'];
    try {
      await world.createCRs(pods, 'Hibernate', pods.length);
      await world.waitPhase(pods, 'Hibernated', 120_000);
      for (const p of pods) await workflowSettled(env, world, p, 'Hibernated');
      for (const pod of fresh) {
        await new Promise((r) => setTimeout(r, opts.createIdleMs ?? 200));
        const [t0] = await world.createCRs([pod], 'Hibernate', 1);
        const { doneAt, stall } = await awaitTransition(env, world, pod, 'Hibernated', 1, {
          stallMs: STALL_MS,
          timeoutMs: 120_000,
        });
        if (stall) stalls.push(stall);
        createSamples.push({ pod, createAt: t0!, toDoneMs: stall ? Number.NaN : doneAt - t0! });
        await workflowSettled(env, world, pod, 'Hibernated');
      }
      const lowLoad = pods.slice(0, opts.vms);
      for (let i = 0; i < opts.edits; i++) {
        const pod = lowLoad[i % lowLoad.length]!;
        const next = flip(desire.get(pod)!);
        // A wake dropped the tag; the next hibernate needs the snapshot vk-cocoon would push again.
        if (next === 'Hibernate') await world.pushHibernateTag(pod);
        const seen = patches.length;
        const t0 = Date.now();
        const gen = await world.setDesire(pod, next);
        const { doneAt, stall } = await awaitTransition(env, world, pod, target(next), gen, {
          stallMs: STALL_MS,
          timeoutMs: 120_000,
        });
        if (stall) {
          stalls.push(stall);
          opts.progress?.(`latency: edit ${i + 1} stalled (lost edit: ${stall.lostEdit})`);
        }
        const patch = patches.slice(seen).find((c) => (c.input as { pod?: string }).pod === pod);
        desire.set(pod, next);
        samples.push({
          pod,
          desire: next,
          editAt: t0,
          toPatchMs: patch ? patch.end - t0 : Number.NaN,
          toDoneMs: doneAt - t0,
          stalled: stall !== undefined,
        });
        await workflowSettled(env, world, pod, target(next));
        if ((i + 1) % 50 === 0) opts.progress?.(`latency: ${i + 1}/${opts.edits} edits`);
      }
      temporalPerTransition = await perTransitionCounts(env, world.namespace, lowLoad, samples, Date.now());
      if (opts.backToBackPerVM > 0) {
        const b2b: StallRecord[] = [];
        const vms = pods.slice(0, opts.backToBackVMs);
        await pool(vms, vms.length, async (pod) => {
          for (let k = 0; k < opts.backToBackPerVM; k++) {
            const next = flip(desire.get(pod)!);
            if (next === 'Hibernate') await world.pushHibernateTag(pod);
            const gen = await world.setDesire(pod, next);
            const { stall } = await awaitTransition(env, world, pod, target(next), gen, {
              stallMs: STALL_MS,
              timeoutMs: 120_000,
            });
            desire.set(pod, next);
            if (stall) b2b.push(stall);
          }
        });
        const lost = b2b.filter((s) => s.lostEdit).length;
        backToBack = {
          edits: vms.length * opts.backToBackPerVM,
          vms: vms.length,
          lost,
          slow: b2b.length - lost,
          stalls: b2b,
        };
        opts.progress?.(`latency: back-to-back ${backToBack.edits} edits, ${lost} lost`);
      }
    } finally {
      await op.stop();
    }
    const clean = samples.filter((s) => !s.stalled);
    const createMs = createSamples.map((s) => s.toDoneMs).filter((x) => !Number.isNaN(x));
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
      createToDoneMs: createMs.length ? quantiles(createMs) : undefined,
      creates: createMs.length,
      createIdleMs: opts.createIdleMs ?? 200,
      createSamples,
      stalls,
      samples,
      backToBack,
      temporalPerTransition,
    };
  } finally {
    await terminateAll(env.client, ids);
    await world.cleanup();
  }
}
