/**
 * Process resource figures for the benchmarks: CPU seconds of the local stack's server processes (read
 * from /proc, Linux only), the peak resident set size of this process (the in-process workers), and CPU
 * and resident memory of another process by pid (the shipped operator run as a child).
 */
import { readdirSync, readFileSync } from 'node:fs';
import { componentByName } from '../../scripts/stack/components.js';
import { componentPids } from '../../scripts/stack/proc.js';

/** Kernel clock ticks per second (`getconf CLK_TCK`; 100 on every Linux this runs on). */
const CLOCK_TICKS_PER_S = 100;

/** Stack components whose CPU the benchmarks report. */
export const STACK_COMPONENTS = ['temporal', 'kube-apiserver', 'etcd', 'registry', 'vksim'] as const;
/** Name of a stack component whose CPU is read. */
export type StackComponent = (typeof STACK_COMPONENTS)[number];

/** User + system CPU seconds of one pid (its exited, waited-for children included), or NaN. */
export function pidCpuSeconds(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields after the parenthesised command name; utime, stime, cutime, cstime are fields 14–17.
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const ticks = Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14]);
    return ticks / CLOCK_TICKS_PER_S;
  } catch {
    return Number.NaN;
  }
}

/** Parent pid of every live process. */
function parentMap(): Map<number, number[]> {
  const children = new Map<number, number[]>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      children.set(ppid, [...(children.get(ppid) ?? []), Number(entry)]);
    } catch {
      // exited meanwhile
    }
  }
  return children;
}

/** `roots` and all their descendants (the simulator runs under a tsx parent). */
function treePids(roots: number[], children: Map<number, number[]>): number[] {
  const out: number[] = [];
  const queue = [...roots];
  while (queue.length) {
    const pid = queue.shift()!;
    if (out.includes(pid)) continue;
    out.push(pid);
    queue.push(...(children.get(pid) ?? []));
  }
  return out;
}

/** CPU seconds used so far by each stack component (process tree); NaN where it cannot be read. */
export function stackCpuSeconds(): Record<StackComponent, number> {
  const out = {} as Record<StackComponent, number>;
  const children = parentMap();
  for (const name of STACK_COMPONENTS) {
    let pids: number[] = [];
    try {
      pids = componentPids(name, componentByName(name).signature());
    } catch {
      pids = [];
    }
    const all = treePids(pids, children);
    out[name] = all.length ? all.reduce((s, p) => s + pidCpuSeconds(p), 0) : Number.NaN;
  }
  return out;
}

/** CPU seconds of this process (user + system). */
export function selfCpuSeconds(): number {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1e6;
}

/** `after − before` per component. */
export function cpuDelta(
  after: Record<StackComponent, number>,
  before: Record<StackComponent, number>,
): Record<StackComponent, number> {
  const out = {} as Record<StackComponent, number>;
  for (const k of STACK_COMPONENTS) out[k] = after[k] - before[k];
  return out;
}

/**
 * Samples this process's RSS every `intervalMs` until stopped; `stop()` returns the peak in bytes. The
 * peak covers the sampling window only (process maxRSS would include everything before it).
 */
export function sampleRss(intervalMs = 200): { stop(): number } {
  let peak = process.memoryUsage.rss();
  const t = setInterval(() => {
    peak = Math.max(peak, process.memoryUsage.rss());
  }, intervalMs);
  t.unref();
  return {
    stop() {
      clearInterval(t);
      return Math.max(peak, process.memoryUsage.rss());
    },
  };
}

/** Resident memory of one process from /proc/<pid>/status, in bytes (NaN when it cannot be read). */
export interface PidMemory {
  /** VmRSS: resident now. */
  rss: number;
  /** VmHWM: the peak resident size over the process's life. */
  hwm: number;
}

/** See {@link PidMemory}. */
export function pidMemory(pid: number): PidMemory {
  let status = '';
  try {
    status = readFileSync(`/proc/${pid}/status`, 'utf8');
  } catch {
    // exited
  }
  const kib = (key: string) => {
    const m = new RegExp(`^${key}:\\s+(\\d+) kB`, 'm').exec(status);
    return m ? Number(m[1]) * 1024 : Number.NaN;
  };
  return { rss: kib('VmRSS'), hwm: kib('VmHWM') };
}

/**
 * Samples another process's VmRSS every `intervalMs` until stopped. `peak()` is the highest sample since
 * the last `resetPeak()` (or the start), `last()` the latest reading.
 */
export function samplePidRss(
  pid: number,
  intervalMs = 200,
): { peak(): number; last(): number; resetPeak(): void; stop(): void } {
  let last = pidMemory(pid).rss;
  let peak = last;
  const read = () => {
    const r = pidMemory(pid).rss;
    if (!Number.isNaN(r)) {
      last = r;
      peak = Number.isNaN(peak) ? r : Math.max(peak, r);
    }
  };
  const t = setInterval(read, intervalMs);
  t.unref();
  return {
    peak() {
      read();
      return peak;
    },
    last() {
      read();
      return last;
    },
    resetPeak() {
      read();
      peak = last;
    },
    stop() {
      clearInterval(t);
    },
  };
}

/** Busy and total CPU seconds of the whole machine so far (all cores, from /proc/stat). */
export function machineCpuSeconds(): { busy: number; total: number } {
  const line = readFileSync('/proc/stat', 'utf8').split('\n')[0] ?? '';
  const f = line.trim().split(/\s+/).slice(1).map(Number);
  // user nice system idle iowait irq softirq steal (guest time is already inside user/nice)
  const total = f.slice(0, 8).reduce((a, b) => a + b, 0);
  const idle = (f[3] ?? 0) + (f[4] ?? 0);
  return { busy: (total - idle) / CLOCK_TICKS_PER_S, total: total / CLOCK_TICKS_PER_S };
}

/** CPU seconds used in a window, by this process, by each stack component, and by the whole machine. */
export interface CpuWindow {
  seconds: number;
  self: number;
  stack: Record<StackComponent, number>;
  /** CPU seconds of the extra processes the window was started with (`pids`), summed; 0 without any. */
  pids: number;
  machineBusy: number;
  machineTotal: number;
  /** Share of the machine's busy CPU used by none of the above (other load on the machine). */
  otherShare: number;
}

/**
 * Starts a CPU accounting window; `stop()` returns what was used since. `pids` are further processes of
 * the benchmark (e.g. the operator as a child process), counted in `pids` and not as other load.
 */
export function startCpuWindow(opts: { pids?: readonly number[] } = {}): { stop(): CpuWindow } {
  const pidsCpu = () => (opts.pids ?? []).reduce((a, p) => a + pidCpuSeconds(p), 0);
  const t0 = Date.now();
  const pids0 = pidsCpu();
  const self0 = selfCpuSeconds();
  const stack0 = stackCpuSeconds();
  const m0 = machineCpuSeconds();
  return {
    stop() {
      const stack = cpuDelta(stackCpuSeconds(), stack0);
      const m1 = machineCpuSeconds();
      const self = selfCpuSeconds() - self0;
      const pids = pidsCpu() - pids0;
      const machineBusy = m1.busy - m0.busy;
      const ours =
        self +
        (Number.isNaN(pids) ? 0 : pids) +
        Object.values(stack).reduce((a, b) => a + (Number.isNaN(b) ? 0 : b), 0);
      return {
        seconds: (Date.now() - t0) / 1000,
        self,
        stack,
        pids,
        machineBusy,
        machineTotal: m1.total - m0.total,
        otherShare: machineBusy > 0 ? Math.max(0, machineBusy - ours) / machineBusy : Number.NaN,
      };
    },
  };
}
