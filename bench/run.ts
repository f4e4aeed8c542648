/**
 * `npm run bench [-- --quick] [--only seed,scale,idle,latency,history,crash,shipped] [--reps N] [--scale-n N]
 *  [--scale-c C] [--idle-s S] [--idle-sets N] [--sub-agents N] [--edits N] [--cycles N] [--trials N]
 *  [--seed N] [--budget-s S] [--crash-scenarios hibernate,wake,delete,delete-held] [--shipped-n N]
 *  [--shipped-c C] [--shipped-cache SIZE,...] [--shipped-env KEY=VALUE]... [--shipped-memory-limit L] [--out FILE]`
 *
 * Benchmarks of the operator against the real local stack (`npm run stack -- up`): Temporal dev server,
 * kube-apiserver + etcd, the OCI registry behind a latency-injecting proxy (test/support/registry-proxy.ts).
 * Prints one Markdown table per scenario and writes every figure to bench/results/<timestamp>.json.
 * Nothing here asserts a timing.
 *
 * Default (full): all five scenarios at the sizes of the "Benchmarks" issue. `--quick`: the seed shape
 * only, 2 repetitions, C ∈ {1,4,32} (slot-bound, the default, saturated), both L — under 3 minutes on the
 * 2-core development machine; other scenarios named with --only run at reduced sizes (printed).
 *
 * `--only crash` (not part of the default run): the crash test of bench/scenarios/crash.ts, `--trials`
 * SIGKILLs of the real operator process (default 100) at random points of hibernate, wake and deletion,
 * plans drawn from `--seed` (default: random, printed) over `--crash-scenarios` (default all four), no
 * new trial started after `--budget-s`.
 *
 * `--only shipped` (not part of the default run): the operator as shipped, the image's command (`node … dist/operator.js`) as a child
 * process (bench/scenarios/shipped.ts; runs `npm run build` first when dist/ is missing or older than
 * src/), through the scale workload: `--shipped-n` VMs (default 1000; 200 with --quick) hibernate then
 * wake at L = 50 ms and HIBERNATION_CONCURRENCY `--shipped-c` (default 64). Reports the child's own CPU
 * per transition and its resident memory (peak, and at the end with N VMs known). `--shipped-cache`
 * runs it once per listed WORKFLOW_CACHE_SIZE of the child, back to back (`default` = unset: the shipped
 * default; e.g. `auto,1000,250`); `--shipped-env` adds an environment variable to the child (repeatable; to
 * try e.g. a NODE_OPTIONS before shipping it — the child already gets the Dockerfile's runtime ENV).
 * `--shipped-memory-limit`: `deployment` (default: the limit config/manager/deployment.yaml gives the
 * container, applied as a memory cgroup when run as root, else said so), `none`, or a quantity (`768Mi`).
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, totalmem } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { openBenchEnv } from './lib/env.js';
import {
  printCrash,
  printFleet,
  printHistory,
  printLatency,
  printMachine,
  printSeed,
  printShipped,
} from './lib/report.js';
import { CRASH_SCENARIOS, type CrashScenario, runCrash } from './scenarios/crash.js';
import { runFleet } from './scenarios/fleet.js';
import { runHistory } from './scenarios/history.js';
import { runLatency } from './scenarios/latency.js';
import { runSeed } from './scenarios/seed.js';
import { runShipped } from './scenarios/shipped.js';

const HERE = dirname(fileURLToPath(import.meta.url));
const SCENARIOS = ['seed', 'scale', 'idle', 'latency', 'history', 'crash', 'shipped'] as const;
type Scenario = (typeof SCENARIOS)[number];
/** What a run without --only does (the crash test and the shipped operator are asked for by name). */
const DEFAULT_SCENARIOS: readonly Scenario[] = ['seed', 'scale', 'idle', 'latency', 'history'];

function log(msg: string): void {
  process.stderr.write(`[bench ${new Date().toISOString().slice(11, 19)}] ${msg}\n`);
}

function int(v: string | undefined, name: string, min = 1): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!Number.isInteger(n) || n < min) throw new Error(`--${name} must be an integer ≥ ${min}, got ${v}`);
  return n;
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      quick: { type: 'boolean', default: false },
      only: { type: 'string' },
      reps: { type: 'string' },
      'scale-n': { type: 'string' },
      'scale-c': { type: 'string' },
      'idle-s': { type: 'string' },
      'idle-sets': { type: 'string' },
      'sub-agents': { type: 'string' },
      edits: { type: 'string' },
      cycles: { type: 'string' },
      trials: { type: 'string' },
      seed: { type: 'string' },
      'budget-s': { type: 'string' },
      'crash-scenarios': { type: 'string' },
      'shipped-n': { type: 'string' },
      'shipped-c': { type: 'string' },
      'shipped-cache': { type: 'string' },
      'shipped-env': { type: 'string', multiple: true },
      'shipped-memory-limit': { type: 'string' },
      out: { type: 'string' },
    },
  });
  const quick = values.quick ?? false;
  const only = (values.only ?? (quick ? 'seed' : DEFAULT_SCENARIOS.join(',')))
    .split(',')
    .map((s) => s.trim());
  for (const s of only) {
    if (!(SCENARIOS as readonly string[]).includes(s)) {
      throw new Error(`unknown scenario ${s} (known: ${SCENARIOS.join(', ')})`);
    }
  }
  const want = (s: Scenario) => only.includes(s);
  const crashScenarios = (values['crash-scenarios'] ?? CRASH_SCENARIOS.join(','))
    .split(',')
    .map((s) => s.trim());
  for (const s of crashScenarios) {
    if (!(CRASH_SCENARIOS as readonly string[]).includes(s)) {
      throw new Error(`unknown crash scenario ${s} (known: ${CRASH_SCENARIOS.join(', ')})`);
    }
  }
  const sizes = {
    seedReps: int(values.reps, 'reps') ?? (quick ? 2 : 5),
    seedConcurrencies: quick ? [1, 4, 32] : [1, 4, 8, 16, 32],
    scaleN: int(values['scale-n'], 'scale-n') ?? (quick ? 200 : 1000),
    idleS: int(values['idle-s'], 'idle-s') ?? (quick ? 30 : 120),
    idleSets: int(values['idle-sets'], 'idle-sets', 0) ?? (quick ? 10 : 100),
    subAgents: int(values['sub-agents'], 'sub-agents', 0) ?? 1,
    edits: int(values.edits, 'edits') ?? (quick ? 50 : 200),
    cycles: int(values.cycles, 'cycles') ?? (quick ? 100 : 1000),
    trials: int(values.trials, 'trials') ?? 100,
    seed: int(values.seed, 'seed', 0) ?? Math.floor(Math.random() * 2 ** 31),
    budgetS: int(values['budget-s'], 'budget-s'),
    crashScenarios,
    shippedN: int(values['shipped-n'], 'shipped-n') ?? (quick ? 200 : 1000),
    shippedC: int(values['shipped-c'], 'shipped-c') ?? 64,
    shippedCache: (values['shipped-cache'] ?? 'default').split(',').map((s) => s.trim()),
    shippedEnv: Object.fromEntries(
      (values['shipped-env'] ?? []).map((kv) => {
        const i = kv.indexOf('=');
        if (i < 1) throw new Error(`--shipped-env must be KEY=VALUE, got ${kv}`);
        return [kv.slice(0, i), kv.slice(i + 1)];
      }),
    ),
    shippedMemoryLimit: values['shipped-memory-limit'] ?? 'deployment',
  };
  const started = new Date();
  const result: Record<string, unknown> = {
    startedAt: started.toISOString(),
    command: `npm run bench -- ${process.argv.slice(2).join(' ')}`.trim(),
    quick,
    scenarios: only,
    sizes,
    machine: {
      cpus: cpus().length,
      cpuModel: cpus()[0]?.model,
      memGiB: Math.round(totalmem() / 2 ** 30),
      node: process.version,
      loadavgAtStart: loadavg(),
    },
  };
  const out = values.out ?? join(HERE, 'results', `${started.toISOString().replace(/[:.]/g, '-')}.json`);
  const save = () => {
    mkdirSync(dirname(out), { recursive: true });
    writeFileSync(out, `${JSON.stringify(result, null, 2)}\n`);
  };
  log(`scenarios ${only.join(', ')}; sizes ${JSON.stringify(sizes)}`);
  const env = await openBenchEnv();
  try {
    if (want('seed')) {
      result.seed = await runSeed(env, {
        n: 24,
        concurrencies: sizes.seedConcurrencies,
        latencies: [5, 50],
        reps: sizes.seedReps,
        progress: log,
      });
      save();
    }
    if (want('scale') || want('idle')) {
      result.fleet = await runFleet(env, {
        n: sizes.scaleN,
        latencyMs: 50,
        concurrency: int(values['scale-c'], 'scale-c') ?? 64,
        scale: want('scale'),
        idleMs: want('idle') ? sizes.idleS * 1000 : 0,
        sets: sizes.idleSets,
        subAgents: sizes.subAgents,
        progress: log,
      });
      save();
    }
    if (want('latency')) {
      result.latency = await runLatency(env, {
        edits: sizes.edits,
        vms: 8,
        backToBackPerVM: quick ? 6 : 12,
        backToBackVMs: 8,
        latencyMs: 5,
        concurrency: 4,
        creates: quick ? 10 : 30,
        progress: log,
      });
      save();
    }
    if (want('history')) {
      result.history = await runHistory(env, {
        cycles: sizes.cycles,
        latencyMs: 5,
        concurrency: 4,
        progress: log,
      });
      save();
    }
    if (want('crash')) {
      result.crash = await runCrash(env, {
        trials: sizes.trials,
        seed: sizes.seed,
        budgetMs: sizes.budgetS === undefined ? undefined : sizes.budgetS * 1000,
        scenarios: sizes.crashScenarios as CrashScenario[],
        progress: log,
      });
      save();
    }
    if (want('shipped')) {
      result.shipped = await runShipped(env, {
        n: sizes.shippedN,
        latencyMs: 50,
        concurrency: sizes.shippedC,
        cacheSizes: sizes.shippedCache.map((s) => (s === 'default' ? undefined : s)),
        extraEnv: sizes.shippedEnv,
        memoryLimit: sizes.shippedMemoryLimit,
        logPrefix: out.replace(/\.json$/, '-shipped'),
        progress: log,
      });
      save();
    }
  } finally {
    await env.close();
    (result.machine as Record<string, unknown>).loadavgAtEnd = loadavg();
    result.temporalSdkWarnings = Object.fromEntries(env.sdkWarnings);
    result.finishedAt = new Date().toISOString();
    save();
  }
  printMachine(result);
  if (result.seed) printSeed(result.seed as Parameters<typeof printSeed>[0]);
  if (result.fleet) printFleet(result.fleet as Parameters<typeof printFleet>[0]);
  if (result.latency) printLatency(result.latency as Parameters<typeof printLatency>[0]);
  if (result.history) printHistory(result.history as Parameters<typeof printHistory>[0]);
  if (result.crash) printCrash(result.crash as Parameters<typeof printCrash>[0]);
  if (result.shipped) printShipped(result.shipped as Parameters<typeof printShipped>[0]);
  // The registry worker is activity-only; the SDK says so once per worker (expected, JSON only).
  const notable = [...env.sdkWarnings].filter(([msg]) => !msg.includes('No workflows registered'));
  if (notable.length) {
    process.stdout.write('\nTemporal SDK warnings during the run (count × message):\n');
    for (const [msg, n] of notable) process.stdout.write(`- ${n} × ${msg}\n`);
  }
  log(`results written to ${out}`);
}

// Ctrl-C / SIGTERM end the run at once (exit 130 / 143) without its cleanup: its namespace stays in the
// stack (`npm run stack -- down` clears it); a shipped-scenario child in the same process group gets the
// terminal's SIGINT too and shuts itself down.
for (const [signal, code] of [
  ['SIGINT', 130],
  ['SIGTERM', 143],
] as const) {
  process.once(signal, () => {
    process.stderr.write(
      `\nbench interrupted (${signal}); results of the finished scenarios are in the --out file\n`,
    );
    process.exit(code);
  });
}

main().then(
  () => process.exit(0),
  (err) => {
    process.stderr.write(`bench failed: ${(err as Error)?.stack ?? String(err)}\n`);
    process.exit(1);
  },
);
