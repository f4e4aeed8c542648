/**
 * Detached processes with pid files and logs in the stack dir, plus the small waiting and probing helpers
 * the components share.
 */
import { execFile, spawn } from 'node:child_process';
import {
  closeSync,
  existsSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { request } from 'node:https';
import { connect } from 'node:net';
import { join } from 'node:path';
import { stackPaths } from './paths.js';

/** What a pid file records: the group leader's pid and the binary, to tell it from a recycled pid. */
interface PidRecord {
  pid: number;
  cmd: string;
  startedAt: string;
}

export function logFile(name: string): string {
  return join(stackPaths().logs, `${name}.log`);
}

function pidFile(name: string): string {
  return join(stackPaths().run, `${name}.pid`);
}

/** Writes a progress line to stderr (stdout is kept for `env` and `sa-kubeconfig` output). */
export function say(msg: string): void {
  process.stderr.write(`[stack] ${msg}\n`);
}

/**
 * Starts `cmd args` detached in its own process group (so `down` can signal all its children), stdout and
 * stderr appended to `<stack>/logs/<name>.log`, pid recorded in `<stack>/run/<name>.pid`. Returns the pid.
 * Throws when the binary cannot be spawned.
 */
export function spawnDetached(
  name: string,
  cmd: string,
  args: string[],
  opts: { env?: Record<string, string>; cwd?: string } = {},
): number {
  const p = stackPaths();
  mkdirSync(p.logs, { recursive: true });
  mkdirSync(p.run, { recursive: true });
  const fd = openSync(logFile(name), 'a');
  writeFileSync(fd, `\n=== ${new Date().toISOString()} ${cmd} ${args.join(' ')}\n`);
  try {
    const child = spawn(cmd, args, {
      detached: true,
      stdio: ['ignore', fd, fd],
      cwd: opts.cwd,
      env: { ...process.env, ...opts.env },
    });
    child.on('error', (err) => say(`${name}: ${err.message}`));
    if (child.pid === undefined) throw new Error(`${name}: could not spawn ${cmd}`);
    child.unref();
    const rec: PidRecord = { pid: child.pid, cmd, startedAt: new Date().toISOString() };
    writeFileSync(pidFile(name), `${JSON.stringify(rec)}\n`);
    return child.pid;
  } finally {
    closeSync(fd);
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  try {
    // A zombie (exited, not yet reaped by its parent) counts as gone.
    return !/^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return false;
  }
}

/** How to recognise a component's processes of this stack dir in /proc, without a pid file. */
export interface ProcessSignature {
  /** A string its command line contains (a path inside the stack dir, or the entry file). */
  cmdline: string;
  /** A `KEY=value` its environment contains, when the command line alone is not specific enough. */
  env?: string;
}

function readProc(pid: number, file: 'cmdline' | 'environ'): string {
  try {
    return readFileSync(`/proc/${pid}/${file}`, 'utf8').split('\0').join(' ');
  } catch {
    return '';
  }
}

/**
 * The pid of the component's recorded process when that process is still running (and still runs the
 * recorded binary), else undefined (a stale pid file is removed).
 */
function recordedPid(name: string): number | undefined {
  const f = pidFile(name);
  if (!existsSync(f)) return undefined;
  let rec: PidRecord;
  try {
    rec = JSON.parse(readFileSync(f, 'utf8')) as PidRecord;
  } catch {
    rmSync(f, { force: true });
    return undefined;
  }
  if (alive(rec.pid) && readProc(rec.pid, 'cmdline').includes(rec.cmd)) return rec.pid;
  rmSync(f, { force: true });
  return undefined;
}

/** Live processes matching `sig` (another `up` may have started them, or lost their pid file). */
function scanPids(sig: ProcessSignature): number[] {
  const found: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const pid = Number(entry);
    if (pid === process.pid || !readProc(pid, 'cmdline').includes(sig.cmdline)) continue;
    if (sig.env && !readProc(pid, 'environ').includes(sig.env)) continue;
    if (alive(pid)) found.push(pid);
  }
  return found;
}

/** Every running process of the component: the recorded one first, then any others found in /proc. */
export function componentPids(name: string, sig: ProcessSignature): number[] {
  const rec = recordedPid(name);
  const others = scanPids(sig).filter((p) => p !== rec);
  return rec === undefined ? others : [rec, ...others];
}

function killGroup(pid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(-pid, sig);
  } catch {
    try {
      process.kill(pid, sig);
    } catch {
      // already gone
    }
  }
}

/**
 * Stops all of a component's processes (and their process groups): SIGTERM, then SIGKILL after `graceMs`.
 * Idempotent: returns the pids that were running (none when nothing was).
 */
export async function stopProcess(name: string, sig: ProcessSignature, graceMs = 15_000): Promise<number[]> {
  const pids = componentPids(name, sig);
  for (const pid of pids) killGroup(pid, 'SIGTERM');
  const deadline = Date.now() + graceMs;
  while (pids.some(alive) && Date.now() < deadline) await sleep(100);
  // Also reaches children the leaders left behind.
  for (const pid of pids) killGroup(pid, 'SIGKILL');
  while (pids.some(alive)) await sleep(50);
  rmSync(pidFile(name), { force: true });
  return pids;
}

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** Last `lines` lines of a component's log, for error messages. */
export function logTail(name: string, lines = 25): string {
  try {
    return readFileSync(logFile(name), 'utf8').trimEnd().split('\n').slice(-lines).join('\n');
  } catch {
    return '(no log)';
  }
}

/**
 * Polls `check` every `intervalMs` until it returns true. Throws after `timeoutMs`, or early when `pid` is
 * given and that process has exited (with the component's log tail in the message).
 */
export async function waitUntil(
  name: string,
  check: () => Promise<boolean>,
  opts: { timeoutMs: number; pid?: number; intervalMs?: number },
): Promise<void> {
  const deadline = Date.now() + opts.timeoutMs;
  for (;;) {
    if (await check().catch(() => false)) return;
    if (opts.pid !== undefined && !alive(opts.pid)) {
      throw new Error(`${name} exited before it was ready; log ${logFile(name)}:\n${logTail(name)}`);
    }
    if (Date.now() > deadline) {
      throw new Error(
        `${name} not ready after ${opts.timeoutMs / 1000}s; log ${logFile(name)}:\n${logTail(name)}`,
      );
    }
    await sleep(opts.intervalMs ?? 250);
  }
}

/** Runs a command to completion; resolves with stdout, rejects with stderr in the message. */
export function run(
  cmd: string,
  args: string[],
  opts: { env?: Record<string, string>; timeoutMs?: number; input?: string } = {},
): Promise<string> {
  return new Promise((resolvePromise, reject) => {
    const child = execFile(
      cmd,
      args,
      { env: { ...process.env, ...opts.env }, timeout: opts.timeoutMs ?? 60_000, maxBuffer: 16 << 20 },
      (err, stdout, stderr) => {
        if (err) reject(new Error(`${cmd} ${args.join(' ')} failed: ${err.message}\n${stderr}`));
        else resolvePromise(stdout);
      },
    );
    if (opts.input !== undefined) child.stdin?.end(opts.input);
  });
}

/** GET over plain HTTP with a short timeout; resolves with status and body, rejects on transport errors. */
export async function httpGet(url: string, timeoutMs = 2000): Promise<{ status: number; body: string }> {
  const res = await fetch(url, { signal: AbortSignal.timeout(timeoutMs) });
  return { status: res.status, body: await res.text() };
}

/** GET over HTTPS with client-certificate material (PEM strings); resolves with status and body. */
export function httpsGet(
  url: string,
  tls: { ca: string; cert: string; key: string },
  timeoutMs = 2000,
): Promise<{ status: number; body: string }> {
  return new Promise((resolvePromise, reject) => {
    const req = request(url, { method: 'GET', ...tls, timeout: timeoutMs }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => {
        body += c;
      });
      res.on('end', () => resolvePromise({ status: res.statusCode ?? 0, body }));
    });
    req.on('timeout', () => req.destroy(new Error(`timeout after ${timeoutMs}ms`)));
    req.on('error', reject);
    req.end();
  });
}

/** True when something accepts TCP connections on host:port. */
export function portOpen(host: string, port: number, timeoutMs = 1000): Promise<boolean> {
  return new Promise((resolvePromise) => {
    const sock = connect({ host, port });
    const done = (ok: boolean) => {
      sock.destroy();
      resolvePromise(ok);
    };
    sock.setTimeout(timeoutMs, () => done(false));
    sock.once('connect', () => done(true));
    sock.once('error', () => done(false));
  });
}
