/**
 * Scenario 1, the seed shape (seed/pr16-reconcile-throughput.txt, the reference operator's benchmark, on
 * the real stack): N independent VMs, one Hibernate transition each whose completion needs exactly one
 * registry probe (HEAD of `<vm>:hibernate`), for each registry latency L and registry concurrency C.
 * The clock starts when the N CocoonHibernations are created (all requests issued at once) and stops
 * when the last one reports phase Hibernated. Ideal = ceil(N/C)·L·(probes per transition).
 */
import { vmWorkflowId } from '../../src/api/ids.js';
import type { BenchEnv } from '../lib/env.js';
import { medianCounts, runTimeline, type TemporalCounts, terminateAll } from '../lib/history.js';
import { diffCounts, type KubeRequestCounts } from '../lib/kube-count.js';
import { startOperator, startWorkflowHost, type WorkflowHost } from '../lib/operator.js';
import { type CpuWindow, sampleRss, startCpuWindow } from '../lib/procstat.js';
import { median, pool, type Summary, summarize } from '../lib/stats.js';
import { BenchWorld } from '../lib/world.js';

/** The matrix: N, the concurrencies C, the latencies L (ms), repetitions. */
export interface SeedOptions {
  n: number;
  concurrencies: number[];
  latencies: number[];
  reps: number;
  /** Per-run completion timeout, ms. */
  timeoutMs?: number;
  progress?: (msg: string) => void;
}

/** Where one VM's time went (ms), from its workflow history and the tracker. */
export interface Breakdown {
  /** CR create request issued → VM workflow started (apiserver, watch, watcher, signal-with-start). */
  createToWorkflowStart: number;
  /** Workflow started → registry probe scheduled (world read, finalizer add, workflow tasks). */
  workflowStartToProbe: number;
  /** Probe scheduled → picked up by a registry slot (waiting for a free slot). */
  probeQueued: number;
  /** Probe started → completed (HTTP through the latency proxy). */
  probeRun: number;
  /** Probe completed → CR seen Hibernated (Event, status patch, watch delivery). */
  probeToDone: number;
  /** CR create issued → CR seen Hibernated. */
  total: number;
}

/** Figures of one run (one L, one C, one repetition). */
export interface SeedRun {
  concurrency: number;
  latencyMs: number;
  rep: number;
  wallMs: number;
  /** Registry requests by method at completion, and after the post-run settle. */
  registryAtDone: Record<string, number>;
  registryAfterSettle: Record<string, number>;
  /** HEADs per transition, after settle. */
  probesPerTransition: number;
  kube: KubeRequestCounts;
  /** CPU seconds from the first create to the last Hibernated, per process and for the whole machine. */
  cpuSeconds: CpuWindow;
  /** Durations of the unmeasured parts of the run (world setup, operator start), ms. */
  setupMs: Record<string, number>;
  /** Longest wait of a probe for a free registry slot, ms. */
  maxProbeQueuedMs: number;
  /** Medians over the N VMs. */
  medianBreakdown: Breakdown;
  /** The VM that finished last. */
  lastBreakdown: Breakdown;
  /** Medians per VM: workflow tasks, activities, history events. */
  perVM: { workflowTasks: number; activities: number; events: number; kubeActivityMs: number };
  activityMix: Record<string, number>;
  /** What one transition cost Temporal: field-wise medians over the N VM workflow histories. */
  temporalPerVM: TemporalCounts;
  /**
   * Peak RSS of the benchmark process (workers, watcher, harness) from the first create to the last
   * Hibernated, MiB (sampled every 50 ms).
   */
  peakRssMiB: number;
}

/** Figures of one (L, C) cell over its repetitions. */
export interface SeedCell {
  concurrency: number;
  latencyMs: number;
  wallMs: Summary;
  /** Median wall at C=1 (same L) ÷ median wall here. */
  speedup: number;
  probesPerTransition: number;
  /** ceil(N/C)·L·probes per transition, ms. */
  idealMs: number;
  /** Median wall ÷ ideal. */
  ratioToIdeal: number;
  /** Median wall − ideal: the part no registry wait explains, ms. */
  overheadMs: number;
  /**
   * Median CPU milliseconds per transition: this process (workers + watcher), Temporal, apiserver, etcd,
   * and all of them plus the registry and the simulator (`all`).
   */
  cpuMsPerTransition: { bench: number; temporal: number; apiserver: number; etcd: number; all: number };
  /** What one transition cost Temporal: medians over the VMs of a run, then over the repetitions. */
  temporalPerTransition: TemporalCounts;
  /** Largest peak RSS of the benchmark process over the repetitions, MiB. */
  peakRssMiB: number;
  /** Median share of the machine's CPU busy in the window that none of the above used (other load). */
  otherLoadShare: number;
  medianBreakdown: Breakdown;
}

/** Every run and the per-cell summary. */
export interface SeedResult {
  n: number;
  runs: SeedRun[];
  cells: SeedCell[];
}

const BREAKDOWN_KEYS: (keyof Breakdown)[] = [
  'createToWorkflowStart',
  'workflowStartToProbe',
  'probeQueued',
  'probeRun',
  'probeToDone',
  'total',
];

function medianOf(rows: Breakdown[]): Breakdown {
  const out = {} as Breakdown;
  for (const k of BREAKDOWN_KEYS) out[k] = median(rows.map((r) => r[k]));
  return out;
}

/** Time after completion during which late registry calls and signals would still be counted, ms. */
const SETTLE_MS = 500;
/** RSS sampling period during a run, ms. */
const RSS_SAMPLE_MS = 50;

/** CPU seconds of this process and every stack component in a window (unreadable components as 0). */
function allCpuSeconds(w: CpuWindow): number {
  return w.self + Object.values(w.stack).reduce((a, b) => a + (Number.isNaN(b) ? 0 : b), 0);
}

/**
 * One run: fresh namespace, pods, tags, registry proxy, registry workers and watcher; the workflow worker
 * `host` is shared by the runs of a matrix (its previous runs' workflows are terminated before the clock
 * starts). The clock starts only after `previous` (the last run's cleanup, which overlaps this run's
 * setup) has finished. Resolves with the run and its own cleanup, already started.
 */
async function seedRun(
  env: BenchEnv,
  host: WorkflowHost,
  n: number,
  c: number,
  l: number,
  rep: number,
  timeoutMs: number,
  previous: Promise<void>,
): Promise<{ run: SeedRun; cleanup: Promise<void> }> {
  const tSetup = Date.now();
  const phases: Record<string, number> = {};
  const world = await BenchWorld.create(env.admin, env.stack.ociRegistry, 'bench-seed', env.log);
  const ids: string[] = [];
  let run: SeedRun | undefined;
  let failure: unknown;
  try {
    ids.push(...Array.from({ length: n }, (_, i) => vmWorkflowId(world.namespace, BenchWorld.podName(i))));
    // The world (pods, tags, tracker) and the operator (workers, watcher) are set up side by side.
    const [worldSetup, opStart] = await Promise.allSettled([
      (async () => {
        const created = await world.createPods(n);
        await world.pushHibernateTags(created);
        await world.track();
        phases.world = Date.now() - tSetup;
        return created;
      })(),
      startOperator(env, { namespace: world.namespace, concurrency: c, latencyMs: l, host }).then((o) => {
        phases.operatorStart = Date.now() - tSetup;
        return o;
      }),
    ]);
    if (opStart.status === 'rejected') throw opStart.reason;
    const op = opStart.value;
    if (worldSetup.status === 'rejected') {
      await op.stop();
      throw worldSetup.reason;
    }
    const pods = worldSetup.value;
    const tPrev = Date.now();
    await previous;
    phases.previousCleanupWait = Date.now() - tPrev;
    try {
      const kubeBefore = op.kubeConfig.snapshot();
      const rss = sampleRss(RSS_SAMPLE_MS);
      const cpu = startCpuWindow();
      const t0 = Date.now();
      const createdAt = await world.createCRs(pods, 'Hibernate', n);
      const doneAt = await world.waitPhase(pods, 'Hibernated', timeoutMs);
      const wallMs = Math.max(...doneAt) - t0;
      const cpuSeconds = cpu.stop();
      const peakRss = rss.stop();
      const registryAtDone = Object.fromEntries(op.proxy.counts);
      // Histories are read after the settle, so the watcher's signals about the operator's own last
      // writes (and the workflow tasks they cause) count in the transition.
      await new Promise((r) => setTimeout(r, SETTLE_MS));
      const registryAfterSettle = Object.fromEntries(op.proxy.counts);
      const timelines = await pool(ids, 8, (id) => runTimeline(env.client, id));
      const kube = diffCounts(op.kubeConfig.snapshot(), kubeBefore);
      const rows: Breakdown[] = timelines.map((tl, i) => {
        const reg = tl.registry;
        return {
          createToWorkflowStart: tl.started - createdAt[i]!,
          workflowStartToProbe: (reg?.scheduled ?? Number.NaN) - tl.started,
          probeQueued: (reg?.started ?? Number.NaN) - (reg?.scheduled ?? Number.NaN),
          probeRun: (reg?.completed ?? Number.NaN) - (reg?.started ?? Number.NaN),
          probeToDone: doneAt[i]! - (reg?.completed ?? Number.NaN),
          total: doneAt[i]! - createdAt[i]!,
        };
      });
      const last = doneAt.indexOf(Math.max(...doneAt));
      const mix: Record<string, number> = {};
      for (const tl of timelines)
        for (const [k, v] of Object.entries(tl.activities)) mix[k] = (mix[k] ?? 0) + v / timelines.length;
      run = {
        concurrency: c,
        latencyMs: l,
        rep,
        wallMs,
        registryAtDone,
        registryAfterSettle,
        probesPerTransition: (registryAfterSettle.HEAD ?? 0) / n,
        kube,
        cpuSeconds,
        setupMs: phases,
        maxProbeQueuedMs: Math.max(...rows.map((r) => r.probeQueued)),
        medianBreakdown: medianOf(rows),
        lastBreakdown: rows[last]!,
        perVM: {
          workflowTasks: median(timelines.map((t) => t.workflowTasks)),
          activities: median(timelines.map((t) => Object.values(t.activities).reduce((a, b) => a + b, 0))),
          events: median(timelines.map((t) => t.events)),
          kubeActivityMs: median(timelines.map((t) => t.kubeActivityMs)),
        },
        activityMix: mix,
        temporalPerVM: medianCounts(timelines.map((t) => t.counts)),
        peakRssMiB: peakRss / 2 ** 20,
      };
    } finally {
      const tStop = Date.now();
      await op.stop();
      phases.operatorStop = Date.now() - tStop;
    }
  } catch (err) {
    failure = err;
  }
  const cleanup = (async () => {
    const tClean = Date.now();
    await terminateAll(env.client, ids);
    await world.cleanup();
    phases.cleanup = Date.now() - tClean;
  })().catch((err) => env.log.warn({ err: String(err) }, 'seed cleanup failed'));
  if (failure !== undefined || !run) {
    await cleanup;
    throw failure ?? new Error('seed run produced no result');
  }
  return { run, cleanup };
}

/**
 * Runs the matrix (repetitions outermost, so slow drift of the machine spreads over all cells) on one
 * workflow worker shared by all runs; each run brings its own registry workers (C slots) and watcher.
 */
export async function runSeed(env: BenchEnv, opts: SeedOptions): Promise<SeedResult> {
  const runs: SeedRun[] = [];
  const timeoutMs = opts.timeoutMs ?? 120_000;
  const host = await startWorkflowHost(env);
  try {
    return await matrix(env, host, opts, runs, timeoutMs);
  } finally {
    await host.stop();
  }
}

/** The warm-up run, then every (rep, L, C) run, then the per-cell summary. */
async function matrix(
  env: BenchEnv,
  host: WorkflowHost,
  opts: SeedOptions,
  runs: SeedRun[],
  timeoutMs: number,
): Promise<SeedResult> {
  // One small unrecorded run first, so the first recorded cell does not pay JIT and connection warm-up.
  const warm = await seedRun(
    env,
    host,
    Math.min(4, opts.n),
    4,
    opts.latencies[0] ?? 5,
    -1,
    timeoutMs,
    Promise.resolve(),
  );
  let pending = warm.cleanup;
  opts.progress?.(
    `seed warm-up (N=${Math.min(4, opts.n)}, not recorded): wall ${warm.run.wallMs.toFixed(0)} ms`,
  );
  for (let rep = 0; rep < opts.reps; rep++) {
    for (const l of opts.latencies) {
      for (const c of opts.concurrencies) {
        const { run: r, cleanup } = await seedRun(env, host, opts.n, c, l, rep, timeoutMs, pending);
        pending = cleanup;
        runs.push(r);
        opts.progress?.(
          `seed rep ${rep + 1}/${opts.reps} L=${l}ms C=${c}: wall ${r.wallMs.toFixed(0)} ms, HEAD ${r.registryAfterSettle.HEAD ?? 0}`,
        );
      }
    }
  }
  await pending;
  const cells: SeedCell[] = [];
  for (const l of opts.latencies) {
    const base = median(runs.filter((r) => r.latencyMs === l && r.concurrency === 1).map((r) => r.wallMs));
    for (const c of opts.concurrencies) {
      const mine = runs.filter((r) => r.latencyMs === l && r.concurrency === c);
      const wall = summarize(mine.map((r) => r.wallMs));
      const probes = median(mine.map((r) => r.probesPerTransition));
      const idealMs = Math.ceil(opts.n / c) * l * probes;
      cells.push({
        concurrency: c,
        latencyMs: l,
        wallMs: wall,
        speedup: base / wall.median,
        probesPerTransition: probes,
        idealMs,
        ratioToIdeal: wall.median / idealMs,
        overheadMs: wall.median - idealMs,
        cpuMsPerTransition: {
          bench: median(mine.map((r) => (1000 * r.cpuSeconds.self) / opts.n)),
          temporal: median(mine.map((r) => (1000 * r.cpuSeconds.stack.temporal) / opts.n)),
          apiserver: median(mine.map((r) => (1000 * r.cpuSeconds.stack['kube-apiserver']) / opts.n)),
          etcd: median(mine.map((r) => (1000 * r.cpuSeconds.stack.etcd) / opts.n)),
          all: median(mine.map((r) => (1000 * allCpuSeconds(r.cpuSeconds)) / opts.n)),
        },
        temporalPerTransition: medianCounts(mine.map((r) => r.temporalPerVM)),
        peakRssMiB: Math.max(...mine.map((r) => r.peakRssMiB)),
        otherLoadShare: median(mine.map((r) => r.cpuSeconds.otherShare)),
        medianBreakdown: medianOf(mine.map((r) => r.medianBreakdown)),
      });
    }
  }
  return { n: opts.n, runs, cells };
}
