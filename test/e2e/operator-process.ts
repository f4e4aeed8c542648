/**
 * Test helper: runs the real operator process (`tsx src/worker.ts`, or the build's `node dist/operator.js`)
 * as a child, collects its JSON log
 * lines and stderr, and reads the local stack's environment (`npm run -s stack -- env --json`).
 * Used by test/e2e/process.test.ts, leader.test.ts, hibernation.test.ts and cocoonset.test.ts.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { delimiter, join } from 'node:path';
import { imageNodeArgs } from '../support/dockerfile.js';
import { waitFor } from '../support/wait.js';

export const ROOT = join(import.meta.dirname, '..', '..');
const TSX = join(ROOT, 'node_modules', '.bin', 'tsx');

/** A minimal environment (no inherited operator settings) plus `extra`. */
export function cleanEnv(extra: Record<string, string | undefined> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { PATH: process.env.PATH, HOME: process.env.HOME, NODE_ENV: 'test' };
  for (const [k, v] of Object.entries(extra)) if (v !== undefined) env[k] = v;
  return env;
}

/** Brings the local stack up (idempotent) and returns its environment for the operator. */
export function stackEnv(): Record<string, string> {
  execFileSync('npm', ['run', '-s', 'stack', '--', 'up'], {
    cwd: ROOT,
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  const raw = JSON.parse(
    execFileSync('npm', ['run', '-s', 'stack', '--', 'env', '--json'], { cwd: ROOT, encoding: 'utf8' }),
  );
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(raw)) {
    if (k === 'PATH_PREPEND') env.PATH = [...(v as string[]), process.env.PATH ?? ''].join(delimiter);
    else env[k] = String(v);
  }
  return env;
}

/** One parsed JSON log line of the operator. */
export type LogLine = Record<string, unknown> & { msg?: string; level?: string; time?: number };

export interface OperatorProcess {
  child: ChildProcess;
  pid: number;
  logs: LogLine[];
  stdout: () => string;
  stderr: () => string;
  /** Resolves with the exit code (or the signal name) when the process ends. */
  exited: Promise<number | string>;
  /** Waits for a log line matching `pred`; rejects after `timeoutMs` or when the process exits first. */
  waitForLog(pred: (l: LogLine) => boolean, timeoutMs: number): Promise<LogLine>;
  probeUrl: string;
  metricsUrl: string;
}

/** The preload `npm start` and the image load (src/workflow-thread-preload.cjs). */
const PRELOAD = './src/workflow-thread-preload.cjs';

/**
 * The Node the image runs (its major, 24) from scripts/node.sh: `{ path, version }` of the binary. Throws
 * when scripts/node.sh cannot provide it.
 */
export function imageNode(): { path: string; version: string } {
  const bin = execFileSync('bash', [join(ROOT, 'scripts/node.sh')], { encoding: 'utf8' }).trim();
  const path = join(bin, 'node');
  return { path, version: execFileSync(path, ['--version'], { encoding: 'utf8' }).trim() };
}

/** How the operator is started (see startOperator). */
export type Launcher = 'tsx' | 'node' | 'dist';

/** How startOperator runs the process. */
export interface StartOptions {
  probePort?: number;
  metricsPort?: number;
  launcher?: Launcher;
  /**
   * A cgroup's `cgroup.procs`: the process joins that cgroup before it execs node (a shell writes its own
   * pid, then execs, so the pid stays the operator's), as a container starts inside its cgroup.
   */
  cgroupProcs?: string;
  /** The node binary for the `node` and `dist` launchers (default: the one running this process). */
  nodeBinary?: string;
}

/**
 * Starts `tsx src/worker.ts <args>` as `npm start` does (or the image's command, `node … dist/operator.js`, see
 * Launcher), with the workflow-thread preload, with exactly `env` (see cleanEnv).
 */
export function startOperator(
  env: NodeJS.ProcessEnv,
  args: string[] = [],
  opts: StartOptions = {},
): OperatorProcess {
  // 'tsx' is what `npm start` runs (the tsx CLI, which runs node as its child and relays signals);
  // 'node' loads tsx as a hook in one process, so the pid is the operator itself (for kill -9);
  // 'dist' is what the image runs, its CMD (dist/operator.js; needs `npm run build` first), one process too.
  const node = opts.nodeBinary ?? process.execPath;
  const [cmd, argv] =
    opts.launcher === 'tsx'
      ? [TSX, ['--require', PRELOAD, 'src/worker.ts', ...args]]
      : opts.launcher === 'dist'
        ? [node, [...imageNodeArgs(), ...args]]
        : [node, ['--require', PRELOAD, '--import', 'tsx', 'src/worker.ts', ...args]];
  const child = opts.cgroupProcs
    ? spawn('/bin/sh', ['-c', 'echo $$ > "$0" && exec "$@"', opts.cgroupProcs, cmd, ...argv], {
        cwd: ROOT,
        env,
        stdio: ['ignore', 'pipe', 'pipe'],
      })
    : spawn(cmd, argv, { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  const logs: LogLine[] = [];
  const waiters = new Set<() => void>();
  let partial = '';
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
    out += chunk;
    partial += chunk;
    const lines = partial.split('\n');
    partial = lines.pop() ?? '';
    for (const line of lines) {
      try {
        logs.push(JSON.parse(line));
      } catch {
        // not a JSON line
      }
    }
    for (const w of waiters) w();
  });
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => {
    err += chunk;
  });
  const exited = new Promise<number | string>((resolve) => {
    child.on('exit', (code, signal) => {
      for (const w of waiters) w();
      resolve(code ?? signal ?? -1);
    });
  });
  const waitForLog = (pred: (l: LogLine) => boolean, timeoutMs: number) =>
    new Promise<LogLine>((resolve, reject) => {
      const check = () => {
        const hit = logs.find(pred);
        if (hit) {
          done();
          resolve(hit);
        } else if (child.exitCode !== null || child.signalCode !== null) {
          done();
          reject(
            new Error(
              `operator exited (${child.exitCode ?? child.signalCode}) before the log line; stderr: ${err}`,
            ),
          );
        }
      };
      const timer = setTimeout(() => {
        done();
        reject(
          new Error(
            `no matching log line within ${timeoutMs} ms; last lines: ${out.split('\n').slice(-5).join('\n')}`,
          ),
        );
      }, timeoutMs);
      const done = () => {
        clearTimeout(timer);
        waiters.delete(check);
      };
      waiters.add(check);
      check();
    });
  return {
    child,
    pid: child.pid!,
    logs,
    stdout: () => out,
    stderr: () => err,
    exited,
    waitForLog,
    probeUrl: `http://127.0.0.1:${opts.probePort ?? 8081}`,
    metricsUrl: `http://127.0.0.1:${opts.metricsPort ?? 8080}/metrics`,
  };
}

/** Polls `url` until it answers 200 (returns the body) or `timeoutMs` passes (throws with the last answer). */
export async function waitFor200(url: string, timeoutMs: number): Promise<string> {
  let last = '';
  return waitFor(
    `${url} to answer 200`,
    async () => {
      try {
        const res = await fetch(url, { signal: AbortSignal.timeout(3000) });
        const body = await res.text();
        if (res.status === 200) return body;
        last = `${res.status} ${body}`;
      } catch (e) {
        last = (e as Error).message;
      }
      return undefined;
    },
    timeoutMs,
    { intervalMs: 250, describe: () => last },
  );
}

/**
 * Sum of the samples of metric `name` in Prometheus text `text` whose labels include every pair of
 * `labels` (0 when none match). Label values are compared after unescaping `\"` and `\\`.
 */
export function metricSum(text: string, name: string, labels: Record<string, string> = {}): number {
  let sum = 0;
  for (const line of text.split('\n')) {
    if (!line.startsWith(name) || line.startsWith('#')) continue;
    const m = /^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/.exec(line);
    if (!m || m[1] !== name) continue;
    const got: Record<string, string> = {};
    for (const l of (m[2] ?? '').matchAll(/([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) {
      got[l[1]!] = l[2]!.replace(/\\(["\\])/g, '$1');
    }
    if (Object.entries(labels).every(([k, v]) => got[k] === v)) sum += Number(m[3]);
  }
  return sum;
}

/** GET `url` (an operator's `/metrics`) and return the text; throws on a non-200 answer. */
export async function scrapeMetrics(url: string): Promise<string> {
  const res = await fetch(url, { signal: AbortSignal.timeout(10_000) });
  const body = await res.text();
  if (res.status !== 200) throw new Error(`GET ${url}: ${res.status} ${body.slice(0, 200)}`);
  return body;
}

/**
 * Starts the operator (see startOperator) and waits until its `/readyz` answers 200 within `timeoutMs`.
 * Otherwise kills it (SIGKILL, so no process is left behind) and throws an error carrying its stderr and
 * the tail of its log.
 */
export async function startReadyOperator(
  env: NodeJS.ProcessEnv,
  opts: StartOptions & { probePort: number; metricsPort: number },
  timeoutMs = 120_000,
): Promise<OperatorProcess> {
  const p = startOperator(env, [], opts);
  try {
    await waitFor200(`${p.probeUrl}/readyz`, timeoutMs);
  } catch (err) {
    await stopOperator(p, 'SIGKILL');
    throw new Error(
      `${(err as Error).message}\nstderr: ${p.stderr()}\nstdout tail: ${p.stdout().slice(-2000)}`,
    );
  }
  return p;
}

/** Sends `signal` to the operator and waits for it to exit; nothing when it has already exited. */
export async function stopOperator(p: OperatorProcess | undefined, signal: NodeJS.Signals = 'SIGTERM') {
  if (!p || p.child.exitCode !== null || p.child.signalCode !== null) return;
  p.child.kill(signal);
  await p.exited;
}

/**
 * Runs the stack's kubectl with `kubeconfig` and `args`; returns its stdout. Set-up only: a few attempts a
 * second apart (conflicts with concurrent appliers); throws with kubectl's stderr after the last.
 */
export function kubectl(kubeconfig: string, args: string[]): string {
  const dir = execFileSync('bash', [join(ROOT, 'scripts/tools.sh'), 'path', 'kube'], {
    cwd: ROOT,
    encoding: 'utf8',
  }).trim();
  let lastErr: unknown;
  for (let attempt = 0; attempt < 4; attempt++) {
    try {
      return execFileSync(join(dir, 'bin/kubectl'), ['--kubeconfig', kubeconfig, ...args], {
        cwd: ROOT,
        encoding: 'utf8',
        stdio: ['ignore', 'pipe', 'pipe'],
      });
    } catch (err) {
      lastErr = err;
      execFileSync('sleep', ['1']);
    }
  }
  throw new Error(`kubectl ${args.join(' ')} failed: ${(lastErr as { stderr?: string }).stderr ?? lastErr}`);
}
