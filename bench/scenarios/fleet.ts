/**
 * Scenarios 2 and 3 on one fleet of VMs.
 *
 * Scale: N VMs hibernate, then wake, at registry latency L and concurrency C. Each hibernate completes
 * after one HEAD, each wake after one DELETE of the `:hibernate` tag (vk-cocoon's part is pre-played, see
 * lib/world.ts). Per phase: wall from the first CR create (hibernate) or desire edit (wake) to the last
 * terminal phase, throughput, ratio to the ideal ceil(N/C)·L·(registry calls per transition), this
 * process's peak RSS (the in-process workers and watcher), CPU seconds of the Temporal server and the rest.
 *
 * Idle: the same fleet at rest for a window, next to `sets` CocoonSets (a main agent and `subAgents`
 * sub-agents each; their pods are built by the operator and run by the stack's simulator, see
 * lib/world.ts) brought to a steady Running first: the operator's Kubernetes requests (Lists apart),
 * registry requests, workflow tasks and activities, per minute.
 */
import { cocoonSetWorkflowId, vmWorkflowId } from '../../src/api/ids.js';
import { type BenchEnv, metricsDelta, scrapeWorkerMetrics } from '../lib/env.js';
import {
  fetchEvents,
  historyFigures,
  medianCounts,
  type TemporalCounts,
  temporalCounts,
  terminateAll,
} from '../lib/history.js';
import { diffCounts, type KubeRequestCounts } from '../lib/kube-count.js';
import { type RunningOperator, startOperator } from '../lib/operator.js';
import { type CpuWindow, sampleRss, startCpuWindow } from '../lib/procstat.js';
import { driveScalePhase, type ScalePhaseName, seedScaleFleet } from '../lib/scale.js';
import { pool } from '../lib/stats.js';
import { BenchWorld } from '../lib/world.js';

/** Size and knobs of the fleet, and which of its measurements to take. */
export interface FleetOptions {
  n: number;
  latencyMs: number;
  concurrency: number;
  /** Run the scale measurement (else the fleet is only brought to rest, unmeasured). */
  scale: boolean;
  /** Idle window in ms (0 = no idle measurement). */
  idleMs: number;
  /** CocoonSets at rest beside the VMs in the idle window (0 = none). */
  sets?: number;
  /** Sub-agents per CocoonSet (besides its main agent). */
  subAgents?: number;
  /** Wait between the end of the scale phases and the idle window, ms. */
  settleMs?: number;
  /** CR creates / desire edits in flight at once. */
  parallel?: number;
  progress?: (msg: string) => void;
}

/** Figures of one scale phase (all N hibernates, or all N wakes). */
export interface ScalePhase {
  phase: 'hibernate' | 'wake';
  wallMs: number;
  /** Time to issue all N creates/edits (part of wall). */
  issueMs: number;
  transitionsPerSecond: number;
  registry: Record<string, number>;
  registryCallsPerTransition: number;
  idealMs: number;
  ratioToIdeal: number;
  peakRssMiB: number;
  cpuSeconds: CpuWindow;
  kube: KubeRequestCounts;
  workerMetrics: Record<string, number>;
  /** VMs that had to be nudged with a resync signal after the fleet stopped progressing (should be none). */
  nudged: string[];
}

/** Figures of the idle window; `perMinute` scales the window counts to one minute. */
export interface IdleResult {
  windowMs: number;
  vms: number;
  /** CocoonSets at rest in the window, their sub-agents each, and their pods (main + sub-agents). */
  sets: number;
  subAgents: number;
  setPods: number;
  /** From the first CocoonSet create until every set was steady (Running, all agents ready), ms. */
  setsSteadyMs: number;
  /** Sets not steady any more at the end of the window (should be none). */
  setsUnsteadyAtEnd: string[];
  /**
   * What building one set cost Temporal: its CocoonSet workflow's whole history (creation to steady, and
   * the settle time, in which a steady set adds nothing), read just before the window opened; field-wise
   * medians over the sets. The VM workflows of the sets' pods are not included. Absent without sets.
   */
  setBuild?: TemporalCounts;
  /** History growth in the window: VM workflows, CocoonSet workflows. */
  historyEventsAddedByKind: { vm: number; cocoonSet: number };
  /** Total history length when the window opened (evidence the workflows exist and were read). */
  historyEventsAtStartByKind: { vm: number; cocoonSet: number };
  perMinute: {
    kubeRequests: number;
    kubeLists: number;
    registryRequests: number;
    workflowTasks: number;
    activities: number;
    historyEvents: number;
  };
  kube: KubeRequestCounts;
  registry: Record<string, number>;
  workerMetrics: Record<string, number>;
  /** Sum over the fleet of history-length growth during the window (every workflow task adds events). */
  historyEventsAdded: number;
  cpuSeconds: CpuWindow;
}

/** Everything the fleet scenario measured (absent parts were not requested). */
export interface FleetResult {
  n: number;
  latencyMs: number;
  concurrency: number;
  setupMs: number;
  scale?: ScalePhase[];
  idle?: IdleResult;
}

/** Worker-runtime metric names whose deltas count workflow tasks and activity tasks. */
const WFT_METRIC = /workflow_task_execution_latency_count$/;
const ACT_METRIC = /activity_execution_latency_count$/;

function sumMatching(m: Record<string, number>, re: RegExp): number {
  return Object.entries(m)
    .filter(([k]) => re.test(k))
    .reduce((a, [, v]) => a + v, 0);
}

/** CocoonSets must all be steady within this long, plus the per-set allowance below. */
const SETS_STEADY_TIMEOUT_MS = 120_000;
const SETS_STEADY_PER_SET_MS = 3_000;

async function measurePhase(
  env: BenchEnv,
  world: BenchWorld,
  op: RunningOperator,
  opts: FleetOptions,
  phase: ScalePhaseName,
): Promise<ScalePhase> {
  const pods = world.pods;
  const kube0 = op.kubeConfig.snapshot();
  const reg0 = Object.fromEntries(op.proxy.counts);
  const met0 = await scrapeWorkerMetrics(env.metricsAddr);
  const rss = sampleRss();
  const cpu = startCpuWindow();
  const { issueMs, wallMs, nudged } = await driveScalePhase(env, world, phase, opts.parallel ?? 32);
  const cpuSeconds = cpu.stop();
  const peak = rss.stop();
  const met1 = await scrapeWorkerMetrics(env.metricsAddr);
  const registry: Record<string, number> = {};
  for (const [k, v] of op.proxy.counts) {
    const d = v - (reg0[k] ?? 0);
    if (d) registry[k] = d;
  }
  const calls = (phase === 'hibernate' ? registry.HEAD : registry.DELETE) ?? 0;
  const perTransition = calls / pods.length;
  const idealMs = Math.ceil(pods.length / opts.concurrency) * opts.latencyMs * perTransition;
  return {
    phase,
    wallMs,
    issueMs,
    transitionsPerSecond: (pods.length * 1000) / wallMs,
    registry,
    registryCallsPerTransition: perTransition,
    idealMs,
    ratioToIdeal: wallMs / idealMs,
    peakRssMiB: peak / 2 ** 20,
    cpuSeconds,
    kube: diffCounts(op.kubeConfig.snapshot(), kube0),
    workerMetrics: metricsDelta(met1, met0),
    nudged,
  };
}

async function historyTotal(env: BenchEnv, ids: readonly string[]): Promise<number> {
  const lens = await pool(ids, 16, (id) => historyFigures(env.client, id).then((f) => f.length));
  return lens.reduce((a, b) => a + b, 0);
}

/** Brings up the fleet, runs the scale phases and/or the idle window, cleans up. */
export async function runFleet(env: BenchEnv, opts: FleetOptions): Promise<FleetResult> {
  const say = opts.progress ?? (() => undefined);
  const t0 = Date.now();
  const world = await BenchWorld.create(env.admin, env.stack.ociRegistry, 'bench-fleet', env.log);
  const ids: string[] = [];
  const setIds: string[] = [];
  const result: FleetResult = {
    n: opts.n,
    latencyMs: opts.latencyMs,
    concurrency: opts.concurrency,
    setupMs: 0,
  };
  try {
    const pods = await seedScaleFleet(world, opts.n);
    ids.push(...pods.map((p) => vmWorkflowId(world.namespace, p)));
    const op = await startOperator(env, {
      namespace: world.namespace,
      concurrency: opts.concurrency,
      latencyMs: opts.latencyMs,
    });
    result.setupMs = Date.now() - t0;
    say(`fleet of ${opts.n} VMs set up in ${result.setupMs} ms`);
    try {
      if (opts.scale) {
        result.scale = [];
        for (const phase of ['hibernate', 'wake'] as const) {
          const r = await measurePhase(env, world, op, opts, phase);
          result.scale.push(r);
          say(
            `scale ${phase}: wall ${r.wallMs} ms, ${r.transitionsPerSecond.toFixed(1)}/s, registry ${JSON.stringify(r.registry)}`,
          );
        }
      } else {
        await driveScalePhase(env, world, 'hibernate', opts.parallel ?? 32);
        say(`fleet hibernated (unmeasured; scale not requested)`);
      }
      if (opts.idleMs > 0) {
        const sets = opts.sets ?? 0;
        const subAgents = opts.subAgents ?? 1;
        let setsSteadyMs = 0;
        if (sets > 0) {
          await world.trackCocoonSets();
          const s0 = Date.now();
          const names = await world.createCocoonSets(sets, { subAgents });
          setIds.push(...names.map((n) => cocoonSetWorkflowId(world.namespace, n)));
          await world.waitCocoonSetsSteady(SETS_STEADY_TIMEOUT_MS + sets * SETS_STEADY_PER_SET_MS);
          setsSteadyMs = Date.now() - s0;
          say(
            `${sets} CocoonSets (main + ${subAgents} sub-agent${subAgents === 1 ? '' : 's'} each) steady in ${setsSteadyMs} ms`,
          );
        }
        const settleMs = opts.settleMs ?? 10_000;
        await new Promise((r) => setTimeout(r, settleMs));
        // A set that changed during the settle time gets another settle time before the window opens.
        while (sets > 0 && Date.now() - world.lastSetChangeAt < settleMs) {
          await new Promise((r) => setTimeout(r, 1_000));
        }
        const setBuild = setIds.length
          ? medianCounts(
              await pool(setIds, 8, async (id) => temporalCounts(await fetchEvents(env.client, id))),
            )
          : undefined;
        await op.watcher.idle();
        const hist0 = await historyTotal(env, ids);
        const histSets0 = await historyTotal(env, setIds);
        const kube0 = op.kubeConfig.snapshot();
        const reg0 = Object.fromEntries(op.proxy.counts);
        const met0 = await scrapeWorkerMetrics(env.metricsAddr);
        const cpu = startCpuWindow();
        const w0 = Date.now();
        say(`idle window of ${opts.idleMs / 1000} s started`);
        await new Promise((r) => setTimeout(r, opts.idleMs));
        const windowMs = Date.now() - w0;
        const cpuSeconds = cpu.stop();
        const met1 = await scrapeWorkerMetrics(env.metricsAddr);
        const kube = diffCounts(op.kubeConfig.snapshot(), kube0);
        const registry: Record<string, number> = {};
        for (const [k, v] of op.proxy.counts) {
          const d = v - (reg0[k] ?? 0);
          if (d) registry[k] = d;
        }
        const hist1 = await historyTotal(env, ids);
        const histSets1 = await historyTotal(env, setIds);
        const workerMetrics = metricsDelta(met1, met0);
        const perMin = (x: number) => (x * 60_000) / windowMs;
        const regTotal = Object.values(registry).reduce((a, b) => a + b, 0);
        const added = hist1 - hist0 + (histSets1 - histSets0);
        result.idle = {
          windowMs,
          vms: opts.n,
          sets,
          subAgents,
          setPods: sets * (1 + subAgents),
          setsSteadyMs,
          setsUnsteadyAtEnd: world.unsteadySets(),
          setBuild,
          historyEventsAddedByKind: { vm: hist1 - hist0, cocoonSet: histSets1 - histSets0 },
          historyEventsAtStartByKind: { vm: hist0, cocoonSet: histSets0 },
          perMinute: {
            kubeRequests: perMin(kube.total),
            kubeLists: perMin(kube.lists),
            registryRequests: perMin(regTotal),
            workflowTasks: perMin(sumMatching(workerMetrics, WFT_METRIC)),
            activities: perMin(sumMatching(workerMetrics, ACT_METRIC)),
            historyEvents: perMin(added),
          },
          kube,
          registry,
          workerMetrics,
          historyEventsAdded: added,
          cpuSeconds,
        };
        say(`idle: ${JSON.stringify(result.idle.perMinute)}`);
      }
    } finally {
      await op.stop();
    }
  } finally {
    await terminateAll(env.client, [...ids, ...setIds]);
    await world.cleanup();
  }
  return result;
}
