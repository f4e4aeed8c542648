/**
 * The operator as shipped: the image's command, `node … dist/operator.js` (the Dockerfile's CMD, read from it:
 * the main thread compiled and bundled, the prebuilt workflow bundle, no TypeScript loader) as a child process, so its memory and CPU are the operator's
 * alone, without the benchmark harness and its own client that the in-process scenarios include.
 *
 * One run per workflow cache size asked for (`WORKFLOW_CACHE_SIZE` of the child; unset = the shipped
 * default): a fresh namespace with the scale scenario's N pre-played VMs and their `:hibernate` tags
 * (lib/scale.ts), a registry proxy at latency L in this process, the child configured by environment
 * variables: the `ENV` lines of the Dockerfile's runtime stage (NODE_ENV=production, …), then the stack's
 * kubeconfig and Temporal, the proxy as its registry, a fresh task queue, the watcher scoped to the
 * namespace, no leader election, HIBERNATION_CONCURRENCY = C, every other setting at its default (logs at
 * info as shipped), then `extraEnv` (for trying a change before shipping it). The child runs under the
 * memory limit of the operator's Deployment (a cgroup, lib/cgroup.ts; Node sizes its V8 heaps from it) when
 * the machine allows, else unconstrained, and the results say which. Then all N hibernate, and all N wake.
 *
 * Measured: the child's VmRSS sampled every 200 ms (peak per phase), its VmHWM (peak over its life), its
 * RSS after ready (no VM yet) and after the wake plus a settle time (N VMs known, all Active), its heap as
 * its own /metrics reports it, its user+system CPU per phase from /proc/<pid>/stat (threads included:
 * the Temporal core and the workflow thread run inside it), and the stack's CPU per phase like the other
 * scenarios, with /proc/loadavg at each phase's start and end (the machine is shared).
 *
 * Needs `npm run build` output newer than src/ (built here when it is missing or older, and said so). The
 * child's log goes to `<results>-shipped-<i>.log` next to the results file.
 */
import { execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { vmWorkflowId } from '../../src/api/ids.js';
import {
  cleanEnv,
  imageNode,
  metricSum,
  type OperatorProcess,
  stackEnv as operatorStackEnv,
  ROOT,
  scrapeMetrics,
  startReadyOperator,
  stopOperator,
} from '../../test/e2e/operator-process.js';
import { imageEnv } from '../../test/support/dockerfile.js';
import { freePort } from '../../test/support/ports.js';
import { RegistryProxy } from '../../test/support/registry-proxy.js';
import {
  createMemoryCgroup,
  deploymentMemoryLimit,
  type MemoryCgroup,
  type MemoryCgroupUsage,
  quantityBytes,
} from '../lib/cgroup.js';
import type { BenchEnv } from '../lib/env.js';
import { eventTimeMs, fetchEvents, temporalCounts, terminateAll } from '../lib/history.js';
import { type CpuWindow, pidCpuSeconds, pidMemory, samplePidRss, startCpuWindow } from '../lib/procstat.js';
import { driveScalePhase, type ScalePhaseName, seedScaleFleet } from '../lib/scale.js';
import { pool } from '../lib/stats.js';
import { BenchWorld } from '../lib/world.js';

/** Size and knobs of the shipped-operator runs. */
export interface ShippedOptions {
  n: number;
  latencyMs: number;
  concurrency: number;
  /** One run per entry: the child's WORKFLOW_CACHE_SIZE; `undefined` = unset (the shipped default). */
  cacheSizes: (string | undefined)[];
  /** Wait after the wake before the final RSS reading, ms. */
  settleMs?: number;
  /** CR creates / desire edits in flight at once. */
  parallel?: number;
  /** Further environment of the child, over everything else (e.g. NODE_OPTIONS to try a V8 flag). */
  extraEnv?: Record<string, string>;
  /**
   * The child's memory limit (a cgroup, see lib/cgroup.ts): `deployment` (the default) = the operator
   * container's `resources.limits.memory` in config/manager/deployment.yaml, as a cluster runs it; `none` =
   * unconstrained; or a quantity (`768Mi`).
   */
  memoryLimit?: string;
  /** Where the child's log goes: `<logPrefix>-<i>.log`. */
  logPrefix: string;
  progress?: (msg: string) => void;
}

/** /proc/loadavg's three averages. */
type LoadAvg = [number, number, number];

/** The child's memory at one moment, MiB (heap figures from its own /metrics; NaN when unreadable). */
export interface MemoryPoint {
  rssMiB: number;
  hwmMiB: number;
  heapUsedMiB: number;
  heapTotalMiB: number;
  externalMiB: number;
}

/** One phase of a shipped run. */
export interface ShippedPhase {
  phase: ScalePhaseName;
  wallMs: number;
  issueMs: number;
  transitionsPerSecond: number;
  registry: Record<string, number>;
  registryCallsPerTransition: number;
  /** The child's user + system CPU seconds in the phase. */
  operatorCpuS: number;
  operatorCpuMsPerTransition: number;
  /** Highest VmRSS sample of the child in the phase. */
  peakRssMiB: number;
  /** Memory at the phase's end. */
  end: MemoryPoint;
  cpuSeconds: CpuWindow;
  loadavgStart: LoadAvg;
  loadavgEnd: LoadAvg;
  nudged: string[];
  /** From the VM workflows' histories, the events inside the phase's window; per transition. */
  temporal?: PhaseTemporal;
}

/** What a phase cost Temporal, per transition (summed over every VM workflow, divided by N). */
export interface PhaseTemporal {
  workflowTasks: number;
  /** Workflow tasks timed out: with this operator, sticky-queue schedule-to-start timeouts. */
  workflowTaskTimeouts: number;
  events: number;
}

/** The memory limit a shipped run had (or why it had none). */
export interface ShippedMemoryLimit {
  /** As asked: `deployment`, `none` or a quantity. */
  setting: string;
  /** The limit as written (`512Mi`) and in bytes; absent for `none`. */
  quantity?: string;
  bytes?: number;
  /** True when the child ran in a cgroup with that limit. */
  applied: boolean;
  /** Why it was not applied (not root, no memory controller). */
  unavailable?: string;
  /** The cgroup's counters at the run's end (peak charge, times at the limit, OOM kills). */
  usage?: MemoryCgroupUsage;
}

/** One shipped run (one cache size). */
export interface ShippedRun {
  /** The child's WORKFLOW_CACHE_SIZE, or `default` when unset. */
  cacheSetting: string;
  /** The image's environment (Dockerfile runtime stage) and `extraEnv`, as given to the child. */
  shippedEnv: Record<string, string>;
  extraEnv: Record<string, string>;
  /** maxCachedWorkflows as the worker resolved it (from its 'Temporal workers running' log line). */
  effectiveCacheSize?: number;
  memoryLimit: ShippedMemoryLimit;
  /** The V8 heap limit of the child's main thread as it logged it (Node derives it from the memory limit). */
  heapLimitMiB?: number;
  node: string;
  setupMs: number;
  /** Process start → /readyz 200, ms. */
  readyMs: number;
  /** After ready, before any CR. */
  ready: MemoryPoint;
  phases: ShippedPhase[];
  /** After the wake and the settle time: N VMs known, all Active. */
  settled: MemoryPoint;
  settleMs: number;
  /** The child's CPU seconds over its life (start-up included). */
  operatorCpuTotalS: number;
  log: string;
}

/** Everything the shipped scenario measured. */
export interface ShippedResult {
  n: number;
  latencyMs: number;
  concurrency: number;
  /** `built` when this run ran `npm run build`, `up to date` when dist/ was newer than src/. */
  build: 'built' | 'up to date';
  runs: ShippedRun[];
}

const MiB = 2 ** 20;
const READY_TIMEOUT_MS = 120_000;
/** SIGTERM, then SIGKILL after this long (the shipped grace period is 30 s; nothing is in flight here). */
const STOP_TIMEOUT_MS = 45_000;

function loadavgNow(): LoadAvg {
  const f = readFileSync('/proc/loadavg', 'utf8').split(' ').map(Number);
  return [f[0] ?? Number.NaN, f[1] ?? Number.NaN, f[2] ?? Number.NaN];
}

function newestMtime(dir: string): number {
  let t = 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) t = Math.max(t, newestMtime(p));
    else if (e.name.endsWith('.ts')) t = Math.max(t, statSync(p).mtimeMs);
  }
  return t;
}

/**
 * Makes sure dist/operator.js, dist/workflow-bundle.js and dist/workflow-thread-preload.cjs (what the image's
 * CMD loads) exist and are newer than every src/**.ts file and the last `npm ci`/`npm install`
 * (node_modules/.package-lock.json: dist/operator.js bundles the dependencies too);
 * runs `npm run build` otherwise (its output on stderr).
 */
export function ensureShippedBuild(say: (msg: string) => void): 'built' | 'up to date' {
  const outputs = ['operator.js', 'workflow-bundle.js', 'workflow-thread-preload.cjs'].map((f) =>
    join(ROOT, 'dist', f),
  );
  const installed = join(ROOT, 'node_modules', '.package-lock.json');
  const src = Math.max(
    newestMtime(join(ROOT, 'src')),
    existsSync(installed) ? statSync(installed).mtimeMs : 0,
  );
  if (outputs.every((f) => existsSync(f) && statSync(f).mtimeMs >= src)) return 'up to date';
  say('dist/ is missing or older than src/ or node_modules: running `npm run build`');
  execFileSync('npm', ['run', 'build'], { cwd: ROOT, stdio: ['ignore', process.stderr, process.stderr] });
  return 'built';
}

async function memoryPoint(op: OperatorProcess): Promise<MemoryPoint> {
  const mem = pidMemory(op.pid);
  let text = '';
  try {
    text = await scrapeMetrics(op.metricsUrl);
  } catch {
    // NaN heap figures below
  }
  const m = (name: string) => (text ? metricSum(text, name) / MiB : Number.NaN);
  return {
    rssMiB: mem.rss / MiB,
    hwmMiB: mem.hwm / MiB,
    heapUsedMiB: m('nodejs_heap_size_used_bytes'),
    heapTotalMiB: m('nodejs_heap_size_total_bytes'),
    externalMiB: m('nodejs_external_memory_bytes'),
  };
}

/**
 * Reads every VM workflow's history (after the run: the reads are not in any phase's CPU) and sets each
 * phase's `temporal`: the workflow tasks, timed-out workflow tasks and events whose server time falls in
 * the phase's window (`windows[i]`, epoch ms, for `phases[i]`), per transition.
 */
async function countTemporal(
  env: BenchEnv,
  ids: readonly string[],
  phases: ShippedPhase[],
  windows: ReadonlyArray<[number, number]>,
): Promise<void> {
  const sums = phases.map(() => ({ workflowTasks: 0, workflowTaskTimeouts: 0, events: 0 }));
  await pool(ids, 16, async (id) => {
    const events = await fetchEvents(env.client, id);
    windows.forEach(([from, to], i) => {
      const c = temporalCounts(events.filter((e) => eventTimeMs(e) >= from && eventTimeMs(e) <= to));
      sums[i]!.workflowTasks += c.workflowTasks;
      sums[i]!.workflowTaskTimeouts += c.workflowTaskTimeouts;
      sums[i]!.events += c.events;
    });
  });
  phases.forEach((p, i) => {
    const n = ids.length || 1;
    const t = sums[i]!;
    p.temporal = {
      workflowTasks: t.workflowTasks / n,
      workflowTaskTimeouts: t.workflowTaskTimeouts / n,
      events: t.events / n,
    };
  });
}

async function runOnce(
  env: BenchEnv,
  opts: ShippedOptions,
  cacheSize: string | undefined,
  index: number,
): Promise<ShippedRun> {
  const say = opts.progress ?? (() => undefined);
  const label = cacheSize ?? 'default';
  const t0 = Date.now();
  const world = await BenchWorld.create(env.admin, env.stack.ociRegistry, 'bench-shipped', env.log);
  const proxy = new RegistryProxy({ upstream: env.stack.ociRegistry, latencyMs: opts.latencyMs });
  const ids: string[] = [];
  let op: OperatorProcess | undefined;
  const logFile = `${opts.logPrefix}-${index}.log`;
  const memoryLimit = resolveMemoryLimit(opts.memoryLimit ?? 'deployment');
  const node = shippedNode(say);
  let cgroup: MemoryCgroup | undefined;
  let stopping = false;
  if (memoryLimit.bytes !== undefined) {
    const made = createMemoryCgroup(`cocoon-bench-shipped-${process.pid}-${index}`, memoryLimit.bytes);
    if ('reason' in made) memoryLimit.unavailable = made.reason;
    else [cgroup, memoryLimit.applied] = [made, true];
    say(
      cgroup
        ? `shipped operator runs in a memory cgroup limited to ${memoryLimit.quantity} (${cgroup.dir})`
        : `shipped operator's memory limit ${memoryLimit.quantity} NOT applied (it runs without one): ${memoryLimit.unavailable}`,
    );
  }
  try {
    const pods = await seedScaleFleet(world, opts.n);
    ids.push(...pods.map((p) => vmWorkflowId(world.namespace, p)));
    const registryAddr = await proxy.start();
    const [probePort, metricsPort] = [await freePort(), await freePort()];
    const shippedEnv = imageEnv();
    const extraEnv = opts.extraEnv ?? {};
    const childEnv = cleanEnv({
      ...shippedEnv,
      ...operatorStackEnv(),
      OCI_REGISTRY: registryAddr,
      TEMPORAL_TASK_QUEUE: `bench-shipped-${randomUUID()}`,
      WATCH_NAMESPACE: world.namespace,
      LEADER_ELECT: 'false',
      PROBE_ADDR: `127.0.0.1:${probePort}`,
      METRICS_ADDR: `127.0.0.1:${metricsPort}`,
      HIBERNATION_CONCURRENCY: String(opts.concurrency),
      WORKFLOW_CACHE_SIZE: cacheSize,
      ...extraEnv,
    });
    const started = Date.now();
    op = await startReadyOperator(
      childEnv,
      { probePort, metricsPort, launcher: 'dist', cgroupProcs: cgroup?.procsFile, nodeBinary: node.path },
      READY_TIMEOUT_MS,
    ).catch((err: Error) => {
      // Under a limit too small to start in, it thrashes or is killed before it is ready: say so.
      const usage = cgroup?.usage();
      throw usage
        ? new Error(
            `${err.message}\nmemory cgroup (${memoryLimit.quantity}): peak charge ${Math.round(usage.peakBytes / MiB)} MiB, at the limit ${usage.limitHits} times, OOM kills ${usage.oomKills}`,
          )
        : err;
    });
    const readyMs = Date.now() - started;
    // The child must live through both phases: if it dies (e.g. killed at its memory limit), the phase
    // ends at once with why, instead of waiting out the fleet's stall guard.
    const child = op;
    const died = child.exited.then((code) => {
      if (stopping) return undefined;
      const usage = cgroup?.usage();
      const why = `the shipped operator exited on its own (${code}) mid-run; memory cgroup: ${JSON.stringify(usage ?? 'none')}${usage?.oomKills ? ` — killed at its memory limit ${memoryLimit.quantity}: too small for ${opts.n} VMs` : ''}`;
      say(why);
      return why;
    });
    const setupMs = Date.now() - t0;
    const workersLine = op.logs.find((l) => l.msg === 'Temporal workers running');
    const effective = workersLine?.workflowCacheSize;
    const heapLimitMiB = workersLine?.heapLimitMiB;
    const ready = await memoryPoint(op);
    say(
      `shipped operator (WORKFLOW_CACHE_SIZE ${label}, effective ${String(effective)}, V8 heap limit ${String(heapLimitMiB)} MiB) ready in ${readyMs} ms, RSS ${ready.rssMiB.toFixed(0)} MiB; fleet of ${opts.n} VMs set up in ${setupMs} ms`,
    );
    const rss = samplePidRss(op.pid);
    const phases: ShippedPhase[] = [];
    const windows: Array<[number, number]> = [];
    try {
      for (const phase of ['hibernate', 'wake'] as const) {
        const reg0 = Object.fromEntries(proxy.counts);
        const loadavgStart = loadavgNow();
        rss.resetPeak();
        const op0 = pidCpuSeconds(op.pid);
        const cpu = startCpuWindow({ pids: [op.pid] });
        const abort = died.then((why) => {
          if (why) throw new Error(`${phase} phase: ${why}`);
          return new Promise<never>(() => undefined); // stopped by us: never ends the race
        });
        abort.catch(() => undefined); // a death after this phase is the next phase's to report
        const d = await Promise.race([driveScalePhase(env, world, phase, opts.parallel ?? 32), abort]);
        windows.push([d.startedAt, d.startedAt + d.wallMs]);
        const cpuSeconds = cpu.stop();
        const operatorCpuS = pidCpuSeconds(op.pid) - op0;
        const peakRssMiB = rss.peak() / MiB;
        const loadavgEnd = loadavgNow();
        const end = await memoryPoint(op);
        const registry: Record<string, number> = {};
        for (const [k, v] of proxy.counts) {
          const delta = v - (reg0[k] ?? 0);
          if (delta) registry[k] = delta;
        }
        const calls = (phase === 'hibernate' ? registry.HEAD : registry.DELETE) ?? 0;
        const p: ShippedPhase = {
          phase,
          wallMs: d.wallMs,
          issueMs: d.issueMs,
          transitionsPerSecond: (opts.n * 1000) / d.wallMs,
          registry,
          registryCallsPerTransition: calls / opts.n,
          operatorCpuS,
          operatorCpuMsPerTransition: (operatorCpuS * 1000) / opts.n,
          peakRssMiB,
          end,
          cpuSeconds,
          loadavgStart,
          loadavgEnd,
          nudged: d.nudged,
        };
        phases.push(p);
        say(
          `shipped ${label} ${phase}: wall ${d.wallMs} ms, operator ${p.operatorCpuMsPerTransition.toFixed(1)} CPU ms/transition, peak RSS ${peakRssMiB.toFixed(0)} MiB, load ${loadavgEnd.join(' ')}`,
        );
      }
      const settleMs = opts.settleMs ?? 10_000;
      await new Promise((r) => setTimeout(r, settleMs));
      const settled = await memoryPoint(op);
      await countTemporal(env, ids, phases, windows);
      for (const p of phases)
        say(
          `shipped ${label} ${p.phase} per transition: ${p.temporal?.workflowTasks.toFixed(2)} workflow tasks, ${p.temporal?.workflowTaskTimeouts.toFixed(2)} timed out, ${p.temporal?.events.toFixed(1)} history events`,
        );
      return {
        cacheSetting: label,
        shippedEnv,
        extraEnv,
        effectiveCacheSize: typeof effective === 'number' ? effective : undefined,
        memoryLimit: { ...memoryLimit, usage: cgroup?.usage() },
        heapLimitMiB: typeof heapLimitMiB === 'number' ? heapLimitMiB : undefined,
        node: node.version,
        setupMs,
        readyMs,
        ready,
        phases,
        settled,
        settleMs,
        operatorCpuTotalS: pidCpuSeconds(op.pid),
        log: logFile,
      };
    } finally {
      rss.stop();
    }
  } finally {
    if (op) {
      stopping = true;
      const stopped = stopOperator(op, 'SIGTERM');
      const timer = setTimeout(() => op?.child.kill('SIGKILL'), STOP_TIMEOUT_MS);
      await stopped;
      clearTimeout(timer);
      mkdirSync(dirname(logFile), { recursive: true }); // a fresh clone has no bench/results/ yet
      writeFileSync(logFile, `${op.stdout()}\n--- stderr ---\n${op.stderr()}`);
    }
    cgroup?.remove();
    await terminateAll(env.client, ids);
    await world.cleanup();
    await proxy.stop();
  }
}

/**
 * The node the image runs (its major, 24: scripts/node.sh provides it from the npm registry or its cache),
 * else this process's own, said so.
 */
function shippedNode(say: (msg: string) => void): { path: string; version: string } {
  try {
    return imageNode();
  } catch (err) {
    say(`scripts/node.sh found no Node 24 (${(err as Error).message}); the child runs on ${process.version}`);
    return { path: process.execPath, version: process.version };
  }
}

/** `deployment`, `none` or a quantity → the limit to apply (not yet applied). */
function resolveMemoryLimit(setting: string): ShippedMemoryLimit {
  if (setting === 'none') return { setting, applied: false };
  if (setting === 'deployment') {
    const { bytes, quantity } = deploymentMemoryLimit(join(ROOT, 'config/manager/deployment.yaml'));
    return { setting, quantity, bytes, applied: false };
  }
  return { setting, quantity: setting, bytes: quantityBytes(setting), applied: false };
}

/** Builds if needed, then one run per cache size, back to back (each with a fresh namespace and child). */
export async function runShipped(env: BenchEnv, opts: ShippedOptions): Promise<ShippedResult> {
  const say = opts.progress ?? (() => undefined);
  const build = ensureShippedBuild(say);
  const runs: ShippedRun[] = [];
  for (const [i, size] of opts.cacheSizes.entries()) runs.push(await runOnce(env, opts, size, i));
  return { n: opts.n, latencyMs: opts.latencyMs, concurrency: opts.concurrency, build, runs };
}
