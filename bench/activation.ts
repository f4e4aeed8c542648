/**
 * `[WORKFLOW_STACK_TRACES=true] npm run bench:activation [-- --runs N] [--histories vm-hibernate,vm-wake]
 *  [--folder DIR]`
 *
 * The worker-side CPU of the workflow code, without a stack: replays golden histories
 * (test/replay/histories/<newest folder>/, recorded by `npm run record-histories` from real runs) `--runs`
 * times each through `Worker.runReplayHistories`, which drives the same workflow bundle, V8 context and
 * SDK core a live worker uses, and prints the process's CPU (user + system, all threads) per replayed
 * workflow task. Each replay creates its run afresh (no sticky cache), so the figure is an upper bound of
 * a cached run's activation. Defaults: the hibernate and wake histories (one transition each), 200 runs.
 * Use it to compare workflow-code changes back to back; docs/performance.md#transition-cost says where
 * the time goes.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { cpus, loadavg } from 'node:os';
import { parseArgs } from 'node:util';
import { historyFromJSON } from '@temporalio/common/lib/proto-utils.js';
import type { temporal } from '@temporalio/proto';
import { Runtime, Worker } from '@temporalio/worker';
import { workflowBundle } from '../test/workflow/harness.js';

const { values } = parseArgs({
  options: {
    runs: { type: 'string' },
    histories: { type: 'string' },
    folder: { type: 'string' },
  },
});
const root = new URL('../test/replay/histories/', import.meta.url).pathname;
const folder = values.folder ?? readdirSync(root).sort().at(-1)!;
const names = (values.histories ?? 'vm-hibernate,vm-wake').split(',');
const runs = Number(values.runs ?? 200);
if (!Number.isInteger(runs) || runs < 1)
  throw new Error(`--runs must be a positive integer, got ${values.runs}`);

// The replayer runs workflow code on this thread; as in the operator's workflow threads
// (src/workflow-thread-preload.cjs), the SDK-only calls into the context run without the deadlock watchdog,
// and the SDK's per-promise stack capture is skipped unless WORKFLOW_STACK_TRACES=true.
const stackTraces = process.env.WORKFLOW_STACK_TRACES === 'true';
const preload = createRequire(import.meta.url)('../src/workflow-thread-preload.cjs');
preload.skipWatchdogOnSdkOnlyCalls();
if (!stackTraces) preload.skipWorkflowStackTraces();

Runtime.install({ logger: { log() {}, trace() {}, debug() {}, info() {}, warn() {}, error() {} } });
const histories = names.map((name) => ({
  name,
  history: historyFromJSON(
    JSON.parse(readFileSync(`${root}${folder}/${name}.json`, 'utf8')),
  ) as temporal.api.history.v1.IHistory,
}));
const tasksOf = (h: temporal.api.history.v1.IHistory) =>
  (h.events ?? []).filter((e) => e.workflowTaskCompletedEventAttributes).length;
const bundle = await workflowBundle();

/** Replays every history `k` times; throws on the first replay error (a benchmark of broken code is void). */
async function replay(k: number): Promise<void> {
  const list = histories.flatMap((h) =>
    Array.from({ length: k }, (_, i) => ({ workflowId: `${h.name}-${i}`, history: h.history })),
  );
  for await (const r of Worker.runReplayHistories({ workflowBundle: bundle }, list)) {
    if (r.error) throw new Error(`${r.workflowId}: ${r.error.message}`);
  }
}

await replay(10); // warm-up: the bundle's first load and JIT
const load = loadavg()[0]!;
const c0 = process.cpuUsage();
const t0 = performance.now();
await replay(runs);
const wallMs = performance.now() - t0;
const cpu = process.cpuUsage(c0);
const cpuMs = (cpu.user + cpu.system) / 1000;
const tasks = runs * histories.reduce((n, h) => n + tasksOf(h.history), 0);
process.stdout.write(
  [
    `Machine: ${cpus().length} cores, Node ${process.version}; load average (1 min) ${load.toFixed(1)} at start; workflow stack traces ${stackTraces ? 'on' : 'off'} (WORKFLOW_STACK_TRACES).`,
    `Replayed ${folder}/{${names.join(',')}} × ${runs} (${histories.map((h) => `${h.name}: ${tasksOf(h.history)} workflow tasks`).join(', ')}).`,
    '',
    '| workflow tasks | wall ms | CPU ms | CPU ms per workflow task | CPU ms per history |',
    '| --- | --- | --- | --- | --- |',
    `| ${tasks} | ${wallMs.toFixed(0)} | ${cpuMs.toFixed(0)} | ${(cpuMs / tasks).toFixed(2)} | ${(cpuMs / (runs * histories.length)).toFixed(2)} |`,
    '',
  ].join('\n'),
);
