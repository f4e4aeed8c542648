/**
 * Plain-text reports of benchmark results: Markdown pipe tables, so they paste into docs/performance.md as-is.
 */
import { type CrashResult, clean, describePlan, describeTrial } from '../scenarios/crash.js';
import type { FleetResult } from '../scenarios/fleet.js';
import type { HistoryResult } from '../scenarios/history.js';
import type { LatencyResult } from '../scenarios/latency.js';
import type { SeedResult } from '../scenarios/seed.js';
import type { MemoryPoint, ShippedResult, ShippedRun } from '../scenarios/shipped.js';
import type { TemporalCounts } from './history.js';

/** Formats a number with `digits` decimals; NaN/undefined → `n/a`. */
export function fmt(x: number | undefined, digits = 0): string {
  return x === undefined || Number.isNaN(x) ? 'n/a' : x.toFixed(digits);
}

/** A Markdown table from a header row and data rows. */
export function table(header: string[], rows: string[][]): string {
  const line = (cells: string[]) => `| ${cells.join(' | ')} |`;
  return [line(header), line(header.map(() => '---')), ...rows.map(line)].join('\n');
}

function write(s: string): void {
  process.stdout.write(`${s}\n`);
}

/** A count: whole numbers as such, medians that fell between two values with one decimal. */
function count(x: number): string {
  return fmt(x, Number.isInteger(x) ? 0 : 1);
}

/** Header cells of {@link temporalCells}. */
const TEMPORAL_HEADER = [
  'workflow tasks',
  'activity tasks',
  'local activities',
  'history events',
  'signals',
  'actions',
  'of which heartbeats (est.)',
];

/** Table cells of one transition's Temporal cost (see TemporalCounts). */
function temporalCells(t: TemporalCounts): string[] {
  return [
    count(t.workflowTasks),
    count(t.activityTasks),
    count(t.localActivities),
    count(t.events),
    count(t.signals),
    count(t.actions),
    count(t.heartbeatsEst),
  ];
}

/** One line: actions by kind, then timers, search attribute upserts and other markers. */
function temporalDetail(t: TemporalCounts): string {
  const kinds = Object.entries(t.actionsByKind)
    .filter(([, v]) => v > 0)
    .map(([k, v]) => `${k} ${count(v)}`)
    .join(', ');
  return `actions by kind ${kinds || 'none'}; timers ${count(t.timers)}, search attribute upserts ${count(t.searchAttributeUpserts)}, other markers (patches) ${count(t.otherMarkers)}`;
}

/** The machine line: cores, memory, load averages at start and end. */
export function printMachine(result: Record<string, unknown>): void {
  const m = result.machine as {
    cpus: number;
    memGiB: number;
    node: string;
    loadavgAtStart: number[];
    loadavgAtEnd?: number[];
  };
  const la = (xs?: number[]) => (xs ? xs.map((x) => x.toFixed(1)).join('/') : 'n/a');
  write(
    `\nMachine: ${m.cpus} cores, ${m.memGiB} GiB, Node ${m.node}; load average (1/5/15 min) ${la(m.loadavgAtStart)} at start, ${la(m.loadavgAtEnd)} at end. Command: \`${String(result.command)}\`.`,
  );
}

/** Prints the seed-shape tables: wall figures, then where the time and CPU went. */
export function printSeed(r: SeedResult): void {
  const reps = Math.max(...r.cells.map((c) => c.wallMs.n));
  write(`\n### Seed shape: N=${r.n} VMs, one Hibernate transition each, ${reps} repetitions (times in ms)\n`);
  write(
    table(
      ['L', 'C', 'wall median', 'min–max', 'speedup vs C=1', 'probes/transition', 'ideal', 'wall/ideal'],
      r.cells.map((c) => [
        String(c.latencyMs),
        String(c.concurrency),
        fmt(c.wallMs.median),
        `${fmt(c.wallMs.min)}–${fmt(c.wallMs.max)}`,
        fmt(c.speedup, 2),
        fmt(c.probesPerTransition, 2),
        fmt(c.idealMs),
        fmt(c.ratioToIdeal, 1),
      ]),
    ),
  );
  write(
    '\nideal = ceil(N/C)·L·probes per transition (HEADs counted at the proxy 0.5 s after the last completion).',
  );
  write(
    '\nWhere one transition’s time went (medians over VMs, then over repetitions; ms), and CPU per transition:\n',
  );
  write(
    table(
      [
        'L',
        'C',
        'create→wf start',
        'wf start→probe',
        'probe queued',
        'probe run',
        'probe→done',
        'total',
        'CPU ms/transition: bench proc',
        'Temporal',
        'apiserver',
        'etcd',
        'other load share',
      ],
      r.cells.map((c) => [
        String(c.latencyMs),
        String(c.concurrency),
        fmt(c.medianBreakdown.createToWorkflowStart),
        fmt(c.medianBreakdown.workflowStartToProbe),
        fmt(c.medianBreakdown.probeQueued),
        fmt(c.medianBreakdown.probeRun),
        fmt(c.medianBreakdown.probeToDone),
        fmt(c.medianBreakdown.total),
        fmt(c.cpuMsPerTransition.bench),
        fmt(c.cpuMsPerTransition.temporal),
        fmt(c.cpuMsPerTransition.apiserver),
        fmt(c.cpuMsPerTransition.etcd),
        `${fmt(100 * c.otherLoadShare)} %`,
      ]),
    ),
  );
  write('\nTemporal per transition (medians over VMs, then over reps), CPU per transition and peak RSS:\n');
  write(
    table(
      [
        'L',
        'C',
        ...TEMPORAL_HEADER,
        'CPU ms/transition: bench proc',
        'Temporal',
        'apiserver',
        'etcd',
        'all (bench + stack)',
        'bench proc peak RSS MiB',
      ],
      r.cells.map((c) => [
        String(c.latencyMs),
        String(c.concurrency),
        ...temporalCells(c.temporalPerTransition),
        fmt(c.cpuMsPerTransition.bench),
        fmt(c.cpuMsPerTransition.temporal),
        fmt(c.cpuMsPerTransition.apiserver),
        fmt(c.cpuMsPerTransition.etcd),
        fmt(c.cpuMsPerTransition.all),
        fmt(c.peakRssMiB),
      ]),
    ),
  );
  const first = r.cells[0];
  if (first) {
    write(
      `\nactions: Temporal Cloud billable actions estimated from the histories (rules in bench/lib/history.ts); heartbeats are not in history, estimated. all = bench process + every stack component (Temporal, apiserver, etcd, registry, simulator). Peak RSS: the largest over the repetitions, first create to last Hibernated. Per transition at L=${first.latencyMs}, C=${first.concurrency}: ${temporalDetail(first.temporalPerTransition)}.`,
    );
  }
  const run = r.runs[0];
  if (run) {
    write(
      `\nPer VM (median): ${fmt(run.perVM.workflowTasks)} workflow tasks, ${fmt(run.perVM.activities)} activities (${Object.keys(run.activityMix).join(', ')}), ${fmt(run.perVM.events)} history events; operator Kubernetes requests per transition: ${fmt(run.kube.total / r.n, 1)} (${Object.entries(
        run.kube.byKey,
      )
        .map(([k, v]) => `${k} ${fmt(v / r.n, 1)}`)
        .join(', ')}).`,
    );
  }
}

/** Prints the scale and idle tables. */
export function printFleet(f: FleetResult): void {
  if (f.scale) {
    write(`\n### Scale: N=${f.n} VMs hibernate then wake, L=${f.latencyMs} ms, C=${f.concurrency}\n`);
    write(
      table(
        [
          'phase',
          'wall ms',
          'issue ms',
          'transitions/s',
          'registry calls/transition',
          'ideal ms',
          'wall/ideal',
          'bench proc peak RSS MiB',
          'CPU s: Temporal',
          'bench proc',
          'apiserver',
          'etcd',
          'other load share',
        ],
        f.scale.map((p) => [
          p.phase,
          fmt(p.wallMs),
          fmt(p.issueMs),
          fmt(p.transitionsPerSecond, 1),
          fmt(p.registryCallsPerTransition, 2),
          fmt(p.idealMs),
          fmt(p.ratioToIdeal, 1),
          fmt(p.peakRssMiB),
          fmt(p.cpuSeconds.stack.temporal, 1),
          fmt(p.cpuSeconds.self, 1),
          fmt(p.cpuSeconds.stack['kube-apiserver'], 1),
          fmt(p.cpuSeconds.stack.etcd, 1),
          `${fmt(100 * p.cpuSeconds.otherShare)} %`,
        ]),
      ),
    );
    write(
      '\nissue = time to send all N creates (hibernate) or desire edits (wake), part of wall; the RSS is the whole benchmark process (workers, watcher, harness).',
    );
    for (const p of f.scale) {
      if (p.nudged.length)
        write(
          `\n${p.phase}: ${p.nudged.length} VMs stopped progressing and were nudged with a resync signal.`,
        );
    }
  }
  if (f.idle) {
    const i = f.idle;
    const sets = i.sets
      ? ` and ${i.sets} CocoonSets (main + ${i.subAgents} sub-agent${i.subAgents === 1 ? '' : 's'} each, ${i.setPods} pods run by the simulator)`
      : '';
    write(`\n### Idle: ${i.vms} VMs${sets} at rest for ${fmt(i.windowMs / 1000)} s (per minute)\n`);
    write(
      table(
        [
          'Kubernetes requests',
          'of which Lists',
          'registry requests',
          'workflow tasks',
          'activities',
          'history events',
        ],
        [
          [
            fmt(i.perMinute.kubeRequests, 1),
            fmt(i.perMinute.kubeLists, 1),
            fmt(i.perMinute.registryRequests, 1),
            fmt(i.perMinute.workflowTasks, 1),
            fmt(i.perMinute.activities, 1),
            fmt(i.perMinute.historyEvents, 1),
          ],
        ],
      ),
    );
    write(
      `\nKubernetes requests by kind in the window: ${JSON.stringify(i.kube.byKey)}; registry requests: ${JSON.stringify(i.registry)}; history events added: VM workflows ${i.historyEventsAddedByKind.vm} (of ${i.historyEventsAtStartByKind.vm}), CocoonSet workflows ${i.historyEventsAddedByKind.cocoonSet} (of ${i.historyEventsAtStartByKind.cocoonSet}); CPU seconds in the window: Temporal ${fmt(i.cpuSeconds.stack.temporal, 2)}, bench process ${fmt(i.cpuSeconds.self, 2)}, apiserver ${fmt(i.cpuSeconds.stack['kube-apiserver'], 2)}, simulator ${fmt(i.cpuSeconds.stack.vksim, 2)}.`,
    );
    if (i.sets) {
      write(
        `\nThe CocoonSets took ${fmt(i.setsSteadyMs / 1000, 1)} s from the first create to all Running with every agent ready (unmeasured setup); sets not steady at the end of the window: ${i.setsUnsteadyAtEnd.length}.`,
      );
    }
    if (i.setBuild) {
      const t = i.setBuild;
      write(
        `\nCocoonSet workflow per set, from creation to steady (its whole history when the idle window opened; median over ${i.sets} sets): ${count(t.workflowTasks)} workflow tasks, ${count(t.activityTasks)} activity tasks, ${count(t.localActivities)} local activities, ${count(t.events)} history events, ${count(t.signals)} signals, ${count(t.actions)} actions (${count(t.heartbeatsEst)} heartbeats est.); ${temporalDetail(t)}.`,
      );
    }
  }
}

/** `512Mi`, `512Mi (not applied)` or `none` for the report. */
function limitLabel(l: ShippedRun['memoryLimit'] | undefined): string {
  if (!l?.quantity) return 'none';
  return l.applied ? l.quantity : `${l.quantity} (not applied)`;
}

/** Prints the shipped-operator tables: one row per run and phase, then the memory points of each run. */
export function printShipped(r: ShippedResult): void {
  const perT = (s: number) => fmt((s * 1000) / r.n, 1);
  const la = (xs: number[]) => xs.map((x) => x.toFixed(2)).join(' ');
  write(
    `\n### Operator as shipped (the image's command, \`node … dist/operator.js\`, a child process): N=${r.n} VMs hibernate then wake, L=${r.latencyMs} ms, C=${r.concurrency}; build ${r.build}\n`,
  );
  write(
    table(
      [
        'WORKFLOW_CACHE_SIZE (effective)',
        'memory limit (V8 heap limit)',
        'phase',
        'wall s',
        'transitions/s',
        'registry calls/transition',
        'CPU ms/transition: operator',
        'Temporal',
        'apiserver',
        'etcd',
        'operator peak RSS MiB',
        'RSS at end MiB',
        'VmHWM MiB',
        'workflow tasks (timed out) / events per transition',
        'loadavg start → end',
        'other load share',
      ],
      r.runs.flatMap((run) =>
        run.phases.map((p) => [
          `${run.cacheSetting} (${run.effectiveCacheSize ?? '?'})`,
          `${limitLabel(run.memoryLimit)} (${run.heapLimitMiB ?? '?'} MiB)`,
          p.phase,
          fmt(p.wallMs / 1000, 1),
          fmt(p.transitionsPerSecond, 1),
          fmt(p.registryCallsPerTransition, 2),
          fmt(p.operatorCpuMsPerTransition, 1),
          perT(p.cpuSeconds.stack.temporal),
          perT(p.cpuSeconds.stack['kube-apiserver']),
          perT(p.cpuSeconds.stack.etcd),
          fmt(p.peakRssMiB),
          fmt(p.end.rssMiB),
          fmt(p.end.hwmMiB),
          p.temporal
            ? `${fmt(p.temporal.workflowTasks, 2)} (${fmt(p.temporal.workflowTaskTimeouts, 2)}) / ${fmt(p.temporal.events, 1)}`
            : '—',
          `${la(p.loadavgStart)} → ${la(p.loadavgEnd)}`,
          `${fmt(100 * p.cpuSeconds.otherShare)} %`,
        ]),
      ),
    ),
  );
  const mem = (m: MemoryPoint) =>
    `RSS ${fmt(m.rssMiB)} MiB (heap used ${fmt(m.heapUsedMiB)} of ${fmt(m.heapTotalMiB)}, external ${fmt(m.externalMiB)})`;
  write(
    "\nCPU of the operator = the child process alone (user + system, all its threads); Temporal, apiserver and etcd as in the other scenarios (whatever else used the stack is in them). Peak RSS = the highest 200 ms sample in the phase; VmHWM = the peak over the process life. Memory limit = the memory cgroup the child ran in (the Deployment's container limit unless asked otherwise; Node sizes each V8 heap from it).",
  );
  for (const run of r.runs) {
    write(
      `\n- ${run.cacheSetting}: Node ${run.node}; image env ${JSON.stringify(run.shippedEnv)}${Object.keys(run.extraEnv ?? {}).length ? `, extra env ${JSON.stringify(run.extraEnv)}` : ''}; ready in ${fmt(run.readyMs / 1000, 1)} s with ${mem(run.ready)}; after the wake and ${fmt(run.settleMs / 1000)} s, ${r.n} VMs known: ${mem(run.settled)}, VmHWM ${fmt(run.settled.hwmMiB)} MiB; operator CPU over its life ${fmt(run.operatorCpuTotalS, 1)} s; log ${run.log}.`,
    );
    const lim = run.memoryLimit;
    if (lim?.usage)
      write(
        `  memory cgroup (${lim.quantity}): peak charge ${fmt(lim.usage.peakBytes / 2 ** 20)} MiB, at the limit ${fmt(lim.usage.limitHits)} times, OOM kills ${fmt(lim.usage.oomKills)}.`,
      );
    else if (lim?.unavailable) write(`  memory limit ${lim.quantity} NOT applied: ${lim.unavailable}.`);
    for (const p of run.phases) {
      if (p.nudged.length)
        write(
          `  ${p.phase}: ${p.nudged.length} VMs stopped progressing and were nudged with a resync signal.`,
        );
    }
  }
}

/** Prints the latency table. */
export function printLatency(r: LatencyResult): void {
  write(`\n### Latency: ${r.edits} desire edits, one at a time over ${r.vms} VMs (ms)\n`);
  write(
    table(
      ['measure', 'p50', 'p95', 'p99', 'max'],
      [
        [
          'edit → first pod patch',
          fmt(r.editToPatchMs.p50),
          fmt(r.editToPatchMs.p95),
          fmt(r.editToPatchMs.p99),
          fmt(r.editToPatchMs.max),
        ],
        [
          'edit → terminal phase',
          fmt(r.editToDoneMs.p50),
          fmt(r.editToDoneMs.p95),
          fmt(r.editToDoneMs.p99),
          fmt(r.editToDoneMs.max),
        ],
        ...(r.createToDoneMs
          ? [
              [
                `CR create → Hibernated, one at a time on a pre-played pod, ${r.createIdleMs ?? '?'} ms idle before each (${r.creates} CRs)`,
                fmt(r.createToDoneMs.p50),
                fmt(r.createToDoneMs.p95),
                fmt(r.createToDoneMs.p99),
                fmt(r.createToDoneMs.max),
              ],
            ]
          : []),
      ],
    ),
  );
  write(
    `\nStalled edits (no terminal phase within 10 s; nudged with a resync signal; excluded above): ${r.stalls.length}` +
      (r.stalls.length
        ? ` (recovered: ${r.stalls.filter((s) => s.recovered).length}; records in the JSON).`
        : '.'),
  );
  if (r.temporalPerTransition) {
    write(
      '\nTemporal per transition (medians over the low-load transitions; the VM workflow history sliced at each edit):\n',
    );
    const rows = r.temporalPerTransition;
    write(
      table(
        ['transition', 'samples', ...TEMPORAL_HEADER],
        rows.map((t) => [t.transition, String(t.samples), ...temporalCells(t.counts)]),
      ),
    );
    for (const t of rows) write(`\n${t.transition}: ${temporalDetail(t.counts)}.`);
  }
  const b = r.backToBack;
  if (b) {
    write(
      `\nBack-to-back edits (next edit as soon as the previous terminal phase is seen, ${b.vms} VMs in parallel): ${b.lost} of ${b.edits} edits lost (the VM workflow kept the old desire; recovered with a resync signal), ${b.slow} slow (>10 s) but not lost.`,
    );
  }
}

/** Prints the history table. */
export function printHistory(h: HistoryResult): void {
  write(
    `\n### History: one VM through ${h.cyclesDone} hibernate+wake cycles (of ${h.cyclesRequested} requested)\n`,
  );
  write(
    table(
      [
        'events/cycle (median, min–max)',
        'runs (continue-as-new)',
        'max run length (events)',
        'max run size (KiB)',
        'limits',
      ],
      [
        [
          `${fmt(h.eventsPerCycle)} (${fmt(h.eventsPerCycleMin)}–${fmt(h.eventsPerCycleMax)})`,
          `${h.runs} (${h.continuedAsNew})`,
          fmt(h.maxRunLength),
          fmt(h.maxRunSizeBytes / 1024),
          `${h.limits.events} events / ${fmt(h.limits.bytes / 2 ** 20)} MiB (warn ${h.warnThresholds.events} / ${fmt(h.warnThresholds.bytes / 2 ** 20)} MiB)`,
        ],
      ],
    ),
  );
  write(
    `\nStalled transitions (nudged with a resync signal after 10 s): ${h.stalls.length}; wall ${fmt(h.wallMs / 1000)} s.`,
  );
}

/**
 * Prints the crash-test table (trials, converged, lost, duplicate and missing completion Events, time
 * from the restarted operator's readiness to convergence), a row per scenario × kill point, and one line
 * per trial that is not clean.
 */
export function printCrash(r: CrashResult): void {
  write(`\n### Crash: the operator SIGKILLed at random points, seed ${r.seed}\n`);
  write(
    table(
      [
        'trials',
        'converged',
        'lost',
        'duplicate completion events',
        'missing completion events',
        'killed mid-transition',
        'ready → converged median / max (ms)',
        'kill → ready median (ms)',
      ],
      [
        [
          String(r.trials.length),
          String(r.converged),
          String(r.lost),
          String(r.duplicateEvents),
          String(r.missingEvents),
          String(r.killedMidTransition),
          `${fmt(r.convergeMedianMs)} / ${fmt(r.convergeMaxMs)}`,
          fmt(r.restartMedianMs),
        ],
      ],
    ),
  );
  const groups = new Map<string, CrashResult['trials']>();
  for (const t of r.trials) {
    const key = `${t.plan.scenario} | ${t.plan.point.kind}`;
    groups.set(key, [...(groups.get(key) ?? []), t]);
  }
  write('');
  write(
    table(
      ['scenario', 'kill point', 'trials', 'converged', 'mid-transition', 'ready → converged max (ms)'],
      [...groups.entries()]
        .sort(([a], [b]) => a.localeCompare(b))
        .map(([key, ts]) => {
          const conv = ts.filter((t) => t.converged).map((t) => t.convergeMs);
          return [
            ...key.split(' | '),
            String(ts.length),
            String(conv.length),
            String(ts.filter((t) => t.killedMidTransition).length),
            fmt(conv.length ? Math.max(...conv) : Number.NaN),
          ];
        }),
    ),
  );
  const bad = r.trials.filter((t) => !clean(t));
  if (bad.length) {
    write('\nTrials that are not clean:');
    for (const t of bad) write(`- #${t.index} ${describePlan(t.plan)}: ${describeTrial(t)}`);
  }
}
